//! The local phase of two-phase aggregation: partial accumulators per key (and window) for each
//! batch, before the hash exchange.
//!
//! A running or windowed aggregate reads a keyed stream, so every record crosses the exchange
//! and updates keyed state once (once per window it falls in, for sliding windows). When half of
//! the records share one key, as Nexmark's hot auction makes them, one subtask of the aggregate
//! does half of that work whatever the parallelism. The planner therefore chains this operator
//! to each producer of an aggregate's input (Flink's local-global aggregation, `agg-phase-strategy
//! TWO_PHASE`): it folds each batch into one accumulator per key (and window) and sends those, so
//! a hot key costs one partial per batch instead of one record per event. The aggregate then
//! merges partials instead of adding rows.
//!
//! It keeps no state and holds nothing back: each batch becomes its partials in the same call,
//! so barriers, watermarks and checkpoints pass it exactly as they pass a `map`, and a job can
//! switch the phase on or off between a checkpoint and its restore. Every accumulator weir has
//! merges exactly (sums, counts, min/max, avg as sum and count, `count(DISTINCT)` as its set,
//! `max_by`/`min_by` as the best row), so results are identical; only how many upsert rows an
//! aggregate emits per key changes (one per partial batch, as before one per input batch).
//! Session windows are not split: whether a record joins a session depends on the sessions
//! already in state, which only the global phase sees.
//!
//! The wire format of a partial: the key columns, for windows `window_start` and `window_end`
//! (a slice's bounds where the global phase keeps slices) and [`RECORDS_COLUMN`], then
//! [`PARTIAL_COLUMN`], the accumulators encoded as keyed state stores them.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use arrow_array::builder::BinaryBuilder;
use arrow_array::{ArrayRef, Int64Array, RecordBatch, TimestampMillisecondArray};
use arrow_row::{RowConverter, SortField};
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use hashbrown::HashMap;
use hashbrown::hash_map::Entry;
use weir_state::{StateValue, Window};

use super::accumulators::{Acc, Accumulators, evaluate_all, new_accs, update_all};
use super::window::Windowing;
use crate::api::time::event_times;
use crate::api::{Operator, OperatorError, SubtaskMetrics};
use crate::expr::Expr;
use crate::keys::KeySelector;

/// The column holding a partial's accumulators.
pub const PARTIAL_COLUMN: &str = "partial";
/// Windowed partials: how many records had this window as their last one (the window with the
/// latest end of those they fall in). The global phase drops a record as late exactly when its
/// last window is late, so it counts late records from this.
pub const RECORDS_COLUMN: &str = "records";

/// Event time and windows of a windowed local phase.
pub struct LocalWindows {
    pub time: Expr,
    pub windowing: Windowing,
    /// The global phase keeps the windows as slices ([`Windowing::sliced`]): a partial is then
    /// per slice, and every record of a slice has the slice's last window as its last one.
    pub sliced: bool,
}

/// What the local phase of one aggregate is, shared by its subtasks and by the global phase.
pub struct LocalPhase {
    /// The aggregate's keys, over the producer's schema.
    pub keys: Arc<KeySelector>,
    pub aggs: Arc<Accumulators>,
    pub windows: Option<LocalWindows>,
    /// The partials' schema.
    pub schema: SchemaRef,
    /// The same keys over the partials' schema: the exchange routes partials by it and the
    /// global phase addresses its state with it (the same values, so the same hashes and
    /// state keys as the records would have had).
    pub partial_keys: Arc<KeySelector>,
}

