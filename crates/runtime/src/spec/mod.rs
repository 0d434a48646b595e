//! The job file: what a user writes in YAML, as strict, documented serde types.
//!
//! A job is a DAG of named nodes in three sections (`sources`, `transforms`, `sinks`) wired by name
//! with `from:`. Every struct denies unknown keys, every key is kebab-case, and every default lives
//! next to its field so that `weir schema` (a JSON Schema derived from these types) documents it.
//! Loading a file ([`load`]) reports every problem at once with its line, column and key path.
//!
//! The keys of each source and sink kind are declared by its connector
//! ([`crate::connectors`], each in its own module), and the spec enums ([`SourceSpec`],
//! [`SinkSpec`]) are made there from one list; they are re-exported here with the vocabulary
//! every spec shares ([`crate::config`]: durations, sizes, event time, `on-error`).
//!
//! # Layout
//! - [`load`]: YAML text → [`JobSpec`]: syntax, `--set` overrides, schema validation, decoding.
//! - [`env`]: `${VAR}` and `${VAR:-default}` in string values, read from the environment.
//! - [`positions`]: where each key and value sits in the YAML text.
//! - [`yaml`]: the one YAML pass over a job file: tree, positions and limits together.
//! - [`problems`]: the error type that lists every problem with its position.
//! - [`checks`]: well-typed values a run would refuse or choke on (zero intervals, tiny chunks).
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
pub mod load;
pub mod positions;
pub mod problems;
pub mod sql_file;
pub mod transforms;
pub mod yaml;

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use self::problems::{Problem, SpecError};
pub use self::transforms::*;
pub use crate::config::{
    ByteSize, EventTimeSpec, HumanDuration, OnError, SignedDuration, StorageSettings, StorageSpec,
    paths, units,
};
pub use crate::connectors::blackhole::BlackholeSinkSpec;
pub use crate::connectors::file::FileSinkSpec;
pub use crate::connectors::jsonl::JsonlSourceSpec;
pub use crate::connectors::kafka::spec as kafka;
pub use crate::connectors::kafka::spec::{KafkaSinkSpec, KafkaSourceSpec};
pub use crate::connectors::nats::spec as nats;
pub use crate::connectors::nats::spec::{NatsSinkSpec, NatsSourceSpec};
pub use crate::connectors::nexmark::NexmarkSourceSpec;
pub use crate::connectors::postgres::{PostgresPoolSpec, PostgresRetrySpec, PostgresSinkSpec};
pub use crate::connectors::stdout::StdoutSinkSpec;
pub use crate::connectors::{SinkSpec, SourceSpec};

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
    /// Subtasks per operator unless the operator says otherwise. An exchange (a `key-by`, or a
    /// change of parallelism) links every subtask of one side to every subtask of the other by
    /// a channel of about 1.7 KiB: a job whose channels would take more than a quarter of the
    /// machine's memory is refused before it starts.
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
    /// Not for an aggregate with `count(DISTINCT x)`, whose partial sets of values would be
    /// inserted again where they merge. Results are the same either way; turn off to compare.
    #[serde(default = "default_true")]
    pub two_phase_aggregation: bool,
    /// Keep the sliding windows of a `window-aggregate` without allowed lateness (and not
    /// declared queryable) as slices of one slide: a record updates the one slice holding it
    /// instead of every window holding it, and a window is the merge of its slices when it
    /// fires. Results are the same either way; turn off to compare.
    #[serde(default = "default_true")]
    pub window_slicing: bool,
    /// Mini-batching for every running `aggregate` (windowless `GROUP BY` in SQL) that does
    /// not set its own `mini-batch`: each key emits at most one update per `interval` or
    /// `size` input rows, whichever comes first, instead of one per input batch. Window
    /// aggregates emit each window once anyway and are left alone. Leave out for none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mini_batch: Option<MiniBatchSpec>,
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
            /// key's new values once per input batch (or mini-batch) in which the key changed.
            Aggregate(AggregateSpec) = "aggregate" in aggregate,
            /// Aggregates per key and event-time window (tumbling, sliding or session), emitted
            /// when the watermark passes the window's end.
            WindowAggregate(WindowAggregateSpec) = "window-aggregate" in window_aggregate,
            /// The first `n` rows per key by an order: emitted when the watermark reaches a time, or
            /// without `fire-at` kept up to date as an updating stream.
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

    /// The node's own mini-batching, over the job's, if its kind has one.
    fn mini_batch(&self) -> Option<&MiniBatchSpec> {
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
            Some(spec) => return spec.config(),
        };
        config.kind()?;
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
