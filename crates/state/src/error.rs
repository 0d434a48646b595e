//! Errors of keyed state.

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
    /// The storage underneath failed (disk, RocksDB); may work on retry.
    #[error("state storage: {0}")]
    Storage(String),
}
