//! Rows of PostgreSQL's text output made Arrow columns: the snapshot's `SELECT ...::text` and
//! `pgoutput`'s text values both arrive as text, read here by the column's declared type.
//!
//! | declared | PostgreSQL types read | text read as |
//! |---|---|---|
//! | `int` | `smallint`, `integer`, `bigint`, `oid`, `numeric` (integral values) | a 64-bit integer |
//! | `float` | `real`, `double precision`, `numeric`, the integers | a double (`NaN`, `Infinity` too) |
//! | `string` | every type | PostgreSQL's text form (`json`, arrays, `bytea` as `\x..`, `uuid`, `date`, ...) |
//! | `bool` | `boolean` | `t` / `f` |
//! | `timestamp` | `timestamp`, `timestamptz`, `date` | epoch milliseconds, UTC (a `date` at midnight) |

use std::sync::Arc;

use arrow_array::builder::{
    BooleanBuilder, Float64Builder, Int8Builder, Int64Builder, StringBuilder,
    TimestampMillisecondBuilder,
};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::SchemaRef;
use chrono::{DateTime, NaiveDate, NaiveDateTime};

use crate::changelog::RowKind;
use crate::format::json::ScalarType;

/// Whether a column of PostgreSQL type `typname` (as `pg_type` names it) can be read as
/// `declared`.
pub fn readable_as(typname: &str, declared: ScalarType) -> bool {
    const INTEGERS: [&str; 4] = ["int2", "int4", "int8", "oid"];
    match declared {
        ScalarType::String => true,
        ScalarType::Int => INTEGERS.contains(&typname) || typname == "numeric",
        ScalarType::Float => {
            INTEGERS.contains(&typname) || ["numeric", "float4", "float8"].contains(&typname)
        }
        ScalarType::Bool => typname == "bool",
        ScalarType::Timestamp => ["timestamp", "timestamptz", "date"].contains(&typname),
    }
}

/// A value read by its declared type.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value<'a> {
    Null,
    Int(i64),
    Float(f64),
    Str(&'a str),
    Bool(bool),
    Millis(i64),
}

/// Reads `text` (PostgreSQL's text form) as `ty`; the error says why, without the value.
pub fn parse(text: Option<&str>, ty: ScalarType) -> Result<Value<'_>, &'static str> {
    let Some(s) = text else {
        return Ok(Value::Null);
    };
    Ok(match ty {
        ScalarType::String => Value::Str(s),
        ScalarType::Int => Value::Int(integer(s)?),
        ScalarType::Float => Value::Float(s.parse::<f64>().map_err(|_| "not a number")?),
        ScalarType::Bool => Value::Bool(match s {
            "t" | "true" => true,
            "f" | "false" => false,
            _ => return Err("not a boolean"),
        }),
        ScalarType::Timestamp => Value::Millis(millis(s)?),
    })
}

/// An integer, or a `numeric` whose fraction is all zeros (`12.000`).
fn integer(s: &str) -> Result<i64, &'static str> {
    if let Ok(v) = s.parse::<i64>() {
        return Ok(v);
    }
    match s.split_once('.') {
        Some((whole, fraction)) if fraction.bytes().all(|b| b == b'0') => whole
            .parse::<i64>()
            .map_err(|_| "an integer out of the range of `int` (64 bits)"),
        Some(_) => Err("a number with a fraction, declared `int` (declare it `float`)"),
        None => Err("not an integer, or out of the range of `int` (64 bits)"),
    }
}

/// Epoch milliseconds of PostgreSQL's ISO output of a `timestamp` (`2024-05-01 12:00:00.5`,
/// read as UTC), `timestamptz` (`... +02`, `... +05:30`) or `date` (`2024-05-01`).
fn millis(s: &str) -> Result<i64, &'static str> {
    if let Ok(t) = DateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S%.f%#z") {
        return Ok(t.timestamp_millis());
    }
    if let Ok(t) = NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S%.f") {
        return Ok(t.and_utc().timestamp_millis());
    }
    if let Ok(d) = NaiveDate::parse_from_str(s, "%Y-%m-%d")
        && let Some(t) = d.and_hms_opt(0, 0, 0)
    {
        return Ok(t.and_utc().timestamp_millis());
    }
    Err("not a timestamp weir can read (ISO dates of the common era; not infinity)")
}

enum Column {
    Int(Int64Builder),
    Float(Float64Builder),
    Str(StringBuilder),
    Bool(BooleanBuilder),
    Millis(TimestampMillisecondBuilder),
}

/// The rows of one table's port being collected: its declared columns and each row's kind.
pub struct Rows {
    schema: SchemaRef,
    types: Vec<ScalarType>,
    columns: Vec<Column>,
    ops: Int8Builder,
    len: usize,
}

