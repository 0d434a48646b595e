//! Projection pushdown: which columns of each source port anything reads.
//!
//! A Nexmark bid has seven fields; q5 reads two of them. Without this pass the JSON decoder
//! would build all seven columns of every bid, strings included, for operators that never look
//! at five. So, once every node is planned, demand flows backwards from the sinks (which read
//! every column they are given) through each operator's [`Reads`]: the columns it reads
//! whatever happens (conditions, keys, times, aggregate arguments) and, for each output column
//! a consumer reads, the input columns that output is made of. A `key-by` passes columns
//! through and reads its key expressions; a `union` passes columns through from every input.
//! A kind that does not say what it reads is taken to read everything. What reaches a source
//! port, with its event-time column, is offered to the source ([`SourceFactory::project`]),
//! which may then leave the other columns null; nothing downstream reads them.
//!
//! This is what Flink's planner does for a source that supports projection pushdown (its
//! filesystem source with the JSON format among them), computed here over the job's nodes
//! rather than over a relational plan.
//!
//! [`SourceFactory::project`]: crate::api::SourceFactory::project

use super::build::Def;
use super::nodes::{Compiled, Reads};

/// Per node of the job file, per output port, which columns its consumers read.
type Demand = Vec<Vec<Vec<bool>>>;

/// For each source node (by index in `defs`): the columns read per port, when some column of
/// a consumed port is read by nothing. `order` is the topological order of `defs`.
pub(super) fn source_reads(
    defs: &[Def<'_>],
    compiled: &[Compiled],
    order: &[usize],
) -> Vec<Option<Vec<Vec<bool>>>> {
    let mut demand: Demand = compiled
        .iter()
        .map(|c| {
            let ports = match c {
                Compiled::Source { ports, .. } => ports.len(),
                _ => 1,
            };
            (0..ports)
                .map(|p| vec![false; c.schema(p).map_or(0, |s| s.fields().len())])
                .collect()
        })
        .collect();
    for &i in order.iter().rev() {
        let wanted = std::mem::take(&mut demand[i]);
        let inputs = &defs[i].inputs;
        match &compiled[i] {
            Compiled::Source { .. } => {
                demand[i] = wanted;
                continue;
            }
            Compiled::KeyBy { keys, .. } => {
                for (_, j, p) in inputs {
                    let columns = keys.exprs().iter().flat_map(|e| e.columns());
                    mark(&mut demand, *j, *p, through(&wanted).chain(columns));
                }
            }
            Compiled::Union { .. } => {
                for (_, j, p) in inputs {
                    mark(&mut demand, *j, *p, through(&wanted));
                }
            }
            Compiled::Operator(planned) => match &planned.reads {
                Some(reads) => {
                    for (k, (_, j, p)) in inputs.iter().enumerate() {
                        mark(&mut demand, *j, *p, read_of(reads, k, &wanted));
                    }
                }
                None => read_all(&mut demand, inputs),
            },
            Compiled::Sink { .. } | Compiled::Failed => read_all(&mut demand, inputs),
        }
        demand[i] = wanted;
    }
    defs.iter()
        .enumerate()
        .map(|(i, _)| {
            let Compiled::Source { event_time, .. } = &compiled[i] else {
                return None;
            };
            let mut ports = std::mem::take(&mut demand[i]);
            for (port, read) in ports.iter_mut().enumerate() {
                let consumed = defs
                    .iter()
                    .any(|d| d.inputs.iter().any(|(_, j, p)| *j == i && *p == port));
                if !consumed {
                    continue;
                }
                // The source reads its own event-time column for watermarks.
                if let Some(c) = event_time.columns.get(port).copied().flatten()
                    && let Some(r) = read.get_mut(c)
                {
                    *r = true;
                }
            }
            // A port nothing consumes is skipped whole; only a consumed port with a column
            // nothing reads is worth projecting.
            let narrower = ports
                .iter()
                .any(|read| read.contains(&true) && read.contains(&false));
            narrower.then_some(ports)
        })
        .collect()
}

/// The output columns consumers read, by index.
fn through(wanted: &[Vec<bool>]) -> impl Iterator<Item = usize> + '_ {
    wanted
        .first()
        .into_iter()
        .flat_map(|read| read.iter().enumerate().filter(|(_, r)| **r).map(|(c, _)| c))
}

/// The columns of input `k` an operator reads, given what its consumers read of its output.
fn read_of<'r>(
    reads: &'r Reads,
    k: usize,
    wanted: &'r [Vec<bool>],
) -> impl Iterator<Item = usize> + 'r {
    let always = reads.always.get(k).into_iter().flatten().copied();
    let made_of = through(wanted)
        .flat_map(move |c| reads.outputs.get(c).into_iter().flatten())
        .filter(move |(input, _)| *input == k)
        .map(|(_, column)| *column);
    always.chain(made_of)
}

fn mark(demand: &mut Demand, def: usize, port: usize, columns: impl Iterator<Item = usize>) {
    let Some(read) = demand.get_mut(def).and_then(|d| d.get_mut(port)) else {
        return;
    };
    for c in columns {
        if let Some(r) = read.get_mut(c) {
            *r = true;
        }
    }
}

