//! The async connection pool: [`Pool`] handles, the [`PoolBuilder`], [`PooledConnection`]s, and
//! the tasks the pool owns.
//!
//! Every state change (acquire, return, discard, connect outcome, maintenance, close) is an
//! `Action` submitted to the pool's combiner; the follow-up work it leaves (handing a connection
//! to a waiter, failing one, opening or closing a connection) runs afterwards in the submitting
//! caller, outside the combining section.
//!
//! The pool owns four kinds of tasks, all spawned on the runtime it was built in, tracked by one
//! [`TaskTracker`] and cancelled by one [`CancellationToken`] when the pool closes (or when its last
//! handle and connection are gone): the maintenance pass, the resumer of yielded combining runs,
//! connect attempts, and returns whose recycle or check had to wait for I/O.

use std::fmt;
use std::future::Future;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::task::{Context, Waker};
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::{Notify, oneshot};
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::combiner::{Combiner, CombinerConfig};
use crate::error::PoolError;
use crate::exec::Exec;
use crate::manager::Manager;
use crate::metrics::{Metrics, PoolMetrics};
use crate::state::{Action, ConnectOutcome, FollowUp, Limits, Live, PoolState};

/// A pool of connections made by a [`Manager`]. Cheap to clone: clones share one pool.
///
/// Built with [`Pool::builder`]; see the crate docs for an example.
pub struct Pool<M: Manager> {
    shared: Arc<Shared<M>>,
}

impl<M: Manager> Clone for Pool<M> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<M: Manager> fmt::Debug for Pool<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pool")
            .field("metrics", &self.metrics())
            .finish_non_exhaustive()
    }
}

/// Builds a [`Pool`]. Every setter checks its value and panics with a message on a bad one.
#[derive(Debug)]
pub struct PoolBuilder<M> {
    manager: M,
    max_size: usize,
    min_idle: usize,
    acquire_timeout: Duration,
    connect_timeout: Duration,
    check_timeout: Duration,
    max_lifetime: Option<Duration>,
    idle_timeout: Option<Duration>,
    maintenance_interval: Duration,
    combiner: CombinerConfig,
}

impl<M: Manager> PoolBuilder<M> {
    fn new(manager: M) -> Self {
        Self {
            manager,
            max_size: 10,
            min_idle: 0,
            acquire_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
            check_timeout: Duration::from_secs(5),
            max_lifetime: Some(Duration::from_secs(30 * 60)),
            idle_timeout: Some(Duration::from_secs(10 * 60)),
            maintenance_interval: Duration::from_secs(1),
            combiner: CombinerConfig::default(),
        }
    }

    /// At most this many connections open (in use, idle or being opened). Default 10.
    ///
    /// A connection being closed gives up its place when the pool decides to close it, just
    /// before it is dropped (outside the combining section), so a replacement opened by another
    /// thread can overlap its drop by that long.
    ///
    /// # Panics
    /// If `max_size` is zero.
    pub fn max_size(mut self, max_size: usize) -> Self {
        assert!(
            max_size > 0,
            "a pool needs room for at least one connection"
        );
        self.max_size = max_size;
        self
    }

    /// Keep at least this many connections idle (opened in the background), as room allows.
    /// Default 0. Must not exceed `max_size` (checked by [`build`](Self::build)).
    pub fn min_idle(mut self, min_idle: usize) -> Self {
        self.min_idle = min_idle;
        self
    }

    /// How long [`Pool::acquire`] waits for a connection. Default 30 s.
    ///
    /// # Panics
    /// If `timeout` is zero.
    pub fn acquire_timeout(mut self, timeout: Duration) -> Self {
        assert!(!timeout.is_zero(), "the acquire timeout must be positive");
        self.acquire_timeout = timeout;
        self
    }

