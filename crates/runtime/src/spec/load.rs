//! YAML text → [`JobSpec`], reporting every problem at once.
//!
//! 1. one YAML pass ([`super::yaml`]) reads the text into a tree and the position of every
//!    node; a syntax error, a key written twice, an unknown tag or a text past the limits
//!    (depth, size, one document) stops here, with its position;
//! 2. `--set key=value` overrides replace values in the parsed tree, then `${VAR}` references
//!    in string values are replaced from the environment ([`super::env`]);
//! 3. the tree is validated against the JSON Schema of [`JobSpec`] (the one `weir schema`
//!    prints), which finds *all* unknown keys, wrong types and out-of-range values together;
//!    tagged unions (`kind: filter`) are checked against the branch their `kind` names, so a
//!    typo gives "unknown key `wher`; did you mean `where`?" rather than "matches no variant";
//! 4. serde decodes the validated tree.
//!
//! Every problem carries the line and column that [`super::positions`] found for its path.
//! Wiring and expression problems are found afterwards by the planner, with the same positions.

use std::collections::HashSet;
use std::path::Path;
use std::str::FromStr;
use std::sync::OnceLock;

use jsonschema::Validator;
use jsonschema::error::{ValidationError, ValidationErrorKind};
use serde_json::Value;

use super::JobSpec;
use super::env::{Environment, ProcessEnv, substitute};
use super::positions::{PositionIndex, escape_segment};
use super::problems::{Problem, SpecError, SpecSource, dotted_path};

/// A parsed job with the text positions its later problems are reported at.
///
/// Loading is lenient: a node with a structural problem (unknown key, wrong type) is reported
/// and left out, and the rest of the job is still decoded so the planner can report wiring and
/// expression problems in the same pass. [`crate::plan::build`] fails if `problems` is not empty.
#[derive(Debug)]
pub struct LoadedJob {
    pub spec: JobSpec,
    pub source: SpecSource,
    /// Problems found while loading.
    pub problems: Vec<Problem>,
    /// Nodes left out because of those problems: reading them is not reported again.
    pub dropped: Dropped,
    /// Values `${VAR}` references read from the environment ([`super::env`]): a server masks
    /// them wherever it shows the job.
    pub env_values: Vec<String>,
}

/// Nodes left out of a job because they had structural problems.
#[derive(Clone, Debug, Default)]
pub struct Dropped {
    names: HashSet<String>,
    /// A whole section was unusable: any reference may point into it.
    everything: bool,
}

impl Dropped {
    pub fn contains(&self, name: &str) -> bool {
        self.everything || self.names.contains(name)
    }

    pub fn is_empty(&self) -> bool {
        !self.everything && self.names.is_empty()
    }

    /// Leaves out one more node (a `sql` node that could not be planned).
    pub(crate) fn insert(&mut self, name: &str) {
        self.names.insert(name.to_string());
    }
}

/// A `--set key.path=value` override; the value is read as YAML (`10`, `true`, `[a, b]`, `text`).
#[derive(Clone, Debug, PartialEq)]
pub struct Override {
    pub path: Vec<String>,
    pub value: Value,
}

impl FromStr for Override {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (key, value) = s
            .split_once('=')
            .ok_or_else(|| format!("`{s}` is not key=value (e.g. sources.gen.events=1000)"))?;
        let path: Vec<String> = key.trim().split('.').map(str::to_string).collect();
        if path.iter().any(String::is_empty) {
            return Err(format!(
                "`{key}` is not a key path (e.g. sources.gen.events)"
            ));
        }
        // Read as the file's values are, with the same limits.
        let value = super::yaml::parse(value)
            .map_err(|refusal| format!("the value of `{key}`: {}", refusal.message))?
            .value;
        Ok(Override { path, value })
    }
}

/// Reads a job file (leniently, see [`parse_str`]).
pub fn load_file(path: &Path, overrides: &[Override]) -> Result<LoadedJob, SpecError> {
    let file = path.display().to_string();
    let refuse = |line, column, message| SpecError {
        file: file.clone(),
        problems: vec![Problem {
            path: String::new(),
            line,
            column,
            message,
            origin: None,
        }],
    };
    let bytes = match std::fs::metadata(path) {
        Ok(meta) if meta.len() > MAX_FILE_BYTES => {
            return Err(refuse(
                None,
                None,
                format!(
                    "the job file is {} bytes long; at most {MAX_FILE_BYTES} are allowed",
                    meta.len()
                ),
            ));
        }
        Ok(_) => std::fs::read(path),
        Err(e) => Err(e),
    };
    match bytes.map(String::from_utf8) {
        Ok(Ok(text)) => parse_str(&file, &text, overrides),
        Ok(Err(e)) => {
            let (line, column) = utf8_error_position(e.as_bytes(), e.utf8_error());
            Err(refuse(
                Some(line),
                Some(column),
                "the job file is not UTF-8 text".into(),
            ))
        }
        Err(e) => Err(refuse(None, None, format!("cannot read the job file: {e}"))),
    }
}

/// The longest job file `load_file` reads: job files are a few KiB; the HTTP API's body limit
/// is 1 MiB.
pub const MAX_FILE_BYTES: u64 = 4 << 20;

