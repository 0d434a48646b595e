//! Whether a failed job restarts, and when: the job's restart strategy over its history of
//! failures, as Flink's `fixed-delay`, `exponential-delay` and `failure-rate` strategies.
//!
//! The policy is plain data driven by the instants it is given, so its tests need no clock:
//! the supervisor asks [`RestartPolicy::next`] with the failure's instant and when the failed
//! attempt started, and waits what it answers.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::spec::{RestartSpec, RestartStrategy};

/// A job's restart budget and delays, as its failures use them up.
#[derive(Debug)]
pub struct RestartPolicy {
    spec: RestartSpec,
    /// `fixed-delay` and `exponential-delay`: restarts allowed per healthy period.
    attempts: u32,
    /// Restarts since the budget last started over.
    used: u32,
    /// `failure-rate`: the instants of recent failures, oldest first.
    recent: VecDeque<Instant>,
    /// Drives the jitter: a small generator seeded per job, so that jobs failing together
    /// spread out.
    seed: u64,
}

/// What the policy decided about one failure.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Decision {
    /// Restart after this wait; `reset` says the budget had started over first (the job had
    /// been healthy for `reset-after`).
    Restart { wait: Duration, reset: bool },
    /// The budget is spent: the job fails.
    GiveUp,
}

impl RestartPolicy {
    /// The policy of a job with `spec`; `checkpointing` decides the default number of attempts.
    pub fn new(spec: &RestartSpec, checkpointing: bool, seed: u64) -> Self {
        Self {
            attempts: spec.attempts(checkpointing),
            spec: spec.clone(),
            used: 0,
            recent: VecDeque::new(),
            seed: seed | 1,
        }
    }

    /// Restarts the current budget has used (the total, for `failure-rate`: failures within
    /// the interval).
    pub fn used(&self) -> u32 {
        match self.spec.strategy {
            RestartStrategy::FailureRate => self.recent.len() as u32,
            _ => self.used,
        }
    }

    /// Restarts the budget allows (`failure-rate`: failures per interval).
    pub fn allowed(&self) -> u32 {
        match self.spec.strategy {
            RestartStrategy::FailureRate => self.spec.max_failures,
            _ => self.attempts,
        }
    }

    /// A failure at `now` of an attempt that started at `attempt_started`: restart after a
    /// wait, or give up.
    pub fn next(&mut self, now: Instant, attempt_started: Instant) -> Decision {
        match self.spec.strategy {
            RestartStrategy::FixedDelay => {
                if self.used >= self.attempts {
                    return Decision::GiveUp;
                }
                self.used += 1;
                Decision::Restart {
                    wait: self.spec.delay.0,
                    reset: false,
                }
            }
            RestartStrategy::ExponentialDelay => {
                let healthy = self
                    .spec
                    .reset_after
                    .is_some_and(|r| now.saturating_duration_since(attempt_started) >= r.0);
                let reset = healthy && self.used > 0;
                if healthy {
                    self.used = 0;
                }
                if self.used >= self.attempts {
                    return Decision::GiveUp;
                }
                let wait = self.exponential(self.used);
                self.used += 1;
                Decision::Restart { wait, reset }
            }
            RestartStrategy::FailureRate => {
                let window = self.spec.interval.0;
                while self
                    .recent
                    .front()
                    .is_some_and(|t| now.saturating_duration_since(*t) > window)
                {
                    self.recent.pop_front();
                }
                self.recent.push_back(now);
                if self.recent.len() as u32 > self.spec.max_failures {
                    return Decision::GiveUp;
                }
                Decision::Restart {
                    wait: self.spec.delay.0,
                    reset: false,
                }
            }
        }
    }