    /// How long one connect attempt may take. Default 10 s.
    ///
    /// # Panics
    /// If `timeout` is zero.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        assert!(!timeout.is_zero(), "the connect timeout must be positive");
        self.connect_timeout = timeout;
        self
    }

    /// How long recycling and checking a returned connection may take together before it is
    /// closed as broken. Default 5 s.
    ///
    /// # Panics
    /// If `timeout` is zero.
    pub fn check_timeout(mut self, timeout: Duration) -> Self {
        assert!(!timeout.is_zero(), "the check timeout must be positive");
        self.check_timeout = timeout;
        self
    }

    /// Close connections this long after they were opened (when next idle or returned), `None`
    /// for never. Default 30 min.
    ///
    /// # Panics
    /// If the lifetime is zero.
    pub fn max_lifetime(mut self, lifetime: Option<Duration>) -> Self {
        assert!(
            lifetime.is_none_or(|d| !d.is_zero()),
            "the maximum lifetime must be positive (or None)"
        );
        self.max_lifetime = lifetime;
        self
    }

    /// Close connections idle this long, down to `min_idle`, `None` for never. Default 10 min.
    ///
    /// # Panics
    /// If the timeout is zero.
    pub fn idle_timeout(mut self, timeout: Option<Duration>) -> Self {
        assert!(
            timeout.is_none_or(|d| !d.is_zero()),
            "the idle timeout must be positive (or None)"
        );
        self.idle_timeout = timeout;
        self
    }

    /// How often the maintenance pass runs (lifetimes, idle eviction, minimum idle). Default 1 s.
    ///
    /// # Panics
    /// If `interval` is zero.
    pub fn maintenance_interval(mut self, interval: Duration) -> Self {
        assert!(
            !interval.is_zero(),
            "the maintenance interval must be positive"
        );
        self.maintenance_interval = interval;
        self
    }

    /// How the combiner that runs the pool's state changes yields. Default
    /// [`CombinerConfig::default`].
    pub fn combiner(mut self, config: CombinerConfig) -> Self {
        self.combiner = config;
        self
    }

    /// Builds the pool and starts its tasks (the maintenance pass runs at once, opening `min_idle`
    /// connections).
    ///
    /// # Panics
    /// If `min_idle` exceeds `max_size`, or when called outside a tokio runtime.
    pub fn build(self) -> Pool<M> {
        let config = self.combiner;
        self.build_with(|state, resume| {
            Exec::Combiner(Box::new(Combiner::new(state, config, move || {
                resume.post()
            })))
        })
    }

    /// [`build`](Self::build), with the pool's state run by the executor `exec` makes of it and
    /// of the hook a yielding combining run calls.
    pub(crate) fn build_with(
        self,
        exec: impl FnOnce(PoolState<M>, ResumePoster) -> Exec<PoolState<M>>,
    ) -> Pool<M> {
        assert!(
            self.min_idle <= self.max_size,
            "min_idle ({}) cannot exceed max_size ({})",
            self.min_idle,
            self.max_size
        );
        let runtime = Handle::current();
        let shutdown = CancellationToken::new();
        let tasks = TaskTracker::new();
        let resume_signal = Arc::new(Notify::new());
        let metrics = Arc::new(Metrics::new(self.max_size));
        let limits = Limits {
            max_size: self.max_size,
            min_idle: self.min_idle,
            max_lifetime: self.max_lifetime,
            idle_timeout: self.idle_timeout,
        };
        let state = PoolState::new(limits, Arc::clone(&metrics), Instant::now());
        let exec = exec(
            state,
            ResumePoster {
                signal: Arc::clone(&resume_signal),
                shutdown: shutdown.clone(),
            },
        );
        let shared = Arc::new(Shared {
            manager: self.manager,
            exec,
            metrics,
            acquire_timeout: self.acquire_timeout,
            connect_timeout: self.connect_timeout,
            check_timeout: self.check_timeout,
            closed: AtomicBool::new(false),
            shutdown: shutdown.clone(),
            tasks: tasks.clone(),
            runtime: runtime.clone(),
        });
        let pool = Arc::downgrade(&shared);
        tasks.spawn_on(
            resumer(pool.clone(), resume_signal, shutdown.clone()),
            &runtime,
        );
        tasks.spawn_on(
            maintenance(pool, shutdown, self.maintenance_interval),
            &runtime,
        );
        Pool { shared }
    }
}

impl<M: Manager> Pool<M> {
    /// A builder with the defaults, for connections made by `manager`.
    pub fn builder(manager: M) -> PoolBuilder<M> {
        PoolBuilder::new(manager)
    }

