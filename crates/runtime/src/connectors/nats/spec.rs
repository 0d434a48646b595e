//! The keys of the NATS JetStream source and sink (`kind: nats`).

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::api::connector::SpecProblem;
use crate::config::{ByteSize, EventTimeSpec, OnError};
use crate::connectors::kafka::spec::{Delivery, KafkaFormat};
use crate::format::json::JsonType;

/// The placeholder of a partition's number in `subjects`.
pub const PARTITION_PLACEHOLDER: &str = "{partition}";

/// Messages of a JetStream stream, read partition by partition with ordered, ephemeral
/// consumers from the stream sequences in weir's checkpoints: exactly-once with checkpoints,
/// and no consumer state on the server is needed.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct NatsSourceSpec {
    /// Servers to connect to, `host:port[,host:port...]` (each may start with `nats://`).
    #[schemars(length(min = 1))]
    pub servers: String,
    /// The JetStream stream to read. It must exist.
    #[schemars(length(min = 1))]
    pub stream: String,
    /// The subjects to read (a filter, wildcards allowed; default: all of the stream's). With
    /// `partitions`, it holds `{partition}` where a partition's number stands in its subjects,
    /// as a subject mapping with `partition(n, ...)` writes them (`bids.{partition}.>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub subjects: Option<String>,
    /// The stream's partitions (numbered 0 to n - 1 in `subjects`); each is read by one
    /// subtask, with its own watermark. 1: the stream is one partition.
    #[serde(default = "default_partitions")]
    #[schemars(range(min = 1, max = 4096))]
    pub partitions: u32,
    /// How message payloads are decoded: `json` (one object per message, by `schema` or
    /// `variants`, as the `jsonl` source), `raw` (the payload as the string column `value`) or
    /// `debezium-json` (Debezium's change events: `before`, `after` and `op`, an updating
    /// stream; see docs/changelog.md). `upsert-json` is Kafka's alone: a NATS message has no
    /// key.
    #[serde(default)]
    pub format: KafkaFormat,
    /// `debezium-json`: optionally, the table's primary key, so that sinks that apply changes
    /// by a key know it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub key: Vec<String>,
    /// `format: json`: one shape for every message (field name → type).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<IndexMap<String, JsonType>>,
    /// `format: json`: messages tagged by variant (each variant an output port).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variants: Option<IndexMap<String, IndexMap<String, JsonType>>>,
    /// Columns of message metadata, by the name the job gives them: `subject`, `sequence` (the
    /// stream sequence), `time` (when the stream stored the message, a timestamp), `headers`
    /// (a JSON object, as a string), `partition`. Added to every output port.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub metadata: IndexMap<String, NatsMetadata>,
    /// Where partitions without a checkpointed sequence start: `first`, `new` (only messages
    /// stored after the job starts), a stream sequence (a number), or a time (RFC 3339): the
    /// first message stored at or after it.
    #[serde(default)]
    pub start_from: NatsStartFrom,
    /// `end`: stop at the stream's last sequence as it is when the subtask starts (a bounded
    /// read, for backfills and tests). Leave out to read forever.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_at: Option<NatsStopAt>,
    /// A durable consumer (one per partition, `<durable>-<partition>`) acknowledged up to the
    /// sequences of each completed checkpoint, so that `nats consumer info` shows the job's
    /// progress. weir never reads from it: positions live in checkpoints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub durable: Option<String>,
    /// What a message that does not decode does: fail the job (naming stream, subject and
    /// sequence), or skip it and count it.
    #[serde(default)]
    pub on_error: OnError,
    /// Largest payload read; larger fail the job or are skipped, by `on-error`.
    #[serde(default = "default_max_message_size")]
    pub max_message_size: ByteSize,
    /// Sign-in: `user` and `password`, or `token`, or `creds-file` (a JWT and nkey seed). Write
    /// secrets as `${VAR}` to read them from the environment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// A credentials file (`.creds`: a user JWT and its nkey seed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creds_file: Option<String>,
    /// Subtasks of this source (default: the job's parallelism). A subtask without partitions
    /// marks itself idle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1024))]
    pub parallelism: Option<u32>,
    /// Watermarks: `column` names the event-time column (a metadata `time` column for the
    /// time the stream stored the message). Each partition's event time is tracked apart and a
    /// subtask's watermark follows the partition furthest behind; `idle-timeout` applies per
    /// partition.
    #[serde(default)]
    pub event_time: EventTimeSpec,
}

fn default_partitions() -> u32 {
    1
}

fn default_max_message_size() -> ByteSize {
    ByteSize(8 * 1024 * 1024)
}

/// How weir signs in to the NATS servers (the keys of a source or sink).
#[derive(Clone, Debug, Default)]
pub struct NatsAuth {
    pub user: Option<String>,
    pub password: Option<String>,
    pub token: Option<String>,
    pub creds_file: Option<String>,
}

impl NatsAuth {
    /// The sign-in of a connector's keys; an empty value (`token: ${NATS_TOKEN:-}` with the
    /// variable unset) counts as left out.
    fn of(
        user: &Option<String>,
        password: &Option<String>,
        token: &Option<String>,
        creds_file: &Option<String>,
    ) -> Self {
        let given = |v: &Option<String>| v.clone().filter(|v| !v.is_empty());
        NatsAuth {
            user: given(user),
            password: given(password),
            token: given(token),
            creds_file: given(creds_file),
        }
    }
}

