//! The source trait.

use arrow_array::RecordBatch;
use futures::future::BoxFuture;

use crate::error::OperatorError;

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
    /// stop request), nothing that was not returned is lost.
    fn next(&mut self) -> BoxFuture<'_, Result<SourceEvent, OperatorError>>;
}

/// What a subtask is, for factories.
#[derive(Clone, Debug)]
pub struct SubtaskContext {
    pub subtask: usize,
    pub parallelism: usize,
    pub batch_size: usize,
    pub metrics: std::sync::Arc<crate::exec::metrics::SubtaskMetrics>,
    /// Sources: which output ports are read downstream.
    pub want: Vec<bool>,
}

/// Makes the subtasks of one source node.
pub trait SourceFactory: Send + Sync {
    /// Once per run, before any subtask starts (list input files, say). Returns the total of
    /// the source's progress units when the input is bounded and its size known.
    fn prepare(&self, parallelism: usize) -> Result<Option<u64>, OperatorError>;

    fn create(&self, ctx: &SubtaskContext) -> Result<Box<dyn Source>, OperatorError>;
}
