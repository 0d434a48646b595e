//! Sources and sinks: where records enter and leave a job. One module per connector, and the
//! registry below that lists them.
//!
//! A connector is its module: its spec (the keys of its `kind:`, documented where they are
//! declared, so that `weir schema` and the book carry them), the [`SourceConnector`] or
//! [`SinkConnector`] and [`Hosted`] impls of that spec (how it plans, and what a server asks
//! of it), and its [`Source`](crate::api::Source) or [`Sink`] with their factories. Adding one
//! is its module and one line in [`sources!`] or [`sinks!`] here: the spec enums
//! ([`SourceSpec`], [`SinkSpec`]) and their dispatch are made from those lists, so the planner
//! and a server reach every connector through the contract of [`crate::api::connector`] and
//! match on no kind.
//!
//! # Layout
//! - [`nexmark`]: the Nexmark event generator (a pure function of seed and event number) and
//!   its parallel, rate-limitable source.
//! - [`jsonl`]: JSON lines from files, split into chunks across subtasks.
//! - [`partitioned`]: what sources of partitioned logs share (assignment of partitions to
//!   subtasks, positions in checkpoints, per-partition watermarks and idleness, progress,
//!   record decoding), used by the Kafka and NATS sources.
//! - [`kafka`]: Kafka topics in (partition-aware, per-partition watermarks) and out
//!   (transactional).
//! - [`nats`]: NATS JetStream streams in (partitions read by ordered consumers from
//!   checkpointed sequences) and out (deterministic message ids, commit markers).
//! - [`postgres_cdc`]: PostgreSQL tables' changes in, from a logical replication slot.
//! - [`blackhole`], [`stdout`], [`file`], [`postgres`]: sinks.
//! - [`iceberg`]: an Apache Iceberg table out, one Iceberg snapshot per completed checkpoint.
//!
//! Every connector implements the contract of [`crate::api`] and imports nothing of the
//! executor or the planner.

pub mod blackhole;
pub mod file;
pub mod iceberg;
pub mod jsonl;
pub mod kafka;
pub mod nats;
pub mod nexmark;
pub mod partitioned;
pub mod postgres;
pub mod postgres_cdc;
pub mod stdout;

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::api::connector::{Hosted, SinkConnector, SourceConnector, SpecProblem};
use crate::api::{OperatorError, Sink, SinkFactory, SinkRestore, SubtaskContext};
use crate::changelog;
use crate::config::SinkFormat;
use crate::format::json::JsonEncoder;

