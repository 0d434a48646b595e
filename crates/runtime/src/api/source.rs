//! The source contract: a source subtask and its factory.

use arrow_array::RecordBatch;
use futures::future::BoxFuture;

use super::{OperatorError, SubtaskContext};

/// What a source produced.
#[derive(Debug)]
pub enum SourceEvent {
    /// Batches, each for an output port (by index).
    Batches(Vec<(usize, RecordBatch)>),
    /// A bounded source has no more records.
    End,
}

/// One subtask of a source. The task owning it emits what it returns, derives watermarks from
/// the event-time column, and stops calling it on end or on a stop request.
pub trait Source: Send {
    /// The next batches. Must be cancel-safe: if the future is dropped before completing (a
    /// stop request, a checkpoint barrier to inject), nothing that was not returned is lost
    /// and [`snapshot`](Self::snapshot) describes exactly what was returned.
    fn next(&mut self) -> BoxFuture<'_, Result<SourceEvent, OperatorError>>;

    /// A bound on the event time the source's watermark may reach, when the largest event
    /// time returned so far is not one: a subtask reading several splits (after a restore at
    /// a lower parallelism) returns one split's batch at a time, and its watermark must wait
    /// for the split that is furthest behind (as Flink's per-split watermarks do). `None`:
    /// no bound.
    fn watermark_bound(&self) -> Option<i64> {
        None
    }

    /// Whether nothing the source reads can hold event time back (a Kafka subtask without
    /// partitions, or whose partitions have all been quiet for `idle-timeout`): after its
    /// next batches the task marks itself idle at once, as it does after `idle-timeout`
    /// without batches, and active again with the next rows.
    fn idle(&self) -> bool {
        false
    }

    /// The position after everything returned so far, for a checkpoint. A restored subtask
    /// receives the positions of every old subtask (see [`SourceFactory::create`]).
    fn snapshot(&mut self) -> Result<Option<serde_json::Value>, OperatorError> {
        Ok(None)
    }
}

/// Makes the subtasks of one source node.
pub trait SourceFactory: Send + Sync {
    /// Once per run, before any subtask starts (list input files, say). Returns the total of
    /// the source's progress units when the input is bounded and its size known.
    fn prepare(&self, parallelism: usize) -> Result<Option<u64>, OperatorError>;

    /// A subtask. When restoring, `ctx.restore` holds the positions of every old subtask: the
    /// new subtasks split them between themselves, each taking its share.
    fn create(&self, ctx: &SubtaskContext) -> Result<Box<dyn Source>, OperatorError>;

    /// A checkpoint completed; `states` are the positions its subtasks recorded. For telling
    /// an external system how far the job got (a Kafka consumer group's offsets); must not
    /// block, and nothing may depend on it: the checkpoint is the source of truth.
    fn checkpoint_complete(&self, states: Vec<serde_json::Value>) {
        let _ = states;
    }

    /// Projection pushdown, offered once at planning: `read[port][column]` says whether
    /// anything downstream reads that column of that port (the event-time column always
    /// counts as read). A source that can skip building the others returns a factory that
    /// does, their columns then arriving all null; the default builds every column.
    fn project(&self, read: &[Vec<bool>]) -> Option<std::sync::Arc<dyn SourceFactory>> {
        let _ = read;
        None
    }
}
