//! What the runtime and the coordinator say to each other: the in-band [`Barrier`], what a task
//! reports once it has snapshotted ([`TaskReport`], [`SubtaskSnapshot`]), the job's nodes as
//! checkpoints record them ([`NodeInfo`]), a [`Completed`] snapshot, and the [`JobHooks`] the
//! runtime implements. This is all of the checkpoint crate the runtime's tasks depend on; how
//! the coordinator uses it is in [`crate::coordinator`].

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use weir_state::snapshot::{KeyedSnapshot, SnapshotFormat};

use crate::metadata::{CheckpointMetadata, SnapshotKind};

/// What a barrier asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BarrierKind {
    Checkpoint,
    /// A savepoint; with `stop`, the sources end once it completes.
    Savepoint {
        stop: bool,
    },
}

/// The in-band checkpoint marker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Barrier {
    pub id: u64,
    pub kind: BarrierKind,
}

impl Barrier {
    /// How keyed state is snapshotted for this barrier: natively (incremental RocksDB files)
    /// for checkpoints, in weir's logical format (portable across backends) for savepoints.
    pub fn keyed_format(&self, rocksdb: bool) -> SnapshotFormat {
        match self.kind {
            BarrierKind::Checkpoint if rocksdb => SnapshotFormat::RocksNative,
            _ => SnapshotFormat::Logical,
        }
    }

    pub fn snapshot_kind(&self) -> SnapshotKind {
        match self.kind {
            BarrierKind::Checkpoint => SnapshotKind::Checkpoint,
            BarrierKind::Savepoint { .. } => SnapshotKind::Savepoint,
        }
    }
}

/// One operator subtask's part of a task's snapshot.
#[derive(Debug)]
pub struct SubtaskSnapshot {
    /// Index of the node in the coordinator's node list.
    pub node: usize,
    pub subtask: u32,
    /// Non-keyed state, encoded by the runtime.
    pub operator: Option<Vec<u8>>,
    /// The keyed backend's snapshot, in a local scratch directory the coordinator removes.
    pub keyed: Option<KeyedSnapshot>,
}

/// What tasks tell the coordinator.
#[derive(Debug)]
pub enum TaskReport {
    /// The task processed barrier `checkpoint` and snapshotted its operators.
    Ack {
        checkpoint: u64,
        task: usize,
        subtasks: Vec<SubtaskSnapshot>,
        /// How long the task held back inputs whose barrier had arrived, waiting for the
        /// barrier on its other inputs (zero for sources and single-input tasks).
        alignment: Duration,
    },
    /// The task could not snapshot: the checkpoint fails (the job goes on).
    Declined {
        checkpoint: u64,
        task: usize,
        reason: String,
    },
    /// The task ended: checkpoints that still need it cannot complete, and no more can start.
    Finished { task: usize },
}

/// A node of the job, as checkpoints record it.
#[derive(Clone, Debug)]
pub struct NodeInfo {
    pub name: String,
    pub kind: String,
    pub parallelism: u32,
}

/// A completed snapshot, as the runtime sees it.
#[derive(Debug)]
pub struct Completed {
    pub metadata: CheckpointMetadata,
    /// Where it is, for messages and `--from`.
    pub location: String,
    /// Each subtask's operator state: (node index, subtask) → bytes.
    pub operator_states: HashMap<(usize, u32), Vec<u8>>,
}

/// What the coordinator needs from the runtime.
pub trait JobHooks: Send + Sync + 'static {
    /// Sends `barrier` to every source subtask. An error means the job can no longer take
    /// checkpoints (a source has finished, the job is stopping).
    fn inject(&self, barrier: Barrier) -> Result<(), String>;

    /// `completed` is durable: commit what the sinks prepared for it (every transaction its
    /// sink state holds). The coordinator calls it for one snapshot at a time, in id order.
    /// An error ends the attempt (the transactions stay pending and are committed again on
    /// restore); its text is for the coordinator's log and history, while the runtime keeps
    /// the typed error that decides whether the job restarts.
    fn committed(&self, completed: Arc<Completed>) -> BoxFuture<'static, Result<(), String>>;

    /// A stop-with-savepoint completed: end the sources.
    fn stop_sources(&self);
}
