//! What can go wrong with checkpoints, grouped by what the caller should do about it.

/// A storage operation failed: external, worth retrying (a full disk, a flaky network) or
/// reporting with the location it names.
#[derive(Debug, thiserror::Error)]
#[error("{op} {location}: {source}")]
pub struct StorageError {
    /// What was being done (`reading`, `writing`, `listing`, ...).
    pub op: &'static str,
    /// Where, as a URL or path the user can look at.
    pub location: String,
    #[source]
    pub source: std::io::Error,
}

impl StorageError {
    pub fn is_not_found(&self) -> bool {
        self.source.kind() == std::io::ErrorKind::NotFound
    }
}

/// A checkpoint or savepoint that cannot be used: corrupt, incomplete, or made by another job.
/// The message names the path; recovery falls back to an older checkpoint.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    #[error("{location} is not a usable checkpoint: {reason}")]
    Corrupt { location: String, reason: String },
    #[error("{location} does not fit this job: {reason}")]
    Incompatible { location: String, reason: String },
    #[error("no completed checkpoint or savepoint of job `{job}` under {location}")]
    NoneFound { job: String, location: String },
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error("restoring keyed state from {location}: {source}")]
    State {
        location: String,
        #[source]
        source: weir_state::StateError,
    },
}

/// Why a checkpoint did not complete.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum CheckpointError {
    /// Not even started: `min-pause` has not elapsed, too many are in flight, or the job can no
    /// longer checkpoint (a source finished, the job is stopping).
    #[error("checkpoint skipped: {0}")]
    Skipped(String),
    #[error("checkpoint {id} timed out after {after_ms} ms ({missing} tasks had not acknowledged)")]
    Timeout {
        id: u64,
        after_ms: u64,
        missing: usize,
    },
    #[error("checkpoint {id} failed: {reason}")]
    Failed { id: u64, reason: String },
    /// The coordinator is gone (the job ended or is restarting).
    #[error("the checkpoint coordinator has stopped")]
    Stopped,
}

/// A local path in messages.
pub(crate) fn display(path: &std::path::Path) -> String {
    path.display().to_string()
}

/// A local working directory that could not be prepared.
pub(crate) fn local(
    op: &'static str,
    path: &std::path::Path,
    source: std::io::Error,
) -> StorageError {
    StorageError {
        op,
        location: display(path),
        source,
    }
}
