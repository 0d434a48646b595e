//! A running job: its attempts, their tasks and checkpoint coordinator, and how it ends.
//!
//! A job runs as a sequence of *attempts*. Each attempt spawns every task into one `JoinSet`
//! and, when the job checkpoints, a coordinator and a lease on the process's shared trigger
//! scheduler; the supervisor owns all of it, so nothing is fire-and-forget. The first task to
//! fail ends the attempt (the others are aborted and awaited) and its error is the attempt's:
//! errors that only say "another part stopped" never hide the cause. Within the restart
//! strategy's budget the supervisor then waits (exponential backoff) and starts a new attempt
//! from the latest completed checkpoint.
//!
//! How a run ends decides what happens to the sinks' last transactions:
//! - the input ended: they go into a *final* snapshot and are committed;
//! - stopped with a savepoint: they come after the savepoint, so they are discarded (a run
//!   resumed from the savepoint produces them again);
//! - stopped without a savepoint (checkpointing on): discarded likewise, the next run resumes
//!   from the latest checkpoint; without checkpoints they are committed (the run drained).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::{mpsc, watch};
use tokio::task::{JoinHandle, JoinSet};
use tokio_util::sync::CancellationToken;
use weir_checkpoint::coordinator::{Record, StatsSnapshot, coordinator};
use weir_checkpoint::metadata::SnapshotKind;
use weir_checkpoint::{
    CheckpointError, Completed, CoordinatorConfig, CoordinatorHandle, JobCheckpoints, JobHooks,
    NodeInfo, RestoreStats, SubtaskSnapshot,
};

use super::message::Barrier;
use super::metrics::{JobMetrics, NodeRole};
use super::restore::{Prepared, RestoreFrom};
use super::snapshot::NodeState;
use super::task::{SinkTail, TaskFailure, TaskOutcome};
use crate::connectors::sink::SinkFactory;
use crate::connectors::source::SourceFactory;
use crate::error::{JobError, OperatorError, RunError};
use crate::plan::physical::{RunContext, TaskWiring, chaining, instantiate, prepare_sinks};
use crate::plan::{Factory, Plan};
use crate::spec::CheckpointMode;

/// How to run a job.
#[derive(Clone, Default)]
pub struct JobOptions {
    /// Start from a snapshot instead of from scratch.
    pub from: Option<RestoreFrom>,
    /// The process's shared checkpoint-trigger scheduler (periodic checkpoints need one).
    pub scheduler: Option<Arc<weir_scheduler::Scheduler>>,
}

struct TaskId {
    name: String,
    subtask: usize,
    parallelism: usize,
}

/// Steering a running job from outside: savepoints, checkpoint statistics, and the task
/// failures it restarted after.
#[derive(Clone)]
pub struct JobControl {
    coordinator: watch::Receiver<Option<CoordinatorHandle>>,
    failures: Arc<Mutex<Vec<Failure>>>,
    queries: Arc<crate::query::Queries>,
    /// How the latest restore read its snapshot, shared with the supervisor.
    restore: Arc<Mutex<Option<Restore>>>,
}

/// The latest restore of a job: which snapshot, and how its operator state was read.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Restore {
    pub location: String,
    /// The attempt it started (0 for the first).
    pub attempt: u32,
    #[serde(flatten)]
    pub stats: RestoreStats,
}

/// Failures remembered per run (the oldest are dropped beyond it).
pub const FAILURES: usize = 32;

/// A task failure the job restarted after.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Failure {
    /// Epoch ms.
    pub at: i64,
    /// Which restart it caused (1 for the first).
    pub restart: u32,
    pub message: String,
}

impl JobControl {
    /// Takes a savepoint (after any checkpoint in flight) and returns where it is; with
    /// `stop`, the job's sources end once it is complete and the job stops.
    pub async fn savepoint(&self, stop: bool) -> Result<Arc<Completed>, CheckpointError> {
        let handle = self.coordinator.borrow().clone().ok_or_else(|| {
            CheckpointError::Skipped(
                "the job does not checkpoint: set `checkpoint.interval`".into(),
            )
        })?;
        handle.savepoint(stop).await
    }

    /// Checkpoint counters and history of the current attempt.
    pub fn checkpoint_stats(&self) -> Option<StatsSnapshot> {
        self.coordinator
            .borrow()
            .as_ref()
            .map(|h| h.stats().snapshot())
    }

