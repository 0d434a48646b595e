//! Sources and sinks: where records enter and leave a job.
//!
//! # Layout
//! - [`nexmark`]: the Nexmark event generator (pure function of seed and event number).
//! - [`nexmark_source`]: the generator as a parallel, rate-limitable source.
//! - [`jsonl_source`]: JSON lines from files, split into chunks across subtasks.
//! - [`kafka`]: Kafka topics in (partition-aware, per-partition watermarks) and out
//!   (transactional).
//! - [`blackhole`], [`stdout`], [`file_sink`], [`postgres`]: sinks.
//! - [`sink_factory`]: the factory of each sink kind from its spec.
//!
//! Every connector implements the contract of [`crate::api`] ([`Source`](crate::api::Source)
//! and [`SourceFactory`](crate::api::SourceFactory), or [`Sink`] and [`SinkFactory`]) and
//! imports nothing of the executor or the planner.

pub mod blackhole;
pub mod file_sink;
pub mod jsonl_source;
pub mod kafka;
pub mod nexmark;
pub mod nexmark_source;
pub mod postgres;
pub mod stdout;

use std::sync::Arc;

use futures::future::BoxFuture;

use crate::api::{OperatorError, Sink, SinkFactory, SinkRestore, SubtaskContext};
use crate::spec::SinkSpec;

/// The factory of a sink spec whose input has `schema`, for node `node` of job `job`.
pub fn sink_factory(
    spec: &SinkSpec,
    schema: arrow_schema::SchemaRef,
    job: &str,
    node: &str,
) -> Result<Arc<dyn SinkFactory>, String> {
    Ok(match spec {
        SinkSpec::Blackhole(_) => Arc::new(Simple(|| -> Box<dyn Sink> {
            Box::new(blackhole::Blackhole)
        })),
        SinkSpec::Stdout(_) => Arc::new(Simple(|| -> Box<dyn Sink> {
            Box::new(stdout::Stdout::default())
        })),
        SinkSpec::File(f) => Arc::new(file_sink::FileSinkFactory::new(std::path::PathBuf::from(
            &f.path,
        ))),
        SinkSpec::Postgres(p) => Arc::new(postgres::PostgresSinkFactory::new(p, schema)?),
        SinkSpec::Kafka(k) => Arc::new(kafka::sink::KafkaSinkFactory::new(k, schema, job, node)?),
    })
}

/// A sink that is not transactional.
struct Simple<F>(F);

impl<F: Fn() -> Box<dyn Sink> + Send + Sync> SinkFactory for Simple<F> {
    fn prepare(
        &self,
        _parallelism: usize,
        _restore: Option<&SinkRestore>,
    ) -> BoxFuture<'_, Result<(), OperatorError>> {
        Box::pin(async { Ok(()) })
    }

    fn create(&self, _ctx: &SubtaskContext) -> Result<Box<dyn Sink>, OperatorError> {
        Ok((self.0)())
    }
}