    /// A connection, waiting up to the configured acquire timeout. Waiting callers are served in
    /// the order they started waiting.
    ///
    /// # Errors
    /// [`PoolError::Timeout`] if none became free in time; [`PoolError::Closed`] once the pool is
    /// closed; [`PoolError::Connect`] or [`PoolError::ConnectTimeout`] if the connection opened
    /// for this caller failed.
    pub async fn acquire(&self) -> Result<PooledConnection<M>, PoolError<M::Error>> {
        self.acquire_timeout(self.shared.acquire_timeout).await
    }

    /// [`acquire`](Self::acquire) with another timeout than the configured one.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire).
    pub async fn acquire_timeout(
        &self,
        timeout: Duration,
    ) -> Result<PooledConnection<M>, PoolError<M::Error>> {
        let shared = &self.shared;
        if shared.closed.load(Ordering::Acquire) {
            return Err(PoolError::Closed);
        }
        let start = Instant::now();
        let (reply, mut answer) = oneshot::channel();
        shared.submit(Action::Acquire { reply, now: start });
        let result = match spin_for_answer(&mut answer) {
            Some(result) => result,
            None => {
                Waiting::new(shared, answer)
                    .wait(start.checked_add(timeout), timeout)
                    .await
            }
        };
        if result.is_ok() {
            shared.metrics.record_acquire(start.elapsed());
        }
        result
    }

    /// Closes the pool: pending and later acquires fail with [`PoolError::Closed`], idle
    /// connections are closed, and the pool's tasks (connect attempts, maintenance, returns in
    /// progress) are cancelled and awaited. Connections in use are closed when they come back.
    /// Calling it again waits for the same shutdown.
    pub async fn close(&self) {
        let shared = &self.shared;
        if !shared.closed.swap(true, Ordering::AcqRel) {
            shared.submit(Action::Close);
            shared.shutdown.cancel();
            shared.tasks.close();
        }
        shared.tasks.wait().await;
        // A run that yielded just before the shutdown may have had its resume cancelled. The
        // resume hook refuses to post now, so this drains to the end.
        shared.resume();
    }

    /// Whether [`close`](Self::close) was called.
    pub fn is_closed(&self) -> bool {
        self.shared.closed.load(Ordering::Acquire)
    }

    /// Gauges, counters, acquire latency and the combiner's longest run.
    pub fn metrics(&self) -> PoolMetrics {
        self.shared.metrics.snapshot(self.shared.exec.stats())
    }

    /// The manager that makes this pool's connections.
    pub fn manager(&self) -> &M {
        &self.shared.manager
    }
}

/// A connection on loan from a [`Pool`]; dereferences to the manager's connection.
///
/// Dropping it returns it: the manager's [`recycle`](Manager::recycle) and
/// [`check`](Manager::check) run (inline if they complete without waiting, else in a pool task,
/// bounded by the check timeout), then the connection goes to the oldest waiter or back to the
/// idle list; if either fails, it is closed and replaced. A holder that knows the connection is
/// unusable (an I/O error, a protocol desync) calls [`mark_broken`](Self::mark_broken) first, and
/// it is closed and replaced without further checks.
pub struct PooledConnection<M: Manager> {
    /// `Some` until the guard is dropped (or the connection handed back to the state).
    live: Option<Live<M::Connection>>,
    shared: Arc<Shared<M>>,
    broken: bool,
}

impl<M: Manager> PooledConnection<M> {
    fn live(&self) -> &Live<M::Connection> {
        self.live
            .as_ref()
            .expect("a pooled connection holds its connection until dropped")
    }

    /// Marks the connection broken: when dropped, it is closed (counted in
    /// [`PoolMetrics::broken`]) and the pool opens a replacement if callers are waiting or the
    /// idle minimum asks for one.
    pub fn mark_broken(&mut self) {
        self.broken = true;
    }

    /// Whether [`mark_broken`](Self::mark_broken) was called.
    pub fn is_broken(&self) -> bool {
        self.broken
    }

    /// The connection's id: unique within its pool, in opening order.
    pub fn id(&self) -> u64 {
        self.live().id
    }
}

impl<M: Manager> Deref for PooledConnection<M> {
    type Target = M::Connection;

    fn deref(&self) -> &M::Connection {
        &self.live().conn
    }
}

