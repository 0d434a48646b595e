//! `blackhole`: discards records. The task counts them in the sink's metrics, which is all a
//! benchmark needs.

use arrow_array::RecordBatch;
use futures::future::BoxFuture;

use crate::api::{OperatorError, Sink};

pub struct Blackhole;

impl Sink for Blackhole {
    fn write(&mut self, batch: RecordBatch) -> BoxFuture<'_, Result<(), OperatorError>> {
        drop(batch);
        Box::pin(async { Ok(()) })
    }

    fn finish(
        &mut self,
        _committed: u64,
    ) -> BoxFuture<'_, Result<Option<serde_json::Value>, OperatorError>> {
        Box::pin(async { Ok(None) })
    }
}
