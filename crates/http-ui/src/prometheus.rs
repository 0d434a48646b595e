//! `/metrics` in the Prometheus text exposition format (version 0.0.4), written by
//! prometheus-client's encoder.
//!
//! Every value is read at scrape time from the counters the runtime and the scheduler already
//! own (atomics, and the scheduler's snapshot): [`HostCollector`] is a prometheus-client
//! [`Collector`] that reads them when the registry is encoded, so the hot path keeps its
//! relaxed atomics and registers nothing. The encoder owns the format (names, `_total`
//! suffixes of counters, escaping of help and label values, histogram buckets), so the text is
//! what Prometheus and its libraries expect. Counters are per job (`id`, `job`) and per node
//! (`node`); the scheduler's are process-wide.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::prometheus_text;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeCounterValue, EncodeGaugeValue, EncodeLabelSet, NoLabelSet,
};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use weir_checkpoint::RestoreStats;
use weir_checkpoint::coordinator::{Outcome, Record, StatsSnapshot};
use weir_scheduler::DelaySummary;

use crate::host::Host;
use crate::lifecycle::JobState;
use crate::view::PoolView;

/// The content type of the text format.
pub const CONTENT_TYPE: &str = prometheus_text::CONTENT_TYPE;

/// Upper bounds (seconds) of the scheduler delay histogram's buckets: from the microsecond an
/// idle machine's triggers start within, to the second a starved one can reach.
const DELAY_BOUNDS: [f64; 13] = [
    1e-6, 5e-6, 1e-5, 5e-5, 1e-4, 5e-4, 1e-3, 5e-3, 1e-2, 5e-2, 0.1, 0.5, 1.0,
];

/// The labels of a process-wide sample.
const NO_LABELS: [(&str, &str); 0] = [];

/// Renders every metric of the host.
pub fn render(host: Arc<Host>) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(HostCollector(host)));
    let mut text = String::new();
    // Writing to a `String` cannot fail, and the collector only fails when its writer does.
    if let Err(e) = prometheus_text::encode(&mut text, &registry) {
        tracing::error!("encoding /metrics failed: {e}");
    }
    text
}

/// Reads a host's jobs, nodes, pools and scheduler when a scrape encodes it.
struct HostCollector(Arc<Host>);

impl fmt::Debug for HostCollector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("HostCollector")
    }
}

impl Collector for HostCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        Scrape::of(&self.0).encode(&mut encoder)
    }
}

/// The `id` and `job` labels of a job's samples (the name masked: an alias can make a secret
/// of the job file a name).
#[derive(Clone)]
struct JobLabels {
    id: String,
    job: String,
}

impl JobLabels {
    fn set(&self) -> [(&str, &str); 2] {
        [("id", &self.id), ("job", &self.job)]
    }

    fn with<'a>(&'a self, key: &'a str, value: &'a str) -> [(&'a str, &'a str); 3] {
        [("id", &self.id), ("job", &self.job), (key, value)]
    }
}

/// One node's figures, summed over its subtasks.
struct NodeCounts {
    job: JobLabels,
    node: String,
    records_in: u64,
    records_out: u64,
    backpressure_ns: u64,
    watermark: i64,
    control_messages: u64,
}

/// One partition of a source reading a partitioned log.
struct PartitionFigures {
    job: JobLabels,
    node: String,
    topic: String,
    partition: String,
    position: i64,
    end: Option<i64>,
    lag: Option<i64>,
}

impl PartitionFigures {
    fn labels(&self) -> [(&str, &str); 5] {
        [
            ("id", &self.job.id),
            ("job", &self.job.job),
            ("node", &self.node),
            ("topic", &self.topic),
            ("partition", &self.partition),
        ]
    }
}

/// One job's own figures.
struct JobFigures {
    labels: JobLabels,
    state: JobState,
    uptime_seconds: f64,
    events: u64,
    restarts: u64,
    late_dropped: u64,
    skipped: u64,
    last_checkpoint: Option<LastCheckpoint>,
    checkpoints: Option<StatsSnapshot>,
    restore: Option<RestoreStats>,
    pools: Vec<PoolView>,
}

/// The job's latest completed checkpoint.
struct LastCheckpoint {
    duration_seconds: f64,
    alignment_seconds: f64,
    bytes: u64,
}

