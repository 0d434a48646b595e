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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::{Value, json};

    use crate::testing::{Harness, Random, canonical};

    /// Two sources `l` and `r` of `{k: int, t: timestamp, v: int, id: int}` (never read: the
    /// harness feeds the operator), each keyed by `k`, and the window join `op` of them on `t`
    /// with the rest of its keys in `body` (YAML lines). Its columns carry both rows' ids and
    /// the window.
    fn job(body: &str) -> String {
        let schema = "{k: int, t: timestamp, v: int, id: int}";
        format!(
            "name: window-join-test\nsources:\n  \
             l: {{kind: jsonl, path: unused.jsonl, schema: {schema}}}\n  \
             r: {{kind: jsonl, path: unused.jsonl, schema: {schema}}}\n\
             transforms:\n  \
             lk: {{kind: key-by, from: l, keys: [k]}}\n  \
             rk: {{kind: key-by, from: r, keys: [k]}}\n  \
             op:\n    kind: window-join\n    left: lk\n    right: rk\n    left-time: t\n    \
             right-time: t\n{body}    \
             columns: {{k: l.k, lid: l.id, rid: r.id, start: window_start, end: window_end}}\n\
             sinks:\n  out: {{kind: blackhole, from: op}}\n"
        )
    }

    #[derive(Clone, Debug)]
    struct Row {
        k: i64,
        t: Option<i64>,
        v: i64,
        id: i64,
    }

    enum Step {
        Push(usize, Vec<Row>),
        Watermark(i64),
        /// A checkpoint, a failure and a restore.
        Restart,
    }

    /// `steps` batches of 1 to 10 rows of a random side, times up to `jitter` ms behind the
    /// latest (NULL now and then), each followed half the time by a watermark `lag` ms behind
    /// the latest time seen, so some rows come after their windows closed; restarts after
    /// batches `restarts`.
    fn script(
        random: &mut Random,
        steps: usize,
        jitter: u64,
        lag: i64,
        restarts: &[usize],
    ) -> Vec<Step> {
        let mut out = Vec::new();
        let (mut now, mut serial, mut watermark) = (1000i64, 0, i64::MIN);
        for step in 0..steps {
            let side = random.below(2) as usize;
            let rows = (0..1 + random.below(10))
                .map(|_| {
                    now += random.below(3) as i64;
                    serial += 1;
                    Row {
                        k: random.below(4) as i64,
                        t: (random.below(30) != 0).then(|| now - random.below(jitter) as i64),
                        v: random.below(5) as i64,
                        id: serial,
                    }
                })
                .collect();
            out.push(Step::Push(side, rows));
            if random.below(2) == 0 && now - lag > watermark {
                watermark = now - lag;
                out.push(Step::Watermark(watermark));
            }
            if restarts.contains(&step) {
                out.push(Step::Restart);
            }
        }
        out
    }

    /// Runs `steps` through the harness: every output row with `at`, the watermark that
    /// emitted it (`i64::MAX` for the end of input). Checks that batches emit nothing and that
    /// no window is emitted before the watermark reaches its last millisecond.
    fn run(h: &mut Harness, steps: &[Step]) -> Vec<Value> {
        let mut got = Vec::new();
        let mut watermark = None;
        let emitted = |rows: Vec<Value>, at: i64, got: &mut Vec<Value>| {
            for mut row in rows {
                let end = row["end"].as_i64().expect("a window end");
                assert!(end - 1 <= at, "{row} emitted at watermark {at}");
                row["at"] = at.into();
                got.push(row);
            }
        };
        for step in steps {
            match step {
                Step::Push(side, rows) => {
                    let rows: Vec<Value> = rows
                        .iter()
                        .map(|r| json!({"k": r.k, "t": r.t, "v": r.v, "id": r.id}))
                        .collect();
                    h.push(*side, &rows);
                    assert_eq!(h.take(), Vec::<Value>::new(), "a batch emits nothing");
                }
                Step::Watermark(at) => {
                    h.watermark(*at);
                    watermark = Some(*at);
                    emitted(h.take(), *at, &mut got);
                }
                Step::Restart => {
                    h.restart();
                    // The executor replays the restored watermark (the harness leaves it to
                    // its caller); that emits nothing.
                    if let Some(w) = watermark {
                        h.watermark(w);
                        assert_eq!(h.take(), Vec::<Value>::new(), "replaying watermark {w}");
                    }
                }
            }
        }
        h.watermark(i64::MAX);
        h.finish();
        emitted(h.take(), i64::MAX, &mut got);
        got
    }

    /// What a window join of `steps` emits, by brute force: each row goes into every window
    /// `[s, s + size)` (`s` a multiple of `slide`) holding its time that the watermark had not
    /// reached the last millisecond of when the row came; per key and window, `inner` pairs
    /// every left row with every right row meeting `condition`, `semi` each left row with the
    /// first right row (in arrival order) meeting it. Each row is emitted by the first
    /// watermark at or past its window's last millisecond. Also returns how many (row, window)
    /// placements came too late.
    fn reference(
        steps: &[Step],
        size: i64,
        slide: i64,
        semi: bool,
        condition: impl Fn(&Row, &Row) -> bool,
    ) -> (Vec<Value>, usize) {
        let mut windows: BTreeMap<(i64, i64), [Vec<&Row>; 2]> = BTreeMap::new();
        let mut watermarks = Vec::new();
        let mut watermark = i64::MIN;
        let mut late = 0;
        for step in steps {
            match step {
                Step::Push(side, rows) => {
                    for row in rows {
                        let Some(t) = row.t else { continue };
                        let mut start = t - t.rem_euclid(slide);
                        while start + size > t {
                            if start + size - 1 > watermark {
                                windows.entry((row.k, start)).or_default()[*side].push(row);
                            } else {
                                late += 1;
                            }
                            start -= slide;
                        }
                    }
                }
                Step::Watermark(at) => {
                    watermark = *at;
                    watermarks.push(*at);
                }
                Step::Restart => {}
            }
        }
        let mut out = Vec::new();
        for ((k, start), [left, right]) in &windows {
            let end = start + size;
            let at = watermarks
                .iter()
                .copied()
                .find(|w| *w >= end - 1)
                .unwrap_or(i64::MAX);
            for l in left {
                let matches = right.iter().filter(|r| condition(l, r));
                for r in matches.take(if semi { 1 } else { usize::MAX }) {
                    out.push(json!({
                        "k": k, "lid": l.id, "rid": r.id, "start": start, "end": end, "at": at
                    }));
                }
            }
        }
        (out, late)
    }

    /// `got` and `expected` hold the same rows as many times each, in any order.
    fn assert_same_rows(got: Vec<Value>, expected: Vec<Value>) {
        let (n_got, n_expected) = (got.len(), expected.len());
        let mut diff: BTreeMap<String, i64> = BTreeMap::new();
        for r in &got {
            *diff.entry(canonical(r)).or_default() += 1;
        }
        for r in &expected {
            *diff.entry(canonical(r)).or_default() -= 1;
        }
        diff.retain(|_, n| *n != 0);
        let extra: Vec<_> = diff.iter().filter(|(_, n)| **n > 0).take(5).collect();
        let missing: Vec<_> = diff.iter().filter(|(_, n)| **n < 0).take(5).collect();
        assert!(
            diff.is_empty(),
            "{n_got} rows, {n_expected} expected; extra (first 5, with counts): {extra:?}; \
             missing: {missing:?}"
        );
    }

    /// Tumbling 10 ms windows, inner, with a condition, rows out of order by up to 15 ms and
    /// watermarks 8 ms behind (so some rows miss their window), restored twice: exactly the
    /// brute-force pairs, each emitted by the first watermark that passes its window.
    #[test]
    fn a_tumbling_inner_join_emits_each_windows_pairs_once_when_it_closes() {
        let mut h = Harness::new(
            &job("    window: {type: tumbling, size: 10ms}\n    where: l.v <= r.v\n"),
            "op",
        );
        let steps = script(&mut Random(0xbe54_66cf_34e9_0c6c), 120, 15, 8, &[30, 75]);
        let got = run(&mut h, &steps);
        let (expected, late) = reference(&steps, 10, 10, false, |l, r| l.v <= r.v);
        assert!(late > 20, "{late} late rows");
        assert!(expected.len() > 50, "{} pairs", expected.len());
        assert_same_rows(got, expected);
    }

    /// Sliding windows of 20 ms every 5 ms (each row in four of them), inner, no condition,
    /// restored mid-stream: every pair of each window, once per window.
    #[test]
    fn a_sliding_join_pairs_rows_in_every_window_they_share() {
        let mut h = Harness::new(
            &job("    window: {type: sliding, size: 20ms, slide: 5ms}\n"),
            "op",
        );
        let steps = script(&mut Random(0xc0ac_29b7_c97c_50dd), 80, 6, 10, &[40]);
        let got = run(&mut h, &steps);
        let (expected, _) = reference(&steps, 20, 5, false, |_, _| true);
        assert!(expected.len() > 500, "{} pairs", expected.len());
        assert_same_rows(got, expected);
    }

    /// A semi join over tumbling 20 ms windows with a condition, restored twice: each left row
    /// with a match in its window, once, with the right columns of its first match in arrival
    /// order (restored rows before later ones).
    #[test]
    fn a_semi_join_emits_each_matched_left_row_once_with_its_first_match() {
        let mut h = Harness::new(
            &job(
                "    window: {type: tumbling, size: 20ms}\n    mode: semi\n    where: r.v > l.v\n",
            ),
            "op",
        );
        let steps = script(&mut Random(0x3f84_d5b5_b547_0917), 120, 12, 6, &[25, 70]);
        let got = run(&mut h, &steps);
        let (expected, _) = reference(&steps, 20, 20, true, |l, r| r.v > l.v);
        assert!(expected.len() > 50, "{} pairs", expected.len());
        // The test tells semi from inner: some left rows have several matches.
        let (inner, _) = reference(&steps, 20, 20, false, |l, r| r.v > l.v);
        assert!(
            inner.len() > expected.len() + 20,
            "{} inner pairs",
            inner.len()
        );
        assert_same_rows(got, expected);
    }
}