impl Rows {
    /// `schema` is the port's (the declared columns, then the row kind), `types` the declared
    /// types in the same order.
    pub fn new(schema: SchemaRef, types: Vec<ScalarType>) -> Self {
        let columns = types.iter().map(|t| new_column(*t)).collect();
        Self {
            schema,
            types,
            columns,
            ops: Int8Builder::new(),
            len: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends one row of `kind`; `value(i)` is the text of declared column `i` (`None`:
    /// null). Nothing is appended when a value does not read: the error names the column.
    pub fn push<'a>(
        &mut self,
        kind: RowKind,
        mut value: impl FnMut(usize) -> Option<&'a str>,
    ) -> Result<(), (usize, &'static str)> {
        let mut parsed = Vec::with_capacity(self.types.len());
        for (i, ty) in self.types.iter().enumerate() {
            parsed.push(parse(value(i), *ty).map_err(|why| (i, why))?);
        }
        for (column, v) in self.columns.iter_mut().zip(parsed) {
            match (column, v) {
                (Column::Int(b), Value::Int(v)) => b.append_value(v),
                (Column::Float(b), Value::Float(v)) => b.append_value(v),
                (Column::Str(b), Value::Str(v)) => b.append_value(v),
                (Column::Bool(b), Value::Bool(v)) => b.append_value(v),
                (Column::Millis(b), Value::Millis(v)) => b.append_value(v),
                (Column::Int(b), _) => b.append_null(),
                (Column::Float(b), _) => b.append_null(),
                (Column::Str(b), _) => b.append_null(),
                (Column::Bool(b), _) => b.append_null(),
                (Column::Millis(b), _) => b.append_null(),
            }
        }
        self.ops.append_value(kind as i8);
        self.len += 1;
        Ok(())
    }

    /// The rows collected so far as a batch; the builders start again empty.
    pub fn finish(&mut self) -> Result<RecordBatch, arrow_schema::ArrowError> {
        let mut arrays: Vec<ArrayRef> = self
            .columns
            .iter_mut()
            .map(|c| -> ArrayRef {
                match c {
                    Column::Int(b) => Arc::new(b.finish()),
                    Column::Float(b) => Arc::new(b.finish()),
                    Column::Str(b) => Arc::new(b.finish()),
                    Column::Bool(b) => Arc::new(b.finish()),
                    Column::Millis(b) => Arc::new(b.finish()),
                }
            })
            .collect();
        arrays.push(Arc::new(self.ops.finish()));
        self.len = 0;
        RecordBatch::try_new(self.schema.clone(), arrays)
    }
}

fn new_column(ty: ScalarType) -> Column {
    match ty {
        ScalarType::Int => Column::Int(Int64Builder::new()),
        ScalarType::Float => Column::Float(Float64Builder::new()),
        ScalarType::String => Column::Str(StringBuilder::new()),
        ScalarType::Bool => Column::Bool(BooleanBuilder::new()),
        ScalarType::Timestamp => Column::Millis(TimestampMillisecondBuilder::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postgres_text_reads_as_the_declared_types() {
        use ScalarType::*;
        assert_eq!(parse(Some("-42"), Int), Ok(Value::Int(-42)));
        assert_eq!(parse(Some("17.000"), Int), Ok(Value::Int(17)));
        assert!(parse(Some("17.5"), Int).is_err());
        assert!(parse(Some("99999999999999999999"), Int).is_err());
        assert_eq!(parse(Some("2.5"), Float), Ok(Value::Float(2.5)));
        assert!(matches!(parse(Some("NaN"), Float), Ok(Value::Float(f)) if f.is_nan()));
        assert_eq!(
            parse(Some("-Infinity"), Float),
            Ok(Value::Float(f64::NEG_INFINITY))
        );
        assert_eq!(parse(Some("t"), Bool), Ok(Value::Bool(true)));
        assert!(parse(Some("yes"), Bool).is_err());
        assert_eq!(parse(None, Int), Ok(Value::Null));
        // 2024-05-01T12:00:00.5Z is 1714564800500 ms after the epoch (date -d ... +%s%3N).
        let noon = 1_714_564_800_500;
        assert_eq!(
            parse(Some("2024-05-01 12:00:00.5"), Timestamp),
            Ok(Value::Millis(noon))
        );
        assert_eq!(
            parse(Some("2024-05-01 14:00:00.5+02"), Timestamp),
            Ok(Value::Millis(noon))
        );
        assert_eq!(
            parse(Some("2024-05-01 17:30:00.5+05:30"), Timestamp),
            Ok(Value::Millis(noon))
        );
        assert_eq!(
            parse(Some("2024-05-01"), Timestamp),
            Ok(Value::Millis(noon - 43_200_500))
        );
        assert!(parse(Some("infinity"), Timestamp).is_err());
        assert!(parse(Some("0044-03-15 00:00:00 BC"), Timestamp).is_err());
    }

    #[test]
    fn types_readable_as_each_declared_type() {
        assert!(readable_as("int4", ScalarType::Int));
        assert!(readable_as("numeric", ScalarType::Float));
        assert!(readable_as("point", ScalarType::String));
        assert!(!readable_as("text", ScalarType::Int));
        assert!(!readable_as("point", ScalarType::Timestamp));
        assert!(readable_as("timestamptz", ScalarType::Timestamp));
    }
}