/// The 1-based line and column (in characters) of the first byte that is not UTF-8.
pub fn utf8_error_position(bytes: &[u8], error: std::str::Utf8Error) -> (usize, usize) {
    let valid = &bytes[..error.valid_up_to()];
    // Everything before `valid_up_to` is valid UTF-8 by definition.
    let text = std::str::from_utf8(valid).unwrap_or_default();
    let line = text.matches('\n').count() + 1;
    let column = text.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

/// Reads a job given as text; `file` names it in messages. Fails only when nothing usable
/// could be decoded; otherwise problems travel in [`LoadedJob::problems`]. `${VAR}` references
/// read the process's environment.
pub fn parse_str(file: &str, text: &str, overrides: &[Override]) -> Result<LoadedJob, SpecError> {
    parse_str_in(file, text, overrides, &ProcessEnv)
}

/// [`parse_str`], with `${VAR}` references read from `env`.
pub fn parse_str_in(
    file: &str,
    text: &str,
    overrides: &[Override],
    env: &dyn Environment,
) -> Result<LoadedJob, SpecError> {
    if super::sql_file::looks_like_sql(file, text) {
        return super::sql_file::parse(file, text, overrides, env);
    }
    let document = match super::yaml::parse(text) {
        Ok(document) => document,
        Err(refusal) => {
            return Err(
                SpecSource::indexed(file, PositionIndex::default()).error(vec![Problem {
                    path: dotted_path(&refusal.pointer),
                    line: Some(refusal.position.line),
                    column: Some(refusal.position.column),
                    message: refusal.message,
                    origin: None,
                }]),
            );
        }
    };
    let source = SpecSource::indexed(file, document.index);
    let json = document.value;
    if json.is_null() {
        return Err(source.error(vec![source.at_value("", "the job file is empty")]));
    }
    decode_tree(json, source, Vec::new(), overrides, env)
}

/// The steps after reading a job's text into a tree, which a YAML file and a SQL job file
/// ([`super::sql_file`]) share: `--set` overrides, `${VAR}` references, the schema, serde.
pub(super) fn decode_tree(
    mut json: Value,
    mut source: SpecSource,
    mut problems: Vec<Problem>,
    overrides: &[Override],
    env: &dyn Environment,
) -> Result<LoadedJob, SpecError> {
    for o in overrides {
        match apply_override(&mut json, o) {
            Ok(pointer) => source.overridden.push(pointer),
            Err(message) => problems.push(Problem {
                path: o.path.join("."),
                line: None,
                column: None,
                message,
                origin: Some(format!("--set {}", o.path.join("."))),
            }),
        }
    }
    // After the overrides, so that a `--set` value may hold references too.
    let substituted = substitute(&mut json, env);
    for (pointer, message) in substituted.problems {
        problems.push(source.at_value(&pointer, message));
    }
    let env_values = substituted.values;
    if !json.is_object() {
        problems.push(source.at_value("", "a job file is a mapping of keys (name, sources, ...)"));
        return Err(source.error(problems));
    }
    let mut dropped = Dropped::default();
    let mut prunes = Vec::new();
    for error in validator().iter_errors(&json) {
        describe(&error, &json, &source, &mut problems, &mut prunes);
    }
    whole_numbers_written_as_floats(&json, &source, &mut problems);
    if !prunes.is_empty() {
        for prune in prunes {
            prune.apply(&mut json, &mut dropped);
        }
        drop_undecodable_nodes(&mut json, &mut dropped);
    }
    match serde_path_to_error::deserialize::<_, JobSpec>(&json) {
        Ok(spec) => Ok(LoadedJob {
            spec,
            source,
            problems,
            dropped,
            env_values,
        }),
        Err(e) => {
            if problems.is_empty() {
                let pointer = path_to_pointer(e.path());
                problems.push(source.at_value(&pointer, e.inner().to_string()));
            }
            Err(source.error(problems))
        }
    }
}

/// Integers beyond 64 bits (`events: 18446744073709551616`) and whole numbers written with a
/// decimal point or an exponent (`1.0`, `1e6`) reach the tree as floats: the schema takes them
/// for integers, and serde would refuse them with "invalid type: floating point" at the node.
/// Every key of a job that takes a number takes a whole one, so each is reported at its key.
/// A walk with an explicit stack (the tree is bounded in depth, but it costs nothing).
fn whole_numbers_written_as_floats(json: &Value, source: &SpecSource, problems: &mut Vec<Problem>) {
    let mut stack = vec![(String::new(), json)];
    while let Some((at, value)) = stack.pop() {
        match value {
            Value::Object(map) => {
                for (k, v) in map {
                    stack.push((format!("{at}/{}", escape_segment(k)), v));
                }
            }
            Value::Array(items) => {
                for (i, v) in items.iter().enumerate() {
                    stack.push((format!("{at}/{i}"), v));
                }
            }
            Value::Number(n) if n.is_f64() => {
                let Some(f) = n.as_f64() else { continue };
                if f.fract() != 0.0 || !f.is_finite() {
                    continue; // not whole: the schema says "expected an integer".
                }
                // 2^64 and -2^63: the bounds of what the YAML pass reads as an integer.
                let message =
                    if !(-9_223_372_036_854_775_808.0..18_446_744_073_709_551_616.0).contains(&f) {
                        format!(
                            "{f} is out of range: a number here lies between {} and {}",
                            i64::MIN,
                            u64::MAX
                        )
                    } else {
                        format!("write {f} as a whole number, without a decimal point or exponent")
                    };
                let problem = source.at_value(&at, message);
                // A float where a string belongs (`where: 1.0`) is the schema's problem.
                if !problems.iter().any(|p| p.path == problem.path) {
                    problems.push(problem);
                }
            }
            _ => {}
        }
    }
}

/// What to remove from a document so that the rest can still be decoded and checked after a
/// schema violation. The smallest unit is a field of a node (an invalid optional field falls
/// back to its default); a node that still does not decode is left out whole.
enum Prune {
    /// The value at this pointer is invalid.
    Remove(String),
    /// The object at this pointer has these unknown keys.
    RemoveKeys(String, Vec<String>),
    /// The object at this pointer lacks this required key.
    Required(String, String),
}

const SECTIONS: [&str; 3] = ["sources", "transforms", "sinks"];

fn segments(pointer: &str) -> Vec<String> {
    pointer
        .split('/')
        .skip(1)
        .map(|s| s.replace("~1", "/").replace("~0", "~"))
        .collect()
}

/// A stand-in for a required top-level key, so the rest of the job can be checked.
fn neutral(key: &str) -> Option<Value> {
    match key {
        "name" => Some(Value::String("job".into())),
        "sources" | "sinks" => Some(Value::Object(Default::default())),
        _ => None,
    }
}

impl Prune {
    fn apply(self, json: &mut Value, dropped: &mut Dropped) {
        let Some(root) = json.as_object_mut() else {
            return;
        };
        let (pointer, required) = match self {
            Prune::RemoveKeys(pointer, keys) => {
                if let Some(Value::Object(map)) = root_pointer_mut(root, &pointer) {
                    for k in keys {
                        map.remove(&k);
                    }
                }
                return;
            }
            Prune::Remove(pointer) => (pointer, None),
            Prune::Required(pointer, key) => (pointer, Some(key)),
        };
        let segs = segments(&pointer);
        match segs.as_slice() {
            [] => {
                if let Some(key) = required
                    && let Some(v) = neutral(&key)
                {
                    root.insert(key, v);
                }
            }
            [section, name, rest @ ..] if SECTIONS.contains(&section.as_str()) => {
                let Some(nodes) = root.get_mut(section).and_then(Value::as_object_mut) else {
                    return;
                };
                match (rest.first(), required) {
                    // An invalid field of a node: drop the field; the node keeps its default.
                    (Some(field), None) => {
                        if let Some(node) = nodes.get_mut(name).and_then(Value::as_object_mut) {
                            node.remove(field);
                        }
                    }
                    // The node itself is invalid or lacks a required key.
                    _ => {
                        nodes.remove(name);
                        dropped.names.insert(name.clone());
                    }
                }
            }
            [key, ..] => {
                root.remove(key);
                if let Some(v) = neutral(key) {
                    root.insert(key.clone(), v);
                }
                if SECTIONS.contains(&key.as_str()) {
                    dropped.everything = true;
                }
            }
        }
    }
}

fn root_pointer_mut<'a>(
    root: &'a mut serde_json::Map<String, Value>,
    pointer: &str,
) -> Option<&'a mut Value> {
    let segs = segments(pointer);
    let (first, rest) = segs.split_first()?;
    let mut node = root.get_mut(first)?;
    for s in rest {
        node = match node {
            Value::Object(m) => m.get_mut(s)?,
            Value::Array(a) => a.get_mut(s.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(node)
}

/// Leaves out every node that still does not decode after pruning.
fn drop_undecodable_nodes(json: &mut Value, dropped: &mut Dropped) {
    fn check<T: serde::de::DeserializeOwned>(
        json: &mut Value,
        section: &str,
        dropped: &mut Dropped,
    ) {
        let Some(nodes) = json.get_mut(section).and_then(Value::as_object_mut) else {
            return;
        };
        let bad: Vec<String> = nodes
            .iter()
            .filter(|(_, v)| serde_json::from_value::<T>((*v).clone()).is_err())
            .map(|(k, _)| k.clone())
            .collect();
        for name in bad {
            nodes.remove(&name);
            dropped.names.insert(name);
        }
    }
    check::<super::SourceSpec>(json, "sources", dropped);
    check::<super::TransformSpec>(json, "transforms", dropped);
    check::<super::SinkSpec>(json, "sinks", dropped);
}

/// Sets the value at `o.path`, creating mappings on the way; returns its JSON pointer.
fn apply_override(tree: &mut Value, o: &Override) -> Result<String, String> {
    let mut node = tree;
    let mut pointer = String::new();
    for (i, segment) in o.path.iter().enumerate() {
        let last = i + 1 == o.path.len();
        pointer.push('/');
        pointer.push_str(&escape_segment(segment));
        node = match node {
            Value::Object(map) => {
                if last {
                    map.insert(segment.clone(), o.value.clone());
                    return Ok(pointer);
                }
                map.entry(segment.clone())
                    .or_insert_with(|| Value::Object(Default::default()))
            }
            Value::Array(seq) => {
                let index: usize = segment
                    .parse()
                    .map_err(|_| format!("`{segment}` must be an index: its parent is a list"))?;
                let len = seq.len();
                let slot = seq.get_mut(index).ok_or_else(|| {
                    format!("index {index} is out of range: the list has {len} items")
                })?;
                if last {
                    *slot = o.value.clone();
                    return Ok(pointer);
                }
                slot
            }
            _ => {
                return Err(format!(
                    "cannot set `{}`: `{}` is not a mapping",
                    o.path.join("."),
                    o.path[..i].join(".")
                ));
            }
        };
    }
    Err("an override needs a key".to_string())
}

/// The JSON Schema of job files and its compiled validator, built once per process.
fn validator() -> &'static Validator {
    static VALIDATOR: OnceLock<Validator> = OnceLock::new();
    VALIDATOR.get_or_init(|| {
        jsonschema::validator_for(schema())
            .expect("the schema derived from JobSpec is a valid JSON Schema")
    })
}

fn schema() -> &'static Value {
    static SCHEMA: OnceLock<Value> = OnceLock::new();
    SCHEMA.get_or_init(super::json_schema)
}

