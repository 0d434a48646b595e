//! A lock-free latency histogram: log-linear buckets (eight per power of two of nanoseconds, so a
//! reported quantile is at most 12.5% above the true value) of relaxed atomic counters. Recording
//! is one `fetch_add`; reading walks 496 counters.
//!
//! Why not HdrHistogram, as the scheduler's delay histograms are: here every acquiring task
//! records, concurrently, on the acquire path. HdrHistogram's counts take `&mut` (a lock per
//! acquire) or go through its channel-backed `SyncHistogram` (an allocation and a send per
//! value); relaxed atomic counters cost one uncontended-cache-line add.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// log2 of the number of sub-buckets per power of two.
const SUB_BITS: u32 = 3;
const SUB: u64 = 1 << SUB_BITS;
/// Values below `SUB` get a bucket each; every power of two from `SUB` up gets `SUB` buckets.
const BUCKETS: usize = (SUB + (64 - SUB_BITS as u64) * SUB) as usize;

fn bucket_of(nanos: u64) -> usize {
    if nanos < SUB {
        return nanos as usize;
    }
    let exp = 63 - nanos.leading_zeros(); // >= SUB_BITS
    let sub = (nanos >> (exp - SUB_BITS)) & (SUB - 1);
    (SUB + u64::from(exp - SUB_BITS) * SUB + sub) as usize
}

/// The largest value that falls into `bucket`.
fn upper_bound(bucket: usize) -> u64 {
    let bucket = bucket as u64;
    if bucket < SUB {
        return bucket;
    }
    let shift = (bucket - SUB) / SUB;
    let sub = (bucket - SUB) % SUB;
    ((SUB + sub) << shift) + ((1u64 << shift) - 1)
}

/// Quantiles of a `Histogram` (or of any duration distribution), read at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LatencySummary {
    /// How many values were recorded.
    pub count: u64,
    /// The median (upper bound of its bucket).
    pub p50: Duration,
    /// The 99th percentile (upper bound of its bucket).
    pub p99: Duration,
    /// The 99.9th percentile (upper bound of its bucket).
    pub p999: Duration,
    /// The largest value recorded, exactly.
    pub max: Duration,
}

/// A concurrent histogram of durations.
pub(crate) struct Histogram {
    buckets: Box<[AtomicU64]>,
    max: AtomicU64,
}

impl Histogram {
    pub(crate) fn new() -> Self {
        Self {
            buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            max: AtomicU64::new(0),
        }
    }

    pub(crate) fn record(&self, value: Duration) {
        let nanos = u64::try_from(value.as_nanos()).unwrap_or(u64::MAX);
        self.buckets[bucket_of(nanos)].fetch_add(1, Relaxed);
        // Read first: the maximum rarely changes, and a load keeps the line shared.
        if nanos > self.max.load(Relaxed) {
            self.max.fetch_max(nanos, Relaxed);
        }
    }

    pub(crate) fn summary(&self) -> LatencySummary {
        let counts: Vec<u64> = self.buckets.iter().map(|b| b.load(Relaxed)).collect();
        let count: u64 = counts.iter().sum();
        let max = self.max.load(Relaxed);
        let quantile = |q: f64| -> Duration {
            if count == 0 {
                return Duration::ZERO;
            }
            // The rank of the q-quantile, 1-based: ceil(q * count), at least 1.
            let rank = ((q * count as f64).ceil() as u64).clamp(1, count);
            let mut seen = 0;
            for (bucket, &n) in counts.iter().enumerate() {
                seen += n;
                if seen >= rank {
                    return Duration::from_nanos(upper_bound(bucket).min(max));
                }
            }
            Duration::from_nanos(max)
        };
        LatencySummary {
            count,
            p50: quantile(0.50),
            p99: quantile(0.99),
            p999: quantile(0.999),
            max: Duration::from_nanos(max),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_value_falls_in_a_bucket_whose_bounds_contain_it() {
        let mut values: Vec<u64> = (0..2_000).collect();
        values.extend((0..64).map(|s| 1u64 << s));
        values.extend((1..64).map(|s| (1u64 << s) - 1));
        values.push(u64::MAX);
        for v in values {
            let b = bucket_of(v);
            assert!(b < BUCKETS, "{v} -> bucket {b}");
            assert!(upper_bound(b) >= v, "{v} above bucket {b}'s bound");
            if b > 0 {
                assert!(upper_bound(b - 1) < v, "{v} below bucket {b}");
            }
            // At most 12.5% above the value.
            assert!((upper_bound(b) - v) as f64 <= v as f64 / 8.0 + 1.0);
        }
    }

    #[test]
    fn quantiles_match_a_sorted_reference_within_bucket_precision() {
        let histogram = Histogram::new();
        let mut values: Vec<u64> = (0..10_000u64)
            .map(|i| (i * 7_919) % 100_000 + 100)
            .collect();
        for &v in &values {
            histogram.record(Duration::from_nanos(v));
        }
        values.sort_unstable();
        let s = histogram.summary();
        assert_eq!(s.count, 10_000);
        let close = |got: Duration, want: u64| {
            let got = got.as_nanos() as f64;
            assert!(
                got >= want as f64 && got <= want as f64 * 1.125 + 1.0,
                "{got} vs {want}"
            );
        };
        close(s.p50, values[4_999]);
        close(s.p99, values[9_899]);
        assert_eq!(s.max, Duration::from_nanos(values[9_999]));
    }

    #[test]
    fn an_empty_histogram_reports_zeros() {
        assert_eq!(Histogram::new().summary(), LatencySummary::default());
    }
}
