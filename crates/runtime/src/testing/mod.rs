//! A harness for one operator subtask, as RisingWave's `test_utils`: the operator is planned
//! from a job file like any other (so its spec, schemas and expressions are the real ones),
//! then driven by hand, batch by batch and watermark by watermark, with checkpoints and
//! restores in between, and its output read back as JSON rows.
//!
//! ```ignore
//! let mut h = Harness::new(JOB, "joined");
//! h.push(0, &[json!({"k": 1, "t": 10})]);
//! h.watermark(100);
//! h.restart(); // snapshot every state, restore a fresh subtask from it
//! let checkpoint = h.checkpoint();
//! h.push(0, &[json!({"k": 2, "t": 20})]);
//! h.restore(&checkpoint); // a failure: back to the checkpoint
//! let rows = h.take();
//! ```
//! Rows go in and out as JSON objects: `INT`s are numbers, `TIMESTAMP`s epoch milliseconds,
//! `NULL`s `null`.
//!
//! [`sink_conformance`] is the suite every transactional sink runs.
//!
//! Behind the `testing` feature, for the tests of other crates (`tests/it` among them).

pub mod sink_conformance;

use std::sync::Arc;

use arrow_array::builder::{
    BooleanBuilder, Float64Builder, Int8Builder, Int64Builder, StringBuilder,
    TimestampMillisecondBuilder,
};
use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int8Type, Int64Type, TimestampMillisecondType};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{DataType, SchemaRef};
use serde_json::{Map, Value};
use weir_state::snapshot::{RestoreSource, SnapshotFormat};

use crate::api::{Operator, OperatorFactory, SubtaskContext, SubtaskRestore, SubtaskState};
use crate::exec::state::StateSettings;
use crate::plan::{Factory, Plan};

/// A seeded xorshift generator for tests' random inputs: the same sequence on every machine,
/// and no dependency.
pub struct Random(pub u64);

impl Random {
    /// A value in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// A row as text with its columns in name order, so equal rows compare equal whatever order
/// their columns were built in (rows as multisets of these compare output in any order).
pub fn canonical(row: &Value) -> String {
    match row {
        Value::Object(columns) => {
            let sorted: std::collections::BTreeMap<&String, &Value> = columns.iter().collect();
            serde_json::to_string(&sorted).expect("a row as JSON")
        }
        other => other.to_string(),
    }
}

/// One subtask of one planned operator, driven by hand.
pub struct Harness {
    factory: OperatorFactory,
    /// Where the subtask keeps its keyed state (the job's backend).
    state: Arc<StateSettings>,
    op: Box<dyn Operator>,
    /// The schema of each logical input.
    inputs: Vec<SchemaRef>,
    out: Vec<RecordBatch>,
    /// The last input watermark, for checkpoints.
    watermark: Option<i64>,
    /// Snapshots so far (each checkpoint takes one).
    snapshots: u64,
    /// Restores so far: each is a new attempt.
    attempts: u32,
    dir: tempfile::TempDir,
    _plan: Plan,
}

impl Harness {
    /// Plans `job` (a whole job file) and makes subtask 0 of 1 of its operator `node`.
    pub fn new(job: &str, node: &str) -> Self {
        let plan = crate::plan::check_str("harness.yaml", job, &[])
            .unwrap_or_else(|e| panic!("the job does not plan: {e}"));
        let index = plan
            .nodes
            .iter()
            .position(|n| n.name == node)
            .unwrap_or_else(|| panic!("no operator `{node}` in the plan"));
        let planned = &plan.nodes[index];
        let Factory::Operator(factory) = &planned.factory else {
            panic!("`{node}` is not an operator");
        };
        let logical = planned
            .inputs
            .iter()
            .map(|e| e.input)
            .max()
            .map_or(0, |m| m + 1);
        let inputs = (0..logical)
            .map(|k| {
                let edge = planned
                    .inputs
                    .iter()
                    .find(|e| e.input == k)
                    .unwrap_or_else(|| panic!("`{node}` has no input {k}"));
                plan.nodes[edge.from].ports[edge.port].1.clone()
            })
            .collect();
        let factory = factory.clone();
        let state = Arc::new(StateSettings::for_run(&plan.spec));
        let op =
            factory(&context(&state, None, 0)).unwrap_or_else(|e| panic!("making `{node}`: {e}"));
        Harness {
            factory,
            state,
            op,
            inputs,
            out: Vec::new(),
            watermark: None,
            snapshots: 0,
            attempts: 0,
            dir: tempfile::tempdir().expect("a temporary directory for a test job"),
            _plan: plan,
        }
    }

