//! `window-join`: pairs within the same event-time window.

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{
    TransformNode,
    join::{default_left_as, default_right_as},
    window::WindowSpec,
};

/// Which pairs a window join emits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum JoinMode {
    /// Every matching pair.
    #[default]
    Inner,
    /// Each left row with at least one match, once (with its first match's right columns).
    Semi,
}

#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct WindowJoinSpec {
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
    /// Tumbling or sliding windows.
    pub window: WindowSpec,
    #[serde(default)]
    pub mode: JoinMode,
    #[serde(default, rename = "where", skip_serializing_if = "Option::is_none")]
    pub condition: Option<String>,
    /// Output columns: name → expression over both rows and `window_start`, `window_end`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub columns: Option<IndexMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1024))]
    pub parallelism: Option<u32>,
}

impl TransformNode for WindowJoinSpec {
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
