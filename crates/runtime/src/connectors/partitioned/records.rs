//! Records of a partitioned log to Arrow batches: the value decoded by the source's format
//! (JSON by the `jsonl` source's decoder, or raw), then the metadata columns the job asked for
//! (a Kafka record's key and offset, a NATS message's subject and stream sequence, ...).
//!
//! Rows are appended in the order records arrive, per output port; the partition of each
//! buffered row is kept beside it, so that a flushed batch tells the source which partition's
//! event time each row advances.

use std::sync::Arc;

use arrow_array::builder::{Int64Builder, StringBuilder, TimestampMillisecondBuilder};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use indexmap::IndexMap;

use crate::format::json::{DecodeError, Decoded, JsonDecoder, JsonLayout};

/// A metadata field a log's records carry (Kafka's `offset`, NATS's `subject`, ...): each
/// connector's enum of them, from its spec.
pub trait MetadataField: Copy + PartialEq {
    /// The column type of the field.
    fn column_type(self) -> MetaType;
}

/// What kind of column a metadata field fills.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetaType {
    Text,
    Int,
    /// Epoch milliseconds, as a TIMESTAMP column.
    Time,
}

impl MetaType {
    pub fn data_type(self) -> DataType {
        match self {
            MetaType::Text => DataType::Utf8,
            MetaType::Int => DataType::Int64,
            MetaType::Time => DataType::Timestamp(TimeUnit::Millisecond, None),
        }
    }
}

/// One metadata value of a record (`None`: null).
#[derive(Debug)]
pub enum MetaValue<'a> {
    Text(Option<&'a str>),
    /// Bytes shown as text (invalid UTF-8 replaced): a Kafka key.
    Bytes(Option<&'a [u8]>),
    Int(Option<i64>),
    Time(Option<i64>),
}

/// How record values are read.
#[derive(Clone, Debug)]
pub enum ValueFormat {
    Json(JsonLayout),
    /// The value as the UTF-8 string column `value`.
    Raw,
}

/// The column `format: raw` puts values in.
pub const RAW_COLUMN: &str = "value";

/// The value format a log source's spec declares: `raw` (the value as one string column), or
/// JSON by `schema` or `variants` (as the `jsonl` source); and a check that no metadata column
/// takes a value column's name.
pub fn value_format<'a>(
    raw: bool,
    schema: &Option<IndexMap<String, crate::format::json::JsonType>>,
    variants: &Option<IndexMap<String, IndexMap<String, crate::format::json::JsonType>>>,
    metadata: impl IntoIterator<Item = &'a String>,
) -> Result<ValueFormat, crate::api::connector::SpecProblem> {
    use crate::api::connector::SpecProblem;
    let format = match raw {
        true if schema.is_some() || variants.is_some() => {
            return Err(SpecProblem::at(
                "format",
                "`format: raw` reads the value as one string column: leave out `schema` and \
                 `variants`",
            ));
        }
        true => ValueFormat::Raw,
        false => ValueFormat::Json(
            crate::connectors::jsonl::layout_of(schema, variants).map_err(SpecProblem::node)?,
        ),
    };
    let value_columns: Vec<String> = match &format {
        ValueFormat::Json(layout) => layout
            .ports()
            .iter()
            .flat_map(|(_, s)| s.fields().iter().map(|f| f.name().clone()))
            .collect(),
        ValueFormat::Raw => vec![RAW_COLUMN.to_owned()],
    };
    if let Some(clash) = metadata.into_iter().find(|c| value_columns.contains(c)) {
        return Err(SpecProblem::at(
            "metadata",
            format!("`{clash}` is already a column of the value: name the metadata column apart"),
        ));
    }
    Ok(format)
}

impl ValueFormat {
    /// The output ports and their schemas, metadata columns included (after the value's).
    pub fn ports<M: MetadataField>(
        &self,
        metadata: &IndexMap<String, M>,
    ) -> Vec<(String, SchemaRef)> {
        let base = match self {
            ValueFormat::Json(layout) => layout.ports(),
            ValueFormat::Raw => vec![(
                String::new(),
                Arc::new(Schema::new(vec![Field::new(
                    RAW_COLUMN,
                    DataType::Utf8,
                    true,
                )])),
            )],
        };
        base.into_iter()
            .map(|(name, schema)| {
                let mut fields: Vec<Field> =
                    schema.fields().iter().map(|f| f.as_ref().clone()).collect();
                for (column, m) in metadata {
                    fields.push(Field::new(column, m.column_type().data_type(), true));
                }
                (name, Arc::new(Schema::new(fields)))
            })
            .collect()
    }
}

