//! Function calls: name lookup (case-insensitive), arity checks, and dispatch to the family that
//! implements each function. Aggregates, window functions and non-deterministic functions are
//! rejected with a message that says where they belong.

use sqlparser::ast::{self, FunctionArg, FunctionArgExpr, FunctionArguments};

use super::arith;
use super::columns::{self, suggest};
use super::compile::{Compiler, Origin};
use super::conditional;
use super::error::ExprError;
use super::math;
use super::node::Node;
use super::strings::{self, TrimSide};
use super::temporal;
use super::types::SqlType;

/// Every scalar function, with its usage, for error messages.
const FUNCTIONS: &[(&str, &str)] = &[
    ("abs", "abs(x)"),
    ("btrim", "btrim(s[, chars])"),
    ("ceil", "ceil(x)"),
    ("ceiling", "ceiling(x)"),
    ("char_length", "char_length(s)"),
    ("character_length", "character_length(s)"),
    ("coalesce", "coalesce(a, b, ...)"),
    ("concat", "concat(a, b, ...)"),
    ("count_char", "count_char(s, 'c')"),
    ("date_format", "date_format(ts, 'yyyy-MM-dd HH:mm:ss')"),
    ("date_part", "date_part('hour', ts)"),
    ("date_bin", "date_bin(INTERVAL '10' SECOND, ts)"),
    ("date_trunc", "date_trunc('minute', ts)"),
    ("floor", "floor(x)"),
    ("greatest", "greatest(a, b, ...)"),
    ("hour", "hour(ts)"),
    ("if", "if(condition, then, else)"),
    ("least", "least(a, b, ...)"),
    ("length", "length(s)"),
    ("lower", "lower(s)"),
    ("ltrim", "ltrim(s[, chars])"),
    ("minute", "minute(ts)"),
    ("mod", "mod(a, b)"),
    ("nullif", "nullif(a, b)"),
    ("regexp_extract", "regexp_extract(s, 'regex'[, group])"),
    ("round", "round(x[, digits])"),
    ("rtrim", "rtrim(s[, chars])"),
    ("second", "second(ts)"),
    ("split_index", "split_index(s, 'separator', index)"),
    ("substr", "substr(s, start[, length])"),
    ("substring", "substring(s, start[, length])"),
    ("to_timestamp_millis", "to_timestamp_millis(epoch_ms)"),
    ("trim", "trim(s)"),
    ("upper", "upper(s)"),
];

const AGGREGATES: &[&str] = &[
    "any_value",
    "approx_count_distinct",
    "approx_distinct",
    "array_agg",
    "avg",
    "bool_and",
    "bool_or",
    "count",
    "every",
    "first_value",
    "group_concat",
    "last_value",
    "listagg",
    "max",
    "median",
    "min",
    "mode",
    "percentile_cont",
    "percentile_disc",
    "stddev",
    "stddev_pop",
    "stddev_samp",
    "string_agg",
    "sum",
    "var_pop",
    "var_samp",
    "variance",
];

const WINDOW_FUNCTIONS: &[&str] = &[
    "cume_dist",
    "dense_rank",
    "lag",
    "lead",
    "nth_value",
    "ntile",
    "percent_rank",
    "rank",
    "row_number",
];

const NONDETERMINISTIC: &[&str] = &[
    "current_date",
    "current_time",
    "current_timestamp",
    "localtime",
    "localtimestamp",
    "now",
    "rand",
    "random",
    "uuid",
];

