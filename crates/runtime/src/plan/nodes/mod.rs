//! One planning home per transform kind. Each module checks its node's spec against the
//! schemas of its inputs, reports what is wrong at the key that is wrong, and says how the
//! node's subtasks are made; [`super::build`] keeps the wiring around them (inputs, order,
//! cycles, `key-by` and `union` folding) and calls [`plan`], which the list of kinds
//! (`spec::transform_kinds`, one line per kind) makes.
//!
//! An operator kind is then two files side by side: `operators/<kind>.rs` runs it and
//! `plan/nodes/<kind>.rs` plans it. A keyed operator says only how to make one subtask from
//! its keyed state ([`Make::Keyed`]); the subtask opens (or restores) that state through its
//! context, from the store the executor made for the run.

mod aggregate;
mod filter;
mod interval_join;
mod join;
mod key_by;
mod map;
mod over_aggregate;
mod sql;
mod top_n;
mod union;
pub(super) mod window_aggregate;
mod window_join;

use std::collections::BTreeSet;
use std::sync::Arc;

use arrow_schema::{DataType, Field, Schema, SchemaRef};

use super::OperatorFactory;
use super::build::Def;
use crate::api::{EventTime, Operator, OperatorError, SinkFactory, SourceFactory, SubtaskContext};
use crate::expr::Expr;
use crate::keys::KeySelector;
use crate::operators::accumulators::{Accumulators, AggFn};
use crate::operators::aggregate::AggCall;
use crate::operators::join::{Projection, joined_schema};
use crate::operators::local_aggregate::{LocalPhase, LocalWindows};
use crate::operators::window::Windowing;
use crate::query::{QueryableNode, StateShape};
use crate::spec::problems::{Problem, SpecSource};
use crate::spec::{HumanDuration, JobSpec, MiniBatchSpec, TransformSpec, WindowSpec};
use weir_state::KeyedStateBackend;

