//! The scheduler: one timer thread for every lease of the process, registration, cancellation,
//! firing, metrics and shutdown.
//!
//! Locks, and why none is held while user code runs:
//! - `Shared::timers` (the due-time queue) is held by the timer thread only to pop what is due
//!   and push the next due times; never while a trigger fires.
//! - `Entry::state` (one per lease) is held to decide whether a tick fires or is coalesced and
//!   to record it, and released before [`Trigger::fire`] is called; `firing` then tells a
//!   canceller on another thread to wait for the call to return, so that after
//!   [`Lease`]'s drop returns the trigger never runs again.
//! - `registry` and `retired` are touched by registration, cancellation and metrics only.
//!
//! No code path holds two of them at once, except `spawn` under `Entry::state` (whose future
//! may be dropped inside `spawn`, running the in-flight guard, which takes `timers` only).

use std::cell::Cell;
use std::collections::{BTreeMap, HashMap};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, Weak};
use std::thread::{self, JoinHandle, ThreadId};
use std::time::{Duration, Instant};

use tokio::runtime::Handle;
use tokio::sync::watch;
use tokio::task::AbortHandle;

use crate::error::SchedulerError;
use crate::histogram::Histogram;
use crate::lease::Lease;
use crate::metrics::{DelaySummary, PipelineMetrics, PrecisionMetrics, SchedulerMetrics};
use crate::timer;
use crate::trigger::{Tick, TickCause, Trigger};

/// Threads a scheduler owns: its timer thread, and with [`Scheduler::dedicated`] the one worker
/// of its coordinator runtime.
pub const THREADS: usize = 1;

/// Name of the dedicated coordinator runtime's worker thread.
pub const COORDINATOR_THREAD: &str = "weir-coord";

/// The longest accepted interval; longer ones could overflow the monotonic clock.
pub const MAX_INTERVAL: Duration = Duration::from_secs(365 * 24 * 3600);

/// The shortest accepted interval.
pub const MIN_INTERVAL: Duration = Duration::from_micros(1);

/// How the scheduler trades CPU for precision.
#[derive(Debug, Clone)]
pub struct SchedulerConfig {
    /// Name of the timer thread (the OS shows its first 15 bytes).
    pub thread_name: String,
    /// Longest the timer thread busy-waits before a due time. The margin it actually uses
    /// adapts to how late the OS wakes it (most wake-ups within it), up to this bound. Zero
    /// disables busy-waiting: ticks then start as late as the OS wakes the thread.
    ///
    /// The default, 500 µs, covers the wake-up latency of a thread that slept for a whole
    /// interval on the virtual machines weir was measured on (110–250 µs; a bound of 100 µs
    /// left ticks 6–30 µs late at the median when few pipelines kept the thread idle, see
    /// BENCHMARKS.md). Only what the OS actually needs is spun, and `spin_budget` caps it.
    pub max_spin: Duration,
    /// Share of one core that busy-waiting may use on average (0.0–1.0). Past it, the timer
    /// thread sleeps up to the due time itself until the budget refills, so a dense schedule
    /// (tens of thousands of due times per second) costs precision, not a whole core.
    pub spin_budget: f64,
    /// A timer thread about to sleep longer than twice this wakes once at this much before its
    /// margin and sleeps again, so that the sleep just before a tick is short. Zero disables it.
    ///
    /// The default, 1 ms, is there because of how long a sleep lasted, not how late it ended: a
    /// thread that slept 100 ms and busy-waited its margin still started its tick 0.35–0.48 µs
    /// late, against 0.08–0.10 µs after 1 ms sleeps (see BENCHMARKS.md). It costs one more
    /// wake-up per tick, only where ticks are more than 2 ms apart.
    pub prewake: Duration,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            thread_name: "weir-scheduler".to_owned(),
            max_spin: Duration::from_micros(500),
            spin_budget: 0.25,
            prewake: Duration::from_millis(1),
        }
    }
}

