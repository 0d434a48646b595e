//! What a job's checkpoints have done so far: counters, the snapshots in flight and a short
//! history, kept by the coordinator and read by the HTTP API, the dashboard and `weir run`'s
//! summary.

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::metadata::SnapshotKind;

/// How a snapshot ended, for metrics and the dashboard.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case", tag = "status")]
pub enum Outcome {
    Completed { location: String, bytes: u64 },
    Failed { reason: String },
}

/// One snapshot in the history.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Record {
    pub id: u64,
    pub kind: SnapshotKind,
    /// Epoch ms.
    pub triggered_at: i64,
    pub duration_ms: u64,
    /// The longest barrier alignment of any task for this snapshot, in milliseconds.
    pub alignment_ms: u64,
    #[serde(flatten)]
    pub outcome: Outcome,
    /// When each subtask acknowledged (its task's ack, after the barrier passed through it
    /// and its state was snapshotted) and how long its task aligned; sizes are in the
    /// snapshot's metadata. Empty for failed snapshots and records of older versions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub acks: Vec<SubtaskAck>,
}

/// One subtask's acknowledgement of a snapshot.
#[derive(
    Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub struct SubtaskAck {
    /// The node's name.
    pub node: String,
    pub subtask: u32,
    /// Milliseconds from the trigger to the ack.
    pub acked_after_ms: u64,
    /// Milliseconds the subtask's task held back inputs aligning the barrier.
    pub alignment_ms: u64,
}

/// Counters and recent history of a job's checkpoints.
#[derive(Debug, Default)]
pub struct CheckpointStats {
    inner: Mutex<StatsSnapshot>,
}

/// A snapshot of [`CheckpointStats`].
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct StatsSnapshot {
    pub completed: u64,
    pub failed: u64,
    /// Triggers refused before starting (min pause, too many in flight, job finishing).
    pub skipped: u64,
    pub in_flight: Vec<u64>,
    pub latest_completed: Option<Record>,
    /// The last [`HISTORY`] snapshots, oldest first.
    pub history: VecDeque<Record>,
}

/// Snapshots kept in the history.
pub const HISTORY: usize = 32;

impl CheckpointStats {
    pub fn snapshot(&self) -> StatsSnapshot {
        self.lock().clone()
    }

    pub(crate) fn update(&self, f: impl FnOnce(&mut StatsSnapshot)) {
        f(&mut self.lock());
    }

    /// The counters, also after a panic while they were held: every update leaves them
    /// consistent (a count bumped, a record pushed), so a poisoned lock holds good figures,
    /// and dropping updates from then on would make the dashboard stop counting silently.
    fn lock(&self) -> MutexGuard<'_, StatsSnapshot> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn record(&self, record: Record) {
        self.update(|s| {
            s.in_flight.retain(|id| *id != record.id);
            match &record.outcome {
                Outcome::Completed { .. } => {
                    s.completed += 1;
                    s.latest_completed = Some(record.clone());
                }
                Outcome::Failed { .. } => s.failed += 1,
            }
            if s.history.len() == HISTORY {
                s.history.pop_front();
            }
            s.history.push_back(record);
        });
    }
}