/// The registry of kinds: [`plan`] sends each transform to the `plan` of its kind's module,
/// made from the one list of kinds, `spec::transform_kinds`. (The modules are declared above
/// by hand, so that rustfmt sees them.)
macro_rules! dispatch {
    ($( $(#[$doc:meta])* $variant:ident($spec:ident) = $kind:literal in $module:ident, )*) => {
        /// Plans one transform with its kind's planner.
        pub(super) fn plan(p: &mut Planner<'_, '_>, transform: &TransformSpec) -> Option<Compiled> {
            match transform {
                $( TransformSpec::$variant(s) => $module::plan(p, s), )*
            }
        }

        /// What a transform keeps in state and what fires it, as its kind's module says.
        pub(super) fn explain(transform: &TransformSpec, job: &JobSpec) -> Explained {
            match transform {
                $( TransformSpec::$variant(s) => $module::explain(s, job), )*
            }
        }
    };
}
crate::spec::transform_kinds!(dispatch);

/// Whether a transform takes an updating input (see [`crate::changelog`]): the stateless
/// kinds pass each row's kind through; the running aggregate, the regular join (kept for good)
/// and the running top-n (no `fire-at`) take rows back. Windows, a top-n with `fire-at`,
/// over-aggregates and time-bounded joins keep rows until an event-time bound makes them final,
/// which a later change could not undo.
pub(super) fn takes_changes(transform: &TransformSpec) -> bool {
    matches!(
        transform,
        TransformSpec::Filter(_)
            | TransformSpec::Map(_)
            | TransformSpec::KeyBy(_)
            | TransformSpec::Union(_)
            | TransformSpec::Aggregate(_)
    ) || matches!(transform, TransformSpec::Join(j) if j.left_until.is_none() && j.right_until.is_none())
        || matches!(transform, TransformSpec::TopN(t) if t.fire_at.is_none())
}

/// What `weir explain` prints of a node besides its wiring and columns: what it keeps in state
/// and which timers fire it (`None`: nothing to say). Each kind's module writes its own, from
/// its spec.
#[derive(Debug, Default)]
pub(super) struct Explained {
    pub(super) state: Option<String>,
    pub(super) timers: Option<String>,
    /// How it batches its output (a running aggregate's mini-batch).
    pub(super) mini_batch: Option<String>,
}

/// A window as `weir explain` names it.
pub(super) fn describe_window(w: &WindowSpec) -> String {
    match w {
        WindowSpec::Tumbling { size } => format!("tumbling {size}"),
        WindowSpec::Sliding { size, slide } => format!("sliding {size} every {slide}"),
        WindowSpec::Session { gap } => format!("session, gap {gap}"),
    }
}

/// What planning learned about a node of the job file.
pub(super) enum Compiled {
    Source {
        /// Each port as its consumers read it: an upsert port (see [`crate::changelog`]) as
        /// the retract stream its normaliser makes of it.
        ports: Vec<(String, SchemaRef)>,
        factory: Arc<dyn SourceFactory>,
        event_time: EventTime,
        /// Per port: the upsert stream the source itself emits, when the port is one; the
        /// planner puts a changelog normaliser between it and its consumers.
        upserts: Vec<Option<SchemaRef>>,
    },
    /// Dissolves into the key partitioning of its consumers' input edges.
    KeyBy {
        schema: SchemaRef,
        keys: Arc<KeySelector>,
    },
    /// Dissolves into its consumers' input gates.
    Union {
        schema: SchemaRef,
    },
    /// A transform that runs as an operator.
    Operator(Planned),
    Sink {
        factory: Arc<dyn SinkFactory>,
    },
    /// Planning this node failed (its problems are reported); its consumers are skipped.
    Failed,
}

impl Compiled {
    pub(super) fn schema(&self, port: usize) -> Option<&SchemaRef> {
        match self {
            Compiled::Source { ports, .. } => ports.get(port).map(|(_, s)| s),
            Compiled::KeyBy { schema, .. } | Compiled::Union { schema } => Some(schema),
            Compiled::Operator(planned) => Some(&planned.schema),
            Compiled::Sink { .. } | Compiled::Failed => None,
        }
    }
}

/// A planned operator.
pub(super) struct Planned {
    /// Its output.
    pub schema: SchemaRef,
    pub make: Make,
    /// The operator's own state TTL, over the job's.
    pub state_ttl: Option<HumanDuration>,
    /// Keyed operators whose state a job may declare `queryable`: how it is laid out.
    pub query_shape: Option<QueryShape>,
    /// The checked `queryable:` declaration, once [`super::build`] has attached it.
    pub queryable: Option<Arc<QueryableNode>>,
    /// Two-phase aggregation: the local phase [`super::build`] chains to each producer of the
    /// operator's input (the operator itself then reads partials).
    pub local: Option<Arc<LocalPhase>>,
    /// Which input columns it reads, for projection pushdown; `None`: all of them.
    pub reads: Option<Reads>,
}

/// Which input columns an operator reads, so that sources can leave the others out (see
/// [`super::projection`]).
#[derive(Clone, Debug, Default)]
pub(super) struct Reads {
    /// Per input: the columns read whatever the consumers read (conditions, keys of order,
    /// event times, aggregate arguments, a join's kept columns).
    pub always: Vec<BTreeSet<usize>>,
    /// Per output column: the `(input, column)`s it is made of, read only when a consumer
    /// reads that output column.
    pub outputs: Vec<Vec<(usize, usize)>>,
}

impl Reads {
    /// One input whose columns `read` are read, and whose column `through[j]` becomes output
    /// column `j` (a filter, a top-n, an over-aggregate's input columns).
    pub(super) fn through(read: BTreeSet<usize>, through: impl IntoIterator<Item = usize>) -> Self {
        Reads {
            always: vec![read],
            outputs: through.into_iter().map(|c| vec![(0, c)]).collect(),
        }
    }

    /// Inputs read only in these columns, whatever the consumers read: the output is
    /// computed from them (aggregates, joins).
    pub(super) fn only(read: Vec<BTreeSet<usize>>) -> Self {
        Reads {
            always: read,
            outputs: Vec::new(),
        }
    }
}

/// The columns the expressions read.
pub(super) fn columns_of<'e>(exprs: impl IntoIterator<Item = &'e Expr>) -> BTreeSet<usize> {
    exprs.into_iter().flat_map(Expr::columns).collect()
}

/// The columns the aggregate calls read.
pub(super) fn columns_of_calls(calls: &[AggCall]) -> BTreeSet<usize> {
    columns_of(calls.iter().flat_map(AggCall::exprs))
}

impl Planned {
    pub(super) fn stateless(schema: SchemaRef, factory: OperatorFactory) -> Self {
        Planned {
            schema,
            make: Make::Stateless(factory),
            state_ttl: None,
            query_shape: None,
            queryable: None,
            local: None,
            reads: None,
        }
    }

    pub(super) fn keyed(schema: SchemaRef, make: KeyedMake) -> Self {
        Planned {
            schema,
            make: Make::Keyed(make),
            state_ttl: None,
            query_shape: None,
            queryable: None,
            local: None,
            reads: None,
        }
    }
}

/// How an operator's subtasks are made.
pub(super) enum Make {
    Stateless(OperatorFactory),
    /// From the subtask's keyed state, opened (or restored) for it by the planner.
    Keyed(KeyedMake),
}

/// Makes one subtask of a keyed operator from its context and its keyed state.
pub(super) type KeyedMake = Arc<
    dyn Fn(&SubtaskContext, KeyedStateBackend) -> Result<Box<dyn Operator>, OperatorError>
        + Send
        + Sync,
>;

/// How a keyed operator's state reads for lookups (see [`QueryableNode::build`]).
pub(super) struct QueryShape {
    pub kind: &'static str,
    pub keys: Arc<KeySelector>,
    /// The output columns that are aggregates, in accumulator order.
    pub values: Vec<String>,
    pub states: &'static [(&'static str, StateShape)],
}

