//! `aggregate`: a running (non-windowed) aggregation per key.
//!
//! Each input batch updates the accumulators of the keys it holds; then the operator emits one
//! row per key the batch changed, with the key's current values (an upsert stream keyed by the
//! key columns, batched so a hot key costs one output row per batch, not one per record).
//!
//! Functions: `count(*)`, `count(x)` (non-NULL values), `sum(x)`, `min(x)`, `max(x)`, `avg(x)`.
//! NULL inputs are ignored, as in SQL; `sum`/`min`/`max`/`avg` of only NULLs is NULL.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::builder::{BooleanBuilder, Float64Builder, Int64Builder, StringBuilder};
use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int64Type, TimestampMillisecondType};
use arrow_array::{Array, ArrayRef, RecordBatch, TimestampMillisecondArray};
use arrow_row::{RowConverter, SortField};
use arrow_schema::{DataType, Field, Schema, SchemaRef};

use super::Operator;
use super::key_by::KeySelector;
use crate::error::OperatorError;
use crate::expr::{self, Expr};

/// An aggregate function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AggFn {
    CountStar,
    Count,
    Sum,
    Min,
    Max,
    Avg,
}

/// One aggregate column: the function and its compiled argument.
#[derive(Debug)]
pub struct AggCall {
    pub func: AggFn,
    pub arg: Option<Expr>,
    /// The output type.
    pub data_type: DataType,
}

impl AggCall {
    /// Parses `count(*)`, `sum(price)`, ... against the input schema.
    pub fn compile(sql: &str, input: &Schema) -> Result<AggCall, String> {
        use sqlparser::ast::{
            Expr as Ast, FunctionArg, FunctionArgExpr, FunctionArgumentList, FunctionArguments,
        };
        let ast = expr::parse(sql).map_err(|e| e.to_string())?;
        let Ast::Function(f) = &ast else {
            return Err(format!(
                "`{sql}` is not an aggregate call; use count(*), count(x), sum(x), min(x), max(x) or avg(x)"
            ));
        };
        let name = f.name.to_string().to_lowercase();
        let args: Vec<&FunctionArg> = match &f.args {
            FunctionArguments::List(FunctionArgumentList { args, .. }) => args.iter().collect(),
            FunctionArguments::None => Vec::new(),
            FunctionArguments::Subquery(_) => {
                return Err("subqueries are not supported in aggregates".into());
            }
        };
        let func = match name.as_str() {
            "count" => AggFn::Count,
            "sum" => AggFn::Sum,
            "min" => AggFn::Min,
            "max" => AggFn::Max,
            "avg" => AggFn::Avg,
            other => {
                return Err(format!(
                    "unknown aggregate function `{other}`; use count, sum, min, max or avg"
                ));
            }
        };
        let [arg] = args.as_slice() else {
            return Err(format!("{name} takes exactly one argument"));
        };
        let arg_expr = match arg {
            FunctionArg::Unnamed(FunctionArgExpr::Wildcard) if func == AggFn::Count => {
                return Ok(AggCall {
                    func: AggFn::CountStar,
                    arg: None,
                    data_type: DataType::Int64,
                });
            }
            FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => e,
            _ => return Err(format!("{name} takes one expression, e.g. {name}(price)")),
        };
        let arg = Expr::compile_ast(arg_expr, input).map_err(|e| e.to_string())?;
        let t = arg.data_type().clone();
        let data_type = match func {
            AggFn::Count | AggFn::CountStar => DataType::Int64,
            AggFn::Sum => match t {
                DataType::Int64 | DataType::Float64 => t,
                _ => return Err(format!("sum needs a number, not {t}")),
            },
            AggFn::Avg => match t {
                DataType::Int64 | DataType::Float64 => DataType::Float64,
                _ => return Err(format!("avg needs a number, not {t}")),
            },
            AggFn::Min | AggFn::Max => match t {
                DataType::Int64
                | DataType::Float64
                | DataType::Utf8
                | DataType::Boolean
                | DataType::Timestamp(_, _) => t,
                _ => return Err(format!("{name} cannot compare values of type {t}")),
            },
        };
        Ok(AggCall {
            func,
            arg: Some(arg),
            data_type,
        })
    }
}

/// One accumulator of one key.
#[derive(Clone, Debug)]
enum Acc {
    Count(i64),
    SumInt(Option<i64>),
    SumFloat(Option<f64>),
    Avg { sum: f64, count: i64 },
    MinMaxInt(Option<i64>),
    MinMaxFloat(Option<f64>),
    MinMaxStr(Option<String>),
    MinMaxBool(Option<bool>),
}

