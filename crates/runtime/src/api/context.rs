//! What a factory knows about the subtask it makes.

use std::sync::Arc;

use weir_state::KeyedStateBackend;

use super::{OperatorError, SubtaskMetrics, SubtaskRestore};

/// What a subtask is, for factories.
#[derive(Clone, Debug)]
pub struct SubtaskContext {
    pub subtask: usize,
    pub parallelism: usize,
    pub batch_size: usize,
    pub metrics: Arc<SubtaskMetrics>,
    /// Sources: which output ports are read downstream.
    pub want: Vec<bool>,
    /// The state to start from, when the run restores a checkpoint or savepoint.
    pub restore: Option<Arc<SubtaskRestore>>,
    /// Which attempt of the run this is (0, then 1 after the first restart, ...): working
    /// directories are per attempt.
    pub attempt: u32,
    /// Snapshots this run takes have ids above this one (the restored snapshot's, or the
    /// highest the job's storage holds): a sink names its last transaction after it.
    pub checkpoint_base: u64,
    /// Whether the run takes checkpoints (sinks then commit per checkpoint).
    pub checkpointing: bool,
    /// Where the run keeps keyed state (its backend, directory and block cache), made by the
    /// executor once per run; `None` where no keyed operator can run.
    pub state: Option<Arc<dyn KeyedStateStore>>,
}

impl SubtaskContext {
    /// Opens this subtask's keyed state for operator `node` (or restores it from
    /// [`restore`](Self::restore)), with `ttl_ms` over the job's state TTL.
    pub fn keyed_state(
        &self,
        node: &str,
        ttl_ms: Option<i64>,
    ) -> Result<KeyedStateBackend, OperatorError> {
        let store = self.state.as_ref().ok_or_else(|| {
            OperatorError::Internal(format!(
                "`{node}` keeps keyed state, but its subtask was made without a state store"
            ))
        })?;
        store.open(node, self, ttl_ms)
    }
}

/// Opens the keyed state of subtasks: what the executor provides for one run of a job.
pub trait KeyedStateStore: Send + Sync + std::fmt::Debug {
    /// The keyed state of subtask `ctx` of operator `node`, restored from `ctx.restore` when
    /// the run restores; `ttl_ms` overrides the job's state TTL.
    fn open(
        &self,
        node: &str,
        ctx: &SubtaskContext,
        ttl_ms: Option<i64>,
    ) -> Result<KeyedStateBackend, OperatorError>;
}
