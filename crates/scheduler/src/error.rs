//! What can go wrong when scheduling checkpoint triggers.

use std::time::Duration;

/// Why a scheduler operation failed.
///
/// - [`InvalidInterval`](Self::InvalidInterval) is bad job input: fail the job with the message.
/// - [`ShutDown`](Self::ShutDown) and [`Cancelled`](Self::Cancelled) are lifecycle outcomes: the
///   process or the pipeline is going away, so stop triggering; retrying cannot help.
/// - [`Spawn`](Self::Spawn) is the operating system refusing a thread (limits, memory): an
///   external failure, worth reporting and retrying later.
#[derive(Debug, thiserror::Error)]
pub enum SchedulerError {
    /// A checkpoint interval of zero, or so long that due times would overflow the clock.
    #[error(
        "pipeline `{name}`: checkpoint interval {interval:?} is not usable: \
         it must be at least 1µs and at most {max:?}",
        max = crate::scheduler::MAX_INTERVAL
    )]
    InvalidInterval { name: String, interval: Duration },
    /// The scheduler was shut down (or dropped): nothing more will fire.
    #[error("the checkpoint scheduler has shut down")]
    ShutDown,
    /// The lease was cancelled (dropped) before the requested tick ran.
    #[error("the trigger lease of pipeline `{0}` was cancelled")]
    Cancelled(String),
    /// A thread could not be started.
    #[error("cannot start a scheduler thread: {0}")]
    Spawn(#[source] std::io::Error),
}
