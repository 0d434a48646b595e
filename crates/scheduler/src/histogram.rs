//! A log-linear histogram of durations in nanoseconds, for scheduling delays.
//!
//! Values below 32 ns are counted exactly; above, each power of two is split into 16 buckets,
//! so a reported quantile is at most 1/16 (6.25%) above the true value. Buckets are allocated
//! lazily up to the largest value seen: a lease whose delays stay under 100 µs holds about
//! 240 counters (under 2 KiB), and no value can make it hold more than 976.

use std::time::Duration;

/// Sub-buckets per power of two, as a number of bits.
const SUB_BITS: u32 = 4;
const SUB: u64 = 1 << SUB_BITS;
/// Values below this are their own bucket.
const EXACT: u64 = 2 * SUB;

/// Counts of durations in log-linear buckets.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Histogram {
    /// `counts[i]` counts values in [`bucket_bounds`]`(i)`; grown only as far as needed.
    counts: Vec<u64>,
    count: u64,
    /// Exact largest value recorded (the top bucket alone would round it up).
    max: u64,
}

/// The bucket a value falls into.
fn bucket_index(v: u64) -> usize {
    if v < EXACT {
        return v as usize;
    }
    let exp = 63 - v.leading_zeros(); // ≥ SUB_BITS + 1
    let shift = exp - SUB_BITS;
    let sub = (v >> shift) - SUB; // in 0..SUB
    ((u64::from(shift) + 1) * SUB + sub) as usize
}

/// The lowest and highest value (inclusive) of bucket `i`.
fn bucket_bounds(i: usize) -> (u64, u64) {
    let i = i as u64;
    if i < EXACT {
        return (i, i);
    }
    let shift = i / SUB - 1;
    let sub = i % SUB;
    let low = (SUB + sub) << shift;
    (low, low + ((1u64 << shift) - 1))
}

/// One non-empty bucket of a histogram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bucket {
    /// Lowest value counted here (ns).
    pub low: u64,
    /// Highest value counted here (ns, inclusive).
    pub high: u64,
    pub count: u64,
}

impl Histogram {
    pub fn new() -> Self {
        Self::default()
    }

    /// Counts one value, in nanoseconds.
    pub fn record(&mut self, ns: u64) {
        let i = bucket_index(ns);
        if i >= self.counts.len() {
            self.counts.resize(i + 1, 0);
        }
        self.counts[i] += 1;
        self.count += 1;
        self.max = self.max.max(ns);
    }

    /// Counts one duration (saturating at `u64::MAX` ns, about 584 years).
    pub fn record_duration(&mut self, d: Duration) {
        self.record(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    }

    /// Values recorded.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The largest value recorded (ns), 0 if none.
    pub fn max(&self) -> u64 {
        self.max
    }

    /// The value at quantile `q` (0.0–1.0) in ns: the highest value of the bucket holding the
    /// rank, capped by the exact maximum; 0 if empty.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.count as f64).ceil() as u64).clamp(1, self.count);
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return bucket_bounds(i).1.min(self.max);
            }
        }
        self.max
    }

    /// Adds every count of `other` to this one.
    pub fn merge(&mut self, other: &Histogram) {
        if other.counts.len() > self.counts.len() {
            self.counts.resize(other.counts.len(), 0);
        }
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        self.count += other.count;
        self.max = self.max.max(other.max);
    }

    /// What was recorded after `earlier`, a past copy of this histogram. The maximum is that of
    /// the difference's highest bucket, capped by this histogram's exact maximum.
    pub fn since(&self, earlier: &Histogram) -> Histogram {
        let mut counts = self.counts.clone();
        for (a, b) in counts.iter_mut().zip(&earlier.counts) {
            *a = a.saturating_sub(*b);
        }
        let count = counts.iter().sum();
        let max = counts
            .iter()
            .rposition(|&c| c > 0)
            .map_or(0, |i| bucket_bounds(i).1.min(self.max));
        Histogram { counts, count, max }
    }

    /// The non-empty buckets, lowest first.
    pub fn buckets(&self) -> impl Iterator<Item = Bucket> + '_ {
        self.counts
            .iter()
            .enumerate()
            .filter(|&(_, &c)| c > 0)
            .map(|(i, &count)| {
                let (low, high) = bucket_bounds(i);
                Bucket { low, high, count }
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_tile_the_value_range_without_gaps() {
        let mut expected_low = 0;
        for i in 0..bucket_index(u64::MAX) {
            let (low, high) = bucket_bounds(i);
            assert_eq!(low, expected_low, "bucket {i}");
            assert!(high >= low);
            assert_eq!(bucket_index(low), i);
            assert_eq!(bucket_index(high), i);
            expected_low = high + 1;
        }
        assert_eq!(bucket_bounds(bucket_index(u64::MAX)).1, u64::MAX);
        assert_eq!(bucket_index(u64::MAX), 975);
    }

    #[test]
    fn quantiles_are_exact_below_32ns_and_within_one_sixteenth_above() {
        let mut h = Histogram::new();
        for v in 0..32 {
            h.record(v);
        }
        assert_eq!(h.quantile(0.5), 15);
        assert_eq!(h.quantile(1.0), 31);
        for v in [100u64, 1_000, 45_700, 461_000_000, 10_000_000_000] {
            let mut h = Histogram::new();
            h.record(v);
            h.record(v + 1);
            let q = h.quantile(0.5);
            assert!(q >= v && (q - v) as f64 <= v as f64 / 16.0, "{v} -> {q}");
        }
    }

    #[test]
    fn quantile_follows_ranks() {
        let mut h = Histogram::new();
        for _ in 0..99 {
            h.record(1_000);
        }
        h.record(1_000_000);
        assert!(h.quantile(0.5) < 1_100);
        assert!(h.quantile(0.99) < 1_100);
        assert_eq!(h.quantile(1.0), 1_000_000);
        assert_eq!(h.max(), 1_000_000);
        assert_eq!(Histogram::new().quantile(0.5), 0);
    }

    #[test]
    fn since_subtracts_an_earlier_copy_and_merge_adds() {
        let mut h = Histogram::new();
        h.record(10);
        h.record(5_000);
        let before = h.clone();
        h.record(70_000);
        h.record(20);
        let d = h.since(&before);
        assert_eq!(d.count(), 2);
        assert_eq!(d.buckets().map(|b| b.count).sum::<u64>(), 2);
        assert!(d.max() >= 70_000 && d.max() <= 70_000 + 70_000 / 16);
        let mut m = before.clone();
        m.merge(&d);
        assert_eq!(m.count(), h.count());
        assert_eq!(
            m.buckets().collect::<Vec<_>>(),
            h.buckets().collect::<Vec<_>>()
        );
    }
}
