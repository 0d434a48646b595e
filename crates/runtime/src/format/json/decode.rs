//! The schema-driven JSON line decoder.
//!
//! A [`JsonDecoder`] compiles the declared layout once into a tree of plans: per object, a
//! `KeyTable` from key to field, and per field either a column index or a nested plan. A line
//! is then parsed by serde_json driving our own `DeserializeSeed`s and `Visitor`s: keys are matched
//! against the table as borrowed `&str` (no allocation), values are written straight into the
//! column builders, and undeclared values are skipped with [`IgnoredAny`]. After the object, every
//! column the line did not set gets a null; if anything fails, the port's columns are truncated
//! back to the previous row count, so a bad line leaves no trace.
//!
//! Lines are first offered to the byte scanner of [`super::scan`], which takes the plain ones
//! and gives every other line (escapes, fractions, mismatches, errors) back to this path, the
//! reference for values and messages.
//!
//! Type-mismatch errors are recorded precisely (field path, expected type, value found) in a
//! slot beside the builders, and serde_json is only told to stop; its own errors become
//! [`DecodeError::InvalidJson`].

use std::fmt;

use arrow_array::{RecordBatch, RecordBatchOptions};
use arrow_schema::SchemaRef;
use indexmap::IndexMap;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::builders::{Bools, Column, Primitive, Strings};
use super::error::DecodeError;
use super::keys::KeyTable;
use super::layout::{JsonLayout, JsonType, ScalarType, join};
use super::scan::scan_line;

/// What [`JsonDecoder::decode_line`] did with a line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decoded {
    /// One row was appended to this port's buffered rows.
    Row {
        /// Index into [`JsonDecoder::ports`].
        port: usize,
    },
    /// Nothing was appended: a blank line, a line of no declared variant, or a line of a port
    /// that is not wanted.
    Skipped,
}

/// Decodes JSON lines of a declared [`JsonLayout`] into Arrow record batches, one per port
/// (see the example of [`crate::format::json`]).
#[derive(Debug)]
pub struct JsonDecoder {
    ports: Vec<(String, SchemaRef)>,
    root: Root,
    /// One per port; unwanted ports have no columns and never get rows.
    builders: Vec<PortBuilder>,
    want: Vec<bool>,
    batch_size: usize,
    /// Where visitors leave the precise error before telling serde_json to stop.
    error: Option<DecodeError>,
    /// Try the byte scanner of [`super::scan`] before serde_json.
    scan: bool,
    /// Lines the scanner decoded (the rest went to serde_json).
    scanned: u64,
}

#[derive(Debug)]
pub(super) struct PortBuilder {
    pub(super) columns: Vec<Column>,
    /// Completed rows; columns may be one value longer while a row is being decoded.
    pub(super) rows: usize,
}

impl PortBuilder {
    fn rollback(&mut self) {
        for column in &mut self.columns {
            column.truncate(self.rows);
        }
    }

    fn finish_row(&mut self) {
        for column in &mut self.columns {
            if column.len() == self.rows {
                column.push_null();
            }
        }
        self.rows += 1;
    }
}

#[derive(Debug)]
pub(super) enum Root {
    Single(ObjectPlan),
    Variants {
        keys: KeyTable,
        /// One per port, in the order of `keys`.
        plans: Vec<ObjectPlan>,
    },
}

/// How to decode the fields of one object.
#[derive(Debug)]
pub(super) struct ObjectPlan {
    /// Dotted path of the object, for messages (`""` at the top of a single layout).
    path: Box<str>,
    pub(super) keys: KeyTable,
    pub(super) fields: Vec<FieldPlan>,
}

#[derive(Debug)]
pub(super) enum FieldPlan {
    Column {
        index: usize,
        path: Box<str>,
    },
    Object(ObjectPlan),
    /// A declared field nothing reads (see [`JsonDecoder::reading`]): skipped like an
    /// undeclared one; its columns stay null.
    Skip,
}