/// Compiles a function call.
pub(crate) fn compile(
    compiler: &Compiler<'_>,
    function: &ast::Function,
    origin: &Origin,
) -> Result<Node, ExprError> {
    let name = match function.name.0.as_slice() {
        [part] => part
            .as_ident()
            .map(|ident| ident.value.to_lowercase())
            .unwrap_or_default(),
        _ => String::new(),
    };
    let written = function.name.to_string();
    if matches!(function.args, FunctionArguments::None) && function.over.is_none() {
        // sqlparser reads some bare words (`user`, `current_user`) as calls without
        // parentheses; a column of that name wins.
        if let [part] = function.name.0.as_slice()
            && let Some(ident) = part.as_ident()
            && let Ok(column) = columns::resolve(compiler.schema, &ident.value, origin)
        {
            return Ok(column);
        }
    }
    if name.is_empty() {
        return Err(origin.unsupported(format!(
            "function {written} is not supported; {}",
            available(&written)
        )));
    }
    if NONDETERMINISTIC.contains(&name.as_str()) {
        return Err(origin.unsupported(format!(
            "{written} is not supported: its value would change when a job is replayed from a \
             checkpoint; use a timestamp column of the records instead"
        )));
    }
    if function.over.is_some() || WINDOW_FUNCTIONS.contains(&name.as_str()) {
        return Err(origin.unsupported(format!(
            "window functions ({written} ... OVER) are not supported in expressions; use a \
             window operator"
        )));
    }
    if AGGREGATES.contains(&name.as_str()) {
        return Err(origin.unsupported(format!(
            "aggregate function {written}(...) cannot be used here: aggregate functions belong \
             in an aggregate operator's `aggregates:`"
        )));
    }
    if function.filter.is_some()
        || !function.within_group.is_empty()
        || function.null_treatment.is_some()
        || !matches!(function.parameters, FunctionArguments::None)
    {
        return Err(origin.unsupported(format!(
            "FILTER, WITHIN GROUP, IGNORE/RESPECT NULLS and parameters are not supported in \
             {written}(...)"
        )));
    }
    let Some(&(_, usage)) = FUNCTIONS.iter().find(|(known, _)| *known == name) else {
        return Err(origin.unsupported(format!(
            "unknown function {written}(); {}",
            available(&name)
        )));
    };
    let args = arguments(function, &written, origin)?;
    let arity = |min: usize, max: Option<usize>| -> Result<(), ExprError> {
        let fits = args.len() >= min && max.is_none_or(|max| args.len() <= max);
        if fits {
            return Ok(());
        }
        let expected = match max {
            Some(max) if max == min => format!("{min}"),
            Some(max) => format!("{min} to {max}"),
            None => format!("at least {min}"),
        };
        Err(origin.type_error(format!(
            "{written} takes {expected} argument{}, got {}: {usage}",
            if max == Some(1) { "" } else { "s" },
            args.len()
        )))
    };
    let value = |i: usize| compiler.value(args[i]);
    let values =
        || -> Result<Vec<Node>, ExprError> { args.iter().map(|arg| compiler.value(arg)).collect() };

    match name.as_str() {
        "lower" | "upper" => {
            arity(1, Some(1))?;
            strings::case_map(value(0)?, name == "upper", origin)
        }
        "length" | "char_length" | "character_length" => {
            arity(1, Some(1))?;
            strings::length(value(0)?, origin)
        }
        "trim" | "btrim" | "ltrim" | "rtrim" => {
            arity(1, Some(2))?;
            let side = match name.as_str() {
                "ltrim" => TrimSide::Leading,
                "rtrim" => TrimSide::Trailing,
                _ => TrimSide::Both,
            };
            let characters = match args.get(1) {
                Some(chars) => compiler.constant_str(chars, "the characters to trim")?,
                None => Some(" ".to_owned()),
            };
            strings::trim_node(value(0)?, side, characters, origin)
        }
        "substring" | "substr" => {
            arity(2, Some(3))?;
            let length = if args.len() == 3 {
                Some(value(2)?)
            } else {
                None
            };
            strings::substring_node(value(0)?, value(1)?, length, origin)
        }
        "concat" => {
            arity(1, None)?;
            strings::concat(values()?, origin)
        }
        "regexp_extract" => {
            arity(2, Some(3))?;
            let group = if args.len() == 3 {
                Some(value(2)?)
            } else {
                None
            };
            strings::regexp_extract(value(0)?, value(1)?, group, origin)
        }
        "split_index" => {
            arity(3, Some(3))?;
            strings::split_index(value(0)?, value(1)?, value(2)?, origin)
        }
        "count_char" => {
            arity(2, Some(2))?;
            let character = compiler.constant_str(args[1], "count_char's character")?;
            strings::count_char(value(0)?, character, origin)
        }
        "coalesce" => {
            arity(1, None)?;
            conditional::coalesce(values()?, origin)
        }
        "nullif" => {
            arity(2, Some(2))?;
            conditional::nullif(value(0)?, value(1)?, origin)
        }
        "if" => {
            // Flink's IF(c, a, b): CASE WHEN c THEN a ELSE b END, with CASE's typing and
            // its promise not to evaluate the branch a row does not take.
            arity(3, Some(3))?;
            let when = ast::CaseWhen {
                condition: args[0].clone(),
                result: args[1].clone(),
            };
            conditional::case(compiler, None, &[when], Some(args[2]), origin)
        }
        "greatest" | "least" => {
            arity(1, None)?;
            conditional::extremum(values()?, name == "greatest", origin)
        }
        "mod" => {
            arity(2, Some(2))?;
            arith::binary(arith::ArithOp::Rem, value(0)?, value(1)?, origin)
        }
        "abs" => {
            arity(1, Some(1))?;
            math::abs(value(0)?, origin)
        }
        "round" => {
            arity(1, Some(2))?;
            let digits = match args.get(1) {
                Some(digits) => compiler
                    .constant_int(digits, "round's digits")?
                    .unwrap_or(0),
                None => 0,
            };
            math::round(value(0)?, digits, origin)
        }
        "floor" | "ceil" | "ceiling" => {
            arity(1, Some(1))?;
            math::ceil_floor(
                value(0)?,
                &ast::CeilFloorKind::DateTimeField(ast::DateTimeField::NoDateTime),
                name != "floor",
                origin,
            )
        }
        "date_part" => {
            arity(2, Some(2))?;
            let unit = compiler.constant_str(args[0], "date_part's unit")?;
            temporal::date_part_named(unit.as_deref(), value(1)?, origin)
        }
        "hour" | "minute" | "second" => {
            // Flink's HOUR(ts), MINUTE(ts), SECOND(ts): EXTRACT of that field.
            arity(1, Some(1))?;
            temporal::date_part_named(Some(&name), value(0)?, origin)
        }
        "date_format" => {
            arity(2, Some(2))?;
            let pattern = compiler.constant_str(args[1], "date_format's pattern")?;
            temporal::date_format(value(0)?, pattern.as_deref(), origin)
        }
        "date_trunc" => {
            arity(2, Some(2))?;
            let unit = compiler.constant_str(args[0], "date_trunc's unit")?;
            temporal::date_trunc(unit.as_deref(), value(1)?, origin)
        }
        "date_bin" => {
            arity(2, Some(2))?;
            let stride = compiler.lower(args[0])?;
            match (stride.ty, stride.as_literal().and_then(|l| l.as_i64())) {
                (SqlType::Interval, Some(ms)) if ms > 0 => temporal::date_bin(ms, value(1)?, origin),
                _ => Err(origin.type_error(format!(
                    "date_bin's stride must be a constant positive INTERVAL like INTERVAL '10' SECOND, not `{}`",
                    args[0]
                ))),
            }
        }
        "to_timestamp_millis" => {
            arity(1, Some(1))?;
            temporal::to_timestamp_millis(value(0)?, origin)
        }
        _ => Err(origin.unsupported(format!(
            "unknown function {written}(); {}",
            available(&name)
        ))),
    }
}

