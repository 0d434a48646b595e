//! Conditional expressions: `CASE`, `coalesce`, `nullif`, `greatest`, `least`, and Flink's
//! `ifnull`, `is_alpha`, `is_digit`, `is_decimal`.
//!
//! Branches are unified to one type (INT and FLOAT give FLOAT; NULL fits anything). Results are
//! assembled with Arrow's `zip`. Operands that can fail at run time (an integer division, a CAST)
//! are evaluated only on the rows that select them, so `CASE WHEN qty = 0 THEN 0 ELSE price / qty
//! END` is safe; operands that cannot fail are evaluated on the whole batch, which is cheaper.

use std::sync::Arc;

use arrow_arith::boolean::{is_not_null, is_null, or_kleene};
use arrow_array::{Array, ArrayRef, BooleanArray, RecordBatch};
use arrow_buffer::BooleanBuffer;
use arrow_select::zip::zip;
use sqlparser::ast::{self, CaseWhen};

use super::coerce::{unify, unify_pair};
use super::compare::{self, CmpOp, compare_values};
use super::compile::{Compiler, Origin};
use super::error::{EvalError, ExprError};
use super::functions::Call;
use super::node::{Node, Operator, null_value};
use super::rowwise::{self, Out, Plain};
use super::strings::string_operand;
use super::types::{Literal, SqlType, Value, bool_array};

/// `CASE [operand] WHEN ... THEN ... [ELSE ...] END`.
///
/// The simple form `CASE x WHEN v THEN ...` is compiled as `CASE WHEN x = v THEN ...`.
pub(crate) fn case(
    compiler: &Compiler<'_>,
    operand: Option<&ast::Expr>,
    conditions: &[CaseWhen],
    else_result: Option<&ast::Expr>,
    origin: &Origin,
) -> Result<Node, ExprError> {
    let mut whens = Vec::with_capacity(conditions.len());
    let mut results = Vec::with_capacity(conditions.len() + 1);
    for when in conditions {
        let condition = match operand {
            Some(operand) => {
                let when_origin = Origin::of(&when.condition);
                compare::binary(
                    CmpOp::Eq,
                    compiler.value(operand)?,
                    compiler.value(&when.condition)?,
                    &when_origin,
                )
                .map_err(|_| {
                    when_origin.type_error(format!(
                        "CASE {operand} WHEN {}: the WHEN value cannot be compared with the \
                         CASE operand",
                        when.condition
                    ))
                })?
            }
            None => compiler.boolean(&when.condition, "CASE WHEN")?,
        };
        whens.push(condition);
        results.push(compiler.value(&when.result)?);
    }
    let has_else = else_result.is_some();
    if let Some(otherwise) = else_result {
        results.push(compiler.value(otherwise)?);
    }
    let (mut results, ty) = unify(results, origin, &|a, b| {
        format!("CASE branches have incompatible types {a} and {b}; CAST one of them")
    })?;
    if ty == SqlType::Null {
        return Ok(Node::literal(
            Literal::null(SqlType::Null),
            SqlType::Null,
            origin.sql.clone(),
        ));
    }
    let otherwise = if has_else { results.pop() } else { None };
    Ok(Node::op(
        ty,
        origin.sql.clone(),
        CaseOp {
            branches: whens.into_iter().zip(results).collect(),
            otherwise,
            ty,
        },
    ))
}

#[derive(Debug)]
struct CaseOp {
    /// `(condition, result)` in order; the first true condition wins.
    branches: Vec<(Node, Node)>,
    otherwise: Option<Node>,
    ty: SqlType,
}

impl Operator for CaseOp {
    fn eval(&self, batch: &RecordBatch, sql: &str) -> Result<Value, EvalError> {
        let rows = batch.num_rows();
        let zip_err = |e| EvalError::from_arrow(sql, e);
        let guarded = self.branches.iter().skip(1).any(|(c, _)| c.fallible())
            || self.branches.iter().any(|(_, r)| r.fallible())
            || self.otherwise.as_ref().is_some_and(Node::fallible);

        if !guarded {
            // Every operand is safe on every row: evaluate all, then pick right to left.
            let mut result = match &self.otherwise {
                Some(otherwise) => otherwise.eval(batch)?,
                None => null_value(self.ty),
            };
            for (condition, value) in self.branches.iter().rev() {
                let mask = bool_array(condition.eval(batch)?, rows);
                let picked =
                    zip(&mask, value.eval(batch)?.datum(), result.datum()).map_err(zip_err)?;
                result = Value::Array(picked);
            }
            return Ok(result);
        }

        // Each row evaluates the conditions up to its first match, and only its own result.
        let mut remaining = BooleanArray::new(BooleanBuffer::new_set(rows), None);
        let mut picks = Vec::with_capacity(self.branches.len());
        for (condition, value) in &self.branches {
            if remaining.true_count() == 0 {
                break;
            }
            let matched = bool_array(condition.eval_selected(batch, &remaining)?, rows);
            let hit = true_where(&matched, &remaining);
            let value = value.eval_selected(batch, &hit)?;
            remaining = BooleanArray::new(remaining.values() & &!hit.values(), None);
            picks.push((hit, value));
        }
        let mut result = match &self.otherwise {
            Some(otherwise) => otherwise.eval_selected(batch, &remaining)?,
            None => null_value(self.ty),
        };
        for (hit, value) in picks.into_iter().rev() {
            result = Value::Array(zip(&hit, value.datum(), result.datum()).map_err(zip_err)?);
        }
        Ok(result)
    }

