//! [`Generator`]: event number `n` → event, as a pure function of `(config, n)`.
//!
//! The logic is Beam's `NexmarkGenerator` with its `PersonGenerator`, `AuctionGenerator`,
//! `BidGenerator` and `PriceGenerator`: the type of event `n` comes from `n % 50`; the id of a
//! new person or auction from how many of them precede `n`; the sellers, bidders and auctions
//! an event refers to either from the hot batch of the moment or uniformly from the active
//! people / in-flight auctions plus a small lead. Beam seeds a `java.util.Random` with the event
//! number; here a SplitMix64 stream is seeded from `(seed, n)` and strings are windows into
//! per-generator random text (see [`super::text`]).
//!
//! The core produces borrowed *views* ([`PersonView`] …) that hold the numbers and `&str`
//! pieces of an event; [`Generator::event`] turns them into owned [`Event`]s, and the batch
//! builder appends them straight into Arrow builders without allocating.

use super::config::{
    AUCTION_ID_LEAD, AUCTION_PROPORTION, ConfigError, FIRST_AUCTION_ID, FIRST_CATEGORY_ID,
    FIRST_PERSON_ID, GeneratorConfig, HOT_AUCTION_BATCH, HOT_BIDDER_BATCH, HOT_SELLER_BATCH,
    NUM_CATEGORIES, PERSON_ID_LEAD, PERSON_PROPORTION, PROPORTION_DENOMINATOR,
};
use super::model::{
    Auction, BID_BASE_SIZE, Bid, Event, EventKind, Person, auction_base_size, person_base_size,
};
use super::rng::{Rng, mix64};
use super::text::Text;

/// The states people live in (Beam's `US_STATES`).
pub const US_STATES: [&str; 6] = ["AZ", "CA", "ID", "OR", "WA", "WY"];
/// The cities people live in (Beam's `US_CITIES`).
pub const US_CITIES: [&str; 10] = [
    "Phoenix",
    "Los Angeles",
    "San Francisco",
    "Boise",
    "Portland",
    "Bend",
    "Redmond",
    "Seattle",
    "Kent",
    "Cheyenne",
];
/// First names of people (Beam's `FIRST_NAMES`).
pub const FIRST_NAMES: [&str; 11] = [
    "Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah", "Deiter", "Walter",
];
/// Last names of people (Beam's `LAST_NAMES`).
pub const LAST_NAMES: [&str; 9] = [
    "Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones", "Noris",
];

/// Length of a formatted credit card number, `"dddd dddd dddd dddd"`.
const CREDIT_CARD_LEN: usize = 19;
/// Salt separating the per-event streams from the text stream.
const EVENT_SALT: u64 = 0x6e65_786d_6172_6b21; // "nexmark!"

/// Generates Nexmark events by number. Built once per config (it owns the random text the
/// strings are cut from, ~1 MiB with the default sizes); cheap to share behind an `Arc`.
pub struct Generator {
    config: GeneratorConfig,
    /// The mixed seed every event's PRNG stream is derived from.
    key: u64,
    text: Text,
    /// Beam's `numEventsForAuctions`: how many events it takes to generate
    /// `num_in_flight_auctions` more auctions; sets the average auction length.
    events_for_auctions: u64,
}

impl std::fmt::Debug for Generator {
    /// The config only: the random text is large and says nothing a reader needs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Generator")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Generator {
    /// Builds a generator.
    ///
    /// # Panics
    ///
    /// If the config is invalid (see [`GeneratorConfig::validate`]); use [`Generator::try_new`]
    /// for configs that come from users.
    pub fn new(config: GeneratorConfig) -> Self {
        match Self::try_new(config) {
            Ok(generator) => generator,
            Err(error) => panic!("{error}"),
        }
    }

    /// Builds a generator, or reports every problem with the config.
    pub fn try_new(config: GeneratorConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        let max_avg = config
            .avg_person_bytes
            .max(config.avg_auction_bytes)
            .max(config.avg_bid_bytes) as usize;
        // `next_extra` never asks for more than 1.2 × the average (plus rounding).
        let max_extra = max_avg + max_avg / 5 + 2;
        Ok(Generator {
            key: mix64(config.seed ^ EVENT_SALT),
            text: Text::new(config.seed, max_extra),
            events_for_auctions: config
                .num_in_flight_auctions
                .saturating_mul(PROPORTION_DENOMINATOR)
                / AUCTION_PROPORTION,
            config,
        })
    }

    pub fn config(&self) -> &GeneratorConfig {
        &self.config
    }

