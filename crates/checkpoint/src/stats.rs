//! What a job's checkpoints have done so far: counters, the snapshots in flight and a short
//! history, kept by the coordinator and read by the HTTP API, the dashboard and `weir run`'s
//! summary.

use std::collections::VecDeque;
use std::sync::Mutex;

use crate::metadata::SnapshotKind;

/// How a snapshot ended, for metrics and the dashboard.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case", tag = "status")]
pub enum Outcome {
    Completed { location: String, bytes: u64 },
    Failed { reason: String },
}

/// One snapshot in the history.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
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
}

/// Counters and recent history of a job's checkpoints.
#[derive(Debug, Default)]
pub struct CheckpointStats {
    inner: Mutex<StatsInner>,
}

/// A snapshot of [`CheckpointStats`].
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct StatsInner {
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
    pub fn snapshot(&self) -> StatsInner {
        self.inner.lock().map(|s| s.clone()).unwrap_or_default()
    }

    pub(crate) fn update(&self, f: impl FnOnce(&mut StatsInner)) {
        if let Ok(mut s) = self.inner.lock() {
            f(&mut s);
        }
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
