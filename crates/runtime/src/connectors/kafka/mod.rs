//! `kafka`: a partition-aware source and a sink, both exactly-once with checkpoints, over
//! librdkafka (the `rdkafka` crate: the client Arroyo, RisingWave's connectors and most Rust
//! systems use; it speaks every broker version and security setup a user will point it at).
//!
//! # Source
//! Partitions are assigned to subtasks by [`owner`](crate::connectors::partitioned::owner), a
//! pure function of topic, partition and parallelism (Flink's `KafkaSourceEnumerator` rule): no
//! consumer group rebalances inside a job, and a restore at another parallelism simply assigns
//! the checkpointed partitions anew. What the source shares with the NATS source (assignment,
//! positions in checkpoints, per-partition watermarks, progress, record decoding) lives in
//! [`crate::connectors::partitioned`].
//! Each subtask reads with its own consumer on a reader thread (librdkafka's calls block), which
//! decodes records into batches ahead of the task over a small bounded channel, so decoding
//! overlaps the job's work. Every batch carries the offsets after it: the position a checkpoint
//! records is exactly what the task has emitted. Start positions are resolved to offsets before
//! the first record (so a restore never resolves `latest` a second time, later), partitions
//! created while the job runs are found every `partition-discovery` and read from their start,
//! and each partition's event time is tracked apart: the subtask's watermark follows the live
//! partition furthest behind, a partition quiet for `idle-timeout` stops holding it back.
//! See [`source`].
//!
//! # Sink
//! librdkafka cannot resume a transaction in another process (Flink's `KafkaSink` reaches into
//! the Java producer for that; KIP-939 adds it to Java clients only), so the two phases of
//! [`crate::api::sink`] are those of Flink's write-ahead sinks: between barriers a subtask keeps its
//! rows; at barrier `n` they become its transaction for snapshot `n`, stored in the checkpoint;
//! when the checkpoint completes, the rows are written in one Kafka transaction that also
//! commits a *marker*, the offset `n + 1` of a group of the writer's. A commit (again, on
//! restore) first reads the marker and skips what it already covers, so every row reaches
//! `read_committed` consumers once. Transactional ids are `<prefix>-<writer>`: a restarted job
//! fences its previous incarnation and aborts whatever it left open. See [`sink`].

// The runtime's one module with `unsafe`: librdkafka's batch consume, which rust-rdkafka does
// not wrap (see its docs).
#[allow(unsafe_code)]
mod fetch;
pub mod sink;
pub mod source;
pub mod spec;

use std::sync::Arc;
use std::time::Duration;

use arrow_schema::SchemaRef;
use indexmap::IndexMap;
use rdkafka::ClientConfig;

use self::spec::{
    KafkaMetadata, KafkaSinkFormat, KafkaSinkSpec, KafkaSourceSpec, StartFrom, StartPosition,
};
use crate::api::connector::{
    Endpoint, HostLimits, Hosted, Location, PlannedSource, Reach, Secret, ServerFile,
    SinkConnector, SinkContext, SourceConnector, SourceContext, SpecProblem,
};
use crate::api::{OperatorError, SinkFactory};
use crate::config::{EventTimeSpec, HumanDuration};
use crate::connectors::partitioned::records::{
    MetaType, MetaValue, MetadataField, ValueSpec, value_format,
};

impl MetadataField for KafkaMetadata {
    fn column_type(self) -> MetaType {
        match self {
            KafkaMetadata::Key | KafkaMetadata::Headers | KafkaMetadata::Topic => MetaType::Text,
            KafkaMetadata::Partition | KafkaMetadata::Offset => MetaType::Int,
            KafkaMetadata::Timestamp => MetaType::Time,
        }
    }
}

/// What a Kafka record carries besides its value.
pub struct RecordMeta<'a> {
    pub topic: &'a str,
    pub partition: i32,
    pub offset: i64,
    pub timestamp: Option<i64>,
    pub key: Option<&'a [u8]>,
    /// The headers as a JSON object, when a `headers` column is wanted.
    pub headers: Option<String>,
}