    /// The type of event `n`: a person when `n % 50 == 0`, an auction when it is 1 to 3, else a bid.
    #[inline]
    pub fn kind(n: u64) -> EventKind {
        let offset = n % PROPORTION_DENOMINATOR;
        if offset < PERSON_PROPORTION {
            EventKind::Person
        } else if offset < PERSON_PROPORTION + AUCTION_PROPORTION {
            EventKind::Auction
        } else {
            EventKind::Bid
        }
    }

    /// Event `n`, allocated. The reference path: the batch path builds exactly these values.
    pub fn event(&self, n: u64) -> Event {
        match Self::kind(n) {
            EventKind::Person => Event::Person(self.person_view(n).to_person()),
            EventKind::Auction => Event::Auction(self.auction_view(n).to_auction()),
            EventKind::Bid => Event::Bid(self.bid_view(n).to_bid()),
        }
    }

    /// The event time of event `n`: `base_time_ms + floor(n * inter_event_delay_ns / 1e6)`,
    /// saturating at `i64::MAX`.
    #[inline]
    pub fn event_time(&self, n: u64) -> i64 {
        let delay = self.config.inter_event_delay_ns;
        let ms = match n.checked_mul(delay) {
            Some(ns) => ns / 1_000_000,
            None => {
                u64::try_from(u128::from(n) * u128::from(delay) / 1_000_000).unwrap_or(u64::MAX)
            }
        };
        self.config.base_time_ms.saturating_add_unsigned(ms)
    }

    #[inline]
    fn rng(&self, n: u64) -> Rng {
        Rng::new(self.key, n)
    }

