//! What the API answers: plain serializable views of hosted jobs, built under each job's lock
//! from its live metrics and samples. Keys are kebab-case, as in job files and the scheduler's
//! metrics. Every answer is a type here (or one these hold) deriving its JSON schema, from
//! which [`crate::openapi`] builds the API's document: a field added to a view is documented
//! by that alone. What the API reads (request bodies, query strings) is typed here too, at the
//! end, so that the document describes the API from beneath it.

use std::sync::atomic::Ordering;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use weir_checkpoint::coordinator::{Outcome, Record};
use weir_checkpoint::metadata::SnapshotKind;
use weir_runtime::api::{BEGINNING_OF_TIME, END_OF_TIME};
use weir_runtime::api::{NodeRole, UNKNOWN};
use weir_scheduler::{DelaySummary, PipelineMetrics};
use weir_state::clock::now_ms;

use crate::job::{HostedJob, JobInner, Sample, rate};
use crate::lifecycle::JobState;

/// A job in the jobs list (and the head of its detail).
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub struct JobOverview {
    pub id: String,
    pub name: String,
    pub description: Option<String>,
    pub state: JobState,
    /// Runs of this job (restarts, rescales and resumes add one).
    pub run: u32,
    /// The job's parallelism: of every node that does not set its own.
    pub parallelism: u32,
    pub checkpointing: bool,
    pub submitted_at: i64,
    pub started_at: i64,
    pub ended_at: Option<i64>,
    pub duration_ms: i64,
    /// Input units consumed by the sources of the current run.
    pub events: u64,
    /// Over the last sampling interval (0 once the run ended).
    pub events_per_second: f64,
    /// Restarts after task failures within the current run.
    pub restarts: u64,
    /// The job's output watermark (epoch ms), if one has been seen and input has not ended.
    pub watermark: Option<i64>,
    /// Wall-clock time minus the watermark.
    pub watermark_lag_ms: Option<i64>,
    /// Share of the input consumed (0–1), for bounded inputs of known size.
    pub progress: Option<f64>,
    /// Events per second over the last [`OVERVIEW_POINTS`] sampling intervals, oldest first.
    pub throughput: Vec<f64>,
    /// In a fleet's jobs list, the URL of the server running the job.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
}

/// Points of throughput history in a job's overview (the jobs list shows them as sparklines).
pub const OVERVIEW_POINTS: usize = 30;

/// One operator of the DAG.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub struct NodeView {
    pub id: usize,
    pub name: String,
    pub kind: String,
    pub role: NodeRole,
    /// Nodes with the same chain run in one task.
    pub chain: usize,
    pub parallelism: usize,
    /// The rows it emits (a sink: the rows it takes): `append`, or an updating stream's row
    /// kinds and key (`updating (+I -U +U -D), key [n]`), as `weir explain` prints them.
    pub changes: String,
    /// `running`, `finished` (all subtasks done), or the job's state once it ended.
    pub status: &'static str,
    pub subtasks_finished: usize,
    pub records_in: u64,
    pub records_out: u64,
    pub rate_in: f64,
    pub rate_out: f64,
    /// Share of the last sampling interval the node's subtasks spent waiting for room
    /// downstream (0–1): its backpressure.
    pub backpressure: f64,
    pub backpressure_ms: u64,
    pub watermark: Option<i64>,
    pub watermark_lag_ms: Option<i64>,
    /// How far the node's watermark trails the most advanced source's: event time still in
    /// flight between them (meaningful whatever the input's clock).
    pub watermark_delay_ms: Option<i64>,
    /// Barriers processed and time spent aligning them (all subtasks).
    pub barriers: u64,
    pub alignment_ms: u64,
    pub skipped: u64,
    pub late_dropped: u64,
    /// Sources reading partitioned logs (Kafka): each partition's subtask, position, end and
    /// lag; empty for other nodes.
    pub partitions: Vec<PartitionView>,
    /// States that can be looked up by key (`GET /api/v1/jobs/{id}/state/{node}/{state}`).
    pub queryable: Vec<QueryableView>,
    /// The key columns a lookup gives values for (queryable nodes).
    pub key_columns: Vec<String>,
    /// Control messages (ordered state lookups) the node's tasks answered.
    pub control_messages: u64,
    /// Share of the last sampling interval the node's tasks spent working (0–1, averaged
    /// over subtasks; `null` for nodes chained behind another, whose task counts it).
    pub busy: Option<f64>,
    /// Keyed operators: keys and bytes of their state over all subtasks, as the backend
    /// estimates them (`state-bytes` is `null` on the heap backend).
    pub state_keys: Option<u64>,
    pub state_bytes: Option<u64>,
    /// How unevenly the subtasks share the work: the busiest subtask's records (in, or out for
    /// sources) over the last sampling interval against the least busy's; `null` with one
    /// subtask or too little traffic to tell.
    pub skew: Option<f64>,
    /// The skew is over [`SKEWED`]: one subtask does more than twice another's work.
    pub skewed: bool,
    /// Oldest first, one point per sampling interval.
    pub history: NodeHistory,
    /// Every subtask's own figures.
    pub subtasks: Vec<SubtaskView>,
}

