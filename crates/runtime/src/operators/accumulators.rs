//! Aggregate functions and their accumulators, shared by running, windowed and over
//! aggregations.
//!
//! An accumulator is a small value kept in keyed state per key (and window); it encodes to
//! bytes for backends that store bytes, and merges with another (session windows merge).
//! Functions: `count(*)`, `count(x)`, `count(DISTINCT x)`, `sum(x)`, `min(x)`, `max(x)`,
//! `avg(x)`, `max_by(x, y)` and `min_by(x, y)` (the `x` of the row with the largest or smallest
//! `y`; the first such row wins ties). NULL inputs are ignored, as in SQL.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use arrow_array::builder::{BooleanBuilder, Float64Builder, Int64Builder, StringBuilder};
use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int64Type, TimestampMillisecondType};
use arrow_array::{Array, ArrayRef, RecordBatch, TimestampMillisecondArray};
use arrow_schema::{DataType, Schema};
use sqlparser::ast::{
    DuplicateTreatment, Expr as Ast, FunctionArg, FunctionArgExpr, FunctionArgumentList,
    FunctionArguments,
};
use weir_state::StateValue;

use crate::api::OperatorError;
use crate::expr::{self, Expr};

/// One value of any of weir's types, for accumulators that keep values.
#[derive(Clone, Debug)]
pub enum Scalar {
    Null,
    Int(i64),
    Float(f64),
    Str(String),
    Bool(bool),
    Timestamp(i64),
}

impl Scalar {
    fn rank(&self) -> u8 {
        match self {
            Scalar::Null => 0,
            Scalar::Bool(_) => 1,
            Scalar::Int(_) => 2,
            Scalar::Float(_) => 3,
            Scalar::Timestamp(_) => 4,
            Scalar::Str(_) => 5,
        }
    }

    /// The value at `row` of `array`.
    pub fn at(array: &dyn Array, row: usize) -> Scalar {
        if array.is_null(row) {
            return Scalar::Null;
        }
        match array.data_type() {
            DataType::Int64 => Scalar::Int(array.as_primitive::<Int64Type>().value(row)),
            DataType::Float64 => Scalar::Float(array.as_primitive::<Float64Type>().value(row)),
            DataType::Utf8 => Scalar::Str(array.as_string::<i32>().value(row).to_string()),
            DataType::Boolean => Scalar::Bool(array.as_boolean().value(row)),
            DataType::Timestamp(_, _) => {
                Scalar::Timestamp(array.as_primitive::<TimestampMillisecondType>().value(row))
            }
            _ => Scalar::Null,
        }
    }

    pub fn is_null(&self) -> bool {
        matches!(self, Scalar::Null)
    }

    fn as_f64(&self) -> Option<f64> {
        match self {
            Scalar::Int(v) => Some(*v as f64),
            Scalar::Float(v) => Some(*v),
            _ => None,
        }
    }
}

impl PartialEq for Scalar {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Scalar {}
impl PartialOrd for Scalar {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Scalar {
    fn cmp(&self, other: &Self) -> Ordering {
        match (self, other) {
            (Scalar::Int(a), Scalar::Int(b)) => a.cmp(b),
            (Scalar::Float(a), Scalar::Float(b)) => a.total_cmp(b),
            (Scalar::Str(a), Scalar::Str(b)) => a.cmp(b),
            (Scalar::Bool(a), Scalar::Bool(b)) => a.cmp(b),
            (Scalar::Timestamp(a), Scalar::Timestamp(b)) => a.cmp(b),
            _ => self.rank().cmp(&other.rank()),
        }
    }
}

impl StateValue for Scalar {
    fn encode(&self, out: &mut Vec<u8>) {
        out.push(self.rank());
        match self {
            Scalar::Null => {}
            Scalar::Bool(v) => v.encode(out),
            Scalar::Int(v) | Scalar::Timestamp(v) => v.encode(out),
            Scalar::Float(v) => v.encode(out),
            Scalar::Str(v) => v.encode(out),
        }
    }