impl<M: Manager> DerefMut for PooledConnection<M> {
    fn deref_mut(&mut self) -> &mut M::Connection {
        &mut self
            .live
            .as_mut()
            .expect("a pooled connection holds its connection until dropped")
            .conn
    }
}

impl<M: Manager> fmt::Debug for PooledConnection<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PooledConnection")
            .field("id", &self.live.as_ref().map(|live| live.id))
            .field("broken", &self.broken)
            .finish_non_exhaustive()
    }
}

impl<M: Manager> Drop for PooledConnection<M> {
    fn drop(&mut self) {
        let Some(live) = self.live.take() else {
            return;
        };
        if self.broken || self.shared.closed.load(Ordering::Acquire) {
            self.shared.submit(Action::Discard {
                live,
                broken: self.broken,
            });
        } else {
            Returning::start(&self.shared, live);
        }
    }
}

/// What the pool's handles, connections and tasks share.
pub(crate) struct Shared<M: Manager> {
    manager: M,
    exec: Exec<PoolState<M>>,
    metrics: Arc<Metrics>,
    acquire_timeout: Duration,
    connect_timeout: Duration,
    check_timeout: Duration,
    /// Set by `close`; read without the combiner so closed-pool acquires fail fast and returns
    /// skip recycling.
    closed: AtomicBool,
    /// Cancels every task the pool owns.
    shutdown: CancellationToken,
    /// Every task the pool spawned; `close` waits for them.
    tasks: TaskTracker,
    /// The runtime the pool was built in: connections may be dropped on threads outside it.
    runtime: Handle,
}

impl<M: Manager> Drop for Shared<M> {
    fn drop(&mut self) {
        // The last handle and connection are gone: stop the maintenance and resume tasks (they
        // hold only weak references, and would otherwise sleep until their next tick).
        self.shutdown.cancel();
    }
}

impl<M: Manager> Shared<M> {
    fn submit(self: &Arc<Self>, action: Action<M>) {
        let follow_ups = self.exec.submit(action);
        if !follow_ups.is_empty() {
            self.run_follow_ups(follow_ups);
        }
    }

    fn resume(self: &Arc<Self>) {
        let follow_ups = self.exec.resume();
        self.run_follow_ups(follow_ups);
    }

    /// Runs follow-up work, outside the combining section. A connection chosen for a waiter that
    /// has left meanwhile goes back through the combiner, whose follow-ups are run here too.
    fn run_follow_ups(self: &Arc<Self>, mut batch: Vec<FollowUp<M>>) {
        while !batch.is_empty() {
            let mut more = Vec::new();
            for follow_up in batch {
                match follow_up {
                    FollowUp::Deliver { reply, live } => {
                        let conn = PooledConnection {
                            live: Some(live),
                            shared: Arc::clone(self),
                            broken: false,
                        };
                        if let Err(Ok(mut conn)) = reply.send(Ok(conn))
                            && let Some(live) = conn.live.take()
                        {
                            more.extend(self.exec.submit(Action::Return { live }));
                        }
                    }
                    FollowUp::Fail { reply, error } => {
                        // A waiter that has left needs no answer.
                        let _ = reply.send(Err(error));
                    }
                    FollowUp::Connect => self.spawn_connect(),
                    FollowUp::Close(live) => drop(live),
                    FollowUp::Unclaimed(error) => match &error {
                        PoolError::Connect(cause) => tracing::warn!(
                            error = %cause,
                            "opening a pooled connection failed (no caller was waiting for it)"
                        ),
                        other => tracing::warn!(
                            error = %other,
                            "opening a pooled connection failed (no caller was waiting for it)"
                        ),
                    },
                }
            }
            batch = more;
        }
    }

    fn spawn_connect(self: &Arc<Self>) {
        let opening = Opening {
            shared: Arc::clone(self),
            done: false,
        };
        let shutdown = self.shutdown.clone();
        let limit = self.connect_timeout;
        self.tasks.spawn_on(
            async move {
                let attempt = tokio::time::timeout(limit, opening.shared.manager.connect());
                let outcome = tokio::select! {
                    biased;
                    () = shutdown.cancelled() => ConnectOutcome::Abandoned,
                    result = attempt => match result {
                        Ok(Ok(conn)) => ConnectOutcome::Opened(conn),
                        Ok(Err(error)) => ConnectOutcome::Failed(error),
                        Err(_elapsed) => ConnectOutcome::TimedOut(limit),
                    },
                };
                opening.finish(outcome);
            },
            &self.runtime,
        );
    }
}

