//! String functions: `lower`, `upper`, `length`/`char_length`, `trim`/`ltrim`/`rtrim`/`btrim`,
//! `substring`/`substr`, `concat(...)` and the `||` operator, and Flink's `regexp_extract`,
//! `split_index` and `count_char`.
//!
//! Lengths and positions count characters, not bytes. Each operator builds its result array in
//! one pass; case mapping reuses one scratch buffer per batch. A regular expression written as
//! a literal is compiled once, when the expression is.

use std::fmt::Write as _;
use std::sync::Arc;

use arrow_array::builder::StringBuilder;
use arrow_array::types::Int64Type;
use arrow_array::{Array, ArrayRef, Int64Array, RecordBatch, StringArray};
use sqlparser::ast::{self, TrimWhereField};

use super::cast;
use super::compile::{Compiler, Origin};
use super::error::{EvalError, ExprError};
use super::node::{Node, Operator};
use super::types::{Literal, SqlType, Value, primitive, strings};

/// Accepts a STRING (or NULL) operand of `function`.
pub(crate) fn string_operand(
    node: Node,
    function: &str,
    origin: &Origin,
) -> Result<Node, ExprError> {
    match node.ty {
        SqlType::String => Ok(node),
        SqlType::Null => Ok(cast::implicit(node, SqlType::String)),
        other => Err(origin.type_error(format!(
            "{function} needs a STRING, but `{}` is {other}; CAST(x AS STRING) first",
            node.sql
        ))),
    }
}

/// Accepts an INT (or NULL) operand of `function`.
fn int_operand(node: Node, function: &str, origin: &Origin) -> Result<Node, ExprError> {
    match node.ty {
        SqlType::Int => Ok(node),
        SqlType::Null => Ok(cast::implicit(node, SqlType::Int)),
        other => Err(origin.type_error(format!(
            "{function} needs an INT position or length, but `{}` is {other}",
            node.sql
        ))),
    }
}

/// Per-row access to a STRING value that may be a scalar.
enum StrArg<'a> {
    Scalar(Option<&'a str>),
    Array(&'a StringArray),
}

impl<'a> StrArg<'a> {
    fn new(value: &'a Value, sql: &str) -> Result<Self, EvalError> {
        let array = strings(value.array(), sql)?;
        Ok(if value.is_scalar() {
            Self::Scalar(array.is_valid(0).then(|| array.value(0)))
        } else {
            Self::Array(array)
        })
    }

    fn get(&self, row: usize) -> Option<&'a str> {
        match self {
            Self::Scalar(value) => *value,
            Self::Array(array) => array.is_valid(row).then(|| array.value(row)),
        }
    }
}

/// Per-row access to an INT value that may be a scalar.
enum IntArg<'a> {
    Scalar(Option<i64>),
    Array(&'a Int64Array),
}

impl<'a> IntArg<'a> {
    fn new(value: &'a Value, sql: &str) -> Result<Self, EvalError> {
        let array = primitive::<Int64Type>(value.array(), sql)?;
        Ok(if value.is_scalar() {
            Self::Scalar(array.is_valid(0).then(|| array.value(0)))
        } else {
            Self::Array(array)
        })
    }

    fn get(&self, row: usize) -> Option<i64> {
        match self {
            Self::Scalar(value) => *value,
            Self::Array(array) => array.is_valid(row).then(|| array.value(row)),
        }
    }
}

/// `lower(s)` (`upper == false`) or `upper(s)`.
pub(crate) fn case_map(input: Node, upper: bool, origin: &Origin) -> Result<Node, ExprError> {
    let input = string_operand(input, if upper { "upper" } else { "lower" }, origin)?;
    Ok(Node::op(
        SqlType::String,
        origin.sql.clone(),
        CaseMapOp { input, upper },
    ))
}

#[derive(Debug)]
struct CaseMapOp {
    input: Node,
    upper: bool,
}

impl Operator for CaseMapOp {
    fn eval(&self, batch: &RecordBatch, sql: &str) -> Result<Value, EvalError> {
        let upper = self.upper;
        self.input.eval(batch)?.map(|array| {
            let input = strings(array, sql)?;
            let mut builder = StringBuilder::with_capacity(input.len(), input.value_data().len());
            let mut scratch = String::new();
            for value in input {
                let Some(value) = value else {
                    builder.append_null();
                    continue;
                };
                scratch.clear();
                if value.is_ascii() {
                    scratch.push_str(value);
                    if upper {
                        scratch.make_ascii_uppercase();
                    } else {
                        scratch.make_ascii_lowercase();
                    }
                } else if upper {
                    scratch.extend(value.chars().flat_map(char::to_uppercase));
                } else {
                    scratch.extend(value.chars().flat_map(char::to_lowercase));
                }
                builder.append_value(&scratch);
            }
            Ok(Arc::new(builder.finish()) as ArrayRef)
        })
    }

