//! How a job takes part in checkpoints: the coordinator and trigger lease of each attempt, the
//! hooks through which the coordinator reaches the runtime, and the end of a run.
//!
//! How a run ends decides what happens to the sinks' last transactions:
//! - the input ended: they go into a *final* snapshot and are committed;
//! - stopped with a savepoint: they come after the savepoint, so they are discarded (a run
//!   resumed from the savepoint produces them again);
//! - stopped without a savepoint (checkpointing on): discarded likewise, the next run resumes
//!   from the latest checkpoint; without checkpoints they are committed (the run drained).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use futures::future::BoxFuture;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use weir_checkpoint::coordinator::coordinator;
use weir_checkpoint::metadata::{FileRef, SnapshotKind};
use weir_checkpoint::{
    Completed, CoordinatorConfig, CoordinatorHandle, JobHooks, NodeInfo, SubtaskSnapshot,
};

use super::attempt::Attempt;
use super::chain::SinkTail;
use super::error::{JobError, RunError};
use super::instantiate::TaskWiring;
use super::summary::JobSummary;
use super::supervisor::Run;
use crate::api::{Barrier, OperatorError, SinkFactory, SourceFactory, SubtaskState};
use crate::plan::{Factory, Plan};
use crate::spec::CheckpointMode;

/// An attempt's coordinator, the future that runs it, and its hooks.
pub(super) type Coordination = (CoordinatorHandle, BoxFuture<'static, ()>, Arc<Hooks>);

impl Run {
    /// The coordinator of attempt `attempt` when the job checkpoints: how its tasks report to
    /// it, the id its snapshots start above, and its parts.
    pub(super) async fn coordinate(
        &self,
        attempt: u32,
        restored_id: u64,
        reuse: HashMap<(usize, u32), HashMap<String, FileRef>>,
        committed: &Arc<AtomicU64>,
        tasks: Vec<String>,
    ) -> Result<Option<(TaskWiring, u64, Coordination)>, RunError> {
        let (true, Some(catalog)) = (self.checkpointing(), &self.catalog) else {
            return Ok(None);
        };
        let plan = &self.plan;
        let spec = &plan.spec.checkpoint;
        let highest = catalog.highest_id().await?;
        let hooks = Arc::new(Hooks {
            barriers: OnceLock::new(),
            stop: self.stop.clone(),
            stopped_by_savepoint: AtomicBool::new(false),
            sinks: sink_factories(plan)
                .into_iter()
                .map(|(i, f)| (i, plan.nodes[i].name.clone(), f))
                .collect(),
            sources: source_factories(plan),
            committed: committed.clone(),
            failure: Arc::new(Mutex::new(None)),
            failed: CancellationToken::new(),
            slow_commit: spec.timeout.0,
        });
        let last_id = highest.max(restored_id);
        clear_aborted_snapshots(&self.work_dir().join("snapshots"), last_id);
        // In a fleet, this run's ids come from its lease, a block at a time.
        let fence = match &self.options.fence {
            Some(fence) => {
                let first = fence
                    .reserve(last_id, weir_checkpoint::fence::ID_BLOCK)
                    .await?;
                Some((
                    fence.clone(),
                    first..first + weir_checkpoint::fence::ID_BLOCK,
                ))
            }
            None => None,
        };
        let config = CoordinatorConfig {
            timeout: spec.timeout.0,
            min_pause: spec.min_pause.0,
            max_concurrent: spec.max_concurrent as usize,
            retained: spec.retained as usize,
            lineage: format!("{}-{attempt}", self.run_id),
            last_id,
            reuse,
            fence,
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
            tasks,
            hooks.clone(),
        );
        let wiring = TaskWiring {
            reports: handle.reports(),
            committed: committed.clone(),
            scratch: self.work_dir().join("snapshots"),
            exactly_once: spec.mode == CheckpointMode::ExactlyOnce,
            max_in_flight: spec.max_concurrent as usize,
        };
        Ok(Some((
            wiring,
            highest.max(restored_id),
            (handle, future, hooks),
        )))
    }

    /// The lease on the shared scheduler that triggers the attempt's periodic checkpoints.
    pub(super) fn trigger_lease(
        &self,
        attempt: u32,
        handle: &CoordinatorHandle,
    ) -> Result<Option<weir_scheduler::Lease>, RunError> {
        let plan = &self.plan;
        let spec = &plan.spec.checkpoint;
        let (Some(interval), Some(scheduler)) = (spec.interval, &self.options.scheduler) else {
            return Ok(None);
        };
        let trigger = handle.clone();
        let lease = scheduler.register(
            format!("{} (attempt {attempt})", plan.spec.name),
            interval.0,
            move |_tick: weir_scheduler::Tick| -> Option<weir_scheduler::BoxFuture> {
                // Inline on the timer thread: one `try_send`. Waiting for the checkpoint
                // happens in the returned future, and while it runs the scheduler
                // coalesces further ticks.
                let done = trigger.try_checkpoint()?;
                Some(Box::pin(async move {
                    let _ = done.await;
                }))
            },
        )?;
        Ok(Some(lease))
    }

    /// The attempt's tasks all ended: settle the sinks' last transactions.
    pub(super) async fn finish(
        &mut self,
        attempt: &mut Attempt,
        tails: Vec<SinkTail>,
    ) -> Result<JobSummary, RunError> {
        let metrics = self
            .metrics
            .clone()
            .ok_or_else(|| RunError::Internal("no metrics".into()))?;
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
            Some((handle, _)) if stopped || by_savepoint => {
                // After the attempt's last snapshot: a resumed run produces these again. (Its
                // subtasks hold only transactions of their own, above the snapshot restored.)
                let last = handle
                    .stats()
                    .snapshot()
                    .latest_completed
                    .map_or(0, |r| r.id);
                for tail in tails {
                    if let (Some(state), Some(f)) = (tail.state, factories.get(&tail.node)) {
                        f.abort(vec![state], last)
                            .map_err(|e| sink_error(tail.node, tail.subtask, e))?;
                    }
                }
                if let Some(sp) = attempt
                    .coordinator
                    .as_ref()
                    .and_then(|(h, _)| h.stats().snapshot().latest_completed)
                    .filter(|r| r.kind == SnapshotKind::Savepoint && by_savepoint)
                    && let weir_checkpoint::coordinator::Outcome::Completed { location, .. } =
                        sp.outcome
                {
                    summary.snapshot = Some(location);
                }
            }
            Some((handle, _)) => {
                let snapshots = tails
                    .into_iter()
                    .map(|t| {
                        let blob = SubtaskState {
                            state: t.state,
                            ..SubtaskState::default()
                        };
                        Ok(SubtaskSnapshot {
                            node: t.node,
                            subtask: t.subtask as u32,
                            operator: (!blob.is_empty()).then(|| blob.encode()).transpose()?,
                            keyed: None,
                        })
                    })
                    .collect::<Result<Vec<_>, OperatorError>>()
                    .map_err(|e| RunError::Internal(format!("encoding the final snapshot: {e}")))?;
                // Answered once the final snapshot is durable and its commit done. A commit that
                // failed is the sink's typed error (the supervisor decides on it: a restart
                // restores the final snapshot and commits it again).
                let completed = match handle.finish(snapshots).await {
                    Ok(completed) => completed,
                    Err(e) => {
                        if let Some(h) = &attempt.hooks {
                            h.check()?;
                        }
                        return Err(e.into());
                    }
                };
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
}

/// What the coordinator asks of the runtime.
pub(super) struct Hooks {
    /// One per source subtask, set once the attempt's tasks exist.
    pub(super) barriers: OnceLock<Vec<mpsc::Sender<Barrier>>>,
    pub(super) stop: CancellationToken,
    pub(super) stopped_by_savepoint: AtomicBool,
    /// The sink nodes: index, name and factory.
    pub(super) sinks: Vec<(usize, String, Arc<dyn SinkFactory>)>,
    pub(super) sources: Vec<(usize, Arc<dyn SourceFactory>)>,
    /// The newest snapshot whose transactions are committed (sinks read it at barriers).
    pub(super) committed: Arc<AtomicU64>,
    /// A commit that failed, with the sink's typed error: it fails the attempt, and its
    /// retry decision decides whether the job restarts (the restore commits again).
    pub(super) failure: Arc<Mutex<Option<RunError>>>,
    pub(super) failed: CancellationToken,
    /// How long a commit may run before a warning says which sink it waits for (the
    /// checkpoint timeout); it is not abandoned, as its snapshot is durable.
    pub(super) slow_commit: std::time::Duration,
}

impl Hooks {
    /// The commit failure that ended the attempt, if one did (taken: reported once).
    pub(super) fn check(&self) -> Result<(), RunError> {
        match self.failure.lock().ok().and_then(|mut f| f.take()) {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }
}

/// Commits `states` of sink `sink` for snapshot `id`, warning every `slow` while it runs.
async fn commit_one(
    id: u64,
    sink: &str,
    commit: BoxFuture<'static, Result<(), OperatorError>>,
    slow: std::time::Duration,
) -> Result<(), OperatorError> {
    let started = std::time::Instant::now();
    tokio::pin!(commit);
    loop {
        match tokio::time::timeout(slow.max(std::time::Duration::from_secs(1)), &mut commit).await {
            Ok(result) => return result,
            Err(_) => tracing::warn!(
                checkpoint = id,
                sink,
                waited = %humantime::format_duration(std::time::Duration::from_secs(started.elapsed().as_secs())),
                "the commit of a completed snapshot is still waiting for its sink"
            ),
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
        for (node, name, factory) in &self.sinks {
            let states = node_states(&completed, *node);
            if !states.is_empty() {
                commits.push((name.clone(), factory.commit(states)));
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
        let slow = self.slow_commit;
        Box::pin(async move {
            // The sinks one after another: each is idempotent, and a failure leaves the rest
            // to the restore's commit.
            for (sink, commit) in commits {
                if let Err(error) = commit_one(id, &sink, commit, slow).await {
                    let message = format!("sink `{sink}`: {error}");
                    if let Ok(mut slot) = failure.lock() {
                        slot.get_or_insert(RunError::Commit {
                            snapshot: id,
                            sink,
                            error,
                        });
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
        .filter_map(|(_, bytes)| SubtaskState::decode(bytes).ok()?.state)
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

/// Removes what an earlier attempt left in the scratch directory `scratch` (one directory per
/// checkpoint id) for checkpoints above `last_id`, the last completed one. A completed
/// checkpoint's scratch is removed once stored, so these are checkpoints the attempt was
/// taking when it failed; this attempt numbers its checkpoints from `last_id` again, and a
/// snapshot refuses to write into a directory that exists. Failures are logged: the
/// checkpoint of that id then fails and the next one is tried.
fn clear_aborted_snapshots(scratch: &std::path::Path, last_id: u64) {
    let entries = match std::fs::read_dir(scratch) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
        Err(e) => {
            tracing::warn!(dir = %scratch.display(), error = %e, "cannot read the checkpoint scratch directory");
            return;
        }
    };
    for entry in entries.flatten() {
        let aborted = entry
            .file_name()
            .to_str()
            .and_then(|name| name.parse::<u64>().ok())
            .is_some_and(|id| id > last_id);
        if aborted && let Err(e) = std::fs::remove_dir_all(entry.path()) {
            tracing::warn!(dir = %entry.path().display(), error = %e, "cannot remove an aborted checkpoint's scratch directory");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::clear_aborted_snapshots;

    #[test]
    fn only_checkpoints_above_the_last_completed_are_cleared() {
        let dir = tempfile::tempdir().unwrap();
        for id in ["3", "4", "5", "6", "not-an-id"] {
            std::fs::create_dir_all(dir.path().join(id).join("counts-0")).unwrap();
        }
        clear_aborted_snapshots(dir.path(), 4);
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left, ["3", "4", "not-an-id"]);
        // A job that never checkpointed has no scratch directory: nothing to do.
        clear_aborted_snapshots(&dir.path().join("missing"), 0);
    }
}