    /// The wait before restart `n` (0-based) of an `exponential-delay` budget: `delay` times
    /// `multiplier`^n, at most `max-delay`, then varied by up to `jitter` either way.
    fn exponential(&mut self, n: u32) -> Duration {
        let base = self.spec.delay.0.as_secs_f64();
        let cap = self.spec.max_delay.0.as_secs_f64().max(base);
        let grown = (base * self.spec.multiplier.max(1.0).powi(n.min(64) as i32)).min(cap);
        let jitter = self.spec.jitter.clamp(0.0, 1.0);
        // A uniform factor in [1 - jitter, 1 + jitter] from a xorshift generator.
        self.seed ^= self.seed << 13;
        self.seed ^= self.seed >> 7;
        self.seed ^= self.seed << 17;
        let unit = (self.seed >> 11) as f64 / (1u64 << 53) as f64;
        let factor = 1.0 - jitter + 2.0 * jitter * unit;
        Duration::try_from_secs_f64((grown * factor).max(0.0)).unwrap_or(self.spec.max_delay.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::HumanDuration;

    fn spec(strategy: RestartStrategy) -> RestartSpec {
        RestartSpec {
            strategy,
            max_attempts: Some(3),
            delay: HumanDuration::from_millis(100),
            max_delay: HumanDuration::from_millis(1000),
            multiplier: 2.0,
            jitter: 0.0,
            reset_after: Some(HumanDuration::from_millis(2000)),
            max_failures: 2,
            interval: HumanDuration::from_millis(10_000),
        }
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn fixed_delay_allows_max_attempts_restarts_at_one_delay() {
        let mut p = RestartPolicy::new(&spec(RestartStrategy::FixedDelay), true, 7);
        let t = Instant::now();
        for _ in 0..3 {
            let d = p.next(t, t);
            assert_eq!(
                d,
                Decision::Restart {
                    wait: ms(100),
                    reset: false
                }
            );
        }
        assert_eq!(p.next(t, t), Decision::GiveUp);
    }

    #[test]
    fn exponential_delay_grows_to_its_cap_and_gives_up_after_its_attempts() {
        let mut s = spec(RestartStrategy::ExponentialDelay);
        s.max_attempts = Some(5);
        s.max_delay = HumanDuration::from_millis(300);
        let mut p = RestartPolicy::new(&s, true, 7);
        let t = Instant::now();
        let waits: Vec<Duration> = (0..5)
            .map(|_| match p.next(t, t) {
                Decision::Restart { wait, .. } => wait,
                Decision::GiveUp => panic!("gave up early"),
            })
            .collect();
        assert_eq!(waits, [ms(100), ms(200), ms(300), ms(300), ms(300)]);
        assert_eq!(p.next(t, t), Decision::GiveUp);
    }

    #[test]
    fn a_healthy_period_starts_the_budget_and_the_delay_over() {
        let mut p = RestartPolicy::new(&spec(RestartStrategy::ExponentialDelay), true, 7);
        let t0 = Instant::now();
        // Three quick failures use the budget up...
        for i in 0..3u64 {
            assert!(matches!(
                p.next(t0 + ms(10 * i), t0 + ms(10 * i)),
                Decision::Restart { reset: false, .. }
            ));
        }
        // ... but the next attempt ran for 2 s before failing: a new budget, the first delay.
        let started = t0 + ms(100);
        let d = p.next(started + ms(2000), started);
        assert_eq!(
            d,
            Decision::Restart {
                wait: ms(100),
                reset: true
            }
        );
        assert_eq!(p.used(), 1);
        // Without the healthy period, the fourth failure would have ended the job.
        let mut q = RestartPolicy::new(&spec(RestartStrategy::ExponentialDelay), true, 7);
        for _ in 0..3 {
            q.next(t0, t0);
        }
        assert_eq!(q.next(t0 + ms(1999), t0), Decision::GiveUp);
    }

    #[test]
    fn failure_rate_counts_failures_within_its_interval() {
        let mut p = RestartPolicy::new(&spec(RestartStrategy::FailureRate), true, 7);
        let t0 = Instant::now();
        assert!(matches!(p.next(t0, t0), Decision::Restart { .. }));
        assert!(matches!(
            p.next(t0 + ms(5000), t0),
            Decision::Restart { .. }
        ));
        // The first failure has left the 10 s window: two within it, still allowed.
        assert!(matches!(
            p.next(t0 + ms(10_500), t0),
            Decision::Restart { .. }
        ));
        // A third within 10 s of the two before it: over the rate.
        assert_eq!(p.next(t0 + ms(11_000), t0), Decision::GiveUp);
    }

    #[test]
    fn jitter_stays_within_its_fraction_and_varies() {
        let mut s = spec(RestartStrategy::ExponentialDelay);
        s.jitter = 0.5;
        s.max_attempts = Some(1000);
        s.reset_after = None;
        s.max_delay = HumanDuration::from_millis(100);
        let mut p = RestartPolicy::new(&s, true, 42);
        let t = Instant::now();
        let waits: Vec<Duration> = (0..200)
            .map(|_| match p.next(t, t) {
                Decision::Restart { wait, .. } => wait,
                Decision::GiveUp => panic!("gave up"),
            })
            .collect();
        assert!(
            waits.iter().all(|w| *w >= ms(50) && *w <= ms(150)),
            "{waits:?}"
        );
        let distinct: std::collections::BTreeSet<_> = waits.iter().collect();
        assert!(distinct.len() > 50, "jitter should vary the waits");
    }

    #[test]
    fn without_checkpoints_the_default_is_no_restart() {
        let mut s = spec(RestartStrategy::ExponentialDelay);
        s.max_attempts = None;
        let t = Instant::now();
        assert_eq!(
            RestartPolicy::new(&s, false, 1).next(t, t),
            Decision::GiveUp
        );
        assert!(matches!(
            RestartPolicy::new(&s, true, 1).next(t, t),
            Decision::Restart { .. }
        ));
    }
}