    /// The job's queryable states: lookups by key (see [`crate::query`]).
    pub fn queries(&self) -> Arc<crate::query::Queries> {
        self.queries.clone()
    }

    /// Whether the job takes checkpoints (and so savepoints).
    pub fn checkpoints(&self) -> bool {
        self.coordinator.borrow().is_some()
    }

    /// The task failures the job restarted after so far, oldest first (at most [`FAILURES`]).
    /// The failure that ends a job is its result, not one of these.
    pub fn failures(&self) -> Vec<Failure> {
        self.failures.lock().map(|f| f.clone()).unwrap_or_default()
    }

    /// The latest restore's counters (seeks performed and skipped, requests, bytes), if the
    /// job restored a snapshot.
    pub fn restore_stats(&self) -> Option<Restore> {
        self.restore.lock().ok().and_then(|r| r.clone())
    }
}

pub struct RunningJob {
    supervisor: Option<JoinHandle<Result<JobSummary, RunError>>>,
    metrics: Arc<JobMetrics>,
    stop: CancellationToken,
    control: JobControl,
}

impl Drop for RunningJob {
    fn drop(&mut self) {
        // The supervisor owns every task of the job; dropping the job without waiting for
        // it cancels them all.
        if let Some(s) = &self.supervisor {
            s.abort();
        }
    }
}

/// What the supervisor needs across attempts.
struct Run {
    plan: Plan,
    options: JobOptions,
    catalog: Option<JobCheckpoints>,
    stop: CancellationToken,
    metrics: Option<Arc<JobMetrics>>,
    control: watch::Sender<Option<CoordinatorHandle>>,
    /// Names this run's shared checkpoint files (with the attempt).
    run_id: String,
    /// The snapshot this run started from: a restart before the run completes a checkpoint of
    /// its own goes back there.
    base: Option<RestoreFrom>,
    /// Checkpoints completed by this run's attempts so far.
    completed: u64,
    /// The snapshots of every attempt so far (the last [`HISTORY`](weir_checkpoint::coordinator::HISTORY) of each).
    history: Vec<Record>,
    restored_from: Option<String>,
    /// Restarts so far, against the budget of `restart.max-attempts`.
    restarts: u32,
    /// Failures restarted after, shared with [`JobControl::failures`].
    failures: Arc<Mutex<Vec<Failure>>>,
    /// Queryable state, shared with [`JobControl::queries`]; each attempt registers with it.
    queries: Arc<crate::query::Queries>,
    /// The latest restore, shared with [`JobControl::restore_stats`].
    restore: Arc<Mutex<Option<Restore>>>,
}

/// Whether an attempt that failed to launch may be retried: an operator's external system
/// (a broker, a database) failed while it was being set up. A data or configuration error,
/// an unusable snapshot or a failing checkpoint store would fail again the same way.
fn retriable_launch(failure: &RunError) -> bool {
    matches!(
        failure,
        RunError::Task(JobError {
            error: OperatorError::External { .. },
            ..
        })
    )
}

/// One attempt: its tasks, coordinator and lease.
struct Attempt {
    tasks: JoinSet<(usize, Result<TaskOutcome, TaskFailure>)>,
    ids: Vec<TaskId>,
    coordinator: Option<(CoordinatorHandle, JoinHandle<()>)>,
    lease: Option<weir_scheduler::Lease>,
    hooks: Option<Arc<Hooks>>,
}