    fn decode(input: &mut &[u8]) -> Result<Self, String> {
        let (&tag, rest) = input.split_first().ok_or("empty scalar")?;
        *input = rest;
        Ok(match tag {
            0 => Scalar::Null,
            1 => Scalar::Bool(bool::decode(input)?),
            2 => Scalar::Int(i64::decode(input)?),
            3 => Scalar::Float(f64::decode(input)?),
            4 => Scalar::Timestamp(i64::decode(input)?),
            5 => Scalar::Str(String::decode(input)?),
            t => return Err(format!("scalar tag {t}")),
        })
    }
}

impl weir_state::codec::NotU8 for Scalar {}

/// An aggregate function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AggFn {
    CountStar,
    Count,
    CountDistinct,
    Sum,
    Min,
    Max,
    Avg,
    MaxBy,
    MinBy,
}

/// One aggregate column: the function, its compiled arguments, its output type.
#[derive(Clone, Debug)]
pub struct AggCall {
    pub func: AggFn,
    pub args: Vec<Expr>,
    pub data_type: DataType,
    /// `FILTER (WHERE p)`: only rows where `p` is true are aggregated.
    pub filter: Option<Expr>,
}

const FUNCTIONS: &str = "count(*), count(x), count(DISTINCT x), sum(x), min(x), max(x), avg(x), max_by(x, y), min_by(x, y)";

impl AggCall {
    /// Parses an aggregate call such as `count(*)` or `max_by(auction, price)` against the
    /// input schema.
    pub fn compile(sql: &str, input: &Schema) -> Result<AggCall, String> {
        let ast = expr::parse(sql).map_err(|e| e.to_string())?;
        let Ast::Function(f) = &ast else {
            return Err(format!(
                "`{sql}` is not an aggregate call; use one of {FUNCTIONS}"
            ));
        };
        let name = f.name.to_string().to_lowercase();
        let filter = match &f.filter {
            None => None,
            Some(p) => {
                let p = Expr::compile_ast(p, input).map_err(|e| e.to_string())?;
                if !matches!(p.data_type(), DataType::Boolean | DataType::Null) {
                    return Err(format!(
                        "FILTER (WHERE ...) takes a condition, not a {}",
                        p.data_type()
                    ));
                }
                Some(p)
            }
        };
        let (args, distinct) = match &f.args {
            FunctionArguments::List(FunctionArgumentList {
                args,
                duplicate_treatment,
                ..
            }) => (
                args.iter().collect::<Vec<_>>(),
                matches!(duplicate_treatment, Some(DuplicateTreatment::Distinct)),
            ),
            FunctionArguments::None => (Vec::new(), false),
            FunctionArguments::Subquery(_) => {
                return Err("subqueries are not supported in aggregates".into());
            }
        };
        let func = match (name.as_str(), distinct) {
            ("count", false) => AggFn::Count,
            ("count", true) => AggFn::CountDistinct,
            ("sum", false) => AggFn::Sum,
            ("min", false) => AggFn::Min,
            ("max", false) => AggFn::Max,
            ("avg", false) => AggFn::Avg,
            ("max_by", false) => AggFn::MaxBy,
            ("min_by", false) => AggFn::MinBy,
            (other, true) => {
                return Err(format!(
                    "DISTINCT is only supported in count(DISTINCT x), not in {other}"
                ));
            }
            (other, false) => {
                return Err(format!(
                    "unknown aggregate function `{other}`; use one of {FUNCTIONS}"
                ));
            }
        };
        let arity = if matches!(func, AggFn::MaxBy | AggFn::MinBy) {
            2
        } else {
            1
        };
        if args.len() != arity {
            return Err(format!(
                "{name} takes {arity} argument{}",
                if arity == 1 { "" } else { "s" }
            ));
        }
        if func == AggFn::Count
            && let [FunctionArg::Unnamed(FunctionArgExpr::Wildcard)] = args.as_slice()
        {
            // Filtered, it counts the rows the condition keeps: a count of a column that is
            // NULL where the condition does not hold (see `evaluate_args`).
            let func = if filter.is_some() {
                AggFn::Count
            } else {
                AggFn::CountStar
            };
            return Ok(AggCall {
                func,
                args: Vec::new(),
                data_type: DataType::Int64,
                filter,
            });
        }
        let mut compiled = Vec::new();
        for a in args {
            let FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) = a else {
                return Err(format!("{name} takes expressions, e.g. {name}(price)"));
            };
            compiled.push(Expr::compile_ast(e, input).map_err(|e| e.to_string())?);
        }
        let t = compiled[0].data_type().clone();
        let comparable = |t: &DataType| {
            matches!(
                t,
                DataType::Int64
                    | DataType::Float64
                    | DataType::Utf8
                    | DataType::Boolean
                    | DataType::Timestamp(_, _)
            )
        };
        let data_type = match func {
            AggFn::Count | AggFn::CountStar | AggFn::CountDistinct => DataType::Int64,
            AggFn::Sum => match t {
                DataType::Int64 | DataType::Float64 => t,
                _ => return Err(format!("sum needs a number, not {t}")),
            },
            AggFn::Avg => match t {
                DataType::Int64 | DataType::Float64 => DataType::Float64,
                _ => return Err(format!("avg needs a number, not {t}")),
            },
            AggFn::Min | AggFn::Max if comparable(&t) => t,
            AggFn::Min | AggFn::Max => {
                return Err(format!("{name} cannot compare values of type {t}"));
            }
            AggFn::MaxBy | AggFn::MinBy => {
                let by = compiled[1].data_type();
                if !comparable(by) {
                    return Err(format!("{name} cannot order by values of type {by}"));
                }
                t
            }
        };
        Ok(AggCall {
            func,
            args: compiled,
            data_type,
            filter,
        })
    }

    /// The argument columns of this call for `batch`; with a `FILTER`, NULL in the rows it
    /// leaves out (which every aggregate ignores).
    pub fn evaluate_args(&self, batch: &RecordBatch) -> Result<Vec<ArrayRef>, OperatorError> {
        let args: Vec<ArrayRef> = self
            .args
            .iter()
            .map(|a| a.evaluate(batch).map_err(OperatorError::from))
            .collect::<Result<_, _>>()?;
        let Some(filter) = &self.filter else {
            return Ok(args);
        };
        let kept = filter.evaluate(batch)?;
        // Left out: where the condition is false or NULL.
        let left_out: arrow_array::BooleanArray = match kept.as_boolean_opt() {
            Some(k) => k.iter().map(|v| Some(v != Some(true))).collect(),
            None => std::iter::repeat_n(Some(true), batch.num_rows()).collect(),
        };
        if args.is_empty() {
            // `count(*) FILTER (...)`: a column to count, NULL where left out.
            let present = arrow_array::BooleanArray::from(vec![true; batch.num_rows()]);
            return Ok(vec![arrow_select::nullif::nullif(&present, &left_out)?]);
        }
        args.iter()
            .map(|a| Ok(arrow_select::nullif::nullif(a.as_ref(), &left_out)?))
            .collect()
    }