/// Turns one schema violation into user-facing problems.
fn describe(
    error: &ValidationError<'_>,
    instance: &Value,
    src: &SpecSource,
    out: &mut Vec<Problem>,
    prunes: &mut Vec<Prune>,
) {
    let at = error.instance_path().as_str().to_string();
    let schema_node = |suffix_len: usize| {
        let p = error.schema_path().as_str();
        schema().pointer(&p[..p.len().saturating_sub(suffix_len)])
    };
    match error.kind() {
        ValidationErrorKind::OneOfNotValid { context } | ValidationErrorKind::AnyOf { context } => {
            let branches = schema_node(0).and_then(Value::as_array);
            if let Some(tag) = tag_property(branches) {
                let value = instance
                    .pointer(&at)
                    .and_then(|i| i.get(&tag))
                    .map(|k| k.as_str().map_or_else(|| k.to_string(), str::to_string));
                let tag_path = format!("{at}/{tag}");
                let matching = context
                    .iter()
                    .find(|errs| !errs.iter().any(|e| e.instance_path().as_str() == tag_path));
                let expected = tags(branches, &tag).join(", ");
                match (value, matching) {
                    (Some(_), Some(errs)) => {
                        for e in errs {
                            describe(e, instance, src, out, prunes);
                        }
                    }
                    (Some(k), None) => {
                        prunes.push(Prune::Remove(at.clone()));
                        out.push(src.at_value(
                            &tag_path,
                            format!("unknown {tag} `{k}`; expected one of: {expected}"),
                        ))
                    }
                    (None, _) => {
                        prunes.push(Prune::Remove(at.clone()));
                        out.push(
                            src.at_value(&at, format!("missing key `{tag}`, one of: {expected}")),
                        )
                    }
                }
                return;
            }
            let weir_type = schema_node("/anyOf".len())
                .or_else(|| schema_node("/oneOf".len()))
                .and_then(|s| s.get("x-weir-type"))
                .and_then(Value::as_str);
            let value = short(error.instance());
            if weir_type.is_some() {
                prunes.push(Prune::Remove(at.clone()));
            }
            match weir_type {
                Some("duration") => out.push(src.at_value(
                    &at,
                    format!("{value} is not a duration; write a number and a unit, like 100ms, 10s or 5m"),
                )),
                Some("byte-size") => out.push(src.at_value(
                    &at,
                    format!("{value} is not a byte size; write a number of bytes or e.g. 64MiB"),
                )),
                _ => {
                    // Report the branch that came closest.
                    if let Some(best) = context.iter().min_by_key(|errs| errs.len()) {
                        for e in best {
                            describe(e, instance, src, out, prunes);
                        }
                    } else {
                        prunes.push(Prune::Remove(at.clone()));
                        out.push(src.at_value(&at, error.to_string()));
                    }
                }
            }
        }
        ValidationErrorKind::AdditionalProperties { unexpected } => {
            prunes.push(Prune::RemoveKeys(at.clone(), unexpected.clone()));
            let known: Vec<&str> = schema_node("/additionalProperties".len())
                .and_then(|s| s.get("properties"))
                .and_then(Value::as_object)
                .map(|p| p.keys().map(String::as_str).collect())
                .unwrap_or_default();
            let kind = instance
                .pointer(&at)
                .and_then(|o| o.get("kind"))
                .and_then(Value::as_str);
            for key in unexpected {
                let mut message = format!("unknown key `{key}`");
                if let Some(why) = misplaced(key, kind) {
                    message.push_str(&format!(": {why}"));
                } else if let Some(best) = closest(key, known.iter().copied()) {
                    message.push_str(&format!("; did you mean `{best}`?"));
                } else if !known.is_empty() {
                    message.push_str(&format!("; expected one of: {}", known.join(", ")));
                }
                out.push(src.at_key(&format!("{at}/{}", escape_segment(key)), message));
            }
        }
        ValidationErrorKind::Required { property } => {
            let name = property.as_str().unwrap_or_default();
            prunes.push(Prune::Required(at.clone(), name.to_string()));
            out.push(src.at_value(&at, format!("missing required key `{name}`")));
        }
        ValidationErrorKind::Type { .. } => {
            prunes.push(Prune::Remove(at.clone()));
            let expected = schema_node(0)
                .map(|t| match t {
                    Value::Array(types) => types
                        .iter()
                        .filter_map(Value::as_str)
                        .filter(|t| *t != "null")
                        .collect::<Vec<_>>()
                        .join(" or "),
                    other => other.as_str().unwrap_or("another type").to_string(),
                })
                .unwrap_or_else(|| "another type".to_string());
            out.push(src.at_value(
                &at,
                format!(
                    "expected {}, found {}",
                    article(&expected),
                    short(error.instance())
                ),
            ));
        }
        ValidationErrorKind::Enum { options } => {
            prunes.push(Prune::Remove(at.clone()));
            let options: Vec<String> = options
                .as_array()
                .map(|o| o.iter().map(short).collect())
                .unwrap_or_default();
            out.push(src.at_value(
                &at,
                format!(
                    "{} is not one of: {}",
                    short(error.instance()),
                    options.join(", ")
                ),
            ));
        }
        _ => {
            prunes.push(Prune::Remove(at.clone()));
            out.push(src.at_value(&at, error.to_string()));
        }
    }
}

