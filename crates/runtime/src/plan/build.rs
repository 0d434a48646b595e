//! Spec → [`Plan`]: wiring, cycles, schemas and expressions, every problem reported together.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use arrow_schema::{DataType, Field, Schema, SchemaRef};
use sqlparser::ast::SelectItem;
use sqlparser::dialect::GenericDialect;
use sqlparser::parser::Parser;

use super::state::StateSettings;
use super::{Factory, Plan, PlanEdge, PlanNode};
use crate::connectors::jsonl_source::{self, JsonlSourceFactory};
use crate::connectors::kafka::source::KafkaSourceFactory;
use crate::connectors::nexmark_source::{self, NexmarkSourceFactory};
use crate::connectors::sink;
use crate::connectors::source::SourceFactory;
use crate::exec::metrics::NodeRole;
use crate::exec::task::EventTime;
use crate::expr::Expr;
use crate::operators::accumulators::Accumulators;
use crate::operators::aggregate::{AggCall, Aggregate};
use crate::operators::filter::Filter;
use crate::operators::join::{Join, JoinDef, Projection, joined_schema};
use crate::operators::key_by::KeySelector;
use crate::operators::keyed::KeyEncoder;
use crate::operators::map::Map;
use crate::operators::over_aggregate::{OverAggregate, OverAggregateDef};
use crate::operators::top_n::{TopN, TopNDef};
use crate::operators::window::Windowing;
use crate::operators::window_aggregate::{WindowAggregate, WindowAggregateDef};
use crate::operators::window_join::{WindowJoin, WindowJoinDef};
use crate::query::{QueryableNode, StateShape};
use crate::spec::load::{Dropped, LoadedJob, closest};
use crate::spec::problems::{Problem, SpecError, SpecSource, pointer};
use crate::spec::{JobSpec, SinkSpec, SourceSpec, TransformSpec};

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
struct Def<'a> {
    name: &'a str,
    section: Section,
    source: Option<&'a SourceSpec>,
    transform: Option<&'a TransformSpec>,
    sink: Option<&'a SinkSpec>,
    /// Resolved inputs: (pointer of the `from` value, producing def, port).
    inputs: Vec<(String, usize, usize)>,
}

impl Def<'_> {
    fn pointer(&self) -> String {
        pointer(&[self.section.key(), self.name])
    }

    fn kind(&self) -> &'static str {
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

/// What planning learned about a def.
enum Compiled {
    Source {
        ports: Vec<(String, SchemaRef)>,
        factory: Arc<dyn SourceFactory>,
        event_time: EventTime,
    },
    Filter {
        schema: SchemaRef,
        predicate: Arc<Expr>,
    },
    Map {
        schema: SchemaRef,
        columns: Arc<[Expr]>,
    },
    KeyBy {
        schema: SchemaRef,
        keys: Arc<KeySelector>,
    },
    Union {
        schema: SchemaRef,
    },
    Aggregate {
        schema: SchemaRef,
        keys: Arc<KeySelector>,
        calls: Vec<AggCall>,
        queryable: Option<Arc<QueryableNode>>,
    },
    WindowAggregate {
        keys: Arc<KeySelector>,
        def: Arc<WindowAggregateDef>,
        queryable: Option<Arc<QueryableNode>>,
    },
    TopN {
        keys: Arc<KeySelector>,
        def: Arc<TopNDef>,
    },
    OverAggregate {
        keys: Arc<KeySelector>,
        def: Arc<OverAggregateDef>,
    },
    Join {
        keys: [Arc<KeySelector>; 2],
        def: Arc<JoinDef>,
    },
    WindowJoin {
        keys: [Arc<KeySelector>; 2],
        def: Arc<WindowJoinDef>,
    },
    Sink {
        factory: Arc<dyn crate::connectors::sink::SinkFactory>,
    },
    /// Planning this def failed (its problems are reported); its consumers are skipped.
    Failed,
}

impl Compiled {
    fn schema(&self, port: usize) -> Option<&SchemaRef> {
        match self {
            Compiled::Source { ports, .. } => ports.get(port).map(|(_, s)| s),
            Compiled::Filter { schema, .. }
            | Compiled::Map { schema, .. }
            | Compiled::KeyBy { schema, .. }
            | Compiled::Union { schema }
            | Compiled::Aggregate { schema, .. } => Some(schema),
            Compiled::WindowAggregate { def, .. } => Some(&def.schema),
            Compiled::TopN { def, .. } => Some(&def.schema),
            Compiled::OverAggregate { def, .. } => Some(&def.schema),
            Compiled::Join { def, .. } => Some(&def.projection.schema),
            Compiled::WindowJoin { def, .. } => Some(&def.projection.schema),
            Compiled::Sink { .. } | Compiled::Failed => None,
        }
    }
}

