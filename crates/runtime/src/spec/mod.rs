//! The job file: what a user writes in YAML, as strict, documented serde types.
//!
//! A job is a DAG of named nodes in three sections (`sources`, `transforms`, `sinks`) wired by name
//! with `from:`. Every struct denies unknown keys, every key is kebab-case, and every default lives
//! next to its field so that `weir schema` (a JSON Schema derived from these types) documents it.
//! Loading a file ([`load`]) reports every problem at once with its line, column and key path.
//!
//! # Layout
//! - [`units`]: durations (`100ms`) and byte sizes (`64MiB`).
//! - [`load`]: YAML text → [`JobSpec`]: syntax, `--set` overrides, schema validation, decoding.
//! - [`env`]: `${VAR}` and `${VAR:-default}` in string values, read from the environment.
//! - [`positions`]: where each key and value sits in the YAML text.
//! - [`yaml`]: the one YAML pass over a job file: tree, positions and limits together.
//! - [`problems`]: the error type that lists every problem with its position.
//! - [`checks`]: well-typed values a run would refuse or choke on (zero intervals, tiny chunks).
//! - [`kafka`]: the keys of the Kafka source and sink.
//! - [`nats`]: the keys of the NATS JetStream source and sink.
//! - [`paths`]: weir's data directory, and names made safe as path components.
//!
//! # Example
//! ```
//! let text = "name: demo\nsources:\n  gen: {kind: nexmark, events: 1000}\n\
//!             sinks:\n  out: {kind: blackhole, from: gen.bid}\n";
//! let job = weir_runtime::spec::load::parse_str("demo.yaml", text, &[]).unwrap();
//! assert!(job.problems.is_empty());
//! assert_eq!(job.spec.name, "demo");
//! ```

pub mod checks;
pub mod env;
pub mod kafka;
pub mod load;
pub mod nats;
pub mod paths;
pub mod positions;
pub mod problems;
pub mod units;
pub mod yaml;

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use self::kafka::{KafkaSinkSpec, KafkaSourceSpec};
pub use self::nats::{NatsSinkSpec, NatsSourceSpec};
pub use self::problems::{Problem, SpecError};
pub use self::units::{ByteSize, HumanDuration, SignedDuration};
use crate::format::json::JsonType;

/// The default number of key groups: the unit in which keyed state is hashed, stored and rescaled.
pub const DEFAULT_KEY_GROUPS: u32 = 128;

/// A streaming job.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
#[schemars(title = "weir job")]
pub struct JobSpec {
    /// The job's name, shown in logs, summaries and the dashboard.
    #[schemars(length(min = 1))]
    pub name: String,
    /// A sentence on what the job computes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Subtasks per operator unless the operator says otherwise.
    #[serde(default = "default_parallelism")]
    #[schemars(range(min = 1, max = 1024))]
    pub parallelism: u32,
    /// Run operators joined by forward edges of equal parallelism in one task (no channel hop).
    /// Turn off to compare, or to see every operator as its own task.
    #[serde(default = "default_true")]
    pub chaining: bool,
    /// Aggregate in two phases: a partial aggregate per batch chained before the exchange of
    /// every `aggregate` and tumbling or sliding `window-aggregate`, merged by the keyed
    /// operator, so a hot key costs one partial per batch rather than a record per event.
    /// Results are the same either way; turn off to compare.
    #[serde(default = "default_true")]
    pub two_phase_aggregation: bool,
    /// Keep the sliding windows of a `window-aggregate` without allowed lateness (and not
    /// declared queryable) as slices of one slide: a record updates the one slice holding it
    /// instead of every window holding it, and a window is the merge of its slices when it
    /// fires. Results are the same either way; turn off to compare.
    #[serde(default = "default_true")]
    pub window_slicing: bool,
    /// Let sources build only the columns some operator or sink reads (projection pushdown):
    /// a JSON-lines source then skips the other fields' values like undeclared ones, so a
    /// value of the wrong type in a field nothing reads is no longer an error. Results are the
    /// same either way; turn off to compare, or to have every declared field checked.
    #[serde(default = "default_true")]
    pub projection_pushdown: bool,
    /// Most records in one batch moved between tasks.
    #[serde(default = "default_batch_size")]
    #[schemars(range(min = 1, max = 1048576))]
    pub batch_size: u32,
    /// Batches buffered on each channel between two subtasks before the sender waits
    /// (backpressure). Small keeps memory and latency bounded; too small starves the receiver.
    #[serde(default = "default_channel_capacity")]
    #[schemars(range(min = 1, max = 4096))]
    pub channel_capacity: u32,
    /// Key groups (the maximum parallelism of keyed operators): keys hash into this many groups,
    /// and keyed state is split, stored and rescaled by group.
    #[serde(default = "default_key_groups")]
    #[schemars(range(min = 1, max = 32768))]
    pub key_groups: u32,
    /// Where records come from, by name.
    #[schemars(length(min = 1))]
    pub sources: IndexMap<String, SourceSpec>,
    /// Operators between sources and sinks, by name.
    #[serde(default)]
    pub transforms: IndexMap<String, TransformSpec>,
    /// Where results go, by name.
    #[schemars(length(min = 1))]
    pub sinks: IndexMap<String, SinkSpec>,
    /// Periodic checkpoints: exactly-once state and output across failures.
    #[serde(default)]
    pub checkpoint: CheckpointSpec,
    /// Restarts after a failure, from the latest completed checkpoint.
    #[serde(default)]
    pub restart: RestartSpec,
    /// Keyed state backend settings.
    #[serde(default)]
    pub state: StateSpec,
    /// In a fleet of servers: which server the job starts on (by default the one with the
    /// fewest subtasks). If that server dies the job moves like any other. Ignored outside a
    /// fleet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<PlacementSpec>,
}

/// Where a job starts in a fleet.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct PlacementSpec {
    /// The URL the server advertises (`weir serve --advertise`), e.g. `http://10.0.0.5:8080`.
    pub server: String,
}

fn default_parallelism() -> u32 {
    1
}
fn default_true() -> bool {
    true
}
fn default_batch_size() -> u32 {
    1024
}
fn default_channel_capacity() -> u32 {
    8
}
fn default_key_groups() -> u32 {
    DEFAULT_KEY_GROUPS
}

