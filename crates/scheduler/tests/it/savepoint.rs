use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;
use weir_scheduler::{BoxFuture, FireNow, Lease, Tick, TickCause};

use crate::{DEADLINE, counting, gate, pipeline, runtime, scheduler, threads_named, wait_until};

/// SeaTunnel's trap: a savepoint that sleep-polled while holding the coordinator lock occupied
/// shared threads and delayed unrelated pipelines. Here the savepoint's request waits by
/// notification and holds no thread.
#[test]
fn a_savepoint_waiting_on_a_long_checkpoint_does_not_delay_other_pipelines() {
    let rt = runtime("savept-rt");
    let s = scheduler(&rt, "savept-sched");
    let threads = || threads_named("savept-rt") + threads_named("savept-sched");

    // Pipeline A: its checkpoint's waiting part lasts until `checkpoint_done` (a long
    // checkpoint in flight). Its interval is long: only `fire_now` fires it after the first.
    let checkpoint_done = Arc::new(Notify::new());
    let a_ticks: Arc<Mutex<Vec<Tick>>> = Arc::default();
    let a = {
        let (done, ticks) = (Arc::clone(&checkpoint_done), Arc::clone(&a_ticks));
        s.register_at(
            "a",
            Instant::now(),
            Duration::from_secs(3600),
            move |t: Tick| {
                ticks.lock().expect("ticks").push(t);
                let done = Arc::clone(&done);
                Some(Box::pin(async move { done.notified().await }) as BoxFuture)
            },
        )
        .expect("register a")
    };
    // Pipeline B: bookkeeping only, every 2 ms.
    let (b_calls, b_trigger) = counting();
    let _b = s
        .register_at("b", Instant::now(), Duration::from_millis(2), b_trigger)
        .expect("register b");

    wait_until("a's checkpoint is in flight", || a.is_running());
    let threads_before = threads();
    assert_eq!(
        threads_before, 3,
        "two runtime workers and the timer thread"
    );

    // The savepoint: awaited by a task, which holds no thread while it waits.
    let savepoint = rt.spawn(a.fire_now());
    wait_until(
        "the savepoint's tick is coalesced behind the checkpoint",
        || pipeline(&s, "a").coalesced >= 1,
    );
    let b0 = b_calls.load(Ordering::SeqCst);
    wait_until("b fires 50 more times", || {
        b_calls.load(Ordering::SeqCst) >= b0 + 50
    });
    assert!(
        !savepoint.is_finished(),
        "the savepoint waits for the checkpoint"
    );
    assert_eq!(a_ticks.lock().expect("ticks").len(), 1);
    // Nothing is blocked: the runtime's workers still run tasks, no thread was added.
    assert_eq!(
        rt.block_on(async { tokio::spawn(async { 7 }).await.ok() }),
        Some(7)
    );
    assert_eq!(threads(), threads_before);
    // B went on firing on its own schedule, and every one of its ticks is in its histogram.
    let b = pipeline(&s, "b");
    assert!(b.fired >= b0 + 50, "b fired {} times", b.fired);
    assert_eq!(b.delay.count, b.fired);
    assert!(!b.running, "b's ticks are bookkeeping only");

    // The checkpoint completes: the savepoint fires at once, by notification.
    checkpoint_done.notify_one();
    let tick = rt
        .block_on(savepoint)
        .expect("the savepoint task")
        .expect("the savepoint fired");
    assert_eq!((tick.seq, tick.cause), (2, TickCause::FireNow));
    let ticks = a_ticks.lock().expect("ticks").clone();
    assert_eq!(ticks.len(), 2);
    assert_eq!(ticks[1], tick);
}

/// Regression: `fire_now` requests collapse into one queued tick, and that tick was skipped when
/// any tick had started after the *first* request, so a second request collapsed into it (made
/// after an interval tick satisfied the first) waited for the next interval boundary, an hour.
#[test]
fn a_fire_now_collapsed_into_one_an_interval_tick_satisfied_still_fires() {
    let rt = runtime("fnlost-rt");
    let s = scheduler(&rt, "fnlost-sched");
    let hour = Duration::from_secs(3600);
    let due = Instant::now() + Duration::from_millis(100);

    // The gate and `a` are due together: the timer thread takes both in one batch and the gate
    // holds it before `a`'s interval tick fires.
    let (gate, gate_trigger) = gate();
    let _gate = s
        .register_at("gate", due, hour, gate_trigger)
        .expect("register gate");
    let slot: Arc<Mutex<Option<Lease>>> = Arc::default();
    let second: Arc<Mutex<Option<FireNow>>> = Arc::default();
    let a_ticks: Arc<Mutex<Vec<Tick>>> = Arc::default();
    let a = {
        let (slot, second, ticks) = (Arc::clone(&slot), Arc::clone(&second), Arc::clone(&a_ticks));
        s.register_at("a", due, hour, move |t: Tick| -> Option<BoxFuture> {
            ticks.lock().expect("ticks").push(t);
            if t.seq == 1 {
                // A savepoint asked for while the interval tick runs: it needs a tick of its own.
                let lease = slot.lock().expect("slot");
                *second.lock().expect("second") = lease.as_ref().map(Lease::fire_now);
            }
            None
        })
        .expect("register a")
    };
    *slot.lock().expect("slot") = Some(a);

    gate.wait_entered();
    // A first savepoint request, queued while `a`'s interval tick waits behind the gate.
    let first = slot
        .lock()
        .expect("slot")
        .as_ref()
        .map(Lease::fire_now)
        .expect("the lease");
    gate.release();

    let first = rt.block_on(first).expect("the first request is satisfied");
    assert!(first.seq >= 1);
    wait_until("a's interval tick asked for a savepoint", || {
        second.lock().expect("second").is_some()
    });
    let second = second.lock().expect("second").take().expect("the request");
    let second = rt
        .block_on(async { tokio::time::timeout(DEADLINE, second).await })
        .expect("the second request is not lost")
        .expect("the second request fires");
    assert_eq!((second.seq, second.cause), (2, TickCause::FireNow));

    let ticks = a_ticks.lock().expect("ticks").clone();
    assert_eq!(
        ticks.iter().map(|t| (t.seq, t.cause)).collect::<Vec<_>>(),
        [(1, TickCause::Interval), (2, TickCause::FireNow)],
        "the interval tick satisfied the first request; the second got a tick of its own"
    );
    drop(slot.lock().expect("slot").take());
}
