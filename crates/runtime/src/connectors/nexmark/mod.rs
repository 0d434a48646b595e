//! The Nexmark event generator: the standard Apache Beam / Flink Nexmark generator logic, with
//! every event a pure function of `(config, n)` so parallel subtasks split the sequence and
//! checkpoints restore a position without carrying any state.
//!
//! Event `n` is a person, an auction or a bid by `n % 50` (1:3:46); its event time is
//! `base_time_ms + floor(n * inter_event_delay_ns / 1e6)`, so events come in event-time order.
//! Ids, hot auctions / sellers / bidders, prices, auction lengths and the `extra` padding follow
//! Beam's generators. Each event draws from its own SplitMix64 stream seeded from `(seed, n)`,
//! and its strings are windows into random text built once per generator, so the Arrow path
//! allocates nothing per event.
//!
//! # Layout
//!
//! - `model`: [`Person`], [`Auction`], [`Bid`], [`Event`], [`EventKind`].
//! - `config`: [`GeneratorConfig`] (Beam's defaults) and the fixed constants (proportions,
//!   first ids, leads, hot batch sizes).
//! - `generator`: [`Generator`], the per-event function and Beam's id / price / length logic.
//! - `rng`: the per-event SplitMix64 stream.
//! - `text`: the per-generator random text, channel table and hot URLs strings are cut from.
//! - `batch`: the Arrow schemas and [`Split`], one parallel subtask's events as record batches.
//! - `json`: [`write_json_line`] and [`write_file`], `SCHEMA.md`'s JSON lines.
//! - [`source`]: the generator as a parallel, rate-limitable source (`kind: nexmark`), and
//!   `spec`: its keys ([`NexmarkSourceSpec`]); this module: its connector.
//!
//! # Example
//!
//! ```
//! use std::sync::Arc;
//! use weir_runtime::connectors::nexmark::{Generator, GeneratorConfig, Kinds, Split};
//!
//! let generator = Arc::new(Generator::new(GeneratorConfig { seed: 7, ..Default::default() }));
//! // Subtask 1 of 4 of a bounded run of 1,000,000 events: n = 1, 5, 9, …
//! let mut split = Split::new(generator.clone(), 1, 4, Some(1_000_000));
//! let batch = split.next_batch(8192, Kinds { person: false, auction: false, bid: true });
//! assert_eq!(batch.events, 8192);
//! let checkpoint = split.position();
//! // … after a restart:
//! let mut restored = Split::new(generator, 1, 4, Some(1_000_000));
//! restored.seek(checkpoint);
//! ```

mod batch;
mod config;
mod generator;
mod json;
mod model;
mod rng;
pub mod source;
mod spec;
mod text;

#[cfg(test)]
mod tests;

pub use batch::{GeneratedBatch, Kinds, Split, auction_schema, bid_schema, person_schema};
pub use config::{
    AUCTION_ID_LEAD, AUCTION_PROPORTION, BID_PROPORTION, ConfigError, FIRST_AUCTION_ID,
    FIRST_CATEGORY_ID, FIRST_PERSON_ID, GeneratorConfig, HOT_AUCTION_BATCH, HOT_BIDDER_BATCH,
    HOT_SELLER_BATCH, MAX_AVG_BYTES, NUM_CATEGORIES, PERSON_ID_LEAD, PERSON_PROPORTION,
    PROPORTION_DENOMINATOR,
};
pub use generator::{FIRST_NAMES, Generator, LAST_NAMES, US_CITIES, US_STATES};
pub use json::{write_file, write_json_line};
pub use model::{Auction, Bid, Event, EventKind, Person};
pub use spec::NexmarkSourceSpec;

use std::sync::Arc;

use crate::api::connector::{
    HostLimits, Hosted, Location, PlannedSource, Reach, Secret, ServerFile, SourceConnector,
    SourceContext, SpecProblem,
};
use crate::config::EventTimeSpec;

impl SourceConnector for NexmarkSourceSpec {
    fn parallelism(&self) -> Option<u32> {
        self.parallelism
    }

    fn event_time(&self) -> &EventTimeSpec {
        &self.event_time
    }

    fn ports(&self) -> Vec<String> {
        source::PORTS.iter().map(|p| p.to_string()).collect()
    }

    fn plan(&self, _cx: SourceContext<'_>) -> Result<PlannedSource, Vec<SpecProblem>> {
        let factory = source::NexmarkSourceFactory::new(self).map_err(SpecProblem::node)?;
        Ok(PlannedSource {
            ports: source::port_schemas(),
            factory: Arc::new(factory),
        })
    }
}

/// The generator reaches nothing and reads no file; a server bounds its rate.
impl Hosted for NexmarkSourceSpec {
    fn endpoints(&self) -> Vec<Reach> {
        Vec::new()
    }

    fn server_files(&self) -> Vec<ServerFile> {
        Vec::new()
    }

    fn locations(&self) -> Vec<Location> {
        Vec::new()
    }

    fn secrets(&self) -> Vec<Secret> {
        Vec::new()
    }

    fn within(&self, limits: &HostLimits) -> Vec<SpecProblem> {
        match self.rate {
            Some(rate) if rate > limits.max_generator_rate => vec![SpecProblem::at(
                "rate",
                format!(
                    "this server generates at most {} events/s per source (--max-generator-rate)",
                    limits.max_generator_rate
                ),
            )],
            None if self.events.is_none() => vec![SpecProblem::node(format!(
                "an unbounded generator must set a `rate` on this server (at most {} events/s), \
                 or `events` to end",
                limits.max_generator_rate
            ))],
            _ => Vec::new(),
        }
    }
}
