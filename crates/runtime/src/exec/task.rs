//! A task: one subtask of a chain of operators, with its input and its outputs.
//!
//! Operators joined by forward edges of equal parallelism run *chained* in one task: a batch
//! one of them emits is handed to the next as a function argument, with no channel, no copy
//! and no wake-up (lesson 2 of `DESIGN.md`). A chain is a tree: an operator may feed several
//! chained operators, exchanges to other tasks, and sinks. The task moves work through the tree
//! depth-first with an explicit stack, so output order is preserved per edge and awaiting a full
//! channel (backpressure) suspends the whole chain.
//!
//! A checkpoint barrier moves through the chain like any other work: each operator snapshots
//! its state when the barrier reaches it (nothing else can happen in between, the chain being
//! one sequential task), exchanges pass it on in band, and sinks seal a transaction. The task
//! then acknowledges with every snapshot its members took.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use arrow_array::cast::AsArray;
use arrow_array::types::{Int64Type, TimestampMillisecondType};
use arrow_array::{Array, RecordBatch};
use arrow_schema::DataType;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use weir_checkpoint::{SubtaskSnapshot, TaskReport};

use super::exchange::ExchangeWriter;
use super::gate::{GateEvent, InputGate};
use super::message::{BEGINNING_OF_TIME, Barrier, END_OF_TIME, Message, Watermark};
use super::metrics::SubtaskMetrics;
use super::snapshot::NodeState;
use crate::connectors::sink::Sink;
use crate::connectors::source::{Source, SourceEvent};
use crate::error::OperatorError;
use crate::operators::Operator;
use crate::query::Control;

/// Where an operator's output goes, by index into the chain's parts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    Op(usize),
    Exchange(usize),
    Sink(usize),
}

/// A failure, with the node it happened in.
#[derive(Debug)]
pub struct TaskFailure {
    pub node: String,
    pub error: OperatorError,
}

/// A member of a chain: which node and subtask it is.
#[derive(Clone, Debug)]
pub struct Member {
    pub name: String,
    /// The node's index in the plan (and in checkpoints).
    pub index: usize,
    pub subtask: usize,
}

pub struct ChainOp {
    pub member: Member,
    pub op: Box<dyn Operator>,
    pub metrics: Arc<SubtaskMetrics>,
    pub outputs: Vec<Target>,
}

pub struct ChainSink {
    pub member: Member,
    pub sink: Box<dyn Sink>,
    pub metrics: Arc<SubtaskMetrics>,
}

pub struct ChainExchange {
    /// The node whose output this is (for error messages).
    pub node: String,
    pub writer: ExchangeWriter,
}

/// A sink's last transaction when its input ended.
#[derive(Debug)]
pub struct SinkTail {
    pub node: usize,
    pub subtask: usize,
    pub state: Option<serde_json::Value>,
}

/// The operators, exchanges and sinks of one task.
#[derive(Default)]
pub struct Chain {
    pub ops: Vec<ChainOp>,
    pub exchanges: Vec<ChainExchange>,
    pub sinks: Vec<ChainSink>,
    /// Where keyed snapshots are written for the coordinator to store.
    pub scratch: PathBuf,
    /// The newest snapshot whose sink transactions were committed.
    pub committed: Arc<AtomicU64>,
    /// Snapshots taken by the barrier being processed.
    snapshots: Vec<SubtaskSnapshot>,
    /// Sinks' last transactions, as their inputs end.
    tails: Vec<SinkTail>,
}

enum Work {
    Batch(Target, usize, RecordBatch),
    Watermark(Target, i64),
    Idle(Target),
    Barrier(Target, Barrier),
    End(Target),
}

impl Chain {
    async fn run(&mut self, first: Work) -> Result<(), TaskFailure> {
        let mut stack = vec![first];
        while let Some(work) = stack.pop() {
            self.step(work, &mut stack).await?;
        }
        Ok(())
    }

