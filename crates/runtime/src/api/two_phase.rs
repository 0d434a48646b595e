//! One two-phase sink: the sealing and commit protocol of exactly-once output, written once
//! (Arroyo's `TwoPhaseCommitter`, Flink's `TwoPhaseCommitSinkFunction`). A transactional sink
//! is then only what is its own:
//!
//! - a [`Stage`] per subtask: how rows are staged where nobody sees them yet, and how what
//!   was staged since the last barrier becomes a durable, pending transaction (*pre-commit*);
//! - a [`Committer`] per sink: how the job makes transactions visible (*commit*, idempotent),
//!   discards them (*abort*), and, before any subtask starts, commits what the restored
//!   snapshot holds and clears what earlier runs left (*recover*).
//!
//! [`TwoPhase`] runs the protocol around a stage: at barrier `n` the stage pre-commits the
//! transaction of snapshot `n`, and every transaction not yet known to be committed goes into
//! the checkpoint ([`Unconfirmed`]), so a restore of any snapshot holds every transaction that
//! may still need its commit; at the end of a bounded input the last one is named after the
//! snapshot that follows the last barrier (the job's final snapshot). [`TwoPhaseFactory`] is
//! the [`SinkFactory`] of a committer: it decodes the transactions that checkpoints carry as
//! JSON, once for every sink. The conformance suite (`crate::testing::sink_conformance`, with
//! the `testing` feature) checks every committer against the same scenarios.

use arrow_array::RecordBatch;
use futures::future::BoxFuture;

use super::{
    OperatorError, Sink, SinkFactory, SinkRestore, SnapshotTransaction, SubtaskContext,
    Unconfirmed, decode_transactions,
};

/// What a transactional sink's subtask does with rows.
pub trait Stage: Send {
    type Transaction: SnapshotTransaction + Send;

    /// Stages one batch into the open transaction (durably or not: only a pre-commit has to be
    /// durable).
    fn write(&mut self, batch: RecordBatch) -> BoxFuture<'_, Result<(), OperatorError>>;

    /// Makes everything staged since the last pre-commit durable as the pending transaction of
    /// `snapshot`; `None` if nothing was staged.
    fn pre_commit(
        &mut self,
        snapshot: u64,
    ) -> BoxFuture<'_, Result<Option<Self::Transaction>, OperatorError>>;

    /// The input ended and the last transaction is pre-committed: let go of what the stage
    /// holds (a writer task, a file), reporting a failure it kept.
    fn close(&mut self) -> BoxFuture<'_, Result<(), OperatorError>> {
        Box::pin(async { Ok(()) })
    }
}

/// A transactional sink's subtask: the protocol around its [`Stage`].
pub struct TwoPhase<S: Stage> {
    stage: S,
    /// Transactions not yet known to be committed: each barrier puts all of them into the
    /// checkpoint.
    unconfirmed: Unconfirmed<S::Transaction>,
    /// The last barrier seen, or the snapshot the run's ids continue above before any.
    last_barrier: u64,
}

impl<S: Stage> TwoPhase<S> {
    /// A subtask around `stage`, whose snapshot ids continue above `checkpoint_base`.
    pub fn new(stage: S, checkpoint_base: u64) -> Self {
        Self {
            stage,
            unconfirmed: Unconfirmed::default(),
            last_barrier: checkpoint_base,
        }
    }

    async fn seal(&mut self, snapshot: u64) -> Result<(), OperatorError> {
        if let Some(t) = self.stage.pre_commit(snapshot).await? {
            self.unconfirmed.push(t);
        }
        Ok(())
    }
}

impl<S: Stage> Sink for TwoPhase<S> {
    fn write(&mut self, batch: RecordBatch) -> BoxFuture<'_, Result<(), OperatorError>> {
        self.stage.write(batch)
    }

    fn prepare_commit(
        &mut self,
        checkpoint: u64,
        committed: u64,
    ) -> BoxFuture<'_, Result<Option<serde_json::Value>, OperatorError>> {
        Box::pin(async move {
            self.seal(checkpoint).await?;
            self.last_barrier = checkpoint;
            Ok(self.unconfirmed.state(committed))
        })
    }

    fn finish(
        &mut self,
        committed: u64,
    ) -> BoxFuture<'_, Result<Option<serde_json::Value>, OperatorError>> {
        Box::pin(async move {
            // Named after the snapshot that follows the last barrier: the job's final one.
            self.seal(self.last_barrier + 1).await?;
            self.stage.close().await?;
            Ok(self.unconfirmed.state(committed))
        })
    }
}

