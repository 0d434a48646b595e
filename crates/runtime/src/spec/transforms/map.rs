//! `map`: new columns from SQL expressions (also projection and renaming).

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::TransformNode;

#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct MapSpec {
    /// The input: a node name, or `node.port`.
    pub from: String,
    /// Output columns in order: name → SQL expression (`price: price * 0.908`).
    #[schemars(length(min = 1))]
    pub columns: IndexMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1024))]
    pub parallelism: Option<u32>,
}

impl TransformNode for MapSpec {
    fn inputs(&self) -> Vec<(String, &str)> {
        vec![("from".into(), self.from.as_str())]
    }

    fn parallelism(&self) -> Option<u32> {
        self.parallelism
    }
}
