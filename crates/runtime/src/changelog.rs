//! Changelog streams: rows that are inserted, updated and deleted, not only appended.
//!
//! An append-only stream (every source today, and every operator over append-only inputs
//! except the running aggregate) is what it always was: its batches have no extra column and
//! nothing per row is checked. An **updating** stream carries one more column, last in its
//! schema, [`OP`], holding each row's [`RowKind`] (Flink's `RowKind`: `+I`, `-U`, `+U`, `-D`),
//! and its schema's metadata says which kinds occur and which columns, if any, are its upsert
//! key ([`ChangelogMode`]). Because the kind is a column, it travels wherever rows travel:
//! through chained operators, exchanges and input gates, into sinks and the dashboard's tail;
//! barriers and watermarks are unchanged.
//!
//! weir's updating streams are *retract* streams: an update is a `-U` of the old row followed
//! by a `+U` of the new one, so that every consumer can take the old row back without keeping
//! it (a filter, an aggregate of an aggregate). A stream whose rows have an upsert key and
//! that never deletes can be written by a sink that only appends: the `+I`/`+U` rows, read as
//! "the latest line per key", are the table ([`SinkChanges::AfterImages`]).
//!
//! The planner derives each node's mode from its inputs' schemas ([`ChangelogMode::of`]);
//! `weir explain` prints it; operators that need append-only inputs (windows, interval and
//! window joins, top-n, over-aggregates) refuse an updating one at validate time.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::{Array, Int8Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef};

/// The name of the row-kind column of an updating stream (always its last column).
pub const OP: &str = "__op";

/// The schema metadata key naming the kinds an updating stream holds (`I,UB,UA,D`).
const KINDS_KEY: &str = "weir.changelog.kinds";
/// The schema metadata key naming an updating stream's upsert key columns (comma separated,
/// absent when it has none).
const KEY_KEY: &str = "weir.changelog.key";
/// The schema metadata key that marks an upsert stream (`true`): new versions without their
/// old ones and deletes that carry only the key, as a source of `upsert-json` reads them. Only
/// the changelog normaliser reads such a stream; the planner puts one right after the source.
const UPSERT_KEY: &str = "weir.changelog.upsert";

/// What a row of an updating stream does to the table the stream describes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(i8)]
pub enum RowKind {
    /// A new row.
    Insert = 0,
    /// The old version of an updated row, taken back (always followed by its `UpdateAfter`).
    UpdateBefore = 1,
    /// The new version of an updated row.
    UpdateAfter = 2,
    /// A row taken back for good.
    Delete = 3,
}

impl RowKind {
    pub const ALL: [RowKind; 4] = [
        RowKind::Insert,
        RowKind::UpdateBefore,
        RowKind::UpdateAfter,
        RowKind::Delete,
    ];

    /// Flink's short form, as its print sink and `changelog-json` write it.
    pub fn short(self) -> &'static str {
        match self {
            RowKind::Insert => "+I",
            RowKind::UpdateBefore => "-U",
            RowKind::UpdateAfter => "+U",
            RowKind::Delete => "-D",
        }
    }

    /// The kind a short form names.
    pub fn from_short(s: &str) -> Option<RowKind> {
        RowKind::ALL.into_iter().find(|k| k.short() == s)
    }

    /// The kind stored as `code` in the [`OP`] column.
    pub fn from_code(code: i8) -> Option<RowKind> {
        RowKind::ALL.get(usize::try_from(code).ok()?).copied()
    }

    /// Whether the row is added to the table (`+I`, `+U`) rather than taken from it.
    pub fn is_addition(self) -> bool {
        matches!(self, RowKind::Insert | RowKind::UpdateAfter)
    }

    fn tag(self) -> &'static str {
        match self {
            RowKind::Insert => "I",
            RowKind::UpdateBefore => "UB",
            RowKind::UpdateAfter => "UA",
            RowKind::Delete => "D",
        }
    }
}

/// Which kinds of rows a stream holds and, for an updating stream, its upsert key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChangelogMode {
    kinds: [bool; 4],
    /// Columns that identify a row of the table the stream describes (at most one live row
    /// per key), when there are such columns.
    key: Option<Vec<String>>,
    /// An upsert stream (see [`ChangelogMode::upsert`]) rather than a retract stream.
    upsert: bool,
}

impl ChangelogMode {
    /// Inserts only.
    pub fn append() -> Self {
        ChangelogMode {
            kinds: [true, false, false, false],
            key: None,
            upsert: false,
        }
    }

    /// An upsert stream keyed by `key`: `+U` rows are the key's new row without the old one,
    /// `-D` rows carry only the key's columns (the others null). Operators cannot take such a
    /// stream; the changelog normaliser ([`crate::operators::normalize`]) turns it into a
    /// retract stream by keeping each key's last row.
    pub fn upsert(key: Vec<String>) -> Self {
        ChangelogMode {
            kinds: [false, false, true, true],
            key: Some(key),
            upsert: true,
        }
    }

    /// Whether this is an upsert stream, which only the normaliser reads.
    pub fn is_upsert(&self) -> bool {
        self.upsert
    }

