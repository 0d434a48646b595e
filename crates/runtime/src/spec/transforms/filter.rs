//! `filter`: keeps the records for which a SQL condition is true.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::TransformNode;

#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct FilterSpec {
    /// The input: a node name, or `node.port` for a source with several ports.
    pub from: String,
    /// A SQL boolean expression, e.g. `auction % 123 = 0`. NULL counts as false.
    #[serde(rename = "where")]
    pub predicate: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1024))]
    pub parallelism: Option<u32>,
}

impl TransformNode for FilterSpec {
    fn inputs(&self) -> Vec<(String, &str)> {
        vec![("from".into(), self.from.as_str())]
    }

    fn parallelism(&self) -> Option<u32> {
        self.parallelism
    }
}
