//! Flink's JSON functions `json_value`, `json_query` and `json_exists`, over a small JSONPath
//! subset: `$`, `.key`, `['key']` / `["key"]` (also after a dot: `$.['a b']`) and `[n]`, with
//! an optional `lax` or `strict` mode word (both read the same here: a path that finds nothing
//! gives NULL, or FALSE for `json_exists`, which is what Flink's default `NULL ON EMPTY` / `NULL ON
//! ERROR` / `FALSE ON ERROR` give in either mode).
//!
//! The path must be a constant: it is parsed once, and one outside the subset (`[*]`, filters,
//! `..`) is refused when the job is checked. Text that is not JSON gives NULL (`json_exists`:
//! FALSE), as in Flink. serde_json limits nesting to 128 levels, so no document can exhaust the
//! stack; the path is walked in a loop.

use serde_json::Value as Json;

use super::cast;
use super::error::ExprError;
use super::functions::Call;
use super::node::Node;
use super::rowwise::{self, Datum, Out, RowFunction};
use super::strings::string_operand;
use super::types::SqlType;

/// One step of a path.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    Key(String),
    Index(usize),
}

const SUBSET: &str = "weir reads $, .key, ['key'] and [n]";

/// Reads a JSONPath of the subset.
fn parse_path(path: &str) -> Result<Vec<Step>, String> {
    let trimmed = path.trim_start();
    let mut rest = trimmed;
    for mode in ["lax", "strict"] {
        if let Some(after) = rest.strip_prefix(mode)
            && after.starts_with(char::is_whitespace)
        {
            rest = after.trim_start();
        }
    }
    let Some(mut rest) = rest.trim_end().strip_prefix('$') else {
        return Err(format!("a JSON path starts with $, as in '$.a'; {SUBSET}"));
    };
    let mut steps = Vec::new();
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix('.') {
            if after.starts_with('[') {
                rest = after;
                continue;
            }
            let end = after.find(['.', '[']).unwrap_or(after.len());
            let key = &after[..end];
            if key.is_empty() || key == "*" || key.contains(char::is_whitespace) {
                return Err(format!("'{path}' is not supported: {SUBSET}"));
            }
            steps.push(Step::Key(key.to_owned()));
            rest = &after[end..];
        } else if let Some(after) = rest.strip_prefix('[') {
            let (step, after) = bracket(after).ok_or_else(|| {
                format!("'{path}' is not supported: {SUBSET} (n a whole number, 'key' quoted)")
            })?;
            steps.push(step);
            rest = after;
        } else {
            return Err(format!("'{path}' is not supported: {SUBSET}"));
        }
    }
    Ok(steps)
}

/// The inside of `[...]` and the text after it: `'key'`, `"key"` or a whole number.
fn bracket(text: &str) -> Option<(Step, &str)> {
    let quote = text.chars().next().filter(|c| *c == '\'' || *c == '"');
    if let Some(quote) = quote {
        let inner = &text[1..];
        let end = inner.find(quote)?;
        let after = inner[end + 1..].strip_prefix(']')?;
        return Some((Step::Key(inner[..end].to_owned()), after));
    }
    let end = text.find(']')?;
    let index = text[..end].trim().parse::<usize>().ok()?;
    Some((Step::Index(index), &text[end + 1..]))
}

/// The value `steps` lead to in `document`, if any.
fn find<'a>(document: &'a Json, steps: &[Step]) -> Option<&'a Json> {
    let mut at = document;
    for step in steps {
        at = match step {
            Step::Key(key) => at.as_object()?.get(key)?,
            Step::Index(index) => at.as_array()?.get(*index)?,
        };
    }
    Some(at)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// `json_value`: a scalar as text.
    Value,
    /// `json_query`: an object or array as JSON text.
    Query,
    /// `json_exists`: whether the path finds anything.
    Exists,
}

#[derive(Debug)]
struct JsonFunction {
    kind: Kind,
    steps: Vec<Step>,
}

