//! The wall clock, in the one unit weir stamps things with: epoch milliseconds. Every crate
//! above this one reads it here (checkpoint metadata, write-through stamps, metrics, the
//! API), so that there is one definition and one rounding.

/// Now, in milliseconds since the Unix epoch (0 before it; `i64::MAX` far beyond it).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
