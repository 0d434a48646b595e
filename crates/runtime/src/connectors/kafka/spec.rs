//! The keys of the Kafka source and sink (`kind: kafka`).

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::config::{ByteSize, EventTimeSpec, HumanDuration, OnError};
use crate::format::json::JsonType;

/// Records of Kafka topics, read by partition: each partition belongs to one subtask (no
/// consumer-group rebalancing), its offset goes into every checkpoint, and a restore seeks to
/// it, so the source is exactly-once with checkpoints.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct KafkaSourceSpec {
    /// Brokers to bootstrap from, `host:port[,host:port...]`.
    #[schemars(length(min = 1))]
    pub bootstrap_servers: String,
    /// The topic, or a list of topics, to read. Give this or `topic-pattern`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topic: Option<Topics>,
    /// A regular expression: every topic whose whole name matches is read, including topics
    /// created while the job runs (found by partition discovery).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub topic_pattern: Option<String>,
    /// How records are decoded: `json` (one object per record, by `schema` or `variants`, as
    /// the `jsonl` source), `raw` (the value as the string column `value`), `debezium-json`
    /// (Debezium's change events: `before`, `after` and `op`, an updating stream) or
    /// `upsert-json` (the value is the row, a record without a value deletes the row of its
    /// `key`; Flink's `upsert-kafka`). See docs/changelog.md.
    #[serde(default)]
    pub format: KafkaFormat,
    /// `upsert-json`: the columns the record key holds, the stream's upsert key (one column:
    /// the key as text; several: a JSON object of them, as the Kafka sink writes keys).
    /// `debezium-json`: optionally, the table's primary key, so that sinks that apply changes
    /// by a key know it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub key: Vec<String>,
    /// `format: json`: one shape for every record (field name → type), as the `jsonl` source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<IndexMap<String, JsonType>>,
    /// `format: json`: records tagged by variant (each variant an output port), as the `jsonl`
    /// source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variants: Option<IndexMap<String, IndexMap<String, JsonType>>>,
    /// Columns of record metadata, by the name the job gives them: `key` and `headers` (a JSON
    /// object of the headers, as a string), `partition` and `offset` (ints), `timestamp` (the
    /// record's timestamp). Added to every output port.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub metadata: IndexMap<String, KafkaMetadata>,
    /// Where partitions without a checkpointed offset start: `earliest`, `latest`,
    /// `group-offsets` (the group's committed offsets, else earliest), or a time (RFC 3339, or
    /// epoch milliseconds): the first record at or after it.
    #[serde(default)]
    pub start_from: StartFrom,
    /// `latest`: stop at the end offsets the subtask sees when it starts (a bounded read, for
    /// backfills and tests). Leave out to read forever.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_at: Option<StopAt>,
    /// The consumer group. weir assigns partitions itself and keeps offsets in its checkpoints;
    /// with a group, offsets are also committed to it when a checkpoint completes, so the
    /// usual tools show the job's lag, and `start-from: group-offsets` can start from them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub group_id: Option<String>,
    /// What a record that does not decode does: fail the job (naming topic, partition and
    /// offset), or skip it and count it.
    #[serde(default)]
    pub on_error: OnError,
    /// How often the subtasks look for new partitions (and, with `topic-pattern`, new topics).
    #[serde(default = "default_discovery_interval")]
    pub partition_discovery: HumanDuration,
    /// Largest record value read; larger fail the job or are skipped, by `on-error`.
    #[serde(default = "default_max_record_size")]
    pub max_record_size: ByteSize,
    /// Client properties passed to librdkafka as they are (`security.protocol`,
    /// `sasl.username`, timeouts...). weir sets the ones its guarantees rely on itself, and
    /// defaults three of the prefetch's (`fetch.queue.backoff.ms: 10`, `queued.min.messages:
    /// 32000`, `queued.max.messages.kbytes: 32768`), which these may change.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub properties: IndexMap<String, String>,
    /// Subtasks of this source (default: the job's parallelism). A subtask without partitions
    /// marks itself idle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1024))]
    pub parallelism: Option<u32>,
    /// Watermarks: `column` names the event-time column (a metadata `timestamp` column for the
    /// record timestamp). Each partition's event time is tracked apart and a subtask's
    /// watermark follows the partition furthest behind; `idle-timeout` also applies per
    /// partition, so a quiet partition stops holding the others back.
    #[serde(default)]
    pub event_time: EventTimeSpec,
}

