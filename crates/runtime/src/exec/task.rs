//! A task: one subtask of a chain of operators, with its input and its outputs.
//!
//! Operators joined by forward edges of equal parallelism run *chained* in one task: a batch
//! one of them emits is handed to the next as a function argument, with no channel, no copy
//! and no wake-up (lesson 2 of `DESIGN.md`). A chain is a tree: an operator may feed several
//! chained operators, exchanges to other tasks, and sinks. The task moves work through the tree
//! depth-first with an explicit stack, so output order is preserved per edge and awaiting a full
//! channel (backpressure) suspends the whole chain.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use arrow_array::cast::AsArray;
use arrow_array::types::{Int64Type, TimestampMillisecondType};
use arrow_array::{Array, RecordBatch};
use arrow_schema::DataType;
use tokio_util::sync::CancellationToken;

use super::exchange::ExchangeWriter;
use super::gate::{GateEvent, InputGate};
use super::message::{BEGINNING_OF_TIME, END_OF_TIME, Message, Watermark};
use super::metrics::SubtaskMetrics;
use crate::connectors::sink::Sink;
use crate::connectors::source::{Source, SourceEvent};
use crate::error::OperatorError;
use crate::operators::Operator;

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

pub struct ChainOp {
    pub node: String,
    pub op: Box<dyn Operator>,
    pub metrics: Arc<SubtaskMetrics>,
    pub outputs: Vec<Target>,
}

pub struct ChainSink {
    pub node: String,
    pub sink: Box<dyn Sink>,
    pub metrics: Arc<SubtaskMetrics>,
}

pub struct ChainExchange {
    /// The node whose output this is (for error messages).
    pub node: String,
    pub writer: ExchangeWriter,
}

/// The operators, exchanges and sinks of one task.
#[derive(Default)]
pub struct Chain {
    pub ops: Vec<ChainOp>,
    pub exchanges: Vec<ChainExchange>,
    pub sinks: Vec<ChainSink>,
}