/// Starts a planned job on the current tokio runtime: restores its snapshot (if asked),
/// prepares its sources and sinks and spawns its first attempt.
pub async fn start(plan: &Plan, options: JobOptions) -> Result<RunningJob, RunError> {
    let checkpointing = plan.spec.checkpoint.enabled();
    let catalog = if checkpointing || options.from.is_some() {
        let storage = plan
            .spec
            .checkpoint
            .open_storage()
            .map_err(RunError::Checkpoint)?;
        Some(JobCheckpoints::new(storage, &plan.spec.name))
    } else {
        None
    };
    let mut options = options;
    if checkpointing && options.scheduler.is_none() {
        // A caller without the process's shared scheduler gets one of its own.
        let scheduler = weir_scheduler::Scheduler::new(tokio::runtime::Handle::current())
            .map_err(|e| RunError::Checkpoint(e.to_string()))?;
        options.scheduler = Some(Arc::new(scheduler));
    }
    remove_stale_runs(&plan.state_dir);
    let stop = CancellationToken::new();
    let (control_tx, control_rx) = watch::channel(None);
    let failures = Arc::new(Mutex::new(Vec::new()));
    let queries = crate::query::Queries::new(plan);
    let restore = Arc::new(Mutex::new(None));
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let mut run = Run {
        plan: plan.clone(),
        base: options.from.clone(),
        options,
        catalog,
        stop: stop.clone(),
        metrics: None,
        control: control_tx,
        run_id: format!("{started}-{}", std::process::id()),
        completed: 0,
        history: Vec::new(),
        restored_from: None,
        restarts: 0,
        failures: failures.clone(),
        queries: queries.clone(),
        restore: restore.clone(),
    };
    let prepared = run.prepare_restore(0).await?;
    if let Some(p) = &prepared {
        run.restored_from = Some(p.location.clone());
        // The next restart before a checkpoint of this run goes back to the same snapshot.
        run.base = Some(RestoreFrom::Path(PathBuf::from(&p.location)));
    }
    let attempt = match run.launch(0, prepared).await {
        Ok(attempt) => attempt,
        // An external system that is down for a moment (a broker restarting) while the job
        // starts is a failure like any other: restarted after, within the budget.
        Err(failure) if retriable_launch(&failure) => run.restart(failure).await?,
        Err(failure) => return Err(failure),
    };
    let metrics = run
        .metrics
        .clone()
        .ok_or_else(|| RunError::Checkpoint("the first attempt made no metrics".into()))?;
    // Restarts before the first attempt that launched had no metrics to count in yet.
    metrics
        .restarts
        .store(u64::from(run.restarts), Ordering::Relaxed);
    tracing::info!(job = %plan.spec.name, tasks = attempt.ids.len(), "job started");
    let supervisor = tokio::spawn(run.supervise(attempt));
    Ok(RunningJob {
        supervisor: Some(supervisor),
        metrics,
        stop,
        control: JobControl {
            coordinator: control_rx,
            failures,
            queries,
            restore,
        },
    })
}

impl RunningJob {
    pub fn metrics(&self) -> Arc<JobMetrics> {
        self.metrics.clone()
    }

    /// A token that stops the job gracefully when cancelled: sources end their streams,
    /// everything in flight is processed, and sinks flush.
    pub fn stopper(&self) -> CancellationToken {
        self.stop.clone()
    }

    pub fn control(&self) -> JobControl {
        self.control.clone()
    }

    /// Waits for the job to end.
    pub async fn wait(mut self) -> Result<JobSummary, RunError> {
        let Some(supervisor) = self.supervisor.take() else {
            return Err(RunError::Checkpoint("the job was already awaited".into()));
        };
        match supervisor.await {
            Ok(result) => result,
            Err(e) => Err(RunError::Task(JobError {
                node: "?".into(),
                subtask: 0,
                parallelism: 1,
                error: OperatorError::Internal(format!("the job's supervisor stopped: {e}")),
            })),
        }
    }
}

impl Run {
    fn checkpointing(&self) -> bool {
        self.plan.spec.checkpoint.enabled()
    }

    fn work_dir(&self) -> PathBuf {
        self.plan.state_dir.clone()
    }

    /// The snapshot attempt `attempt` starts from.
    async fn prepare_restore(&self, attempt: u32) -> Result<Option<Prepared>, RunError> {
        let from = if attempt > 0 && self.completed > 0 {
            Some(RestoreFrom::Latest)
        } else {
            self.base.clone()
        };
        let (Some(from), Some(catalog)) = (from, &self.catalog) else {
            return Ok(None);
        };
        let work = self.work_dir().join(format!("restore-{attempt}"));
        let prepared = super::restore::prepare(&self.plan, catalog, &from, &work).await?;
        if let (Some(p), Ok(mut latest)) = (&prepared, self.restore.lock()) {
            *latest = Some(Restore {
                location: p.location.clone(),
                attempt,
                stats: p.stats.clone(),
            });
        }
        Ok(prepared)
    }

