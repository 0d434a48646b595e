//! Queryable state: looking up a running job's keyed state by key from outside the job.
//!
//! A keyed operator declares its queryable states in the job file (`queryable:`); the planner
//! checks them ([`QueryableNode::build`]) and each attempt of the job registers, per subtask,
//! a direct reader of each state (RocksDB) and the task's mailbox (the ordered path) with the
//! job's [`Queries`]. A lookup then goes:
//!
//! - **direct** (RocksDB; the default there): the key's key group names the owning subtask,
//!   whose [`StateReader`] reads a RocksDB snapshot on the caller's task. No message enters
//!   the operator's task; the answer says how fresh it is (the state's last write-through).
//!   Why that read is safe is written at [`weir_state::query`].
//! - **ordered** (the heap backend's only path, or asked for): a [`Control`] message goes to
//!   the owning task's bounded mailbox and the task answers between two batches, having seen
//!   every write before it (read-your-writes). A full mailbox answers "busy" at once, a slow
//!   task times out: a lookup never waits without bound, and the operator spends at most one
//!   lookup's work per turn of its loop on it.
//!
//! Keys are given as text: the key column's value (`42`, `alice`), or for several key columns
//! a JSON array (`["alice", 3]`). They are encoded and hashed exactly as the `key-by` exchange
//! does, so a lookup reaches the subtask that holds the key. Values come back as JSON: the
//! operator's aggregates by name, with the window or session they belong to.//!
//! # Layout
//! - [`declare`]: the planner's check of a `queryable:` declaration ([`QueryableNode`]).
//! - `keys`: key text ↔ stored key bytes and key group.
//! - `render`: stored entries as JSON.
//! - this file: [`Queries`], routing a lookup to the subtask that owns its key, direct or
//!   ordered, and [`answer`], the ordered path on the operator's task.

pub mod declare;
mod keys;
mod render;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use schemars::JsonSchema;
use serde::Serialize;
use tokio::sync::{mpsc, oneshot};
use weir_state::key_groups::KeyGroupRange;
use weir_state::{Found, NO_NAMESPACE, Select, StateError, StateReader};

use crate::spec::{QueryPath, StateBackendKind};

pub use declare::{
    DEFAULT_MAX_STALENESS_MS, DeclarationProblem, QueryableNode, QueryableState, StateShape,
};

/// Ordered lookups waiting per subtask: a lookup that finds its subtask's mailbox full is
/// answered "busy" at once rather than queued (so a flood cannot grow memory or delay the
/// operator by more than this many lookups).
pub const MAILBOX: usize = 32;
/// Longest an ordered lookup waits for the operator's task to answer.
pub const ORDERED_TIMEOUT: Duration = Duration::from_secs(2);
/// Entries returned when the request gives no limit.
pub const DEFAULT_LIMIT: usize = 100;
/// Most entries one lookup returns.
pub const MAX_LIMIT: usize = 1000;
/// Most entries a prefix scan examines per subtask (a scan costs what it examines).
pub const SCAN_BUDGET: usize = 100_000;

/// A message to an operator's task outside the data stream.
pub enum Control {
    /// An ordered lookup, answered between two batches.
    Query(OrderedQuery),
}

/// A predicate on stored (key group, key, namespace), run where the state is read.
pub type EntryFilter = Box<dyn FnMut(u32, &[u8], &[u8]) -> bool + Send>;

pub struct OrderedQuery {
    /// The operator's index in its chain.
    pub op: usize,
    pub state: String,
    pub select: Select,
    pub filter: EntryFilter,
    /// Dropped unanswered if the task ends first: the caller sees the task gone.
    pub reply: oneshot::Sender<Result<Found, StateError>>,
}

/// One subtask of a queryable node in the current attempt.
struct Subtask {
    range: KeyGroupRange,
    /// Direct readers, by state (RocksDB).
    readers: HashMap<String, StateReader>,
    /// The task's mailbox, for ordered lookups.
    mailbox: mpsc::Sender<Control>,
    op: usize,
}

/// What an attempt registers for one subtask of a queryable node.
pub struct SubtaskRegistration {
    pub node: String,
    pub subtask: usize,
    pub range: KeyGroupRange,
    pub readers: HashMap<String, StateReader>,
    pub mailbox: mpsc::Sender<Control>,
    pub op: usize,
}