impl ObjectPlan {
    fn compile(
        path: &str,
        fields: &IndexMap<String, JsonType>,
        columns: &mut Vec<ScalarType>,
    ) -> Self {
        let plans = fields
            .iter()
            .map(|(name, ty)| {
                let field_path = join(path, name);
                match ty {
                    JsonType::Scalar(scalar) => {
                        columns.push(*scalar);
                        FieldPlan::Column {
                            index: columns.len() - 1,
                            path: field_path.into(),
                        }
                    }
                    JsonType::Object(nested) => {
                        FieldPlan::Object(ObjectPlan::compile(&field_path, nested, columns))
                    }
                }
            })
            .collect();
        ObjectPlan {
            path: path.into(),
            keys: KeyTable::new(fields.keys().map(String::as_str)),
            fields: plans,
        }
    }

    /// Turns the fields whose columns are all unread into [`FieldPlan::Skip`]; yields whether
    /// any column of the object is read. (Recursion as deep as the declared layout, as in
    /// [`ObjectPlan::compile`].)
    fn skip_unread(&mut self, read: &[bool]) -> bool {
        let mut any = false;
        for field in &mut self.fields {
            let keep = match field {
                FieldPlan::Column { index, .. } => read.get(*index).copied().unwrap_or(true),
                FieldPlan::Object(nested) => nested.skip_unread(read),
                FieldPlan::Skip => false,
            };
            if !keep {
                *field = FieldPlan::Skip;
            }
            any |= keep;
        }
        any
    }
}

impl JsonDecoder {
    /// Compiles `layout`. `want[i]` says whether port `i` (see [`JsonLayout::ports`]) is consumed;
    /// lines of unwanted ports are recognised and skipped without building rows, and missing
    /// entries count as unwanted. `batch_size` is the capacity reserved per column.
    pub fn new(layout: &JsonLayout, want: &[bool], batch_size: usize) -> Self {
        let ports = layout.ports();
        let want: Vec<bool> = (0..ports.len())
            .map(|i| want.get(i).copied().unwrap_or(false))
            .collect();
        let mut types = Vec::new();
        let (root, builders) = match layout {
            JsonLayout::Single(fields) => {
                let plan = ObjectPlan::compile("", fields, &mut types);
                (
                    Root::Single(plan),
                    vec![port_builder(&types, want[0], batch_size)],
                )
            }
            JsonLayout::Variants(variants) => {
                let mut builders = Vec::with_capacity(variants.len());
                let plans = variants
                    .iter()
                    .enumerate()
                    .map(|(port, (name, fields))| {
                        types.clear();
                        let plan = ObjectPlan::compile(name, fields, &mut types);
                        builders.push(port_builder(&types, want[port], batch_size));
                        plan
                    })
                    .collect();
                let keys = KeyTable::new(variants.keys().map(String::as_str));
                (Root::Variants { keys, plans }, builders)
            }
        };
        JsonDecoder {
            ports,
            root,
            builders,
            want,
            batch_size,
            error: None,
            scan: true,
            scanned: 0,
        }
    }

    /// Builds only the columns that are read: `read[port][column]` false makes that column
    /// all null and its values are skipped as if undeclared (a missing entry means read). This
    /// is projection pushdown, as Flink's JSON format does it: a value nothing reads is not
    /// converted, so a value of the wrong type there is no longer an error, while the line must
    /// still be well-formed JSON.
    pub fn reading(mut self, read: &[Vec<bool>]) -> Self {
        let plans: Vec<&mut ObjectPlan> = match &mut self.root {
            Root::Single(plan) => vec![plan],
            Root::Variants { plans, .. } => plans.iter_mut().collect(),
        };
        for ((plan, builder), read) in plans.into_iter().zip(&mut self.builders).zip(read) {
            plan.skip_unread(read);
            for (column, &read) in builder.columns.iter_mut().zip(read) {
                if !read && let Some(ty) = column.scalar_type() {
                    *column = Column::Unread { ty, len: 0 };
                }
            }
        }
        self
    }

