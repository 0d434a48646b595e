//! The pool's state machine: what each action does to the idle list, the waiters and the counts.
//!
//! It runs inside the combiner, so it does no I/O, takes no lock and wakes nobody: delivering a
//! connection, failing a waiter, opening and closing connections are [`FollowUp`]s, run by the
//! caller once the combining section is over.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::combiner::CombinedState;
use crate::error::PoolError;
use crate::manager::Manager;
use crate::metrics::Metrics;
use crate::pool::PooledConnection;

/// An open connection and what the pool knows about it.
pub(crate) struct Live<C> {
    pub(crate) conn: C,
    /// Unique within the pool, in opening order.
    pub(crate) id: u64,
    /// When it was opened: the clock for the maximum lifetime.
    pub(crate) created: Instant,
    /// When it last went idle: the clock for idle eviction.
    pub(crate) idle_since: Instant,
}

impl<C> Live<C> {
    pub(crate) fn expired(&self, now: Instant, max_lifetime: Option<Duration>) -> bool {
        max_lifetime.is_some_and(|limit| now.saturating_duration_since(self.created) >= limit)
    }
}

/// Where an acquire's answer goes.
pub(crate) type Reply<M> =
    oneshot::Sender<Result<PooledConnection<M>, PoolError<<M as Manager>::Error>>>;

/// How a connect attempt ended.
pub(crate) enum ConnectOutcome<C, E> {
    Opened(C),
    Failed(E),
    TimedOut(Duration),
    /// The attempt was cancelled (the pool closed, or its runtime shut down).
    Abandoned,
}

/// A change to the pool's state.
pub(crate) enum Action<M: Manager> {
    /// A caller wants a connection.
    Acquire { reply: Reply<M>, now: Instant },
    /// A holder returned a healthy connection (recycled and checked). No timestamp: reading the
    /// clock costs 30–40 ns here, so returns use the state's clock (see `PoolState::clock`).
    Return { live: Live<M::Connection> },
    /// A holder's connection is to be closed: broken, failed its recycle or check, or its return
    /// was cut short.
    Discard {
        live: Live<M::Connection>,
        broken: bool,
    },
    /// A connect attempt ended.
    Connected {
        outcome: ConnectOutcome<M::Connection, M::Error>,
        now: Instant,
    },
    /// A waiter gave up (timed out or was dropped).
    Cancelled,
    /// The periodic pass: lifetimes, idle eviction, minimum idle.
    Maintain { now: Instant },
    /// Close the pool.
    Close,
}

/// Work left by an action, run outside the combining section.
pub(crate) enum FollowUp<M: Manager> {
    /// Hand `live` to the waiter behind `reply` (counted in use already).
    Deliver {
        reply: Reply<M>,
        live: Live<M::Connection>,
    },
    /// Fail a waiter.
    Fail {
        reply: Reply<M>,
        error: PoolError<M::Error>,
    },
    /// Open a connection (counted as opening already) and send the outcome back as
    /// [`Action::Connected`].
    Connect,
    /// Close a connection (counted as closed already).
    Close(Live<M::Connection>),
    /// A connect attempt failed with nobody waiting to hear it: log it.
    Unclaimed(PoolError<M::Error>),
}

/// The configured bounds the state machine enforces.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    pub(crate) max_size: usize,
    pub(crate) min_idle: usize,
    pub(crate) max_lifetime: Option<Duration>,
    pub(crate) idle_timeout: Option<Duration>,
}

/// The pool's bookkeeping. Invariants: `idle.len() + in_use + opening <= max_size`; when a live
/// waiter is queued, no connection is idle (a connection going idle goes to the first live waiter
/// instead).
pub(crate) struct PoolState<M: Manager> {
    limits: Limits,
    /// Most recently returned at the back: acquires take from the back (warm connections first),
    /// so surplus connections age at the front, where eviction looks.
    idle: VecDeque<Live<M::Connection>>,
    /// Callers waiting for a connection, oldest first: served strictly in this order. Bounded by
    /// the number of `acquire` calls in flight; each leaves when served, when it times out (it then
    /// sends [`Action::Cancelled`]) or when the pool closes.
    waiters: VecDeque<Reply<M>>,
    in_use: usize,
    opening: usize,
    closed: bool,
    next_id: u64,
    /// Waiters that gave up since the last compaction: compacting when they could be half the
    /// queue keeps the cost of leaving amortised O(1).
    cancelled: usize,
    /// The latest time an action brought (acquires, connect outcomes and the maintenance pass
    /// carry one): the time of a return. Behind the true time by at most one maintenance interval
    /// when the pool is quiet, which is ample precision for lifetimes and idle timeouts of
    /// minutes.
    clock: Instant,
    metrics: Arc<Metrics>,
}

