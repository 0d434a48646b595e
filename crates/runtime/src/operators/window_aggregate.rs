//! `window-aggregate`: aggregates per key and event-time window.
//!
//! Tumbling and sliding windows keep one set of accumulators per (key, window) in value state,
//! namespaced by the window, with an event-time timer at the window's last instant. Sessions
//! keep a key's open sessions in one value state; a record opens `[t, t + gap)` and merges every
//! session it touches (so a late record can bridge two). When the watermark reaches a window's
//! end its result is emitted and, without allowed lateness, its state cleared. With allowed
//! lateness the state stays until `end + lateness`: late records update it and re-emit the
//! window; records later than that are dropped and counted.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use arrow_array::{ArrayRef, RecordBatch, TimestampMillisecondArray};
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use weir_state::{
    AggregatingId, KeyRef, KeyedStateBackend, NO_NAMESPACE, TimeDomain, ValueId, Window,
};

use super::accumulators::{
    Acc, Accumulators, AggCall, evaluate_all, merge_all, new_accs, result_columns, update_all,
};
use super::keyed::KeyEncoder;
use super::local_aggregate::{partial_at, partial_column};
use super::window::Windowing;
use crate::api::Operator;
use crate::api::time::event_times;
use crate::api::{OperatorError, SubtaskMetrics};
use crate::expr::Expr;

/// A session: its window and its accumulators.
type Session = (i64, i64, Vec<Acc>);

/// What a window aggregate is, shared by its subtasks.
pub struct WindowAggregateDef {
    pub time: Expr,
    pub windowing: Windowing,
    pub lateness: i64,
    pub aggs: Accumulators,
    pub schema: SchemaRef,
}

impl WindowAggregateDef {
    /// Key columns, `window_start`, `window_end`, then the aggregates.
    pub fn output_schema(
        keys: &crate::keys::KeySelector,
        names: &[String],
        calls: &[AggCall],
    ) -> SchemaRef {
        let ts = DataType::Timestamp(TimeUnit::Millisecond, None);
        let mut fields: Vec<Field> = keys
            .names()
            .iter()
            .zip(keys.exprs())
            .map(|(n, e)| Field::new(n, e.data_type().clone(), true))
            .collect();
        fields.push(Field::new("window_start", ts.clone(), true));
        fields.push(Field::new("window_end", ts, true));
        fields.extend(
            names
                .iter()
                .zip(calls)
                .map(|(n, c)| Field::new(n, c.data_type.clone(), true)),
        );
        Arc::new(Schema::new(fields))
    }
}

pub struct WindowAggregate {
    def: Arc<WindowAggregateDef>,
    keys: KeyEncoder,
    state: KeyedStateBackend,
    windows_state: AggregatingId<Accumulators>,
    sessions_state: ValueId<Vec<Session>>,
    watermark: i64,
    metrics: Arc<SubtaskMetrics>,
    scratch: Vec<Window>,
    /// Results waiting to be emitted: (key, window, accumulators).
    pending: Vec<(Box<[u8]>, Window, Vec<Acc>)>,
    /// The global phase of two-phase aggregation: the input is partials
    /// ([`super::local_aggregate`]), merged into their windows rather than added.
    partials: bool,
}

impl WindowAggregate {
    pub fn new(
        def: Arc<WindowAggregateDef>,
        keys: KeyEncoder,
        mut state: KeyedStateBackend,
        metrics: Arc<SubtaskMetrics>,
    ) -> Result<Self, OperatorError> {
        let windows_state = state.aggregating_state("windows")?;
        let sessions_state = state.value_state("sessions")?;
        Ok(Self {
            def,
            keys,
            state,
            windows_state,
            sessions_state,
            watermark: i64::MIN,
            metrics,
            scratch: Vec::new(),
            pending: Vec::new(),
            partials: false,
        })
    }

