//! A pipeline's lease on the scheduler, and `fire_now` requests.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::error::SchedulerError;
use crate::scheduler::{Closed, Entry, Progress, Shared};
use crate::trigger::Tick;

/// A pipeline's registration with the [`Scheduler`](crate::Scheduler): owns its pending ticks
/// and its in-flight trigger future.
///
/// Dropping it (or [`cancel`](Self::cancel)) removes only this lease's ticks and aborts only its
/// future; other leases are untouched. When the drop returns, the trigger will not run again: a
/// call of it in progress on the timer thread is waited for (a short, non-blocking call by
/// contract), unless the drop happens inside that very call.
pub struct Lease {
    pub(crate) entry: Arc<Entry>,
    pub(crate) shared: Arc<Shared>,
}

impl Lease {
    /// The pipeline's name, as registered.
    pub fn name(&self) -> &str {
        &self.entry.name
    }

    /// The interval between scheduled ticks.
    pub fn interval(&self) -> Duration {
        self.entry.interval
    }

    /// Whether the trigger's future (the waiting part of the last tick) is still running;
    /// ticks due meanwhile are coalesced.
    pub fn is_running(&self) -> bool {
        self.entry.running.load(Ordering::SeqCst)
    }

    /// Asks for one tick as soon as possible, outside the interval schedule (for a savepoint).
    ///
    /// The request is made when this is called; awaiting the returned [`FireNow`] is optional
    /// and yields the tick that ran. If the trigger's future is still running, the tick is
    /// coalesced (and counted) like any other, and the request then waits — by notification,
    /// holding no thread — for that future to end, and fires right after it. Requests made
    /// before a tick fires collapse into it: at most one is ever pending. Any tick that starts
    /// after the request satisfies it (a scheduled one may come first).
    pub fn fire_now(&self) -> FireNow {
        let request = self.shared.fire_now_target(&self.entry);
        if request.is_ok() {
            self.shared.queue_fire_now(&self.entry, Instant::now());
        }
        FireNow::new(self.entry.name.clone(), request)
    }

    /// Cancels the lease: the same as dropping it.
    pub fn cancel(self) {}
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.shared.cancel(&self.entry, Closed::Cancelled);
    }
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease")
            .field("name", &self.entry.name)
            .field("interval", &self.entry.interval)
            .finish()
    }
}

/// A `fire_now` request that has been made; await it for the tick that satisfied it.
///
/// Fails with [`SchedulerError::Cancelled`] if the lease is dropped first, and with
/// [`SchedulerError::ShutDown`] if the scheduler stops first. Dropping it does not withdraw the
/// request. It holds no thread while it waits.
pub struct FireNow {
    wait: Pin<Box<dyn Future<Output = Result<Tick, SchedulerError>> + Send + 'static>>,
}

impl FireNow {
    /// Waits until a tick numbered `target` or later has fired, or the lease closes.
    fn new(name: String, request: Result<(u64, watch::Receiver<Progress>), Closed>) -> Self {
        let closed = move |why| match why {
            Closed::Cancelled => SchedulerError::Cancelled(name.clone()),
            Closed::ShutDown => SchedulerError::ShutDown,
        };
        FireNow {
            wait: Box::pin(async move {
                let (target, mut progress) = request.map_err(&closed)?;
                let seen: Progress = progress
                    .wait_for(|p| p.fired >= target || p.closed.is_some())
                    .await
                    .map(|p| *p)
                    .map_err(|_| SchedulerError::ShutDown)?;
                match (seen.last, seen.closed) {
                    (Some(tick), _) if seen.fired >= target => Ok(tick),
                    (_, Some(why)) => Err(closed(why)),
                    // Unreachable: woken with neither; report the lease as gone.
                    _ => Err(closed(Closed::Cancelled)),
                }
            }),
        }
    }
}

impl Future for FireNow {
    type Output = Result<Tick, SchedulerError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.wait.as_mut().poll(cx)
    }
}

impl std::fmt::Debug for FireNow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FireNow").finish_non_exhaustive()
    }
}
