//! `stdout`: JSON lines on standard output, flushed after every batch so a pipe sees results
//! as they come.

use arrow_array::RecordBatch;
use futures::future::BoxFuture;
use tokio::io::AsyncWriteExt;

use crate::api::{OperatorError, Sink};
use crate::format::json::JsonEncoder;

#[derive(Default)]
pub struct Stdout {
    buffer: Vec<u8>,
    encoder: JsonEncoder,
}

impl Sink for Stdout {
    fn write(&mut self, batch: RecordBatch) -> BoxFuture<'_, Result<(), OperatorError>> {
        Box::pin(async move {
            self.buffer.clear();
            self.encoder
                .encode(&batch, &mut self.buffer)
                .map_err(|e| OperatorError::Internal(e.to_string()))?;
            let mut out = tokio::io::stdout();
            out.write_all(&self.buffer)
                .await
                .map_err(|e| OperatorError::external("writing to standard output", e))?;
            out.flush()
                .await
                .map_err(|e| OperatorError::external("writing to standard output", e))
        })
    }

    fn finish(
        &mut self,
        _committed: u64,
    ) -> BoxFuture<'_, Result<Option<serde_json::Value>, OperatorError>> {
        Box::pin(async { Ok(None) })
    }
}