/// The property that tells the branches of a tagged union apart: one with a constant value
/// in every branch (`kind` for nodes, `type` for windows); `None` when this is not a tagged
/// union.
fn tag_property(branches: Option<&Vec<Value>>) -> Option<String> {
    let branches = branches?;
    let first = branches.first()?.get("properties")?.as_object()?;
    first
        .iter()
        .filter(|(_, schema)| schema.get("const").is_some())
        .map(|(name, _)| name)
        .find(|name| {
            branches
                .iter()
                .all(|b| b.pointer(&format!("/properties/{name}/const")).is_some())
        })
        .cloned()
}

fn tags(branches: Option<&Vec<Value>>, tag: &str) -> Vec<String> {
    branches
        .into_iter()
        .flatten()
        .filter_map(|b| b.pointer(&format!("/properties/{tag}/const")))
        .filter_map(|k| k.as_str().map(str::to_string))
        .collect()
}

/// The known name closest to `name`, if close enough to be a likely typo.
/// Why a key that belongs to another kind of node is not one of this node's (`kind`), when
/// "unknown key" alone would leave the reader wondering.
fn misplaced(key: &str, kind: Option<&str>) -> Option<String> {
    match (key, kind?) {
        ("mini-batch", "aggregate") => None,
        ("mini-batch", "window-aggregate") => Some(
            "mini-batching applies to a running `aggregate` (no window); a `window-aggregate` \
             emits each window once, when the watermark passes its end, so there is no stream \
             of updates to batch"
                .into(),
        ),
        ("mini-batch", kind) => Some(format!(
            "mini-batching applies to a running `aggregate` (or to the whole job, as the \
             default of its running aggregates), not to a `{kind}`"
        )),
        _ => None,
    }
}

