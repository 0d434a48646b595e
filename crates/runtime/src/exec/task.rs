//! A task: one subtask of a chain of operators, with its input and its outputs.
//!
//! A task's input is a source ([`super::source_task`]) or an input gate of channels from
//! other tasks ([`super::gate`]); its work runs through its chain ([`super::chain`]). At a
//! checkpoint barrier the task acknowledges to the coordinator with every snapshot its
//! chain's members took.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use weir_checkpoint::{SubtaskSnapshot, TaskReport};

use super::chain::{Chain, Member, SinkTail, Target, TaskFailure, Work};
use super::gate::{GateEvent, InputGate};
use super::source_task::{SourceCheckpointing, SourceRun};
use crate::api::{Barrier, EventTime, OperatorError, Source, SubtaskMetrics};
use crate::query::Control;

/// What feeds a task.
pub enum TaskInput {
    Source {
        member: Member,
        source: Box<dyn Source>,
        /// Per output port: where its batches go.
        ports: Vec<Vec<Target>>,
        metrics: Arc<SubtaskMetrics>,
        event_time: EventTime,
        checkpointing: Option<SourceCheckpointing>,
    },
    Gate {
        gate: InputGate,
        head: Target,
    },
}

/// Where a task reports to the checkpoint coordinator.
#[derive(Clone, Debug)]
pub struct Reporting {
    /// The task's index among the job's tasks.
    pub task: usize,
    pub reports: mpsc::Sender<TaskReport>,
}

/// One subtask of one chain.
pub struct Task {
    pub input: TaskInput,
    pub chain: Chain,
    /// Cancelled to ask sources to stop gracefully (drain and flush downstream).
    pub stop: CancellationToken,
    /// Set when the job checkpoints.
    pub reporting: Option<Reporting>,
    /// Per chained operator: the watermark to resume from (restored runs).
    pub restored_watermarks: Vec<Option<i64>>,
    /// Control messages to the task's operators (ordered state lookups), if any is
    /// queryable. Bounded ([`crate::query::MAILBOX`]): senders are refused, not queued.
    pub control: Option<mpsc::Receiver<Control>>,
    /// How often the task writes queryable states with a `max-staleness` through to
    /// RocksDB (the smallest such bound of its operators).
    pub write_through: Option<Duration>,
}

/// How often keyed operators publish the size of their state.
const STATE_SIZES_EVERY: Duration = Duration::from_secs(1);

/// What an ended task leaves for the job.
#[derive(Debug, Default)]
pub struct TaskOutcome {
    pub tails: Vec<SinkTail>,
}