    /// With `partials`, makes this the global phase of a two-phase aggregation (tumbling or
    /// sliding windows): it reads the partials of [`super::local_aggregate::LocalAggregate`],
    /// keyed by the phase's `partial_keys`, which `keys` must then be.
    pub fn merging_partials(mut self, partials: bool) -> Self {
        self.partials = partials;
        self
    }

    fn late(&self, window: &Window) -> bool {
        window.max_timestamp().saturating_add(self.def.lateness) <= self.watermark
    }

    fn set_timers(&mut self, key: KeyRef<'_>, window: &Window) -> Result<(), OperatorError> {
        let ns = window.to_namespace();
        let mut timers = self.state.timers();
        timers.set(
            TimeDomain::EventTime,
            window.max_timestamp(),
            key,
            &ns,
            None,
        )?;
        if self.def.lateness > 0 {
            timers.set(
                TimeDomain::EventTime,
                window.max_timestamp().saturating_add(self.def.lateness),
                key,
                &ns,
                None,
            )?;
        }
        Ok(())
    }

    fn delete_timers(&mut self, key: KeyRef<'_>, window: &Window) -> Result<(), OperatorError> {
        let ns = window.to_namespace();
        let mut timers = self.state.timers();
        timers.delete(TimeDomain::EventTime, window.max_timestamp(), key, &ns)?;
        if self.def.lateness > 0 {
            timers.delete(
                TimeDomain::EventTime,
                window.max_timestamp().saturating_add(self.def.lateness),
                key,
                &ns,
            )?;
        }
        Ok(())
    }

    fn add_to_windows(
        &mut self,
        key: KeyRef<'_>,
        t: i64,
        args: &[Vec<ArrayRef>],
        row: usize,
    ) -> Result<bool, OperatorError> {
        let mut windows = std::mem::take(&mut self.scratch);
        self.def.windowing.assign(t, &mut windows);
        let mut live = false;
        for w in &windows {
            if self.late(w) {
                continue;
            }
            live = true;
            let created = self
                .state
                .aggregating(&self.windows_state, &self.def.aggs)
                .add(key, &w.to_namespace(), (args, row))??;
            self.updated(key, w, created)?;
        }
        self.scratch = windows;
        Ok(live)
    }

    /// Merges a partial of the local phase into its window, unless the window is late; says
    /// whether it was live.
    fn merge_partial(
        &mut self,
        key: KeyRef<'_>,
        w: &Window,
        accs: Vec<Acc>,
    ) -> Result<bool, OperatorError> {
        if self.late(w) {
            return Ok(false);
        }
        let created = self
            .state
            .aggregating(&self.windows_state, &self.def.aggs)
            .merge(key, &w.to_namespace(), &accs)??;
        self.updated(key, w, created)?;
        Ok(true)
    }

    /// After window `w` of `key` changed: its timers if the change created it, and a re-emit if
    /// it already fired.
    fn updated(&mut self, key: KeyRef<'_>, w: &Window, created: bool) -> Result<(), OperatorError> {
        let refire = if w.max_timestamp() <= self.watermark {
            self.state
                .aggregating(&self.windows_state, &self.def.aggs)
                .accumulator(key, &w.to_namespace())?
        } else {
            None
        };
        if created {
            self.set_timers(key, w)?;
        }
        if let Some(accs) = refire {
            self.pending.push((key.bytes.into(), *w, accs));
        }
        Ok(())
    }

