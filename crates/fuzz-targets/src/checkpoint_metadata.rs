//! A checkpoint's `_metadata` file: decoding any bytes fails cleanly or yields metadata that
//! encodes and decodes back to itself.
//!
//! The header carries a checksum of the JSON body, which random bytes would almost never match:
//! unless the input starts with `weir-checkpoint ` (then it is the whole file, header parsing
//! included), it is the body and the harness writes the header with the right checksum.

use weir_checkpoint::metadata::{CheckpointMetadata, VERSION};
use xxhash_rust::xxh3::xxh3_64;

/// Decodes one `_metadata` file; what decodes must encode and decode back to itself.
pub fn checkpoint_metadata(data: &[u8]) {
    let file = if data.starts_with(b"weir-checkpoint ") {
        data.to_vec()
    } else {
        let mut file =
            format!("weir-checkpoint {VERSION} xxh3={:016x}\n", xxh3_64(data)).into_bytes();
        file.extend_from_slice(data);
        file
    };
    if let Ok(metadata) = CheckpointMetadata::decode(&file) {
        let encoded = metadata.encode().expect("decoded metadata encodes");
        let again = CheckpointMetadata::decode(&encoded).expect("encoded metadata decodes");
        assert_eq!(again, metadata);
    }
}