    fn children(&self) -> Vec<&Node> {
        vec![&self.input]
    }
}

/// `length(s)` / `char_length(s)`: the number of characters.
pub(crate) fn length(input: Node, origin: &Origin) -> Result<Node, ExprError> {
    let input = string_operand(input, "length", origin)?;
    Ok(Node::op(
        SqlType::Int,
        origin.sql.clone(),
        LengthOp { input },
    ))
}

#[derive(Debug)]
struct LengthOp {
    input: Node,
}

impl Operator for LengthOp {
    fn eval(&self, batch: &RecordBatch, sql: &str) -> Result<Value, EvalError> {
        self.input.eval(batch)?.map(|array| {
            let lengths: Int64Array = strings(array, sql)?
                .iter()
                .map(|value| value.map(|v| v.chars().count() as i64))
                .collect();
            Ok(Arc::new(lengths) as ArrayRef)
        })
    }

    fn children(&self) -> Vec<&Node> {
        vec![&self.input]
    }
}

/// Which ends `trim` strips.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TrimSide {
    Both,
    Leading,
    Trailing,
}

/// `TRIM([BOTH|LEADING|TRAILING] [chars FROM] s)` and `TRIM(s, chars)`.
pub(crate) fn trim(
    compiler: &Compiler<'_>,
    expr: &ast::Expr,
    trim_where: Option<&TrimWhereField>,
    trim_what: Option<&ast::Expr>,
    trim_characters: Option<&[ast::Expr]>,
    origin: &Origin,
) -> Result<Node, ExprError> {
    let side = match trim_where {
        None | Some(TrimWhereField::Both) => TrimSide::Both,
        Some(TrimWhereField::Leading) => TrimSide::Leading,
        Some(TrimWhereField::Trailing) => TrimSide::Trailing,
    };
    let characters = match (trim_what, trim_characters) {
        (Some(what), _) => Some(what),
        (None, Some([what])) => Some(what),
        (None, Some(_)) => {
            return Err(origin
                .type_error("TRIM takes one string of characters to strip, e.g. TRIM(s, 'xy')"));
        }
        (None, None) => None,
    };
    let characters = match characters {
        Some(chars) => compiler.constant_str(chars, "the characters TRIM strips")?,
        None => Some(" ".to_owned()),
    };
    trim_node(compiler.value(expr)?, side, characters, origin)
}

/// Strips `characters` (all NULL if `None`) from the given ends of `input`.
pub(crate) fn trim_node(
    input: Node,
    side: TrimSide,
    characters: Option<String>,
    origin: &Origin,
) -> Result<Node, ExprError> {
    let input = string_operand(input, "trim", origin)?;
    let Some(characters) = characters else {
        return Ok(Node::literal(
            Literal::null(SqlType::String),
            SqlType::String,
            origin.sql.clone(),
        ));
    };
    Ok(Node::op(
        SqlType::String,
        origin.sql.clone(),
        TrimOp {
            input,
            side,
            characters: characters.chars().collect(),
        },
    ))
}

#[derive(Debug)]
struct TrimOp {
    input: Node,
    side: TrimSide,
    /// The characters to strip (a space unless the SQL names others).
    characters: Vec<char>,
}

impl Operator for TrimOp {
    fn eval(&self, batch: &RecordBatch, sql: &str) -> Result<Value, EvalError> {
        let strip = |c: char| self.characters.contains(&c);
        self.input.eval(batch)?.map(|array| {
            let trimmed: StringArray = strings(array, sql)?
                .iter()
                .map(|value| {
                    value.map(|v| match self.side {
                        TrimSide::Both => v.trim_matches(strip),
                        TrimSide::Leading => v.trim_start_matches(strip),
                        TrimSide::Trailing => v.trim_end_matches(strip),
                    })
                })
                .collect();
            Ok(Arc::new(trimmed) as ArrayRef)
        })
    }

    fn children(&self) -> Vec<&Node> {
        vec![&self.input]
    }
}