/// The bytes a completed snapshot stored (`None` for a failed one).
fn completed_bytes(r: &Record) -> Option<u64> {
    match &r.outcome {
        Outcome::Completed { bytes, .. } => Some(*bytes),
        Outcome::Failed { .. } => None,
    }
}

/// Everything one scrape reports, read from the host under each job's lock in turn.
struct Scrape {
    jobs_by_state: Vec<(JobState, usize)>,
    jobs: Vec<JobFigures>,
    nodes: Vec<NodeCounts>,
    partitions: Vec<PartitionFigures>,
    scheduler: weir_scheduler::SchedulerMetrics,
}

impl Scrape {
    fn of(host: &Host) -> Self {
        let hosted = host.jobs();
        let jobs_by_state = JobState::ALL
            .into_iter()
            .map(|state| (state, hosted.iter().filter(|j| j.state() == state).count()))
            .collect();
        let mut jobs = Vec::new();
        let mut nodes = Vec::new();
        let mut partitions = Vec::new();
        for job in &hosted {
            let labels = JobLabels {
                id: job.id.to_string(),
                job: job.secrets.mask(&job.name).into_owned(),
            };
            let pools = PoolView::of(&job.plan());
            let s = job.lock();
            let checkpoints = s.checkpoint_stats();
            let latest = checkpoints
                .as_ref()
                .and_then(|st| st.latest_completed.clone())
                .or_else(|| {
                    s.past_checkpoints
                        .iter()
                        .rev()
                        .find(|r| completed_bytes(r).is_some())
                        .cloned()
                });
            let state = s.current();
            let summed =
                |f: fn(&weir_runtime::api::SubtaskMetrics) -> &std::sync::atomic::AtomicU64| {
                    s.metrics.nodes.iter().map(|n| n.sum(f)).sum()
                };
            for n in &s.metrics.nodes {
                let node = job.secrets.mask(&n.name).into_owned();
                for t in &n.subtasks {
                    for p in t.partitions() {
                        partitions.push(PartitionFigures {
                            job: labels.clone(),
                            node: node.clone(),
                            topic: job.secrets.mask(&p.topic).into_owned(),
                            partition: p.partition.to_string(),
                            position: p.position,
                            end: p.end,
                            lag: p.lag(),
                        });
                    }
                }
                nodes.push(NodeCounts {
                    job: labels.clone(),
                    node,
                    records_in: n.sum(|t| &t.records_in),
                    records_out: n.sum(|t| &t.records_out),
                    backpressure_ns: n.sum(|t| &t.backpressure_ns),
                    watermark: n.watermark(),
                    control_messages: n.sum(|t| &t.control_messages),
                });
            }
            jobs.push(JobFigures {
                state,
                uptime_seconds: if state.is_live() {
                    (weir_state::clock::now_ms() - s.started_at).max(0) as f64 / 1e3
                } else {
                    0.0
                },
                events: s.metrics.events(),
                restarts: s.metrics.restarts.load(Ordering::Relaxed),
                late_dropped: summed(|t| &t.late_dropped),
                skipped: summed(|t| &t.skipped),
                last_checkpoint: latest.map(|r| LastCheckpoint {
                    duration_seconds: r.duration_ms as f64 / 1e3,
                    alignment_seconds: r.alignment_ms as f64 / 1e3,
                    bytes: completed_bytes(&r).unwrap_or(0),
                }),
                checkpoints,
                restore: s.restore_stats().map(|r| r.stats),
                pools,
                labels,
            });
        }
        Self {
            jobs_by_state,
            jobs,
            nodes,
            partitions,
            scheduler: host.scheduler().metrics(),
        }
    }

    fn encode(&self, out: &mut DescriptorEncoder) -> fmt::Result {
        gauge(
            out,
            "weir_jobs",
            "Jobs hosted, by state.",
            self.jobs_by_state
                .iter()
                .map(|(state, n)| ([("state", state.name())], *n as u64)),
        )?;
        self.encode_partitions(out)?;
        self.encode_jobs(out)?;
        self.encode_nodes(out)?;
        self.encode_checkpoints(out)?;
        self.encode_pools(out)?;
        self.encode_scheduler(out)
    }

