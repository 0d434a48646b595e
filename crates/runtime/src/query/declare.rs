//! Declaring queryable state: the planner checks a keyed operator's `queryable:` section
//! against the states its kind keeps and the job's backend.

use super::keys::KeyCodec;
use crate::keys::KeySelector;
use crate::spec::{QueryPath, QueryableSpec, StateBackendKind};

/// How a queryable state's values are laid out, to render them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StateShape {
    /// One accumulator per aggregate, no namespace (`aggregate`'s `accumulators`).
    Accumulators,
    /// Accumulators per window, namespaced by the window (`window-aggregate`'s `windows`).
    Windows,
    /// The key's open sessions with their accumulators (`window-aggregate`'s `sessions`).
    Sessions,
}

/// How old direct reads of a state may be when its declaration does not say (`max-staleness`).
pub const DEFAULT_MAX_STALENESS_MS: i64 = 1000;

/// One declared queryable state.
#[derive(Clone, Debug)]
pub struct QueryableState {
    pub name: String,
    /// The path lookups take unless they ask for the other.
    pub path: QueryPath,
    /// RocksDB: the operator writes the state through at least this often (ms).
    pub max_staleness_ms: Option<i64>,
    pub shape: StateShape,
}

/// A keyed operator's queryable states, and how to encode its keys and render its values.
#[derive(Debug)]
pub struct QueryableNode {
    pub node: String,
    pub kind: &'static str,
    pub states: Vec<QueryableState>,
    pub backend: StateBackendKind,
    pub(super) keys: KeyCodec,
    /// The aggregates' output names, in accumulator order.
    pub(super) aggregates: Vec<String>,
}

/// A problem with a `queryable:` declaration: where under it (`queryable/<i or name>`), and
/// what.
#[derive(Debug, PartialEq, Eq)]
pub struct DeclarationProblem {
    pub pointer: String,
    pub message: String,
}

impl QueryableNode {
    /// Checks a node's declaration against the states its kind has (`available`) and the
    /// job's backend; reports every problem.
    pub fn build(
        node: &str,
        kind: &'static str,
        spec: &QueryableSpec,
        backend: StateBackendKind,
        keys: &KeySelector,
        aggregates: Vec<String>,
        available: &[(&str, StateShape)],
    ) -> Result<Self, Vec<DeclarationProblem>> {
        let mut problems = Vec::new();
        let mut states: Vec<QueryableState> = Vec::new();
        let names = available
            .iter()
            .map(|(n, _)| format!("`{n}`"))
            .collect::<Vec<_>>()
            .join(", ");
        for (i, (name, options)) in spec.states().into_iter().enumerate() {
            let pointer = match spec {
                QueryableSpec::Names(_) => format!("queryable/{i}"),
                QueryableSpec::Options(_) => format!(
                    "queryable/{}",
                    crate::spec::positions::escape_segment(&name)
                ),
            };
            let mut problem = |message: String| {
                problems.push(DeclarationProblem {
                    pointer: pointer.clone(),
                    message,
                })
            };
            let Some((_, shape)) = available.iter().find(|(n, _)| *n == name) else {
                problem(if available.is_empty() {
                    format!("this {kind} keeps no state that can be queried")
                } else {
                    format!(
                        "`{name}` is not a queryable state of this {kind}; its states are {names}"
                    )
                });
                continue;
            };
            if states.iter().any(|s| s.name == name) {
                problem(format!("`{name}` is declared twice"));
                continue;
            }
            let rocksdb = backend == StateBackendKind::Rocksdb;
            let path = match (options.path, rocksdb) {
                (Some(QueryPath::Direct), false) => {
                    problem(
                        "direct reads need the RocksDB backend (`state: {backend: rocksdb}`); \
                         heap state is read by the operator's task (`path: ordered`)"
                            .into(),
                    );
                    continue;
                }
                (Some(p), _) => p,
                (None, true) => QueryPath::Direct,
                (None, false) => QueryPath::Ordered,
            };
            let max_staleness_ms = options.max_staleness.map(|d| d.as_millis_i64());
            if max_staleness_ms.is_some() && !rocksdb {
                problem(
                    "`max-staleness` bounds how old direct reads of RocksDB state are; heap \
                     state is always read as of now"
                        .into(),
                );
                continue;
            }
            // Checkpoints leave the caches in memory (their writes go into the snapshot's
            // overlay, not into RocksDB), so without a bound a hot key could stay invisible to
            // direct reads for as long as it stays cached.
            let max_staleness_ms = max_staleness_ms
                .or((path == QueryPath::Direct).then_some(DEFAULT_MAX_STALENESS_MS));
            states.push(QueryableState {
                name,
                path,
                max_staleness_ms,
                shape: *shape,
            });
        }
        if !problems.is_empty() {
            return Err(problems);
        }
        Ok(Self {
            node: node.to_string(),
            kind,
            states,
            backend,
            keys: KeyCodec::new(keys),
            aggregates,
        })
    }

    pub fn state(&self, name: &str) -> Option<&QueryableState> {
        self.states.iter().find(|s| s.name == name)
    }

    /// The key columns' names.
    pub fn key_names(&self) -> &[String] {
        &self.keys.names
    }
}
