//! `join` and `interval-join`: every pair of rows with equal keys that meets a condition.
//!
//! Each side's rows wait in map state per key, ordered by (retain-until, arrival), so rows whose
//! time is up leave state in one ordered range removal when the watermark passes them. A row
//! arriving on one side is first matched against the other side's rows (all pairs are built for
//! the whole batch and the condition is evaluated once over them), then stored if it can still
//! match later. Without `*-until` a side is kept for good: a regular join. An interval join is
//! a join whose condition and retention follow from its bounds.

use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch, UInt32Array};
use arrow_schema::{Field, Schema, SchemaRef};
use arrow_select::filter::filter_record_batch;
use arrow_select::take::take;
use weir_state::{KeyedStateBackend, MapId, NO_NAMESPACE, TimeDomain};

use super::keyed::{KeyEncoder, RowCodec};
use crate::api::Operator;
use crate::api::OperatorError;
use crate::api::time::event_times;
use crate::expr::Expr;

/// The schema of joined rows: left columns as `left_as.name`, right ones as `right_as.name`,
/// then `extra`.
pub fn joined_schema(
    left: &Schema,
    left_as: &str,
    right: &Schema,
    right_as: &str,
    extra: &[Field],
) -> SchemaRef {
    let prefixed = |s: &Schema, alias: &str| -> Vec<Field> {
        s.fields()
            .iter()
            .map(|f| Field::new(format!("{alias}.{}", f.name()), f.data_type().clone(), true))
            .collect()
    };
    let mut fields = prefixed(left, left_as);
    fields.extend(prefixed(right, right_as));
    fields.extend(extra.iter().cloned());
    Arc::new(Schema::new(fields))
}

/// Output columns of a join: expressions over joined rows, with their schema.
pub struct Projection {
    pub exprs: Vec<Expr>,
    pub schema: SchemaRef,
}

impl Projection {
    pub fn apply(&self, joined: &RecordBatch) -> Result<RecordBatch, OperatorError> {
        let columns = self
            .exprs
            .iter()
            .map(|e| e.evaluate(joined).map_err(OperatorError::from))
            .collect::<Result<Vec<_>, _>>()?;
        let options =
            arrow_array::RecordBatchOptions::new().with_row_count(Some(joined.num_rows()));
        Ok(RecordBatch::try_new_with_options(
            self.schema.clone(),
            columns,
            &options,
        )?)
    }
}

/// What a join is, shared by its subtasks.
pub struct JoinDef {
    /// Per side: the schema of the rows kept (the input's columns in `keep`).
    pub inputs: [SchemaRef; 2],
    /// Per side: the input columns the condition and output read; only these are stored.
    pub keep: [Vec<usize>; 2],
    /// Per side: when a stored row can no longer match (`None`: never).
    pub until: [Option<Expr>; 2],
    pub joined: SchemaRef,
    pub condition: Option<Expr>,
    pub projection: Projection,
}

pub struct Join {
    def: Arc<JoinDef>,
    keys: [KeyEncoder; 2],
    rows: [RowCodec; 2],
    state: KeyedStateBackend,
    /// Per side: (retain-until, arrival number) → encoded row.
    sides: [MapId<(i64, i64), Vec<u8>>; 2],
    arrivals: i64,
    watermark: i64,
}

impl Join {
    pub fn new(
        def: Arc<JoinDef>,
        keys: [KeyEncoder; 2],
        mut state: KeyedStateBackend,
    ) -> Result<Self, OperatorError> {
        let sides = [state.map_state("left")?, state.map_state("right")?];
        Ok(Self {
            rows: [
                RowCodec::new(def.inputs[0].clone())?,
                RowCodec::new(def.inputs[1].clone())?,
            ],
            def,
            keys,
            state,
            sides,
            arrivals: 0,
            watermark: i64::MIN,
        })
    }

    /// Continues the arrival numbering of a restored run past every old subtask's, so a new
    /// row never takes the place of a restored one.
    pub fn restored(mut self, restore: Option<&crate::api::SubtaskRestore>) -> Self {
        if let Some(r) = restore {
            self.arrivals = r
                .own_states()
                .filter_map(|v| v.get("arrivals")?.as_i64())
                .max()
                .unwrap_or(0);
        }
        self
    }
}

/// Builds joined rows from `this` side's batch rows and the other side's encoded rows.
pub fn pair_batch(
    joined: &SchemaRef,
    side: usize,
    batch: &RecordBatch,
    this_rows: Vec<u32>,
    other_codec: &RowCodec,
    other_rows: &[Vec<u8>],
    extra: Vec<ArrayRef>,
) -> Result<RecordBatch, OperatorError> {
    let index = UInt32Array::from(this_rows);
    let this: Vec<ArrayRef> = batch
        .columns()
        .iter()
        .map(|c| take(c.as_ref(), &index, None))
        .collect::<Result<_, _>>()?;
    let other = other_codec.decode(other_rows.iter().map(Vec::as_slice))?;
    let mut columns = if side == 0 {
        this.clone()
    } else {
        other.columns().to_vec()
    };
    columns.extend(if side == 0 {
        other.columns().to_vec()
    } else {
        this
    });
    columns.extend(extra);
    let options = arrow_array::RecordBatchOptions::new().with_row_count(Some(index.len()));
    Ok(RecordBatch::try_new_with_options(
        joined.clone(),
        columns,
        &options,
    )?)
}

