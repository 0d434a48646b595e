//! The logical keyed-state snapshot reader (`keyed.wks`), as a restore reads it.
//!
//! The format ends in a checksum of everything before it, so random bytes would almost never
//! get past it: the input is wrapped in the magic at both ends and the checksum is computed,
//! leaving the version, header, sections and index offsets to the fuzzer.

use xxhash_rust::xxh3::xxh3_64;

const MAGIC: &[u8; 8] = b"WEIRKGS\0";

/// Reads one logical snapshot made of the input (see the module docs).
pub fn logical_snapshot(data: &[u8]) {
    let mut file = Vec::with_capacity(data.len() + 24);
    file.extend_from_slice(MAGIC);
    file.extend_from_slice(data);
    // Room for the footer's checksum, then the end marker.
    file.extend_from_slice(&[0; 8]);
    file.extend_from_slice(MAGIC);
    let at = file.len() - 16;
    let checksum = xxh3_64(&file[..at]);
    file[at..at + 8].copy_from_slice(&checksum.to_le_bytes());
    let _ =
        weir_state::snapshot::logical::read_from_memory(std::path::Path::new("fuzz.wks"), &file);
}
