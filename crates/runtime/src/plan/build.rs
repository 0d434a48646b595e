//! Spec → [`Plan`]: wiring, cycles, schemas and expressions, every problem reported together.
//!
//! This file keeps what is common to every node: names and inputs, the topological order and
//! cycles, sources and sinks (which build themselves from their spec), `queryable:`
//! declarations, and the assembly of the real nodes (`key-by` and `union` folded into edges).
//! Each transform kind is planned in its own file under [`super::nodes`].

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use arrow_schema::{DataType, SchemaRef};

use super::nodes::{self, Compiled, Make, Planned, Planner, sql_type};
use super::{Factory, OperatorFactory, Plan, PlanEdge, PlanNode};
use crate::api::connector::{PlannedSource, SinkContext, SourceContext, SpecProblem};
use crate::api::{EventTime, NodeRole};
use crate::keys::KeySelector;
use crate::operators::local_aggregate::{LocalAggregate, LocalPhase};
use crate::query::QueryableNode;
use crate::spec::load::{Dropped, LoadedJob, closest};
use crate::spec::problems::{Problem, SpecError, SpecSource, pointer};
use crate::spec::{HumanDuration, JobSpec, SinkSpec, SourceSpec, TransformSpec};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Section {
    Source,
    Transform,
    Sink,
}

impl Section {
    fn key(self) -> &'static str {
        match self {
            Section::Source => "sources",
            Section::Transform => "transforms",
            Section::Sink => "sinks",
        }
    }
}

/// A node of the job file before planning.
pub(super) struct Def<'a> {
    pub(super) name: &'a str,
    section: Section,
    source: Option<&'a SourceSpec>,
    transform: Option<&'a TransformSpec>,
    sink: Option<&'a SinkSpec>,
    /// Resolved inputs: (pointer of the `from` value, producing def, port).
    pub(super) inputs: Vec<(String, usize, usize)>,
}

impl Def<'_> {
    fn pointer(&self) -> String {
        pointer(&[self.section.key(), self.name])
    }

    pub(super) fn kind(&self) -> &'static str {
        if let Some(s) = self.source {
            s.kind()
        } else if let Some(t) = self.transform {
            t.kind()
        } else if let Some(s) = self.sink {
            s.kind()
        } else {
            "?"
        }
    }
}

/// Plans a loaded job. `sql` nodes are first planned into the other kinds ([`super::sql`]).
pub fn build(loaded: &LoadedJob) -> Result<Plan, SpecError> {
    match super::sql::lower(loaded) {
        Some(lowered) => {
            let mut problems = loaded.problems.clone();
            problems.extend(lowered.problems);
            build_spec(
                &lowered.spec,
                &lowered.source,
                problems,
                &lowered.dropped,
                &loaded.env_values,
            )
        }
        None => build_spec(
            &loaded.spec,
            &loaded.source,
            loaded.problems.clone(),
            &loaded.dropped,
            &loaded.env_values,
        ),
    }
}

fn build_spec(
    spec: &JobSpec,
    src: &SpecSource,
    mut problems: Vec<Problem>,
    dropped: &Dropped,
    env_values: &[String],
) -> Result<Plan, SpecError> {
    if let Err(message) = spec.checkpoint.storage_config() {
        problems.push(src.at_value("/checkpoint/storage", message));
    }
    crate::spec::checks::check_settings(spec, src, &mut problems);
    let mut defs = collect_defs(spec, src, &mut problems);
    resolve_inputs(&mut defs, src, dropped, &mut problems);
    let order = topological_order(&defs, src, &mut problems);
    if dropped.is_empty() {
        // With nodes left out, "feeds no sink" would mostly repeat their problems.
        check_reaches_a_sink(&defs, src, &mut problems);
    }
    let mut compiled: Vec<Compiled> = (0..defs.len()).map(|_| Compiled::Failed).collect();
    for &i in &order {
        compiled[i] = compile(spec, &defs, &compiled, i, src, &mut problems);
    }
    if !problems.is_empty() {
        return Err(src.error(problems));
    }
    let mut reads = if spec.projection_pushdown {
        super::projection::source_reads(&defs, &compiled, &order)
    } else {
        Vec::new()
    };
    for (i, read) in reads.iter_mut().enumerate() {
        // A normaliser keeps and compares whole rows: its source reads every column.
        if let Compiled::Source { upserts, .. } = &compiled[i]
            && upserts.iter().any(Option::is_some)
        {
            *read = None;
        }
        if let (Some(columns), Compiled::Source { factory, .. }) = (&*read, &mut compiled[i]) {
            match factory.project(columns) {
                Some(projected) => *factory = projected,
                None => *read = None,
            }
        }
    }
    let mut plan = assemble(spec, &defs, compiled, &order, reads);
    // A job whose channels would take the machine's memory is refused before it starts.
    if let Some(why) =
        super::footprint::machine_memory().and_then(|m| super::footprint::refusal(&plan, m))
    {
        return Err(src.error(vec![src.at_value("/parallelism", why)]));
    }
    plan.env_values = env_values.to_vec();
    Ok(plan)
}