pub struct Aggregate {
    keys: Arc<KeySelector>,
    calls: Arc<[AggCall]>,
    schema: SchemaRef,
    converter: RowConverter,
    /// Encoded key → slot in `accs`.
    index: HashMap<Box<[u8]>, usize>,
    accs: Vec<Vec<Acc>>,
    /// Encoded keys by slot, to rebuild key columns on output.
    slot_keys: Vec<Box<[u8]>>,
    /// The batch number in which each slot was last touched: marks touched keys without
    /// clearing a per-key flag array on every batch.
    touched_in: Vec<u64>,
    batch_no: u64,
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
        keys: Arc<KeySelector>,
        calls: Arc<[AggCall]>,
        schema: SchemaRef,
    ) -> Result<Self, OperatorError> {
        let fields = keys
            .exprs()
            .iter()
            .map(|e| SortField::new(e.data_type().clone()))
            .collect();
        Ok(Self {
            converter: RowConverter::new(fields)?,
            keys,
            calls,
            schema,
            index: HashMap::new(),
            accs: Vec::new(),
            slot_keys: Vec::new(),
            touched_in: Vec::new(),
            batch_no: 0,
        })
    }

    fn new_accs(&self) -> Vec<Acc> {
        self.calls
            .iter()
            .map(|c| match (c.func, &c.data_type) {
                (AggFn::Count | AggFn::CountStar, _) => Acc::Count(0),
                (AggFn::Sum, DataType::Int64) => Acc::SumInt(None),
                (AggFn::Sum, _) => Acc::SumFloat(None),
                (AggFn::Avg, _) => Acc::Avg { sum: 0.0, count: 0 },
                (_, DataType::Float64) => Acc::MinMaxFloat(None),
                (_, DataType::Utf8) => Acc::MinMaxStr(None),
                (_, DataType::Boolean) => Acc::MinMaxBool(None),
                _ => Acc::MinMaxInt(None),
            })
            .collect()
    }
}

impl Operator for Aggregate {
    fn process_batch(
        &mut self,
        _input: usize,
        batch: RecordBatch,
        out: &mut Vec<RecordBatch>,
    ) -> Result<(), OperatorError> {
        let key_cols = self.keys.evaluate(&batch)?;
        let rows = self.converter.convert_columns(&key_cols)?;
        let args: Vec<Option<ArrayRef>> = self
            .calls
            .iter()
            .map(|c| c.arg.as_ref().map(|a| a.evaluate(&batch)).transpose())
            .collect::<Result<_, _>>()?;

        self.batch_no += 1;
        let mut touched: Vec<usize> = Vec::new();
        for (i, row) in rows.iter().enumerate() {
            let slot = match self.index.get(row.as_ref()) {
                Some(s) => *s,
                None => {
                    let s = self.accs.len();
                    let key: Box<[u8]> = row.as_ref().into();
                    self.index.insert(key.clone(), s);
                    self.slot_keys.push(key);
                    let fresh = self.new_accs();
                    self.accs.push(fresh);
                    self.touched_in.push(0);
                    s
                }
            };
            if self.touched_in[slot] != self.batch_no {
                self.touched_in[slot] = self.batch_no;
                touched.push(slot);
            }
            for ((acc, call), arg) in self.accs[slot].iter_mut().zip(self.calls.iter()).zip(&args) {
                update(acc, call.func, arg.as_deref(), i)?;
            }
        }
        if touched.is_empty() {
            return Ok(());
        }
        out.push(self.emit(&touched)?);
        Ok(())
    }
}

impl Aggregate {
    fn emit(&self, slots: &[usize]) -> Result<RecordBatch, OperatorError> {
        let parser = self.converter.parser();
        let key_rows: Vec<_> = slots
            .iter()
            .map(|s| parser.parse(&self.slot_keys[*s]))
            .collect();
        let mut columns = self.converter.convert_rows(key_rows)?;
        for (j, call) in self.calls.iter().enumerate() {
            columns.push(finish_column(
                call,
                slots.iter().map(|s| &self.accs[*s][j]),
            )?);
        }
        Ok(RecordBatch::try_new(self.schema.clone(), columns)?)
    }
}

