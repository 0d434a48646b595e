//! One hosted job: its plan, its current run's handles, and what the API reports about it.
//!
//! The run itself (its tasks, coordinator and lease) is owned by the runtime's supervisor,
//! which the host's waiter task owns through the `RunningJob`. A `HostedJob` keeps only what
//! steers and observes the run: the stop token, the [`JobControl`], the live metrics, a short
//! history of samples for rates and sparklines, the savepoint requests, recent exceptions.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use weir_checkpoint::coordinator::Record;
use weir_runtime::api::JobMetrics;
use weir_runtime::exec::error::RunError;
use weir_runtime::exec::job::{JobControl, JobSummary, RunStatus, RunningJob};
use weir_runtime::plan::Plan;
use weir_state::clock::now_ms;

use crate::catalog::{StoredJob, StoredRun};
use crate::error::ApiError;
use crate::lifecycle::JobState;

/// Samples kept per job: two minutes at the default sampling interval of one second.
pub const SAMPLES: usize = 120;
/// Exceptions kept per job, newest last.
pub const EXCEPTIONS: usize = 32;
/// Savepoint requests remembered per job (finished ones are forgotten oldest first).
pub const SAVEPOINTS: usize = 32;
/// Savepoint requests in flight per job at once; more are refused (429).
pub const SAVEPOINTS_IN_FLIGHT: usize = 4;

/// What ending was asked for, deciding the final state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    Cancel,
    Stop,
}

/// One sample of a run's counters.
#[derive(Clone, Debug)]
pub struct Sample {
    pub at: Instant,
    pub events: u64,
    pub nodes: Vec<NodeSample>,
}

#[derive(Clone, Debug)]
pub struct NodeSample {
    pub records_in: u64,
    pub records_out: u64,
    pub backpressure_ns: u64,
    /// The same counters per subtask (with busy and idle time), for the per-subtask view.
    pub subtasks: Vec<SubtaskSample>,
}

#[derive(Clone, Copy, Debug, Default)]
pub struct SubtaskSample {
    pub records_in: u64,
    pub records_out: u64,
    pub backpressure_ns: u64,
    pub busy_ns: u64,
    pub idle_ns: u64,
}

impl SubtaskSample {
    fn of(s: &weir_runtime::api::SubtaskMetrics) -> Self {
        let load = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
        SubtaskSample {
            records_in: load(&s.records_in),
            records_out: load(&s.records_out),
            backpressure_ns: load(&s.backpressure_ns),
            busy_ns: load(&s.busy_ns),
            idle_ns: load(&s.idle_ns),
        }
    }
}

impl Sample {
    pub fn of(metrics: &JobMetrics) -> Self {
        Sample {
            at: Instant::now(),
            events: metrics.events(),
            nodes: metrics
                .nodes
                .iter()
                .map(|n| {
                    let subtasks: Vec<SubtaskSample> =
                        n.subtasks.iter().map(|s| SubtaskSample::of(s)).collect();
                    NodeSample {
                        records_in: subtasks.iter().map(|s| s.records_in).sum(),
                        records_out: subtasks.iter().map(|s| s.records_out).sum(),
                        backpressure_ns: subtasks.iter().map(|s| s.backpressure_ns).sum(),
                        subtasks,
                    }
                })
                .collect(),
        }
    }
}

/// Something that went wrong in a job, for the exceptions list.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub struct Exception {
    /// Epoch ms.
    pub at: i64,
    /// `failure` (the job failed), `restart` (it failed and restarted), `savepoint` or
    /// `resume` (the server restarted under it).
    pub kind: String,
    pub message: String,
    /// What kind of failure (`data`, `external`, `internal`): whether retrying could help.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub category: Option<String>,
}

/// A savepoint request and how it ended.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub struct SavepointStatus {
    pub id: u64,
    /// `in-progress`, `completed` or `failed`.
    pub status: String,
    /// Whether the job stops once the savepoint is complete.
    pub stop: bool,
    pub requested_at: i64,
    pub completed_at: Option<i64>,
    /// The snapshot's id in the job's checkpoint storage (`sp-<id>` restores it).
    pub snapshot_id: Option<u64>,
    pub location: Option<String>,
    pub error: Option<String>,
}