    /// The global phase's batch: partials of the local phase, one per (key, window).
    fn process_partials(&mut self, batch: &RecordBatch) -> Result<u64, OperatorError> {
        use arrow_array::cast::AsArray;
        use arrow_array::types::{Int64Type, TimestampMillisecondType};
        let keys = self.keys.encode(batch)?;
        let n = self.keys.selector().names().len();
        let column = |i: usize| {
            batch.columns().get(i).ok_or_else(|| {
                OperatorError::Internal("a partials batch lacks its window columns".into())
            })
        };
        let starts = column(n)?.as_primitive::<TimestampMillisecondType>();
        let ends = column(n + 1)?.as_primitive::<TimestampMillisecondType>();
        let records = column(n + 2)?.as_primitive::<Int64Type>();
        let partials = partial_column(batch)?;
        let mut dropped = 0u64;
        for row in 0..batch.num_rows() {
            let w = Window::new(starts.value(row), ends.value(row));
            if !self.merge_partial(keys.key(row), &w, partial_at(partials, row)?)? {
                dropped += u64::try_from(records.value(row)).unwrap_or(0);
            }
        }
        Ok(dropped)
    }

    fn add_to_sessions(
        &mut self,
        key: KeyRef<'_>,
        t: i64,
        args: &[Vec<ArrayRef>],
        row: usize,
    ) -> Result<bool, OperatorError> {
        let Windowing::Session { gap } = self.def.windowing else {
            return Ok(false);
        };
        let own = Window::new(t, t.saturating_add(gap));
        if self.late(&own) {
            return Ok(false);
        }
        let calls = &self.def.aggs.calls;
        let mut fresh = new_accs(calls);
        update_all(&mut fresh, calls, args, row)?;
        let watermark = self.watermark;
        let (merged_away, merged, fired) = self.state.value(&self.sessions_state).update(
            key,
            NO_NAMESPACE,
            |sessions| -> Result<_, OperatorError> {
                let list = sessions.get_or_insert_with(Vec::new);
                let mut window = own;
                let mut accs = fresh;
                let mut merged_away = Vec::new();
                let mut kept = Vec::with_capacity(list.len());
                for (start, end, other) in list.drain(..) {
                    let w = Window::new(start, end);
                    if w.touches(&own) {
                        window = window.cover(&w);
                        merge_all(&mut accs, calls, &other)?;
                        merged_away.push(w);
                    } else {
                        kept.push((start, end, other));
                    }
                }
                let fired = (window.max_timestamp() <= watermark).then(|| accs.clone());
                kept.push((window.start, window.end, accs));
                kept.sort_by_key(|s| s.0);
                *list = kept;
                Ok((merged_away, window, fired))
            },
        )??;
        for w in &merged_away {
            if *w != merged {
                self.delete_timers(key, w)?;
            }
        }
        if !merged_away.contains(&merged) {
            self.set_timers(key, &merged)?;
        }
        if let Some(accs) = fired {
            self.pending.push((key.bytes.into(), merged, accs));
        }
        Ok(true)
    }

    fn on_timer(&mut self, timer: weir_state::Timer) -> Result<(), OperatorError> {
        let window = Window::from_namespace(&timer.namespace).map_err(OperatorError::Internal)?;
        let key = timer.key();
        let fire = timer.time == window.max_timestamp();
        let cleanup = timer.time == window.max_timestamp().saturating_add(self.def.lateness);
        if self.def.windowing.is_session() {
            let found =
                self.state
                    .value(&self.sessions_state)
                    .update(key, NO_NAMESPACE, |sessions| {
                        let list = sessions.as_mut()?;
                        let i = list
                            .iter()
                            .position(|s| s.0 == window.start && s.1 == window.end)?;
                        let accs = if cleanup {
                            list.remove(i).2
                        } else {
                            list[i].2.clone()
                        };
                        if list.is_empty() {
                            *sessions = None;
                        }
                        Some(accs)
                    })?;
            if let (true, Some(accs)) = (fire, found) {
                self.pending.push((timer.key.clone(), window, accs));
            }
            return Ok(());
        }
        let ns = &timer.namespace;
        let mut view = self.state.aggregating(&self.windows_state, &self.def.aggs);
        let accs = view.accumulator(key, ns)?;
        if cleanup {
            view.take(key, ns)?;
        }
        if let (true, Some(accs)) = (fire, accs) {
            self.pending.push((timer.key.clone(), window, accs));
        }
        Ok(())
    }