    /// Decodes every line with serde_json alone, without the byte scanner that otherwise takes
    /// the lines it can ([`super::scan`]). The rows and errors are the same either way: this is
    /// the reference the scanner is tested and benchmarked against.
    pub fn serde_only(mut self) -> Self {
        self.scan = false;
        self
    }

    /// The output ports, as [`JsonLayout::ports`] lists them.
    pub fn ports(&self) -> &[(String, SchemaRef)] {
        &self.ports
    }

    /// Decodes one line (without its `'\n'`; a trailing `'\r'` is fine, a blank line is skipped)
    /// and appends its row to the port it belongs to. On error nothing is appended.
    pub fn decode_line(&mut self, line: &[u8]) -> Result<Decoded, DecodeError> {
        if line.iter().all(u8::is_ascii_whitespace) {
            return Ok(Decoded::Skipped);
        }
        self.error = None;
        // One validation of the whole line is cheaper than serde_json's per string.
        let text = std::str::from_utf8(line).map_err(|e| DecodeError::InvalidJson {
            column: e.valid_up_to() + 1,
            message: "invalid UTF-8".to_owned(),
        })?;
        if matches!(self.root, Root::Single(_)) && !self.want[0] {
            return Ok(Decoded::Skipped);
        }
        if self.scan {
            match scan_line(&self.root, &mut self.builders, &self.want, text) {
                Some(routed) => {
                    self.scanned += 1;
                    return Ok(self.finish(routed));
                }
                None => {
                    for builder in &mut self.builders {
                        builder.rollback();
                    }
                }
            }
        }
        let mut de = serde_json::Deserializer::from_str(text);
        let routed = match &self.root {
            Root::Single(plan) => {
                let port = &mut self.builders[0];
                let seed = ObjectSeed {
                    plan,
                    columns: &mut port.columns,
                    rows: port.rows,
                    error: &mut self.error,
                    mode: Mode::Top,
                };
                seed.deserialize(&mut de).map(|_| Some(0))
            }
            Root::Variants { keys, plans } => VariantsVisitor {
                keys,
                plans,
                builders: &mut self.builders,
                want: &self.want,
                error: &mut self.error,
            }
            .deserialize(&mut de),
        };
        match routed.and_then(|routed| de.end().map(|()| routed)) {
            Ok(routed) => Ok(self.finish(routed)),
            Err(e) => {
                for builder in &mut self.builders {
                    builder.rollback();
                }
                Err(self.error.take().unwrap_or_else(|| invalid_json(&e)))
            }
        }
    }

    /// Decodes one object already parsed (the `before` or `after` of a change event) into the
    /// single port of a [`JsonLayout::Single`] layout, as [`Self::decode_line`] decodes a line.
    /// A variants layout has no port to route it to: skipped.
    pub fn decode_value(&mut self, value: &serde_json::Value) -> Result<Decoded, DecodeError> {
        self.error = None;
        let Root::Single(plan) = &self.root else {
            return Ok(Decoded::Skipped);
        };
        if !self.want[0] {
            return Ok(Decoded::Skipped);
        }
        let port = &mut self.builders[0];
        let seed = ObjectSeed {
            plan,
            columns: &mut port.columns,
            rows: port.rows,
            error: &mut self.error,
            mode: Mode::Top,
        };
        match seed.deserialize(value) {
            Ok(_) => Ok(self.finish(Some(0))),
            Err(e) => {
                self.builders[0].rollback();
                Err(self.error.take().unwrap_or_else(|| invalid_json(&e)))
            }
        }
    }