/// The handles of a run in progress.
pub struct Live {
    pub stopper: CancellationToken,
    pub control: JobControl,
}

/// The mutable part of a hosted job.
pub struct JobInner {
    pub state: JobState,
    /// Runs of this job in this host: 1 for the submitted run, +1 per restart request.
    pub run: u32,
    pub started_at: i64,
    pub ended_at: Option<i64>,
    pub live: Option<Live>,
    /// The current (or last) run's counters.
    pub metrics: Arc<JobMetrics>,
    pub ending: Option<Ending>,
    pub summary: Option<JobSummary>,
    /// Checkpoints of earlier runs; the current run's are read from its coordinator.
    pub past_checkpoints: Vec<Record>,
    /// Oldest first, at most [`SAMPLES`].
    pub samples: VecDeque<Sample>,
    pub exceptions: VecDeque<Exception>,
    pub savepoints: BTreeMap<u64, SavepointStatus>,
    next_savepoint: u64,
    /// Failures of the current run already copied into `exceptions`.
    failures_seen: usize,
    /// The snapshot the current run was asked to start from.
    pub restored_from: Option<String>,
    pub error: Option<String>,
    /// Every run of the job, oldest first (at most [`crate::catalog::RUNS`]).
    pub runs: VecDeque<StoredRun>,
    /// What the catalog last got of the run's progress (status, checkpoints), so that the
    /// sampler writes again only when it changed.
    pub persisted: Option<(JobState, u64)>,
    /// What the job's runs on other servers counted before this server took it over: the
    /// job's totals are these and the run's own ([`Self::totals`]).
    pub carried: crate::catalog::StoredTotals,
    /// An ended job read back from the catalog: where its input was when it ended (the
    /// counters read back do not say).
    pub ended_progress: Option<[u64; 2]>,
}

impl JobInner {
    /// The job's counts: what its runs on other servers counted, and this run's.
    pub fn totals(&self) -> crate::catalog::StoredTotals {
        self.carried.plus(&self.metrics)
    }

    /// The job's state as shown: a running job whose supervisor waits to restart it after a
    /// failure is `restarting`.
    pub fn current(&self) -> JobState {
        match (&self.state, &self.live) {
            (JobState::Running, Some(live))
                if matches!(live.control.status(), RunStatus::Restarting { .. }) =>
            {
                JobState::Restarting
            }
            (state, _) => *state,
        }
    }

    /// Opens the record of run `run` (closing one left open by a server that stopped).
    fn run_started(&mut self, run: u32, started_at: i64, restored_from: Option<String>) {
        if let Some(last) = self.runs.back_mut().filter(|r| r.ended_at.is_none()) {
            last.state = "interrupted".into();
        }
        if self.runs.len() == crate::catalog::RUNS {
            self.runs.pop_front();
        }
        self.runs.push_back(StoredRun {
            run,
            started_at,
            ended_at: None,
            state: JobState::Running.name().into(),
            restored_from,
            error: None,
        });
    }

    /// Closes the record of the current run.
    fn run_ended(&mut self, at: i64, state: JobState, error: Option<String>) {
        if let Some(last) = self.runs.back_mut().filter(|r| r.ended_at.is_none()) {
            last.ended_at = Some(at);
            last.state = state.name().into();
            last.error = error;
        }
    }

    pub fn exception(&mut self, kind: &str, message: String, category: Option<&str>) {
        self.exception_at(now_ms(), kind, message, category);
    }

    fn exception_at(&mut self, at: i64, kind: &str, message: String, category: Option<&str>) {
        if self.exceptions.len() == EXCEPTIONS {
            self.exceptions.pop_front();
        }
        self.exceptions.push_back(Exception {
            at,
            kind: kind.to_owned(),
            message,
            category: category.map(str::to_owned),
        });
    }