/// The transactions a restored sink inherits, decoded.
#[derive(Debug)]
pub struct Recovered<T> {
    /// The snapshot restored.
    pub checkpoint: u64,
    /// The transactions it holds (of every old subtask): to commit.
    pub transactions: Vec<T>,
}

/// What the job does with a transactional sink's transactions.
pub trait Committer: Send + Sync + 'static {
    type Transaction: SnapshotTransaction + Send + 'static;

    /// The sink's kind, for messages (`file`, `postgres`).
    const SINK: &'static str;

    /// Once per run, before any subtask starts: ready the output, commit the transactions of
    /// the snapshot restored (if any), and discard what earlier runs left uncommitted.
    fn recover(
        &self,
        parallelism: usize,
        restored: Option<Recovered<Self::Transaction>>,
    ) -> BoxFuture<'_, Result<(), OperatorError>>;

    /// One subtask's sink: a [`TwoPhase`] around the sink's stage when the job checkpoints
    /// exactly once, or whatever the sink writes with otherwise.
    fn create(&self, ctx: &SubtaskContext) -> Result<Box<dyn Sink>, OperatorError>;

    /// Makes `transactions` visible. Idempotent: a transaction already committed is skipped,
    /// however long ago.
    fn commit(
        &self,
        transactions: Vec<Self::Transaction>,
    ) -> BoxFuture<'static, Result<(), OperatorError>>;

    /// Discards `transactions`: they will never be committed (a stop with savepoint left them
    /// after the savepoint). Nothing of them may become visible.
    fn abort(&self, transactions: Vec<Self::Transaction>) -> Result<(), OperatorError>;

    /// The gauges of the connection pool the sink writes through, if it has one.
    fn pool_metrics(&self) -> Option<weir_connection_pool::PoolMetrics> {
        None
    }
}

/// The [`SinkFactory`] of a [`Committer`]: checkpoints carry transactions as JSON, decoded
/// here once for every sink.
pub struct TwoPhaseFactory<C>(pub C);

impl<C: Committer> TwoPhaseFactory<C> {
    fn decode(&self, states: Vec<serde_json::Value>) -> Result<Vec<C::Transaction>, OperatorError> {
        decode_transactions(states, C::SINK)
    }
}

impl<C: Committer> SinkFactory for TwoPhaseFactory<C> {
    fn prepare(
        &self,
        parallelism: usize,
        restore: Option<&SinkRestore>,
    ) -> BoxFuture<'_, Result<(), OperatorError>> {
        let restored = restore
            .map(|r| {
                self.decode(r.transactions.clone())
                    .map(|transactions| Recovered {
                        checkpoint: r.checkpoint,
                        transactions,
                    })
            })
            .transpose();
        Box::pin(async move { self.0.recover(parallelism, restored?).await })
    }

    fn create(&self, ctx: &SubtaskContext) -> Result<Box<dyn Sink>, OperatorError> {
        self.0.create(ctx)
    }

    fn commit(
        &self,
        transactions: Vec<serde_json::Value>,
    ) -> BoxFuture<'static, Result<(), OperatorError>> {
        match self.decode(transactions) {
            Ok(list) => self.0.commit(list),
            Err(e) => Box::pin(async move { Err(e) }),
        }
    }

    fn pool_metrics(&self) -> Option<weir_connection_pool::PoolMetrics> {
        self.0.pool_metrics()
    }

    fn abort(&self, transactions: Vec<serde_json::Value>, after: u64) -> Result<(), OperatorError> {
        let mut left = self.decode(transactions)?;
        left.retain(|t| t.snapshot() > after);
        self.0.abort(left)
    }
}
