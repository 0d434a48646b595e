//! The supervisor of a job: it owns every attempt, restarts after failures within the
//! restart strategy's budget, and settles how the run ends.
//!
//! The first task to fail ends an attempt (the others are aborted and awaited) and its error is
//! the attempt's: errors that only say "another part stopped" never hide the cause. The
//! failure's kind decides first ([`RunError::retry`]: bad data is not retried), then the
//! restart strategy ([`super::restart`]); the supervisor waits and starts a new attempt from
//! the newest snapshot of the run that is complete on storage (the one the run began from if
//! it has none), the job showing as restarting meanwhile. A count of completed checkpoints
//! kept in memory never decides: a commit that fails can leave it behind what is durable, and
//! a fresh start then would repeat every output since.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use weir_checkpoint::coordinator::Record;
use weir_checkpoint::{CoordinatorHandle, JobCheckpoints, RestoreStats};
use weir_state::clock::now_ms;

use super::attempt::Attempt;
use super::error::RunError;
use super::job::JobOptions;
use super::restart::{Decision, RestartPolicy};
use super::restore::{Prepared, RestoreFrom};
use super::state::StateSettings;
use super::summary::JobSummary;
use crate::api::JobMetrics;
use crate::api::error::Retry;
use crate::plan::Plan;

/// The latest restore of a job: which snapshot, and how its operator state was read.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct RestoreReport {
    pub location: String,
    /// The attempt it started (0 for the first).
    pub attempt: u32,
    #[serde(flatten)]
    pub stats: RestoreStats,
}

/// Failures remembered per run (the oldest are dropped beyond it).
pub const FAILURES: usize = 32;

/// A failure the job restarted after.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Failure {
    /// Epoch ms.
    pub at: i64,
    /// Which restart it caused (1 for the first).
    pub restart: u32,
    pub message: String,
    /// `data`, `external`, `internal` or `cancelled` ([`RunError::category`]).
    pub category: &'static str,
}

/// Whether a run is running or waiting to restart.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case", tag = "status")]
pub enum RunStatus {
    Running,
    /// Failed, and waiting to restart.
    Restarting {
        /// Which restart this will be (1 for the first).
        restart: u32,
        /// When it starts (epoch ms).
        at: i64,
        /// The failure restarted after.
        failure: String,
    },
}

