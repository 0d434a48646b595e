//! `kind: sql`: a query in Flink SQL's streaming subset, planned into weir's own operators.
//!
//! A `sql` node is replaced, before the job is planned, by the nodes a person would have
//! written for its query: `filter`, `map`, `key-by`, `aggregate`, `window-aggregate`, `top-n`,
//! `over-aggregate`, `join`, `window-join` and `union`, named `<node>/<kind>` (the last one takes
//! the node's own name, so sinks and other nodes read it as written). Every node is planned by
//! the ordinary planner as soon as it is made, which gives the next clause its real columns and
//! types and reports a type error at the clause of the query that made the node.
//!
//! What a query may do, and what each construct becomes:
//!
//! | SQL | nodes |
//! |---|---|
//! | `SELECT exprs FROM t WHERE p` | `filter`, `map` (left out when it would copy every column) |
//! | `GROUP BY k` with aggregates, `HAVING` | `key-by`, `aggregate` (an updating stream, keyed by `k`), `filter` |
//! | `SELECT DISTINCT a, b` | `key-by`, `aggregate` with no aggregate (an updating stream) |
//! | WHERE, SELECT, GROUP BY over a running GROUP BY | `filter`, `map`, `aggregate` taking its updates back |
//! | `FROM TABLE(TUMBLE/HOP/SESSION(TABLE t, DESCRIPTOR(time), ...)) GROUP BY window_start, window_end, k` | `key-by`, `window-aggregate` |
//! | `ROW_NUMBER()`/`RANK() OVER (PARTITION BY window_start, window_end ... ORDER BY ...)` filtered `rn <= N` outside | `key-by`, `top-n` fired at the window's end (with `rank-column` when the query reads `rn`, as `SELECT *` does) |
//! | the same over a time-bounded join, partitioned by the bounded side's key | `top-n` fired at that side's bound |
//! | the same partitioned by anything else (Nexmark q18, q19), over any stream | `key-by`, a running `top-n` (no `fire-at`: an updating stream; with the rank read, keyed by the partition and the rank; `ROW_NUMBER() ... ORDER BY` the time attribute `DESC` `<= 1` with the rank not read, Flink's deduplication: `tie-break: latest`) |
//! | `a JOIN b ON a.k = b.k [AND b.t BETWEEN a.t AND a.x]` | `filter`s, `key-by`s, `join` (with `left-until`/`right-until` from the bounds) |
//! | `a LEFT/RIGHT/FULL JOIN b ON ...`, or a regular join of an updating input | `filter`s, `key-by`s, `join` with `mode` (an updating stream of `+I`/`-D`) |
//! | two window TVFs joined on `window_start` and `window_end` | `window-join` |
//! | `x IN (SELECT y FROM TABLE(TUMBLE(...)) WHERE window_start = ... AND window_end = ...)` | semi `window-join` |
//! | `agg(x) OVER (PARTITION BY k ORDER BY time ROWS BETWEEN n PRECEDING AND CURRENT ROW)` | `key-by`, `over-aggregate` |
//! | `UNION ALL` | `union` |
//!
//! Anything else is refused with what and where: ORDER BY and LIMIT on a stream, time-bounded
//! and window joins, windows and OVER over an updating stream, a WHERE over an outer join's
//! padded side, cross joins. A regular join (no time bound) keeps both sides in
//! state for good, as Flink's does (`state.ttl` bounds it); `weir explain` says so.
//!
//! # Layout
//! - `text`: parsing (Flink's `TABLE t` arguments), literals and identifiers.
//! - `rel`: what the planner knows of a relation; name resolution and rendering expressions
//!   as weir's expression snippets.
//! - `planner`: queries, SELECT, GROUP BY, windows, Top-N, OVER.
//! - `join`: joins and the window semi join.
//! - `legacy`: Flink's group windows (`GROUP BY TUMBLE(time, size)`) as window TVFs.

mod join;
mod legacy;
mod planner;
mod rel;
mod text;

use std::collections::{HashMap, HashSet};

use arrow_schema::SchemaRef;
use indexmap::IndexMap;
use sqlparser::tokenizer::Span;

