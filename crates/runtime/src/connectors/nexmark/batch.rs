//! Arrow output: the three event schemas and [`Split`], the events of one parallel subtask
//! built straight into Arrow arrays.

use std::sync::{Arc, OnceLock};

use arrow_array::builder::StringBuilder;
use arrow_array::{ArrayRef, Int64Array, RecordBatch, TimestampMillisecondArray};
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};

use super::generator::{AuctionView, BidView, Generator, PersonView};
use super::model::EventKind;

fn int64(name: &str) -> Field {
    Field::new(name, DataType::Int64, true)
}

fn utf8(name: &str) -> Field {
    Field::new(name, DataType::Utf8, true)
}

fn timestamp(name: &str) -> Field {
    Field::new(name, DataType::Timestamp(TimeUnit::Millisecond, None), true)
}

/// Arrow schema of person events: `id, name, emailAddress, creditCard, city, state, dateTime, extra`.
pub fn person_schema() -> SchemaRef {
    static SCHEMA: OnceLock<SchemaRef> = OnceLock::new();
    SCHEMA
        .get_or_init(|| {
            Arc::new(Schema::new(vec![
                int64("id"),
                utf8("name"),
                utf8("emailAddress"),
                utf8("creditCard"),
                utf8("city"),
                utf8("state"),
                timestamp("dateTime"),
                utf8("extra"),
            ]))
        })
        .clone()
}

/// Arrow schema of auction events: `id, itemName, description, initialBid, reserve, dateTime,
/// expires, seller, category, extra`.
pub fn auction_schema() -> SchemaRef {
    static SCHEMA: OnceLock<SchemaRef> = OnceLock::new();
    SCHEMA
        .get_or_init(|| {
            Arc::new(Schema::new(vec![
                int64("id"),
                utf8("itemName"),
                utf8("description"),
                int64("initialBid"),
                int64("reserve"),
                timestamp("dateTime"),
                timestamp("expires"),
                int64("seller"),
                int64("category"),
                utf8("extra"),
            ]))
        })
        .clone()
}

/// Arrow schema of bid events: `auction, bidder, price, channel, url, dateTime, extra`.
pub fn bid_schema() -> SchemaRef {
    static SCHEMA: OnceLock<SchemaRef> = OnceLock::new();
    SCHEMA
        .get_or_init(|| {
            Arc::new(Schema::new(vec![
                int64("auction"),
                int64("bidder"),
                int64("price"),
                utf8("channel"),
                utf8("url"),
                timestamp("dateTime"),
                utf8("extra"),
            ]))
        })
        .clone()
}

/// Which event types to build. Events of the other types are still consumed (they count in
/// [`GeneratedBatch::events`] and the split's position), just never generated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kinds {
    pub person: bool,
    pub auction: bool,
    pub bid: bool,
}

impl Kinds {
    /// All three types.
    pub const ALL: Kinds = Kinds {
        person: true,
        auction: true,
        bid: true,
    };

    /// Only `kind`.
    pub fn only(kind: EventKind) -> Kinds {
        Kinds {
            person: kind == EventKind::Person,
            auction: kind == EventKind::Auction,
            bid: kind == EventKind::Bid,
        }
    }

    /// Whether events of `kind` are wanted.
    pub fn contains(self, kind: EventKind) -> bool {
        match kind {
            EventKind::Person => self.person,
            EventKind::Auction => self.auction,
            EventKind::Bid => self.bid,
        }
    }
}

