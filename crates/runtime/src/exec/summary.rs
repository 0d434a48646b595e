//! What a finished run did: counts per node, restarts, checkpoints, the snapshot it left.

use std::sync::atomic::Ordering;
use std::time::Duration;

use weir_checkpoint::coordinator::Record;

use super::supervisor::RestoreReport;
use crate::api::{JobMetrics, NodeRole};

/// Counts of one node at the end of a run.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct NodeSummary {
    pub name: String,
    pub kind: String,
    pub role: NodeRole,
    pub parallelism: usize,
    pub records_in: u64,
    pub records_out: u64,
    pub skipped: u64,
    /// Records dropped for arriving too late for event time.
    pub late_dropped: u64,
    pub backpressure: Duration,
}

/// What a finished run did.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct JobSummary {
    pub job: String,
    pub elapsed: Duration,
    /// Input units consumed by all sources.
    pub events: u64,
    pub nodes: Vec<NodeSummary>,
    /// Restarts after failures.
    pub restarts: u32,
    /// Checkpoints completed.
    pub checkpoints: u64,
    /// The snapshots taken (completed or failed), oldest first: the last
    /// [`HISTORY`](weir_checkpoint::coordinator::HISTORY) of each attempt.
    pub checkpoint_history: Vec<Record>,
    /// The snapshot the run started from, if it restored one.
    pub restored_from: Option<String>,
    /// How the latest restore read its snapshot.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub restore: Option<RestoreReport>,
    /// The savepoint a stop took, or the final snapshot of a completed bounded run.
    pub snapshot: Option<String>,
}

impl JobSummary {
    pub fn of(metrics: &JobMetrics) -> Self {
        Self {
            job: metrics.job.clone(),
            elapsed: metrics.started.elapsed(),
            events: metrics.events(),
            nodes: metrics
                .nodes
                .iter()
                .map(|n| NodeSummary {
                    name: n.name.clone(),
                    kind: n.kind.clone(),
                    role: n.role,
                    parallelism: n.subtasks.len(),
                    records_in: n.sum(|s| &s.records_in),
                    records_out: n.sum(|s| &s.records_out),
                    skipped: n.sum(|s| &s.skipped),
                    late_dropped: n.sum(|s| &s.late_dropped),
                    backpressure: Duration::from_nanos(n.sum(|s| &s.backpressure_ns)),
                })
                .collect(),
            restarts: 0,
            checkpoints: 0,
            checkpoint_history: Vec::new(),
            restored_from: None,
            restore: None,
            snapshot: None,
        }
    }

    /// Events per second of wall-clock time.
    pub fn events_per_second(&self) -> f64 {
        self.events as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Records a node received (sinks) or emitted (sources), by name.
    pub fn node(&self, name: &str) -> Option<&NodeSummary> {
        self.nodes.iter().find(|n| n.name == name)
    }
}

/// Whether every source subtask has finished.
pub fn sources_finished(metrics: &JobMetrics) -> bool {
    metrics.sources().all(|n| {
        n.subtasks
            .iter()
            .all(|s| s.finished.load(Ordering::Relaxed))
    })
}