    /// Every expression the call reads: its arguments and its filter.
    pub fn exprs(&self) -> impl Iterator<Item = &Expr> {
        self.args.iter().chain(&self.filter)
    }
}

/// The values a `count(DISTINCT x)` has seen. Integers, the common case (ids), are kept in a
/// hash set: an insert is a hash and a probe, where an ordered set of [`Scalar`]s costs a
/// dozen comparisons of a tagged enum (Nexmark q15 and q16 insert every bid's bidder and
/// auction into eight of them). Any other type is kept in an ordered set. A checkpoint holds
/// either as the sorted list of values, so the encoding does not depend on the set.
#[derive(Clone, Debug)]
pub enum Distinct {
    Ints(hashbrown::HashSet<i64>),
    Scalars(BTreeSet<Scalar>),
}

/// Equal when they hold the same values, however kept.
impl PartialEq for Distinct {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.values() == other.values()
    }
}

impl Default for Distinct {
    fn default() -> Self {
        Distinct::Ints(hashbrown::HashSet::new())
    }
}

impl Distinct {
    /// Adds the (non-NULL) value at `row` of `array`.
    fn insert(&mut self, array: &dyn Array, row: usize) {
        if let (Distinct::Ints(ints), DataType::Int64) = (&mut *self, array.data_type()) {
            ints.insert(array.as_primitive::<Int64Type>().value(row));
            return;
        }
        self.scalars().insert(Scalar::at(array, row));
    }

    /// The values as an ordered set, moving integers over the first time another type comes.
    fn scalars(&mut self) -> &mut BTreeSet<Scalar> {
        if let Distinct::Ints(ints) = self {
            *self = Distinct::Scalars(ints.iter().map(|&v| Scalar::Int(v)).collect());
        }
        match self {
            Distinct::Scalars(set) => set,
            Distinct::Ints(_) => unreachable!("just replaced by Scalars"),
        }
    }

    fn merge(&mut self, other: &Distinct) {
        match (&mut *self, other) {
            (Distinct::Ints(a), Distinct::Ints(b)) => a.extend(b.iter().copied()),
            (_, Distinct::Ints(b)) => self.scalars().extend(b.iter().map(|&v| Scalar::Int(v))),
            (_, Distinct::Scalars(b)) => self.scalars().extend(b.iter().cloned()),
        }
    }

    fn len(&self) -> usize {
        match self {
            Distinct::Ints(ints) => ints.len(),
            Distinct::Scalars(set) => set.len(),
        }
    }

    /// The values, in order.
    fn values(&self) -> Vec<Scalar> {
        match self {
            Distinct::Ints(ints) => {
                let mut sorted: Vec<i64> = ints.iter().copied().collect();
                sorted.sort_unstable();
                sorted.into_iter().map(Scalar::Int).collect()
            }
            Distinct::Scalars(set) => set.iter().cloned().collect(),
        }
    }

    fn from_values(values: Vec<Scalar>) -> Self {
        if values.iter().all(|v| matches!(v, Scalar::Int(_))) {
            let ints = values.iter().filter_map(|v| match v {
                Scalar::Int(i) => Some(*i),
                _ => None,
            });
            return Distinct::Ints(ints.collect());
        }
        Distinct::Scalars(values.into_iter().collect())
    }
}

/// The running state of one aggregate call.
#[derive(Clone, Debug, PartialEq)]
pub enum Acc {
    Count(i64),
    SumInt(Option<i64>),
    SumFloat(Option<f64>),
    Avg {
        sum: f64,
        count: i64,
    },
    /// min or max so far.
    Extreme(Option<Scalar>),
    Distinct(Distinct),
    /// (ordering value, value) of the best row so far.
    By(Option<(Scalar, Scalar)>),
    /// A sum that rows can be taken from: the sum and how many non-NULL values make it
    /// (NULL when none).
    RetractableSumInt {
        sum: i64,
        n: i64,
    },
    RetractableSumFloat {
        sum: f64,
        n: i64,
    },
    /// `min`, `max` or `count(DISTINCT)` that rows can be taken from: every value with how
    /// many rows hold it.
    Counted(Counted, BTreeMap<Scalar, i64>),
    /// `max_by` (`true`) or `min_by` that rows can be taken from: every (ordering value,
    /// value) with how many rows hold it. Of rows that tie on the ordering value, the largest
    /// value wins for `max_by` and the smallest for `min_by` (an order that taking rows back
    /// cannot change, unlike "the first such row").
    CountedBy(bool, BTreeMap<(Scalar, Scalar), i64>),
}

/// What a [`Acc::Counted`] multiset answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counted {
    Min,
    Max,
    Distinct,
}

impl Counted {
    fn code(self) -> u8 {
        self as u8
    }

    fn from_code(code: u8) -> Result<Counted, String> {
        match code {
            0 => Ok(Counted::Min),
            1 => Ok(Counted::Max),
            2 => Ok(Counted::Distinct),
            c => Err(format!("multiset kind {c}")),
        }
    }
}