impl<M: Manager> CombinedState for PoolState<M> {
    type Action = Action<M>;
    type FollowUp = FollowUp<M>;

    fn apply(&mut self, action: Action<M>, follow_ups: &mut Vec<FollowUp<M>>) {
        match action {
            Action::Acquire { reply, now } => {
                self.tick(now);
                self.acquire(reply, now, follow_ups);
            }
            Action::Return { live } => {
                self.release_one();
                self.place_returned(live, self.clock, follow_ups);
            }
            Action::Discard { live, broken } => {
                self.release_one();
                if broken {
                    Metrics::count(&self.metrics.broken);
                }
                self.close(live, follow_ups);
                self.replenish(follow_ups);
            }
            Action::Connected { outcome, now } => {
                self.tick(now);
                self.connected(outcome, now, follow_ups);
            }
            Action::Cancelled => self.cancelled(),
            Action::Maintain { now } => {
                self.tick(now);
                self.maintain(now, follow_ups);
            }
            Action::Close => self.shut(follow_ups),
        }
        self.publish_gauges();
    }
}

impl<M: Manager> PoolState<M> {
    pub(crate) fn new(limits: Limits, metrics: Arc<Metrics>, now: Instant) -> Self {
        Self {
            limits,
            idle: VecDeque::with_capacity(limits.max_size.min(1024)),
            waiters: VecDeque::new(),
            in_use: 0,
            opening: 0,
            closed: false,
            next_id: 0,
            cancelled: 0,
            clock: now,
            metrics,
        }
    }

    fn tick(&mut self, now: Instant) {
        self.clock = self.clock.max(now);
    }

    fn total(&self) -> usize {
        self.idle.len() + self.in_use + self.opening
    }

    fn release_one(&mut self) {
        debug_assert!(self.in_use > 0, "a connection came back that was not out");
        self.in_use = self.in_use.saturating_sub(1);
    }

    fn acquire(&mut self, reply: Reply<M>, now: Instant, follow_ups: &mut Vec<FollowUp<M>>) {
        if self.closed {
            follow_ups.push(FollowUp::Fail {
                reply,
                error: PoolError::Closed,
            });
            return;
        }
        if reply.is_closed() {
            return; // gave up before we got to it
        }
        // Waiters first: a newcomer never overtakes them, even if a connection is idle (which the
        // invariant rules out anyway).
        if self.waiters.is_empty() {
            while let Some(live) = self.idle.pop_back() {
                if live.expired(now, self.limits.max_lifetime) {
                    self.close(live, follow_ups);
                    continue;
                }
                self.in_use += 1;
                follow_ups.push(FollowUp::Deliver { reply, live });
                self.replenish(follow_ups);
                return;
            }
        }
        self.waiters.push_back(reply);
        self.replenish(follow_ups);
    }

    /// The first waiter that is still waiting, if any.
    fn next_waiter(&mut self) -> Option<Reply<M>> {
        while let Some(reply) = self.waiters.pop_front() {
            if !reply.is_closed() {
                return Some(reply);
            }
        }
        None
    }

    /// Puts a connection that is not in use (fresh, or returned healthy) where it belongs: closed
    /// if the pool is, to the first waiter, or idle.
    fn place(
        &mut self,
        mut live: Live<M::Connection>,
        now: Instant,
        follow_ups: &mut Vec<FollowUp<M>>,
    ) {
        if self.closed {
            self.close(live, follow_ups);
        } else if let Some(reply) = self.next_waiter() {
            self.in_use += 1;
            follow_ups.push(FollowUp::Deliver { reply, live });
        } else {
            live.idle_since = now;
            self.idle.push_back(live);
        }
    }

