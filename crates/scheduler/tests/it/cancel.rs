use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use weir_scheduler::{BoxFuture, Lease, Tick};

use crate::{DropFlag, counting, pipeline, runtime, scheduler, wait_until};

#[test]
fn cancelling_a_lease_stops_only_its_trigger_and_aborts_its_future() {
    let rt = runtime("cancel-rt");
    let s = scheduler(&rt, "cancel-sched");
    let every = Duration::from_millis(2);

    // A's future never ends by itself: it is in flight until aborted.
    let a_calls = Arc::new(AtomicU64::new(0));
    let a_dropped = Arc::new(AtomicBool::new(false));
    let a = {
        let (calls, dropped) = (Arc::clone(&a_calls), Arc::clone(&a_dropped));
        s.register_at(
            "a",
            Instant::now(),
            every,
            move |_t: Tick| -> Option<BoxFuture> {
                calls.fetch_add(1, Ordering::SeqCst);
                let flag = DropFlag(Arc::clone(&dropped));
                Some(Box::pin(async move {
                    let _flag = flag;
                    std::future::pending::<()>().await;
                }))
            },
        )
        .expect("register a")
    };
    let (b_calls, b_trigger) = counting();
    let (c_calls, c_trigger) = counting();
    let _b = s
        .register_at("b", Instant::now(), every, b_trigger)
        .expect("register b");
    let _c = s
        .register_at("c", Instant::now(), every, c_trigger)
        .expect("register c");

    wait_until("a's later ticks coalesce behind its running future", || {
        pipeline(&s, "a").coalesced >= 2
    });
    assert_eq!(a_calls.load(Ordering::SeqCst), 1);
    assert!(a.is_running());

    drop(a);
    let a_after_cancel = a_calls.load(Ordering::SeqCst);
    wait_until("a's in-flight future is aborted", || {
        a_dropped.load(Ordering::SeqCst)
    });
    let (b0, c0) = (
        b_calls.load(Ordering::SeqCst),
        c_calls.load(Ordering::SeqCst),
    );
    wait_until("b and c fire ten more times each", || {
        b_calls.load(Ordering::SeqCst) >= b0 + 10 && c_calls.load(Ordering::SeqCst) >= c0 + 10
    });
    assert_eq!(
        a_calls.load(Ordering::SeqCst),
        a_after_cancel,
        "a cancelled trigger never fires again"
    );
    let names: Vec<String> = s.metrics().pipelines.into_iter().map(|p| p.name).collect();
    assert_eq!(names, ["b", "c"]);
}

#[test]
fn a_lease_dropped_inside_its_own_trigger_does_not_deadlock() {
    let rt = runtime("selfdrop-rt");
    let s = scheduler(&rt, "selfdrop-sched");
    let slot: Arc<std::sync::Mutex<Option<Lease>>> = Arc::default();
    let calls = Arc::new(AtomicU64::new(0));
    // The call in which the lease dropped itself (0: not yet). Ticks may come before the test
    // has put the lease in its slot; those find nothing to drop.
    let dropped_in = Arc::new(AtomicU64::new(0));
    let lease = {
        let (slot, calls, dropped_in) = (
            Arc::clone(&slot),
            Arc::clone(&calls),
            Arc::clone(&dropped_in),
        );
        s.register(
            "self-dropping",
            Duration::from_millis(1),
            move |_t: Tick| {
                let call = calls.fetch_add(1, Ordering::SeqCst) + 1;
                // The lease drops itself from inside its own trigger.
                let lease = slot.lock().expect("slot").take();
                if lease.is_some() {
                    drop(lease);
                    dropped_in.store(call, Ordering::SeqCst);
                }
                None
            },
        )
        .expect("register")
    };
    *slot.lock().expect("slot") = Some(lease);
    wait_until("the lease is gone", || s.metrics().leases == 0);
    let dropped_in = dropped_in.load(Ordering::SeqCst);
    assert!(dropped_in >= 1);
    assert_eq!(calls.load(Ordering::SeqCst), dropped_in);

    // The timer thread goes on; the dropped trigger stays silent.
    let (other, trigger) = counting();
    let _other = s
        .register("other", Duration::from_millis(1), trigger)
        .expect("register");
    wait_until("another lease fires", || other.load(Ordering::SeqCst) >= 3);
    assert_eq!(calls.load(Ordering::SeqCst), dropped_in);
}

