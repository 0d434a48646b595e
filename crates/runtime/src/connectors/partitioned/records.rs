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
    /// Change events: rows with their kinds, an updating stream (see [`crate::changelog`]).
    Changes(ChangeFormat),
}

/// How a log's records describe changes to a table.
#[derive(Clone, Debug)]
pub struct ChangeFormat {
    /// The table's columns (one shape: a change event has no variants).
    pub layout: JsonLayout,
    pub envelope: Envelope,
    /// Debezium: the primary key, if declared. Upsert: the columns of the record key.
    pub key: Vec<String>,
}

/// The two shapes of change events weir reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Envelope {
    /// Debezium's `{"before", "after", "op"}` (optionally inside `{"schema", "payload"}`):
    /// `c` and `r` insert `after`, `u` takes `before` back and adds `after`, `d` takes
    /// `before` back. A record without a value (the tombstone Debezium writes after a delete
    /// for log compaction) says nothing and is skipped.
    Debezium,
    /// The value is the key's latest row, a record without a value deletes the key's row
    /// (Flink's `upsert-kafka`). The rows come out as `+U` and key-only `-D`: an upsert
    /// stream, which the planner normalises into a retract stream right after the source.
    Upsert,
}

impl ChangeFormat {
    /// The stream's changelog mode.
    pub fn mode(&self) -> crate::changelog::ChangelogMode {
        use crate::changelog::{ChangelogMode, RowKind};
        let key = (!self.key.is_empty()).then(|| self.key.clone());
        match self.envelope {
            Envelope::Debezium => ChangelogMode::updating(&RowKind::ALL, key),
            Envelope::Upsert => ChangelogMode::upsert(self.key.clone()),
        }
    }
}

/// The column `format: raw` puts values in.
pub const RAW_COLUMN: &str = "value";

/// What a log source's spec says of its records' values: its `format`, `key`, `schema` and
/// `variants`, and whether its records have keys at all (a Kafka record has one, a NATS
/// message not).
pub struct ValueSpec<'a> {
    pub format: crate::connectors::kafka::spec::KafkaFormat,
    pub key: &'a [String],
    pub schema: &'a Option<IndexMap<String, crate::format::json::JsonType>>,
    pub variants: &'a Option<IndexMap<String, IndexMap<String, crate::format::json::JsonType>>>,
    pub keyed_records: bool,
}