/// A connect attempt in flight: reports exactly one outcome, also when its task is dropped
/// unpolled (the runtime shutting down), so the state's count of connections being opened stays
/// right.
struct Opening<M: Manager> {
    shared: Arc<Shared<M>>,
    done: bool,
}

impl<M: Manager> Opening<M> {
    fn finish(mut self, outcome: ConnectOutcome<M::Connection, M::Error>) {
        self.done = true;
        self.shared.submit(Action::Connected {
            outcome,
            now: Instant::now(),
        });
    }
}

impl<M: Manager> Drop for Opening<M> {
    fn drop(&mut self) {
        if !self.done {
            self.shared.submit(Action::Connected {
                outcome: ConnectOutcome::Abandoned,
                now: Instant::now(),
            });
        }
    }
}

/// A connection on its way back: recycled, checked, then returned; discarded if the return is cut
/// short (check timeout, pool closing, runtime shutting down).
struct Returning<M: Manager> {
    shared: Arc<Shared<M>>,
    live: Option<Live<M::Connection>>,
}

impl<M: Manager> Returning<M> {
    /// Polls the return once in place (no task, no allocation beyond the future's box, when the
    /// manager's recycle and check complete at once, as no-op ones do), else finishes it in a
    /// pool task bounded by the check timeout.
    fn start(shared: &Arc<Shared<M>>, live: Live<M::Connection>) {
        let returning = Self {
            shared: Arc::clone(shared),
            live: Some(live),
        };
        let mut task = Box::pin(returning.run());
        // A future may be polled with any waker; the spawned task's first poll registers the
        // real one. The connection may be dropped on a thread outside the pool's runtime (or
        // inside another one): the manager's recycle and check may use tokio's timers or I/O,
        // so they are polled inside the pool's runtime.
        let ready = {
            let _runtime = shared.runtime.enter();
            task.as_mut()
                .poll(&mut Context::from_waker(Waker::noop()))
                .is_ready()
        };
        if ready {
            return;
        }
        let shutdown = shared.shutdown.clone();
        let limit = shared.check_timeout;
        shared.tasks.spawn_on(
            async move {
                tokio::select! {
                    biased;
                    () = shutdown.cancelled() => {}
                    _ = tokio::time::timeout(limit, task) => {}
                }
            },
            &shared.runtime,
        );
    }

    async fn run(mut self) {
        let Self { shared, live } = &mut self;
        let healthy = match live.as_mut() {
            Some(live) => {
                shared.manager.recycle(&mut live.conn).await.is_ok()
                    && shared.manager.check(&mut live.conn).await.is_ok()
            }
            None => return,
        };
        if let Some(live) = self.live.take() {
            let action = if healthy {
                Action::Return { live }
            } else {
                tracing::debug!(
                    connection = live.id,
                    "a returned connection failed its recycle or check"
                );
                Action::Discard { live, broken: true }
            };
            self.shared.submit(action);
        }
    }
}

impl<M: Manager> Drop for Returning<M> {
    fn drop(&mut self) {
        if let Some(live) = self.live.take() {
            // Cut short: by the check timeout (broken) or by the pool closing (not broken).
            let broken = !self.shared.closed.load(Ordering::Acquire);
            self.shared.submit(Action::Discard { live, broken });
        }
    }
}

/// An acquire that could not be answered at once, waiting for its reply. Keeps the waiter gauge,
/// and tells the state when the caller gives up (timeout, or the acquire future dropped).
struct Waiting<'a, M: Manager> {
    shared: &'a Arc<Shared<M>>,
    answer: oneshot::Receiver<Result<PooledConnection<M>, PoolError<M::Error>>>,
    answered: bool,
}

impl<'a, M: Manager> Waiting<'a, M> {
    fn new(
        shared: &'a Arc<Shared<M>>,
        answer: oneshot::Receiver<Result<PooledConnection<M>, PoolError<M::Error>>>,
    ) -> Self {
        shared.metrics.waiters.fetch_add(1, Ordering::Relaxed);
        Self {
            shared,
            answer,
            answered: false,
        }
    }

