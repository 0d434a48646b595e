//! A chain: the operators, exchanges and sinks of one task, joined without channels.
//!
//! Operators joined by forward edges of equal parallelism run *chained* in one task: a batch
//! one of them emits is handed to the next as a function argument, with no channel, no copy
//! and no wake-up (lesson 2 of `DESIGN.md`). A chain is a tree: an operator may feed several
//! chained operators, exchanges to other tasks, and sinks. The chain moves work through the
//! tree depth-first with an explicit stack, so output order is preserved per edge and awaiting
//! a full channel (backpressure) suspends the whole chain.
//!
//! A checkpoint barrier moves through the chain like any other work: each operator snapshots
//! its state when the barrier reaches it (nothing else can happen in between, the chain being
//! one sequential task), exchanges pass it on in band, and sinks seal a transaction.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arrow_array::RecordBatch;
use weir_checkpoint::SubtaskSnapshot;

use super::exchange::ExchangeWriter;
use crate::api::{
    BEGINNING_OF_TIME, Barrier, Message, Operator, OperatorError, Sink, SubtaskMetrics,
    SubtaskState, Watermark,
};
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
    pub(super) snapshots: Vec<SubtaskSnapshot>,
    /// Sinks' last transactions, as their inputs end.
    pub(super) tails: Vec<SinkTail>,
}

/// One step of work for a member of the chain.
pub(super) enum Work {
    Batch(Target, usize, RecordBatch),
    Watermark(Target, i64),
    Idle(Target),
    Barrier(Target, Barrier),
    /// Processing time for operators that hold output back to emit it ([`Operator::flush`]).
    Flush(Target),
    End(Target),
}

impl Chain {
    pub(super) async fn run(&mut self, first: Work) -> Result<(), TaskFailure> {
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
                // What the operator holds back goes out first, so that it precedes the barrier
                // downstream and its snapshot owes nothing.
                let node = &mut self.ops[i];
                let mut out = Vec::new();
                node.op
                    .flush(&mut out)
                    .map_err(|error| fail(&node.member.name, error))?;
                let snapshot = self.snapshot_op(i, barrier)?;
                self.snapshots.push(snapshot);
                let node = &self.ops[i];
                // The stack is LIFO: the barrier goes in first so it follows the batches.
                for t in node.outputs.iter().rev() {
                    stack.push(Work::Barrier(*t, barrier));
                }
                push_batches(stack, &node.outputs, out, &node.metrics);
            }
            Work::Flush(Target::Op(i)) => {
                let node = &mut self.ops[i];
                let mut out = Vec::new();
                node.op
                    .flush(&mut out)
                    .map_err(|error| fail(&node.member.name, error))?;
                // Chained operators after it flush once its output has reached them.
                for t in node.outputs.iter().rev() {
                    stack.push(Work::Flush(*t));
                }
                push_batches(stack, &node.outputs, out, &node.metrics);
            }
            Work::Flush(Target::Exchange(_) | Target::Sink(_)) => {}
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
                // What a sink writes is its preview.
                sink.metrics.tail.record(&batch);
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
                let blob = SubtaskState {
                    state,
                    ..SubtaskState::default()
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
                    crate::spec::paths::safe_name(&member.name),
                    member.subtask
                ));
                let format = barrier.keyed_format(backend.is_rocksdb());
                let snapshot = backend.snapshot(&dir, format).map_err(|e| {
                    fail(
                        &member.name,
                        OperatorError::external(
                            format!(
                                "snapshotting keyed state for checkpoint {}: {e}",
                                barrier.id
                            ),
                            e,
                        ),
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
        let blob = SubtaskState {
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
    pub(super) async fn each(
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
    pub(super) fn control(&mut self, message: Control) {
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

    /// How often the chain's operators want to be flushed (the shortest of their intervals).
    pub(super) fn flush_every(&self) -> Option<std::time::Duration> {
        self.ops.iter().filter_map(|n| n.op.flush_every()).min()
    }

    /// Whether an operator of the chain keeps keyed state.
    pub(super) fn has_keyed_state(&mut self) -> bool {
        self.ops.iter_mut().any(|n| n.op.keyed_state().is_some())
    }

    /// Publishes the size of each keyed operator's state into its metrics (the backend's own
    /// estimates; about once a second).
    pub(super) fn publish_state_sizes(&mut self) {
        for node in &mut self.ops {
            if let Some(backend) = node.op.keyed_state() {
                let (keys, bytes) = backend.size_estimate();
                node.metrics.state_keys.store(keys, Ordering::Relaxed);
                node.metrics.state_bytes.store(
                    bytes.unwrap_or(crate::api::metrics::UNKNOWN),
                    Ordering::Relaxed,
                );
            }
        }
    }

    /// Writes queryable states whose `max-staleness` has passed through to RocksDB.
    pub(super) fn write_through(&mut self) -> Result<(), TaskFailure> {
        for node in &mut self.ops {
            if let Some(backend) = node.op.keyed_state() {
                backend.write_through_stale().map_err(|e| {
                    fail(
                        &node.member.name,
                        OperatorError::external(format!("writing queryable state through: {e}"), e),
                    )
                })?;
            }
        }
        Ok(())
    }

    /// Replays each operator's restored watermark into it before any input, so lateness is
    /// judged as it was when the snapshot was taken. Timers at or before it fired before the
    /// snapshot, so nothing fires.
    pub(super) fn restore_watermarks(
        &mut self,
        watermarks: &[Option<i64>],
    ) -> Result<(), TaskFailure> {
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

pub(super) fn operator_snapshot(
    member: &Member,
    blob: &SubtaskState,
) -> Result<SubtaskSnapshot, TaskFailure> {
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
        metrics.tail.record(&batch);
        for t in outputs.iter().rev() {
            stack.push(Work::Batch(*t, 0, batch.clone()));
        }
    }
}

pub(super) fn fail(node: &str, error: OperatorError) -> TaskFailure {
    TaskFailure {
        node: node.to_string(),
        error,
    }
}
