//! The timer thread: waits for the earliest due time with sub-millisecond precision and fires
//! everything due, inline.
//!
//! tokio's timer wheel has a 1 ms granularity and the OS wakes a sleeping thread tens of
//! microseconds late (more under load, and 50 µs more with Linux's default timer slack, which
//! this thread sets to 1 ns). So the thread sleeps until a *margin* before the due time and
//! busy-waits the rest. The margin follows the lateness of recent wake-ups (a high quantile of
//! the last 32, bounded by `max_spin`), and busy-waiting draws on a budget (`spin_budget` of one
//! core, refilled over time): when the budget runs short the margin shrinks to what it allows,
//! down to sleeping up to the due time itself, so a dense schedule costs precision, never a
//! whole core.
//!
//! A sleep much longer than `prewake` ends `prewake` early and the thread sleeps again: the
//! delay of a tick after its busy-wait grows with how long the thread slept before it (as if a
//! core back from a long idle ran the firing path slower; BENCHMARKS.md has the measurements),
//! so the last sleep is kept short.
//!
//! What is due at the head is popped from the queue when the busy-wait starts, so that only
//! firing is left when the time comes. A `fire_now` or a registration due earlier that arrives
//! during those last microseconds waits for that batch: at most one margin.

use std::hint;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::scheduler::{Ready, SchedulerConfig, Shared, lock};

/// Most busy-waiting allowed in one burst after a quiet period.
const ALLOWANCE_CAP: Duration = Duration::from_millis(20);
/// Wake-up latencies remembered to set the margin.
const WINDOW: usize = 32;
/// The margin covers this quantile of the remembered wake-up latencies ...
const MARGIN_QUANTILE: f64 = 0.97;
/// ... recomputed after this many new ones.
const MARGIN_EVERY: usize = 8;
/// ... plus this, for the clock reads around the sleep.
const MARGIN_PAD: Duration = Duration::from_micros(2);

