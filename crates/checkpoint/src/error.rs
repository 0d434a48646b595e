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

    /// Whether the object is there but cannot serve as a checkpoint's file: not a regular file
    /// (a directory, a link, a device, a FIFO), not readable, larger than a reader accepts, or
    /// not the length its metadata records. The snapshot is at fault, not the storage, so a
    /// restore from "the latest" passes over it; an outage (a refused connection, a full disk)
    /// is none of these and stops the restore instead.
    pub fn is_unreadable(&self) -> bool {
        use std::io::ErrorKind;
        matches!(
            self.source.kind(),
            ErrorKind::PermissionDenied
                | ErrorKind::IsADirectory
                | ErrorKind::NotADirectory
                | ErrorKind::InvalidData
                | ErrorKind::FileTooLarge
                | ErrorKind::UnexpectedEof
        ) || self.source.raw_os_error() == Some(libc::ELOOP)
    }
}

/// A checkpoint or savepoint that cannot be used: corrupt, incomplete, or made by another job.
/// The message names the path; recovery falls back to an older checkpoint.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    #[error("{location} is not a usable checkpoint: {reason}")]
    Corrupt { location: String, reason: String },
    /// A file of the snapshot is there but cannot be read as one (see
    /// [`StorageError::is_unreadable`]); like a corrupt snapshot, recovery falls back.
    #[error("{location} is not a usable checkpoint: {source}")]
    Unreadable {
        location: String,
        #[source]
        source: StorageError,
    },
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

impl RestoreError {
    /// Whether the snapshot itself is at fault (corrupt, incomplete, unreadable): "the latest"
    /// passes over such a snapshot to the one before it, where an incompatible job or an
    /// outage stops the restore (an older snapshot would not fare better).
    pub fn is_unusable_snapshot(&self) -> bool {
        matches!(self, Self::Corrupt { .. } | Self::Unreadable { .. })
    }

    /// A failed read of a file of the snapshot at `location`: unreadable when the file is at
    /// fault, else a storage failure. Callers say what a missing file means first.
    pub(crate) fn reading(location: String, e: StorageError) -> Self {
        if e.is_unreadable() {
            Self::Unreadable {
                location,
                source: e,
            }
        } else {
            Self::Storage(e)
        }
    }
}

/// Why a checkpoint did not complete.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum CheckpointError {
    /// Not even started: `min-pause` has not elapsed, too many are in flight, or the job can no
    /// longer checkpoint (a source finished, the job is stopping).
    #[error("checkpoint skipped: {0}")]
    Skipped(String),
    /// Not complete by its deadline: `waiting` says which step it was waiting for (tasks'
    /// acknowledgements, keyed-state files being stored). A checkpoint whose metadata is being
    /// written is never abandoned: its storage decides.
    #[error("checkpoint {id} timed out after {after_ms} ms, waiting for {waiting}")]
    Timeout {
        id: u64,
        after_ms: u64,
        waiting: String,
    },
    #[error("checkpoint {id} failed: {reason}")]
    Failed { id: u64, reason: String },
    /// Written, but its fence refused to record it ([`crate::fence`]): `taken` when the job's
    /// lease is another copy's (this copy is fenced and stops), else the catalog could not
    /// say. Never restored.
    #[error("checkpoint {id} not published: {reason}")]
    Fenced {
        id: u64,
        taken: bool,
        reason: String,
    },
    /// The snapshot is complete (its metadata is durable), but committing the sinks' output
    /// failed: a restore of it commits again.
    #[error("committing the output of snapshot {id} failed: {reason}")]
    Commit { id: u64, reason: String },
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

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(kind: std::io::ErrorKind) -> StorageError {
        StorageError {
            op: "reading",
            location: "/data/checkpoints/j/chk-7/_metadata".into(),
            source: std::io::Error::new(kind, "refused"),
        }
    }

    /// Running as root, the tests cannot make a snapshot unreadable by its permissions: this
    /// pins what a permission-denied read means, a snapshot that `--from latest` passes over.
    #[test]
    fn a_permission_denied_read_makes_the_snapshot_unusable_and_an_outage_does_not() {
        let denied =
            RestoreError::reading("chk-7".into(), failed(std::io::ErrorKind::PermissionDenied));
        assert!(
            matches!(denied, RestoreError::Unreadable { .. }),
            "{denied:?}"
        );
        assert!(denied.is_unusable_snapshot());
        let outage = RestoreError::reading(
            "chk-7".into(),
            failed(std::io::ErrorKind::ConnectionRefused),
        );
        assert!(matches!(outage, RestoreError::Storage(_)), "{outage:?}");
        assert!(!outage.is_unusable_snapshot());
    }
}
