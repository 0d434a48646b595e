//! `weir explain`: a planned job as text, node by node: its kind, parallelism, what it reads
//! (and by which key), what it keeps in state and which timers fire it, its columns and its
//! changelog mode (`append`, or which row kinds an updating stream holds and its key). A
//! `sql` node shows as the nodes it became (`q5/key-by`, `q5/window-aggregate`, ..., `q5`).

use std::fmt::Write;

use super::{Plan, PlanNode};
use crate::api::NodeRole;

impl Plan {
    /// The plan as text (see the module docs).
    pub fn explain(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "job `{}`: {} nodes, {} tasks after chaining",
            self.name(),
            self.nodes.len(),
            self.chains.members.len()
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
            let (state, timers) = self.state_and_timers(node);
            if let Some(s) = state {
                let _ = writeln!(out, "  state: {s}");
            }
            if let Some(t) = timers {
                let _ = writeln!(out, "  timers: {t}");
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

    /// What the node keeps and what fires it, from its spec.
    fn state_and_timers(&self, node: &PlanNode) -> (Option<String>, Option<String>) {
        if node.kind == "local-aggregate" {
            return (
                Some(
                    "none (folds each batch into one partial per key and window, or slice \
                     of a sliced window, chained before the exchange: two-phase aggregation)"
                        .into(),
                ),
                None,
            );
        }
        if node.kind == "changelog-normalize" {
            let ttl = self
                .spec
                .state
                .ttl
                .map_or("unbounded unless state.ttl is set".to_string(), |t| {
                    format!("expires after {t} without a change (state.ttl)")
                });
            return (
                Some(format!(
                    "the last row of each key of the upsert stream, to emit the old row with \
                     each update and delete: {ttl}"
                )),
                None,
            );
        }
        let Some(t) = self.spec.transforms.get(&node.name) else {
            return (None, None);
        };
        let explained = super::nodes::explain(t, &self.spec);
        (explained.state, explained.timers)
    }
}