impl RecordMeta<'_> {
    /// The value of metadata column `field`.
    pub fn value(&self, field: KafkaMetadata) -> MetaValue<'_> {
        match field {
            KafkaMetadata::Key => MetaValue::Bytes(self.key),
            KafkaMetadata::Headers => MetaValue::Text(self.headers.as_deref()),
            KafkaMetadata::Topic => MetaValue::Text(Some(self.topic)),
            KafkaMetadata::Partition => MetaValue::Int(Some(i64::from(self.partition))),
            KafkaMetadata::Offset => MetaValue::Int(Some(self.offset)),
            KafkaMetadata::Timestamp => MetaValue::Time(self.timestamp),
        }
    }
}

/// How long one metadata, offsets or transaction request to the cluster may take before the
/// job fails with a message naming the brokers (librdkafka retries inside it).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Client properties weir sets itself, because the guarantees rely on them: a user's
/// `properties` may not override them.
const RESERVED: [&str; 7] = [
    "bootstrap.servers",
    "group.id",
    "enable.auto.commit",
    "enable.auto.offset.store",
    "enable.partition.eof",
    "isolation.level",
    "transactional.id",
];

/// Refuses `properties` that weir sets itself (a problem at plan time, at `properties`).
pub fn check_properties(properties: &IndexMap<String, String>) -> Result<(), SpecProblem> {
    let reserved: Vec<&str> = properties
        .keys()
        .filter(|k| RESERVED.contains(&k.as_str()))
        .map(String::as_str)
        .collect();
    match reserved.len() {
        0 => Ok(()),
        n => Err(SpecProblem::at(
            "properties",
            format!(
                "weir sets {} itself: leave {} out of `properties`",
                reserved.join(", "),
                if n == 1 { "it" } else { "them" }
            ),
        )),
    }
}

/// librdkafka properties a job submitted to a server may not set: each makes the client read
/// a file, run a command, load a library or call a URL on the server's machine. Any key ending
/// in `.location`, `.path`, `.paths`, `.cmd`, `.url` or `.file` is refused as well.
const SERVER_REFUSED_PROPERTIES: &[&str] = &[
    "plugin.library.paths",
    "sasl.kerberos.kinit.cmd",
    "sasl.kerberos.keytab",
    "sasl.oauthbearer.token.endpoint.url",
    "ssl.engine.location",
    "ssl.providers",
];

/// Secret properties whose names hold none of the secret words
/// ([`crate::api::connector::SECRET_WORDS`]: `sasl.password`, `ssl.key.password`,
/// `sasl.oauthbearer.client.secret` do): a private key given inline.
const SECRET_PROPERTIES: [&str; 2] = ["ssl.key.pem", "ssl_key.pem"];

/// What a Kafka client of a job reaches and holds, for a server: its brokers, the properties
/// that would act on the server's machine, and the secret properties.
struct Client<'a> {
    servers: &'a str,
    properties: &'a IndexMap<String, String>,
}

impl Client<'_> {
    fn endpoints(&self) -> Vec<Reach> {
        vec![Reach {
            at: "/bootstrap-servers".into(),
            endpoint: Endpoint::Kafka {
                servers: self.servers.to_owned(),
            },
        }]
    }

    fn server_files(&self) -> Vec<ServerFile> {
        self.properties
            .keys()
            .filter_map(|key| {
                let name = key.trim().to_ascii_lowercase();
                let refused = SERVER_REFUSED_PROPERTIES.contains(&name.as_str())
                    || [".location", ".path", ".paths", ".cmd", ".url", ".file"]
                        .iter()
                        .any(|end| name.ends_with(end));
                refused.then(|| ServerFile {
                    at: format!("/properties/{}", key.replace('~', "~0").replace('/', "~1")),
                    key: true,
                    what: format!(
                        "`{name}` makes the Kafka client read a file, run a command or reach a URL"
                    ),
                })
            })
            .collect()
    }

    fn secrets(&self) -> Vec<Secret> {
        self.properties
            .iter()
            .filter(|(k, _)| {
                crate::api::connector::names_a_secret(k)
                    || SECRET_PROPERTIES.contains(&&*k.to_ascii_lowercase())
            })
            .map(|(_, v)| Secret::Value(v.clone()))
            .collect()
    }
}

impl SourceConnector for KafkaSourceSpec {
    fn parallelism(&self) -> Option<u32> {
        self.parallelism
    }

    fn event_time(&self) -> &EventTimeSpec {
        &self.event_time
    }

