//! String functions: `lower`, `upper`, `length`/`char_length`, `trim`/`ltrim`/`rtrim`/`btrim`,
//! `substring`/`substr`, `concat(...)` and the `||` operator.
//!
//! Lengths and positions count characters, not bytes. Each operator builds its result array in
//! one pass; case mapping reuses one scratch buffer per batch.

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
