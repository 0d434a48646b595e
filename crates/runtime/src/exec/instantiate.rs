//! [`Plan`] → tasks: the subtasks of every chain with their channels, state stores,
//! checkpoint wiring and queryable-state mailboxes, ready to spawn.
//!
//! The plan says which nodes chain into one task ([`Plan::chains`]); every unchained edge
//! becomes bounded channels, one per pair of subtasks that can exchange records (`i → i` for
//! forward edges, all pairs otherwise).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Instant;

use async_channel::{Receiver, Sender};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use weir_checkpoint::TaskReport;

use super::chain::{Chain, ChainExchange, ChainOp, ChainSink, Member, Target};
use super::error::JobError;
use super::exchange::{ExchangeWriter, Partitioning};
use super::gate::InputGate;
use super::source_task::{SourceCheckpointing, SourcesDone};
use super::state::StateSettings;
use super::task::{Reporting, Task, TaskInput};
use crate::api::{
    Barrier, JobMetrics, Message, NodeMetrics, OperatorError, SinkRestore, SubtaskContext,
    SubtaskMetrics, SubtaskRestore,
};
use crate::plan::{Factory, Plan};

/// A receiving end of a channel and the logical input it feeds.
type GateInput = (Receiver<Message>, usize);

/// One subtask of one chain, ready to spawn.
pub struct SubtaskTask {
    /// The chain's node names and the subtask, e.g. `gen → q1 → out (2/4)`.
    pub name: String,
    pub subtask: usize,
    pub parallelism: usize,
    pub task: Task,
}

/// The tasks of a job, ready to spawn, and the metrics they update.
pub struct Instantiated {
    pub tasks: Vec<SubtaskTask>,
    pub metrics: Arc<JobMetrics>,
    /// One per source subtask: where the coordinator sends barriers to inject.
    pub barriers: Vec<mpsc::Sender<Barrier>>,
}

/// How tasks take part in checkpoints.
#[derive(Clone, Debug)]
pub struct TaskWiring {
    pub reports: mpsc::Sender<TaskReport>,
    /// The newest snapshot whose sink transactions were committed.
    pub committed: Arc<AtomicU64>,
    /// Where keyed snapshots are written before they are stored.
    pub scratch: PathBuf,
    /// Aligned barriers (exactly-once) or not (at-least-once).
    pub exactly_once: bool,
    /// Barriers a source may have waiting to be injected.
    pub max_in_flight: usize,
}

/// What one attempt of a run starts from.
pub struct RunContext {
    /// Where the run keeps keyed state (made once per run, shared by its attempts).
    pub state: Arc<StateSettings>,
    /// 0 for the first attempt, then 1, 2, ... after restarts.
    pub attempt: u32,
    /// The job's metrics, kept across attempts (made by the first).
    pub metrics: Option<Arc<JobMetrics>>,
    /// Restored runs: per node index, per new subtask.
    pub restore: HashMap<usize, Vec<Arc<SubtaskRestore>>>,
    /// Restored runs: per sink node index, the transactions to commit.
    pub sinks: HashMap<usize, SinkRestore>,
    pub checkpointing: Option<TaskWiring>,
    /// Snapshots of this attempt get ids above this one.
    pub checkpoint_base: u64,
    /// The job's queryable states: each attempt registers its subtasks' readers and mailboxes.
    pub queries: Option<Arc<crate::query::Queries>>,
}

/// Prepares every sink of the run: creates its output and commits the restored snapshot's
/// transactions. Runs once per attempt, before [`instantiate`].
pub async fn prepare_sinks(plan: &Plan, run: &RunContext) -> Result<(), JobError> {
    for (i, node) in plan.nodes.iter().enumerate() {
        if let Factory::Sink(factory) = &node.factory {
            factory
                .prepare(node.parallelism, run.sinks.get(&i))
                .await
                .map_err(|error| job_error(plan, i, 0, error))?;
        }
    }
    Ok(())
}

