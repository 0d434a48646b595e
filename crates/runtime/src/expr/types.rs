//! weir's SQL types, compile-time literals, and the columnar [`Value`] that operators exchange.

use std::fmt;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int64Type, TimestampMillisecondType};
use arrow_array::{
    Array, ArrayRef, ArrowPrimitiveType, BooleanArray, Datum, Float64Array, Int64Array,
    PrimitiveArray, Scalar, StringArray, TimestampMillisecondArray, new_null_array,
};

use super::error::EvalError;
use arrow_buffer::BooleanBuffer;
use arrow_schema::{DataType, TimeUnit};

/// The type of a compiled (sub)expression.
///
/// The first five map one-to-one onto the Arrow types the engine uses (see [`SqlType::arrow`]).
/// `Null` is the type of an untyped `NULL` literal. `Interval` never reaches a batch: it is the
/// type of `INTERVAL '10' SECOND` constants, held as `Int64` milliseconds, and only exists to be
/// added to or subtracted from a TIMESTAMP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SqlType {
    Int,
    Float,
    String,
    Bool,
    Timestamp,
    Interval,
    Null,
}

impl SqlType {
    /// The Arrow type values of this SQL type have in a batch.
    pub(crate) fn arrow(self) -> DataType {
        match self {
            Self::Int | Self::Interval => DataType::Int64,
            Self::Float => DataType::Float64,
            Self::String => DataType::Utf8,
            Self::Bool => DataType::Boolean,
            Self::Timestamp => DataType::Timestamp(TimeUnit::Millisecond, None),
            Self::Null => DataType::Null,
        }
    }

    /// The SQL type of an input column, or `None` when the engine's data model has no such type.
    pub(crate) fn from_arrow(data_type: &DataType) -> Option<Self> {
        match data_type {
            DataType::Int64 => Some(Self::Int),
            DataType::Float64 => Some(Self::Float),
            DataType::Utf8 => Some(Self::String),
            DataType::Boolean => Some(Self::Bool),
            DataType::Timestamp(TimeUnit::Millisecond, None) => Some(Self::Timestamp),
            DataType::Null => Some(Self::Null),
            _ => None,
        }
    }

    /// INT or FLOAT.
    pub(crate) fn is_numeric(self) -> bool {
        matches!(self, Self::Int | Self::Float)
    }
}

impl fmt::Display for SqlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Int => "INT",
            Self::Float => "FLOAT",
            Self::String => "STRING",
            Self::Bool => "BOOL",
            Self::Timestamp => "TIMESTAMP",
            Self::Interval => "INTERVAL",
            Self::Null => "NULL",
        })
    }
}

/// An exact decimal literal `mantissa / 10^scale`, e.g. `0.908` is `908 / 10^3`.
///
/// Kept next to the literal's `f64` so that `INT * 0.908` can be computed exactly (see
/// `arith::ScaledMul`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Decimal {
    pub(crate) mantissa: i64,
    pub(crate) scale: u32,
}

impl Decimal {
    /// Largest scale for which `10^scale` is exact both in `i64` and in `f64`.
    pub(crate) const MAX_SCALE: u32 = 18;

    /// Reads `[-]digits[.digits]`; `None` for exponents, too many digits, or no fraction.
    pub(crate) fn parse(text: &str) -> Option<Self> {
        let (negative, digits) = match text.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        let (int_part, frac_part) = digits.split_once('.')?;
        if frac_part.is_empty()
            || !int_part.bytes().all(|b| b.is_ascii_digit())
            || !frac_part.bytes().all(|b| b.is_ascii_digit())
        {
            return None;
        }
        let scale = u32::try_from(frac_part.len()).ok()?;
        if scale > Self::MAX_SCALE {
            return None;
        }
        let mut mantissa: i64 = 0;
        for b in int_part.bytes().chain(frac_part.bytes()) {
            mantissa = mantissa.checked_mul(10)?.checked_add(i64::from(b - b'0'))?;
        }
        Some(Self {
            mantissa: if negative { -mantissa } else { mantissa },
            scale,
        })
    }
}

