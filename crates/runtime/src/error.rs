//! Errors of running jobs, grouped by what the caller should do about them.

use arrow_schema::ArrowError;

use crate::expr::EvalError;

/// Why an operator, source or sink failed.
#[derive(Debug, thiserror::Error)]
pub enum OperatorError {
    /// The job's logic or its input cannot handle a record (division by zero, a malformed
    /// line, a failed cast). Retrying will not help: fix the job or the input.
    #[error("{0}")]
    Data(String),
    /// An external system failed (file system, network, database). It may work on retry.
    #[error("{message}")]
    External {
        message: String,
        #[source]
        source: Option<std::io::Error>,
    },
    /// A bug in weir: an invariant did not hold.
    #[error("internal error (a bug in weir): {0}")]
    Internal(String),
    /// Stopped because another part of the job failed or went away; not a cause of its own.
    #[error("stopped because another part of the job stopped: {0}")]
    Cancelled(String),
}

impl OperatorError {
    pub fn external(message: impl Into<String>, source: std::io::Error) -> Self {
        OperatorError::External {
            message: message.into(),
            source: Some(source),
        }
    }

    /// A short word for logs and the summary.
    pub fn category(&self) -> &'static str {
        match self {
            OperatorError::Data(_) => "data",
            OperatorError::External { .. } => "external",
            OperatorError::Internal(_) => "internal",
            OperatorError::Cancelled(_) => "cancelled",
        }
    }
}

impl From<EvalError> for OperatorError {
    fn from(e: EvalError) -> Self {
        OperatorError::Data(e.to_string())
    }
}

impl From<std::io::Error> for OperatorError {
    fn from(e: std::io::Error) -> Self {
        OperatorError::External {
            message: format!("I/O error: {e}"),
            source: Some(e),
        }
    }
}

impl From<ArrowError> for OperatorError {
    fn from(e: ArrowError) -> Self {
        OperatorError::Internal(format!("arrow: {e}"))
    }
}

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
    /// Checkpoint storage or the coordinator failed where the run cannot go on without it.
    #[error("checkpointing: {0}")]
    Checkpoint(String),
}
