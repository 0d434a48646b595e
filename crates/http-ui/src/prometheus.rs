//! `/metrics` in the Prometheus text exposition format (version 0.0.4).
//!
//! Every value is read at scrape time from the counters the runtime and the scheduler already
//! own (atomics, and the scheduler's snapshot): a metrics registry would only copy them.
//! Counters are per job (`id`, `job`) and per node (`node`); the scheduler's are process-wide.

use std::fmt::Write;
use std::sync::atomic::Ordering;

use weir_checkpoint::coordinator::StatsSnapshot;

use crate::host::Host;
use crate::job::JobState;

/// A family of one value per job: name, help, and how to read the value from a job's `T`.
type JobFamily<'a, T> = (&'a str, &'a str, fn(&T) -> u64);

/// A family of one value per node: name, kind, help, and the value (`None`: no sample).
type NodeFamily<'a> = (&'a str, &'a str, &'a str, fn(&NodeCounts) -> Option<f64>);

/// One node's figures, summed over its subtasks.
struct NodeCounts {
    records_in: u64,
    records_out: u64,
    backpressure_ns: u64,
    watermark: i64,
    control_messages: u64,
}

/// One job's own figures.
struct JobFigures {
    id: String,
    name: String,
    state: JobState,
    uptime_seconds: f64,
    late_dropped: u64,
    skipped: u64,
    last_checkpoint: Option<LastCheckpoint>,
}

/// The job's latest completed checkpoint.
struct LastCheckpoint {
    duration_seconds: f64,
    alignment_seconds: f64,
    bytes: f64,
}

/// The bytes a completed snapshot stored (`None` for a failed one).
fn completed_bytes(r: &weir_checkpoint::coordinator::Record) -> Option<u64> {
    match &r.outcome {
        weir_checkpoint::coordinator::Outcome::Completed { bytes, .. } => Some(*bytes),
        weir_checkpoint::coordinator::Outcome::Failed { .. } => None,
    }
}