    /// Completes the row of the port a line was routed to, if that port is wanted.
    fn finish(&mut self, routed: Option<usize>) -> Decoded {
        match routed {
            Some(port) if self.want[port] => {
                self.builders[port].finish_row();
                Decoded::Row { port }
            }
            _ => Decoded::Skipped,
        }
    }

    /// Lines the byte scanner decoded so far; serde_json decoded (or refused) the others.
    pub fn lines_scanned(&self) -> u64 {
        self.scanned
    }

    /// Takes back the last row decoded into `port` (a change event whose second row failed to
    /// decode must leave neither). Nothing happens when the port has no buffered row.
    pub fn drop_last(&mut self, port: usize) {
        if let Some(builder) = self.builders.get_mut(port)
            && builder.rows > 0
        {
            builder.rows -= 1;
            builder.rollback();
        }
    }

    /// Rows buffered for `port` since the last flush.
    pub fn buffered(&self, port: usize) -> usize {
        self.builders.get(port).map_or(0, |b| b.rows)
    }

    /// Hands over the buffered rows of every port that has any, as `(port, batch)`.
    pub fn flush(&mut self) -> Vec<(usize, RecordBatch)> {
        let mut out = Vec::new();
        for (port, builder) in self.builders.iter_mut().enumerate() {
            if builder.rows == 0 {
                continue;
            }
            let columns = builder
                .columns
                .iter_mut()
                .map(|c| c.finish(self.batch_size))
                .collect();
            let options = RecordBatchOptions::new().with_row_count(Some(builder.rows));
            let batch =
                RecordBatch::try_new_with_options(self.ports[port].1.clone(), columns, &options)
                    .expect("columns are built from the port's schema with one value per row");
            builder.rows = 0;
            out.push((port, batch));
        }
        out
    }
}

fn port_builder(types: &[ScalarType], want: bool, batch_size: usize) -> PortBuilder {
    let columns = if want {
        types.iter().map(|&t| Column::new(t, batch_size)).collect()
    } else {
        Vec::new()
    };
    PortBuilder { columns, rows: 0 }
}

/// serde_json's message without its " at line 1 column N" suffix, and the column.
fn invalid_json(e: &serde_json::Error) -> DecodeError {
    let mut message = e.to_string();
    if let Some(at) = message.rfind(" at line ") {
        message.truncate(at);
    }
    DecodeError::InvalidJson {
        column: e.column(),
        message,
    }
}

/// A value seen where another type was declared, for messages.
enum Found<'a> {
    Int(i64),
    UInt(u64),
    Float(f64),
    Str(&'a str),
    Bool(bool),
    Null,
    Object,
    Array,
}

impl fmt::Display for Found<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        /// Longest string shown in a message, in characters.
        const SHOWN: usize = 40;
        match self {
            Found::Int(v) => write!(f, "integer {v}"),
            Found::UInt(v) => write!(f, "integer {v}"),
            Found::Float(v) => write!(f, "float {v}"),
            Found::Str(s) => match s.char_indices().nth(SHOWN) {
                Some((cut, _)) => write!(f, "string {:?}…", &s[..cut]),
                None => write!(f, "string {s:?}"),
            },
            Found::Bool(v) => write!(f, "bool {v}"),
            Found::Null => f.write_str("null"),
            Found::Object => f.write_str("object"),
            Found::Array => f.write_str("array"),
        }
    }
}

/// Records `error` and returns the error that stops serde_json.
fn fail<E: de::Error>(slot: &mut Option<DecodeError>, error: DecodeError) -> E {
    *slot = Some(error);
    E::custom("stopped by the weir decoder")
}

/// Drains a sequence nobody reads.
fn drain_seq<'de, A: SeqAccess<'de>>(mut seq: A) -> Result<(), A::Error> {
    while seq.next_element::<IgnoredAny>()?.is_some() {}
    Ok(())
}

/// Looks a key up in a [`KeyTable`] without allocating.
#[derive(Clone, Copy)]
struct KeySeed<'p>(&'p KeyTable);