    /// Instantiates and spawns one attempt.
    async fn launch(
        &mut self,
        attempt: u32,
        prepared: Option<Prepared>,
    ) -> Result<Attempt, RunError> {
        let plan = &self.plan;
        let spec = &plan.spec.checkpoint;
        let restored_id = prepared.as_ref().map_or(0, |p| p.id);
        let committed = Arc::new(AtomicU64::new(restored_id));
        let final_restored = prepared
            .as_ref()
            .is_some_and(|p| p.kind == SnapshotKind::Final);
        let mut ctx = RunContext {
            attempt,
            metrics: self.metrics.clone(),
            queries: Some(self.queries.clone()),
            ..RunContext::default()
        };
        let mut reuse = HashMap::new();
        if let Some(p) = prepared {
            ctx.restore = p.subtasks;
            ctx.sinks = p.sinks;
            reuse = p.reuse;
        }
        if final_restored {
            // The run this snapshot ended was complete: commit its last transactions (the
            // sinks' `prepare` does) and do nothing else.
            ctx.restore.clear();
        }

        let chains = chaining(plan);
        let task_count: usize = chains
            .members
            .iter()
            .map(|m| plan.nodes[m[0]].parallelism)
            .sum();
        let mut coordinator_parts = None;
        if let (true, Some(catalog), false) = (self.checkpointing(), &self.catalog, final_restored)
        {
            let highest = catalog
                .highest_id()
                .await
                .map_err(|e| RunError::Checkpoint(e.to_string()))?;
            let hooks = Arc::new(Hooks {
                barriers: OnceLock::new(),
                stop: self.stop.clone(),
                stopped_by_savepoint: AtomicBool::new(false),
                sinks: sink_factories(plan),
                sources: source_factories(plan),
                committed: committed.clone(),
                failure: Arc::new(Mutex::new(None)),
                failed: CancellationToken::new(),
            });
            let config = CoordinatorConfig {
                timeout: spec.timeout.0,
                min_pause: spec.min_pause.0,
                max_concurrent: spec.max_concurrent as usize,
                retained: spec.retained as usize,
                lineage: format!("{}-{attempt}", self.run_id),
                last_id: highest.max(restored_id),
                reuse,
            };
            let nodes = plan
                .nodes
                .iter()
                .map(|n| NodeInfo {
                    name: n.name.clone(),
                    kind: n.kind.to_string(),
                    parallelism: n.parallelism as u32,
                })
                .collect();
            let (handle, future) = coordinator(
                config,
                catalog.clone(),
                plan.spec.name.clone(),
                plan.spec.key_groups,
                nodes,
                task_count,
                hooks.clone(),
            );
            ctx.checkpointing = Some(TaskWiring {
                reports: handle.reports(),
                committed: committed.clone(),
                scratch: self.work_dir().join("snapshots"),
                exactly_once: spec.mode == CheckpointMode::ExactlyOnce,
                max_in_flight: spec.max_concurrent as usize,
            });
            ctx.checkpoint_base = highest.max(restored_id);
            coordinator_parts = Some((handle, future, hooks));
        }

        prepare_sinks(plan, &ctx).await?;
        let instantiated = instantiate(plan, &self.stop, &ctx)?;
        self.metrics
            .get_or_insert_with(|| instantiated.metrics.clone());
        let mut tasks = JoinSet::new();
        let mut ids = Vec::new();
        if !final_restored {
            for t in instantiated.tasks {
                let id = ids.len();
                let span =
                    tracing::info_span!("task", job = %plan.spec.name, task = %t.name, attempt);
                let task = t.task;
                ids.push(TaskId {
                    name: t.name,
                    subtask: t.subtask,
                    parallelism: t.parallelism,
                });
                tasks.spawn(tracing::Instrument::instrument(
                    async move { (id, task.run().await) },
                    span,
                ));
            }
        }
        let mut attempt_parts = Attempt {
            tasks,
            ids,
            coordinator: None,
            lease: None,
            hooks: None,
        };
        if let Some((handle, future, hooks)) = coordinator_parts {
            let _ = hooks.barriers.set(instantiated.barriers);
            let joined = tokio::spawn(future);
            if let (Some(interval), Some(scheduler)) = (spec.interval, &self.options.scheduler) {
                let trigger = handle.clone();
                let lease = scheduler
                    .register(
                        format!("{} (attempt {attempt})", plan.spec.name),
                        interval.0,
                        move |_tick: weir_scheduler::Tick| -> Option<weir_scheduler::BoxFuture> {
                            // Inline on the timer thread: one `try_send`. Waiting for the
                            // checkpoint happens in the returned future, and while it runs the
                            // scheduler coalesces further ticks.
                            let done = trigger.try_checkpoint()?;
                            Some(Box::pin(async move {
                                let _ = done.await;
                            }))
                        },
                    )
                    .map_err(|e| RunError::Checkpoint(e.to_string()))?;
                attempt_parts.lease = Some(lease);
            }
            let _ = self.control.send(Some(handle.clone()));
            attempt_parts.coordinator = Some((handle, joined));
            attempt_parts.hooks = Some(hooks);
        }
        Ok(attempt_parts)
    }

