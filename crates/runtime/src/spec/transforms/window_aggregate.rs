//! `window-aggregate`: aggregates per key and event-time window.

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{TransformNode, queryable::QueryableSpec, window::WindowSpec};
use crate::config::HumanDuration;

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
