//! A micro benchmark of the Nexmark generator's Arrow path: events of the default
//! configuration into record batches on one thread. No `weir bench` subcommand runs it yet;
//! `weir bench nexmark` measures the generator inside whole jobs.

use std::sync::Arc;
use std::time::{Duration, Instant};

use weir_runtime::connectors::nexmark::{Generator, GeneratorConfig, Kinds, Split};

/// Events per [`Split::next_batch`] call in [`generate`], a typical source batch size.
pub const BATCH_EVENTS: usize = 8192;

/// Generates events `[0, events)` of the default config into Arrow batches of all three kinds on
/// the calling thread, and returns the rows built and the time taken (excluding building the
/// generator). Bids are 46/50 of the rows.
pub fn generate(events: u64) -> (u64, Duration) {
    let generator = Arc::new(Generator::new(GeneratorConfig::default()));
    let mut split = Split::new(generator, 0, 1, Some(events));
    let start = Instant::now();
    let mut rows = 0u64;
    while !split.is_done() {
        let batch = std::hint::black_box(split.next_batch(BATCH_EVENTS, Kinds::ALL));
        rows += [&batch.person, &batch.auction, &batch.bid]
            .into_iter()
            .flatten()
            .map(|b| b.num_rows() as u64)
            .sum::<u64>();
    }
    (rows, start.elapsed())
}