/// What a node's planning sees: its inputs, where its problems go, and the checks that
/// several kinds share.
pub(super) struct Planner<'a, 'd> {
    pub(super) defs: &'a [Def<'d>],
    pub(super) compiled: &'a [Compiled],
    /// The node's index in `defs`.
    pub(super) i: usize,
    pub(super) src: &'a SpecSource,
    pub(super) problems: &'a mut Vec<Problem>,
    /// The node's pointer in the job file.
    pub(super) at: &'a str,
    /// The schema of input 0.
    pub(super) input: SchemaRef,
    pub(super) key_groups: u32,
    /// The job's `two-phase-aggregation`.
    pub(super) two_phase: bool,
    /// The job's `window-slicing`.
    pub(super) window_slicing: bool,
    /// The job's `mini-batch`: the default of running aggregates.
    pub(super) mini_batch: Option<MiniBatchSpec>,
}

impl Planner<'_, '_> {
    fn pointer(&self, key: &str) -> String {
        if key.is_empty() {
            self.at.to_string()
        } else {
            format!("{}/{key}", self.at)
        }
    }

    /// A problem at the value of `key` (relative to the node; empty for the node itself).
    pub(super) fn problem(&mut self, key: &str, message: impl Into<String>) {
        let at = self.pointer(key);
        self.problems.push(self.src.at_value(&at, message));
    }

    /// A problem at the key `key` itself (a name that is wrong, not its value).
    pub(super) fn problem_at_key(&mut self, key: &str, message: impl Into<String>) {
        let at = self.pointer(key);
        self.problems.push(self.src.at_key(&at, message));
    }

