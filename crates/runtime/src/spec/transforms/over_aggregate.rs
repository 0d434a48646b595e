//! `over-aggregate`: an aggregate over each row's last rows per key.

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::TransformNode;

#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct OverAggregateSpec {
    /// A `key-by` node.
    pub from: String,
    /// The order of rows: a TIMESTAMP expression first (rows wait until the watermark reaches
    /// it), then tie-breakers, each optionally `ASC`/`DESC`.
    #[schemars(length(min = 1))]
    pub order_by: Vec<String>,
    /// How many rows, the current one included, each aggregate covers.
    #[schemars(range(min = 1, max = 100000))]
    pub rows: u32,
    /// Columns added to each row: name → an aggregate call (as in `window-aggregate`).
    #[schemars(length(min = 1))]
    pub aggregates: IndexMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1024))]
    pub parallelism: Option<u32>,
}

impl TransformNode for OverAggregateSpec {
    fn inputs(&self) -> Vec<(String, &str)> {
        vec![("from".into(), self.from.as_str())]
    }

    fn parallelism(&self) -> Option<u32> {
        self.parallelism
    }
}