    fn encode_partitions(&self, out: &mut DescriptorEncoder) -> fmt::Result {
        let parts = &self.partitions;
        gauge(
            out,
            "weir_source_partition_position",
            "Where a source is in a partition: the offset (Kafka) or stream sequence (NATS) of \
             the next record it emits.",
            parts.iter().map(|p| (p.labels(), p.position)),
        )?;
        gauge(
            out,
            "weir_source_partition_end",
            "The end of a partition as the client last heard it: Kafka's last stable offset, \
             NATS's last stream sequence plus one.",
            parts.iter().filter_map(|p| Some((p.labels(), p.end?))),
        )?;
        gauge(
            out,
            "weir_source_partition_lag",
            "Records of a partition a source has not emitted yet (its end, as the client last \
             heard it, minus the source's position).",
            parts.iter().filter_map(|p| Some((p.labels(), p.lag?))),
        )
    }

    fn encode_jobs(&self, out: &mut DescriptorEncoder) -> fmt::Result {
        let jobs = &self.jobs;
        gauge(
            out,
            "weir_job_state",
            "1 for the state a job is in, 0 for the others (alert on running == 0).",
            jobs.iter().flat_map(|f| {
                JobState::ALL.into_iter().map(move |state| {
                    (
                        f.labels.with("state", state.name()),
                        u64::from(f.state == state),
                    )
                })
            }),
        )?;
        gauge(
            out,
            "weir_job_uptime_seconds",
            "How long the job's current run has been running (0 once it ended).",
            jobs.iter().map(|f| (f.labels.set(), f.uptime_seconds)),
        )?;
        counter(
            out,
            "weir_job_late_records_dropped",
            "Records the job's event-time operators dropped for arriving after their window closed.",
            jobs.iter().map(|f| (f.labels.set(), f.late_dropped)),
        )?;
        counter(
            out,
            "weir_job_skipped_records",
            "Input records (lines) the job's sources skipped under `on-error: skip`.",
            jobs.iter().map(|f| (f.labels.set(), f.skipped)),
        )?;
        fn last(f: &JobFigures) -> Option<([(&str, &str); 2], &LastCheckpoint)> {
            Some((f.labels.set(), f.last_checkpoint.as_ref()?))
        }
        gauge(
            out,
            "weir_job_last_checkpoint_duration_seconds",
            "How long the job's latest completed checkpoint took, trigger to publication.",
            jobs.iter()
                .filter_map(last)
                .map(|(l, c)| (l, c.duration_seconds)),
        )?;
        gauge(
            out,
            "weir_job_last_checkpoint_size_bytes",
            "Bytes the job's latest completed checkpoint stored.",
            jobs.iter().filter_map(last).map(|(l, c)| (l, c.bytes)),
        )?;
        gauge(
            out,
            "weir_job_last_checkpoint_alignment_seconds",
            "The longest barrier alignment of any task in the job's latest completed checkpoint.",
            jobs.iter()
                .filter_map(last)
                .map(|(l, c)| (l, c.alignment_seconds)),
        )?;
        counter(
            out,
            "weir_job_events",
            "Input units consumed by the sources of the job's current run.",
            jobs.iter().map(|f| (f.labels.set(), f.events)),
        )?;
        counter(
            out,
            "weir_job_restarts",
            "Restarts after task failures in the job's current run.",
            jobs.iter().map(|f| (f.labels.set(), f.restarts)),
        )
    }

    fn encode_nodes(&self, out: &mut DescriptorEncoder) -> fmt::Result {
        let nodes = &self.nodes;
        fn labels(n: &NodeCounts) -> [(&str, &str); 3] {
            n.job.with("node", &n.node)
        }
        counter(
            out,
            "weir_node_records_in",
            "Records received by a node.",
            nodes.iter().map(|n| (labels(n), n.records_in)),
        )?;
        counter(
            out,
            "weir_node_records_out",
            "Records emitted by a node.",
            nodes.iter().map(|n| (labels(n), n.records_out)),
        )?;
        counter(
            out,
            "weir_node_backpressure_seconds",
            "Time a node's subtasks waited for room in full output channels.",
            nodes
                .iter()
                .map(|n| (labels(n), n.backpressure_ns as f64 / 1e9)),
        )?;
        gauge(
            out,
            "weir_node_watermark_milliseconds",
            "A node's input watermark, epoch ms (absent before the first and after the end).",
            nodes.iter().filter_map(|n| {
                use weir_runtime::api::{BEGINNING_OF_TIME, END_OF_TIME};
                (n.watermark != BEGINNING_OF_TIME && n.watermark != END_OF_TIME)
                    .then(|| (labels(n), n.watermark))
            }),
        )?;
        counter(
            out,
            "weir_node_control_messages",
            "Control messages (ordered state lookups) a node's subtasks answered.",
            nodes.iter().map(|n| (labels(n), n.control_messages)),
        )
    }

