//! One attempt of a run: its tasks, checkpoint coordinator and trigger lease, from launch to
//! the end of its last task.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use tokio::task::{JoinHandle, JoinSet};
use tokio_util::sync::CancellationToken;
use weir_checkpoint::CoordinatorHandle;
use weir_checkpoint::metadata::SnapshotKind;

use super::chain::{SinkTail, TaskFailure};
use super::checkpointing::Hooks;
use super::error::{JobError, RunError};
use super::instantiate::{RunContext, instantiate, prepare_sinks, task_names};
use super::restore::Prepared;
use super::supervisor::Run;
use super::task::TaskOutcome;
use crate::api::OperatorError;

/// Which subtask a task of the attempt runs, for its failure.
pub(super) struct TaskId {
    subtask: usize,
    parallelism: usize,
}

/// One attempt: its tasks, coordinator and lease.
pub(super) struct Attempt {
    pub(super) tasks: JoinSet<(usize, Result<TaskOutcome, TaskFailure>)>,
    pub(super) ids: Vec<TaskId>,
    pub(super) coordinator: Option<(CoordinatorHandle, JoinHandle<()>)>,
    pub(super) lease: Option<weir_scheduler::Lease>,
    pub(super) hooks: Option<Arc<Hooks>>,
}

impl Run {
    /// Instantiates and spawns one attempt.
    pub(super) async fn launch(
        &mut self,
        attempt: u32,
        prepared: Option<Prepared>,
    ) -> Result<Attempt, RunError> {
        let plan = &self.plan;
        let restored_id = prepared.as_ref().map_or(0, |p| p.id);
        let committed = Arc::new(AtomicU64::new(restored_id));
        let final_restored = prepared
            .as_ref()
            .is_some_and(|p| p.kind == SnapshotKind::Final);
        let mut ctx = RunContext {
            state: self.state.clone(),
            attempt,
            metrics: self.metrics.clone(),
            restore: HashMap::new(),
            sinks: HashMap::new(),
            checkpointing: None,
            checkpoint_base: 0,
            queries: Some(self.queries.clone()),
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

        let coordinator_parts = if final_restored {
            None
        } else {
            self.coordinate(attempt, restored_id, reuse, &committed, task_names(plan))
                .await?
                .map(|(wiring, base, parts)| {
                    ctx.checkpointing = Some(wiring);
                    ctx.checkpoint_base = base;
                    parts
                })
        };
        if coordinator_parts.is_some() {
            self.floor.get_or_insert(ctx.checkpoint_base);
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
            // On the scheduler's coordinator runtime, where the triggers' waiting parts run
            // too: data tasks saturating this runtime must not delay a checkpoint.
            let future = tracing::Instrument::in_current_span(future);
            let joined = match &self.options.scheduler {
                Some(scheduler) => scheduler.spawn(future),
                None => tokio::spawn(future),
            };
            attempt_parts.lease = self.trigger_lease(attempt, &handle)?;
            let _ = self.control.send(Some(handle.clone()));
            attempt_parts.coordinator = Some((handle, joined));
            attempt_parts.hooks = Some(hooks);
        }
        Ok(attempt_parts)
    }
}

impl Attempt {
    /// Waits for every task; the first failure (or a failed commit) ends the attempt.
    pub(super) async fn wait(&mut self) -> Result<Vec<SinkTail>, RunError> {
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
            // A fenced copy is no failure of the job's: the supervisor says so, once.
            if !matches!(failure.error, OperatorError::Fenced(_)) {
                tracing::error!(error = %failure, "job failed");
            }
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
    pub(super) async fn shutdown(&mut self) {
        self.lease = None;
        self.tasks.abort_all();
        while self.tasks.join_next().await.is_some() {}
        if let Some((handle, joined)) = self.coordinator.take() {
            drop(handle);
            joined.abort();
            let _ = joined.await;
        }
    }
}
