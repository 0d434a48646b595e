//! Functions evaluated one row at a time over typed arguments: the machinery behind most of
//! Flink's scalar functions (padding, translating, hashing, JSON paths, calendar arithmetic).
//!
//! A family file writes each function as a [`RowFunction`] over one row's [`Datum`]s and builds
//! its node with [`node`]; this file reads the argument columns (scalars without materialising
//! them), skips rows with a NULL argument for strict functions, reuses one scratch `String` for
//! text results, and assembles the result column of the declared type.

use std::fmt;
use std::sync::Arc;

use arrow_array::builder::{
    BooleanBuilder, Float64Builder, Int64Builder, StringBuilder, TimestampMillisecondBuilder,
};
use arrow_array::types::{Float64Type, Int64Type, TimestampMillisecondType};
use arrow_array::{
    Array, ArrayRef, BooleanArray, Float64Array, Int64Array, RecordBatch, StringArray,
    TimestampMillisecondArray,
};

use super::compile::Origin;
use super::error::EvalError;
use super::node::{Node, Operator};
use super::types::{SqlType, Value, booleans, primitive, strings};

/// The largest string one call may produce: `repeat`, `lpad` and the like refuse to build more,
/// so a count read from the data cannot exhaust memory.
pub(crate) const MAX_RESULT_BYTES: usize = 1 << 20;

/// One argument's value in one row.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Datum<'a> {
    Null,
    Int(i64),
    Float(f64),
    Str(&'a str),
    Bool(bool),
    /// Epoch milliseconds (UTC).
    Timestamp(i64),
}

impl<'a> Datum<'a> {
    pub(crate) fn is_null(self) -> bool {
        matches!(self, Self::Null)
    }

    pub(crate) fn str(self) -> Option<&'a str> {
        match self {
            Self::Str(text) => Some(text),
            _ => None,
        }
    }

    /// INT values, and TIMESTAMPs as epoch milliseconds.
    pub(crate) fn int(self) -> Option<i64> {
        match self {
            Self::Int(value) | Self::Timestamp(value) => Some(value),
            _ => None,
        }
    }

    /// FLOAT values, INT widened.
    pub(crate) fn float(self) -> Option<f64> {
        match self {
            Self::Float(value) => Some(value),
            Self::Int(value) => Some(value as f64),
            _ => None,
        }
    }
}

/// One row's result.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Out<'a> {
    Null,
    Int(i64),
    Float(f64),
    Bool(bool),
    Timestamp(i64),
    /// Text borrowed from an argument.
    Str(&'a str),
    /// The text the function wrote into the scratch buffer.
    Written,
}

/// A function of one row. `Err` is a message for [`EvalError::InvalidArgument`]; only functions
/// built with `can_fail` may return it.
pub(crate) trait RowFunction: fmt::Debug + Send + Sync {
    fn call<'a>(&self, args: &[Datum<'a>], scratch: &mut String) -> Result<Out<'a>, String>;
}

/// A plain function as a [`RowFunction`].
pub(crate) type Plain = for<'a> fn(&[Datum<'a>], &mut String) -> Result<Out<'a>, String>;

impl RowFunction for Plain {
    fn call<'a>(&self, args: &[Datum<'a>], scratch: &mut String) -> Result<Out<'a>, String> {
        self(args, scratch)
    }
}

/// How the rows of a function treat NULL and failure.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Traits {
    /// A NULL argument gives NULL without calling the function (almost every Flink function).
    pub(crate) strict: bool,
    /// The function may return `Err` on some row.
    pub(crate) can_fail: bool,
}

pub(crate) const STRICT: Traits = Traits {
    strict: true,
    can_fail: false,
};

pub(crate) const STRICT_FALLIBLE: Traits = Traits {
    strict: true,
    can_fail: true,
};

pub(crate) const LENIENT: Traits = Traits {
    strict: false,
    can_fail: false,
};

/// Builds the node of a row-wise function; the argument nodes must already have the types the
/// function reads (family files convert them first).
pub(crate) fn node(
    args: Vec<Node>,
    ty: SqlType,
    traits: Traits,
    function: impl RowFunction + 'static,
    origin: &Origin,
) -> Node {
    Node::op(
        ty,
        origin.sql.clone(),
        RowOp {
            args,
            ty,
            traits,
            function: Box::new(function),
        },
    )
}

/// Builds a row-wise function from a plain `fn`.
pub(crate) fn plain(
    args: Vec<Node>,
    ty: SqlType,
    traits: Traits,
    function: Plain,
    origin: &Origin,
) -> Node {
    node(args, ty, traits, function, origin)
}

#[derive(Debug)]
struct RowOp {
    args: Vec<Node>,
    ty: SqlType,
    traits: Traits,
    function: Box<dyn RowFunction>,
}

impl Operator for RowOp {
    fn eval(&self, batch: &RecordBatch, sql: &str) -> Result<Value, EvalError> {
        let rows = batch.num_rows();
        let values = self
            .args
            .iter()
            .map(|arg| arg.eval(batch))
            .collect::<Result<Vec<_>, _>>()?;
        let columns = values
            .iter()
            .zip(&self.args)
            .map(|(value, arg)| Column::new(value, arg.ty, sql))
            .collect::<Result<Vec<_>, _>>()?;
        let mut output = Output::new(self.ty, rows, sql)?;
        let mut datums = Vec::with_capacity(columns.len());
        let mut scratch = String::new();
        for row in 0..rows {
            datums.clear();
            datums.extend(columns.iter().map(|column| column.get(row)));
            if self.traits.strict && datums.iter().any(|datum| datum.is_null()) {
                output.append(Out::Null, &scratch, sql)?;
                continue;
            }
            scratch.clear();
            let out = self
                .function
                .call(&datums, &mut scratch)
                .map_err(|message| EvalError::InvalidArgument {
                    expr: sql.to_owned(),
                    message,
                })?;
            output.append(out, &scratch, sql)?;
        }
        Ok(Value::Array(output.finish()))
    }