    /// Copies the run's new task failures (each followed by a restart) into the exceptions.
    fn collect_failures(&mut self) {
        let Some(live) = &self.live else { return };
        let failures = live.control.failures();
        let new: Vec<_> = failures.into_iter().skip(self.failures_seen).collect();
        self.failures_seen += new.len();
        for f in new {
            let message = format!("{} (restart {})", f.message, f.restart);
            self.exception_at(f.at, "restart", message, Some(f.category));
        }
    }

    /// How the job's latest restore read its snapshot (seeks performed and skipped, requests,
    /// bytes), from the run in progress or the one that ended.
    pub fn restore_stats(&self) -> Option<weir_runtime::exec::job::RestoreReport> {
        match &self.live {
            Some(live) => live.control.restore_stats(),
            None => self.summary.as_ref().and_then(|s| s.restore.clone()),
        }
    }

    /// The current run's checkpoint counters and history, if it checkpoints.
    pub fn checkpoint_stats(&self) -> Option<weir_checkpoint::coordinator::StatsSnapshot> {
        self.live
            .as_ref()
            .and_then(|l| l.control.checkpoint_stats())
    }

    /// Every checkpoint this host saw the job take, oldest first.
    pub fn checkpoint_history(&self) -> Vec<Record> {
        let mut all = self.past_checkpoints.clone();
        if let Some(stats) = self.checkpoint_stats() {
            all.extend(stats.history);
        }
        all
    }
}

/// What a job runs: its plan, and the overrides it was planned with (a rescale changes both).
#[derive(Clone)]
pub struct Definition {
    pub plan: Arc<Plan>,
    /// `--set` overrides as given, `key.path=value` each.
    pub overrides: Vec<String>,
}

/// A job in the host.
pub struct HostedJob {
    pub id: u64,
    pub name: String,
    /// The job file as submitted.
    pub text: String,
    definition: std::sync::RwLock<Definition>,
    pub submitted_at: i64,
    /// The secret values of the job file, masked in everything the API and the log say about
    /// the job; registered with [`crate::redact::registry`] while the job is kept.
    pub secrets: Arc<crate::redact::Secrets>,
    /// Woken whenever a run of the job ends (a rescale waits for its stop on it).
    pub run_ended: tokio::sync::Notify,
    /// The job's own log lines ([`crate::logs`]): its runs start in [`JobLog::span`].
    pub log: Arc<crate::logs::JobLog>,
    /// In a fleet: the epoch of the lease this server runs the job under (0: none).
    lease: std::sync::atomic::AtomicU64,
    /// In a fleet: the job's copy here is stopping because the job moves to another server
    /// (its lease was lost, or handed over): how this copy ends is not the job's end, and is
    /// not written to the catalog.
    moving: std::sync::atomic::AtomicBool,
    inner: Mutex<JobInner>,
}

impl HostedJob {
    /// A job just submitted, its first run started as `running`; `secrets` are its registered
    /// secrets ([`crate::redact::registry`]), registered before it started so that its first
    /// log lines were masked too.
    pub fn new(
        id: u64,
        text: String,
        definition: Definition,
        secrets: Arc<crate::redact::Secrets>,
        running: &RunningJob,
        restored_from: Option<String>,
        log: Arc<crate::logs::JobLog>,
    ) -> Self {
        let now = now_ms();
        let mut inner = JobInner {
            state: JobState::Running,
            run: 1,
            started_at: now,
            ended_at: None,
            live: Some(Live {
                stopper: running.stopper(),
                control: running.control(),
            }),
            metrics: running.metrics(),
            ending: None,
            summary: None,
            past_checkpoints: Vec::new(),
            samples: VecDeque::new(),
            exceptions: VecDeque::new(),
            savepoints: BTreeMap::new(),
            next_savepoint: 0,
            failures_seen: 0,
            restored_from: restored_from.clone(),
            error: None,
            runs: VecDeque::new(),
            persisted: None,
            carried: Default::default(),
            ended_progress: None,
        };
        inner.run_started(1, now, restored_from);
        HostedJob {
            id,
            name: definition.plan.name().to_owned(),
            text,
            definition: std::sync::RwLock::new(definition),
            submitted_at: now,
            secrets,
            run_ended: tokio::sync::Notify::new(),
            log,
            lease: std::sync::atomic::AtomicU64::new(0),
            moving: std::sync::atomic::AtomicBool::new(false),
            inner: Mutex::new(inner),
        }
    }