/// `SUBSTRING(s FROM start [FOR length])`, `substring(s, start[, length])`, `substr(...)`.
pub(crate) fn substring(
    compiler: &Compiler<'_>,
    expr: &ast::Expr,
    from: Option<&ast::Expr>,
    length: Option<&ast::Expr>,
    origin: &Origin,
) -> Result<Node, ExprError> {
    let input = compiler.value(expr)?;
    let start = match from {
        Some(from) => compiler.value(from)?,
        None => Node::literal(Literal::int(1), SqlType::Int, "1".into()),
    };
    let length = length.map(|l| compiler.value(l)).transpose()?;
    substring_node(input, start, length, origin)
}

/// Characters `start .. start + length` of `input`, 1-based, clipped to the string (SQL: a
/// start before 1 eats into the length). A negative length is an error.
pub(crate) fn substring_node(
    input: Node,
    start: Node,
    length: Option<Node>,
    origin: &Origin,
) -> Result<Node, ExprError> {
    let input = string_operand(input, "substring", origin)?;
    let start = int_operand(start, "substring", origin)?;
    let length = length
        .map(|l| int_operand(l, "substring", origin))
        .transpose()?;
    let literal_length = length
        .as_ref()
        .and_then(Node::as_literal)
        .and_then(Literal::as_i64);
    if literal_length.is_some_and(|l| l < 0) {
        return Err(origin.type_error("substring length must not be negative"));
    }
    let checks_length = length.is_some() && literal_length.is_none();
    Ok(Node::op(
        SqlType::String,
        origin.sql.clone(),
        SubstringOp {
            input,
            start,
            length,
            checks_length,
        },
    ))
}

#[derive(Debug)]
struct SubstringOp {
    input: Node,
    start: Node,
    length: Option<Node>,
    /// The length is computed per row and may turn out negative.
    checks_length: bool,
}

impl Operator for SubstringOp {
    fn eval(&self, batch: &RecordBatch, sql: &str) -> Result<Value, EvalError> {
        let rows = batch.num_rows();
        let input = self.input.eval(batch)?;
        let start = self.start.eval(batch)?;
        let length = self.length.as_ref().map(|l| l.eval(batch)).transpose()?;
        let (input_arg, start_arg) = (StrArg::new(&input, sql)?, IntArg::new(&start, sql)?);
        let length_arg = length.as_ref().map(|l| IntArg::new(l, sql)).transpose()?;
        let mut builder =
            StringBuilder::with_capacity(rows, input.array().get_buffer_memory_size());
        for row in 0..rows {
            let (Some(text), Some(start)) = (input_arg.get(row), start_arg.get(row)) else {
                builder.append_null();
                continue;
            };
            let length = match &length_arg {
                None => None,
                Some(arg) => match arg.get(row) {
                    None => {
                        builder.append_null();
                        continue;
                    }
                    Some(length) if length < 0 => {
                        return Err(EvalError::InvalidArgument {
                            expr: sql.to_owned(),
                            message: format!("negative substring length {length}"),
                        });
                    }
                    Some(length) => Some(length),
                },
            };
            builder.append_value(sql_substring(text, start, length));
        }
        Ok(Value::Array(Arc::new(builder.finish())))
    }

    fn children(&self) -> Vec<&Node> {
        std::iter::once(&self.input)
            .chain(std::iter::once(&self.start))
            .chain(&self.length)
            .collect()
    }

    fn can_fail(&self) -> bool {
        self.checks_length
    }
}

/// SQL `SUBSTRING(text FROM start FOR length)` on characters.
fn sql_substring(text: &str, start: i64, length: Option<i64>) -> &str {
    let begin = start.max(1);
    let end = length.map_or(i64::MAX, |length| start.saturating_add(length));
    if end <= begin {
        return "";
    }
    let skip = usize::try_from(begin - 1).unwrap_or(usize::MAX);
    let take = usize::try_from(end - begin).unwrap_or(usize::MAX);
    if text.is_ascii() {
        let from = skip.min(text.len());
        return &text[from..from.saturating_add(take).min(text.len())];
    }
    let mut boundaries = text
        .char_indices()
        .map(|(index, _)| index)
        .chain(std::iter::once(text.len()));
    let Some(from) = boundaries.nth(skip) else {
        return "";
    };
    let to = if take == 0 {
        from
    } else {
        boundaries.nth(take - 1).unwrap_or(text.len())
    };
    &text[from..to]
}