    fn place_returned(
        &mut self,
        live: Live<M::Connection>,
        now: Instant,
        follow_ups: &mut Vec<FollowUp<M>>,
    ) {
        if !self.closed && live.expired(now, self.limits.max_lifetime) {
            self.close(live, follow_ups);
            self.replenish(follow_ups);
        } else {
            self.place(live, now, follow_ups);
        }
    }

    fn connected(
        &mut self,
        outcome: ConnectOutcome<M::Connection, M::Error>,
        now: Instant,
        follow_ups: &mut Vec<FollowUp<M>>,
    ) {
        self.opening = self.opening.saturating_sub(1);
        let error = match outcome {
            ConnectOutcome::Opened(conn) => {
                Metrics::count(&self.metrics.opened);
                let live = Live {
                    conn,
                    id: self.next_id,
                    created: now,
                    idle_since: now,
                };
                self.next_id += 1;
                self.place(live, now, follow_ups);
                return;
            }
            // Cancelled on purpose: nothing to report, and no retry (that could spin against a
            // runtime that is shutting down).
            ConnectOutcome::Abandoned => return,
            ConnectOutcome::Failed(e) => PoolError::Connect(e),
            ConnectOutcome::TimedOut(limit) => PoolError::ConnectTimeout(limit),
        };
        Metrics::count(&self.metrics.connect_failures);
        // The oldest waiter hears about it (the error is not `Clone`, so only one can), and can
        // decide whether to retry. No automatic retry: that would hammer a database that is down;
        // later acquires and the maintenance pass try again.
        match self.next_waiter() {
            Some(reply) => follow_ups.push(FollowUp::Fail { reply, error }),
            None => follow_ups.push(FollowUp::Unclaimed(error)),
        }
    }

    fn cancelled(&mut self) {
        self.cancelled += 1;
        if self.cancelled * 2 >= self.waiters.len() {
            self.waiters.retain(|reply| !reply.is_closed());
            self.cancelled = 0;
        }
    }

    fn maintain(&mut self, now: Instant, follow_ups: &mut Vec<FollowUp<M>>) {
        if self.closed {
            return;
        }
        if let Some(limit) = self.limits.max_lifetime
            && self
                .idle
                .iter()
                .any(|live| now.saturating_duration_since(live.created) >= limit)
        {
            let idle = std::mem::take(&mut self.idle);
            for live in idle {
                if live.expired(now, Some(limit)) {
                    self.close(live, follow_ups);
                } else {
                    self.idle.push_back(live);
                }
            }
        }
        if let Some(timeout) = self.limits.idle_timeout {
            // Down to the idle minimum, counting idle connections only: counting those in use
            // too would evict below the minimum and have `replenish` reopen them at once.
            while self.idle.len() > self.limits.min_idle {
                match self.idle.front() {
                    Some(oldest) if now.saturating_duration_since(oldest.idle_since) >= timeout => {
                        if let Some(live) = self.idle.pop_front() {
                            self.close(live, follow_ups);
                        }
                    }
                    _ => break,
                }
            }
        }
        self.replenish(follow_ups);
    }

    fn shut(&mut self, follow_ups: &mut Vec<FollowUp<M>>) {
        self.closed = true;
        for reply in self.waiters.drain(..) {
            follow_ups.push(FollowUp::Fail {
                reply,
                error: PoolError::Closed,
            });
        }
        while let Some(live) = self.idle.pop_front() {
            self.close(live, follow_ups);
        }
    }

    fn close(&mut self, live: Live<M::Connection>, follow_ups: &mut Vec<FollowUp<M>>) {
        Metrics::count(&self.metrics.closed);
        follow_ups.push(FollowUp::Close(live));
    }

    /// Opens connections while there is room and either more waiters than connections on the way,
    /// or fewer idle (and opening) connections than the minimum.
    fn replenish(&mut self, follow_ups: &mut Vec<FollowUp<M>>) {
        if self.closed {
            return;
        }
        while self.total() < self.limits.max_size
            && (self.waiters.len() > self.opening
                || self.idle.len() + self.opening < self.limits.min_idle)
        {
            self.opening += 1;
            follow_ups.push(FollowUp::Connect);
        }
    }

    fn publish_gauges(&self) {
        self.metrics.in_use.store(self.in_use, Relaxed);
        self.metrics.idle.store(self.idle.len(), Relaxed);
        self.metrics.opening.store(self.opening, Relaxed);
    }
}
