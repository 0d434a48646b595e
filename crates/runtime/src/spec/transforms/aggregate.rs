//! `aggregate`: a running aggregation per key.

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{TransformNode, queryable::QueryableSpec};
use crate::config::HumanDuration;

#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct AggregateSpec {
    /// A `key-by` node.
    pub from: String,
    /// Output columns after the key columns: name → aggregate call, one of `count(*)`,
    /// `count(x)`, `count(DISTINCT x)`, `sum(x)`, `min(x)`, `max(x)`, `avg(x)`, `max_by(x, y)`,
    /// `min_by(x, y)`, each optionally `FILTER (WHERE condition)` (only the rows it keeps are
    /// aggregated). Empty (`{}`): the distinct keys, each emitted once (`SELECT DISTINCT`).
    pub aggregates: IndexMap<String, String>,
    /// Emit a key's changes once per mini-batch instead of once per input batch: rows are
    /// aggregated as they come, and each key touched since the last mini-batch emits at most
    /// one `-U`/`+U` pair (or `+I`, or `-D`), and nothing when its values ended as they were.
    /// A mini-batch ends after `size` input rows or `interval` of processing time, whichever
    /// comes first, and always before a checkpoint barrier and at the end of input (default:
    /// the job's `mini-batch`; none without one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mini_batch: Option<MiniBatchSpec>,
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

/// Mini-batching of a running aggregate (Flink's `table.exec.mini-batch.*`): a hot key emits
/// one update per mini-batch rather than one per input batch.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct MiniBatchSpec {
    /// The longest a change waits (processing time) before it is emitted: Flink's
    /// `allow-latency`. At least 1ms.
    pub interval: HumanDuration,
    /// The most input rows in one mini-batch: a mini-batch with this many rows is emitted at
    /// once. It bounds what the aggregate holds for the batch (one entry per key it touched).
    #[schemars(range(min = 1, max = 1048576))]
    pub size: u32,
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

    fn mini_batch(&self) -> Option<&MiniBatchSpec> {
        self.mini_batch.as_ref()
    }
}