/// `concat(a, b, ...)`: joins the arguments' text, skipping NULLs (the result is never NULL).
/// Non-STRING arguments are converted as `CAST(x AS STRING)` would.
pub(crate) fn concat(args: Vec<Node>, origin: &Origin) -> Result<Node, ExprError> {
    let args: Vec<Node> = args
        .into_iter()
        .filter(|arg| arg.ty != SqlType::Null)
        .map(|arg| cast::implicit(arg, SqlType::String))
        .collect();
    if args.is_empty() {
        return Ok(Node::literal(
            Literal::string(""),
            SqlType::String,
            origin.sql.clone(),
        ));
    }
    Ok(Node::op(
        SqlType::String,
        origin.sql.clone(),
        ConcatOp {
            args,
            skip_nulls: true,
        },
    ))
}

/// `a || b`: NULL if either is NULL. One side must be a STRING; the other is converted to text.
pub(crate) fn concat_operator(left: Node, right: Node, origin: &Origin) -> Result<Node, ExprError> {
    let stringy = |ty| matches!(ty, SqlType::String | SqlType::Null);
    if !stringy(left.ty) && !stringy(right.ty) {
        return Err(origin.type_error(format!(
            "cannot apply '||' to {} and {}: one side must be a STRING (use concat(...) to \
             join values of any type)",
            left.ty, right.ty
        )));
    }
    Ok(Node::op(
        SqlType::String,
        origin.sql.clone(),
        ConcatOp {
            args: vec![
                cast::implicit(left, SqlType::String),
                cast::implicit(right, SqlType::String),
            ],
            skip_nulls: false,
        },
    ))
}

#[derive(Debug)]
struct ConcatOp {
    args: Vec<Node>,
    /// `concat` skips NULL arguments; `||` returns NULL.
    skip_nulls: bool,
}

impl Operator for ConcatOp {
    fn eval(&self, batch: &RecordBatch, sql: &str) -> Result<Value, EvalError> {
        let rows = batch.num_rows();
        let values = self
            .args
            .iter()
            .map(|arg| arg.eval(batch))
            .collect::<Result<Vec<_>, _>>()?;
        let args = values
            .iter()
            .map(|value| StrArg::new(value, sql))
            .collect::<Result<Vec<_>, _>>()?;
        let capacity = values
            .iter()
            .map(|v| v.array().get_buffer_memory_size())
            .sum();
        let mut builder = StringBuilder::with_capacity(rows, capacity);
        for row in 0..rows {
            if !self.skip_nulls && args.iter().any(|arg| arg.get(row).is_none()) {
                builder.append_null();
                continue;
            }
            for text in args.iter().filter_map(|arg| arg.get(row)) {
                builder.write_str(text).map_err(|e| EvalError::Internal {
                    expr: sql.to_owned(),
                    message: e.to_string(),
                })?;
            }
            builder.append_value("");
        }
        Ok(Value::Array(Arc::new(builder.finish())))
    }

    fn children(&self) -> Vec<&Node> {
        self.args.iter().collect()
    }
}

/// The largest compiled program a regular expression may make (the `regex` crate's default is
/// 10 MiB); a pattern past it is refused rather than compiled per row at that cost.
const REGEX_SIZE_LIMIT: usize = 1 << 20;

pub(crate) fn compile_regex(pattern: &str) -> Result<regex::Regex, String> {
    regex::RegexBuilder::new(pattern)
        .size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map_err(|e| e.to_string())
}

/// `regexp_extract(s, regex[, group])`: the text of capture group `group` (0, the default, is the
/// whole match) of the first match of `regex` in `s`, as Flink's `REGEXP_EXTRACT`. NULL when an
/// argument is NULL, when nothing matches, when the group took no part in the match, and when
/// `group` is negative or larger than the pattern's number of groups.
///
/// A constant pattern is compiled here, once, and a bad one is a plan-time error; so is a
/// constant group the pattern does not have. A pattern read from a column is compiled per
/// distinct value met in a batch, and one that does not compile gives NULL, as in Flink.
/// Patterns are the `regex` crate's syntax: Java's, less look-around and backreferences.
pub(crate) fn regexp_extract(
    input: Node,
    pattern: Node,
    group: Option<Node>,
    origin: &Origin,
) -> Result<Node, ExprError> {
    let input = string_operand(input, "regexp_extract", origin)?;
    let pattern = string_operand(pattern, "regexp_extract's pattern", origin)?;
    let group = match group {
        Some(group) => int_operand(group, "regexp_extract's group", origin)?,
        None => Node::literal(Literal::int(0), SqlType::Int, "0".to_owned()),
    };
    let compiled = match pattern.as_literal() {
        Some(literal) if !literal.is_null() => {
            let text = literal.as_str().unwrap_or_default();
            let regex = compile_regex(text).map_err(|e| {
                origin.invalid_literal(format!(
                    "regexp_extract's pattern '{text}' does not compile: {e}"
                ))
            })?;
            if let Some(index) = group.as_literal().and_then(Literal::as_i64)
                && (index < 0 || index as usize >= regex.captures_len())
            {
                return Err(origin.type_error(format!(
                    "regexp_extract's group {index} is not in '{text}', which has groups 0 to {}",
                    regex.captures_len() - 1
                )));
            }
            Some(regex)
        }
        _ => None,
    };
    Ok(Node::op(
        SqlType::String,
        origin.sql.clone(),
        RegexpExtractOp {
            input,
            pattern,
            group,
            compiled,
        },
    ))
}

