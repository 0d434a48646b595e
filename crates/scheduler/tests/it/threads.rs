use std::time::{Duration, Instant};

use weir_scheduler::{BoxFuture, Lease, Tick};

use crate::{runtime, scheduler, threads_named, wait_until};

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
