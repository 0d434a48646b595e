//! Record batches to JSON lines, for sinks.
//!
//! One object per row, keys are the column names in schema order (flat, as they are: a column
//! `user.id` is written as the key `"user.id"`). `Int64` and `Timestamp(Millisecond, _)` are
//! written as integers, `Float64` as the shortest string that reads back to the same value (an
//! integral float keeps its `.0`; NaN and ±∞ become `null`), `Utf8` JSON-escaped, `Boolean` as
//! `true`/`false`, and nulls as `null`.
//!
//! An updating stream's row kind ([`crate::changelog::OP`]) is never written as a column: a
//! plain encoder writes only the rows' new versions (`+I`, `+U`; what a keyed sink that appends
//! keeps), a [`JsonEncoder::changelog`] encoder writes every row with its kind as a last field
//! `"op"` (`"+I"`, `"-U"`, `"+U"`, `"-D"`), as Flink's `changelog-json` does.

use std::sync::Arc;

use arrow_array::{
    Array, BooleanArray, Float64Array, Int64Array, RecordBatch, StringArray,
    TimestampMillisecondArray,
};
use arrow_schema::{DataType, SchemaRef, TimeUnit};

use super::error::EncodeError;
use crate::changelog::{self, RowKind};

/// Appends each row of `batch` to `out` as one JSON object line (ending in `'\n'`).
///
/// Fails, writing nothing, when a column's type has no JSON encoding (see [`EncodeError`]).
/// [`JsonEncoder`] does the same but keeps the escaped keys between batches of one schema.
pub fn encode_batch(batch: &RecordBatch, out: &mut Vec<u8>) -> Result<(), EncodeError> {
    JsonEncoder::default().encode(batch, out)
}

/// Encodes batches as JSON lines, remembering the escaped keys of the last schema seen.
#[derive(Debug, Default)]
pub struct JsonEncoder {
    /// The schema `keys` were made for.
    schema: Option<SchemaRef>,
    /// Per column, `{"name":` for the first and `,"name":` for the others, escaped.
    keys: Vec<Vec<u8>>,
    /// Write each row's kind as a field `"op"` (`format: changelog-json`).
    changelog: bool,
    /// `,"op":` (or `{"op":` when the rows have no other column).
    op_key: Vec<u8>,
}