fn update(
    acc: &mut Acc,
    func: AggFn,
    arg: Option<&dyn Array>,
    i: usize,
) -> Result<(), OperatorError> {
    let Some(arg) = arg else {
        if let Acc::Count(c) = acc {
            *c += 1;
        }
        return Ok(());
    };
    if arg.is_null(i) {
        return Ok(());
    }
    let min = func == AggFn::Min;
    match acc {
        Acc::Count(c) => *c += 1,
        Acc::SumInt(s) => {
            let v = arg.as_primitive::<Int64Type>().value(i);
            let sum = s.unwrap_or(0).checked_add(v).ok_or_else(|| {
                OperatorError::Data("integer overflow in sum(); cast the argument to DOUBLE".into())
            })?;
            *s = Some(sum);
        }
        Acc::SumFloat(s) => *s = Some(s.unwrap_or(0.0) + float_at(arg, i)),
        Acc::Avg { sum, count } => {
            *sum += float_at(arg, i);
            *count += 1;
        }
        Acc::MinMaxInt(m) => {
            let v = match arg.data_type() {
                DataType::Timestamp(_, _) => {
                    arg.as_primitive::<TimestampMillisecondType>().value(i)
                }
                _ => arg.as_primitive::<Int64Type>().value(i),
            };
            *m = Some(m.map_or(v, |c| if min { c.min(v) } else { c.max(v) }));
        }
        Acc::MinMaxFloat(m) => {
            let v = arg.as_primitive::<Float64Type>().value(i);
            *m = Some(m.map_or(v, |c| if min { c.min(v) } else { c.max(v) }));
        }
        Acc::MinMaxBool(m) => {
            let v = arg.as_boolean().value(i);
            *m = Some(m.map_or(v, |c| if min { c & v } else { c | v }));
        }
        Acc::MinMaxStr(m) => {
            let v = arg.as_string::<i32>().value(i);
            let replace = match m {
                None => true,
                Some(c) => (min && v < c.as_str()) || (!min && v > c.as_str()),
            };
            if replace {
                *m = Some(v.to_string());
            }
        }
    }
    Ok(())
}

fn float_at(arg: &dyn Array, i: usize) -> f64 {
    match arg.data_type() {
        DataType::Int64 => arg.as_primitive::<Int64Type>().value(i) as f64,
        _ => arg.as_primitive::<Float64Type>().value(i),
    }
}

fn finish_column<'a>(
    call: &AggCall,
    accs: impl Iterator<Item = &'a Acc>,
) -> Result<ArrayRef, OperatorError> {
    let accs: Vec<&Acc> = accs.collect();
    let array: ArrayRef = match &call.data_type {
        DataType::Int64 => {
            let mut b = Int64Builder::with_capacity(accs.len());
            for a in accs {
                b.append_option(match a {
                    Acc::Count(c) => Some(*c),
                    Acc::SumInt(s) | Acc::MinMaxInt(s) => *s,
                    _ => None,
                });
            }
            Arc::new(b.finish())
        }
        DataType::Timestamp(_, _) => {
            let values: Vec<Option<i64>> = accs
                .iter()
                .map(|a| match a {
                    Acc::MinMaxInt(s) => *s,
                    _ => None,
                })
                .collect();
            Arc::new(TimestampMillisecondArray::from(values))
        }
        DataType::Float64 => {
            let mut b = Float64Builder::with_capacity(accs.len());
            for a in accs {
                b.append_option(match a {
                    Acc::SumFloat(s) | Acc::MinMaxFloat(s) => *s,
                    Acc::Avg { sum, count } if *count > 0 => Some(*sum / *count as f64),
                    _ => None,
                });
            }
            Arc::new(b.finish())
        }
        DataType::Utf8 => {
            let mut b = StringBuilder::new();
            for a in accs {
                match a {
                    Acc::MinMaxStr(Some(s)) => b.append_value(s),
                    _ => b.append_null(),
                }
            }
            Arc::new(b.finish())
        }
        DataType::Boolean => {
            let mut b = BooleanBuilder::with_capacity(accs.len());
            for a in accs {
                b.append_option(match a {
                    Acc::MinMaxBool(s) => *s,
                    _ => None,
                });
            }
            Arc::new(b.finish())
        }
        other => {
            return Err(OperatorError::Internal(format!(
                "aggregate output type {other}"
            )));
        }
    };
    Ok(array)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use arrow_array::{Float64Array, Int64Array, StringArray};

    use super::*;

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
        let mut op = Aggregate::new(keys, calls.into(), out_schema).unwrap();

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
                let key = (rng.next() % 10 != 0).then(|| (rng.next() % 25) as i64);
                let val = (rng.next() % 5 != 0).then(|| (rng.next() % 2001) as i64 - 1000);
                let fl = (rng.next() % 7 != 0).then(|| (rng.next() % 1000) as f64 / 8.0);
                let st = (rng.next() % 3 != 0).then(|| format!("s{}", rng.next() % 50));
                let n = naive.entry(key).or_default();
                n.count_star += 1;
                if let Some(x) = val {
                    n.count_v += 1;
                    n.sum_v = Some(n.sum_v.unwrap_or(0) + x);
                    n.min_v = Some(n.min_v.map_or(x, |m| m.min(x)));
                }
                if let Some(x) = &st {
                    if n.max_s.as_ref().is_none_or(|m| x > m) {
                        n.max_s = Some(x.clone());
                    }
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
        let calls: Arc<[AggCall]> = vec![AggCall::compile("count(*)", &schema).unwrap()].into();
        let out_schema = Aggregate::output_schema(&keys, &["n".into()], &calls);
        let mut op = Aggregate::new(keys, calls, out_schema).unwrap();
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
