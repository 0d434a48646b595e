//! Rows of a record batch as CSV for `COPY ... FROM STDIN (FORMAT csv)`.
//!
//! CSV rather than PostgreSQL's binary format: the server parses each value with the target
//! column's own input function, so an `Int` column can land in `integer`, `bigint` or `numeric`
//! alike, and a value that does not fit is reported by the server naming the column. NULL is
//! an unquoted empty field; strings are always quoted, so an empty string stays empty.

use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int64Type, TimestampMillisecondType};
use arrow_array::{Array, BooleanArray, PrimitiveArray, RecordBatch, StringArray};
use arrow_schema::{DataType, Schema, TimeUnit};

/// The PostgreSQL type a column of `data_type` is created with (`create-table: true`), or
/// `None` when the sink cannot write it.
pub fn sql_type(data_type: &DataType) -> Option<&'static str> {
    Some(match data_type {
        DataType::Int64 => "bigint",
        DataType::Float64 => "double precision",
        DataType::Utf8 => "text",
        DataType::Boolean => "boolean",
        DataType::Timestamp(TimeUnit::Millisecond, None) => "timestamp(3)",
        DataType::Null => "text",
        _ => return None,
    })
}

/// The first column of `schema` the sink cannot write, with its type.
pub fn unsupported_column(schema: &Schema) -> Option<(&str, &DataType)> {
    schema
        .fields()
        .iter()
        .find(|f| sql_type(f.data_type()).is_none())
        .map(|f| (f.name().as_str(), f.data_type()))
}

/// Appends every row of `batch` to `out`, each followed by `suffix` fields (already encoded,
/// each starting with a comma) and a newline.
pub fn encode_csv(batch: &RecordBatch, suffix: &str, out: &mut Vec<u8>) -> Result<(), String> {
    // Each column's type is resolved once per batch, not once per value.
    let columns = batch
        .columns()
        .iter()
        .map(|a| Column::of(a.as_ref()))
        .collect::<Result<Vec<_>, _>>()?;
    for row in 0..batch.num_rows() {
        for (c, column) in columns.iter().enumerate() {
            if c > 0 {
                out.push(b',');
            }
            column.encode(row, out)?;
        }
        out.extend_from_slice(suffix.as_bytes());
        out.push(b'\n');
    }
    Ok(())
}

/// A column, downcast to its concrete array.
enum Column<'a> {
    Int(&'a PrimitiveArray<Int64Type>),
    Float(&'a PrimitiveArray<Float64Type>),
    Str(&'a StringArray),
    Bool(&'a BooleanArray),
    Timestamp(&'a PrimitiveArray<TimestampMillisecondType>),
    Null,
}

impl<'a> Column<'a> {
    fn of(array: &'a dyn Array) -> Result<Self, String> {
        Ok(match array.data_type() {
            DataType::Int64 => Self::Int(array.as_primitive()),
            DataType::Float64 => Self::Float(array.as_primitive()),
            DataType::Utf8 => Self::Str(array.as_string::<i32>()),
            DataType::Boolean => Self::Bool(array.as_boolean()),
            DataType::Timestamp(TimeUnit::Millisecond, None) => {
                Self::Timestamp(array.as_primitive())
            }
            DataType::Null => Self::Null,
            other => {
                return Err(format!(
                    "cannot write a column of type {other} to PostgreSQL"
                ));
            }
        })
    }

    fn encode(&self, row: usize, out: &mut Vec<u8>) -> Result<(), String> {
        let valid = match self {
            Self::Int(a) => a.is_valid(row),
            Self::Float(a) => a.is_valid(row),
            Self::Str(a) => a.is_valid(row),
            Self::Bool(a) => a.is_valid(row),
            Self::Timestamp(a) => a.is_valid(row),
            Self::Null => false,
        };
        if !valid {
            return Ok(());
        }
        match self {
            Self::Int(a) => {
                out.extend_from_slice(itoa::Buffer::new().format(a.value(row)).as_bytes())
            }
            Self::Float(a) => {
                let v = a.value(row);
                if v.is_nan() {
                    out.extend_from_slice(b"NaN");
                } else if v.is_infinite() {
                    out.extend_from_slice(if v > 0.0 { b"Infinity" } else { b"-Infinity" });
                } else {
                    out.extend_from_slice(ryu::Buffer::new().format_finite(v).as_bytes());
                }
            }
            Self::Str(a) => quote(a.value(row), out),
            Self::Bool(a) => out.extend_from_slice(if a.value(row) { b"t" } else { b"f" }),
            Self::Timestamp(a) => {
                let ms = a.value(row);
                let t = chrono::DateTime::from_timestamp_millis(ms)
                    .ok_or_else(|| format!("timestamp {ms} ms is out of range"))?;
                use std::io::Write;
                write!(out, "{}", t.naive_utc().format("%Y-%m-%d %H:%M:%S%.3f"))
                    .map_err(|e| e.to_string())?;
            }
            Self::Null => {}
        }
        Ok(())
    }
}

/// A CSV field in double quotes, inner quotes doubled.
pub fn quote(s: &str, out: &mut Vec<u8>) {
    out.push(b'"');
    for part in s.split('"').enumerate() {
        if part.0 > 0 {
            out.extend_from_slice(b"\"\"");
        }
        out.extend_from_slice(part.1.as_bytes());
    }
    out.push(b'"');
}

/// `name` as a quoted SQL identifier.
pub fn ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{
        BooleanArray, Float64Array, Int64Array, StringArray, TimestampMillisecondArray,
    };
    use arrow_schema::Field;

    use super::*;

    #[test]
    fn rows_encode_as_postgres_csv() -> Result<(), Box<dyn std::error::Error>> {
        let schema = Arc::new(Schema::new(vec![
            Field::new("i", DataType::Int64, true),
            Field::new("f", DataType::Float64, true),
            Field::new("s", DataType::Utf8, true),
            Field::new("b", DataType::Boolean, true),
            Field::new("t", DataType::Timestamp(TimeUnit::Millisecond, None), true),
        ]));
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(vec![Some(-7), None])),
                Arc::new(Float64Array::from(vec![Some(1.5), Some(f64::NAN)])),
                Arc::new(StringArray::from(vec![Some("a \"q\", b"), Some("")])),
                Arc::new(BooleanArray::from(vec![Some(true), None])),
                Arc::new(TimestampMillisecondArray::from(vec![Some(1_500), None])),
            ],
        )?;
        let mut out = Vec::new();
        encode_csv(&batch, ",\"tag\",3", &mut out)?;
        assert_eq!(
            String::from_utf8(out)?,
            "-7,1.5,\"a \"\"q\"\", b\",t,1970-01-01 00:00:01.500,\"tag\",3\n\
             ,NaN,\"\",,,\"tag\",3\n"
        );
        Ok(())
    }

    #[test]
    fn identifiers_are_quoted() {
        assert_eq!(ident("a\"b"), "\"a\"\"b\"");
    }
}