/// What `node` emits, or for a sink what it takes: its (first) output's changelog mode.
fn changes_of(plan: &weir_runtime::plan::Plan, node: &weir_runtime::plan::PlanNode) -> String {
    let schema = match node.ports.first() {
        Some((_, schema)) => Some(schema),
        None => node.inputs.first().and_then(|e| {
            let from = plan.nodes.get(e.from)?;
            from.ports.get(e.port).map(|(_, s)| s)
        }),
    };
    schema.map_or_else(
        || "append".into(),
        |s| weir_runtime::changelog::ChangelogMode::of(s).describe(),
    )
}

/// A skew (busiest over least busy subtask) past which the graph flags a node.
pub const SKEWED: f64 = 2.0;

/// Points of history per subtask (the newest).
pub const SUBTASK_POINTS: usize = 30;

/// One subtask of a node.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub struct SubtaskView {
    pub subtask: usize,
    pub finished: bool,
    pub records_in: u64,
    pub records_out: u64,
    pub rate_in: f64,
    pub rate_out: f64,
    /// Share of the last interval spent waiting for room downstream (0–1).
    pub backpressure: f64,
    /// Share of the last interval its task spent working, and waiting for input (0–1);
    /// `null` for nodes chained behind another (their task's first node counts it).
    pub busy: Option<f64>,
    pub idle: Option<f64>,
    /// The subtask's input watermark, and each logical input's (two for joins).
    pub watermark: Option<i64>,
    pub input_watermarks: Vec<Option<i64>>,
    pub state_keys: Option<u64>,
    pub state_bytes: Option<u64>,
    pub late_dropped: u64,
    pub skipped: u64,
    /// Oldest first, the last [`SUBTASK_POINTS`] sampling intervals.
    pub history: SubtaskHistory,
}

#[derive(Debug, Default, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub struct SubtaskHistory {
    pub rate_in: Vec<f64>,
    pub rate_out: Vec<f64>,
    pub backpressure: Vec<f64>,
    pub busy: Vec<f64>,
}

/// Where a source subtask is in one partition.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub struct PartitionView {
    pub topic: String,
    pub partition: i32,
    pub subtask: usize,
    /// The offset of the next record the source emits.
    pub position: i64,
    /// The partition's end as the client last heard it (`null` before it heard).
    pub end: Option<i64>,
    pub lag: Option<i64>,
}

/// One queryable state of a node.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub struct QueryableView {
    pub state: String,
    /// `direct` or `ordered`: the path lookups take unless they ask for the other.
    pub path: weir_runtime::spec::QueryPath,
    pub max_staleness_ms: Option<i64>,
}

#[derive(Debug, Default, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub struct NodeHistory {
    pub rate_in: Vec<f64>,
    pub rate_out: Vec<f64>,
    pub backpressure: Vec<f64>,
}

/// An edge of the DAG.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub struct EdgeView {
    pub from: usize,
    pub to: usize,
    /// The output port of `from` read, when it has several (`bid`).
    pub port: Option<String>,
    /// `forward`, `rebalance` or `hash`.
    pub partitioning: &'static str,
}