/// The one checkpoint-trigger scheduler of a process.
///
/// Owns one timer thread ([`THREADS`]) whatever the number of leases; trigger futures run on
/// the tokio runtime given at construction. Dropping it (or [`shutdown`](Self::shutdown)) stops
/// and joins the thread, aborts every in-flight trigger future and closes every lease.
pub struct Scheduler {
    shared: Arc<Shared>,
    timer: Option<JoinHandle<()>>,
    /// The coordinator runtime of [`Scheduler::dedicated`], shut down with the scheduler.
    own_runtime: Option<tokio::runtime::Runtime>,
}

/// What the scheduler handle, its leases, the timer thread and in-flight guards share.
pub(crate) struct Shared {
    pub(crate) config: SchedulerConfig,
    pub(crate) runtime: Handle,
    /// Threads this scheduler owns, for the metrics.
    threads: usize,
    pub(crate) timers: Mutex<Timers>,
    /// Wakes the sleeping timer thread: the queue's head moved earlier, or shutdown.
    pub(crate) wake: Condvar,
    /// Live leases by id (ids grow, so this is registration order): for metrics and shutdown.
    registry: Mutex<BTreeMap<u64, Arc<Entry>>>,
    /// Counts of cancelled leases, so that totals never go backwards.
    retired: Mutex<Stats>,
    pub(crate) precision: PrecisionCounters,
}

/// The timer thread's cost counters, written by it alone.
#[derive(Default)]
pub(crate) struct PrecisionCounters {
    pub(crate) spin_ns: AtomicU64,
    pub(crate) sleeps: AtomicU64,
    pub(crate) margin_ns: AtomicU64,
}

/// Key of a due time in the queue: the time, then a sequence number that keeps keys unique and
/// ties in arrival order.
pub(crate) type DueKey = (Instant, u64);

/// The due-time queue.
///
/// Bounded: at most two items per live lease (its next interval boundary and at most one
/// pending `fire_now`); a cancelled lease's items are removed when it is cancelled.
pub(crate) struct Timers {
    pub(crate) queue: BTreeMap<DueKey, Due>,
    keys: HashMap<u64, Keys>,
    next_order: u64,
    pub(crate) shutdown: bool,
}

/// A queued tick.
pub(crate) struct Due {
    pub(crate) entry: Arc<Entry>,
    pub(crate) cause: TickCause,
}

/// Where a lease's items sit in the queue, to remove them on cancel.
struct Keys {
    interval: DueKey,
    fire_now: Option<DueKey>,
}

/// One popped tick, ready to fire.
pub(crate) struct Ready {
    pub(crate) due: Instant,
    pub(crate) item: Due,
    /// Interval boundaries that passed while the scheduler was late: coalesced into this tick.
    pub(crate) missed: u64,
}

/// A lease's shared half.
pub(crate) struct Entry {
    id: u64,
    pub(crate) name: String,
    pub(crate) interval: Duration,
    state: Mutex<EntryState>,
    /// Wakes a canceller on another thread waiting for an in-progress `fire` to return.
    fire_done: Condvar,
    /// Whether the trigger's future is running. Cleared by the future's guard when it ends
    /// (completes, panics or is aborted) without taking `state`: the guard may run inside
    /// `spawn`, under that lock.
    pub(crate) running: AtomicBool,
    /// A `fire_now` tick was coalesced: the guard queues it again when the future ends, so the
    /// request waits by notification, not by polling.
    rerun: AtomicBool,
    /// Fired ticks, for [`FireNow`](crate::FireNow) futures to wait on.
    pub(crate) progress: watch::Sender<Progress>,
}

struct EntryState {
    /// `None` once cancelled: nothing fires after that.
    trigger: Option<Arc<dyn Trigger>>,
    /// The timer thread is inside `trigger.fire` right now.
    firing: bool,
    /// The trigger's running future, owned here so that cancel can abort it.
    in_flight: Option<AbortHandle>,
    /// The tick number the latest `fire_now` request waits for (0: none yet). A pending
    /// `fire_now` tick fires only while `stats.fired` is below it: requests collapse into one
    /// queued tick, and the latest of them must not be dropped because an interval tick
    /// satisfied an earlier one.
    fire_now_wanted: u64,
    stats: Stats,
}