/// A source of records.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum SourceSpec {
    /// The Nexmark auction generator. Output ports: `person`, `auction`, `bid`.
    Nexmark(NexmarkSourceSpec),
    /// JSON lines from files, one object per line, decoded by a declared schema.
    Jsonl(JsonlSourceSpec),
    /// Records of Kafka topics, partition by partition, exactly-once with checkpoints.
    Kafka(Box<KafkaSourceSpec>),
    /// Messages of a NATS JetStream stream, partition by partition, exactly-once with
    /// checkpoints.
    Nats(Box<NatsSourceSpec>),
}

impl SourceSpec {
    pub fn parallelism(&self) -> Option<u32> {
        match self {
            SourceSpec::Nexmark(s) => s.parallelism,
            SourceSpec::Jsonl(s) => s.parallelism,
            SourceSpec::Kafka(s) => s.parallelism,
            SourceSpec::Nats(s) => s.parallelism,
        }
    }

    pub fn event_time(&self) -> &EventTimeSpec {
        match self {
            SourceSpec::Nexmark(s) => &s.event_time,
            SourceSpec::Jsonl(s) => &s.event_time,
            SourceSpec::Kafka(s) => &s.event_time,
            SourceSpec::Nats(s) => &s.event_time,
        }
    }

    pub fn kind(&self) -> &'static str {
        match self {
            SourceSpec::Nexmark(_) => "nexmark",
            SourceSpec::Jsonl(_) => "jsonl",
            SourceSpec::Kafka(_) => "kafka",
            SourceSpec::Nats(_) => "nats",
        }
    }
}

/// The Nexmark generator (the Apache Beam / Flink model): people, auctions and bids in the
/// proportions 1:3:46, a pure function of the seed and the event number, so parallel subtasks
/// split the sequence without duplicating or skipping an event.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct NexmarkSourceSpec {
    /// Events to generate in total (all subtasks); leave out for an unbounded source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub events: Option<u64>,
    /// Seed of the generator: the same seed gives the same events.
    #[serde(default)]
    pub seed: u64,
    /// Event time of the first event, in epoch milliseconds (years 1 to 9999).
    #[serde(default = "default_base_time")]
    #[schemars(range(min = -62_135_596_800_000i64, max = 253_402_300_799_999i64))]
    pub base_time: i64,
    /// Event time between consecutive events (10,000 events per second of event time by default).
    #[serde(default = "default_inter_event_delay")]
    pub inter_event_delay: HumanDuration,
    /// Most events per second of wall-clock time, over all subtasks; leave out to run flat out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub rate: Option<u64>,
    /// People active at any time (bids and auctions pick among them).
    #[serde(default = "default_active_people")]
    #[schemars(range(min = 1))]
    pub active_people: u64,
    /// Auctions open at any time (bids pick among them).
    #[serde(default = "default_in_flight_auctions")]
    #[schemars(range(min = 1))]
    pub in_flight_auctions: u64,
    /// Subtasks of this source (default: the job's parallelism).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1024))]
    pub parallelism: Option<u32>,
    /// Watermarks: event time comes from each event's `dateTime`.
    #[serde(default = "EventTimeSpec::nexmark")]
    pub event_time: EventTimeSpec,
}

fn default_base_time() -> i64 {
    1_700_000_000_000
}
fn default_inter_event_delay() -> HumanDuration {
    HumanDuration(std::time::Duration::from_micros(100))
}
fn default_active_people() -> u64 {
    1000
}
fn default_in_flight_auctions() -> u64 {
    100
}

/// JSON lines read from one file or from every file of a directory (in name order), split into
/// chunks that parallel subtasks read round-robin.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct JsonlSourceSpec {
    /// A file, or a directory whose files are all read. Relative paths are relative to the
    /// working directory.
    #[schemars(length(min = 1))]
    pub path: String,
    /// One shape for every line: field name → type (`int`, `float`, `string`, `bool`,
    /// `timestamp`) or a nested map for a nested object (read as columns `outer.inner`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<IndexMap<String, JsonType>>,
    /// Lines that hold one object under a key naming its variant (Nexmark's
    /// `{"type":"bid","bid":{...}}`): variant → its fields. Each variant is an output port;
    /// lines of undeclared variants are skipped and counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variants: Option<IndexMap<String, IndexMap<String, JsonType>>>,
    /// What a line that does not parse, does not fit the schema or is longer than
    /// `max-line-length` does: fail the job (naming the file, line number and byte offset), or
    /// skip it and count it.
    #[serde(default)]
    pub on_error: OnError,
    /// Size of the file chunks handed to subtasks.
    #[serde(default = "default_chunk_size")]
    pub chunk_size: ByteSize,
    /// Longest line read (without its line break); a longer one is never held in memory whole,
    /// and `on-error` decides whether it fails the job or is skipped.
    #[serde(default = "default_max_line_length")]
    pub max_line_length: ByteSize,
    /// Threads each subtask decodes lines on, ahead of emitting them in file order (default:
    /// the machine's cores over the source's parallelism; at most the machine's cores); 0 or
    /// 1 decode on the subtask's own task, as it reads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 64))]
    pub decode_threads: Option<u32>,
    /// Subtasks of this source (default: the job's parallelism).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1024))]
    pub parallelism: Option<u32>,
    /// Watermarks; set `column` to the timestamp field that carries event time.
    #[serde(default)]
    pub event_time: EventTimeSpec,
}

fn default_chunk_size() -> ByteSize {
    ByteSize(4 * 1024 * 1024)
}

fn default_max_line_length() -> ByteSize {
    ByteSize(crate::format::lines::DEFAULT_MAX_LINE_LENGTH as u64)
}

/// What to do with a record that cannot be read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum OnError {
    #[default]
    Fail,
    Skip,
}

/// How a source derives event time and watermarks.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct EventTimeSpec {
    /// The timestamp column that carries event time (in every output port). Without it the
    /// source emits no watermarks until it ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub column: Option<String>,
    /// Bounded out-of-orderness: the watermark trails the largest event time seen by this much
    /// (plus 1 ms), so records up to this late are still on time.
    #[serde(default)]
    pub max_out_of_orderness: HumanDuration,
    /// A subtask that produces nothing for this long is marked idle and stops holding back
    /// the watermark downstream until it produces again. Leave out to never go idle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_timeout: Option<HumanDuration>,
}

impl EventTimeSpec {
    fn nexmark() -> Self {
        Self {
            column: Some("dateTime".to_string()),
            max_out_of_orderness: HumanDuration::ZERO,
            idle_timeout: None,
        }
    }
}

