//! Operators: the synchronous, per-subtask logic between sources and sinks.
//!
//! One trait, one file per operator. An operator receives whole batches and pushes its output
//! batches into `out`; the task that owns it moves them on, either straight into the next chained
//! operator (no channel hop) or into an exchange. Operators never block and never see channels.
//! Keyed operators keep all their state and timers in a `weir_state::KeyedStateBackend`.
//!
//! # Layout
//! - [`filter`], [`map`]: stateless rows in, rows out.
//! - [`key_by`]: key expressions and the stable key hash behind key groups.
//! - [`keyed`]: encoding keys and whole rows for state.
//! - [`accumulators`]: aggregate functions and their accumulators.
//! - [`aggregate`]: running keyed aggregation.
//! - [`window`], [`window_aggregate`]: event-time windows and windowed aggregation.
//! - [`top_n`]: per key and time, the first n rows by an order.
//! - [`over_aggregate`]: aggregates over each row's last n rows per key.
//! - [`join`], [`window_join`]: keyed joins (regular, interval, windowed).
//!
//! - `testing` (tests only): a harness that plans one operator from a job file and drives one
//!   subtask by hand (batches, watermarks, checkpoint and restore), reading its output back.
//!
//! `union` has no operator: the planner merges the union's inputs into its consumer's input gate.

pub mod accumulators;
pub mod aggregate;
pub mod filter;
pub mod join;
pub mod key_by;
pub mod keyed;
pub mod map;
pub mod over_aggregate;
pub mod top_n;
pub mod window;
pub mod window_aggregate;
pub mod window_join;

#[cfg(test)]
pub mod testing;

use arrow_array::RecordBatch;

use crate::error::OperatorError;

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
    /// [`SubtaskRestore`](crate::exec::snapshot::SubtaskRestore)).
    fn snapshot_state(&mut self) -> Result<Option<serde_json::Value>, OperatorError> {
        Ok(None)
    }
}
