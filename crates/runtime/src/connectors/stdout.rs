//! `stdout`: JSON lines on standard output, flushed after every batch so a pipe sees results
//! as they come.

use arrow_array::RecordBatch;
use futures::future::BoxFuture;
use tokio::io::AsyncWriteExt;

use std::sync::Arc;

use crate::api::connector::{
    HostLimits, Hosted, Location, Reach, Secret, ServerFile, SinkConnector, SinkContext,
    SpecProblem,
};
use crate::api::{OperatorError, Sink, SinkFactory};
use crate::config::SinkFormat;
use crate::format::json::JsonEncoder;

#[derive(Default)]
pub struct Stdout {
    buffer: Vec<u8>,
    encoder: JsonEncoder,
}

impl Stdout {
    /// Writes in `format`.
    pub fn new(format: SinkFormat) -> Self {
        Stdout {
            buffer: Vec::new(),
            encoder: super::encoder(format),
        }
    }
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

/// The keys of `kind: stdout`: JSON lines on standard output.
#[derive(Clone, Debug, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct StdoutSinkSpec {
    /// The input: a node name, or `node.port`. Standard output has one writer: parallelism 1.
    pub from: String,
    /// `json` (the default), or `changelog-json` to write each row's change kind.
    #[serde(default, skip_serializing_if = "SinkFormat::is_default")]
    pub format: SinkFormat,
}

impl SinkConnector for StdoutSinkSpec {
    fn from(&self) -> &str {
        &self.from
    }

    fn parallelism(&self) -> Option<u32> {
        Some(1)
    }

    fn plan(
        &self,
        input: &arrow_schema::SchemaRef,
        _cx: SinkContext<'_>,
    ) -> Result<Arc<dyn SinkFactory>, Vec<SpecProblem>> {
        super::check_changes(input, self.format)?;
        let format = self.format;
        Ok(Arc::new(super::Simple(move || -> Box<dyn Sink> {
            Box::new(Stdout::new(format))
        })))
    }
}

/// It reaches nothing, reads and writes no file, holds no secret.
impl Hosted for StdoutSinkSpec {
    fn endpoints(&self) -> Vec<Reach> {
        Vec::new()
    }

    fn server_files(&self) -> Vec<ServerFile> {
        Vec::new()
    }

    fn locations(&self) -> Vec<Location> {
        Vec::new()
    }

    fn secrets(&self) -> Vec<Secret> {
        Vec::new()
    }

    fn within(&self, _limits: &HostLimits) -> Vec<SpecProblem> {
        Vec::new()
    }
}