    fn emit(&mut self, out: &mut Vec<RecordBatch>) -> Result<(), OperatorError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let pending = std::mem::take(&mut self.pending);
        let mut columns = self.keys.decode(pending.iter().map(|(k, _, _)| &k[..]))?;
        let starts: TimestampMillisecondArray =
            pending.iter().map(|(_, w, _)| Some(w.start)).collect();
        let ends: TimestampMillisecondArray = pending.iter().map(|(_, w, _)| Some(w.end)).collect();
        columns.push(Arc::new(starts));
        columns.push(Arc::new(ends));
        columns.extend(result_columns(
            &self.def.aggs.calls,
            pending.iter().map(|(_, _, accs)| accs.as_slice()),
        )?);
        out.push(RecordBatch::try_new(self.def.schema.clone(), columns)?);
        Ok(())
    }
}

impl Operator for WindowAggregate {
    fn keyed_state(&mut self) -> Option<&mut KeyedStateBackend> {
        Some(&mut self.state)
    }

    fn process_batch(
        &mut self,
        _input: usize,
        batch: RecordBatch,
        out: &mut Vec<RecordBatch>,
    ) -> Result<(), OperatorError> {
        if self.partials {
            let dropped = self.process_partials(&batch)?;
            if dropped > 0 {
                self.metrics
                    .late_dropped
                    .fetch_add(dropped, Ordering::Relaxed);
            }
            return self.emit(out);
        }
        let keys = self.keys.encode(&batch)?;
        let times = event_times(&self.def.time.evaluate(&batch)?)?;
        let args = evaluate_all(&self.def.aggs.calls, &batch)?;
        let mut dropped = 0u64;
        for (row, t) in times.iter().enumerate() {
            let Some(t) = *t else {
                dropped += 1;
                continue;
            };
            let key = keys.key(row);
            let live = if self.def.windowing.is_session() {
                self.add_to_sessions(key, t, &args, row)?
            } else {
                self.add_to_windows(key, t, &args, row)?
            };
            if !live {
                dropped += 1;
            }
        }
        if dropped > 0 {
            self.metrics
                .late_dropped
                .fetch_add(dropped, Ordering::Relaxed);
        }
        self.emit(out)
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
            self.on_timer(timer)?;
            if self.pending.len() >= 4096 {
                self.emit(out)?;
            }
        }
        self.emit(out)?;
        Ok(self.state.timers().output_watermark(watermark))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use arrow_array::cast::AsArray;
    use arrow_array::types::{Int64Type, TimestampMillisecondType};
    use arrow_array::{Int64Array, StringArray};
    use weir_state::key_groups::KeyGroupRange;

    use super::*;
    use crate::keys::KeySelector;
    use crate::spec::{HumanDuration, WindowSpec};