/// What the SQL planner learns of one node of the job: its output columns and, for a
/// source's port, its event-time column.
pub(crate) struct Probed {
    pub schema: SchemaRef,
    pub time: Option<String>,
}

/// Plans the node `reference` names (`node` or `node.port`) and what it reads, nothing else,
/// to learn its output. `Err` holds the problems found on the way (empty when no node has
/// that name).
pub(crate) fn probe(
    spec: &JobSpec,
    src: &SpecSource,
    reference: &str,
) -> Result<Probed, Vec<Problem>> {
    // Problems elsewhere in the job are the final planning's to report.
    let mut defs = collect_defs(spec, src, &mut Vec::new());
    resolve_inputs(&mut defs, src, &Dropped::default(), &mut Vec::new());
    let mut problems = Vec::new();
    let (name, port) = match reference.split_once('.') {
        Some((n, p)) => (n, Some(p)),
        None => (reference, None),
    };
    let Some(target) = defs.iter().position(|d| d.name == name) else {
        return Err(Vec::new());
    };
    let port = match (port, defs[target].source) {
        (None, _) => 0,
        (Some(p), Some(s)) => match s.connector().ports().iter().position(|q| q == p) {
            Some(i) => i,
            None => return Err(Vec::new()),
        },
        (Some(_), None) => return Err(Vec::new()),
    };
    let mut needed = vec![false; defs.len()];
    let mut stack = vec![target];
    while let Some(j) = stack.pop() {
        if !std::mem::replace(&mut needed[j], true) {
            stack.extend(defs[j].inputs.iter().map(|(_, k, _)| *k));
        }
    }
    let order = topological_order(&defs, src, &mut Vec::new());
    let mut compiled: Vec<Compiled> = (0..defs.len()).map(|_| Compiled::Failed).collect();
    for &i in order.iter().filter(|&&i| needed[i]) {
        compiled[i] = compile(spec, &defs, &compiled, i, src, &mut problems);
    }
    let time = match &compiled[target] {
        Compiled::Source {
            ports, event_time, ..
        } => event_time
            .columns
            .get(port)
            .copied()
            .flatten()
            .and_then(|c| ports.get(port).map(|(_, s)| s.field(c).name().clone())),
        _ => None,
    };
    match compiled[target].schema(port) {
        Some(schema) if problems.is_empty() => Ok(Probed {
            schema: schema.clone(),
            time,
        }),
        _ => Err(problems),
    }
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn collect_defs<'a>(
    spec: &'a JobSpec,
    src: &SpecSource,
    problems: &mut Vec<Problem>,
) -> Vec<Def<'a>> {
    let mut defs: Vec<Def<'a>> = Vec::new();
    let mut seen: HashMap<&str, Section> = HashMap::new();
    let mut add = |def: Def<'a>, problems: &mut Vec<Problem>| {
        if !valid_name(def.name) && !src.is_generated(&def.pointer()) {
            problems.push(src.at_key(
                &def.pointer(),
                format!(
                    "`{}` is not a valid name: use letters, digits, `_` and `-` (a `.` would be read as a port)",
                    def.name
                ),
            ));
        }
        if let Some(first) = seen.insert(def.name, def.section) {
            problems.push(src.at_key(
                &def.pointer(),
                format!(
                    "the name `{}` is already used in `{}`: names are shared by sources, transforms and sinks",
                    def.name,
                    first.key()
                ),
            ));
            return;
        }
        defs.push(def);
    };
    for (name, s) in &spec.sources {
        add(
            Def {
                name,
                section: Section::Source,
                source: Some(s),
                transform: None,
                sink: None,
                inputs: vec![],
            },
            problems,
        );
    }
    for (name, t) in &spec.transforms {
        add(
            Def {
                name,
                section: Section::Transform,
                source: None,
                transform: Some(t),
                sink: None,
                inputs: vec![],
            },
            problems,
        );
    }
    for (name, s) in &spec.sinks {
        add(
            Def {
                name,
                section: Section::Sink,
                source: None,
                transform: None,
                sink: Some(s),
                inputs: vec![],
            },
            problems,
        );
    }
    defs
}

