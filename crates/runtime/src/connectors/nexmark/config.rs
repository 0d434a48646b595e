//! [`GeneratorConfig`]: the knobs of the standard Nexmark generator, with Beam's defaults.

/// Persons per [`PROPORTION_DENOMINATOR`] events.
pub const PERSON_PROPORTION: u64 = 1;
/// Auctions per [`PROPORTION_DENOMINATOR`] events.
pub const AUCTION_PROPORTION: u64 = 3;
/// Bids per [`PROPORTION_DENOMINATOR`] events.
pub const BID_PROPORTION: u64 = 46;
/// Length of the repeating cycle of event types: event `n` is a person when `n % 50 == 0`, an
/// auction when `n % 50` is 1, 2 or 3, and a bid otherwise.
pub const PROPORTION_DENOMINATOR: u64 = PERSON_PROPORTION + AUCTION_PROPORTION + BID_PROPORTION;

/// The id of the first person.
pub const FIRST_PERSON_ID: i64 = 1000;
/// The id of the first auction.
pub const FIRST_AUCTION_ID: i64 = 1000;
/// The lowest auction category; categories are `FIRST_CATEGORY_ID..FIRST_CATEGORY_ID + NUM_CATEGORIES`.
pub const FIRST_CATEGORY_ID: i64 = 10;
/// Number of auction categories.
pub const NUM_CATEGORIES: u64 = 5;

/// How far past the last generated person a randomly chosen person id may reach.
pub const PERSON_ID_LEAD: u64 = 10;
/// How far past the last generated auction a randomly chosen auction id may reach.
pub const AUCTION_ID_LEAD: u64 = 10;

/// Hot auctions are the first of each batch of this many auctions (Beam's `HOT_AUCTION_RATIO`).
pub const HOT_AUCTION_BATCH: u64 = 100;
/// Hot sellers are the first person of each batch of this many people (Beam's `HOT_SELLER_RATIO`).
pub const HOT_SELLER_BATCH: u64 = 100;
/// Hot bidders are the second person of each batch of this many people (Beam's `HOT_BIDDER_RATIO`).
pub const HOT_BIDDER_BATCH: u64 = 100;

/// Largest accepted `avg_*_bytes`: keeps the random text buffer (about 2.4 × the largest average)
/// and each batch's string columns reasonably sized.
pub const MAX_AVG_BYTES: u64 = 1 << 20;

/// The knobs of the Nexmark generator. Every event is a pure function of this and its number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GeneratorConfig {
    /// Seeds every random choice (and the random text the strings are cut from).
    pub seed: u64,
    /// Event time of event 0, epoch milliseconds.
    pub base_time_ms: i64,
    /// Event time between consecutive events, in nanoseconds of event time: event `n` happens at
    /// `base_time_ms + floor(n * inter_event_delay_ns / 1_000_000)`. The default, 100 µs, is
    /// Beam's default rate of 10,000 events per second.
    pub inter_event_delay_ns: u64,
    /// Randomly chosen sellers and bidders come from the last this-many people (plus a small
    /// lead), so the density of activity per person does not fall on long runs.
    pub num_active_people: u64,
    /// Randomly chosen auctions come from the last this-many auctions (plus a small lead); also
    /// sets the average auction length (the time until this many more auctions are generated).
    pub num_in_flight_auctions: u64,
    /// A bid is on a hot auction with probability `1 - 1 / hot_auction_ratio`.
    pub hot_auction_ratio: u64,
    /// An auction has a hot seller with probability `1 - 1 / hot_seller_ratio`.
    pub hot_seller_ratio: u64,
    /// A bid comes from a hot bidder with probability `1 - 1 / hot_bidder_ratio`.
    pub hot_bidder_ratio: u64,
    /// Average person size as Beam counts it (see [`Person::size_in_bytes`](super::Person::size_in_bytes)).
    pub avg_person_bytes: u64,
    /// Average auction size as Beam counts it (see [`Auction::size_in_bytes`](super::Auction::size_in_bytes)).
    pub avg_auction_bytes: u64,
    /// Average bid size as Beam counts it (see [`Bid::size_in_bytes`](super::Bid::size_in_bytes)).
    pub avg_bid_bytes: u64,
}

impl Default for GeneratorConfig {
    fn default() -> Self {
        GeneratorConfig {
            seed: 0,
            base_time_ms: 1_700_000_000_000,
            inter_event_delay_ns: 100_000,
            num_active_people: 1000,
            num_in_flight_auctions: 100,
            hot_auction_ratio: 2,
            hot_seller_ratio: 4,
            hot_bidder_ratio: 4,
            avg_person_bytes: 200,
            avg_auction_bytes: 500,
            avg_bid_bytes: 100,
        }
    }
}

/// A [`GeneratorConfig`] with values the generator does not accept; lists every problem.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid Nexmark generator config: {}", .problems.join("; "))]
pub struct ConfigError {
    /// One message per bad field, naming the field.
    pub problems: Vec<String>,
}

impl GeneratorConfig {
    /// Checks every field and reports all problems at once.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let mut problems = Vec::new();
        if self.num_active_people == 0 {
            problems.push("num_active_people must be at least 1".to_owned());
        }
        for (name, value) in [
            ("hot_auction_ratio", self.hot_auction_ratio),
            ("hot_seller_ratio", self.hot_seller_ratio),
            ("hot_bidder_ratio", self.hot_bidder_ratio),
        ] {
            if value == 0 {
                problems.push(format!(
                    "{name} must be at least 1 (1 means nothing is hot)"
                ));
            }
        }
        for (name, value) in [
            ("avg_person_bytes", self.avg_person_bytes),
            ("avg_auction_bytes", self.avg_auction_bytes),
            ("avg_bid_bytes", self.avg_bid_bytes),
        ] {
            if value > MAX_AVG_BYTES {
                problems.push(format!(
                    "{name} is {value}, at most {MAX_AVG_BYTES} is supported"
                ));
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(ConfigError { problems })
        }
    }
}
