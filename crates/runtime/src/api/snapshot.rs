//! What a subtask puts into a checkpoint besides keyed state, and what a restored subtask
//! starts from.
//!
//! Every node's subtask contributes one [`SubtaskState`]: its watermark and its own state (a
//! source's position, a sink's pending transactions, an operator's counters) as JSON, small by
//! construction. The coordinator stores them in a few merged operator-state files per checkpoint.
//! On restore every new subtask of a node sees the states of *all* old subtasks (union
//! redistribution, as Flink's union list state) and takes its share: a source its splits, a
//! join the largest arrival counter. Keyed state is redistributed by key group instead.

use serde::{Deserialize, Serialize};
use weir_state::snapshot::RestoreSource;

use super::OperatorError;

/// The non-keyed state of one subtask of one node.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SubtaskState {
    /// Operators: the input watermark; sources: the watermark emitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watermark: Option<i64>,
    /// Sources: the largest event time seen (the watermark derives from it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_seen: Option<i64>,
    /// The node's own state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<serde_json::Value>,
}

impl SubtaskState {
    pub fn encode(&self) -> Result<Vec<u8>, OperatorError> {
        serde_json::to_vec(self)
            .map_err(|e| OperatorError::Internal(format!("encoding state: {e}")))
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, String> {
        serde_json::from_slice(bytes).map_err(|e| format!("operator state is not valid: {e}"))
    }

    /// Nothing to store.
    pub fn is_empty(&self) -> bool {
        self.watermark.is_none() && self.max_seen.is_none() && self.state.is_none()
    }
}

/// What one new subtask restores from.
#[derive(Debug, Default)]
pub struct SubtaskRestore {
    /// The snapshot's id.
    pub checkpoint: u64,
    /// Keyed-state snapshots of the old subtasks whose key groups overlap this one's.
    pub keyed: Vec<RestoreSource>,
    /// The non-keyed state of every old subtask of the node, by old subtask index.
    pub states: Vec<SubtaskState>,
}

impl SubtaskRestore {
    /// The watermark to resume from: the lowest of the old subtasks', so nothing that was on
    /// time before is late after a rescale.
    pub fn watermark(&self) -> Option<i64> {
        self.states.iter().filter_map(|s| s.watermark).min()
    }

    /// The largest event time seen, for a source: the lowest of the old subtasks'.
    pub fn max_seen(&self) -> Option<i64> {
        self.states.iter().filter_map(|s| s.max_seen).min()
    }

    /// The node's own state of each old subtask that had one.
    pub fn own_states(&self) -> impl Iterator<Item = &serde_json::Value> {
        self.states.iter().filter_map(|s| s.state.as_ref())
    }
}
