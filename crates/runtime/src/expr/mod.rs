//! SQL expressions: snippets such as `price * 0.908` or `auction % 123 = 0` from a job file,
//! parsed and type-checked once against an input schema, then evaluated over whole Arrow
//! batches with vectorised kernels.
//!
//! Types: INT (`Int64`), FLOAT (`Float64`), STRING (`Utf8`), BOOL (`Boolean`), TIMESTAMP
//! (`Timestamp(Millisecond, None)`, epoch milliseconds in UTC), and the type of an untyped `NULL`
//! (`Null`). Everything string-shaped (column names, LIKE patterns, units, function names) is
//! resolved by [`Expr::compile`]; [`Expr::evaluate`] does no parsing or lookups, passes constants
//! to kernels as scalars, and returns a plain column reference's `Arc` without copying it.
//! Literal-only subexpressions are folded at compile time.
//!
//! Errors come in two kinds: [`ExprError`] when compiling (a mistake in the job file, with the
//! position inside the snippet), and [`EvalError`] when evaluating (a row the expression cannot
//! handle, such as an integer division by zero; the engine fails the job).
//!
//! # Layout
//!
//! - `error`: [`ExprError`] and [`EvalError`].
//! - `types`: SQL types, compile-time literals, and the columnar value operators exchange.
//! - `node`: the typed tree, its evaluation, constant folding, and guarded evaluation of operands
//!   on a subset of rows.
//! - `compile`: the AST walk, identifiers and literals; `columns`: name resolution with "did you
//!   mean" suggestions; `coerce`: the implicit conversions (NULL, INT → FLOAT, string literal →
//!   TIMESTAMP).
//! - One file per family: `arith` (`+ - * / %`, exact decimal multiplication, timestamp
//!   arithmetic), `compare` (comparisons, BETWEEN, IN, IS ...), `logic` (AND, OR, NOT), `like`,
//!   `conditional` (CASE, coalesce, nullif, greatest, least, ifnull), `cast`, `strings` (with
//!   regexp_extract, split_index), `math`, `temporal` (TIMESTAMP/INTERVAL literals, EXTRACT,
//!   date_part, date_trunc, date_format), `functions` (name lookup and dispatch, with the
//!   aliases `if`, `mod`, `hour`, `minute`, `second`, and the Flink built-ins refused with
//!   their reasons).
//! - Flink's row-at-a-time functions share one operator, `rowwise`; their families are `text`
//!   (lpad, translate, regexp_replace, ...), `calendar` (to_timestamp_ltz, timestampadd,
//!   FLOOR/CEIL(ts TO unit), ...), `json` (json_value, json_query, json_exists) and `hashing`
//!   (md5, sha*, hash_code). The user guide's functions page lists every Flink built-in and
//!   what weir does with it.
//! - `tests`: behaviour tests on small batches and a seeded randomized check against a naive
//!   per-row reference.
//!
//! # Example
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use arrow_array::{Int64Array, RecordBatch, cast::AsArray, types::Float64Type};
//! use arrow_schema::{DataType, Field, Schema};
//! use weir_runtime::expr::Expr;
//!
//! let schema = Arc::new(Schema::new(vec![Field::new("price", DataType::Int64, true)]));
//! let euros = Expr::compile("price * 0.908", &schema)?;
//! assert_eq!(euros.data_type(), &DataType::Float64);
//!
//! let batch = RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(vec![4567]))])?;
//! let result = euros.evaluate(&batch)?;
//! assert_eq!(result.as_primitive::<Float64Type>().value(0).to_string(), "4146.836");
//! # Ok(())
//! # }
//! ```
//!
//! # Semantics worth knowing
//!
//! - NULL propagates through operators and functions except `IS [NOT] NULL`, `IS [NOT]
//!   TRUE/FALSE`, `IS [NOT] DISTINCT FROM`, `coalesce`, `concat`, `greatest`/`least` (which skip
//!   NULLs), and AND/OR (three-valued logic).
//! - INT arithmetic is checked; `/` truncates toward zero. FLOAT follows IEEE 754 except that
//!   comparisons treat `-0.0 = 0.0` and NaN as equal to itself and greater than any number.
//! - `INT * 0.908` is computed exactly from the decimal literal (see `arith::ScaledMulOp`).
//! - CASE, AND, OR and coalesce evaluate an operand that can fail only on the rows that reach
//!   it, so `CASE WHEN qty <> 0 THEN price / qty END` never divides by zero.
//! - Identifiers match a column exactly first, then case-insensitively if that is unique.
//!   `bid.price` and `"bid.price"` both name the column `bid.price`. Columns named like SQL
//!   reserved words (`interval`, `exists`) must be double-quoted.
//! - EXTRACT's SECOND and MILLISECOND are the whole second of the minute and the millisecond of
//!   the second; EPOCH is whole seconds. INTERVALs are fixed lengths (no months or years).