/// Counters of one lease (or of all retired ones).
#[derive(Default, Clone)]
pub(crate) struct Stats {
    pub(crate) fired: u64,
    pub(crate) coalesced: u64,
    pub(crate) panicked: u64,
    pub(crate) delay: Histogram,
}

impl Stats {
    fn add(&mut self, other: &Stats) {
        self.fired += other.fired;
        self.coalesced += other.coalesced;
        self.panicked += other.panicked;
        self.delay.merge(&other.delay);
    }
}

/// What a lease has fired so far, as seen by `fire_now` waiters.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Progress {
    pub(crate) fired: u64,
    pub(crate) last: Option<Tick>,
    /// Set when the lease is cancelled or the scheduler stops: no tick will follow.
    pub(crate) closed: Option<Closed>,
}

/// Why a lease stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Closed {
    Cancelled,
    ShutDown,
}

/// Ids of leases, unique in the process (the `FIRING` thread-local compares them across
/// schedulers).
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// The lease whose trigger this thread is running, if any: a lease dropped from inside its
    /// own trigger must not wait for that trigger to return.
    static FIRING: Cell<Option<u64>> = const { Cell::new(None) };
}

/// Locks, ignoring poisoning: no code panics while holding these locks (trigger calls run
/// outside them, under `catch_unwind`), and the data stays consistent if one did.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Scheduler {
    /// Starts a scheduler with the default configuration; trigger futures run on `runtime`.
    pub fn new(runtime: Handle) -> Result<Self, SchedulerError> {
        Self::with_config(runtime, SchedulerConfig::default())
    }

    /// Starts a scheduler with a runtime of its own for trigger futures: one worker thread
    /// ([`COORDINATOR_THREAD`]) beside the timer thread, on which [`spawn`](Self::spawn) also
    /// runs the checkpoint coordinators.
    ///
    /// This is how a process that runs jobs should start its scheduler. On the jobs' runtime, a
    /// trigger's waiting part (barriers acknowledged, metadata written) would queue behind
    /// every ready data task, so a saturated job would delay its own checkpoints, and every
    /// other job's. The coordinator runtime only ever has checkpoint bookkeeping to run, and
    /// its thread sleeps in between.
    pub fn dedicated(config: SchedulerConfig) -> Result<Self, SchedulerError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .max_blocking_threads(4)
            .thread_name(COORDINATOR_THREAD)
            .enable_all()
            .build()
            .map_err(SchedulerError::Spawn)?;
        let mut scheduler = Self::start(runtime.handle().clone(), config, THREADS + 1)?;
        scheduler.own_runtime = Some(runtime);
        Ok(scheduler)
    }

    /// The runtime trigger futures run on.
    pub fn runtime(&self) -> &Handle {
        &self.shared.runtime
    }

    /// Runs `future` on the runtime trigger futures run on (the coordinator runtime of
    /// [`dedicated`](Self::dedicated)).
    pub fn spawn<F>(&self, future: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.shared.runtime.spawn(future)
    }

    /// Starts a scheduler.
    ///
    /// # Panics
    /// If `config.spin_budget` is not within 0.0–1.0.
    pub fn with_config(runtime: Handle, config: SchedulerConfig) -> Result<Self, SchedulerError> {
        Self::start(runtime, config, THREADS)
    }

    fn start(
        runtime: Handle,
        config: SchedulerConfig,
        threads: usize,
    ) -> Result<Self, SchedulerError> {
        assert!(
            (0.0..=1.0).contains(&config.spin_budget),
            "spin_budget is a share of one core, 0.0 to 1.0, not {}",
            config.spin_budget
        );
        let shared = Arc::new(Shared {
            config,
            runtime,
            threads,
            timers: Mutex::new(Timers {
                queue: BTreeMap::new(),
                keys: HashMap::new(),
                next_order: 0,
                shutdown: false,
            }),
            wake: Condvar::new(),
            registry: Mutex::new(BTreeMap::new()),
            retired: Mutex::new(Stats::default()),
            precision: PrecisionCounters::default(),
        });
        let timer = thread::Builder::new()
            .name(shared.config.thread_name.clone())
            .spawn({
                let shared = Arc::clone(&shared);
                move || timer::run(&shared)
            })
            .map_err(SchedulerError::Spawn)?;
        Ok(Scheduler {
            shared,
            timer: Some(timer),
            own_runtime: None,
        })
    }

    /// Registers a pipeline's trigger, first due one `interval` from now, then at every
    /// interval boundary after that.
    pub fn register(
        &self,
        name: impl Into<String>,
        interval: Duration,
        trigger: impl Trigger,
    ) -> Result<Lease, SchedulerError> {
        let name = name.into();
        let first = Instant::now().checked_add(interval);
        match first {
            Some(first) => self.register_at(name, first, interval, trigger),
            None => Err(SchedulerError::InvalidInterval { name, interval }),
        }
    }

    /// Registers a pipeline's trigger, first due at `first_due` (now or in the past: as soon as
    /// possible), then every `interval` after it. Spreading first due times (as Flink does with
    /// a random initial delay) keeps pipelines started together from firing together.
    pub fn register_at(
        &self,
        name: impl Into<String>,
        first_due: Instant,
        interval: Duration,
        trigger: impl Trigger,
    ) -> Result<Lease, SchedulerError> {
        let name = name.into();
        if !(MIN_INTERVAL..=MAX_INTERVAL).contains(&interval) {
            return Err(SchedulerError::InvalidInterval { name, interval });
        }
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let entry = Arc::new(Entry {
            id,
            name,
            interval,
            state: Mutex::new(EntryState {
                trigger: Some(Arc::new(trigger)),
                firing: false,
                in_flight: None,
                fire_now_wanted: 0,
                stats: Stats::default(),
            }),
            fire_done: Condvar::new(),
            running: AtomicBool::new(false),
            rerun: AtomicBool::new(false),
            progress: watch::Sender::new(Progress {
                fired: 0,
                last: None,
                closed: None,
            }),
        });
        lock(&self.shared.registry).insert(id, Arc::clone(&entry));
        let mut timers = lock(&self.shared.timers);
        if timers.shutdown {
            drop(timers);
            lock(&self.shared.registry).remove(&id);
            return Err(SchedulerError::ShutDown);
        }
        let key = timers.push(first_due, Arc::clone(&entry), TickCause::Interval);
        timers.keys.insert(
            id,
            Keys {
                interval: key,
                fire_now: None,
            },
        );
        let is_head = timers.is_head(key);
        drop(timers);
        if is_head {
            self.shared.notify_timer();
        }
        Ok(Lease {
            entry,
            shared: Arc::clone(&self.shared),
        })
    }

    /// A snapshot of every counter and histogram.
    pub fn metrics(&self) -> SchedulerMetrics {
        self.shared.metrics()
    }

    /// Stops and joins the timer thread, aborts every in-flight trigger future and closes every
    /// lease (their `fire_now` then fails with [`SchedulerError::ShutDown`]). Dropping the
    /// scheduler does the same.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        {
            let mut timers = lock(&self.shared.timers);
            timers.shutdown = true;
            timers.queue.clear();
            timers.keys.clear();
        }
        self.shared.notify_timer();
        if let Some(timer) = self.timer.take() {
            // From inside a trigger (the timer thread itself) there is nothing to join: the
            // thread exits when that trigger returns.
            if timer.thread().id() != thread::current().id() {
                let _ = timer.join();
            }
        }
        let entries = std::mem::take(&mut *lock(&self.shared.registry));
        for entry in entries.values() {
            self.shared.cancel(entry, Closed::ShutDown);
        }
        if let Some(runtime) = self.own_runtime.take() {
            // Without waiting: the scheduler may be dropped on an async task, where a
            // blocking shutdown would panic. Its tasks were aborted above or are coordinators
            // their jobs have already stopped.
            runtime.shutdown_background();
        }
    }

    /// The id of the timer thread, for tests and diagnostics.
    pub fn timer_thread(&self) -> Option<ThreadId> {
        self.timer.as_ref().map(|t| t.thread().id())
    }
}

