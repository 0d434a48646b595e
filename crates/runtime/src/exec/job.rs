//! A running job: its tasks, their owner, and how it ends.
//!
//! Every task of a job is spawned into one `JoinSet` owned by [`RunningJob`]; nothing is
//! fire-and-forget. The job ends when every task has ended. The first task to fail cancels the
//! others (they are aborted and awaited) and its error is the job's: errors that only say
//! "another part stopped" never hide the cause.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::metrics::{JobMetrics, NodeRole};
use crate::error::{JobError, OperatorError};
use crate::plan::Plan;
use crate::plan::physical::instantiate;

struct TaskId {
    name: String,
    subtask: usize,
    parallelism: usize,
}

pub struct RunningJob {
    tasks: JoinSet<(usize, Result<(), crate::exec::task::TaskFailure>)>,
    ids: Vec<TaskId>,
    metrics: Arc<JobMetrics>,
    stop: CancellationToken,
    /// The run's RocksDB working directory: each database removes its own directory when it
    /// closes; this removes what is left.
    state_dir: Option<std::path::PathBuf>,
}

/// Starts a planned job on the current tokio runtime.
pub fn start(plan: &Plan) -> Result<RunningJob, JobError> {
    let stop = CancellationToken::new();
    let instantiated = instantiate(plan, &stop)?;
    let mut tasks = JoinSet::new();
    let mut ids = Vec::new();
    for t in instantiated.tasks {
        let id = ids.len();
        let span = tracing::info_span!("task", job = %plan.spec.name, task = %t.name);
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
    tracing::info!(job = %plan.spec.name, tasks = ids.len(), "job started");
    Ok(RunningJob {
        tasks,
        ids,
        metrics: instantiated.metrics,
        stop,
        state_dir: plan.state_dir.clone(),
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

    /// Waits for the job to end.
    pub async fn wait(mut self) -> Result<JobSummary, JobError> {
        let result = self.wait_tasks().await;
        if let Some(dir) = &self.state_dir {
            if let Err(e) = std::fs::remove_dir_all(dir) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    tracing::warn!(dir = %dir.display(), error = %e, "could not remove the run's state directory");
                }
            }
            // The job's directory too, once no run of it is left.
            if let Some(parent) = dir.parent() {
                let _ = std::fs::remove_dir(parent);
            }
        }
        result
    }

    async fn wait_tasks(&mut self) -> Result<JobSummary, JobError> {
        let mut secondary: Option<JobError> = None;
        while let Some(joined) = self.tasks.join_next().await {
            let failure = match joined {
                Ok((_, Ok(()))) => continue,
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
            return Err(failure);
        }
        if let Some(e) = secondary {
            return Err(e);
        }
        let summary = JobSummary::of(&self.metrics);
        tracing::info!(
            job = %self.metrics.job,
            events = summary.events,
            elapsed = ?summary.elapsed,
            "job finished"
        );
        Ok(summary)
    }

    /// Names of the running tasks (for logs and debugging).
    pub fn task_names(&self) -> Vec<String> {
        self.ids.iter().map(|t| t.name.clone()).collect()
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