mod arith;
mod calendar;
mod cast;
mod coerce;
mod columns;
mod compare;
mod compile;
mod conditional;
mod error;
mod functions;
mod hashing;
mod json;
mod like;
mod logic;
mod math;
mod node;
mod rowwise;
mod strings;
mod temporal;
mod text;
mod types;

#[cfg(test)]
mod tests;

use std::sync::Arc;

use arrow_array::{Array, ArrayRef, RecordBatch, new_empty_array};
use arrow_schema::{DataType, Schema};
use sqlparser::dialect::GenericDialect;
use sqlparser::parser::{Parser, ParserError};
use sqlparser::tokenizer::Token;

pub use error::{EvalError, ExprError};

use compile::Compiler;
use node::Node;

/// The length of an `INTERVAL` literal in milliseconds (the SQL planner's window sizes and
/// time bounds), with the expression compiler's own reading of INTERVAL.
pub(crate) fn interval_millis(expr: &sqlparser::ast::Expr) -> Result<i64, ExprError> {
    let sqlparser::ast::Expr::Interval(interval) = expr else {
        return Err(compile::Origin::of(expr).type_error("expected an INTERVAL"));
    };
    let node = temporal::interval(interval, &compile::Origin::of(expr))?;
    node.as_literal()
        .and_then(|l| l.as_i64())
        .ok_or_else(|| compile::Origin::of(expr).type_error("expected an INTERVAL"))
}

/// A compiled, immutable expression. Cheap to clone (the tree is shared), `Send + Sync`.
#[derive(Debug, Clone)]
pub struct Expr {
    root: Arc<Node>,
    /// The Arrow type of every evaluation result.
    data_type: DataType,
    /// The name a projection gives the result unless the job file names it.
    default_name: String,
}

impl Expr {
    /// Parses `sql` and type-checks it against `schema`, once.
    pub fn compile(sql: &str, schema: &Schema) -> Result<Expr, ExprError> {
        let ast = parse(sql)?;
        Self::build(&ast, schema, Some(sql.trim()))
    }

    /// Type-checks an already-parsed expression against `schema`.
    ///
    /// The aggregate operator parses `sum(price * 0.908)` itself and compiles the argument
    /// `price * 0.908` with this. Error positions are relative to the text `ast` was parsed from.
    pub fn compile_ast(ast: &sqlparser::ast::Expr, schema: &Schema) -> Result<Expr, ExprError> {
        Self::build(ast, schema, None)
    }

    /// The indices of the input columns the expression reads (so an operator can keep only
    /// those).
    pub fn columns(&self) -> std::collections::BTreeSet<usize> {
        let mut out = std::collections::BTreeSet::new();
        self.root.columns(&mut out);
        out
    }

    /// `text` is the snippet as the user wrote it, when known: computed columns are named after
    /// it, and evaluation errors of the whole expression quote it rather than sqlparser's
    /// rendering.
    fn build(
        ast: &sqlparser::ast::Expr,
        schema: &Schema,
        text: Option<&str>,
    ) -> Result<Expr, ExprError> {
        let mut root = Compiler::new(schema).value(ast)?;
        let data_type = root.ty.arrow();
        let default_name = match root.as_column() {
            Some(index) => schema.field(index).name().clone(),
            None => {
                if let Some(text) = text {
                    root.sql = text.to_owned();
                }
                root.sql.clone()
            }
        };
        Ok(Expr {
            root: Arc::new(root),
            data_type,
            default_name,
        })
    }