impl Drop for Scheduler {
    fn drop(&mut self) {
        self.stop();
    }
}

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler")
            .field("thread", &self.shared.config.thread_name)
            .field("leases", &lock(&self.shared.registry).len())
            .finish()
    }
}

impl Timers {
    /// Queues a tick and returns its key.
    fn push(&mut self, due: Instant, entry: Arc<Entry>, cause: TickCause) -> DueKey {
        let key = (due, self.next_order);
        self.next_order += 1;
        self.queue.insert(key, Due { entry, cause });
        key
    }

    fn is_head(&self, key: DueKey) -> bool {
        self.queue.first_key_value().map(|(k, _)| *k) == Some(key)
    }

    /// The earliest due time, if any.
    pub(crate) fn head(&self) -> Option<Instant> {
        self.queue.first_key_value().map(|(k, _)| k.0)
    }

    /// Pops every tick due at or before `upto` into `out`, in due order, and queues the next
    /// interval boundary after `now` of each interval tick (before it fires, so a cancel in
    /// between removes it).
    pub(crate) fn pop_due(&mut self, upto: Instant, now: Instant, out: &mut Vec<Ready>) {
        while let Some(first) = self.queue.first_entry() {
            if first.key().0 > upto {
                break;
            }
            let ((due, _), item) = first.remove_entry();
            let mut missed = 0;
            match item.cause {
                TickCause::Interval => {
                    let (next, skipped) = next_boundary(due, item.entry.interval, now);
                    missed = skipped;
                    let key = self.push(next, Arc::clone(&item.entry), TickCause::Interval);
                    if let Some(keys) = self.keys.get_mut(&item.entry.id) {
                        keys.interval = key;
                    }
                }
                TickCause::FireNow => {
                    if let Some(keys) = self.keys.get_mut(&item.entry.id) {
                        keys.fire_now = None;
                    }
                }
            }
            out.push(Ready { due, item, missed });
        }
    }
}

