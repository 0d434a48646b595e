//! Function calls: name lookup (case-insensitive), arity checks, and dispatch to the family that
//! implements each function. Aggregates, window functions and non-deterministic functions are
//! rejected with a message that says where they belong; so are the Flink built-ins weir does not
//! have (`REFUSED`), with the reason. An unknown name gets the nearest supported spelling.

use sqlparser::ast::{self, FunctionArg, FunctionArgExpr, FunctionArguments};

use super::arith;
use super::calendar;
use super::columns::{self, suggest};
use super::compile::{Compiler, Origin};
use super::conditional;
use super::error::ExprError;
use super::hashing;
use super::json;
use super::math;
use super::node::Node;
use super::strings::{self, TrimSide};
use super::temporal;
use super::text;
use super::types::{Literal, SqlType};

/// Every scalar function, with its usage, for error messages. Sorted by name.
const FUNCTIONS: &[(&str, &str)] = &[
    ("abs", "abs(x)"),
    ("acos", "acos(x)"),
    ("ascii", "ascii(s)"),
    ("asin", "asin(x)"),
    ("atan", "atan(x)"),
    ("atan2", "atan2(y, x)"),
    ("bin", "bin(n)"),
    ("btrim", "btrim(s[, chars])"),
    ("ceil", "ceil(x) or CEIL(ts TO unit)"),
    ("ceiling", "ceiling(x)"),
    ("char_length", "char_length(s)"),
    ("character_length", "character_length(s)"),
    ("chr", "chr(n)"),
    ("coalesce", "coalesce(a, b, ...)"),
    ("concat", "concat(a, b, ...)"),
    ("concat_ws", "concat_ws(separator, a, b, ...)"),
    ("cos", "cos(x)"),
    ("cosh", "cosh(x)"),
    ("cot", "cot(x)"),
    ("count_char", "count_char(s, 'c')"),
    ("date_bin", "date_bin(INTERVAL '10' SECOND, ts)"),
    ("date_format", "date_format(ts, 'yyyy-MM-dd HH:mm:ss')"),
    ("date_part", "date_part('hour', ts)"),
    ("date_trunc", "date_trunc('minute', ts)"),
    ("dayofmonth", "dayofmonth(ts)"),
    ("dayofweek", "dayofweek(ts)"),
    ("dayofyear", "dayofyear(ts)"),
    ("degrees", "degrees(x)"),
    ("e", "e()"),
    ("elt", "elt(index, a, b, ...)"),
    ("endswith", "endswith(s, suffix)"),
    ("exp", "exp(x)"),
    ("floor", "floor(x) or FLOOR(ts TO unit)"),
    (
        "from_unixtime",
        "from_unixtime(seconds[, 'yyyy-MM-dd HH:mm:ss'])",
    ),
    ("greatest", "greatest(a, b, ...)"),
    ("hash_code", "hash_code(s)"),
    ("hex", "hex(n or s)"),
    ("hour", "hour(ts)"),
    ("if", "if(condition, then, else)"),
    ("ifnull", "ifnull(a, replacement)"),
    ("initcap", "initcap(s)"),
    ("instr", "instr(s, needle)"),
    ("is_alpha", "is_alpha(s)"),
    ("is_decimal", "is_decimal(s)"),
    ("is_digit", "is_digit(s)"),
    ("json_exists", "json_exists(json, '$.path')"),
    ("json_query", "json_query(json, '$.path')"),
    ("json_value", "json_value(json, '$.path' [RETURNING type])"),
    ("least", "least(a, b, ...)"),
    ("left", "left(s, n)"),
    ("length", "length(s)"),
    ("ln", "ln(x)"),
    ("locate", "locate(needle, s[, start])"),
    ("log", "log(x) or log(base, x)"),
    ("log10", "log10(x)"),
    ("log2", "log2(x)"),
    ("lower", "lower(s)"),
    ("lpad", "lpad(s, length, pad)"),
    ("ltrim", "ltrim(s[, chars])"),
    ("md5", "md5(s)"),
    ("minute", "minute(ts)"),
    ("mod", "mod(a, b)"),
    ("month", "month(ts)"),
    ("nullif", "nullif(a, b)"),
    ("pi", "pi()"),
    ("position", "position(needle IN s)"),
    ("power", "power(base, exponent)"),
    ("quarter", "quarter(ts)"),
    ("radians", "radians(x)"),
    ("regexp", "regexp(s, 'regex')"),
    ("regexp_count", "regexp_count(s, 'regex')"),
    ("regexp_extract", "regexp_extract(s, 'regex'[, group])"),
    ("regexp_instr", "regexp_instr(s, 'regex')"),
    ("regexp_replace", "regexp_replace(s, 'regex', replacement)"),
    ("regexp_substr", "regexp_substr(s, 'regex')"),
    ("repeat", "repeat(s, n)"),
    ("replace", "replace(s, search, replacement)"),
    ("reverse", "reverse(s)"),
    ("right", "right(s, n)"),
    ("round", "round(x[, digits])"),
    ("rpad", "rpad(s, length, pad)"),
    ("rtrim", "rtrim(s[, chars])"),
    ("second", "second(ts)"),
    ("sha1", "sha1(s)"),
    ("sha2", "sha2(s, bits)"),
    ("sha224", "sha224(s)"),
    ("sha256", "sha256(s)"),
    ("sha384", "sha384(s)"),
    ("sha512", "sha512(s)"),
    ("sign", "sign(x)"),
    ("sin", "sin(x)"),
    ("sinh", "sinh(x)"),
    ("split_index", "split_index(s, 'separator', index)"),
    ("sqrt", "sqrt(x)"),
    ("startswith", "startswith(s, prefix)"),
    ("substr", "substr(s, start[, length])"),
    ("substring", "substring(s, start[, length])"),
    ("tan", "tan(x)"),
    ("tanh", "tanh(x)"),
    ("timestampadd", "timestampadd(unit, n, ts)"),
    ("timestampdiff", "timestampdiff(unit, ts1, ts2)"),
    ("to_timestamp", "to_timestamp(s[, 'yyyy-MM-dd HH:mm:ss'])"),
    ("to_timestamp_ltz", "to_timestamp_ltz(epoch, 0 or 3)"),
    ("to_timestamp_millis", "to_timestamp_millis(epoch_ms)"),
    ("translate", "translate(s, from, to)"),
    ("trim", "trim(s)"),
    ("truncate", "truncate(x[, digits])"),
    (
        "unix_timestamp",
        "unix_timestamp(s[, 'yyyy-MM-dd HH:mm:ss']) or unix_timestamp(ts)",
    ),
    ("upper", "upper(s)"),
    ("week", "week(ts)"),
    ("year", "year(ts)"),
];