    /// A problem at each input that is an updating stream, for a kind that takes only
    /// append-only inputs; says whether there was one.
    pub(super) fn refuse_updating_inputs(&mut self) -> bool {
        let me = self.defs[self.i].kind();
        let mut refused = false;
        for k in 0..self.defs[self.i].inputs.len() {
            let Some(schema) = self.input_schema(k) else {
                continue;
            };
            let mode = crate::changelog::ChangelogMode::of(&schema);
            if mode.is_append() {
                continue;
            }
            let Some((from, name, kind)) = self.input_def(k) else {
                continue;
            };
            let message = format!(
                "`{name}` (a {kind}) is an updating stream ({}), and a {me} takes only \
                 append-only input: it keeps rows until event time makes them final, which a \
                 later update or delete could not undo. Read an append-only stream here, or \
                 aggregate the updates with a running `aggregate`",
                mode.describe()
            );
            let problem = self.src.at_value(from, message);
            self.problems.push(problem);
            refused = true;
        }
        refused
    }

    /// The pointer of the `from` value of input `k`, the input's name and its kind.
    fn input_def(&self, k: usize) -> Option<(&str, &str, &'static str)> {
        let (from, j, _) = self.defs[self.i].inputs.get(k)?;
        Some((from, self.defs[*j].name, self.defs[*j].kind()))
    }

    /// What planning learned about input `k`.
    fn input_compiled(&self, k: usize) -> Option<&Compiled> {
        let (_, j, _) = self.defs[self.i].inputs.get(k)?;
        Some(&self.compiled[*j])
    }

    /// The schema of input `k` (`None` if it failed to plan).
    fn input_schema(&self, k: usize) -> Option<SchemaRef> {
        let (_, j, port) = self.defs[self.i].inputs.get(k)?;
        self.compiled[*j].schema(*port).cloned()
    }

    /// The local phase of an aggregate over `keys`, when the job aggregates in two phases and
    /// no call counts distinct values: a partial's set of values is inserted again, value by
    /// value, where the partials merge, so the local phase costs more than it saves (Nexmark
    /// q16 takes a third less CPU time in one phase).
    pub(super) fn local_phase(
        &mut self,
        keys: &Arc<KeySelector>,
        aggs: &Accumulators,
        windows: Option<LocalWindows>,
    ) -> Option<Arc<LocalPhase>> {
        if !self.two_phase || aggs.calls.iter().any(|c| c.func == AggFn::CountDistinct) {
            return None;
        }
        match LocalPhase::new(keys.clone(), Arc::new(aggs.clone()), windows) {
            Ok(phase) => Some(Arc::new(phase)),
            Err(message) => {
                self.problem("", message);
                None
            }
        }
    }

    /// The key selector and schema of input `k`, which must be a key-by node.
    pub(super) fn keyed_input(
        &mut self,
        k: usize,
        key: &str,
    ) -> Option<(Arc<KeySelector>, SchemaRef)> {
        match self.input_compiled(k)? {
            Compiled::KeyBy { keys, schema } => Some((keys.clone(), schema.clone())),
            Compiled::Failed => None,
            _ => {
                let (_, name, kind) = self.input_def(k)?;
                let me = self.defs[self.i].kind();
                let message = format!(
                    "a {me} reads `key-by` nodes, and `{name}` is a {kind}; add a key-by between them"
                );
                self.problem(key, message);
                None
            }
        }
    }

    pub(super) fn expr(&mut self, key: &str, sql: &str, schema: &Schema) -> Option<Expr> {
        match Expr::compile(sql, schema) {
            Ok(e) => Some(e),
            Err(e) => {
                self.problem(key, e.to_string());
                None
            }
        }
    }

    /// A TIMESTAMP (or INT epoch-ms) expression.
    pub(super) fn time(&mut self, key: &str, sql: &str, schema: &Schema) -> Option<Expr> {
        let e = self.expr(key, sql, schema)?;
        if matches!(e.data_type(), DataType::Timestamp(_, _) | DataType::Int64) {
            Some(e)
        } else {
            self.problem(
                key,
                format!(
                    "`{sql}` must be a TIMESTAMP, not {}",
                    sql_type(e.data_type())
                ),
            );
            None
        }
    }