    /// The Arrow type of the results: `Int64`, `Float64`, `Utf8`, `Boolean`,
    /// `Timestamp(Millisecond, None)`, or `Null` for an expression that is always an untyped NULL.
    pub fn data_type(&self) -> &DataType {
        &self.data_type
    }

    /// Evaluates over a whole batch; the result has `batch.num_rows()` rows.
    ///
    /// `batch` must have the schema the expression was compiled against (at least the columns
    /// it reads, at the same positions and types); otherwise the result is
    /// [`EvalError::SchemaMismatch`].
    pub fn evaluate(&self, batch: &RecordBatch) -> Result<ArrayRef, EvalError> {
        if batch.num_rows() == 0 {
            // No row to fail on, even for a constant that cannot be computed (`1 / 0`).
            return Ok(new_empty_array(&self.data_type));
        }
        let result = self.root.eval_array(batch)?;
        if result.len() != batch.num_rows() || result.data_type() != &self.data_type {
            return Err(EvalError::Internal {
                expr: self.root.sql.clone(),
                message: format!(
                    "produced {} {} values for a batch of {} rows",
                    result.len(),
                    result.data_type(),
                    batch.num_rows()
                ),
            });
        }
        Ok(result)
    }

    /// `Some(index)` when the expression is a plain column reference, so a projection can reuse
    /// the column without evaluating anything.
    pub fn as_column(&self) -> Option<usize> {
        self.root.as_column()
    }

    /// The column name for a plain reference (`bid.price` → `bid.price`), otherwise the SQL text.
    pub fn default_name(&self) -> String {
        self.default_name.clone()
    }
}

/// Parses one SQL expression snippet, rejecting anything after it.
///
/// Operators that look at the syntax themselves (an aggregate's `count(*)`, `sum(price)`) parse
/// with this and compile the parts they evaluate with [`Expr::compile_ast`].
pub fn parse(sql: &str) -> Result<sqlparser::ast::Expr, ExprError> {
    check_size(sql)?;
    let dialect = GenericDialect {};
    let mut parser = Parser::new(&dialect)
        .try_with_sql(sql)
        .map_err(|e| syntax_error(sql, e))?;
    let expr = parser.parse_expr().map_err(|e| syntax_error(sql, e))?;
    let next = parser.peek_token();
    if next.token != Token::EOF {
        let (line, column) = known(next.span.start.line, next.span.start.column);
        // The text before the token, not the parsed tree: rendering a tree recurses per level.
        let complete = text_before(sql, next.span.start.line, next.span.start.column);
        let complete = complete.trim();
        let shown = if complete.chars().count() > 60 {
            "the expression before it".to_owned()
        } else {
            format!("the expression `{complete}`")
        };
        return Err(ExprError::Syntax {
            message: format!(
                "unexpected `{}` after {shown}; a snippet holds one expression \
                 (combine conditions with AND / OR)",
                next.token
            ),
            line,
            column,
        });
    }
    Ok(expr)
}

/// The longest snippet, in bytes.
pub const MAX_LENGTH: usize = 64 * 1024;

/// The most operators, keywords and opening brackets one snippet may hold.
///
/// sqlparser builds a left-deep chain (`a + a + ... + a`) in a loop, but everything that walks
/// the tree afterwards (rendering, dropping, compiling) recurses once per level. Every level of
/// the tree needs one of these tokens, so counting them before parsing bounds the depth of any
/// tree the parser can build, whatever its shape; the compiler's own limit ([`MAX_DEPTH`]) then
/// bounds what is checked.
pub const MAX_OPERATORS: usize = 500;

/// How deeply the compiled tree may nest (a left-deep chain of N operators nests N deep).
pub const MAX_DEPTH: usize = 100;

