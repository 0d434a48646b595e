//! Errors of keyed state.

use std::path::PathBuf;

/// Why a state operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// Stored bytes did not decode as the state's type: a corrupt store, or a state read with
    /// another type than it was written with.
    #[error("state `{state}`: cannot decode a stored value: {message}")]
    Codec { state: String, message: String },
    /// A state was registered twice with different kinds or types.
    #[error("state `{0}` is already registered with another kind or type")]
    Conflict(String),
    /// The storage underneath failed (disk, RocksDB); may work on retry. `source` is the
    /// storage's own error, when it gave one.
    #[error("state storage: {context}{}", cause(source))]
    Storage {
        context: String,
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    /// The store was closed under the caller: its subtask stopped or restarts. A lookup may
    /// try again once the job runs again; an operator never sees this (it owns its store).
    #[error("{0} is closed (its subtask stopped or restarts)")]
    Closed(String),
    /// A snapshot cannot be restored: a file is corrupt or cut short, or it was written for
    /// another job (another number of key groups). Retrying the same snapshot does not help:
    /// restore an earlier checkpoint, or fix the job.
    #[error("snapshot `{}`: {message}", path.display())]
    Snapshot { path: PathBuf, message: String },
    /// The caller asked for something this backend cannot do, or broke a precondition (a
    /// native snapshot of a heap backend, a snapshot into a directory that exists): a bug in
    /// the caller.
    #[error("invalid request: {0}")]
    Invalid(String),
}

/// `: <cause>` for a message, when there is a cause.
fn cause(source: &Option<Box<dyn std::error::Error + Send + Sync>>) -> String {
    source
        .as_ref()
        .map(|s| format!(": {s}"))
        .unwrap_or_default()
}

impl StateError {
    /// The storage failed while doing `context`, for a reason of its own.
    pub fn storage(context: impl Into<String>) -> Self {
        StateError::Storage {
            context: context.into(),
            source: None,
        }
    }
}