enum Work {
    Batch(Target, usize, RecordBatch),
    Watermark(Target, i64),
    Idle(Target),
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
                    .map_err(|error| fail(&node.node, error))?;
                push_batches(stack, &node.outputs, out, &node.metrics);
            }
            Work::Watermark(Target::Op(i), watermark) => {
                let node = &mut self.ops[i];
                node.metrics.watermark.store(watermark, Ordering::Relaxed);
                let mut out = Vec::new();
                let forward = node
                    .op
                    .process_watermark(watermark, &mut out)
                    .map_err(|error| fail(&node.node, error))?;
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
            Work::End(Target::Op(i)) => {
                let node = &mut self.ops[i];
                let mut out = Vec::new();
                node.op
                    .finish(&mut out)
                    .map_err(|error| fail(&node.node, error))?;
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
            Work::End(Target::Exchange(e)) => self.broadcast(e, Message::EndOfInput).await?,
            Work::Batch(Target::Sink(s), _, batch) => {
                let sink = &mut self.sinks[s];
                SubtaskMetrics::add(&sink.metrics.records_in, batch.num_rows() as u64);
                SubtaskMetrics::add(&sink.metrics.batches_in, 1);
                sink.sink
                    .write(batch)
                    .await
                    .map_err(|error| fail(&sink.node, error))?;
            }
            Work::Watermark(Target::Sink(s), w) => {
                self.sinks[s].metrics.watermark.store(w, Ordering::Relaxed);
            }
            Work::Idle(Target::Sink(_)) => {}
            Work::End(Target::Sink(s)) => {
                let sink = &mut self.sinks[s];
                sink.sink
                    .finish()
                    .await
                    .map_err(|error| fail(&sink.node, error))?;
                sink.metrics.finished.store(true, Ordering::Relaxed);
            }
        }
        Ok(())
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

/// What feeds a task.
pub enum TaskInput {
    Source {
        node: String,
        source: Box<dyn Source>,
        /// Per output port: where its batches go.
        ports: Vec<Vec<Target>>,
        metrics: Arc<SubtaskMetrics>,
        event_time: EventTime,
    },
    Gate {
        gate: InputGate,
        head: Target,
    },
}

/// One subtask of one chain.
pub struct Task {
    pub input: TaskInput,
    pub chain: Chain,
    /// Cancelled to ask sources to stop gracefully (drain and flush downstream).
    pub stop: CancellationToken,
}

impl Task {
    pub async fn run(self) -> Result<(), TaskFailure> {
        let Task {
            input,
            mut chain,
            stop,
        } = self;
        match input {
            TaskInput::Gate { mut gate, head } => loop {
                let event = gate.next().await.map_err(|e| TaskFailure {
                    node: node_name(&chain, head),
                    error: OperatorError::Cancelled(e.to_string()),
                })?;
                match event {
                    GateEvent::Batch { input, batch } => {
                        chain.run(Work::Batch(head, input, batch)).await?;
                    }
                    GateEvent::Watermark(w) => chain.run(Work::Watermark(head, w)).await?,
                    GateEvent::Idle => chain.run(Work::Idle(head)).await?,
                    GateEvent::End => {
                        chain.run(Work::End(head)).await?;
                        return Ok(());
                    }
                }
            },
            TaskInput::Source {
                node,
                mut source,
                ports,
                metrics,
                event_time,
            } => {
                run_source(
                    &node,
                    source.as_mut(),
                    &ports,
                    &metrics,
                    &event_time,
                    &mut chain,
                    &stop,
                )
                .await
            }
        }
    }
}

fn node_name(chain: &Chain, target: Target) -> String {
    match target {
        Target::Op(i) => chain.ops[i].node.clone(),
        Target::Exchange(i) => chain.exchanges[i].node.clone(),
        Target::Sink(i) => chain.sinks[i].node.clone(),
    }
}

async fn run_source(
    node: &str,
    source: &mut dyn Source,
    ports: &[Vec<Target>],
    metrics: &SubtaskMetrics,
    event_time: &EventTime,
    chain: &mut Chain,
    stop: &CancellationToken,
) -> Result<(), TaskFailure> {
    let all: Vec<Target> = ports.iter().flatten().copied().collect();
    let mut max_seen = BEGINNING_OF_TIME;
    let mut emitted = BEGINNING_OF_TIME;
    let mut idle = false;
    loop {
        let next = source.next();
        tokio::pin!(next);
        let result = loop {
            let idle_after = event_time.idle_timeout.filter(|_| !idle);
            tokio::select! {
                biased;
                _ = stop.cancelled() => break None,
                r = &mut next => break Some(r),
                _ = sleep_or_never(idle_after) => {
                    idle = true;
                    chain.each(&all, Work::Idle).await?;
                }
            }
        };
        let Some(result) = result else {
            // A stop request: end the streams without advancing event time, so nothing
            // fires on incomplete data; everything already sent is drained downstream.
            chain.each(&all, Work::End).await?;
            metrics.finished.store(true, Ordering::Relaxed);
            return Ok(());
        };
        match result.map_err(|error| fail(node, error))? {
            SourceEvent::Batches(batches) => {
                for (port, batch) in batches {
                    if batch.num_rows() == 0 {
                        continue;
                    }
                    if let Some(Some(col)) = event_time.columns.get(port) {
                        if let Some(t) = max_time(batch.column(*col).as_ref()) {
                            max_seen = max_seen.max(t);
                        }
                    }
                    SubtaskMetrics::add(&metrics.records_out, batch.num_rows() as u64);
                    for t in &ports[port] {
                        chain.run(Work::Batch(*t, 0, batch.clone())).await?;
                    }
                }
                idle = false;
                let watermark = max_seen
                    .saturating_sub(event_time.out_of_orderness_ms)
                    .saturating_sub(1);
                if max_seen > BEGINNING_OF_TIME && watermark > emitted {
                    emitted = watermark;
                    metrics.watermark.store(watermark, Ordering::Relaxed);
                    chain.each(&all, |t| Work::Watermark(t, watermark)).await?;
                }
            }
            SourceEvent::End => {
                metrics.watermark.store(END_OF_TIME, Ordering::Relaxed);
                chain
                    .each(&all, |t| Work::Watermark(t, END_OF_TIME))
                    .await?;
                chain.each(&all, Work::End).await?;
                metrics.finished.store(true, Ordering::Relaxed);
                return Ok(());
            }
        }
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