/// Refuses a snippet whose tree could nest deeper than a server thread's stack allows, before
/// it is parsed: see [`MAX_OPERATORS`]. Tokenizing is a loop, so this cannot overflow.
pub fn check_size(sql: &str) -> Result<(), ExprError> {
    if sql.len() > MAX_LENGTH {
        return Err(ExprError::Unsupported {
            message: format!(
                "the expression is {} bytes long; at most {MAX_LENGTH} are allowed",
                sql.len()
            ),
            line: Some(1),
            column: Some(1),
        });
    }
    let dialect = GenericDialect {};
    let tokens = match sqlparser::tokenizer::Tokenizer::new(&dialect, sql).tokenize_with_location()
    {
        Ok(tokens) => tokens,
        // The parser reports the same error with its position.
        Err(_) => return Ok(()),
    };
    let mut operators = 0usize;
    for t in &tokens {
        if nests(&t.token) {
            operators += 1;
            if operators > MAX_OPERATORS {
                let (line, column) = known(t.span.start.line, t.span.start.column);
                return Err(ExprError::Unsupported {
                    message: format!(
                        "the expression holds more than {MAX_OPERATORS} operators, keywords and \
                         brackets; split it into several columns or transforms"
                    ),
                    line,
                    column,
                });
            }
        }
    }
    Ok(())
}

/// Whether a token can add a level to the parsed tree: everything but names, literals and
/// separators.
fn nests(token: &Token) -> bool {
    use sqlparser::keywords::Keyword;
    match token {
        Token::Word(w) => w.quote_style.is_none() && w.keyword != Keyword::NoKeyword,
        Token::Whitespace(_)
        | Token::Comma
        | Token::Period
        | Token::RParen
        | Token::RBracket
        | Token::RBrace
        | Token::EOF
        | Token::Number(..)
        | Token::SingleQuotedString(_)
        | Token::DoubleQuotedString(_)
        | Token::NationalStringLiteral(_)
        | Token::EscapedStringLiteral(_)
        | Token::HexStringLiteral(_) => false,
        _ => true,
    }
}

/// Turns sqlparser's "… at Line: 1, Column: 5" into a message and a position. Errors at the end
/// of the input carry no position from sqlparser; they point just past the last character.
fn syntax_error(sql: &str, error: ParserError) -> ExprError {
    let message = match error {
        ParserError::TokenizerError(message) | ParserError::ParserError(message) => message,
        ParserError::RecursionLimitExceeded => {
            return ExprError::Syntax {
                message: "the expression is nested too deeply".into(),
                line: None,
                column: None,
            };
        }
    };
    if let Some((text, position)) = message.rsplit_once(" at Line: ")
        && let Some((line, column)) = position.split_once(", Column: ")
        && let (Ok(line), Ok(column)) = (line.trim().parse(), column.trim().parse())
    {
        let (line, column) = known(line, column);
        return ExprError::Syntax {
            message: text.to_owned(),
            line,
            column,
        };
    }
    let message = message.replace("found: EOF", "found: end of expression");
    let (line, column) = end_position(sql);
    ExprError::Syntax {
        message,
        line: Some(line),
        column: Some(column),
    }
}

/// The text of `sql` before the 1-based `line` and `column` (sqlparser counts characters).
fn text_before(sql: &str, line: u64, column: u64) -> String {
    let mut out = String::new();
    for (n, text) in (1u64..).zip(sql.split('\n')) {
        if n < line {
            out.push_str(text);
            out.push('\n');
        } else {
            let keep = usize::try_from(column.saturating_sub(1)).unwrap_or(usize::MAX);
            out.extend(text.chars().take(keep));
            break;
        }
    }
    out
}

/// sqlparser uses line 0 for "unknown".
fn known(line: u64, column: u64) -> (Option<u64>, Option<u64>) {
    if line == 0 {
        (None, None)
    } else {
        (Some(line), Some(column))
    }
}

/// The 1-based position just after the last character of `sql`.
fn end_position(sql: &str) -> (u64, u64) {
    let line = sql.split('\n').count().max(1);
    let last = sql.rsplit('\n').next().unwrap_or("");
    let column = last.chars().count() + 1;
    (
        u64::try_from(line).unwrap_or(u64::MAX),
        u64::try_from(column).unwrap_or(u64::MAX),
    )
}