/// Adds `by` (negative: takes) to the count of `value`; a count that would fall below zero
/// is a row taken back that was never added.
fn count_in<K: Ord>(values: &mut BTreeMap<K, i64>, value: K, by: i64) -> Result<(), OperatorError> {
    let count = values.entry(value).or_insert(0);
    *count += by;
    match (*count).cmp(&0) {
        Ordering::Less => Err(never_added()),
        Ordering::Equal => {
            // Removing it keeps the map as small as its live values.
            values.retain(|_, c| *c != 0);
            Ok(())
        }
        Ordering::Greater => Ok(()),
    }
}

fn never_added() -> OperatorError {
    OperatorError::Data(
        "a row was taken back (an update's old version or a delete) that the aggregate never \
         received: its input's changelog is not well formed"
            .into(),
    )
}

impl weir_state::codec::NotU8 for Acc {}

impl Acc {
    pub fn new(call: &AggCall) -> Acc {
        match (call.func, &call.data_type) {
            (AggFn::Count | AggFn::CountStar, _) => Acc::Count(0),
            (AggFn::CountDistinct, _) => Acc::Distinct(Distinct::default()),
            (AggFn::Sum, DataType::Int64) => Acc::SumInt(None),
            (AggFn::Sum, _) => Acc::SumFloat(None),
            (AggFn::Avg, _) => Acc::Avg { sum: 0.0, count: 0 },
            (AggFn::Min | AggFn::Max, _) => Acc::Extreme(None),
            (AggFn::MaxBy | AggFn::MinBy, _) => Acc::By(None),
        }
    }

    /// An accumulator of `call` that rows can also be taken from ([`Acc::retract`]).
    pub fn retractable(call: &AggCall) -> Acc {
        match (call.func, &call.data_type) {
            (AggFn::Count | AggFn::CountStar, _) => Acc::Count(0),
            (AggFn::CountDistinct, _) => Acc::Counted(Counted::Distinct, BTreeMap::new()),
            (AggFn::Sum, DataType::Int64) => Acc::RetractableSumInt { sum: 0, n: 0 },
            (AggFn::Sum, _) => Acc::RetractableSumFloat { sum: 0.0, n: 0 },
            (AggFn::Avg, _) => Acc::Avg { sum: 0.0, count: 0 },
            (AggFn::Min, _) => Acc::Counted(Counted::Min, BTreeMap::new()),
            (AggFn::Max, _) => Acc::Counted(Counted::Max, BTreeMap::new()),
            (AggFn::MaxBy, _) => Acc::CountedBy(true, BTreeMap::new()),
            (AggFn::MinBy, _) => Acc::CountedBy(false, BTreeMap::new()),
        }
    }

    /// Adds (`sign` 1) or takes back (`sign` -1) row `row` of a retractable accumulator
    /// ([`Acc::retractable`]); taking back what was never added is a data error.
    pub fn add_signed(
        &mut self,
        func: AggFn,
        args: &[ArrayRef],
        row: usize,
        sign: i64,
    ) -> Result<(), OperatorError> {
        if func == AggFn::CountStar {
            if let Acc::Count(c) = self {
                *c += sign;
                if *c < 0 {
                    return Err(never_added());
                }
            }
            return Ok(());
        }
        let Some(arg) = args.first() else {
            return Ok(());
        };
        if arg.is_null(row) {
            return Ok(());
        }
        let number = || match arg.data_type() {
            DataType::Int64 => arg.as_primitive::<Int64Type>().value(row) as f64,
            _ => arg.as_primitive::<Float64Type>().value(row),
        };
        match self {
            Acc::Count(c) => {
                *c += sign;
                if *c < 0 {
                    return Err(never_added());
                }
            }
            Acc::RetractableSumInt { sum, n } => {
                let v = arg.as_primitive::<Int64Type>().value(row);
                let v = v.checked_mul(sign).ok_or_else(overflow)?;
                *sum = sum.checked_add(v).ok_or_else(overflow)?;
                *n += sign;
            }
            Acc::RetractableSumFloat { sum, n } => {
                *sum += sign as f64 * arg.as_primitive::<Float64Type>().value(row);
                *n += sign;
            }
            Acc::Avg { sum, count } => {
                *sum += sign as f64 * number();
                *count += sign;
            }
            Acc::Counted(_, values) => count_in(values, Scalar::at(arg.as_ref(), row), sign)?,
            Acc::CountedBy(_, values) => {
                let Some(by) = args.get(1) else {
                    return Ok(());
                };
                if by.is_null(row) {
                    return Ok(());
                }
                let entry = (Scalar::at(by.as_ref(), row), Scalar::at(arg.as_ref(), row));
                count_in(values, entry, sign)?;
            }
            Acc::SumInt(_) | Acc::SumFloat(_) | Acc::Extreme(_) | Acc::Distinct(_) | Acc::By(_) => {
                return Err(OperatorError::Internal(
                    "taking a row back from an accumulator that cannot".into(),
                ));
            }
        }
        match self {
            Acc::Count(n)
            | Acc::RetractableSumInt { n, .. }
            | Acc::RetractableSumFloat { n, .. }
            | Acc::Avg { count: n, .. }
                if *n < 0 =>
            {
                Err(never_added())
            }
            _ => Ok(()),
        }
    }