    /// A retract stream of `kinds` (inserts are always possible), keyed by `key` if given.
    pub fn updating(kinds: &[RowKind], key: Option<Vec<String>>) -> Self {
        let mut mode = ChangelogMode {
            kinds: [true, false, false, false],
            key,
            upsert: false,
        };
        for k in kinds {
            mode.kinds[*k as usize] = true;
        }
        mode
    }

    /// The mode of a stream whose schema is `schema`.
    pub fn of(schema: &Schema) -> Self {
        if op_column(schema).is_none() {
            return ChangelogMode::append();
        }
        let meta = schema.metadata();
        let kinds: Vec<RowKind> = match meta.get(KINDS_KEY) {
            Some(list) => list
                .split(',')
                .filter_map(|t| RowKind::ALL.into_iter().find(|k| k.tag() == t))
                .collect(),
            // An op column the planner did not describe: assume anything.
            None => RowKind::ALL.to_vec(),
        };
        let key: Option<Vec<String>> = meta
            .get(KEY_KEY)
            .map(|k| k.split(',').map(str::to_owned).collect());
        if meta.get(UPSERT_KEY).is_some_and(|v| v == "true") {
            return ChangelogMode::upsert(key.unwrap_or_default());
        }
        ChangelogMode::updating(&kinds, key)
    }

    /// Whether every row is an insert.
    pub fn is_append(&self) -> bool {
        self.kinds == [true, false, false, false]
    }

    /// Whether rows of `kind` may occur.
    pub fn has(&self, kind: RowKind) -> bool {
        self.kinds[kind as usize]
    }

    /// The upsert key's columns, if the stream has one.
    pub fn key(&self) -> Option<&[String]> {
        self.key.as_deref()
    }

    /// The same stream with another upsert key (or none).
    pub fn with_key(mut self, key: Option<Vec<String>>) -> Self {
        self.key = key;
        self
    }

    /// `schema` (whose fields are the stream's data columns, without [`OP`]) made the schema
    /// of a stream of this mode: for an updating stream, the [`OP`] column is appended and the
    /// mode written into the metadata.
    pub fn apply(&self, schema: &Schema) -> SchemaRef {
        let mut fields: Vec<Arc<Field>> = schema
            .fields()
            .iter()
            .filter(|f| f.name() != OP)
            .cloned()
            .collect();
        let mut metadata: HashMap<String, String> = schema
            .metadata()
            .iter()
            .filter(|(k, _)| ![KINDS_KEY, KEY_KEY, UPSERT_KEY].contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if !self.is_append() {
            fields.push(Arc::new(Field::new(OP, DataType::Int8, false)));
            let kinds: Vec<&str> = RowKind::ALL
                .into_iter()
                .filter(|k| self.has(*k))
                .map(RowKind::tag)
                .collect();
            metadata.insert(KINDS_KEY.into(), kinds.join(","));
            if let Some(key) = &self.key {
                metadata.insert(KEY_KEY.into(), key.join(","));
            }
            if self.upsert {
                metadata.insert(UPSERT_KEY.into(), "true".into());
            }
        }
        Arc::new(Schema::new_with_metadata(fields, metadata))
    }

    /// How `weir explain` and the dashboard name the mode: `append`, or `updating (+I -U +U
    /// -D), key [category]`.
    pub fn describe(&self) -> String {
        if self.is_append() {
            return "append".into();
        }
        let kinds: Vec<&str> = RowKind::ALL
            .into_iter()
            .filter(|k| self.has(*k))
            .map(RowKind::short)
            .collect();
        let name = if self.upsert { "upsert" } else { "updating" };
        match &self.key {
            Some(key) => format!("{name} ({}), key [{}]", kinds.join(" "), key.join(", ")),
            None => format!("{name} ({})", kinds.join(" ")),
        }
    }
}

/// The index of the [`OP`] column of `schema`, if the stream is updating.
pub fn op_column(schema: &Schema) -> Option<usize> {
    let n = schema.fields().len();
    (n > 0 && schema.field(n - 1).name() == OP).then(|| n - 1)
}

/// The row kinds of `batch`, if its stream is updating.
pub fn kinds(batch: &RecordBatch) -> Option<&Int8Array> {
    let i = op_column(batch.schema_ref())?;
    batch.column(i).as_any().downcast_ref::<Int8Array>()
}

/// The kind of row `row` of an [`OP`] column (an unknown code reads as an insert: the planner
/// writes only the four codes).
pub fn kind_at(ops: &Int8Array, row: usize) -> RowKind {
    RowKind::from_code(ops.value(row)).unwrap_or(RowKind::Insert)
}

/// An [`OP`] column of `kinds`.
pub fn op_array(kinds: impl IntoIterator<Item = RowKind>) -> Arc<dyn Array> {
    Arc::new(Int8Array::from_iter_values(
        kinds.into_iter().map(|k| k as i8),
    ))
}

/// The rows of `batch` that are new versions (`+I`, `+U`), without the [`OP`] column: what a
/// sink that only appends writes of a keyed stream that never deletes. An append-only batch
/// is returned as it is.
pub fn after_images(batch: RecordBatch) -> Result<RecordBatch, arrow_schema::ArrowError> {
    let Some(i) = op_column(batch.schema_ref()) else {
        return Ok(batch);
    };
    let keep: arrow_array::BooleanArray = match kinds(&batch) {
        Some(ops) => ops
            .values()
            .iter()
            .map(|c| Some(RowKind::from_code(*c).is_none_or(RowKind::is_addition)))
            .collect(),
        None => return Ok(batch),
    };
    let batch = arrow_select::filter::filter_record_batch(&batch, &keep)?;
    let data = ChangelogMode::append().apply(batch.schema_ref());
    let mut columns = batch.columns().to_vec();
    columns.remove(i);
    RecordBatch::try_new_with_options(
        data,
        columns,
        &arrow_array::RecordBatchOptions::new().with_row_count(Some(batch.num_rows())),
    )
}

/// How a sink takes an updating stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SinkChanges {
    /// Every row with its kind (`format: changelog-json`, a keyed table).
    Changelog,
    /// Only the rows' new versions, `+I` and `+U`, without the kind: what a sink that only
    /// appends writes of a keyed stream that never deletes.
    AfterImages,
}

