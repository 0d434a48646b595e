//! The typed tree the compiler builds: [`Node`]s whose operators evaluate whole batches.
//!
//! Every operator family (arithmetic, comparison, strings, ...) implements [`Operator`] in its own
//! file; a node adds the SQL type, the SQL text (for error messages) and whether evaluating it can
//! fail at run time. Literal-only subtrees are folded into literals when the node is built.

use std::fmt;
use std::sync::Arc;

use arrow_array::{Array, ArrayRef, BooleanArray, RecordBatch, RecordBatchOptions, UInt32Array};
use arrow_buffer::{NullBuffer, ScalarBuffer};
use arrow_schema::{DataType, Schema};
use arrow_select::filter::filter_record_batch;
use arrow_select::take::take;

use super::error::EvalError;
use super::types::{Literal, SqlType, Value};

/// One operator of the typed tree, evaluated over whole batches.
pub(crate) trait Operator: fmt::Debug + Send + Sync {
    /// Evaluates over `batch`. `sql` is the node's SQL text, for error messages. The result has
    /// `batch.num_rows()` rows, or is a [`Value::Scalar`] when it is the same for every row.
    fn eval(&self, batch: &RecordBatch, sql: &str) -> Result<Value, EvalError>;

    /// The operands, for constant folding and the fallibility analysis.
    fn children(&self) -> Vec<&Node>;

    /// Whether this operator itself (not counting its operands) can return an error on some
    /// data: integer overflow, division by zero, a failed `CAST`. Operators that guard their
    /// operands (CASE, AND, OR, COALESCE) use it to evaluate those only on the rows that need them.
    fn can_fail(&self) -> bool {
        false
    }
}

/// A typed (sub)expression.
#[derive(Debug)]
pub(crate) struct Node {
    /// The SQL type of the result; its Arrow type is `ty.arrow()`.
    pub(crate) ty: SqlType,
    /// The SQL text of this subexpression, named by evaluation errors.
    pub(crate) sql: String,
    /// Whether evaluating this node or any operand can fail (see [`Operator::can_fail`]).
    fallible: bool,
    kind: NodeKind,
}

#[derive(Debug)]
enum NodeKind {
    /// A column of the input; evaluation returns the batch's `Arc` unchanged.
    Column {
        index: usize,
        data_type: DataType,
    },
    Literal(Literal),
    Op(Box<dyn Operator>),
}

impl Node {
    pub(crate) fn column(index: usize, ty: SqlType, data_type: DataType, sql: String) -> Self {
        Self {
            ty,
            sql,
            fallible: false,
            kind: NodeKind::Column { index, data_type },
        }
    }

    pub(crate) fn literal(literal: Literal, ty: SqlType, sql: String) -> Self {
        Self {
            ty,
            sql,
            fallible: false,
            kind: NodeKind::Literal(literal),
        }
    }

    /// Builds an operator node, folding it into a literal when all its operands are literals.
    ///
    /// A fold that fails (say `1 / 0`) keeps the operator, so the error surfaces only if the row
    /// that needs it is evaluated: `CASE WHEN x > 0 THEN 1 / 0 END` must not fail for `x <= 0`.
    pub(crate) fn op(ty: SqlType, sql: String, op: impl Operator + 'static) -> Self {
        let children = op.children();
        let foldable =
            !children.is_empty() && children.iter().all(|child| child.as_literal().is_some());
        if foldable && let Some(literal) = fold(&op, ty, &sql) {
            return Self::literal(literal, ty, sql);
        }
        let fallible = op.can_fail() || children.iter().any(|child| child.fallible);
        Self {
            ty,
            sql,
            fallible,
            kind: NodeKind::Op(Box::new(op)),
        }
    }

    pub(crate) fn as_literal(&self) -> Option<&Literal> {
        match &self.kind {
            NodeKind::Literal(literal) => Some(literal),
            _ => None,
        }
    }

    pub(crate) fn as_column(&self) -> Option<usize> {
        match &self.kind {
            NodeKind::Column { index, .. } => Some(*index),
            _ => None,
        }
    }