    /// Person event `n` (meaningful when `kind(n)` is `Person`), borrowed.
    pub(crate) fn person_view(&self, n: u64) -> PersonView<'_> {
        let mut rng = self.rng(n);
        let id = FIRST_PERSON_ID + last_base0_person_id(n) as i64;
        let first_name = FIRST_NAMES[rng.index(FIRST_NAMES.len())];
        let last_name = LAST_NAMES[rng.index(LAST_NAMES.len())];
        let email_user = self.text.next_string(&mut rng, 7);
        let email_domain = self.text.next_string(&mut rng, 5);
        let credit_card = std::array::from_fn(|_| rng.below(10_000) as u16);
        let city = US_CITIES[rng.index(US_CITIES.len())];
        let state = US_STATES[rng.index(US_STATES.len())];
        let mut view = PersonView {
            id,
            first_name,
            last_name,
            email_user,
            email_domain,
            credit_card,
            city,
            state,
            date_time: self.event_time(n),
            extra: "",
        };
        let current = person_base_size(
            view.name_len(),
            view.email_len(),
            CREDIT_CARD_LEN,
            city.len(),
            state.len(),
        );
        view.extra = self.next_extra(&mut rng, current, self.config.avg_person_bytes);
        view
    }

    /// Auction event `n` (meaningful when `kind(n)` is `Auction`), borrowed.
    pub(crate) fn auction_view(&self, n: u64) -> AuctionView<'_> {
        let config = &self.config;
        let mut rng = self.rng(n);
        let id = FIRST_AUCTION_ID + last_base0_auction_id(n) as i64;
        let seller = if rng.below(config.hot_seller_ratio) > 0 {
            // The first person of the current batch of HOT_SELLER_BATCH people.
            (last_base0_person_id(n) / HOT_SELLER_BATCH) * HOT_SELLER_BATCH
        } else {
            self.next_base0_person_id(n, &mut rng)
        };
        let category = FIRST_CATEGORY_ID + rng.below(NUM_CATEGORIES) as i64;
        let initial_bid = next_price(&mut rng);
        let date_time = self.event_time(n);
        let expires = date_time.saturating_add(self.next_auction_length_ms(n, date_time, &mut rng));
        let item_name = self.text.next_string(&mut rng, 20);
        let description = self.text.next_string(&mut rng, 100);
        let reserve = initial_bid + next_price(&mut rng);
        let current = auction_base_size(item_name.len(), description.len());
        let extra = self.next_extra(&mut rng, current, config.avg_auction_bytes);
        AuctionView {
            id,
            item_name,
            description,
            initial_bid,
            reserve,
            date_time,
            expires,
            seller: FIRST_PERSON_ID + seller as i64,
            category,
            extra,
        }
    }

    /// Bid event `n` (meaningful when `kind(n)` is `Bid`), borrowed.
    #[inline]
    pub(crate) fn bid_view(&self, n: u64) -> BidView<'_> {
        let config = &self.config;
        let mut rng = self.rng(n);
        let auction = if rng.below(config.hot_auction_ratio) > 0 {
            // The first auction of the current batch of HOT_AUCTION_BATCH auctions.
            (last_base0_auction_id(n) / HOT_AUCTION_BATCH) * HOT_AUCTION_BATCH
        } else {
            self.next_base0_auction_id(n, &mut rng)
        };
        let bidder = if rng.below(config.hot_bidder_ratio) > 0 {
            // The second person of the current batch (so hot bidders are not hot sellers).
            (last_base0_person_id(n) / HOT_BIDDER_BATCH) * HOT_BIDDER_BATCH + 1
        } else {
            self.next_base0_person_id(n, &mut rng)
        };
        let price = next_price(&mut rng);
        let (channel, url) = self.text.channel(&mut rng);
        let extra = self.next_extra(&mut rng, BID_BASE_SIZE, config.avg_bid_bytes);
        BidView {
            auction: FIRST_AUCTION_ID + auction as i64,
            bidder: FIRST_PERSON_ID + bidder as i64,
            price,
            channel,
            url,
            date_time: self.event_time(n),
            extra,
        }
    }

    /// Beam's `nextBase0PersonId`: uniform over the last `num_active_people` people plus
    /// [`PERSON_ID_LEAD`] not yet generated (so a bid or auction may precede its person).
    #[inline]
    fn next_base0_person_id(&self, n: u64, rng: &mut Rng) -> u64 {
        let num_people = last_base0_person_id(n) + 1;
        let active = num_people.min(self.config.num_active_people);
        num_people - active + rng.below(active + PERSON_ID_LEAD)
    }

    /// Beam's `nextBase0AuctionId`: uniform over the last `num_in_flight_auctions` auctions
    /// (and the current one) plus [`AUCTION_ID_LEAD`] not yet generated.
    #[inline]
    fn next_base0_auction_id(&self, n: u64, rng: &mut Rng) -> u64 {
        let max = last_base0_auction_id(n);
        let min = max.saturating_sub(self.config.num_in_flight_auctions);
        min + rng.below(max - min + 1 + AUCTION_ID_LEAD)
    }

    /// Beam's `nextAuctionLengthMs`: uniform in `1..=2h`, where `h` is the event time until the
    /// auction `num_in_flight_auctions` later is generated, so the average length is about `h`.
    fn next_auction_length_ms(&self, n: u64, date_time: i64, rng: &mut Rng) -> i64 {
        let future = self.event_time(n.saturating_add(self.events_for_auctions));
        let horizon = future.saturating_sub(date_time).max(0) as u64;
        1 + rng.below(horizon.saturating_mul(2).max(1)) as i64
    }

    /// Beam's `nextExtra`: lowercase padding so that `current + extra.len()` averages `avg`
    /// (uniform in `[0.8, 1.2)` × what is missing); empty when `current` already exceeds `avg`.
    #[inline]
    fn next_extra(&self, rng: &mut Rng, current: usize, avg: u64) -> &str {
        // `validate` bounds `avg` by MAX_AVG_BYTES, so it fits a usize.
        let avg = avg as usize;
        if current > avg {
            return "";
        }
        let desired = avg - current;
        // Java's Math.round(desired * 0.2), exactly, in integers.
        let delta = (2 * desired + 5) / 10;
        let size = desired - delta + if delta == 0 { 0 } else { rng.index(2 * delta) };
        self.text.exact_string(rng, size)
    }
}

/// Beam's `PriceGenerator.nextPrice`: `round(10^(6u) × 100)` cents for uniform `u`, so prices
/// range from $1 to $1,000,000, log-uniformly.
///
/// `10^x` is computed as `e^(x ln 10)`: a profile of Nexmark q1 showed `pow` taking a third of
/// the generator's time, and `exp` gives the same distribution at about a third of the cost.
#[inline]
fn next_price(rng: &mut Rng) -> i64 {
    ((rng.next_f64() * 6.0 * std::f64::consts::LN_10).exp() * 100.0).round() as i64
}

/// Beam's `lastBase0PersonId`: the 0-based id of the last person generated at or before event `n`.
#[inline]
pub(crate) fn last_base0_person_id(n: u64) -> u64 {
    let epoch = n / PROPORTION_DENOMINATOR;
    let offset = n % PROPORTION_DENOMINATOR;
    if offset < PERSON_PROPORTION {
        // A person: this one.
        epoch * PERSON_PROPORTION + offset
    } else {
        // An auction or a bid: the last person of this epoch.
        epoch * PERSON_PROPORTION + PERSON_PROPORTION - 1
    }
}