    fn encode_checkpoints(&self, out: &mut DescriptorEncoder) -> fmt::Result {
        type Pick<T> = fn(&T) -> u64;
        let stats: [(&str, &str, Pick<StatsSnapshot>); 3] = [
            (
                "weir_checkpoints_completed",
                "Checkpoints and savepoints completed by the job's current run.",
                |s| s.completed,
            ),
            (
                "weir_checkpoints_failed",
                "Checkpoints and savepoints that failed in the job's current run.",
                |s| s.failed,
            ),
            (
                "weir_checkpoints_skipped",
                "Checkpoint triggers refused before starting (min pause, too many in flight).",
                |s| s.skipped,
            ),
        ];
        for (name, help, pick) in stats {
            counter(
                out,
                name,
                help,
                self.jobs
                    .iter()
                    .filter_map(|f| Some((f.labels.set(), pick(f.checkpoints.as_ref()?)))),
            )?;
        }
        // Gauges, not counters: each restore replaces the previous one's figures.
        let restores: [(&str, &str, Pick<RestoreStats>); 5] = [
            (
                "weir_restore_seeks_performed",
                "Repositionings of the job's latest restore while reading operator state.",
                |r| r.seeks_performed,
            ),
            (
                "weir_restore_seeks_skipped",
                "Ranges the latest restore read without repositioning (already there, or a \
                 small gap read through).",
                |r| r.seeks_skipped,
            ),
            (
                "weir_restore_requests",
                "Storage requests (ranged GETs on object storage) of the latest restore.",
                |r| r.requests,
            ),
            (
                "weir_restore_bytes_read",
                "Bytes the latest restore fetched, gaps read through included.",
                |r| r.bytes_read,
            ),
            (
                "weir_restore_ranges",
                "Operator-state ranges the latest restore needed.",
                |r| r.ranges,
            ),
        ];
        for (name, help, pick) in restores {
            gauge(
                out,
                name,
                help,
                self.jobs
                    .iter()
                    .filter_map(|f| Some((f.labels.set(), pick(f.restore.as_ref()?)))),
            )?;
        }
        Ok(())
    }

    fn encode_pools(&self, out: &mut DescriptorEncoder) -> fmt::Result {
        type Pick = fn(&PoolView) -> u64;
        let pooled = || {
            self.jobs.iter().flat_map(|f| {
                f.pools
                    .iter()
                    .map(move |p| (f.labels.with("node", &p.node), p))
            })
        };
        let gauges: [(&str, &str, Pick); 4] = [
            (
                "weir_pool_connections_in_use",
                "Pooled connections of a sink handed out.",
                |p| p.in_use as u64,
            ),
            (
                "weir_pool_connections_idle",
                "Open pooled connections of a sink waiting for use.",
                |p| p.idle as u64,
            ),
            (
                "weir_pool_connections_max",
                "The most connections a sink's pool opens.",
                |p| p.max_size as u64,
            ),
            (
                "weir_pool_waiters",
                "Acquires of a sink's pool waiting for a connection.",
                |p| p.waiters as u64,
            ),
        ];
        for (name, help, pick) in gauges {
            gauge(out, name, help, pooled().map(|(l, p)| (l, pick(p))))?;
        }
        counter(
            out,
            "weir_pool_acquire_timeouts",
            "Acquires of a sink's pool that timed out.",
            pooled().map(|(l, p)| (l, p.timeouts)),
        )?;
        counter(
            out,
            "weir_pool_connections_broken",
            "Pooled connections closed as broken (and replaced).",
            pooled().map(|(l, p)| (l, p.broken)),
        )
    }