/// Everything about one job.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub struct JobDetail {
    #[serde(flatten)]
    pub overview: JobOverview,
    pub nodes: Vec<NodeView>,
    pub edges: Vec<EdgeView>,
    /// Events per second, oldest first, one point per sampling interval.
    pub events_history: Vec<f64>,
    pub sample_interval_ms: u64,
    pub restored_from: Option<String>,
    /// The savepoint a stop took, or the final snapshot of a bounded run.
    pub snapshot: Option<String>,
    pub error: Option<String>,
    /// The connection pools of sinks that write through one (`postgres`).
    pub pools: Vec<PoolView>,
    /// How the latest restore read its snapshot, when the job was restored: which snapshot,
    /// seeks performed and skipped, requests and bytes.
    pub restore: Option<weir_runtime::exec::job::RestoreReport>,
}

/// The gauges and counters of one sink's connection pool.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub struct PoolView {
    /// The sink node.
    pub node: String,
    pub max_size: usize,
    pub in_use: usize,
    pub idle: usize,
    pub opening: usize,
    pub waiters: usize,
    pub opened: u64,
    pub broken: u64,
    pub timeouts: u64,
    pub acquire_p50_us: u64,
    pub acquire_p99_us: u64,
    /// The most actions one combining run applied, and how long the longest run took.
    pub longest_run_actions: u64,
    pub longest_run_us: u64,
}

impl PoolView {
    /// The pools of `plan`'s sinks, read now.
    pub fn of(plan: &weir_runtime::plan::Plan) -> Vec<PoolView> {
        plan.nodes
            .iter()
            .filter_map(|n| match &n.factory {
                weir_runtime::plan::Factory::Sink(f) => f.pool_metrics().map(|m| (n, m)),
                _ => None,
            })
            .map(|(n, m)| PoolView {
                node: n.name.clone(),
                max_size: m.max_size,
                in_use: m.in_use,
                idle: m.idle,
                opening: m.opening,
                waiters: m.waiters,
                opened: m.opened,
                broken: m.broken,
                timeouts: m.timeouts,
                acquire_p50_us: m.acquire_latency.p50.as_micros() as u64,
                acquire_p99_us: m.acquire_latency.p99.as_micros() as u64,
                longest_run_actions: m.combiner.longest_run_actions,
                longest_run_us: m.combiner.longest_run.as_micros() as u64,
            })
            .collect()
    }
}

/// One checkpoint, savepoint or final snapshot.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub struct CheckpointView {
    pub id: u64,
    pub kind: SnapshotKind,
    /// `sp-3`, `chk-12`: what a restart names it with.
    pub name: String,
    pub triggered_at: i64,
    pub duration_ms: u64,
    /// The longest barrier alignment of any task for this snapshot.
    pub alignment_ms: u64,
    /// `completed` or `failed`.
    pub status: &'static str,
    pub bytes: Option<u64>,
    pub location: Option<String>,
    pub reason: Option<String>,
}

impl From<&Record> for CheckpointView {
    fn from(r: &Record) -> Self {
        let (status, bytes, location, reason) = match &r.outcome {
            Outcome::Completed { location, bytes } => {
                ("completed", Some(*bytes), Some(location.clone()), None)
            }
            Outcome::Failed { reason } => ("failed", None, None, Some(reason.clone())),
        };
        CheckpointView {
            id: r.id,
            kind: r.kind,
            name: format!("{}-{}", r.kind.prefix(), r.id),
            triggered_at: r.triggered_at,
            duration_ms: r.duration_ms,
            alignment_ms: r.alignment_ms,
            status,
            bytes,
            location,
            reason,
        }
    }
}

/// A job's checkpoints and what the shared scheduler measured for it.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub struct CheckpointsView {
    pub enabled: bool,
    pub interval_ms: Option<u64>,
    pub mode: Option<weir_runtime::spec::CheckpointMode>,
    /// Counters of the current run.
    pub completed: u64,
    pub failed: u64,
    pub skipped: u64,
    pub in_progress: Vec<u64>,
    pub latest: Option<CheckpointView>,
    /// Oldest first: the current run's and earlier runs' in this server.
    pub history: Vec<CheckpointView>,
    /// Time spent aligning barriers, all operators, current run.
    pub alignment_ms: u64,
    /// The scheduler's view of the current run's trigger (absent when not scheduled).
    pub scheduler: Option<TriggerView>,
}

