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
use weir_runtime::exec::job::{JobControl, JobSummary, RunningJob};
use weir_runtime::plan::Plan;

/// Samples kept per job: two minutes at the default sampling interval of one second.
pub const SAMPLES: usize = 120;
/// Exceptions kept per job, newest last.
pub const EXCEPTIONS: usize = 32;
/// Savepoint requests remembered per job (finished ones are forgotten oldest first).
pub const SAVEPOINTS: usize = 32;
/// Savepoint requests in flight per job at once; more are refused (429).
pub const SAVEPOINTS_IN_FLIGHT: usize = 4;

/// Where a hosted job is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum JobState {
    Running,
    /// Cancel requested: sources end, what is in flight drains.
    Cancelling,
    /// Stop with a savepoint requested: the job stops once the savepoint is complete.
    Stopping,
    /// The input ended.
    Finished,
    Cancelled,
    /// Stopped with a savepoint.
    Stopped,
    /// Failed (after any restarts its restart strategy allowed).
    Failed,
}

impl JobState {
    /// Every state, in the order of a job's life.
    pub const ALL: [JobState; 7] = [
        JobState::Running,
        JobState::Cancelling,
        JobState::Stopping,
        JobState::Finished,
        JobState::Cancelled,
        JobState::Stopped,
        JobState::Failed,
    ];

    /// The state as the API writes it.
    pub fn name(self) -> &'static str {
        match self {
            JobState::Running => "running",
            JobState::Cancelling => "cancelling",
            JobState::Stopping => "stopping",
            JobState::Finished => "finished",
            JobState::Cancelled => "cancelled",
            JobState::Stopped => "stopped",
            JobState::Failed => "failed",
        }
    }

    /// Whether a run of the job is in progress.
    pub fn is_live(self) -> bool {
        matches!(
            self,
            JobState::Running | JobState::Cancelling | JobState::Stopping
        )
    }
}

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

#[derive(Clone, Copy, Debug)]
pub struct NodeSample {
    pub records_in: u64,
    pub records_out: u64,
    pub backpressure_ns: u64,
}

impl Sample {
    pub fn of(metrics: &JobMetrics) -> Self {
        Sample {
            at: Instant::now(),
            events: metrics.events(),
            nodes: metrics
                .nodes
                .iter()
                .map(|n| NodeSample {
                    records_in: n.sum(|s| &s.records_in),
                    records_out: n.sum(|s| &s.records_out),
                    backpressure_ns: n.sum(|s| &s.backpressure_ns),
                })
                .collect(),
        }
    }
}

/// Something that went wrong in a job, for the exceptions list.
#[derive(Clone, Debug, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Exception {
    /// Epoch ms.
    pub at: i64,
    /// `failure`, `restart` or `savepoint`.
    pub kind: &'static str,
    pub message: String,
}

/// A savepoint request and how it ended.
#[derive(Clone, Debug, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct SavepointStatus {
    pub id: u64,
    /// `in-progress`, `completed` or `failed`.
    pub status: &'static str,
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
}

impl JobInner {
    pub fn exception(&mut self, kind: &'static str, message: String) {
        self.exception_at(now_ms(), kind, message);
    }

    fn exception_at(&mut self, at: i64, kind: &'static str, message: String) {
        if self.exceptions.len() == EXCEPTIONS {
            self.exceptions.pop_front();
        }
        self.exceptions.push_back(Exception { at, kind, message });
    }