    fn children(&self) -> Vec<&Node> {
        self.args.iter().collect()
    }

    fn can_fail(&self) -> bool {
        self.traits.can_fail
    }
}

/// Per-row access to one argument, a scalar or a column.
enum Column<'a> {
    Scalar(Datum<'a>),
    Int(&'a Int64Array),
    Float(&'a Float64Array),
    Str(&'a StringArray),
    Bool(&'a BooleanArray),
    Timestamp(&'a TimestampMillisecondArray),
    Null,
}

impl<'a> Column<'a> {
    fn new(value: &'a Value, ty: SqlType, sql: &str) -> Result<Self, EvalError> {
        let array = value.array();
        let column = match ty {
            SqlType::Int | SqlType::Interval => Self::Int(primitive::<Int64Type>(array, sql)?),
            SqlType::Float => Self::Float(primitive::<Float64Type>(array, sql)?),
            SqlType::String => Self::Str(strings(array, sql)?),
            SqlType::Bool => Self::Bool(booleans(array, sql)?),
            SqlType::Timestamp => {
                Self::Timestamp(primitive::<TimestampMillisecondType>(array, sql)?)
            }
            SqlType::Null => Self::Null,
        };
        Ok(if value.is_scalar() {
            Self::Scalar(column.get(0))
        } else {
            column
        })
    }

    fn get(&self, row: usize) -> Datum<'a> {
        fn at<T>(array: &dyn Array, row: usize, value: impl FnOnce() -> T) -> Option<T> {
            array.is_valid(row).then(value)
        }
        let datum = match self {
            Self::Scalar(datum) => return *datum,
            Self::Null => None,
            Self::Int(a) => at(*a, row, || Datum::Int(a.value(row))),
            Self::Float(a) => at(*a, row, || Datum::Float(a.value(row))),
            Self::Str(a) => at(*a, row, || Datum::Str(a.value(row))),
            Self::Bool(a) => at(*a, row, || Datum::Bool(a.value(row))),
            Self::Timestamp(a) => at(*a, row, || Datum::Timestamp(a.value(row))),
        };
        datum.unwrap_or(Datum::Null)
    }
}

/// The result column being built.
enum Output {
    Int(Int64Builder),
    Float(Float64Builder),
    Str(StringBuilder),
    Bool(BooleanBuilder),
    Timestamp(TimestampMillisecondBuilder),
}

impl Output {
    fn new(ty: SqlType, rows: usize, sql: &str) -> Result<Self, EvalError> {
        Ok(match ty {
            SqlType::Int => Self::Int(Int64Builder::with_capacity(rows)),
            SqlType::Float => Self::Float(Float64Builder::with_capacity(rows)),
            SqlType::String => Self::Str(StringBuilder::with_capacity(rows, rows * 8)),
            SqlType::Bool => Self::Bool(BooleanBuilder::with_capacity(rows)),
            SqlType::Timestamp => Self::Timestamp(TimestampMillisecondBuilder::with_capacity(rows)),
            SqlType::Interval | SqlType::Null => {
                return Err(EvalError::Internal {
                    expr: sql.to_owned(),
                    message: format!("a row-wise function cannot produce {ty}"),
                });
            }
        })
    }

    fn append(&mut self, out: Out<'_>, scratch: &str, sql: &str) -> Result<(), EvalError> {
        match (self, out) {
            (Self::Int(b), Out::Null) => b.append_null(),
            (Self::Float(b), Out::Null) => b.append_null(),
            (Self::Str(b), Out::Null) => b.append_null(),
            (Self::Bool(b), Out::Null) => b.append_null(),
            (Self::Timestamp(b), Out::Null) => b.append_null(),
            (Self::Int(b), Out::Int(v)) => b.append_value(v),
            (Self::Float(b), Out::Float(v)) => b.append_value(v),
            (Self::Bool(b), Out::Bool(v)) => b.append_value(v),
            (Self::Timestamp(b), Out::Timestamp(v)) => b.append_value(v),
            (Self::Str(b), Out::Str(v)) => b.append_value(v),
            (Self::Str(b), Out::Written) => b.append_value(scratch),
            (_, out) => {
                return Err(EvalError::Internal {
                    expr: sql.to_owned(),
                    message: format!("a row-wise function returned {out:?} for another type"),
                });
            }
        }
        Ok(())
    }

    fn finish(self) -> ArrayRef {
        match self {
            Self::Int(mut b) => Arc::new(b.finish()),
            Self::Float(mut b) => Arc::new(b.finish()),
            Self::Str(mut b) => Arc::new(b.finish()),
            Self::Bool(mut b) => Arc::new(b.finish()),
            Self::Timestamp(mut b) => Arc::new(b.finish()),
        }
    }
}

/// Refuses a result longer than [`MAX_RESULT_BYTES`] before it is built.
pub(crate) fn check_size(bytes: usize) -> Result<(), String> {
    if bytes > MAX_RESULT_BYTES {
        return Err(format!(
            "the result would be {bytes} bytes long; at most {MAX_RESULT_BYTES} are allowed"
        ));
    }
    Ok(())
}