#[test]
fn a_fire_now_pending_when_its_lease_is_cancelled_fails_with_cancelled() {
    let rt = runtime("fncancel-rt");
    let s = scheduler(&rt, "fncancel-sched");
    let lease = s
        .register_at(
            "busy",
            Instant::now(),
            Duration::from_secs(3600),
            |_t: Tick| Some(Box::pin(std::future::pending::<()>()) as BoxFuture),
        )
        .expect("register");
    wait_until("the first tick is in flight", || lease.is_running());
    let request = lease.fire_now();
    drop(lease);
    let outcome = rt.block_on(request);
    assert!(
        matches!(&outcome, Err(weir_scheduler::SchedulerError::Cancelled(name)) if name == "busy"),
        "{outcome:?}"
    );
}

/// Dropping leases while their ticks race on the timer thread (dense schedules, futures in
/// flight, drops from the test thread and from runtime workers): once a drop returns, that
/// trigger never runs again, and the leases not dropped keep firing.
#[test]
fn once_a_drop_returns_the_trigger_never_runs_again_while_others_go_on() {
    const N: usize = 64;
    let rt = runtime("cancelrace-rt");
    let s = scheduler(&rt, "cancelrace-sch");
    let violations = Arc::new(AtomicU64::new(0));
    let mut pipelines = Vec::with_capacity(N);
    for i in 0..N {
        let calls = Arc::new(AtomicU64::new(0));
        let gone = Arc::new(AtomicBool::new(false));
        let trigger = {
            let (calls, gone, violations) = (
                Arc::clone(&calls),
                Arc::clone(&gone),
                Arc::clone(&violations),
            );
            move |t: Tick| -> Option<BoxFuture> {
                calls.fetch_add(1, Ordering::SeqCst);
                if gone.load(Ordering::SeqCst) {
                    violations.fetch_add(1, Ordering::SeqCst);
                }
                // Every other tick has a waiting part, for cancel to abort.
                t.seq
                    .is_multiple_of(2)
                    .then(|| Box::pin(tokio::task::yield_now()) as BoxFuture)
            }
        };
        let every = Duration::from_micros(100 + i as u64);
        let lease = s
            .register_at(format!("p{i:02}"), Instant::now(), every, trigger)
            .expect("register");
        pipelines.push((Some(lease), calls, gone));
    }
    wait_until("every lease fires three times", || {
        pipelines
            .iter()
            .all(|(_, calls, _)| calls.load(Ordering::SeqCst) >= 3)
    });

    // Drop the even ones: alternately here and on a runtime worker.
    for (i, (lease, _, gone)) in pipelines.iter_mut().enumerate().filter(|(i, _)| i % 2 == 0) {
        let lease = lease.take().expect("not dropped yet");
        if i % 4 == 0 {
            drop(lease);
            gone.store(true, Ordering::SeqCst);
        } else {
            let gone = Arc::clone(gone);
            rt.block_on(rt.spawn(async move {
                drop(lease);
                gone.store(true, Ordering::SeqCst);
            }))
            .expect("the dropping task");
        }
    }
    let survivors: Vec<(u64, &Arc<AtomicU64>)> = pipelines
        .iter()
        .skip(1)
        .step_by(2)
        .map(|(_, calls, _)| (calls.load(Ordering::SeqCst), calls))
        .collect();
    wait_until("every remaining lease fires 20 more times", || {
        survivors
            .iter()
            .all(|(before, calls)| calls.load(Ordering::SeqCst) >= before + 20)
    });
    assert_eq!(violations.load(Ordering::SeqCst), 0);
    let names: Vec<String> = s.metrics().pipelines.into_iter().map(|p| p.name).collect();
    let expected: Vec<String> = (1..N).step_by(2).map(|i| format!("p{i:02}")).collect();
    assert_eq!(names, expected);

    // Once every lease is gone, the totals (cancelled leases included) match the triggers'
    // own counts exactly.
    for (lease, _, gone) in &mut pipelines {
        drop(lease.take());
        gone.store(true, Ordering::SeqCst);
    }
    let calls: u64 = pipelines
        .iter()
        .map(|(_, calls, _)| calls.load(Ordering::SeqCst))
        .sum();
    let m = s.metrics();
    assert_eq!((m.leases, m.fired, m.delay.count), (0, calls, calls));
    assert_eq!(violations.load(Ordering::SeqCst), 0);
}