/// The first boundary `due + k·interval` after `now` (k ≥ 1), and how many boundaries before
/// it (after `due`) have already passed.
fn next_boundary(due: Instant, interval: Duration, now: Instant) -> (Instant, u64) {
    let step = interval.as_nanos().max(1);
    let behind = now.saturating_duration_since(due).as_nanos();
    let k = behind / step + 1;
    let offset = step.saturating_mul(k);
    let offset = Duration::new(
        u64::try_from(offset / 1_000_000_000).unwrap_or(u64::MAX),
        (offset % 1_000_000_000) as u32,
    );
    match due.checked_add(offset) {
        Some(next) => (next, u64::try_from(k - 1).unwrap_or(u64::MAX)),
        // Unreachable with intervals up to MAX_INTERVAL; stay well-defined anyway.
        None => (now + interval, 0),
    }
}

/// Ends the lease of a trigger future when it finishes, panics or is aborted.
struct InFlightGuard {
    entry: Arc<Entry>,
    shared: Weak<Shared>,
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        self.entry.running.store(false, Ordering::SeqCst);
        if self.entry.rerun.swap(false, Ordering::SeqCst)
            && let Some(shared) = self.shared.upgrade()
        {
            shared.queue_fire_now(&self.entry, Instant::now());
        }
    }
}

impl Shared {
    pub(crate) fn notify_timer(&self) {
        self.wake.notify_one();
    }

