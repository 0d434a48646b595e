//! `join`: every pair of two keyed streams with equal keys that meets a condition.

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::TransformNode;
use crate::config::HumanDuration;

/// Which rows a regular join emits besides its pairs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum OuterMode {
    /// Only the pairs.
    #[default]
    Inner,
    /// Also each left row without a match, its right columns null (taken back when a match
    /// comes): an updating output.
    Left,
    /// Also each right row without a match, its left columns null: an updating output.
    Right,
    /// Both: an updating output.
    Full,
}

impl OuterMode {
    /// Whether the (left, right) side's unmatched rows are emitted.
    pub fn outer_sides(self) -> (bool, bool) {
        match self {
            OuterMode::Inner => (false, false),
            OuterMode::Left => (true, false),
            OuterMode::Right => (false, true),
            OuterMode::Full => (true, true),
        }
    }
}

#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct JoinSpec {
    /// A `key-by` node.
    pub left: String,
    /// A `key-by` node with keys of the same types.
    pub right: String,
    /// The name of the left row in expressions (`l.price`).
    #[serde(default = "default_left_as")]
    pub left_as: String,
    /// The name of the right row in expressions (`r.price`).
    #[serde(default = "default_right_as")]
    pub right_as: String,
    /// Which rows besides the pairs (default `inner`: none). An outer join, like an inner
    /// join of an updating input, keeps each side's rows for good (no `*-until`).
    #[serde(default, skip_serializing_if = "is_inner")]
    pub mode: OuterMode,
    /// An extra condition over both rows.
    #[serde(default, rename = "where", skip_serializing_if = "Option::is_none")]
    pub condition: Option<String>,
    /// A TIMESTAMP expression over a left row: after the watermark passes it the row cannot
    /// match any more and is dropped from state. Default: kept for good (a regular join).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub left_until: Option<String>,
    /// The same for right rows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub right_until: Option<String>,
    /// Output columns: name → expression over both rows (default: every column as `l.x`, `r.x`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub columns: Option<IndexMap<String, String>>,
    /// Stored rows of a key not touched for this long (processing time) are forgotten
    /// (default: `state.ttl`): bounds a regular join's state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_ttl: Option<HumanDuration>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1024))]
    pub parallelism: Option<u32>,
}

impl TransformNode for JoinSpec {
    fn inputs(&self) -> Vec<(String, &str)> {
        vec![
            ("left".into(), self.left.as_str()),
            ("right".into(), self.right.as_str()),
        ]
    }

    fn parallelism(&self) -> Option<u32> {
        self.parallelism
    }

    fn state_ttl(&self) -> Option<HumanDuration> {
        self.state_ttl
    }
}

fn is_inner(mode: &OuterMode) -> bool {
    *mode == OuterMode::Inner
}

pub(super) fn default_left_as() -> String {
    "l".into()
}
pub(super) fn default_right_as() -> String {
    "r".into()
}
