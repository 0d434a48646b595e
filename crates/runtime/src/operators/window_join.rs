//! `window-join`: pairs of rows with equal keys in the same event-time window.
//!
//! Each side's rows wait in list state per (key, window); when the watermark reaches the
//! window's end both lists are taken and joined, and the window's state is gone. `inner`
//! emits every matching pair; `semi` emits each left row with at least one match once.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use arrow_array::{Array, ArrayRef, BooleanArray, RecordBatch, TimestampMillisecondArray};
use weir_state::{KeyedStateBackend, ListId, TimeDomain, Window};

use super::join::{Projection, filter};
use super::keyed::{KeyEncoder, RowCodec};
use super::window::Windowing;
use crate::api::Operator;
use crate::api::time::event_times;
use crate::api::{OperatorError, SubtaskMetrics};
use crate::expr::Expr;
use crate::spec::JoinMode;

/// What a window join is, shared by its subtasks.
pub struct WindowJoinDef {
    /// Per side: the schema of the rows kept (the input's columns in `keep`).
    pub inputs: [arrow_schema::SchemaRef; 2],
    /// Per side: the input columns the condition and output read; only these are stored.
    pub keep: [Vec<usize>; 2],
    pub times: [Expr; 2],
    pub windowing: Windowing,
    pub mode: JoinMode,
    /// Left columns, right columns, `window_start`, `window_end`.
    pub joined: arrow_schema::SchemaRef,
    pub condition: Option<Expr>,
    pub projection: Projection,
}

pub struct WindowJoin {
    def: Arc<WindowJoinDef>,
    keys: [KeyEncoder; 2],
    rows: [RowCodec; 2],
    state: KeyedStateBackend,
    lists: [ListId<Vec<u8>>; 2],
    watermark: i64,
    metrics: Arc<SubtaskMetrics>,
    scratch: Vec<Window>,
}

impl WindowJoin {
    pub fn new(
        def: Arc<WindowJoinDef>,
        keys: [KeyEncoder; 2],
        mut state: KeyedStateBackend,
        metrics: Arc<SubtaskMetrics>,
    ) -> Result<Self, OperatorError> {
        let lists = [state.list_state("left")?, state.list_state("right")?];
        Ok(Self {
            rows: [
                RowCodec::new(def.inputs[0].clone())?,
                RowCodec::new(def.inputs[1].clone())?,
            ],
            def,
            keys,
            state,
            lists,
            watermark: i64::MIN,
            metrics,
            scratch: Vec::new(),
        })
    }

    /// Joins one window's rows of one key.
    fn join(
        &self,
        window: Window,
        left: &[Vec<u8>],
        right: &[Vec<u8>],
    ) -> Result<Option<RecordBatch>, OperatorError> {
        if left.is_empty() || right.is_empty() {
            return Ok(None);
        }
        let l = self.rows[0].decode(left.iter().map(Vec::as_slice))?;
        let r = self.rows[1].decode(right.iter().map(Vec::as_slice))?;
        let (nl, nr) = (l.num_rows(), r.num_rows());
        let li: arrow_array::UInt32Array = (0..nl as u32)
            .flat_map(|i| std::iter::repeat_n(i, nr))
            .collect();
        let ri: arrow_array::UInt32Array = (0..nl).flat_map(|_| 0..nr as u32).collect();
        let mut columns: Vec<ArrayRef> = Vec::new();
        for c in l.columns() {
            columns.push(arrow_select::take::take(c.as_ref(), &li, None)?);
        }
        for c in r.columns() {
            columns.push(arrow_select::take::take(c.as_ref(), &ri, None)?);
        }
        let n = nl * nr;
        columns.push(Arc::new(TimestampMillisecondArray::from(vec![
            window.start;
            n
        ])));
        columns.push(Arc::new(TimestampMillisecondArray::from(vec![
            window.end;
            n
        ])));
        let pairs = RecordBatch::try_new(self.def.joined.clone(), columns)?;
        let matched = match self.def.mode {
            JoinMode::Inner => filter(pairs, self.def.condition.as_ref())?,
            JoinMode::Semi => {
                // Keep the first matching pair of each left row.
                let ok: Vec<bool> = match &self.def.condition {
                    None => vec![true; n],
                    Some(c) => {
                        let m = c.evaluate(&pairs)?;
                        let m = m.as_any().downcast_ref::<BooleanArray>().ok_or_else(|| {
                            OperatorError::Internal("join condition is not BOOL".into())
                        })?;
                        (0..n).map(|i| m.is_valid(i) && m.value(i)).collect()
                    }
                };
                let mut first = vec![false; n];
                for left_row in 0..nl {
                    if let Some(j) = (0..nr).find(|j| ok[left_row * nr + j]) {
                        first[left_row * nr + j] = true;
                    }
                }
                arrow_select::filter::filter_record_batch(&pairs, &BooleanArray::from(first))?
            }
        };
        Ok((matched.num_rows() > 0).then_some(matched))
    }
}

impl Operator for WindowJoin {
    fn keyed_state(&mut self) -> Option<&mut KeyedStateBackend> {
        Some(&mut self.state)
    }

    fn process_batch(
        &mut self,
        input: usize,
        batch: RecordBatch,
        _out: &mut Vec<RecordBatch>,
    ) -> Result<(), OperatorError> {
        let side = input.min(1);
        let keys = self.keys[side].encode(&batch)?;
        let times = event_times(&self.def.times[side].evaluate(&batch)?)?;
        let rows = self.rows[side].encode(&batch.project(&self.def.keep[side])?)?;
        let mut late = 0u64;
        let mut windows = std::mem::take(&mut self.scratch);
        for (i, t) in times.iter().enumerate() {
            let Some(t) = *t else {
                late += 1;
                continue;
            };
            self.def.windowing.assign(t, &mut windows);
            let key = keys.key(i);
            for w in &windows {
                if w.max_timestamp() <= self.watermark {
                    late += 1;
                    continue;
                }
                let ns = w.to_namespace();
                let row = rows.row(i).data().to_vec();
                let first = self
                    .state
                    .list(&self.lists[side])
                    .update(key, &ns, |list| {
                        list.push(row);
                        list.len() == 1
                    })?;
                if first {
                    self.state.timers().set(
                        TimeDomain::EventTime,
                        w.max_timestamp(),
                        key,
                        &ns,
                        None,
                    )?;
                }
            }
        }
        self.scratch = windows;
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
        while let Some(timer) = self
            .state
            .timers()
            .pop_due(TimeDomain::EventTime, watermark)?
        {
            let window =
                Window::from_namespace(&timer.namespace).map_err(OperatorError::Internal)?;
            let left = self
                .state
                .list(&self.lists[0])
                .take(timer.key(), &timer.namespace)?;
            let right = self
                .state
                .list(&self.lists[1])
                .take(timer.key(), &timer.namespace)?;
            if let Some(joined) = self.join(window, &left, &right)? {
                out.push(self.def.projection.apply(&joined)?);
            }
        }
        Ok(watermark)
    }
}
