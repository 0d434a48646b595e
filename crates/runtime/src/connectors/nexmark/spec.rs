//! The keys of `kind: nexmark`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::config::{EventTimeSpec, HumanDuration};

/// The Nexmark generator (the Apache Beam / Flink model): people, auctions and bids in the
/// proportions 1:3:46, a pure function of the seed and the event number, so parallel subtasks
/// split the sequence without duplicating or skipping an event.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct NexmarkSourceSpec {
    /// Events to generate in total (all subtasks); leave out for an unbounded source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub events: Option<u64>,
    /// Seed of the generator: the same seed gives the same events.
    #[serde(default)]
    pub seed: u64,
    /// Event time of the first event, in epoch milliseconds (years 1 to 9999).
    #[serde(default = "default_base_time")]
    #[schemars(range(min = -62_135_596_800_000i64, max = 253_402_300_799_999i64))]
    pub base_time: i64,
    /// Event time between consecutive events (10,000 events per second of event time by default).
    #[serde(default = "default_inter_event_delay")]
    pub inter_event_delay: HumanDuration,
    /// Most events per second of wall-clock time, over all subtasks; leave out to run flat out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub rate: Option<u64>,
    /// People active at any time (bids and auctions pick among them).
    #[serde(default = "default_active_people")]
    #[schemars(range(min = 1))]
    pub active_people: u64,
    /// Auctions open at any time (bids pick among them).
    #[serde(default = "default_in_flight_auctions")]
    #[schemars(range(min = 1))]
    pub in_flight_auctions: u64,
    /// Subtasks of this source (default: the job's parallelism).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1024))]
    pub parallelism: Option<u32>,
    /// Watermarks: event time comes from each event's `dateTime`.
    #[serde(default = "nexmark_event_time")]
    pub event_time: EventTimeSpec,
}

fn default_base_time() -> i64 {
    1_700_000_000_000
}
fn default_inter_event_delay() -> HumanDuration {
    HumanDuration(std::time::Duration::from_micros(100))
}
fn default_active_people() -> u64 {
    1000
}
fn default_in_flight_auctions() -> u64 {
    100
}

/// Event time is each event's `dateTime`, in order.
fn nexmark_event_time() -> EventTimeSpec {
    EventTimeSpec {
        column: Some("dateTime".to_string()),
        max_out_of_orderness: HumanDuration::ZERO,
        idle_timeout: None,
    }
}
