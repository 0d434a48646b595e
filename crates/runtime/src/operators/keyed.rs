//! What keyed operators share: encoding record keys for state, and whole rows for buffering.
//!
//! Keys are encoded with Arrow's row format (order-preserving, self-delimiting bytes) and
//! carry the key group of the same hash the exchange routed them by, so every key an operator
//! sees belongs to its subtask's range. Rows that operators keep (join sides, top-n entries,
//! rows waiting for their time) are encoded the same way, and decoded back a batch at a time.

use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch, RecordBatchOptions};
use arrow_row::{RowConverter, Rows, SortField};
use arrow_schema::SchemaRef;
use weir_state::KeyRef;
use weir_state::key_groups::key_group_for_hash;

use crate::api::OperatorError;
use crate::keys::{KeySelector, hash_columns};

/// Encoded keys of one batch.
pub struct EncodedKeys {
    pub rows: Rows,
    pub groups: Vec<u32>,
}

impl EncodedKeys {
    pub fn key(&self, row: usize) -> KeyRef<'_> {
        KeyRef::new(self.groups[row], self.rows.row(row).data())
    }

    pub fn len(&self) -> usize {
        self.groups.len()
    }

    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }
}

/// Turns key columns into state keys and back.
pub struct KeyEncoder {
    selector: Arc<KeySelector>,
    converter: RowConverter,
    hashes: Vec<u64>,
}

impl KeyEncoder {
    pub fn new(selector: Arc<KeySelector>) -> Result<Self, OperatorError> {
        let fields = selector
            .exprs()
            .iter()
            .map(|e| SortField::new(e.data_type().clone()))
            .collect();
        Ok(Self {
            converter: RowConverter::new(fields)?,
            selector,
            hashes: Vec::new(),
        })
    }

    pub fn selector(&self) -> &KeySelector {
        &self.selector
    }

    /// The keys of every row of `batch`.
    pub fn encode(&mut self, batch: &RecordBatch) -> Result<EncodedKeys, OperatorError> {
        let columns = self.selector.evaluate(batch)?;
        hash_columns(&columns, batch.num_rows(), &mut self.hashes)?;
        let key_groups = self.selector.key_groups();
        let groups = self
            .hashes
            .iter()
            .map(|h| key_group_for_hash(*h, key_groups))
            .collect();
        Ok(EncodedKeys {
            rows: self.converter.convert_columns(&columns)?,
            groups,
        })
    }

    /// Key columns for encoded keys (as stored in state or timers), in order.
    pub fn decode<'a>(
        &self,
        keys: impl IntoIterator<Item = &'a [u8]>,
    ) -> Result<Vec<ArrayRef>, OperatorError> {
        let parser = self.converter.parser();
        let rows: Vec<_> = keys.into_iter().map(|k| parser.parse(k)).collect();
        Ok(self.converter.convert_rows(rows)?)
    }

    /// An encoded key as its columns' values (`7, EUR`), for messages.
    pub fn describe(&self, key: &[u8]) -> String {
        match self.decode(std::iter::once(key)) {
            Ok(columns) => columns
                .iter()
                .map(|c| arrow_cast::display::array_value_to_string(c, 0).unwrap_or_default())
                .collect::<Vec<_>>()
                .join(", "),
            Err(_) => "(undecodable)".into(),
        }
    }
}

/// Encodes whole rows of one schema to bytes and back.
pub struct RowCodec {
    schema: SchemaRef,
    converter: RowConverter,
}

impl RowCodec {
    pub fn new(schema: SchemaRef) -> Result<Self, OperatorError> {
        let fields = schema
            .fields()
            .iter()
            .map(|f| SortField::new(f.data_type().clone()))
            .collect();
        Ok(Self {
            converter: RowConverter::new(fields)?,
            schema,
        })
    }

    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    pub fn encode(&self, batch: &RecordBatch) -> Result<Rows, OperatorError> {
        Ok(self.converter.convert_columns(batch.columns())?)
    }

    /// A batch of the given encoded rows, in order.
    pub fn decode<'a>(
        &self,
        rows: impl IntoIterator<Item = &'a [u8]>,
    ) -> Result<RecordBatch, OperatorError> {
        let parser = self.converter.parser();
        let parsed: Vec<_> = rows.into_iter().map(|r| parser.parse(r)).collect();
        let n = parsed.len();
        let columns = self.converter.convert_rows(parsed)?;
        let options = RecordBatchOptions::new().with_row_count(Some(n));
        Ok(RecordBatch::try_new_with_options(
            self.schema.clone(),
            columns,
            &options,
        )?)
    }
}

/// Sort keys: the order-by columns of rows as memcomparable bytes (byte order = row order,
/// descending columns inverted, NULLs last).
pub struct SortKeyEncoder {
    exprs: Vec<crate::expr::Expr>,
    converter: RowConverter,
}

impl SortKeyEncoder {
    /// `order` pairs an expression with `true` for descending.
    pub fn new(order: Vec<(crate::expr::Expr, bool)>) -> Result<Self, OperatorError> {
        let fields = order
            .iter()
            .map(|(e, desc)| {
                SortField::new_with_options(
                    e.data_type().clone(),
                    arrow_schema::SortOptions {
                        descending: *desc,
                        nulls_first: false,
                    },
                )
            })
            .collect();
        Ok(Self {
            converter: RowConverter::new(fields)?,
            exprs: order.into_iter().map(|(e, _)| e).collect(),
        })
    }

    pub fn encode(&self, batch: &RecordBatch) -> Result<Rows, OperatorError> {
        let columns = self
            .exprs
            .iter()
            .map(|e| e.evaluate(batch).map_err(OperatorError::from))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(self.converter.convert_columns(&columns)?)
    }
}