/// A column, downcast once per batch.
enum Values<'a> {
    Int(&'a Int64Array),
    Timestamp(&'a TimestampMillisecondArray),
    Float(&'a Float64Array),
    String(&'a StringArray),
    Bool(&'a BooleanArray),
    /// An untyped NULL column (e.g. a `NULL` literal): every value is null.
    Null,
}

impl JsonEncoder {
    /// An encoder with no schema remembered yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// An encoder that writes every row with its kind, as a last field `"op"` (`"+I"` for
    /// every row of an append-only stream).
    pub fn changelog() -> Self {
        JsonEncoder {
            changelog: true,
            ..Self::default()
        }
    }

    /// Appends each row of `batch` to `out` as one JSON object line; see [`encode_batch`].
    pub fn encode(&mut self, batch: &RecordBatch, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        let schema = batch.schema();
        let op = changelog::op_column(&schema);
        let kinds = changelog::kinds(batch);
        let data = op.unwrap_or(schema.fields().len());
        let columns = batch.columns()[..data]
            .iter()
            .zip(schema.fields())
            .map(|(array, field)| downcast(array.as_ref(), field.name()))
            .collect::<Result<Vec<_>, _>>()?;
        if !self
            .schema
            .as_ref()
            .is_some_and(|s| Arc::ptr_eq(s, &schema) || **s == *schema)
        {
            self.op_key = if data == 0 {
                b"{\"op\":".to_vec()
            } else {
                b",\"op\":".to_vec()
            };
            self.keys = schema.fields()[..data]
                .iter()
                .enumerate()
                .map(|(i, field)| {
                    let mut key = Vec::with_capacity(field.name().len() + 4);
                    key.push(if i == 0 { b'{' } else { b',' });
                    write_str(&mut key, field.name());
                    key.push(b':');
                    key
                })
                .collect();
            self.schema = Some(schema);
        }

        let rows = batch.num_rows();
        let key_bytes: usize = self.keys.iter().map(Vec::len).sum();
        out.reserve(rows * (key_bytes + 8 * columns.len() + 2));
        let mut ints = itoa::Buffer::new();
        let mut floats = ryu::Buffer::new();
        for row in 0..rows {
            let kind = kinds.map_or(RowKind::Insert, |k| changelog::kind_at(k, row));
            if !self.changelog && !kind.is_addition() {
                continue;
            }
            if columns.is_empty() && !self.changelog {
                out.push(b'{');
            }
            for (key, column) in self.keys.iter().zip(&columns) {
                out.extend_from_slice(key);
                match column {
                    Values::Int(a) if a.is_valid(row) => {
                        out.extend_from_slice(ints.format(a.value(row)).as_bytes());
                    }
                    Values::Timestamp(a) if a.is_valid(row) => {
                        out.extend_from_slice(ints.format(a.value(row)).as_bytes());
                    }
                    Values::Float(a) if a.is_valid(row) && a.value(row).is_finite() => {
                        out.extend_from_slice(floats.format_finite(a.value(row)).as_bytes());
                    }
                    Values::String(a) if a.is_valid(row) => write_str(out, a.value(row)),
                    Values::Bool(a) if a.is_valid(row) => {
                        out.extend_from_slice(if a.value(row) { b"true" } else { b"false" });
                    }
                    _ => out.extend_from_slice(b"null"),
                }
            }
            if self.changelog {
                out.extend_from_slice(&self.op_key);
                out.push(b'"');
                out.extend_from_slice(kind.short().as_bytes());
                out.push(b'"');
            }
            out.extend_from_slice(b"}\n");
        }
        Ok(())
    }
}

fn downcast<'a>(array: &'a dyn Array, name: &str) -> Result<Values<'a>, EncodeError> {
    let any = array.as_any();
    let values = match array.data_type() {
        DataType::Int64 => any.downcast_ref().map(Values::Int),
        DataType::Timestamp(TimeUnit::Millisecond, _) => any.downcast_ref().map(Values::Timestamp),
        DataType::Float64 => any.downcast_ref().map(Values::Float),
        DataType::Utf8 => any.downcast_ref().map(Values::String),
        DataType::Boolean => any.downcast_ref().map(Values::Bool),
        DataType::Null => Some(Values::Null),
        _ => None,
    };
    values.ok_or_else(|| EncodeError::UnsupportedType {
        column: name.to_owned(),
        data_type: array.data_type().clone(),
    })
}

/// What follows a backslash for each byte that must be escaped; 0 for bytes written as they are.
static ESCAPE: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut b = 0;
    while b < 0x20 {
        table[b] = b'u';
        b += 1;
    }
    table[b'\n' as usize] = b'n';
    table[b'\r' as usize] = b'r';
    table[b'\t' as usize] = b't';
    table[0x08] = b'b';
    table[0x0C] = b'f';
    table[b'"' as usize] = b'"';
    table[b'\\' as usize] = b'\\';
    table
};

/// Writes `s` as a quoted JSON string.
#[inline]
fn write_str(out: &mut Vec<u8>, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let bytes = s.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let escape = ESCAPE[usize::from(b)];
        if escape == 0 {
            continue;
        }
        out.extend_from_slice(&bytes[start..i]);
        if escape == b'u' {
            out.extend_from_slice(b"\\u00");
            out.push(HEX[usize::from(b >> 4)]);
            out.push(HEX[usize::from(b & 0xF)]);
        } else {
            out.push(b'\\');
            out.push(escape);
        }
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_quotes_backslashes_and_control_characters() {
        let mut out = Vec::new();
        write_str(&mut out, "a\"b\\c\nd\re\tf\u{1}g\u{8}\u{c}é✓");
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#""a\"b\\c\nd\re\tf\u0001g\b\fé✓""#
        );
    }
}
