//! Record formats of file sources and sinks: JSON lines into Arrow and back, and the splitting of
//! files into line-aligned chunks that parallel readers share.
//!
//! # Layout
//!
//! - [`json`]: the declared JSON layout ([`JsonLayout`]), the schema-driven line decoder
//!   ([`JsonDecoder`]) and the batch encoder ([`encode_batch`]).
//! - [`lines`]: [`plan_chunks`] assigns byte ranges of files to the subtasks of a source, and
//!   [`LineReader`] reads the lines of those ranges with large buffered reads.
//!
//! Examples: [`json`] (decoding lines) and [`lines`] (reading a file's chunks).

pub mod json;
pub mod lines;

pub use json::{
    DecodeError, Decoded, EncodeError, JsonDecoder, JsonEncoder, JsonLayout, JsonType, LayoutError,
    ScalarType, encode_batch,
};
pub use lines::{
    Chunk, DEFAULT_BUFFER_SIZE, DEFAULT_CHUNK_SIZE, DEFAULT_MAX_LINE_LENGTH, LineReader,
    plan_chunks,
};