#[derive(Debug)]
struct RegexpExtractOp {
    input: Node,
    pattern: Node,
    group: Node,
    /// The pattern, when it is a constant: compiled once, at plan time.
    compiled: Option<regex::Regex>,
}

impl Operator for RegexpExtractOp {
    fn eval(&self, batch: &RecordBatch, sql: &str) -> Result<Value, EvalError> {
        let rows = batch.num_rows();
        let input = self.input.eval(batch)?;
        let pattern = self.pattern.eval(batch)?;
        let group = self.group.eval(batch)?;
        let (input_arg, pattern_arg) = (StrArg::new(&input, sql)?, StrArg::new(&pattern, sql)?);
        let group_arg = IntArg::new(&group, sql)?;
        let mut builder =
            StringBuilder::with_capacity(rows, input.array().get_buffer_memory_size() / 4);
        // The constant pattern with its capture slots (so a match allocates nothing); or the
        // last pattern read from a column, compiled (None if it does not compile), reused while
        // rows repeat it.
        let mut constant = self
            .compiled
            .as_ref()
            .map(|regex| (regex, regex.capture_locations()));
        type Compiled = Option<(regex::Regex, regex::CaptureLocations)>;
        let mut dynamic: Option<(&str, Compiled)> = None;
        for row in 0..rows {
            let (Some(text), Some(pattern), Some(group)) =
                (input_arg.get(row), pattern_arg.get(row), group_arg.get(row))
            else {
                builder.append_null();
                continue;
            };
            let matcher = match &mut constant {
                Some((regex, slots)) => Some((*regex, slots)),
                None => {
                    if dynamic.as_ref().is_none_or(|(last, _)| *last != pattern) {
                        let compiled = compile_regex(pattern).ok().map(|regex| {
                            let slots = regex.capture_locations();
                            (regex, slots)
                        });
                        dynamic = Some((pattern, compiled));
                    }
                    dynamic
                        .as_mut()
                        .and_then(|(_, compiled)| compiled.as_mut())
                        .map(|(regex, slots)| (&*regex, slots))
                }
            };
            let extracted = matcher.and_then(|(regex, slots)| {
                let group = usize::try_from(group).ok()?;
                regex.captures_read(slots, text)?;
                let (start, end) = slots.get(group)?;
                text.get(start..end)
            });
            builder.append_option(extracted);
        }
        Ok(Value::Array(Arc::new(builder.finish())))
    }

    fn children(&self) -> Vec<&Node> {
        vec![&self.input, &self.pattern, &self.group]
    }
}

/// `split_index(s, separator, index)`: the `index`-th (from 0) piece of `s` split at every
/// occurrence of `separator`, as Flink's `SPLIT_INDEX`: empty pieces count (`'a//b'` has three),
/// and the result is NULL when an argument is NULL, when `index` is negative or past the last
/// piece, when `s` is empty (it has no pieces) and when `separator` is empty (Flink would split
/// at whitespace then; weir refuses a constant empty separator instead).
pub(crate) fn split_index(
    input: Node,
    separator: Node,
    index: Node,
    origin: &Origin,
) -> Result<Node, ExprError> {
    let input = string_operand(input, "split_index", origin)?;
    let separator = string_operand(separator, "split_index's separator", origin)?;
    let index = int_operand(index, "split_index's index", origin)?;
    if separator.as_literal().and_then(Literal::as_str) == Some("") {
        return Err(origin.type_error(
            "split_index's separator is empty: give the text that separates the pieces, like '/'",
        ));
    }
    Ok(Node::op(
        SqlType::String,
        origin.sql.clone(),
        SplitIndexOp {
            input,
            separator,
            index,
        },
    ))
}