    fn input_schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("k", DataType::Utf8, true),
            Field::new("t", DataType::Timestamp(TimeUnit::Millisecond, None), true),
            Field::new("v", DataType::Int64, true),
        ]))
    }

    /// The backends every test runs on: the heap, and RocksDB with a 2-entry cache (so state
    /// really goes through the store).
    fn backends() -> Vec<(&'static str, Option<tempfile::TempDir>)> {
        vec![
            ("heap", None),
            ("rocksdb", Some(tempfile::tempdir().unwrap())),
        ]
    }

    fn backend(dir: &Option<tempfile::TempDir>) -> KeyedStateBackend {
        let range = KeyGroupRange::of_subtask(0, 128, 1);
        match dir {
            None => KeyedStateBackend::heap(128, range),
            Some(d) => KeyedStateBackend::rocksdb(
                128,
                range,
                weir_state::RocksConfig {
                    path: d.path().join("db"),
                    block_cache: weir_state::RocksConfig::shared_block_cache(1 << 20),
                    write_buffer: 1 << 20,
                    compression: weir_state::Compression::None,
                    cache_entries: 2,
                },
            )
            .unwrap(),
        }
    }

    fn operator(
        window: WindowSpec,
        lateness: i64,
        dir: &Option<tempfile::TempDir>,
    ) -> (WindowAggregate, Arc<SubtaskMetrics>) {
        let schema = input_schema();
        let keys = Arc::new(KeySelector::new(
            vec![Expr::compile("k", &schema).unwrap()],
            vec!["k".into()],
            128,
        ));
        let calls: Vec<AggCall> = ["count(*)", "sum(v)"]
            .iter()
            .map(|s| AggCall::compile(s, &schema).unwrap())
            .collect();
        let out = WindowAggregateDef::output_schema(&keys, &["n".into(), "total".into()], &calls);
        let def = Arc::new(WindowAggregateDef {
            time: Expr::compile("t", &schema).unwrap(),
            windowing: Windowing::from_spec(&window).unwrap(),
            lateness,
            aggs: Accumulators { calls },
            schema: out,
        });
        let metrics = Arc::new(SubtaskMetrics::default());
        let state = backend(dir);
        let op = WindowAggregate::new(def, KeyEncoder::new(keys).unwrap(), state, metrics.clone())
            .unwrap();
        (op, metrics)
    }

    fn batch(rows: &[(&str, i64, i64)]) -> RecordBatch {
        RecordBatch::try_new(
            input_schema(),
            vec![
                Arc::new(StringArray::from(
                    rows.iter().map(|r| r.0).collect::<Vec<_>>(),
                )),
                Arc::new(TimestampMillisecondArray::from(
                    rows.iter().map(|r| r.1).collect::<Vec<_>>(),
                )),
                Arc::new(Int64Array::from(
                    rows.iter().map(|r| r.2).collect::<Vec<_>>(),
                )),
            ],
        )
        .unwrap()
    }

    /// (key, start, end, count, sum) of every output row.
    fn rows(out: &[RecordBatch]) -> Vec<(String, i64, i64, i64, i64)> {
        let mut v = Vec::new();
        for b in out {
            for i in 0..b.num_rows() {
                v.push((
                    b.column(0).as_string::<i32>().value(i).to_string(),
                    b.column(1)
                        .as_primitive::<TimestampMillisecondType>()
                        .value(i),
                    b.column(2)
                        .as_primitive::<TimestampMillisecondType>()
                        .value(i),
                    b.column(3).as_primitive::<Int64Type>().value(i),
                    b.column(4).as_primitive::<Int64Type>().value(i),
                ));
            }
        }
        v
    }

    fn tumbling(ms: u64) -> WindowSpec {
        WindowSpec::Tumbling {
            size: HumanDuration::from_millis(ms),
        }
    }

    #[test]
    fn windows_fire_when_the_watermark_reaches_their_end_and_empty_ones_never() {
        for (name, dir) in backends() {
            let (mut op, _) = operator(tumbling(10), 0, &dir);
            let mut out = Vec::new();
            op.process_batch(
                0,
                batch(&[("a", 1, 1), ("a", 5, 2), ("b", 12, 10), ("a", 35, 4)]),
                &mut out,
            )
            .unwrap();
            assert!(out.is_empty());
            op.process_watermark(8, &mut out).unwrap();
            assert!(out.is_empty(), "[0, 10) is complete only at 9");
            op.process_watermark(9, &mut out).unwrap();
            assert_eq!(rows(&out), vec![("a".into(), 0, 10, 2, 3)]);
            out.clear();
            // One watermark jumps over several windows: each fires once, in time order; the empty
            // window [20, 30) produces nothing.
            op.process_watermark(1_000, &mut out).unwrap();
            assert_eq!(
                rows(&out),
                vec![("b".into(), 10, 20, 1, 10), ("a".into(), 30, 40, 1, 4)]
            );
            assert_eq!(
                op.state.entries(),
                0,
                "{name}: fired windows leave no state"
            );
            assert!(op.state.timers().is_empty().unwrap());
        }
    }

    #[test]
    fn late_records_within_lateness_update_and_re_emit_and_later_ones_are_dropped() {
        for (name, dir) in backends() {
            let (mut op, metrics) = operator(tumbling(10), 5, &dir);
            let mut out = Vec::new();
            op.process_batch(0, batch(&[("a", 3, 1)]), &mut out)
                .unwrap();
            op.process_watermark(9, &mut out).unwrap();
            assert_eq!(rows(&out), vec![("a".into(), 0, 10, 1, 1)]);
            out.clear();
            // Late but within 5 ms of the window's end (9 + 5 = 14 > watermark 12): updates, re-emits.
            op.process_watermark(12, &mut out).unwrap();
            op.process_batch(0, batch(&[("a", 7, 2)]), &mut out)
                .unwrap();
            assert_eq!(rows(&out), vec![("a".into(), 0, 10, 2, 3)]);
            out.clear();
            // The state is cleaned up at 14; after that the window is gone and late records drop.
            op.process_watermark(14, &mut out).unwrap();
            assert!(out.is_empty());
            op.process_batch(0, batch(&[("a", 8, 100)]), &mut out)
                .unwrap();
            assert!(out.is_empty());
            assert_eq!(metrics.late_dropped.load(Ordering::Relaxed), 1, "{name}");
            assert_eq!(op.state.entries(), 0);
        }
    }

    #[test]
    fn a_late_record_bridging_two_sessions_merges_them() {
        let session = || WindowSpec::Session {
            gap: HumanDuration::from_millis(10),
        };
        for (name, dir) in backends() {
            let (mut op, _) = operator(session(), 0, &dir);
            let mut out = Vec::new();
            // Sessions [0, 10) and [15, 25) are apart; a record at 8 (arriving later) touches
            // both.
            op.process_batch(0, batch(&[("a", 0, 1), ("a", 15, 2)]), &mut out)
                .unwrap();
            op.process_batch(0, batch(&[("a", 8, 4)]), &mut out)
                .unwrap();
            op.process_watermark(i64::MAX, &mut out).unwrap();
            assert_eq!(rows(&out), vec![("a".into(), 0, 25, 3, 7)], "{name}");
        }
        for (name, dir) in backends() {
            // Exactly the gap apart still merges (touching windows), one more splits.
            let (mut op, _) = operator(session(), 0, &dir);
            let mut out = Vec::new();
            op.process_batch(
                0,
                batch(&[("b", 0, 1), ("b", 10, 1), ("b", 31, 1)]),
                &mut out,
            )
            .unwrap();
            op.process_watermark(i64::MAX, &mut out).unwrap();
            assert_eq!(
                rows(&out),
                vec![("b".into(), 0, 20, 2, 2), ("b".into(), 31, 41, 1, 1)],
                "{name}"
            );
            assert_eq!(op.state.entries(), 0);
        }
    }

    #[test]
    fn sliding_windows_count_each_record_in_every_window_holding_it() {
        let spec = WindowSpec::Sliding {
            size: HumanDuration::from_millis(10),
            slide: HumanDuration::from_millis(5),
        };
        for (name, dir) in backends() {
            let (mut op, _) = operator(spec.clone(), 0, &dir);
            let mut out = Vec::new();
            op.process_batch(0, batch(&[("a", 7, 1), ("a", 12, 1)]), &mut out)
                .unwrap();
            op.process_watermark(i64::MAX, &mut out).unwrap();
            let got: BTreeMap<(i64, i64), i64> =
                rows(&out).into_iter().map(|r| ((r.1, r.2), r.3)).collect();
            let expected: BTreeMap<(i64, i64), i64> =
                [((0, 10), 1), ((5, 15), 2), ((10, 20), 1)].into();
            assert_eq!(got, expected, "{name}");
        }
    }
}
