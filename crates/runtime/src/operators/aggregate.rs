//! `aggregate`: a running (non-windowed) aggregation per key.
//!
//! Each input batch updates the accumulators of the keys it holds (value state per key, through
//! the keyed state backend); then the operator emits one row per key the batch changed, with the
//! key's current values: an upsert stream keyed by the key columns, batched so a hot key costs
//! one output row per batch, not one per record.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::{Field, Schema, SchemaRef};
use weir_state::{AggregatingId, KeyRef, KeyedStateBackend, NO_NAMESPACE};

use super::accumulators::{Acc, Accumulators, evaluate_all, result_columns};
pub use super::accumulators::{AggCall, AggFn};
use super::keyed::KeyEncoder;
use super::local_aggregate::{partial_at, partial_column};
use crate::api::Operator;
use crate::api::OperatorError;
use crate::keys::KeySelector;

pub struct Aggregate {
    aggs: Arc<Accumulators>,
    schema: SchemaRef,
    keys: KeyEncoder,
    state: KeyedStateBackend,
    accs: AggregatingId<Accumulators>,
    /// The global phase of two-phase aggregation: the input is partials
    /// ([`super::local_aggregate`]), merged rather than added.
    partials: bool,
}

impl Aggregate {
    /// The output schema: key columns, then one column per aggregate.
    pub fn output_schema(keys: &KeySelector, names: &[String], calls: &[AggCall]) -> SchemaRef {
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
        Arc::new(Schema::new(fields))
    }

    pub fn new(
        keys: KeyEncoder,
        aggs: Arc<Accumulators>,
        schema: SchemaRef,
        mut state: KeyedStateBackend,
    ) -> Result<Self, OperatorError> {
        let accs = state.aggregating_state("accumulators")?;
        Ok(Self {
            aggs,
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
        // The first row of each key in this batch, in order of first appearance.
        let mut first_row: HashMap<&[u8], usize> = HashMap::new();
        let mut touched: Vec<usize> = Vec::new();
        let mut state = self.state.aggregating(&self.accs, &self.aggs);
        // Rows in, or the local phase's partials: added, or merged.
        let (args, partials) = if self.partials {
            (Vec::new(), Some(partial_column(&batch)?))
        } else {
            (evaluate_all(&self.aggs.calls, &batch)?, None)
        };
        for row in 0..batch.num_rows() {
            let key = keys.key(row);
            match partials {
                Some(column) => state.merge(key, NO_NAMESPACE, &partial_at(column, row)?)??,
                None => state.add(key, NO_NAMESPACE, (&args, row))??,
            };
            first_row.entry(key.bytes).or_insert_with(|| {
                touched.push(row);
                row
            });
        }
        if touched.is_empty() {
            return Ok(());
        }
        let mut rows: Vec<Vec<Acc>> = Vec::with_capacity(touched.len());
        for &row in &touched {
            let key: KeyRef<'_> = keys.key(row);
            let accs = state
                .accumulator(key, NO_NAMESPACE)?
                .ok_or_else(|| OperatorError::Internal("an updated key has no state".into()))?;
            rows.push(accs);
        }
        let mut columns = self
            .keys
            .decode(touched.iter().map(|r| keys.key(*r).bytes))?;
        columns.extend(result_columns(
            &self.aggs.calls,
            rows.iter().map(Vec::as_slice),
        )?);
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
        let out_schema = Aggregate::output_schema(&keys, &names, &calls);
        let mut op = Aggregate::new(
            KeyEncoder::new(keys).unwrap(),
            Arc::new(Accumulators { calls }),
            out_schema,
            heap(),
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
                    let cells = (1..b.num_columns())
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
        let out_schema = Aggregate::output_schema(&keys, &["n".into()], &calls);
        let aggs = Arc::new(Accumulators { calls });
        let mut op =
            Aggregate::new(KeyEncoder::new(keys).unwrap(), aggs, out_schema, heap()).unwrap();
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