    /// Adds row `row` whose argument columns are `args`.
    pub fn update(
        &mut self,
        func: AggFn,
        args: &[ArrayRef],
        row: usize,
    ) -> Result<(), OperatorError> {
        if func == AggFn::CountStar {
            if let Acc::Count(c) = self {
                *c += 1;
            }
            return Ok(());
        }
        let Some(arg) = args.first() else {
            return Ok(());
        };
        if arg.is_null(row) {
            return Ok(());
        }
        match self {
            Acc::RetractableSumInt { .. }
            | Acc::RetractableSumFloat { .. }
            | Acc::Counted(..)
            | Acc::CountedBy(..) => return self.add_signed(func, args, row, 1),
            Acc::Count(c) => *c += 1,
            Acc::SumInt(s) => {
                let v = arg.as_primitive::<Int64Type>().value(row);
                *s = Some(s.unwrap_or(0).checked_add(v).ok_or_else(overflow)?);
            }
            Acc::SumFloat(s) => {
                *s = Some(s.unwrap_or(0.0) + arg.as_primitive::<Float64Type>().value(row))
            }
            Acc::Avg { sum, count } => {
                *sum += match arg.data_type() {
                    DataType::Int64 => arg.as_primitive::<Int64Type>().value(row) as f64,
                    _ => arg.as_primitive::<Float64Type>().value(row),
                };
                *count += 1;
            }
            Acc::Extreme(m) => {
                let v = Scalar::at(arg.as_ref(), row);
                let better = match m {
                    None => true,
                    Some(cur) => {
                        (func == AggFn::Min && v < *cur) || (func == AggFn::Max && v > *cur)
                    }
                };
                if better {
                    *m = Some(v);
                }
            }
            Acc::Distinct(set) => set.insert(arg.as_ref(), row),
            Acc::By(best) => {
                let Some(by) = args.get(1) else {
                    return Ok(());
                };
                if by.is_null(row) {
                    return Ok(());
                }
                let key = Scalar::at(by.as_ref(), row);
                let better = match best {
                    None => true,
                    Some((cur, _)) => {
                        (func == AggFn::MaxBy && key > *cur) || (func == AggFn::MinBy && key < *cur)
                    }
                };
                if better {
                    *best = Some((key, Scalar::at(arg.as_ref(), row)));
                }
            }
        }
        Ok(())
    }

    /// Folds `other` (of the same call) into this accumulator.
    pub fn merge(&mut self, func: AggFn, other: &Acc) -> Result<(), OperatorError> {
        match (self, other) {
            (Acc::Count(a), Acc::Count(b)) => *a += b,
            (Acc::SumInt(a), Acc::SumInt(b)) => {
                if let Some(b) = b {
                    *a = Some(a.unwrap_or(0).checked_add(*b).ok_or_else(overflow)?);
                }
            }
            (Acc::SumFloat(a), Acc::SumFloat(b)) => {
                if let Some(b) = b {
                    *a = Some(a.unwrap_or(0.0) + b);
                }
            }
            (Acc::Avg { sum, count }, Acc::Avg { sum: s, count: c }) => {
                *sum += s;
                *count += c;
            }
            (Acc::Extreme(a), Acc::Extreme(Some(b))) => {
                let better = match a {
                    None => true,
                    Some(cur) => (func == AggFn::Min && b < cur) || (func == AggFn::Max && b > cur),
                };
                if better {
                    *a = Some(b.clone());
                }
            }
            (Acc::Extreme(_), Acc::Extreme(None)) | (Acc::By(_), Acc::By(None)) => {}
            (Acc::Distinct(a), Acc::Distinct(b)) => a.merge(b),
            (Acc::RetractableSumInt { sum, n }, Acc::RetractableSumInt { sum: s, n: m }) => {
                *sum = sum.checked_add(*s).ok_or_else(overflow)?;
                *n += m;
            }
            (Acc::RetractableSumFloat { sum, n }, Acc::RetractableSumFloat { sum: s, n: m }) => {
                *sum += s;
                *n += m;
            }
            (Acc::Counted(_, a), Acc::Counted(_, b)) => {
                for (v, c) in b {
                    count_in(a, v.clone(), *c)?;
                }
            }
            (Acc::CountedBy(_, a), Acc::CountedBy(_, b)) => {
                for (v, c) in b {
                    count_in(a, v.clone(), *c)?;
                }
            }
            (Acc::By(a), Acc::By(Some((key, value)))) => {
                let better = match a {
                    None => true,
                    Some((cur, _)) => {
                        (func == AggFn::MaxBy && key > cur) || (func == AggFn::MinBy && key < cur)
                    }
                };
                if better {
                    *a = Some((key.clone(), value.clone()));
                }
            }
            _ => {
                return Err(OperatorError::Internal(
                    "merging accumulators of different calls".into(),
                ));
            }
        }
        Ok(())
    }