    /// Restarts after `failure` within the restart budget: records it, waits the backoff,
    /// restores and launches the next attempt. A launch that fails for an external cause (a
    /// broker still restarting) is the next failure, not the end of the job; any other launch
    /// failure, an exhausted budget or a stop ends the job with the failure.
    async fn restart(&mut self, mut failure: RunError) -> Result<Attempt, RunError> {
        loop {
            let allowed = self.plan.spec.restart.attempts(self.checkpointing());
            if self.stop.is_cancelled() || self.restarts >= allowed {
                return Err(failure);
            }
            let wait = self.plan.spec.restart.backoff(self.restarts);
            self.restarts += 1;
            let restarts = self.restarts;
            if let Some(m) = &self.metrics {
                m.restarts.fetch_add(1, Ordering::Relaxed);
            }
            if let Ok(mut failures) = self.failures.lock() {
                if failures.len() == FAILURES {
                    failures.remove(0);
                }
                failures.push(Failure {
                    at: std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
                    restart: restarts,
                    message: failure.to_string(),
                });
            }
            tracing::warn!(job = %self.plan.spec.name, error = %failure, restart = restarts, of = allowed, wait = ?wait, "restarting after a failure");
            eprintln!(
                "warning: {failure}\nrestarting ({restarts} of {allowed}) in {}",
                humantime::format_duration(wait)
            );
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = self.stop.cancelled() => return Err(failure),
            }
            let prepared = self.prepare_restore(restarts).await?;
            if let Some(p) = &prepared {
                self.restored_from = Some(p.location.clone());
            }
            match self.launch(restarts, prepared).await {
                Ok(attempt) => return Ok(attempt),
                Err(e) if retriable_launch(&e) => failure = e,
                Err(e) => return Err(e),
            }
        }
    }

    async fn supervise(mut self, mut attempt: Attempt) -> Result<JobSummary, RunError> {
        let result = loop {
            let ended = attempt.wait().await;
            if let Some((h, _)) = &attempt.coordinator {
                let stats = h.stats().snapshot();
                self.completed += stats.completed;
                self.history.extend(stats.history);
            }
            match ended {
                Ok(tails) => break self.finish(&mut attempt, tails).await,
                Err(failure) => {
                    attempt.shutdown().await;
                    match self.restart(failure).await {
                        Ok(a) => attempt = a,
                        Err(e) => break Err(e),
                    }
                }
            }
        };
        attempt.shutdown().await;
        let _ = self.control.send(None);
        self.remove_work_dir();
        let mut summary = result?;
        summary.restarts = self.restarts;
        summary.restored_from = self.restored_from.clone();
        summary.restore = self.restore.lock().ok().and_then(|r| r.clone());
        summary.checkpoints = self.completed;
        summary.checkpoint_history = std::mem::take(&mut self.history);
        tracing::info!(
            job = %summary.job,
            events = summary.events,
            elapsed = ?summary.elapsed,
            "job finished"
        );
        Ok(summary)
    }

    /// The attempt's tasks all ended: settle the sinks' last transactions.
    async fn finish(
        &mut self,
        attempt: &mut Attempt,
        tails: Vec<SinkTail>,
    ) -> Result<JobSummary, RunError> {
        let metrics = self
            .metrics
            .clone()
            .ok_or_else(|| RunError::Checkpoint("no metrics".into()))?;
        let mut summary = JobSummary::of(&metrics);
        let factories: HashMap<usize, Arc<dyn SinkFactory>> =
            sink_factories(&self.plan).into_iter().collect();
        let by_savepoint = attempt
            .hooks
            .as_ref()
            .is_some_and(|h| h.stopped_by_savepoint.load(Ordering::Acquire));
        let stopped = self.stop.is_cancelled();
        let sink_error = |node: usize, subtask: usize, error: OperatorError| {
            RunError::Task(JobError {
                node: self.plan.nodes[node].name.clone(),
                subtask,
                parallelism: self.plan.nodes[node].parallelism,
                error,
            })
        };
        match &attempt.coordinator {
            Some(_) if stopped || by_savepoint => {
                // After the last snapshot: a resumed run produces these again.
                for tail in tails {
                    if let (Some(state), Some(f)) = (tail.state, factories.get(&tail.node)) {
                        f.abort(vec![state])
                            .map_err(|e| sink_error(tail.node, tail.subtask, e))?;
                    }
                }
                if let Some(sp) = attempt
                    .coordinator
                    .as_ref()
                    .and_then(|(h, _)| h.stats().snapshot().latest_completed)
                    .filter(|r| r.kind == SnapshotKind::Savepoint && by_savepoint)
                {
                    if let weir_checkpoint::coordinator::Outcome::Completed { location, .. } =
                        sp.outcome
                    {
                        summary.snapshot = Some(location);
                    }
                }
            }
            Some((handle, _)) => {
                let snapshots = tails
                    .into_iter()
                    .map(|t| {
                        let blob = NodeState {
                            state: t.state,
                            ..NodeState::default()
                        };
                        Ok(SubtaskSnapshot {
                            node: t.node,
                            subtask: t.subtask as u32,
                            operator: (!blob.is_empty()).then(|| blob.encode()).transpose()?,
                            keyed: None,
                        })
                    })
                    .collect::<Result<Vec<_>, OperatorError>>()
                    .map_err(|e| RunError::Checkpoint(e.to_string()))?;
                let completed = handle
                    .finish(snapshots)
                    .await
                    .map_err(|e| RunError::Checkpoint(e.to_string()))?;
                if let Some(h) = &attempt.hooks {
                    h.check()?;
                }
                summary.snapshot = Some(completed.location.clone());
            }
            None => {
                for tail in tails {
                    if let (Some(state), Some(f)) = (tail.state, factories.get(&tail.node)) {
                        f.commit(vec![state])
                            .await
                            .map_err(|e| sink_error(tail.node, tail.subtask, e))?;
                    }
                }
            }
        }
        Ok(summary)
    }

    fn remove_work_dir(&self) {
        let dir = self.work_dir();
        if let Err(e) = std::fs::remove_dir_all(&dir) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(dir = %dir.display(), error = %e, "could not remove the run's working directory");
            }
        }
        // The job's directory too, once no run of it is left.
        if let Some(parent) = dir.parent() {
            let _ = std::fs::remove_dir(parent);
        }
    }
}