impl RowFunction for JsonFunction {
    fn call<'a>(&self, args: &[Datum<'a>], out: &mut String) -> Result<Out<'a>, String> {
        let text = args[0].str().unwrap_or_default();
        let Ok(document) = serde_json::from_str::<Json>(text) else {
            return Ok(match self.kind {
                Kind::Exists => Out::Bool(false),
                Kind::Value | Kind::Query => Out::Null,
            });
        };
        let found = find(&document, &self.steps);
        Ok(match (self.kind, found) {
            (Kind::Exists, found) => Out::Bool(found.is_some()),
            (_, None) => Out::Null,
            (Kind::Value, Some(Json::String(value))) => {
                out.push_str(value);
                Out::Written
            }
            (Kind::Value, Some(Json::Number(value))) => {
                out.push_str(&value.to_string());
                Out::Written
            }
            (Kind::Value, Some(Json::Bool(value))) => {
                out.push_str(if *value { "true" } else { "false" });
                Out::Written
            }
            (Kind::Query, Some(value @ (Json::Object(_) | Json::Array(_)))) => {
                out.push_str(&value.to_string());
                Out::Written
            }
            // A JSON null, a non-scalar for json_value, a scalar for json_query (Flink's
            // default WITHOUT ARRAY WRAPPER): NULL.
            _ => Out::Null,
        })
    }
}

/// `json_value`, `json_query`, `json_exists`; `Ok(None)` for another name.
pub(crate) fn compile(call: &Call<'_>) -> Result<Option<Node>, ExprError> {
    match call.name {
        "json_value" => compile_value(call, None).map(Some),
        "json_query" => build(call, Kind::Query).map(Some),
        "json_exists" => build(call, Kind::Exists).map(Some),
        _ => Ok(None),
    }
}

/// `json_value(json, path [RETURNING type])`: a value that does not convert to `type` is NULL
/// (Flink's default `NULL ON ERROR`).
pub(crate) fn compile_value(
    call: &Call<'_>,
    returning: Option<&sqlparser::ast::DataType>,
) -> Result<Node, ExprError> {
    let text = build(call, Kind::Value)?;
    match returning {
        None => Ok(text),
        Some(data_type) => cast::explicit(text, data_type, true, call.origin),
    }
}

fn build(call: &Call<'_>, kind: Kind) -> Result<Node, ExprError> {
    call.arity(2, Some(2))?;
    let ty = if kind == Kind::Exists {
        SqlType::Bool
    } else {
        SqlType::String
    };
    let Some(path) = call.constant_str(1, &format!("{}'s path", call.name))? else {
        return Ok(call.null(ty));
    };
    let steps = parse_path(&path)
        .map_err(|e| call.origin.invalid_literal(format!("{}: {e}", call.name)))?;
    let input = string_operand(call.value(0)?, call.name, call.origin)?;
    Ok(rowwise::node(
        vec![input],
        ty,
        rowwise::STRICT,
        JsonFunction { kind, steps },
        call.origin,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(k: &str) -> Step {
        Step::Key(k.to_owned())
    }

    #[test]
    fn paths_of_the_subset_parse_into_steps() {
        assert_eq!(parse_path("$"), Ok(vec![]));
        assert_eq!(parse_path("$.a.b"), Ok(vec![key("a"), key("b")]));
        assert_eq!(
            parse_path("$.a[0].b"),
            Ok(vec![key("a"), Step::Index(0), key("b")])
        );
        assert_eq!(
            parse_path("$.[\"a.b\"][0]"),
            Ok(vec![key("a.b"), Step::Index(0)])
        );
        assert_eq!(
            parse_path("strict $.['contains blank']"),
            Ok(vec![key("contains blank")])
        );
        assert_eq!(parse_path("lax $.a"), Ok(vec![key("a")]));
        for bad in ["a", "$.a[*]", "$..a", "$.a[-1]", "$.a[", "$.*", "$.['a'"] {
            assert!(parse_path(bad).is_err(), "{bad}");
        }
    }
}