    /// A job read back from the catalog, with no run in this server (yet): an ended job as it
    /// ended, a job that was running as `restarting` until the host resumes it.
    pub fn recovered(stored: &StoredJob, plan: Plan) -> Self {
        let overrides = crate::overrides::parse(&stored.overrides).unwrap_or_default();
        let secrets = crate::redact::registry().register(
            crate::redact::Secrets::of_job(&stored.text, &overrides)
                .with(&plan.env_values)
                .with_connectors(&plan.spec),
        );
        let stored_state = JobState::from_name(&stored.state).unwrap_or(JobState::Failed);
        let state = if stored_state.is_live() {
            JobState::Restarting
        } else {
            stored_state
        };
        let summary: Option<JobSummary> = stored
            .summary
            .as_ref()
            .and_then(|v| serde_json::from_value(v.clone()).ok());
        let metrics = recovered_metrics(&plan, summary.as_ref());
        let savepoints: Vec<SavepointStatus> = decode(&stored.savepoints);
        let inner = JobInner {
            state,
            run: stored.run,
            started_at: stored.started_at,
            ended_at: stored.ended_at,
            live: None,
            metrics,
            ending: None,
            summary,
            past_checkpoints: decode(&stored.checkpoints),
            samples: VecDeque::new(),
            exceptions: decode(&stored.exceptions).into(),
            next_savepoint: savepoints.iter().map(|s| s.id).max().unwrap_or(0),
            savepoints: savepoints.into_iter().map(|s| (s.id, s)).collect(),
            failures_seen: 0,
            restored_from: stored.restored_from.clone(),
            error: stored.error.clone(),
            runs: stored.runs.iter().cloned().collect(),
            persisted: None,
            // A job resumed here (taken over, or its server restarted) goes on from the
            // totals its document had; an ended one shows its last run's summary on top of
            // what the runs before it counted elsewhere.
            carried: if stored_state.is_live() {
                stored.totals.clone()
            } else {
                stored.carried.clone()
            }
            .unwrap_or_default(),
            ended_progress: stored
                .totals
                .as_ref()
                .and_then(|t| t.progress)
                .filter(|_| !stored_state.is_live()),
        };
        HostedJob {
            id: stored.id,
            name: plan.name().to_owned(),
            text: stored.text.clone(),
            definition: std::sync::RwLock::new(Definition {
                plan: Arc::new(plan),
                overrides: stored.overrides.clone(),
            }),
            submitted_at: stored.submitted_at,
            secrets,
            run_ended: tokio::sync::Notify::new(),
            log: crate::logs::JobLog::new(),
            lease: std::sync::atomic::AtomicU64::new(0),
            moving: std::sync::atomic::AtomicBool::new(false),
            inner: Mutex::new(inner),
        }
    }

    /// A run could not start (resuming after a restart of the server, or a rescale's new
    /// run): the job has failed, with `message`.
    pub fn start_failed(&self, message: &str) {
        let mut s = self.lock();
        let now = now_ms();
        s.state = JobState::Failed;
        s.live = None;
        s.ended_at = Some(now);
        s.error = Some(message.to_owned());
        s.exception("failure", message.to_owned(), None);
        s.run_ended(now, JobState::Failed, Some(message.to_owned()));
    }

    /// Whether the job's state or its count of checkpoints changed since the catalog last got
    /// it (the sampler then writes it again).
    pub fn progress_changed(&self) -> bool {
        let s = self.lock();
        s.persisted != Some(progress(&s))
    }

    /// Records what the catalog was just given.
    pub fn mark_persisted(&self) {
        let mut s = self.lock();
        s.persisted = Some(progress(&s));
    }

