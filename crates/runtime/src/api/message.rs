//! The one in-band message that flows between tasks.

use arrow_array::RecordBatch;
pub use weir_checkpoint::{Barrier, BarrierKind};

/// What a channel carries, in order. Data and control share the channel so that a watermark
/// or a checkpoint barrier can never overtake the records sent before it.
#[derive(Clone, Debug)]
pub enum Message {
    /// Records, moved in batches so per-message channel and wake-up costs are amortised.
    Batch(RecordBatch),
    /// Event-time progress of the sending subtask.
    Watermark(Watermark),
    /// Everything before this belongs to checkpoint `id`, everything after to the next.
    Barrier(Barrier),
    /// The sender has no more messages; it drops its end of the channel after this.
    EndOfInput,
}

/// Event-time progress of one sender.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Watermark {
    /// No record with an event time at or before this (epoch ms) will follow.
    At(i64),
    /// The sender produces nothing for now and must not hold back the receiver's watermark;
    /// its next watermark or batch makes it active again.
    Idle,
}