/// Every source kind, one line each: its variant, its spec (boxed when large) and its `kind:`
/// in job files. [`SourceSpec`] and its dispatch are made from this list.
macro_rules! sources {
    ($( $(#[$doc:meta])* $variant:ident($spec:ty) = $kind:literal, )*) => {
        /// A source of records.
        #[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
        #[serde(tag = "kind")]
        pub enum SourceSpec {
            $( $(#[$doc])* #[serde(rename = $kind)] $variant($spec), )*
        }

        impl SourceSpec {
            /// The node's `kind:` in the job file.
            pub fn kind(&self) -> &'static str {
                match self {
                    $( SourceSpec::$variant(_) => $kind, )*
                }
            }

            /// The connector, through its contract.
            pub fn connector(&self) -> &dyn SourceConnector {
                match self {
                    $( SourceSpec::$variant(s) => s, )*
                }
            }

            /// What a server asks of it.
            pub fn hosted(&self) -> &dyn Hosted {
                match self {
                    $( SourceSpec::$variant(s) => s, )*
                }
            }
        }

        /// Every source kind's `kind:`.
        pub const SOURCE_KINDS: &[&str] = &[$( $kind, )*];
    };
}

/// Every sink kind, one line each, as [`sources!`].
macro_rules! sinks {
    ($( $(#[$doc:meta])* $variant:ident($spec:ty) = $kind:literal, )*) => {
        /// Where results go.
        #[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
        #[serde(tag = "kind")]
        pub enum SinkSpec {
            $( $(#[$doc])* #[serde(rename = $kind)] $variant($spec), )*
        }

        impl SinkSpec {
            /// The node's `kind:` in the job file.
            pub fn kind(&self) -> &'static str {
                match self {
                    $( SinkSpec::$variant(_) => $kind, )*
                }
            }

            /// The connector, through its contract.
            pub fn connector(&self) -> &dyn SinkConnector {
                match self {
                    $( SinkSpec::$variant(s) => s, )*
                }
            }

            /// What a server asks of it.
            pub fn hosted(&self) -> &dyn Hosted {
                match self {
                    $( SinkSpec::$variant(s) => s, )*
                }
            }
        }

        /// Every sink kind's `kind:`.
        pub const SINK_KINDS: &[&str] = &[$( $kind, )*];
    };
}

sources! {
    /// The Nexmark auction generator. Output ports: `person`, `auction`, `bid`.
    Nexmark(nexmark::NexmarkSourceSpec) = "nexmark",
    /// JSON lines from files, one object per line, decoded by a declared schema.
    Jsonl(jsonl::JsonlSourceSpec) = "jsonl",
    /// Records of Kafka topics, partition by partition, exactly-once with checkpoints.
    Kafka(Box<kafka::spec::KafkaSourceSpec>) = "kafka",
    /// Messages of a NATS JetStream stream, partition by partition, exactly-once with
    /// checkpoints.
    Nats(Box<nats::spec::NatsSourceSpec>) = "nats",
    /// The changes of PostgreSQL tables from a logical replication slot: a consistent copy,
    /// then every insert, update and delete, exactly once with checkpoints. Each table is an
    /// upsert port keyed by its primary key.
    PostgresCdc(Box<postgres_cdc::PostgresCdcSourceSpec>) = "postgres-cdc",
}

sinks! {
    /// Discards records, counting them: for benchmarks.
    Blackhole(blackhole::BlackholeSinkSpec) = "blackhole",
    /// JSON lines on standard output.
    Stdout(stdout::StdoutSinkSpec) = "stdout",
    /// JSON lines in files `part-<subtask>.jsonl` of a directory, each written to a temporary
    /// file and renamed into place when complete.
    File(file::FileSinkSpec) = "file",
    /// Rows into a PostgreSQL table, batched, through a pooled connection; exactly once with
    /// checkpoints (staged, then moved when the checkpoint completes).
    Postgres(postgres::PostgresSinkSpec) = "postgres",
    /// Rows into a Kafka topic as JSON records; exactly once with checkpoints (one Kafka
    /// transaction per completed checkpoint).
    Kafka(kafka::spec::KafkaSinkSpec) = "kafka",
    /// Rows into a NATS JetStream stream as JSON messages; exactly once with checkpoints
    /// (published when the checkpoint completes, with deterministic `Nats-Msg-Id`s).
    Nats(nats::spec::NatsSinkSpec) = "nats",
    /// Rows into an Apache Iceberg table (Parquet data files, a SQL catalog on SQLite or
    /// PostgreSQL, a local or S3 warehouse); exactly once with checkpoints (one Iceberg
    /// snapshot per completed checkpoint).
    Iceberg(Box<iceberg::IcebergSinkSpec>) = "iceberg",
}

impl SourceSpec {
    pub fn parallelism(&self) -> Option<u32> {
        self.connector().parallelism()
    }

    pub fn event_time(&self) -> &crate::config::EventTimeSpec {
        self.connector().event_time()
    }
}

impl SinkSpec {
    pub fn from(&self) -> &str {
        self.connector().from()
    }

    pub fn parallelism(&self) -> Option<u32> {
        self.connector().parallelism()
    }
}

/// The JSON lines encoder of a sink's `format`.
pub(crate) fn encoder(format: SinkFormat) -> JsonEncoder {
    match format {
        SinkFormat::Json => JsonEncoder::new(),
        SinkFormat::ChangelogJson => JsonEncoder::changelog(),
    }
}

/// Whether a sink writing `format` can take its input's changes: a problem at its `from`
/// when the input updates in ways the format cannot say (see [`changelog::sink_takes`]), or
/// has a column that `changelog-json`'s `"op"` field would hide.
pub(crate) fn check_changes(input: &SchemaRef, format: SinkFormat) -> Result<(), SpecProblem> {
    let mode = changelog::ChangelogMode::of(input);
    changelog::sink_takes(&mode, format.is_changelog())
        .map_err(|message| SpecProblem::at("from", message))?;
    if format.is_changelog() && input.fields().iter().any(|f| f.name() == "op") {
        return Err(SpecProblem::at(
            "format",
            "changelog-json writes each row's kind as a field `op`, and the input has a column \
             `op`; rename it (a map before the sink)",
        ));
    }
    Ok(())
}

/// Whether a log sink (Kafka, NATS) writing `format` can take its input's changes: `json`
/// only an updating stream with a key that never deletes (as [`check_changes`]), the change
/// formats any stream; `upsert-json` needs the record `key` and records that have one.
pub(crate) fn check_log_sink_changes(
    input: &SchemaRef,
    format: kafka::spec::KafkaSinkFormat,
    key: &[String],
    keyed_records: bool,
) -> Result<(), SpecProblem> {
    use kafka::spec::KafkaSinkFormat as F;
    match format {
        F::Json => check_changes(input, SinkFormat::Json),
        F::ChangelogJson => check_changes(input, SinkFormat::ChangelogJson),
        F::DebeziumJson => Ok(()),
        F::UpsertJson if !keyed_records => Err(SpecProblem::at(
            "format",
            "`format: upsert-json` deletes by a record's key, and a NATS message has none: use \
             `debezium-json` or `changelog-json`, which carry each row's kind",
        )),
        F::UpsertJson if key.is_empty() => Err(SpecProblem::at(
            "format",
            "`format: upsert-json` needs `key`: the columns that identify a row (a delete is a \
             record of that key without a value)",
        )),
        F::UpsertJson => Ok(()),
    }
}

/// Whether two lists name the same columns, in any order.
pub(crate) fn same_columns(a: &[String], b: &[String]) -> bool {
    a.len() == b.len() && a.iter().all(|c| b.contains(c))
}

/// A sink factory whose sinks receive only the new versions of an updating stream's rows
/// ([`changelog::after_images`]): for sinks that write one message per row and have no format
/// for a row's kind yet (Kafka, NATS). [`check_changes`] has made sure the stream is keyed and
/// never deletes, so the last message per key is the key's row.
pub(crate) struct AfterImages(pub Arc<dyn SinkFactory>);

struct AfterImagesSink(Box<dyn Sink>);

impl Sink for AfterImagesSink {
    fn write(&mut self, batch: RecordBatch) -> BoxFuture<'_, Result<(), OperatorError>> {
        match changelog::after_images(batch) {
            Ok(batch) if batch.num_rows() == 0 => Box::pin(async { Ok(()) }),
            Ok(batch) => self.0.write(batch),
            Err(e) => Box::pin(async move { Err(OperatorError::from(e)) }),
        }
    }

    fn prepare_commit(
        &mut self,
        checkpoint: u64,
        committed: u64,
    ) -> BoxFuture<'_, Result<Option<serde_json::Value>, OperatorError>> {
        self.0.prepare_commit(checkpoint, committed)
    }

    fn finish(
        &mut self,
        committed: u64,
    ) -> BoxFuture<'_, Result<Option<serde_json::Value>, OperatorError>> {
        self.0.finish(committed)
    }
}

impl SinkFactory for AfterImages {
    fn prepare(
        &self,
        parallelism: usize,
        restore: Option<&SinkRestore>,
    ) -> BoxFuture<'_, Result<(), OperatorError>> {
        self.0.prepare(parallelism, restore)
    }

    fn create(&self, ctx: &SubtaskContext) -> Result<Box<dyn Sink>, OperatorError> {
        Ok(Box::new(AfterImagesSink(self.0.create(ctx)?)))
    }

    fn commit(
        &self,
        transactions: Vec<serde_json::Value>,
    ) -> BoxFuture<'static, Result<(), OperatorError>> {
        self.0.commit(transactions)
    }

    fn pool_metrics(&self) -> Option<weir_connection_pool::PoolMetrics> {
        self.0.pool_metrics()
    }

    fn abort(&self, transactions: Vec<serde_json::Value>, after: u64) -> Result<(), OperatorError> {
        self.0.abort(transactions, after)
    }
}

/// A sink that is not transactional: it makes each subtask's sink, and commits nothing.
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
