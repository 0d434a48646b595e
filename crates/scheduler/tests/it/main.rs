//! Behaviour of the shared scheduler, through its public API. One binary (modules below).
//!
//! No test sleeps and then asserts on timing: each waits (polling, with a generous deadline)
//! for counts to be reached, and asserts on counts and order. The only timing assertions are
//! lower bounds on delays a test itself imposes (by holding the timer thread), which a loaded
//! machine can only exceed. How fast the scheduler is belongs to the benchmark.

mod cancel;
mod coalescing;
mod delays;
mod lifecycle;
mod savepoint;
mod threads;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::runtime::Runtime;
use weir_scheduler::{BoxFuture, PipelineMetrics, Scheduler, SchedulerConfig, Tick};

/// How long any wait for a count may take before the test fails (generous: CI is shared).
pub const DEADLINE: Duration = Duration::from_secs(20);

/// Workers of the runtimes tests build.
pub const WORKERS: usize = 2;

/// A runtime of [`WORKERS`] workers named `name` (at most 15 bytes, to be countable in /proc),
/// returned once they have all started (a thread names itself when it starts).
pub fn runtime(name: &str) -> Runtime {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(WORKERS)
        .thread_name(name)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    wait_until("the runtime's workers have started", || {
        threads_named(name) == WORKERS
    });
    rt
}

/// A scheduler whose timer thread is named `name` (at most 15 bytes), returned once that
/// thread has started.
pub fn scheduler(rt: &Runtime, name: &str) -> Scheduler {
    let s = Scheduler::with_config(
        rt.handle().clone(),
        SchedulerConfig {
            thread_name: name.to_owned(),
            ..SchedulerConfig::default()
        },
    )
    .expect("a scheduler");
    wait_until("the timer thread has started", || threads_named(name) == 1);
    s
}

/// Polls `cond` every millisecond until it holds; fails the test after [`DEADLINE`].
pub fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < DEADLINE, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The metrics of the pipeline called `name`.
pub fn pipeline(scheduler: &Scheduler, name: &str) -> PipelineMetrics {
    scheduler
        .metrics()
        .pipelines
        .into_iter()
        .find(|p| p.name == name)
        .unwrap_or_else(|| panic!("no pipeline `{name}` in the metrics"))
}

/// Threads of this process whose name is exactly `name`.
pub fn threads_named(name: &str) -> usize {
    assert!(
        name.len() <= 15,
        "Linux keeps 15 bytes of a thread name: `{name}`"
    );
    std::fs::read_dir("/proc/self/task")
        .expect("/proc/self/task")
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|comm| comm.trim_end() == name)
        .count()
}

/// A trigger that counts its calls and returns no future (bookkeeping only).
pub fn counting() -> (
    Arc<AtomicU64>,
    impl Fn(Tick) -> Option<BoxFuture> + Send + Sync,
) {
    let calls = Arc::new(AtomicU64::new(0));
    let counter = Arc::clone(&calls);
    (calls, move |_tick: Tick| {
        counter.fetch_add(1, Ordering::SeqCst);
        None
    })
}

/// Sets its flag when dropped: shows that a future was dropped (aborted or finished).
pub struct DropFlag(pub Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Holds the timer thread inside a trigger until released: lets a test make the scheduler late
/// at a known point, or act while a batch of ticks is in progress. (Blocking in a trigger
/// breaks the trigger contract on purpose.)
pub struct Gate {
    entered: Receiver<()>,
    release: SyncSender<()>,
}

impl Gate {
    /// Waits until the gate's trigger holds the timer thread.
    pub fn wait_entered(&self) {
        self.entered
            .recv_timeout(DEADLINE)
            .expect("the gate's trigger runs");
    }

    /// Lets the timer thread go on.
    pub fn release(&self) {
        self.release.send(()).expect("the gate's trigger waits");
    }
}

/// A gate and its trigger, which holds the timer thread on each of its ticks until
/// [`Gate::release`] (or until the gate is dropped).
pub fn gate() -> (Gate, impl Fn(Tick) -> Option<BoxFuture> + Send + Sync) {
    let (entered_tx, entered) = sync_channel(1);
    let (release, release_rx) = sync_channel(1);
    let ends = Mutex::new((entered_tx, release_rx));
    let trigger = move |_tick: Tick| -> Option<BoxFuture> {
        let ends = ends.lock().expect("gate");
        let _ = ends.0.try_send(());
        // An error means the gate was dropped: go on.
        let _ = ends.1.recv();
        None
    };
    (Gate { entered, release }, trigger)
}