/// Every transform kind, one line each: its variant and spec, its `kind:` in job files, and the
/// module of `plan/nodes/` that plans it. [`TransformSpec`] is made from this list below, and the
/// planner's dispatch (`plan/nodes/mod.rs`) from the same list, so a new kind is its spec (with
/// its [`TransformNode`] impl), `operators/<kind>.rs`, `plan/nodes/<kind>.rs`, and one line here.
macro_rules! transform_kinds {
    ($then:ident) => {
        $then! {
            /// Keep the records for which a SQL condition is true.
            Filter(FilterSpec) = "filter" in filter,
            /// Compute new columns from SQL expressions (also projection and renaming).
            Map(MapSpec) = "map" in map,
            /// Partition the stream by key: downstream keyed operators see every record of a key on
            /// the same subtask. Not a task of its own: it becomes the hash exchange of its output
            /// edges.
            KeyBy(KeyBySpec) = "key-by" in key_by,
            /// Merge streams with the same columns.
            Union(UnionSpec) = "union" in union,
            /// A running (non-windowed) aggregation per key of a `key-by` input, emitting each
            /// key's new values once per input batch in which the key changed.
            Aggregate(AggregateSpec) = "aggregate" in aggregate,
            /// Aggregates per key and event-time window (tumbling, sliding or session), emitted
            /// when the watermark passes the window's end.
            WindowAggregate(WindowAggregateSpec) = "window-aggregate" in window_aggregate,
            /// The first `n` rows per key by an order, emitted when the watermark reaches a time.
            TopN(TopNSpec) = "top-n" in top_n,
            /// An aggregate over each row's last `rows` rows per key, in event-time order.
            OverAggregate(OverAggregateSpec) = "over-aggregate" in over_aggregate,
            /// Joins two keyed streams: every pair with equal keys that meets the condition.
            Join(JoinSpec) = "join" in join,
            /// Joins two keyed streams where the right row's time is within bounds of the left's.
            IntervalJoin(IntervalJoinSpec) = "interval-join" in interval_join,
            /// Joins two keyed streams within the same event-time window.
            WindowJoin(WindowJoinSpec) = "window-join" in window_join,
            /// A query in Flink SQL's streaming subset, planned into the kinds above (see
            /// `weir explain`).
            Sql(SqlSpec) = "sql" in sql,
        }
    };
}
pub(crate) use transform_kinds;

macro_rules! declare_transforms {
    ($( $(#[$doc:meta])* $variant:ident($spec:ident) = $kind:literal in $module:ident, )*) => {
        /// An operator.
        #[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
        #[serde(tag = "kind")]
        pub enum TransformSpec {
            $( $(#[$doc])* #[serde(rename = $kind)] $variant($spec), )*
        }

        impl TransformSpec {
            /// The node's `kind:` in the job file.
            pub fn kind(&self) -> &'static str {
                match self {
                    $( TransformSpec::$variant(_) => $kind, )*
                }
            }

            /// What the node says about itself, whatever its kind.
            pub fn node(&self) -> &dyn TransformNode {
                match self {
                    $( TransformSpec::$variant(s) => s, )*
                }
            }
        }
    };
}
transform_kinds!(declare_transforms);

/// What every transform kind tells the planner and the checks about itself.
pub trait TransformNode {
    /// The names this node reads from, with the key under which each is written.
    fn inputs(&self) -> Vec<(String, &str)>;

    /// The node's own parallelism, when it sets one.
    fn parallelism(&self) -> Option<u32> {
        None
    }

    /// The queryable states the node declares, if its kind can declare any.
    fn queryable(&self) -> Option<&QueryableSpec> {
        None
    }

    /// The node's own state TTL, over the job's, if its kind has one.
    fn state_ttl(&self) -> Option<HumanDuration> {
        None
    }
}

impl TransformSpec {
    /// The names this node reads from, with the key under which each is written.
    pub fn inputs(&self) -> Vec<(String, &str)> {
        self.node().inputs()
    }

    /// The queryable states the node declares, if it can declare any.
    pub fn queryable(&self) -> Option<&QueryableSpec> {
        self.node().queryable()
    }

    pub fn parallelism(&self) -> Option<u32> {
        self.node().parallelism()
    }
}

#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct FilterSpec {
    /// The input: a node name, or `node.port` for a source with several ports.
    pub from: String,
    /// A SQL boolean expression, e.g. `auction % 123 = 0`. NULL counts as false.
    #[serde(rename = "where")]
    pub predicate: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1024))]
    pub parallelism: Option<u32>,
}

impl TransformNode for FilterSpec {
    fn inputs(&self) -> Vec<(String, &str)> {
        vec![("from".into(), self.from.as_str())]
    }

    fn parallelism(&self) -> Option<u32> {
        self.parallelism
    }
}

#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct MapSpec {
    /// The input: a node name, or `node.port`.
    pub from: String,
    /// Output columns in order: name → SQL expression (`price: price * 0.908`).
    #[schemars(length(min = 1))]
    pub columns: IndexMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1024))]
    pub parallelism: Option<u32>,
}

impl TransformNode for MapSpec {
    fn inputs(&self) -> Vec<(String, &str)> {
        vec![("from".into(), self.from.as_str())]
    }

    fn parallelism(&self) -> Option<u32> {
        self.parallelism
    }
}

#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct KeyBySpec {
    /// The input: a node name, or `node.port`.
    pub from: String,
    /// Key expressions: columns (`auction`) or SQL expressions with a name (`lower(city) AS city`).
    #[schemars(length(min = 1))]
    pub keys: Vec<String>,
}

impl TransformNode for KeyBySpec {
    fn inputs(&self) -> Vec<(String, &str)> {
        vec![("from".into(), self.from.as_str())]
    }
}

#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct UnionSpec {
    /// The inputs, which must have the same column names and types.
    #[schemars(length(min = 2))]
    pub from: Vec<String>,
}

impl TransformNode for UnionSpec {
    fn inputs(&self) -> Vec<(String, &str)> {
        self.from
            .iter()
            .enumerate()
            .map(|(i, f)| (format!("from.{i}"), f.as_str()))
            .collect()
    }
}