    /// A BOOL expression.
    pub(super) fn condition(&mut self, key: &str, sql: &str, schema: &Schema) -> Option<Expr> {
        let e = self.expr(key, sql, schema)?;
        if matches!(e.data_type(), DataType::Boolean | DataType::Null) {
            Some(e)
        } else {
            self.problem(
                key,
                format!(
                    "a condition must be BOOL, but `{sql}` is {}",
                    sql_type(e.data_type())
                ),
            );
            None
        }
    }

    pub(super) fn windowing(
        &mut self,
        key: &str,
        window: &crate::spec::WindowSpec,
    ) -> Option<Windowing> {
        match Windowing::from_spec(window) {
            Ok(w) => Some(w),
            Err(m) => {
                self.problem(key, m);
                None
            }
        }
    }

    /// The `aggregates:` of a windowed or OVER aggregate, none named like a column in `taken`.
    pub(super) fn calls(
        &mut self,
        aggregates: &indexmap::IndexMap<String, String>,
        schema: &Schema,
        taken: &[String],
    ) -> (Vec<String>, Vec<AggCall>) {
        let mut names = Vec::new();
        let mut calls = Vec::new();
        for (name, sql) in aggregates {
            let key = format!(
                "aggregates/{}",
                crate::spec::positions::escape_segment(name)
            );
            if taken.contains(name) {
                self.problem(
                    &key,
                    format!("`{name}` is already a column of the output; choose another name"),
                );
            }
            match AggCall::compile(sql, schema) {
                Ok(c) => {
                    names.push(name.clone());
                    calls.push(c);
                }
                Err(m) => self.problem(&key, m),
            }
        }
        (names, calls)
    }

    /// `price DESC`, `dateTime` → (expression, descending).
    pub(super) fn order(
        &mut self,
        key: &str,
        items: &[String],
        schema: &Schema,
    ) -> Vec<(Expr, bool)> {
        let mut out = Vec::new();
        for (n, item) in items.iter().enumerate() {
            let (sql, desc) = split_direction(item);
            if let Some(e) = self.expr(&format!("{key}/{n}"), sql, schema) {
                out.push((e, desc));
            }
        }
        out
    }

    /// A join's output columns: `columns:`, or every joined column but the window bounds.
    fn projection(
        &mut self,
        columns: Option<&indexmap::IndexMap<String, String>>,
        joined: &SchemaRef,
    ) -> Option<Projection> {
        let mut exprs = Vec::new();
        let mut fields = Vec::new();
        match columns {
            None => {
                for (n, f) in joined.fields().iter().enumerate() {
                    if f.name() == "window_start" || f.name() == "window_end" {
                        continue;
                    }
                    let e =
                        Expr::compile(&format!("\"{}\"", f.name().replace('"', "\"\"")), joined);
                    match e {
                        Ok(e) => {
                            fields.push(Field::new(f.name(), e.data_type().clone(), true));
                            exprs.push(e);
                        }
                        Err(e) => self.problem(&format!("columns/{n}"), e.to_string()),
                    }
                }
            }
            Some(columns) => {
                for (name, sql) in columns {
                    let key = format!("columns/{}", crate::spec::positions::escape_segment(name));
                    if let Some(e) = self.expr(&key, sql, joined) {
                        fields.push(Field::new(name, e.data_type().clone(), true));
                        exprs.push(e);
                    }
                }
            }
        }
        Some(Projection {
            exprs,
            schema: Arc::new(Schema::new(fields)),
        })
    }

    /// The two sides of a join must be keyed by the same types.
    pub(super) fn same_keys(&mut self, a: &KeySelector, b: &KeySelector) {
        let types = |k: &KeySelector| {
            k.exprs()
                .iter()
                .map(|e| sql_type(e.data_type()))
                .collect::<Vec<_>>()
        };
        if types(a) != types(b) {
            self.problem(
                "right",
                format!(
                    "the two sides are keyed differently: ({}) versus ({}); key them by the same types",
                    types(a).join(", "),
                    types(b).join(", ")
                ),
            );
        }
    }