    fn children(&self) -> Vec<&Node> {
        self.branches
            .iter()
            .flat_map(|(condition, value)| [condition, value])
            .chain(&self.otherwise)
            .collect()
    }
}

/// Rows where `values` is TRUE (not FALSE, not NULL) and `within` is set, as a mask without NULLs.
fn true_where(values: &BooleanArray, within: &BooleanArray) -> BooleanArray {
    let mut hit = values.values() & within.values();
    if let Some(valid) = values.nulls() {
        hit = &hit & valid.inner();
    }
    BooleanArray::new(hit, None)
}

/// Unifies the arguments of a variadic function; `None` when they are all NULL.
fn unify_args(
    name: &str,
    args: Vec<Node>,
    origin: &Origin,
) -> Result<Option<(Vec<Node>, SqlType)>, ExprError> {
    let (args, ty) = unify(args, origin, &|a, b| {
        format!("{name} arguments have incompatible types {a} and {b}; CAST one of them")
    })?;
    Ok((ty != SqlType::Null).then_some((args, ty)))
}

fn null_node(origin: &Origin) -> Node {
    Node::literal(
        Literal::null(SqlType::Null),
        SqlType::Null,
        origin.sql.clone(),
    )
}

/// `coalesce(a, b, ...)`: the first argument that is not NULL.
pub(crate) fn coalesce(args: Vec<Node>, origin: &Origin) -> Result<Node, ExprError> {
    let Some((args, ty)) = unify_args("coalesce", args, origin)? else {
        return Ok(null_node(origin));
    };
    Ok(Node::op(ty, origin.sql.clone(), CoalesceOp { args }))
}

#[derive(Debug)]
struct CoalesceOp {
    args: Vec<Node>,
}

impl Operator for CoalesceOp {
    fn eval(&self, batch: &RecordBatch, sql: &str) -> Result<Value, EvalError> {
        let arrow = |e| EvalError::from_arrow(sql, e);
        let mut args = self.args.iter();
        let Some(first) = args.next() else {
            return Err(EvalError::Internal {
                expr: sql.to_owned(),
                message: "coalesce without arguments".into(),
            });
        };
        let mut result = first.eval(batch)?;
        for arg in args {
            let missing = match &result {
                Value::Scalar(_) if result.array().logical_null_count() > 0 => {
                    result = arg.eval(batch)?;
                    continue;
                }
                Value::Scalar(_) => break,
                Value::Array(array) if array.null_count() == 0 => break,
                Value::Array(array) => is_null(array).map_err(arrow)?,
            };
            let next = arg.eval_selected(batch, &missing)?;
            let present = is_not_null(result.array()).map_err(arrow)?;
            result = Value::Array(zip(&present, result.datum(), next.datum()).map_err(arrow)?);
        }
        Ok(result)
    }

    fn children(&self) -> Vec<&Node> {
        self.args.iter().collect()
    }
}

/// `nullif(a, b)`: NULL where `a = b`, else `a`.
pub(crate) fn nullif(left: Node, right: Node, origin: &Origin) -> Result<Node, ExprError> {
    let (left, right, ty) = unify_pair(left, right, origin, &|a, b| {
        format!("nullif arguments have incompatible types {a} and {b}")
    })?;
    if ty == SqlType::Null {
        return Ok(null_node(origin));
    }
    Ok(Node::op(ty, origin.sql.clone(), NullIfOp { left, right }))
}

#[derive(Debug)]
struct NullIfOp {
    left: Node,
    right: Node,
}

impl Operator for NullIfOp {
    fn eval(&self, batch: &RecordBatch, sql: &str) -> Result<Value, EvalError> {
        let rows = batch.num_rows();
        let left = self.left.eval(batch)?;
        let equal = bool_array(
            compare_values(CmpOp::Eq, &left, &self.right.eval(batch)?, sql)?,
            rows,
        );
        let result = arrow_select::nullif::nullif(left.into_array(rows).as_ref(), &equal)
            .map_err(|e| EvalError::from_arrow(sql, e))?;
        Ok(Value::Array(result))
    }