#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct AggregateSpec {
    /// A `key-by` node.
    pub from: String,
    /// Output columns after the key columns: name → aggregate call, one of `count(*)`,
    /// `count(x)`, `sum(x)`, `min(x)`, `max(x)`, `avg(x)`.
    #[schemars(length(min = 1))]
    pub aggregates: IndexMap<String, String>,
    /// Keys not updated for this long (processing time) are forgotten (default: `state.ttl`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_ttl: Option<HumanDuration>,
    /// States that can be looked up from outside the job by key (`weir state`, the API and
    /// the dashboard): `[accumulators]`, or a map with options per state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queryable: Option<QueryableSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1024))]
    pub parallelism: Option<u32>,
}

impl TransformNode for AggregateSpec {
    fn inputs(&self) -> Vec<(String, &str)> {
        vec![("from".into(), self.from.as_str())]
    }

    fn parallelism(&self) -> Option<u32> {
        self.parallelism
    }

    fn queryable(&self) -> Option<&QueryableSpec> {
        self.queryable.as_ref()
    }

    fn state_ttl(&self) -> Option<HumanDuration> {
        self.state_ttl
    }
}

/// A keyed operator's queryable states: a list of state names, or a map from state name to
/// its options.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum QueryableSpec {
    Names(Vec<String>),
    Options(IndexMap<String, QueryableStateSpec>),
}

impl QueryableSpec {
    /// The declared states with their options, in order.
    pub fn states(&self) -> Vec<(String, QueryableStateSpec)> {
        match self {
            QueryableSpec::Names(names) => names
                .iter()
                .map(|n| (n.clone(), QueryableStateSpec::default()))
                .collect(),
            QueryableSpec::Options(map) => {
                map.iter().map(|(n, o)| (n.clone(), o.clone())).collect()
            }
        }
    }
}

/// How one queryable state is read.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct QueryableStateSpec {
    /// `direct`: a RocksDB snapshot read on the caller's thread, never queued behind the
    /// operator's data, as fresh as the state's last write-through (the default with the
    /// RocksDB backend). `ordered`: answered by the operator's task between batches, seeing
    /// every write so far (read-your-writes; the only path of the heap backend).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<QueryPath>,
    /// RocksDB, direct path: the operator writes this state's cache through to RocksDB at
    /// least this often (between batches), so direct reads are never older than this while
    /// the job runs. Default: 1s (checkpoints do not write caches through: what is only in
    /// memory goes into the checkpoint's overlay file instead).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_staleness: Option<HumanDuration>,
}

/// Which path a lookup takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum QueryPath {
    Direct,
    Ordered,
}

/// How records are grouped into event-time windows, aligned to the epoch.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(tag = "type", rename_all = "kebab-case", deny_unknown_fields)]
pub enum WindowSpec {
    /// Back-to-back windows `[k·size, (k+1)·size)`.
    Tumbling { size: HumanDuration },
    /// Windows of `size` starting every `slide`; a record is in `size / slide` of them.
    Sliding {
        size: HumanDuration,
        slide: HumanDuration,
    },
    /// Per key, records closer than `gap` share a session `[first, last + gap)`; sessions that
    /// come to touch merge.
    Session { gap: HumanDuration },
}

#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct WindowAggregateSpec {
    /// A `key-by` node.
    pub from: String,
    /// The TIMESTAMP expression that places a record in time (usually the event-time column).
    pub time: String,
    pub window: WindowSpec,
    /// Output columns after the key columns and `window_start`, `window_end`: name → one of
    /// `count(*)`, `count(x)`, `count(DISTINCT x)`, `sum(x)`, `min(x)`, `max(x)`, `avg(x)`,
    /// `max_by(x, y)`, `min_by(x, y)`.
    #[schemars(length(min = 1))]
    pub aggregates: IndexMap<String, String>,
    /// How long after a window's end a late record still updates it (and re-emits its result);
    /// later records are dropped and counted.
    #[serde(default)]
    pub allowed_lateness: HumanDuration,
    /// States that can be looked up from outside the job by key: `windows` (tumbling and
    /// sliding windows: one entry per open window) and `sessions` (session windows), as a
    /// list or a map with options per state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queryable: Option<QueryableSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1024))]
    pub parallelism: Option<u32>,
}

impl TransformNode for WindowAggregateSpec {
    fn inputs(&self) -> Vec<(String, &str)> {
        vec![("from".into(), self.from.as_str())]
    }

    fn parallelism(&self) -> Option<u32> {
        self.parallelism
    }

    fn queryable(&self) -> Option<&QueryableSpec> {
        self.queryable.as_ref()
    }
}

#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct TopNSpec {
    /// A `key-by` node.
    pub from: String,
    /// Sort expressions, each optionally followed by `ASC` or `DESC` (`price DESC`).
    #[schemars(length(min = 1))]
    pub order_by: Vec<String>,
    /// How many rows per key and time.
    #[serde(default = "default_one")]
    #[schemars(range(min = 1))]
    pub n: u32,
    /// Also keep rows tied with the `n`-th (so `n: 1` keeps every row equal to the best).
    #[serde(default)]
    pub with_ties: bool,
    /// A TIMESTAMP expression: rows are grouped per key and this time, and emitted in rank order
    /// once the watermark reaches it.
    pub fire_at: String,
    /// Input columns to emit, in order (default: all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub columns: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1024))]
    pub parallelism: Option<u32>,
}

impl TransformNode for TopNSpec {
    fn inputs(&self) -> Vec<(String, &str)> {
        vec![("from".into(), self.from.as_str())]
    }

    fn parallelism(&self) -> Option<u32> {
        self.parallelism
    }
}

fn default_one() -> u32 {
    1
}

#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct OverAggregateSpec {
    /// A `key-by` node.
    pub from: String,
    /// The order of rows: a TIMESTAMP expression first (rows wait until the watermark reaches
    /// it), then tie-breakers, each optionally `ASC`/`DESC`.
    #[schemars(length(min = 1))]
    pub order_by: Vec<String>,
    /// How many rows, the current one included, each aggregate covers.
    #[schemars(range(min = 1, max = 100000))]
    pub rows: u32,
    /// Columns added to each row: name → an aggregate call (as in `window-aggregate`).
    #[schemars(length(min = 1))]
    pub aggregates: IndexMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1024))]
    pub parallelism: Option<u32>,
}

impl TransformNode for OverAggregateSpec {
    fn inputs(&self) -> Vec<(String, &str)> {
        vec![("from".into(), self.from.as_str())]
    }

    fn parallelism(&self) -> Option<u32> {
        self.parallelism
    }
}