impl<'de> DeserializeSeed<'de> for KeySeed<'_> {
    type Value = Option<usize>;

    #[inline]
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Option<usize>, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeySeed<'_> {
    type Value = Option<usize>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object key")
    }

    #[inline]
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Option<usize>, E> {
        Ok(self.0.get(v.as_bytes()))
    }
}

/// Where an object is decoded, which decides what a non-object value means.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// The whole line: anything but an object is an error.
    Top,
    /// A nested field: `null` leaves its columns null, other values are a type mismatch.
    Nested,
    /// The value of a variant key: anything but an object is not this variant.
    Variant,
}

/// Decodes an object into `columns`; yields whether the value was an object.
struct ObjectSeed<'p, 'b> {
    plan: &'p ObjectPlan,
    columns: &'b mut [Column],
    rows: usize,
    error: &'b mut Option<DecodeError>,
    mode: Mode,
}

impl<'de> DeserializeSeed<'de> for ObjectSeed<'_, '_> {
    type Value = bool;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_any(self)
    }
}

impl ObjectSeed<'_, '_> {
    fn not_object<E: de::Error>(self, found: Found<'_>) -> Result<bool, E> {
        match (self.mode, found) {
            (Mode::Variant, _) | (Mode::Nested, Found::Null) => Ok(false),
            (Mode::Top, found) => Err(fail(
                self.error,
                DecodeError::NotAnObject {
                    found: found.to_string(),
                },
            )),
            (Mode::Nested, found) => Err(fail(
                self.error,
                DecodeError::TypeMismatch {
                    field: self.plan.path.to_string(),
                    expected: "object",
                    found: found.to_string(),
                },
            )),
        }
    }
}

impl<'de> Visitor<'de> for ObjectSeed<'_, '_> {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<bool, A::Error> {
        let ObjectSeed {
            plan,
            columns,
            rows,
            error,
            ..
        } = self;
        while let Some(field) = map.next_key_seed(KeySeed(&plan.keys))? {
            match field.map(|i| &plan.fields[i]) {
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
                Some(FieldPlan::Column { index, path }) => {
                    let column = &mut columns[*index];
                    if column.len() > rows {
                        return Err(fail(
                            error,
                            DecodeError::DuplicateKey {
                                field: path.to_string(),
                            },
                        ));
                    }
                    map.next_value_seed(ColumnSeed {
                        column,
                        path,
                        error: &mut *error,
                    })?;
                }
                Some(FieldPlan::Skip) => {
                    map.next_value::<IgnoredAny>()?;
                }
                Some(FieldPlan::Object(nested)) => {
                    map.next_value_seed(ObjectSeed {
                        plan: nested,
                        columns: &mut *columns,
                        rows,
                        error: &mut *error,
                        mode: Mode::Nested,
                    })?;
                }
            }
        }
        Ok(true)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<bool, A::Error> {
        if self.mode == Mode::Variant {
            drain_seq(seq)?;
        }
        self.not_object(Found::Array)
    }

