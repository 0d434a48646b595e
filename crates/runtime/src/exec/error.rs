//! Why a job's run did not complete: which subtask failed first, or what else stopped it.

use crate::api::OperatorError;
use crate::api::error::Retry;

/// A failed job: which node and subtask failed first, and why.
#[derive(Debug, thiserror::Error)]
#[error("`{node}` (subtask {subtask} of {parallelism}) failed: {error}")]
pub struct JobError {
    pub node: String,
    pub subtask: usize,
    pub parallelism: usize,
    #[source]
    pub error: OperatorError,
}

/// Why a run did not complete.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// A task failed (after any restarts the job was allowed).
    #[error(transparent)]
    Task(#[from] JobError),
    /// The snapshot to start from cannot be used.
    #[error("cannot restore: {0}")]
    Restore(#[from] weir_checkpoint::RestoreError),
    /// The coordinator failed where the run cannot go on without it (the final snapshot of a
    /// bounded run).
    #[error("checkpointing: {0}")]
    Checkpoint(#[from] weir_checkpoint::CheckpointError),
    /// Checkpoint storage failed (listing the job's snapshots, say).
    #[error("checkpointing: {0}")]
    Storage(#[from] weir_checkpoint::StorageError),
    /// The job's checkpoint storage is configured in a way that cannot be used.
    #[error("checkpointing: {0}")]
    StorageConfig(String),
    /// The checkpoint-trigger scheduler refused the job's periodic checkpoints.
    #[error("checkpointing: {0}")]
    Scheduler(#[from] weir_scheduler::SchedulerError),
    /// Committing a completed snapshot's output to a sink failed (the restore commits it
    /// again); the sink's error decides whether restarting can help.
    #[error("committing the output of snapshot {snapshot} to `{sink}`: {error}")]
    Commit {
        snapshot: u64,
        sink: String,
        #[source]
        error: OperatorError,
    },
    /// In a fleet, the job's lease is another server's (this copy stops for good, another runs
    /// the job), or the catalog cannot say (retried: the restart asks again).
    #[error("the job's lease is lost: {0}")]
    Fenced(#[from] weir_checkpoint::Fenced),
    /// A bug in weir: an invariant did not hold.
    #[error("internal error (a bug in weir): {0}")]
    Internal(String),
}

impl RunError {
    /// Whether the job should restart after this failure: a task's failure decides for
    /// itself ([`OperatorError::retry`]); a snapshot that cannot be restored, storage that is
    /// configured wrong or a scheduler that refuses the job would fail the same way again;
    /// storage, coordinator and commit failures may pass.
    pub fn retry(&self) -> Retry {
        match self {
            RunError::Task(e) => e.error.retry(),
            RunError::Commit { error, .. } => error.retry(),
            // A lease another server took stops this copy for good; a catalog that did not
            // answer is asked again by the restart.
            RunError::Fenced(f) if !f.is_taken() => Retry::Backoff,
            RunError::Restore(_)
            | RunError::StorageConfig(_)
            | RunError::Scheduler(_)
            | RunError::Fenced(_) => Retry::Never,
            RunError::Checkpoint(_) | RunError::Storage(_) | RunError::Internal(_) => {
                Retry::Backoff
            }
        }
    }

    /// Whether this copy of the job was fenced: another run took over its lease (in a fleet)
    /// or what one of its sinks writes. It stops for good; the other runs the job.
    pub fn is_fenced(&self) -> bool {
        match self {
            RunError::Fenced(f) => f.is_taken(),
            RunError::Task(e) => matches!(e.error, OperatorError::Fenced(_)),
            RunError::Commit { error, .. } => matches!(error, OperatorError::Fenced(_)),
            _ => false,
        }
    }

    /// What kind of failure it is, for logs and the exceptions the API lists: `data` (the job
    /// or its input), `external` (a system outside weir), `internal` (a bug in weir), or
    /// `cancelled`.
    pub fn category(&self) -> &'static str {
        match self {
            RunError::Task(e) => e.error.category(),
            RunError::Commit { error, .. } => error.category(),
            RunError::Restore(_) | RunError::StorageConfig(_) => "data",
            RunError::Checkpoint(_) | RunError::Storage(_) | RunError::Fenced(_) => "external",
            RunError::Scheduler(_) | RunError::Internal(_) => "internal",
        }
    }
}