impl LocalPhase {
    pub fn new(
        keys: Arc<KeySelector>,
        aggs: Arc<Accumulators>,
        windows: Option<LocalWindows>,
    ) -> Result<Self, String> {
        if windows.as_ref().is_some_and(|w| w.windowing.is_session()) {
            return Err("session windows have no local phase".into());
        }
        let ts = DataType::Timestamp(TimeUnit::Millisecond, None);
        let mut fields: Vec<Field> = keys
            .names()
            .iter()
            .zip(keys.exprs())
            .map(|(n, e)| Field::new(n, e.data_type().clone(), true))
            .collect();
        if windows.is_some() {
            fields.push(Field::new("window_start", ts.clone(), false));
            fields.push(Field::new("window_end", ts, false));
            fields.push(Field::new(RECORDS_COLUMN, DataType::Int64, false));
        }
        fields.push(Field::new(PARTIAL_COLUMN, DataType::Binary, false));
        let schema = Arc::new(Schema::new(fields));
        // Key columns are the partials' first columns, in the keys' order: quoted references
        // to them compile whatever the names are.
        let exprs = keys
            .names()
            .iter()
            .map(|n| {
                Expr::compile(&format!("\"{}\"", n.replace('"', "\"\"")), &schema)
                    .map_err(|e| format!("the key `{n}` over the partials: {e}"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let partial_keys = Arc::new(KeySelector::new(
            exprs,
            keys.names().to_vec(),
            keys.key_groups(),
        ));
        Ok(LocalPhase {
            keys,
            aggs,
            windows,
            schema,
            partial_keys,
        })
    }
}

/// One subtask of the local phase.
pub struct LocalAggregate {
    phase: Arc<LocalPhase>,
    /// Key columns to comparable bytes, to group rows by (no key groups: the exchange after
    /// this operator computes those from the partials' key columns).
    converter: RowConverter,
    metrics: Arc<SubtaskMetrics>,
    scratch: Vec<Window>,
}

impl LocalAggregate {
    pub fn new(
        phase: Arc<LocalPhase>,
        metrics: Arc<SubtaskMetrics>,
    ) -> Result<Self, OperatorError> {
        let fields = phase
            .keys
            .exprs()
            .iter()
            .map(|e| SortField::new(e.data_type().clone()))
            .collect();
        Ok(LocalAggregate {
            converter: RowConverter::new(fields)?,
            phase,
            metrics,
            scratch: Vec::new(),
        })
    }
}

/// One partial being built: the row its key was first seen at, its window, the records whose
/// last window it is, its accumulators.
struct Partial {
    first_row: usize,
    window: Option<Window>,
    records: i64,
    accs: Vec<Acc>,
}

impl Operator for LocalAggregate {
    fn process_batch(
        &mut self,
        _input: usize,
        batch: RecordBatch,
        out: &mut Vec<RecordBatch>,
    ) -> Result<(), OperatorError> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let calls = &self.phase.aggs.calls;
        let key_columns = self.phase.keys.evaluate(&batch)?;
        let keys = self.converter.convert_columns(&key_columns)?;
        let args = evaluate_all(calls, &batch)?;
        // Partials in order of first appearance, found by (key bytes, window start), with
        // hashbrown's default (foldhash) hasher: SipHash would cost as much as the folding.
        let mut index: HashMap<(&[u8], i64), usize> = HashMap::with_capacity(batch.num_rows());
        let mut partials: Vec<Partial> = Vec::new();
        let mut fold =
            |row: usize, window: Option<Window>, last: bool| -> Result<(), OperatorError> {
                let slot = (keys.row(row).data(), window.map_or(0, |w| w.start));
                let i = match index.entry(slot) {
                    Entry::Occupied(e) => *e.get(),
                    Entry::Vacant(e) => {
                        partials.push(Partial {
                            first_row: row,
                            window,
                            records: 0,
                            accs: new_accs(calls),
                        });
                        *e.insert(partials.len() - 1)
                    }
                };
                let p = &mut partials[i];
                p.records += i64::from(last);
                update_all(&mut p.accs, calls, &args, row)
            };
        match &self.phase.windows {
            None => {
                for row in 0..batch.num_rows() {
                    fold(row, None, true)?;
                }
            }
            Some(w) => {
                let times = event_times(&w.time.evaluate(&batch)?)?;
                let mut no_time = 0u64;
                for (row, t) in times.iter().enumerate() {
                    // A record without an event time is dropped here, as the global phase
                    // would drop it, and counted the same way.
                    let Some(t) = *t else {
                        no_time += 1;
                        continue;
                    };
                    if w.sliced {
                        fold(row, w.windowing.slice(t), true)?;
                        continue;
                    }
                    w.windowing.assign(t, &mut self.scratch);
                    let last = self.scratch.iter().map(|w| w.end).max();
                    for window in &self.scratch {
                        fold(row, Some(*window), Some(window.end) == last)?;
                    }
                }
                if no_time > 0 {
                    self.metrics
                        .late_dropped
                        .fetch_add(no_time, Ordering::Relaxed);
                }
            }
        }
        if partials.is_empty() {
            return Ok(());
        }
        let first_rows: arrow_array::UInt32Array = partials
            .iter()
            .map(|p| u32::try_from(p.first_row).ok())
            .collect();
        let mut columns: Vec<ArrayRef> = key_columns
            .iter()
            .map(|c| arrow_select::take::take(c.as_ref(), &first_rows, None))
            .collect::<Result<_, _>>()?;
        if self.phase.windows.is_some() {
            let window = |p: &Partial| p.window.unwrap_or(Window::new(0, 0));
            let starts: TimestampMillisecondArray =
                partials.iter().map(|p| Some(window(p).start)).collect();
            let ends: TimestampMillisecondArray =
                partials.iter().map(|p| Some(window(p).end)).collect();
            let records: Int64Array = partials.iter().map(|p| Some(p.records)).collect();
            columns.push(Arc::new(starts));
            columns.push(Arc::new(ends));
            columns.push(Arc::new(records));
        }
        let mut encoded = BinaryBuilder::with_capacity(partials.len(), partials.len() * 16);
        let mut buf = Vec::new();
        for p in &partials {
            buf.clear();
            p.accs.encode(&mut buf);
            encoded.append_value(&buf);
        }
        columns.push(Arc::new(encoded.finish()));
        out.push(RecordBatch::try_new(self.phase.schema.clone(), columns)?);
        Ok(())
    }
}

/// The accumulators of row `row` of a partials batch's [`PARTIAL_COLUMN`].
pub fn partial_at(
    column: &arrow_array::BinaryArray,
    row: usize,
) -> Result<Vec<Acc>, OperatorError> {
    Vec::<Acc>::from_bytes(column.value(row))
        .map_err(|e| OperatorError::Internal(format!("a partial aggregate does not decode: {e}")))
}

/// The [`PARTIAL_COLUMN`] of a partials batch (its last column).
pub fn partial_column(batch: &RecordBatch) -> Result<&arrow_array::BinaryArray, OperatorError> {
    use arrow_array::cast::AsArray;
    batch
        .columns()
        .last()
        .and_then(|c| c.as_binary_opt::<i32>())
        .ok_or_else(|| OperatorError::Internal("a partials batch has no partial column".into()))
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use arrow_array::cast::AsArray;
    use arrow_array::types::{Int64Type, TimestampMillisecondType};
    use arrow_array::{Array, StringArray};
    use weir_state::KeyedStateBackend;
    use weir_state::key_groups::KeyGroupRange;

    use super::*;
    use crate::operators::accumulators::AggCall;
    use crate::operators::aggregate::Aggregate;
    use crate::operators::keyed::KeyEncoder;
    use crate::operators::window_aggregate::{WindowAggregate, WindowAggregateDef};
    use crate::spec::{HumanDuration, WindowSpec};

    /// xorshift: deterministic input without a crate.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
    }

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, true),
            Field::new("t", DataType::Timestamp(TimeUnit::Millisecond, None), true),
            Field::new("v", DataType::Int64, true),
            Field::new("s", DataType::Utf8, true),
        ]))
    }

    fn heap() -> KeyedStateBackend {
        KeyedStateBackend::heap(128, KeyGroupRange::of_subtask(0, 128, 1))
    }

    fn keys() -> Arc<KeySelector> {
        Arc::new(KeySelector::new(
            vec![Expr::compile("k", &schema()).unwrap()],
            vec!["k".into()],
            128,
        ))
    }

    fn calls(sqls: &[&str]) -> Accumulators {
        Accumulators {
            calls: sqls
                .iter()
                .map(|s| AggCall::compile(s, &schema()).unwrap())
                .collect(),
        }
    }

    type Row = (Option<i64>, Option<i64>, Option<i64>, Option<String>);

    /// Half of the rows on one hot key, the rest over 20 keys and NULL; some NULL values.
    fn random_batch(rng: &mut Rng, time: &mut i64) -> (RecordBatch, Vec<Row>) {
        let n = 1 + (rng.next() % 400) as usize;
        let mut rows = Vec::new();
        for _ in 0..n {
            let k = if rng.next().is_multiple_of(2) {
                Some(7)
            } else {
                (!rng.next().is_multiple_of(11)).then(|| (rng.next() % 20) as i64)
            };
            // Event time mostly advances, sometimes steps back up to 30 ms.
            *time += (rng.next() % 5) as i64;
            let t = (!rng.next().is_multiple_of(50)).then(|| *time - (rng.next() % 30) as i64);
            let v = (!rng.next().is_multiple_of(6)).then(|| (rng.next() % 1000) as i64 - 300);
            let s = (!rng.next().is_multiple_of(4)).then(|| format!("s{}", rng.next() % 40));
            rows.push((k, t, v, s));
        }
        let batch = RecordBatch::try_new(
            schema(),
            vec![
                Arc::new(Int64Array::from(
                    rows.iter().map(|r| r.0).collect::<Vec<_>>(),
                )),
                Arc::new(TimestampMillisecondArray::from(
                    rows.iter().map(|r| r.1).collect::<Vec<_>>(),
                )),
                Arc::new(Int64Array::from(
                    rows.iter().map(|r| r.2).collect::<Vec<_>>(),
                )),
                Arc::new(StringArray::from(
                    rows.iter().map(|r| r.3.clone()).collect::<Vec<_>>(),
                )),
            ],
        )
        .unwrap();
        (batch, rows)
    }

    fn cells(batch: &RecordBatch, row: usize, from: usize) -> Vec<String> {
        let end = crate::changelog::op_column(batch.schema_ref()).unwrap_or(batch.num_columns());
        (from..end)
            .map(|c| arrow_cast::display::array_value_to_string(batch.column(c), row).unwrap())
            .collect()
    }

    /// count(*), sum(v), min(v), max(s), avg(v), count(DISTINCT s), max_by(s, v) of rows, by
    /// hand; max_by keeps the first row of the largest v, as the accumulator promises.
    fn naive(rows: &[&Row]) -> Vec<String> {
        let vs: Vec<i64> = rows.iter().filter_map(|r| r.2).collect();
        let ss: Vec<&String> = rows.iter().filter_map(|r| r.3.as_ref()).collect();
        let show = |o: Option<String>| o.unwrap_or_default();
        // NULL in either argument leaves a row out of max_by, as NULLs leave every aggregate.
        let mut best: Option<(i64, &String)> = None;
        for r in rows {
            if let (Some(v), Some(s)) = (r.2, &r.3)
                && best.is_none_or(|(b, _)| v > b)
            {
                best = Some((v, s));
            }
        }
        vec![
            rows.len().to_string(),
            show((!vs.is_empty()).then(|| vs.iter().sum::<i64>().to_string())),
            show(vs.iter().min().map(|x| x.to_string())),
            show(ss.iter().max().map(|x| x.to_string())),
            // `{:?}` writes a whole f64 as Arrow does (`3.0`, not `3`).
            show(
                (!vs.is_empty())
                    .then(|| format!("{:?}", vs.iter().sum::<i64>() as f64 / vs.len() as f64)),
            ),
            ss.iter().collect::<BTreeSet<_>>().len().to_string(),
            show(best.map(|(_, s)| s.clone())),
        ]
    }

    const CALLS: [&str; 7] = [
        "count(*)",
        "sum(v)",
        "min(v)",
        "max(s)",
        "avg(v)",
        "count(DISTINCT s)",
        "max_by(s, v)",
    ];

    #[test]
    fn two_phase_running_aggregates_equal_a_naive_fold_with_a_hot_key() {
        let aggs = Arc::new(calls(&CALLS));
        let phase = Arc::new(LocalPhase::new(keys(), aggs.clone(), None).unwrap());
        let mut local =
            LocalAggregate::new(phase.clone(), Arc::new(SubtaskMetrics::default())).unwrap();
        let names: Vec<String> = (0..CALLS.len()).map(|i| format!("a{i}")).collect();
        let out_schema = Aggregate::output_schema(&keys(), &names, &aggs.calls, false);
        let mut global = Aggregate::new(
            KeyEncoder::new(phase.partial_keys.clone()).unwrap(),
            aggs.clone(),
            out_schema,
            heap(),
            false,
        )
        .unwrap()
        .merging_partials(true);

        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
        let mut time = 0;
        let mut all: Vec<Row> = Vec::new();
        let mut last: BTreeMap<Option<i64>, Vec<String>> = BTreeMap::new();
        for _ in 0..60 {
            let (batch, rows) = random_batch(&mut rng, &mut time);
            let distinct: BTreeSet<Option<i64>> = rows.iter().map(|r| r.0).collect();
            all.extend(rows);
            let mut partials = Vec::new();
            local.process_batch(0, batch, &mut partials).unwrap();
            assert_eq!(partials.len(), 1);
            assert_eq!(
                partials[0].num_rows(),
                distinct.len(),
                "one partial per key of the batch"
            );
            let mut out = Vec::new();
            global
                .process_batch(0, partials.remove(0), &mut out)
                .unwrap();
            for b in out {
                let k = b.column(0).as_primitive::<Int64Type>();
                for row in 0..b.num_rows() {
                    last.insert(k.is_valid(row).then(|| k.value(row)), cells(&b, row, 1));
                }
            }
        }
        let mut by_key: BTreeMap<Option<i64>, Vec<&Row>> = BTreeMap::new();
        for r in &all {
            by_key.entry(r.0).or_default().push(r);
        }
        assert_eq!(last.len(), by_key.len(), "every key, NULL included");
        for (k, rows) in &by_key {
            assert_eq!(last[k], naive(rows), "key {k:?}");
        }
    }

    #[test]
    fn two_phase_sliding_windows_equal_a_naive_assignment_and_count_late_records() {
        two_phase_sliding_windows(false);
    }

    #[test]
    fn two_phase_sliced_windows_equal_a_naive_assignment_and_count_late_records() {
        two_phase_sliding_windows(true);
    }

    fn two_phase_sliding_windows(sliced: bool) {
        let (size, slide) = (20, 5);
        let window = WindowSpec::Sliding {
            size: HumanDuration(std::time::Duration::from_millis(size as u64)),
            slide: HumanDuration(std::time::Duration::from_millis(slide as u64)),
        };
        let windowing = Windowing::from_spec(&window).unwrap();
        let aggs = calls(&CALLS);
        let time = Expr::compile("t", &schema()).unwrap();
        let phase = Arc::new(
            LocalPhase::new(
                keys(),
                Arc::new(aggs.clone()),
                Some(LocalWindows {
                    time: time.clone(),
                    windowing,
                    sliced,
                }),
            )
            .unwrap(),
        );
        let local_metrics = Arc::new(SubtaskMetrics::default());
        let mut local = LocalAggregate::new(phase.clone(), local_metrics.clone()).unwrap();
        let names: Vec<String> = (0..CALLS.len()).map(|i| format!("a{i}")).collect();
        let def = Arc::new(WindowAggregateDef {
            time,
            windowing,
            lateness: 0,
            sliced,
            schema: WindowAggregateDef::output_schema(&keys(), &names, &aggs.calls),
            aggs,
        });
        let global_metrics = Arc::new(SubtaskMetrics::default());
        let mut global = WindowAggregate::new(
            def,
            KeyEncoder::new(phase.partial_keys.clone()).unwrap(),
            heap(),
            global_metrics.clone(),
        )
        .unwrap()
        .merging_partials(true);

        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut now = 0;
        let mut watermark = i64::MIN;
        // The naive side: rows per (key, window start) that were live when they came, and
        // records dropped (no time, or every window already closed).
        let mut expected: BTreeMap<(Option<i64>, i64), Vec<Row>> = BTreeMap::new();
        let mut late = 0u64;
        let mut got: BTreeMap<(Option<i64>, i64), Vec<String>> = BTreeMap::new();
        let collect = |out: Vec<RecordBatch>,
                       got: &mut BTreeMap<(Option<i64>, i64), Vec<String>>| {
            for b in out {
                let k = b.column(0).as_primitive::<Int64Type>();
                let start = b.column(1).as_primitive::<TimestampMillisecondType>();
                for row in 0..b.num_rows() {
                    let key = (k.is_valid(row).then(|| k.value(row)), start.value(row));
                    assert!(
                        got.insert(key, cells(&b, row, 3)).is_none(),
                        "a window fires once without lateness: {key:?}"
                    );
                }
            }
        };
        for _ in 0..60 {
            let (batch, rows) = random_batch(&mut rng, &mut now);
            for r in &rows {
                let Some(t) = r.1 else {
                    late += 1;
                    continue;
                };
                let last_start = t.div_euclid(slide) * slide;
                let mut live = false;
                for start in (last_start - size + slide..=last_start).step_by(slide as usize) {
                    if start + size - 1 > watermark {
                        live = true;
                        expected.entry((r.0, start)).or_default().push(r.clone());
                    }
                }
                late += u64::from(!live);
            }
            let mut partials = Vec::new();
            local.process_batch(0, batch, &mut partials).unwrap();
            let mut out = Vec::new();
            for p in partials {
                global.process_batch(0, p, &mut out).unwrap();
            }
            watermark = now - 25;
            global.process_watermark(watermark, &mut out).unwrap();
            collect(out, &mut got);
        }
        let mut out = Vec::new();
        global.process_watermark(i64::MAX, &mut out).unwrap();
        collect(out, &mut got);
        let expected: BTreeMap<_, _> = expected
            .iter()
            .map(|(k, rows)| (*k, naive(&rows.iter().collect::<Vec<_>>())))
            .collect();
        assert!(late > 0, "the input has late records");
        let differ: Vec<_> = expected
            .iter()
            .filter(|(k, v)| got.get(k) != Some(v))
            .map(|(k, v)| (k, v, got.get(k)))
            .take(5)
            .collect();
        assert!(differ.is_empty(), "(window, expected, got): {differ:?}");
        assert_eq!(
            got.len(),
            expected.len(),
            "no window fired that should not have"
        );
        let dropped = local_metrics.late_dropped.load(Ordering::Relaxed)
            + global_metrics.late_dropped.load(Ordering::Relaxed);
        assert_eq!(dropped, late, "late records counted once each");
    }

    #[test]
    fn sessions_have_no_local_phase() {
        let windows = LocalWindows {
            time: Expr::compile("t", &schema()).unwrap(),
            windowing: Windowing::Session { gap: 10 },
            sliced: false,
        };
        assert!(LocalPhase::new(keys(), Arc::new(calls(&["count(*)"])), Some(windows)).is_err());
    }
}