    fn visit_unit<E: de::Error>(self) -> Result<bool, E> {
        self.not_object(Found::Null)
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<bool, E> {
        self.not_object(Found::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<bool, E> {
        self.not_object(Found::Int(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<bool, E> {
        self.not_object(Found::UInt(v))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<bool, E> {
        self.not_object(Found::Float(v))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<bool, E> {
        self.not_object(Found::Str(v))
    }
}

/// Tells whether a value is an object, skipping it (a declared variant whose port is unwanted).
struct IsObject;

impl<'de> DeserializeSeed<'de> for IsObject {
    type Value = bool;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for IsObject {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<bool, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(true)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<bool, A::Error> {
        drain_seq(seq)?;
        Ok(false)
    }

    fn visit_unit<E: de::Error>(self) -> Result<bool, E> {
        Ok(false)
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<bool, E> {
        Ok(false)
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<bool, E> {
        Ok(false)
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<bool, E> {
        Ok(false)
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<bool, E> {
        Ok(false)
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<bool, E> {
        Ok(false)
    }
}

/// Routes a line of a variants layout; yields the chosen port.
struct VariantsVisitor<'p, 'b> {
    keys: &'p KeyTable,
    plans: &'p [ObjectPlan],
    builders: &'b mut [PortBuilder],
    want: &'p [bool],
    error: &'b mut Option<DecodeError>,
}

impl<'de> DeserializeSeed<'de> for VariantsVisitor<'_, '_> {
    type Value = Option<usize>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Option<usize>, D::Error> {
        d.deserialize_any(self)
    }
}

impl VariantsVisitor<'_, '_> {
    fn not_object<E: de::Error>(self, found: Found<'_>) -> Result<Option<usize>, E> {
        Err(fail(
            self.error,
            DecodeError::NotAnObject {
                found: found.to_string(),
            },
        ))
    }
}

impl<'de> Visitor<'de> for VariantsVisitor<'_, '_> {
    type Value = Option<usize>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<usize>, A::Error> {
        let VariantsVisitor {
            keys,
            plans,
            builders,
            want,
            error,
        } = self;
        let mut chosen: Option<usize> = None;
        while let Some(key) = map.next_key_seed(KeySeed(keys))? {
            // Only a variant declared before the one chosen so far can take the line over.
            match key.filter(|&v| chosen.is_none_or(|c| v < c)) {
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
                Some(variant) => {
                    let is_object = if want[variant] {
                        let builder = &mut builders[variant];
                        map.next_value_seed(ObjectSeed {
                            plan: &plans[variant],
                            columns: &mut builder.columns,
                            rows: builder.rows,
                            error: &mut *error,
                            mode: Mode::Variant,
                        })?
                    } else {
                        map.next_value_seed(IsObject)?
                    };
                    let previous = if is_object {
                        chosen.replace(variant)
                    } else {
                        None
                    };
                    if let Some(previous) = previous {
                        builders[previous].rollback();
                    }
                }
            }
        }
        Ok(chosen)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> Result<Option<usize>, A::Error> {
        self.not_object(Found::Array)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Option<usize>, E> {
        self.not_object(Found::Null)
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Option<usize>, E> {
        self.not_object(Found::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Option<usize>, E> {
        self.not_object(Found::Int(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Option<usize>, E> {
        self.not_object(Found::UInt(v))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Option<usize>, E> {
        self.not_object(Found::Float(v))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Option<usize>, E> {
        self.not_object(Found::Str(v))
    }
}

/// Decodes one scalar value into its column.
struct ColumnSeed<'p, 'b> {
    column: &'b mut Column,
    path: &'p str,
    error: &'b mut Option<DecodeError>,
}

impl<'de> DeserializeSeed<'de> for ColumnSeed<'_, '_> {
    type Value = ();

    #[inline]
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        let ColumnSeed {
            column,
            path,
            error,
        } = self;
        match column {
            Column::Int(c) => d.deserialize_any(ScalarVisitor {
                sink: IntSink(c),
                path,
                error,
            }),
            Column::Float(c) => d.deserialize_any(ScalarVisitor {
                sink: FloatSink(c),
                path,
                error,
            }),
            Column::Timestamp(c) => d.deserialize_any(ScalarVisitor {
                sink: TimestampSink(c),
                path,
                error,
            }),
            Column::String(c) => d.deserialize_any(ScalarVisitor {
                sink: StringSink(c),
                path,
                error,
            }),
            Column::Bool(c) => d.deserialize_any(ScalarVisitor {
                sink: BoolSink(c),
                path,
                error,
            }),
            // Unread columns are skipped by their field plans; were one reached, its value
            // would be skipped too.
            Column::Unread { .. } => d.deserialize_ignored_any(IgnoredAny).map(|_| ()),
        }
    }
}

/// Why a sink refused a value; the visitor adds the field path.
enum Refusal<'a> {
    Mismatch(Found<'a>),
    OutOfRange(Found<'a>),
    BadTimestamp(&'a str),
    TooLarge,
}

/// Appends JSON values of one declared type to a column; by default every value is a mismatch.
trait Sink {
    const EXPECTED: &'static str;

    fn null(&mut self);

    fn int(&mut self, v: i64) -> Result<(), Refusal<'static>> {
        Err(Refusal::Mismatch(Found::Int(v)))
    }

    fn uint(&mut self, v: u64) -> Result<(), Refusal<'static>> {
        Err(Refusal::Mismatch(Found::UInt(v)))
    }

    fn float(&mut self, v: f64) -> Result<(), Refusal<'static>> {
        Err(Refusal::Mismatch(Found::Float(v)))
    }

    fn bool(&mut self, v: bool) -> Result<(), Refusal<'static>> {
        Err(Refusal::Mismatch(Found::Bool(v)))
    }

    fn str<'s>(&mut self, v: &'s str) -> Result<(), Refusal<'s>> {
        Err(Refusal::Mismatch(Found::Str(v)))
    }
}

/// An integral float within range, as an `i64` (`2.0` → 2).
fn integral(v: f64) -> Result<i64, Refusal<'static>> {
    /// 2^63, the first float above `i64::MAX`.
    const LIMIT: f64 = 9_223_372_036_854_775_808.0;
    if v.fract() != 0.0 || v.is_nan() {
        Err(Refusal::Mismatch(Found::Float(v)))
    } else if !(-LIMIT..LIMIT).contains(&v) {
        Err(Refusal::OutOfRange(Found::Float(v)))
    } else {
        Ok(v as i64)
    }
}

fn unsigned(v: u64) -> Result<i64, Refusal<'static>> {
    i64::try_from(v).map_err(|_| Refusal::OutOfRange(Found::UInt(v)))
}

struct IntSink<'b>(&'b mut Primitive<i64>);

impl Sink for IntSink<'_> {
    const EXPECTED: &'static str = "int";

    fn null(&mut self) {
        self.0.push_null();
    }

    #[inline]
    fn int(&mut self, v: i64) -> Result<(), Refusal<'static>> {
        self.0.push(v);
        Ok(())
    }

    #[inline]
    fn uint(&mut self, v: u64) -> Result<(), Refusal<'static>> {
        self.0.push(unsigned(v)?);
        Ok(())
    }

    fn float(&mut self, v: f64) -> Result<(), Refusal<'static>> {
        self.0.push(integral(v)?);
        Ok(())
    }
}

struct TimestampSink<'b>(&'b mut Primitive<i64>);

impl Sink for TimestampSink<'_> {
    const EXPECTED: &'static str = "timestamp";

    fn null(&mut self) {
        self.0.push_null();
    }

    #[inline]
    fn int(&mut self, v: i64) -> Result<(), Refusal<'static>> {
        self.0.push(v);
        Ok(())
    }

    #[inline]
    fn uint(&mut self, v: u64) -> Result<(), Refusal<'static>> {
        self.0.push(unsigned(v)?);
        Ok(())
    }

    fn float(&mut self, v: f64) -> Result<(), Refusal<'static>> {
        self.0.push(integral(v)?);
        Ok(())
    }

    fn str<'s>(&mut self, v: &'s str) -> Result<(), Refusal<'s>> {
        let parsed =
            chrono::DateTime::parse_from_rfc3339(v).map_err(|_| Refusal::BadTimestamp(v))?;
        self.0.push(parsed.timestamp_millis());
        Ok(())
    }
}

struct FloatSink<'b>(&'b mut Primitive<f64>);

impl Sink for FloatSink<'_> {
    const EXPECTED: &'static str = "float";

    fn null(&mut self) {
        self.0.push_null();
    }

    #[inline]
    fn int(&mut self, v: i64) -> Result<(), Refusal<'static>> {
        self.0.push(v as f64);
        Ok(())
    }

    #[inline]
    fn uint(&mut self, v: u64) -> Result<(), Refusal<'static>> {
        self.0.push(v as f64);
        Ok(())
    }

    #[inline]
    fn float(&mut self, v: f64) -> Result<(), Refusal<'static>> {
        self.0.push(v);
        Ok(())
    }
}

struct StringSink<'b>(&'b mut Strings);