    /// Compiles a join's condition and output columns, and prunes each side to the columns
    /// they read, so joins keep (and copy) only what they will use.
    pub(super) fn pruned_join(
        &mut self,
        sides: [(&SchemaRef, &str); 2],
        extra: &[Field],
        condition: Option<&str>,
        columns: Option<&indexmap::IndexMap<String, String>>,
    ) -> Option<PrunedJoin> {
        let [(ls, la), (rs, ra)] = sides;
        // Compiled once against every column: problems use the user's names, and the
        // compiled expressions tell which columns are read.
        let full = joined_schema(ls, la, rs, ra, extra);
        let cond = match condition {
            Some(c) => Some(self.condition("where", c, &full)?),
            None => None,
        };
        let proj = self.projection(columns, &full)?;
        let mut used = std::collections::BTreeSet::new();
        for e in cond.iter().chain(&proj.exprs) {
            used.extend(e.columns());
        }
        let (nl, nr) = (ls.fields().len(), rs.fields().len());
        let mut keep_l: Vec<usize> = used.iter().copied().filter(|i| *i < nl).collect();
        let mut keep_r: Vec<usize> = used
            .iter()
            .copied()
            .filter(|i| (nl..nl + nr).contains(i))
            .map(|i| i - nl)
            .collect();
        // A row with no columns would lose its count: keep at least one per side.
        for keep in [&mut keep_l, &mut keep_r] {
            if keep.is_empty() {
                keep.push(0);
            }
        }
        let lp = Arc::new(ls.project(&keep_l).ok()?);
        let rp = Arc::new(rs.project(&keep_r).ok()?);
        let joined = joined_schema(&lp, la, &rp, ra, extra);
        // The same expressions over the pruned rows (same names, fewer columns).
        let condition = match condition {
            Some(c) => Some(self.condition("where", c, &joined)?),
            None => None,
        };
        let projection = self.projection(columns, &joined)?;
        Some(PrunedJoin {
            reads: Reads::only(vec![
                keep_l.iter().copied().collect(),
                keep_r.iter().copied().collect(),
            ]),
            inputs: [lp, rp],
            joined,
            condition,
            projection,
            keep: [keep_l, keep_r],
        })
    }
}

/// A join over the columns its condition and output read (see [`Planner::pruned_join`]).
pub(super) struct PrunedJoin {
    /// What the join reads of its inputs: each side's kept columns.
    pub reads: Reads,
    /// Each side's rows as kept.
    pub inputs: [SchemaRef; 2],
    /// Both pruned sides side by side (and the window bounds, for window joins).
    pub joined: SchemaRef,
    pub condition: Option<Expr>,
    pub projection: Projection,
    /// The kept columns per side.
    pub keep: [Vec<usize>; 2],
}

/// `price DESC` → (`price`, true); `dateTime ASC` or `dateTime` → (`dateTime`, false).
pub(super) fn split_direction(item: &str) -> (&str, bool) {
    let t = item.trim();
    let lower = t.to_ascii_lowercase();
    if lower.ends_with(" desc") {
        (t[..t.len() - 5].trim_end(), true)
    } else if lower.ends_with(" asc") {
        (t[..t.len() - 4].trim_end(), false)
    } else {
        (t, false)
    }
}

/// A type as the job file spells it.
pub(super) fn sql_type(t: &DataType) -> &'static str {
    match t {
        DataType::Int64 => "INT",
        DataType::Float64 => "FLOAT",
        DataType::Utf8 => "STRING",
        DataType::Boolean => "BOOL",
        DataType::Timestamp(_, _) => "TIMESTAMP",
        DataType::Null => "NULL",
        _ => "an unsupported type",
    }
}