/// The value format a log source's spec declares: `raw` (the value as one string column), JSON
/// by `schema` or `variants` (as the `jsonl` source), or change events by `schema`; and a
/// check that no metadata column takes a value column's name.
pub fn value_format<'a>(
    spec: ValueSpec<'_>,
    metadata: impl IntoIterator<Item = &'a String>,
) -> Result<ValueFormat, crate::api::connector::SpecProblem> {
    use crate::api::connector::SpecProblem;
    use crate::connectors::kafka::spec::KafkaFormat;
    let (schema, variants) = (spec.schema, spec.variants);
    let changes = match spec.format {
        KafkaFormat::DebeziumJson => Some(Envelope::Debezium),
        KafkaFormat::UpsertJson => Some(Envelope::Upsert),
        KafkaFormat::Json | KafkaFormat::Raw => None,
    };
    if changes.is_none() && !spec.key.is_empty() {
        return Err(SpecProblem::at(
            "key",
            "`key` names the key columns of `format: upsert-json` or `debezium-json`: leave it \
             out for other formats",
        ));
    }
    let format = match (spec.format, changes) {
        (KafkaFormat::Raw, _) if schema.is_some() || variants.is_some() => {
            return Err(SpecProblem::at(
                "format",
                "`format: raw` reads the value as one string column: leave out `schema` and \
                 `variants`",
            ));
        }
        (KafkaFormat::Raw, _) => ValueFormat::Raw,
        (_, Some(envelope)) => ValueFormat::Changes(change_format(envelope, &spec)?),
        (_, None) => ValueFormat::Json(
            crate::connectors::jsonl::layout_of(schema, variants).map_err(SpecProblem::node)?,
        ),
    };
    let value_columns: Vec<String> = match &format {
        ValueFormat::Json(layout) | ValueFormat::Changes(ChangeFormat { layout, .. }) => layout
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

/// The change format of `envelope` for `spec`: one `schema` (no `variants`), key columns
/// that are columns of it, and for `upsert-json` a key and records that have one.
fn change_format(
    envelope: Envelope,
    spec: &ValueSpec<'_>,
) -> Result<ChangeFormat, crate::api::connector::SpecProblem> {
    use crate::api::connector::SpecProblem;
    let name = match envelope {
        Envelope::Debezium => "debezium-json",
        Envelope::Upsert => "upsert-json",
    };
    if spec.variants.is_some() {
        return Err(SpecProblem::at(
            "variants",
            format!(
                "`format: {name}` describes the rows of one table: declare its columns with \
                 `schema`, not `variants`"
            ),
        ));
    }
    if envelope == Envelope::Upsert && !spec.keyed_records {
        return Err(SpecProblem::at(
            "format",
            "`format: upsert-json` reads each record's key, and a NATS message has none: use \
             `debezium-json`, whose events carry the old row",
        ));
    }
    if envelope == Envelope::Upsert && spec.key.is_empty() {
        return Err(SpecProblem::at(
            "format",
            "`format: upsert-json` needs `key`: the columns the record key holds (a record \
             without a value deletes the row of its key)",
        ));
    }
    let layout =
        crate::connectors::jsonl::layout_of(spec.schema, &None).map_err(SpecProblem::node)?;
    let columns: Vec<String> = layout
        .ports()
        .first()
        .map(|(_, s)| s.fields().iter().map(|f| f.name().clone()).collect())
        .unwrap_or_default();
    for (i, k) in spec.key.iter().enumerate() {
        if !columns.contains(k) {
            return Err(SpecProblem::at(
                &format!("/key/{i}"),
                format!(
                    "the key column `{k}` is not a column of `schema` ({})",
                    columns.join(", ")
                ),
            ));
        }
        if spec.key[..i].contains(k) {
            return Err(SpecProblem::at(
                &format!("/key/{i}"),
                format!("`{k}` is named twice in `key`"),
            ));
        }
    }
    Ok(ChangeFormat {
        layout,
        envelope,
        key: spec.key.to_vec(),
    })
}

impl ValueFormat {
    /// The output ports and their schemas, metadata columns included (after the value's).
    pub fn ports<M: MetadataField>(
        &self,
        metadata: &IndexMap<String, M>,
    ) -> Vec<(String, SchemaRef)> {
        let base = match self {
            ValueFormat::Json(layout) => layout.ports(),
            ValueFormat::Changes(changes) => changes.layout.ports(),
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
                let schema = Schema::new(fields);
                match self {
                    ValueFormat::Changes(changes) => (name, changes.mode().apply(&schema)),
                    _ => (name, Arc::new(schema)),
                }
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
    /// A change event that does not say a change: no `op`, an unknown one, a row missing
    /// that the `op` needs, a tombstone without a key.
    Change(String),
}

impl std::fmt::Display for RecordError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RecordError::Decode(e) => write!(f, "{e}"),
            RecordError::NotUtf8 => f.write_str("the value is not UTF-8"),
            RecordError::NoValue => f.write_str("the record has no value (a tombstone)"),
            RecordError::Change(why) => f.write_str(why),
        }
    }
}

enum Values {
    Json(JsonDecoder),
    Raw {
        values: StringBuilder,
        rows: usize,
    },
    Changes {
        decoder: JsonDecoder,
        envelope: Envelope,
        /// Upsert: how a record key becomes the key columns of a delete.
        key: KeyColumns,
        /// The kind of each buffered row.
        kinds: Vec<crate::changelog::RowKind>,
    },
}

/// How an upsert record's key names its key columns: one column's value as text (a string
/// column's text as it is, another type's as the JSON of its value), or a JSON object of
/// several.
enum KeyColumns {
    None,
    One { name: String, text: bool },
    Object,
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
            ValueFormat::Changes(changes) => Values::Changes {
                decoder: JsonDecoder::new(&changes.layout, &want, batch_size),
                envelope: changes.envelope,
                key: match &changes.key[..] {
                    [] => KeyColumns::None,
                    [one] => KeyColumns::One {
                        name: one.clone(),
                        text: ports
                            .first()
                            .and_then(|(_, s)| s.field_with_name(one).ok())
                            .is_some_and(|f| {
                                matches!(f.data_type(), DataType::Utf8 | DataType::LargeUtf8)
                            }),
                    },
                    _ => KeyColumns::Object,
                },
                kinds: Vec::new(),
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
        self.values = match self.values {
            Values::Json(decoder) => Values::Json(decoder.reading(read)),
            // Every column of a change event is read: the rows are whole rows of a table, which
            // the operators that take changes back compare whole.
            other => other,
        };
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
        self.decode_keyed(value, None, meta, part)
    }

    /// [`Self::decode`] of a record with a key (which `upsert-json` reads).
    pub fn decode_keyed<'a>(
        &mut self,
        value: Option<&[u8]>,
        record_key: Option<&[u8]>,
        meta: impl Fn(M) -> MetaValue<'a>,
        part: usize,
    ) -> Result<bool, RecordError> {
        if let Values::Changes {
            decoder,
            envelope,
            key,
            kinds,
        } = &mut self.values
        {
            let rows = change_rows(*envelope, key, value, record_key)?;
            let mut decoded = 0;
            for (kind, row) in &rows {
                match decoder.decode_value(row) {
                    Ok(Decoded::Row { .. }) => {
                        kinds.push(*kind);
                        decoded += 1;
                    }
                    Ok(Decoded::Skipped) => {}
                    Err(e) => {
                        // An update whose `after` fails leaves no `-U` behind.
                        for _ in 0..decoded {
                            decoder.drop_last(0);
                            kinds.pop();
                        }
                        return Err(RecordError::Decode(e));
                    }
                }
            }
            for _ in 0..decoded {
                self.push_meta(0, &meta, part);
            }
            return Ok(decoded > 0);
        }
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
            // Taken above.
            Values::Changes { .. } => return Ok(false),
        };
        self.push_meta(port, &meta, part);
        Ok(true)
    }

    /// Appends the metadata columns of one row of `port`, of the caller's partition `part`.
    fn push_meta<'a>(&mut self, port: usize, meta: &impl Fn(M) -> MetaValue<'a>, part: usize) {
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
            Values::Changes { decoder, .. } => decoder
                .flush()
                .into_iter()
                .map(|(port, batch)| (port, batch.columns().to_vec()))
                .collect(),
        };
        let ops = match &mut self.values {
            Values::Changes { kinds, .. } => Some(std::mem::take(kinds)),
            _ => None,
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
            if let Some(ops) = &ops {
                columns.push(crate::changelog::op_array(ops.iter().copied()));
            }
            let parts = std::mem::take(&mut self.rows[port]);
            let batch = RecordBatch::try_new(self.ports[port].1.clone(), columns)
                .map_err(|e| format!("a batch does not fit its port's schema: {e}"))?;
            out.push((port, batch, parts));
        }
        Ok(out)
    }
}

