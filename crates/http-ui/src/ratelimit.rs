//! A token bucket per client, for requests that cost the jobs something (state lookups).
//!
//! Each client (its bearer token if it sends one, else its address) has a bucket of `burst`
//! tokens refilled at `rate` per second; a request takes one, or is refused with the time
//! until the next. Buckets live in a map bounded by [`MAX_CLIENTS`]: at the bound, buckets that
//! have refilled completely (clients that went quiet, who lose nothing by being forgotten) are
//! dropped, and if none has, the one idle longest.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Clients remembered at once.
pub const MAX_CLIENTS: usize = 4096;

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// Token buckets by client.
#[derive(Debug)]
pub struct RateLimiter {
    /// Tokens per second.
    rate: f64,
    burst: f64,
    buckets: Mutex<HashMap<String, Bucket>>,
}

impl RateLimiter {
    /// `rate` requests per second per client, bursts of up to `burst`.
    pub fn new(rate: f64, burst: u32) -> Self {
        assert!(rate > 0.0, "a rate limit needs a positive rate, not {rate}");
        Self {
            rate,
            burst: f64::from(burst.max(1)),
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Takes a token of `client`'s bucket at `now`, or says how long until one is there.
    pub fn take(&self, client: &str, now: Instant) -> Result<(), Duration> {
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        if !buckets.contains_key(client) && buckets.len() >= MAX_CLIENTS {
            self.forget(&mut buckets, now);
        }
        let bucket = buckets.entry(client.to_string()).or_insert(Bucket {
            tokens: self.burst,
            at: now,
        });
        let elapsed = now.saturating_duration_since(bucket.at).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * self.rate).min(self.burst);
        bucket.at = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - bucket.tokens) / self.rate))
        }
    }

    /// Makes room for a new client (see the module documentation).
    fn forget(&self, buckets: &mut HashMap<String, Bucket>, now: Instant) {
        let full_after = Duration::from_secs_f64(self.burst / self.rate);
        buckets.retain(|_, b| now.saturating_duration_since(b.at) < full_after);
        if buckets.len() >= MAX_CLIENTS {
            if let Some(oldest) = buckets
                .iter()
                .min_by_key(|(_, b)| b.at)
                .map(|(k, _)| k.clone())
            {
                buckets.remove(&oldest);
            }
        }
    }

    /// Clients remembered now.
    pub fn clients(&self) -> usize {
        self.buckets.lock().map_or(0, |b| b.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_gets_its_burst_then_the_rate_and_others_are_unaffected() {
        let limiter = RateLimiter::new(10.0, 3);
        let t0 = Instant::now();
        for _ in 0..3 {
            limiter.take("a", t0).unwrap();
        }
        let wait = limiter.take("a", t0).unwrap_err();
        assert!(
            (wait.as_secs_f64() - 0.1).abs() < 1e-9,
            "one token every 100 ms: {wait:?}"
        );
        limiter.take("b", t0).unwrap();
        limiter.take("a", t0 + Duration::from_millis(100)).unwrap();
        assert!(limiter.take("a", t0 + Duration::from_millis(100)).is_err());
        // Refills cap at the burst.
        for _ in 0..3 {
            limiter.take("a", t0 + Duration::from_secs(60)).unwrap();
        }
        assert!(limiter.take("a", t0 + Duration::from_secs(60)).is_err());
    }

    #[test]
    fn the_map_of_clients_stays_bounded() {
        let limiter = RateLimiter::new(1.0, 1);
        let t0 = Instant::now();
        for i in 0..MAX_CLIENTS + 10 {
            let _ = limiter.take(&format!("c{i}"), t0);
        }
        assert!(limiter.clients() <= MAX_CLIENTS);
    }
}
