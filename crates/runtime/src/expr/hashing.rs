//! Hash functions: Flink's `md5`, `sha1`, `sha224`, `sha256`, `sha384`, `sha512` and
//! `sha2(s, bits)` (lower-case hex digests of the string's UTF-8 bytes, as Flink prints them),
//! and `hash_code(s)`, Java's `String.hashCode()`.

use std::fmt::Write as _;

use md5::Md5;
use sha1::Sha1;
use sha2::digest::Digest;
use sha2::{Sha224, Sha256, Sha384, Sha512};

use super::error::ExprError;
use super::functions::Call;
use super::node::Node;
use super::rowwise::{self, Datum, Out, Plain};
use super::strings::string_operand;
use super::types::SqlType;

/// The hash functions; `Ok(None)` for another name.
pub(crate) fn compile(call: &Call<'_>) -> Result<Option<Node>, ExprError> {
    let (function, ty): (Plain, SqlType) = match call.name {
        "md5" => (|a, out| hex::<Md5>(a, out), SqlType::String),
        "sha1" => (|a, out| hex::<Sha1>(a, out), SqlType::String),
        "sha224" => (|a, out| hex::<Sha224>(a, out), SqlType::String),
        "sha256" => (|a, out| hex::<Sha256>(a, out), SqlType::String),
        "sha384" => (|a, out| hex::<Sha384>(a, out), SqlType::String),
        "sha512" => (|a, out| hex::<Sha512>(a, out), SqlType::String),
        "hash_code" => (
            |a, _| Ok(Out::Int(java_hash_code(a[0].str().unwrap_or_default()))),
            SqlType::Int,
        ),
        "sha2" => {
            call.arity(2, Some(2))?;
            let function: Plain = match call.constant_int(1, "sha2's bit length")? {
                None => return Ok(Some(call.null(SqlType::String))),
                Some(224) => |a, out| hex::<Sha224>(a, out),
                Some(256) => |a, out| hex::<Sha256>(a, out),
                Some(384) => |a, out| hex::<Sha384>(a, out),
                Some(512) => |a, out| hex::<Sha512>(a, out),
                Some(other) => {
                    return Err(call.origin.type_error(format!(
                        "sha2's bit length must be 224, 256, 384 or 512, not {other}"
                    )));
                }
            };
            let input = string_operand(call.value(0)?, "sha2", call.origin)?;
            return Ok(Some(rowwise::plain(
                vec![input],
                SqlType::String,
                rowwise::STRICT,
                function,
                call.origin,
            )));
        }
        _ => return Ok(None),
    };
    call.arity(1, Some(1))?;
    let input = string_operand(call.value(0)?, call.name, call.origin)?;
    Ok(Some(rowwise::plain(
        vec![input],
        ty,
        rowwise::STRICT,
        function,
        call.origin,
    )))
}

/// The digest of the argument's UTF-8 bytes in lower-case hex.
fn hex<'a, D: Digest>(args: &[Datum<'a>], out: &mut String) -> Result<Out<'a>, String> {
    let digest = D::digest(args[0].str().unwrap_or_default().as_bytes());
    for byte in digest.iter() {
        write!(out, "{byte:02x}").map_err(|e| e.to_string())?;
    }
    Ok(Out::Written)
}

/// Java's `String.hashCode()`: `s[0]*31^(n-1) + ... + s[n-1]` over the UTF-16 code units, in
/// wrapping 32-bit arithmetic.
fn java_hash_code(text: &str) -> i64 {
    let hash = text.encode_utf16().fold(0i32, |h, unit| {
        h.wrapping_mul(31).wrapping_add(i32::from(unit))
    });
    i64::from(hash)
}