#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct JoinSpec {
    /// A `key-by` node.
    pub left: String,
    /// A `key-by` node with keys of the same types.
    pub right: String,
    /// The name of the left row in expressions (`l.price`).
    #[serde(default = "default_left_as")]
    pub left_as: String,
    /// The name of the right row in expressions (`r.price`).
    #[serde(default = "default_right_as")]
    pub right_as: String,
    /// An extra condition over both rows.
    #[serde(default, rename = "where", skip_serializing_if = "Option::is_none")]
    pub condition: Option<String>,
    /// A TIMESTAMP expression over a left row: after the watermark passes it the row cannot
    /// match any more and is dropped from state. Default: kept for good (a regular join).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub left_until: Option<String>,
    /// The same for right rows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub right_until: Option<String>,
    /// Output columns: name → expression over both rows (default: every column as `l.x`, `r.x`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub columns: Option<IndexMap<String, String>>,
    /// Stored rows of a key not touched for this long (processing time) are forgotten
    /// (default: `state.ttl`): bounds a regular join's state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_ttl: Option<HumanDuration>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1024))]
    pub parallelism: Option<u32>,
}

impl TransformNode for JoinSpec {
    fn inputs(&self) -> Vec<(String, &str)> {
        vec![
            ("left".into(), self.left.as_str()),
            ("right".into(), self.right.as_str()),
        ]
    }

    fn parallelism(&self) -> Option<u32> {
        self.parallelism
    }

    fn state_ttl(&self) -> Option<HumanDuration> {
        self.state_ttl
    }
}

fn default_left_as() -> String {
    "l".into()
}
fn default_right_as() -> String {
    "r".into()
}

#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct IntervalJoinSpec {
    pub left: String,
    pub right: String,
    #[serde(default = "default_left_as")]
    pub left_as: String,
    #[serde(default = "default_right_as")]
    pub right_as: String,
    /// The left rows' TIMESTAMP column.
    pub left_time: String,
    /// The right rows' TIMESTAMP column.
    pub right_time: String,
    /// A pair matches when right time ∈ [left time + lower, left time + upper].
    pub lower: SignedDuration,
    pub upper: SignedDuration,
    #[serde(default, rename = "where", skip_serializing_if = "Option::is_none")]
    pub condition: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub columns: Option<IndexMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1024))]
    pub parallelism: Option<u32>,
}

impl TransformNode for IntervalJoinSpec {
    fn inputs(&self) -> Vec<(String, &str)> {
        vec![
            ("left".into(), self.left.as_str()),
            ("right".into(), self.right.as_str()),
        ]
    }

    fn parallelism(&self) -> Option<u32> {
        self.parallelism
    }
}

/// Which pairs a window join emits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum JoinMode {
    /// Every matching pair.
    #[default]
    Inner,
    /// Each left row with at least one match, once (with its first match's right columns).
    Semi,
}

#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct WindowJoinSpec {
    pub left: String,
    pub right: String,
    #[serde(default = "default_left_as")]
    pub left_as: String,
    #[serde(default = "default_right_as")]
    pub right_as: String,
    /// The left rows' TIMESTAMP column.
    pub left_time: String,
    /// The right rows' TIMESTAMP column.
    pub right_time: String,
    /// Tumbling or sliding windows.
    pub window: WindowSpec,
    #[serde(default)]
    pub mode: JoinMode,
    #[serde(default, rename = "where", skip_serializing_if = "Option::is_none")]
    pub condition: Option<String>,
    /// Output columns: name → expression over both rows and `window_start`, `window_end`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub columns: Option<IndexMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1024))]
    pub parallelism: Option<u32>,
}

impl TransformNode for WindowJoinSpec {
    fn inputs(&self) -> Vec<(String, &str)> {
        vec![
            ("left".into(), self.left.as_str()),
            ("right".into(), self.right.as_str()),
        ]
    }

    fn parallelism(&self) -> Option<u32> {
        self.parallelism
    }
}

#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct SqlSpec {
    /// One SELECT over the job's nodes (`FROM nexmark.bid`, `FROM "my-node"`, or a name given
    /// in `inputs`): projections and filters, GROUP BY, window TVFs (TUMBLE, HOP, SESSION)
    /// grouped by `window_start, window_end`, joins (time-bounded, windowed, regular),
    /// ROW_NUMBER()/RANK() as Top-N, aggregates OVER the last rows, subqueries in FROM, and
    /// `IN (SELECT ...)` as a window semi join. The README's *Queries in SQL* lists the subset.
    #[schemars(length(min = 1))]
    pub query: String,
    /// Names the query uses for nodes of the job: name → node (`bid: nexmark.bid`).
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub inputs: IndexMap<String, String>,
    /// The parallelism of every operator the query becomes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1024))]
    pub parallelism: Option<u32>,
}

impl TransformNode for SqlSpec {
    fn inputs(&self) -> Vec<(String, &str)> {
        self.inputs
            .iter()
            .map(|(name, node)| (format!("inputs.{name}"), node.as_str()))
            .collect()
    }

    fn parallelism(&self) -> Option<u32> {
        self.parallelism
    }
}

/// Where results go.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum SinkSpec {
    /// Discards records, counting them: for benchmarks.
    Blackhole(BlackholeSinkSpec),
    /// JSON lines on standard output.
    Stdout(StdoutSinkSpec),
    /// JSON lines in files `part-<subtask>.jsonl` of a directory, each written to a temporary
    /// file and renamed into place when complete.
    File(FileSinkSpec),
    /// Rows into a PostgreSQL table, batched, through a pooled connection; exactly once with
    /// checkpoints (staged, then moved when the checkpoint completes).
    Postgres(PostgresSinkSpec),
    /// Rows into a Kafka topic as JSON records; exactly once with checkpoints (one Kafka
    /// transaction per completed checkpoint).
    Kafka(KafkaSinkSpec),
    /// Rows into a NATS JetStream stream as JSON messages; exactly once with checkpoints
    /// (published when the checkpoint completes, with deterministic `Nats-Msg-Id`s).
    Nats(NatsSinkSpec),
}

impl SinkSpec {
    pub fn from(&self) -> &str {
        match self {
            SinkSpec::Blackhole(s) => &s.from,
            SinkSpec::Stdout(s) => &s.from,
            SinkSpec::File(s) => &s.from,
            SinkSpec::Postgres(s) => &s.from,
            SinkSpec::Kafka(s) => &s.from,
            SinkSpec::Nats(s) => &s.from,
        }
    }

