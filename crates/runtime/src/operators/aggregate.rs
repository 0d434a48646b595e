//! `aggregate`: a running (non-windowed) aggregation per key.
//!
//! Each input batch updates the accumulators of the keys it holds (through the keyed state
//! backend); then the operator emits, per key the batch changed, the change of the key's row:
//! `+I` for a new key, `-U` of the old row and `+U` of the new one for an update (nothing
//! when the values did not change), and, over an updating input, `-D` when the key's last row
//! was taken back. The output is an updating stream keyed by the key columns
//! ([`crate::changelog`]), batched so a hot key costs one update per batch, not one per record.
//!
//! Over an append-only input the accumulators are the plain ones (and may be the global phase
//! of a two-phase aggregation); over an updating input they are retractable
//! ([`RetractingAccumulators`]: sums with their counts, `min`/`max`/`count(DISTINCT)` as
//! multisets) and count the key's live rows.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::{Field, Schema, SchemaRef};
use weir_state::{AggregatingId, KeyRef, KeyedStateBackend, NO_NAMESPACE};

use super::accumulators::{Accumulators, RetractingAccumulators, Scalar, column, evaluate_all};
pub use super::accumulators::{AggCall, AggFn};
use super::keyed::KeyEncoder;
use super::local_aggregate::{partial_at, partial_column};
use crate::api::Operator;
use crate::api::OperatorError;
use crate::changelog::{self, ChangelogMode, RowKind};
use crate::keys::KeySelector;

/// The accumulators of the keys, as the input's mode needs them.
enum Accs {
    /// Over an append-only input: rows (or the local phase's partials) are only added.
    Adding(AggregatingId<Accumulators>),
    /// Over an updating input: rows are added and taken back.
    Retracting(AggregatingId<RetractingAccumulators>),
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
        })
    }

    /// With `partials`, makes this the global phase of a two-phase aggregation: it reads the
    /// partials of [`super::local_aggregate::LocalAggregate`] (keyed by the phase's
    /// `partial_keys`, which `keys` must then be).
    pub fn merging_partials(mut self, partials: bool) -> Self {
        self.partials = partials;
        self
    }
}