/// The shared scheduler's counters for one job's trigger.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub struct TriggerView {
    pub fired: u64,
    /// Ticks that found the previous checkpoint still running: counted, never queued.
    pub coalesced: u64,
    pub running: bool,
    pub delay: DelaySummary,
}

impl HostedJob {
    pub fn overview(&self) -> JobOverview {
        let s = self.lock();
        self.overview_of(&s)
    }

    fn overview_of(&self, s: &JobInner) -> JobOverview {
        let plan = self.plan();
        let now = now_ms();
        let (done, total) = match (s.metrics.progress(), s.ended_progress) {
            ((_, None), Some([done, total])) => (done, Some(total)),
            (known, _) => known,
        };
        let watermark = known(s.metrics.watermark());
        JobOverview {
            id: self.id.to_string(),
            name: self.name.clone(),
            description: plan.spec.description.clone(),
            state: s.current(),
            run: s.run,
            parallelism: plan.spec.parallelism,
            checkpointing: plan.spec.checkpoint.enabled(),
            submitted_at: self.submitted_at,
            started_at: s.started_at,
            ended_at: s.ended_at,
            duration_ms: s.ended_at.unwrap_or(now) - s.started_at,
            events: s.carried.events + s.metrics.events(),
            events_per_second: if s.state.is_live() {
                last_two(s)
                    .map(|(a, b)| rate(a.events, b.events, b.at - a.at))
                    .unwrap_or(0.0)
            } else {
                0.0
            },
            restarts: s.metrics.restarts.load(Ordering::Relaxed),
            watermark,
            watermark_lag_ms: watermark.map(|w| now - w),
            progress: total.filter(|t| *t > 0).map(|t| done as f64 / t as f64),
            throughput: {
                let skip = s.samples.len().saturating_sub(OVERVIEW_POINTS + 1);
                let recent: Vec<&Sample> = s.samples.iter().skip(skip).collect();
                recent
                    .windows(2)
                    .map(|w| rate(w[0].events, w[1].events, w[1].at - w[0].at))
                    .collect()
            },
            server: None,
        }
    }

