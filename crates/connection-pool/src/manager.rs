//! How the pool opens, checks and resets connections of one kind.

use std::future::Future;

/// Opens, checks and resets connections for a [`Pool`](crate::Pool).
///
/// The pool calls these outside its critical section, from its own tasks or from the task that
/// returns a connection; it never holds two calls for the same connection at once. Closing a
/// connection is dropping it.
///
/// # Example
/// A manager whose connections are counters:
/// ```
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use weir_connection_pool::Manager;
///
/// struct Counters(AtomicU64);
///
/// impl Manager for Counters {
///     type Connection = u64;
///     type Error = std::io::Error;
///
///     async fn connect(&self) -> Result<u64, std::io::Error> {
///         Ok(self.0.fetch_add(1, Ordering::Relaxed))
///     }
/// }
/// ```
pub trait Manager: Send + Sync + 'static {
    /// The connection handed out by the pool.
    type Connection: Send + 'static;
    /// What opening, checking or recycling can fail with. A failed connect reaches the waiting
    /// caller as [`PoolError::Connect`](crate::PoolError::Connect), so it should say whether the
    /// failure is worth retrying.
    type Error: std::error::Error + Send + Sync + 'static;

    /// Opens a new connection. Bounded by the pool's connect timeout and cancelled when the pool
    /// closes.
    fn connect(&self) -> impl Future<Output = Result<Self::Connection, Self::Error>> + Send;

    /// Whether a returned connection still works (a ping). An error closes it and counts it as
    /// broken. Runs on every return, after [`recycle`](Self::recycle): keep it cheap, or make it
    /// a no-op and rely on callers marking connections broken.
    fn check(
        &self,
        conn: &mut Self::Connection,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send {
        let _ = conn;
        async { Ok(()) }
    }

    /// Resets per-session state (open transactions, temporary settings) before the connection is
    /// reused. An error closes it and counts it as broken.
    fn recycle(
        &self,
        conn: &mut Self::Connection,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send {
        let _ = conn;
        async { Ok(()) }
    }
}