/// The output of one [`Split::next_batch`] call.
#[derive(Debug, Clone, Default)]
pub struct GeneratedBatch {
    /// Person rows ([`person_schema`]), `None` when not wanted or when there were none.
    pub person: Option<RecordBatch>,
    /// Auction rows ([`auction_schema`]), `None` when not wanted or when there were none.
    pub auction: Option<RecordBatch>,
    /// Bid rows ([`bid_schema`]), `None` when not wanted or when there were none.
    pub bid: Option<RecordBatch>,
    /// Events consumed, of every type, wanted or not; the split's position advanced by this.
    pub events: u64,
    /// Event time of the last event consumed (wanted or not), the largest of the batch since
    /// event time never decreases with `n`; `None` when no event was consumed. A source can
    /// emit it as its watermark (the out-of-orderness is 0).
    pub max_event_time: Option<i64>,
}

/// The events of one parallel subtask: event numbers `n ≡ subtask (mod parallelism)` in
/// increasing order, below an optional global total. Subtasks `0..parallelism` together produce
/// every event exactly once; a split's state is its [`position`](Split::position) alone.
#[derive(Debug, Clone)]
pub struct Split {
    generator: Arc<Generator>,
    subtask: u64,
    parallelism: u64,
    /// Exclusive bound on event numbers, for bounded runs.
    total_events: Option<u64>,
    /// Events this split has emitted so far; the next event is `subtask + position * parallelism`.
    position: u64,
}

impl Split {
    /// # Panics
    ///
    /// If `parallelism` is 0 or `subtask >= parallelism`.
    pub fn new(
        generator: Arc<Generator>,
        subtask: usize,
        parallelism: usize,
        total_events: Option<u64>,
    ) -> Self {
        assert!(
            parallelism > 0,
            "Nexmark split parallelism must be at least 1"
        );
        assert!(
            subtask < parallelism,
            "Nexmark split subtask {subtask} is out of range for parallelism {parallelism}"
        );
        Split {
            generator,
            subtask: subtask as u64,
            parallelism: parallelism as u64,
            total_events,
            position: 0,
        }
    }

    pub fn generator(&self) -> &Arc<Generator> {
        &self.generator
    }

    /// How many events this split has emitted: its checkpointable state. Restore with [`seek`](Split::seek).
    pub fn position(&self) -> u64 {
        self.position
    }

    /// Which split of how many this is.
    pub fn index(&self) -> u64 {
        self.subtask
    }

    pub fn of(&self) -> u64 {
        self.parallelism
    }

    /// The number of the next event this split emits (its order in event time).
    pub fn next_event(&self) -> u64 {
        self.event_number(self.position)
    }

    /// Continues from `position` (as returned by [`position`](Split::position)), forwards or backwards.
    pub fn seek(&mut self, position: u64) {
        self.position = position;
    }

    /// Whether every event of this split below the total has been emitted (never, if unbounded).
    pub fn is_done(&self) -> bool {
        self.remaining() == Some(0)
    }

    /// How many events this split has left, `None` when unbounded.
    pub fn remaining(&self) -> Option<u64> {
        let total = self.total_events?;
        // Events of this split below `total`: n = subtask + k * parallelism < total.
        let all = total
            .saturating_sub(self.subtask)
            .div_ceil(self.parallelism);
        Some(all.saturating_sub(self.position))
    }

    /// The event number at `position`.
    fn event_number(&self, position: u64) -> u64 {
        position
            .saturating_mul(self.parallelism)
            .saturating_add(self.subtask)
    }