    pub fn detail(&self, sample_interval_ms: u64) -> JobDetail {
        let plan = self.plan();
        let s = self.lock();
        let overview = self.overview_of(&s);
        let now = now_ms();
        let live = s.state.is_live();
        let samples: Vec<&Sample> = s.samples.iter().collect();
        let leading = s
            .metrics
            .sources()
            .filter_map(|n| known(n.watermark()))
            .max();
        let nodes = s
            .metrics
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let finished = n
                    .subtasks
                    .iter()
                    .filter(|t| t.finished.load(Ordering::Relaxed))
                    .count();
                let status = if !live {
                    s.state.name()
                } else if finished == n.subtasks.len() {
                    "finished"
                } else {
                    "running"
                };
                let mut history = NodeHistory::default();
                for w in samples.windows(2) {
                    let (a, b) = (w[0], w[1]);
                    let (Some(x), Some(y)) = (a.nodes.get(i), b.nodes.get(i)) else {
                        continue;
                    };
                    let dt = b.at - a.at;
                    history.rate_in.push(rate(x.records_in, y.records_in, dt));
                    history
                        .rate_out
                        .push(rate(x.records_out, y.records_out, dt));
                    let busy = rate(x.backpressure_ns, y.backpressure_ns, dt) / 1e9;
                    history
                        .backpressure
                        .push((busy / n.subtasks.len().max(1) as f64).clamp(0.0, 1.0));
                }
                let last = |v: &[f64]| if live { v.last().copied() } else { None };
                let subtasks = subtask_views(n, i, &samples, live);
                let busy = {
                    let v: Vec<f64> = subtasks.iter().filter_map(|t| t.busy).collect();
                    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
                };
                let state_keys = n
                    .subtasks
                    .iter()
                    .map(|t| t.state_keys.load(Ordering::Relaxed))
                    .try_fold(0u64, |acc, k| (k != UNKNOWN).then(|| acc + k))
                    .filter(|k| *k > 0);
                let state_bytes = n
                    .subtasks
                    .iter()
                    .map(|t| t.state_bytes.load(Ordering::Relaxed))
                    .try_fold(0u64, |acc, b| (b != UNKNOWN).then(|| acc + b));
                let skew = skew_of(n.role, &subtasks, live);
                let watermark = known(n.watermark());
                let queryable = plan.nodes.get(i).and_then(|p| p.queryable.as_ref());
                NodeView {
                    id: i,
                    name: n.name.clone(),
                    kind: n.kind.clone(),
                    role: n.role,
                    changes: plan
                        .nodes
                        .get(i)
                        .map_or_else(String::new, |p| changes_of(&plan, p)),
                    chain: n.chain,
                    parallelism: n.subtasks.len(),
                    status,
                    subtasks_finished: finished,
                    records_in: s.carried.node(&n.name).records_in + n.sum(|t| &t.records_in),
                    records_out: s.carried.node(&n.name).records_out + n.sum(|t| &t.records_out),
                    rate_in: last(&history.rate_in).unwrap_or(0.0),
                    rate_out: last(&history.rate_out).unwrap_or(0.0),
                    backpressure: last(&history.backpressure).unwrap_or(0.0),
                    backpressure_ms: n.sum(|t| &t.backpressure_ns) / 1_000_000,
                    watermark,
                    watermark_lag_ms: watermark.map(|w| now - w),
                    watermark_delay_ms: leading.zip(watermark).map(|(l, w)| (l - w).max(0)),
                    barriers: n.sum(|t| &t.barriers),
                    alignment_ms: n.sum(|t| &t.alignment_ns) / 1_000_000,
                    skipped: n.sum(|t| &t.skipped),
                    late_dropped: n.sum(|t| &t.late_dropped),
                    partitions: n
                        .subtasks
                        .iter()
                        .enumerate()
                        .flat_map(|(subtask, t)| {
                            t.partitions().into_iter().map(move |p| PartitionView {
                                lag: p.lag(),
                                topic: p.topic,
                                partition: p.partition,
                                subtask,
                                position: p.position,
                                end: p.end,
                            })
                        })
                        .collect(),
                    queryable: queryable.map_or_else(Vec::new, |q| {
                        q.states
                            .iter()
                            .map(|st| QueryableView {
                                state: st.name.clone(),
                                path: st.path,
                                max_staleness_ms: st.max_staleness_ms,
                            })
                            .collect()
                    }),
                    key_columns: queryable.map_or_else(Vec::new, |q| q.key_names().to_vec()),
                    control_messages: n.sum(|t| &t.control_messages),
                    busy,
                    state_keys,
                    state_bytes,
                    skewed: skew.is_some_and(|k| k > SKEWED),
                    skew,
                    history,
                    subtasks,
                }
            })
            .collect();
        let nodes_of_plan = &plan.nodes;
        let edges = nodes_of_plan
            .iter()
            .enumerate()
            .flat_map(|(to, n)| {
                n.inputs.iter().map(move |e| {
                    let from = &nodes_of_plan[e.from];
                    EdgeView {
                        from: e.from,
                        to,
                        port: (from.ports.len() > 1)
                            .then(|| from.ports.get(e.port).map(|(name, _)| name.clone()))
                            .flatten(),
                        partitioning: if e.key.is_some() {
                            "hash"
                        } else if from.parallelism == n.parallelism {
                            "forward"
                        } else {
                            "rebalance"
                        },
                    }
                })
            })
            .collect();
        let events_history = samples
            .windows(2)
            .map(|w| rate(w[0].events, w[1].events, w[1].at - w[0].at))
            .collect();
        JobDetail {
            overview,
            nodes,
            edges,
            events_history,
            sample_interval_ms,
            restored_from: s.restored_from.clone(),
            snapshot: s.summary.as_ref().and_then(|x| x.snapshot.clone()),
            error: s.error.clone(),
            pools: PoolView::of(&plan),
            restore: s.restore_stats(),
        }
    }

    pub fn checkpoints(&self, scheduler: &weir_scheduler::SchedulerMetrics) -> CheckpointsView {
        let s = self.lock();
        let plan = self.plan();
        let spec = &plan.spec.checkpoint;
        let stats = s.checkpoint_stats().unwrap_or_default();
        let prefix = format!("{} (attempt ", self.name);
        let mine: Vec<&PipelineMetrics> = scheduler
            .pipelines
            .iter()
            .filter(|p| p.name.starts_with(&prefix))
            .collect();
        let trigger = (s.state.is_live() && !mine.is_empty()).then(|| TriggerView {
            fired: mine.iter().map(|p| p.fired).sum(),
            coalesced: mine.iter().map(|p| p.coalesced).sum(),
            running: mine.iter().any(|p| p.running),
            delay: mine.last().map(|p| p.delay.clone()).unwrap_or_default(),
        });
        CheckpointsView {
            enabled: spec.enabled(),
            interval_ms: spec
                .interval
                .map(|i| u64::try_from(i.0.as_millis()).unwrap_or(u64::MAX)),
            mode: spec.enabled().then_some(spec.mode),
            completed: stats.completed,
            failed: stats.failed,
            skipped: stats.skipped,
            in_progress: stats.in_flight.clone(),
            latest: stats.latest_completed.as_ref().map(CheckpointView::from),
            history: s
                .checkpoint_history()
                .iter()
                .map(CheckpointView::from)
                .collect(),
            alignment_ms: s
                .metrics
                .nodes
                .iter()
                .map(|n| n.sum(|t| &t.alignment_ns))
                .sum::<u64>()
                / 1_000_000,
            scheduler: trigger,
        }
    }

    /// The checkpoint record with id `id` (of any kind), newest first.
    pub fn checkpoint(&self, id: u64) -> Option<Record> {
        let s = self.lock();
        s.checkpoint_history()
            .into_iter()
            .rev()
            .find(|r| r.id == id)
    }
}

