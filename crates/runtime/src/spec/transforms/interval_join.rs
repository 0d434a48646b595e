//! `interval-join`: pairs whose right row's time is within bounds of the left's.

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{
    TransformNode,
    join::{default_left_as, default_right_as},
};
use crate::config::SignedDuration;

#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct IntervalJoinSpec {
    pub left: String,
    pub right: String,
    #[serde(default = "default_left_as")]
    pub left_as: String,
    #[serde(default = "default_right_as")]
    pub right_as: String,
    /// The left rows' TIMESTAMP column.
    pub left_time: String,
    /// The right rows' TIMESTAMP column.
    pub right_time: String,
    /// A pair matches when right time ∈ [left time + lower, left time + upper].
    pub lower: SignedDuration,
    pub upper: SignedDuration,
    #[serde(default, rename = "where", skip_serializing_if = "Option::is_none")]
    pub condition: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub columns: Option<IndexMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1024))]
    pub parallelism: Option<u32>,
}

impl TransformNode for IntervalJoinSpec {
    fn inputs(&self) -> Vec<(String, &str)> {
        vec![
            ("left".into(), self.left.as_str()),
            ("right".into(), self.right.as_str()),
        ]
    }

    fn parallelism(&self) -> Option<u32> {
        self.parallelism
    }
}