    /// Feeds `rows` to logical input `input` as one batch.
    pub fn push(&mut self, input: usize, rows: &[Value]) {
        let batch = batch(&self.inputs[input], rows);
        self.op
            .process_batch(input, batch, &mut self.out)
            .unwrap_or_else(|e| panic!("process_batch: {e}"));
    }

    /// The schema of logical input `input`.
    pub fn input_schema(&self, input: usize) -> SchemaRef {
        self.inputs[input].clone()
    }

    /// Feeds `batch` to logical input `input`, returning the operator's error.
    pub fn try_push(
        &mut self,
        input: usize,
        batch: RecordBatch,
    ) -> Result<(), crate::api::OperatorError> {
        self.op.process_batch(input, batch, &mut self.out)
    }

    /// Advances the input watermark; returns the operator's output watermark.
    pub fn watermark(&mut self, at: i64) -> i64 {
        self.watermark = Some(at);
        self.op
            .process_watermark(at, &mut self.out)
            .unwrap_or_else(|e| panic!("process_watermark: {e}"))
    }

    /// What the operator still holds: its keyed state's entries and pending event-time
    /// timers ((0, 0) without keyed state).
    pub fn held(&mut self) -> (usize, usize) {
        match self.op.keyed_state() {
            Some(state) => {
                let timers = state
                    .timers()
                    .len(weir_state::TimeDomain::EventTime)
                    .unwrap_or_else(|e| panic!("counting timers: {e}"));
                (state.entries(), timers)
            }
            None => (0, 0),
        }
    }

    /// Every input ended.
    pub fn finish(&mut self) {
        self.op
            .finish(&mut self.out)
            .unwrap_or_else(|e| panic!("finish: {e}"));
    }

    /// The rows emitted since the last call, in order.
    pub fn take(&mut self) -> Vec<Value> {
        self.out.drain(..).flat_map(|b| rows(&b)).collect()
    }

    /// Processing time passed the operator's flush interval (its mini-batch): what it holds
    /// back is emitted, as the task's tick does.
    pub fn flush(&mut self) {
        self.op
            .flush(&mut self.out)
            .unwrap_or_else(|e| panic!("flush: {e}"));
    }

    /// A checkpoint, as the chain takes one when a barrier reaches the operator: flushes what
    /// it holds back (into the output, ahead of the barrier), then snapshots its keyed state
    /// and own state (a logical snapshot). The subtask runs on; [`Harness::restore`] goes back
    /// to the returned checkpoint.
    pub fn checkpoint(&mut self) -> Checkpoint {
        self.flush();
        self.snapshots += 1;
        let mut keyed = Vec::new();
        if let Some(backend) = self.op.keyed_state() {
            let dir = self.dir.path().join(format!("snapshot-{}", self.snapshots));
            let snapshot = backend
                .snapshot(&dir, SnapshotFormat::Logical)
                .unwrap_or_else(|e| panic!("snapshot: {e}"));
            keyed.push(RestoreSource {
                format: SnapshotFormat::Logical,
                range: snapshot.range,
                dir,
            });
        }
        let state = self
            .op
            .snapshot_state()
            .unwrap_or_else(|e| panic!("snapshot_state: {e}"));
        Checkpoint(Arc::new(SubtaskRestore {
            checkpoint: self.snapshots,
            keyed,
            states: vec![SubtaskState {
                watermark: self.watermark,
                max_seen: None,
                state,
            }],
        }))
    }

    /// A failure: drops the subtask (with whatever it held) and makes a fresh one restored
    /// from `checkpoint`. Output not yet taken is kept: the test decides what a sink would
    /// have committed.
    pub fn restore(&mut self, checkpoint: &Checkpoint) {
        self.attempts += 1;
        self.watermark = checkpoint.0.states.first().and_then(|s| s.watermark);
        // A new attempt, as after a real failure: a RocksDB backend restores into a database
        // of its own beside the old one, still open until replaced.
        let attempt = self.attempts;
        self.op = (self.factory)(&context(&self.state, Some(checkpoint.0.clone()), attempt))
            .unwrap_or_else(|e| panic!("restoring: {e}"));
    }