/// Prepares every source (list inputs), then makes every subtask of every chain with its
/// channels. Sinks must have been prepared ([`prepare_sinks`]).
pub fn instantiate(
    plan: &Plan,
    stop: &CancellationToken,
    run: &RunContext,
) -> Result<Instantiated, JobError> {
    let chains = &plan.chains;
    let nodes = &plan.nodes;
    let capacity = plan.spec.channel_capacity as usize;
    let batch_size = plan.spec.batch_size as usize;

    // Prepare sources and sinks once per attempt.
    let mut progress_total = vec![None; nodes.len()];
    for (i, node) in nodes.iter().enumerate() {
        let prepared = match &node.factory {
            Factory::Source { factory, .. } => factory.prepare(node.parallelism).map(|t| {
                progress_total[i] = t;
            }),
            // Sinks were prepared by `prepare_sinks` (asynchronously: they may talk to a
            // database).
            Factory::Sink(_) | Factory::Operator(_) => Ok(()),
        };
        prepared.map_err(|error| job_error(plan, i, 0, error))?;
    }

    let metrics = match &run.metrics {
        Some(m) => m.clone(),
        None => new_metrics(plan, &progress_total),
    };
    let sources_done = SourcesDone::new(
        nodes
            .iter()
            .filter(|n| matches!(n.factory, Factory::Source { .. }))
            .map(|n| n.parallelism)
            .sum(),
    );
    let mut barrier_senders = Vec::new();
    let restore_of = |node: usize, subtask: usize| -> Option<Arc<SubtaskRestore>> {
        run.restore.get(&node).and_then(|v| v.get(subtask)).cloned()
    };
    // Consumers of each node: (consumer, input edge index).
    let mut consumers: Vec<Vec<(usize, usize)>> = vec![Vec::new(); nodes.len()];
    for (v, node) in nodes.iter().enumerate() {
        for (k, e) in node.inputs.iter().enumerate() {
            consumers[e.from].push((v, k));
        }
    }

    // Channels of every unchained edge: senders[(v, k)][from subtask] lists one sender per
    // receiving subtask; receivers[v][subtask] collects (receiver, logical input). Linked by
    // the rule the plan's footprint check counts them by (`plan::footprint::wiring`).
    let mut senders: HashMap<(usize, usize), Vec<Vec<Sender<Message>>>> = HashMap::new();
    let mut receivers: Vec<Vec<Vec<GateInput>>> = nodes
        .iter()
        .map(|n| (0..n.parallelism).map(|_| Vec::new()).collect())
        .collect();
    for (v, node) in nodes.iter().enumerate() {
        for (k, e) in node.inputs.iter().enumerate() {
            let wiring = crate::plan::footprint::wiring(plan, v, k);
            if wiring == crate::plan::footprint::Wiring::Chained {
                continue;
            }
            let up = nodes[e.from].parallelism;
            let forward = wiring == crate::plan::footprint::Wiring::Forward;
            let mut per_sender: Vec<Vec<Sender<Message>>> = vec![Vec::new(); up];
            for (i, list) in per_sender.iter_mut().enumerate() {
                let targets: Vec<usize> = if forward {
                    vec![i]
                } else {
                    (0..node.parallelism).collect()
                };
                for t in targets {
                    let (tx, rx) = async_channel::bounded(capacity);
                    list.push(tx);
                    receivers[v][t].push((rx, e.input));
                }
            }
            senders.insert((v, k), per_sender);
        }
    }

    let mut tasks = Vec::new();
    let mut registrations = Vec::new();
    for members in &chains.members {
        let root = members[0];
        let parallelism = nodes[root].parallelism;
        for s in 0..parallelism {
            let mut chain = Chain::default();
            if let Some(w) = &run.checkpointing {
                chain.scratch = w.scratch.clone();
                chain.committed = w.committed.clone();
            }
            // Where each member sits in the chain.
            let mut target_of: HashMap<usize, Target> = HashMap::new();
            let mut op_index = 0;
            let mut sink_index = 0;
            for &m in members {
                match &nodes[m].factory {
                    Factory::Operator(_) => {
                        target_of.insert(m, Target::Op(op_index));
                        op_index += 1;
                    }
                    Factory::Sink(_) => {
                        target_of.insert(m, Target::Sink(sink_index));
                        sink_index += 1;
                    }
                    Factory::Source { .. } => {}
                }
            }
            // Output targets of member `m` for each of its ports.
            let mut outputs_of = |m: usize, chain: &mut Chain| -> Vec<Vec<Target>> {
                let mut per_port = vec![Vec::new(); nodes[m].ports.len().max(1)];
                for &(v, k) in &consumers[m] {
                    let edge = &nodes[v].inputs[k];
                    let target = if chains.chained[v][k] {
                        target_of[&v]
                    } else {
                        let list = senders
                            .get_mut(&(v, k))
                            .map(|per| std::mem::take(&mut per[s]))
                            .unwrap_or_default();
                        let partitioning = match &edge.key {
                            Some(key) => Partitioning::Hash(key.clone()),
                            None if list.len() == 1 => Partitioning::Forward,
                            None => Partitioning::Rebalance,
                        };
                        chain.exchanges.push(ChainExchange {
                            node: nodes[m].name.clone(),
                            writer: ExchangeWriter::new(
                                list,
                                partitioning,
                                metrics.nodes[m].subtask(s),
                            ),
                        });
                        Target::Exchange(chain.exchanges.len() - 1)
                    };
                    per_port[edge.port].push(target);
                }
                per_port
            };
            let ctx = |m: usize, want: Vec<bool>| SubtaskContext {
                subtask: s,
                parallelism,
                batch_size,
                metrics: metrics.nodes[m].subtask(s),
                want,
                restore: restore_of(m, s),
                attempt: run.attempt,
                checkpoint_base: run.checkpoint_base,
                checkpointing: run.checkpointing.is_some(),
                state: Some(run.state.clone()),
            };
            let member = |m: usize| Member {
                name: nodes[m].name.clone(),
                index: m,
                subtask: s,
            };
            let mut source_input = None;
            let mut restored_watermarks = Vec::new();
            let (mut mailbox, mut control) = (None, None);
            let mut write_through: Option<std::time::Duration> = None;
            for &m in members {
                let node = &nodes[m];
                match &node.factory {
                    Factory::Operator(factory) => {
                        let outputs = outputs_of(m, &mut chain).into_iter().flatten().collect();
                        let mut op =
                            factory(&ctx(m, vec![])).map_err(|e| job_error(plan, m, s, e))?;
                        if let (Some(queryable), Some(_)) = (&node.queryable, &run.queries) {
                            let sender = mailbox.get_or_insert_with(|| {
                                let (tx, rx) = mpsc::channel(crate::query::MAILBOX);
                                control = Some(rx);
                                tx
                            });
                            let (registration, every) = register_queryable(
                                queryable,
                                op.as_mut(),
                                s,
                                chain.ops.len(),
                                sender.clone(),
                            )
                            .map_err(|e| job_error(plan, m, s, e))?;
                            if let Some(every) = every {
                                write_through = Some(write_through.map_or(every, |w| w.min(every)));
                            }
                            registrations.push(registration);
                        }
                        restored_watermarks.push(restore_of(m, s).and_then(|r| r.watermark()));
                        chain.ops.push(ChainOp {
                            member: member(m),
                            op,
                            metrics: metrics.nodes[m].subtask(s),
                            outputs,
                        });
                    }
                    Factory::Sink(factory) => {
                        let sink = factory
                            .create(&ctx(m, vec![]))
                            .map_err(|e| job_error(plan, m, s, e))?;
                        chain.sinks.push(ChainSink {
                            member: member(m),
                            sink,
                            metrics: metrics.nodes[m].subtask(s),
                        });
                    }
                    Factory::Source {
                        factory,
                        event_time,
                    } => {
                        let ports = outputs_of(m, &mut chain);
                        let want = ports.iter().map(|t| !t.is_empty()).collect();
                        let source = factory
                            .create(&ctx(m, want))
                            .map_err(|e| job_error(plan, m, s, e))?;
                        let checkpointing = run.checkpointing.as_ref().map(|w| {
                            // A source has at most one barrier per snapshot in flight waiting.
                            let (tx, rx) = mpsc::channel(w.max_in_flight.max(1) + 1);
                            barrier_senders.push(tx);
                            let restored = restore_of(m, s);
                            SourceCheckpointing {
                                barriers: rx,
                                done: sources_done.clone(),
                                restored: restored
                                    .map_or((None, None), |r| (r.watermark(), r.max_seen())),
                            }
                        });
                        source_input = Some(TaskInput::Source {
                            member: member(m),
                            source,
                            ports,
                            metrics: metrics.nodes[m].subtask(s),
                            event_time: event_time.clone(),
                            checkpointing,
                        });
                    }
                }
            }
            let input = match source_input {
                Some(input) => input,
                None => {
                    let mut gate = InputGate::new(std::mem::take(&mut receivers[root][s]));
                    if run.checkpointing.as_ref().is_some_and(|w| !w.exactly_once) {
                        gate = gate.unaligned();
                    }
                    if let Some(w) = restore_of(root, s).and_then(|r| r.watermark()) {
                        gate = gate.with_watermark(w);
                    }
                    TaskInput::Gate {
                        gate,
                        head: target_of[&root],
                    }
                }
            };
            tasks.push(SubtaskTask {
                name: task_name(plan, members, s),
                subtask: s,
                parallelism,
                task: Task {
                    input,
                    chain,
                    stop: stop.clone(),
                    reporting: run.checkpointing.as_ref().map(|w| Reporting {
                        task: tasks.len(),
                        reports: w.reports.clone(),
                    }),
                    restored_watermarks,
                    control,
                    write_through,
                },
            });
        }
    }
    if let Some(queries) = &run.queries {
        queries.install(registrations);
    }
    Ok(Instantiated {
        tasks,
        metrics,
        barriers: barrier_senders,
    })
}