    fn ports(&self) -> Vec<String> {
        crate::format::json::layout::variant_ports(&self.variants)
    }

    fn plan(&self, cx: SourceContext<'_>) -> Result<PlannedSource, Vec<SpecProblem>> {
        let mut problems = Vec::new();
        if self.partition_discovery < HumanDuration::from_millis(100) {
            problems.push(SpecProblem::at(
                "partition-discovery",
                format!(
                    "the partition discovery interval must be at least 100ms, not {}",
                    self.partition_discovery
                ),
            ));
        }
        if let Err(m) = self.start_from.millis() {
            problems.push(SpecProblem::at("start-from", m));
        }
        if self.start_from == StartFrom::Position(StartPosition::GroupOffsets)
            && self.group_id.is_none()
        {
            problems.push(SpecProblem::at(
                "start-from",
                "`start-from: group-offsets` needs the `group-id` whose offsets to start from",
            ));
        }
        if let Err(p) = check_properties(&self.properties) {
            problems.push(p);
        }
        let format = match value_format(
            ValueSpec {
                format: self.format,
                key: &self.key,
                schema: &self.schema,
                variants: &self.variants,
                keyed_records: true,
            },
            self.metadata.keys(),
        ) {
            Ok(format) => Some(format),
            Err(p) => {
                problems.push(p);
                None
            }
        };
        let Some(format) = format.filter(|_| problems.is_empty()) else {
            return Err(problems);
        };
        let ports = format.ports(&self.metadata);
        let factory = source::KafkaSourceFactory::new(self, format, cx.node)
            .map_err(|m| SpecProblem::at("topic", m))?;
        Ok(PlannedSource {
            ports,
            factory: Arc::new(factory),
        })
    }
}

impl Hosted for KafkaSourceSpec {
    fn endpoints(&self) -> Vec<Reach> {
        self.client().endpoints()
    }

    fn server_files(&self) -> Vec<ServerFile> {
        self.client().server_files()
    }

    fn locations(&self) -> Vec<Location> {
        Vec::new()
    }

    fn secrets(&self) -> Vec<Secret> {
        self.client().secrets()
    }

    /// Its reading is paced by the brokers.
    fn within(&self, _limits: &HostLimits) -> Vec<SpecProblem> {
        Vec::new()
    }
}

impl KafkaSourceSpec {
    fn client(&self) -> Client<'_> {
        Client {
            servers: &self.bootstrap_servers,
            properties: &self.properties,
        }
    }
}

impl SinkConnector for KafkaSinkSpec {
    fn from(&self) -> &str {
        &self.from
    }

    fn parallelism(&self) -> Option<u32> {
        self.parallelism
    }

    fn plan(
        &self,
        input: &SchemaRef,
        cx: SinkContext<'_>,
    ) -> Result<Arc<dyn SinkFactory>, Vec<SpecProblem>> {
        let mut problems = Vec::new();
        let mut key = Vec::new();
        for (i, column) in self.key.iter().enumerate() {
            match input.index_of(column) {
                Ok(index) => key.push(index),
                Err(_) => {
                    let names: Vec<&str> =
                        input.fields().iter().map(|f| f.name().as_str()).collect();
                    problems.push(SpecProblem::at(
                        &format!("/key/{i}"),
                        format!(
                            "the key column `{column}` is not a column of the input ({})",
                            names.join(", ")
                        ),
                    ));
                }
            }
        }
        if let Err(p) = check_properties(&self.properties) {
            problems.push(p);
        }
        if let Err(p) = super::check_log_sink_changes(input, self.format, &self.key, true) {
            problems.push(p);
        }
        if !problems.is_empty() {
            return Err(problems);
        }
        let skip_before = crate::changelog::ChangelogMode::of(input)
            .key()
            .is_some_and(|k| super::same_columns(k, &self.key));
        let factory: Arc<dyn crate::api::SinkFactory> =
            Arc::new(crate::api::two_phase::TwoPhaseFactory(
                sink::KafkaSinkFactory::new(self, (key, skip_before), cx.job, cx.node),
            ));
        Ok(match self.format {
            KafkaSinkFormat::Json => Arc::new(super::AfterImages(factory)),
            _ => factory,
        })
    }

