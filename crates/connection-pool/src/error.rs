//! What can go wrong when asking the pool for a connection.

use std::time::Duration;

/// Why [`Pool::acquire`](crate::Pool::acquire) failed, grouped by what the caller should do:
///
/// - [`Timeout`](Self::Timeout) and [`ConnectTimeout`](Self::ConnectTimeout) are transient
///   (the database is busy or slow): retry with backoff, or fail the batch and let the job's
///   restart policy retry.
/// - [`Closed`](Self::Closed) is final: the pool was shut down; stop using it.
/// - [`Connect`](Self::Connect) carries the manager's own error, which the caller classifies
///   (a refused connection is worth a retry, bad credentials are not); see
///   [`PoolError::connect_error`].
#[derive(Debug, thiserror::Error)]
pub enum PoolError<E> {
    /// No connection became free within the acquire timeout.
    #[error("no connection became available within {0:?}")]
    Timeout(Duration),
    /// The pool is closed: pending and later acquires fail with this.
    #[error("the connection pool is closed")]
    Closed,
    /// Opening a connection on this caller's behalf failed; the source is the manager's error.
    #[error("opening a connection failed")]
    Connect(#[source] E),
    /// Opening a connection on this caller's behalf took longer than the connect timeout.
    #[error("opening a connection took longer than {0:?}")]
    ConnectTimeout(Duration),
}

impl<E> PoolError<E> {
    /// The manager's error, when opening a connection failed.
    pub fn connect_error(&self) -> Option<&E> {
        match self {
            Self::Connect(e) => Some(e),
            _ => None,
        }
    }

    /// Whether retrying later may succeed without anyone changing anything: true for the two
    /// timeouts, false for [`Closed`](Self::Closed), and `None` for [`Connect`](Self::Connect),
    /// where only the manager's error can tell.
    pub fn is_transient(&self) -> Option<bool> {
        match self {
            Self::Timeout(_) | Self::ConnectTimeout(_) => Some(true),
            Self::Closed => Some(false),
            Self::Connect(_) => None,
        }
    }
}