/// Flink built-ins weir refuses, and why (the docs' function table says the same).
const REFUSED: &[(&str, &str)] = &[
    ("array_append", NO_COLLECTIONS),
    ("array_concat", NO_COLLECTIONS),
    ("array_contains", NO_COLLECTIONS),
    ("array_distinct", NO_COLLECTIONS),
    ("array_except", NO_COLLECTIONS),
    ("array_intersect", NO_COLLECTIONS),
    ("array_join", NO_COLLECTIONS),
    ("array_max", NO_COLLECTIONS),
    ("array_min", NO_COLLECTIONS),
    ("array_position", NO_COLLECTIONS),
    ("array_prepend", NO_COLLECTIONS),
    ("array_remove", NO_COLLECTIONS),
    ("array_reverse", NO_COLLECTIONS),
    ("array_slice", NO_COLLECTIONS),
    ("array_sort", NO_COLLECTIONS),
    ("array_union", NO_COLLECTIONS),
    ("cardinality", NO_COLLECTIONS),
    (
        "convert_tz",
        "weir's TIMESTAMPs are UTC and it has no time-zone database",
    ),
    ("current_database", "weir has no catalog of databases"),
    ("current_watermark", NONDETERMINISTIC),
    ("decode", NO_BINARY),
    ("element", NO_COLLECTIONS),
    ("encode", NO_BINARY),
    ("from_base64", NOT_YET),
    ("group_id", NO_GROUPING_SETS),
    ("grouping", NO_GROUPING_SETS),
    ("grouping_id", NO_GROUPING_SETS),
    ("json_array", NOT_YET),
    ("json_object", NOT_YET),
    ("json_quote", NOT_YET),
    ("json_string", NOT_YET),
    ("json_unquote", NOT_YET),
    ("map_entries", NO_COLLECTIONS),
    ("map_from_arrays", NO_COLLECTIONS),
    ("map_keys", NO_COLLECTIONS),
    ("map_union", NO_COLLECTIONS),
    ("map_values", NO_COLLECTIONS),
    ("parse_url", NOT_YET),
    (
        "printf",
        "weir does not implement Java's Formatter syntax; use concat and round",
    ),
    ("rand_integer", NONDETERMINISTIC),
    ("regexp_extract_all", NO_COLLECTIONS),
    ("split", NO_COLLECTIONS),
    ("str_to_map", NO_COLLECTIONS),
    ("to_base64", NOT_YET),
    (
        "to_date",
        "weir has no DATE type; to_timestamp(s, 'yyyy-MM-dd') reads a date as a TIMESTAMP",
    ),
    (
        "typeof",
        "weir's types are not Flink's, so their names would mislead",
    ),
    ("unhex", NO_BINARY),
    ("url_decode", NOT_YET),
    ("url_encode", NOT_YET),
];