    /// The aggregate's current value.
    pub fn result(&self) -> Scalar {
        match self {
            Acc::Count(c) => Scalar::Int(*c),
            Acc::SumInt(s) => s.map_or(Scalar::Null, Scalar::Int),
            Acc::SumFloat(s) => s.map_or(Scalar::Null, Scalar::Float),
            Acc::Avg { sum, count } if *count > 0 => Scalar::Float(sum / *count as f64),
            Acc::Avg { .. } => Scalar::Null,
            Acc::Extreme(m) => m.clone().unwrap_or(Scalar::Null),
            Acc::Distinct(set) => Scalar::Int(set.len() as i64),
            Acc::By(best) => best.as_ref().map_or(Scalar::Null, |(_, v)| v.clone()),
            Acc::RetractableSumInt { sum, n } if *n > 0 => Scalar::Int(*sum),
            Acc::RetractableSumFloat { sum, n } if *n > 0 => Scalar::Float(*sum),
            Acc::RetractableSumInt { .. } | Acc::RetractableSumFloat { .. } => Scalar::Null,
            Acc::Counted(Counted::Min, values) => {
                values.keys().next().cloned().unwrap_or(Scalar::Null)
            }
            Acc::Counted(Counted::Max, values) => {
                values.keys().next_back().cloned().unwrap_or(Scalar::Null)
            }
            Acc::Counted(Counted::Distinct, values) => Scalar::Int(values.len() as i64),
            Acc::CountedBy(max, values) => {
                let best = if *max {
                    values.keys().next_back()
                } else {
                    values.keys().next()
                };
                best.map_or(Scalar::Null, |(_, v)| v.clone())
            }
        }
    }
}

fn overflow() -> OperatorError {
    OperatorError::Data("integer overflow in sum(); cast the argument to DOUBLE".into())
}

impl StateValue for Acc {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Acc::Count(c) => {
                out.push(0);
                c.encode(out);
            }
            Acc::SumInt(s) => {
                out.push(1);
                s.encode(out);
            }
            Acc::SumFloat(s) => {
                out.push(2);
                s.encode(out);
            }
            Acc::Avg { sum, count } => {
                out.push(3);
                sum.encode(out);
                count.encode(out);
            }
            Acc::Extreme(m) => {
                out.push(4);
                m.encode(out);
            }
            Acc::Distinct(set) => {
                out.push(5);
                set.values().encode(out);
            }
            Acc::By(best) => {
                out.push(6);
                best.encode(out);
            }
            Acc::RetractableSumInt { sum, n } => {
                out.push(7);
                sum.encode(out);
                n.encode(out);
            }
            Acc::RetractableSumFloat { sum, n } => {
                out.push(8);
                sum.encode(out);
                n.encode(out);
            }
            Acc::Counted(kind, values) => {
                out.push(9);
                out.push(kind.code());
                let entries: Vec<(Scalar, i64)> =
                    values.iter().map(|(v, c)| (v.clone(), *c)).collect();
                entries.encode(out);
            }
            Acc::CountedBy(max, values) => {
                out.push(10);
                max.encode(out);
                let entries: Vec<((Scalar, Scalar), i64)> =
                    values.iter().map(|(v, c)| (v.clone(), *c)).collect();
                entries.encode(out);
            }
        }
    }

    fn decode(input: &mut &[u8]) -> Result<Self, String> {
        let (&tag, rest) = input.split_first().ok_or("empty accumulator")?;
        *input = rest;
        Ok(match tag {
            0 => Acc::Count(i64::decode(input)?),
            1 => Acc::SumInt(Option::decode(input)?),
            2 => Acc::SumFloat(Option::decode(input)?),
            3 => Acc::Avg {
                sum: f64::decode(input)?,
                count: i64::decode(input)?,
            },
            4 => Acc::Extreme(Option::decode(input)?),
            5 => Acc::Distinct(Distinct::from_values(Vec::<Scalar>::decode(input)?)),
            6 => Acc::By(Option::decode(input)?),
            7 => Acc::RetractableSumInt {
                sum: i64::decode(input)?,
                n: i64::decode(input)?,
            },
            8 => Acc::RetractableSumFloat {
                sum: f64::decode(input)?,
                n: i64::decode(input)?,
            },
            9 => {
                let (&kind, rest) = input.split_first().ok_or("empty multiset")?;
                *input = rest;
                let entries = Vec::<(Scalar, i64)>::decode(input)?;
                Acc::Counted(Counted::from_code(kind)?, entries.into_iter().collect())
            }
            10 => {
                let max = bool::decode(input)?;
                let entries = Vec::<((Scalar, Scalar), i64)>::decode(input)?;
                Acc::CountedBy(max, entries.into_iter().collect())
            }
            t => return Err(format!("accumulator tag {t}")),
        })
    }
}

/// A column of `data_type` from scalars (NULL where the scalar does not fit).
pub fn column(
    data_type: &DataType,
    values: impl IntoIterator<Item = Scalar>,
) -> Result<ArrayRef, OperatorError> {
    let values = values.into_iter();
    Ok(match data_type {
        DataType::Int64 => {
            let mut b = Int64Builder::new();
            for v in values {
                b.append_option(match v {
                    Scalar::Int(x) => Some(x),
                    _ => None,
                });
            }
            Arc::new(b.finish())
        }
        DataType::Timestamp(_, _) => {
            let v: Vec<Option<i64>> = values
                .map(|v| match v {
                    Scalar::Timestamp(x) | Scalar::Int(x) => Some(x),
                    _ => None,
                })
                .collect();
            Arc::new(TimestampMillisecondArray::from(v))
        }
        DataType::Float64 => {
            let mut b = Float64Builder::new();
            for v in values {
                b.append_option(v.as_f64());
            }
            Arc::new(b.finish())
        }
        DataType::Utf8 => {
            let mut b = StringBuilder::new();
            for v in values {
                match v {
                    Scalar::Str(s) => b.append_value(s),
                    _ => b.append_null(),
                }
            }
            Arc::new(b.finish())
        }
        DataType::Boolean => {
            let mut b = BooleanBuilder::new();
            for v in values {
                b.append_option(match v {
                    Scalar::Bool(x) => Some(x),
                    _ => None,
                });
            }
            Arc::new(b.finish())
        }
        DataType::Null => Arc::new(arrow_array::NullArray::new(values.count())),
        other => {
            return Err(OperatorError::Internal(format!(
                "aggregate output type {other}"
            )));
        }
    })
}

