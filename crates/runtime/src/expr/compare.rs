//! Comparisons and tests: `= <> < <= > >=`, `BETWEEN`, `IN (...)`, `IS [NOT] NULL`,
//! `IS [NOT] TRUE/FALSE`, `IS [NOT] DISTINCT FROM`.
//!
//! Operands are brought to a common type first (INT widens to FLOAT; a string literal next to a
//! TIMESTAMP is read as one). FLOAT comparisons follow SQL rather than Arrow's total order:
//! `-0.0 = 0.0`, and NaN equals NaN and sorts above every other number (as in PostgreSQL).

use std::sync::Arc;

use arrow_arith::boolean::{is_not_null, is_null as is_null_kernel, not, or_kleene};
use arrow_array::types::Float64Type;
use arrow_array::{Array, ArrayRef, BooleanArray, Datum, RecordBatch};
use arrow_ord::cmp;
use arrow_schema::{ArrowError, DataType};

use super::coerce::{common_type, convert, unify_pair};
use super::compile::Origin;
use super::error::{EvalError, ExprError};
use super::node::{Node, Operator};
use super::types::{Literal, SqlType, Value, bool_array, booleans, primitive};

/// A comparison operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CmpOp {
    Eq,
    NotEq,
    Lt,
    LtEq,
    Gt,
    GtEq,
}

impl CmpOp {
    pub(crate) fn kernel(
        self,
        left: &dyn Datum,
        right: &dyn Datum,
    ) -> Result<BooleanArray, ArrowError> {
        match self {
            Self::Eq => cmp::eq(left, right),
            Self::NotEq => cmp::neq(left, right),
            Self::Lt => cmp::lt(left, right),
            Self::LtEq => cmp::lt_eq(left, right),
            Self::Gt => cmp::gt(left, right),
            Self::GtEq => cmp::gt_eq(left, right),
        }
    }
}

fn cannot_compare(a: SqlType, b: SqlType) -> String {
    format!("cannot compare {a} with {b}")
}

/// An all-NULL BOOL: comparing NULL with NULL.
fn unknown(origin: &Origin) -> Node {
    Node::literal(
        Literal::null(SqlType::Bool),
        SqlType::Bool,
        origin.sql.clone(),
    )
}

/// `left op right`.
pub(crate) fn binary(
    op: CmpOp,
    left: Node,
    right: Node,
    origin: &Origin,
) -> Result<Node, ExprError> {
    let (left, right, common) = unify_pair(left, right, origin, &cannot_compare)?;
    if common == SqlType::Null {
        return Ok(unknown(origin));
    }
    Ok(Node::op(
        SqlType::Bool,
        origin.sql.clone(),
        CompareOp { op, left, right },
    ))
}

/// Evaluates `left op right` on values of one type; the building block of every comparison here
/// and of CASE, NULLIF, GREATEST and LEAST.
pub(crate) fn compare_values(
    op: CmpOp,
    left: &Value,
    right: &Value,
    sql: &str,
) -> Result<Value, EvalError> {
    let left = canonical(left, sql)?;
    let right = canonical(right, sql)?;
    let result = op
        .kernel(left.datum(), right.datum())
        .map_err(|e| EvalError::from_arrow(sql, e))?;
    Ok(Value::from_kernel(
        Arc::new(result),
        left.is_scalar() && right.is_scalar(),
    ))
}

/// Maps `-0.0` to `0.0` and every NaN to one positive NaN, so that Arrow's total order on floats
/// gives SQL's answers (`-0.0 = 0.0`, `NaN = NaN`, NaN above +inf). Other types pass unchanged.
fn canonical(value: &Value, sql: &str) -> Result<Value, EvalError> {
    if value.array().data_type() != &DataType::Float64 {
        return Ok(value.clone());
    }
    value.map(|array| {
        let floats = primitive::<Float64Type>(array, sql)?;
        let canonical =
            floats.unary::<_, Float64Type>(|x| if x.is_nan() { f64::NAN } else { x + 0.0 });
        Ok(Arc::new(canonical) as ArrayRef)
    })
}

#[derive(Debug)]
struct CompareOp {
    op: CmpOp,
    left: Node,
    right: Node,
}