pub fn closest<'a>(name: &str, known: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    known
        .into_iter()
        .map(|k| {
            (
                strsim::damerau_levenshtein(&name.to_lowercase(), &k.to_lowercase()),
                k,
            )
        })
        .filter(|(d, k)| *d <= 2.max(k.len() / 3))
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

fn article(expected: &str) -> String {
    match expected {
        "object" => "a mapping".to_string(),
        "array" => "a list".to_string(),
        "integer" => "an integer".to_string(),
        other => format!("a {other}"),
    }
}

/// A value for a message, shortened.
fn short(v: &Value) -> String {
    let text = match v {
        Value::String(s) => format!("`{s}`"),
        Value::Object(_) => "a mapping".to_string(),
        Value::Array(_) => "a list".to_string(),
        Value::Null => "nothing (null)".to_string(),
        other => format!("`{other}`"),
    };
    if text.chars().count() > 60 {
        let cut: String = text.chars().take(57).collect();
        format!("{cut}...")
    } else {
        text
    }
}

fn path_to_pointer(path: &serde_path_to_error::Path) -> String {
    use serde_path_to_error::Segment;
    let mut out = String::new();
    for seg in path.iter() {
        match seg {
            Segment::Seq { index } => out.push_str(&format!("/{index}")),
            Segment::Map { key } => out.push_str(&format!("/{}", escape_segment(key))),
            Segment::Enum { .. } | Segment::Unknown => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "\
name: demo
sources:
  gen:
    kind: nexmark
    events: 1000
transforms:
  cheap:
    kind: filter
    from: gen.bid
    where: price < 100
sinks:
  out:
    kind: blackhole
    from: cheap
";

    fn problems(text: &str) -> Vec<Problem> {
        match parse_str("job.yaml", text, &[]) {
            Ok(loaded) => loaded.problems,
            Err(e) => e.problems,
        }
    }

    #[test]
    fn a_mini_batch_on_a_window_aggregate_is_refused_with_why_at_its_key() {
        let text = "\
name: demo
sources:
  gen: {kind: nexmark, events: 1000}
transforms:
  by: {kind: key-by, from: gen.bid, keys: [auction]}
  w:
    kind: window-aggregate
    from: by
    time: dateTime
    window: {type: tumbling, size: 10s}
    aggregates: {n: count(*)}
    mini-batch: {interval: 1s, size: 1000}
  running:
    kind: aggregate
    from: by
    aggregates: {n: count(*)}
    mini-batch: {interval: 1s, size: 1000}
sinks:
  out: {kind: blackhole, from: w}
  all: {kind: blackhole, from: running}
";
        let p = problems(text);
        assert_eq!(p.len(), 1, "{p:#?}");
        assert_eq!(p[0].path, "transforms.w.mini-batch");
        assert_eq!((p[0].line, p[0].column), (Some(12), Some(5)));
        assert!(
            p[0].message.contains("applies to a running `aggregate`")
                && p[0].message.contains("emits each window once"),
            "{}",
            p[0].message
        );
        // A mini-batch's keys are strict.
        let p = problems(&text.replace("size: 1000}\n  running", "sise: 1000}\n  running"));
        assert!(
            p.iter().any(|p| p.path == "transforms.w.mini-batch"),
            "{p:#?}"
        );
        let p = problems(
            &text
                .replace(
                    "    mini-batch: {interval: 1s, size: 1000}\n  running",
                    "\n  running",
                )
                .replace("size: 1000}\nsinks", "size: 0}\nsinks"),
        );
        assert_eq!(p.len(), 1, "{p:#?}");
        assert_eq!(p[0].path, "transforms.running.mini-batch.size");
    }

    #[test]
    fn a_good_job_parses_with_defaults() {
        let job = parse_str("job.yaml", GOOD, &[]).unwrap();
        assert!(job.problems.is_empty(), "{:#?}", job.problems);
        assert_eq!(job.spec.parallelism, 1);
        assert!(job.spec.chaining);
        assert_eq!(job.spec.key_groups, 128);
        assert_eq!(job.spec.transforms.len(), 1);
    }

    #[test]
    fn a_typo_in_a_key_names_the_key_its_position_and_a_suggestion() {
        let p = problems(&GOOD.replace("where:", "wher:"));
        assert_eq!(p.len(), 2, "{p:#?}");
        let unknown = p
            .iter()
            .find(|p| p.message.starts_with("unknown key"))
            .unwrap();
        assert_eq!(unknown.path, "transforms.cheap.wher");
        assert_eq!((unknown.line, unknown.column), (Some(10), Some(5)));
        assert!(
            unknown.message.contains("did you mean `where`"),
            "{}",
            unknown.message
        );
        let missing = p.iter().find(|p| p.message.contains("missing")).unwrap();
        assert_eq!(missing.message, "missing required key `where`");
        assert_eq!(missing.path, "transforms.cheap");
    }

    #[test]
    fn several_errors_in_one_file_are_all_reported() {
        let text = GOOD
            .replace("events: 1000", "events: lots")
            .replace("kind: blackhole", "kind: blackhoel")
            .replace("name: demo", "name: demo\nparalelism: 2");
        let p = problems(&text);
        let messages: Vec<String> = p
            .iter()
            .map(|p| format!("{}: {}", p.path, p.message))
            .collect();
        assert_eq!(p.len(), 3, "{messages:#?}");
        assert!(
            messages
                .iter()
                .any(|m| m.contains("paralelism") && m.contains("did you mean `parallelism`")),
            "{messages:#?}"
        );
        assert!(
            messages
                .iter()
                .any(|m| m.starts_with("sources.gen.events: expected an integer")),
            "{messages:#?}"
        );
        assert!(
            messages
                .iter()
                .any(|m| m.starts_with("sinks.out.kind: unknown kind `blackhoel`")),
            "{messages:#?}"
        );
    }

    #[test]
    fn a_bad_duration_gets_a_message_about_units() {
        let text = GOOD.replace(
            "events: 1000",
            "events: 1000\n    inter-event-delay: 10 parsecs",
        );
        let p = problems(&text);
        assert_eq!(p.len(), 1, "{p:#?}");
        assert!(
            p[0].message.contains("is not a duration"),
            "{}",
            p[0].message
        );
        assert_eq!(p[0].line, Some(6));
    }

    #[test]
    fn yaml_syntax_errors_have_a_position() {
        let p = problems("name: [unclosed\nsources: {}\n");
        assert_eq!(p.len(), 1);
        assert!(p[0].line.is_some());
        assert!(
            p[0].message.starts_with("not valid YAML"),
            "{}",
            p[0].message
        );
    }

    #[test]
    fn overrides_replace_values_and_are_reported_as_overrides() {
        let set: Override = "sources.gen.events=5".parse().unwrap();
        let job = parse_str("job.yaml", GOOD, &[set]).unwrap();
        match &job.spec.sources["gen"] {
            super::super::SourceSpec::Nexmark(n) => assert_eq!(n.events, Some(5)),
            other => panic!("{other:?}"),
        }
        let bad: Override = "sources.gen.events=many".parse().unwrap();
        let loaded = parse_str("job.yaml", GOOD, &[bad]).unwrap();
        assert_eq!(
            loaded.problems[0].origin.as_deref(),
            Some("--set sources.gen.events")
        );
        assert_eq!(loaded.problems[0].line, None);
    }

    /// Loads `text` on a thread with a 512 KiB stack (a quarter of a tokio worker's), so a
    /// pass that recursed per level of nesting would crash the test instead of passing.
    fn problems_on_small_stack(text: String) -> Vec<Problem> {
        std::thread::Builder::new()
            .stack_size(512 * 1024)
            .spawn(move || problems(&text))
            .expect("spawn a test thread")
            .join()
            .expect("loading must not crash the thread")
    }

    #[test]
    fn deep_block_nesting_is_refused_with_its_position() {
        let mut text = String::from("name: deep\n");
        for depth in 0..10_000 {
            text.push_str(&"  ".repeat(depth));
            text.push_str("k:\n");
        }
        let p = problems_on_small_stack(text);
        assert_eq!(p.len(), 1, "{p:#?}");
        assert!(
            p[0].message.contains("nests more than 64"),
            "{}",
            p[0].message
        );
        assert_eq!(p[0].line, Some(66), "the mapping that crosses the limit");
    }

    #[test]
    fn deep_flow_nesting_is_refused() {
        let text = format!("name: {}x{}\n", "[".repeat(100), "]".repeat(100));
        let p = problems_on_small_stack(text);
        assert_eq!(p.len(), 1, "{p:#?}");
        assert!(
            p[0].message.contains("nests more than 64"),
            "{}",
            p[0].message
        );
        assert_eq!((p[0].line, p[0].column), (Some(1), Some(70)));
        // Deeper than the YAML scanner's own bound (255 flow levels): refused by it, with the
        // position, before anything else reads the text.
        let text = format!("name: {}x{}\n", "[".repeat(10_000), "]".repeat(10_000));
        let p = problems_on_small_stack(text);
        assert_eq!(p.len(), 1, "{p:#?}");
        assert!(
            p[0].message.starts_with("not valid YAML"),
            "{}",
            p[0].message
        );
        assert_eq!(p[0].line, Some(1));
    }

    #[test]
    fn an_alias_bomb_is_refused_before_it_expands() {
        // Nine levels of ten aliases each: 10^9 values from a few hundred bytes.
        let mut text = String::from("name: bomb\nl0: &l0 [x, x, x, x, x, x, x, x, x, x]\n");
        for level in 1..=9 {
            let prev = format!("*l{}", level - 1);
            text.push_str(&format!(
                "l{level}: &l{level} [{}]\n",
                vec![prev; 10].join(", ")
            ));
        }
        let p = problems_on_small_stack(text);
        assert_eq!(p.len(), 1, "{p:#?}");
        assert!(
            p[0].message.contains("expands to more than 100000"),
            "{}",
            p[0].message
        );
        assert_eq!(
            p[0].line,
            Some(6),
            "10^5 values are crossed on the fifth level"
        );
    }

    #[test]
    fn aliases_that_stay_small_are_fine() {
        let text = format!("{GOOD}x-common: &c {{kind: blackhole}}\nx-again: *c\n");
        let p = problems(&text);
        assert!(p.iter().all(|p| !p.message.contains("expands")), "{p:#?}");
    }

    #[test]
    fn a_second_document_is_refused_with_its_line() {
        let p = problems(&format!("{GOOD}---\nname: other\n"));
        assert_eq!(p.len(), 1, "{p:#?}");
        assert!(
            p[0].message.contains("one YAML document"),
            "{}",
            p[0].message
        );
        assert_eq!(p[0].line, Some(15));
    }

    #[test]
    fn a_file_that_is_not_utf8_names_the_line_and_column_of_the_bad_byte() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("job.yaml");
        std::fs::write(&path, b"name: demo\ndescription: caf\xe9\n").unwrap();
        let e = load_file(&path, &[]).unwrap_err();
        assert_eq!(e.problems.len(), 1);
        assert_eq!(
            (e.problems[0].line, e.problems[0].column),
            (Some(2), Some(17))
        );
        assert!(e.problems[0].message.contains("not UTF-8"), "{e}");
    }

    #[test]
    fn numbers_beyond_64_bits_are_reported_at_their_key() {
        let text = "name: big\nsources:\n  gen: {kind: nexmark, events: 18446744073709551616}\n\
                    sinks:\n  out: {kind: blackhole, from: gen.bid}\n";
        let p = problems(text);
        assert_eq!(p.len(), 1, "{p:#?}");
        assert_eq!(p[0].path, "sources.gen.events");
        assert_eq!((p[0].line, p[0].column), (Some(3), Some(32)));
        assert!(p[0].message.contains("out of range"), "{}", p[0].message);
    }

    #[test]
    fn whole_numbers_written_as_floats_are_reported_at_their_key() {
        let text = "name: float\nsources:\n  gen: {kind: nexmark, events: 1e6}\n\
                    sinks:\n  out: {kind: blackhole, from: gen.bid, parallelism: 2.0}\n";
        let mut p = problems(text);
        p.sort_by_key(|p| p.line);
        assert_eq!(p.len(), 2, "{p:#?}");
        assert_eq!(p[0].path, "sources.gen.events");
        assert_eq!(p[1].path, "sinks.out.parallelism");
        assert!(p[1].message.contains("whole number"), "{}", p[1].message);
    }

    /// GOOD with its first `from` replaced by `to`.
    fn problems_in_good(from: &str, to: &str) -> Vec<Problem> {
        assert!(GOOD.contains(from), "{from}");
        problems(&GOOD.replacen(from, to, 1))
    }

    fn good_with(from: &str, to: &str) -> JobSpec {
        assert!(GOOD.contains(from), "{from}");
        let loaded = parse_str("job.yaml", &GOOD.replacen(from, to, 1), &[]).unwrap();
        assert!(loaded.problems.is_empty(), "{:#?}", loaded.problems);
        loaded.spec
    }

    fn events(spec: &JobSpec) -> Option<u64> {
        match &spec.sources["gen"] {
            super::super::SourceSpec::Nexmark(n) => n.events,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_duplicate_key_is_refused_with_a_position() {
        let p = problems(&format!("{GOOD}name: again\n"));
        assert_eq!(p.len(), 1, "{p:#?}");
        assert_eq!(
            p[0].message,
            "the key `name` is written twice in one mapping (first at line 1, column 1)"
        );
        assert_eq!(p[0].path, "name");
        assert_eq!((p[0].line, p[0].column), (Some(15), Some(1)), "the second");
        let p = problems_in_good("  gen:\n", "  gen: {kind: blackhole}\n  gen:\n");
        assert_eq!(p.len(), 1, "{p:#?}");
        assert!(p[0].message.contains("written twice"), "{}", p[0].message);
        assert_eq!(p[0].path, "sources.gen");
        assert_eq!((p[0].line, p[0].column), (Some(4), Some(3)), "the second");
    }

    #[test]
    fn a_merge_key_is_an_ordinary_unknown_key_not_a_merge() {
        // YAML 1.1's `<<` is not applied: the job means what its keys say.
        let p = problems_in_good(
            "  out:\n    kind: blackhole\n    from: cheap\n",
            "  out:\n    kind: blackhole\n    <<: {from: cheap}\n",
        );
        assert_eq!(p.len(), 2, "{p:#?}");
        let merge = p.iter().find(|p| p.path == "sinks.out.<<").expect("`<<`");
        assert!(merge.message.starts_with("unknown key `<<`"), "{p:#?}");
        assert_eq!((merge.line, merge.column), (Some(14), Some(5)));
        assert!(
            p.iter()
                .any(|p| p.message == "missing required key `from`" && p.path == "sinks.out"),
            "{p:#?}"
        );
    }

    #[test]
    fn yaml_1_1_booleans_are_strings() {
        for word in ["yes", "no", "on", "off", "y", "n", "Yes", "ON"] {
            let p = problems_in_good("name: demo", &format!("name: demo\nchaining: {word}"));
            assert_eq!(p.len(), 1, "{word}: {p:#?}");
            assert_eq!(p[0].path, "chaining");
            assert_eq!(
                p[0].message,
                format!("expected a boolean, found `{word}`"),
                "{word}"
            );
            assert_eq!((p[0].line, p[0].column), (Some(2), Some(11)), "{word}");
            assert_eq!(good_with("name: demo", &format!("name: {word}")).name, word);
        }
        for (word, value) in [
            ("true", true),
            ("True", true),
            ("FALSE", false),
            ("false", false),
        ] {
            let spec = good_with("name: demo", &format!("name: demo\nchaining: {word}"));
            assert_eq!(spec.chaining, value, "{word}");
        }
        assert_eq!(good_with("name: demo", "name: 'true'").name, "true");
    }

    #[test]
    fn scalars_mean_what_they_meant() {
        assert_eq!(events(&good_with("events: 1000", "events: 0x10")), Some(16));
        assert_eq!(events(&good_with("events: 1000", "events: 0o10")), Some(8));
        assert_eq!(events(&good_with("events: 1000", "events: +7")), Some(7));
        assert_eq!(events(&good_with("events: 1000", "events: ~")), None);
        assert_eq!(events(&good_with("events: 1000", "events: null")), None);
        assert_eq!(events(&good_with("events: 1000", "events:")), None);
        // A leading zero makes a string (YAML 1.2), as do quotes and `_` separators.
        assert_eq!(good_with("name: demo", "name: 010").name, "010");
        assert_eq!(good_with("name: demo", "name: '5'").name, "5");
        assert_eq!(good_with("name: demo", "name: \"1.5\"").name, "1.5");
        assert_eq!(
            good_with("name: demo", "name: 2024-01-01").name,
            "2024-01-01"
        );
        assert_eq!(
            good_with("name: demo", "name: |\n  two\n  lines\n").name,
            "two\nlines\n"
        );
        for (value, found) in [
            ("1_000", "`1_000`"),
            ("'5'", "`5`"),
            ("5.5", "`5.5`"),
            ("[1]", "a list"),
            ("-1", "-1 is less than the minimum of 0"),
        ] {
            let p = problems_in_good("events: 1000", &format!("events: {value}"));
            assert_eq!(p.len(), 1, "{value}: {p:#?}");
            assert_eq!(p[0].path, "sources.gen.events", "{value}");
            assert!(p[0].message.contains(found), "{value}: {p:#?}");
            assert_eq!((p[0].line, p[0].column), (Some(5), Some(13)), "{value}");
        }
        for (value, found) in [
            ("5", "`5`"),
            ("1.5", "`1.5`"),
            ("true", "`true`"),
            ("~", "nothing (null)"),
            // No JSON number: infinity reads as null, as it did.
            (".inf", "nothing (null)"),
        ] {
            let p = problems_in_good("name: demo", &format!("name: {value}"));
            assert!(!p.is_empty(), "{value}");
            assert_eq!(p[0].path, "name", "{value}");
            assert!(
                p[0].message.contains("expected a string"),
                "{value}: {p:#?}"
            );
            assert!(p[0].message.contains(found), "{value}: {p:#?}");
        }
    }

    #[test]
    fn core_tags_are_applied_and_other_tags_are_refused() {
        assert_eq!(good_with("name: demo", "name: !!str 5").name, "5");
        assert_eq!(
            events(&good_with("events: 1000", "events: !!int '12'")),
            Some(12)
        );
        let p = problems_in_good("name: demo", "name: !custom demo");
        assert_eq!(p.len(), 1, "{p:#?}");
        assert!(p[0].message.contains("`!custom` means nothing"), "{p:#?}");
        assert!(p[0].path.starts_with("name"), "{p:#?}");
        assert_eq!(p[0].line, Some(1), "{p:#?}");
        let p = problems_in_good("events: 1000", "events: !!int many");
        assert_eq!(p.len(), 1, "{p:#?}");
        assert_eq!(p[0].line, Some(5), "{p:#?}");
    }

    #[test]
    fn one_document_with_its_markers_is_fine_and_a_second_even_empty_is_not() {
        assert!(problems(&format!("---\n{GOOD}...\n")).is_empty());
        assert!(problems(&format!("# a job\n--- # begins\n{GOOD}")).is_empty());
        let p = problems(&format!("{GOOD}---\n"));
        assert_eq!(p.len(), 1, "{p:#?}");
        assert!(p[0].message.contains("one YAML document"), "{p:#?}");
        assert_eq!(p[0].line, Some(15));
    }

    #[test]
    fn empty_and_non_mapping_files_are_refused() {
        for text in ["", "# only a comment\n", "---\n", "~\n"] {
            let p = problems(text);
            assert_eq!(p.len(), 1, "{text:?}: {p:#?}");
            assert_eq!(p[0].message, "the job file is empty", "{text:?}");
        }
        for text in ["- a\n", "just text\n", "5\n"] {
            let p = problems(text);
            assert_eq!(p.len(), 1, "{text:?}: {p:#?}");
            assert!(
                p[0].message.contains("a job file is a mapping"),
                "{text:?}: {p:#?}"
            );
        }
    }

    #[test]
    fn problems_in_flow_and_block_lists_have_their_positions() {
        let p = problems_in_good("from: gen.bid", "from: [gen.bid, 5]");
        assert!(!p.is_empty());
        let p = problems_in_good("events: 1000", "events: 1000\n    seed: [1, 2]");
        assert_eq!(p.len(), 1, "{p:#?}");
        assert_eq!(p[0].path, "sources.gen.seed");
        assert_eq!((p[0].line, p[0].column), (Some(6), Some(11)));
        let p = problems_in_good("    events: 1000\n", "    events:\n      - 1\n");
        assert_eq!(p.len(), 1, "{p:#?}");
        assert_eq!((p[0].line, p[0].column), (Some(6), Some(7)), "{p:#?}");
    }

    #[test]
    fn override_values_are_read_as_in_the_file() {
        let set = |s: &str| s.parse::<Override>().expect("an override");
        let job = parse_str(
            "job.yaml",
            GOOD,
            &[set("name=yes"), set("sources.gen.events=0x10")],
        )
        .unwrap();
        assert!(job.problems.is_empty(), "{:#?}", job.problems);
        assert_eq!(job.spec.name, "yes");
        assert_eq!(events(&job.spec), Some(16));
        let loaded = parse_str("job.yaml", GOOD, &[set("chaining=on")]).unwrap();
        assert_eq!(loaded.problems.len(), 1, "{:#?}", loaded.problems);
        assert_eq!(loaded.problems[0].message, "expected a boolean, found `on`");
        // Text that is not YAML on its own is refused, with the reason.
        let e = "name=a: b: c".parse::<Override>().unwrap_err();
        assert!(e.starts_with("the value of `name`: not valid YAML"), "{e}");
    }

    #[test]
    fn an_override_value_is_held_to_the_same_limits() {
        let value = format!("{}1{}", "[".repeat(100), "]".repeat(100));
        let e = format!("sources.gen.events={value}")
            .parse::<Override>()
            .unwrap_err();
        assert!(e.contains("nests more than 64"), "{e}");
    }
}
