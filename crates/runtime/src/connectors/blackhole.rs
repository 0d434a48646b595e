//! `blackhole`: discards records. The task counts them in the sink's metrics, which is all a
//! benchmark needs.

use arrow_array::RecordBatch;
use futures::future::BoxFuture;

use std::sync::Arc;

use crate::api::connector::{
    HostLimits, Hosted, Location, Reach, Secret, ServerFile, SinkConnector, SinkContext,
    SpecProblem,
};
use crate::api::{OperatorError, Sink, SinkFactory};

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

/// The keys of `kind: blackhole`: discards records, counting them.
#[derive(Clone, Debug, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct BlackholeSinkSpec {
    /// The input: a node name, or `node.port`.
    pub from: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1024))]
    pub parallelism: Option<u32>,
}

impl SinkConnector for BlackholeSinkSpec {
    fn from(&self) -> &str {
        &self.from
    }

    fn parallelism(&self) -> Option<u32> {
        self.parallelism
    }

    fn plan(
        &self,
        _input: &arrow_schema::SchemaRef,
        _cx: SinkContext<'_>,
    ) -> Result<Arc<dyn SinkFactory>, Vec<SpecProblem>> {
        Ok(Arc::new(super::Simple(|| -> Box<dyn Sink> {
            Box::new(Blackhole)
        })))
    }
}

/// It reaches nothing, reads and writes no file, holds no secret.
impl Hosted for BlackholeSinkSpec {
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
