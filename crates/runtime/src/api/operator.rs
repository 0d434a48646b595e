//! The operator contract: the synchronous, per-subtask logic between sources and sinks.

use std::sync::Arc;

use arrow_array::RecordBatch;

use super::{OperatorError, SubtaskContext};

/// The logic of one subtask of one operator.
pub trait Operator: Send {
    /// Processes one batch from logical input `input` (0 for single-input operators, 0 or 1 for
    /// joins), pushing any output batches into `out`.
    fn process_batch(
        &mut self,
        input: usize,
        batch: RecordBatch,
        out: &mut Vec<RecordBatch>,
    ) -> Result<(), OperatorError>;

    /// The input watermark advanced to `watermark` (epoch ms; no record at or before it will
    /// follow). Fires due timers. Returns the output watermark, which may lag (to hold back
    /// output) but never run ahead of the input. Output records go into `out` and precede the
    /// watermark.
    fn process_watermark(
        &mut self,
        watermark: i64,
        out: &mut Vec<RecordBatch>,
    ) -> Result<i64, OperatorError> {
        let _ = out;
        Ok(watermark)
    }

    /// How often, in processing time, the task calls [`Operator::flush`] (the operator's
    /// mini-batch interval); `None`: it holds nothing back between batches.
    fn flush_every(&self) -> Option<std::time::Duration> {
        None
    }

    /// Emits whatever the operator holds back between batches (a mini-batch's updates). The
    /// task calls it every [`Operator::flush_every`], and the chain calls it just before a
    /// checkpoint barrier passes the operator (Flink's `prepareSnapshotPreBarrier`): the
    /// output then precedes the barrier, and the snapshot taken right after owes nothing
    /// downstream, so what is held back never needs checkpointing.
    fn flush(&mut self, out: &mut Vec<RecordBatch>) -> Result<(), OperatorError> {
        let _ = out;
        Ok(())
    }

    /// Every input has ended: emit anything still held.
    fn finish(&mut self, out: &mut Vec<RecordBatch>) -> Result<(), OperatorError> {
        let _ = out;
        Ok(())
    }

    /// The operator's keyed state and timers, which a checkpoint snapshots (keyed operators).
    fn keyed_state(&mut self) -> Option<&mut weir_state::KeyedStateBackend> {
        None
    }

    /// State kept outside the keyed backend, for a checkpoint. A restored subtask receives
    /// the states of every old subtask of its node (see
    /// [`SubtaskRestore`](super::SubtaskRestore)).
    fn snapshot_state(&mut self) -> Result<Option<serde_json::Value>, OperatorError> {
        Ok(None)
    }
}

/// Makes one subtask of a stateless operator.
pub type OperatorFactory =
    Arc<dyn Fn(&SubtaskContext) -> Result<Box<dyn Operator>, OperatorError> + Send + Sync>;