    /// Copies the run's new task failures (each followed by a restart) into the exceptions.
    fn collect_failures(&mut self) {
        let Some(live) = &self.live else { return };
        let failures = live.control.failures();
        let new: Vec<_> = failures.into_iter().skip(self.failures_seen).collect();
        self.failures_seen += new.len();
        for f in new {
            let message = format!("{} (restart {})", f.message, f.restart);
            self.exception_at(f.at, "restart", message);
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
    pub fn checkpoint_stats(&self) -> Option<weir_checkpoint::coordinator::StatsInner> {
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

/// A job in the host.
pub struct HostedJob {
    pub id: u64,
    pub name: String,
    /// The job file as submitted.
    pub text: String,
    pub plan: Plan,
    pub submitted_at: i64,
    /// The secret values of the job file, masked in everything the API and the log say about
    /// the job; registered with [`crate::redact::registry`] while the job is kept.
    pub secrets: Arc<crate::redact::Secrets>,
    inner: Mutex<JobInner>,
}

impl HostedJob {
    /// A job started as `running`; `secrets` are its registered secrets
    /// ([`crate::redact::registry`]), registered before it started so that its first log
    /// lines were masked too.
    pub fn new(
        id: u64,
        text: String,
        plan: Plan,
        secrets: Arc<crate::redact::Secrets>,
        running: &RunningJob,
    ) -> Self {
        let now = now_ms();
        HostedJob {
            id,
            name: plan.name().to_owned(),
            text,
            plan,
            submitted_at: now,
            secrets,
            inner: Mutex::new(JobInner {
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
                restored_from: None,
                error: None,
            }),
        }
    }

    /// The job's mutable part. A poisoned lock (a panic while holding it) is taken over: every
    /// update leaves the state consistent between statements.
    pub fn lock(&self) -> MutexGuard<'_, JobInner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub fn state(&self) -> JobState {
        self.lock().state
    }

    /// The running job's queryable state (`None` once the run ended).
    pub fn queries(&self) -> Option<Arc<weir_runtime::query::Queries>> {
        let s = self.lock();
        if !s.state.is_live() {
            return None;
        }
        s.live.as_ref().map(|l| l.control.queries())
    }

    /// A new run of the job started (a restart request).
    pub fn restarted(&self, running: &RunningJob, from: Option<String>) {
        let mut s = self.lock();
        s.state = JobState::Running;
        s.run += 1;
        s.started_at = now_ms();
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
            }
            Err(e) => {
                s.state = JobState::Failed;
                let message = e.to_string();
                s.error = Some(message.clone());
                s.exception("failure", message);
            }
        }
        tracing::info!(job = %self.name, id = self.id, state = ?s.state, "hosted job ended");
    }

    /// Cancels the run: its sources end and what is in flight drains.
    pub fn cancel(&self) -> Result<(), crate::ApiError> {
        let mut s = self.lock();
        let Some(live) = &s.live else {
            return Err(crate::ApiError::Conflict(format!(
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
    pub fn savepoint_requested(&self, stop: bool) -> Result<(u64, JobControl), crate::ApiError> {
        let mut s = self.lock();
        let Some(live) = &s.live else {
            return Err(crate::ApiError::Conflict(format!(
                "job {} is not running",
                self.id
            )));
        };
        if !live.control.checkpoints() {
            return Err(crate::ApiError::Conflict(format!(
                "job {} does not checkpoint (no `checkpoint.interval`), so it takes no savepoints",
                self.id
            )));
        }
        let control = live.control.clone();
        let in_flight = s
            .savepoints
            .values()
            .filter(|r| r.status == "in-progress")
            .count();
        if in_flight >= SAVEPOINTS_IN_FLIGHT {
            return Err(crate::ApiError::TooMany(format!(
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
                status: "in-progress",
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
                    r.status = "completed";
                    r.snapshot_id = Some(done.metadata.id);
                    r.location = Some(done.location.clone());
                }
                Err(e) => {
                    r.status = "failed";
                    r.error = Some(e.to_string());
                    failed = Some((r.stop, e.to_string()));
                }
            }
        }
        if let Some((stop, message)) = failed {
            s.exception("savepoint", format!("savepoint {id} failed: {message}"));
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

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Per-second rate between two counter readings.
pub fn rate(before: u64, after: u64, elapsed: Duration) -> f64 {
    let secs = elapsed.as_secs_f64();
    if secs <= 0.0 {
        return 0.0;
    }
    after.saturating_sub(before) as f64 / secs
}
