//! Sources and sinks: where records enter and leave a job.
//!
//! # Layout
//! - [`nexmark`]: the Nexmark event generator (pure function of seed and event number).
//! - [`nexmark_source`]: the generator as a parallel, rate-limitable source.
//! - [`jsonl_source`]: JSON lines from files, split into chunks across subtasks.
//! - [`partitioned`]: what sources of partitioned logs share (assignment of partitions to
//!   subtasks, positions in checkpoints, per-partition watermarks and idleness, progress,
//!   record decoding), used by the Kafka and NATS sources.
//! - [`kafka`]: Kafka topics in (partition-aware, per-partition watermarks) and out
//!   (transactional).
//! - [`nats`]: NATS JetStream streams in (partitions read by ordered consumers from
//!   checkpointed sequences) and out (deterministic message ids and the duplicate window).
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
pub mod nats;
pub mod nexmark;
pub mod nexmark_source;
pub mod partitioned;
pub mod postgres;
pub mod stdout;

use std::sync::Arc;

use futures::future::BoxFuture;

use crate::api::{OperatorError, Sink, SinkFactory, SinkRestore, SubtaskContext};
use crate::spec::SinkSpec;

/// What the planner works out for a sink beyond its spec.
#[derive(Clone)]
pub struct SinkPlan {
    /// A NATS sink's subjects (its `{expression}` parts compiled by the planner).
    pub nats_subjects: Option<nats::sink::Subjects>,
    /// How long after a checkpoint's commit it may be repeated by a restore: the checkpoint
    /// timeout plus the longest restart delay (what a NATS stream's duplicate window must
    /// cover).
    pub repeat_within: std::time::Duration,
}

/// The factory of a sink spec whose input has `schema`, for node `node` of job `job`.
pub fn sink_factory(
    spec: &SinkSpec,
    schema: arrow_schema::SchemaRef,
    job: &str,
    node: &str,
    plan: SinkPlan,
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
        SinkSpec::Nats(n) => Arc::new(nats::sink::NatsSinkFactory::new(
            n,
            plan.nats_subjects
                .unwrap_or_else(|| nats::sink::Subjects::Literal(n.subject.clone())),
            job,
            node,
            plan.repeat_within,
        )),
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