fn default_discovery_interval() -> HumanDuration {
    HumanDuration(std::time::Duration::from_secs(10))
}

fn default_max_record_size() -> ByteSize {
    ByteSize(16 * 1024 * 1024)
}

/// One topic or several.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum Topics {
    One(String),
    Many(Vec<String>),
}

impl Topics {
    pub fn names(&self) -> Vec<String> {
        match self {
            Topics::One(t) => vec![t.clone()],
            Topics::Many(list) => list.clone(),
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum KafkaFormat {
    #[default]
    Json,
    Raw,
    /// Debezium's change events, as JSON: rows of `before` and `after`, kinds from `op`.
    DebeziumJson,
    /// The record value is the row and a record without a value deletes its key's row.
    UpsertJson,
}

/// A metadata field of a Kafka record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum KafkaMetadata {
    Key,
    Partition,
    Offset,
    Timestamp,
    Headers,
    Topic,
}

/// Where a partition without a checkpointed offset starts (default `earliest`, as Flink's
/// Kafka source).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum StartFrom {
    Position(StartPosition),
    /// Epoch milliseconds.
    Millis(i64),
    /// An RFC 3339 time.
    Time(String),
}

impl Default for StartFrom {
    fn default() -> Self {
        StartFrom::Position(StartPosition::Earliest)
    }
}

impl StartFrom {
    /// The time to start from, in epoch milliseconds, when the position is a time.
    pub fn millis(&self) -> Result<Option<i64>, String> {
        match self {
            StartFrom::Position(_) => Ok(None),
            StartFrom::Millis(ms) => Ok(Some(*ms)),
            StartFrom::Time(text) => chrono::DateTime::parse_from_rfc3339(text)
                .map(|t| Some(t.timestamp_millis()))
                .map_err(|e| {
                    format!(
                        "`{text}` is not `earliest`, `latest`, `group-offsets`, epoch \
                         milliseconds or an RFC 3339 time ({e})"
                    )
                }),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum StartPosition {
    Earliest,
    Latest,
    GroupOffsets,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum StopAt {
    Latest,
}

/// Rows into a Kafka topic as JSON objects, one record per row.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct KafkaSinkSpec {
    /// The input: a node name, or `node.port`.
    pub from: String,
    /// Brokers to bootstrap from, `host:port[,host:port...]`.
    #[schemars(length(min = 1))]
    pub bootstrap_servers: String,
    /// The topic records go to. It must exist.
    #[schemars(length(min = 1))]
    pub topic: String,
    /// The record key: columns of the input (one column: its value as text; several: a JSON
    /// object of them), so that rows of one key go to one partition. Leave out for records
    /// without a key.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub key: Vec<String>,
    /// The record value's encoding: `json` (the row as an object; an updating input must be
    /// keyed and never delete, and only new versions are written), `changelog-json` (the row
    /// with an `"op"` field: `+I`, `-U`, `+U`, `-D`), `debezium-json` (`{"before", "after",
    /// "op"}`: `c` for `+I` and `+U`, `d` for `-U` and `-D`, as Flink writes it) or
    /// `upsert-json` (needs `key`: new versions as values, deletes as records without a
    /// value, for compacted topics).
    #[serde(default)]
    pub format: KafkaSinkFormat,
    /// `exactly-once` (with checkpoints): each checkpoint's rows are written in one Kafka
    /// transaction when the checkpoint completes, so `read_committed` consumers see each row
    /// once across failures and restores. `at-least-once`: rows are sent as they come and
    /// flushed at every checkpoint and at the end; a failure may send some again.
    #[serde(default)]
    pub delivery: Delivery,
    /// Client properties passed to librdkafka as they are (`security.protocol`,
    /// `compression.type`, timeouts...).
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub properties: IndexMap<String, String>,
    /// Prefix of the transactional ids (`<prefix>-<subtask>`); default `weir-<job>-<sink>`.
    /// Two jobs writing with one prefix fence each other.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub transactional_id_prefix: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1024))]
    pub parallelism: Option<u32>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum KafkaSinkFormat {
    #[default]
    Json,
    ChangelogJson,
    DebeziumJson,
    UpsertJson,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Delivery {
    #[default]
    ExactlyOnce,
    AtLeastOnce,
}