#[derive(Debug)]
struct SplitIndexOp {
    input: Node,
    separator: Node,
    index: Node,
}

impl Operator for SplitIndexOp {
    fn eval(&self, batch: &RecordBatch, sql: &str) -> Result<Value, EvalError> {
        let rows = batch.num_rows();
        let input = self.input.eval(batch)?;
        let separator = self.separator.eval(batch)?;
        let index = self.index.eval(batch)?;
        let (input_arg, separator_arg) = (StrArg::new(&input, sql)?, StrArg::new(&separator, sql)?);
        let index_arg = IntArg::new(&index, sql)?;
        let mut builder =
            StringBuilder::with_capacity(rows, input.array().get_buffer_memory_size() / 4);
        for row in 0..rows {
            let piece = match (
                input_arg.get(row),
                separator_arg.get(row),
                index_arg.get(row),
            ) {
                (Some(text), Some(separator), Some(index))
                    if !text.is_empty() && !separator.is_empty() =>
                {
                    usize::try_from(index)
                        .ok()
                        .and_then(|index| text.split(separator).nth(index))
                }
                _ => None,
            };
            builder.append_option(piece);
        }
        Ok(Value::Array(Arc::new(builder.finish())))
    }

    fn children(&self) -> Vec<&Node> {
        vec![&self.input, &self.separator, &self.index]
    }
}

/// `count_char(s, c)`: how many times the character `c` occurs in `s`, as the `count_char` UDF
/// of Flink's Nexmark q14 (which counts bytes equal to the first byte of `c`: the same for ASCII).
/// A NULL `s` counts 0, as there; a NULL `c` gives NULL. `c` must be a constant of one character.
pub(crate) fn count_char(
    input: Node,
    character: Option<String>,
    origin: &Origin,
) -> Result<Node, ExprError> {
    let input = string_operand(input, "count_char", origin)?;
    let Some(character) = character else {
        return Ok(Node::literal(
            Literal::null(SqlType::Int),
            SqlType::Int,
            origin.sql.clone(),
        ));
    };
    let mut chars = character.chars();
    let (Some(character), None) = (chars.next(), chars.next()) else {
        return Err(origin.type_error(format!(
            "count_char counts one character, not '{character}': count_char(s, 'c')"
        )));
    };
    Ok(Node::op(
        SqlType::Int,
        origin.sql.clone(),
        CountCharOp { input, character },
    ))
}

#[derive(Debug)]
struct CountCharOp {
    input: Node,
    character: char,
}

impl Operator for CountCharOp {
    fn eval(&self, batch: &RecordBatch, sql: &str) -> Result<Value, EvalError> {
        let character = self.character;
        self.input.eval(batch)?.map(|array| {
            let input = strings(array, sql)?;
            let counts: Int64Array = if character.is_ascii() {
                // An ASCII byte never occurs inside a multi-byte character in UTF-8.
                let byte = character as u8;
                input
                    .iter()
                    .map(|v| Some(v.map_or(0, |v| bytecount(v, byte))))
                    .collect()
            } else {
                input
                    .iter()
                    .map(|v| Some(v.map_or(0, |v| v.matches(character).count() as i64)))
                    .collect()
            };
            Ok(Arc::new(counts) as ArrayRef)
        })
    }

    fn children(&self) -> Vec<&Node> {
        vec![&self.input]
    }
}

fn bytecount(text: &str, byte: u8) -> i64 {
    text.bytes().filter(|&b| b == byte).count() as i64
}

#[cfg(test)]
mod tests {
    use super::sql_substring;

    #[test]
    fn substring_follows_sql_clipping_rules() {
        assert_eq!(sql_substring("hello", 2, Some(3)), "ell");
        assert_eq!(sql_substring("hello", 0, Some(3)), "he");
        assert_eq!(sql_substring("hello", -5, Some(3)), "");
        assert_eq!(sql_substring("hello", 4, None), "lo");
        assert_eq!(sql_substring("hello", 9, Some(2)), "");
        assert_eq!(sql_substring("héllo", 2, Some(2)), "él");
        assert_eq!(sql_substring("héllo", 5, Some(10)), "o");
        assert_eq!(sql_substring("héllo", 2, Some(0)), "");
    }
}