    /// What the job runs: its plan and overrides.
    pub fn definition(&self) -> Definition {
        self.definition
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The job's plan.
    pub fn plan(&self) -> Arc<Plan> {
        self.definition().plan
    }

    /// Runs the job with another plan from its next run on (a rescale).
    pub fn redefine(&self, definition: Definition) {
        *self
            .definition
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = definition;
    }

    /// The job as the catalog keeps it.
    pub fn stored(&self) -> StoredJob {
        let definition = self.definition();
        let s = self.lock();
        let state = match s.current() {
            // A job the user asked to stop with a savepoint is resumed like a running one if
            // the server stops first: the savepoint never completed.
            JobState::Stopping => JobState::Running,
            other => other,
        };
        let values = |items: Vec<serde_json::Value>| items;
        StoredJob {
            version: crate::catalog::SCHEMA_VERSION,
            id: self.id,
            name: self.name.clone(),
            submitted_at: self.submitted_at,
            text: self.text.clone(),
            overrides: definition.overrides,
            state: state.name().into(),
            run: s.run,
            started_at: s.started_at,
            ended_at: s.ended_at,
            restored_from: s.restored_from.clone(),
            error: s.error.clone(),
            runs: s.runs.iter().cloned().collect(),
            exceptions: values(
                s.exceptions
                    .iter()
                    .filter_map(|e| serde_json::to_value(e).ok())
                    .collect(),
            ),
            checkpoints: values(
                s.checkpoint_history()
                    .iter()
                    .rev()
                    .take(crate::catalog::CHECKPOINTS)
                    .rev()
                    .filter_map(|r| serde_json::to_value(r).ok())
                    .collect(),
            ),
            savepoints: values(
                s.savepoints
                    .values()
                    .filter_map(|r| serde_json::to_value(r).ok())
                    .collect(),
            ),
            summary: s
                .summary
                .as_ref()
                .and_then(|summary| serde_json::to_value(summary).ok()),
            epoch: self.lease(),
            carried: Some(s.carried.clone()).filter(|c| *c != Default::default()),
            totals: Some(s.totals()),
        }
    }

    /// The epoch of the fleet lease the job runs under here, if any.
    pub fn lease(&self) -> Option<u64> {
        let epoch = self.lease.load(std::sync::atomic::Ordering::Acquire);
        (epoch != 0).then_some(epoch)
    }

    /// Records the fleet lease the job's next run here goes under.
    pub fn set_lease(&self, epoch: u64) {
        self.lease
            .store(epoch, std::sync::atomic::Ordering::Release);
    }

    /// Marks the job's copy here as moving to another server of the fleet (see `moving`).
    pub fn set_moving(&self) {
        self.moving
            .store(true, std::sync::atomic::Ordering::Release);
    }

    /// Whether the job's copy here is stopping because the job moves elsewhere.
    pub fn is_moving(&self) -> bool {
        self.moving.load(std::sync::atomic::Ordering::Acquire)
    }

    /// The job's mutable part. A poisoned lock (a panic while holding it) is taken over: every
    /// update leaves the state consistent between statements.
    pub fn lock(&self) -> MutexGuard<'_, JobInner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub fn state(&self) -> JobState {
        self.lock().current()
    }

    /// The running job's queryable state (`None` once the run ended).
    pub fn queries(&self) -> Option<Arc<weir_runtime::query::Queries>> {
        let s = self.lock();
        if !s.state.is_live() {
            return None;
        }
        s.live.as_ref().map(|l| l.control.queries())
    }

    /// A new run of the job started (a restart request, a rescale, or the server resuming it).
    pub fn restarted(&self, running: &RunningJob, from: Option<String>) {
        let mut s = self.lock();
        s.state = JobState::Running;
        s.run += 1;
        s.started_at = now_ms();
        let (run, started_at) = (s.run, s.started_at);
        s.run_started(run, started_at, from.clone());
        s.ended_at = None;
        s.live = Some(Live {
            stopper: running.stopper(),
            control: running.control(),
        });
        s.metrics = running.metrics();
        s.ending = None;
        s.summary = None;
        s.samples.clear();
        s.failures_seen = 0;
        s.restored_from = from;
        s.error = None;
    }