use crate::plan::build::probe;
use crate::spec::load::{Dropped, LoadedJob, closest};
use crate::spec::positions::Position;
use crate::spec::problems::{Problem, SpecSource, pointer};
use crate::spec::{JobSpec, MapSpec, TransformSpec};
use rel::{HIDDEN, Rel};
use text::column;

/// The most nodes one `sql` node may become.
const MAX_NODES: usize = 256;

/// A problem with a query, at a place in its text.
#[derive(Debug)]
pub(crate) struct SqlError {
    span: Span,
    message: String,
    /// The query reads a `sql` node not planned yet: try again after it.
    wait: bool,
}

impl SqlError {
    pub(crate) fn at(span: Span, message: impl Into<String>) -> Self {
        SqlError {
            span,
            message: message.into(),
            wait: false,
        }
    }
}

/// A job whose `sql` nodes were replaced by what they plan into.
pub(crate) struct Lowered {
    pub spec: JobSpec,
    pub source: SpecSource,
    pub problems: Vec<Problem>,
    pub dropped: Dropped,
}

/// Plans every `sql` node of the job (`None` when it has none). A node that reads another
/// waits for it; one that cannot be planned is reported and left out.
pub(crate) fn lower(loaded: &LoadedJob) -> Option<Lowered> {
    let mut pending: Vec<String> = loaded
        .spec
        .transforms
        .iter()
        .filter(|(_, t)| matches!(t, TransformSpec::Sql(_)))
        .map(|(n, _)| n.clone())
        .collect();
    if pending.is_empty() {
        return None;
    }
    let mut out = Lowered {
        spec: loaded.spec.clone(),
        source: loaded.source.clone(),
        problems: Vec::new(),
        dropped: loaded.dropped.clone(),
    };
    let mut times: HashMap<String, Option<String>> = HashMap::new();
    loop {
        let mut progressed = false;
        let waiting: HashSet<String> = pending.iter().cloned().collect();
        let mut still = Vec::new();
        for name in &pending {
            match lower_one(&mut out, name, &waiting, &mut times) {
                Ok(()) => progressed = true,
                Err(None) => still.push(name.clone()),
                Err(Some(problem)) => {
                    out.problems.push(problem);
                    out.spec.transforms.shift_remove(name);
                    out.dropped.insert(name);
                    progressed = true;
                }
            }
        }
        pending = still;
        if pending.is_empty() || !progressed {
            break;
        }
    }
    for name in pending {
        let at = pointer(&["transforms", &name, "query"]);
        out.problems.push(out.source.at_value(
            &at,
            "the query reads a `sql` node that reads this one back (a cycle)",
        ));
        out.spec.transforms.shift_remove(&name);
        out.dropped.insert(&name);
    }
    Some(out)
}

/// Plans one `sql` node. `Err(None)`: it reads a `sql` node not planned yet.
fn lower_one(
    out: &mut Lowered,
    name: &str,
    waiting: &HashSet<String>,
    times: &mut HashMap<String, Option<String>>,
) -> Result<(), Option<Problem>> {
    let Some(TransformSpec::Sql(sql)) = out.spec.transforms.get(name).cloned() else {
        return Ok(());
    };
    let query_at = pointer(&["transforms", name, "query"]);
    let at = out.spec.transforms.get_index_of(name).unwrap_or(0);
    let mut l = Lowering {
        spec: &mut out.spec,
        src: &mut out.source,
        node: name.to_string(),
        query_at: query_at.clone(),
        inputs: sql.inputs.clone(),
        parallelism: sql.parallelism,
        columns: sql.columns.clone(),
        made: Vec::new(),
        at,
        waiting,
        times,
    };
    let result = text::parse(&sql.query).and_then(|q| {
        let rel = l.query(&q)?;
        l.finish(rel)
    });
    match result {
        Ok(()) => Ok(()),
        Err(e) => {
            l.rollback();
            if e.wait {
                return Err(None);
            }
            let position = l.position(e.span);
            Err(Some(l.src.at_position(&query_at, position, e.message)))
        }
    }
}