impl Sink for StringSink<'_> {
    const EXPECTED: &'static str = "string";

    fn null(&mut self) {
        self.0.push_null();
    }

    #[inline]
    fn str<'s>(&mut self, v: &'s str) -> Result<(), Refusal<'s>> {
        self.0.push(v).map_err(|_| Refusal::TooLarge)
    }
}

struct BoolSink<'b>(&'b mut Bools);

impl Sink for BoolSink<'_> {
    const EXPECTED: &'static str = "bool";

    fn null(&mut self) {
        self.0.push_null();
    }

    #[inline]
    fn bool(&mut self, v: bool) -> Result<(), Refusal<'static>> {
        self.0.push(v);
        Ok(())
    }
}

/// Drives a [`Sink`] from serde_json's visits and turns refusals into [`DecodeError`]s.
struct ScalarVisitor<'p, 'b, S> {
    sink: S,
    path: &'p str,
    error: &'b mut Option<DecodeError>,
}

impl<S: Sink> ScalarVisitor<'_, '_, S> {
    #[inline]
    fn done<E: de::Error>(self, result: Result<(), Refusal<'_>>) -> Result<(), E> {
        let Err(refusal) = result else { return Ok(()) };
        let field = self.path.to_owned();
        let error = match refusal {
            Refusal::Mismatch(found) => DecodeError::TypeMismatch {
                field,
                expected: S::EXPECTED,
                found: found.to_string(),
            },
            Refusal::OutOfRange(found) => {
                let found = match found {
                    Found::Float(v) => v.to_string(),
                    Found::UInt(v) => v.to_string(),
                    other => other.to_string(),
                };
                DecodeError::OutOfRange { field, found }
            }
            Refusal::BadTimestamp(s) => DecodeError::InvalidTimestamp {
                field,
                found: format!("{s:?}"),
            },
            Refusal::TooLarge => DecodeError::BatchTooLarge { field },
        };
        Err(fail(self.error, error))
    }
}

