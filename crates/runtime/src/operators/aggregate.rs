//! `aggregate`: a running (non-windowed) aggregation per key.
//!
//! Input rows update the accumulators of their keys (through the keyed state backend) as they
//! come; the operator remembers, per key touched since it last emitted, the row it last
//! emitted for the key. When it emits, each such key's change goes out: `+I` for a new key,
//! `-U` of the old row and `+U` of the new one for an update (nothing when the values ended as
//! they were), and, over an updating input, `-D` when the key's last row was taken back. The
//! output is an updating stream keyed by the key columns ([`crate::changelog`]).
//!
//! It emits at the end of every input batch, so a hot key costs one update per batch, not one
//! per record; or, with a **mini-batch** (`mini-batch: {interval, size}`, Flink's
//! `table.exec.mini-batch.*`), after `size` input rows or every `interval` of processing time,
//! so it costs one update per mini-batch. A mini-batch holds no input rows: the accumulators
//! absorb them at once (a hot key's accumulator stays in the state's cache), and what is held
//! is one entry per key touched, at most `size`. The task flushes it every `interval`, the
//! chain before each checkpoint barrier (so a snapshot owes nothing downstream and nothing
//! held is ever checkpointed), and `finish` at the end of input. Unlike Flink's
//! `MiniBatchGroupAggFunction`, which buffers input rows per key and folds them in when the
//! bundle ends to save state accesses, weir's state already caches hot keys; what batching
//! saves here is output: every update it does not emit is work saved downstream.
//!
//! Over an append-only input the accumulators are the plain ones (and may be the global phase
//! of a two-phase aggregation: the local phase folds each batch into partials before the
//! exchange, and a mini-batch then merges many partials per key before emitting); over an
//! updating input they are retractable ([`RetractingAccumulators`]: sums with their counts,
//! `min`/`max`/`count(DISTINCT)` as multisets) and count the key's live rows.

use std::hash::BuildHasher;
use std::sync::Arc;
use std::time::Duration;

use arrow_array::RecordBatch;
use arrow_schema::{Field, Schema, SchemaRef};
use hashbrown::{DefaultHashBuilder, HashTable};
use weir_state::{AggregatingId, KeyRef, KeyedStateBackend, NO_NAMESPACE};

use super::accumulators::{Accumulators, RetractingAccumulators, Scalar, column, evaluate_all};
pub use super::accumulators::{AggCall, AggFn};
use super::keyed::KeyEncoder;
use super::local_aggregate::{partial_at, partial_column};
use crate::api::Operator;
use crate::api::OperatorError;
use crate::api::time::{BEGINNING_OF_TIME, END_OF_TIME};
use crate::changelog::{self, ChangelogMode, RowKind};
use crate::keys::KeySelector;

/// The accumulators of the keys, as the input's mode needs them.
enum Accs {
    /// Over an append-only input: rows (or the local phase's partials) are only added.
    Adding(AggregatingId<Accumulators>),
    /// Over an updating input: rows are added and taken back.
    Retracting(AggregatingId<RetractingAccumulators>),
}

/// When the aggregate emits: after this many input rows or this much processing time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MiniBatch {
    pub size: usize,
    pub interval: Duration,
}

pub struct Aggregate {
    aggs: Arc<Accumulators>,
    retracting: Arc<RetractingAccumulators>,
    schema: SchemaRef,
    keys: KeyEncoder,
    state: KeyedStateBackend,
    accs: Accs,
    /// The global phase of two-phase aggregation: the input is partials
    /// ([`super::local_aggregate`]), merged rather than added.
    partials: bool,
    /// `None`: emit after every input batch.
    mini_batch: Option<MiniBatch>,
    /// The keys touched since the aggregate last emitted.
    pending: Pending,
    /// The last watermark passed on: while changes are held, later watermarks wait behind
    /// them (the output watermark lags; it never overtakes a held change).
    forwarded: i64,
}

/// The keys touched since the aggregate last emitted, each with the row it last emitted for
/// the key, in order of first touch. Holds at most one entry per input row absorbed, so a
/// mini-batch of `size` rows bounds it.
struct Pending {
    /// Input rows absorbed.
    rows: usize,
    /// Every key's bytes, end to end (one allocation, reused from one emission to the next).
    bytes: Vec<u8>,
    keys: Vec<PendingKey>,
    /// A key's index in `keys`, found by its bytes.
    index: HashTable<usize>,
    hasher: DefaultHashBuilder,
    /// The input batch being absorbed (a count), and the keys it touched (indices into
    /// `keys`): an updating input's emptied keys are cleared from state after each batch.
    batch: u64,
    touched: Vec<usize>,
}

struct PendingKey {
    start: usize,
    end: usize,
    group: u32,
    /// The input batch that last touched it.
    batch: u64,
    /// The key's row as last emitted (`None`: none is live downstream).
    before: Option<Vec<Scalar>>,
}

impl Pending {
    fn new() -> Self {
        Pending {
            rows: 0,
            bytes: Vec::new(),
            keys: Vec::new(),
            index: HashTable::new(),
            hasher: DefaultHashBuilder::default(),
            batch: 0,
            touched: Vec::new(),
        }
    }

    fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    fn bytes_of(&self, i: usize) -> &[u8] {
        &self.bytes[self.keys[i].start..self.keys[i].end]
    }

    fn key(&self, i: usize) -> KeyRef<'_> {
        KeyRef::new(self.keys[i].group, self.bytes_of(i))
    }

    /// `key`'s index, with `before()` as its emitted row when it is new to the batch.
    fn touch<E>(
        &mut self,
        key: KeyRef<'_>,
        before: impl FnOnce() -> Result<Option<Vec<Scalar>>, E>,
    ) -> Result<(), E> {
        let hash = self.hasher.hash_one(key.bytes);
        let (bytes, keys) = (&self.bytes, &self.keys);
        let found = self
            .index
            .find(hash, |&i| &bytes[keys[i].start..keys[i].end] == key.bytes)
            .copied();
        let i = match found {
            Some(i) => i,
            None => {
                let start = self.bytes.len();
                self.bytes.extend_from_slice(key.bytes);
                self.keys.push(PendingKey {
                    start,
                    end: self.bytes.len(),
                    group: key.group,
                    batch: 0,
                    before: before()?,
                });
                let i = self.keys.len() - 1;
                let (bytes, keys, hasher) = (&self.bytes, &self.keys, &self.hasher);
                self.index.insert_unique(hash, i, |&j| {
                    hasher.hash_one(&bytes[keys[j].start..keys[j].end])
                });
                i
            }
        };
        let k = &mut self.keys[i];
        if k.batch != self.batch {
            k.batch = self.batch;
            self.touched.push(i);
        }
        Ok(())
    }

    fn clear(&mut self) {
        self.rows = 0;
        self.bytes.clear();
        self.keys.clear();
        self.index.clear();
        self.touched.clear();
    }
}

