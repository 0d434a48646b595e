//! A rate limit per client, for requests that cost the jobs something (state lookups).
//!
//! governor's GCRA keyed by client (its bearer token if it sends one, else its address): bursts
//! of `burst`, then `rate` per second; a refused request learns how long until the next. Its
//! state is one timestamp per client in a sharded map, so clients do not wait on each other's
//! lock. The map is bounded by [`MAX_CLIENTS`]: at the bound, clients whose state is back to a
//! fresh one (quiet long enough to have their whole burst again, so they lose nothing by being
//! forgotten) are dropped; if that frees nothing, every client shares one overflow bucket until
//! it does. Thousands of addresses can then slow lookups down for everyone, never speed them up.

use std::num::NonZeroU32;
use std::time::Duration;

use governor::Quota;
use governor::clock::{Clock, DefaultClock};
use governor::middleware::NoOpMiddleware;
use governor::state::keyed::DashMapStateStore;

/// Clients remembered at once.
pub const MAX_CLIENTS: usize = 4096;

/// The key of the bucket shared beyond [`MAX_CLIENTS`]; no client key is empty.
const OVERFLOW: &str = "";

/// Rate limits by client.
pub struct RateLimiter<C: Clock = DefaultClock> {
    limiter:
        governor::RateLimiter<String, DashMapStateStore<String>, C, NoOpMiddleware<C::Instant>>,
}

impl std::fmt::Debug for RateLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimiter")
            .field("clients", &self.clients())
            .finish()
    }
}

impl RateLimiter {
    /// `rate` requests per second per client, bursts of up to `burst`.
    pub fn new(rate: f64, burst: u32) -> Self {
        Self::with_clock(rate, burst, DefaultClock::default())
    }
}

impl<C: Clock> RateLimiter<C> {
    /// As [`RateLimiter::new`], on `clock` (tests advance a fake one).
    pub fn with_clock(rate: f64, burst: u32, clock: C) -> Self {
        assert!(
            rate > 0.0 && rate.is_finite(),
            "a rate limit needs a positive rate, not {rate}"
        );
        // One request's worth every 1/rate seconds (a nanosecond at the least).
        let period = Duration::from_secs_f64(1.0 / rate).max(Duration::from_nanos(1));
        let burst = NonZeroU32::new(burst).unwrap_or(NonZeroU32::MIN);
        let quota = Quota::with_period(period)
            .unwrap_or_else(|| Quota::per_second(NonZeroU32::MAX))
            .allow_burst(burst);
        Self {
            limiter: governor::RateLimiter::dashmap_with_clock(quota, clock),
        }
    }

    /// Takes one request of `client`'s allowance, or says how long until there is one.
    pub fn take(&self, client: &str) -> Result<(), Duration> {
        let mut key = client;
        if key.is_empty() || self.limiter.len() >= MAX_CLIENTS {
            self.limiter.retain_recent();
            if key.is_empty() || self.limiter.len() >= MAX_CLIENTS {
                key = OVERFLOW;
            }
        }
        self.limiter
            .check_key(&key.to_string())
            .map_err(|not_until| not_until.wait_time_from(self.limiter.clock().now()))
    }

    /// Clients remembered now.
    pub fn clients(&self) -> usize {
        self.limiter.len()
    }
}

#[cfg(test)]
mod tests {
    use governor::clock::FakeRelativeClock;

    use super::*;

    #[test]
    fn a_client_gets_its_burst_then_the_rate_and_others_are_unaffected() {
        let clock = FakeRelativeClock::default();
        let limiter = RateLimiter::with_clock(10.0, 3, clock.clone());
        for _ in 0..3 {
            limiter.take("a").unwrap();
        }
        let wait = limiter.take("a").unwrap_err();
        assert!(
            wait > Duration::ZERO && wait <= Duration::from_millis(100),
            "one request every 100 ms: {wait:?}"
        );
        limiter.take("b").unwrap();
        clock.advance(Duration::from_millis(100));
        limiter.take("a").unwrap();
        assert!(limiter.take("a").is_err());
        // Allowance builds up to the burst, no further.
        clock.advance(Duration::from_secs(60));
        for _ in 0..3 {
            limiter.take("a").unwrap();
        }
        assert!(limiter.take("a").is_err());
    }

    #[test]
    fn the_map_of_clients_stays_bounded_and_quiet_clients_are_forgotten_first() {
        let clock = FakeRelativeClock::default();
        let limiter = RateLimiter::with_clock(1.0, 1, clock.clone());
        for i in 0..MAX_CLIENTS + 10 {
            let _ = limiter.take(&format!("c{i}"));
        }
        assert!(
            limiter.clients() <= MAX_CLIENTS + 1,
            "{}",
            limiter.clients()
        );
        // Full of busy clients: a newcomer shares the overflow bucket, which is spent now.
        assert!(limiter.take("new").is_err(), "the overflow bucket is spent");
        // Once they have all had a second to refill, they are forgotten to make room.
        clock.advance(Duration::from_secs(2));
        limiter.take("fresh").unwrap();
        assert!(limiter.clients() < 10, "{}", limiter.clients());
        assert!(limiter.take("fresh").is_err(), "a client of its own again");
    }
}