/// Beam's `lastBase0AuctionId`: the 0-based id of the last auction generated at or before event
/// `n`. (Before the first auction Beam returns -1; this saturates at 0. Only auctions and bids
/// use it, and they always follow an auction of their epoch.)
#[inline]
pub(crate) fn last_base0_auction_id(n: u64) -> u64 {
    let epoch = n / PROPORTION_DENOMINATOR;
    let offset = n % PROPORTION_DENOMINATOR;
    if offset < PERSON_PROPORTION {
        // A person: the last auction of the previous epoch.
        (epoch * AUCTION_PROPORTION).saturating_sub(1)
    } else if offset < PERSON_PROPORTION + AUCTION_PROPORTION {
        // An auction: this one.
        epoch * AUCTION_PROPORTION + offset - PERSON_PROPORTION
    } else {
        // A bid: the last auction of this epoch.
        epoch * AUCTION_PROPORTION + AUCTION_PROPORTION - 1
    }
}

/// A person event whose strings borrow from the generator (or are static).
#[derive(Debug, Clone, Copy)]
pub(crate) struct PersonView<'g> {
    pub id: i64,
    pub first_name: &'static str,
    pub last_name: &'static str,
    /// The email address is `email_user@email_domain.com`.
    pub email_user: &'g str,
    pub email_domain: &'g str,
    /// The four groups of four digits.
    pub credit_card: [u16; 4],
    pub city: &'static str,
    pub state: &'static str,
    pub date_time: i64,
    pub extra: &'g str,
}

impl PersonView<'_> {
    fn name_len(&self) -> usize {
        self.first_name.len() + 1 + self.last_name.len()
    }

    fn email_len(&self) -> usize {
        self.email_user.len() + 1 + self.email_domain.len() + ".com".len()
    }

    /// Appends `"First Last"`.
    pub(crate) fn push_name(&self, out: &mut String) {
        out.push_str(self.first_name);
        out.push(' ');
        out.push_str(self.last_name);
    }

    /// Appends `"user@domain.com"`.
    pub(crate) fn push_email(&self, out: &mut String) {
        out.push_str(self.email_user);
        out.push('@');
        out.push_str(self.email_domain);
        out.push_str(".com");
    }

    /// Appends `"dddd dddd dddd dddd"`.
    pub(crate) fn push_credit_card(&self, out: &mut String) {
        for (i, group) in self.credit_card.iter().enumerate() {
            if i > 0 {
                out.push(' ');
            }
            for divisor in [1000, 100, 10, 1] {
                out.push(char::from(b'0' + (group / divisor % 10) as u8));
            }
        }
    }

    pub(crate) fn to_person(self) -> Person {
        let mut name = String::with_capacity(self.name_len());
        self.push_name(&mut name);
        let mut email_address = String::with_capacity(self.email_len());
        self.push_email(&mut email_address);
        let mut credit_card = String::with_capacity(CREDIT_CARD_LEN);
        self.push_credit_card(&mut credit_card);
        Person {
            id: self.id,
            name,
            email_address,
            credit_card,
            city: self.city.to_owned(),
            state: self.state.to_owned(),
            date_time: self.date_time,
            extra: self.extra.to_owned(),
        }
    }
}

/// An auction event whose strings borrow from the generator.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AuctionView<'g> {
    pub id: i64,
    pub item_name: &'g str,
    pub description: &'g str,
    pub initial_bid: i64,
    pub reserve: i64,
    pub date_time: i64,
    pub expires: i64,
    pub seller: i64,
    pub category: i64,
    pub extra: &'g str,
}

impl AuctionView<'_> {
    pub(crate) fn to_auction(self) -> Auction {
        Auction {
            id: self.id,
            item_name: self.item_name.to_owned(),
            description: self.description.to_owned(),
            initial_bid: self.initial_bid,
            reserve: self.reserve,
            date_time: self.date_time,
            expires: self.expires,
            seller: self.seller,
            category: self.category,
            extra: self.extra.to_owned(),
        }
    }
}

/// A bid event whose strings borrow from the generator (or are static).
#[derive(Debug, Clone, Copy)]
pub(crate) struct BidView<'g> {
    pub auction: i64,
    pub bidder: i64,
    pub price: i64,
    pub channel: &'g str,
    pub url: &'g str,
    pub date_time: i64,
    pub extra: &'g str,
}

impl BidView<'_> {
    pub(crate) fn to_bid(self) -> Bid {
        Bid {
            auction: self.auction,
            bidder: self.bidder,
            price: self.price,
            channel: self.channel.to_owned(),
            url: self.url.to_owned(),
            date_time: self.date_time,
            extra: self.extra.to_owned(),
        }
    }
}