impl Operator for CompareOp {
    fn eval(&self, batch: &RecordBatch, sql: &str) -> Result<Value, EvalError> {
        let left = self.left.eval(batch)?;
        let right = self.right.eval(batch)?;
        compare_values(self.op, &left, &right, sql)
    }

    fn children(&self) -> Vec<&Node> {
        vec![&self.left, &self.right]
    }
}

/// `expr [NOT] BETWEEN low AND high`: `low <= expr AND expr <= high`, evaluating `expr` once.
pub(crate) fn between(
    expr: Node,
    low: Node,
    high: Node,
    negated: bool,
    origin: &Origin,
) -> Result<Node, ExprError> {
    let common = common_type([&expr, &low, &high], origin, &cannot_compare)?;
    if common == SqlType::Null {
        return Ok(unknown(origin));
    }
    let expr = convert(expr, common, origin, &cannot_compare)?;
    let low = convert(low, common, origin, &cannot_compare)?;
    let high = convert(high, common, origin, &cannot_compare)?;
    Ok(Node::op(
        SqlType::Bool,
        origin.sql.clone(),
        BetweenOp {
            expr,
            low,
            high,
            negated,
        },
    ))
}

#[derive(Debug)]
struct BetweenOp {
    expr: Node,
    low: Node,
    high: Node,
    negated: bool,
}

impl Operator for BetweenOp {
    fn eval(&self, batch: &RecordBatch, sql: &str) -> Result<Value, EvalError> {
        let rows = batch.num_rows();
        let expr = self.expr.eval(batch)?;
        let above = compare_values(CmpOp::GtEq, &expr, &self.low.eval(batch)?, sql)?;
        let below = compare_values(CmpOp::LtEq, &expr, &self.high.eval(batch)?, sql)?;
        let inside =
            arrow_arith::boolean::and_kleene(&bool_array(above, rows), &bool_array(below, rows))
                .map_err(|e| EvalError::from_arrow(sql, e))?;
        let result = if self.negated {
            not(&inside).map_err(|e| EvalError::from_arrow(sql, e))?
        } else {
            inside
        };
        Ok(Value::Array(Arc::new(result)))
    }

    fn children(&self) -> Vec<&Node> {
        vec![&self.expr, &self.low, &self.high]
    }
}

/// `expr [NOT] IN (v1, v2, ...)`: `expr = v1 OR expr = v2 OR ...` with SQL's NULL rules (no match
/// and a NULL anywhere gives NULL), evaluating `expr` once.
pub(crate) fn in_list(
    expr: Node,
    list: Vec<Node>,
    negated: bool,
    origin: &Origin,
) -> Result<Node, ExprError> {
    let common = common_type(std::iter::once(&expr).chain(&list), origin, &cannot_compare)?;
    if common == SqlType::Null {
        return Ok(unknown(origin));
    }
    let expr = convert(expr, common, origin, &cannot_compare)?;
    let list = list
        .into_iter()
        .map(|item| convert(item, common, origin, &cannot_compare))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Node::op(
        SqlType::Bool,
        origin.sql.clone(),
        InListOp {
            expr,
            list,
            negated,
        },
    ))
}

#[derive(Debug)]
struct InListOp {
    expr: Node,
    list: Vec<Node>,
    negated: bool,
}

impl Operator for InListOp {
    fn eval(&self, batch: &RecordBatch, sql: &str) -> Result<Value, EvalError> {
        let rows = batch.num_rows();
        let expr = self.expr.eval(batch)?;
        let mut found: Option<BooleanArray> = None;
        for item in &self.list {
            let equal = bool_array(
                compare_values(CmpOp::Eq, &expr, &item.eval(batch)?, sql)?,
                rows,
            );
            found = Some(match found {
                None => equal,
                Some(found) => {
                    or_kleene(&found, &equal).map_err(|e| EvalError::from_arrow(sql, e))?
                }
            });
        }
        let found = found.unwrap_or_else(|| BooleanArray::from(vec![false; rows]));
        let result = if self.negated {
            not(&found).map_err(|e| EvalError::from_arrow(sql, e))?
        } else {
            found
        };
        Ok(Value::Array(Arc::new(result)))
    }