/// Keeps the rows of `joined` where `condition` holds.
pub fn filter(joined: RecordBatch, condition: Option<&Expr>) -> Result<RecordBatch, OperatorError> {
    let Some(c) = condition else {
        return Ok(joined);
    };
    let mask = c.evaluate(&joined)?;
    let mask = mask
        .as_any()
        .downcast_ref::<arrow_array::BooleanArray>()
        .ok_or_else(|| OperatorError::Internal("join condition is not BOOL".into()))?;
    Ok(filter_record_batch(&joined, mask)?)
}

impl Operator for Join {
    fn keyed_state(&mut self) -> Option<&mut KeyedStateBackend> {
        Some(&mut self.state)
    }

    fn snapshot_state(&mut self) -> Result<Option<serde_json::Value>, OperatorError> {
        Ok(Some(serde_json::json!({ "arrivals": self.arrivals })))
    }

    fn process_batch(
        &mut self,
        input: usize,
        batch: RecordBatch,
        out: &mut Vec<RecordBatch>,
    ) -> Result<(), OperatorError> {
        let side = input.min(1);
        let other = 1 - side;
        let keys = self.keys[side].encode(&batch)?;
        let until = match &self.def.until[side] {
            Some(e) => Some(event_times(&e.evaluate(&batch)?)?),
            None => None,
        };
        let batch = batch.project(&self.def.keep[side])?;
        let rows = self.rows[side].encode(&batch)?;
        let mut this_rows = Vec::new();
        let mut other_rows = Vec::new();
        for row in 0..batch.num_rows() {
            let key = keys.key(row);
            self.state
                .map(&self.sides[other])
                .with(key, NO_NAMESPACE, |entries| {
                    for (_, r) in entries {
                        this_rows.push(row as u32);
                        other_rows.push(r.clone());
                    }
                })?;
            let keep_until = match &until {
                None => i64::MAX,
                Some(u) => match u[row] {
                    Some(t) => t,
                    None => continue,
                },
            };
            if keep_until <= self.watermark {
                // It could only match rows that are already gone.
                continue;
            }
            self.arrivals += 1;
            let earliest = self.state.map(&self.sides[side]).put_after_first_key(
                key,
                NO_NAMESPACE,
                (keep_until, self.arrivals),
                rows.row(row).data().to_vec(),
            )?;
            // One cleanup timer per key and side, at the earliest time a stored row expires;
            // rows arriving in time order never move it, so they cost no timer operation.
            if keep_until < i64::MAX {
                let ns = [side as u8];
                match earliest {
                    Some((t, _)) if t <= keep_until => {}
                    Some((t, _)) => {
                        let mut timers = self.state.timers();
                        timers.delete(TimeDomain::EventTime, t, key, &ns)?;
                        timers.set(TimeDomain::EventTime, keep_until, key, &ns, None)?;
                    }
                    None => {
                        self.state.timers().set(
                            TimeDomain::EventTime,
                            keep_until,
                            key,
                            &ns,
                            None,
                        )?;
                    }
                }
            }
        }
        if !this_rows.is_empty() {
            let joined = pair_batch(
                &self.def.joined,
                side,
                &batch,
                this_rows,
                &self.rows[other],
                &other_rows,
                Vec::new(),
            )?;
            let kept = filter(joined, self.def.condition.as_ref())?;
            if kept.num_rows() > 0 {
                out.push(self.def.projection.apply(&kept)?);
            }
        }
        Ok(())
    }

    fn process_watermark(
        &mut self,
        watermark: i64,
        _out: &mut Vec<RecordBatch>,
    ) -> Result<i64, OperatorError> {
        self.watermark = watermark;
        while let Some(timer) = self
            .state
            .timers()
            .pop_due(TimeDomain::EventTime, watermark)?
        {
            let side = usize::from(timer.namespace.first().copied().unwrap_or(0)).min(1);
            let mut side_state = self.state.map(&self.sides[side]);
            side_state.take_while(timer.key(), NO_NAMESPACE, |(until, _)| *until <= watermark)?;
            // The next row to expire takes over the key's cleanup timer.
            let next = side_state.first_key(timer.key(), NO_NAMESPACE)?;
            if let Some((until, _)) = next {
                self.state.timers().set(
                    TimeDomain::EventTime,
                    until,
                    timer.key(),
                    &timer.namespace,
                    None,
                )?;
            }
        }
        Ok(watermark)
    }
}