impl Task {
    pub async fn run(self) -> Result<TaskOutcome, TaskFailure> {
        let Task {
            input,
            mut chain,
            stop,
            reporting,
            restored_watermarks,
            mut control,
            write_through,
        } = self;
        chain.restore_watermarks(&restored_watermarks)?;
        let mut write_through = write_through.map(|every| {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick
        });
        // Keyed operators publish the size of their state about once a second.
        let mut stats = chain.has_keyed_state().then(|| {
            let mut tick = tokio::time::interval(STATE_SIZES_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick
        });
        // Operators that hold output back (mini-batches) are flushed every so often. They are
        // keyed, so they head a gate task: a source's chain has none.
        let mut flush = chain.flush_every().map(|every| {
            let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick
        });
        let result = match input {
            TaskInput::Gate { mut gate, head } => loop {
                let head_metrics = head_metrics(&chain, head).cloned();
                let waiting = std::time::Instant::now();
                let waited = |m: &Option<Arc<SubtaskMetrics>>| {
                    if let Some(m) = m {
                        SubtaskMetrics::add(&m.idle_ns, waiting.elapsed().as_nanos() as u64);
                    }
                };
                // Control messages, write-through and flush ticks are handled between two events of
                // the gate, never in the middle of one (`InputGate::next` is cancel-safe: it
                // keeps whatever it received). `select!` picks fairly among ready branches,
                // so neither lookups nor data can starve the other.
                let event = if control.is_none()
                    && write_through.is_none()
                    && stats.is_none()
                    && flush.is_none()
                {
                    // Nothing queryable or keyed: no branches to poll beside the data.
                    gate.next().await
                } else {
                    tokio::select! {
                        event = gate.next() => event,
                        Some(message) = recv_or_never(control.as_mut()) => {
                            waited(&head_metrics);
                            chain.control(message);
                            continue;
                        }
                        _ = tick(write_through.as_mut()) => {
                            waited(&head_metrics);
                            chain.write_through()?;
                            continue;
                        }
                        _ = tick(stats.as_mut()) => {
                            waited(&head_metrics);
                            chain.publish_state_sizes();
                            continue;
                        }
                        _ = tick(flush.as_mut()) => {
                            waited(&head_metrics);
                            chain.run(Work::Flush(head)).await?;
                            continue;
                        }
                    }
                };
                waited(&head_metrics);
                let working = std::time::Instant::now();
                let event = event.map_err(|e| TaskFailure {
                    node: node_name(&chain, head),
                    error: OperatorError::Cancelled(e.to_string()),
                })?;
                match event {
                    GateEvent::Batch { input, batch } => {
                        chain.run(Work::Batch(head, input, batch)).await?;
                    }
                    GateEvent::Watermark(w) => {
                        if let Some(m) = &head_metrics
                            && let Ok(mut inputs) = m.input_watermarks.lock()
                        {
                            *inputs = gate.input_watermarks();
                        }
                        chain.run(Work::Watermark(head, w)).await?;
                    }
                    GateEvent::Idle => chain.run(Work::Idle(head)).await?,
                    GateEvent::Barrier { barrier, alignment } => {
                        if let Some(m) = &head_metrics {
                            SubtaskMetrics::add(&m.alignment_ns, alignment.as_nanos() as u64);
                        }
                        chain.run(Work::Barrier(head, barrier)).await?;
                        acknowledge(
                            &mut chain,
                            reporting.as_ref(),
                            barrier,
                            Vec::new(),
                            alignment,
                        )
                        .await;
                    }
                    GateEvent::End => {
                        chain.run(Work::End(head)).await?;
                        break Ok(());
                    }
                }
                if let Some(m) = &head_metrics {
                    SubtaskMetrics::add(&m.busy_ns, working.elapsed().as_nanos() as u64);
                }
            },
            TaskInput::Source {
                member,
                mut source,
                ports,
                metrics,
                event_time,
                checkpointing,
            } => {
                let mut run = SourceRun {
                    member: &member,
                    source: source.as_mut(),
                    ports: &ports,
                    metrics: &metrics,
                    event_time: &event_time,
                    chain: &mut chain,
                    stop: &stop,
                    reporting: reporting.as_ref(),
                    checkpointing,
                };
                run.run().await
            }
        };
        result?;
        if let Some(r) = &reporting {
            // Nobody may be listening any more (the job is ending): that is fine.
            let _ = r.reports.send(TaskReport::Finished { task: r.task }).await;
        }
        Ok(TaskOutcome {
            tails: std::mem::take(&mut chain.tails),
        })
    }
}

/// Sends the snapshots the chain took for `barrier` (plus `first`, the source's) to the
/// coordinator.
pub(super) async fn acknowledge(
    chain: &mut Chain,
    reporting: Option<&Reporting>,
    barrier: Barrier,
    mut first: Vec<SubtaskSnapshot>,
    alignment: std::time::Duration,
) {
    first.append(&mut chain.snapshots);
    let Some(r) = reporting else {
        return;
    };
    let report = TaskReport::Ack {
        checkpoint: barrier.id,
        task: r.task,
        subtasks: first,
        alignment,
    };
    if let Err(mpsc::error::SendError(TaskReport::Ack { subtasks, .. })) =
        r.reports.send(report).await
    {
        // The coordinator is gone: the scratch files are nobody's.
        for s in subtasks {
            if let Some(k) = s.keyed {
                let _ = std::fs::remove_dir_all(&k.dir);
            }
        }
    }
}

fn node_name(chain: &Chain, target: Target) -> String {
    match target {
        Target::Op(i) => chain.ops[i].member.name.clone(),
        Target::Exchange(i) => chain.exchanges[i].node.clone(),
        Target::Sink(i) => chain.sinks[i].member.name.clone(),
    }
}

fn head_metrics(chain: &Chain, target: Target) -> Option<&Arc<SubtaskMetrics>> {
    match target {
        Target::Op(i) => Some(&chain.ops[i].metrics),
        Target::Sink(i) => Some(&chain.sinks[i].metrics),
        Target::Exchange(_) => None,
    }
}

async fn tick(interval: Option<&mut tokio::time::Interval>) {
    match interval {
        Some(i) => {
            i.tick().await;
        }
        None => std::future::pending().await,
    }
}

/// The next message of an optional channel (barriers, control messages); never ready without
/// one, so a `select!` branch on it stays idle.
pub(super) async fn recv_or_never<T>(rx: Option<&mut mpsc::Receiver<T>>) -> Option<T> {
    match rx {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}