/// Whether a sink that applies changes only when `changelog` (its `format: changelog-json`)
/// can take a stream of `mode`; the `Err` is the sentence the planner reports at the sink.
pub fn sink_takes(mode: &ChangelogMode, changelog: bool) -> Result<SinkChanges, String> {
    if changelog || mode.is_append() {
        return Ok(SinkChanges::Changelog);
    }
    if mode.key().is_none() {
        return Err(format!(
            "its input is an updating stream with no key ({}): an append-only format cannot say \
             which earlier row a change replaces; use `format: changelog-json`, which writes each \
             row's kind",
            mode.describe()
        ));
    }
    if mode.has(RowKind::Delete) {
        return Err(format!(
            "its input is an updating stream that deletes rows ({}): an append-only format \
             cannot take a row back; use `format: changelog-json`, which writes each row's kind",
            mode.describe()
        ));
    }
    Ok(SinkChanges::AfterImages)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mode_survives_its_schema_and_append_adds_nothing() {
        let data = Schema::new(vec![Field::new("k", DataType::Int64, true)]);
        let append = ChangelogMode::append().apply(&data);
        assert_eq!(append.fields().len(), 1);
        assert!(ChangelogMode::of(&append).is_append());
        let mode = ChangelogMode::updating(
            &[RowKind::UpdateBefore, RowKind::UpdateAfter],
            Some(vec!["k".into()]),
        );
        let schema = mode.apply(&data);
        assert_eq!(op_column(&schema), Some(1));
        assert_eq!(ChangelogMode::of(&schema), mode);
        assert_eq!(mode.describe(), "updating (+I -U +U), key [k]");
        // Applying again replaces rather than adds.
        let again = ChangelogMode::append().apply(&schema);
        assert_eq!(again.fields().len(), 1);
        assert!(again.metadata().is_empty());
    }

    #[test]
    fn after_images_keep_new_versions_without_their_kinds() {
        let data = Schema::new(vec![Field::new("k", DataType::Int64, true)]);
        let schema = ChangelogMode::updating(&RowKind::ALL, None).apply(&data);
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(arrow_array::Int64Array::from(vec![1, 2, 3, 4])),
                op_array(RowKind::ALL),
            ],
        )
        .unwrap();
        let after = after_images(batch).unwrap();
        assert_eq!(after.num_columns(), 1);
        assert!(ChangelogMode::of(after.schema_ref()).is_append());
        let k = after
            .column(0)
            .as_any()
            .downcast_ref::<arrow_array::Int64Array>()
            .unwrap();
        assert_eq!(k.values().to_vec(), vec![1, 3]);
    }

    #[test]
    fn kinds_read_back_from_their_codes_and_short_forms() {
        for k in RowKind::ALL {
            assert_eq!(RowKind::from_code(k as i8), Some(k));
            assert_eq!(RowKind::from_short(k.short()), Some(k));
        }
        assert_eq!(RowKind::from_code(4), None);
        assert_eq!(RowKind::from_code(-1), None);
        assert_eq!(RowKind::from_short("+X"), None);
    }

    #[test]
    fn append_only_sinks_take_keyed_streams_that_never_delete() {
        let key = Some(vec!["k".to_string()]);
        let upd = [RowKind::UpdateBefore, RowKind::UpdateAfter];
        let keyed = ChangelogMode::updating(&upd, key.clone());
        assert_eq!(sink_takes(&keyed, false), Ok(SinkChanges::AfterImages));
        assert_eq!(sink_takes(&keyed, true), Ok(SinkChanges::Changelog));
        let deletes = ChangelogMode::updating(&RowKind::ALL, key);
        assert!(
            sink_takes(&deletes, false)
                .unwrap_err()
                .contains("changelog-json")
        );
        let unkeyed = ChangelogMode::updating(&upd, None);
        assert!(sink_takes(&unkeyed, false).unwrap_err().contains("no key"));
        assert_eq!(
            sink_takes(&ChangelogMode::append(), false),
            Ok(SinkChanges::Changelog)
        );
    }
}