/// A key's row before and after one batch (`None`: no row).
struct Change {
    /// A row of the batch with the key.
    row: usize,
    before: Option<Vec<Scalar>>,
    after: Option<Vec<Scalar>>,
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
        let keys = self.keys.encode(&batch)?;
        // Per key of this batch, in order of first appearance: its change.
        let mut index: HashMap<&[u8], usize> = HashMap::new();
        let mut changes: Vec<Change> = Vec::new();
        match &self.accs {
            Accs::Adding(id) => {
                let mut state = self.state.aggregating(id, &self.aggs);
                // Rows in, or the local phase's partials: added, or merged.
                let (args, partials) = if self.partials {
                    (Vec::new(), Some(partial_column(&batch)?))
                } else {
                    (evaluate_all(&self.aggs.calls, &batch)?, None)
                };
                for row in 0..batch.num_rows() {
                    let key = keys.key(row);
                    if !index.contains_key(key.bytes) {
                        index.insert(key.bytes, changes.len());
                        let before = state.get(key, NO_NAMESPACE)?;
                        changes.push(Change {
                            row,
                            before,
                            after: None,
                        });
                    }
                    match partials {
                        Some(column) => {
                            state.merge(key, NO_NAMESPACE, &partial_at(column, row)?)??
                        }
                        None => state.add(key, NO_NAMESPACE, (&args, row))??,
                    };
                }
                for change in &mut changes {
                    change.after = state.get(keys.key(change.row), NO_NAMESPACE)?;
                }
            }
            Accs::Retracting(id) => {
                let agg = &self.retracting;
                let mut state = self.state.aggregating(id, agg);
                let args = evaluate_all(&agg.calls, &batch)?;
                let ops = changelog::kinds(&batch);
                // A key's live rows and current values, read in place (no copy of its
                // multisets).
                let live =
                    |state: &mut weir_state::AggregatingState<'_, RetractingAccumulators>,
                     key: KeyRef<'_>| {
                        state.with_accumulator(key, NO_NAMESPACE, |acc| {
                            acc.map(|a| {
                                let rows = RetractingAccumulators::rows(a);
                                (rows, weir_state::Aggregator::result(agg.as_ref(), a))
                            })
                        })
                    };
                for row in 0..batch.num_rows() {
                    let key = keys.key(row);
                    if !index.contains_key(key.bytes) {
                        index.insert(key.bytes, changes.len());
                        let before = live(&mut state, key)?
                            .filter(|(rows, _)| *rows > 0)
                            .map(|(_, values)| values);
                        changes.push(Change {
                            row,
                            before,
                            after: None,
                        });
                    }
                    let kind = ops.map_or(RowKind::Insert, |o| changelog::kind_at(o, row));
                    let sign = if kind.is_addition() { 1 } else { -1 };
                    state.add(key, NO_NAMESPACE, (&args, row, sign))??;
                }
                for change in &mut changes {
                    let key = keys.key(change.row);
                    match live(&mut state, key)? {
                        Some((rows, values)) if rows > 0 => change.after = Some(values),
                        Some((0, _)) => {
                            state.take_accumulator(key, NO_NAMESPACE)?;
                        }
                        Some(_) => {
                            return Err(OperatorError::Data(format!(
                                "more rows were taken back than were added for the key {}: the \
                                 aggregate's input changelog is not well formed",
                                self.keys.describe(key.bytes)
                            )));
                        }
                        None => {}
                    }
                }
            }
        }
        // The output rows: per change, which row of the batch holds its key, its kind, values.
        let mut rows: Vec<(usize, RowKind, Vec<Scalar>)> = Vec::with_capacity(changes.len());
        for change in changes {
            match (change.before, change.after) {
                (None, Some(after)) => rows.push((change.row, RowKind::Insert, after)),
                (Some(before), Some(after)) if before != after => {
                    rows.push((change.row, RowKind::UpdateBefore, before));
                    rows.push((change.row, RowKind::UpdateAfter, after));
                }
                (Some(before), None) => rows.push((change.row, RowKind::Delete, before)),
                _ => {}
            }
        }
        if rows.is_empty() {
            return Ok(());
        }
        let mut columns = self
            .keys
            .decode(rows.iter().map(|(r, _, _)| keys.key(*r).bytes))?;
        for (j, call) in self.aggs.calls.iter().enumerate() {
            columns.push(column(
                &call.data_type,
                rows.iter().map(|(_, _, values)| values[j].clone()),
            )?);
        }
        columns.push(changelog::op_array(rows.iter().map(|(_, k, _)| *k)));
        out.push(RecordBatch::try_new(self.schema.clone(), columns)?);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use arrow_array::cast::AsArray;
    use arrow_array::types::Int64Type;
    use arrow_array::{Array, Float64Array, Int64Array, StringArray};
    use arrow_schema::DataType;

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

    #[test]
    fn an_aggregate_of_a_random_changelog_keeps_the_table_of_a_naive_fold() {
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
        let mut op = aggregate_by_k(&schema, &sqls, true);
        assert_eq!(
            ChangelogMode::of(&op.schema).describe(),
            "updating (+I -U +U -D), key [k]"
        );

        let mut random = crate::testing::Random(0x5eed_cafe_f00d_0001);
        // The input table (row id → row) and the output table the changelog builds.
        let mut live: BTreeMap<u64, Row> = BTreeMap::new();
        let mut table: BTreeMap<i64, Vec<String>> = BTreeMap::new();
        let mut next_id = 0u64;
        let mut deletes = 0;
        for _batch in 0..300 {
            let mut rows: Vec<(Row, RowKind)> = Vec::new();
            for _ in 0..1 + random.below(40) {
                // Few keys, so that groups empty and come back.
                let new_row = |random: &mut crate::testing::Random| -> Row {
                    let k = random.below(6) as i64;
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
            let batch = RecordBatch::try_new(
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
            op.process_batch(0, batch, &mut out).unwrap();
            for b in &out {
                apply(&mut table, b);
            }
            // After every batch, the output table is the aggregate of the live rows.
            let mut groups: BTreeMap<i64, Vec<&Row>> = BTreeMap::new();
            for row in live.values() {
                groups.entry(row.0).or_default().push(row);
            }
            let expected: BTreeMap<i64, Vec<String>> =
                groups.iter().map(|(k, rows)| (*k, naive(rows))).collect();
            assert_eq!(table, expected);
        }
        assert!(deletes > 100, "the stream deleted rows ({deletes})");
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