/// The per-subtask view of node `i` from its live counters and the job's samples.
fn subtask_views(
    n: &weir_runtime::api::NodeMetrics,
    i: usize,
    samples: &[&Sample],
    live: bool,
) -> Vec<SubtaskView> {
    let skip = samples.len().saturating_sub(SUBTASK_POINTS + 1);
    let recent = &samples[skip..];
    n.subtasks
        .iter()
        .enumerate()
        .map(|(k, t)| {
            let mut history = SubtaskHistory::default();
            let mut idle = Vec::new();
            for w in recent.windows(2) {
                let (Some(x), Some(y)) = (
                    w[0].nodes.get(i).and_then(|n| n.subtasks.get(k)),
                    w[1].nodes.get(i).and_then(|n| n.subtasks.get(k)),
                ) else {
                    continue;
                };
                let dt = w[1].at - w[0].at;
                let share = |a: u64, b: u64| (rate(a, b, dt) / 1e9).clamp(0.0, 1.0);
                history.rate_in.push(rate(x.records_in, y.records_in, dt));
                history
                    .rate_out
                    .push(rate(x.records_out, y.records_out, dt));
                history
                    .backpressure
                    .push(share(x.backpressure_ns, y.backpressure_ns));
                history.busy.push(share(x.busy_ns, y.busy_ns));
                idle.push(share(x.idle_ns, y.idle_ns));
            }
            let last = |v: &[f64]| if live { v.last().copied() } else { None };
            // A chained node's task counts time on the task's first node only.
            let counted =
                t.busy_ns.load(Ordering::Relaxed) > 0 || t.idle_ns.load(Ordering::Relaxed) > 0;
            let known_u64 = |v: u64| (v != UNKNOWN).then_some(v);
            SubtaskView {
                subtask: k,
                finished: t.finished.load(Ordering::Relaxed),
                records_in: t.records_in.load(Ordering::Relaxed),
                records_out: t.records_out.load(Ordering::Relaxed),
                rate_in: last(&history.rate_in).unwrap_or(0.0),
                rate_out: last(&history.rate_out).unwrap_or(0.0),
                backpressure: last(&history.backpressure).unwrap_or(0.0),
                busy: if counted { last(&history.busy) } else { None },
                idle: if counted { last(&idle) } else { None },
                watermark: known(t.watermark.load(Ordering::Relaxed)),
                input_watermarks: t.input_watermarks().into_iter().map(known).collect(),
                state_keys: known_u64(t.state_keys.load(Ordering::Relaxed)).filter(|k| *k > 0),
                state_bytes: known_u64(t.state_bytes.load(Ordering::Relaxed)),
                late_dropped: t.late_dropped.load(Ordering::Relaxed),
                skipped: t.skipped.load(Ordering::Relaxed),
                history,
            }
        })
        .collect()
}

