//! `filter`: keeps the rows for which a SQL condition is true (NULL counts as false).

use std::sync::Arc;

use arrow_array::{Array, BooleanArray, RecordBatch};
use arrow_select::filter::filter_record_batch;

use crate::api::Operator;
use crate::api::OperatorError;
use crate::expr::Expr;

pub struct Filter {
    predicate: Arc<Expr>,
}

impl Filter {
    /// `predicate` must be a compiled BOOL expression (the planner checks).
    pub fn new(predicate: Arc<Expr>) -> Self {
        Self { predicate }
    }
}

impl Operator for Filter {
    fn process_batch(
        &mut self,
        _input: usize,
        batch: RecordBatch,
        out: &mut Vec<RecordBatch>,
    ) -> Result<(), OperatorError> {
        let mask = self.predicate.evaluate(&batch)?;
        let mask = mask
            .as_any()
            .downcast_ref::<BooleanArray>()
            .ok_or_else(|| OperatorError::Internal("filter predicate is not BOOL".into()))?;
        let kept = mask.true_count();
        if kept == batch.num_rows() && mask.null_count() == 0 {
            out.push(batch);
        } else if kept > 0 {
            out.push(filter_record_batch(&batch, mask)?);
        }
        Ok(())
    }
}