impl Attempt {
    /// Waits for every task; the first failure (or a failed commit) ends the attempt.
    async fn wait(&mut self) -> Result<Vec<SinkTail>, RunError> {
        let mut secondary: Option<JobError> = None;
        let mut tails = Vec::new();
        let failed = self
            .hooks
            .as_ref()
            .map_or_else(CancellationToken::new, |h| h.failed.clone());
        loop {
            let joined = tokio::select! {
                joined = self.tasks.join_next() => joined,
                () = failed.cancelled() => {
                    if let Some(h) = &self.hooks {
                        h.check()?;
                    }
                    continue;
                }
            };
            let Some(joined) = joined else { break };
            let failure = match joined {
                Ok((_, Ok(outcome))) => {
                    tails.extend(outcome.tails);
                    continue;
                }
                Ok((id, Err(f))) => {
                    let t = &self.ids[id];
                    JobError {
                        node: f.node,
                        subtask: t.subtask,
                        parallelism: t.parallelism,
                        error: f.error,
                    }
                }
                Err(e) if e.is_cancelled() => continue,
                Err(e) => JobError {
                    node: "?".into(),
                    subtask: 0,
                    parallelism: 1,
                    error: OperatorError::Internal(format!("a task panicked: {e}")),
                },
            };
            if matches!(failure.error, OperatorError::Cancelled(_)) {
                secondary.get_or_insert(failure);
                continue;
            }
            tracing::error!(error = %failure, "job failed");
            self.tasks.abort_all();
            while self.tasks.join_next().await.is_some() {}
            return Err(failure.into());
        }
        if let Some(e) = secondary {
            return Err(e.into());
        }
        Ok(tails)
    }

