//! A running job: starting it, and steering it from outside.
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

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use weir_checkpoint::coordinator::StatsSnapshot;
use weir_checkpoint::{CheckpointError, Completed, CoordinatorHandle, JobCheckpoints};

use super::error::{JobError, RunError};
use super::restart::RestartPolicy;
use super::restore::RestoreFrom;
use super::state::StateSettings;
use super::supervisor::Run;

// What the job's API returns, at the API's path.
pub use super::summary::{JobSummary, NodeSummary, sources_finished};
pub use super::supervisor::{FAILURES, Failure, RestoreReport, RunStatus};
use crate::api::{JobMetrics, OperatorError};
use crate::plan::Plan;

/// How to run a job.
#[derive(Clone, Default)]
pub struct JobOptions {
    /// Start from a snapshot instead of from scratch.
    pub from: Option<RestoreFrom>,
    /// The process's shared checkpoint-trigger scheduler (periodic checkpoints need one).
    pub scheduler: Option<Arc<weir_scheduler::Scheduler>>,
    /// Where the job's S3 client may connect, checked at every connection: a server's
    /// outbound policy (`None`: wherever DNS says, as for `weir run`).
    pub guard: Option<Arc<dyn weir_checkpoint::object::AddressGuard>>,
    /// In a fleet of servers: the job's lease, through which snapshot ids are reserved,
    /// snapshots published and "the latest snapshot" found ([`weir_checkpoint::fence`]).
    pub fence: Option<Arc<dyn weir_checkpoint::Fence>>,
}

/// Steering a running job from outside: savepoints, checkpoint statistics, and the task
/// failures it restarted after.
#[derive(Clone)]
pub struct JobControl {
    coordinator: watch::Receiver<Option<CoordinatorHandle>>,
    failures: Arc<Mutex<Vec<Failure>>>,
    queries: Arc<crate::query::Queries>,
    /// How the latest restore read its snapshot, shared with the supervisor.
    restore: Arc<Mutex<Option<RestoreReport>>>,
    /// Running or waiting to restart, set by the supervisor.
    status: watch::Receiver<RunStatus>,
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
    pub fn restore_stats(&self) -> Option<RestoreReport> {
        self.restore.lock().ok().and_then(|r| r.clone())
    }

    /// Whether the run is running or waiting to restart after a failure.
    pub fn status(&self) -> RunStatus {
        self.status.borrow().clone()
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

/// Starts a planned job on the current tokio runtime: restores its snapshot (if asked),
/// prepares its sources and sinks and spawns its first attempt.
pub async fn start(plan: &Plan, options: JobOptions) -> Result<RunningJob, RunError> {
    let checkpointing = plan.spec.checkpoint.enabled();
    let catalog = if checkpointing || options.from.is_some() {
        let config = plan
            .spec
            .checkpoint
            .storage_config()
            .map_err(RunError::StorageConfig)?;
        let storage = weir_checkpoint::object::open_guarded(&config, options.guard.as_ref())
            .map_err(|e| RunError::StorageConfig(e.to_string()))?;
        Some(JobCheckpoints::new(storage, &plan.spec.name))
    } else {
        None
    };
    let mut options = options;
    if checkpointing && options.scheduler.is_none() {
        // A caller without the process's shared scheduler gets one of its own.
        let scheduler =
            weir_scheduler::Scheduler::dedicated(weir_scheduler::SchedulerConfig::default())?;
        options.scheduler = Some(Arc::new(scheduler));
    }
    // The run's working directory and block cache: made here, never by planning.
    let state = Arc::new(StateSettings::for_run(&plan.spec));
    remove_stale_runs(state.run_dir());
    let stop = CancellationToken::new();
    let (control_tx, control_rx) = watch::channel(None);
    let failures = Arc::new(Mutex::new(Vec::new()));
    let queries = crate::query::Queries::new(
        &plan.spec.name,
        plan.nodes
            .iter()
            .filter_map(|n| Some((n.name.clone(), n.queryable.clone()?))),
    );
    let restore = Arc::new(Mutex::new(None));
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let (status_tx, status_rx) = watch::channel(RunStatus::Running);
    let policy = RestartPolicy::new(
        &plan.spec.restart,
        checkpointing,
        // Jitter differs between jobs and runs.
        (started as u64) ^ u64::from(std::process::id()).rotate_left(32),
    );
    let mut run = Run {
        plan: plan.clone(),
        state,
        base: options.from.clone(),
        options,
        catalog,
        stop: stop.clone(),
        metrics: None,
        control: control_tx,
        run_id: format!("{started}-{}", std::process::id()),
        floor: None,
        completed: 0,
        history: Vec::new(),
        restored_from: None,
        restarts: 0,
        policy,
        attempt_started: std::time::Instant::now(),
        status: Arc::new(status_tx),
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
        // starts is a failure like any other: restarted after if its kind and the budget
        // allow; bad data or configuration fails at once.
        Err(failure) => run.restart(failure).await?,
    };
    let metrics = run
        .metrics
        .clone()
        .ok_or_else(|| RunError::Internal("the first attempt made no metrics".into()))?;
    // Restarts before the first attempt that launched had no metrics to count in yet.
    metrics
        .restarts
        .store(u64::from(run.restarts), Ordering::Relaxed);
    tracing::info!(job = %plan.spec.name, tasks = attempt.ids.len(), "job started");
    // In the caller's span: a host that runs the job inside a span of its own (to tell its log
    // lines from other jobs') keeps it across the supervisor and every later attempt.
    let supervisor = tokio::spawn(tracing::Instrument::in_current_span(run.supervise(attempt)));
    Ok(RunningJob {
        supervisor: Some(supervisor),
        metrics,
        stop,
        control: JobControl {
            coordinator: control_rx,
            failures,
            queries,
            restore,
            status: status_rx,
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
            return Err(RunError::Internal("the job was already awaited".into()));
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