/// Why a record was not decoded.
#[derive(Debug)]
pub enum RecordError {
    Decode(DecodeError),
    /// A raw value that is not UTF-8.
    NotUtf8,
    /// A record without a value (a tombstone) where a JSON object was expected.
    NoValue,
}

impl std::fmt::Display for RecordError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RecordError::Decode(e) => write!(f, "{e}"),
            RecordError::NotUtf8 => f.write_str("the value is not UTF-8"),
            RecordError::NoValue => f.write_str("the record has no value (a tombstone)"),
        }
    }
}

enum Values {
    Json(JsonDecoder),
    Raw { values: StringBuilder, rows: usize },
}

enum MetaColumn {
    Str(StringBuilder),
    Int(Int64Builder),
    Time(TimestampMillisecondBuilder),
}

/// Decodes records into batches per port.
pub struct RecordDecoder<M> {
    values: Values,
    ports: Vec<(String, SchemaRef)>,
    want: Vec<bool>,
    metadata: Vec<M>,
    /// Per port: one builder per metadata column.
    meta: Vec<Vec<MetaColumn>>,
    /// Per port: the partition (an index of the caller's) of each buffered row.
    rows: Vec<Vec<usize>>,
    buffered: usize,
}

impl<M: MetadataField> RecordDecoder<M> {
    pub fn new(
        format: &ValueFormat,
        metadata: &IndexMap<String, M>,
        want: &[bool],
        batch_size: usize,
    ) -> Self {
        let ports = format.ports(metadata);
        let want: Vec<bool> = (0..ports.len())
            .map(|i| want.get(i).copied().unwrap_or(false))
            .collect();
        let values = match format {
            ValueFormat::Json(layout) => Values::Json(JsonDecoder::new(layout, &want, batch_size)),
            ValueFormat::Raw => Values::Raw {
                values: StringBuilder::new(),
                rows: 0,
            },
        };
        let metadata: Vec<M> = metadata.values().copied().collect();
        let meta = ports
            .iter()
            .map(|_| {
                metadata
                    .iter()
                    .map(|m| meta_column(m.column_type()))
                    .collect()
            })
            .collect();
        Self {
            values,
            rows: vec![Vec::new(); ports.len()],
            ports,
            want,
            metadata,
            meta,
            buffered: 0,
        }
    }

    /// Builds only the value columns `read` marks (per port, value columns first; see
    /// [`JsonDecoder::reading`]); metadata columns are always built.
    pub fn reading(mut self, read: &[Vec<bool>]) -> Self {
        if let Values::Json(decoder) = self.values {
            self.values = Values::Json(decoder.reading(read));
        }
        self
    }

    /// Whether a column of `field` is wanted (to skip work for fields nobody reads).
    pub fn wants(&self, field: M) -> bool {
        self.metadata.contains(&field)
    }

    /// Rows buffered over all ports since the last flush.
    pub fn buffered(&self) -> usize {
        self.buffered
    }