    /// Stops whatever is left of the attempt: its lease, tasks and coordinator.
    async fn shutdown(&mut self) {
        self.lease = None;
        self.tasks.abort_all();
        while self.tasks.join_next().await.is_some() {}
        if let Some((handle, joined)) = self.coordinator.take() {
            drop(handle);
            joined.abort();
            let _ = joined.await;
        }
    }

    /// Task names, for logs.
    #[allow(dead_code)]
    fn names(&self) -> Vec<&str> {
        self.ids.iter().map(|t| t.name.as_str()).collect()
    }
}

/// What the coordinator asks of the runtime.
struct Hooks {
    /// One per source subtask, set once the attempt's tasks exist.
    barriers: OnceLock<Vec<mpsc::Sender<Barrier>>>,
    stop: CancellationToken,
    stopped_by_savepoint: AtomicBool,
    sinks: Vec<(usize, Arc<dyn SinkFactory>)>,
    sources: Vec<(usize, Arc<dyn SourceFactory>)>,
    /// The newest snapshot whose transactions are committed (sinks read it at barriers).
    committed: Arc<AtomicU64>,
    /// A commit that failed: it fails the attempt (the restore commits again).
    failure: Arc<Mutex<Option<String>>>,
    failed: CancellationToken,
}

impl Hooks {
    fn check(&self) -> Result<(), RunError> {
        match self.failure.lock().ok().and_then(|f| f.clone()) {
            Some(message) => Err(RunError::Checkpoint(message)),
            None => Ok(()),
        }
    }
}

impl JobHooks for Hooks {
    fn inject(&self, barrier: Barrier) -> Result<(), String> {
        let Some(sources) = self.barriers.get() else {
            return Err("the job's tasks are not running yet".into());
        };
        for tx in sources {
            match tx.try_send(barrier) {
                Ok(()) => {}
                Err(mpsc::error::TrySendError::Full(_)) => {
                    return Err("a source still has barriers to inject".into());
                }
                Err(mpsc::error::TrySendError::Closed(_)) => {
                    return Err("a source of the job has finished".into());
                }
            }
        }
        Ok(())
    }

    fn committed(&self, completed: Arc<Completed>) -> BoxFuture<'static, Result<(), String>> {
        let mut commits = Vec::new();
        for (node, factory) in &self.sinks {
            let states = node_states(&completed, *node);
            if !states.is_empty() {
                commits.push(factory.commit(states));
            }
        }
        // Sources hear of the completed checkpoint too (a Kafka source commits its offsets to
        // its consumer group, for lag monitoring); what they do with it cannot fail the job.
        for (node, factory) in &self.sources {
            factory.checkpoint_complete(node_states(&completed, *node));
        }
        let committed = self.committed.clone();
        let id = completed.metadata.id;
        let failure = self.failure.clone();
        let failed = self.failed.clone();
        Box::pin(async move {
            for c in commits {
                if let Err(e) = c.await {
                    let message = format!("committing the output of snapshot {id}: {e}");
                    if let Ok(mut slot) = failure.lock() {
                        slot.get_or_insert(message.clone());
                    }
                    failed.cancel();
                    return Err(message);
                }
            }
            committed.fetch_max(id, Ordering::AcqRel);
            Ok(())
        })
    }

    fn stop_sources(&self) {
        self.stopped_by_savepoint.store(true, Ordering::Release);
        self.stop.cancel();
    }
}

/// The sink nodes of `plan`, by node index, with their factories.
/// The operator states the subtasks of `node` recorded in a completed snapshot.
fn node_states(completed: &Completed, node: usize) -> Vec<serde_json::Value> {
    completed
        .operator_states
        .iter()
        .filter(|((n, _), _)| *n == node)
        .filter_map(|(_, bytes)| NodeState::decode(bytes).ok()?.state)
        .collect()
}

