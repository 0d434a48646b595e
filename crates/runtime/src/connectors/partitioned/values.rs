//! Rows to record values, in a log sink's `format` (the Kafka and NATS sinks share it).
//!
//! - `json`: each row as an object. The sink reads only new versions of an updating stream
//!   (see [`crate::connectors::AfterImages`]), so every row is written.
//! - `changelog-json`: each row with its kind as a last field `"op"` (`+I`, `-U`, `+U`, `-D`).
//! - `debezium-json`: Flink's `debezium-json` writer: `+I` and `+U` are `{"before":null,
//!   "after":{row},"op":"c"}`, `-U` and `-D` are `{"before":{row},"after":null,"op":"d"}`. An
//!   update is a delete of the old row and a create of the new, which any Debezium reader
//!   (weir's, Flink's) applies to the same table; no `u` event is written, as the two halves of
//!   an update may lie in two batches.
//! - `upsert-json` (Kafka): `+I` and `+U` are the row, `-D` a record without a value (a
//!   tombstone, which log compaction keeps until it removes the key); a `-U` is a tombstone
//!   too, unless the stream's upsert key is the record key, when the `+U` that follows it
//!   replaces the row anyway and the `-U` is not written.

use arrow_array::RecordBatch;

use crate::api::OperatorError;
use crate::changelog::{self, RowKind};
use crate::connectors::kafka::spec::KafkaSinkFormat as LogSinkFormat;
use crate::format::json::JsonEncoder;

/// Encodes rows as record values of one format.
pub struct ValueEncoder {
    format: LogSinkFormat,
    /// `upsert-json`: the input's upsert key is the record key, so `-U` rows are not written.
    skip_before: bool,
    encoder: JsonEncoder,
    buffer: Vec<u8>,
    /// The sink, for messages (`Kafka sink`).
    what: &'static str,
}

impl ValueEncoder {
    pub fn new(format: LogSinkFormat, skip_before: bool, what: &'static str) -> Self {
        let encoder = match format {
            LogSinkFormat::ChangelogJson => JsonEncoder::changelog(),
            _ => JsonEncoder::new(),
        };
        Self {
            format,
            skip_before,
            encoder,
            buffer: Vec::new(),
            what,
        }
    }

    /// The value of each row of `batch` that is written, with the row's index: `None` is a
    /// record without a value (a tombstone).
    pub fn encode(
        &mut self,
        batch: &RecordBatch,
    ) -> Result<Vec<(usize, Option<String>)>, OperatorError> {
        let kinds: Vec<RowKind> = match changelog::kinds(batch) {
            Some(ops) => (0..batch.num_rows())
                .map(|i| changelog::kind_at(ops, i))
                .collect(),
            None => vec![RowKind::Insert; batch.num_rows()],
        };
        match self.format {
            LogSinkFormat::Json => {
                // The plain encoder writes additions only: rows and lines pair up in order.
                let lines = self.lines(batch)?;
                let rows = kinds
                    .iter()
                    .enumerate()
                    .filter(|(_, k)| k.is_addition())
                    .map(|(i, _)| i);
                Ok(rows.zip(lines.into_iter().map(Some)).collect())
            }
            LogSinkFormat::ChangelogJson => Ok(self
                .lines(batch)?
                .into_iter()
                .map(Some)
                .enumerate()
                .collect()),
            LogSinkFormat::DebeziumJson | LogSinkFormat::UpsertJson => {
                // Every row's data columns, without its kind: one line per row.
                let data = match changelog::op_column(batch.schema_ref()) {
                    Some(op) => batch.project(&(0..op).collect::<Vec<_>>())?,
                    None => batch.clone(),
                };
                let lines = self.lines(&data)?;
                let mut out = Vec::with_capacity(lines.len());
                for (i, (line, kind)) in lines.into_iter().zip(kinds).enumerate() {
                    let value = match (self.format, kind) {
                        (LogSinkFormat::DebeziumJson, k) if k.is_addition() => {
                            Some(format!(r#"{{"before":null,"after":{line},"op":"c"}}"#))
                        }
                        (LogSinkFormat::DebeziumJson, _) => {
                            Some(format!(r#"{{"before":{line},"after":null,"op":"d"}}"#))
                        }
                        (_, k) if k.is_addition() => Some(line),
                        (_, RowKind::UpdateBefore) if self.skip_before => continue,
                        _ => None,
                    };
                    out.push((i, value));
                }
                Ok(out)
            }
        }
    }

    /// The lines the encoder writes of `batch`.
    fn lines(&mut self, batch: &RecordBatch) -> Result<Vec<String>, OperatorError> {
        self.buffer.clear();
        self.encoder
            .encode(batch, &mut self.buffer)
            .map_err(|e| OperatorError::Data(format!("{}: {e}", self.what)))?;
        let text = std::str::from_utf8(&self.buffer).map_err(|e| {
            OperatorError::Internal(format!("the JSON encoder wrote non-UTF-8: {e}"))
        })?;
        // JSON escapes line breaks inside strings: every '\n' ends a row.
        Ok(text.lines().map(str::to_owned).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::changelog::{ChangelogMode, op_array};
    use arrow_array::Int64Array;
    use arrow_schema::{DataType, Field, Schema};
    use std::sync::Arc;

    fn batch(kinds: &[RowKind]) -> RecordBatch {
        let data = Schema::new(vec![Field::new("k", DataType::Int64, true)]);
        let schema = ChangelogMode::updating(&RowKind::ALL, None).apply(&data);
        let ks: Vec<i64> = (0..kinds.len() as i64).collect();
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(ks)),
                op_array(kinds.iter().copied()),
            ],
        )
        .expect("batch")
    }

    fn encoded(format: LogSinkFormat, skip: bool) -> Vec<(usize, Option<String>)> {
        ValueEncoder::new(format, skip, "test")
            .encode(&batch(&RowKind::ALL))
            .expect("encode")
    }

    #[test]
    fn each_format_says_each_kind_its_own_way() {
        let v = |s: &str| Some(s.to_string());
        assert_eq!(
            encoded(LogSinkFormat::Json, false),
            vec![(0, v(r#"{"k":0}"#)), (2, v(r#"{"k":2}"#))]
        );
        assert_eq!(
            encoded(LogSinkFormat::ChangelogJson, false),
            vec![
                (0, v(r#"{"k":0,"op":"+I"}"#)),
                (1, v(r#"{"k":1,"op":"-U"}"#)),
                (2, v(r#"{"k":2,"op":"+U"}"#)),
                (3, v(r#"{"k":3,"op":"-D"}"#)),
            ]
        );
        assert_eq!(
            encoded(LogSinkFormat::DebeziumJson, false),
            vec![
                (0, v(r#"{"before":null,"after":{"k":0},"op":"c"}"#)),
                (1, v(r#"{"before":{"k":1},"after":null,"op":"d"}"#)),
                (2, v(r#"{"before":null,"after":{"k":2},"op":"c"}"#)),
                (3, v(r#"{"before":{"k":3},"after":null,"op":"d"}"#)),
            ]
        );
        assert_eq!(
            encoded(LogSinkFormat::UpsertJson, false),
            vec![
                (0, v(r#"{"k":0}"#)),
                (1, None),
                (2, v(r#"{"k":2}"#)),
                (3, None)
            ]
        );
        assert_eq!(
            encoded(LogSinkFormat::UpsertJson, true),
            vec![(0, v(r#"{"k":0}"#)), (2, v(r#"{"k":2}"#)), (3, None)]
        );
    }
}