    async fn step(&mut self, work: Work, stack: &mut Vec<Work>) -> Result<(), TaskFailure> {
        match work {
            Work::Batch(Target::Op(i), input, batch) => {
                let node = &mut self.ops[i];
                SubtaskMetrics::add(&node.metrics.records_in, batch.num_rows() as u64);
                SubtaskMetrics::add(&node.metrics.batches_in, 1);
                let mut out = Vec::new();
                node.op
                    .process_batch(input, batch, &mut out)
                    .map_err(|error| fail(&node.member.name, error))?;
                push_batches(stack, &node.outputs, out, &node.metrics);
            }
            Work::Watermark(Target::Op(i), watermark) => {
                let node = &mut self.ops[i];
                node.metrics.watermark.store(watermark, Ordering::Relaxed);
                let mut out = Vec::new();
                let forward = node
                    .op
                    .process_watermark(watermark, &mut out)
                    .map_err(|error| fail(&node.member.name, error))?;
                // The stack is LIFO: the watermark goes in first so it follows the batches.
                for t in node.outputs.iter().rev() {
                    stack.push(Work::Watermark(*t, forward));
                }
                push_batches(stack, &node.outputs, out, &node.metrics);
            }
            Work::Idle(Target::Op(i)) => {
                for t in self.ops[i].outputs.iter().rev() {
                    stack.push(Work::Idle(*t));
                }
            }
            Work::Barrier(Target::Op(i), barrier) => {
                let snapshot = self.snapshot_op(i, barrier)?;
                self.snapshots.push(snapshot);
                for t in self.ops[i].outputs.iter().rev() {
                    stack.push(Work::Barrier(*t, barrier));
                }
            }
            Work::End(Target::Op(i)) => {
                let node = &mut self.ops[i];
                let mut out = Vec::new();
                node.op
                    .finish(&mut out)
                    .map_err(|error| fail(&node.member.name, error))?;
                node.metrics.finished.store(true, Ordering::Relaxed);
                for t in node.outputs.iter().rev() {
                    stack.push(Work::End(*t));
                }
                push_batches(stack, &node.outputs, out, &node.metrics);
            }
            Work::Batch(Target::Exchange(e), _, batch) => {
                let ex = &mut self.exchanges[e];
                ex.writer
                    .send_batch(batch)
                    .await
                    .map_err(|error| fail(&ex.node, error))?;
            }
            Work::Watermark(Target::Exchange(e), w) => {
                self.broadcast(e, Message::Watermark(Watermark::At(w)))
                    .await?;
            }
            Work::Idle(Target::Exchange(e)) => {
                self.broadcast(e, Message::Watermark(Watermark::Idle))
                    .await?;
            }
            Work::Barrier(Target::Exchange(e), barrier) => {
                self.broadcast(e, Message::Barrier(barrier)).await?;
            }
            Work::End(Target::Exchange(e)) => self.broadcast(e, Message::EndOfInput).await?,
            Work::Batch(Target::Sink(s), _, batch) => {
                let sink = &mut self.sinks[s];
                SubtaskMetrics::add(&sink.metrics.records_in, batch.num_rows() as u64);
                SubtaskMetrics::add(&sink.metrics.batches_in, 1);
                sink.sink
                    .write(batch)
                    .await
                    .map_err(|error| fail(&sink.member.name, error))?;
            }
            Work::Watermark(Target::Sink(s), w) => {
                self.sinks[s].metrics.watermark.store(w, Ordering::Relaxed);
            }
            Work::Idle(Target::Sink(_)) => {}
            Work::Barrier(Target::Sink(s), barrier) => {
                let committed = self.committed.load(Ordering::Acquire);
                let sink = &mut self.sinks[s];
                let state = sink
                    .sink
                    .prepare_commit(barrier.id, committed)
                    .await
                    .map_err(|error| fail(&sink.member.name, error))?;
                let member = sink.member.clone();
                SubtaskMetrics::add(&sink.metrics.barriers, 1);
                let blob = NodeState {
                    state,
                    ..NodeState::default()
                };
                self.snapshots.push(operator_snapshot(&member, &blob)?);
            }
            Work::End(Target::Sink(s)) => {
                let committed = self.committed.load(Ordering::Acquire);
                let sink = &mut self.sinks[s];
                let state = sink
                    .sink
                    .finish(committed)
                    .await
                    .map_err(|error| fail(&sink.member.name, error))?;
                sink.metrics.finished.store(true, Ordering::Relaxed);
                self.tails.push(SinkTail {
                    node: sink.member.index,
                    subtask: sink.member.subtask,
                    state,
                });
            }
        }
        Ok(())
    }