impl<'de, S: Sink> Visitor<'de> for ScalarVisitor<'_, '_, S> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(S::EXPECTED)
    }

    #[inline]
    fn visit_i64<E: de::Error>(mut self, v: i64) -> Result<(), E> {
        let result = self.sink.int(v);
        self.done(result)
    }

    #[inline]
    fn visit_u64<E: de::Error>(mut self, v: u64) -> Result<(), E> {
        let result = self.sink.uint(v);
        self.done(result)
    }

    #[inline]
    fn visit_f64<E: de::Error>(mut self, v: f64) -> Result<(), E> {
        let result = self.sink.float(v);
        self.done(result)
    }

    #[inline]
    fn visit_bool<E: de::Error>(mut self, v: bool) -> Result<(), E> {
        let result = self.sink.bool(v);
        self.done(result)
    }

    #[inline]
    fn visit_str<E: de::Error>(mut self, v: &str) -> Result<(), E> {
        let result = self.sink.str(v);
        self.done(result)
    }

    fn visit_unit<E: de::Error>(mut self) -> Result<(), E> {
        self.sink.null();
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, _: A) -> Result<(), A::Error> {
        self.done(Err(Refusal::Mismatch(Found::Object)))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> Result<(), A::Error> {
        self.done(Err(Refusal::Mismatch(Found::Array)))
    }
}
