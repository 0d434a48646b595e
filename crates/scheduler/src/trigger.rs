//! What a lease runs on each tick: the [`Trigger`] trait and the [`Tick`] it is given.

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

/// The waiting part of a trigger: a future spawned on the process's tokio runtime.
///
/// The same type as `futures::future::BoxFuture<'static, ()>`.
pub type BoxFuture = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// Why a tick fired.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum TickCause {
    /// An interval boundary of the lease's schedule.
    Interval,
    /// [`Lease::fire_now`](crate::Lease::fire_now) (a savepoint, say).
    FireNow,
}

/// One firing of a trigger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tick {
    /// Firings of this lease so far, this one included (1 for the first).
    pub seq: u64,
    /// When the tick was due: an interval boundary, or the moment `fire_now` was called.
    pub due: Instant,
    /// When the timer thread called [`Trigger::fire`]; never before `due`.
    pub started: Instant,
    pub cause: TickCause,
}

impl Tick {
    /// The scheduling delay: actual start minus due time.
    pub fn delay(&self) -> Duration {
        self.started.saturating_duration_since(self.due)
    }
}

/// The work a pipeline's lease does on each tick.
///
/// [`fire`](Self::fire) runs *on the scheduler's timer thread*, inline, with no hop to another
/// thread: it must only do bookkeeping that never blocks (bump a checkpoint id, `try_send` a
/// message, take a pending savepoint request) — every microsecond it spends delays the ticks of
/// other pipelines that are due at the same time. Anything that waits (for barriers to be
/// acknowledged, for storage) belongs in the returned future, which is spawned on the tokio
/// runtime, holds no thread while it waits, and is owned by the lease: cancelling the lease
/// aborts it. While that future runs, further ticks of the same lease are coalesced (counted,
/// not queued).
///
/// A panic in `fire` is caught and counted (`panicked` in the metrics); the schedule goes on.
/// `fire` may register leases, call `fire_now` or drop leases, its own included.
///
/// Closures `Fn(Tick) -> Option<BoxFuture>` are triggers.
pub trait Trigger: Send + Sync + 'static {
    /// Runs the synchronous part of one tick and returns the part that waits, if any.
    fn fire(&self, tick: Tick) -> Option<BoxFuture>;
}

impl<F> Trigger for F
where
    F: Fn(Tick) -> Option<BoxFuture> + Send + Sync + 'static,
{
    fn fire(&self, tick: Tick) -> Option<BoxFuture> {
        self(tick)
    }
}