/// Plans a loaded job.
pub fn build(loaded: &LoadedJob) -> Result<Plan, SpecError> {
    let spec = &loaded.spec;
    let src = &loaded.source;
    let mut problems = loaded.problems.clone();

    if let Err(message) = spec.checkpoint.storage_config() {
        problems.push(src.at_value("/checkpoint/storage", message));
    }
    crate::spec::checks::check_settings(spec, src, &mut problems);
    let mut defs = collect_defs(spec, src, &mut problems);
    resolve_inputs(&mut defs, src, &loaded.dropped, &mut problems);
    let order = topological_order(&defs, src, &mut problems);
    if loaded.dropped.is_empty() {
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
    Ok(assemble(spec, &defs, compiled, &order))
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
        if !valid_name(def.name) {
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

/// Output port names of a source (empty for single-port nodes).
fn source_ports(s: &SourceSpec) -> Vec<String> {
    match s {
        SourceSpec::Nexmark(_) => nexmark_source::PORTS
            .iter()
            .map(|p| p.to_string())
            .collect(),
        SourceSpec::Jsonl(j) => j
            .variants
            .as_ref()
            .map(|v| v.keys().cloned().collect())
            .unwrap_or_default(),
        SourceSpec::Kafka(k) => k
            .variants
            .as_ref()
            .map(|v| v.keys().cloned().collect())
            .unwrap_or_default(),
    }
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
            let ports = target.source.map(source_ports).unwrap_or_default();
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
    (job, node): (&str, &str),
    at: &str,
    src: &SpecSource,
    problems: &mut Vec<Problem>,
) -> Compiled {
    if let SinkSpec::Postgres(pg) = sink_spec {
        let before = problems.len();
        if let Some((column, ty)) = crate::connectors::postgres::unsupported_column(&schema) {
            problems.push(src.at_value(
                &format!("{at}/from"),
                format!("column `{column}` has type {ty}, which the postgres sink cannot write"),
            ));
        }
        for (i, key) in pg.key.iter().enumerate() {
            if schema.field_with_name(key).is_err() {
                problems.push(src.at_value(
                    &format!("{at}/key/{i}"),
                    format!(
                        "the input has no column `{key}` (it has {})",
                        field_names(&schema)
                    ),
                ));
            }
        }
        if problems.len() > before {
            return Compiled::Failed;
        }
    }
    match sink::factory(sink_spec, schema, job, node) {
        Ok(factory) => Compiled::Sink { factory },
        Err(message) => {
            let key = match sink_spec {
                SinkSpec::Kafka(_) if message.starts_with("weir sets") => "properties",
                SinkSpec::Kafka(_) => "key",
                _ => "connection",
            };
            problems.push(src.at_value(&format!("{at}/{key}"), message));
            Compiled::Failed
        }
    }
}

fn field_names(schema: &Schema) -> String {
    schema
        .fields()
        .iter()
        .map(|f| format!("`{}`", f.name()))
        .collect::<Vec<_>>()
        .join(", ")
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
        return compile_source(s, def.name, &at, src, problems);
    }
    // Inputs that failed have reported their own problems: skip quietly.
    let Some(schema) = input_schema(compiled, defs, i, 0) else {
        return Compiled::Failed;
    };
    if let Some(sink) = def.sink {
        return compile_sink(sink, schema, (&spec.name, def.name), &at, src, problems);
    }
    let Some(transform) = def.transform else {
        return Compiled::Failed;
    };
    let result = match transform {
        TransformSpec::Filter(f) => match Expr::compile(&f.predicate, &schema) {
            Ok(e) if matches!(e.data_type(), DataType::Boolean | DataType::Null) => {
                Compiled::Filter {
                    schema,
                    predicate: Arc::new(e),
                }
            }
            Ok(e) => {
                problems.push(src.at_value(
                    &format!("{at}/where"),
                    format!(
                        "a condition must be BOOL, but `{}` is {}",
                        f.predicate,
                        sql_type(e.data_type())
                    ),
                ));
                Compiled::Failed
            }
            Err(e) => {
                problems.push(src.at_value(&format!("{at}/where"), e.to_string()));
                Compiled::Failed
            }
        },
        TransformSpec::Map(m) => {
            let mut exprs = Vec::new();
            let mut fields = Vec::new();
            for (name, sql) in &m.columns {
                match Expr::compile(sql, &schema) {
                    Ok(e) => {
                        fields.push(Field::new(name, e.data_type().clone(), true));
                        exprs.push(e);
                    }
                    Err(e) => problems.push(src.at_value(
                        &format!(
                            "{at}/columns/{}",
                            crate::spec::positions::escape_segment(name)
                        ),
                        e.to_string(),
                    )),
                }
            }
            Compiled::Map {
                schema: Arc::new(Schema::new(fields)),
                columns: exprs.into(),
            }
        }
        TransformSpec::KeyBy(k) => {
            let mut exprs = Vec::new();
            let mut names = Vec::new();
            for (n, key) in k.keys.iter().enumerate() {
                let key_at = format!("{at}/keys/{n}");
                match compile_key(key, &schema) {
                    Ok((name, e)) => {
                        if names.contains(&name) {
                            problems.push(src.at_value(
                                &key_at,
                                format!("two keys are named `{name}`; rename one with `AS`"),
                            ));
                        }
                        names.push(name);
                        exprs.push(e);
                    }
                    Err(message) => problems.push(src.at_value(&key_at, message)),
                }
            }
            Compiled::KeyBy {
                schema,
                keys: Arc::new(KeySelector::new(exprs, names, spec.key_groups)),
            }
        }
        TransformSpec::Union(_) => {
            for k in 1..def.inputs.len() {
                if let Some(other) = input_schema(compiled, defs, i, k) {
                    if let Some(diff) = schema_difference(&schema, &other) {
                        problems.push(src.at_value(
                            &def.inputs[k].0,
                            format!(
                                "`{}` does not have the same columns as `{}`: {diff}",
                                defs[def.inputs[k].1].name, defs[def.inputs[0].1].name
                            ),
                        ));
                    }
                }
            }
            Compiled::Union { schema }
        }
        TransformSpec::Aggregate(a) => {
            let (_, j, _) = &def.inputs[0];
            let keys = match &compiled[*j] {
                Compiled::KeyBy { keys, .. } => keys.clone(),
                _ => {
                    problems.push(src.at_value(
                        &format!("{at}/from"),
                        format!(
                            "an aggregate reads a `key-by` node, and `{}` is a {}; add a key-by between them",
                            defs[*j].name,
                            defs[*j].kind()
                        ),
                    ));
                    return Compiled::Failed;
                }
            };
            let mut calls = Vec::new();
            let mut names = Vec::new();
            for (name, sql) in &a.aggregates {
                if keys.names().contains(name) {
                    problems.push(src.at_key(
                        &format!(
                            "{at}/aggregates/{}",
                            crate::spec::positions::escape_segment(name)
                        ),
                        format!("`{name}` is already a key column; choose another name"),
                    ));
                }
                match AggCall::compile(sql, &schema) {
                    Ok(c) => {
                        calls.push(c);
                        names.push(name.clone());
                    }
                    Err(message) => problems.push(src.at_value(
                        &format!(
                            "{at}/aggregates/{}",
                            crate::spec::positions::escape_segment(name)
                        ),
                        message,
                    )),
                }
            }
            Compiled::Aggregate {
                schema: Aggregate::output_schema(&keys, &names, &calls),
                keys,
                calls,
                queryable: None,
            }
        }
        TransformSpec::WindowAggregate(_)
        | TransformSpec::TopN(_)
        | TransformSpec::OverAggregate(_)
        | TransformSpec::Join(_)
        | TransformSpec::IntervalJoin(_)
        | TransformSpec::WindowJoin(_) => {
            let mut k = Keyed {
                defs,
                compiled,
                i,
                src,
                problems,
                at: &at,
            };
            k.compile(transform).unwrap_or(Compiled::Failed)
        }
    };
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
    use crate::operators::window::Windowing;
    let backend = spec.state.backend;
    // The output columns after the keys (and the window bounds) are the aggregates, in
    // accumulator order.
    let names = |schema: &SchemaRef, skip: usize| -> Vec<String> {
        schema
            .fields()
            .iter()
            .skip(skip)
            .map(|f| f.name().clone())
            .collect()
    };
    let built = match &compiled {
        Compiled::Aggregate { schema, keys, .. } => QueryableNode::build(
            node,
            "aggregate",
            declared,
            backend,
            keys,
            names(schema, keys.names().len()),
            &[("accumulators", StateShape::Accumulators)],
        ),
        Compiled::WindowAggregate { keys, def, .. } => QueryableNode::build(
            node,
            "window-aggregate",
            declared,
            backend,
            keys,
            names(&def.schema, keys.names().len() + 2),
            match def.windowing {
                Windowing::Session { .. } => &[("sessions", StateShape::Sessions)],
                _ => &[("windows", StateShape::Windows)],
            },
        ),
        _ => return compiled,
    };
    match (built, compiled) {
        (
            Ok(q),
            Compiled::Aggregate {
                schema,
                keys,
                calls,
                ..
            },
        ) => Compiled::Aggregate {
            schema,
            keys,
            calls,
            queryable: Some(Arc::new(q)),
        },
        (Ok(q), Compiled::WindowAggregate { keys, def, .. }) => Compiled::WindowAggregate {
            keys,
            def,
            queryable: Some(Arc::new(q)),
        },
        (Ok(_), other) => other,
        (Err(found), _) => {
            for p in found {
                problems.push(src.at_value(&format!("{at}/{}", p.pointer), p.message));
            }
            Compiled::Failed
        }
    }
}

/// A source's output ports with their schemas, and its factory.
type MadeSource = (Vec<(String, SchemaRef)>, Arc<dyn SourceFactory>);

/// The Kafka source's factory and ports, or a problem at the key that is wrong.
fn kafka_source(
    k: &crate::spec::KafkaSourceSpec,
    node: &str,
) -> Result<MadeSource, (&'static str, String)> {
    use crate::connectors::kafka::records::ValueFormat;
    use crate::spec::kafka::{KafkaFormat, StartFrom, StartPosition};
    let format = match k.format {
        KafkaFormat::Json => ValueFormat::Json(
            jsonl_source::layout_of(&k.schema, &k.variants).map_err(|m| ("format", m))?,
        ),
        KafkaFormat::Raw if k.schema.is_some() || k.variants.is_some() => {
            return Err((
                "format",
                "`format: raw` reads the value as one string column: leave out `schema` and \
                 `variants`"
                    .into(),
            ));
        }
        KafkaFormat::Raw => ValueFormat::Raw,
    };
    k.start_from.millis().map_err(|m| ("start-from", m))?;
    if k.start_from == StartFrom::Position(StartPosition::GroupOffsets) && k.group_id.is_none() {
        return Err((
            "start-from",
            "`start-from: group-offsets` needs the `group-id` whose offsets to start from".into(),
        ));
    }
    crate::connectors::kafka::check_properties(&k.properties).map_err(|m| ("properties", m))?;
    let ports = format.ports(&k.metadata);
    let value_columns = match &format {
        ValueFormat::Json(layout) => layout
            .ports()
            .iter()
            .flat_map(|(_, s)| {
                s.fields()
                    .iter()
                    .map(|f| f.name().clone())
                    .collect::<Vec<_>>()
            })
            .collect::<Vec<_>>(),
        ValueFormat::Raw => vec![crate::connectors::kafka::records::RAW_COLUMN.to_owned()],
    };
    if let Some(clash) = k.metadata.keys().find(|c| value_columns.contains(c)) {
        return Err((
            "metadata",
            format!("`{clash}` is already a column of the value: name the metadata column apart"),
        ));
    }
    let factory = KafkaSourceFactory::new(k, format, node).map_err(|m| ("topic", m))?;
    Ok((ports, Arc::new(factory)))
}

fn compile_source(
    s: &SourceSpec,
    node: &str,
    at: &str,
    src: &SpecSource,
    problems: &mut Vec<Problem>,
) -> Compiled {
    let (ports, factory): (Vec<(String, SchemaRef)>, Arc<dyn SourceFactory>) = match s {
        SourceSpec::Nexmark(n) => match NexmarkSourceFactory::new(n) {
            Ok(factory) => (nexmark_source::port_schemas(), Arc::new(factory)),
            Err(message) => {
                problems.push(src.at_value(at, message));
                return Compiled::Failed;
            }
        },
        SourceSpec::Jsonl(j) => match jsonl_source::layout(j) {
            Ok(layout) => (layout.ports(), Arc::new(JsonlSourceFactory::new(j, layout))),
            Err(message) => {
                problems.push(src.at_value(at, message));
                return Compiled::Failed;
            }
        },
        SourceSpec::Kafka(k) => match kafka_source(k, node) {
            Ok(made) => made,
            Err((key, message)) => {
                let at = if key == "format" && k.format == crate::spec::kafka::KafkaFormat::Json {
                    at.to_owned()
                } else {
                    format!("{at}/{key}")
                };
                problems.push(src.at_value(&at, message));
                return Compiled::Failed;
            }
        },
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
    Compiled::Source {
        ports,
        factory,
        event_time: EventTime {
            columns,
            out_of_orderness_ms: et.max_out_of_orderness.as_millis_i64(),
            idle_timeout: et.idle_timeout.map(|d| d.0),
        },
    }
}

/// A key: `expr` or `expr AS name`; a plain column names itself.
fn compile_key(sql: &str, schema: &Schema) -> Result<(String, Expr), String> {
    crate::expr::check_size(sql).map_err(|e| e.to_string())?;
    let item = Parser::new(&GenericDialect {})
        .try_with_sql(sql)
        .and_then(|mut p| {
            let item = p.parse_select_item()?;
            match p.peek_token().token {
                sqlparser::tokenizer::Token::EOF => Ok(item),
                other => Err(sqlparser::parser::ParserError::ParserError(format!(
                    "unexpected `{other}` after the key"
                ))),
            }
        })
        .map_err(|e| format!("cannot parse the key `{sql}`: {e}"))?;
    let (ast, alias) = match item {
        SelectItem::UnnamedExpr(e) => (e, None),
        SelectItem::ExprWithAlias { expr, alias } => (expr, Some(alias.value)),
        _ => {
            return Err(format!(
                "`{sql}` is not a key: write a column or `expression AS name`"
            ));
        }
    };
    let e = Expr::compile_ast(&ast, schema).map_err(|e| e.to_string())?;
    let name = match (alias, e.as_column()) {
        (Some(a), _) => a,
        (None, Some(_)) => e.default_name(),
        (None, None) => return Err(format!("name the key `{sql}`: write `{sql} AS name`")),
    };
    Ok((name, e))
}

fn sql_type(t: &DataType) -> &'static str {
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

/// Why two schemas differ for a union, if they do.
fn schema_difference(a: &Schema, b: &Schema) -> Option<String> {
    let describe = |s: &Schema| {
        s.fields()
            .iter()
            .map(|f| format!("{} {}", f.name(), sql_type(f.data_type())))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let same = a.fields().len() == b.fields().len()
        && a.fields()
            .iter()
            .zip(b.fields())
            .all(|(x, y)| x.name() == y.name() && x.data_type() == y.data_type());
    (!same).then(|| format!("({}) versus ({})", describe(a), describe(b)))
}

/// Builds the plan's real nodes and edges, dissolving `key-by` and `union` into edges.
fn assemble(
    spec: &JobSpec,
    defs: &[Def<'_>],
    mut compiled: Vec<Compiled>,
    order: &[usize],
) -> Plan {
    let job_parallelism = spec.parallelism as usize;
    let settings = Arc::new(StateSettings::from_spec(spec));
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
                inputs.push(PlanEdge {
                    from: index[&producer],
                    port,
                    input,
                    key,
                });
            }
        }
        let taken = std::mem::replace(&mut compiled[i], Compiled::Failed);
        let mut queryable_of = None;
        let (role, parallelism, ports, factory) = match taken {
            Compiled::Source {
                ports,
                factory,
                event_time,
            } => (
                NodeRole::Source,
                def.source.and_then(|s| s.parallelism()),
                ports,
                Factory::Source {
                    factory,
                    event_time,
                },
            ),
            Compiled::Filter { schema, predicate } => (
                NodeRole::Operator,
                def.transform.and_then(|t| t.parallelism()),
                vec![(String::new(), schema)],
                Factory::Operator(Arc::new(move |_| {
                    Ok(Box::new(Filter::new(predicate.clone())))
                })),
            ),
            Compiled::Map { schema, columns } => {
                let out = schema.clone();
                (
                    NodeRole::Operator,
                    def.transform.and_then(|t| t.parallelism()),
                    vec![(String::new(), schema)],
                    Factory::Operator(Arc::new(move |_| {
                        Ok(Box::new(Map::new(columns.clone(), out.clone())))
                    })),
                )
            }
            Compiled::Aggregate {
                schema,
                keys,
                calls,
                queryable,
            } => {
                let out = schema.clone();
                let settings = settings.clone();
                let node = def.name.to_string();
                let ttl = state_ttl(def.transform);
                let aggs = Arc::new(Accumulators { calls });
                queryable_of = queryable;
                (
                    NodeRole::Operator,
                    def.transform.and_then(|t| t.parallelism()),
                    vec![(String::new(), schema)],
                    Factory::Operator(Arc::new(move |ctx| {
                        Ok(Box::new(Aggregate::new(
                            KeyEncoder::new(keys.clone())?,
                            aggs.clone(),
                            out.clone(),
                            settings.backend(&node, ctx, ttl)?,
                        )?))
                    })),
                )
            }
            Compiled::WindowAggregate {
                keys,
                def: d,
                queryable,
            } => {
                queryable_of = queryable;
                let settings = settings.clone();
                let node = def.name.to_string();
                let ttl = state_ttl(def.transform);
                (
                    NodeRole::Operator,
                    def.transform.and_then(|t| t.parallelism()),
                    vec![(String::new(), d.schema.clone())],
                    Factory::Operator(Arc::new(move |ctx| {
                        Ok(Box::new(WindowAggregate::new(
                            d.clone(),
                            KeyEncoder::new(keys.clone())?,
                            settings.backend(&node, ctx, ttl)?,
                            ctx.metrics.clone(),
                        )?))
                    })),
                )
            }
            Compiled::TopN { keys, def: d } => {
                let settings = settings.clone();
                let node = def.name.to_string();
                let ttl = state_ttl(def.transform);
                (
                    NodeRole::Operator,
                    def.transform.and_then(|t| t.parallelism()),
                    vec![(String::new(), d.schema.clone())],
                    Factory::Operator(Arc::new(move |ctx| {
                        Ok(Box::new(TopN::new(
                            d.clone(),
                            KeyEncoder::new(keys.clone())?,
                            settings.backend(&node, ctx, ttl)?,
                            ctx.metrics.clone(),
                        )?))
                    })),
                )
            }
            Compiled::OverAggregate { keys, def: d } => {
                let settings = settings.clone();
                let node = def.name.to_string();
                let ttl = state_ttl(def.transform);
                (
                    NodeRole::Operator,
                    def.transform.and_then(|t| t.parallelism()),
                    vec![(String::new(), d.schema.clone())],
                    Factory::Operator(Arc::new(move |ctx| {
                        Ok(Box::new(OverAggregate::new(
                            d.clone(),
                            KeyEncoder::new(keys.clone())?,
                            settings.backend(&node, ctx, ttl)?,
                            ctx.metrics.clone(),
                        )?))
                    })),
                )
            }
            Compiled::Join { keys, def: d } => {
                let settings = settings.clone();
                let node = def.name.to_string();
                let ttl = state_ttl(def.transform);
                (
                    NodeRole::Operator,
                    def.transform.and_then(|t| t.parallelism()),
                    vec![(String::new(), d.projection.schema.clone())],
                    Factory::Operator(Arc::new(move |ctx| {
                        Ok(Box::new(
                            Join::new(
                                d.clone(),
                                [
                                    KeyEncoder::new(keys[0].clone())?,
                                    KeyEncoder::new(keys[1].clone())?,
                                ],
                                settings.backend(&node, ctx, ttl)?,
                            )?
                            .restored(ctx.restore.as_deref()),
                        ))
                    })),
                )
            }
            Compiled::WindowJoin { keys, def: d } => {
                let settings = settings.clone();
                let node = def.name.to_string();
                let ttl = state_ttl(def.transform);
                (
                    NodeRole::Operator,
                    def.transform.and_then(|t| t.parallelism()),
                    vec![(String::new(), d.projection.schema.clone())],
                    Factory::Operator(Arc::new(move |ctx| {
                        Ok(Box::new(WindowJoin::new(
                            d.clone(),
                            [
                                KeyEncoder::new(keys[0].clone())?,
                                KeyEncoder::new(keys[1].clone())?,
                            ],
                            settings.backend(&node, ctx, ttl)?,
                            ctx.metrics.clone(),
                        )?))
                    })),
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
        index.insert(i, nodes.len());
        nodes.push(PlanNode {
            name: def.name.to_string(),
            kind: def.kind(),
            role,
            parallelism: parallelism.map_or(job_parallelism, |p| p as usize),
            inputs,
            ports,
            factory,
            queryable: queryable_of,
        });
    }
    Plan {
        spec: spec.clone(),
        nodes,
        state_dir: settings.run_dir().to_path_buf(),
    }
}

/// Compiles the keyed operators (all read `key-by` nodes).
struct Keyed<'a, 'd> {
    defs: &'a [Def<'d>],
    compiled: &'a [Compiled],
    i: usize,
    src: &'a SpecSource,
    problems: &'a mut Vec<Problem>,
    at: &'a str,
}

impl Keyed<'_, '_> {
    fn problem(&mut self, key: &str, message: impl Into<String>) {
        let at = if key.is_empty() {
            self.at.to_string()
        } else {
            format!("{}/{key}", self.at)
        };
        self.problems.push(self.src.at_value(&at, message));
    }

    /// The key selector and schema of input `k`, which must be a key-by node.
    fn keyed_input(&mut self, k: usize, key: &str) -> Option<(Arc<KeySelector>, SchemaRef)> {
        let (_, j, _) = self.defs[self.i].inputs.get(k)?;
        match &self.compiled[*j] {
            Compiled::KeyBy { keys, schema } => Some((keys.clone(), schema.clone())),
            Compiled::Failed => None,
            _ => {
                let (name, kind) = (self.defs[*j].name, self.defs[*j].kind());
                let me = self.defs[self.i].kind();
                self.problem(
                    key,
                    format!("a {me} reads `key-by` nodes, and `{name}` is a {kind}; add a key-by between them"),
                );
                None
            }
        }
    }

    fn expr(&mut self, key: &str, sql: &str, schema: &Schema) -> Option<Expr> {
        match Expr::compile(sql, schema) {
            Ok(e) => Some(e),
            Err(e) => {
                self.problem(key, e.to_string());
                None
            }
        }
    }

    /// A TIMESTAMP (or INT epoch-ms) expression.
    fn time(&mut self, key: &str, sql: &str, schema: &Schema) -> Option<Expr> {
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

    fn condition(&mut self, key: &str, sql: &str, schema: &Schema) -> Option<Expr> {
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

    fn windowing(&mut self, key: &str, window: &crate::spec::WindowSpec) -> Option<Windowing> {
        match Windowing::from_spec(window) {
            Ok(w) => Some(w),
            Err(m) => {
                self.problem(key, m);
                None
            }
        }
    }

    fn calls(
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
    fn order(&mut self, key: &str, items: &[String], schema: &Schema) -> Vec<(Expr, bool)> {
        let mut out = Vec::new();
        for (n, item) in items.iter().enumerate() {
            let (sql, desc) = split_direction(item);
            if let Some(e) = self.expr(&format!("{key}/{n}"), sql, schema) {
                out.push((e, desc));
            }
        }
        out
    }

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

    fn same_keys(&mut self, a: &KeySelector, b: &KeySelector) {
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

    fn compile(&mut self, transform: &TransformSpec) -> Option<Compiled> {
        let before = self.problems.len();
        let result = match transform {
            TransformSpec::WindowAggregate(w) => self.window_aggregate(w),
            TransformSpec::TopN(t) => self.top_n(t),
            TransformSpec::OverAggregate(o) => self.over_aggregate(o),
            TransformSpec::Join(j) => self.join(j),
            TransformSpec::IntervalJoin(j) => self.interval_join(j),
            TransformSpec::WindowJoin(j) => self.window_join(j),
            _ => None,
        };
        if self.problems.len() > before {
            return None;
        }
        result
    }

    fn window_aggregate(&mut self, w: &crate::spec::WindowAggregateSpec) -> Option<Compiled> {
        let (keys, schema) = self.keyed_input(0, "from")?;
        let time = self.time("time", &w.time, &schema);
        let windowing = self.windowing("window", &w.window);
        let mut taken: Vec<String> = keys.names().to_vec();
        taken.extend(["window_start".to_string(), "window_end".to_string()]);
        let (names, calls) = self.calls(&w.aggregates, &schema, &taken);
        let out = WindowAggregateDef::output_schema(&keys, &names, &calls);
        Some(Compiled::WindowAggregate {
            def: Arc::new(WindowAggregateDef {
                time: time?,
                windowing: windowing?,
                lateness: w.allowed_lateness.as_millis_i64(),
                aggs: Accumulators { calls },
                schema: out,
            }),
            keys,
            queryable: None,
        })
    }

    fn top_n(&mut self, t: &crate::spec::TopNSpec) -> Option<Compiled> {
        let (keys, schema) = self.keyed_input(0, "from")?;
        let order = self.order("order-by", &t.order_by, &schema);
        let fire_at = self.time("fire-at", &t.fire_at, &schema);
        let columns: Vec<usize> = match &t.columns {
            None => (0..schema.fields().len()).collect(),
            Some(names) => {
                let mut idx = Vec::new();
                for (n, name) in names.iter().enumerate() {
                    match schema.index_of(name) {
                        Ok(i) => idx.push(i),
                        Err(_) => {
                            let known: Vec<&str> =
                                schema.fields().iter().map(|f| f.name().as_str()).collect();
                            self.problem(
                                &format!("columns/{n}"),
                                format!("no column `{name}`; columns: {}", known.join(", ")),
                            );
                        }
                    }
                }
                idx
            }
        };
        let out = Arc::new(schema.project(&columns).ok()?);
        Some(Compiled::TopN {
            def: Arc::new(TopNDef {
                order,
                n: t.n.max(1) as usize,
                with_ties: t.with_ties,
                fire_at: fire_at?,
                input: schema,
                columns,
                schema: out,
            }),
            keys,
        })
    }

    fn over_aggregate(&mut self, o: &crate::spec::OverAggregateSpec) -> Option<Compiled> {
        let (keys, schema) = self.keyed_input(0, "from")?;
        let order = self.order("order-by", &o.order_by, &schema);
        let (first, desc) = split_direction(o.order_by.first()?);
        if desc {
            self.problem(
                "order-by/0",
                "the first order-by expression is the rows' time and must be ascending",
            );
        }
        let time = self.time("order-by/0", first, &schema);
        let taken: Vec<String> = schema.fields().iter().map(|f| f.name().clone()).collect();
        let (names, calls) = self.calls(&o.aggregates, &schema, &taken);
        let mut fields: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
        fields.extend(
            names
                .iter()
                .zip(&calls)
                .map(|(n, c)| Field::new(n, c.data_type.clone(), true)),
        );
        Some(Compiled::OverAggregate {
            def: Arc::new(OverAggregateDef {
                time: time?,
                order,
                rows: o.rows.max(1) as usize,
                calls,
                input: schema,
                schema: Arc::new(Schema::new(fields)),
            }),
            keys,
        })
    }

    /// Compiles a join's condition and output columns, and prunes each side to the columns
    /// they read, so joins keep (and copy) only what they will use. Returns the joined schema
    /// over the pruned sides, the condition, the projection and the kept columns per side.
    #[allow(clippy::type_complexity)]
    fn pruned_join(
        &mut self,
        sides: [(&SchemaRef, &str); 2],
        extra: &[Field],
        condition: Option<&str>,
        columns: Option<&indexmap::IndexMap<String, String>>,
    ) -> Option<(SchemaRef, Option<Expr>, Projection, [Vec<usize>; 2])> {
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
        let cond = match condition {
            Some(c) => Some(self.condition("where", c, &joined)?),
            None => None,
        };
        let proj = self.projection(columns, &joined)?;
        Some((joined, cond, proj, [keep_l, keep_r]))
    }

    fn join(&mut self, j: &crate::spec::JoinSpec) -> Option<Compiled> {
        let left = self.keyed_input(0, "left");
        let right = self.keyed_input(1, "right");
        let ((lk, ls), (rk, rs)) = (left?, right?);
        self.same_keys(&lk, &rk);
        let left_until = match &j.left_until {
            Some(u) => Some(self.time("left-until", u, &ls)?),
            None => None,
        };
        let right_until = match &j.right_until {
            Some(u) => Some(self.time("right-until", u, &rs)?),
            None => None,
        };
        let (joined, condition, projection, keep) = self.pruned_join(
            [(&ls, &j.left_as), (&rs, &j.right_as)],
            &[],
            j.condition.as_deref(),
            j.columns.as_ref(),
        )?;
        Some(Compiled::Join {
            keys: [lk, rk],
            def: Arc::new(JoinDef {
                inputs: [
                    Arc::new(ls.project(&keep[0]).ok()?),
                    Arc::new(rs.project(&keep[1]).ok()?),
                ],
                keep,
                until: [left_until, right_until],
                joined,
                condition,
                projection,
            }),
        })
    }

    fn interval_join(&mut self, j: &crate::spec::IntervalJoinSpec) -> Option<Compiled> {
        let left = self.keyed_input(0, "left");
        let right = self.keyed_input(1, "right");
        let ((lk, ls), (rk, rs)) = (left?, right?);
        self.same_keys(&lk, &rk);
        let (lower, upper) = (j.lower.as_millis(), j.upper.as_millis());
        if lower > upper {
            self.problem(
                "lower",
                format!("lower ({}) is after upper ({})", j.lower, j.upper),
            );
            return None;
        }
        self.time("left-time", &j.left_time, &ls)?;
        self.time("right-time", &j.right_time, &rs)?;
        let shifted = |base: &str, ms: i64| {
            if ms < 0 {
                format!("({base}) - INTERVAL '{} milliseconds'", -ms)
            } else {
                format!("({base}) + INTERVAL '{ms} milliseconds'")
            }
        };
        let l = format!("{}.{}", j.left_as, j.left_time);
        let r = format!("{}.{}", j.right_as, j.right_time);
        let bounds = format!(
            "{r} BETWEEN {} AND {}",
            shifted(&l, lower),
            shifted(&l, upper)
        );
        let sql = match &j.condition {
            Some(c) => format!("({bounds}) AND ({c})"),
            None => bounds,
        };
        // A left row can match right rows up to its time + upper; a right row can be matched by
        // left rows down to its time - lower.
        let left_until = self.time("left-time", &shifted(&j.left_time, upper), &ls)?;
        let right_until = self.time("right-time", &shifted(&j.right_time, -lower), &rs)?;
        let (joined, condition, projection, keep) = self.pruned_join(
            [(&ls, &j.left_as), (&rs, &j.right_as)],
            &[],
            Some(&sql),
            j.columns.as_ref(),
        )?;
        Some(Compiled::Join {
            keys: [lk, rk],
            def: Arc::new(JoinDef {
                inputs: [
                    Arc::new(ls.project(&keep[0]).ok()?),
                    Arc::new(rs.project(&keep[1]).ok()?),
                ],
                keep,
                until: [Some(left_until), Some(right_until)],
                joined,
                condition,
                projection,
            }),
        })
    }

    fn window_join(&mut self, j: &crate::spec::WindowJoinSpec) -> Option<Compiled> {
        let left = self.keyed_input(0, "left");
        let right = self.keyed_input(1, "right");
        let ((lk, ls), (rk, rs)) = (left?, right?);
        self.same_keys(&lk, &rk);
        let windowing = self.windowing("window", &j.window)?;
        if windowing.is_session() {
            self.problem(
                "window",
                "a window join takes tumbling or sliding windows, not sessions",
            );
            return None;
        }
        let lt = self.time("left-time", &j.left_time, &ls);
        let rt = self.time("right-time", &j.right_time, &rs);
        let ts = DataType::Timestamp(arrow_schema::TimeUnit::Millisecond, None);
        let windows = [
            Field::new("window_start", ts.clone(), true),
            Field::new("window_end", ts, true),
        ];
        let (joined, condition, projection, keep) = self.pruned_join(
            [(&ls, &j.left_as), (&rs, &j.right_as)],
            &windows,
            j.condition.as_deref(),
            j.columns.as_ref(),
        )?;
        Some(Compiled::WindowJoin {
            keys: [lk, rk],
            def: Arc::new(WindowJoinDef {
                inputs: [
                    Arc::new(ls.project(&keep[0]).ok()?),
                    Arc::new(rs.project(&keep[1]).ok()?),
                ],
                keep,
                times: [lt?, rt?],
                windowing,
                mode: j.mode,
                joined,
                condition,
                projection,
            }),
        })
    }
}

/// `price DESC` → (`price`, true); `dateTime ASC` or `dateTime` → (`dateTime`, false).
fn split_direction(item: &str) -> (&str, bool) {
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

/// An operator's own state TTL, if its spec has one.
fn state_ttl(transform: Option<&TransformSpec>) -> Option<crate::spec::HumanDuration> {
    match transform {
        Some(TransformSpec::Aggregate(a)) => a.state_ttl,
        Some(TransformSpec::Join(j)) => j.state_ttl,
        _ => None,
    }
}