    /// Generates the next up to `max_events` events of this split (fewer only at the end of a
    /// bounded split), building Arrow batches for the kinds in `want`; events of other kinds are
    /// consumed without being generated.
    ///
    /// Each string column holds at most 2 GiB; with the default sizes that is millions of events,
    /// but keep `max_events` moderate (thousands) for large configured sizes.
    pub fn next_batch(&mut self, max_events: usize, want: Kinds) -> GeneratedBatch {
        let count = match self.remaining() {
            Some(remaining) => remaining.min(max_events as u64),
            None => max_events as u64,
        };
        if count == 0 {
            return GeneratedBatch::default();
        }
        let first = self.position;
        let numbers = (first..first + count).map(|p| self.event_number(p));

        let (mut persons, mut auctions, mut bids) = (0, 0, 0);
        for n in numbers.clone() {
            match Generator::kind(n) {
                EventKind::Person => persons += 1,
                EventKind::Auction => auctions += 1,
                EventKind::Bid => bids += 1,
            }
        }
        let generator = &*self.generator;
        let config = generator.config();
        let mut person = (want.person && persons > 0)
            .then(|| PersonColumns::with_capacity(persons, config.avg_person_bytes as usize));
        let mut auction = (want.auction && auctions > 0)
            .then(|| AuctionColumns::with_capacity(auctions, config.avg_auction_bytes as usize));
        let mut bid = (want.bid && bids > 0)
            .then(|| BidColumns::with_capacity(bids, config.avg_bid_bytes as usize));

        for n in numbers {
            match Generator::kind(n) {
                EventKind::Person => {
                    if let Some(columns) = &mut person {
                        columns.push(&generator.person_view(n));
                    }
                }
                EventKind::Auction => {
                    if let Some(columns) = &mut auction {
                        columns.push(&generator.auction_view(n));
                    }
                }
                EventKind::Bid => {
                    if let Some(columns) = &mut bid {
                        columns.push(&generator.bid_view(n));
                    }
                }
            }
        }

        let last = self.event_number(first + count - 1);
        self.position = first + count;
        GeneratedBatch {
            person: person.map(PersonColumns::finish),
            auction: auction.map(AuctionColumns::finish),
            bid: bid.map(BidColumns::finish),
            events: count,
            max_event_time: Some(generator.event_time(last)),
        }
    }
}

/// Wraps finished columns in a batch of `schema`.
fn record_batch(schema: SchemaRef, columns: Vec<ArrayRef>) -> RecordBatch {
    // The column types and lengths match the schema by construction (the builders below push
    // one value per column per row), so failing here is a bug in this module.
    RecordBatch::try_new(schema, columns).expect("Nexmark columns match their schema")
}

fn int64_column(values: Vec<i64>) -> ArrayRef {
    Arc::new(Int64Array::from(values))
}

fn timestamp_column(values: Vec<i64>) -> ArrayRef {
    Arc::new(TimestampMillisecondArray::from(values))
}

fn string_column(mut builder: StringBuilder) -> ArrayRef {
    Arc::new(builder.finish())
}

struct PersonColumns {
    id: Vec<i64>,
    name: StringBuilder,
    email_address: StringBuilder,
    credit_card: StringBuilder,
    city: StringBuilder,
    state: StringBuilder,
    date_time: Vec<i64>,
    extra: StringBuilder,
    /// Reused for the strings assembled from pieces (name, email, credit card).
    scratch: String,
}

impl PersonColumns {
    fn with_capacity(rows: usize, avg_bytes: usize) -> Self {
        PersonColumns {
            id: Vec::with_capacity(rows),
            name: StringBuilder::with_capacity(rows, rows * 13),
            email_address: StringBuilder::with_capacity(rows, rows * 16),
            credit_card: StringBuilder::with_capacity(rows, rows * 19),
            city: StringBuilder::with_capacity(rows, rows * 10),
            state: StringBuilder::with_capacity(rows, rows * 2),
            date_time: Vec::with_capacity(rows),
            extra: StringBuilder::with_capacity(rows, rows * avg_bytes),
            scratch: String::with_capacity(32),
        }
    }

    fn push(&mut self, person: &PersonView<'_>) {
        self.id.push(person.id);
        self.scratch.clear();
        person.push_name(&mut self.scratch);
        self.name.append_value(&self.scratch);
        self.scratch.clear();
        person.push_email(&mut self.scratch);
        self.email_address.append_value(&self.scratch);
        self.scratch.clear();
        person.push_credit_card(&mut self.scratch);
        self.credit_card.append_value(&self.scratch);
        self.city.append_value(person.city);
        self.state.append_value(person.state);
        self.date_time.push(person.date_time);
        self.extra.append_value(person.extra);
    }

