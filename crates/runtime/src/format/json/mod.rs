//! JSON lines ⇄ Arrow: a declared layout, a schema-driven decoder, and an encoder for sinks.
//!
//! # Layout
//!
//! - [`layout`]: [`JsonType`], [`ScalarType`] and [`JsonLayout`], the shape of the lines as a job
//!   declares it, and the Arrow schema of each output port ([`JsonLayout::ports`]).
//! - `keys`: the precompiled key → field lookup used while decoding (no allocation per key).
//! - `builders`: growable, truncatable column builders turned into Arrow arrays without copying.
//! - [`decode`]: [`JsonDecoder`], one line at a time into per-port column builders.
//! - `scan`: the decoder's fast path, a byte scanner for plain lines; it leaves every other
//!   line, and every error, to the serde_json path of [`decode`].
//! - [`encode`]: [`encode_batch`] / [`JsonEncoder`], record batches to JSON lines.
//! - [`error`]: [`DecodeError`], [`EncodeError`], [`LayoutError`].
//!
//! Types map as int → `Int64`, float → `Float64`, string → `Utf8`, bool → `Boolean`,
//! timestamp → `Timestamp(Millisecond, None)`; every column is nullable, and nested objects flatten
//! into dotted column names (`user.id`).
//!
//! # Example
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use indexmap::IndexMap;
//! use weir_runtime::format::json::{Decoded, JsonDecoder, JsonLayout, JsonType, ScalarType};
//!
//! let layout = JsonLayout::Variants(IndexMap::from([(
//!     "bid".to_owned(),
//!     IndexMap::from([
//!         ("auction".to_owned(), JsonType::Scalar(ScalarType::Int)),
//!         ("price".to_owned(), JsonType::Scalar(ScalarType::Int)),
//!     ]),
//! )]));
//! let mut decoder = JsonDecoder::new(&layout, &[true], 1024);
//! let bid = decoder.decode_line(br#"{"type":"bid","bid":{"auction":1000,"price":4567}}"#)?;
//! assert!(matches!(bid, Decoded::Row { port: 0 }));
//! let person = decoder.decode_line(br#"{"type":"person","person":{"id":1}}"#)?;
//! assert!(matches!(person, Decoded::Skipped));
//! let batches = decoder.flush();
//! assert_eq!(batches[0].1.num_rows(), 1);
//! assert_eq!(batches[0].1.schema().field(1).name(), "price");
//! # Ok(())
//! # }
//! ```

pub mod decode;
pub mod encode;
pub mod error;
pub mod layout;

mod builders;
mod keys;
mod scan;

#[cfg(test)]
mod nexmark;
#[cfg(test)]
mod tests;

pub use decode::{Decoded, JsonDecoder};
pub use encode::{JsonEncoder, encode_batch};
pub use error::{DecodeError, EncodeError, LayoutError};
pub use layout::{JsonLayout, JsonType, ScalarType};