const NONDETERMINISTIC: &str = "its value would change when a job is replayed from a \
                                checkpoint; use a timestamp column of the records instead";
const NO_COLLECTIONS: &str = "weir has no ARRAY, MAP or MULTISET types yet";
const NO_BINARY: &str = "weir has no BINARY type yet";
const NO_GROUPING_SETS: &str = "weir's aggregates have no GROUPING SETS, ROLLUP or CUBE";
const NOT_YET: &str = "not implemented yet (see the functions table in the docs)";

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

const NONDETERMINISTIC_NAMES: &[&str] = &[
    "current_date",
    "current_row_timestamp",
    "current_time",
    "current_timestamp",
    "localtime",
    "localtimestamp",
    "now",
    "rand",
    "random",
    "uuid",
];

/// One call being compiled: its name, arguments and where it stands, for the families'
/// `compile` functions.
pub(crate) struct Call<'c> {
    pub(crate) compiler: &'c Compiler<'c>,
    /// The name in lower case.
    pub(crate) name: &'c str,
    /// The name as written, for messages.
    pub(crate) written: &'c str,
    /// How the function is called, for arity messages.
    pub(crate) usage: &'c str,
    pub(crate) args: Vec<&'c ast::Expr>,
    pub(crate) origin: &'c Origin,
}

