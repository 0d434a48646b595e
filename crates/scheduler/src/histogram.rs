//! Scheduling delays in a log-linear histogram of nanoseconds: HdrHistogram's, at one
//! significant digit.
//!
//! That precision splits each power of two into 16 buckets once values reach 32 ns (below,
//! every value is its own bucket), so a reported quantile is at most 1/16 (6.25%) above the
//! true value. Counts grow only to the largest value recorded: a lease whose delays stay under
//! 100 µs holds a few hundred counters. A lease's histogram has one writer (the timer thread,
//! under the lease's lock), so the plain single-writer histogram suffices; the connection pool
//! keeps its own lock-free one for its many concurrent writers (see that crate).

use std::time::Duration;

/// Significant decimal digits kept: 1 gives 32 sub-buckets per power of two.
const SIGFIG: u8 = 1;

/// Counts of durations in log-linear buckets.
#[derive(Debug, Clone)]
pub struct Histogram {
    inner: hdrhistogram::Histogram<u64>,
    /// The exact largest value recorded: HdrHistogram's own is its bucket's top.
    max: u64,
    /// The exact sum of the values recorded (ns, saturating), for a summary's `_sum`.
    sum: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Self::new()
    }
}

impl PartialEq for Histogram {
    fn eq(&self, other: &Self) -> bool {
        self.inner == other.inner && self.max == other.max && self.sum == other.sum
    }
}

impl Eq for Histogram {}

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
        let inner = hdrhistogram::Histogram::new(SIGFIG)
            .expect("one significant digit is within HdrHistogram's range");
        Self {
            inner,
            max: 0,
            sum: 0,
        }
    }

    /// Counts one value, in nanoseconds.
    pub fn record(&mut self, ns: u64) {
        self.max = self.max.max(ns);
        self.sum = self.sum.saturating_add(ns);
        // Auto-resizing, so every u64 fits; saturate rather than lose a count if not.
        if self.inner.record(ns).is_err() {
            let top = self.inner.high();
            let _ = self.inner.record(top);
        }
    }

    /// Counts one duration (saturating at `u64::MAX` ns, about 584 years).
    pub fn record_duration(&mut self, d: Duration) {
        self.record(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    }

    /// Values recorded.
    pub fn count(&self) -> u64 {
        self.inner.len()
    }

    /// The sum of the values recorded (ns), exact unless it passed `u64::MAX` (584 years).
    pub fn sum(&self) -> u64 {
        self.sum
    }

    /// The largest value recorded (ns), 0 if none.
    pub fn max(&self) -> u64 {
        self.max
    }

    /// The value at quantile `q` (0.0–1.0) in ns: the highest value of the bucket holding the
    /// rank, capped by the largest value recorded; 0 if empty.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.inner.is_empty() {
            return 0;
        }
        self.inner
            .value_at_quantile(q.clamp(0.0, 1.0))
            .min(self.max)
    }

    /// Adds every count of `other` to this one.
    pub fn merge(&mut self, other: &Histogram) {
        // Both auto-resize, so adding cannot overflow the range.
        let _ = self.inner.add(&other.inner);
        self.max = self.max.max(other.max);
        self.sum = self.sum.saturating_add(other.sum);
    }

    /// What was recorded after `earlier`, a past copy of this histogram. The maximum is the top
    /// of the difference's highest bucket, capped by this histogram's exact maximum.
    pub fn since(&self, earlier: &Histogram) -> Histogram {
        let mut diff = self.clone();
        // An `earlier` that is not a past copy (a count above ours) leaves ours unchanged.
        if diff.inner.subtract(&earlier.inner).is_err() {
            return self.clone();
        }
        diff.sum = self.sum.saturating_sub(earlier.sum);
        diff.max = if diff.inner.is_empty() {
            0
        } else {
            diff.inner.max().min(self.max)
        };
        diff
    }

    /// The non-empty buckets, lowest first.
    pub fn buckets(&self) -> impl Iterator<Item = Bucket> + '_ {
        self.inner.iter_recorded().map(|v| {
            let value = v.value_iterated_to();
            Bucket {
                low: self.inner.lowest_equivalent(value),
                high: self.inner.highest_equivalent(value),
                count: v.count_at_value(),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_hold_their_values_and_do_not_overlap() {
        let mut h = Histogram::new();
        let values = [
            0u64,
            1,
            31,
            32,
            33,
            1_000,
            45_700,
            461_000_000,
            u64::MAX / 2,
        ];
        for v in values {
            h.record(v);
        }
        let buckets: Vec<Bucket> = h.buckets().collect();
        assert_eq!(
            buckets.iter().map(|b| b.count).sum::<u64>(),
            values.len() as u64
        );
        for v in values {
            assert!(
                buckets.iter().any(|b| b.low <= v && v <= b.high),
                "{v} in {buckets:?}"
            );
        }
        for pair in buckets.windows(2) {
            assert!(pair[0].high < pair[1].low, "{pair:?}");
        }
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
        assert_eq!(d.sum(), 70_020);
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