    fn children(&self) -> Vec<&Node> {
        std::iter::once(&self.expr).chain(&self.list).collect()
    }
}

/// `expr IS NULL` (`negated`: `IS NOT NULL`); never NULL itself.
pub(crate) fn is_null(input: Node, negated: bool, origin: &Origin) -> Result<Node, ExprError> {
    Ok(Node::op(
        SqlType::Bool,
        origin.sql.clone(),
        IsNullOp { input, negated },
    ))
}

#[derive(Debug)]
struct IsNullOp {
    input: Node,
    negated: bool,
}

impl Operator for IsNullOp {
    fn eval(&self, batch: &RecordBatch, sql: &str) -> Result<Value, EvalError> {
        let negated = self.negated;
        self.input
            .eval(batch)?
            .map(|array| {
                let result = if negated {
                    is_not_null(array)
                } else {
                    is_null_kernel(array)
                };
                result.map(|r| Arc::new(r) as ArrayRef)
            })
            .map_err(|e| EvalError::from_arrow(sql, e))
    }

    fn children(&self) -> Vec<&Node> {
        vec![&self.input]
    }
}

/// `x IS [NOT] TRUE` / `x IS [NOT] FALSE` on a BOOL; NULL is neither TRUE nor FALSE, and the
/// result is never NULL.
pub(crate) fn truth(
    input: Node,
    value: bool,
    negated: bool,
    origin: &Origin,
) -> Result<Node, ExprError> {
    Ok(Node::op(
        SqlType::Bool,
        origin.sql.clone(),
        TruthOp {
            input,
            value,
            negated,
        },
    ))
}

#[derive(Debug)]
struct TruthOp {
    input: Node,
    value: bool,
    negated: bool,
}

impl Operator for TruthOp {
    fn eval(&self, batch: &RecordBatch, sql: &str) -> Result<Value, EvalError> {
        let (value, negated) = (self.value, self.negated);
        self.input.eval(batch)?.map(|array| {
            let booleans = booleans(array, sql)?;
            let matching = if value {
                booleans.values().clone()
            } else {
                !booleans.values()
            };
            let hits = match booleans.nulls() {
                Some(valid) => &matching & valid.inner(),
                None => matching,
            };
            let result = if negated { !&hits } else { hits };
            Ok(Arc::new(BooleanArray::new(result, None)) as ArrayRef)
        })
    }

    fn children(&self) -> Vec<&Node> {
        vec![&self.input]
    }
}

/// `l IS DISTINCT FROM r` (`negated`: `IS NOT DISTINCT FROM`): equality where NULL equals NULL.
pub(crate) fn distinct(
    left: Node,
    right: Node,
    negated: bool,
    origin: &Origin,
) -> Result<Node, ExprError> {
    let (left, right, common) = unify_pair(left, right, origin, &cannot_compare)?;
    if common == SqlType::Null {
        // NULL IS DISTINCT FROM NULL is false.
        return Ok(Node::literal(
            Literal::bool(negated),
            SqlType::Bool,
            origin.sql.clone(),
        ));
    }
    Ok(Node::op(
        SqlType::Bool,
        origin.sql.clone(),
        DistinctOp {
            left,
            right,
            negated,
        },
    ))
}

#[derive(Debug)]
struct DistinctOp {
    left: Node,
    right: Node,
    negated: bool,
}

impl Operator for DistinctOp {
    fn eval(&self, batch: &RecordBatch, sql: &str) -> Result<Value, EvalError> {
        let left = canonical(&self.left.eval(batch)?, sql)?;
        let right = canonical(&self.right.eval(batch)?, sql)?;
        let result = if self.negated {
            cmp::not_distinct(left.datum(), right.datum())
        } else {
            cmp::distinct(left.datum(), right.datum())
        }
        .map_err(|e| EvalError::from_arrow(sql, e))?;
        Ok(Value::from_kernel(
            Arc::new(result),
            left.is_scalar() && right.is_scalar(),
        ))
    }

    fn children(&self) -> Vec<&Node> {
        vec![&self.left, &self.right]
    }
}