/// The aggregate calls of an operator as a state [`weir_state::Aggregator`]: an accumulator per
/// call, fed one row of argument columns at a time.
#[derive(Clone, Debug)]
pub struct Accumulators {
    pub calls: Vec<AggCall>,
}

impl weir_state::Aggregator for Accumulators {
    type Acc = Vec<Acc>;
    type Input<'a> = (&'a [Vec<ArrayRef>], usize);
    type Output = Vec<Scalar>;
    type Error = OperatorError;

    fn create(&self) -> Vec<Acc> {
        new_accs(&self.calls)
    }

    fn add(
        &self,
        acc: &mut Vec<Acc>,
        (args, row): (&[Vec<ArrayRef>], usize),
    ) -> Result<(), OperatorError> {
        update_all(acc, &self.calls, args, row)
    }

    fn merge(&self, acc: &mut Vec<Acc>, other: &Vec<Acc>) -> Result<(), OperatorError> {
        merge_all(acc, &self.calls, other)
    }

    fn result(&self, acc: &Vec<Acc>) -> Vec<Scalar> {
        acc.iter().map(Acc::result).collect()
    }
}

/// The aggregate calls of a running aggregate over an updating stream: retractable
/// accumulators ([`Acc::retractable`]), one per call, then the number of live rows (so that a
/// key whose last row is taken back is deleted). Fed one row with its kind at a time.
#[derive(Clone, Debug)]
pub struct RetractingAccumulators {
    pub calls: Vec<AggCall>,
}

impl RetractingAccumulators {
    /// How many rows are live in `acc` (its last accumulator).
    pub fn rows(acc: &[Acc]) -> i64 {
        match acc.last() {
            Some(Acc::Count(n)) => *n,
            _ => 0,
        }
    }
}

impl weir_state::Aggregator for RetractingAccumulators {
    type Acc = Vec<Acc>;
    type Input<'a> = (&'a [Vec<ArrayRef>], usize, i64);
    type Output = Vec<Scalar>;
    type Error = OperatorError;

    fn create(&self) -> Vec<Acc> {
        let mut accs: Vec<Acc> = self.calls.iter().map(Acc::retractable).collect();
        accs.push(Acc::Count(0));
        accs
    }

    fn add(
        &self,
        acc: &mut Vec<Acc>,
        (args, row, sign): (&[Vec<ArrayRef>], usize, i64),
    ) -> Result<(), OperatorError> {
        for ((a, call), arg) in acc.iter_mut().zip(&self.calls).zip(args) {
            a.add_signed(call.func, arg, row, sign)?;
        }
        if let Some(Acc::Count(n)) = acc.last_mut() {
            *n += sign;
        }
        Ok(())
    }

    fn merge(&self, acc: &mut Vec<Acc>, other: &Vec<Acc>) -> Result<(), OperatorError> {
        for (a, o) in acc.iter_mut().zip(other) {
            a.merge(AggFn::CountStar, o)?;
        }
        Ok(())
    }

    fn result(&self, acc: &Vec<Acc>) -> Vec<Scalar> {
        acc[..acc.len().saturating_sub(1)]
            .iter()
            .map(Acc::result)
            .collect()
    }
}

/// Accumulators of every call, for one key (and window).
pub fn new_accs(calls: &[AggCall]) -> Vec<Acc> {
    calls.iter().map(Acc::new).collect()
}

/// Adds row `row` to `accs`; `args[i]` are the argument columns of `calls[i]`.
pub fn update_all(
    accs: &mut [Acc],
    calls: &[AggCall],
    args: &[Vec<ArrayRef>],
    row: usize,
) -> Result<(), OperatorError> {
    for ((acc, call), a) in accs.iter_mut().zip(calls).zip(args) {
        acc.update(call.func, a, row)?;
    }
    Ok(())
}

/// Folds `other` into `accs`.
pub fn merge_all(accs: &mut [Acc], calls: &[AggCall], other: &[Acc]) -> Result<(), OperatorError> {
    for ((acc, call), o) in accs.iter_mut().zip(calls).zip(other) {
        acc.merge(call.func, o)?;
    }
    Ok(())
}

/// The argument columns of every call for `batch`.
pub fn evaluate_all(
    calls: &[AggCall],
    batch: &RecordBatch,
) -> Result<Vec<Vec<ArrayRef>>, OperatorError> {
    calls.iter().map(|c| c.evaluate_args(batch)).collect()
}

