//! Errors of the JSON format. All of them describe bad input (a bad line, an unsupported column
//! type, a layout that cannot work): the job decides whether to fail or to skip the record.

use arrow_schema::DataType;

/// Why one JSON line could not be decoded. The caller adds the file name, line number and byte
/// offset.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The line is not valid JSON (or has trailing characters after the object).
    #[error("invalid JSON at column {column}: {message}")]
    InvalidJson {
        /// One-based column (byte) of the line where parsing stopped.
        column: usize,
        /// What the parser found wrong.
        message: String,
    },
    /// The line is valid JSON but not an object.
    #[error("expected a JSON object, found {found}")]
    NotAnObject {
        /// A short description of the value, such as `array` or `string "abc"`.
        found: String,
    },
    /// A declared field holds a value of another JSON type.
    #[error("field \"{field}\": expected {expected}, found {found}")]
    TypeMismatch {
        /// Dotted path of the field, such as `bid.price`.
        field: String,
        /// The declared type (`int`, `float`, `string`, `bool`, `timestamp`, `object`).
        expected: &'static str,
        /// A short description of the value, such as `string "12x"` or `float 1.5`.
        found: String,
    },
    /// An integer field holds a number outside the range of a 64-bit signed integer.
    #[error("field \"{field}\": {found} does not fit in a 64-bit int")]
    OutOfRange {
        /// Dotted path of the field.
        field: String,
        /// The number as found.
        found: String,
    },
    /// A timestamp string is not RFC 3339.
    #[error(
        "field \"{field}\": invalid timestamp {found}: expected epoch milliseconds or an RFC 3339 \
         string such as \"2024-01-31T12:00:00Z\""
    )]
    InvalidTimestamp {
        /// Dotted path of the field.
        field: String,
        /// The string as found.
        found: String,
    },
    /// A declared field appears twice in the same object.
    #[error("field \"{field}\": the key appears twice in one object")]
    DuplicateKey {
        /// Dotted path of the field.
        field: String,
    },
    /// A string column would hold more than 2 GiB in one batch.
    #[error("field \"{field}\": more than 2 GiB of text in one batch; lower the batch size")]
    BatchTooLarge {
        /// Dotted path of the field.
        field: String,
    },
}

/// Why a record batch could not be written as JSON lines.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    /// The column's Arrow type has no JSON encoding here.
    #[error(
        "column \"{column}\" has type {data_type}, which JSON output does not support \
         (supported: Int64, Float64, Utf8, Boolean, Timestamp(ms))"
    )]
    UnsupportedType {
        /// The column name.
        column: String,
        /// Its Arrow type.
        data_type: DataType,
    },
}

/// Problems found by [`JsonLayout::validate`](super::JsonLayout::validate), all at once.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid JSON layout: {}", problems.join("; "))]
pub struct LayoutError {
    /// One sentence per problem.
    pub problems: Vec<String>,
}
