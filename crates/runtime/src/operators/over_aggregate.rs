//! `over-aggregate`: for each row, aggregates over that row and the previous `rows - 1` rows of
//! its key, in event-time order (SQL's `OVER (PARTITION BY key ORDER BY t ROWS n PRECEDING)`).
//!
//! Rows may arrive out of order, so each waits in map state, ordered by its sort key, until the
//! watermark reaches its time; then a key's due rows are taken in order, each appended to the
//! key's last-rows list (kept at `rows` entries) and emitted with the aggregates over that list.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use arrow_array::{RecordBatch, UInt32Array};
use arrow_schema::SchemaRef;
use arrow_select::take::take_arrays;
use weir_state::{KeyedStateBackend, MapId, NO_NAMESPACE, TimeDomain, ValueId};

use super::accumulators::{Acc, AggCall, evaluate_all, new_accs, result_columns, update_all};
use super::keyed::{KeyEncoder, RowCodec, SortKeyEncoder};
use crate::api::Operator;
use crate::api::time::event_times;
use crate::api::{OperatorError, SubtaskMetrics};
use crate::expr::Expr;

/// What an over-aggregate is, shared by its subtasks.
pub struct OverAggregateDef {
    /// The first order-by expression: the row's time.
    pub time: Expr,
    /// Every order-by expression with its direction (the time first).
    pub order: Vec<(Expr, bool)>,
    pub rows: usize,
    pub calls: Vec<AggCall>,
    pub input: SchemaRef,
    /// The input columns, then one per aggregate.
    pub schema: SchemaRef,
}

pub struct OverAggregate {
    def: Arc<OverAggregateDef>,
    keys: KeyEncoder,
    rows: RowCodec,
    sort: SortKeyEncoder,
    state: KeyedStateBackend,
    /// Rows waiting for the watermark: (time, sort key) → encoded row.
    waiting: MapId<(i64, Vec<u8>), Vec<u8>>,
    /// The key's last `rows` emitted rows, oldest first.
    last: ValueId<Vec<Vec<u8>>>,
    watermark: i64,
    metrics: Arc<SubtaskMetrics>,
}

impl OverAggregate {
    pub fn new(
        def: Arc<OverAggregateDef>,
        keys: KeyEncoder,
        mut state: KeyedStateBackend,
        metrics: Arc<SubtaskMetrics>,
    ) -> Result<Self, OperatorError> {
        let waiting = state.map_state("waiting")?;
        let last = state.value_state("last")?;
        Ok(Self {
            rows: RowCodec::new(def.input.clone())?,
            sort: SortKeyEncoder::new(def.order.clone())?,
            def,
            keys,
            state,
            waiting,
            last,
            watermark: i64::MIN,
            metrics,
        })
    }
}

impl Operator for OverAggregate {
    fn keyed_state(&mut self) -> Option<&mut KeyedStateBackend> {
        Some(&mut self.state)
    }

    fn process_batch(
        &mut self,
        _input: usize,
        batch: RecordBatch,
        _out: &mut Vec<RecordBatch>,
    ) -> Result<(), OperatorError> {
        let keys = self.keys.encode(&batch)?;
        let rows = self.rows.encode(&batch)?;
        let sort = self.sort.encode(&batch)?;
        let times = event_times(&self.def.time.evaluate(&batch)?)?;
        let mut late = 0u64;
        for (i, t) in times.iter().enumerate() {
            let Some(t) = *t else {
                late += 1;
                continue;
            };
            if t <= self.watermark {
                late += 1;
                continue;
            }
            let key = keys.key(i);
            self.state.map(&self.waiting).put(
                key,
                NO_NAMESPACE,
                (t, sort.row(i).data().to_vec()),
                rows.row(i).data().to_vec(),
            )?;
            self.state
                .timers()
                .set(TimeDomain::EventTime, t, key, NO_NAMESPACE, None)?;
        }
        if late > 0 {
            self.metrics.late_dropped.fetch_add(late, Ordering::Relaxed);
        }
        Ok(())
    }

    fn process_watermark(
        &mut self,
        watermark: i64,
        out: &mut Vec<RecordBatch>,
    ) -> Result<i64, OperatorError> {
        self.watermark = watermark;
        // Every row a due row's window needs, key after key: the key's last rows, then its due
        // rows in order; and per due row, its window as a range of these. They are decoded
        // and their arguments evaluated once for the whole pass, not once per due row.
        let mut rows: Vec<Vec<u8>> = Vec::new();
        let mut windows: Vec<(usize, usize)> = Vec::new();
        while let Some(timer) = self
            .state
            .timers()
            .pop_due(TimeDomain::EventTime, watermark)?
        {
            let key = timer.key();
            let due = self
                .state
                .map(&self.waiting)
                .take_while(key, NO_NAMESPACE, |(t, _)| *t <= timer.time)?;
            if due.is_empty() {
                continue;
            }
            let mut last = self
                .state
                .value(&self.last)
                .remove(key, NO_NAMESPACE)?
                .unwrap_or_default();
            let first = rows.len();
            rows.extend(last.iter().cloned());
            for (_, row) in due {
                last.push(row.clone());
                if last.len() > self.def.rows {
                    last.remove(0);
                }
                rows.push(row);
                windows.push((
                    first.max(rows.len().saturating_sub(self.def.rows)),
                    rows.len(),
                ));
            }
            self.state.value(&self.last).put(key, NO_NAMESPACE, last)?;
        }
        if !windows.is_empty() {
            let batch = self.rows.decode(rows.iter().map(Vec::as_slice))?;
            let args = evaluate_all(&self.def.calls, &batch)?;
            let mut results: Vec<Vec<Acc>> = Vec::with_capacity(windows.len());
            for &(start, end) in &windows {
                let mut accs = new_accs(&self.def.calls);
                for r in start..end {
                    update_all(&mut accs, &self.def.calls, &args, r)?;
                }
                results.push(accs);
            }
            // Each due row is the last of its window.
            let emitted = windows
                .iter()
                .map(|&(_, end)| u32::try_from(end - 1))
                .collect::<Result<UInt32Array, _>>()
                .map_err(|_| {
                    OperatorError::Internal("more than 2^32 rows due in one watermark".into())
                })?;
            let mut columns = take_arrays(batch.columns(), &emitted, None)?;
            columns.extend(result_columns(
                &self.def.calls,
                results.iter().map(Vec::as_slice),
            )?);
            out.push(RecordBatch::try_new(self.def.schema.clone(), columns)?);
        }
        Ok(watermark)
    }
}