    fn finish(self) -> RecordBatch {
        record_batch(
            person_schema(),
            vec![
                int64_column(self.id),
                string_column(self.name),
                string_column(self.email_address),
                string_column(self.credit_card),
                string_column(self.city),
                string_column(self.state),
                timestamp_column(self.date_time),
                string_column(self.extra),
            ],
        )
    }
}

struct AuctionColumns {
    id: Vec<i64>,
    item_name: StringBuilder,
    description: StringBuilder,
    initial_bid: Vec<i64>,
    reserve: Vec<i64>,
    date_time: Vec<i64>,
    expires: Vec<i64>,
    seller: Vec<i64>,
    category: Vec<i64>,
    extra: StringBuilder,
}

impl AuctionColumns {
    fn with_capacity(rows: usize, avg_bytes: usize) -> Self {
        AuctionColumns {
            id: Vec::with_capacity(rows),
            item_name: StringBuilder::with_capacity(rows, rows * 10),
            description: StringBuilder::with_capacity(rows, rows * 52),
            initial_bid: Vec::with_capacity(rows),
            reserve: Vec::with_capacity(rows),
            date_time: Vec::with_capacity(rows),
            expires: Vec::with_capacity(rows),
            seller: Vec::with_capacity(rows),
            category: Vec::with_capacity(rows),
            extra: StringBuilder::with_capacity(rows, rows * avg_bytes),
        }
    }

    fn push(&mut self, auction: &AuctionView<'_>) {
        self.id.push(auction.id);
        self.item_name.append_value(auction.item_name);
        self.description.append_value(auction.description);
        self.initial_bid.push(auction.initial_bid);
        self.reserve.push(auction.reserve);
        self.date_time.push(auction.date_time);
        self.expires.push(auction.expires);
        self.seller.push(auction.seller);
        self.category.push(auction.category);
        self.extra.append_value(auction.extra);
    }

    fn finish(self) -> RecordBatch {
        record_batch(
            auction_schema(),
            vec![
                int64_column(self.id),
                string_column(self.item_name),
                string_column(self.description),
                int64_column(self.initial_bid),
                int64_column(self.reserve),
                timestamp_column(self.date_time),
                timestamp_column(self.expires),
                int64_column(self.seller),
                int64_column(self.category),
                string_column(self.extra),
            ],
        )
    }
}

struct BidColumns {
    auction: Vec<i64>,
    bidder: Vec<i64>,
    price: Vec<i64>,
    channel: StringBuilder,
    url: StringBuilder,
    date_time: Vec<i64>,
    extra: StringBuilder,
}

impl BidColumns {
    fn with_capacity(rows: usize, avg_bytes: usize) -> Self {
        BidColumns {
            auction: Vec::with_capacity(rows),
            bidder: Vec::with_capacity(rows),
            price: Vec::with_capacity(rows),
            channel: StringBuilder::with_capacity(rows, rows * 12),
            url: StringBuilder::with_capacity(rows, rows * 72),
            date_time: Vec::with_capacity(rows),
            extra: StringBuilder::with_capacity(rows, rows * avg_bytes),
        }
    }

    #[inline]
    fn push(&mut self, bid: &BidView<'_>) {
        self.auction.push(bid.auction);
        self.bidder.push(bid.bidder);
        self.price.push(bid.price);
        self.channel.append_value(bid.channel);
        self.url.append_value(bid.url);
        self.date_time.push(bid.date_time);
        self.extra.append_value(bid.extra);
    }

    fn finish(self) -> RecordBatch {
        record_batch(
            bid_schema(),
            vec![
                int64_column(self.auction),
                int64_column(self.bidder),
                int64_column(self.price),
                string_column(self.channel),
                string_column(self.url),
                timestamp_column(self.date_time),
                string_column(self.extra),
            ],
        )
    }
}