impl Aggregate {
    /// The output schema: key columns, then one column per aggregate, then the row kind;
    /// `updating_input` says whether the input takes rows back (then keys can be deleted).
    pub fn output_schema(
        keys: &KeySelector,
        names: &[String],
        calls: &[AggCall],
        updating_input: bool,
    ) -> SchemaRef {
        let mut fields: Vec<Field> = keys
            .names()
            .iter()
            .zip(keys.exprs())
            .map(|(n, e)| Field::new(n, e.data_type().clone(), true))
            .collect();
        fields.extend(
            names
                .iter()
                .zip(calls)
                .map(|(n, c)| Field::new(n, c.data_type.clone(), true)),
        );
        let mut kinds = vec![RowKind::UpdateBefore, RowKind::UpdateAfter];
        if updating_input {
            kinds.push(RowKind::Delete);
        }
        ChangelogMode::updating(&kinds, Some(keys.names().to_vec())).apply(&Schema::new(fields))
    }

    /// `updating_input`: whether the input is an updating stream (see the module's text).
    pub fn new(
        keys: KeyEncoder,
        aggs: Arc<Accumulators>,
        schema: SchemaRef,
        mut state: KeyedStateBackend,
        updating_input: bool,
    ) -> Result<Self, OperatorError> {
        let retracting = Arc::new(RetractingAccumulators {
            calls: aggs.calls.clone(),
        });
        let accs = if updating_input {
            Accs::Retracting(state.aggregating_state("accumulators")?)
        } else {
            Accs::Adding(state.aggregating_state("accumulators")?)
        };
        Ok(Self {
            aggs,
            retracting,
            schema,
            keys,
            state,
            accs,
            partials: false,
            mini_batch: None,
            pending: Pending::new(),
            forwarded: BEGINNING_OF_TIME,
        })
    }

    /// With `partials`, makes this the global phase of a two-phase aggregation: it reads the
    /// partials of [`super::local_aggregate::LocalAggregate`] (keyed by the phase's
    /// `partial_keys`, which `keys` must then be).
    pub fn merging_partials(mut self, partials: bool) -> Self {
        self.partials = partials;
        self
    }

    /// Emits once per mini-batch rather than once per input batch (see the module's text).
    /// A size of 0 is taken as 1 and an interval under 1ms as 1ms (the job file refuses both;
    /// a task cannot tick at a zero interval).
    pub fn with_mini_batch(mut self, mini_batch: Option<MiniBatch>) -> Self {
        self.mini_batch = mini_batch.map(|m| MiniBatch {
            size: m.size.max(1),
            interval: m.interval.max(Duration::from_millis(1)),
        });
        self
    }

    /// Folds `batch` into the accumulators, noting each key it touches.
    fn absorb(&mut self, batch: &RecordBatch) -> Result<(), OperatorError> {
        let keys = self.keys.encode(batch)?;
        let pending = &mut self.pending;
        pending.batch += 1;
        pending.touched.clear();
        pending.rows += batch.num_rows();
        match &self.accs {
            Accs::Adding(id) => {
                let mut state = self.state.aggregating(id, &self.aggs);
                // Rows in, or the local phase's partials: added, or merged.
                let (args, partials) = if self.partials {
                    (Vec::new(), Some(partial_column(batch)?))
                } else {
                    (evaluate_all(&self.aggs.calls, batch)?, None)
                };
                for row in 0..batch.num_rows() {
                    let key = keys.key(row);
                    pending.touch(key, || state.get(key, NO_NAMESPACE))?;
                    match partials {
                        Some(column) => {
                            state.merge(key, NO_NAMESPACE, &partial_at(column, row)?)??
                        }
                        None => state.add(key, NO_NAMESPACE, (&args, row))??,
                    };
                }
            }
            Accs::Retracting(id) => {
                let agg = &self.retracting;
                let mut state = self.state.aggregating(id, agg);
                let args = evaluate_all(&agg.calls, batch)?;
                let ops = changelog::kinds(batch);
                for row in 0..batch.num_rows() {
                    let key = keys.key(row);
                    pending.touch(key, || live(&mut state, agg, key))?;
                    let kind = ops.map_or(RowKind::Insert, |o| changelog::kind_at(o, row));
                    let sign = if kind.is_addition() { 1 } else { -1 };
                    state.add(key, NO_NAMESPACE, (&args, row, sign))??;
                }
                // A key whose last row was taken back leaves the state now, whenever its
                // change is emitted; fewer rows than none is a broken input.
                for &i in &pending.touched {
                    let key = pending.key(i);
                    let rows = state.with_accumulator(key, NO_NAMESPACE, |acc| {
                        acc.map(|a| RetractingAccumulators::rows(a))
                    })?;
                    match rows {
                        Some(0) => {
                            state.take_accumulator(key, NO_NAMESPACE)?;
                        }
                        Some(rows) if rows < 0 => {
                            return Err(OperatorError::Data(format!(
                                "more rows were taken back than were added for the key {}: \
                                 the aggregate's input changelog is not well formed",
                                self.keys.describe(key.bytes)
                            )));
                        }
                        _ => {}
                    }
                }
            }
        }
        Ok(())
    }