/// Lookups served, for tests and the benchmark.
#[derive(Debug, Default)]
pub struct QueryCounters {
    /// Subtask reads on the direct path.
    pub direct: AtomicU64,
    /// Ordered lookups sent to operators' mailboxes.
    pub ordered: AtomicU64,
    /// Ordered lookups refused because the mailbox was full.
    pub busy: AtomicU64,
}

/// A lookup: by key, or a scan by key prefix.
#[derive(Clone, Debug, Default)]
pub struct LookupRequest {
    pub key: Option<String>,
    pub prefix: Option<String>,
    pub limit: Option<usize>,
    /// The path to take instead of the state's declared one.
    pub path: Option<QueryPath>,
}

/// How fresh an answer is.
#[derive(Clone, Debug, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub struct Freshness {
    /// The answer holds every write the operator made before this time (epoch ms): for
    /// direct reads the state's last write-through (the oldest over the subtasks read).
    pub as_of: i64,
    /// Milliseconds between `as_of` and the answer.
    pub age_ms: i64,
    /// Whether the answer saw every write made before the lookup (the ordered path).
    pub read_your_writes: bool,
}

/// The answer to a lookup.
#[derive(Clone, Debug, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub struct LookupAnswer {
    pub job: String,
    pub operator: String,
    pub state: String,
    pub path: QueryPath,
    /// In key order (then window order).
    pub entries: Vec<LookupEntry>,
    /// Whether the limit (or a scan's budget) cut the answer short.
    pub truncated: bool,
    pub freshness: Freshness,
}

/// One key (and window) of a state, as a lookup answers it.
#[derive(Clone, Debug, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub struct LookupEntry {
    /// The key's columns by name.
    pub key: serde_json::Map<String, serde_json::Value>,
    /// The window the entry belongs to for a state kept per window (`windows`); `null`
    /// otherwise (a `sessions` state gives each session's window in `value`). Always sent, so
    /// that every entry has the same keys.
    pub window: Option<WindowBounds>,
    pub value: EntryValue,
    /// The subtask that holds the key.
    pub subtask: usize,
}

/// A window's bounds, epoch ms: `[start, end)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, JsonSchema)]
pub struct WindowBounds {
    pub start: i64,
    pub end: i64,
}

/// What a state holds for one key.
#[derive(Clone, Debug, PartialEq, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum EntryValue {
    /// The aggregates by name (`accumulators` and `windows` states).
    Aggregates(serde_json::Map<String, serde_json::Value>),
    /// The key's open sessions, oldest first (`sessions` states).
    Sessions(Vec<SessionEntry>),
}

/// One open session of a key.
#[derive(Clone, Debug, PartialEq, Serialize, JsonSchema)]
pub struct SessionEntry {
    pub window: WindowBounds,
    /// The session's aggregates by name.
    pub value: serde_json::Map<String, serde_json::Value>,
}

/// Why a lookup has no answer; each variant says what the caller can do.
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    /// No such operator, state or key: fix the request.
    #[error("{0}")]
    NotFound(String),
    /// The request is malformed (a key that does not parse, a path the state cannot take).
    #[error("{0}")]
    BadRequest(String),
    /// The operator's mailbox is full: retry shortly.
    #[error("{0}")]
    Busy(String),
    /// The job is not running, or its subtask restarts: retry later.
    #[error("{0}")]
    Unavailable(String),
    /// The operator did not answer in time: retry, or use the direct path.
    #[error("{0}")]
    Timeout(String),
    /// The state could not be read or decoded: a bug, or a damaged store.
    #[error("{0}")]
    Internal(String),
}

/// The queryable states of one job and, for its current attempt, where to read them.
pub struct Queries {
    job: String,
    nodes: HashMap<String, Arc<QueryableNode>>,
    /// Per node, its subtasks in the running attempt (replaced by each attempt).
    live: RwLock<HashMap<String, Arc<Vec<Subtask>>>>,
    pub counters: QueryCounters,
}