    /// The run ended; `result` is what its supervisor returned.
    pub fn ended(&self, result: Result<JobSummary, RunError>) {
        let mut s = self.lock();
        s.collect_failures();
        s.live = None;
        s.ended_at = Some(now_ms());
        let sample = Sample::of(&s.metrics);
        push_sample(&mut s.samples, sample);
        match result {
            Ok(summary) => {
                s.state = match s.ending {
                    Some(Ending::Cancel) => JobState::Cancelled,
                    Some(Ending::Stop) => JobState::Stopped,
                    None => JobState::Finished,
                };
                s.past_checkpoints
                    .extend(summary.checkpoint_history.iter().cloned());
                s.summary = Some(summary);
                let (at, state) = (s.ended_at.unwrap_or_else(now_ms), s.state);
                s.run_ended(at, state, None);
            }
            Err(e) => {
                s.state = JobState::Failed;
                let message = e.to_string();
                s.error = Some(message.clone());
                s.exception("failure", message.clone(), Some(e.category()));
                let at = s.ended_at.unwrap_or_else(now_ms);
                s.run_ended(at, JobState::Failed, Some(message));
            }
        }
        tracing::info!(job = %self.name, id = self.id, state = ?s.state, "hosted job ended");
    }

    /// Cancels the run: its sources end and what is in flight drains.
    pub fn cancel(&self) -> Result<(), ApiError> {
        let mut s = self.lock();
        let Some(live) = &s.live else {
            return Err(ApiError::Conflict(format!(
                "job {} is not running (it is {})",
                self.id,
                s.state.name()
            )));
        };
        live.stopper.cancel();
        s.ending = Some(Ending::Cancel);
        s.state = JobState::Cancelling;
        Ok(())
    }

    /// Registers a savepoint request; the caller runs it and reports with [`Self::savepoint_done`].
    pub fn savepoint_requested(&self, stop: bool) -> Result<(u64, JobControl), ApiError> {
        let mut s = self.lock();
        let Some(live) = &s.live else {
            return Err(ApiError::Conflict(format!(
                "job {} is not running",
                self.id
            )));
        };
        if !live.control.checkpoints() {
            return Err(ApiError::Conflict(format!(
                "job {} does not checkpoint (no `checkpoint.interval`), so it takes no savepoints",
                self.id
            )));
        }
        // A job already ending (a stop, a rescale or a cancel under way) takes no savepoint:
        // its coordinator would skip it, and a failed stop would wrongly mark the job running
        // again while the first stop goes on.
        if s.ending.is_some() {
            return Err(ApiError::Conflict(format!(
                "job {} is {}: it takes no more savepoints",
                self.id,
                s.state.name()
            )));
        }
        let control = live.control.clone();
        let in_flight = s
            .savepoints
            .values()
            .filter(|r| r.status == "in-progress")
            .count();
        if in_flight >= SAVEPOINTS_IN_FLIGHT {
            return Err(ApiError::TooMany(format!(
                "job {} already has {in_flight} savepoints in progress",
                self.id
            )));
        }
        while s.savepoints.len() >= SAVEPOINTS {
            let oldest_done = s
                .savepoints
                .iter()
                .find(|(_, r)| r.status != "in-progress")
                .map(|(id, _)| *id);
            match oldest_done {
                Some(id) => s.savepoints.remove(&id),
                None => break,
            };
        }
        s.next_savepoint += 1;
        let id = s.next_savepoint;
        s.savepoints.insert(
            id,
            SavepointStatus {
                id,
                status: "in-progress".into(),
                stop,
                requested_at: now_ms(),
                completed_at: None,
                snapshot_id: None,
                location: None,
                error: None,
            },
        );
        if stop {
            s.ending = Some(Ending::Stop);
            s.state = JobState::Stopping;
        }
        Ok((id, control))
    }

    pub fn savepoint_done(
        &self,
        id: u64,
        result: Result<Arc<weir_checkpoint::Completed>, weir_checkpoint::CheckpointError>,
    ) {
        let mut s = self.lock();
        let mut failed = None;
        if let Some(r) = s.savepoints.get_mut(&id) {
            r.completed_at = Some(now_ms());
            match result {
                Ok(done) => {
                    r.status = "completed".into();
                    r.snapshot_id = Some(done.metadata.id);
                    r.location = Some(done.location.clone());
                }
                Err(e) => {
                    r.status = "failed".into();
                    r.error = Some(e.to_string());
                    failed = Some((r.stop, e.to_string()));
                }
            }
        }
        if let Some((stop, message)) = failed {
            s.exception(
                "savepoint",
                format!("savepoint {id} failed: {message}"),
                None,
            );
            if stop && s.state == JobState::Stopping {
                // The job goes on; the user may cancel it or try again.
                s.state = JobState::Running;
                s.ending = None;
            }
        }
    }

