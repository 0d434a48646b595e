//! `window-aggregate`: aggregates per key and event-time window.
//!
//! Tumbling and sliding windows keep one set of accumulators per (key, window) in value state,
//! namespaced by the window, with an event-time timer at the window's last instant. Sessions
//! keep a key's open sessions in one value state; a record opens `[t, t + gap)` and merges every
//! session it touches (so a late record can bridge two). A session that only grows at its end
//! keeps the timer it had, which moves to the new end when it fires ([`WindowAggregate::on_timer`]),
//! so a busy key's records cost no timer each. When the watermark reaches a window's
//! end its result is emitted and, without allowed lateness, its state cleared. With allowed
//! lateness the state stays until `end + lateness`: late records update it and re-emit the
//! window; records later than that are dropped and counted.
//!
//! Sliding windows without allowed lateness are kept as slices instead ([`Windowing::sliced`]):
//! one accumulator per (key, slice of one slide), in `slices`, so a record updates one
//! accumulator rather than `size / slide`. Each slice sets the timers of the windows it is in;
//! when one fires, the window is the merge of its slices, and its first slice, which no later
//! window covers, is removed. Windows kept whole in `windows` by an earlier version of this
//! operator (a checkpoint taken before slicing) are still found and merged when they fire, and
//! the whole-window mode merges slices it finds the same way, so switching between the two
//! across a restore loses nothing.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use arrow_array::{ArrayRef, RecordBatch, TimestampMillisecondArray};
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use weir_state::{
    AggregatingId, AggregatingState, KeyRef, KeyedStateBackend, NO_NAMESPACE, TimeDomain, ValueId,
    Window,
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

/// What a record did to its key's sessions, for their timers.
enum SessionChange {
    /// One session, `before`, grew to cover the record.
    Grew(Window),
    /// These sessions (none for a record apart from all) merged with the record's own.
    Merged(Vec<Window>),
}

/// What a session's timer found when it fired.
enum SessionTimer {
    /// The session ends where the timer's window does: its accumulators.
    Due(Vec<Acc>),
    /// The session grew at its end since the timer was set: its window now.
    Grown(Window),
}

/// What a window aggregate is, shared by its subtasks.
pub struct WindowAggregateDef {
    pub time: Expr,
    pub windowing: Windowing,
    pub lateness: i64,
    pub aggs: Accumulators,
    pub schema: SchemaRef,
    /// Keep the windows as slices ([`Windowing::sliced`]); the planner decides.
    pub sliced: bool,
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

/// The windows' (or slices') accumulators, as a record or a partial is folded in.
type Aggregating<'a> = AggregatingState<'a, Accumulators>;

pub struct WindowAggregate {
    def: Arc<WindowAggregateDef>,
    keys: KeyEncoder,
    state: KeyedStateBackend,
    windows_state: AggregatingId<Accumulators>,
    slices_state: AggregatingId<Accumulators>,
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
        let slices_state = state.aggregating_state("slices")?;
        let sessions_state = state.value_state("sessions")?;
        Ok(Self {
            def,
            keys,
            state,
            windows_state,
            slices_state,
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
        let add = |state: &mut Aggregating<'_>, ns: &[u8]| -> Result<bool, OperatorError> {
            state.add(key, ns, (args, row))?
        };
        if self.def.sliced {
            return match self.def.windowing.slice(t) {
                Some(slice) => self.fold_into(key, &slice, add),
                None => Ok(false),
            };
        }
        let mut windows = std::mem::take(&mut self.scratch);
        self.def.windowing.assign(t, &mut windows);
        let mut live = false;
        for w in &windows {
            live |= self.fold_into(key, w, add)?;
        }
        self.scratch = windows;
        Ok(live)
    }

    /// Merges a partial of the local phase into its window (its slice, when sliced), unless
    /// that is late; says whether it was live.
    fn merge_partial(
        &mut self,
        key: KeyRef<'_>,
        w: &Window,
        accs: Vec<Acc>,
    ) -> Result<bool, OperatorError> {
        self.fold_into(key, w, |state, ns| state.merge(key, ns, &accs)?)
    }

    /// Folds a record or a partial (`fold`, given the state and the namespace) into window `w`
    /// of `key`, or into slice `w` when sliced, unless it is late (a slice is late when its
    /// last window is); says whether it was live.
    fn fold_into(
        &mut self,
        key: KeyRef<'_>,
        w: &Window,
        fold: impl FnOnce(&mut Aggregating<'_>, &[u8]) -> Result<bool, OperatorError>,
    ) -> Result<bool, OperatorError> {
        let sliced = self.def.sliced;
        let last = if sliced {
            self.def.windowing.last_window_of(w)
        } else {
            *w
        };
        if self.late(&last) {
            return Ok(false);
        }
        let id = if sliced {
            &self.slices_state
        } else {
            &self.windows_state
        };
        let created = fold(
            &mut self.state.aggregating(id, &self.def.aggs),
            &w.to_namespace(),
        )?;
        if !sliced {
            self.updated(key, w, created)?;
        } else if created {
            self.set_slice_timers(key, w)?;
        }
        Ok(true)
    }

    /// A new slice: the timer of the first window holding it that has not fired yet. The
    /// windows after it are chained: when a window fires and a slice other than its first is
    /// still there, it sets the next window's timer ([`Self::on_timer`]). So a slice costs one
    /// timer, not one per window, and a key's timers are one per window it has data in.
    fn set_slice_timers(&mut self, key: KeyRef<'_>, slice: &Window) -> Result<(), OperatorError> {
        let mut windows = std::mem::take(&mut self.scratch);
        self.def.windowing.assign(slice.start, &mut windows);
        let first = windows.iter().find(|w| !self.late(w)).copied();
        self.scratch = windows;
        match first {
            Some(w) => self.set_timers(key, &w),
            None => Ok(()),
        }
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
        let (change, merged, fired) = self.state.value(&self.sessions_state).update(
            key,
            NO_NAMESPACE,
            |sessions| -> Result<_, OperatorError> {
                let list = sessions.get_or_insert_with(Vec::new);
                let touches = |s: &(i64, i64, Vec<Acc>)| Window::new(s.0, s.1).touches(&own);
                // The common case, a record in or just after one session of its key: that
                // session grows in place (the same merge as below, without rebuilding the list).
                let mut touching = list.iter().enumerate().filter(|(_, s)| touches(s));
                if let (Some((i, _)), None) = (touching.next(), touching.next()) {
                    let session = &mut list[i];
                    let before = Window::new(session.0, session.1);
                    let window = before.cover(&own);
                    let mut accs = fresh;
                    merge_all(&mut accs, calls, &session.2)?;
                    let fired = (window.max_timestamp() <= watermark).then(|| accs.clone());
                    *session = (window.start, window.end, accs);
                    // Sessions of one key never touch, so growing one keeps the list sorted.
                    return Ok((SessionChange::Grew(before), window, fired));
                }
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
                Ok((SessionChange::Merged(merged_away), window, fired))
            },
        )??;
        match change {
            SessionChange::Grew(before) if before == merged => {}
            // Grown at its end only, and nothing to re-fire at a lateness: its timer stays at
            // the old end, where it finds the session longer and moves to its new end.
            SessionChange::Grew(before)
                if before.start == merged.start && self.def.lateness == 0 => {}
            SessionChange::Grew(before) => {
                self.delete_timers(key, &before)?;
                self.set_timers(key, &merged)?;
            }
            SessionChange::Merged(merged_away) => {
                // A timer left at a merged session's older end (see above) is not deleted: it
                // finds no session that starts where its window did, or finds the one that
                // grew from it, and then moves to that session's end, which already has one.
                for w in &merged_away {
                    if *w != merged {
                        self.delete_timers(key, w)?;
                    }
                }
                if !merged_away.contains(&merged) {
                    self.set_timers(key, &merged)?;
                }
            }
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
                        // Sessions of one key never overlap, so one at most starts here.
                        let i = list.iter().position(|s| s.0 == window.start)?;
                        match list[i].1.cmp(&window.end) {
                            std::cmp::Ordering::Greater => {
                                return Some(SessionTimer::Grown(Window::new(
                                    list[i].0, list[i].1,
                                )));
                            }
                            std::cmp::Ordering::Less => return None,
                            std::cmp::Ordering::Equal => {}
                        }
                        let accs = if cleanup {
                            list.remove(i).2
                        } else {
                            list[i].2.clone()
                        };
                        if list.is_empty() {
                            *sessions = None;
                        }
                        Some(SessionTimer::Due(accs))
                    })?;
            match found {
                Some(SessionTimer::Due(accs)) if fire => {
                    self.pending.push((timer.key[..].into(), window, accs));
                }
                // Its timers move to its end; due already if the watermark passed it, and then
                // fired in this same pass, in order.
                Some(SessionTimer::Grown(grown)) if fire => self.set_timers(key, &grown)?,
                _ => {}
            }
            return Ok(());
        }
        let ns = &timer.namespace;
        let mut view = self.state.aggregating(&self.windows_state, &self.def.aggs);
        let mut accs = if cleanup {
            view.take_accumulator(key, ns)?
        } else {
            view.accumulator(key, ns)?
        };
        if let Some(from_slices) = self.fire_slices(key, &window, fire, cleanup)? {
            match &mut accs {
                Some(accs) => merge_all(accs, &self.def.aggs.calls, &from_slices)?,
                None => accs = Some(from_slices),
            }
        }
        if let (true, Some(accs)) = (fire, accs) {
            self.pending.push((timer.key[..].into(), window, accs));
        }
        Ok(())
    }

    /// A sliding window's timer, for its slices: the merge of those it covers (whichever mode
    /// kept them: a window kept whole may have slices from before a restore), with the next
    /// window's timer chained when a later slice holds data, and the first slice removed at
    /// cleanup. `None` when no slice holds data (and always for other windows).
    fn fire_slices(
        &mut self,
        key: KeyRef<'_>,
        window: &Window,
        fire: bool,
        cleanup: bool,
    ) -> Result<Option<Vec<Acc>>, OperatorError> {
        let Windowing::Sliding { slide, .. } = self.def.windowing else {
            return Ok(None);
        };
        let (merged, more) = self.merge_slices(key, window, cleanup)?;
        if fire && more {
            // A slice after the window's first is still there, so the next window holds
            // data: its timer (due now if the watermark is already past it, and then fired in
            // this same pass, in order).
            let next = Window::new(
                window.start.saturating_add(slide),
                window.end.saturating_add(slide),
            );
            if next != *window {
                self.set_timers(key, &next)?;
            }
        }
        if merged.is_some() && fire && !cleanup {
            // Slices left by the sliced mode, in a window kept whole since: its cleanup timer
            // removes them.
            let at = window.max_timestamp().saturating_add(self.def.lateness);
            self.state.timers().set(
                TimeDomain::EventTime,
                at,
                key,
                &window.to_namespace(),
                None,
            )?;
        }
        Ok(merged)
    }

    /// The merge of the slices window `w` covers, if any has an accumulator, and whether a
    /// slice after the first has one; with `last`, the window is the last one of its first
    /// slice, which is removed.
    fn merge_slices(
        &mut self,
        key: KeyRef<'_>,
        w: &Window,
        last: bool,
    ) -> Result<(Option<Vec<Acc>>, bool), OperatorError> {
        let mut slices = std::mem::take(&mut self.scratch);
        self.def.windowing.slices_of(w, &mut slices);
        let calls = &self.def.aggs.calls;
        let mut view = self.state.aggregating(&self.slices_state, &self.def.aggs);
        let mut merged: Option<Vec<Acc>> = None;
        let mut more = false;
        for (i, slice) in slices.iter().enumerate() {
            let ns = slice.to_namespace();
            if i == 0 && last {
                merged = view.take_accumulator(key, &ns)?;
                continue;
            }
            // Read in place: only the first accumulator found is copied.
            let found = view.with_accumulator(key, &ns, |accs| match (accs, &mut merged) {
                (None, _) => Ok(false),
                (Some(accs), None) => {
                    merged = Some(accs.clone());
                    Ok(true)
                }
                (Some(accs), Some(m)) => merge_all(m, calls, accs).map(|()| true),
            })??;
            more |= found && i > 0;
        }
        self.scratch = slices;
        Ok((merged, more))
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
        let sliced = Windowing::from_spec(&window).unwrap().sliced(lateness);
        operator_on(window, lateness, backend(dir), sliced)
    }

    /// An operator over `state`, keeping its windows as slices or whole.
    fn operator_on(
        window: WindowSpec,
        lateness: i64,
        state: KeyedStateBackend,
        sliced: bool,
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
            sliced,
        });
        let metrics = Arc::new(SubtaskMetrics::default());
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
            assert_drained(&mut op, name);
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

    fn sliding(size: u64, slide: u64) -> WindowSpec {
        WindowSpec::Sliding {
            size: HumanDuration::from_millis(size),
            slide: HumanDuration::from_millis(slide),
        }
    }

    /// Random rows over five keys, times drifting forward with some disorder; xorshift keeps
    /// them the same on every run.
    fn random_rows(seed: u64, n: usize) -> Vec<(String, i64, i64)> {
        let mut x = seed;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut now = 0i64;
        (0..n)
            .map(|_| {
                now += (next() % 4) as i64;
                let t = now - (next() % 50) as i64;
                let key = ["a", "b", "c", "d", "e"][(next() % 5) as usize];
                (key.to_string(), t, (next() % 100) as i64)
            })
            .collect()
    }

    /// (key, start, end) → (count, sum) of the naive computation: a record counts in every
    /// window holding it whose end the watermark had not reached when it came.
    type Naive = BTreeMap<(String, i64, i64), (i64, i64)>;

    fn naive_add(expected: &mut Naive, row: &(String, i64, i64), w: &Windowing, watermark: i64) {
        let mut windows = Vec::new();
        w.assign(row.1, &mut windows);
        for win in windows {
            if win.max_timestamp() > watermark {
                let e = expected
                    .entry((row.0.clone(), win.start, win.end))
                    .or_default();
                e.0 += 1;
                e.1 += row.2;
            }
        }
    }

    /// Feeds `rows` in batches of 7 with the watermark 20 behind the latest time, into `op`,
    /// collecting its output and the naive result.
    fn feed(
        op: &mut WindowAggregate,
        input: &[(String, i64, i64)],
        w: &Windowing,
        watermark: &mut i64,
        expected: &mut Naive,
        got: &mut Naive,
    ) {
        for chunk in input.chunks(7) {
            for r in chunk {
                naive_add(expected, r, w, *watermark);
            }
            let refs: Vec<(&str, i64, i64)> =
                chunk.iter().map(|r| (r.0.as_str(), r.1, r.2)).collect();
            let mut out = Vec::new();
            op.process_batch(0, batch(&refs), &mut out).unwrap();
            let latest = chunk.iter().map(|r| r.1).max().unwrap_or(i64::MIN);
            *watermark = (*watermark).max(latest - 20);
            op.process_watermark(*watermark, &mut out).unwrap();
            for r in rows(&out) {
                assert!(
                    got.insert((r.0.clone(), r.1, r.2), (r.3, r.4)).is_none(),
                    "a window fires once: {r:?}"
                );
            }
        }
    }

    /// Fires every window left and adds its rows to `got`.
    fn finish(op: &mut WindowAggregate, got: &mut Naive) {
        let mut out = Vec::new();
        op.process_watermark(i64::MAX, &mut out).unwrap();
        for r in rows(&out) {
            got.insert((r.0.clone(), r.1, r.2), (r.3, r.4));
        }
    }

    /// Every window fired and its state dropped: no state, no timers.
    fn assert_drained(op: &mut WindowAggregate, what: &str) {
        assert_eq!(op.state.entries(), 0, "{what}: no state left");
        assert!(
            op.state.timers().is_empty().unwrap(),
            "{what}: no timer left"
        );
    }

    #[test]
    fn sliced_and_whole_sliding_windows_equal_a_naive_count_on_both_backends() {
        let spec = sliding(20, 5);
        let w = Windowing::from_spec(&spec).unwrap();
        let rows = random_rows(0x2545_f491_4f6c_dd1d, 2_000);
        for sliced in [false, true] {
            for (name, dir) in backends() {
                let (mut op, metrics) = operator_on(spec.clone(), 0, backend(&dir), sliced);
                let (mut watermark, mut expected, mut got) = (i64::MIN, Naive::new(), Naive::new());
                feed(&mut op, &rows, &w, &mut watermark, &mut expected, &mut got);
                finish(&mut op, &mut got);
                assert_eq!(got, expected, "{name}, sliced {sliced}");
                assert!(
                    metrics.late_dropped.load(Ordering::Relaxed) > 0,
                    "some rows were late"
                );
                assert_drained(&mut op, &format!("{name}, sliced {sliced}"));
            }
        }
    }

    /// Sessions of out-of-order records against a naive sessionization: per key a plain list
    /// of open sessions, every session a new record touches merged with it, a record dropped
    /// when its own window is already behind the watermark, and a session emitted once the
    /// watermark passes its end. Halfway, a new operator goes on from a snapshot restored
    /// into the heap, with sessions whose timers are still at an older end.
    #[test]
    fn sessions_equal_a_naive_sessionization_on_both_backends() {
        let gap = 6;
        let spec = WindowSpec::Session {
            gap: HumanDuration::from_millis(gap as u64),
        };
        let input = random_rows(0x9e37_79b9_7f4a_7c15, 3_000);
        for (name, dir) in backends() {
            let (mut op, metrics) = operator_on(spec.clone(), 0, backend(&dir), false);
            let mut watermark = i64::MIN;
            let mut open: BTreeMap<String, Vec<(i64, i64, i64, i64)>> = BTreeMap::new();
            let (mut expected, mut got, mut dropped) = (Naive::new(), Naive::new(), 0u64);
            for (i, chunk) in input.chunks(7).enumerate() {
                if i == input.len() / 14 {
                    let dir = tempfile::tempdir().unwrap();
                    let snap = op
                        .state
                        .snapshot(
                            &dir.path().join("snap"),
                            weir_state::SnapshotFormat::Logical,
                        )
                        .unwrap();
                    let range = KeyGroupRange::of_subtask(0, 128, 1);
                    let state =
                        KeyedStateBackend::restore_heap(128, range, &[snap.source()]).unwrap();
                    op = operator_on(spec.clone(), 0, state, false).0;
                    op.metrics = metrics.clone();
                    op.watermark = watermark;
                }
                for (key, t, v) in chunk {
                    let (start, end) = (*t, t + gap);
                    if end - 1 <= watermark {
                        dropped += 1;
                        continue;
                    }
                    let list = open.entry(key.clone()).or_default();
                    let (touching, apart): (Vec<_>, Vec<_>) =
                        list.drain(..).partition(|s| s.0 <= end && start <= s.1);
                    let mut merged = (start, end, 1, *v);
                    for s in touching {
                        merged = (
                            merged.0.min(s.0),
                            merged.1.max(s.1),
                            merged.2 + s.2,
                            merged.3 + s.3,
                        );
                    }
                    *list = apart;
                    list.push(merged);
                }
                let refs: Vec<(&str, i64, i64)> =
                    chunk.iter().map(|r| (r.0.as_str(), r.1, r.2)).collect();
                let mut out = Vec::new();
                op.process_batch(0, batch(&refs), &mut out).unwrap();
                let latest = chunk.iter().map(|r| r.1).max().unwrap_or(i64::MIN);
                watermark = watermark.max(latest - 20);
                op.process_watermark(watermark, &mut out).unwrap();
                for r in rows(&out) {
                    assert!(got.insert((r.0.clone(), r.1, r.2), (r.3, r.4)).is_none());
                }
                for (key, list) in &mut open {
                    list.retain(|s| {
                        let fires = s.1 - 1 <= watermark;
                        if fires {
                            expected.insert((key.clone(), s.0, s.1), (s.2, s.3));
                        }
                        !fires
                    });
                }
            }
            finish(&mut op, &mut got);
            for (key, list) in open {
                for s in list {
                    expected.insert((key.clone(), s.0, s.1), (s.2, s.3));
                }
            }
            assert_eq!(got, expected, "{name}");
            assert_eq!(
                metrics.late_dropped.load(Ordering::Relaxed),
                dropped,
                "{name}"
            );
            assert!(
                dropped > 0 && got.len() > 100,
                "{name}: {dropped} dropped, {} sessions",
                got.len()
            );
            assert_drained(&mut op, name);
        }
    }

    #[test]
    fn windows_kept_whole_before_a_restore_and_slices_after_merge_both_ways() {
        // A checkpoint of one mode restored into the other: the state and timers carry over
        // (here by handing the backend on), and every window fires with what both modes
        // gathered.
        let spec = sliding(20, 5);
        let w = Windowing::from_spec(&spec).unwrap();
        let rows = random_rows(0x9e37_79b9_7f4a_7c15, 1_200);
        let (before, after) = rows.split_at(600);
        for first_sliced in [false, true] {
            for (name, dir) in backends() {
                let (mut op, _) = operator_on(spec.clone(), 0, backend(&dir), first_sliced);
                let (mut watermark, mut expected, mut got) = (i64::MIN, Naive::new(), Naive::new());
                feed(&mut op, before, &w, &mut watermark, &mut expected, &mut got);
                let state = std::mem::replace(&mut op.state, backend(&None));
                let (mut op, _) = operator_on(spec.clone(), 0, state, !first_sliced);
                op.watermark = watermark;
                feed(&mut op, after, &w, &mut watermark, &mut expected, &mut got);
                finish(&mut op, &mut got);
                assert_eq!(got, expected, "{name}, sliced first {first_sliced}");
                assert_drained(&mut op, name);
            }
        }
    }
}
