use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::Notify;
use weir_scheduler::{BoxFuture, Tick};

use crate::{pipeline, runtime, scheduler, wait_until};

#[test]
fn ticks_behind_a_slow_body_are_coalesced_and_counted_without_backlog() {
    let rt = runtime("coalesce-rt");
    let s = scheduler(&rt, "coalesce-sched");
    // The body's waiting part lasts until released: far longer than the 2 ms interval.
    let release = Arc::new(Notify::new());
    let calls = Arc::new(AtomicU64::new(0));
    let _lease = {
        let (release, calls) = (Arc::clone(&release), Arc::clone(&calls));
        s.register_at(
            "slow",
            Instant::now(),
            Duration::from_millis(2),
            move |_t: Tick| {
                calls.fetch_add(1, Ordering::SeqCst);
                let release = Arc::clone(&release);
                Some(Box::pin(async move { release.notified().await }) as BoxFuture)
            },
        )
        .expect("register")
    };

    wait_until("ten ticks are coalesced behind the first body", || {
        pipeline(&s, "slow").coalesced >= 10
    });
    let m = pipeline(&s, "slow");
    assert_eq!((calls.load(Ordering::SeqCst), m.fired), (1, 1));
    assert!(m.running);

    release.notify_one();
    wait_until("the next boundary fires the trigger again", || {
        calls.load(Ordering::SeqCst) >= 2
    });
    let coalesced = pipeline(&s, "slow").coalesced;
    wait_until("more ticks coalesce behind the second body", || {
        pipeline(&s, "slow").coalesced >= coalesced + 5
    });
    // The coalesced ticks were never replayed: one firing after the body ended, not one per
    // coalesced tick.
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    let m = pipeline(&s, "slow");
    assert_eq!(m.fired, 2);
    assert_eq!(m.delay.count, 2);
    let total = s.metrics();
    assert_eq!((total.fired, total.coalesced >= 15), (2, true));
}

#[test]
fn fire_now_requests_while_busy_collapse_into_one_tick() {
    let rt = runtime("collapse-rt");
    let s = scheduler(&rt, "collapse-sched");
    let release = Arc::new(Notify::new());
    let calls = Arc::new(AtomicU64::new(0));
    let lease = {
        let (release, calls) = (Arc::clone(&release), Arc::clone(&calls));
        s.register_at(
            "busy",
            Instant::now(),
            Duration::from_secs(3600),
            move |_t: Tick| {
                calls.fetch_add(1, Ordering::SeqCst);
                let release = Arc::clone(&release);
                Some(Box::pin(async move { release.notified().await }) as BoxFuture)
            },
        )
        .expect("register")
    };
    wait_until("the first tick is in flight", || lease.is_running());

    let requests: Vec<_> = (0..100).map(|_| lease.fire_now()).collect();
    wait_until("the request is coalesced behind the running body", || {
        pipeline(&s, "busy").coalesced >= 1
    });
    assert_eq!(calls.load(Ordering::SeqCst), 1);

    release.notify_one();
    let ticks: Vec<Tick> = rt.block_on(async {
        let mut ticks = Vec::new();
        for request in requests {
            ticks.push(request.await.expect("fired"));
        }
        ticks
    });
    assert!(
        ticks.iter().all(|t| t.seq == 2),
        "one tick satisfied all 100"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}
