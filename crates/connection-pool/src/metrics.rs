//! The pool's counters and gauges, and the snapshot [`PoolMetrics`] callers read.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::Duration;

use crate::combiner::CombinerStats;
use crate::histogram::{Histogram, LatencySummary};

/// A snapshot of a pool's gauges and counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolMetrics {
    /// The configured maximum number of connections.
    pub max_size: usize,
    /// Connections handed out and not yet returned.
    pub in_use: usize,
    /// Open connections waiting in the pool.
    pub idle: usize,
    /// Connections being opened.
    pub opening: usize,
    /// `acquire` calls currently waiting for a connection.
    pub waiters: usize,
    /// Connections opened so far.
    pub opened: u64,
    /// Connections closed so far (broken, expired, evicted, or at close).
    pub closed: u64,
    /// Connections closed because they were broken: marked by their holder, or failing their
    /// recycle or check on return. Each counts in `closed` too.
    pub broken: u64,
    /// Connect attempts that failed or timed out.
    pub connect_failures: u64,
    /// `acquire` calls that timed out.
    pub timeouts: u64,
    /// Time from calling `acquire` to holding a connection, over successful acquires.
    pub acquire_latency: LatencySummary,
    /// The combiner that runs the pool's state changes, with its longest single run.
    pub combiner: CombinerStats,
}

/// Live counters shared by the pool state (which owns the gauges) and the pool's handles.
pub(crate) struct Metrics {
    pub(crate) max_size: usize,
    pub(crate) in_use: AtomicUsize,
    pub(crate) idle: AtomicUsize,
    pub(crate) opening: AtomicUsize,
    pub(crate) waiters: AtomicUsize,
    pub(crate) opened: AtomicU64,
    pub(crate) closed: AtomicU64,
    pub(crate) broken: AtomicU64,
    pub(crate) connect_failures: AtomicU64,
    pub(crate) timeouts: AtomicU64,
    pub(crate) acquire_latency: Histogram,
}

impl Metrics {
    pub(crate) fn new(max_size: usize) -> Self {
        Self {
            max_size,
            in_use: AtomicUsize::new(0),
            idle: AtomicUsize::new(0),
            opening: AtomicUsize::new(0),
            waiters: AtomicUsize::new(0),
            opened: AtomicU64::new(0),
            closed: AtomicU64::new(0),
            broken: AtomicU64::new(0),
            connect_failures: AtomicU64::new(0),
            timeouts: AtomicU64::new(0),
            acquire_latency: Histogram::new(),
        }
    }

    pub(crate) fn count(counter: &AtomicU64) {
        counter.fetch_add(1, Relaxed);
    }

    pub(crate) fn record_acquire(&self, latency: Duration) {
        self.acquire_latency.record(latency);
    }

    pub(crate) fn snapshot(&self, combiner: CombinerStats) -> PoolMetrics {
        PoolMetrics {
            max_size: self.max_size,
            in_use: self.in_use.load(Relaxed),
            idle: self.idle.load(Relaxed),
            opening: self.opening.load(Relaxed),
            waiters: self.waiters.load(Relaxed),
            opened: self.opened.load(Relaxed),
            closed: self.closed.load(Relaxed),
            broken: self.broken.load(Relaxed),
            connect_failures: self.connect_failures.load(Relaxed),
            timeouts: self.timeouts.load(Relaxed),
            acquire_latency: self.acquire_latency.summary(),
            combiner,
        }
    }
}