/// Records per subtask (out for sources, else in) the skew compares: over the last interval
/// while the job runs, over the whole run once it ended.
fn skew_of(role: NodeRole, subtasks: &[SubtaskView], live: bool) -> Option<f64> {
    if subtasks.len() < 2 {
        return None;
    }
    let work: Vec<f64> = subtasks
        .iter()
        .map(|t| match (role, live) {
            (NodeRole::Source, true) => t.rate_out,
            (NodeRole::Source, false) => t.records_out as f64,
            (_, true) => t.rate_in,
            (_, false) => t.records_in as f64,
        })
        .collect();
    let max = work.iter().copied().fold(0.0, f64::max);
    let min = work.iter().copied().fold(f64::INFINITY, f64::min);
    // Too little traffic to tell (a handful of records, or idle): no verdict.
    let floor = if live { 100.0 } else { 1000.0 };
    if max < floor {
        return None;
    }
    Some(max / min.max(1.0))
}

fn last_two(s: &JobInner) -> Option<(&Sample, &Sample)> {
    let n = s.samples.len();
    (n >= 2).then(|| (&s.samples[n - 2], &s.samples[n - 1]))
}

/// A watermark worth showing: not "none yet" and not "end of input".
fn known(w: i64) -> Option<i64> {
    (w != BEGINNING_OF_TIME && w != END_OF_TIME).then_some(w)
}

/// `GET /api/v1/jobs`: every hosted job; in a fleet, every job of every server that answered.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub struct JobList {
    pub jobs: Vec<JobOverview>,
    /// In a fleet, the servers whose jobs are missing from the list, each with why (`URL:
    /// reason`); `GET /api/v1/fleet` still names their jobs.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unanswered: Vec<String>,
}

/// `POST /api/v1/jobs/validate`: the file is valid (problems are a 400 instead), and what it
/// would run.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Validation {
    /// Always `true`.
    pub valid: bool,
    pub name: String,
    /// Nodes of the planned DAG (sources, transforms, sinks).
    pub nodes: usize,
    pub checkpointing: bool,
}

/// A page of a job's captured log lines.
#[derive(Debug, Serialize, JsonSchema)]
pub struct LogPage {
    /// The lines after the one asked for, oldest first.
    pub lines: Vec<crate::logs::LogLine>,
    /// Lines that fell out of the buffer before they were read.
    pub dropped: u64,
    /// Whether `info` lines are being captured now (`info=true` asks for a minute of them).
    pub info: bool,
    /// Lines the buffer keeps.
    pub capacity: usize,
}

/// The snapshots a job can restart from, newest first.
#[derive(Debug, Serialize, JsonSchema)]
pub struct SnapshotList {
    pub snapshots: Vec<crate::host::SnapshotEntry>,
}

/// The last rows a node emitted (a sink: received), per subtask.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub struct TailView {
    pub node: String,
    /// Whether the subtasks are recording (the job is live): asking keeps them at it for
    /// `watch-ms` more.
    pub watching: bool,
    pub watch_ms: i64,
    /// Rows kept per subtask (the newest).
    pub rows_per_subtask: usize,
    pub subtasks: Vec<TailSubtask>,
}

/// One subtask's recorded rows.
#[derive(Debug, Serialize, JsonSchema)]
pub struct TailSubtask {
    pub subtask: usize,
    /// Oldest first, each as the JSON-lines format writes it: column name to value.
    pub rows: Vec<serde_json::Map<String, serde_json::Value>>,
}

/// A savepoint was requested: poll `/api/v1/jobs/{id}/savepoints/{id}` (the `Location`).
#[derive(Debug, Serialize, JsonSchema)]
pub struct SavepointAccepted {
    /// The request's id.
    pub id: u64,
    /// Always `in-progress`.
    pub status: &'static str,
}

/// A job's remembered savepoint requests (at most [`crate::job::SAVEPOINTS`]), by id.
#[derive(Debug, Serialize, JsonSchema)]
pub struct SavepointList {
    pub savepoints: Vec<crate::job::SavepointStatus>,
}

