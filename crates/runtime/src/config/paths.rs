//! Where weir keeps its files by default, and names made safe for paths.

use std::path::PathBuf;

/// weir's data directory: `$WEIR_DATA_DIR`, or `data` under the working directory.
pub fn data_dir() -> PathBuf {
    std::env::var_os("WEIR_DATA_DIR").map_or_else(|| PathBuf::from("data"), PathBuf::from)
}

/// A name safe as one path component.
pub fn safe_name(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}