    /// Snapshots operator `i`: its keyed state into the scratch directory (the synchronous
    /// part; the coordinator stores the files), its own state and its input watermark.
    fn snapshot_op(&mut self, i: usize, barrier: Barrier) -> Result<SubtaskSnapshot, TaskFailure> {
        let node = &mut self.ops[i];
        let member = node.member.clone();
        SubtaskMetrics::add(&node.metrics.barriers, 1);
        let keyed = match node.op.keyed_state() {
            Some(backend) => {
                let dir = self.scratch.join(format!("{}", barrier.id)).join(format!(
                    "{}-{}",
                    crate::plan::state::safe_name(&member.name),
                    member.subtask
                ));
                let format = barrier.keyed_format(backend.is_rocksdb());
                let snapshot = backend.snapshot(&dir, format).map_err(|e| {
                    fail(
                        &member.name,
                        OperatorError::External {
                            message: format!(
                                "snapshotting keyed state for checkpoint {}: {e}",
                                barrier.id
                            ),
                            source: None,
                        },
                    )
                })?;
                Some(snapshot)
            }
            None => None,
        };
        let state = node
            .op
            .snapshot_state()
            .map_err(|error| fail(&member.name, error))?;
        let watermark = node.metrics.watermark.load(Ordering::Relaxed);
        let blob = NodeState {
            watermark: (watermark != BEGINNING_OF_TIME).then_some(watermark),
            max_seen: None,
            state,
        };
        let mut snapshot = operator_snapshot(&member, &blob)?;
        snapshot.keyed = keyed;
        Ok(snapshot)
    }

    async fn broadcast(&mut self, e: usize, message: Message) -> Result<(), TaskFailure> {
        let ex = &mut self.exchanges[e];
        ex.writer
            .broadcast(message)
            .await
            .map_err(|error| fail(&ex.node, error))
    }

    /// Runs `make(target)` for each target in order.
    async fn each(
        &mut self,
        targets: &[Target],
        make: impl Fn(Target) -> Work,
    ) -> Result<(), TaskFailure> {
        for t in targets {
            self.run(make(*t)).await?;
        }
        Ok(())
    }

    /// Handles a control message: an ordered state lookup, on the operator it names.
    fn control(&mut self, message: Control) {
        match message {
            Control::Query(query) => match self.ops.get_mut(query.op) {
                Some(node) => {
                    SubtaskMetrics::add(&node.metrics.control_messages, 1);
                    crate::query::answer(node.op.as_mut(), query);
                }
                None => {
                    let _ = query
                        .reply
                        .send(Err(weir_state::StateError::Invalid(format!(
                            "no operator {} in this task",
                            query.op
                        ))));
                }
            },
        }
    }

    /// Writes queryable states whose `max-staleness` has passed through to RocksDB.
    fn write_through(&mut self) -> Result<(), TaskFailure> {
        for node in &mut self.ops {
            if let Some(backend) = node.op.keyed_state() {
                backend.write_through_stale().map_err(|e| {
                    fail(
                        &node.member.name,
                        OperatorError::External {
                            message: format!("writing queryable state through: {e}"),
                            source: None,
                        },
                    )
                })?;
            }
        }
        Ok(())
    }