    /// Touches what firing `ready` will touch, to have it in cache when it is due: the lease's
    /// state and delay histogram, the trigger's reference count (firing clones it), the flags
    /// firing reads, and the clock.
    pub(crate) fn prewarm(&self, ready: &Ready) {
        let entry = &ready.item.entry;
        let state = lock(&entry.state);
        let trigger = state.trigger.clone();
        std::hint::black_box((trigger.is_some(), state.stats.delay.count()));
        drop(state);
        drop(trigger);
        std::hint::black_box((
            entry.running.load(Ordering::Relaxed),
            entry.rerun.load(Ordering::Relaxed),
            Instant::now(),
        ));
    }

    /// Queues a `fire_now` tick due at `due`, unless one is already pending (requests collapse:
    /// one pending tick satisfies them all).
    pub(crate) fn queue_fire_now(&self, entry: &Arc<Entry>, due: Instant) {
        let mut timers = lock(&self.timers);
        if timers.shutdown {
            return;
        }
        match timers.keys.get(&entry.id) {
            Some(keys) if keys.fire_now.is_none() => {}
            _ => return, // cancelled, or already pending
        }
        let key = timers.push(due, Arc::clone(entry), TickCause::FireNow);
        if let Some(keys) = timers.keys.get_mut(&entry.id) {
            keys.fire_now = Some(key);
        }
        let is_head = timers.is_head(key);
        drop(timers);
        if is_head {
            self.notify_timer();
        }
    }

    /// Fires one popped tick on the timer thread, or coalesces it.
    pub(crate) fn fire(self: &Arc<Self>, ready: Ready) {
        let Ready { due, item, missed } = ready;
        let Due { entry, cause } = item;
        let mut state = lock(&entry.state);
        let Some(trigger) = state.trigger.clone() else {
            return; // cancelled after it was popped
        };
        state.stats.coalesced += missed;
        if cause == TickCause::FireNow && state.stats.fired >= state.fire_now_wanted {
            return; // ticks that started after every request so far have satisfied them
        }
        if cause == TickCause::FireNow {
            // Set before looking at `running`: either the future's guard sees it and queues
            // the request again, or we see the future ended (see InFlightGuard).
            entry.rerun.store(true, Ordering::SeqCst);
        }
        if entry.running.load(Ordering::SeqCst)
            || (cause == TickCause::FireNow && !entry.rerun.swap(false, Ordering::SeqCst))
        {
            // Still running: coalesced, never queued. (A `fire_now` whose request the guard of a
            // just-ended future took has been queued again by that guard.)
            state.stats.coalesced += 1;
            return;
        }
        let started = Instant::now();
        state.stats.fired += 1;
        state
            .stats
            .delay
            .record_duration(started.saturating_duration_since(due));
        let tick = Tick {
            seq: state.stats.fired,
            due,
            started,
            cause,
        };
        state.firing = true;
        drop(state);

        let result = FIRING.with(|firing| {
            let outer = firing.replace(Some(entry.id));
            let result = catch_unwind(AssertUnwindSafe(|| trigger.fire(tick)));
            firing.set(outer);
            result
        });

        let mut state = lock(&entry.state);
        state.firing = false;
        let cancelled = state.trigger.is_none();
        // A future of a lease cancelled meanwhile is dropped after the lock is released: its
        // drop is user code.
        let mut discarded = None;
        match result {
            Err(_) => state.stats.panicked += 1,
            Ok(Some(future)) if !cancelled => {
                entry.running.store(true, Ordering::SeqCst);
                let guard = InFlightGuard {
                    entry: Arc::clone(&entry),
                    shared: Arc::downgrade(self),
                };
                let task = self.runtime.spawn(async move {
                    let _guard = guard;
                    future.await;
                });
                state.in_flight = Some(task.abort_handle());
            }
            Ok(future) => discarded = future,
        }
        if !cancelled {
            entry.progress.send_replace(Progress {
                fired: state.stats.fired,
                last: Some(tick),
                closed: None,
            });
        }
        drop(state);
        if cancelled {
            entry.fire_done.notify_all();
        }
        drop(discarded);
    }

