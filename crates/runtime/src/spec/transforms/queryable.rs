//! What a keyed operator declares queryable: its states, and how each is read.

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::config::HumanDuration;

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