/// A constant known at compile time: a literal, or a folded literal-only subtree.
#[derive(Debug, Clone)]
pub(crate) struct Literal {
    /// The value as a one-row array of the literal's Arrow type, ready to be passed to kernels
    /// as a [`Scalar`] without materialising it per row.
    array: ArrayRef,
    /// Set for decimal literals written in the SQL text (not for folded results).
    decimal: Option<Decimal>,
}

impl Literal {
    /// Wraps a one-row array; `None` when `array` does not have exactly one row.
    pub(crate) fn from_array(array: ArrayRef) -> Option<Self> {
        (array.len() == 1).then_some(Self {
            array,
            decimal: None,
        })
    }

    pub(crate) fn int(value: i64) -> Self {
        Self::of(Arc::new(Int64Array::from(vec![value])))
    }

    pub(crate) fn float(value: f64, decimal: Option<Decimal>) -> Self {
        Self {
            array: Arc::new(Float64Array::from(vec![value])),
            decimal,
        }
    }

    pub(crate) fn string(value: &str) -> Self {
        Self::of(Arc::new(StringArray::from(vec![value])))
    }

    pub(crate) fn bool(value: bool) -> Self {
        Self::of(Arc::new(BooleanArray::from(vec![value])))
    }

    pub(crate) fn timestamp(millis: i64) -> Self {
        Self::of(Arc::new(TimestampMillisecondArray::from(vec![millis])))
    }

    /// A NULL of the given type (`SqlType::Null` gives an untyped NULL).
    pub(crate) fn null(ty: SqlType) -> Self {
        Self::of(new_null_array(&ty.arrow(), 1))
    }

    fn of(array: ArrayRef) -> Self {
        Self {
            array,
            decimal: None,
        }
    }

    pub(crate) fn decimal(&self) -> Option<Decimal> {
        self.decimal
    }

    pub(crate) fn is_null(&self) -> bool {
        // Logical, not physical: a `NullArray` has no validity buffer.
        self.array.logical_null_count() > 0
    }

    /// The value of an INT, INTERVAL (milliseconds) or TIMESTAMP (epoch milliseconds) literal.
    pub(crate) fn as_i64(&self) -> Option<i64> {
        if self.is_null() {
            return None;
        }
        match self.array.data_type() {
            DataType::Int64 => Some(self.array.as_primitive::<Int64Type>().value(0)),
            DataType::Timestamp(TimeUnit::Millisecond, None) => Some(
                self.array
                    .as_primitive::<TimestampMillisecondType>()
                    .value(0),
            ),
            _ => None,
        }
    }

    pub(crate) fn as_f64(&self) -> Option<f64> {
        match self.array.data_type() {
            DataType::Float64 if !self.is_null() => {
                Some(self.array.as_primitive::<Float64Type>().value(0))
            }
            _ => None,
        }
    }

    pub(crate) fn as_str(&self) -> Option<&str> {
        match self.array.data_type() {
            DataType::Utf8 if !self.is_null() => Some(self.array.as_string::<i32>().value(0)),
            _ => None,
        }
    }

    pub(crate) fn value(&self) -> Value {
        Value::Scalar(Scalar::new(Arc::clone(&self.array)))
    }
}

/// The result of evaluating a (sub)expression over a batch.
///
/// Constants stay `Scalar` so that kernels which accept a [`Datum`] (arithmetic, comparison,
/// `zip`) never see them materialised per row; only operators that need a full column call
/// [`Value::into_array`].
#[derive(Debug, Clone)]
pub(crate) enum Value {
    /// One value per row of the batch.
    Array(ArrayRef),
    /// One value for every row.
    Scalar(Scalar<ArrayRef>),
}

impl Value {
    /// A value from a kernel result: `Scalar` when every input was scalar (the kernel then
    /// returns a one-row array), `Array` otherwise.
    pub(crate) fn from_kernel(array: ArrayRef, all_scalar: bool) -> Self {
        if all_scalar && array.len() == 1 {
            Self::Scalar(Scalar::new(array))
        } else {
            Self::Array(array)
        }
    }

    pub(crate) fn datum(&self) -> &dyn Datum {
        match self {
            Self::Array(array) => array,
            Self::Scalar(scalar) => scalar,
        }
    }

    pub(crate) fn is_scalar(&self) -> bool {
        matches!(self, Self::Scalar(_))
    }