fn resolve_inputs(
    defs: &mut [Def<'_>],
    src: &SpecSource,
    dropped: &Dropped,
    problems: &mut Vec<Problem>,
) {
    let index: HashMap<&str, usize> = defs.iter().enumerate().map(|(i, d)| (d.name, i)).collect();
    let producers: Vec<&str> = defs
        .iter()
        .filter(|d| d.section != Section::Sink)
        .map(|d| d.name)
        .collect();
    let mut resolved = Vec::new();
    for def in defs.iter() {
        let refs: Vec<(String, String)> = if let Some(t) = def.transform {
            t.inputs()
                .into_iter()
                .map(|(key, r)| (key, r.to_string()))
                .collect()
        } else if let Some(s) = def.sink {
            vec![("from".to_string(), s.from().to_string())]
        } else {
            vec![]
        };
        let mut inputs = Vec::new();
        for (key, reference) in refs {
            let at = format!(
                "{}/{}",
                def.pointer(),
                key.split('.').collect::<Vec<_>>().join("/")
            );
            let (node, port) = match reference.split_once('.') {
                Some((n, p)) => (n, Some(p)),
                None => (reference.as_str(), None),
            };
            let Some(&j) = index.get(node) else {
                if dropped.contains(node) {
                    // Left out for a problem already reported.
                    continue;
                }
                let mut message = format!("unknown input `{node}`");
                if let Some(best) = closest(node, producers.iter().copied()) {
                    message.push_str(&format!("; did you mean `{best}`?"));
                } else {
                    message.push_str(&format!("; nodes: {}", producers.join(", ")));
                }
                problems.push(src.at_value(&at, message));
                continue;
            };
            let target = &defs[j];
            if target.section == Section::Sink {
                problems.push(src.at_value(
                    &at,
                    format!("`{node}` is a sink: sinks have no output to read"),
                ));
                continue;
            }
            let ports = target
                .source
                .map(|s| s.connector().ports())
                .unwrap_or_default();
            let port_index = match (port, ports.is_empty()) {
                (None, true) => 0,
                (None, false) => {
                    problems.push(src.at_value(
                        &at,
                        format!(
                            "`{node}` has several outputs ({}); write e.g. `{node}.{}`",
                            ports.join(", "),
                            ports[ports.len() - 1]
                        ),
                    ));
                    continue;
                }
                (Some(p), true) => {
                    problems.push(src.at_value(
                        &at,
                        format!("`{node}` has one output and no port `{p}`; write `{node}`"),
                    ));
                    continue;
                }
                (Some(p), false) => match ports.iter().position(|x| x == p) {
                    Some(k) => k,
                    None => {
                        problems.push(src.at_value(
                            &at,
                            format!(
                                "`{node}` has no port `{p}`; its ports are {}",
                                ports.join(", ")
                            ),
                        ));
                        continue;
                    }
                },
            };
            if j == index[def.name] {
                problems.push(src.at_value(&at, format!("`{node}` reads from itself")));
                continue;
            }
            inputs.push((at, j, port_index));
        }
        resolved.push(inputs);
    }
    for (def, inputs) in defs.iter_mut().zip(resolved) {
        def.inputs = inputs;
    }
}

/// Kahn's algorithm; defs on a cycle are reported and left out of the order.
fn topological_order(
    defs: &[Def<'_>],
    src: &SpecSource,
    problems: &mut Vec<Problem>,
) -> Vec<usize> {
    let n = defs.len();
    let mut indegree = vec![0usize; n];
    let mut consumers: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, d) in defs.iter().enumerate() {
        for (_, j, _) in &d.inputs {
            indegree[i] += 1;
            consumers[*j].push(i);
        }
    }
    let mut queue: VecDeque<usize> = (0..n).filter(|i| indegree[*i] == 0).collect();
    let mut order = Vec::with_capacity(n);
    while let Some(i) = queue.pop_front() {
        order.push(i);
        for &c in &consumers[i] {
            indegree[c] -= 1;
            if indegree[c] == 0 {
                queue.push_back(c);
            }
        }
    }
    if order.len() < n {
        let stuck: HashSet<usize> = (0..n).filter(|i| indegree[*i] > 0).collect();
        for &i in &stuck {
            // Report each edge that stays inside the stuck set: those close the cycle.
            for (at, j, _) in &defs[i].inputs {
                if stuck.contains(j) && reaches(defs, i, *j) {
                    problems.push(src.at_value(
                        at,
                        format!(
                            "reading `{}` here makes a cycle: {}",
                            defs[*j].name,
                            cycle_path(defs, i, *j)
                        ),
                    ));
                }
            }
        }
    }
    order
}

/// Whether `to` depends, through its inputs (transitively), on `from`.
fn reaches(defs: &[Def<'_>], from: usize, to: usize) -> bool {
    let mut stack = vec![to];
    let mut seen = HashSet::new();
    while let Some(k) = stack.pop() {
        if k == from {
            return true;
        }
        if seen.insert(k) {
            stack.extend(defs[k].inputs.iter().map(|(_, j, _)| *j));
        }
    }
    false
}

/// The names along a cycle through the edge `j → i`.
fn cycle_path(defs: &[Def<'_>], i: usize, j: usize) -> String {
    // Breadth-first from j backwards along inputs until i, remembering the way.
    let mut prev: HashMap<usize, usize> = HashMap::new();
    let mut queue = VecDeque::from([j]);
    let mut seen = HashSet::from([j]);
    while let Some(k) = queue.pop_front() {
        if k == i {
            break;
        }
        for (_, p, _) in &defs[k].inputs {
            if seen.insert(*p) {
                prev.insert(*p, k);
                queue.push_back(*p);
            }
        }
    }
    let mut names = vec![defs[i].name];
    let mut k = i;
    while let Some(&next) = prev.get(&k) {
        names.push(defs[next].name);
        k = next;
        if k == j {
            break;
        }
    }
    names.reverse();
    names.push(defs[j].name);
    names.join(" → ")
}

/// Every source and transform must lead to a sink: a dangling node is almost always a mistake.
fn check_reaches_a_sink(defs: &[Def<'_>], src: &SpecSource, problems: &mut Vec<Problem>) {
    let mut live = vec![false; defs.len()];
    let mut stack: Vec<usize> = (0..defs.len())
        .filter(|i| defs[*i].section == Section::Sink)
        .collect();
    while let Some(k) = stack.pop() {
        if live[k] {
            continue;
        }
        live[k] = true;
        stack.extend(defs[k].inputs.iter().map(|(_, j, _)| *j));
    }
    for (i, d) in defs.iter().enumerate() {
        if !live[i] && d.section != Section::Sink {
            problems.push(src.at_key(
                &d.pointer(),
                format!(
                    "`{}` feeds no sink; read it from a sink or remove it",
                    d.name
                ),
            ));
        }
    }
}

fn input_schema(compiled: &[Compiled], defs: &[Def<'_>], i: usize, k: usize) -> Option<SchemaRef> {
    let (_, j, port) = defs[i].inputs.get(k)?;
    compiled[*j].schema(*port).cloned()
}

/// Checks what a sink needs of its input, and makes its factory.
fn compile_sink(
    sink_spec: &SinkSpec,
    schema: SchemaRef,
    (settings, node): (&JobSpec, &str),
    at: &str,
    src: &SpecSource,
    problems: &mut Vec<Problem>,
) -> Compiled {
    let cx = SinkContext {
        job: &settings.name,
        node,
        repeat_within: settings.checkpoint.timeout.0 + settings.restart.max_delay.0,
    };
    match sink_spec.connector().plan(&schema, cx) {
        Ok(factory) => Compiled::Sink { factory },
        Err(found) => {
            report(found, at, src, problems);
            Compiled::Failed
        }
    }
}

/// A connector's problems, each at its key below the node at `at`.
fn report(found: Vec<SpecProblem>, at: &str, src: &SpecSource, problems: &mut Vec<Problem>) {
    for p in found {
        problems.push(src.at_value(&format!("{at}{}", p.at), p.message));
    }
}

fn compile(
    spec: &JobSpec,
    defs: &[Def<'_>],
    compiled: &[Compiled],
    i: usize,
    src: &SpecSource,
    problems: &mut Vec<Problem>,
) -> Compiled {
    let def = &defs[i];
    let at = def.pointer();
    let before = problems.len();
    if let Some(s) = def.source {
        return compile_source(s, (&spec.name, def.name), &at, src, problems);
    }
    // Inputs that failed have reported their own problems: skip quietly.
    let Some(schema) = input_schema(compiled, defs, i, 0) else {
        return Compiled::Failed;
    };
    if let Some(sink) = def.sink {
        return compile_sink(sink, schema, (spec, def.name), &at, src, problems);
    }
    let Some(transform) = def.transform else {
        return Compiled::Failed;
    };
    let mut planner = Planner {
        defs,
        compiled,
        i,
        src,
        problems,
        at: &at,
        input: schema,
        key_groups: spec.key_groups,
        two_phase: spec.two_phase_aggregation,
        window_slicing: spec.window_slicing,
        mini_batch: spec.mini_batch,
    };
    if !nodes::takes_changes(transform) && planner.refuse_updating_inputs() {
        return Compiled::Failed;
    }
    let result = nodes::plan(&mut planner, transform).unwrap_or(Compiled::Failed);
    if problems.len() > before {
        return Compiled::Failed;
    }
    match transform.queryable() {
        Some(declared) => with_queryable(spec, def.name, result, declared, &at, src, problems),
        None => result,
    }
}

/// Checks a keyed operator's `queryable:` declaration and attaches it to the compiled node.
fn with_queryable(
    spec: &JobSpec,
    node: &str,
    compiled: Compiled,
    declared: &crate::spec::QueryableSpec,
    at: &str,
    src: &SpecSource,
    problems: &mut Vec<Problem>,
) -> Compiled {
    let Compiled::Operator(mut planned) = compiled else {
        return compiled;
    };
    let Some(shape) = &planned.query_shape else {
        return Compiled::Operator(planned);
    };
    let built = QueryableNode::build(
        node,
        shape.kind,
        declared,
        spec.state.backend,
        &shape.keys,
        shape.values.clone(),
        shape.states,
    );
    match built {
        Ok(q) => {
            planned.queryable = Some(Arc::new(q));
            Compiled::Operator(planned)
        }
        Err(found) => {
            for p in found {
                problems.push(src.at_value(&format!("{at}/{}", p.pointer), p.message));
            }
            Compiled::Failed
        }
    }
}

fn compile_source(
    s: &SourceSpec,
    (job, node): (&str, &str),
    at: &str,
    src: &SpecSource,
    problems: &mut Vec<Problem>,
) -> Compiled {
    let PlannedSource { ports, factory } = match s.connector().plan(SourceContext { job, node }) {
        Ok(planned) => planned,
        Err(found) => {
            report(found, at, src, problems);
            return Compiled::Failed;
        }
    };
    let et = s.event_time();
    let mut columns = Vec::new();
    if let Some(column) = &et.column {
        for (port, schema) in &ports {
            match schema.index_of(column) {
                Ok(idx) => match schema.field(idx).data_type() {
                    DataType::Timestamp(_, _) | DataType::Int64 => columns.push(Some(idx)),
                    other => {
                        problems.push(src.at_value(
                            &format!("{at}/event-time/column"),
                            format!(
                                "the event-time column `{column}` must be a timestamp, not {}",
                                sql_type(other)
                            ),
                        ));
                        return Compiled::Failed;
                    }
                },
                Err(_) => {
                    let names: Vec<&str> =
                        schema.fields().iter().map(|f| f.name().as_str()).collect();
                    let place = if port.is_empty() {
                        String::new()
                    } else {
                        format!(" of port `{port}`")
                    };
                    problems.push(src.at_value(
                        &format!("{at}/event-time/column"),
                        format!(
                            "no column `{column}` in the fields{place}: {}",
                            names.join(", ")
                        ),
                    ));
                    return Compiled::Failed;
                }
            }
        }
    } else {
        columns = vec![None; ports.len()];
    }
    // An upsert port is read, by every consumer, through the normaliser that the plan puts
    // after it: a retract stream keyed as the upsert stream was.
    let upserts: Vec<Option<SchemaRef>> = ports
        .iter()
        .map(|(_, schema)| {
            crate::changelog::ChangelogMode::of(schema)
                .is_upsert()
                .then(|| schema.clone())
        })
        .collect();
    let ports = ports
        .into_iter()
        .map(|(name, schema)| {
            let mode = crate::changelog::ChangelogMode::of(&schema);
            match mode.is_upsert() {
                true => (name, normalized(&schema, &mode)),
                false => (name, schema),
            }
        })
        .collect();
    Compiled::Source {
        ports,
        factory,
        upserts,
        event_time: EventTime {
            columns,
            out_of_orderness_ms: et.max_out_of_orderness.as_millis_i64(),
            idle_timeout: et.idle_timeout.map(|d| d.0),
        },
    }
}

/// The retract stream the changelog normaliser makes of an upsert stream of `schema`: the same
/// columns, every kind, keyed as the upsert stream.
fn normalized(schema: &SchemaRef, mode: &crate::changelog::ChangelogMode) -> SchemaRef {
    use crate::changelog::{ChangelogMode, RowKind};
    ChangelogMode::updating(&RowKind::ALL, mode.key().map(<[String]>::to_vec)).apply(schema)
}

/// A selector of the columns named `names` of `schema`, by their exact names (no SQL text to
/// escape); `None` if one is not a column.
fn columns_selector(schema: &SchemaRef, names: &[String], key_groups: u32) -> Option<KeySelector> {
    let exprs: Option<Vec<crate::expr::Expr>> = names
        .iter()
        .map(|k| {
            let column = sqlparser::ast::Expr::Identifier(sqlparser::ast::Ident::with_quote(
                '"',
                k.as_str(),
            ));
            crate::expr::Expr::compile_ast(&column, schema).ok()
        })
        .collect();
    Some(KeySelector::new(exprs?, names.to_vec(), key_groups))
}

/// The changelog normaliser after port `port` of the source node `source` (an upsert stream
/// of `raw`, whose consumers read `out`), reading it partitioned by the upsert key.
fn normalizer(
    (source, port): (usize, usize),
    nodes: &[PlanNode],
    raw: &SchemaRef,
    out: &SchemaRef,
    key_groups: u32,
) -> Option<PlanNode> {
    use crate::operators::keyed::KeyEncoder;
    use crate::operators::normalize::{Normalize, NormalizeDef};
    let producer = &nodes[source];
    let mode = crate::changelog::ChangelogMode::of(raw);
    let keys = Arc::new(columns_selector(raw, mode.key()?, key_groups)?);
    let name = if producer.ports.len() > 1 {
        format!("{}.normalize-{}", producer.name, producer.ports[port].0)
    } else {
        format!("{}.normalize", producer.name)
    };
    let def = Arc::new(NormalizeDef {
        data: crate::changelog::ChangelogMode::append().apply(raw),
        schema: out.clone(),
    });
    let selector = keys.clone();
    let make: nodes::KeyedMake = Arc::new(move |ctx, state| {
        Ok(Box::new(Normalize::new(
            def.clone(),
            KeyEncoder::new(selector.clone())?,
            state,
            ctx.metrics.clone(),
        )?))
    });
    Some(PlanNode {
        factory: Factory::Operator(keyed_factory(&name, None, make)),
        name,
        kind: "changelog-normalize",
        role: NodeRole::Operator,
        parallelism: producer.parallelism,
        inputs: vec![PlanEdge {
            from: source,
            port,
            input: 0,
            key: Some(keys),
        }],
        ports: vec![(String::new(), out.clone())],
        queryable: None,
        read: None,
    })
}

/// Builds the plan's real nodes and edges, dissolving `key-by` and `union` into edges.
fn assemble(
    spec: &JobSpec,
    defs: &[Def<'_>],
    mut compiled: Vec<Compiled>,
    order: &[usize],
    mut reads: Vec<Option<Vec<Vec<bool>>>>,
) -> Plan {
    let job_parallelism = spec.parallelism as usize;
    let virtual_def = |c: &Compiled| matches!(c, Compiled::KeyBy { .. } | Compiled::Union { .. });

    // The real producers behind an input (def, port), and the key partitioning on the way.
    fn resolve(
        defs: &[Def<'_>],
        compiled: &[Compiled],
        def: usize,
        port: usize,
        key: Option<Arc<KeySelector>>,
        out: &mut Vec<(usize, usize, Option<Arc<KeySelector>>)>,
    ) {
        match &compiled[def] {
            Compiled::KeyBy { keys, .. } => {
                let (_, j, p) = &defs[def].inputs[0];
                // The key-by closest to the consumer decides the partitioning.
                resolve(
                    defs,
                    compiled,
                    *j,
                    *p,
                    key.or_else(|| Some(keys.clone())),
                    out,
                );
            }
            Compiled::Union { .. } => {
                for (_, j, p) in &defs[def].inputs {
                    resolve(defs, compiled, *j, *p, key.clone(), out);
                }
            }
            _ => out.push((def, port, key)),
        }
    }

    let mut index: HashMap<usize, usize> = HashMap::new();
    // (source def, upsert port) → the node of the port's normaliser.
    let mut normalized: HashMap<(usize, usize), usize> = HashMap::new();
    let mut nodes: Vec<PlanNode> = Vec::new();
    for &i in order {
        if virtual_def(&compiled[i]) {
            continue;
        }
        let def = &defs[i];
        let mut inputs = Vec::new();
        // A join's `left` and `right` are inputs 0 and 1; every producer behind a union feeds
        // the union's consumer through the same logical input.
        for (input, (_, j, p)) in def.inputs.iter().enumerate() {
            let mut producers = Vec::new();
            resolve(defs, &compiled, *j, *p, None, &mut producers);
            for (producer, port, key) in producers {
                // An upsert port is read from its normaliser's one port.
                let (from, port) = match normalized.get(&(producer, port)) {
                    Some(&n) => (n, 0),
                    None => (index[&producer], port),
                };
                inputs.push(PlanEdge {
                    from,
                    port,
                    input,
                    key,
                });
            }
        }
        if let Compiled::Operator(Planned {
            local: Some(phase), ..
        }) = &compiled[i]
        {
            insert_local_phases(def.name, phase, &mut inputs, &mut nodes);
        }
        let taken = std::mem::replace(&mut compiled[i], Compiled::Failed);
        let mut queryable_of = None;
        let mut upsert_ports = Vec::new();
        let (role, parallelism, ports, factory) = match taken {
            Compiled::Source {
                ports,
                factory,
                event_time,
                upserts,
            } => {
                // The source emits its upsert ports as they are; their normalisers, made
                // below, emit what the consumers read.
                let emitted = ports
                    .iter()
                    .zip(&upserts)
                    .map(|((name, read), raw)| (name.clone(), raw.clone().unwrap_or(read.clone())))
                    .collect();
                upsert_ports = upserts
                    .into_iter()
                    .zip(&ports)
                    .enumerate()
                    .filter_map(|(p, (raw, (_, read)))| raw.map(|raw| (p, raw, read.clone())))
                    .collect();
                (
                    NodeRole::Source,
                    def.source.and_then(|s| s.parallelism()),
                    emitted,
                    Factory::Source {
                        factory,
                        event_time,
                    },
                )
            }
            Compiled::Operator(Planned {
                schema,
                make,
                state_ttl,
                queryable,
                ..
            }) => {
                queryable_of = queryable;
                let factory = match make {
                    Make::Stateless(factory) => factory,
                    Make::Keyed(make) => keyed_factory(def.name, state_ttl, make),
                };
                (
                    NodeRole::Operator,
                    def.transform.and_then(|t| t.parallelism()),
                    vec![(String::new(), schema)],
                    Factory::Operator(factory),
                )
            }
            Compiled::Sink { factory: f } => (
                NodeRole::Sink,
                def.sink.and_then(|s| s.parallelism()),
                vec![],
                Factory::Sink(f),
            ),
            Compiled::KeyBy { .. } | Compiled::Union { .. } | Compiled::Failed => continue,
        };
        let parallelism = parallelism.map_or(job_parallelism, |p| p as usize);
        if role == NodeRole::Sink {
            let table_key = def.sink.and_then(|s| s.connector().changes_key());
            keep_each_keys_changes_in_order(
                &mut inputs,
                &nodes,
                (parallelism, spec.key_groups),
                table_key,
            );
        }
        index.insert(i, nodes.len());
        nodes.push(PlanNode {
            name: def.name.to_string(),
            kind: def.kind(),
            role,
            parallelism,
            inputs,
            ports,
            factory,
            queryable: queryable_of,
            read: reads.get_mut(i).and_then(Option::take),
        });
        // A source's upsert ports (`upsert-json`'s one, a CDC source's table each) are read
        // by their consumers through each port's normaliser.
        let source = nodes.len() - 1;
        for (port, raw, read) in upsert_ports {
            if let Some(node) = normalizer((source, port), &nodes, &raw, &read, spec.key_groups) {
                normalized.insert((i, port), nodes.len());
                nodes.push(node);
            }
        }
    }
    Plan {
        spec: spec.clone(),
        chains: super::chaining::chaining(spec.chaining, &nodes),
        nodes,
        env_values: Vec::new(),
    }
}

/// A sink that reads an updating stream over an edge that would scatter a row's changes among
/// its subtasks (a rebalance to another parallelism, or several producers) reads it
/// hash-partitioned instead: a sink applies changes in the order one subtask receives them, so a
/// `-U` must not reach one subtask and its `+U` another. It is partitioned by the sink's own key
/// when it applies changes to a table by one (`table_key`: every change to a row of the table
/// through one subtask), else by the stream's key, else (a retract stream without a key) by the
/// whole row, which keeps a row's `+I` and its `-D` together. A forward edge keeps each producer
/// subtask's order already; an explicit `key-by` is left as it is.
fn keep_each_keys_changes_in_order(
    inputs: &mut [PlanEdge],
    nodes: &[PlanNode],
    (parallelism, key_groups): (usize, u32),
    table_key: Option<&[String]>,
) {
    let forward = inputs.len() == 1
        && inputs
            .first()
            .is_some_and(|e| nodes[e.from].parallelism == parallelism);
    if forward {
        return;
    }
    for edge in inputs.iter_mut().filter(|e| e.key.is_none()) {
        let Some((_, schema)) = nodes[edge.from].ports.get(edge.port) else {
            continue;
        };
        let mode = crate::changelog::ChangelogMode::of(schema);
        if mode.is_append() {
            continue;
        }
        let whole_row: Vec<String>;
        let key = match table_key.or(mode.key()) {
            Some(key) => key,
            None => {
                whole_row = schema
                    .fields()
                    .iter()
                    .map(|f| f.name().clone())
                    .filter(|n| n != crate::changelog::OP)
                    .collect();
                &whole_row
            }
        };
        if let Some(selector) = columns_selector(schema, key, key_groups) {
            edge.key = Some(Arc::new(selector));
        }
    }
}

/// Puts the local phase of two-phase aggregation between the aggregate `name` and each producer
/// of its input: a node named `<name>.local` (`<name>.local-<producer>` when a union feeds
/// several; a `.` never occurs in the job file's names) with the producer's parallelism, read
/// over a forward edge so that it chains to the producer, and the aggregate's edges re-pointed
/// at it, partitioned by the same keys over the partials.
fn insert_local_phases(
    name: &str,
    phase: &Arc<LocalPhase>,
    inputs: &mut [PlanEdge],
    nodes: &mut Vec<PlanNode>,
) {
    let several = inputs.len() > 1;
    for edge in inputs.iter_mut() {
        let producer = &nodes[edge.from];
        let local_name = if several {
            format!("{name}.local-{}", producer.name)
        } else {
            format!("{name}.local")
        };
        let made = phase.clone();
        let factory: OperatorFactory = Arc::new(move |ctx| {
            Ok(Box::new(LocalAggregate::new(
                made.clone(),
                ctx.metrics.clone(),
            )?))
        });
        let local = PlanNode {
            name: local_name,
            kind: "local-aggregate",
            role: NodeRole::Operator,
            parallelism: producer.parallelism,
            inputs: vec![PlanEdge {
                from: edge.from,
                port: edge.port,
                input: 0,
                key: None,
            }],
            ports: vec![(String::new(), phase.schema.clone())],
            factory: Factory::Operator(factory),
            queryable: None,
            read: None,
        };
        *edge = PlanEdge {
            from: nodes.len(),
            port: 0,
            input: edge.input,
            key: Some(phase.partial_keys.clone()),
        };
        nodes.push(local);
    }
}

/// The factory of a keyed operator: each subtask opens (or restores) its keyed state from
/// the run's store, with the operator's own TTL over the job's, and makes the operator from it.
fn keyed_factory(
    node: &str,
    ttl: Option<HumanDuration>,
    make: nodes::KeyedMake,
) -> OperatorFactory {
    let node = node.to_owned();
    let ttl_ms = ttl.map(|t| t.as_millis_i64());
    Arc::new(move |ctx| make(ctx, ctx.keyed_state(&node, ttl_ms)?))
}