/// Result columns, one per call, for rows of accumulators.
pub fn result_columns<'a>(
    calls: &[AggCall],
    rows: impl Iterator<Item = &'a [Acc]> + Clone,
) -> Result<Vec<ArrayRef>, OperatorError> {
    calls
        .iter()
        .enumerate()
        .map(|(j, call)| column(&call.data_type, rows.clone().map(|accs| accs[j].result())))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_schema::Field;

    fn schema() -> Schema {
        Schema::new(vec![
            Field::new("x", DataType::Int64, true),
            Field::new("y", DataType::Float64, true),
            Field::new("s", DataType::Utf8, true),
        ])
    }

    #[test]
    fn filtered_calls_aggregate_only_the_rows_their_condition_keeps() {
        let s = schema();
        let mut random = crate::testing::Random(0xf11_7e12);
        let n = 500;
        let xs: Vec<Option<i64>> = (0..n)
            .map(|_| (random.below(6) != 0).then(|| random.below(21) as i64 - 10))
            .collect();
        let ss: Vec<Option<String>> = (0..n)
            .map(|_| (random.below(5) != 0).then(|| format!("s{}", random.below(4))))
            .collect();
        let batch = RecordBatch::try_new(
            Arc::new(s.clone()),
            vec![
                Arc::new(arrow_array::Int64Array::from(xs.clone())),
                Arc::new(arrow_array::Float64Array::from(vec![None::<f64>; n])),
                Arc::new(arrow_array::StringArray::from(ss.clone())),
            ],
        )
        .unwrap();
        let result = |sql: &str| {
            let call = AggCall::compile(sql, &s).unwrap();
            let args = call.evaluate_args(&batch).unwrap();
            let mut acc = Acc::new(&call);
            let mut taken = Acc::retractable(&call);
            for row in 0..n {
                acc.update(call.func, &args, row).unwrap();
                taken.add_signed(call.func, &args, row, 1).unwrap();
            }
            assert_eq!(acc.result(), taken.result(), "{sql}: both accumulators");
            acc.result()
        };
        // By hand: x > 0 (NULL x is not kept), s = 's1'.
        let kept = |row: usize| xs[row].is_some_and(|x| x > 0);
        let count = (0..n).filter(|r| kept(*r)).count() as i64;
        assert_eq!(result("count(*) FILTER (WHERE x > 0)"), Scalar::Int(count));
        let sum: i64 = (0..n)
            .filter(|r| ss[*r].as_deref() == Some("s1"))
            .filter_map(|r| xs[r])
            .sum();
        assert_eq!(result("sum(x) FILTER (WHERE s = 's1')"), Scalar::Int(sum));
        let distinct: BTreeSet<&String> = (0..n)
            .filter(|r| kept(*r))
            .filter_map(|r| ss[r].as_ref())
            .collect();
        assert_eq!(
            result("count(DISTINCT s) FILTER (WHERE x > 0)"),
            Scalar::Int(distinct.len() as i64)
        );
        assert_eq!(result("max(x) FILTER (WHERE x < -100)"), Scalar::Null);
        assert!(
            AggCall::compile("count(*) FILTER (WHERE x + 1)", &s)
                .unwrap_err()
                .contains("takes a condition")
        );
        // What it reads: its arguments and its condition.
        let call = AggCall::compile("sum(x) FILTER (WHERE s = 'a')", &s).unwrap();
        let read: BTreeSet<usize> = call.exprs().flat_map(Expr::columns).collect();
        assert_eq!(read, BTreeSet::from([0, 2]));
    }

    #[test]
    fn calls_parse_with_types_and_clear_errors() {
        let s = schema();
        assert_eq!(
            AggCall::compile("count(*)", &s).unwrap().func,
            AggFn::CountStar
        );
        assert_eq!(
            AggCall::compile("count(DISTINCT s)", &s).unwrap().func,
            AggFn::CountDistinct
        );
        let by = AggCall::compile("max_by(s, y)", &s).unwrap();
        assert_eq!((by.func, by.data_type), (AggFn::MaxBy, DataType::Utf8));
        assert!(
            AggCall::compile("max_by(s)", &s)
                .unwrap_err()
                .contains("takes 2 arguments")
        );
        assert!(
            AggCall::compile("sum(DISTINCT x)", &s)
                .unwrap_err()
                .contains("only supported in count")
        );
        assert!(
            AggCall::compile("avg(s)", &s)
                .unwrap_err()
                .contains("avg needs a number")
        );
    }

    #[test]
    fn merged_accumulators_equal_one_fed_everything() {
        let s = Arc::new(schema());
        let batch = RecordBatch::try_new(
            s.clone(),
            vec![
                Arc::new(arrow_array::Int64Array::from(vec![
                    Some(3),
                    None,
                    Some(7),
                    Some(3),
                ])),
                Arc::new(arrow_array::Float64Array::from(vec![
                    Some(1.5),
                    Some(9.0),
                    None,
                    Some(0.5),
                ])),
                Arc::new(arrow_array::StringArray::from(vec![
                    Some("a"),
                    Some("b"),
                    Some("c"),
                    None,
                ])),
            ],
        )
        .unwrap();
        for sql in [
            "count(*)",
            "count(x)",
            "count(DISTINCT x)",
            "sum(x)",
            "min(s)",
            "max(y)",
            "avg(y)",
            "max_by(s, y)",
            "min_by(x, y)",
        ] {
            let call = AggCall::compile(sql, &s).unwrap();
            let args = call.evaluate_args(&batch).unwrap();
            let mut all = Acc::new(&call);
            let (mut left, mut right) = (Acc::new(&call), Acc::new(&call));
            for row in 0..4 {
                all.update(call.func, &args, row).unwrap();
                if row < 2 { &mut left } else { &mut right }
                    .update(call.func, &args, row)
                    .unwrap();
            }
            left.merge(call.func, &right).unwrap();
            assert_eq!(left.result(), all.result(), "{sql}");
            assert_eq!(
                Acc::from_bytes(&all.to_bytes()).unwrap(),
                all,
                "{sql} round-trips"
            );
        }
    }
}