    /// Records a sample of the run's counters (the host's sampler calls this periodically).
    pub fn sample(&self) {
        let mut s = self.lock();
        if !s.state.is_live() {
            return;
        }
        let sample = Sample::of(&s.metrics);
        push_sample(&mut s.samples, sample);
        s.collect_failures();
    }
}

fn push_sample(samples: &mut VecDeque<Sample>, sample: Sample) {
    if samples.len() == SAMPLES {
        samples.pop_front();
    }
    samples.push_back(sample);
}

/// Per-second rate between two counter readings.
pub fn rate(before: u64, after: u64, elapsed: Duration) -> f64 {
    let secs = elapsed.as_secs_f64();
    if secs <= 0.0 {
        return 0.0;
    }
    after.saturating_sub(before) as f64 / secs
}

/// The entries of `values` that read as `T` (the catalog's lists of exceptions, checkpoints
/// and savepoints; an entry a later weir wrote differently is skipped).
fn decode<T: serde::de::DeserializeOwned>(values: &[serde_json::Value]) -> Vec<T> {
    values
        .iter()
        .filter_map(|v| serde_json::from_value(v.clone()).ok())
        .collect()
}

/// What the sampler compares to decide whether the catalog needs the job again.
fn progress(s: &JobInner) -> (JobState, u64) {
    let checkpoints = s.checkpoint_stats().map_or(0, |c| c.completed + c.failed);
    (s.current(), checkpoints)
}

/// The counters of a job read back from the catalog: zero for every subtask of its plan, but
/// for the totals its last run's summary recorded (on subtask 0 of each node), so that an
/// ended job shows what it did.
fn recovered_metrics(plan: &Plan, summary: Option<&JobSummary>) -> Arc<JobMetrics> {
    use std::sync::atomic::Ordering::Relaxed;
    use weir_runtime::api::{NodeMetrics, NodeRole, SubtaskMetrics};
    let nodes = plan
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let subtasks: Vec<Arc<SubtaskMetrics>> = (0..n.parallelism)
                .map(|_| {
                    let m = SubtaskMetrics::default();
                    m.finished.store(true, Relaxed);
                    Arc::new(m)
                })
                .collect();
            if let (Some(first), Some(done)) = (
                subtasks.first(),
                summary.and_then(|s| s.nodes.iter().find(|d| d.name == n.name)),
            ) {
                first.records_in.store(done.records_in, Relaxed);
                first.records_out.store(done.records_out, Relaxed);
                first.skipped.store(done.skipped, Relaxed);
                first.late_dropped.store(done.late_dropped, Relaxed);
                first.backpressure_ns.store(
                    u64::try_from(done.backpressure.as_nanos()).unwrap_or(u64::MAX),
                    Relaxed,
                );
            }
            Arc::new(NodeMetrics {
                name: n.name.clone(),
                kind: n.kind.to_string(),
                role: n.role,
                chain: plan.chains.chain_of.get(i).copied().unwrap_or(i),
                subtasks,
                progress_total: None,
            })
        })
        .collect::<Vec<Arc<NodeMetrics>>>();
    // The run's input units, all on the first source (per-source figures are not kept).
    if let (Some(summary), Some(source)) =
        (summary, nodes.iter().find(|n| n.role == NodeRole::Source))
        && let Some(first) = source.subtasks.first()
    {
        first.events.store(summary.events, Relaxed);
    }
    Arc::new(JobMetrics {
        job: plan.name().to_owned(),
        started: std::time::Instant::now(),
        nodes,
        restarts: std::sync::atomic::AtomicU64::new(summary.map_or(0, |s| u64::from(s.restarts))),
    })
}