/// One snapshot in detail: its record, each subtask's acknowledgement and its metadata.
#[derive(Debug, Serialize, JsonSchema)]
pub struct CheckpointDetail {
    pub checkpoint: CheckpointView,
    /// Empty for failed snapshots.
    pub acks: Vec<weir_checkpoint::stats::SubtaskAck>,
    /// The snapshot's metadata as stored; `null` for a failed snapshot.
    pub metadata: Option<SnapshotMetadata>,
}

/// A completed snapshot's metadata, or why it could not be read (retention may have removed
/// it since).
#[derive(Debug, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum SnapshotMetadata {
    Read(weir_checkpoint::metadata::CheckpointMetadata),
    Unreadable { error: String },
}

/// A job's exceptions, newest first.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ExceptionList {
    pub exceptions: Vec<crate::job::Exception>,
}

/// `POST /api/v1/fleet/drain`: what moved where.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub struct Drained {
    /// The server that drained.
    pub server: String,
    pub moved: Vec<DrainedJob>,
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub struct DrainedJob {
    pub id: String,
    /// The server it was handed to (none: any server takes it).
    pub to: Option<String>,
}

// What the API reads: the bodies and query strings of its requests, described by the OpenAPI
// document with the deserialize contract.

/// The query of the spec route: `view=submitted` (the default: the file as submitted) or
/// `view=effective` (the job as it runs: overrides applied, defaults filled in).
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct SpecParams {
    /// `submitted` (the default) or `effective`.
    #[schemars(extend("enum" = ["submitted", "effective"]))]
    pub view: Option<String>,
}

/// The query of the logs route: lines after `after` (a `seq`); `info=true` captures the
/// job's `info` lines too for the next minute.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct LogParams {
    /// Only lines with a greater `seq` (the last one the client has).
    pub after: Option<u64>,
    /// `true` captures the job's `info` lines too, for the next minute.
    pub info: Option<bool>,
}

/// The body of a savepoint request (optional: empty means `{"stop": false}`).
#[derive(Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct SavepointRequest {
    /// Stop the job once the savepoint is complete.
    #[serde(default)]
    pub stop: bool,
}

/// The body of a restart (optional: empty means `{"from": "latest"}`).
#[derive(Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RestartRequest {
    /// `latest`, `none`, `sp-<id>`, `chk-<id>` or `final-<id>`.
    #[serde(default)]
    #[schemars(extend("pattern" = crate::host::SNAPSHOT_PATTERN))]
    pub from: Option<String>,
}

/// The body of a rescale.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RescaleRequest {
    /// The job's new parallelism (of every node that does not set its own), at least 1. The
    /// server's limits (`--max-job-subtasks`) may allow less than the maximum a job file may
    /// ask (1024): asking for more is a 400.
    #[schemars(range(min = 1, max = 1024))]
    pub parallelism: u32,
}

/// The query string of a state lookup.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct LookupParams {
    /// The key as text: the key column's value (`42`, `alice`), or for several key columns a
    /// JSON array (`["alice", 3]`).
    pub key: Option<String>,
    /// Every key whose first column starts with this (a bounded scan).
    pub prefix: Option<String>,
    /// Most entries to answer with.
    pub limit: Option<usize>,
    /// `direct` or `ordered`, instead of the state's declared path.
    #[schemars(extend("enum" = ["direct", "ordered"]))]
    pub path: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::changes_of;

    #[test]
    fn each_node_says_what_changes_it_emits_and_a_sink_what_it_takes() {
        let text = "name: c\nsources:\n  nexmark: {kind: nexmark}\ntransforms:\n  \
                    by-seller: {kind: key-by, from: nexmark.auction, keys: [seller]}\n  \
                    counts: {kind: aggregate, from: by-seller, aggregates: {n: count(*)}}\n\
                    sinks:\n  out: {kind: stdout, from: counts, format: changelog-json}\n";
        let Ok(plan) = weir_runtime::plan::check_str("job.yaml", text, &[]) else {
            panic!("the job plans");
        };
        let changes = |name: &str| {
            let node = plan.nodes.iter().find(|n| n.name == name).expect(name);
            changes_of(&plan, node)
        };
        assert_eq!(changes("nexmark"), "append");
        assert_eq!(changes("counts"), "updating (+I -U +U), key [seller]");
        assert_eq!(changes("out"), "updating (+I -U +U), key [seller]");
    }
}
