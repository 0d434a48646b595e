//! `key-by`: partitions a stream by key (an exchange, not a task of its own).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::TransformNode;

#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct KeyBySpec {
    /// The input: a node name, or `node.port`.
    pub from: String,
    /// Key expressions: columns (`auction`) or SQL expressions with a name (`lower(city) AS city`).
    #[schemars(length(min = 1))]
    pub keys: Vec<String>,
}

impl TransformNode for KeyBySpec {
    fn inputs(&self) -> Vec<(String, &str)> {
        vec![("from".into(), self.from.as_str())]
    }
}