impl Call<'_> {
    /// Refuses a call with fewer than `min` or more than `max` arguments.
    pub(crate) fn arity(&self, min: usize, max: Option<usize>) -> Result<(), ExprError> {
        let count = self.args.len();
        if count >= min && max.is_none_or(|max| count <= max) {
            return Ok(());
        }
        let expected = match max {
            Some(max) if max == min => format!("{min}"),
            Some(max) => format!("{min} to {max}"),
            None => format!("at least {min}"),
        };
        Err(self.origin.type_error(format!(
            "{} takes {expected} argument{}, got {count}: {}",
            self.written,
            if max == Some(1) { "" } else { "s" },
            self.usage
        )))
    }

    /// Argument `i` compiled as a value.
    pub(crate) fn value(&self, i: usize) -> Result<Node, ExprError> {
        self.compiler.value(self.args[i])
    }

    /// Every argument compiled as a value.
    pub(crate) fn values(&self) -> Result<Vec<Node>, ExprError> {
        self.args
            .iter()
            .map(|arg| self.compiler.value(arg))
            .collect()
    }

    /// Argument `i`, which must be a constant string (`None`: a NULL constant).
    pub(crate) fn constant_str(&self, i: usize, what: &str) -> Result<Option<String>, ExprError> {
        self.compiler.constant_str(self.args[i], what)
    }

    /// Argument `i`, which must be a constant INT (`None`: a NULL constant).
    pub(crate) fn constant_int(&self, i: usize, what: &str) -> Result<Option<i64>, ExprError> {
        self.compiler.constant_int(self.args[i], what)
    }

    /// A NULL of `ty`: the result of a call whose constant argument is NULL.
    pub(crate) fn null(&self, ty: SqlType) -> Node {
        Node::literal(Literal::null(ty), ty, self.origin.sql.clone())
    }
}

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
    let no_arguments = match &function.args {
        FunctionArguments::List(list) => list.args.is_empty(),
        _ => true,
    };
    if NONDETERMINISTIC_NAMES.contains(&name.as_str()) || (name == "unix_timestamp" && no_arguments)
    {
        return Err(origin.unsupported(format!("{written} is not supported: {NONDETERMINISTIC}")));
    }
    if let Some((_, reason)) = REFUSED.iter().find(|(refused, _)| *refused == name) {
        return Err(origin.unsupported(format!("{written} is not supported: {reason}")));
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
    let (args, returning) = arguments(function, &written, &name, origin)?;
    let call = Call {
        compiler,
        name: &name,
        written: &written,
        usage,
        args,
        origin,
    };
    if let Some(returning) = returning {
        return json::compile_value(&call, Some(returning));
    }
    let args = &call.args;
    let arity = |min: usize, max: Option<usize>| call.arity(min, max);
    let value = |i: usize| call.value(i);
    let values = || call.values();

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
        _ => {
            let families = [
                math::compile,
                text::compile,
                conditional::compile_flink,
                calendar::compile,
                json::compile,
                hashing::compile,
            ];
            for family in families {
                if let Some(node) = family(&call)? {
                    return Ok(node);
                }
            }
            Err(origin.unsupported(format!(
                "unknown function {written}(); {}",
                available(&name)
            )))
        }
    }
}

/// The positional argument expressions of a call, and the type of a `RETURNING` clause (which
/// only `json_value` takes).
fn arguments<'f>(
    function: &'f ast::Function,
    written: &str,
    name: &str,
    origin: &Origin,
) -> Result<(Vec<&'f ast::Expr>, Option<&'f ast::DataType>), ExprError> {
    let list = match &function.args {
        FunctionArguments::List(list) => list,
        FunctionArguments::None => return Ok((Vec::new(), None)),
        FunctionArguments::Subquery(_) => {
            return Err(origin.unsupported("subqueries are not supported in expressions"));
        }
    };
    let returning = match list.clauses.as_slice() {
        [ast::FunctionArgumentClause::JsonReturningClause(clause)] if name == "json_value" => {
            Some(&clause.data_type)
        }
        [] => None,
        _ => {
            return Err(origin.unsupported(format!(
                "DISTINCT, ORDER BY and other clauses are not supported inside {written}(...){}",
                if name == "json_value" {
                    "; json_value takes RETURNING type"
                } else {
                    ""
                }
            )));
        }
    };
    if list.duplicate_treatment.is_some() {
        return Err(origin.unsupported(format!(
            "DISTINCT, ORDER BY and other clauses are not supported inside {written}(...)"
        )));
    }
    let args = list
        .args
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
        .collect::<Result<Vec<_>, _>>()?;
    Ok((args, returning))
}

/// "did you mean ...? functions: ..." for an unknown name: the nearest supported spelling with
/// its usage, then every name (the usages are in the docs' function table).
pub(crate) fn available(name: &str) -> String {
    let names: Vec<&str> = FUNCTIONS.iter().map(|(name, _)| *name).collect();
    let hint = suggest(&names, name)
        .and_then(|s| FUNCTIONS.iter().find(|(known, _)| *known == s))
        .map(|(_, usage)| format!("did you mean {usage}? "))
        .unwrap_or_default();
    format!(
        "{hint}functions: {}; also CAST, TRY_CAST, EXTRACT(field FROM ts), CASE, \
         POSITION(a IN s), SUBSTRING(s FROM a FOR b), TRIM([BOTH|LEADING|TRAILING] [chars FROM] s)",
        names.join(", ")
    )
}

/// The usage of a supported function, for messages of families that compile their own syntax.
pub(crate) fn usage(name: &str) -> &'static str {
    FUNCTIONS
        .iter()
        .find(|(known, _)| *known == name)
        .map_or("", |(_, usage)| *usage)
}