    /// Replays each operator's restored watermark into it before any input, so lateness is
    /// judged as it was when the snapshot was taken. Timers at or before it fired before the
    /// snapshot, so nothing fires.
    fn restore_watermarks(&mut self, watermarks: &[Option<i64>]) -> Result<(), TaskFailure> {
        for (node, w) in self.ops.iter_mut().zip(watermarks) {
            let Some(w) = *w else { continue };
            node.metrics.watermark.store(w, Ordering::Relaxed);
            let mut out = Vec::new();
            node.op
                .process_watermark(w, &mut out)
                .map_err(|error| fail(&node.member.name, error))?;
            if out.iter().any(|b| b.num_rows() > 0) {
                return Err(fail(
                    &node.member.name,
                    OperatorError::Internal(format!(
                        "replaying the restored watermark {w} produced output"
                    )),
                ));
            }
        }
        Ok(())
    }
}

fn operator_snapshot(member: &Member, blob: &NodeState) -> Result<SubtaskSnapshot, TaskFailure> {
    let operator = if blob.is_empty() {
        None
    } else {
        Some(blob.encode().map_err(|e| fail(&member.name, e))?)
    };
    Ok(SubtaskSnapshot {
        node: member.index,
        subtask: member.subtask as u32,
        operator,
        keyed: None,
    })
}

fn push_batches(
    stack: &mut Vec<Work>,
    outputs: &[Target],
    out: Vec<RecordBatch>,
    metrics: &SubtaskMetrics,
) {
    for batch in out.into_iter().rev() {
        if batch.num_rows() == 0 {
            continue;
        }
        SubtaskMetrics::add(&metrics.records_out, batch.num_rows() as u64);
        for t in outputs.iter().rev() {
            stack.push(Work::Batch(*t, 0, batch.clone()));
        }
    }
}

fn fail(node: &str, error: OperatorError) -> TaskFailure {
    TaskFailure {
        node: node.to_string(),
        error,
    }
}

/// How a source subtask derives watermarks.
#[derive(Clone, Debug)]
pub struct EventTime {
    /// Per port: the index of the event-time column, if any.
    pub columns: Vec<Option<usize>>,
    /// Bounded out-of-orderness in milliseconds.
    pub out_of_orderness_ms: i64,
    pub idle_timeout: Option<Duration>,
}

/// Source subtasks of a checkpointed job that have read all their input. A source subtask
/// that is done stays up (injecting barriers, so checkpoints go on) until all are: a finished
/// task could not take part in a checkpoint any more.
#[derive(Debug)]
pub struct SourcesDone {
    remaining: AtomicUsize,
    all: CancellationToken,
}

impl SourcesDone {
    pub fn new(sources: usize) -> Arc<Self> {
        let all = CancellationToken::new();
        if sources == 0 {
            all.cancel();
        }
        Arc::new(Self {
            remaining: AtomicUsize::new(sources),
            all,
        })
    }

    fn arrive(&self) {
        if self.remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.all.cancel();
        }
    }
}

