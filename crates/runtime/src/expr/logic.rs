//! `AND`, `OR`, `NOT` with SQL's three-valued (Kleene) logic: `FALSE AND NULL` is FALSE,
//! `TRUE OR NULL` is TRUE, anything else with a NULL is NULL.
//!
//! The right operand is evaluated only on the rows the left one leaves undecided whenever it can
//! fail, so `qty <> 0 AND price / qty > 10` does not divide by zero.

use std::sync::Arc;

use arrow_arith::boolean::{and_kleene, not as not_kernel, or_kleene};
use arrow_array::{Array, ArrayRef, BooleanArray, RecordBatch};

use super::compile::Origin;
use super::error::{EvalError, ExprError};
use super::node::{Node, Operator};
use super::types::{SqlType, Value, bool_array};

/// `left AND right`; both operands are BOOL (the compiler checked).
pub(crate) fn and(left: Node, right: Node, origin: &Origin) -> Result<Node, ExprError> {
    Ok(Node::op(
        SqlType::Bool,
        origin.sql.clone(),
        KleeneOp {
            left,
            right,
            is_and: true,
        },
    ))
}

/// `left OR right`; both operands are BOOL (the compiler checked).
pub(crate) fn or(left: Node, right: Node, origin: &Origin) -> Result<Node, ExprError> {
    Ok(Node::op(
        SqlType::Bool,
        origin.sql.clone(),
        KleeneOp {
            left,
            right,
            is_and: false,
        },
    ))
}

#[derive(Debug)]
struct KleeneOp {
    left: Node,
    right: Node,
    is_and: bool,
}

impl Operator for KleeneOp {
    fn eval(&self, batch: &RecordBatch, sql: &str) -> Result<Value, EvalError> {
        let rows = batch.num_rows();
        let left = bool_array(self.left.eval(batch)?, rows);
        // The rows whose answer still depends on the right operand: not FALSE for AND, not TRUE
        // for OR (NULL stays undecided either way).
        let right = if self.right.fallible() {
            let decided_value = !self.is_and;
            self.right
                .eval_selected(batch, &undecided(&left, decided_value))?
        } else {
            self.right.eval(batch)?
        };
        let right = bool_array(right, rows);
        let result = if self.is_and {
            and_kleene(&left, &right)
        } else {
            or_kleene(&left, &right)
        }
        .map_err(|e| EvalError::from_arrow(sql, e))?;
        Ok(Value::Array(Arc::new(result)))
    }

    fn children(&self) -> Vec<&Node> {
        vec![&self.left, &self.right]
    }
}

/// A mask (without NULLs) of the rows where `values` is not `decided` (NULL counts as not).
fn undecided(values: &BooleanArray, decided: bool) -> BooleanArray {
    let differs = if decided {
        !values.values()
    } else {
        values.values().clone()
    };
    let mask = match values.nulls() {
        Some(valid) => &differs | &!valid.inner(),
        None => differs,
    };
    BooleanArray::new(mask, None)
}

/// `NOT x`; NULL stays NULL.
pub(crate) fn not(input: Node, origin: &Origin) -> Result<Node, ExprError> {
    Ok(Node::op(SqlType::Bool, origin.sql.clone(), NotOp { input }))
}

#[derive(Debug)]
struct NotOp {
    input: Node,
}

impl Operator for NotOp {
    fn eval(&self, batch: &RecordBatch, sql: &str) -> Result<Value, EvalError> {
        self.input.eval(batch)?.map(|array| {
            let booleans = super::types::booleans(array, sql)?;
            let negated = not_kernel(booleans).map_err(|e| EvalError::from_arrow(sql, e))?;
            Ok(Arc::new(negated) as ArrayRef)
        })
    }

    fn children(&self) -> Vec<&Node> {
        vec![&self.input]
    }
}