fn read_all(demand: &mut Demand, inputs: &[(String, usize, usize)]) {
    for (_, j, p) in inputs {
        if let Some(read) = demand.get_mut(*j).and_then(|d| d.get_mut(*p)) {
            read.fill(true);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::plan::{Plan, check_file, check_str};

    /// The names of the columns read of each port of source `source`, or `None` when the
    /// plan builds them all.
    fn read(plan: &Plan, source: &str) -> Option<Vec<Vec<String>>> {
        let node = plan.nodes.iter().find(|n| n.name == source)?;
        let read = node.read.as_ref()?;
        Some(
            node.ports
                .iter()
                .zip(read)
                .map(|((_, schema), read)| {
                    schema
                        .fields()
                        .iter()
                        .zip(read)
                        .filter(|(_, r)| **r)
                        .map(|(f, _)| f.name().clone())
                        .collect()
                })
                .collect(),
        )
    }

    fn nexmark(query: &str, overrides: &[&str]) -> Plan {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../jobs/nexmark")
            .join(format!("{query}-jsonl.yaml"));
        let overrides: Vec<_> = overrides
            .iter()
            .map(|o| o.parse().expect("override"))
            .collect();
        check_file(&path, &overrides).expect("the job plans")
    }

    /// The columns each query's text reads, worked out by hand from the job files.
    #[test]
    fn nexmark_sources_build_only_what_the_queries_read() {
        let names = |ports: &[&[&str]]| -> Option<Vec<Vec<String>>> {
            Some(
                ports
                    .iter()
                    .map(|p| p.iter().map(|s| s.to_string()).collect())
                    .collect(),
            )
        };
        // Person, auction, bid; a port nothing consumes reads nothing.
        let t: &[&str] = &[];
        assert_eq!(
            read(&nexmark("q5", &[]), "nexmark"),
            names(&[t, t, &["auction", "dateTime"]])
        );
        // q1 declares only bids: channel and url are not read.
        assert_eq!(
            read(&nexmark("q1", &[]), "nexmark"),
            names(&[&["auction", "bidder", "price", "dateTime", "extra"]])
        );
        // A join reads its keys, condition, kept columns and `*-until` times.
        assert_eq!(
            read(&nexmark("q4", &[]), "nexmark"),
            names(&[
                t,
                &["id", "dateTime", "expires", "category"],
                &["auction", "price", "dateTime"],
            ])
        );
        // q0 passes Nexmark's five bid columns to its sink; the file has seven.
        assert_eq!(
            read(&nexmark("q0", &[]), "nexmark"),
            names(&[&["auction", "bidder", "price", "dateTime", "extra"]])
        );
        // And the setting turns it off.
        assert_eq!(
            read(&nexmark("q5", &["projection-pushdown=false"]), "nexmark"),
            None
        );
    }

    #[test]
    fn demand_flows_through_filters_maps_key_bys_unions_and_top_n() {
        let job = r#"
name: projection
sources:
  a:
    kind: jsonl
    path: in.jsonl
    schema: {k: int, v: int, s: string, u: string, t: timestamp, w: string}
    event-time: {column: t}
  b:
    kind: jsonl
    path: in.jsonl
    schema: {k: int, v: int, s: string, u: string, t: timestamp, w: string}
  c:
    kind: jsonl
    path: in.jsonl
    schema: {k: int, v: int, s: string, u: string, t: timestamp, w: string}
transforms:
  both:
    kind: union
    from: [a, b]
  kept:
    kind: filter
    from: both
    where: v > 0
  keyed:
    kind: key-by
    from: kept
    keys: [k]
  best:
    kind: top-n
    from: keyed
    order-by: [v DESC]
    fire-at: t
    columns: [k, s, u]
  shown:
    kind: map
    from: best
    columns:
      name: upper(s)
sinks:
  out:
    kind: blackhole
    from: shown
  everything:
    kind: blackhole
    from: c
"#;
        let plan = check_str("projection.yaml", job, &[]).expect("the job plans");
        // k (key), v (condition, order), t (fire-at, event time) and s (read by the map
        // through the top-n); u is passed through the top-n but read by nothing after it.
        let kvst = vec![vec!["k", "v", "s", "t"]];
        let as_strings = |v: Vec<Vec<&str>>| {
            Some(
                v.into_iter()
                    .map(|p| p.into_iter().map(String::from).collect())
                    .collect(),
            )
        };
        assert_eq!(read(&plan, "a"), as_strings(kvst.clone()));
        assert_eq!(read(&plan, "b"), as_strings(kvst));
        // A sink reads every column.
        assert_eq!(read(&plan, "c"), None);

        // A view of the source's rows leaves the unread columns out.
        let a = plan.nodes.iter().find(|n| n.name == "a").expect("node a");
        let schema = a.ports[0].1.clone();
        let columns = schema
            .fields()
            .iter()
            .map(|f| arrow_array::new_null_array(f.data_type(), 2))
            .collect();
        let batch = arrow_array::RecordBatch::try_new(schema, columns).expect("batch");
        let shown = a.without_unread(batch.clone());
        let names: Vec<&str> = shown
            .schema_ref()
            .fields()
            .iter()
            .map(|f| f.name().as_str())
            .collect();
        assert_eq!(names, ["k", "v", "s", "t"]);
        let c = plan.nodes.iter().find(|n| n.name == "c").expect("node c");
        assert_eq!(c.without_unread(batch).num_columns(), 6);
    }
}
