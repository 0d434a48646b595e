//! `sql`: a query in Flink SQL's streaming subset, planned into the other kinds.

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::TransformNode;

#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct SqlSpec {
    /// One SELECT over the job's nodes (`FROM nexmark.bid`, `FROM "my-node"`, or a name given
    /// in `inputs`): projections and filters, GROUP BY, window TVFs (TUMBLE, HOP, SESSION)
    /// grouped by `window_start, window_end`, joins (time-bounded, windowed, regular),
    /// ROW_NUMBER()/RANK() as Top-N, aggregates OVER the last rows, subqueries in FROM, and
    /// `IN (SELECT ...)` as a window semi join. The README's *Queries in SQL* lists the subset.
    #[schemars(length(min = 1))]
    pub query: String,
    /// Names the query uses for nodes of the job: name → node (`bid: nexmark.bid`).
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub inputs: IndexMap<String, String>,
    /// Names for the result's columns, in order, in place of the query's own (what `INSERT
    /// INTO t` does with the columns `t` declares); as many as the query has.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub columns: Vec<String>,
    /// The parallelism of every operator the query becomes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1024))]
    pub parallelism: Option<u32>,
}

impl TransformNode for SqlSpec {
    fn inputs(&self) -> Vec<(String, &str)> {
        self.inputs
            .iter()
            .map(|(name, node)| (format!("inputs.{name}"), node.as_str()))
            .collect()
    }

    fn parallelism(&self) -> Option<u32> {
        self.parallelism
    }
}
