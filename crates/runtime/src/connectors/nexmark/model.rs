//! The Nexmark data model: people who sell and bid, auctions they open, bids on those auctions.
//!
//! Field names follow the Apache Beam / Flink Nexmark model (in snake case here; the Arrow
//! schemas and JSON lines use the camel-case names of `SCHEMA.md`).

/// Which of the three Nexmark event types an event number produces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventKind {
    Person,
    Auction,
    Bid,
}

impl EventKind {
    /// The lowercase name used as the `"type"` of a JSON line (`person`, `auction`, `bid`).
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Person => "person",
            EventKind::Auction => "auction",
            EventKind::Bid => "bid",
        }
    }
}

/// A new person registering with the auction site.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Person {
    /// Person id, from [`FIRST_PERSON_ID`](super::FIRST_PERSON_ID) up, one per person event.
    pub id: i64,
    /// `"First Last"` from small fixed lists of names.
    pub name: String,
    pub email_address: String,
    /// Sixteen digits in four groups: `"dddd dddd dddd dddd"`.
    pub credit_card: String,
    pub city: String,
    /// A US state code, one of [`US_STATES`](super::US_STATES).
    pub state: String,
    /// Event time, epoch milliseconds.
    pub date_time: i64,
    /// Random lowercase padding so the average size is `avg_person_bytes`.
    pub extra: String,
}

/// A new auction opened by a seller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Auction {
    /// Auction id, from [`FIRST_AUCTION_ID`](super::FIRST_AUCTION_ID) up, one per auction event.
    pub id: i64,
    pub item_name: String,
    pub description: String,
    /// Cents.
    pub initial_bid: i64,
    /// Cents; always above `initial_bid`.
    pub reserve: i64,
    /// Event time, epoch milliseconds.
    pub date_time: i64,
    /// Epoch milliseconds when the auction closes; always after `date_time`.
    pub expires: i64,
    /// A person id (possibly of a person generated a little later: Beam's "lead").
    pub seller: i64,
    /// 10 to 14.
    pub category: i64,
    /// Random lowercase padding so the average size is `avg_auction_bytes`.
    pub extra: String,
}

/// A bid on an auction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bid {
    /// An auction id (possibly of an auction generated a little later: Beam's "lead").
    pub auction: i64,
    /// A person id (possibly of a person generated a little later: Beam's "lead").
    pub bidder: i64,
    /// Cents.
    pub price: i64,
    /// One of four hot channels (`Google`, `Facebook`, `Baidu`, `Apple`) or `channel-<k>`.
    pub channel: String,
    pub url: String,
    /// Event time, epoch milliseconds.
    pub date_time: i64,
    /// Random lowercase padding so the average size is `avg_bid_bytes`.
    pub extra: String,
}

/// One Nexmark event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    Person(Person),
    Auction(Auction),
    Bid(Bid),
}

impl Event {
    /// The event's type.
    pub fn kind(&self) -> EventKind {
        match self {
            Event::Person(_) => EventKind::Person,
            Event::Auction(_) => EventKind::Auction,
            Event::Bid(_) => EventKind::Bid,
        }
    }

    /// The event time, epoch milliseconds.
    pub fn date_time(&self) -> i64 {
        match self {
            Event::Person(p) => p.date_time,
            Event::Auction(a) => a.date_time,
            Event::Bid(b) => b.date_time,
        }
    }

    /// The size the generator aims at, counted as Beam's generator counts it (see the types'
    /// `size_in_bytes`); its average over many events is the configured average size.
    pub fn size_in_bytes(&self) -> usize {
        match self {
            Event::Person(p) => p.size_in_bytes(),
            Event::Auction(a) => a.size_in_bytes(),
            Event::Bid(b) => b.size_in_bytes(),
        }
    }
}

impl Person {
    /// Beam's accounting: 8 (id) + the lengths of name, email, credit card, city and state,
    /// plus `extra`. No JSON overhead.
    pub fn size_in_bytes(&self) -> usize {
        person_base_size(
            self.name.len(),
            self.email_address.len(),
            self.credit_card.len(),
            self.city.len(),
            self.state.len(),
        ) + self.extra.len()
    }
}

impl Auction {
    /// Beam's accounting: 8 (id) + item name + description + 5 × 8 (the other numbers), plus
    /// `extra`. No JSON overhead.
    pub fn size_in_bytes(&self) -> usize {
        auction_base_size(self.item_name.len(), self.description.len()) + self.extra.len()
    }
}

impl Bid {
    /// Beam's accounting: 4 × 8 (the numbers; channel and url are not counted), plus `extra`.
    /// No JSON overhead.
    pub fn size_in_bytes(&self) -> usize {
        BID_BASE_SIZE + self.extra.len()
    }
}

/// Size of a person before `extra`, as Beam's `PersonGenerator` counts it.
pub(crate) fn person_base_size(
    name: usize,
    email: usize,
    credit_card: usize,
    city: usize,
    state: usize,
) -> usize {
    8 + name + email + credit_card + city + state
}

/// Size of an auction before `extra`, as Beam's `AuctionGenerator` counts it.
pub(crate) fn auction_base_size(item_name: usize, description: usize) -> usize {
    8 + item_name + description + 8 + 8 + 8 + 8 + 8
}

/// Size of a bid before `extra`, as Beam's `BidGenerator` counts it.
pub(crate) const BID_BASE_SIZE: usize = 8 + 8 + 8 + 8;