    /// Emits the change of every key touched since the last emission, and forgets them.
    fn emit(&mut self, out: &mut Vec<RecordBatch>) -> Result<(), OperatorError> {
        if self.pending.is_empty() {
            self.pending.clear();
            return Ok(());
        }
        let pending = &mut self.pending;
        // The output rows: per key, its index in `pending`, its kind and values.
        let mut rows: Vec<(usize, RowKind, Vec<Scalar>)> = Vec::with_capacity(pending.keys.len());
        for i in 0..pending.keys.len() {
            let key = pending.key(i);
            let after = match &self.accs {
                Accs::Adding(id) => self
                    .state
                    .aggregating(id, &self.aggs)
                    .get(key, NO_NAMESPACE)?,
                Accs::Retracting(id) => {
                    let agg = &self.retracting;
                    live(&mut self.state.aggregating(id, agg), agg, key)?
                }
            };
            match (pending.keys[i].before.take(), after) {
                (None, Some(after)) => rows.push((i, RowKind::Insert, after)),
                (Some(before), Some(after)) if before != after => {
                    rows.push((i, RowKind::UpdateBefore, before));
                    rows.push((i, RowKind::UpdateAfter, after));
                }
                (Some(before), None) => rows.push((i, RowKind::Delete, before)),
                _ => {}
            }
        }
        if !rows.is_empty() {
            let mut columns = self
                .keys
                .decode(rows.iter().map(|(i, _, _)| pending.bytes_of(*i)))?;
            for (j, call) in self.aggs.calls.iter().enumerate() {
                columns.push(column(
                    &call.data_type,
                    rows.iter().map(|(_, _, values)| values[j].clone()),
                )?);
            }
            columns.push(changelog::op_array(rows.iter().map(|(_, k, _)| *k)));
            out.push(RecordBatch::try_new(self.schema.clone(), columns)?);
        }
        pending.clear();
        Ok(())
    }
}

/// A key's current values over an updating input, when it has live rows (read in place: no
/// copy of its multisets).
fn live(
    state: &mut weir_state::AggregatingState<'_, RetractingAccumulators>,
    agg: &RetractingAccumulators,
    key: KeyRef<'_>,
) -> Result<Option<Vec<Scalar>>, weir_state::StateError> {
    state.with_accumulator(key, NO_NAMESPACE, |acc| {
        acc.filter(|a| RetractingAccumulators::rows(a) > 0)
            .map(|a| weir_state::Aggregator::result(agg, a))
    })
}

impl Operator for Aggregate {
    fn keyed_state(&mut self) -> Option<&mut KeyedStateBackend> {
        Some(&mut self.state)
    }

    fn process_batch(
        &mut self,
        _input: usize,
        batch: RecordBatch,
        out: &mut Vec<RecordBatch>,
    ) -> Result<(), OperatorError> {
        let Some(mini_batch) = self.mini_batch else {
            self.absorb(&batch)?;
            return self.emit(out);
        };
        // A batch that would overfill the mini-batch is cut where it is full.
        let mut offset = 0;
        while offset < batch.num_rows() {
            let room = mini_batch.size.saturating_sub(self.pending.rows).max(1);
            let n = room.min(batch.num_rows() - offset);
            if n == batch.num_rows() {
                self.absorb(&batch)?;
            } else {
                self.absorb(&batch.slice(offset, n))?;
            }
            offset += n;
            if self.pending.rows >= mini_batch.size {
                self.emit(out)?;
            }
        }
        Ok(())
    }

    fn process_watermark(
        &mut self,
        watermark: i64,
        out: &mut Vec<RecordBatch>,
    ) -> Result<i64, OperatorError> {
        if watermark == END_OF_TIME {
            // Event time has ended: nothing is worth holding.
            self.emit(out)?;
        }
        if self.pending.is_empty() {
            self.forwarded = watermark;
        }
        Ok(self.forwarded)
    }

    fn flush_every(&self) -> Option<Duration> {
        self.mini_batch.map(|m| m.interval)
    }

    fn flush(&mut self, out: &mut Vec<RecordBatch>) -> Result<(), OperatorError> {
        self.emit(out)
    }

    fn finish(&mut self, out: &mut Vec<RecordBatch>) -> Result<(), OperatorError> {
        self.emit(out)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use arrow_array::cast::AsArray;
    use arrow_array::types::Int64Type;
    use arrow_array::{Array, Float64Array, Int64Array, StringArray};
    use arrow_schema::DataType;
    use serde_json::{Value, json};

    use super::*;
    use crate::expr::Expr;

    fn heap() -> KeyedStateBackend {
        KeyedStateBackend::heap(
            128,
            weir_state::key_groups::KeyGroupRange::of_subtask(0, 128, 1),
        )
    }

    /// A small deterministic generator (xorshift) so the test needs no extra crates.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
    }