    /// A checkpoint and a failure right after it ([`Harness::checkpoint`], then
    /// [`Harness::restore`]).
    pub fn restart(&mut self) {
        let checkpoint = self.checkpoint();
        self.restore(&checkpoint);
    }
}

/// A checkpoint of the harness's subtask, to restore from.
#[derive(Clone)]
pub struct Checkpoint(Arc<SubtaskRestore>);

/// Subtask 0 of 1, the job's state backend, no checkpointing.
fn context(
    state: &Arc<StateSettings>,
    restore: Option<Arc<SubtaskRestore>>,
    attempt: u32,
) -> SubtaskContext {
    SubtaskContext {
        subtask: 0,
        parallelism: 1,
        batch_size: 1024,
        metrics: Arc::default(),
        want: Vec::new(),
        restore,
        attempt,
        checkpoint_base: 0,
        checkpointing: false,
        state: Some(state.clone()),
    }
}

/// JSON objects as a batch of `schema`; a missing field is NULL.
pub fn batch(schema: &SchemaRef, rows: &[Value]) -> RecordBatch {
    let columns: Vec<ArrayRef> = schema
        .fields()
        .iter()
        .map(|f| {
            let values = rows
                .iter()
                .map(|r| r.get(f.name()).filter(|v| !v.is_null()));
            let array: ArrayRef = match f.data_type() {
                DataType::Int64 => {
                    let mut b = Int64Builder::new();
                    values.for_each(|v| b.append_option(v.and_then(Value::as_i64)));
                    Arc::new(b.finish())
                }
                // An updating stream's row kind (`__op`): its code, or its short form
                // (`"+I"`, `"-D"`).
                DataType::Int8 => {
                    let mut b = Int8Builder::new();
                    values.for_each(|v| {
                        let short = v.and_then(Value::as_str).map(|s| {
                            crate::changelog::RowKind::from_short(s)
                                .unwrap_or_else(|| panic!("no row kind {s}"))
                                as i8
                        });
                        b.append_option(short.or_else(|| {
                            v.and_then(Value::as_i64).and_then(|c| i8::try_from(c).ok())
                        }))
                    });
                    Arc::new(b.finish())
                }
                DataType::Float64 => {
                    let mut b = Float64Builder::new();
                    values.for_each(|v| b.append_option(v.and_then(Value::as_f64)));
                    Arc::new(b.finish())
                }
                DataType::Utf8 => {
                    let mut b = StringBuilder::new();
                    values.for_each(|v| b.append_option(v.and_then(Value::as_str)));
                    Arc::new(b.finish())
                }
                DataType::Boolean => {
                    let mut b = BooleanBuilder::new();
                    values.for_each(|v| b.append_option(v.and_then(Value::as_bool)));
                    Arc::new(b.finish())
                }
                DataType::Timestamp(_, _) => {
                    let mut b = TimestampMillisecondBuilder::new();
                    values.for_each(|v| b.append_option(v.and_then(Value::as_i64)));
                    Arc::new(b.finish())
                }
                other => panic!("the harness has no JSON form for {other}"),
            };
            array
        })
        .collect();
    RecordBatch::try_new(schema.clone(), columns).unwrap_or_else(|e| panic!("a batch: {e}"))
}

/// A batch's rows as JSON objects.
pub fn rows(batch: &RecordBatch) -> Vec<Value> {
    (0..batch.num_rows())
        .map(|row| {
            let mut object = Map::new();
            for (f, column) in batch.schema().fields().iter().zip(batch.columns()) {
                let value = if column.is_null(row) {
                    Value::Null
                } else {
                    match column.data_type() {
                        DataType::Int64 => column.as_primitive::<Int64Type>().value(row).into(),
                        // A row's kind as its short form (`"+I"`).
                        DataType::Int8 if f.name() == crate::changelog::OP => {
                            let code = column.as_primitive::<Int8Type>().value(row);
                            crate::changelog::RowKind::from_code(code)
                                .map_or("?", crate::changelog::RowKind::short)
                                .into()
                        }
                        DataType::Int8 => column.as_primitive::<Int8Type>().value(row).into(),
                        DataType::Float64 => column.as_primitive::<Float64Type>().value(row).into(),
                        DataType::Utf8 => column.as_string::<i32>().value(row).into(),
                        DataType::Boolean => column.as_boolean().value(row).into(),
                        DataType::Timestamp(_, _) => column
                            .as_primitive::<TimestampMillisecondType>()
                            .value(row)
                            .into(),
                        other => panic!("the harness has no JSON form for {other}"),
                    }
                };
                object.insert(f.name().clone(), value);
            }
            Value::Object(object)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::json;

    use super::*;

    /// Two sources `l` and `r` of `{k: int, t: timestamp, v: int}` (never read: the harness
    /// feeds the operator), each keyed by `k`, and `transform` (YAML of the node `op`, reading
    /// `lk` and `rk`; `rk` also feeds a sink of its own, for operators with one input).
    fn job(transform: &str) -> String {
        format!(
            "name: harness\nsources:\n  l: {{kind: jsonl, path: unused.jsonl, schema: {{k: int, t: timestamp, v: int}}}}\n  \
             r: {{kind: jsonl, path: unused.jsonl, schema: {{k: int, t: timestamp, v: int}}}}\n\
             transforms:\n  lk: {{kind: key-by, from: l, keys: [k]}}\n  rk: {{kind: key-by, from: r, keys: [k]}}\n  \
             op:\n{transform}\nsinks:\n  out: {{kind: blackhole, from: op}}\n  \
             rest: {{kind: blackhole, from: rk}}\n"
        )
    }

    /// A small deterministic generator (xorshift), so failures reproduce.
    struct Random(u64);

    impl Random {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n
        }
    }

    /// `(k, t, v)` rows with keys in `0..keys`, times strictly increasing from `from`.
    fn rows_of(random: &mut Random, n: usize, keys: u64, from: i64) -> Vec<(i64, i64, i64)> {
        let mut t = from;
        (0..n)
            .map(|_| {
                t += 1 + random.below(3) as i64;
                (random.below(keys) as i64, t, random.below(100) as i64)
            })
            .collect()
    }

    fn as_json(rows: &[(i64, i64, i64)]) -> Vec<Value> {
        rows.iter()
            .map(|(k, t, v)| json!({"k": k, "t": t, "v": v}))
            .collect()
    }

    /// Rows as a multiset of their JSON text.
    fn multiset(rows: impl IntoIterator<Item = Value>) -> BTreeMap<String, usize> {
        let mut out = BTreeMap::new();
        for r in rows {
            *out.entry(r.to_string()).or_insert(0) += 1;
        }
        out
    }

    /// A regular join with a condition, fed both sides interleaved with a checkpoint and
    /// restore in the middle: exactly the pairs of a nested loop over everything fed.
    #[test]
    fn a_join_restored_mid_stream_emits_exactly_the_nested_loop_pairs() {
        let mut h = Harness::new(
            &job(
                "    kind: join\n    left: lk\n    right: rk\n    where: l.v < r.v\n    \
                  columns: {k: l.k, lt: l.t, rt: r.t}",
            ),
            "op",
        );
        let mut random = Random(0x9e37_79b9_7f4a_7c15);
        let left = rows_of(&mut random, 300, 7, 0);
        let right = rows_of(&mut random, 300, 7, 0);
        let mut got = Vec::new();
        for (n, (l, r)) in left.chunks(50).zip(right.chunks(50)).enumerate() {
            h.push(0, &as_json(l));
            h.push(1, &as_json(r));
            if n == 2 {
                h.restart();
            }
            got.extend(h.take());
        }
        h.finish();
        got.extend(h.take());
        let mut expected = Vec::new();
        for (lk, lt, lv) in &left {
            for (rk, rt, rv) in &right {
                if lk == rk && lv < rv {
                    expected.push(json!({"k": lk, "lt": lt, "rt": rt}));
                }
            }
        }
        assert!(!expected.is_empty());
        assert_eq!(multiset(got), multiset(expected));
    }

    /// A join whose batches repeat one hot key many times (its matches are looked up once
    /// per batch and shared), with values that are sometimes null (the condition is then
    /// null and drops the pair) and batches whose pairs all fail: exactly the nested loop's
    /// pairs.
    #[test]
    fn a_join_of_hot_keys_and_null_values_emits_exactly_the_nested_loop_pairs() {
        let mut h = Harness::new(
            &job(
                "    kind: join\n    left: lk\n    right: rk\n    where: l.v < r.v\n    \
                  columns: {k: l.k, lt: l.t, rt: r.t, lv: l.v, rv: r.v}",
            ),
            "op",
        );
        let mut random = Random(0x5851_f42d_4c95_7f2d);
        // (k, t, v): key 0 for about two rows in three, v null for about one in eight.
        let mut rows = |n: usize, from: i64, high: bool| -> Vec<(i64, i64, Option<i64>)> {
            (0..n)
                .map(|i| {
                    let k = if random.below(3) < 2 {
                        0
                    } else {
                        1 + random.below(5) as i64
                    };
                    let v = (random.below(8) != 0).then(|| {
                        // A batch of right rows all below every left value: no pair passes.
                        if high {
                            100 + random.below(50) as i64
                        } else {
                            random.below(100) as i64
                        }
                    });
                    (k, from + i as i64, v)
                })
                .collect()
        };
        let as_json = |rows: &[(i64, i64, Option<i64>)]| -> Vec<Value> {
            rows.iter()
                .map(|(k, t, v)| json!({"k": k, "t": t, "v": v}))
                .collect()
        };
        let mut left = Vec::new();
        let mut right = Vec::new();
        let mut got = Vec::new();
        for n in 0..8 {
            // Left rows with high values on even batches make a right batch match nothing.
            let l = rows(40, n * 100, n % 2 == 0);
            let r = rows(40, n * 100 + 50, false);
            h.push(0, &as_json(&l));
            h.push(1, &as_json(&r));
            left.extend(l);
            right.extend(r);
            got.extend(h.take());
            if n == 4 {
                h.restart();
            }
        }
        h.finish();
        got.extend(h.take());
        let mut expected = Vec::new();
        for (lk, lt, lv) in &left {
            for (rk, rt, rv) in &right {
                if let (Some(lv), Some(rv)) = (lv, rv)
                    && lk == rk
                    && lv < rv
                {
                    expected.push(json!({"k": lk, "lt": lt, "rt": rt, "lv": lv, "rv": rv}));
                }
            }
        }
        assert!(expected.len() > 1000, "{} pairs", expected.len());
        assert_eq!(multiset(got), multiset(expected));
    }

    /// Top-n per key and time, over batches where one hot key has most rows and
    /// values repeat (ties), restored mid-stream: each group's rows are what sorting all of
    /// its rows gives, for `n: 2` with ties and for `n: 1` with a tie-breaker, and with a rank
    /// column, their ranks (`ROW_NUMBER()`'s, or with ties `RANK()`'s).
    #[test]
    fn top_n_keeps_exactly_each_groups_first_rows_of_hot_keys_and_ties() {
        for (n, ties, rank) in [
            (2usize, true, false),
            (1, false, false),
            (3, false, false),
            (2, true, true),
            (3, false, true),
        ] {
            let rank_column = if rank { "\n    rank-column: r" } else { "" };
            let mut h = Harness::new(
                &job(&format!(
                    "    kind: top-n\n    from: lk\n    order-by: [v DESC, t ASC]\n    \
                     n: {n}\n    with-ties: {ties}\n    fire-at: t{rank_column}"
                )),
                "op",
            );
            let mut random = Random(0x0bad_5eed_1234_5678 ^ n as u64);
            // (k, t, v): 30 rows a millisecond, key 0 for about three in four, v in 0..6 so
            // ties are common.
            let mut rows = Vec::new();
            for i in 0..1200i64 {
                let k = if random.below(4) < 3 {
                    0
                } else {
                    1 + random.below(4) as i64
                };
                rows.push((k, i / 30, random.below(6) as i64));
            }
            let mut got = Vec::new();
            for (b, chunk) in rows.chunks(64).enumerate() {
                h.push(0, &as_json(chunk));
                // Rows of the last time seen may still come.
                h.watermark(chunk.last().map_or(0, |r| r.1) - 1);
                if b == 4 {
                    h.restart();
                }
                got.extend(h.take());
            }
            h.watermark(i64::MAX);
            h.finish();
            got.extend(h.take());

            // Naive: sort each group's rows by (v desc, t asc, arrival), keep the first n, or
            // every row tied with the n-th on (v, t).
            // Per (k, t): each row's (v, t, arrival).
            type Group = Vec<(i64, i64, usize)>;
            let mut groups: BTreeMap<(i64, i64), Group> = BTreeMap::new();
            for (arrival, (k, t, v)) in rows.iter().enumerate() {
                groups.entry((*k, *t)).or_default().push((*v, *t, arrival));
            }
            let mut expected = Vec::new();
            for ((k, _), mut g) in groups {
                g.sort_by_key(|&(v, t, arrival)| (std::cmp::Reverse(v), t, arrival));
                let nth = g.get(n - 1).map(|&(v, t, _)| (v, t));
                for (i, &(v, t, _)) in g.iter().enumerate() {
                    if i < n || (ties && Some((v, t)) == nth) {
                        let mut row = json!({"k": k, "t": t, "v": v});
                        if rank {
                            let before = g[..i].iter().filter(|o| (o.0, o.1) != (v, t));
                            let r = if ties { before.count() + 1 } else { i + 1 };
                            row["r"] = json!(r);
                        }
                        expected.push(row);
                    }
                }
            }
            assert!(expected.len() > 60, "{} rows", expected.len());
            assert_eq!(
                multiset(got),
                multiset(expected),
                "n {n}, ties {ties}, rank {rank}"
            );
        }
    }

    /// A tumbling window join, inner, restored between watermarks: every pair of the same
    /// key and 10 ms window, each once, and none before the watermark passes its window.
    #[test]
    fn a_window_join_emits_each_windows_pairs_once_after_its_end() {
        let mut h = Harness::new(
            &job(
                "    kind: window-join\n    left: lk\n    right: rk\n    left-time: t\n    \
                  right-time: t\n    window: {type: tumbling, size: 10ms}\n    \
                  columns: {k: l.k, lv: l.v, rv: r.v, start: window_start}",
            ),
            "op",
        );
        let mut random = Random(0x2545_f491_4f6c_dd1d);
        let left = rows_of(&mut random, 400, 5, 0);
        let right = rows_of(&mut random, 400, 5, 0);
        let mut got = Vec::new();
        for (n, (l, r)) in left.chunks(40).zip(right.chunks(40)).enumerate() {
            h.push(0, &as_json(l));
            h.push(1, &as_json(r));
            // Both sides are past the lesser of their last times.
            let watermark = l.last().unwrap().1.min(r.last().unwrap().1);
            h.watermark(watermark);
            for row in h.take() {
                let start = row["start"].as_i64().unwrap();
                assert!(
                    start + 10 <= watermark + 1,
                    "window [{start}, {}) emitted at watermark {watermark}",
                    start + 10
                );
                got.push(row);
            }
            if n % 3 == 1 {
                h.restart();
            }
        }
        h.watermark(i64::MAX);
        h.finish();
        got.extend(h.take());
        let window = |t: i64| t - t.rem_euclid(10);
        let mut expected = Vec::new();
        for (lk, lt, lv) in &left {
            for (rk, rt, rv) in &right {
                if lk == rk && window(*lt) == window(*rt) {
                    expected.push(json!({"k": lk, "lv": lv, "rv": rv, "start": window(*lt)}));
                }
            }
        }
        assert!(!expected.is_empty());
        assert_eq!(multiset(got), multiset(expected));
    }

    /// An OVER aggregate of the last 3 rows per key, restored between watermarks: each row
    /// once, with the sum of its key's last three values up to it, in time order per key.
    #[test]
    fn an_over_aggregate_sums_each_rows_last_three_per_key_across_restores() {
        let mut h = Harness::new(
            &job(
                "    kind: over-aggregate\n    from: lk\n    order-by: [t]\n    rows: 3\n    \
                  aggregates: {s: sum(v)}",
            ),
            "op",
        );
        let mut random = Random(0x1234_5678_9abc_def1);
        let rows = rows_of(&mut random, 500, 6, 0);
        let mut got = Vec::new();
        for (n, chunk) in rows.chunks(37).enumerate() {
            // Out of order within a chunk: the operator orders rows by time itself.
            let mut shuffled = chunk.to_vec();
            shuffled.reverse();
            h.push(0, &as_json(&shuffled));
            h.watermark(chunk.last().unwrap().1);
            got.extend(h.take());
            if n % 4 == 3 {
                h.restart();
            }
        }
        h.watermark(i64::MAX);
        h.finish();
        got.extend(h.take());
        let mut last: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
        let mut expected = Vec::new();
        for (k, t, v) in &rows {
            let values = last.entry(*k).or_default();
            values.push(*v);
            let s: i64 = values.iter().rev().take(3).sum();
            expected.push(json!({"k": k, "t": t, "v": v, "s": s}));
        }
        assert_eq!(multiset(got.iter().cloned()), multiset(expected.clone()));
        // Per key, in time order.
        for k in 0..6 {
            let times = |rows: &[Value]| -> Vec<i64> {
                rows.iter()
                    .filter(|r| r["k"] == k)
                    .map(|r| r["t"].as_i64().unwrap())
                    .collect()
            };
            assert_eq!(times(&got), times(&expected), "key {k}");
        }
    }
}
