//! `weir explain`: a planned job as text, node by node: its kind, parallelism, what it reads
//! (and by which key), what it keeps in state, which timers fire it and its mini-batch, its columns and its
//! changelog mode (`append`, or which row kinds an updating stream holds and its key). A
//! `sql` node shows as the nodes it became (`q5/key-by`, `q5/window-aggregate`, ..., `q5`).

use std::fmt::Write;

use super::{Plan, PlanNode};
use crate::api::NodeRole;

impl Plan {
    /// The plan as text (see the module docs).
    pub fn explain(&self) -> String {
        let mut out = String::new();
        let channels = super::footprint::channels(self);
        let _ = writeln!(
            out,
            "job `{}`: {} nodes, {} tasks after chaining, {} channels between subtasks (about {})",
            self.name(),
            self.nodes.len(),
            self.chains.members.len(),
            crate::config::units::group(channels.count),
            crate::config::units::ByteSize(super::footprint::channel_bytes(
                channels.count,
                self.spec.channel_capacity
            ))
        );
        for node in &self.nodes {
            let _ = writeln!(out);
            let role = match node.role {
                NodeRole::Source => "source",
                NodeRole::Operator => "operator",
                NodeRole::Sink => "sink",
            };
            let _ = writeln!(
                out,
                "{}  ({role} `{}`, parallelism {})",
                node.name, node.kind, node.parallelism
            );
            for edge in &node.inputs {
                let from = &self.nodes[edge.from];
                let port = from
                    .ports
                    .get(edge.port)
                    .map(|(p, _)| p.as_str())
                    .filter(|p| !p.is_empty())
                    .map(|p| format!(".{p}"))
                    .unwrap_or_default();
                let side = match (node.inputs.len(), edge.input) {
                    (1, _) => String::new(),
                    (_, 0) => " (left)".to_string(),
                    (_, _) => " (right)".to_string(),
                };
                let key = match &edge.key {
                    Some(k) => format!(", hash-partitioned by [{}]", k.names().join(", ")),
                    None if node.inputs.len() == 1 && from.parallelism == node.parallelism => {
                        String::new()
                    }
                    None => ", rebalanced".to_string(),
                };
                let _ = writeln!(out, "  reads {}{port}{side}{key}", from.name);
            }
            let explained = self.explained(node);
            if let Some(s) = explained.state {
                let _ = writeln!(out, "  state: {s}");
            }
            if let Some(t) = explained.timers {
                let _ = writeln!(out, "  timers: {t}");
            }
            if let Some(m) = explained.mini_batch {
                let _ = writeln!(out, "  mini-batch: {m}");
            }
            for (p, (port, schema)) in node.ports.iter().enumerate() {
                let columns: Vec<String> = schema
                    .fields()
                    .iter()
                    .filter(|f| f.name() != crate::changelog::OP)
                    .map(|f| match super::nodes::sql_type(f.data_type()) {
                        "an unsupported type" => format!("{} ({})", f.name(), f.data_type()),
                        t => format!("{} {t}", f.name()),
                    })
                    .collect();
                if columns.is_empty() {
                    continue;
                }
                let label = if port.is_empty() {
                    "columns".to_string()
                } else {
                    format!("port {port}")
                };
                let _ = writeln!(out, "  {label}: {}", columns.join(", "));
                let mode = crate::changelog::ChangelogMode::of(schema);
                let _ = writeln!(out, "    changes: {}", mode.describe());
                // Projection pushdown: the columns nothing reads are not built (left null).
                let read = node.read.as_ref().and_then(|r| r.get(p));
                if let Some(read) = read.filter(|r| r.contains(&true)) {
                    let built: Vec<&str> = schema
                        .fields()
                        .iter()
                        .zip(read)
                        .filter(|(_, r)| **r)
                        .map(|(f, _)| f.name().as_str())
                        .collect();
                    let _ = writeln!(
                        out,
                        "    decodes only {} (nothing reads the rest)",
                        built.join(", ")
                    );
                }
            }
        }
        out
    }

    /// What the node keeps, what fires it and how it batches, from its spec.
    fn explained(&self, node: &PlanNode) -> super::nodes::Explained {
        if node.kind == "local-aggregate" {
            return super::nodes::Explained {
                state: Some(
                    "none (folds each batch into one partial per key and window, or slice \
                     of a sliced window, chained before the exchange: two-phase aggregation)"
                        .into(),
                ),
                ..Default::default()
            };
        }
        if node.kind == "changelog-normalize" {
            let ttl = self
                .spec
                .state
                .ttl
                .map_or("unbounded unless state.ttl is set".to_string(), |t| {
                    format!("expires after {t} without a change (state.ttl)")
                });
            return super::nodes::Explained {
                state: Some(format!(
                    "the last row of each key of the upsert stream, to emit the old row with \
                     each update and delete: {ttl}"
                )),
                ..Default::default()
            };
        }
        match self.spec.transforms.get(&node.name) {
            Some(t) => super::nodes::explain(t, &self.spec),
            None => Default::default(),
        }
    }
}