    /// Records a `fire_now` request: returns the tick number that satisfies it and a receiver
    /// of the lease's progress, or why the lease is closed.
    pub(crate) fn fire_now_target(
        &self,
        entry: &Entry,
    ) -> Result<(u64, watch::Receiver<Progress>), Closed> {
        let mut state = lock(&entry.state);
        if state.trigger.is_none() {
            return Err(entry.progress.borrow().closed.unwrap_or(Closed::Cancelled));
        }
        // A tick firing right now was counted before its trigger was called, so the target is
        // a tick that starts after this request. Taken under the lock that counts ticks, so no
        // tick can start between reading the count and recording the request.
        let target = state.stats.fired + 1;
        state.fire_now_wanted = state.fire_now_wanted.max(target);
        Ok((target, entry.progress.subscribe()))
    }

    /// Cancels a lease: after this returns its trigger never runs again, its in-flight future
    /// is aborted and its queued ticks are gone. Idempotent.
    pub(crate) fn cancel(&self, entry: &Arc<Entry>, why: Closed) {
        let (trigger, in_flight, stats) = {
            let mut state = lock(&entry.state);
            let Some(trigger) = state.trigger.take() else {
                return;
            };
            entry.rerun.store(false, Ordering::SeqCst);
            let inside_own_trigger = FIRING.with(Cell::get) == Some(entry.id);
            while state.firing && !inside_own_trigger {
                state = entry
                    .fire_done
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            (
                trigger,
                state.in_flight.take(),
                std::mem::take(&mut state.stats),
            )
        };
        entry.progress.send_modify(|p| p.closed = Some(why));
        if let Some(task) = in_flight {
            task.abort();
        }
        {
            let mut timers = lock(&self.timers);
            if let Some(keys) = timers.keys.remove(&entry.id) {
                timers.queue.remove(&keys.interval);
                if let Some(key) = keys.fire_now {
                    timers.queue.remove(&key);
                }
            }
        }
        lock(&self.registry).remove(&entry.id);
        lock(&self.retired).add(&stats);
        // Last: dropping the trigger may run arbitrary code.
        drop(trigger);
    }

    fn metrics(&self) -> SchedulerMetrics {
        let entries: Vec<Arc<Entry>> = lock(&self.registry).values().cloned().collect();
        let mut total = lock(&self.retired).clone();
        let pipelines = entries
            .iter()
            .map(|entry| {
                let state = lock(&entry.state);
                let stats = &state.stats;
                total.add(stats);
                PipelineMetrics {
                    name: entry.name.clone(),
                    interval_us: u64::try_from(entry.interval.as_micros()).unwrap_or(u64::MAX),
                    fired: stats.fired,
                    coalesced: stats.coalesced,
                    panicked: stats.panicked,
                    running: entry.running.load(Ordering::SeqCst),
                    delay: DelaySummary::from(&stats.delay),
                }
            })
            .collect();
        SchedulerMetrics {
            threads: self.threads,
            leases: entries.len(),
            fired: total.fired,
            coalesced: total.coalesced,
            panicked: total.panicked,
            delay: DelaySummary::from(&total.delay),
            precision: PrecisionMetrics {
                spin_us: self.precision.spin_ns.load(Ordering::Relaxed) / 1_000,
                sleeps: self.precision.sleeps.load(Ordering::Relaxed),
                margin_us: self.precision.margin_ns.load(Ordering::Relaxed) as f64 / 1_000.0,
            },
            pipelines,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_boundary_skips_passed_boundaries_and_counts_them() {
        let t0 = Instant::now();
        let ms = Duration::from_millis(1);
        assert_eq!(next_boundary(t0, 10 * ms, t0), (t0 + 10 * ms, 0));
        assert_eq!(next_boundary(t0, 10 * ms, t0 + 9 * ms), (t0 + 10 * ms, 0));
        assert_eq!(next_boundary(t0, 10 * ms, t0 + 10 * ms), (t0 + 20 * ms, 1));
        assert_eq!(next_boundary(t0, 10 * ms, t0 + 35 * ms), (t0 + 40 * ms, 3));
    }
}