/// The content type of the text format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Renders every metric of the host.
pub fn render(host: &Host) -> String {
    let mut out = Exposition::default();
    let jobs = host.jobs();

    out.family("weir_jobs", "gauge", "Jobs hosted, by state.");
    for state in JobState::ALL {
        let n = jobs.iter().filter(|j| j.state() == state).count();
        out.sample("weir_jobs", &[("state", state.name())], n as f64);
    }

    let mut job_events = Vec::new();
    let mut job_restarts = Vec::new();
    let mut figures: Vec<JobFigures> = Vec::new();
    let mut checkpoints = Vec::new();
    let mut nodes = Vec::new();
    let mut pools = Vec::new();
    let mut restores = Vec::new();
    // (job id, job, node, topic, partition, lag) of sources reading partitioned logs.
    let mut lags: Vec<(String, String, String, String, String, i64)> = Vec::new();
    // Per partition of a source: (id, job, node, topic, partition) and the value.
    type PartitionLabels = (String, String, String, String, String);
    let mut positions: Vec<(PartitionLabels, i64)> = Vec::new();
    let mut ends: Vec<(PartitionLabels, i64)> = Vec::new();
    for job in &jobs {
        // A label may quote a secret of the job file (an alias can make one a name).
        let name = job.secrets.mask(&job.name).into_owned();
        for pool in crate::view::PoolView::of(&job.plan()) {
            pools.push((job.id.to_string(), name.clone(), pool));
        }
        let s = job.lock();
        let id = job.id.to_string();
        job_events.push((id.clone(), name.clone(), s.metrics.events()));
        job_restarts.push((
            id.clone(),
            name.clone(),
            s.metrics.restarts.load(Ordering::Relaxed),
        ));
        let stats = s.checkpoint_stats();
        let latest = stats
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
        figures.push(JobFigures {
            id: id.clone(),
            name: name.clone(),
            state,
            uptime_seconds: if state.is_live() {
                (crate::job::now_ms() - s.started_at).max(0) as f64 / 1e3
            } else {
                0.0
            },
            late_dropped: s
                .metrics
                .nodes
                .iter()
                .map(|n| n.sum(|t| &t.late_dropped))
                .sum(),
            skipped: s.metrics.nodes.iter().map(|n| n.sum(|t| &t.skipped)).sum(),
            last_checkpoint: latest.map(|r| LastCheckpoint {
                duration_seconds: r.duration_ms as f64 / 1e3,
                alignment_seconds: r.alignment_ms as f64 / 1e3,
                bytes: completed_bytes(&r).unwrap_or(0) as f64,
            }),
        });
        if let Some(stats) = stats {
            checkpoints.push((id.clone(), name.clone(), stats));
        }
        if let Some(restore) = s.restore_stats() {
            restores.push((id.clone(), name.clone(), restore.stats));
        }
        for n in &s.metrics.nodes {
            let counts = NodeCounts {
                records_in: n.sum(|t| &t.records_in),
                records_out: n.sum(|t| &t.records_out),
                backpressure_ns: n.sum(|t| &t.backpressure_ns),
                watermark: n.watermark(),
                control_messages: n.sum(|t| &t.control_messages),
            };
            let node = job.secrets.mask(&n.name).into_owned();
            for t in &n.subtasks {
                for p in t.partitions() {
                    let labels = (
                        id.clone(),
                        name.clone(),
                        node.clone(),
                        job.secrets.mask(&p.topic).into_owned(),
                        p.partition.to_string(),
                    );
                    positions.push((labels.clone(), p.position));
                    if let Some(end) = p.end {
                        ends.push((labels.clone(), end));
                    }
                    if let Some(lag) = p.lag() {
                        let (id, job, node, topic, partition) = labels;
                        lags.push((id, job, node, topic, partition, lag));
                    }
                }
            }
            nodes.push((id.clone(), name.clone(), node, counts));
        }
    }

    for (family, help, values) in [
        (
            "weir_source_partition_position",
            "Where a source is in a partition: the offset (Kafka) or stream sequence (NATS) of \
             the next record it emits.",
            &positions,
        ),
        (
            "weir_source_partition_end",
            "The end of a partition as the client last heard it: Kafka's last stable offset, \
             NATS's last stream sequence plus one.",
            &ends,
        ),
    ] {
        out.family(family, "gauge", help);
        for ((id, job, node, topic, partition), v) in values {
            out.sample(
                family,
                &[
                    ("id", id),
                    ("job", job),
                    ("node", node),
                    ("topic", topic),
                    ("partition", partition),
                ],
                *v as f64,
            );
        }
    }
    out.family(
        "weir_source_partition_lag",
        "gauge",
        "Records of a partition a source has not emitted yet (its end, as the client last heard \
         it, minus the source's position).",
    );
    for (id, job, node, topic, partition, lag) in &lags {
        out.sample(
            "weir_source_partition_lag",
            &[
                ("id", id),
                ("job", job),
                ("node", node),
                ("topic", topic),
                ("partition", partition),
            ],
            *lag as f64,
        );
    }
    out.family(
        "weir_job_state",
        "gauge",
        "1 for the state a job is in, 0 for the others (alert on running == 0).",
    );
    for f in &figures {
        for state in JobState::ALL {
            out.sample(
                "weir_job_state",
                &[("id", &f.id), ("job", &f.name), ("state", state.name())],
                if f.state == state { 1.0 } else { 0.0 },
            );
        }
    }
    type FigurePick = fn(&JobFigures) -> Option<f64>;
    let figure_families: [(&str, &str, &str, FigurePick); 6] = [
        (
            "weir_job_uptime_seconds",
            "gauge",
            "How long the job's current run has been running (0 once it ended).",
            |f| Some(f.uptime_seconds),
        ),
        (
            "weir_job_late_records_dropped_total",
            "counter",
            "Records the job's event-time operators dropped for arriving after their window closed.",
            |f| Some(f.late_dropped as f64),
        ),
        (
            "weir_job_skipped_records_total",
            "counter",
            "Input records (lines) the job's sources skipped under `on-error: skip`.",
            |f| Some(f.skipped as f64),
        ),
        (
            "weir_job_last_checkpoint_duration_seconds",
            "gauge",
            "How long the job's latest completed checkpoint took, trigger to publication.",
            |f| f.last_checkpoint.as_ref().map(|c| c.duration_seconds),
        ),
        (
            "weir_job_last_checkpoint_size_bytes",
            "gauge",
            "Bytes the job's latest completed checkpoint stored.",
            |f| f.last_checkpoint.as_ref().map(|c| c.bytes),
        ),
        (
            "weir_job_last_checkpoint_alignment_seconds",
            "gauge",
            "The longest barrier alignment of any task in the job's latest completed checkpoint.",
            |f| f.last_checkpoint.as_ref().map(|c| c.alignment_seconds),
        ),
    ];
    for (family, kind, help, pick) in figure_families {
        out.family(family, kind, help);
        for f in &figures {
            if let Some(v) = pick(f) {
                out.sample(family, &[("id", &f.id), ("job", &f.name)], v);
            }
        }
    }
    out.family(
        "weir_job_events_total",
        "counter",
        "Input units consumed by the sources of the job's current run.",
    );
    for (id, job, v) in &job_events {
        out.sample(
            "weir_job_events_total",
            &[("id", id), ("job", job)],
            *v as f64,
        );
    }
    out.family(
        "weir_job_restarts_total",
        "counter",
        "Restarts after task failures in the job's current run.",
    );
    for (id, job, v) in &job_restarts {
        out.sample(
            "weir_job_restarts_total",
            &[("id", id), ("job", job)],
            *v as f64,
        );
    }
    let node_families: [NodeFamily<'_>; 5] = [
        (
            "weir_node_records_in_total",
            "counter",
            "Records received by a node.",
            |n| Some(n.records_in as f64),
        ),
        (
            "weir_node_records_out_total",
            "counter",
            "Records emitted by a node.",
            |n| Some(n.records_out as f64),
        ),
        (
            "weir_node_backpressure_seconds_total",
            "counter",
            "Time a node's subtasks waited for room in full output channels.",
            |n| Some(n.backpressure_ns as f64 / 1e9),
        ),
        (
            "weir_node_watermark_milliseconds",
            "gauge",
            "A node's input watermark, epoch ms (absent before the first and after the end).",
            |n| {
                use weir_runtime::api::{BEGINNING_OF_TIME, END_OF_TIME};
                (n.watermark != BEGINNING_OF_TIME && n.watermark != END_OF_TIME)
                    .then_some(n.watermark as f64)
            },
        ),
        (
            "weir_node_control_messages_total",
            "counter",
            "Control messages (ordered state lookups) a node's subtasks answered.",
            |n| Some(n.control_messages as f64),
        ),
    ];
    out.node_families(&node_families, &nodes);
    let families: [JobFamily<'_, StatsSnapshot>; 3] = [
        (
            "weir_checkpoints_completed_total",
            "Checkpoints and savepoints completed by the job's current run.",
            |s| s.completed,
        ),
        (
            "weir_checkpoints_failed_total",
            "Checkpoints and savepoints that failed in the job's current run.",
            |s| s.failed,
        ),
        (
            "weir_checkpoints_skipped_total",
            "Checkpoint triggers refused before starting (min pause, too many in flight).",
            |s| s.skipped,
        ),
    ];
    out.job_families("counter", &families, &checkpoints);

    // Gauges, not counters: each restore replaces the previous one's figures.
    let restore_families: [JobFamily<'_, weir_checkpoint::RestoreStats>; 5] = [
        (
            "weir_restore_seeks_performed",
            "Repositionings of the job's latest restore while reading operator state.",
            |r| r.seeks_performed,
        ),
        (
            "weir_restore_seeks_skipped",
            "Ranges the latest restore read without repositioning (already there, or a small gap read through).",
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
    out.job_families("gauge", &restore_families, &restores);

    type PoolPick = fn(&crate::view::PoolView) -> f64;
    let pool_families: [(&str, &str, &str, PoolPick); 6] = [
        (
            "weir_pool_connections_in_use",
            "gauge",
            "Pooled connections of a sink handed out.",
            |p| p.in_use as f64,
        ),
        (
            "weir_pool_connections_idle",
            "gauge",
            "Open pooled connections of a sink waiting for use.",
            |p| p.idle as f64,
        ),
        (
            "weir_pool_connections_max",
            "gauge",
            "The most connections a sink's pool opens.",
            |p| p.max_size as f64,
        ),
        (
            "weir_pool_waiters",
            "gauge",
            "Acquires of a sink's pool waiting for a connection.",
            |p| p.waiters as f64,
        ),
        (
            "weir_pool_acquire_timeouts_total",
            "counter",
            "Acquires of a sink's pool that timed out.",
            |p| p.timeouts as f64,
        ),
        (
            "weir_pool_connections_broken_total",
            "counter",
            "Pooled connections closed as broken (and replaced).",
            |p| p.broken as f64,
        ),
    ];
    for (name, kind, help, pick) in pool_families {
        out.family(name, kind, help);
        for (id, job, pool) in &pools {
            out.sample(
                name,
                &[("id", id), ("job", job), ("node", &pool.node)],
                pick(pool),
            );
        }
    }

    let scheduler = host.scheduler().metrics();
    out.family(
        "weir_scheduler_threads",
        "gauge",
        "Threads owned by the shared checkpoint scheduler.",
    );
    out.sample("weir_scheduler_threads", &[], scheduler.threads as f64);
    out.family(
        "weir_scheduler_leases",
        "gauge",
        "Pipelines registered with the shared checkpoint scheduler.",
    );
    out.sample("weir_scheduler_leases", &[], scheduler.leases as f64);
    out.family(
        "weir_scheduler_ticks_fired_total",
        "counter",
        "Checkpoint ticks whose trigger ran.",
    );
    out.sample(
        "weir_scheduler_ticks_fired_total",
        &[],
        scheduler.fired as f64,
    );
    out.family(
        "weir_scheduler_ticks_coalesced_total",
        "counter",
        "Ticks that found their pipeline's previous trigger still running (never queued).",
    );
    out.sample(
        "weir_scheduler_ticks_coalesced_total",
        &[],
        scheduler.coalesced as f64,
    );
    out.family(
        "weir_scheduler_delay_seconds",
        "summary",
        "Scheduling delay of fired ticks: actual start minus due time.",
    );
    for (q, v) in [
        ("0.5", scheduler.delay.p50_us),
        ("0.99", scheduler.delay.p99_us),
    ] {
        out.sample("weir_scheduler_delay_seconds", &[("quantile", q)], v / 1e6);
    }
    out.sample(
        "weir_scheduler_delay_seconds_sum",
        &[],
        scheduler.delay.sum_us / 1e6,
    );
    out.sample(
        "weir_scheduler_delay_seconds_count",
        &[],
        scheduler.delay.count as f64,
    );
    out.text
}

/// The text being written.
#[derive(Default)]
struct Exposition {
    text: String,
}

impl Exposition {
    /// Families of one value per job, each `(name, help, pick)` read from every job's `T`.
    fn job_families<T>(
        &mut self,
        kind: &str,
        families: &[JobFamily<'_, T>],
        jobs: &[(String, String, T)],
    ) {
        for (name, help, pick) in families {
            self.family(name, kind, help);
            for (id, job, value) in jobs {
                self.sample(name, &[("id", id), ("job", job)], pick(value) as f64);
            }
        }
    }

    /// Families of one value per node, each read from every node's [`NodeCounts`].
    fn node_families(
        &mut self,
        families: &[NodeFamily<'_>],
        nodes: &[(String, String, String, NodeCounts)],
    ) {
        for (name, kind, help, pick) in families {
            self.family(name, kind, help);
            for (id, job, node, counts) in nodes {
                if let Some(value) = pick(counts) {
                    self.sample(name, &[("id", id), ("job", job), ("node", node)], value);
                }
            }
        }
    }

    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.text, "# HELP {name} {help}");
        let _ = writeln!(self.text, "# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        self.text.push_str(name);
        if !labels.is_empty() {
            self.text.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.text.push(',');
                }
                let _ = write!(self.text, "{k}=\"{}\"", escape(v));
            }
            self.text.push('}');
        }
        let _ = writeln!(self.text, " {value}");
    }
}

/// A label value with `\`, `"` and newlines escaped.
fn escape(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape(r#"a"b\c"#), r#"a\"b\\c"#);
        assert_eq!(escape("x\ny"), "x\\ny");
        let mut e = Exposition::default();
        e.sample("m", &[("job", "q\"1")], 2.0);
        assert_eq!(e.text, "m{job=\"q\\\"1\"} 2\n");
    }
}