/// Where attempt `attempt` of a run starts from: the first from the run's `base`; a restart
/// from the newest snapshot complete on storage above `floor` (the run's own), else `base`. No
/// count of completed checkpoints takes part: storage is the only fact.
fn restart_point(
    attempt: u32,
    floor: Option<u64>,
    base: Option<&RestoreFrom>,
) -> Option<RestoreFrom> {
    match floor {
        Some(above) if attempt > 0 => Some(RestoreFrom::Newest {
            above,
            otherwise: base.cloned().map(Box::new),
        }),
        _ => base.cloned(),
    }
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
    /// The id this run's snapshots continue above (the highest in the job's storage, or the
    /// restored one's, when its first coordinator started): every snapshot above it is this
    /// run's own, and a restart restores the newest complete one. `None` until a coordinator
    /// has started: the run has no snapshot of its own yet.
    pub(super) floor: Option<u64>,
    /// Checkpoints completed by this run's attempts so far (for the summary only).
    pub(super) completed: u64,
    /// The snapshots of every attempt so far (the last [`HISTORY`](weir_checkpoint::coordinator::HISTORY) of each).
    pub(super) history: Vec<Record>,
    pub(super) restored_from: Option<String>,
    /// Restarts so far, in all.
    pub(super) restarts: u32,
    /// The restart strategy and what the job's failures have used of it.
    pub(super) policy: RestartPolicy,
    /// When the current attempt launched: a long healthy attempt resets an
    /// `exponential-delay` budget.
    pub(super) attempt_started: Instant,
    /// Running, or waiting to restart; shared with [`JobControl::status`](super::job::JobControl::status).
    pub(super) status: Arc<watch::Sender<RunStatus>>,
    /// Failures restarted after, shared with [`JobControl::failures`].
    pub(super) failures: Arc<Mutex<Vec<Failure>>>,
    /// Queryable state, shared with [`JobControl::queries`]; each attempt registers with it.
    pub(super) queries: Arc<crate::query::Queries>,
    /// The latest restore, shared with [`JobControl::restore_stats`].
    pub(super) restore: Arc<Mutex<Option<RestoreReport>>>,
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
        let from = restart_point(attempt, self.floor, self.base.as_ref());
        // In a fleet, the latest snapshot is the one the lease recorded, never the newest
        // found in storage (a copy that lost the lease may have left files there).
        let from = match (from, &self.options.fence) {
            (Some(RestoreFrom::Latest | RestoreFrom::Newest { .. }), Some(fence)) => {
                match (fence.latest().await?, &self.base) {
                    (Some(location), _) => Some(RestoreFrom::Path(PathBuf::from(location))),
                    (None, Some(RestoreFrom::Path(base))) if attempt > 0 => {
                        Some(RestoreFrom::Path(base.clone()))
                    }
                    (None, _) => None,
                }
            }
            (from, _) => from,
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

    /// Restarts after `failure` if its kind allows and the restart strategy's budget does:
    /// records it, shows the job as restarting, waits, restores and launches the next attempt.
    /// A failure that retrying cannot help (bad data, a refused credential, an unusable
    /// snapshot) ends the job at once, as does a spent budget or a stop. A launch or restore
    /// that fails is the next failure, decided the same way.
    pub(super) async fn restart(&mut self, mut failure: RunError) -> Result<Attempt, RunError> {
        loop {
            if self.stop.is_cancelled() {
                return Err(failure);
            }
            let category = failure.category();
            if failure.is_fenced() {
                // Not this copy's failure: another run of the job took over. One message,
                // at one level, wherever the fence was met.
                tracing::warn!(
                    job = %self.plan.spec.name,
                    error = %failure,
                    "fenced: another run of the job took over; this copy stops"
                );
                return Err(failure);
            }
            if failure.retry() == Retry::Never {
                tracing::error!(
                    job = %self.plan.spec.name,
                    error = %failure,
                    category,
                    "the job failed and retrying cannot help: not restarted"
                );
                return Err(failure);
            }
            if category == "internal" {
                tracing::error!(
                    job = %self.plan.spec.name,
                    error = %failure,
                    "a bug in weir failed the job: restarting it (please report this)"
                );
            }
            let wait = match self.policy.next(Instant::now(), self.attempt_started) {
                Decision::GiveUp => {
                    tracing::error!(
                        job = %self.plan.spec.name,
                        error = %failure,
                        restarts = self.restarts,
                        "the job failed and its restart strategy allows no more restarts"
                    );
                    return Err(failure);
                }
                Decision::Restart { wait, reset } => {
                    if reset {
                        tracing::info!(
                            job = %self.plan.spec.name,
                            "the job was healthy for `reset-after`: its restart budget starts over"
                        );
                    }
                    wait
                }
            };
            self.restarts += 1;
            let restarts = self.restarts;
            if let Some(m) = &self.metrics {
                m.restarts.fetch_add(1, Ordering::Relaxed);
            }
            let now = now_ms();
            if let Ok(mut failures) = self.failures.lock() {
                if failures.len() == FAILURES {
                    failures.remove(0);
                }
                failures.push(Failure {
                    at: now,
                    restart: restarts,
                    message: failure.to_string(),
                    category,
                });
            }
            self.status.send_replace(RunStatus::Restarting {
                restart: restarts,
                at: now.saturating_add(i64::try_from(wait.as_millis()).unwrap_or(i64::MAX)),
                failure: failure.to_string(),
            });
            tracing::warn!(
                job = %self.plan.spec.name,
                error = %failure,
                category,
                restart = restarts,
                used = self.policy.used(),
                of = self.policy.allowed(),
                wait = %humantime::format_duration(wait),
                "restarting after a failure"
            );
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = self.stop.cancelled() => return Err(failure),
            }
            let prepared = match self.prepare_restore(restarts).await {
                Ok(prepared) => prepared,
                Err(e) => {
                    failure = e;
                    continue;
                }
            };
            if let Some(p) = &prepared {
                self.restored_from = Some(p.location.clone());
            }
            self.attempt_started = Instant::now();
            match self.launch(restarts, prepared).await {
                Ok(attempt) => {
                    self.status.send_replace(RunStatus::Running);
                    return Ok(attempt);
                }
                Err(e) => failure = e,
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
            // The end of a run can fail too (the final snapshot's commit, its storage): the
            // same restart as a failure mid-run, from what is durable.
            let failure = match ended {
                Ok(tails) => match self.finish(&mut attempt, tails).await {
                    Ok(summary) => break Ok(summary),
                    Err(failure) => failure,
                },
                Err(failure) => failure,
            };
            attempt.shutdown().await;
            match self.restart(failure).await {
                Ok(a) => attempt = a,
                Err(e) => break Err(e),
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
        if let Err(e) = std::fs::remove_dir_all(&dir)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(dir = %dir.display(), error = %e, "could not remove the run's working directory");
        }
        // The job's directory too, once no run of it is left.
        if let Some(parent) = dir.parent() {
            let _ = std::fs::remove_dir(parent);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use weir_checkpoint::{JobCheckpoints, LocalStorage};

    use super::restart_point;
    use crate::exec::restore::{RestoreFrom, prepare};

    /// A run whose commit failed may never have counted a completed checkpoint, while one is
    /// complete on storage: its restart restores that one (not a fresh start, which would
    /// repeat every output since), and falls back on the run's base only when storage holds
    /// nothing of the run's own.
    #[tokio::test]
    async fn a_restart_restores_what_storage_holds_whatever_was_counted() {
        let dir = tempfile::tempdir().unwrap();
        let storage = dir.path().join("checkpoints");
        let text = format!(
            "name: restart-point\nsources:\n  nexmark: {{kind: nexmark, events: 20000, rate: 100000}}\n\
             transforms:\n  by: {{kind: key-by, from: nexmark.bid, keys: [auction]}}\n  \
             counts: {{kind: aggregate, from: by, aggregates: {{n: count(*)}}}}\n\
             sinks:\n  out: {{kind: blackhole, from: counts}}\n\
             checkpoint: {{interval: 10ms, storage: '{}'}}\nstate: {{path: '{}'}}\n",
            storage.display(),
            dir.path().join("state").display()
        );
        let plan = crate::plan::check_str("restart-point.yaml", &text, &[]).unwrap();
        let options = crate::exec::job::JobOptions::default();
        crate::exec::job::start(&plan, options)
            .await
            .unwrap()
            .wait()
            .await
            .unwrap();
        let catalog = JobCheckpoints::new(Arc::new(LocalStorage::new(&storage)), "restart-point");
        let newest = catalog.complete_newest_first().await.unwrap();
        let highest = newest[0].id().unwrap();
        assert!(
            highest >= 2,
            "the run took checkpoints and a final snapshot"
        );

        // The decision: a first attempt starts from the base; a restart of a run whose
        // snapshots continue above 0 looks at storage, with the base to fall back on.
        let base = RestoreFrom::Path(dir.path().join("savepoint"));
        assert_eq!(restart_point(0, Some(0), Some(&base)), Some(base.clone()));
        assert_eq!(
            restart_point(3, None, None),
            None,
            "no snapshot of the run's own yet"
        );
        let from = restart_point(1, Some(0), None).unwrap();
        assert_eq!(
            from,
            RestoreFrom::Newest {
                above: 0,
                otherwise: None
            }
        );
        let work = dir.path().join("work");
        let restored = prepare(&plan, &catalog, &from, &work)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            restored.id, highest,
            "the newest snapshot complete on storage"
        );
        // Nothing of the run's own above its floor: the base (here none: a fresh start).
        let none = restart_point(1, Some(highest), None).unwrap();
        assert!(
            prepare(&plan, &catalog, &none, &work)
                .await
                .unwrap()
                .is_none()
        );
        // ... or the snapshot the run began from.
        let first = newest.last().unwrap().location();
        let back = restart_point(
            1,
            Some(highest),
            Some(&RestoreFrom::Path(first.clone().into())),
        )
        .unwrap();
        let restored = prepare(&plan, &catalog, &back, &work)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(restored.location, first);
    }
}
