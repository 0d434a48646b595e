//! The supervisor of a job: it owns every attempt, restarts after failures within the
//! restart strategy's budget, and settles how the run ends.
//!
//! The first task to fail ends an attempt (the others are aborted and awaited) and its error is
//! the attempt's: errors that only say "another part stopped" never hide the cause. Within the
//! budget the supervisor then waits (exponential backoff) and starts a new attempt from the
//! latest completed checkpoint.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use weir_checkpoint::coordinator::Record;
use weir_checkpoint::{CoordinatorHandle, JobCheckpoints, RestoreStats};

use super::attempt::Attempt;
use super::error::{JobError, RunError};
use super::job::JobOptions;
use super::restore::{Prepared, RestoreFrom};
use super::state::StateSettings;
use super::summary::JobSummary;
use crate::api::{JobMetrics, OperatorError};
use crate::plan::Plan;

/// The latest restore of a job: which snapshot, and how its operator state was read.
#[derive(Clone, Debug, serde::Serialize)]
pub struct RestoreReport {
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

/// What the supervisor needs across attempts.
pub(super) struct Run {
    pub(super) plan: Plan,
    /// Where the run keeps keyed state, and its working directory.
    pub(super) state: Arc<StateSettings>,
    pub(super) options: JobOptions,
    pub(super) catalog: Option<JobCheckpoints>,
    pub(super) stop: CancellationToken,
    pub(super) metrics: Option<Arc<JobMetrics>>,
    pub(super) control: watch::Sender<Option<CoordinatorHandle>>,
    /// Names this run's shared checkpoint files (with the attempt).
    pub(super) run_id: String,
    /// The snapshot this run started from: a restart before the run completes a checkpoint of
    /// its own goes back there.
    pub(super) base: Option<RestoreFrom>,
    /// Checkpoints completed by this run's attempts so far.
    pub(super) completed: u64,
    /// The snapshots of every attempt so far (the last [`HISTORY`](weir_checkpoint::coordinator::HISTORY) of each).
    pub(super) history: Vec<Record>,
    pub(super) restored_from: Option<String>,
    /// Restarts so far, against the budget of `restart.max-attempts`.
    pub(super) restarts: u32,
    /// Failures restarted after, shared with [`JobControl::failures`].
    pub(super) failures: Arc<Mutex<Vec<Failure>>>,
    /// Queryable state, shared with [`JobControl::queries`]; each attempt registers with it.
    pub(super) queries: Arc<crate::query::Queries>,
    /// The latest restore, shared with [`JobControl::restore_stats`].
    pub(super) restore: Arc<Mutex<Option<RestoreReport>>>,
}

/// Whether an attempt that failed to launch may be retried: an operator's external system
/// (a broker, a database) failed while it was being set up. A data or configuration error,
/// an unusable snapshot or a failing checkpoint store would fail again the same way.
pub(super) fn retriable_launch(failure: &RunError) -> bool {
    matches!(
        failure,
        RunError::Task(JobError {
            error: OperatorError::External { .. },
            ..
        })
    )
}

impl Run {
    pub(super) fn checkpointing(&self) -> bool {
        self.plan.spec.checkpoint.enabled()
    }

    pub(super) fn work_dir(&self) -> PathBuf {
        self.state.run_dir().to_path_buf()
    }

    /// The snapshot attempt `attempt` starts from.
    pub(super) async fn prepare_restore(&self, attempt: u32) -> Result<Option<Prepared>, RunError> {
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
            *latest = Some(RestoreReport {
                location: p.location.clone(),
                attempt,
                stats: p.stats.clone(),
            });
        }
        Ok(prepared)
    }

    /// Restarts after `failure` within the restart budget: records it, waits the backoff,
    /// restores and launches the next attempt. A launch that fails for an external cause (a
    /// broker still restarting) is the next failure, not the end of the job; any other launch
    /// failure, an exhausted budget or a stop ends the job with the failure.
    pub(super) async fn restart(&mut self, mut failure: RunError) -> Result<Attempt, RunError> {
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
            tracing::warn!(
                job = %self.plan.spec.name,
                error = %failure,
                restart = restarts,
                of = allowed,
                wait = %humantime::format_duration(wait),
                "restarting after a failure"
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

    pub(super) async fn supervise(mut self, mut attempt: Attempt) -> Result<JobSummary, RunError> {
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

    pub(super) fn remove_work_dir(&self) {
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
