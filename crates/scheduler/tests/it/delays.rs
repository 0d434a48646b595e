use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use weir_scheduler::{BoxFuture, Tick, TickCause};

use crate::{gate, pipeline, runtime, scheduler, wait_until};

#[test]
fn the_delay_histogram_counts_every_fired_tick_and_no_tick_starts_early() {
    let rt = runtime("delays-rt");
    let s = scheduler(&rt, "delays-sched");
    let calls = Arc::new(AtomicU64::new(0));
    // Ticks that started before they were due, or out of order: none expected.
    let violations: Arc<Mutex<Vec<String>>> = Arc::default();
    let mut leases = Vec::new();
    for (i, ms) in [1u64, 2, 3].into_iter().enumerate() {
        let (calls, violations) = (Arc::clone(&calls), Arc::clone(&violations));
        let last_seq = AtomicU64::new(0);
        let trigger = move |t: Tick| -> Option<BoxFuture> {
            calls.fetch_add(1, Ordering::SeqCst);
            let now = Instant::now();
            let mut v = violations.lock().expect("violations");
            if now < t.due || t.started < t.due {
                v.push(format!("p{i} tick {} started before due", t.seq));
            }
            if last_seq.swap(t.seq, Ordering::SeqCst) + 1 != t.seq {
                v.push(format!("p{i} tick {} out of order", t.seq));
            }
            // Every other tick has a waiting part.
            t.seq
                .is_multiple_of(2)
                .then(|| Box::pin(tokio::task::yield_now()) as BoxFuture)
        };
        leases.push(
            s.register(format!("p{i}"), Duration::from_millis(ms), trigger)
                .expect("register"),
        );
    }
    wait_until("every lease fires 30 times", || {
        s.metrics().pipelines.iter().all(|p| p.fired >= 30)
    });

    // Per pipeline, in one snapshot: the histogram counts exactly the fired ticks.
    for p in s.metrics().pipelines {
        let bucketed: u64 = p.delay.buckets.iter().map(|b| b.count).sum();
        assert_eq!((p.delay.count, bucketed), (p.fired, p.fired), "{}", p.name);
        assert!(
            p.delay
                .buckets
                .iter()
                .all(|b| b.low_us >= 0.0 && b.low_us <= b.high_us)
        );
        assert!(0.0 <= p.delay.p50_us && p.delay.p50_us <= p.delay.p99_us);
        assert!(p.delay.p99_us <= p.delay.max_us);
    }

    // Cancelled leases keep counting in the totals; once all are cancelled nothing fires, so
    // totals and the triggers' own count must agree exactly.
    drop(leases);
    let m = s.metrics();
    assert_eq!(m.leases, 0);
    assert_eq!(m.fired, calls.load(Ordering::SeqCst));
    assert_eq!(m.delay.count, m.fired);
    assert_eq!(
        m.delay.buckets.iter().map(|b| b.count).sum::<u64>(),
        m.fired
    );
    assert!(m.fired >= 90);
    assert_eq!(
        violations.lock().expect("violations").as_slice(),
        &[] as &[String]
    );
}

/// A tick the scheduler reaches late records its whole delay, and the interval boundaries that
/// passed meanwhile are coalesced and counted, not replayed one after another.
#[test]
fn a_late_tick_records_its_whole_delay_and_counts_the_boundaries_it_missed() {
    let rt = runtime("late-rt");
    let s = scheduler(&rt, "late-sched");
    let every = Duration::from_millis(2);
    let hold = Duration::from_millis(30);

    let gate_due = Instant::now() + Duration::from_millis(50);
    let late_due = gate_due + Duration::from_millis(20);
    let (gate, gate_trigger) = gate();
    let _gate = s
        .register_at("gate", gate_due, Duration::from_secs(3600), gate_trigger)
        .expect("register gate");
    let ticks: Arc<Mutex<Vec<Tick>>> = Arc::default();
    let _late = {
        let ticks = Arc::clone(&ticks);
        s.register_at(
            "late",
            late_due,
            every,
            move |t: Tick| -> Option<BoxFuture> {
                ticks.lock().expect("ticks").push(t);
                None
            },
        )
        .expect("register late")
    };

    // Hold the timer thread until `late` is at least `hold` past due.
    gate.wait_entered();
    while Instant::now() < late_due + hold {
        std::thread::sleep(Duration::from_millis(1));
    }
    let released = Instant::now();
    gate.release();
    wait_until("late fires five times", || {
        ticks.lock().expect("ticks").len() >= 5
    });

    let ticks = ticks.lock().expect("ticks").clone();
    let first = ticks[0];
    assert_eq!((first.seq, first.cause), (1, TickCause::Interval));
    assert_eq!(first.due, late_due);
    assert!(first.delay() >= hold, "{:?}", first.delay());
    // At least 15 boundaries passed while the timer thread was held; at most two ticks due
    // before the release ran (the first, and one whose boundary was computed before the hold
    // if the scheduler popped `late` with the gate): the rest were coalesced.
    let due_before_release = ticks.iter().filter(|t| t.due < released).count();
    assert!(due_before_release <= 2, "{due_before_release} replayed");
    for (i, t) in ticks.iter().enumerate() {
        assert_eq!(t.seq, i as u64 + 1);
        assert!(t.started >= t.due);
        // Every due time is an interval boundary of the schedule.
        assert_eq!((t.due - late_due).as_nanos() % every.as_nanos(), 0);
    }

    let m = pipeline(&s, "late");
    assert!(m.coalesced >= 10, "coalesced {}", m.coalesced);
    assert_eq!(m.delay.count, m.fired);
    let hold_us = hold.as_secs_f64() * 1e6;
    assert!(m.delay.max_us >= hold_us, "max {} µs", m.delay.max_us);
    let top = m.delay.buckets.last().expect("a bucket");
    assert!(
        top.low_us <= m.delay.max_us && top.high_us >= hold_us,
        "{top:?}"
    );
    let total = s.metrics();
    assert!(total.delay.max_us >= hold_us);
    assert!(total.coalesced >= m.coalesced);
}

#[test]
fn with_a_prewake_the_timer_thread_splits_long_sleeps_and_without_it_does_not() {
    // Ticks 20 ms apart: with a 1 ms prewake each sleep up to a tick is split in two (the last,
    // short one is what keeps the tick's delay flat across P); without one, one sleep per tick.
    let rt = runtime("prewake-rt");
    let sleeps_per_tick = |prewake: Duration| {
        let s = weir_scheduler::Scheduler::with_config(
            rt.handle().clone(),
            weir_scheduler::SchedulerConfig {
                thread_name: "prewake-sched".to_owned(),
                prewake,
                ..weir_scheduler::SchedulerConfig::default()
            },
        )
        .expect("a scheduler");
        let (calls, trigger) = crate::counting();
        let _lease = s
            .register("p", Duration::from_millis(20), trigger)
            .expect("register");
        wait_until("20 ticks", || calls.load(Ordering::SeqCst) >= 20);
        let m = s.metrics();
        m.precision.sleeps as f64 / m.fired as f64
    };
    let split = sleeps_per_tick(Duration::from_millis(1));
    let whole = sleeps_per_tick(Duration::ZERO);
    assert!(split >= 1.5, "with a prewake: {split:.2} sleeps per tick");
    assert!(whole <= 1.25, "without: {whole:.2} sleeps per tick");
}