    /// The underlying array: `num_rows` values, or one value for a scalar.
    pub(crate) fn array(&self) -> &dyn Array {
        self.datum().get().0
    }

    /// One value per row: arrays as they are, scalars repeated `num_rows` times.
    pub(crate) fn into_array(self, num_rows: usize) -> ArrayRef {
        match self {
            Self::Array(array) => array,
            Self::Scalar(scalar) => broadcast(scalar.into_inner(), num_rows),
        }
    }

    /// Applies an array-to-array function to the values, keeping scalars scalar.
    pub(crate) fn map<E>(
        &self,
        f: impl FnOnce(&dyn Array) -> Result<ArrayRef, E>,
    ) -> Result<Self, E> {
        let result = f(self.array())?;
        Ok(Self::from_kernel(result, self.is_scalar()))
    }
}

/// Repeats the single value of `scalar` `num_rows` times.
fn broadcast(scalar: ArrayRef, num_rows: usize) -> ArrayRef {
    if num_rows == 1 {
        return scalar;
    }
    if scalar.logical_null_count() > 0 {
        return new_null_array(scalar.data_type(), num_rows);
    }
    match scalar.data_type() {
        DataType::Int64 => Arc::new(Int64Array::from_value(
            scalar.as_primitive::<Int64Type>().value(0),
            num_rows,
        )),
        DataType::Float64 => Arc::new(Float64Array::from_value(
            scalar.as_primitive::<Float64Type>().value(0),
            num_rows,
        )),
        DataType::Timestamp(TimeUnit::Millisecond, None) => {
            Arc::new(TimestampMillisecondArray::from_value(
                scalar.as_primitive::<TimestampMillisecondType>().value(0),
                num_rows,
            ))
        }
        DataType::Boolean => {
            let values = if scalar.as_boolean().value(0) {
                BooleanBuffer::new_set(num_rows)
            } else {
                BooleanBuffer::new_unset(num_rows)
            };
            Arc::new(BooleanArray::new(values, None))
        }
        DataType::Utf8 => {
            let value = scalar.as_string::<i32>().value(0);
            Arc::new(StringArray::from_iter_values(std::iter::repeat_n(
                value, num_rows,
            )))
        }
        // Only the types above (and Null, handled by the null check) ever reach here.
        other => new_null_array(other, num_rows),
    }
}

/// A boolean value as a `num_rows`-row array (the Kleene kernels take arrays only).
pub(crate) fn bool_array(value: Value, num_rows: usize) -> BooleanArray {
    let array = value.into_array(num_rows);
    match array.as_boolean_opt() {
        Some(array) => array.clone(),
        // A NULL-typed operand of AND/OR/NOT: all unknown.
        None => BooleanArray::new_null(array.len()),
    }
}

/// Views `array` as a primitive array of `T`. The compiler guarantees the type; a mismatch is a
/// bug reported as [`EvalError::Internal`] rather than a panic.
pub(crate) fn primitive<'a, T: ArrowPrimitiveType>(
    array: &'a dyn Array,
    sql: &str,
) -> Result<&'a PrimitiveArray<T>, EvalError> {
    array
        .as_primitive_opt::<T>()
        .ok_or_else(|| unexpected_type(array, &T::DATA_TYPE, sql))
}

/// Views `array` as a STRING array (see [`primitive`]).
pub(crate) fn strings<'a>(array: &'a dyn Array, sql: &str) -> Result<&'a StringArray, EvalError> {
    array
        .as_string_opt::<i32>()
        .ok_or_else(|| unexpected_type(array, &DataType::Utf8, sql))
}

/// Views `array` as a BOOL array (see [`primitive`]).
pub(crate) fn booleans<'a>(array: &'a dyn Array, sql: &str) -> Result<&'a BooleanArray, EvalError> {
    array
        .as_boolean_opt()
        .ok_or_else(|| unexpected_type(array, &DataType::Boolean, sql))
}

fn unexpected_type(array: &dyn Array, expected: &DataType, sql: &str) -> EvalError {
    EvalError::Internal {
        expr: sql.to_owned(),
        message: format!("expected {expected} values, got {}", array.data_type()),
    }
}