    /// `upsert-json` applies each key's changes in order: every change of a key through one
    /// subtask.
    fn changes_key(&self) -> Option<&[String]> {
        (self.format == KafkaSinkFormat::UpsertJson).then_some(self.key.as_slice())
    }
}

impl Hosted for KafkaSinkSpec {
    fn endpoints(&self) -> Vec<Reach> {
        self.client().endpoints()
    }

    fn server_files(&self) -> Vec<ServerFile> {
        self.client().server_files()
    }

    fn locations(&self) -> Vec<Location> {
        Vec::new()
    }

    fn secrets(&self) -> Vec<Secret> {
        self.client().secrets()
    }

    fn within(&self, _limits: &HostLimits) -> Vec<SpecProblem> {
        Vec::new()
    }
}

impl KafkaSinkSpec {
    fn client(&self) -> Client<'_> {
        Client {
            servers: &self.bootstrap_servers,
            properties: &self.properties,
        }
    }
}

/// A client configuration: the user's properties, then weir's.
pub fn client_config(
    bootstrap_servers: &str,
    properties: &IndexMap<String, String>,
    ours: &[(&str, &str)],
) -> ClientConfig {
    let mut config = ClientConfig::new();
    for (k, v) in properties {
        config.set(k, v);
    }
    config.set("bootstrap.servers", bootstrap_servers);
    for (k, v) in ours {
        config.set(*k, *v);
    }
    config
}

/// An error of the cluster: the message says what weir was doing and what the client said
/// (the job's error is shown as one line), and the client's error is kept as the cause.
pub fn external(message: impl Into<String>, error: rdkafka::error::KafkaError) -> OperatorError {
    let message = format!("{}: {error}", message.into());
    OperatorError::external(message, std::io::Error::other(error))
}

/// A client whose drop runs on a thread of its own. Dropping a consumer that has a `group.id`
/// closes it, and librdkafka's close waits for the group's coordinator: with the broker gone
/// that wait has no end, and no async worker, job teardown or server shutdown may hang on
/// it. The closing thread ends when the close does (or with the process).
pub struct Closing<T: Send + 'static>(Option<T>);

impl<T: Send + 'static> Closing<T> {
    pub fn new(client: T) -> Self {
        Closing(Some(client))
    }
}

impl<T: Send + 'static> std::ops::Deref for Closing<T> {
    type Target = T;

    fn deref(&self) -> &T {
        match &self.0 {
            Some(client) => client,
            // Only `drop` takes the client.
            None => unreachable!("a Kafka client used after its drop"),
        }
    }
}

impl<T: Send + 'static> Drop for Closing<T> {
    fn drop(&mut self) {
        if let Some(client) = self.0.take() {
            // If no thread can be started, the client closes here, as it would have anyway.
            let _ = std::thread::Builder::new()
                .name("kafka-close".into())
                .spawn(move || drop(client));
        }
    }
}

/// A client's global errors (librdkafka's error callback). The connection errors a broker's
/// restart causes are warnings: librdkafka reconnects by itself, and an operation that needs
/// the broker fails with its own message if it stays away. Everything else is an error.
pub fn client_error(error: &rdkafka::error::KafkaError, reason: &str) {
    use rdkafka::types::RDKafkaErrorCode as Code;
    // The end of a partition, which `enable.partition.eof` asks for: the reader sees it on
    // its own poll too.
    if matches!(error, rdkafka::error::KafkaError::PartitionEOF(_))
        || error.rdkafka_error_code() == Some(Code::PartitionEOF)
    {
        return;
    }
    let transient = matches!(
        error.rdkafka_error_code(),
        Some(
            Code::AllBrokersDown
                | Code::BrokerTransportFailure
                | Code::Resolve
                | Code::OperationTimedOut
                | Code::RequestTimedOut
                | Code::BrokerNotAvailable
        )
    );
    if transient {
        tracing::warn!(target: "librdkafka", "Kafka client: {error} ({reason})");
    } else {
        tracing::error!(target: "librdkafka", "Kafka client: {error} ({reason})");
    }
}

/// Runs a blocking librdkafka call from async code: on a multi-threaded runtime the worker
/// hands its other tasks to the rest first (`block_in_place`), elsewhere it just blocks.
pub fn blocking<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(f)
        }
        _ => f(),
    }
}
