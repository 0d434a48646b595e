//! The declared shape of JSON lines and the Arrow schemas it produces.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use indexmap::IndexMap;
use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};

use super::error::LayoutError;

/// A scalar JSON type and the Arrow type of its column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ScalarType {
    /// JSON integers (an integral float such as `2.0` is accepted too) → `Int64`.
    Int,
    /// Any JSON number → `Float64`.
    Float,
    /// JSON strings → `Utf8`.
    String,
    /// `true` / `false` → `Boolean`.
    Bool,
    /// Epoch milliseconds (an integer) or an RFC 3339 string → `Timestamp(Millisecond, None)`.
    Timestamp,
}

impl ScalarType {
    /// Every scalar type, in the order their names are listed in messages.
    pub const ALL: [ScalarType; 5] = [
        ScalarType::Int,
        ScalarType::Float,
        ScalarType::String,
        ScalarType::Bool,
        ScalarType::Timestamp,
    ];

    /// The name a job file uses for this type (`"int"`, ...).
    pub fn name(self) -> &'static str {
        match self {
            ScalarType::Int => "int",
            ScalarType::Float => "float",
            ScalarType::String => "string",
            ScalarType::Bool => "bool",
            ScalarType::Timestamp => "timestamp",
        }
    }

    /// The Arrow type of a column of this type.
    pub fn data_type(self) -> DataType {
        match self {
            ScalarType::Int => DataType::Int64,
            ScalarType::Float => DataType::Float64,
            ScalarType::String => DataType::Utf8,
            ScalarType::Bool => DataType::Boolean,
            ScalarType::Timestamp => DataType::Timestamp(TimeUnit::Millisecond, None),
        }
    }

    fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.name() == name)
    }
}

impl fmt::Display for ScalarType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A declared JSON type: a type name (`"int" | "float" | "string" | "bool" | "timestamp"`) or a
/// map of field name → type (a nested object, whose fields become dotted columns).
///
/// Deserialization is written by hand (serialization is the derived untagged form) so that a
/// misspelt type name is reported as such rather than as "did not match any variant".
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum JsonType {
    /// A value that becomes one column.
    Scalar(ScalarType),
    /// A nested object; each field becomes a column named `parent.field`.
    Object(IndexMap<String, JsonType>),
}

impl<'de> Deserialize<'de> for JsonType {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(JsonTypeVisitor)
    }
}

struct JsonTypeVisitor;

impl<'de> Visitor<'de> for JsonTypeVisitor {
    type Value = JsonType;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "a type name (int, float, string, bool, timestamp) or a map of field names to types",
        )
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<JsonType, E> {
        ScalarType::from_name(v)
            .map(JsonType::Scalar)
            .ok_or_else(|| E::unknown_variant(v, &["int", "float", "string", "bool", "timestamp"]))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<JsonType, A::Error> {
        let mut fields = IndexMap::with_capacity(map.size_hint().unwrap_or(0));
        while let Some(name) = map.next_key::<String>()? {
            if fields.contains_key(&name) {
                return Err(de::Error::custom(format_args!(
                    "field `{name}` is declared twice"
                )));
            }
            let ty = map.next_value::<JsonType>()?;
            fields.insert(name, ty);
        }
        Ok(JsonType::Object(fields))
    }
}

/// How the lines of a JSON source are shaped.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum JsonLayout {
    /// Every line is one object with these fields; one output port, named `""`.
    Single(IndexMap<String, JsonType>),
    /// Each line holds one object under a key naming its variant (Nexmark:
    /// `{"type":"bid","bid":{...}}`); one output port per variant, in declaration order. A line is
    /// routed to the first declared variant whose key it holds with an object value; lines with
    /// none are skipped.
    Variants(IndexMap<String, IndexMap<String, JsonType>>),
}

impl JsonLayout {
    /// The output ports: `("", schema)` for [`JsonLayout::Single`], else `(variant, schema)` per
    /// variant in declaration order. Nested objects flatten into dotted, nullable columns.
    pub fn ports(&self) -> Vec<(String, SchemaRef)> {
        match self {
            JsonLayout::Single(fields) => vec![(String::new(), object_schema(fields))],
            JsonLayout::Variants(variants) => variants
                .iter()
                .map(|(name, fields)| (name.clone(), object_schema(fields)))
                .collect(),
        }
    }

    /// Reports every problem at once: no variants, and column names that two fields flatten to
    /// (`"a.b": int` beside `a: {b: int}`).
    pub fn validate(&self) -> Result<(), LayoutError> {
        let mut problems = Vec::new();
        match self {
            JsonLayout::Single(fields) => duplicate_columns("", fields, &mut problems),
            JsonLayout::Variants(variants) => {
                if variants.is_empty() {
                    problems.push("no variants are declared".to_owned());
                }
                for (name, fields) in variants {
                    duplicate_columns(name, fields, &mut problems);
                }
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(LayoutError { problems })
        }
    }
}

/// The flattened, all-nullable schema of an object.
fn object_schema(fields: &IndexMap<String, JsonType>) -> SchemaRef {
    let mut out = Vec::new();
    flatten("", fields, &mut out);
    Arc::new(Schema::new(out))
}

fn flatten(prefix: &str, fields: &IndexMap<String, JsonType>, out: &mut Vec<Field>) {
    for (name, ty) in fields {
        let column = join(prefix, name);
        match ty {
            JsonType::Scalar(scalar) => out.push(Field::new(column, scalar.data_type(), true)),
            JsonType::Object(nested) => flatten(&column, nested, out),
        }
    }
}

/// `prefix.name`, or `name` at the top level.
pub(super) fn join(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_owned()
    } else {
        format!("{prefix}.{name}")
    }
}

fn duplicate_columns(port: &str, fields: &IndexMap<String, JsonType>, problems: &mut Vec<String>) {
    let mut columns = Vec::new();
    flatten("", fields, &mut columns);
    let mut seen = HashSet::new();
    for field in &columns {
        if !seen.insert(field.name().as_str()) {
            let place = if port.is_empty() {
                String::new()
            } else {
                format!(" of `{port}`")
            };
            problems.push(format!(
                "column `{}`{place} is produced by two fields; rename one",
                field.name()
            ));
        }
    }
}

/// The output ports of a source whose records are tagged by `variants`: one per variant, in
/// the order declared; none (the source's one unnamed port) without variants.
pub fn variant_ports(
    variants: &Option<IndexMap<String, IndexMap<String, JsonType>>>,
) -> Vec<String> {
    variants
        .as_ref()
        .map(|v| v.keys().cloned().collect())
        .unwrap_or_default()
}
