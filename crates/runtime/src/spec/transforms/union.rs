//! `union`: merges streams with the same columns.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::TransformNode;

#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct UnionSpec {
    /// The inputs, which must have the same column names and types.
    #[schemars(length(min = 2))]
    pub from: Vec<String>,
}

impl TransformNode for UnionSpec {
    fn inputs(&self) -> Vec<(String, &str)> {
        self.from
            .iter()
            .enumerate()
            .map(|(i, f)| (format!("from.{i}"), f.as_str()))
            .collect()
    }
}
