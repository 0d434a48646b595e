//! A micro benchmark of the Arrow path, for `weir bench` (not a test: it measures time).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::batch::{Kinds, Split};
use super::config::GeneratorConfig;
use super::generator::Generator;

/// Events per [`Split::next_batch`] call in [`bench_generate`], a typical source batch size.
pub const BENCH_BATCH_EVENTS: usize = 8192;

/// Generates events `[0, events)` of the default config into Arrow batches of all three kinds on
/// the calling thread, and returns the rows built and the time taken (excluding building the
/// generator). Bids are 46/50 of the rows.
pub fn bench_generate(events: u64) -> (u64, Duration) {
    let generator = Arc::new(Generator::new(GeneratorConfig::default()));
    let mut split = Split::new(generator, 0, 1, Some(events));
    let start = Instant::now();
    let mut rows = 0u64;
    while !split.is_done() {
        let batch = std::hint::black_box(split.next_batch(BENCH_BATCH_EVENTS, Kinds::ALL));
        rows += [&batch.person, &batch.auction, &batch.bid]
            .into_iter()
            .flatten()
            .map(|b| b.num_rows() as u64)
            .sum::<u64>();
    }
    (rows, start.elapsed())
}