impl NatsSourceSpec {
    pub fn auth(&self) -> NatsAuth {
        NatsAuth::of(&self.user, &self.password, &self.token, &self.creds_file)
    }
}

impl NatsSinkSpec {
    pub fn auth(&self) -> NatsAuth {
        NatsAuth::of(&self.user, &self.password, &self.token, &self.creds_file)
    }
}

impl NatsAuth {
    /// Refuses contradictory sign-ins: the key at fault and why.
    pub fn check(&self) -> Result<(), SpecProblem> {
        const ONE_WAY: &str =
            "give one way to sign in: `user` and `password`, `token`, or `creds-file`";
        match (&self.user, &self.password, &self.token, &self.creds_file) {
            (Some(_), None, _, _) => Err(SpecProblem::at("user", "`user` needs its `password`")),
            (None, Some(_), _, _) => {
                Err(SpecProblem::at("password", "`password` needs its `user`"))
            }
            (Some(_), Some(_), Some(_), _) | (_, _, Some(_), Some(_)) => {
                Err(SpecProblem::at("token", ONE_WAY))
            }
            (Some(_), Some(_), _, Some(_)) => Err(SpecProblem::at("creds-file", ONE_WAY)),
            _ => Ok(()),
        }
    }
}

/// A metadata field of a NATS message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum NatsMetadata {
    Subject,
    Sequence,
    Time,
    Headers,
    Partition,
}

/// Where a partition without a checkpointed sequence starts (default `first`).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum NatsStartFrom {
    Position(NatsStartPosition),
    /// A stream sequence.
    Sequence(u64),
    /// An RFC 3339 time.
    Time(String),
}

impl Default for NatsStartFrom {
    fn default() -> Self {
        NatsStartFrom::Position(NatsStartPosition::First)
    }
}

impl NatsStartFrom {
    /// The time to start from, when the start is a time.
    pub fn time(&self) -> Result<Option<chrono::DateTime<chrono::FixedOffset>>, String> {
        match self {
            NatsStartFrom::Time(text) => chrono::DateTime::parse_from_rfc3339(text)
                .map(Some)
                .map_err(|e| {
                    format!(
                        "`{text}` is not `first`, `new`, a stream sequence or an RFC 3339 time \
                         ({e})"
                    )
                }),
            _ => Ok(None),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum NatsStartPosition {
    First,
    New,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum NatsStopAt {
    End,
}

/// Rows into a JetStream stream as JSON messages, one message per row.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct NatsSinkSpec {
    /// The input: a node name, or `node.port`.
    pub from: String,
    /// Servers to connect to, `host:port[,host:port...]`.
    #[schemars(length(min = 1))]
    pub servers: String,
    /// The subject of each message: a literal (`q5.out`), or with `{expression}` parts, each an
    /// SQL expression over the input's columns whose value is written in its place
    /// (`bids.{auction % 4}`), so that rows go to subjects (and partitions) by their values.
    /// Every subject must belong to a stream.
    #[schemars(length(min = 1))]
    pub subject: String,
    /// The stream the subjects belong to, when the sink should check its duplicate window
    /// before it starts (`delivery: exactly-once` requires it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub stream: Option<String>,
    /// The payload's encoding: `json` (the row as an object; an updating input must be keyed
    /// and never delete, and only new versions are written), `changelog-json` (the row with an
    /// `"op"` field) or `debezium-json` (`{"before", "after", "op"}`, as Flink writes it).
    /// `upsert-json` is Kafka's alone: a NATS message has no key.
    #[serde(default)]
    pub format: crate::connectors::kafka::spec::KafkaSinkFormat,
    /// `exactly-once` (with checkpoints): each checkpoint's rows are published when it
    /// completes, each with a `Nats-Msg-Id` made of job, sink, subtask, checkpoint and
    /// sequence, so a publish repeated after a failure is dropped by the stream's duplicate
    /// window. `at-least-once`: rows are published as they come, and every checkpoint waits
    /// for their acknowledgements.
    #[serde(default)]
    pub delivery: Delivery,
    /// Publishes awaiting their acknowledgement at once, per subtask.
    #[serde(default = "default_max_in_flight")]
    #[schemars(range(min = 1, max = 65536))]
    pub max_in_flight: u32,
    /// `exactly-once`: the JetStream key-value bucket where each writer's commits are
    /// recorded (created, with history 1, if missing), so that a commit repeated after the
    /// stream's duplicate window (a job resumed the next day) still stores nothing twice.
    #[serde(default = "default_commit_markers")]
    #[schemars(length(min = 1, max = 64), regex(pattern = r"^[A-Za-z0-9_-]+$"))]
    pub commit_markers: String,
    /// Sign-in: `user` and `password`, or `token`, or `creds-file` (a JWT and nkey seed). Write
    /// secrets as `${VAR}` to read them from the environment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// A credentials file (`.creds`: a user JWT and its nkey seed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creds_file: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1024))]
    pub parallelism: Option<u32>,
}

fn default_max_in_flight() -> u32 {
    4096
}

fn default_commit_markers() -> String {
    "weir_commits".into()
}