    /// Decodes one record of the caller's partition `part`, asking `meta` for the value of
    /// each metadata column. `Ok(false)`: nothing was appended (a record of an undeclared
    /// variant or of a port nobody reads).
    pub fn decode<'a>(
        &mut self,
        value: Option<&[u8]>,
        meta: impl Fn(M) -> MetaValue<'a>,
        part: usize,
    ) -> Result<bool, RecordError> {
        let port = match &mut self.values {
            Values::Json(decoder) => {
                let value = value.ok_or(RecordError::NoValue)?;
                match decoder.decode_line(value).map_err(RecordError::Decode)? {
                    Decoded::Row { port } => port,
                    Decoded::Skipped => return Ok(false),
                }
            }
            Values::Raw { values, rows } => {
                if !self.want[0] {
                    return Ok(false);
                }
                match value {
                    Some(v) => values
                        .append_value(std::str::from_utf8(v).map_err(|_| RecordError::NotUtf8)?),
                    None => values.append_null(),
                }
                *rows += 1;
                0
            }
        };
        for (column, m) in self.meta[port].iter_mut().zip(&self.metadata) {
            match (column, meta(*m)) {
                (MetaColumn::Str(b), MetaValue::Text(t)) => b.append_option(t),
                (MetaColumn::Str(b), MetaValue::Bytes(v)) => match v {
                    Some(v) => b.append_value(String::from_utf8_lossy(v)),
                    None => b.append_null(),
                },
                (MetaColumn::Int(b), MetaValue::Int(v)) => b.append_option(v),
                (MetaColumn::Time(b), MetaValue::Time(v) | MetaValue::Int(v)) => b.append_option(v),
                // A connector that answers a field with a value of another type: null.
                (MetaColumn::Str(b), _) => b.append_null(),
                (MetaColumn::Int(b), _) => b.append_null(),
                (MetaColumn::Time(b), _) => b.append_null(),
            }
        }
        self.rows[port].push(part);
        self.buffered += 1;
        Ok(true)
    }

    /// The buffered rows of every port that has any: `(port, batch, partition of each row)`.
    /// Fails only on a bug (columns that do not fit their port's schema).
    pub fn flush(&mut self) -> Result<Vec<(usize, RecordBatch, Vec<usize>)>, String> {
        let decoded: Vec<(usize, Vec<ArrayRef>)> = match &mut self.values {
            Values::Json(decoder) => decoder
                .flush()
                .into_iter()
                .map(|(port, batch)| (port, batch.columns().to_vec()))
                .collect(),
            Values::Raw { values, rows } => {
                if *rows == 0 {
                    Vec::new()
                } else {
                    *rows = 0;
                    vec![(0, vec![Arc::new(values.finish()) as ArrayRef])]
                }
            }
        };
        self.buffered = 0;
        let mut out = Vec::with_capacity(decoded.len());
        for (port, mut columns) in decoded {
            for column in &mut self.meta[port] {
                columns.push(match column {
                    MetaColumn::Str(b) => Arc::new(b.finish()) as ArrayRef,
                    MetaColumn::Int(b) => Arc::new(b.finish()),
                    MetaColumn::Time(b) => Arc::new(b.finish()),
                });
            }
            let parts = std::mem::take(&mut self.rows[port]);
            let batch = RecordBatch::try_new(self.ports[port].1.clone(), columns)
                .map_err(|e| format!("a batch does not fit its port's schema: {e}"))?;
            out.push((port, batch, parts));
        }
        Ok(out)
    }
}

fn meta_column(t: MetaType) -> MetaColumn {
    match t {
        MetaType::Text => MetaColumn::Str(StringBuilder::new()),
        MetaType::Int => MetaColumn::Int(Int64Builder::new()),
        MetaType::Time => MetaColumn::Time(TimestampMillisecondBuilder::new()),
    }
}