/// The name of subtask `s` of the task that runs the chain `members`: `a → b (1/2)`.
fn task_name(plan: &Plan, members: &[usize], s: usize) -> String {
    let names: Vec<&str> = members
        .iter()
        .map(|m| plan.nodes[*m].name.as_str())
        .collect();
    let parallelism = members.first().map_or(1, |m| plan.nodes[*m].parallelism);
    format!("{} ({}/{parallelism})", names.join(" → "), s + 1)
}

/// Every task's name, by task index: the order [`instantiate`] makes them in, which is how
/// they report to the checkpoint coordinator.
pub(super) fn task_names(plan: &Plan) -> Vec<String> {
    plan.chains
        .members
        .iter()
        .flat_map(|members| {
            let parallelism = members.first().map_or(0, |m| plan.nodes[*m].parallelism);
            (0..parallelism).map(move |s| task_name(plan, members, s))
        })
        .collect()
}

/// Registers a queryable operator's subtask: a direct reader of each state (RocksDB), its
/// `max-staleness` bounds, and the task's mailbox. Returns how often the task must write
/// through, if any state has a bound.
fn register_queryable(
    queryable: &crate::query::QueryableNode,
    op: &mut dyn crate::api::Operator,
    subtask: usize,
    op_index: usize,
    mailbox: mpsc::Sender<crate::query::Control>,
) -> Result<
    (
        crate::query::SubtaskRegistration,
        Option<std::time::Duration>,
    ),
    OperatorError,
