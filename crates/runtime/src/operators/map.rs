//! `map`: computes output columns from SQL expressions; also projection and renaming.

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;

use crate::api::Operator;
use crate::api::OperatorError;
use crate::expr::Expr;

pub struct Map {
    columns: Arc<[Expr]>,
    schema: SchemaRef,
}

impl Map {
    /// `schema` has one field per expression, in order, typed as the expression (the planner
    /// builds both together).
    pub fn new(columns: Arc<[Expr]>, schema: SchemaRef) -> Self {
        Self { columns, schema }
    }
}

impl Operator for Map {
    fn process_batch(
        &mut self,
        _input: usize,
        batch: RecordBatch,
        out: &mut Vec<RecordBatch>,
    ) -> Result<(), OperatorError> {
        let arrays = self
            .columns
            .iter()
            .map(|e| e.evaluate(&batch))
            .collect::<Result<Vec<_>, _>>()?;
        let options = arrow_array::RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
        out.push(RecordBatch::try_new_with_options(
            self.schema.clone(),
            arrays,
            &options,
        )?);
        Ok(())
    }
}