    pub fn parallelism(&self) -> Option<u32> {
        match self {
            SinkSpec::Blackhole(s) => s.parallelism,
            SinkSpec::Stdout(_) => Some(1),
            SinkSpec::File(s) => s.parallelism,
            SinkSpec::Postgres(s) => s.parallelism,
            SinkSpec::Kafka(s) => s.parallelism,
            SinkSpec::Nats(s) => s.parallelism,
        }
    }

    pub fn kind(&self) -> &'static str {
        match self {
            SinkSpec::Blackhole(_) => "blackhole",
            SinkSpec::Stdout(_) => "stdout",
            SinkSpec::File(_) => "file",
            SinkSpec::Postgres(_) => "postgres",
            SinkSpec::Kafka(_) => "kafka",
            SinkSpec::Nats(_) => "nats",
        }
    }
}

#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct BlackholeSinkSpec {
    /// The input: a node name, or `node.port`.
    pub from: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1024))]
    pub parallelism: Option<u32>,
}

#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct StdoutSinkSpec {
    /// The input: a node name, or `node.port`. Standard output has one writer: parallelism 1.
    pub from: String,
}

#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct FileSinkSpec {
    /// The input: a node name, or `node.port`.
    pub from: String,
    /// The output directory (created if missing).
    #[schemars(length(min = 1))]
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1024))]
    pub parallelism: Option<u32>,
}

#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct PostgresSinkSpec {
    /// The input: a node name, or `node.port`.
    pub from: String,
    /// A libpq-style connection string (`host=127.0.0.1 port=5432 user=postgres dbname=test`)
    /// or URL (`postgresql://user@host:5432/db`).
    #[schemars(length(min = 1))]
    pub connection: String,
    /// The table rows go into. Its columns must include every column of the input.
    #[schemars(length(min = 1, max = 63))]
    pub table: String,
    /// The table's schema; leave out for the connection's search path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<String>,
    /// Columns of a unique key: rows are upserted by it (the last row of a key wins), so a
    /// changelog converges on the latest value per key. Leave out to append.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub key: Vec<String>,
    /// Create the table from the input's columns (and `key` as its primary key) if missing.
    #[serde(default)]
    pub create_table: bool,
    /// The staging table used for exactly-once commits (default `<table>__weir_stage`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub staging_table: Option<String>,
    /// Rows written per `COPY`.
    #[serde(default = "default_pg_batch_size")]
    #[schemars(range(min = 1, max = 1_000_000))]
    pub batch_size: u32,
    /// Longest time a row waits in a subtask before it is written.
    #[serde(default = "default_pg_flush_interval")]
    pub flush_interval: HumanDuration,
    #[serde(default)]
    pub pool: PostgresPoolSpec,
    #[serde(default)]
    pub retry: PostgresRetrySpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1024))]
    pub parallelism: Option<u32>,
}

fn default_pg_batch_size() -> u32 {
    5_000
}

fn default_pg_flush_interval() -> HumanDuration {
    HumanDuration(std::time::Duration::from_secs(1))
}

/// The sink's connection pool, shared by its subtasks.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct PostgresPoolSpec {
    /// Most connections open at once.
    #[serde(default = "default_pg_pool_size")]
    #[schemars(range(min = 1, max = 256))]
    pub max_size: u32,
    /// Longest wait for a free connection.
    #[serde(default = "default_pg_acquire_timeout")]
    pub acquire_timeout: HumanDuration,
    /// Longest wait for a new connection to open.
    #[serde(default = "default_pg_connect_timeout")]
    pub connect_timeout: HumanDuration,
}

impl Default for PostgresPoolSpec {
    fn default() -> Self {
        Self {
            max_size: default_pg_pool_size(),
            acquire_timeout: default_pg_acquire_timeout(),
            connect_timeout: default_pg_connect_timeout(),
        }
    }
}

fn default_pg_pool_size() -> u32 {
    4
}

fn default_pg_acquire_timeout() -> HumanDuration {
    HumanDuration(std::time::Duration::from_secs(30))
}

fn default_pg_connect_timeout() -> HumanDuration {
    HumanDuration(std::time::Duration::from_secs(10))
}

/// Retries of a failed write: transient failures only (connection lost or refused, server
/// restarting, serialization conflicts); permanent ones fail the job at once.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct PostgresRetrySpec {
    /// Attempts in all before the job fails.
    #[serde(default = "default_pg_attempts")]
    #[schemars(range(min = 1, max = 1000))]
    pub max_attempts: u32,
    /// Wait after the first failure; doubles after each (plus jitter, see [`Self::delays`]).
    #[serde(default = "default_pg_initial_backoff")]
    pub initial_backoff: HumanDuration,
    /// Longest wait between attempts.
    #[serde(default = "default_pg_max_backoff")]
    pub max_backoff: HumanDuration,
}

impl PostgresRetrySpec {
    /// The waits between attempts, `max-attempts - 1` of them: `initial-backoff` doubling up
    /// to `max-backoff`, each plus a random part of up to its own length (backon's jitter), so
    /// that the subtasks of a sink that lost its database together do not all come back in
    /// the same millisecond.
    pub fn delays(&self) -> backon::ExponentialBackoff {
        use backon::BackoffBuilder;
        backon::ExponentialBuilder::default()
            .with_min_delay(self.initial_backoff.0)
            .with_max_delay(self.max_backoff.0.max(self.initial_backoff.0))
            .with_max_times(self.max_attempts.saturating_sub(1) as usize)
            .with_jitter()
            .build()
    }
}

impl Default for PostgresRetrySpec {
    fn default() -> Self {
        Self {
            max_attempts: default_pg_attempts(),
            initial_backoff: default_pg_initial_backoff(),
            max_backoff: default_pg_max_backoff(),
        }
    }
}

fn default_pg_attempts() -> u32 {
    10
}

fn default_pg_initial_backoff() -> HumanDuration {
    HumanDuration(std::time::Duration::from_millis(100))
}

fn default_pg_max_backoff() -> HumanDuration {
    HumanDuration(std::time::Duration::from_secs(5))
}