/// What a source task needs to take part in checkpoints.
pub struct SourceCheckpointing {
    /// Barriers the coordinator asks this source to inject.
    pub barriers: mpsc::Receiver<Barrier>,
    pub done: Arc<SourcesDone>,
    /// Restored event-time progress: (watermark emitted, largest event time seen).
    pub restored: (Option<i64>, Option<i64>),
}

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
        let result = match input {
            TaskInput::Gate { mut gate, head } => loop {
                // Control messages and write-through ticks are handled between two events of
                // the gate, never in the middle of one (`InputGate::next` is cancel-safe: it
                // keeps whatever it received). `select!` picks fairly among ready branches,
                // so neither lookups nor data can starve the other.
                let event = if control.is_none() && write_through.is_none() {
                    // Nothing queryable: no branches to poll beside the data.
                    gate.next().await
                } else {
                    tokio::select! {
                        event = gate.next() => event,
                        Some(message) = recv_or_never(control.as_mut()) => {
                            chain.control(message);
                            continue;
                        }
                        _ = tick(write_through.as_mut()) => {
                            chain.write_through()?;
                            continue;
                        }
                    }
                };
                let event = event.map_err(|e| TaskFailure {
                    node: node_name(&chain, head),
                    error: OperatorError::Cancelled(e.to_string()),
                })?;
                match event {
                    GateEvent::Batch { input, batch } => {
                        chain.run(Work::Batch(head, input, batch)).await?;
                    }
                    GateEvent::Watermark(w) => chain.run(Work::Watermark(head, w)).await?,
                    GateEvent::Idle => chain.run(Work::Idle(head)).await?,
                    GateEvent::Barrier { barrier, alignment } => {
                        if let Some(m) = head_metrics(&chain, head) {
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
async fn acknowledge(
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

fn head_metrics(chain: &Chain, target: Target) -> Option<&SubtaskMetrics> {
    match target {
        Target::Op(i) => Some(&chain.ops[i].metrics),
        Target::Sink(i) => Some(&chain.sinks[i].metrics),
        Target::Exchange(_) => None,
    }
}

/// What woke a source task up.
enum Step {
    Stop,
    Barrier(Barrier),
    Next(Result<SourceEvent, OperatorError>),
}

/// A source task's loop and its event-time bookkeeping.
struct SourceRun<'a> {
    member: &'a Member,
    source: &'a mut dyn Source,
    ports: &'a [Vec<Target>],
    metrics: &'a SubtaskMetrics,
    event_time: &'a EventTime,
    chain: &'a mut Chain,
    stop: &'a CancellationToken,
    reporting: Option<&'a Reporting>,
    checkpointing: Option<SourceCheckpointing>,
}

impl SourceRun<'_> {
    async fn run(&mut self) -> Result<(), TaskFailure> {
        let all: Vec<Target> = self.ports.iter().flatten().copied().collect();
        let (restored_watermark, restored_max) = self
            .checkpointing
            .as_ref()
            .map_or((None, None), |c| c.restored);
        let mut max_seen = restored_max.unwrap_or(BEGINNING_OF_TIME);
        let mut emitted = restored_watermark.unwrap_or(BEGINNING_OF_TIME);
        let mut idle = false;
        loop {
            let step = {
                let next = self.source.next();
                tokio::pin!(next);
                loop {
                    let idle_after = self.event_time.idle_timeout.filter(|_| !idle);
                    let barriers = self.checkpointing.as_mut().map(|c| &mut c.barriers);
                    tokio::select! {
                        biased;
                        _ = self.stop.cancelled() => break Step::Stop,
                        Some(b) = recv_or_never(barriers) => break Step::Barrier(b),
                        r = &mut next => break Step::Next(r),
                        _ = sleep_or_never(idle_after) => {
                            idle = true;
                            self.chain.each(&all, Work::Idle).await?;
                        }
                    }
                }
            };
            match step {
                Step::Stop => {
                    // A stop request: end the streams without advancing event time, so
                    // nothing fires on incomplete data; everything already sent is drained
                    // downstream.
                    return self.end(&all).await;
                }
                Step::Barrier(barrier) => self.barrier(&all, barrier, emitted, max_seen).await?,
                Step::Next(result) => match result.map_err(|e| fail(&self.member.name, e))? {
                    SourceEvent::Batches(batches) => {
                        let mut rows = false;
                        for (port, batch) in batches {
                            if batch.num_rows() == 0 {
                                continue;
                            }
                            rows = true;
                            if let Some(Some(col)) = self.event_time.columns.get(port) {
                                if let Some(t) = max_time(batch.column(*col).as_ref()) {
                                    max_seen = max_seen.max(t);
                                }
                            }
                            SubtaskMetrics::add(&self.metrics.records_out, batch.num_rows() as u64);
                            for t in &self.ports[port] {
                                self.chain.run(Work::Batch(*t, 0, batch.clone())).await?;
                            }
                        }
                        if rows {
                            idle = false;
                        }
                        let progress = match self.source.watermark_bound() {
                            Some(bound) => max_seen.min(bound),
                            None => max_seen,
                        };
                        let watermark = progress
                            .saturating_sub(self.event_time.out_of_orderness_ms)
                            .saturating_sub(1);
                        if progress > BEGINNING_OF_TIME && watermark > emitted {
                            emitted = watermark;
                            idle = false;
                            self.metrics.watermark.store(watermark, Ordering::Relaxed);
                            self.chain
                                .each(&all, |t| Work::Watermark(t, watermark))
                                .await?;
                        }
                        if !idle && self.source.idle() {
                            idle = true;
                            self.chain.each(&all, Work::Idle).await?;
                        }
                    }
                    SourceEvent::End => {
                        self.metrics.watermark.store(END_OF_TIME, Ordering::Relaxed);
                        self.chain
                            .each(&all, |t| Work::Watermark(t, END_OF_TIME))
                            .await?;
                        self.wait_for_other_sources(&all).await?;
                        return self.end(&all).await;
                    }
                },
            }
        }
    }

    /// Snapshots the source's position, then sends the barrier after everything it emitted.
    async fn barrier(
        &mut self,
        all: &[Target],
        barrier: Barrier,
        emitted: i64,
        max_seen: i64,
    ) -> Result<(), TaskFailure> {
        let state = self
            .source
            .snapshot()
            .map_err(|e| fail(&self.member.name, e))?;
        let blob = NodeState {
            watermark: (emitted != BEGINNING_OF_TIME).then_some(emitted),
            max_seen: (max_seen != BEGINNING_OF_TIME).then_some(max_seen),
            state,
        };
        let own = operator_snapshot(self.member, &blob)?;
        SubtaskMetrics::add(&self.metrics.barriers, 1);
        self.chain.each(all, |t| Work::Barrier(t, barrier)).await?;
        // A source injects barriers: nothing to align.
        acknowledge(
            self.chain,
            self.reporting,
            barrier,
            vec![own],
            std::time::Duration::ZERO,
        )
        .await;
        Ok(())
    }

    /// A checkpointed source whose input ended waits, still injecting barriers, until every
    /// source of the job has ended (or a stop).
    async fn wait_for_other_sources(&mut self, all: &[Target]) -> Result<(), TaskFailure> {
        let Some(c) = self.checkpointing.as_ref() else {
            return Ok(());
        };
        c.done.arrive();
        let everyone = c.done.all.clone();
        loop {
            let barriers = self.checkpointing.as_mut().map(|c| &mut c.barriers);
            tokio::select! {
                biased;
                _ = self.stop.cancelled() => return Ok(()),
                _ = everyone.cancelled() => return Ok(()),
                Some(b) = recv_or_never(barriers) => {
                    self.barrier(all, b, END_OF_TIME, END_OF_TIME).await?;
                }
            }
        }
    }

    async fn end(&mut self, all: &[Target]) -> Result<(), TaskFailure> {
        self.chain.each(all, Work::End).await?;
        self.metrics.finished.store(true, Ordering::Relaxed);
        Ok(())
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
async fn recv_or_never<T>(rx: Option<&mut mpsc::Receiver<T>>) -> Option<T> {
    match rx {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

async fn sleep_or_never(after: Option<Duration>) {
    match after {
        Some(d) => tokio::time::sleep(d).await,
        None => std::future::pending().await,
    }
}

/// The largest event time in a timestamp (or epoch-ms integer) column.
fn max_time(col: &dyn Array) -> Option<i64> {
    match col.data_type() {
        DataType::Timestamp(_, _) => {
            arrow_arith::aggregate::max(col.as_primitive::<TimestampMillisecondType>())
        }
        DataType::Int64 => arrow_arith::aggregate::max(col.as_primitive::<Int64Type>()),
        _ => None,
    }
}