impl std::fmt::Debug for Queries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queries")
            .field("job", &self.job)
            .field("nodes", &self.nodes.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Queries {
    /// The queryable nodes of job `job`, by node name (each planned node's `queryable`).
    pub fn new(
        job: &str,
        nodes: impl IntoIterator<Item = (String, Arc<QueryableNode>)>,
    ) -> Arc<Self> {
        Arc::new(Self {
            job: job.to_owned(),
            nodes: nodes.into_iter().collect(),
            live: RwLock::new(HashMap::new()),
            counters: QueryCounters::default(),
        })
    }

    pub fn node(&self, name: &str) -> Option<&Arc<QueryableNode>> {
        self.nodes.get(name)
    }

    /// Installs an attempt's subtasks (replacing the previous attempt's).
    pub fn install(&self, registrations: Vec<SubtaskRegistration>) {
        let mut per_node: HashMap<String, Vec<(usize, Subtask)>> = HashMap::new();
        for r in registrations {
            per_node.entry(r.node).or_default().push((
                r.subtask,
                Subtask {
                    range: r.range,
                    readers: r.readers,
                    mailbox: r.mailbox,
                    op: r.op,
                },
            ));
        }
        let mut live = self.live.write().unwrap_or_else(|p| p.into_inner());
        live.clear();
        for (node, mut subtasks) in per_node {
            subtasks.sort_by_key(|(s, _)| *s);
            live.insert(
                node,
                Arc::new(subtasks.into_iter().map(|(_, s)| s).collect()),
            );
        }
    }

    /// Looks up `operator`'s state `state`.
    pub async fn lookup(
        &self,
        operator: &str,
        state: &str,
        request: &LookupRequest,
    ) -> Result<LookupAnswer, QueryError> {
        let node = self.nodes.get(operator).cloned().ok_or_else(|| {
            let mut names: Vec<&str> = self.nodes.keys().map(String::as_str).collect();
            names.sort_unstable();
            QueryError::NotFound(if names.is_empty() {
                format!(
                    "job `{}` has no operator `{operator}` with queryable state (declare \
                     `queryable:` on a keyed operator)",
                    self.job
                )
            } else {
                format!(
                    "job `{}` has no queryable operator `{operator}`; its queryable operators \
                     are: {}",
                    self.job,
                    names.join(", ")
                )
            })
        })?;
        let declared = node.state(state).cloned().ok_or_else(|| {
            let names: Vec<&str> = node.states.iter().map(|s| s.name.as_str()).collect();
            QueryError::NotFound(format!(
                "operator `{operator}` has no queryable state `{state}`; its queryable states \
                 are: {}",
                names.join(", ")
            ))
        })?;
        let path = request.path.unwrap_or(declared.path);
        if path == QueryPath::Direct && node.backend != StateBackendKind::Rocksdb {
            return Err(QueryError::BadRequest(format!(
                "`{operator}` keeps its state on the heap, which only its task can read: use \
                 the ordered path"
            )));
        }
        let limit = request.limit.unwrap_or(DEFAULT_LIMIT).clamp(1, MAX_LIMIT);
        let subtasks = self
            .live
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(operator)
            .cloned()
            .ok_or_else(|| QueryError::Unavailable(format!("job `{}` is not running", self.job)))?;
        let (select, targets, key_text): (Select, Vec<usize>, Option<&str>) =
            match (&request.key, &request.prefix) {
                (Some(key), None) => {
                    let (group, bytes) = node.keys.encode(key).map_err(QueryError::BadRequest)?;
                    let owner = subtasks
                        .iter()
                        .position(|s| s.range.contains(group))
                        .ok_or_else(|| {
                            QueryError::Internal(format!("no subtask owns key group {group}"))
                        })?;
                    // Windows: every window of the key; the others have one entry per key.
                    let namespace =
                        (declared.shape != StateShape::Windows).then(|| NO_NAMESPACE.to_vec());
                    let select = Select::Key {
                        group,
                        key: bytes,
                        namespace,
                        limit,
                    };
                    (select, vec![owner], Some(key.as_str()))
                }
                (None, Some(_)) => (
                    Select::Scan {
                        limit,
                        budget: SCAN_BUDGET,
                    },
                    (0..subtasks.len()).collect(),
                    None,
                ),
                _ => {
                    return Err(QueryError::BadRequest(
                        "give either `key` (a lookup) or `prefix` (a scan), not both".into(),
                    ));
                }
            };
        let mut found: Vec<(usize, Found)> = Vec::new();
        for s in targets {
            let filter = self.filter(&node, request.prefix.as_deref());
            let f = match path {
                QueryPath::Direct => {
                    self.read_direct(&subtasks[s], state, &select, filter)
                        .await?
                }
                QueryPath::Ordered => {
                    self.read_ordered(&subtasks[s], operator, state, select.clone(), filter)
                        .await?
                }
            };
            found.push((s, f));
        }
        let now = weir_state::query::now_ms();
        let as_of = found.iter().map(|(_, f)| f.as_of_ms).min().unwrap_or(now);
        let mut truncated = found.iter().any(|(_, f)| f.truncated);
        let mut entries = Vec::new();
        let mut raw: Vec<(usize, weir_state::QueryEntry)> = found
            .into_iter()
            .flat_map(|(s, f)| f.entries.into_iter().map(move |e| (s, e)))
            .collect();
        raw.sort_by(|a, b| (&a.1.key, &a.1.namespace).cmp(&(&b.1.key, &b.1.namespace)));
        if raw.len() > limit {
            raw.truncate(limit);
            truncated = true;
        }
        for (s, e) in &raw {
            entries.push(node.render(&declared, e, *s).map_err(|m| {
                QueryError::Internal(format!("decoding `{operator}.{state}`: {m}"))
            })?);
        }
        if let (Some(key), true) = (key_text, entries.is_empty()) {
            return Err(QueryError::NotFound(format!(
                "`{operator}.{state}` holds nothing for key `{key}`{}",
                if path == QueryPath::Direct {
                    " (as of its last write-through; the ordered path sees newer writes)"
                } else {
                    ""
                }
            )));
        }
        Ok(LookupAnswer {
            job: self.job.clone(),
            operator: operator.to_string(),
            state: state.to_string(),
            path,
            entries,
            truncated,
            freshness: Freshness {
                as_of,
                age_ms: now.saturating_sub(as_of).max(0),
                read_your_writes: path == QueryPath::Ordered,
            },
        })
    }

    /// The entry filter of a request: a key prefix on the first key column's text, or all.
    fn filter(&self, node: &Arc<QueryableNode>, prefix: Option<&str>) -> EntryFilter {
        match prefix {
            Some(p) if !p.is_empty() => {
                let (node, p) = (node.clone(), p.to_string());
                Box::new(move |_, key, _| {
                    node.keys.first_text(key).is_some_and(|t| t.starts_with(&p))
                })
            }
            _ => Box::new(|_, _, _| true),
        }
    }

    /// The direct path: a snapshot read on this task (a key lookup: a seek and a few steps,
    /// microseconds), or on the blocking pool for a scan (up to [`SCAN_BUDGET`] entries, which
    /// would hold a runtime thread for milliseconds).
    async fn read_direct(
        &self,
        subtask: &Subtask,
        state: &str,
        select: &Select,
        mut filter: EntryFilter,
    ) -> Result<Found, QueryError> {
        let reader =
            subtask.readers.get(state).cloned().ok_or_else(|| {
                QueryError::Internal(format!("no direct reader of state `{state}`"))
            })?;
        self.counters.direct.fetch_add(1, Ordering::Relaxed);
        let result = match select {
            Select::Key { .. } => reader.read(select, &mut filter),
            Select::Scan { .. } => {
                let select = select.clone();
                // Owned and awaited here: the scan's thread is this lookup's.
                tokio::task::spawn_blocking(move || reader.read(&select, &mut filter))
                    .await
                    .map_err(|e| QueryError::Internal(format!("a state scan stopped: {e}")))?
            }
        };
        result.map_err(state_error)
    }

    /// The ordered path: a message to the task's bounded mailbox, answered between batches.
    async fn read_ordered(
        &self,
        subtask: &Subtask,
        operator: &str,
        state: &str,
        select: Select,
        filter: EntryFilter,
    ) -> Result<Found, QueryError> {
        let (reply, answer) = oneshot::channel();
        let query = OrderedQuery {
            op: subtask.op,
            state: state.to_string(),
            select,
            filter,
            reply,
        };
        match subtask.mailbox.try_send(Control::Query(query)) {
            Ok(()) => {
                self.counters.ordered.fetch_add(1, Ordering::Relaxed);
            }
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.counters.busy.fetch_add(1, Ordering::Relaxed);
                return Err(QueryError::Busy(format!(
                    "`{operator}` has {MAILBOX} lookups waiting; retry shortly"
                )));
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {
                return Err(QueryError::Unavailable(format!(
                    "`{operator}`'s task has stopped (the job ended or restarts)"
                )));
            }
        }
        match tokio::time::timeout(ORDERED_TIMEOUT, answer).await {
            Ok(Ok(result)) => result.map_err(state_error),
            Ok(Err(_)) => Err(QueryError::Unavailable(format!(
                "`{operator}`'s task stopped before answering (the job ended or restarts)"
            ))),
            Err(_) => Err(QueryError::Timeout(format!(
                "`{operator}` did not answer within {ORDERED_TIMEOUT:?}"
            ))),
        }
    }
}

fn state_error(e: StateError) -> QueryError {
    match e {
        e @ StateError::Closed(_) => QueryError::Unavailable(e.to_string()),
        other => QueryError::Internal(other.to_string()),
    }
}

/// Answers a control message on the operator's task (between batches).
pub fn answer(op: &mut dyn crate::api::Operator, query: OrderedQuery) {
    let OrderedQuery {
        state,
        select,
        mut filter,
        reply,
        ..
    } = query;
    let result = match op.keyed_state() {
        Some(backend) => backend.read_ordered(&state, &select, &mut filter),
        None => Err(StateError::Invalid(
            "the operator keeps no keyed state".into(),
        )),
    };
    // The caller may have timed out and gone: nothing to do then.
    let _ = reply.send(result);
}

#[cfg(test)]
mod tests {
    use arrow_array::{ArrayRef, Int64Array, StringArray};
    use arrow_schema::DataType;

    use super::keys::KeyCodec;
    use super::*;
    use crate::expr::Expr;
    use crate::keys::KeySelector;
    use crate::spec::QueryableSpec;
    use arrow_schema::{Field, Schema};

    fn selector(types: &[(&str, DataType)]) -> KeySelector {
        let schema = Schema::new(
            types
                .iter()
                .map(|(n, t)| Field::new(*n, t.clone(), true))
                .collect::<Vec<_>>(),
        );
        KeySelector::new(
            types
                .iter()
                .map(|(n, _)| Expr::compile(n, &schema).unwrap())
                .collect(),
            types.iter().map(|(n, _)| n.to_string()).collect(),
            128,
        )
    }

    #[test]
    fn keys_given_as_text_land_in_the_group_the_exchange_routes_them_to() {
        let keys = selector(&[("user", DataType::Utf8), ("n", DataType::Int64)]);
        let codec = KeyCodec::new(&keys);
        let (group, bytes) = codec.encode(r#"["alice", 7]"#).unwrap();
        // What the exchange computes for the same row.
        let cols: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(vec!["alice"])),
            Arc::new(Int64Array::from(vec![7])),
        ];
        let mut groups = Vec::new();
        let mut hashes = Vec::new();
        keys.key_groups_of(
            &arrow_array::RecordBatch::try_new(
                Arc::new(Schema::new(vec![
                    Field::new("user", DataType::Utf8, true),
                    Field::new("n", DataType::Int64, true),
                ])),
                cols,
            )
            .unwrap(),
            &mut hashes,
            &mut groups,
        )
        .unwrap();
        assert_eq!(group, groups[0]);
        assert_eq!(
            codec.decode(&bytes).unwrap(),
            serde_json::json!({"user": "alice", "n": 7})
        );
        assert!(codec.encode("alice").unwrap_err().contains("JSON array"));
        let single = KeyCodec::new(&selector(&[("auction", DataType::Int64)]));
        assert!(single.encode("x").unwrap_err().contains("not an integer"));
        let (_, b) = single.encode("1007").unwrap();
        assert_eq!(single.first_text(&b).as_deref(), Some("1007"));
    }

    #[test]
    fn declarations_are_checked_against_the_kinds_states_and_the_backend() {
        let keys = selector(&[("k", DataType::Int64)]);
        let available = [("accumulators", StateShape::Accumulators)];
        let build = |spec: &str, backend| {
            let spec: QueryableSpec =
                serde_json::from_value(crate::spec::yaml::parse(spec).unwrap().value).unwrap();
            QueryableNode::build(
                "agg",
                "aggregate",
                &spec,
                backend,
                &keys,
                vec![],
                &available,
            )
        };
        let err = build("[accumulator, accumulators]", StateBackendKind::Heap).unwrap_err();
        assert_eq!(err.len(), 1);
        assert_eq!(err[0].pointer, "queryable/0");
        assert!(
            err[0].message.contains("`accumulators`"),
            "{}",
            err[0].message
        );
        let direct = "{accumulators: {path: direct, max-staleness: 1s}}";
        let heap = build(direct, StateBackendKind::Heap).unwrap_err();
        assert!(heap[0].message.contains("RocksDB backend"));
        let rocks = build(direct, StateBackendKind::Rocksdb).unwrap();
        assert_eq!(rocks.states[0].path, QueryPath::Direct);
        assert_eq!(rocks.states[0].max_staleness_ms, Some(1000));
    }
}