/// Periodic checkpoints.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct CheckpointSpec {
    /// Time between checkpoint triggers; leave out to disable checkpoints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<HumanDuration>,
    /// A checkpoint not complete after this long is abandoned.
    #[serde(default = "default_checkpoint_timeout")]
    pub timeout: HumanDuration,
    /// Least time between the end of one checkpoint and the start of the next.
    #[serde(default)]
    pub min_pause: HumanDuration,
    /// Checkpoints in flight at once.
    #[serde(default = "default_max_concurrent")]
    #[schemars(range(min = 1, max = 16))]
    pub max_concurrent: u32,
    /// Completed checkpoints kept.
    #[serde(default = "default_retained")]
    #[schemars(range(min = 1, max = 1000))]
    pub retained: u32,
    /// Where checkpoints and savepoints are stored: `s3://bucket/prefix` (credentials and
    /// endpoint from the `AWS_*` environment), a `file://` URL or a path (default:
    /// `checkpoints/` under the data directory); or a map with the `url` and how to reach it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<StorageSpec>,
    /// Exactly-once (aligned barriers) or at-least-once.
    #[serde(default)]
    pub mode: CheckpointMode,
}

impl CheckpointSpec {
    /// Whether the job takes checkpoints.
    pub fn enabled(&self) -> bool {
        self.interval.is_some()
    }

    /// Where checkpoints are stored and how to reach it: `storage`, else `checkpoints/` under
    /// the data directory. Nothing is contacted.
    pub fn storage_config(&self) -> Result<weir_checkpoint::StorageConfig, String> {
        let config = match &self.storage {
            None => weir_checkpoint::StorageConfig::url(
                paths::data_dir().join("checkpoints").display().to_string(),
            ),
            Some(StorageSpec::Url(url)) => weir_checkpoint::StorageConfig::url(url.clone()),
            Some(StorageSpec::Settings(s)) => weir_checkpoint::StorageConfig {
                url: s.url.clone(),
                endpoint: s.endpoint.clone(),
                region: s.region.clone(),
                access_key_id: s.access_key_id.clone(),
                secret_access_key: s.secret_access_key.clone(),
                allow_http: s.allow_http,
                request_timeout: s.request_timeout.map(|d| d.0),
                max_retries: s.max_retries.map(|n| n as usize),
            },
        };
        let kind = config.kind()?;
        if let (Some(StorageSpec::Settings(s)), weir_checkpoint::object::StorageKind::Local(_)) =
            (&self.storage, &kind)
        {
            let set: Vec<&str> = [
                ("endpoint", s.endpoint.is_some()),
                ("region", s.region.is_some()),
                ("access-key-id", s.access_key_id.is_some()),
                ("secret-access-key", s.secret_access_key.is_some()),
                ("allow-http", s.allow_http.is_some()),
                ("request-timeout", s.request_timeout.is_some()),
                ("max-retries", s.max_retries.is_some()),
            ]
            .into_iter()
            .filter_map(|(k, set)| set.then_some(k))
            .collect();
            if !set.is_empty() {
                return Err(format!(
                    "{} only apply to s3:// storage, and `{}` is a local path",
                    set.iter()
                        .map(|k| format!("`{k}`"))
                        .collect::<Vec<_>>()
                        .join(", "),
                    config.url
                ));
            }
        }
        Ok(config)
    }

    /// Opens the checkpoint storage (nothing is contacted yet).
    pub fn open_storage(
        &self,
    ) -> Result<std::sync::Arc<dyn weir_checkpoint::CheckpointStorage>, String> {
        let config = self.storage_config()?;
        weir_checkpoint::object::open(&config).map_err(|e| e.to_string())
    }
}

/// Where checkpoints go: a URL or path, or a map that also says how to reach it.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum StorageSpec {
    // The map comes first: a map with a mistake is then reported against the map's keys.
    Settings(StorageSettings),
    /// `s3://bucket/prefix`, a `file://` URL or a path.
    Url(String),
}

/// Checkpoint storage with how to reach it. Unset keys come from the usual AWS environment
/// variables (`AWS_ENDPOINT`, `AWS_REGION`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
/// `AWS_ALLOW_HTTP`, ...), so MinIO, Ceph and AWS all work.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct StorageSettings {
    /// `s3://bucket/prefix`, a `file://` URL or a path.
    pub url: String,
    /// The S3 endpoint, e.g. `http://127.0.0.1:9000` for MinIO (default: AWS).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// The bucket's region (default: `us-east-1`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access_key_id: Option<String>,
    /// Prefer the `AWS_SECRET_ACCESS_KEY` variable to writing the secret in a job file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_access_key: Option<String>,
    /// Allow an `http://` endpoint (a local MinIO); off by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_http: Option<bool>,
    /// A request taking longer is abandoned and retried (default: 30s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_timeout: Option<HumanDuration>,
    /// Retries of a failed request, with exponential backoff from 100 ms up to 5 s (default: 10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 100))]
    pub max_retries: Option<u32>,
}

impl Default for CheckpointSpec {
    fn default() -> Self {
        Self {
            interval: None,
            timeout: default_checkpoint_timeout(),
            min_pause: HumanDuration::ZERO,
            max_concurrent: default_max_concurrent(),
            retained: default_retained(),
            storage: None,
            mode: CheckpointMode::default(),
        }
    }
}

fn default_checkpoint_timeout() -> HumanDuration {
    HumanDuration(std::time::Duration::from_secs(600))
}
fn default_max_concurrent() -> u32 {
    1
}
fn default_retained() -> u32 {
    3
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum CheckpointMode {
    #[default]
    ExactlyOnce,
    AtLeastOnce,
}

/// What happens when a job fails: unless retrying cannot help (bad data, a refused credential:
/// the job fails at once), it restarts from its latest completed checkpoint (from the start,
/// without checkpoints) as its restart strategy allows, as Flink's restart strategies do.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct RestartSpec {
    /// How restarts are budgeted and spaced.
    #[serde(default)]
    pub strategy: RestartStrategy,
    /// `fixed-delay`, `exponential-delay`: restarts before the job fails for good (default: 3
    /// with checkpoints, 0 without); with `reset-after`, counted since the last healthy period.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 1000))]
    pub max_attempts: Option<u32>,
    /// Wait before a restart (`exponential-delay`: before the first, growing by `multiplier`
    /// per restart up to `max-delay`).
    #[serde(default = "default_restart_delay")]
    pub delay: HumanDuration,
    /// `exponential-delay`: the longest wait between restarts.
    #[serde(default = "default_restart_max_delay")]
    pub max_delay: HumanDuration,
    /// `exponential-delay`: how much longer each wait is than the one before.
    #[serde(default = "default_restart_multiplier")]
    #[schemars(range(min = 1.0, max = 100.0))]
    pub multiplier: f64,
    /// `exponential-delay`: each wait varies by up to this fraction either way, so that jobs
    /// failing together do not all come back at the same moment.
    #[serde(default = "default_restart_jitter")]
    #[schemars(range(min = 0.0, max = 1.0))]
    pub jitter: f64,
    /// `exponential-delay`: a job that ran this long since its last restart without failing is
    /// healthy again: its attempts and its delay start over (`null`: never).
    #[serde(default = "default_restart_reset_after")]
    pub reset_after: Option<HumanDuration>,
    /// `failure-rate`: the job fails once it has failed more than this often within
    /// `interval`.
    #[serde(default = "default_restart_max_failures")]
    #[schemars(range(min = 1, max = 1000))]
    pub max_failures: u32,
    /// `failure-rate`: the window over which failures are counted.
    #[serde(default = "default_restart_interval")]
    pub interval: HumanDuration,
}

