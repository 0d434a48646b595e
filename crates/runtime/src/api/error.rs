//! Why an operator, source or sink failed, grouped by what the job should do about it.
//!
//! Every failure carries its decision, as Arroyo's `RetryHint` and DataFusion's error categories
//! do: bad data or a bad job fails the job at once ([`Retry::Never`]); an external system that
//! failed is retried with backoff, unless it refused for good (credentials, a missing topic);
//! a bug in weir is restarted too, and logged as a bug. The supervisor reads
//! [`OperatorError::retry`]; nothing decides by reading a message.

use arrow_schema::ArrowError;
use weir_state::StateError;

use crate::expr::EvalError;

/// A foreign error kept as the cause of one of weir's.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why an operator, source or sink failed.
#[derive(Debug, thiserror::Error)]
pub enum OperatorError {
    /// The job's logic or its input cannot handle a record (division by zero, a malformed
    /// line, a failed cast). Retrying will not help: fix the job or the input.
    #[error("{0}")]
    Data(String),
    /// An external system failed (file system, network, database, broker).
    #[error("{message}")]
    External {
        message: String,
        #[source]
        source: Option<BoxError>,
        /// Whether trying again can help: a connection that dropped may come back; refused
        /// credentials or a missing topic will not.
        retry: Retry,
    },
    /// A bug in weir: an invariant did not hold.
    #[error("internal error (a bug in weir): {0}")]
    Internal(String),
    /// Stopped because another part of the job failed or went away; not a cause of its own.
    #[error("stopped because another part of the job stopped: {0}")]
    Cancelled(String),
    /// A newer run of the job took over what this copy writes (a sink's fence: the PostgreSQL
    /// sink's staging table): this copy must stop for good, and restarting it would fence
    /// the newer run in turn. The message starts with `fenced:`.
    #[error("{0}")]
    Fenced(String),
}

/// What to do about a failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Retry {
    /// Retrying cannot help: fail the job.
    Never,
    /// Retrying may help: restart, after a delay.
    Backoff,
}

impl OperatorError {
    /// An external system failed in a way that may pass (a dropped connection, a broker
    /// restarting); `source` is kept as the cause.
    pub fn external(message: impl Into<String>, source: impl Into<BoxError>) -> Self {
        OperatorError::External {
            message: message.into(),
            source: Some(source.into()),
            retry: Retry::Backoff,
        }
    }

    /// An external system failed in a way that may pass, with no error of its own to keep.
    pub fn external_message(message: impl Into<String>) -> Self {
        OperatorError::External {
            message: message.into(),
            source: None,
            retry: Retry::Backoff,
        }
    }

    /// An external system refused for good (credentials, permissions, a missing table or
    /// topic): retrying the same job cannot help.
    pub fn refused(message: impl Into<String>, source: Option<BoxError>) -> Self {
        OperatorError::External {
            message: message.into(),
            source,
            retry: Retry::Never,
        }
    }

    /// Whether the job should restart after this failure.
    pub fn retry(&self) -> Retry {
        match self {
            OperatorError::Data(_) | OperatorError::Fenced(_) => Retry::Never,
            OperatorError::External { retry, .. } => *retry,
            // A bug may depend on timing or on state that a restore resets: restart (the
            // supervisor logs it as a bug), within the job's budget.
            OperatorError::Internal(_) | OperatorError::Cancelled(_) => Retry::Backoff,
        }
    }

    /// A short word for logs, the summary and the dashboard's exceptions: `data`, `external`,
    /// `internal` or `cancelled`.
    pub fn category(&self) -> &'static str {
        match self {
            OperatorError::Data(_) => "data",
            OperatorError::External { .. } | OperatorError::Fenced(_) => "external",
            OperatorError::Internal(_) => "internal",
            OperatorError::Cancelled(_) => "cancelled",
        }
    }

    /// The same failure, its message prefixed with what was being done (`restoring the state
    /// of q5`), its category, cause and decision unchanged.
    pub fn context(self, what: impl std::fmt::Display) -> Self {
        match self {
            OperatorError::Data(m) => OperatorError::Data(format!("{what}: {m}")),
            OperatorError::External {
                message,
                source,
                retry,
            } => OperatorError::External {
                message: format!("{what}: {message}"),
                source,
                retry,
            },
            OperatorError::Internal(m) => OperatorError::Internal(format!("{what}: {m}")),
            OperatorError::Cancelled(m) => OperatorError::Cancelled(format!("{what}: {m}")),
            OperatorError::Fenced(m) => OperatorError::Fenced(format!("{what}: {m}")),
        }
    }
}

impl From<EvalError> for OperatorError {
    fn from(e: EvalError) -> Self {
        if e.is_internal() {
            OperatorError::Internal(e.to_string())
        } else {
            OperatorError::Data(e.to_string())
        }
    }
}

impl From<std::io::Error> for OperatorError {
    fn from(e: std::io::Error) -> Self {
        OperatorError::external(format!("I/O error: {e}"), e)
    }
}

impl From<ArrowError> for OperatorError {
    fn from(e: ArrowError) -> Self {
        OperatorError::Internal(format!("arrow: {e}"))
    }
}

/// Keyed state: storage failures (disk, RocksDB) are external and may pass; a store closed
/// under a subtask means the job is stopping; anything else is a bug in weir or a snapshot
/// that cannot be used.
impl From<StateError> for OperatorError {
    fn from(e: StateError) -> Self {
        match e {
            StateError::Storage { .. } | StateError::Snapshot { .. } => {
                OperatorError::external(e.to_string(), e)
            }
            StateError::Closed(_) => OperatorError::Cancelled(e.to_string()),
            other => OperatorError::Internal(other.to_string()),
        }
    }
}