> {
    let backend = op.keyed_state().ok_or_else(|| {
        OperatorError::Internal(format!(
            "queryable `{}` keeps no keyed state",
            queryable.node
        ))
    })?;
    let failed = |e: weir_state::StateError| {
        OperatorError::Internal(format!("making `{}` queryable: {e}", queryable.node))
    };
    let mut readers = HashMap::new();
    let mut every: Option<i64> = None;
    for state in &queryable.states {
        if let Some(reader) = backend.state_reader(&state.name).map_err(failed)? {
            readers.insert(state.name.clone(), reader);
        }
        if let Some(ms) = state.max_staleness_ms {
            backend.set_max_staleness(&state.name, ms).map_err(failed)?;
            every = Some(every.map_or(ms, |e| e.min(ms)));
        }
    }
    let registration = crate::query::SubtaskRegistration {
        node: queryable.node.clone(),
        subtask,
        range: backend.key_group_range(),
        readers,
        mailbox,
        op: op_index,
    };
    // Ticks finer than 10 ms would cost more than they bound.
    let every = every.map(|ms| std::time::Duration::from_millis(ms.max(10) as u64));
    Ok((registration, every))
}

/// The job's metrics: one entry per node, one counter set per subtask.
fn new_metrics(plan: &Plan, progress_total: &[Option<u64>]) -> Arc<JobMetrics> {
    Arc::new(JobMetrics {
        job: plan.spec.name.clone(),
        started: Instant::now(),
        nodes: plan
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| {
                Arc::new(NodeMetrics {
                    name: n.name.clone(),
                    kind: n.kind.to_string(),
                    role: n.role,
                    chain: plan.chains.chain_of[i],
                    subtasks: (0..n.parallelism)
                        .map(|_| Arc::new(SubtaskMetrics::default()))
                        .collect(),
                    progress_total: progress_total[i],
                })
            })
            .collect(),
        restarts: AtomicU64::new(0),
    })
}

fn job_error(plan: &Plan, node: usize, subtask: usize, error: OperatorError) -> JobError {
    JobError {
        node: plan.nodes[node].name.clone(),
        subtask,
        parallelism: plan.nodes[node].parallelism,
        error,
    }
}