/// How a job's restarts are budgeted and spaced.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum RestartStrategy {
    /// At most `max-attempts` restarts, `delay` apart.
    FixedDelay,
    /// At most `max-attempts` restarts, waiting `delay`, then `multiplier` times longer each
    /// time up to `max-delay`, with `jitter`; a run of `reset-after` without failure starts
    /// the count and the delay over.
    #[default]
    ExponentialDelay,
    /// Restarts `delay` apart while the job has failed at most `max-failures` times within
    /// `interval`.
    FailureRate,
}

impl Default for RestartSpec {
    fn default() -> Self {
        Self {
            strategy: RestartStrategy::default(),
            max_attempts: None,
            delay: default_restart_delay(),
            max_delay: default_restart_max_delay(),
            multiplier: default_restart_multiplier(),
            jitter: default_restart_jitter(),
            reset_after: default_restart_reset_after(),
            max_failures: default_restart_max_failures(),
            interval: default_restart_interval(),
        }
    }
}

fn default_restart_delay() -> HumanDuration {
    HumanDuration(std::time::Duration::from_secs(1))
}
fn default_restart_max_delay() -> HumanDuration {
    HumanDuration(std::time::Duration::from_secs(30))
}
fn default_restart_multiplier() -> f64 {
    2.0
}
fn default_restart_jitter() -> f64 {
    0.1
}
fn default_restart_reset_after() -> Option<HumanDuration> {
    Some(HumanDuration(std::time::Duration::from_secs(3600)))
}
fn default_restart_max_failures() -> u32 {
    3
}
fn default_restart_interval() -> HumanDuration {
    HumanDuration(std::time::Duration::from_secs(60))
}

impl RestartSpec {
    /// Restarts allowed (`fixed-delay`, `exponential-delay`): the configured number, else 3
    /// when the job checkpoints (a restart then resumes) and 0 when it does not (a restart
    /// would start over).
    pub fn attempts(&self, checkpointing: bool) -> u32 {
        self.max_attempts
            .unwrap_or(if checkpointing { 3 } else { 0 })
    }
}

/// Keyed state backend settings.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct StateSpec {
    /// `heap` keeps state in memory; `rocksdb` keeps it on local disk.
    #[serde(default)]
    pub backend: StateBackendKind,
    /// Directory of the RocksDB backend (default: `state/` under the data directory, which is
    /// `data/` or `$WEIR_DATA_DIR`). Each run works in its own subdirectory, removed at the end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// RocksDB block cache shared by the job's states.
    #[serde(default = "default_block_cache")]
    pub block_cache: ByteSize,
    /// RocksDB write buffer (memtable) size per column family.
    #[serde(default = "default_write_buffer")]
    pub write_buffer: ByteSize,
    /// Compression of RocksDB files.
    #[serde(default)]
    pub compression: Compression,
    /// RocksDB: entries each state keeps in its write-back cache before writing them out.
    #[serde(default = "default_cache_entries")]
    #[schemars(range(min = 1))]
    pub cache_entries: u64,
    /// State not written for this long (processing time) is dropped, in every keyed operator of
    /// the job, as with Flink SQL's state TTL: longer than any window, or windows lose state.
    /// Leave out to keep state until operators clear it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl: Option<HumanDuration>,
}

fn default_cache_entries() -> u64 {
    100_000
}

impl Default for StateSpec {
    fn default() -> Self {
        Self {
            backend: StateBackendKind::default(),
            path: None,
            block_cache: default_block_cache(),
            write_buffer: default_write_buffer(),
            compression: Compression::default(),
            cache_entries: default_cache_entries(),
            ttl: None,
        }
    }
}

fn default_block_cache() -> ByteSize {
    ByteSize(64 * 1024 * 1024)
}
fn default_write_buffer() -> ByteSize {
    ByteSize(64 * 1024 * 1024)
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum StateBackendKind {
    #[default]
    Heap,
    Rocksdb,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Compression {
    None,
    #[default]
    Lz4,
    Zstd,
}

/// The JSON Schema of job files, as `weir schema` prints it.
pub fn json_schema() -> serde_json::Value {
    serde_json::to_value(schemars::schema_for!(JobSpec))
        .expect("a derived JSON Schema always serializes")
}

#[cfg(test)]
mod retry_tests {
    use super::*;

    #[test]
    fn retries_wait_doubling_delays_with_jitter_up_to_as_much_again() {
        let retry = PostgresRetrySpec {
            max_attempts: 6,
            initial_backoff: HumanDuration::from_millis(100),
            max_backoff: HumanDuration::from_millis(500),
        };
        // Naively: 100, 200, 400, 500, 500 ms, each plus a jitter in [0, itself).
        let expected = [100u64, 200, 400, 500, 500];
        let mut seen_jitter = false;
        for _ in 0..20 {
            let waits: Vec<_> = retry.delays().collect();
            assert_eq!(waits.len(), expected.len(), "max-attempts - 1 waits");
            for (wait, base) in waits.iter().zip(expected) {
                let base = std::time::Duration::from_millis(base);
                assert!(*wait >= base && *wait < base * 2, "{wait:?} for {base:?}");
                seen_jitter |= *wait != base;
            }
        }
        assert!(seen_jitter, "the waits are jittered");
        let once = PostgresRetrySpec {
            max_attempts: 1,
            ..retry
        };
        assert_eq!(once.delays().count(), 0, "one attempt: no retry");
    }
}