    fn children(&self) -> Vec<&Node> {
        vec![&self.left, &self.right]
    }
}

/// `greatest(...)` (`greatest == true`) or `least(...)`: NULL arguments are skipped; the result
/// is NULL only when all are NULL.
pub(crate) fn extremum(
    args: Vec<Node>,
    greatest: bool,
    origin: &Origin,
) -> Result<Node, ExprError> {
    let name = if greatest { "greatest" } else { "least" };
    let Some((args, ty)) = unify_args(name, args, origin)? else {
        return Ok(null_node(origin));
    };
    Ok(Node::op(
        ty,
        origin.sql.clone(),
        ExtremumOp { args, greatest },
    ))
}

#[derive(Debug)]
struct ExtremumOp {
    args: Vec<Node>,
    greatest: bool,
}

impl Operator for ExtremumOp {
    fn eval(&self, batch: &RecordBatch, sql: &str) -> Result<Value, EvalError> {
        let rows = batch.num_rows();
        let arrow = |e| EvalError::from_arrow(sql, e);
        let better = if self.greatest { CmpOp::Gt } else { CmpOp::Lt };
        let mut args = self.args.iter();
        let Some(first) = args.next() else {
            return Err(EvalError::Internal {
                expr: sql.to_owned(),
                message: "greatest/least without arguments".into(),
            });
        };
        let mut best = first.eval(batch)?;
        for arg in args {
            let candidate = arg.eval(batch)?;
            let improves = bool_array(compare_values(better, &candidate, &best, sql)?, rows);
            let best_missing =
                bool_array(best.map(|a| is_null(a).map(to_ref)).map_err(arrow)?, rows);
            // Take the candidate where it is better or where there is no best yet; a NULL
            // candidate compares as NULL, which `zip` treats as "keep the best".
            let take = or_kleene(&best_missing, &improves).map_err(arrow)?;
            best = Value::Array(zip(&take, candidate.datum(), best.datum()).map_err(arrow)?);
        }
        Ok(best)
    }

    fn children(&self) -> Vec<&Node> {
        self.args.iter().collect()
    }
}

fn to_ref(array: BooleanArray) -> ArrayRef {
    Arc::new(array)
}

/// Flink's conditional functions beyond CASE: `ifnull(a, replacement)` (`coalesce` of two) and
/// the string tests `is_alpha`, `is_digit`, `is_decimal`, which are FALSE (not NULL) for NULL,
/// as Flink's are. `Ok(None)` for another name.
pub(crate) fn compile_flink(call: &Call<'_>) -> Result<Option<Node>, ExprError> {
    let test: Plain = match call.name {
        "ifnull" => {
            call.arity(2, Some(2))?;
            return coalesce(call.values()?, call.origin).map(Some);
        }
        "is_alpha" => |a, _| Ok(Out::Bool(a[0].str().is_some_and(is_alpha))),
        "is_digit" => |a, _| Ok(Out::Bool(a[0].str().is_some_and(is_digit))),
        "is_decimal" => |a, _| Ok(Out::Bool(a[0].str().is_some_and(is_decimal))),
        _ => return Ok(None),
    };
    call.arity(1, Some(1))?;
    let input = string_operand(call.value(0)?, call.name, call.origin)?;
    Ok(Some(rowwise::plain(
        vec![input],
        SqlType::Bool,
        rowwise::LENIENT,
        test,
        call.origin,
    )))
}

/// Every character a letter, and at least one.
fn is_alpha(text: &str) -> bool {
    !text.is_empty() && text.chars().all(char::is_alphabetic)
}

/// Every character an ASCII digit, and at least one.
fn is_digit(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit())
}

/// A decimal number: `[+-]digits[.digits][e[+-]digits]`, with digits on at least one side of
/// the point.
fn is_decimal(text: &str) -> bool {
    let digits = |s: &str| s.bytes().take_while(u8::is_ascii_digit).count();
    let rest = text.strip_prefix(['+', '-']).unwrap_or(text);
    let whole = digits(rest);
    let mut rest = &rest[whole..];
    let mut fraction = 0;
    if let Some(after) = rest.strip_prefix('.') {
        fraction = digits(after);
        rest = &after[fraction..];
    }
    if whole + fraction == 0 {
        return false;
    }
    if let Some(exponent) = rest.strip_prefix(['e', 'E']) {
        let exponent = exponent.strip_prefix(['+', '-']).unwrap_or(exponent);
        let n = digits(exponent);
        return n > 0 && n == exponent.len();
    }
    rest.is_empty()
}
