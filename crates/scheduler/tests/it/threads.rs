use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use weir_scheduler::{BoxFuture, Lease, Scheduler, SchedulerConfig, Tick};

use crate::{pipeline, runtime, scheduler, threads_named, wait_until};

/// Leases in the large phase: thousands, as on a host running many jobs.
const LEASES: usize = 5_000;
/// Their interval: with first due times spread over it, 50,000 ticks a second in all.
const INTERVAL: Duration = Duration::from_millis(100);

fn lease(s: &weir_scheduler::Scheduler, i: usize, first: Instant) -> Lease {
    s.register_at(
        format!("p{i}"),
        first,
        INTERVAL,
        |_t: Tick| -> Option<BoxFuture> {
            // A waiting part on every tick: it must hold no thread either.
            Some(Box::pin(tokio::time::sleep(Duration::from_millis(1))))
        },
    )
    .expect("register")
}

#[test]
fn thread_count_stays_constant_and_small_from_1_to_5000_leases() {
    let rt = runtime("threads-rt");
    let s = scheduler(&rt, "threads-sched");
    let threads = || threads_named("threads-rt") + threads_named("threads-sched");

    let start = Instant::now();
    let mut leases = vec![lease(&s, 0, start)];
    wait_until("one lease fires twice", || {
        s.metrics().pipelines[0].fired >= 2
    });
    let with_one = threads();
    assert_eq!(with_one, 3, "two runtime workers and one timer thread");
    assert_eq!(s.metrics().threads, 1);

    // Thousands more, their first due times spread over one interval.
    let now = Instant::now();
    for i in 1..LEASES {
        let offset = INTERVAL.mul_f64(i as f64 / LEASES as f64);
        leases.push(lease(&s, i, now + offset));
    }
    wait_until("every lease fires twice", || {
        let m = s.metrics();
        m.leases == LEASES && m.pipelines.iter().all(|p| p.fired >= 2)
    });
    assert_eq!(
        threads(),
        with_one,
        "no thread added by thousands of leases"
    );
    assert!(threads() <= 4);
    let m = s.metrics();
    assert_eq!(m.threads, 1);
    assert!(m.fired >= 2 * LEASES as u64);

    // Cancelling them all gives nothing back to join: there was nothing per lease.
    drop(leases);
    assert_eq!(s.metrics().leases, 0);
    assert_eq!(threads(), with_one);
}

/// A runtime of one worker kept busy by a task that never yields, as a job's data tasks keep
/// its runtime busy; the flag stops it.
fn saturated(name: &str) -> (tokio::runtime::Runtime, std::sync::Arc<AtomicBool>) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name(name)
        .enable_all()
        .build()
        .expect("a runtime");
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let spinning = stop.clone();
    rt.spawn(async move {
        while !spinning.load(Ordering::Relaxed) {
            std::hint::spin_loop();
        }
    });
    (rt, stop)
}

/// Registers a lease whose waiting part records the thread it ran on.
fn recording(s: &Scheduler) -> (Lease, std::sync::Arc<Mutex<Vec<String>>>) {
    let ran = std::sync::Arc::new(Mutex::new(Vec::new()));
    let record = ran.clone();
    let lease = s
        .register("recorded", Duration::from_millis(5), move |_t: Tick| {
            let record = record.clone();
            Some(Box::pin(async move {
                let name = std::thread::current().name().unwrap_or("").to_owned();
                record.lock().expect("no test panics holding it").push(name);
            }) as BoxFuture)
        })
        .expect("register");
    (lease, ran)
}

#[test]
fn a_dedicated_scheduler_runs_trigger_futures_beside_a_saturated_runtime() {
    // The control: on the saturated runtime itself, the waiting parts never run (every tick
    // after the first finds the first still pending and is coalesced).
    let (busy, stop) = saturated("sat-control");
    let on_busy = Scheduler::new(busy.handle().clone()).expect("scheduler");
    let (lease, ran) = recording(&on_busy);
    wait_until("ticks are coalesced behind the stuck future", || {
        pipeline(&on_busy, "recorded").coalesced >= 5
    });
    assert!(
        ran.lock().expect("no test panics holding it").is_empty(),
        "nothing ran on the busy runtime"
    );
    drop(lease);
    drop(on_busy);
    stop.store(true, Ordering::Relaxed);
    drop(busy);

    // With a runtime of its own, they run on its thread, however busy the jobs' runtime is.
    let (_busy, stop) = saturated("sat-dedicated");
    let s = Scheduler::dedicated(SchedulerConfig {
        thread_name: "dedicated-sched".to_owned(),
        ..SchedulerConfig::default()
    })
    .expect("scheduler");
    assert_eq!(
        s.metrics().threads,
        2,
        "the timer thread and the coordinator"
    );
    let (lease, ran) = recording(&s);
    wait_until("five waiting parts ran", || {
        ran.lock().expect("no test panics holding it").len() >= 5
    });
    assert!(
        ran.lock()
            .expect("no test panics holding it")
            .iter()
            .all(|n| n == weir_scheduler::scheduler::COORDINATOR_THREAD),
        "{:?}",
        ran.lock().expect("no test panics holding it")
    );
    let spawned = s.spawn(async { std::thread::current().name().map(str::to_owned) });
    let name = block_on(spawned).expect("the spawned task ran");
    assert_eq!(
        name.as_deref(),
        Some(weir_scheduler::scheduler::COORDINATOR_THREAD)
    );
    drop(lease);

    // Dropped on an async task (as a server drops it), it shuts its runtime down without
    // panicking, and its threads go.
    let other = runtime("drop-rt");
    other.block_on(async move { drop(s) });
    wait_until("the coordinator thread is gone", || {
        threads_named(weir_scheduler::scheduler::COORDINATOR_THREAD) == 0
    });
    stop.store(true, Ordering::Relaxed);
}

/// Waits for `f` on a thread that drives no runtime.
fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime")
        .block_on(f)
}