/// The positional argument expressions of a call.
fn arguments<'f>(
    function: &'f ast::Function,
    written: &str,
    origin: &Origin,
) -> Result<Vec<&'f ast::Expr>, ExprError> {
    let list = match &function.args {
        FunctionArguments::List(list) => list,
        FunctionArguments::None => return Ok(Vec::new()),
        FunctionArguments::Subquery(_) => {
            return Err(origin.unsupported("subqueries are not supported in expressions"));
        }
    };
    if list.duplicate_treatment.is_some() || !list.clauses.is_empty() {
        return Err(origin.unsupported(format!(
            "DISTINCT, ORDER BY and other clauses are not supported inside {written}(...)"
        )));
    }
    list.args
        .iter()
        .map(|arg| match arg {
            FunctionArg::Unnamed(FunctionArgExpr::Expr(expr)) => Ok(expr),
            FunctionArg::Unnamed(_) => Err(origin.unsupported(
                "`*` is only allowed as count(*) in an aggregate operator's `aggregates:`",
            )),
            FunctionArg::Named { .. } | FunctionArg::ExprNamed { .. } => Err(origin.unsupported(
                format!("named arguments are not supported in {written}(...)"),
            )),
        })
        .collect()
}

/// "did you mean ...? functions: ..." for an unknown name.
fn available(name: &str) -> String {
    let names: Vec<&str> = FUNCTIONS.iter().map(|(name, _)| *name).collect();
    let hint = suggest(&names, name)
        .map(|s| format!("did you mean {s}? "))
        .unwrap_or_default();
    let usages = FUNCTIONS
        .iter()
        .map(|(_, usage)| *usage)
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "{hint}functions: {usages}; also CAST, TRY_CAST, EXTRACT(field FROM ts), CASE, \
         SUBSTRING(s FROM a FOR b), TRIM([BOTH|LEADING|TRAILING] [chars FROM] s)"
    )
}
