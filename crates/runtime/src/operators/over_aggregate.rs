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
    /// Rows waiting for the watermark: (time, sort key + arrival) → encoded row. The sort key's
    /// bytes are followed by the row's arrival number (8 bytes, big-endian), so rows equal in
    /// every order-by value each keep their entry, in arrival order (as Flink orders ties in a
    /// ROWS window) rather than the last replacing the others. Entries of snapshots taken
    /// before the number was appended have none and sort first among their equals.
    waiting: MapId<(i64, Vec<u8>), Vec<u8>>,
    /// Rows this subtask has taken so far, continued past every old subtask's on a restore.
    arrivals: u64,
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
            arrivals: 0,
            watermark: i64::MIN,
            metrics,
        })
    }

    /// Continues the arrival numbering of a restored run past every old subtask's, so a new
    /// row never takes the place of a restored one (after a rescale a key's rows may come
    /// from any old subtask).
    pub fn restored(mut self, restore: Option<&crate::api::SubtaskRestore>) -> Self {
        if let Some(r) = restore {
            self.arrivals = r
                .own_states()
                .filter_map(|v| v.get("arrivals")?.as_u64())
                .max()
                .unwrap_or(0);
        }
        self
    }
}

impl Operator for OverAggregate {
    fn keyed_state(&mut self) -> Option<&mut KeyedStateBackend> {
        Some(&mut self.state)
    }