    fn input_schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, true),
            Field::new("v", DataType::Int64, true),
            Field::new("f", DataType::Float64, true),
            Field::new("s", DataType::Utf8, true),
        ]))
    }

    #[derive(Default, Debug, PartialEq)]
    struct Naive {
        count_star: i64,
        count_v: i64,
        sum_v: Option<i64>,
        min_v: Option<i64>,
        max_s: Option<String>,
        avg_f: (f64, i64),
    }

    #[test]
    fn running_aggregates_match_a_naive_fold_over_random_batches() {
        let schema = input_schema();
        let keys = Arc::new(KeySelector::new(
            vec![Expr::compile("k", &schema).unwrap()],
            vec!["k".into()],
            128,
        ));
        let sqls = [
            "count(*)", "count(v)", "sum(v)", "min(v)", "max(s)", "avg(f)",
        ];
        let calls: Vec<AggCall> = sqls
            .iter()
            .map(|s| AggCall::compile(s, &schema).unwrap())
            .collect();
        let names: Vec<String> = ["n", "nv", "sv", "minv", "maxs", "avgf"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let out_schema = Aggregate::output_schema(&keys, &names, &calls, false);
        let mut op = Aggregate::new(
            KeyEncoder::new(keys).unwrap(),
            Arc::new(Accumulators { calls }),
            out_schema,
            heap(),
            false,
        )
        .unwrap();

        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut naive: BTreeMap<Option<i64>, Naive> = BTreeMap::new();
        let mut last: BTreeMap<Option<i64>, Vec<String>> = BTreeMap::new();
        for _batch in 0..40 {
            let rows = 1 + (rng.next() % 300) as usize;
            let mut k = Vec::new();
            let mut v = Vec::new();
            let mut f = Vec::new();
            let mut s = Vec::new();
            for _ in 0..rows {
                let key = (!rng.next().is_multiple_of(10)).then(|| (rng.next() % 25) as i64);
                let val =
                    (!rng.next().is_multiple_of(5)).then(|| (rng.next() % 2001) as i64 - 1000);
                let fl = (!rng.next().is_multiple_of(7)).then(|| (rng.next() % 1000) as f64 / 8.0);
                let st = (!rng.next().is_multiple_of(3)).then(|| format!("s{}", rng.next() % 50));
                let n = naive.entry(key).or_default();
                n.count_star += 1;
                if let Some(x) = val {
                    n.count_v += 1;
                    n.sum_v = Some(n.sum_v.unwrap_or(0) + x);
                    n.min_v = Some(n.min_v.map_or(x, |m| m.min(x)));
                }
                if let Some(x) = &st
                    && n.max_s.as_ref().is_none_or(|m| x > m)
                {
                    n.max_s = Some(x.clone());
                }
                if let Some(x) = fl {
                    n.avg_f.0 += x;
                    n.avg_f.1 += 1;
                }
                k.push(key);
                v.push(val);
                f.push(fl);
                s.push(st);
            }
            let batch = RecordBatch::try_new(
                input_schema(),
                vec![
                    Arc::new(Int64Array::from(k)),
                    Arc::new(Int64Array::from(v)),
                    Arc::new(Float64Array::from(f)),
                    Arc::new(StringArray::from(s)),
                ],
            )
            .unwrap();
            let mut out = Vec::new();
            op.process_batch(0, batch, &mut out).unwrap();
            for b in out {
                let key = b.column(0).as_primitive::<Int64Type>();
                for row in 0..b.num_rows() {
                    let k = key.is_valid(row).then(|| key.value(row));
                    let cells = (1..b.num_columns() - 1)
                        .map(|c| {
                            arrow_cast::display::array_value_to_string(b.column(c), row).unwrap()
                        })
                        .collect();
                    last.insert(k, cells);
                }
            }
        }
        assert_eq!(
            last.len(),
            naive.len(),
            "one output key per input key, NULL included"
        );
        for (k, n) in &naive {
            let show = |o: Option<String>| o.unwrap_or_default();
            let avg = (n.avg_f.1 > 0).then(|| (n.avg_f.0 / n.avg_f.1 as f64).to_string());
            let expected = vec![
                n.count_star.to_string(),
                n.count_v.to_string(),
                show(n.sum_v.map(|x| x.to_string())),
                show(n.min_v.map(|x| x.to_string())),
                show(n.max_s.clone()),
                show(avg),
            ];
            assert_eq!(last[k], expected, "key {k:?}");
        }
    }

    #[test]
    fn a_batch_emits_one_row_per_changed_key() {
        let schema = input_schema();
        let keys = Arc::new(KeySelector::new(
            vec![Expr::compile("k", &schema).unwrap()],
            vec!["k".into()],
            128,
        ));
        let calls = vec![AggCall::compile("count(*)", &schema).unwrap()];
        let out_schema = Aggregate::output_schema(&keys, &["n".into()], &calls, false);
        let aggs = Arc::new(Accumulators { calls });
        let mut op = Aggregate::new(
            KeyEncoder::new(keys).unwrap(),
            aggs,
            out_schema,
            heap(),
            false,
        )
        .unwrap();
        let batch = RecordBatch::try_new(
            input_schema(),
            vec![
                Arc::new(Int64Array::from(vec![1, 2, 1, 1])),
                Arc::new(Int64Array::from(vec![None::<i64>; 4])),
                Arc::new(Float64Array::from(vec![None::<f64>; 4])),
                Arc::new(StringArray::from(vec![None::<&str>; 4])),
            ],
        )
        .unwrap();
        let mut out = Vec::new();
        op.process_batch(0, batch, &mut out).unwrap();
        assert_eq!(out.len(), 1);
        let counts = out[0].column(1).as_primitive::<Int64Type>();
        assert_eq!(out[0].num_rows(), 2);
        assert_eq!(counts.values().to_vec(), vec![3, 1]);
    }

    /// An aggregate of `sqls` (named `a0`, `a1`, ...) per `k` over `schema`, on the heap.
    fn aggregate_by_k(schema: &SchemaRef, sqls: &[&str], updating: bool) -> Aggregate {
        let keys = Arc::new(KeySelector::new(
            vec![Expr::compile("k", schema).unwrap()],
            vec!["k".into()],
            128,
        ));
        let calls: Vec<AggCall> = sqls
            .iter()
            .map(|s| AggCall::compile(s, schema).unwrap())
            .collect();
        let names: Vec<String> = (0..calls.len()).map(|i| format!("a{i}")).collect();
        let out_schema = Aggregate::output_schema(&keys, &names, &calls, updating);
        Aggregate::new(
            KeyEncoder::new(keys).unwrap(),
            Arc::new(Accumulators { calls }),
            out_schema,
            heap(),
            updating,
        )
        .unwrap()
    }

    /// A row of the input table: (key, v, s).
    type Row = (i64, Option<i64>, Option<String>);

    /// count(*), count(v), sum(v), min(v), max(s), avg(v), count(DISTINCT s), max_by(s, v)
    /// of `rows` by hand, as the aggregate prints them; `max_by` breaks ties on `v` by the
    /// largest `s`, as the retractable accumulator promises.
    fn naive(rows: &[&Row]) -> Vec<String> {
        let vs: Vec<i64> = rows.iter().filter_map(|r| r.1).collect();
        let ss: Vec<&String> = rows.iter().filter_map(|r| r.2.as_ref()).collect();
        let show = |o: Option<String>| o.unwrap_or_default();
        let distinct: std::collections::BTreeSet<&String> = ss.iter().copied().collect();
        let best = rows
            .iter()
            // Rows with a NULL in either argument are ignored, as by the other aggregates.
            .filter(|r| r.1.is_some() && r.2.is_some())
            .max_by(|a, b| (a.1, &a.2).cmp(&(b.1, &b.2)))
            .map(|r| r.2.clone().unwrap_or_default());
        vec![
            rows.len().to_string(),
            vs.len().to_string(),
            show((!vs.is_empty()).then(|| vs.iter().sum::<i64>().to_string())),
            show(vs.iter().min().map(|m| m.to_string())),
            show(ss.iter().max().map(|m| m.to_string())),
            show(
                (!vs.is_empty())
                    .then(|| format!("{:?}", vs.iter().sum::<i64>() as f64 / vs.len() as f64)),
            ),
            distinct.len().to_string(),
            show(best),
        ]
    }

    /// Applies an output changelog to `table`, checking that it is well formed: no `-U` or
    /// `-D` of a row that is not the key's live row, no `+I`/`+U` over a live row, every
    /// `-U` followed by its key's `+U`.
    fn apply(table: &mut BTreeMap<i64, Vec<String>>, batch: &RecordBatch) {
        let key = batch.column(0).as_primitive::<Int64Type>();
        let ops = changelog::kinds(batch).expect("an updating output");
        let values = |row: usize| -> Vec<String> {
            (1..batch.num_columns() - 1)
                .map(|c| arrow_cast::display::array_value_to_string(batch.column(c), row).unwrap())
                .collect()
        };
        for row in 0..batch.num_rows() {
            let k = key.value(row);
            match changelog::kind_at(ops, row) {
                RowKind::Insert => {
                    assert!(
                        table.insert(k, values(row)).is_none(),
                        "+I over a live key {k}"
                    );
                }
                RowKind::UpdateAfter => {
                    assert!(
                        table.insert(k, values(row)).is_none(),
                        "+U without its -U {k}"
                    );
                }
                kind @ (RowKind::UpdateBefore | RowKind::Delete) => {
                    assert_eq!(
                        table.remove(&k),
                        Some(values(row)),
                        "{kind:?} of a row never emitted"
                    );
                    if kind == RowKind::UpdateBefore {
                        assert!(row + 1 < batch.num_rows(), "a -U ends the batch");
                        assert_eq!(changelog::kind_at(ops, row + 1), RowKind::UpdateAfter);
                        assert_eq!(key.value(row + 1), k, "-U and +U of one key");
                    }
                }
            }
        }
    }

    /// What one run of [`random_changelog`] emitted.
    struct Emitted {
        rows: usize,
        /// Rows of the hot key (0).
        hot: usize,
        /// Emissions (input batches without a mini-batch; mini-batches with one).
        emissions: usize,
        /// The most rows the emissions could have had: two per key touched in each.
        bound: usize,
    }

    /// Feeds 300 random input batches of a changelog (inserts, updates, deletes of rows
    /// `(k, v, s)`, key 0 hot: about half the rows) through an aggregate by `k`, with or
    /// without a mini-batch of `size` rows (and a tick every 7 batches, as the task's interval
    /// would), checking that the output changelog is well formed and, whenever nothing is held
    /// back, that the table it builds is the naive aggregate of the live input rows.
    fn random_changelog(seed: u64, mini_batch: Option<usize>) -> Emitted {
        let data = Schema::new(vec![
            Field::new("k", DataType::Int64, true),
            Field::new("v", DataType::Int64, true),
            Field::new("s", DataType::Utf8, true),
        ]);
        let schema = ChangelogMode::updating(&RowKind::ALL, Some(vec!["id".into()])).apply(&data);
        let sqls = [
            "count(*)",
            "count(v)",
            "sum(v)",
            "min(v)",
            "max(s)",
            "avg(v)",
            "count(DISTINCT s)",
            "max_by(s, v)",
        ];
        let mut op = aggregate_by_k(&schema, &sqls, true).with_mini_batch(mini_batch.map(|size| {
            MiniBatch {
                size,
                interval: Duration::from_secs(1),
            }
        }));
        assert_eq!(
            ChangelogMode::of(&op.schema).describe(),
            "updating (+I -U +U -D), key [k]"
        );

        let mut random = crate::testing::Random(seed);
        // The input table (row id → row) and the output table the changelog builds.
        let mut live: BTreeMap<u64, Row> = BTreeMap::new();
        let mut table: BTreeMap<i64, Vec<String>> = BTreeMap::new();
        let mut next_id = 0u64;
        let mut deletes = 0;
        let mut emitted = Emitted {
            rows: 0,
            hot: 0,
            emissions: 0,
            bound: 0,
        };
        // The keys of the input since the last emission, and rows in it (for the bound).
        let mut keys_since: std::collections::BTreeSet<i64> = Default::default();
        let mut rows_since = 0;
        for batch in 0..300 {
            let mut rows: Vec<(Row, RowKind)> = Vec::new();
            for _ in 0..1 + random.below(40) {
                // Few keys, so that groups empty and come back; key 0 for half the rows.
                let new_row = |random: &mut crate::testing::Random| -> Row {
                    let k = if random.below(2) == 0 {
                        0
                    } else {
                        random.below(6) as i64
                    };
                    let v = (random.below(5) != 0).then(|| random.below(21) as i64 - 10);
                    let s = (random.below(4) != 0).then(|| format!("s{}", random.below(5)));
                    (k, v, s)
                };
                let id = (!live.is_empty()).then(|| {
                    *live
                        .keys()
                        .nth(random.below(live.len() as u64) as usize)
                        .unwrap()
                });
                match (random.below(3), id) {
                    (1, Some(id)) => {
                        let old = live.insert(id, new_row(&mut random)).unwrap();
                        rows.push((old, RowKind::UpdateBefore));
                        rows.push((live[&id].clone(), RowKind::UpdateAfter));
                    }
                    (2, Some(id)) => {
                        rows.push((live.remove(&id).unwrap(), RowKind::Delete));
                        deletes += 1;
                    }
                    _ => {
                        let row = new_row(&mut random);
                        live.insert(next_id, row.clone());
                        next_id += 1;
                        rows.push((row, RowKind::Insert));
                    }
                }
            }
            let batch_rows = RecordBatch::try_new(
                schema.clone(),
                vec![
                    Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0.0))),
                    Arc::new(Int64Array::from(
                        rows.iter().map(|r| r.0.1).collect::<Vec<_>>(),
                    )),
                    Arc::new(StringArray::from(
                        rows.iter().map(|r| r.0.2.clone()).collect::<Vec<_>>(),
                    )),
                    changelog::op_array(rows.iter().map(|r| r.1)),
                ],
            )
            .unwrap();
            let mut out = Vec::new();
            // Where a mini-batch fills, what came before is emitted: count the bound per
            // emission by replaying the cuts.
            for (k, _) in &rows {
                keys_since.insert(k.0);
                rows_since += 1;
                if mini_batch == Some(rows_since) {
                    emitted.bound += 2 * keys_since.len();
                    keys_since.clear();
                    rows_since = 0;
                }
            }
            op.process_batch(0, batch_rows, &mut out).unwrap();
            let tick = batch % 7 == 6 || batch == 299;
            if mini_batch.is_none() || tick {
                if mini_batch.is_some() {
                    op.flush(&mut out).unwrap();
                }
                emitted.bound += 2 * keys_since.len();
                keys_since.clear();
                rows_since = 0;
            }
            emitted.emissions += out.len();
            for b in &out {
                apply(&mut table, b);
                emitted.rows += b.num_rows();
                let k = b.column(0).as_primitive::<Int64Type>();
                emitted.hot += (0..b.num_rows()).filter(|&r| k.value(r) == 0).count();
            }
            if op.pending.is_empty() {
                // Nothing held back: the output table is the aggregate of the live rows.
                let mut groups: BTreeMap<i64, Vec<&Row>> = BTreeMap::new();
                for row in live.values() {
                    groups.entry(row.0).or_default().push(row);
                }
                let expected: BTreeMap<i64, Vec<String>> =
                    groups.iter().map(|(k, rows)| (*k, naive(rows))).collect();
                assert_eq!(table, expected, "after batch {batch}");
            }
        }
        assert!(op.pending.is_empty());
        assert!(deletes > 100, "the stream deleted rows ({deletes})");
        emitted
    }

    #[test]
    fn an_aggregate_of_a_random_changelog_keeps_the_table_of_a_naive_fold() {
        let e = random_changelog(0x5eed_cafe_f00d_0001, None);
        assert!(e.rows <= e.bound, "{} rows, at most {}", e.rows, e.bound);
    }

    /// With a mini-batch, over the same random changelogs: the same table at every point
    /// where nothing is held back, at most one `-U`/`+U` pair (or one `+I` or `-D`) per key
    /// per mini-batch, and far fewer rows of the hot key than without.
    #[test]
    fn a_mini_batch_keeps_the_table_of_a_naive_fold_with_one_update_per_key_and_batch() {
        // (seed, size, how many times fewer hot-key rows than without at least): input
        // batches hold about 27 rows, and a tick comes every 7 batches.
        for (seed, size, fewer) in [
            (0x5eed_cafe_f00d_0001, 100, 2),
            (0x0dd_ba11_0000_0002, 37, 1),
            (0x5eed_0000_0000_0003, 1, 0),
            (0x5eed_0000_0000_0004, 10_000, 5),
        ] {
            let plain = random_changelog(seed, None);
            let batched = random_changelog(seed, Some(size));
            assert!(
                batched.rows <= batched.bound,
                "size {size}: {} rows, at most {}",
                batched.rows,
                batched.bound
            );
            // Hot key: at most two rows per emission.
            assert!(batched.hot <= 2 * batched.emissions, "size {size}");
            assert!(
                batched.hot * fewer < plain.hot,
                "size {size}: the hot key emitted {} rows batched, {} plain",
                batched.hot,
                plain.hot
            );
        }
    }

    /// A batch larger than the mini-batch is cut where the mini-batch fills: 250 rows of one
    /// key with `size: 100` emit at 100 and 200 (and hold the last 50); the held change
    /// waits for a flush, and a watermark waits behind it.
    #[test]
    fn a_full_mini_batch_is_emitted_at_once_and_holds_the_watermark_back() {
        let mut op = aggregate_by_k(&input_schema(), &["count(*)"], false).with_mini_batch(Some(
            MiniBatch {
                size: 100,
                interval: Duration::from_secs(3600),
            },
        ));
        assert_eq!(op.flush_every(), Some(Duration::from_secs(3600)));
        let batch = |n: usize| {
            RecordBatch::try_new(
                input_schema(),
                vec![
                    Arc::new(Int64Array::from(vec![7; n])),
                    Arc::new(Int64Array::from(vec![None::<i64>; n])),
                    Arc::new(Float64Array::from(vec![None::<f64>; n])),
                    Arc::new(StringArray::from(vec![None::<&str>; n])),
                ],
            )
            .unwrap()
        };
        let shown = |out: &[RecordBatch]| -> Vec<String> {
            out.iter()
                .flat_map(|b| {
                    let ops = changelog::kinds(b).unwrap();
                    let n = b.column(1).as_primitive::<Int64Type>();
                    (0..b.num_rows())
                        .map(|r| format!("{}{}", changelog::kind_at(ops, r).short(), n.value(r)))
                        .collect::<Vec<_>>()
                })
                .collect()
        };
        let mut out = Vec::new();
        assert_eq!(op.process_watermark(5, &mut out).unwrap(), 5);
        op.process_batch(0, batch(250), &mut out).unwrap();
        assert_eq!(shown(&out), ["+I100", "-U100", "+U200"]);
        out.clear();
        // 50 rows held: the watermark stays where it was before them.
        assert_eq!(op.process_watermark(9, &mut out).unwrap(), 5);
        assert!(out.is_empty());
        op.process_batch(0, batch(10), &mut out).unwrap();
        assert!(out.is_empty(), "held until the mini-batch ends");
        op.flush(&mut out).unwrap();
        assert_eq!(shown(&out), ["-U200", "+U260"]);
        out.clear();
        assert_eq!(op.process_watermark(12, &mut out).unwrap(), 12);
        // Nothing held: a flush emits nothing.
        op.flush(&mut out).unwrap();
        assert!(out.is_empty());
        // The end of event time and the end of input emit what is held.
        op.process_batch(0, batch(1), &mut out).unwrap();
        assert_eq!(
            op.process_watermark(END_OF_TIME, &mut out).unwrap(),
            END_OF_TIME
        );
        assert_eq!(shown(&out), ["-U260", "+U261"]);
        out.clear();
        op.process_batch(0, batch(2), &mut out).unwrap();
        op.finish(&mut out).unwrap();
        assert_eq!(shown(&out), ["-U261", "+U263"]);
    }

    /// A job over rows `{id, k, v}` whose node `agg` counts, sums and takes the largest `v`
    /// per `k` with a mini-batch of `size` rows and an hour (only size, ticks, barriers and
    /// the end end one), over a running aggregate's updates of the rows (the harness feeds
    /// `agg`, so `rows` only gives its input its schema); on the heap or in RocksDB.
    fn mini_batch_job(size: usize, dir: Option<&std::path::Path>) -> String {
        let state = match dir {
            Some(d) => format!("state: {{backend: rocksdb, path: {}}}\n", d.display()),
            None => String::new(),
        };
        format!(
            "name: mini-batch\n{state}sources:\n  \
             s: {{kind: jsonl, path: unused.jsonl, schema: {{id: int, k: int, v: int}}}}\n\
             transforms:\n  \
             by-id: {{kind: key-by, from: s, keys: [id]}}\n  \
             rows: {{kind: aggregate, from: by-id, aggregates: {{k: max(k), v: max(v)}}}}\n  \
             by-k: {{kind: key-by, from: rows, keys: [k]}}\n  \
             agg:\n    kind: aggregate\n    from: by-k\n    \
             aggregates: {{n: count(*), total: sum(v), top: max(v)}}\n    \
             mini-batch: {{interval: 1h, size: {size}}}\n\
             sinks:\n  out: {{kind: blackhole, from: agg}}\n"
        )
    }

    /// Folds output rows into `table` (key → row), checking the changelog is well formed.
    fn fold_json(table: &mut BTreeMap<i64, Value>, rows: &[Value]) {
        for (at, row) in rows.iter().enumerate() {
            let mut row = row.clone();
            let op = row
                .as_object_mut()
                .and_then(|o| o.remove(changelog::OP))
                .and_then(|o| RowKind::from_short(o.as_str()?))
                .unwrap_or_else(|| panic!("a row without its kind: {row}"));
            let k = row["k"].as_i64().unwrap();
            if op.is_addition() {
                assert!(
                    table.insert(k, row).is_none(),
                    "{} over a live key {k}",
                    op.short()
                );
                continue;
            }
            assert_eq!(
                table.remove(&k).as_ref(),
                Some(&row),
                "{} of a row not live",
                op.short()
            );
            if op == RowKind::UpdateBefore {
                let next = rows.get(at + 1);
                assert_eq!(next.map(|r| r[changelog::OP].clone()), Some(json!("+U")));
                assert_eq!(
                    next.map(|r| r["k"].clone()),
                    Some(json!(k)),
                    "-U, +U of one key"
                );
            }
        }
    }

    /// The naive aggregate of live rows (id → (k, v)): per k, count, sum and max of v.
    fn naive_json(live: &BTreeMap<i64, (i64, i64)>) -> BTreeMap<i64, Value> {
        let mut groups: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
        for (k, v) in live.values() {
            groups.entry(*k).or_default().push(*v);
        }
        groups
            .into_iter()
            .map(|(k, vs)| {
                let row = json!({"k": k, "n": vs.len(), "total": vs.iter().sum::<i64>(),
                                 "top": vs.iter().max()});
                (k, row)
            })
            .collect()
    }

    /// A random changelog through a mini-batched aggregate with checkpoints, ticks and
    /// failures at random points, most of them with changes held in an open mini-batch: a
    /// failure restores the last checkpoint and replays the input after it, and drops the
    /// output after it (an exactly-once sink never committed it). The committed output is a
    /// well-formed changelog whose table equals the naive aggregate at every checkpoint and
    /// at the end: nothing lost, nothing twice. Heap and RocksDB.
    #[test]
    fn a_mini_batch_restored_from_checkpoints_mid_batch_loses_and_repeats_nothing() {
        for rocksdb in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let mut h = crate::testing::Harness::new(
                &mini_batch_job(50, rocksdb.then_some(dir.path())),
                "agg",
            );
            let mut random = crate::testing::Random(0xc0ff_ee00_1234_0001 ^ u64::from(rocksdb));
            // The input, batch by batch, and the live rows (id → (k, v)) after each.
            let mut batches: Vec<Vec<Value>> = Vec::new();
            let mut lives: Vec<BTreeMap<i64, (i64, i64)>> = Vec::new();
            let mut live: BTreeMap<i64, (i64, i64)> = BTreeMap::new();
            let mut next_id = 0;
            for _ in 0..250 {
                let mut rows = Vec::new();
                for _ in 0..1 + random.below(15) {
                    // Key 0 is hot; v in 0..20.
                    let k = if random.below(2) == 0 {
                        0
                    } else {
                        random.below(5) as i64
                    };
                    let v = random.below(20) as i64;
                    let id = (!live.is_empty()).then(|| {
                        *live
                            .keys()
                            .nth(random.below(live.len() as u64) as usize)
                            .unwrap()
                    });
                    let row = |id: i64, (k, v): (i64, i64), op: &str| json!({"id": id, "k": k, "v": v, "__op": op});
                    match (random.below(3), id) {
                        (1, Some(id)) => {
                            let old = live.insert(id, (k, v)).unwrap();
                            rows.push(row(id, old, "-U"));
                            rows.push(row(id, (k, v), "+U"));
                        }
                        (2, Some(id)) => rows.push(row(id, live.remove(&id).unwrap(), "-D")),
                        _ => {
                            live.insert(next_id, (k, v));
                            rows.push(row(next_id, (k, v), "+I"));
                            next_id += 1;
                        }
                    }
                }
                batches.push(rows);
                lives.push(live.clone());
            }
            let mut committed: BTreeMap<i64, Value> = BTreeMap::new();
            let mut uncommitted: Vec<Value> = Vec::new();
            let mut last = (h.checkpoint(), 0usize);
            let (mut failures, mut checkpoints, mut rows_out) = (0, 0, 0);
            let mut i = 0;
            while i < batches.len() {
                h.push(0, &batches[i]);
                i += 1;
                uncommitted.extend(h.take());
                match random.below(12) {
                    0 | 1 => {
                        let checkpoint = h.checkpoint();
                        uncommitted.extend(h.take());
                        rows_out += uncommitted.len();
                        fold_json(&mut committed, &std::mem::take(&mut uncommitted));
                        assert_eq!(committed, naive_json(&lives[i - 1]), "checkpoint at {i}");
                        last = (checkpoint, i);
                        checkpoints += 1;
                    }
                    2 if failures < 30 && i > last.1 => {
                        h.take();
                        uncommitted.clear();
                        h.restore(&last.0);
                        i = last.1;
                        failures += 1;
                    }
                    3 => h.flush(),
                    _ => {}
                }
            }
            h.finish();
            uncommitted.extend(h.take());
            rows_out += uncommitted.len();
            fold_json(&mut committed, &uncommitted);
            assert_eq!(committed, naive_json(&live), "rocksdb {rocksdb}");
            assert!(
                failures >= 10 && checkpoints >= 10,
                "{failures} failures, {checkpoints} checkpoints"
            );
            // One update per key per mini-batch: far fewer rows than input rows.
            let input: usize = batches.iter().map(Vec::len).sum();
            assert!(rows_out * 2 < input, "{rows_out} rows out of {input} in");
        }
    }

    /// A windowless GROUP BY of a job with a `mini-batch` gets it (a window's does not), and
    /// `weir explain` says so on the node.
    #[test]
    fn a_sql_group_by_gets_the_jobs_mini_batch() {
        let job = "\
name: sql-mini-batch
mini-batch: {interval: 1h, size: 1000}
# The harness feeds the aggregate rows, not a local phase's partials.
two-phase-aggregation: false
sources:
  s: {kind: jsonl, path: unused.jsonl, schema: {k: int, t: timestamp, v: int}, \
      event-time: {column: t}}
transforms:
  q:
    kind: sql
    inputs: {s: s}
    query: SELECT k, COUNT(*) AS n, SUM(v) AS total FROM s GROUP BY k
  w:
    kind: sql
    inputs: {s: s}
    query: |
      SELECT k, window_start, COUNT(*) AS n
      FROM TABLE(TUMBLE(TABLE s, DESCRIPTOR(t), INTERVAL '10' SECOND))
      GROUP BY k, window_start, window_end
sinks:
  out: {kind: blackhole, from: q}
  windows: {kind: blackhole, from: w}
";
        let plan = crate::plan::check_str("job.yaml", job, &[]).unwrap();
        let explained = plan.explain();
        let node = |name: &str| -> String {
            let at = explained
                .find(&format!("\n{name}  ("))
                .unwrap_or_else(|| panic!("no node {name} in:\n{explained}"));
            explained[at + 1..]
                .split("\n\n")
                .next()
                .unwrap()
                .to_string()
        };
        assert!(
            node("q/aggregate").contains("mini-batch: every 1h or 1000 input rows, the job's"),
            "{explained}"
        );
        assert!(
            !node("w/window-aggregate").contains("mini-batch"),
            "{explained}"
        );

        let mut h = crate::testing::Harness::new(job, "q/aggregate");
        for _ in 0..3 {
            h.push(
                0,
                &[
                    json!({"k": 1, "v": 2}),
                    json!({"k": 2, "v": 5}),
                    json!({"k": 1, "v": 1}),
                ],
            );
        }
        assert_eq!(h.take(), Vec::<Value>::new(), "held for the mini-batch");
        h.flush();
        assert_eq!(
            h.take(),
            [
                json!({"k": 1, "n": 6, "total": 9, "__op": "+I"}),
                json!({"k": 2, "n": 3, "total": 15, "__op": "+I"}),
            ]
        );
    }

    #[test]
    fn taking_back_a_row_never_added_is_a_clear_error() {
        let data = Schema::new(vec![
            Field::new("k", DataType::Int64, true),
            Field::new("v", DataType::Int64, true),
        ]);
        let schema = ChangelogMode::updating(&RowKind::ALL, None).apply(&data);
        let mut op = aggregate_by_k(&schema, &["count(*)"], true);
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(vec![7])),
                Arc::new(Int64Array::from(vec![1])),
                changelog::op_array([RowKind::Delete]),
            ],
        )
        .unwrap();
        let e = op.process_batch(0, batch, &mut Vec::new()).unwrap_err();
        assert!(matches!(e, OperatorError::Data(_)), "{e}");
        assert!(e.to_string().contains("never received"), "{e}");
    }

    #[test]
    fn an_append_only_input_emits_updates_and_nothing_for_an_unchanged_row() {
        let mut op = aggregate_by_k(&input_schema(), &["max(v)"], false);
        let mut feed = |k: Vec<i64>, v: Vec<i64>| {
            let n = k.len();
            let batch = RecordBatch::try_new(
                input_schema(),
                vec![
                    Arc::new(Int64Array::from(k)),
                    Arc::new(Int64Array::from(v)),
                    Arc::new(Float64Array::from(vec![None::<f64>; n])),
                    Arc::new(StringArray::from(vec![None::<&str>; n])),
                ],
            )
            .unwrap();
            let mut out = Vec::new();
            op.process_batch(0, batch, &mut out).unwrap();
            out.iter()
                .flat_map(|b| {
                    let ops = changelog::kinds(b).unwrap();
                    let m = b.column(1).as_primitive::<Int64Type>();
                    (0..b.num_rows())
                        .map(|r| format!("{}{}", changelog::kind_at(ops, r).short(), m.value(r)))
                        .collect::<Vec<_>>()
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(feed(vec![1, 1], vec![3, 5]), ["+I5"]);
        assert_eq!(
            feed(vec![1], vec![4]),
            Vec::<String>::new(),
            "max unchanged"
        );
        assert_eq!(feed(vec![1], vec![9]), ["-U5", "+U9"]);
    }

    #[test]
    fn non_aggregate_calls_are_refused_with_a_hint() {
        let schema = input_schema();
        let e = AggCall::compile("median(v)", &schema).unwrap_err();
        assert!(e.contains("unknown aggregate function `median`"), "{e}");
        let e = AggCall::compile("v + 1", &schema).unwrap_err();
        assert!(e.contains("is not an aggregate call"), "{e}");
        let e = AggCall::compile("sum(s)", &schema).unwrap_err();
        assert!(e.contains("sum needs a number"), "{e}");
    }
}