/// The rows a change event says, with their kinds: none (a Debezium tombstone), one, or two
/// (an update's old and new rows).
fn change_rows(
    envelope: Envelope,
    key: &KeyColumns,
    value: Option<&[u8]>,
    record_key: Option<&[u8]>,
) -> Result<Vec<(crate::changelog::RowKind, serde_json::Value)>, RecordError> {
    use crate::changelog::RowKind;
    use serde_json::Value;
    let parse = |bytes: &[u8], what: &str| -> Result<Value, RecordError> {
        serde_json::from_slice(bytes).map_err(|e| {
            RecordError::Change(format!(
                "the {what} is not JSON: {e} (at column {})",
                e.column()
            ))
        })
    };
    match envelope {
        Envelope::Debezium => {
            // Debezium follows a delete with a record without a value, for log compaction.
            let Some(value) = value else {
                return Ok(Vec::new());
            };
            let mut event = parse(value, "value")?;
            // With `value.converter.schemas.enable`, the event is inside `payload`.
            if let Value::Object(map) = &mut event
                && !map.contains_key("op")
                && let Some(payload) = map.remove("payload")
            {
                event = payload;
            }
            let Value::Object(mut event) = event else {
                return Err(RecordError::Change(
                    "a Debezium event is a JSON object with `before`, `after` and `op`".into(),
                ));
            };
            let op = match event.get("op") {
                Some(Value::String(op)) => op.clone(),
                Some(other) => {
                    return Err(RecordError::Change(format!(
                        "the Debezium `op` is {other}, not one of \"c\", \"r\", \"u\", \"d\""
                    )));
                }
                None => {
                    return Err(RecordError::Change(
                        "the Debezium event has no `op` (\"c\", \"r\", \"u\" or \"d\")".into(),
                    ));
                }
            };
            let mut row = |field: &str| match event.remove(field) {
                Some(Value::Null) | None => None,
                Some(v) => Some(v),
            };
            let (before, after) = (row("before"), row("after"));
            let missing = |field: &str, why: &str| {
                RecordError::Change(format!("a Debezium `{op}` event without `{field}`{why}"))
            };
            match (op.as_str(), before, after) {
                (_, None, None) => Err(RecordError::Change(format!(
                    "the Debezium `{op}` event has neither `before` nor `after`"
                ))),
                ("c" | "r", _, Some(after)) => Ok(vec![(RowKind::Insert, after)]),
                ("c" | "r", _, None) => Err(missing("after", "")),
                ("u", Some(before), Some(after)) => Ok(vec![
                    (RowKind::UpdateBefore, before),
                    (RowKind::UpdateAfter, after),
                ]),
                ("u", None, _) => Err(missing(
                    "before",
                    ": the old row is needed to take it back (for PostgreSQL, set the table's \
                     REPLICA IDENTITY to FULL)",
                )),
                ("u", _, None) => Err(missing("after", "")),
                ("d", Some(before), _) => Ok(vec![(RowKind::Delete, before)]),
                ("d", None, _) => Err(missing(
                    "before",
                    ": the old row is needed to take it back (for PostgreSQL, set the table's \
                     REPLICA IDENTITY to FULL)",
                )),
                (other, _, _) => Err(RecordError::Change(format!(
                    "the Debezium `op` \"{other}\" is not one weir reads (\"c\", \"r\", \"u\", \
                     \"d\"): a truncate or message event cannot be applied row by row"
                ))),
            }
        }
        Envelope::Upsert => match value {
            Some(value) => Ok(vec![(RowKind::UpdateAfter, parse(value, "value")?)]),
            None => {
                let bytes = record_key.ok_or_else(|| {
                    RecordError::Change(
                        "a record with neither key nor value: an upsert record without a value \
                         deletes the row of its key"
                            .into(),
                    )
                })?;
                let row = match key {
                    KeyColumns::One { name, text: true } => {
                        let text = std::str::from_utf8(bytes).map_err(|_| {
                            RecordError::Change("the record key is not UTF-8".into())
                        })?;
                        let mut map = serde_json::Map::new();
                        map.insert(name.clone(), Value::String(text.to_owned()));
                        Value::Object(map)
                    }
                    KeyColumns::One { name, text: false } => {
                        let mut map = serde_json::Map::new();
                        map.insert(name.clone(), parse(bytes, "record key")?);
                        Value::Object(map)
                    }
                    KeyColumns::Object | KeyColumns::None => match parse(bytes, "record key")? {
                        object @ Value::Object(_) => object,
                        _ => {
                            return Err(RecordError::Change(
                                "the record key is not a JSON object of the key columns".into(),
                            ));
                        }
                    },
                };
                Ok(vec![(RowKind::Delete, row)])
            }
        },
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

    /// A decoder of change events of `{id: int, v: string}` rows, with an `offset` column.
    fn changes(envelope: Envelope, key: &[&str]) -> RecordDecoder<KafkaMetadata> {
        let layout: JsonLayout =
            JsonLayout::Single(serde_json::from_value(yaml("{id: int, v: string}")).expect("l"));
        let metadata: IndexMap<String, KafkaMetadata> =
            serde_json::from_value(yaml("{o: offset}")).expect("metadata");
        let format = ValueFormat::Changes(ChangeFormat {
            layout,
            envelope,
            key: key.iter().map(|k| k.to_string()).collect(),
        });
        RecordDecoder::new(&format, &metadata, &[true], 8)
    }

    /// A decoded change: kind, `id`, `v` and offset.
    type Change = (String, Option<i64>, Option<String>, i64);

    /// The rows decoded so far, and the port's mode.
    fn changed(d: &mut RecordDecoder<KafkaMetadata>) -> (Vec<Change>, String) {
        let out = d.flush().expect("flush");
        let Some((_, batch, _)) = out.first() else {
            return (Vec::new(), String::new());
        };
        let mode = crate::changelog::ChangelogMode::of(batch.schema_ref()).describe();
        let ids = batch
            .column(0)
            .as_any()
            .downcast_ref::<Int64Array>()
            .expect("id");
        let vs = batch
            .column(1)
            .as_any()
            .downcast_ref::<StringArray>()
            .expect("v");
        let offsets = ints_of(batch, 2);
        let ops = crate::changelog::kinds(batch).expect("an op column");
        let rows = (0..batch.num_rows())
            .map(|i| {
                (
                    crate::changelog::kind_at(ops, i).short().to_string(),
                    (!ids.is_null(i)).then(|| ids.value(i)),
                    (!vs.is_null(i)).then(|| vs.value(i).to_string()),
                    offsets[i],
                )
            })
            .collect();
        (rows, mode)
    }

    fn error(
        d: &mut RecordDecoder<KafkaMetadata>,
        value: Option<&[u8]>,
        key: Option<&[u8]>,
    ) -> String {
        let m = meta(0, 99, key);
        match d.decode_keyed(value, key, |f| m.value(f), 0) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("{:?} decoded", value.map(String::from_utf8_lossy)),
        }
    }

    #[test]
    fn debezium_events_become_rows_with_their_kinds() {
        let mut d = changes(Envelope::Debezium, &["id"]);
        let events: [&[u8]; 5] = [
            br#"{"before":null,"after":{"id":1,"v":"a"},"op":"c","ts_ms":1}"#,
            br#"{"before":null,"after":{"id":2,"v":"b","extra":true},"op":"r"}"#,
            br#"{"before":{"id":1,"v":"a"},"after":{"id":1,"v":"A"},"op":"u"}"#,
            br#"{"schema":{},"payload":{"before":{"id":2,"v":"b"},"after":null,"op":"d"}}"#,
            br#"{"before":{"id":1,"v":"A"},"after":null,"op":"d","source":{"table":"t"}}"#,
        ];
        for (i, e) in events.iter().enumerate() {
            assert!(decode(&mut d, Some(e), &meta(0, i as i64, None), 0).expect("event"));
        }
        // The tombstone Debezium writes after a delete says nothing.
        assert!(!decode(&mut d, None, &meta(0, 5, Some(b"1")), 0).expect("tombstone"));
        let (rows, mode) = changed(&mut d);
        let row =
            |k: &str, id: i64, v: &str, o: i64| (k.to_string(), Some(id), Some(v.to_string()), o);
        assert_eq!(
            rows,
            vec![
                row("+I", 1, "a", 0),
                row("+I", 2, "b", 1),
                row("-U", 1, "a", 2),
                row("+U", 1, "A", 2),
                row("-D", 2, "b", 3),
                row("-D", 1, "A", 4),
            ]
        );
        assert_eq!(mode, "updating (+I -U +U -D), key [id]");
    }

    #[test]
    fn a_debezium_event_that_says_no_change_is_refused_by_name() {
        let mut d = changes(Envelope::Debezium, &[]);
        let cases: [(&[u8], &str); 8] = [
            (
                br#"{"before":null,"after":null,"op":"c"}"#,
                "neither `before` nor `after`",
            ),
            (br#"{"after":{"id":1,"v":"a"}}"#, "has no `op`"),
            (
                br#"{"after":{"id":1,"v":"a"},"op":"t"}"#,
                "\"t\" is not one weir reads",
            ),
            (br#"{"after":{"id":1,"v":"a"},"op":7}"#, "`op` is 7"),
            (
                br#"{"before":null,"after":{"id":1,"v":"a"},"op":"u"}"#,
                "REPLICA IDENTITY",
            ),
            (
                br#"{"before":{"id":1,"v":"a"},"op":"c"}"#,
                "`c` event without `after`",
            ),
            (br#"[1,2]"#, "a JSON object with `before`"),
            (br#"{"before":"#, "not JSON"),
        ];
        for (event, says) in cases {
            let e = error(&mut d, Some(event), None);
            assert!(e.contains(says), "{e:?} should say {says:?}");
        }
        // An update whose new row does not decode leaves neither of its rows behind.
        let bad_after = br#"{"before":{"id":1,"v":"a"},"after":{"id":"x","v":"b"},"op":"u"}"#;
        assert!(error(&mut d, Some(bad_after), None).contains("id"));
        assert!(
            decode(
                &mut d,
                Some(br#"{"after":{"id":3,"v":"c"},"op":"c"}"#),
                &meta(0, 7, None),
                0
            )
            .expect("event")
        );
        let (rows, _) = changed(&mut d);
        assert_eq!(
            rows,
            vec![("+I".to_string(), Some(3), Some("c".to_string()), 7)]
        );
    }

    #[test]
    fn upsert_records_are_new_rows_and_tombstones_deletes_of_their_key() {
        let mut d = changes(Envelope::Upsert, &["id"]);
        let m = meta(0, 0, Some(b"1"));
        assert!(
            d.decode_keyed(Some(br#"{"id":1,"v":"a"}"#), Some(b"1"), |f| m.value(f), 0)
                .expect("row")
        );
        let m = meta(0, 1, Some(b"1"));
        assert!(
            d.decode_keyed(None, Some(b"1"), |f| m.value(f), 0)
                .expect("tombstone")
        );
        let (rows, mode) = changed(&mut d);
        assert_eq!(
            rows,
            vec![
                ("+U".to_string(), Some(1), Some("a".to_string()), 0),
                ("-D".to_string(), Some(1), None, 1),
            ]
        );
        assert_eq!(mode, "upsert (+U -D), key [id]");
        assert!(error(&mut d, None, None).contains("neither key nor value"));
        assert!(error(&mut d, None, Some(b"x")).contains("record key is not JSON"));

        // A string key is the key's text; several columns are a JSON object.
        let mut d = changes(Envelope::Upsert, &["v"]);
        let m = meta(0, 2, Some(b"k\"1"));
        assert!(
            d.decode_keyed(None, Some(b"k\"1"), |f| m.value(f), 0)
                .expect("tombstone")
        );
        let (rows, _) = changed(&mut d);
        assert_eq!(
            rows,
            vec![("-D".to_string(), None, Some("k\"1".to_string()), 2)]
        );
        let mut d = changes(Envelope::Upsert, &["id", "v"]);
        let m = meta(0, 3, None);
        assert!(
            d.decode_keyed(None, Some(br#"{"id":4,"v":"d"}"#), |f| m.value(f), 0)
                .expect("t")
        );
        let (rows, _) = changed(&mut d);
        assert_eq!(
            rows,
            vec![("-D".to_string(), Some(4), Some("d".to_string()), 3)]
        );
        assert!(error(&mut d, None, Some(b"4")).contains("not a JSON object"));
    }
}
