//! Plain-data snapshots of the scheduler's metrics, for the HTTP API and the dashboard.

use serde::Serialize;

use crate::histogram::Histogram;

/// Everything the scheduler measures, at one moment.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub struct SchedulerMetrics {
    /// Threads the scheduler owns: constant, whatever the number of leases.
    pub threads: usize,
    /// Leases registered and not cancelled.
    pub leases: usize,
    /// Ticks fired, coalesced and panicked since start, cancelled leases included.
    pub fired: u64,
    pub coalesced: u64,
    pub panicked: u64,
    /// Scheduling delay (actual start minus due time) of every fired tick since start.
    pub delay: DelaySummary,
    /// What precision costs the timer thread.
    pub precision: PrecisionMetrics,
    /// One entry per live lease, in registration order.
    pub pipelines: Vec<PipelineMetrics>,
}

/// The metrics of one lease.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub struct PipelineMetrics {
    pub name: String,
    pub interval_us: u64,
    /// Ticks whose trigger ran.
    pub fired: u64,
    /// Ticks that did not run: the previous trigger's future was still running, or the
    /// scheduler was so late that the interval boundary had already passed. Never queued.
    pub coalesced: u64,
    /// Ticks whose trigger panicked (counted in `fired` as well).
    pub panicked: u64,
    /// Whether the trigger's future is running now.
    pub running: bool,
    #[serde(flatten)]
    pub delay: DelaySummary,
}

/// A scheduling-delay histogram, summarised and bucketed for plotting.
#[derive(Debug, Clone, Default, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub struct DelaySummary {
    /// Ticks counted: equal to the fired ticks.
    pub count: u64,
    /// The delays added up (µs).
    pub sum_us: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
    /// Non-empty buckets, lowest first.
    pub buckets: Vec<DelayBucket>,
}

/// One bucket of a delay histogram: `count` delays between `low_us` and `high_us` inclusive.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub struct DelayBucket {
    pub low_us: f64,
    pub high_us: f64,
    pub count: u64,
}

/// The timer thread's cost of sub-millisecond precision: it sleeps until shortly before a due
/// time, then busy-waits the rest.
#[derive(Debug, Clone, Default, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub struct PrecisionMetrics {
    /// CPU time spent busy-waiting since start (µs).
    pub spin_us: u64,
    /// Timed sleeps of the timer thread since start.
    pub sleeps: u64,
    /// How long before a due time the timer thread now wakes up (µs): adapts to the lateness of
    /// the OS's wake-ups, within the configured bounds and CPU budget.
    pub margin_us: f64,
}

fn us(ns: u64) -> f64 {
    ns as f64 / 1_000.0
}

impl From<&Histogram> for DelaySummary {
    fn from(h: &Histogram) -> Self {
        DelaySummary {
            count: h.count(),
            sum_us: us(h.sum()),
            p50_us: us(h.quantile(0.5)),
            p99_us: us(h.quantile(0.99)),
            max_us: us(h.max()),
            buckets: h
                .buckets()
                .map(|b| DelayBucket {
                    low_us: us(b.low),
                    high_us: us(b.high),
                    count: b.count,
                })
                .collect(),
        }
    }
}