    /// Waits until `deadline`; `None` (a timeout too long to represent, such as `Duration::MAX`)
    /// waits without one.
    async fn wait(
        mut self,
        deadline: Option<Instant>,
        limit: Duration,
    ) -> Result<PooledConnection<M>, PoolError<M::Error>> {
        let answer = match deadline {
            Some(deadline) => tokio::time::timeout_at(deadline, &mut self.answer).await,
            None => Ok((&mut self.answer).await),
        };
        let result = match answer {
            Ok(Ok(result)) => result,
            // The reply was dropped unanswered: the pool's state is gone.
            Ok(Err(_)) => Err(PoolError::Closed),
            // Served at the last moment?
            Err(_elapsed) => match self.answer.try_recv() {
                Ok(result) => result,
                Err(_) => {
                    Metrics::count(&self.shared.metrics.timeouts);
                    return Err(PoolError::Timeout(limit));
                }
            },
        };
        self.answered = true;
        result
    }
}

impl<M: Manager> Drop for Waiting<'_, M> {
    fn drop(&mut self) {
        self.shared.metrics.waiters.fetch_sub(1, Ordering::Relaxed);
        if !self.answered {
            // From here on the state sees this waiter as gone (a connection sent in the meantime
            // is dropped with the receiver, and its guard returns it).
            self.answer.close();
            self.shared.submit(Action::Cancelled);
        }
    }
}

/// How many times [`spin_for_answer`] looks before the task waits: about 1.3 µs of `pause` on the
/// project's machine.
const ANSWER_SPINS: u32 = 128;

/// The answer to an acquire, if it comes within a short spin. When another caller is combining,
/// our action is applied within its run and the connection handed over right after, usually in
/// well under a microsecond; spinning that long (as a mutex does before it sleeps) spares the
/// task a waker registration and the cross-thread wake-up. A caller that must wait for a
/// connection to come back loses the spin, a microsecond against a wait that is far longer.
fn spin_for_answer<T>(answer: &mut oneshot::Receiver<T>) -> Option<T> {
    for spin in 0..=ANSWER_SPINS {
        match answer.try_recv() {
            Ok(result) => return Some(result),
            // The reply was dropped unanswered: let the waiting path report it.
            Err(oneshot::error::TryRecvError::Closed) => return None,
            Err(oneshot::error::TryRecvError::Empty) if spin < ANSWER_SPINS => {
                std::hint::spin_loop();
            }
            Err(oneshot::error::TryRecvError::Empty) => {}
        }
    }
    None
}

/// What a combining run that reaches its limit calls: wakes the pool's [`resumer`] task, which
/// resumes the run as its own scheduled poll.
pub(crate) struct ResumePoster {
    signal: Arc<Notify>,
    shutdown: CancellationToken,
}

impl ResumePoster {
    /// Posts a resume; `false` once the pool is shut down, when nobody would run it (the run
    /// then carries on instead).
    pub(crate) fn post(&self) -> bool {
        if self.shutdown.is_cancelled() {
            return false;
        }
        self.signal.notify_one();
        true
    }
}

/// Runs yielded combining runs to completion: each `notify` from the resume hook is one more run,
/// as its own scheduled poll so the worker can serve other tasks between runs.
async fn resumer<M: Manager>(
    pool: Weak<Shared<M>>,
    signal: Arc<Notify>,
    shutdown: CancellationToken,
) {
    loop {
        tokio::select! {
            biased;
            () = shutdown.cancelled() => return,
            () = signal.notified() => {}
        }
        let Some(shared) = pool.upgrade() else {
            return;
        };
        shared.resume();
        drop(shared);
        tokio::task::yield_now().await;
    }
}

/// The periodic pass: closes expired and long-idle connections and opens up to the idle minimum.
/// Its first tick is immediate, so `min_idle` connections open as soon as the pool is built.
async fn maintenance<M: Manager>(
    pool: Weak<Shared<M>>,
    shutdown: CancellationToken,
    every: Duration,
) {
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            biased;
            () = shutdown.cancelled() => return,
            _ = ticks.tick() => {}
        }
        let Some(shared) = pool.upgrade() else {
            return;
        };
        shared.submit(Action::Maintain {
            now: Instant::now(),
        });
    }
}