/// Headers as a JSON object (`{"name":"value"}`; a value that is not UTF-8 is replaced
/// lossily, a header without a value is `null`; a repeated name keeps its last value).
pub fn headers_json<'a>(headers: impl Iterator<Item = (&'a str, Option<&'a [u8]>)>) -> String {
    let mut map = serde_json::Map::new();
    for (name, value) in headers {
        map.insert(
            name.to_owned(),
            value.map_or(serde_json::Value::Null, |v| {
                serde_json::Value::String(String::from_utf8_lossy(v).into_owned())
            }),
        );
    }
    serde_json::Value::Object(map).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connectors::kafka::RecordMeta;
    use crate::connectors::kafka::spec::KafkaMetadata;
    use arrow_array::{Array, Int64Array, StringArray};

    fn yaml(text: &str) -> serde_json::Value {
        crate::spec::yaml::parse(text).expect("yaml").value
    }

    fn meta<'a>(partition: i32, offset: i64, key: Option<&'a [u8]>) -> RecordMeta<'a> {
        RecordMeta {
            topic: "bids",
            partition,
            offset,
            timestamp: Some(1_000 + offset),
            key,
            headers: Some(headers_json([("h", Some(&b"v"[..]))].into_iter())),
        }
    }

    fn decode(
        d: &mut RecordDecoder<KafkaMetadata>,
        value: Option<&[u8]>,
        record: &RecordMeta<'_>,
        part: usize,
    ) -> Result<bool, RecordError> {
        d.decode(value, |m| record.value(m), part)
    }

    fn ints_of(batch: &arrow_array::RecordBatch, i: usize) -> Vec<i64> {
        batch
            .column(i)
            .as_any()
            .downcast_ref::<Int64Array>()
            .expect("int column")
            .values()
            .to_vec()
    }

    #[test]
    fn json_values_get_their_metadata_columns_row_by_row() {
        let layout: JsonLayout =
            JsonLayout::Single(serde_json::from_value(yaml("{price: int}")).expect("layout"));
        let metadata: IndexMap<String, KafkaMetadata> = serde_json::from_value(yaml(
            "{k: key, p: partition, o: offset, t: timestamp, h: headers, topic: topic}",
        ))
        .expect("metadata");
        let mut d = RecordDecoder::new(&ValueFormat::Json(layout), &metadata, &[true], 8);
        assert!(decode(&mut d, Some(br#"{"price": 5}"#), &meta(2, 7, Some(b"a")), 0).expect("row"));
        assert!(decode(&mut d, Some(br#"{"price": 6}"#), &meta(3, 9, None), 1).expect("row"));
        assert!(matches!(
            decode(&mut d, Some(b"{"), &meta(3, 10, None), 1),
            Err(RecordError::Decode(_))
        ));
        assert!(matches!(
            decode(&mut d, None, &meta(3, 11, None), 1),
            Err(RecordError::NoValue)
        ));
        assert_eq!(d.buffered(), 2);
        let out = d.flush().expect("flush");
        assert_eq!(out.len(), 1);
        let (port, batch, parts) = &out[0];
        assert_eq!((*port, parts.clone()), (0, vec![0, 1]));
        let schema = batch.schema();
        let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(names, ["price", "k", "p", "o", "t", "h", "topic"]);
        let ints = |i: usize| ints_of(batch, i);
        assert_eq!(ints(0), [5, 6]);
        assert_eq!(ints(2), [2, 3]);
        assert_eq!(ints(3), [7, 9]);
        let keys = batch
            .column(1)
            .as_any()
            .downcast_ref::<StringArray>()
            .expect("key column");
        assert_eq!((keys.value(0), keys.is_null(1)), ("a", true));
        let headers = batch
            .column(5)
            .as_any()
            .downcast_ref::<StringArray>()
            .expect("headers column");
        assert_eq!(headers.value(0), r#"{"h":"v"}"#);
        assert_eq!(d.buffered(), 0);

        // Projection pushdown: an unread value column stays null, and a value of the wrong
        // type there is skipped, not refused; the metadata columns are built all the same.
        let layout: JsonLayout = JsonLayout::Single(
            serde_json::from_value(yaml("{price: int, note: string}")).expect("layout"),
        );
        let read = [vec![true, false, false, true, false, false, false, false]];
        let mut d =
            RecordDecoder::new(&ValueFormat::Json(layout), &metadata, &[true], 8).reading(&read);
        let row = br#"{"price": 7, "note": 12}"#;
        assert!(decode(&mut d, Some(row), &meta(2, 7, Some(b"a")), 0).expect("row"));
        let out = d.flush().expect("flush");
        let batch = &out[0].1;
        assert_eq!(batch.num_columns(), 8);
        assert_eq!(ints_of(batch, 0), [7]);
        assert_eq!(batch.column(1).null_count(), 1);
        assert_eq!(ints_of(batch, 3), [2]);
        assert!(d.flush().expect("flush").is_empty());
    }

    #[test]
    fn raw_values_are_strings_and_tombstones_null() {
        let mut d =
            RecordDecoder::<KafkaMetadata>::new(&ValueFormat::Raw, &IndexMap::new(), &[true], 8);
        assert!(decode(&mut d, Some(b"hello"), &meta(0, 0, None), 0).expect("row"));
        assert!(decode(&mut d, None, &meta(0, 1, None), 0).expect("row"));
        assert!(matches!(
            decode(&mut d, Some(&[0xff, 0xfe]), &meta(0, 2, None), 0),
            Err(RecordError::NotUtf8)
        ));
        let out = d.flush().expect("flush");
        let values = out[0]
            .1
            .column(0)
            .as_any()
            .downcast_ref::<StringArray>()
            .expect("value column")
            .clone();
        assert_eq!(
            (values.len(), values.value(0), values.is_null(1)),
            (2, "hello", true)
        );
    }
}
