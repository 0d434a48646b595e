//! The sink trait: writing, and the two phases of an exactly-once commit.
//!
//! A transactional sink writes what it receives into a *transaction* that nobody can see yet.
//! At a checkpoint barrier it makes the transaction durable and returns its description
//! ([`Sink::prepare_commit`]): that goes into the checkpoint. Once the checkpoint is complete,
//! the job commits the transactions it holds ([`SinkFactory::commit`]), making the output
//! visible. A crash before the checkpoint completes leaves transactions nobody commits, and a
//! restore discards them ([`SinkFactory::prepare`]); a crash after it commits them again on
//! restore, so commits must be idempotent. At the end of a bounded input the last transaction
//! goes into the job's final snapshot and is committed the same way.

use arrow_array::RecordBatch;
use futures::future::BoxFuture;

use super::{OperatorError, SubtaskContext};

/// One subtask of a sink.
pub trait Sink: Send {
    /// Writes (or buffers) one batch.
    fn write(&mut self, batch: RecordBatch) -> BoxFuture<'_, Result<(), OperatorError>>;

    /// Barrier `checkpoint`: makes everything written since the previous barrier durable in a
    /// pending transaction and returns the state to checkpoint: every transaction not yet
    /// known to be committed (`committed` is the newest snapshot whose transactions were
    /// committed). Sinks that are not transactional return `None`.
    fn prepare_commit(
        &mut self,
        checkpoint: u64,
        committed: u64,
    ) -> BoxFuture<'_, Result<Option<serde_json::Value>, OperatorError>> {
        let _ = (checkpoint, committed);
        Box::pin(async { Ok(None) })
    }

    /// Every input has ended: the same as [`prepare_commit`](Self::prepare_commit) for the
    /// last records. The job commits (or, stopped by a savepoint, aborts) what it returns.
    fn finish(
        &mut self,
        committed: u64,
    ) -> BoxFuture<'_, Result<Option<serde_json::Value>, OperatorError>>;
}

/// The pending transactions a restored sink inherits.
#[derive(Clone, Debug, Default)]
pub struct SinkRestore {
    /// The snapshot restored.
    pub checkpoint: u64,
    /// The transactions it holds (of every old subtask): committed by `prepare`.
    pub transactions: Vec<serde_json::Value>,
}

/// Makes the subtasks of one sink node, and commits their transactions.
pub trait SinkFactory: Send + Sync {
    /// Once per run, before any subtask starts: create the output, commit the transactions
    /// of the snapshot restored (if any), and discard what earlier runs left uncommitted.
    fn prepare(
        &self,
        parallelism: usize,
        restore: Option<&SinkRestore>,
    ) -> BoxFuture<'_, Result<(), OperatorError>>;

    fn create(&self, ctx: &SubtaskContext) -> Result<Box<dyn Sink>, OperatorError>;

    /// Makes `transactions` (states returned by subtasks) visible. Idempotent.
    fn commit(
        &self,
        transactions: Vec<serde_json::Value>,
    ) -> BoxFuture<'static, Result<(), OperatorError>> {
        let _ = transactions;
        Box::pin(async { Ok(()) })
    }

    /// The gauges of the connection pool the sink writes through, if it has one (for the
    /// dashboard and `/metrics`).
    fn pool_metrics(&self) -> Option<weir_connection_pool::PoolMetrics> {
        None
    }

    /// Discards what of `transactions` came after snapshot `after`: a stop with savepoint left
    /// it behind, and it will never be committed. What belongs to `after` or earlier is the
    /// savepoint's (committed by it, or again by a resume from it) and is left alone.
    fn abort(&self, transactions: Vec<serde_json::Value>, after: u64) -> Result<(), OperatorError> {
        let _ = (transactions, after);
        Ok(())
    }
}

/// A transaction of one sink subtask: what it is called in checkpoints is up to the sink.
pub trait SnapshotTransaction: serde::Serialize + serde::de::DeserializeOwned {
    /// The snapshot whose barrier ended it.
    fn snapshot(&self) -> u64;
}

/// The transactions a sink subtask has prepared and not yet seen committed: each barrier puts
/// all of them into the checkpoint, so a restore of any snapshot holds every transaction that
/// may still need its commit.
#[derive(Debug)]
pub struct Unconfirmed<T>(Vec<T>);

impl<T> Default for Unconfirmed<T> {
    fn default() -> Self {
        Self(Vec::new())
    }
}

impl<T: SnapshotTransaction> Unconfirmed<T> {
    pub fn push(&mut self, transaction: T) {
        self.0.push(transaction);
    }

    /// Forgets the transactions of snapshots up to `committed`; the others as the subtask's
    /// state for the checkpoint, if there are any.
    pub fn state(&mut self, committed: u64) -> Option<serde_json::Value> {
        self.0.retain(|t| t.snapshot() > committed);
        (!self.0.is_empty()).then(|| serde_json::json!(self.0))
    }
}

/// The transactions in subtask states that [`Unconfirmed::state`] made, of a `sink` kind.
pub fn decode_transactions<T: SnapshotTransaction>(
    states: Vec<serde_json::Value>,
    sink: &str,
) -> Result<Vec<T>, OperatorError> {
    let mut out = Vec::new();
    for state in states {
        let list: Vec<T> = serde_json::from_value(state).map_err(|e| {
            OperatorError::Internal(format!("a {sink} sink transaction is not valid: {e}"))
        })?;
        out.extend(list);
    }
    Ok(out)
}