    fn encode_scheduler(&self, out: &mut DescriptorEncoder) -> fmt::Result {
        let s = &self.scheduler;
        gauge(
            out,
            "weir_scheduler_threads",
            "Threads owned by the shared checkpoint scheduler.",
            [(NO_LABELS, s.threads as u64)],
        )?;
        gauge(
            out,
            "weir_scheduler_leases",
            "Pipelines registered with the shared checkpoint scheduler.",
            [(NO_LABELS, s.leases as u64)],
        )?;
        counter(
            out,
            "weir_scheduler_ticks_fired",
            "Checkpoint ticks whose trigger ran.",
            [(NO_LABELS, s.fired)],
        )?;
        counter(
            out,
            "weir_scheduler_ticks_coalesced",
            "Ticks that found their pipeline's previous trigger still running (never queued).",
            [(NO_LABELS, s.coalesced)],
        )?;
        let mut family = out.encode_descriptor(
            "weir_scheduler_delay_seconds",
            "Scheduling delay of fired ticks: actual start minus due time.",
            None,
            MetricType::Histogram,
        )?;
        family.encode_histogram::<NoLabelSet>(
            s.delay.sum_us / 1e6,
            s.delay.count,
            &delay_buckets(&s.delay),
            None,
        )
    }
}

/// The scheduler's log-linear delay buckets counted into [`DELAY_BOUNDS`]: each under the
/// first bound at or above its top, so a delay within 1/16 below a bound may be counted
/// under the next one (the histogram's own precision), never under a smaller one. Counts per
/// bucket, not cumulative (the encoder adds them up).
fn delay_buckets(delay: &DelaySummary) -> Vec<(f64, u64)> {
    let mut counts = vec![0u64; DELAY_BOUNDS.len()];
    for b in &delay.buckets {
        let top = b.high_us / 1e6;
        if let Some(i) = DELAY_BOUNDS.iter().position(|&le| top <= le) {
            counts[i] += b.count;
        }
    }
    DELAY_BOUNDS.iter().copied().zip(counts).collect()
}

/// A gauge family: one sample per label set.
fn gauge<L: EncodeLabelSet, V: EncodeGaugeValue>(
    out: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    samples: impl IntoIterator<Item = (L, V)>,
) -> fmt::Result {
    let mut family = out.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (labels, value) in samples {
        family.encode_family(&labels)?.encode_gauge(&value)?;
    }
    Ok(())
}

/// A counter family, `name` without its `_total` (the encoder adds it).
fn counter<L: EncodeLabelSet, V: EncodeCounterValue>(
    out: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    samples: impl IntoIterator<Item = (L, V)>,
) -> fmt::Result {
    let mut family = out.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (labels, value) in samples {
        family
            .encode_family(&labels)?
            .encode_counter::<NoLabelSet, V, f64>(&value, None)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tiny collector of fixed samples, to see the encoder's text.
    #[derive(Debug)]
    struct Fixed;

    impl Collector for Fixed {
        fn encode(&self, mut out: DescriptorEncoder) -> fmt::Result {
            counter(&mut out, "m", "Help.", [([("job", "q\"1\\\n")], 2u64)])?;
            gauge(&mut out, "g", "Gauge.", [(NO_LABELS, 1.5f64)])
        }
    }

    #[test]
    fn label_values_are_escaped_and_counters_end_in_total() {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(Fixed));
        let mut text = String::new();
        prometheus_text::encode(&mut text, &registry).unwrap();
        assert!(
            text.contains("m_total{job=\"q\\\"1\\\\\\n\"} 2\n"),
            "{text}"
        );
        assert!(text.contains("# TYPE m_total counter\n"), "{text}");
        assert!(text.contains("\ng 1.5\n"), "{text}");
    }

    #[test]
    fn delay_buckets_count_each_delay_under_the_first_bound_at_or_above_it() {
        use weir_scheduler::DelayBucket;
        let bucket = |low_us: f64, high_us: f64, count: u64| DelayBucket {
            low_us,
            high_us,
            count,
        };
        let delay = DelaySummary {
            count: 7,
            buckets: vec![
                bucket(0.1, 0.2, 3),
                bucket(0.97, 1.0, 1),
                bucket(1.0, 1.03, 1),
                bucket(2000.0, 2100.0, 1),
                bucket(5e6, 5.1e6, 1),
            ],
            ..DelaySummary::default()
        };
        let counts = delay_buckets(&delay);
        // Naively: how many of each bucket's top fall in (previous bound, bound].
        assert_eq!(counts[0], (1e-6, 4));
        assert_eq!(counts[1], (5e-6, 1));
        assert_eq!(counts[7], (5e-3, 1));
        // 5.1 s is above every bound: only the `+Inf` bucket (the count) holds it.
        assert_eq!(counts.iter().map(|c| c.1).sum::<u64>(), 6);
    }
}
