//! Keys given as text (`42`, `alice`, `["alice", 3]`) ↔ the bytes and key group the
//! operator stores them under, encoded and hashed exactly as the `key-by` exchange does.

use std::sync::Arc;

use arrow_array::{
    ArrayRef, BooleanArray, Float64Array, Int64Array, StringArray, TimestampMillisecondArray,
};
use arrow_row::{RowConverter, SortField};
use arrow_schema::{DataType, TimeUnit};
use weir_state::key_groups::key_group_for_hash;

use super::render::scalar_json;
use crate::keys::{KeySelector, hash_columns};
use crate::operators::accumulators::Scalar;

/// Key text ↔ the bytes and key group the operator stores a key under.
#[derive(Debug)]
pub(super) struct KeyCodec {
    pub(super) names: Vec<String>,
    types: Vec<DataType>,
    key_groups: u32,
}

impl KeyCodec {
    pub(super) fn new(keys: &KeySelector) -> Self {
        Self {
            names: keys.names().to_vec(),
            types: keys.exprs().iter().map(|e| e.data_type().clone()).collect(),
            key_groups: keys.key_groups(),
        }
    }

    pub(super) fn converter(&self) -> Result<RowConverter, String> {
        RowConverter::new(
            self.types
                .iter()
                .map(|t| SortField::new(t.clone()))
                .collect(),
        )
        .map_err(|e| e.to_string())
    }

    /// The key group and stored bytes of a key given as text.
    pub(super) fn encode(&self, text: &str) -> Result<(u32, Vec<u8>), String> {
        let parts: Vec<serde_json::Value> = if self.types.len() == 1 {
            vec![serde_json::Value::String(text.to_string())]
        } else {
            match serde_json::from_str::<Vec<serde_json::Value>>(text) {
                Ok(v) if v.len() == self.types.len() => v,
                _ => {
                    return Err(format!(
                        "the key has {} columns ({}): give them as a JSON array, e.g. [\"a\", 1]",
                        self.types.len(),
                        self.names.join(", ")
                    ));
                }
            }
        };
        let columns = parts
            .iter()
            .zip(self.types.iter().zip(&self.names))
            .map(|(v, (t, name))| key_column(v, t).map_err(|e| format!("key column `{name}`: {e}")))
            .collect::<Result<Vec<ArrayRef>, String>>()?;
        let mut hashes = Vec::new();
        hash_columns(&columns, 1, &mut hashes).map_err(|e| e.to_string())?;
        let group = key_group_for_hash(hashes[0], self.key_groups);
        let rows = self
            .converter()?
            .convert_columns(&columns)
            .map_err(|e| e.to_string())?;
        Ok((group, rows.row(0).data().to_vec()))
    }

    /// A stored key as a JSON object of its columns.
    pub(super) fn decode(&self, bytes: &[u8]) -> Result<serde_json::Value, String> {
        let converter = self.converter()?;
        let parser = converter.parser();
        let row = parser.parse(bytes);
        let columns = converter.convert_rows([row]).map_err(|e| e.to_string())?;
        Ok(serde_json::Value::Object(
            self.names
                .iter()
                .zip(&columns)
                .map(|(n, c)| (n.clone(), scalar_json(&Scalar::at(c.as_ref(), 0))))
                .collect(),
        ))
    }

    /// The first key column as text, for prefix scans.
    pub(super) fn first_text(&self, bytes: &[u8]) -> Option<String> {
        match self.decode(bytes).ok()? {
            serde_json::Value::Object(m) => match m.get(self.names.first()?)? {
                serde_json::Value::String(s) => Some(s.clone()),
                serde_json::Value::Null => None,
                other => Some(other.to_string()),
            },
            _ => None,
        }
    }
}

/// A one-row array of a key column's type holding `v`.
fn key_column(v: &serde_json::Value, t: &DataType) -> Result<ArrayRef, String> {
    let text = match v {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let int = || {
        text.trim()
            .parse::<i64>()
            .map_err(|_| format!("`{text}` is not an integer"))
    };
    Ok(match t {
        DataType::Int64 => Arc::new(Int64Array::from(vec![int()?])),
        DataType::Timestamp(TimeUnit::Millisecond, tz) => {
            Arc::new(TimestampMillisecondArray::from(vec![int()?]).with_timezone_opt(tz.clone()))
        }
        DataType::Float64 => Arc::new(Float64Array::from(vec![
            text.trim()
                .parse::<f64>()
                .map_err(|_| format!("`{text}` is not a number"))?,
        ])),
        DataType::Boolean => Arc::new(BooleanArray::from(vec![
            text.trim()
                .parse::<bool>()
                .map_err(|_| format!("`{text}` is not true or false"))?,
        ])),
        DataType::Utf8 => Arc::new(StringArray::from(vec![text])),
        other => return Err(format!("keys of type {other} cannot be looked up")),
    })
}