    /// Adds the input columns this node reads to `out`.
    pub(crate) fn columns(&self, out: &mut std::collections::BTreeSet<usize>) {
        match &self.kind {
            NodeKind::Column { index, .. } => {
                out.insert(*index);
            }
            NodeKind::Literal(_) => {}
            NodeKind::Op(op) => {
                for child in op.children() {
                    child.columns(out);
                }
            }
        }
    }

    /// Whether evaluating this node can fail on some data.
    pub(crate) fn fallible(&self) -> bool {
        self.fallible
    }

    /// Evaluates over the whole batch.
    pub(crate) fn eval(&self, batch: &RecordBatch) -> Result<Value, EvalError> {
        match &self.kind {
            NodeKind::Column { index, data_type } => {
                let column = batch.columns().get(*index).ok_or_else(|| {
                    self.schema_mismatch(*index, data_type, "no such column".into())
                })?;
                if column.data_type() != data_type {
                    return Err(self.schema_mismatch(
                        *index,
                        data_type,
                        column.data_type().to_string(),
                    ));
                }
                Ok(Value::Array(Arc::clone(column)))
            }
            NodeKind::Literal(literal) => Ok(literal.value()),
            NodeKind::Op(op) => op.eval(batch, &self.sql),
        }
    }

    /// Evaluates into one value per row.
    pub(crate) fn eval_array(&self, batch: &RecordBatch) -> Result<ArrayRef, EvalError> {
        Ok(self.eval(batch)?.into_array(batch.num_rows()))
    }

    /// Evaluates only where `mask` is true (`mask` has no nulls); the other rows of the result
    /// are unspecified and must be ignored by the caller.
    ///
    /// This is how CASE, AND, OR and COALESCE keep SQL's promise that a guarded operand is not
    /// evaluated for rows that do not reach it: `CASE WHEN qty <> 0 THEN price / qty END` does not
    /// fail on `qty = 0`. A node that cannot fail is simply evaluated on every row, which is
    /// cheaper than filtering the batch.
    pub(crate) fn eval_selected(
        &self,
        batch: &RecordBatch,
        mask: &BooleanArray,
    ) -> Result<Value, EvalError> {
        if !self.fallible {
            return self.eval(batch);
        }
        let selected = mask.true_count();
        if selected == mask.len() {
            return self.eval(batch);
        }
        if selected == 0 {
            return Ok(Literal::null(self.ty).value());
        }
        let internal = |e: arrow_schema::ArrowError| EvalError::Internal {
            expr: self.sql.clone(),
            message: e.to_string(),
        };
        let subset = filter_record_batch(batch, mask).map_err(internal)?;
        let values = match self.eval(&subset)? {
            Value::Scalar(scalar) => return Ok(Value::Scalar(scalar)),
            Value::Array(values) => values,
        };
        // Scatter the selected rows back to their positions; other rows become NULL.
        let mut next = 0u32;
        let positions: ScalarBuffer<u32> = mask
            .values()
            .iter()
            .map(|selected| {
                let position = next;
                next += u32::from(selected);
                position
            })
            .collect();
        let indices = UInt32Array::new(positions, Some(NullBuffer::new(mask.values().clone())));
        let scattered = take(values.as_ref(), &indices, None).map_err(internal)?;
        Ok(Value::Array(scattered))
    }

    fn schema_mismatch(&self, index: usize, expected: &DataType, found: String) -> EvalError {
        EvalError::SchemaMismatch {
            expr: self.sql.clone(),
            index,
            expected: expected.to_string(),
            found,
        }
    }
}

/// Evaluates a literal-only operator once, at compile time.
fn fold(op: &dyn Operator, ty: SqlType, sql: &str) -> Option<Literal> {
    let one_row = RecordBatch::try_new_with_options(
        Arc::new(Schema::empty()),
        vec![],
        &RecordBatchOptions::new().with_row_count(Some(1)),
    )
    .ok()?;
    let array = op.eval(&one_row, sql).ok()?.into_array(1);
    if array.data_type() != &ty.arrow() {
        return None;
    }
    Literal::from_array(array)
}

/// A NULL of `ty` repeated for every row, for operators whose result is known to be all-NULL.
pub(crate) fn null_value(ty: SqlType) -> Value {
    Literal::null(ty).value()
}
