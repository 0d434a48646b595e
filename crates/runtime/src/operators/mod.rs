//! Operators: the synchronous, per-subtask logic between sources and sinks.
//!
//! One trait, one file per operator. An operator receives whole batches and pushes its output
//! batches into `out`; the task that owns it moves them on, either straight into the next chained
//! operator (no channel hop) or into an exchange. Operators never block and never see channels.
//!
//! # Layout
//! - [`filter`]: keep rows where a SQL condition is true.
//! - [`map`]: compute columns from SQL expressions.
//! - [`key_by`]: key expressions and key hashing for the hash exchange and keyed operators.
//! - [`aggregate`]: running keyed aggregation (count, sum, min, max, avg).
//!
//! `union` has no operator: the planner merges the union's inputs into its consumer's input gate.

pub mod aggregate;
pub mod filter;
pub mod key_by;
pub mod map;

use arrow_array::RecordBatch;

use crate::error::OperatorError;

/// The logic of one subtask of one operator.
pub trait Operator: Send {
    /// Processes one batch from logical input `input` (0 for single-input operators), pushing
    /// any output batches into `out`.
    fn process_batch(
        &mut self,
        input: usize,
        batch: RecordBatch,
        out: &mut Vec<RecordBatch>,
    ) -> Result<(), OperatorError>;

    /// The input watermark advanced to `watermark` (epoch ms; no record at or before it will
    /// follow). Returns the output watermark, which may lag (to hold back output) but never
    /// run ahead of the input. Output records go into `out` and precede the watermark.
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
}