fn source_factories(plan: &Plan) -> Vec<(usize, Arc<dyn SourceFactory>)> {
    plan.nodes
        .iter()
        .enumerate()
        .filter_map(|(i, n)| match &n.factory {
            Factory::Source { factory, .. } => Some((i, factory.clone())),
            _ => None,
        })
        .collect()
}

fn sink_factories(plan: &Plan) -> Vec<(usize, Arc<dyn SinkFactory>)> {
    plan.nodes
        .iter()
        .enumerate()
        .filter_map(|(i, n)| match &n.factory {
            Factory::Sink(f) => Some((i, f.clone())),
            _ => None,
        })
        .collect()
}

/// Removes the working directories that runs of the same job left when their process died
/// (killed, or a crash): siblings of `run_dir` named `<ms>-<pid>-<n>` whose process is gone.
fn remove_stale_runs(run_dir: &std::path::Path) {
    let Some(job_dir) = run_dir.parent() else {
        return;
    };
    let Ok(entries) = std::fs::read_dir(job_dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.split('-').nth(1))
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        let alive = pid == std::process::id() as i32
            || nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok();
        if !alive {
            match std::fs::remove_dir_all(entry.path()) {
                Ok(()) => {
                    tracing::info!(dir = %entry.path().display(), "removed the working directory of a run that died")
                }
                Err(e) => {
                    tracing::warn!(dir = %entry.path().display(), error = %e, "could not remove a dead run's working directory")
                }
            }
        }
    }
}

/// Counts of one node at the end of a run.
#[derive(Clone, Debug, serde::Serialize)]
pub struct NodeSummary {
    pub name: String,
    pub kind: String,
    pub role: NodeRole,
    pub parallelism: usize,
    pub records_in: u64,
    pub records_out: u64,
    pub skipped: u64,
    /// Records dropped for arriving too late for event time.
    pub late_dropped: u64,
    pub backpressure: Duration,
}

/// What a finished run did.
#[derive(Clone, Debug, serde::Serialize)]
pub struct JobSummary {
    pub job: String,
    pub elapsed: Duration,
    /// Input units consumed by all sources.
    pub events: u64,
    pub nodes: Vec<NodeSummary>,
    /// Restarts after failures.
    pub restarts: u32,
    /// Checkpoints completed.
    pub checkpoints: u64,
    /// The snapshots taken (completed or failed), oldest first: the last
    /// [`HISTORY`](weir_checkpoint::coordinator::HISTORY) of each attempt.
    pub checkpoint_history: Vec<Record>,
    /// The snapshot the run started from, if it restored one.
    pub restored_from: Option<String>,
    /// How the latest restore read its snapshot.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub restore: Option<Restore>,
    /// The savepoint a stop took, or the final snapshot of a completed bounded run.
    pub snapshot: Option<String>,
}

impl JobSummary {
    pub fn of(metrics: &JobMetrics) -> Self {
        Self {
            job: metrics.job.clone(),
            elapsed: metrics.started.elapsed(),
            events: metrics.events(),
            nodes: metrics
                .nodes
                .iter()
                .map(|n| NodeSummary {
                    name: n.name.clone(),
                    kind: n.kind.clone(),
                    role: n.role,
                    parallelism: n.subtasks.len(),
                    records_in: n.sum(|s| &s.records_in),
                    records_out: n.sum(|s| &s.records_out),
                    skipped: n.sum(|s| &s.skipped),
                    late_dropped: n.sum(|s| &s.late_dropped),
                    backpressure: Duration::from_nanos(n.sum(|s| &s.backpressure_ns)),
                })
                .collect(),
            restarts: 0,
            checkpoints: 0,
            checkpoint_history: Vec::new(),
            restored_from: None,
            restore: None,
            snapshot: None,
        }
    }

    /// Events per second of wall-clock time.
    pub fn events_per_second(&self) -> f64 {
        self.events as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Records a node received (sinks) or emitted (sources), by name.
    pub fn node(&self, name: &str) -> Option<&NodeSummary> {
        self.nodes.iter().find(|n| n.name == name)
    }
}

/// Whether every source subtask has finished.
pub fn sources_finished(metrics: &JobMetrics) -> bool {
    metrics.sources().all(|n| {
        n.subtasks
            .iter()
            .all(|s| s.finished.load(Ordering::Relaxed))
    })
}