/// The timer thread's body: runs until the scheduler shuts down.
pub(crate) fn run(shared: &Arc<Shared>) {
    #[cfg(target_os = "linux")]
    {
        // 1 ns instead of Linux's default 50 µs: timed sleeps of this thread end when asked,
        // not up to 50 µs later. Failing only costs precision.
        let _ = nix::sys::prctl::set_timerslack(1);
    }
    // Triggers run here: let them use tokio (`Handle::current`, building a `sleep`, ...).
    let _runtime = shared.runtime.enter();
    let mut precision = Precision::new(&shared.config, Instant::now());
    shared
        .precision
        .margin_ns
        .store(nanos(precision.margin), Ordering::Relaxed);
    // Reused for every batch; holds at most two ticks per lease (the queue's bound).
    let mut batch: Vec<Ready> = Vec::new();
    loop {
        // Set when the batch was taken ahead of its due time, to busy-wait for.
        let mut spin_to = None;
        {
            let mut timers = lock(&shared.timers);
            loop {
                if timers.shutdown {
                    return;
                }
                let now = Instant::now();
                let Some(head) = timers.head() else {
                    timers = shared
                        .wake
                        .wait(timers)
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    continue;
                };
                if head <= now {
                    timers.pop_due(head.max(now), now, &mut batch);
                    break;
                }
                let gap = head - now;
                let margin = precision.usable_margin(now);
                if gap <= margin {
                    // Within the margin: take what is due at `head` now, while the clock runs
                    // down, so that the work after the busy-wait is only firing.
                    timers.pop_due(head, now, &mut batch);
                    spin_to = Some(head);
                    break;
                }
                let (sleep, staged) = precision.plan_sleep(gap - margin);
                let wake_at = now + sleep;
                let (guard, timeout) = shared
                    .wake
                    .wait_timeout(timers, sleep)
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                timers = guard;
                shared.precision.sleeps.fetch_add(1, Ordering::Relaxed);
                // A staged wake-up's lateness says nothing of the short sleep the margin covers.
                if timeout.timed_out() && !staged {
                    let late = Instant::now().saturating_duration_since(wake_at);
                    if precision.record_wake(late) {
                        shared
                            .precision
                            .margin_ns
                            .store(nanos(precision.margin), Ordering::Relaxed);
                    }
                }
            }
        }
        if let Some(due) = spin_to {
            // After a sleep the caches are cold (other work ran on this core): touching what
            // firing will touch saves microseconds of delay.
            for ready in &batch {
                shared.prewarm(ready);
            }
            let spun = precision.spin_until(due);
            shared
                .precision
                .spin_ns
                .fetch_add(nanos(spun), Ordering::Relaxed);
        }
        for ready in batch.drain(..) {
            shared.fire(ready);
        }
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The margin and the busy-wait budget.
struct Precision {
    max_spin: Duration,
    /// Share of one core busy-waiting may use.
    budget: f64,
    /// Busy-waiting still allowed now: refilled at `budget` per second of wall time, spent by
    /// busy-waiting, capped at `ALLOWANCE_CAP`.
    allowance: Duration,
    refilled_at: Instant,
    /// Recent wake-up latencies (ring buffer).
    recent: [Duration; WINDOW],
    recorded: usize,
    /// How long before a due time the thread wakes up, budget permitting.
    margin: Duration,
    /// `SchedulerConfig::prewake`.
    prewake: Duration,
}

impl Precision {
    fn new(config: &SchedulerConfig, now: Instant) -> Self {
        Precision {
            max_spin: config.max_spin,
            budget: config.spin_budget,
            allowance: ALLOWANCE_CAP.mul_f64(config.spin_budget),
            refilled_at: now,
            recent: [Duration::ZERO; WINDOW],
            recorded: 0,
            // Until wake-ups have been measured: the bound.
            margin: config.max_spin,
            prewake: config.prewake,
        }
    }

    /// How long to sleep when `until_margin` is left before the margin, and whether that is a
    /// staged sleep, ending `prewake` early: a sleep longer than twice `prewake` is split, so
    /// the last one before a tick is short (see `SchedulerConfig::prewake`).
    fn plan_sleep(&self, until_margin: Duration) -> (Duration, bool) {
        // `checked_mul`: a prewake too long to double never splits a sleep.
        let split = self
            .prewake
            .checked_mul(2)
            .is_some_and(|twice| !self.prewake.is_zero() && until_margin > twice);
        if split {
            (until_margin - self.prewake, true)
        } else {
            (until_margin, false)
        }
    }

    /// The margin to use for a due time now: the measured one, cut to what the budget still
    /// allows (so a dense schedule spins a little before each due time instead of fully before
    /// some and not at all before others).
    fn usable_margin(&mut self, now: Instant) -> Duration {
        let elapsed = now.saturating_duration_since(self.refilled_at);
        self.refilled_at = now;
        self.allowance = (self.allowance + elapsed.mul_f64(self.budget)).min(ALLOWANCE_CAP);
        self.margin.min(self.allowance)
    }

    /// Remembers how late a timed sleep ended; returns whether the margin changed.
    fn record_wake(&mut self, late: Duration) -> bool {
        self.recent[self.recorded % WINDOW] = late;
        self.recorded += 1;
        if !self.recorded.is_multiple_of(MARGIN_EVERY) {
            return false;
        }
        let n = self.recorded.min(WINDOW);
        let mut sorted = self.recent;
        let sorted = &mut sorted[..n];
        sorted.sort_unstable();
        let rank = ((n as f64 * MARGIN_QUANTILE).ceil() as usize).clamp(1, n) - 1;
        let margin = (sorted[rank] + MARGIN_PAD).min(self.max_spin);
        let changed = margin != self.margin;
        self.margin = margin;
        changed
    }

    /// Busy-waits until `due`; returns the time spent.
    fn spin_until(&mut self, due: Instant) -> Duration {
        let start = Instant::now();
        let mut now = start;
        while now < due {
            hint::spin_loop();
            now = Instant::now();
        }
        let spent = now - start;
        self.allowance = self.allowance.saturating_sub(spent);
        spent
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(max_spin_us: u64, budget: f64) -> SchedulerConfig {
        SchedulerConfig {
            thread_name: "t".into(),
            max_spin: Duration::from_micros(max_spin_us),
            spin_budget: budget,
            prewake: Duration::from_millis(1),
        }
    }

    #[test]
    fn long_sleeps_end_a_prewake_early_and_short_ones_do_not() {
        let with_prewake = |prewake| {
            let config = SchedulerConfig {
                prewake,
                ..config(200, 0.25)
            };
            Precision::new(&config, Instant::now())
        };
        let ms = Duration::from_millis;
        let p = with_prewake(ms(1));
        assert_eq!(p.plan_sleep(ms(100)), (ms(99), true));
        assert_eq!(p.plan_sleep(ms(3)), (ms(2), true));
        let unsplit = [
            (ms(1), ms(2), "twice the prewake is not split"),
            (ms(1), ms(1), "a short sleep is not split"),
            (Duration::ZERO, ms(100), "zero disables it"),
            (Duration::MAX, ms(100), "too long to double: never splits"),
        ];
        for (prewake, sleep, why) in unsplit {
            assert_eq!(
                with_prewake(prewake).plan_sleep(sleep),
                (sleep, false),
                "{why}"
            );
        }
    }

    #[test]
    fn margin_follows_a_high_quantile_of_wake_latency_within_bounds() {
        let mut p = Precision::new(&config(200, 1.0), Instant::now());
        assert_eq!(
            p.margin,
            Duration::from_micros(200),
            "the bound until measured"
        );
        for i in 0..WINDOW as u64 {
            p.record_wake(Duration::from_micros(10 + i % 4));
        }
        assert_eq!(p.margin, Duration::from_micros(13) + MARGIN_PAD);
        for _ in 0..WINDOW {
            p.record_wake(Duration::from_millis(5));
        }
        assert_eq!(p.margin, Duration::from_micros(200), "capped by max_spin");
    }

    #[test]
    fn spent_budget_turns_busy_waiting_off_until_it_refills() {
        let t0 = Instant::now();
        let mut p = Precision::new(&config(200, 0.01), t0);
        p.margin = Duration::from_micros(100);
        // 0.01 × 20 ms cap = 200 µs at start: enough for one margin.
        assert_eq!(p.usable_margin(t0), Duration::from_micros(100));
        p.allowance = Duration::ZERO;
        assert_eq!(p.usable_margin(t0), Duration::ZERO);
        // 4 ms later, 1% of it (40 µs) has come back: that much may be spun.
        assert_eq!(
            p.usable_margin(t0 + Duration::from_millis(4)),
            Duration::from_micros(40)
        );
        // 10 ms later, 100 µs: the whole margin.
        assert_eq!(
            p.usable_margin(t0 + Duration::from_millis(10)),
            Duration::from_micros(100)
        );
    }

    #[test]
    fn no_budget_or_no_max_spin_means_never_busy_waiting() {
        let t0 = Instant::now();
        let mut p = Precision::new(&config(200, 0.0), t0);
        assert_eq!(
            p.usable_margin(t0 + Duration::from_secs(10)),
            Duration::ZERO
        );
        let mut p = Precision::new(&config(0, 1.0), t0);
        assert_eq!(
            p.usable_margin(t0 + Duration::from_secs(10)),
            Duration::ZERO
        );
    }
}