/// Planning one `sql` node: the job being rewritten and the nodes made so far.
pub(crate) struct Lowering<'a> {
    spec: &'a mut JobSpec,
    src: &'a mut SpecSource,
    /// The `sql` node's name.
    node: String,
    /// The JSON pointer of its `query`.
    query_at: String,
    inputs: IndexMap<String, String>,
    parallelism: Option<u32>,
    /// The result's column names, by position (`INSERT INTO`); empty: the query's own.
    columns: Vec<String>,
    /// Nodes made, in order.
    made: Vec<String>,
    /// Where the next node goes in `transforms` (before the `sql` node, in order).
    at: usize,
    waiting: &'a HashSet<String>,
    /// The event-time column of each `sql` node planned so far.
    times: &'a mut HashMap<String, Option<String>>,
}

impl Lowering<'_> {
    /// The position in the job file of a place in the query.
    fn position(&self, span: Span) -> Option<Position> {
        if span.start.line == 0 {
            return None;
        }
        self.src.within(
            &self.query_at,
            span.start.line as usize,
            span.start.column as usize,
        )
    }

    /// "line 3, column 7" of the job file, for messages that point at another clause.
    fn describe(&self, span: Span) -> String {
        match self.position(span) {
            Some(p) => format!("line {}, column {}", p.line, p.column),
            None => "the query".to_string(),
        }
    }

    /// The most recent node made.
    fn last(&self) -> String {
        self.made.last().cloned().unwrap_or_default()
    }

    /// A node of the job, by the name the query uses.
    fn input(&mut self, parts: &[String], span: Span) -> Result<Rel, SqlError> {
        let written = parts.join(".");
        let reference = match parts {
            [one] => match self.inputs.iter().find(|(k, _)| text::same_name(k, one)) {
                Some((_, node)) => node.clone(),
                None => one.clone(),
            },
            _ => written.clone(),
        };
        let node = reference.split('.').next().unwrap_or_default().to_string();
        if node == self.node {
            return Err(SqlError::at(span, "a `sql` node cannot read itself"));
        }
        if self.waiting.contains(&node) {
            return Err(SqlError {
                wait: true,
                ..SqlError::at(span, "")
            });
        }
        match probe(self.spec, self.src, &reference) {
            Ok(found) => {
                let time = match self.times.get(&node) {
                    Some(t) => t.clone(),
                    None => found.time,
                };
                Ok(Rel::new(reference, &found.schema, time))
            }
            Err(problems) if problems.is_empty() => {
                let names: Vec<String> = self.known_inputs();
                let hint = closest(&reference, names.iter().map(String::as_str))
                    .map(|c| format!("; did you mean `{c}`?"))
                    .unwrap_or_else(|| format!(" (the job has {})", names.join(", ")));
                Err(SqlError::at(
                    span,
                    format!("`{written}` is no node of the job{hint}"),
                ))
            }
            Err(_) => Err(SqlError::at(
                span,
                format!("`{written}` has problems of its own (reported at it)"),
            )),
        }
    }

    fn known_inputs(&self) -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        // A source of several ports is read port by port (`nexmark.bid`).
        for (name, s) in &self.spec.sources {
            let ports = s.connector().ports();
            if ports.is_empty() {
                names.push(name.clone());
            }
            names.extend(ports.iter().map(|port| format!("{name}.{port}")));
        }
        names.extend(
            self.spec
                .transforms
                .keys()
                .filter(|n| !n.contains('/') && **n != self.node)
                .cloned(),
        );
        names
    }

    /// Adds a node made for the clause at `span`, plans it, and returns its output columns.
    fn emit(&mut self, kind: &str, spec: TransformSpec, span: Span) -> Result<SchemaRef, SqlError> {
        if self.made.len() >= MAX_NODES {
            return Err(SqlError::at(
                span,
                format!("the query becomes more than {MAX_NODES} operators: split it"),
            ));
        }
        let mut name = format!("{}/{kind}", self.node);
        let mut n = 1;
        while self.spec.transforms.contains_key(&name) {
            n += 1;
            name = format!("{}/{kind}-{n}", self.node);
        }
        self.spec
            .transforms
            .shift_insert(self.at, name.clone(), spec);
        self.at += 1;
        self.made.push(name.clone());
        let position = self.position(span);
        self.src.generate(
            pointer(&["transforms", &name]),
            self.query_at.clone(),
            position,
        );
        match probe(self.spec, self.src, &name) {
            Ok(found) => Ok(found.schema),
            Err(problems) => {
                let mut messages: Vec<String> = problems.into_iter().map(|p| p.message).collect();
                messages.dedup();
                if messages.is_empty() {
                    messages.push(format!("the {kind} this clause becomes cannot be planned"));
                }
                Err(SqlError::at(span, messages.join("; ")))
            }
        }
    }

    /// Adds a `map` of `from` to `columns`, made for the clause at `span`.
    fn emit_map(
        &mut self,
        kind: &str,
        from: &str,
        columns: IndexMap<String, String>,
        span: Span,
    ) -> Result<SchemaRef, SqlError> {
        self.emit(
            kind,
            TransformSpec::Map(MapSpec {
                from: from.to_string(),
                columns,
                parallelism: self.parallelism,
            }),
            span,
        )
    }

    /// The query's result becomes the node with the `sql` node's name.
    fn finish(&mut self, rel: Rel) -> Result<(), SqlError> {
        let span = Span::empty();
        self.append_only_final(&rel)?;
        let rel = if rel.tvf.is_some() {
            let side = rel::Side {
                alias: String::new(),
                rel,
            };
            self.window_rows(side)?.rel
        } else {
            rel
        };
        let hidden = rel.cols.iter().any(|(c, _)| c.starts_with(HIDDEN));
        let visible: Vec<&str> = rel.visible().collect();
        let renamed = !self.columns.is_empty();
        if renamed && self.columns.len() != visible.len() {
            return Err(SqlError::at(
                span,
                format!(
                    "the query gives {} columns ({}) where {} are named ({})",
                    visible.len(),
                    visible.join(", "),
                    self.columns.len(),
                    self.columns.join(", ")
                ),
            ));
        }
        if renamed {
            let mut seen = HashSet::new();
            if let Some(twice) = self.columns.iter().find(|c| !seen.insert(c.as_str())) {
                return Err(SqlError::at(
                    span,
                    format!("the column `{twice}` is named twice"),
                ));
            }
        }
        let renamed = renamed && self.columns.iter().zip(&visible).any(|(a, b)| a != b);
        if hidden || renamed || rel.from != self.last() || self.made.is_empty() {
            let columns: IndexMap<String, String> = if renamed {
                self.columns
                    .iter()
                    .zip(&visible)
                    .map(|(name, c)| (name.clone(), column(c)))
                    .collect()
            } else {
                visible.iter().map(|c| (c.to_string(), column(c))).collect()
            };
            self.emit_map("project", &rel.from, columns, span)?;
        }
        // The last node takes the `sql` node's place and name.
        let last = self.last();
        let Some(spec) = self.spec.transforms.shift_remove(&last) else {
            return Ok(());
        };
        self.made.pop();
        self.at -= 1;
        let target = pointer(&["transforms", &last]);
        let position = self
            .src
            .generated
            .iter()
            .find(|g| g.node == target)
            .and_then(|g| g.position);
        self.src.forget(&target);
        self.spec.transforms.insert(self.node.clone(), spec);
        self.src.generate(
            pointer(&["transforms", &self.node]),
            self.query_at.clone(),
            position,
        );
        // The nodes made read the last one under its old name only if they came after it,
        // which none did.
        let time = match &rel.time {
            Some(t) if renamed => visible
                .iter()
                .position(|c| c == t)
                .and_then(|i| self.columns.get(i).cloned()),
            other => other.clone(),
        };
        self.times.insert(self.node.clone(), time);
        Ok(())
    }

    fn append_only_final(&self, rel: &Rel) -> Result<(), SqlError> {
        if let Some(rank) = &rel.rank {
            return Err(SqlError::at(
                rank.span,
                format!(
                    "the rank `{}` must be filtered in an enclosing query (`SELECT * FROM (...) \
                     WHERE {} <= N`): weir plans ROW_NUMBER()/RANK() as a Top-N",
                    rank.column, rank.column
                ),
            ));
        }
        Ok(())
    }

    /// Takes back the nodes made, after a failure.
    fn rollback(&mut self) {
        for name in self.made.drain(..) {
            self.spec.transforms.shift_remove(&name);
            self.src.forget(&pointer(&["transforms", &name]));
        }
    }
}