    fn snapshot_state(&mut self) -> Result<Option<serde_json::Value>, OperatorError> {
        Ok(Some(serde_json::json!({ "arrivals": self.arrivals })))
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
            self.arrivals += 1;
            let mut order = sort.row(i).data().to_vec();
            order.extend_from_slice(&self.arrivals.to_be_bytes());
            self.state.map(&self.waiting).put(
                key,
                NO_NAMESPACE,
                (t, order),
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

#[cfg(test)]
mod tests {
    use std::cmp::Reverse;
    use std::collections::BTreeMap;

    use serde_json::{Value, json};

    use crate::testing::{Harness, Random, canonical};

    /// A source `src` of `{k: int, t: timestamp, v: int, id: int}` (never read: the harness
    /// feeds the operator) keyed by `k`, and the over-aggregate `op` of it with the rest of its
    /// keys in `body` (YAML lines).
    fn job(body: &str) -> String {
        format!(
            "name: over-aggregate-test\nsources:\n  src: {{kind: jsonl, path: unused.jsonl, \
             schema: {{k: int, t: timestamp, v: int, id: int}}}}\n\
             transforms:\n  by-k: {{kind: key-by, from: src, keys: [k]}}\n  \
             op:\n    kind: over-aggregate\n    from: by-k\n{body}\
             sinks:\n  out: {{kind: blackhole, from: op}}\n"
        )
    }

    #[derive(Clone, Debug)]
    struct Row {
        k: i64,
        t: Option<i64>,
        v: Option<i64>,
        id: i64,
    }

    impl Row {
        fn json(&self) -> Value {
            json!({"k": self.k, "t": self.t, "v": self.v, "id": self.id})
        }
    }

    enum Step {
        Push(Vec<Row>),
        Watermark(i64),
        /// A checkpoint, a failure and a restore.
        Restart,
    }

    /// `steps` batches of 1 to 12 rows over 5 keys, times `0..spread` ms apart and up to
    /// `jitter` ms behind the latest (NULL one time in 25), values NULL one time in 5, each
    /// batch followed half the time by a watermark `lag` ms behind the latest time; restarts
    /// after batches `restarts`.
    fn script(
        random: &mut Random,
        steps: usize,
        (spread, jitter, lag): (u64, u64, i64),
        restarts: &[usize],
    ) -> Vec<Step> {
        let mut out = Vec::new();
        let (mut now, mut serial, mut watermark) = (1000i64, 0, i64::MIN);
        for step in 0..steps {
            let rows = (0..1 + random.below(12))
                .map(|_| {
                    now += random.below(spread) as i64;
                    serial += 1;
                    Row {
                        k: random.below(5) as i64,
                        t: (random.below(25) != 0).then(|| now - random.below(jitter) as i64),
                        v: (random.below(5) != 0).then(|| random.below(100) as i64 - 30),
                        id: serial,
                    }
                })
                .collect();
            out.push(Step::Push(rows));
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

    /// Runs `steps` through the harness: the output rows in order, each with `at`, the
    /// watermark that emitted it (`i64::MAX` for the end of input). Checks that batches emit
    /// nothing and that no row is emitted before the watermark reaches its time.
    fn run(h: &mut Harness, steps: &[Step]) -> Vec<Value> {
        let mut got = Vec::new();
        let mut watermark = None;
        let emitted = |rows: Vec<Value>, at: i64, got: &mut Vec<Value>| {
            for mut row in rows {
                let t = row["t"].as_i64().expect("an emitted row has a time");
                assert!(t <= at, "{row} emitted at watermark {at}");
                row["at"] = at.into();
                got.push(row);
            }
        };
        for step in steps {
            match step {
                Step::Push(rows) => {
                    h.push(0, &rows.iter().map(Row::json).collect::<Vec<_>>());
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

    /// Per key, rows in arrival order, each with the watermark that should emit it.
    type PerKey<'a> = BTreeMap<i64, Vec<(&'a Row, i64)>>;

    /// The rows of `steps` that were on time (a time after the watermark when they came),
    /// per key, with the first watermark at or past each one's time (`i64::MAX` if none), in
    /// arrival order; and how many were dropped.
    fn on_time(steps: &[Step]) -> (PerKey<'_>, usize) {
        let watermarks: Vec<i64> = steps
            .iter()
            .filter_map(|s| match s {
                Step::Watermark(w) => Some(*w),
                _ => None,
            })
            .collect();
        let mut watermark = i64::MIN;
        let mut per_key = PerKey::new();
        let mut dropped = 0;
        for step in steps {
            match step {
                Step::Push(rows) => {
                    for row in rows {
                        match row.t {
                            Some(t) if t > watermark => {
                                let at = watermarks.iter().copied().find(|w| *w >= t);
                                per_key
                                    .entry(row.k)
                                    .or_default()
                                    .push((row, at.unwrap_or(i64::MAX)));
                            }
                            _ => dropped += 1,
                        }
                    }
                }
                Step::Watermark(w) => watermark = *w,
                Step::Restart => {}
            }
        }
        (per_key, dropped)
    }

    /// `got` and `expected` hold the same rows as many times each, in any order.
    fn assert_same_rows(got: &[Value], expected: &[Value]) {
        let mut diff: BTreeMap<String, i64> = BTreeMap::new();
        for r in got {
            *diff.entry(canonical(r)).or_default() += 1;
        }
        for r in expected {
            *diff.entry(canonical(r)).or_default() -= 1;
        }
        diff.retain(|_, n| *n != 0);
        let extra: Vec<_> = diff.iter().filter(|(_, n)| **n > 0).take(5).collect();
        let missing: Vec<_> = diff.iter().filter(|(_, n)| **n < 0).take(5).collect();
        assert!(
            diff.is_empty(),
            "{} rows, {} expected; extra (first 5, with counts): {extra:?}; missing: {missing:?}",
            got.len(),
            expected.len()
        );
    }

    /// The rows of key `k` in `rows`, in order, as their ids.
    fn ids_of(rows: &[Value], k: i64) -> Vec<i64> {
        rows.iter()
            .filter(|r| r["k"] == k)
            .map(|r| r["id"].as_i64().expect("an id"))
            .collect()
    }

    /// Six aggregates over each row's last 4 rows per key, ordered by time then id descending,
    /// rows out of order by up to 12 ms and watermarks 5 ms behind (so some rows are late and
    /// dropped, as are rows without a time), values sometimes NULL, restored twice: each
    /// on-time row once, emitted by the first watermark at or past its time, per key in
    /// order, with the aggregates a sort of the key's rows and a loop over each window give.
    #[test]
    fn each_row_gets_the_aggregates_of_its_keys_last_rows_in_order() {
        let mut h = Harness::new(
            &job(
                "    order-by: [t, id DESC]\n    rows: 4\n    aggregates:\n      \
                  s: sum(v)\n      n: count(*)\n      nv: count(v)\n      lo: min(v)\n      \
                  hi: max(v)\n      a: avg(v)\n",
            ),
            "op",
        );
        let steps = script(
            &mut Random(0x7b54_a41d_c25a_59b5),
            150,
            (3, 12, 5),
            &[40, 100],
        );
        let got = run(&mut h, &steps);

        let (per_key, dropped) = on_time(&steps);
        let mut expected = Vec::new();
        for mut rows in per_key.into_values() {
            rows.sort_by_key(|(r, _)| (r.t, Reverse(r.id)));
            for (i, (row, at)) in rows.iter().enumerate() {
                let window = &rows[i.saturating_sub(3)..=i];
                let values: Vec<i64> = window.iter().filter_map(|(r, _)| r.v).collect();
                let sum: i64 = values.iter().sum();
                let mut out = row.json();
                out["s"] = (!values.is_empty()).then_some(sum).into();
                out["n"] = window.len().into();
                out["nv"] = values.len().into();
                out["lo"] = values.iter().min().copied().into();
                out["hi"] = values.iter().max().copied().into();
                out["a"] = (!values.is_empty())
                    .then(|| sum as f64 / values.len() as f64)
                    .into();
                out["at"] = (*at).into();
                expected.push(out);
            }
        }
        assert!(dropped > 30, "{dropped} rows late or without a time");
        assert!(expected.len() > 300, "{} rows", expected.len());
        assert_same_rows(&got, &expected);
        for k in 0..5 {
            assert_eq!(
                ids_of(&got, k),
                ids_of(&expected, k),
                "key {k} out of order"
            );
        }
    }

    /// Rows of a key that share a time (and order by nothing else): each on-time row is still
    /// emitted exactly once, and the counts of a key's rows are 1, 2, 3, 3, ... whatever order
    /// the ties take, across a restore.
    #[test]
    fn rows_that_share_a_time_are_each_emitted_once() {
        let spec = job("    order-by: [t]\n    rows: 3\n    aggregates: {n: count(*)}\n");
        // The smallest case: two rows of one key at one time.
        let mut h = Harness::new(&spec, "op");
        h.push(
            0,
            &[
                json!({"k": 1, "t": 5, "v": 10, "id": 1}),
                json!({"k": 1, "t": 5, "v": 20, "id": 2}),
            ],
        );
        h.watermark(5);
        let ids: Vec<Value> = h.take().iter().map(|r| r["id"].clone()).collect();
        assert_eq!(ids.len(), 2, "two rows at one time emitted as {ids:?}");

        let mut h = Harness::new(&spec, "op");
        // Times cut to multiples of 10 ms: a key has about two rows per time.
        let mut steps = script(&mut Random(0xa458_fea3_f493_3d7e), 60, (3, 4, 12), &[30]);
        for step in &mut steps {
            if let Step::Push(rows) = step {
                for row in rows {
                    row.t = row.t.map(|t| t - t.rem_euclid(10));
                }
            }
        }
        let got = run(&mut h, &steps);
        let (per_key, _) = on_time(&steps);
        let mut ties = 0;
        for (k, rows) in &per_key {
            let mut times: Vec<i64> = rows.iter().filter_map(|(r, _)| r.t).collect();
            times.sort_unstable();
            ties += times.windows(2).filter(|w| w[0] == w[1]).count();
            let emitted: Vec<&Value> = got.iter().filter(|r| r["k"] == *k).collect();
            let mut fed: Vec<Value> = rows.iter().map(|(r, _)| r.json()).collect();
            let mut out: Vec<Value> = emitted
                .iter()
                .map(|r| json!({"k": r["k"], "t": r["t"], "v": r["v"], "id": r["id"]}))
                .collect();
            fed.sort_by_key(canonical);
            out.sort_by_key(canonical);
            assert!(
                out == fed,
                "key {k}: {} rows fed on time, {} emitted",
                fed.len(),
                out.len()
            );
            let counts: Vec<i64> = emitted
                .iter()
                .map(|r| r["n"].as_i64().expect("a count"))
                .collect();
            let expected: Vec<i64> = (1..=rows.len() as i64).map(|i| i.min(3)).collect();
            assert_eq!(counts, expected, "key {k}");
            let emitted_times: Vec<i64> = emitted
                .iter()
                .map(|r| r["t"].as_i64().expect("a time"))
                .collect();
            assert_eq!(emitted_times, times, "key {k}: not in time order");
        }
        assert!(ties > 50, "{ties} ties");
    }
}
