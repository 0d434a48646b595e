//! Reference implementations of Nexmark q3 to q9, q11 and q14 to q22, written as plain
//! loops over a slice of events, that weir's end-to-end tests compare the engine's output with.
//!
//! Each query follows the "Query semantics" table of `SCHEMA.md` (windows aligned to the epoch,
//! the end of the input fires every open window) and returns its rows as JSON objects with
//! exactly the schema's output column names, in no particular order: callers compare multisets.
//! Every result is a function of the *multiset* of events, never of their order, so the same
//! reference checks a job however its input was ordered; [`shuffle_within`] makes such input.
//!
//! # Why this must stay independent of weir
//!
//! A reference that shares code with the engine shares its bugs, and the comparison then proves
//! nothing. So nothing here uses weir's operators, expressions, planner or JSON decoder: only
//! `std` collections, sorting and `serde_json`. The one thing taken from `weir_runtime` is the
//! generator's plain data model ([`Event`], [`Person`], [`Auction`], [`Bid`]) and, in the tests,
//! the generator itself and its JSON-lines writer (to check that [`parse_line`] reads that
//! format). Keep it that way: when a query here and the engine disagree, the disagreement must be
//! worth investigating from both sides.
//!
//! # Layout
//!
//! - Input: [`parse_line`] (one `SCHEMA.md` JSON line to an [`Event`], by hand) and
//!   [`shuffle_within`] (seeded, bounded out-of-orderness).
//! - Queries: [`q3`] to [`q9`], [`q11`] and [`q14`] to [`q22`], each one function; q4, q6 and
//!   q9 share `auctions_with_valid_bids`, the "bids that count for an auction" rule; q15 to
//!   q17 read days and hours by `civil_date`, in UTC, by hand. An updating query (q15 to q19)
//!   returns its final table.
//! - `tests`: hand-made inputs with hand-computed rows for every query and edge the table
//!   names, then the shuffle's properties and order independence on generated events.
//!
//! # Decisions the table leaves open
//!
//! - Ids are not assumed unique: q3 emits one row per matching (auction event, person event)
//!   pair, and q4, q6 and q9 treat every auction event as its own auction. The generator's ids
//!   are unique, so this only matters for hand-made input.
//! - Bids, auctions and people referring to ids that never appear are simply unmatched: q4, q6
//!   and q9 ignore bids on unknown auctions, q3 and q8 drop auctions of unknown sellers. q5, q7
//!   and q11 read bids only and never look at auctions or people.
//! - q8 emits distinct `(id, name, starttime)` rows (a person is registered "once per w").
//! - q9: after price, earliest `dateTime` and lowest bidder, remaining ties go to the bid with
//!   the smallest `(extra, channel, url)`, so the winner depends on the bids' contents, not on
//!   their order. Bids tied on all of those are identical in every output column.
//! - Window starts use floor division (`div_euclid`), so times before the epoch land in the
//!   window that contains them; averages are floors of exact integer means (`i128` sums).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};

use serde_json::{Value, json};
use weir_runtime::connectors::nexmark::{Auction, Bid, Event, Person};

/// q3 keeps auctions of this category.
const Q3_CATEGORY: i64 = 10;
/// q3 keeps sellers from these states.
const Q3_STATES: [&str; 3] = ["OR", "ID", "CA"];
/// q5's window length.
const Q5_SIZE_MS: i64 = 10_000;
/// q5's window slide: window starts are multiples of this.
const Q5_SLIDE_MS: i64 = 2_000;
/// q6 averages over a seller's last this-many closed auctions.
const Q6_LAST_AUCTIONS: usize = 10;
/// The tumbling window length of q7 and q8.
const TUMBLE_MS: i64 = 10_000;
/// q11's session gap: a bid more than this after the previous one opens a new session.
const SESSION_GAP_MS: i64 = 10_000;

// ---------------------------------------------------------------------------------------------
// Input
// ---------------------------------------------------------------------------------------------

/// Parses one line of `SCHEMA.md`'s JSON-lines format (`{"type":"bid","bid":{...}}`) into an
/// [`Event`], field by field through [`serde_json::Value`], without weir's decoder.
///
/// Strict on purpose, since it reads what weir writes: every field must be present with its
/// JSON type, and unknown keys are rejected. Panics with the offending line otherwise.
pub fn parse_line(line: &str) -> Event {
    let value: Value =
        serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
    let top = value
        .as_object()
        .unwrap_or_else(|| panic!("not a JSON object: {line}"));
    let kind = top
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("no string \"type\": {line}"));
    let fields: &[&str] = match kind {
        "person" => &[
            "id",
            "name",
            "emailAddress",
            "creditCard",
            "city",
            "state",
            "dateTime",
            "extra",
        ],
        "auction" => &[
            "id",
            "itemName",
            "description",
            "initialBid",
            "reserve",
            "dateTime",
            "expires",
            "seller",
            "category",
            "extra",
        ],
        "bid" => &[
            "auction", "bidder", "price", "channel", "url", "dateTime", "extra",
        ],
        other => panic!("unknown event type {other:?}: {line}"),
    };
    if let Some(key) = top.keys().find(|k| *k != "type" && *k != kind) {
        panic!("unexpected key {key:?} next to \"type\": {line}");
    }
    let body = top
        .get(kind)
        .and_then(Value::as_object)
        .unwrap_or_else(|| panic!("no {kind:?} object: {line}"));
    if let Some(key) = body.keys().find(|k| !fields.contains(&k.as_str())) {
        panic!("unexpected {kind} field {key:?}: {line}");
    }
    let int = |name: &str| -> i64 {
        body.get(name)
            .and_then(Value::as_i64)
            .unwrap_or_else(|| panic!("{kind}.{name} is not an integer: {line}"))
    };
    let text = |name: &str| -> String {
        body.get(name)
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("{kind}.{name} is not a string: {line}"))
            .to_owned()
    };
    match kind {
        "person" => Event::Person(Person {
            id: int("id"),
            name: text("name"),
            email_address: text("emailAddress"),
            credit_card: text("creditCard"),
            city: text("city"),
            state: text("state"),
            date_time: int("dateTime"),
            extra: text("extra"),
        }),
        "auction" => Event::Auction(Auction {
            id: int("id"),
            item_name: text("itemName"),
            description: text("description"),
            initial_bid: int("initialBid"),
            reserve: int("reserve"),
            date_time: int("dateTime"),
            expires: int("expires"),
            seller: int("seller"),
            category: int("category"),
            extra: text("extra"),
        }),
        _ => Event::Bid(Bid {
            auction: int("auction"),
            bidder: int("bidder"),
            price: int("price"),
            channel: text("channel"),
            url: text("url"),
            date_time: int("dateTime"),
            extra: text("extra"),
        }),
    }
}

/// Reorders `events` with bounded out-of-orderness `max_delay_ms`: each event gets a seeded
/// jitter drawn uniformly from `[0, max_delay_ms]`, and events are sorted by
/// `date_time + jitter` (ties by input position). Then every event's time is at least the
/// largest time seen before it minus `max_delay_ms`: if `e'` comes before `e`,
/// `t' + j' <= t + j`, so `t' <= t + j - j' <= t + max_delay_ms`. The same `(events,
/// max_delay_ms, seed)` always gives the same order; `max_delay_ms = 0` sorts stably by time.
/// Because ties keep input order, time-ordered input comes out at most `max_delay_ms - 1` late
/// (an event needs a strictly smaller key to pass one positioned before it).
pub fn shuffle_within(events: Vec<Event>, max_delay_ms: i64, seed: u64) -> Vec<Event> {
    assert!(
        max_delay_ms >= 0,
        "max_delay_ms must not be negative, got {max_delay_ms}"
    );
    // `max_delay_ms + 1` values: fits in u64 even for i64::MAX.
    let choices = max_delay_ms.unsigned_abs() + 1;
    let mut rng = SplitMix64(seed);
    let mut keyed: Vec<(i128, usize, Event)> = events
        .into_iter()
        .enumerate()
        .map(|(position, event)| {
            let jitter = rng.below(choices);
            (
                i128::from(event.date_time()) + i128::from(jitter),
                position,
                event,
            )
        })
        .collect();
    keyed.sort_unstable_by_key(|(key, position, _)| (*key, *position));
    keyed.into_iter().map(|(_, _, event)| event).collect()
}

/// SplitMix64 (Steele, Lea and Flood): a tiny, well-mixed, seedable generator, written out here
/// so the shuffle depends on nothing but this file.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, n)` by multiply-shift (bias below `n / 2^64`, irrelevant here).
    fn below(&mut self, n: u64) -> u64 {
        let wide = u128::from(self.next()) * u128::from(n);
        u64::try_from(wide >> 64).expect("a 64-bit by 64-bit product shifted by 64 fits")
    }
}

// ---------------------------------------------------------------------------------------------
// Shared pieces
// ---------------------------------------------------------------------------------------------

fn people(events: &[Event]) -> impl Iterator<Item = &Person> {
    events.iter().filter_map(|e| match e {
        Event::Person(p) => Some(p),
        _ => None,
    })
}

fn auctions(events: &[Event]) -> impl Iterator<Item = &Auction> {
    events.iter().filter_map(|e| match e {
        Event::Auction(a) => Some(a),
        _ => None,
    })
}

fn bids(events: &[Event]) -> impl Iterator<Item = &Bid> {
    events.iter().filter_map(|e| match e {
        Event::Bid(b) => Some(b),
        _ => None,
    })
}

/// The start of the epoch-aligned window of length (or slide) `size` that contains `time`.
fn window_start(time: i64, size: i64) -> i64 {
    time.div_euclid(size) * size
}

/// The integer floor of `sum / count` (`count > 0`).
fn floor_mean(sum: i128, count: usize) -> i64 {
    let count = i128::try_from(count).expect("a count fits in i128");
    i64::try_from(sum.div_euclid(count)).expect("a mean of i64 values fits in i64")
}

/// Every auction event with the bids that count for it: `bid.auction == auction.id` and
/// `auction.dateTime <= bid.dateTime <= auction.expires`, both ends inclusive. Auctions with no
/// such bid are left out, as q4, q6 and q9 drop them.
fn auctions_with_valid_bids(events: &[Event]) -> Vec<(&Auction, Vec<&Bid>)> {
    let mut by_auction: HashMap<i64, Vec<&Bid>> = HashMap::new();
    for bid in bids(events) {
        by_auction.entry(bid.auction).or_default().push(bid);
    }
    auctions(events)
        .filter_map(|auction| {
            let valid: Vec<&Bid> = by_auction
                .get(&auction.id)
                .into_iter()
                .flatten()
                .copied()
                .filter(|b| auction.date_time <= b.date_time && b.date_time <= auction.expires)
                .collect();
            (!valid.is_empty()).then_some((auction, valid))
        })
        .collect()
}

/// The highest price among `bids` (non-empty).
fn final_price(bids: &[&Bid]) -> i64 {
    bids.iter()
        .map(|b| b.price)
        .max()
        .expect("auctions_with_valid_bids keeps only auctions with bids")
}

// ---------------------------------------------------------------------------------------------
// Queries
// ---------------------------------------------------------------------------------------------

/// q3 `{name, city, state, id}`: auctions of category 10 joined with their seller
/// (`person.id = auction.seller`) when the seller's state is OR, ID or CA; one row per
/// matching (auction, person) pair, `id` being the auction's. No time bound, so a seller who
/// registers after the auction still joins.
pub fn q3(events: &[Event]) -> Vec<Value> {
    let mut sellers: HashMap<i64, Vec<&Person>> = HashMap::new();
    for person in people(events).filter(|p| Q3_STATES.contains(&p.state.as_str())) {
        sellers.entry(person.id).or_default().push(person);
    }
    let mut rows = Vec::new();
    for auction in auctions(events).filter(|a| a.category == Q3_CATEGORY) {
        for person in sellers.get(&auction.seller).into_iter().flatten() {
            rows.push(json!({
                "name": person.name,
                "city": person.city,
                "state": person.state,
                "id": auction.id,
            }));
        }
    }
    rows
}

/// q4 `{category, avg_final}`: one row per category with at least one auction that has a final
/// price (see `auctions_with_valid_bids`); `avg_final` is the floor of the mean final price.
pub fn q4(events: &[Event]) -> Vec<Value> {
    let mut per_category: BTreeMap<i64, (i128, usize)> = BTreeMap::new();
    for (auction, bids) in auctions_with_valid_bids(events) {
        let (sum, count) = per_category.entry(auction.category).or_default();
        *sum += i128::from(final_price(&bids));
        *count += 1;
    }
    per_category
        .into_iter()
        .map(|(category, (sum, count))| {
            json!({"category": category, "avg_final": floor_mean(sum, count)})
        })
        .collect()
}

/// q5 `{auction, num, starttime, endtime}`: sliding windows `[s, s + 10 s)` with `s` a multiple
/// of 2 s, so each bid is in exactly 5 windows; per window with bids, every auction whose bid
/// count equals the window's largest count (ties kept).
pub fn q5(events: &[Event]) -> Vec<Value> {
    // window start -> auction -> bids
    let mut counts: BTreeMap<i64, BTreeMap<i64, u64>> = BTreeMap::new();
    for bid in bids(events) {
        // The windows containing t: s <= t < s + size, i.e. every slide multiple in (t - size, t].
        let mut start = window_start(bid.date_time, Q5_SLIDE_MS);
        while start > bid.date_time - Q5_SIZE_MS {
            *counts
                .entry(start)
                .or_default()
                .entry(bid.auction)
                .or_default() += 1;
            start -= Q5_SLIDE_MS;
        }
    }
    let mut rows = Vec::new();
    for (start, per_auction) in counts {
        let max = per_auction.values().copied().max().unwrap_or(0);
        for (auction, num) in per_auction {
            if num == max {
                rows.push(json!({
                    "auction": auction,
                    "num": num,
                    "starttime": start,
                    "endtime": start + Q5_SIZE_MS,
                }));
            }
        }
    }
    rows
}

/// q6 `{seller, avg_price}`: for each seller, their auctions with a final price (as in q4) in
/// closing order, `(expires, auction id)`; one row per such auction, averaging (floor) the final
/// prices of the seller's last 10 (or fewer) auctions up to and including it.
pub fn q6(events: &[Event]) -> Vec<Value> {
    // seller -> (expires, auction id, final price)
    let mut closed: BTreeMap<i64, Vec<(i64, i64, i64)>> = BTreeMap::new();
    for (auction, bids) in auctions_with_valid_bids(events) {
        closed.entry(auction.seller).or_default().push((
            auction.expires,
            auction.id,
            final_price(&bids),
        ));
    }
    let mut rows = Vec::new();
    for (seller, mut auctions) in closed {
        auctions.sort_unstable();
        let mut last: VecDeque<i64> = VecDeque::with_capacity(Q6_LAST_AUCTIONS + 1);
        for (_, _, price) in auctions {
            last.push_back(price);
            if last.len() > Q6_LAST_AUCTIONS {
                last.pop_front();
            }
            let sum: i128 = last.iter().map(|&p| i128::from(p)).sum();
            rows.push(json!({"seller": seller, "avg_price": floor_mean(sum, last.len())}));
        }
    }
    rows
}

/// q7 `{auction, price, bidder, dateTime, extra}`: tumbling 10 s windows; every bid whose price
/// equals its window's highest price (ties kept).
pub fn q7(events: &[Event]) -> Vec<Value> {
    let mut windows: BTreeMap<i64, Vec<&Bid>> = BTreeMap::new();
    for bid in bids(events) {
        windows
            .entry(window_start(bid.date_time, TUMBLE_MS))
            .or_default()
            .push(bid);
    }
    let mut rows = Vec::new();
    for bids in windows.values() {
        let max = bids.iter().map(|b| b.price).max().unwrap_or(i64::MIN);
        for bid in bids.iter().filter(|b| b.price == max) {
            rows.push(json!({
                "auction": bid.auction,
                "price": bid.price,
                "bidder": bid.bidder,
                "dateTime": bid.date_time,
                "extra": bid.extra,
            }));
        }
    }
    rows
}

/// q8 `{id, name, starttime}`: tumbling 10 s windows; each person registered in window `w` who
/// also opened an auction (`auction.seller = person.id`) with `auction.dateTime` in `w`; one row
/// per distinct `(id, name, w)`, `starttime` being `w`'s start.
pub fn q8(events: &[Event]) -> Vec<Value> {
    let selling: HashSet<(i64, i64)> = auctions(events)
        .map(|a| (a.seller, window_start(a.date_time, TUMBLE_MS)))
        .collect();
    let mut rows: BTreeSet<(i64, &str, i64)> = BTreeSet::new();
    for person in people(events) {
        let start = window_start(person.date_time, TUMBLE_MS);
        if selling.contains(&(person.id, start)) {
            rows.insert((person.id, &person.name, start));
        }
    }
    rows.into_iter()
        .map(|(id, name, start)| json!({"id": id, "name": name, "starttime": start}))
        .collect()
}

/// q9: each auction with its winning bid among the bids that count for it (as in q4): the
/// highest price, then the earliest `dateTime`, then the lowest bidder, then (so the result does
/// not depend on input order) the smallest `(extra, channel, url)`. Auctions without such a bid
/// are dropped. Columns: the auction's `id, itemName, description, initialBid, reserve,
/// dateTime, expires, seller, category, extra`, then the bid's `auction, bidder, price,
/// bid_dateTime, bid_extra`.
pub fn q9(events: &[Event]) -> Vec<Value> {
    auctions_with_valid_bids(events)
        .into_iter()
        .map(|(a, bids)| {
            let winner = bids
                .iter()
                .min_by(|x, y| {
                    y.price
                        .cmp(&x.price)
                        .then(x.date_time.cmp(&y.date_time))
                        .then(x.bidder.cmp(&y.bidder))
                        .then_with(|| {
                            (&x.extra, &x.channel, &x.url).cmp(&(&y.extra, &y.channel, &y.url))
                        })
                })
                .expect("auctions_with_valid_bids keeps only auctions with bids");
            json!({
                "id": a.id,
                "itemName": a.item_name,
                "description": a.description,
                "initialBid": a.initial_bid,
                "reserve": a.reserve,
                "dateTime": a.date_time,
                "expires": a.expires,
                "seller": a.seller,
                "category": a.category,
                "extra": a.extra,
                "auction": winner.auction,
                "bidder": winner.bidder,
                "price": winner.price,
                "bid_dateTime": winner.date_time,
                "bid_extra": winner.extra,
            })
        })
        .collect()
}

/// q11 `{bidder, bid_count, starttime, endtime}`: session windows per bidder with a 10 s gap.
/// With the bidder's bid times sorted, a bid more than 10,000 ms after the previous one starts a
/// new session (exactly 10,000 ms still merges); `starttime` is the session's first bid time,
/// `endtime` its last bid time + 10,000.
pub fn q11(events: &[Event]) -> Vec<Value> {
    let mut times: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
    for bid in bids(events) {
        times.entry(bid.bidder).or_default().push(bid.date_time);
    }
    let mut rows = Vec::new();
    let session = |bidder: i64, count: usize, first: i64, last: i64| {
        json!({
            "bidder": bidder,
            "bid_count": count,
            "starttime": first,
            "endtime": last + SESSION_GAP_MS,
        })
    };
    for (bidder, mut times) in times {
        times.sort_unstable();
        let (mut first, mut last, mut count) = (times[0], times[0], 0);
        for t in times {
            if t - last > SESSION_GAP_MS {
                rows.push(session(bidder, count, first, last));
                (first, count) = (t, 0);
            }
            last = t;
            count += 1;
        }
        rows.push(session(bidder, count, first, last));
    }
    rows
}

// ---------------------------------------------------------------------------------------------
// q14-q22 (Flink's additions to the suite)
// ---------------------------------------------------------------------------------------------

/// q14, q15, q16 and q17's price ranks: `price < 10,000`, `10,000 <= price < 1,000,000` and
/// `price >= 1,000,000`.
fn price_rank(price: i64) -> usize {
    match price {
        p if p < 10_000 => 1,
        p if p < 1_000_000 => 2,
        _ => 3,
    }
}

/// The UTC calendar date `(year, month, day)` of epoch milliseconds, by Howard Hinnant's
/// `civil_from_days` (public domain), written out so the reference needs no date library.
fn civil_date(millis: i64) -> (i64, i64, i64) {
    let z = millis.div_euclid(86_400_000) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// `DATE_FORMAT(t, 'yyyy-MM-dd')` in UTC.
fn day_of(millis: i64) -> String {
    let (year, month, day) = civil_date(millis);
    format!("{year:04}-{month:02}-{day:02}")
}

/// The UTC hour of the day, 0 to 23.
fn hour_of(millis: i64) -> i64 {
    millis.div_euclid(3_600_000).rem_euclid(24)
}

/// `DATE_FORMAT(t, 'HH:mm')` in UTC.
fn minute_of(millis: i64) -> String {
    format!(
        "{:02}:{:02}",
        hour_of(millis),
        millis.div_euclid(60_000).rem_euclid(60)
    )
}

/// `price × 0.908` exactly, as a JSON number with (at most) 3 decimals.
fn euros(price: i64) -> Value {
    let milli = i128::from(price) * 908;
    let text = format!(
        "{}{}.{:03}",
        if milli < 0 { "-" } else { "" },
        milli.abs() / 1000,
        milli.abs() % 1000
    );
    json!(text.parse::<f64>().expect("a decimal number"))
}

/// q14 `{auction, bidder, price, bidTimeType, dateTime, extra, c_counts}`: bids with
/// `1,000,000 < price × 0.908 < 50,000,000` (compared exactly, in thousandths), `price` in
/// euros (× 0.908), `bidTimeType` 'dayTime' for a UTC hour of 8 to 18, 'nightTime' for 0 to 6
/// and 20 to 23, 'otherTime' for 7 and 19, and `c_counts` the number of 'c's in `extra`.
pub fn q14(events: &[Event]) -> Vec<Value> {
    bids(events)
        .filter(|b| {
            let milli = i128::from(b.price) * 908;
            milli > 1_000_000_000 && milli < 50_000_000_000
        })
        .map(|b| {
            let kind = match hour_of(b.date_time) {
                8..=18 => "dayTime",
                0..=6 | 20..=23 => "nightTime",
                _ => "otherTime",
            };
            json!({
                "auction": b.auction,
                "bidder": b.bidder,
                "price": euros(b.price),
                "bidTimeType": kind,
                "dateTime": b.date_time,
                "extra": b.extra,
                "c_counts": b.extra.bytes().filter(|&c| c == b'c').count(),
            })
        })
        .collect()
}

/// Counts of bids, distinct bidders and distinct auctions, in all (index 0) and per price
/// rank (1 to 3), for q15 and q16.
#[derive(Default)]
struct RankCounts {
    bids: [u64; 4],
    bidders: [BTreeSet<i64>; 4],
    auctions: [BTreeSet<i64>; 4],
    /// q16's latest `HH:mm`.
    minute: Option<String>,
}

impl RankCounts {
    fn add(&mut self, bid: &Bid) {
        for rank in [0, price_rank(bid.price)] {
            self.bids[rank] += 1;
            self.bidders[rank].insert(bid.bidder);
            self.auctions[rank].insert(bid.auction);
        }
        let minute = minute_of(bid.date_time);
        if self.minute.as_ref().is_none_or(|m| *m < minute) {
            self.minute = Some(minute);
        }
    }

    /// `total_bids, rank1_bids, ..., rank3_auctions` into `row`.
    fn write(&self, row: &mut serde_json::Map<String, Value>) {
        for (what, counts) in [
            ("bids", self.bids.map(|n| n as usize)),
            ("bidders", self.bidders.each_ref().map(BTreeSet::len)),
            ("auctions", self.auctions.each_ref().map(BTreeSet::len)),
        ] {
            for (rank, count) in counts.into_iter().enumerate() {
                let name = match rank {
                    0 => format!("total_{what}"),
                    r => format!("rank{r}_{what}"),
                };
                row.insert(name, json!(count));
            }
        }
    }
}

/// q15 `{day, total_bids, rank1_bids, rank2_bids, rank3_bids, total_bidders, rank1_bidders,
/// ..., rank3_auctions}`: per UTC day (`yyyy-MM-dd`) of the bids, the number of bids, of
/// distinct bidders and of distinct auctions, in all and per price rank. The final table of
/// the updating stream: one row per day.
pub fn q15(events: &[Event]) -> Vec<Value> {
    let mut days: BTreeMap<String, RankCounts> = BTreeMap::new();
    for bid in bids(events) {
        days.entry(day_of(bid.date_time)).or_default().add(bid);
    }
    days.into_iter()
        .map(|(day, counts)| {
            let mut row = serde_json::Map::new();
            row.insert("day".into(), json!(day));
            counts.write(&mut row);
            Value::Object(row)
        })
        .collect()
}

/// q16 `{channel, day, minute, total_bids, ..., rank3_auctions}`: q15 per channel and day,
/// with `minute` the latest `HH:mm` (UTC) of those bids. The final table: one row per
/// (channel, day).
pub fn q16(events: &[Event]) -> Vec<Value> {
    let mut groups: BTreeMap<(&str, String), RankCounts> = BTreeMap::new();
    for bid in bids(events) {
        groups
            .entry((&bid.channel, day_of(bid.date_time)))
            .or_default()
            .add(bid);
    }
    groups
        .into_iter()
        .map(|((channel, day), counts)| {
            let mut row = serde_json::Map::new();
            row.insert("channel".into(), json!(channel));
            row.insert("day".into(), json!(day));
            row.insert("minute".into(), json!(counts.minute));
            counts.write(&mut row);
            Value::Object(row)
        })
        .collect()
}

/// q17 `{auction, day, total_bids, rank1_bids, rank2_bids, rank3_bids, min_price, max_price,
/// avg_price, sum_price}`: per auction and UTC day, its bids in all and per price rank, and
/// their lowest, highest, mean and total price; the mean is the sum divided by the count,
/// truncated toward zero (Flink's AVG of a BIGINT). The final table: one row per (auction,
/// day).
pub fn q17(events: &[Event]) -> Vec<Value> {
    let mut groups: BTreeMap<(i64, String), Vec<i64>> = BTreeMap::new();
    for bid in bids(events) {
        groups
            .entry((bid.auction, day_of(bid.date_time)))
            .or_default()
            .push(bid.price);
    }
    groups
        .into_iter()
        .map(|((auction, day), prices)| {
            let mut ranks = [0usize; 4];
            for &p in &prices {
                ranks[price_rank(p)] += 1;
            }
            let sum: i128 = prices.iter().map(|&p| i128::from(p)).sum();
            let count = i128::try_from(prices.len()).expect("a count fits");
            json!({
                "auction": auction,
                "day": day,
                "total_bids": prices.len(),
                "rank1_bids": ranks[1],
                "rank2_bids": ranks[2],
                "rank3_bids": ranks[3],
                "min_price": prices.iter().min(),
                "max_price": prices.iter().max(),
                "avg_price": i64::try_from(sum / count).expect("a mean fits"),
                "sum_price": i64::try_from(sum).expect("a sum fits"),
            })
        })
        .collect()
}

/// A bid as q18 and q19 output it: `{auction, bidder, price, channel, url, dateTime, extra}`.
fn bid_row(b: &Bid) -> serde_json::Map<String, Value> {
    let Value::Object(row) = json!({
        "auction": b.auction,
        "bidder": b.bidder,
        "price": b.price,
        "channel": b.channel,
        "url": b.url,
        "dateTime": b.date_time,
        "extra": b.extra,
    }) else {
        unreachable!("json! of an object literal is an object")
    };
    row
}

/// q18 `{auction, bidder, price, channel, url, dateTime, extra}`: per (bidder, auction), its
/// latest bid (`ROW_NUMBER() OVER (PARTITION BY bidder, auction ORDER BY dateTime DESC) <= 1`).
/// The final table: one row per (bidder, auction). Bids tied on `dateTime` go to the largest
/// `(price, extra, channel, url)`, so the result does not depend on input order (Flink's
/// would; the generator gives every event its own time at a non-zero inter-event delay).
pub fn q18(events: &[Event]) -> Vec<Value> {
    let mut last: BTreeMap<(i64, i64), &Bid> = BTreeMap::new();
    let rank = |b: &Bid| {
        (
            b.date_time,
            b.price,
            b.extra.clone(),
            b.channel.clone(),
            b.url.clone(),
        )
    };
    for bid in bids(events) {
        let slot = last.entry((bid.bidder, bid.auction)).or_insert(bid);
        if rank(bid) > rank(slot) {
            *slot = bid;
        }
    }
    last.into_values()
        .map(|b| Value::Object(bid_row(b)))
        .collect()
}

/// q19 `{auction, bidder, price, channel, url, dateTime, extra, rank_number}`: per auction,
/// its 10 highest bids numbered 1 to 10 (`ROW_NUMBER() OVER (PARTITION BY auction ORDER BY
/// price DESC) <= 10`). The final table. Bids tied on price are numbered earliest `dateTime`
/// first, then lowest bidder, then smallest `(extra, channel, url)`, so the result does not
/// depend on input order (Flink's would).
pub fn q19(events: &[Event]) -> Vec<Value> {
    let mut per_auction: BTreeMap<i64, Vec<&Bid>> = BTreeMap::new();
    for bid in bids(events) {
        per_auction.entry(bid.auction).or_default().push(bid);
    }
    let mut rows = Vec::new();
    for mut bids in per_auction.into_values() {
        bids.sort_by(|x, y| {
            y.price
                .cmp(&x.price)
                .then(x.date_time.cmp(&y.date_time))
                .then(x.bidder.cmp(&y.bidder))
                .then_with(|| (&x.extra, &x.channel, &x.url).cmp(&(&y.extra, &y.channel, &y.url)))
        });
        for (i, bid) in bids.into_iter().take(10).enumerate() {
            let mut row = bid_row(bid);
            row.insert("rank_number".into(), json!(i + 1));
            rows.push(Value::Object(row));
        }
    }
    rows
}

/// q20 `{auction, bidder, price, channel, url, bid_dateTime, bid_extra, itemName, description,
/// initialBid, reserve, auction_dateTime, expires, seller, category, auction_extra}`: every bid
/// joined with its auction (`bid.auction = auction.id`) when the auction's category is 10; one
/// row per (bid, auction event) pair, with no time bound.
pub fn q20(events: &[Event]) -> Vec<Value> {
    let mut category_10: HashMap<i64, Vec<&Auction>> = HashMap::new();
    for auction in auctions(events).filter(|a| a.category == 10) {
        category_10.entry(auction.id).or_default().push(auction);
    }
    let mut rows = Vec::new();
    for b in bids(events) {
        for a in category_10.get(&b.auction).into_iter().flatten() {
            rows.push(json!({
                "auction": b.auction,
                "bidder": b.bidder,
                "price": b.price,
                "channel": b.channel,
                "url": b.url,
                "bid_dateTime": b.date_time,
                "bid_extra": b.extra,
                "itemName": a.item_name,
                "description": a.description,
                "initialBid": a.initial_bid,
                "reserve": a.reserve,
                "auction_dateTime": a.date_time,
                "expires": a.expires,
                "seller": a.seller,
                "category": a.category,
                "auction_extra": a.extra,
            }));
        }
    }
    rows
}

/// The value of the first `channel_id=` parameter of `url` that starts the URL or follows an
/// `&`, up to the next `&` (what `REGEXP_EXTRACT(url, '(&|^)channel_id=([^&]*)', 2)` finds).
fn channel_id_in(url: &str) -> Option<&str> {
    const KEY: &str = "channel_id=";
    let start = if url.starts_with(KEY) {
        KEY.len()
    } else {
        url.find("&channel_id=")? + 1 + KEY.len()
    };
    let rest = &url[start..];
    Some(&rest[..rest.find('&').unwrap_or(rest.len())])
}

/// q21 `{auction, bidder, price, channel, channel_id}`: bids whose channel is Apple, Google,
/// Facebook or Baidu in any letter case (`channel_id` '0' to '3', in that order), and other
/// bids whose URL has a `channel_id` (see `channel_id_in`), with that.
pub fn q21(events: &[Event]) -> Vec<Value> {
    bids(events)
        .filter_map(|b| {
            let known = ["apple", "google", "facebook", "baidu"]
                .iter()
                .position(|c| *c == b.channel.to_lowercase());
            let id = match known {
                Some(i) => i.to_string(),
                None => channel_id_in(&b.url)?.to_owned(),
            };
            Some(json!({
                "auction": b.auction,
                "bidder": b.bidder,
                "price": b.price,
                "channel": b.channel,
                "channel_id": id,
            }))
        })
        .collect()
}

/// q22 `{auction, bidder, price, channel, dir1, dir2, dir3}`: every bid, with pieces 3, 4 and
/// 5 (from 0) of its URL split at every '/', empty pieces counted (`https:`, ``,
/// `www.nexmark.com`, dir1, ...); null where the URL has fewer pieces, or is empty.
pub fn q22(events: &[Event]) -> Vec<Value> {
    bids(events)
        .map(|b| {
            let pieces: Vec<&str> = if b.url.is_empty() {
                Vec::new()
            } else {
                b.url.split('/').collect()
            };
            json!({
                "auction": b.auction,
                "bidder": b.bidder,
                "price": b.price,
                "channel": b.channel,
                "dir1": pieces.get(3),
                "dir2": pieces.get(4),
                "dir3": pieces.get(5),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_runtime::connectors::nexmark::{Generator, GeneratorConfig, write_json_line};

    // --- hand-made events -------------------------------------------------------------------

    fn person(id: i64, name: &str, state: &str, date_time: i64) -> Event {
        Event::Person(Person {
            id,
            name: name.to_owned(),
            email_address: format!("{id}@example.com"),
            credit_card: "1111 2222 3333 4444".to_owned(),
            city: format!("city-{id}"),
            state: state.to_owned(),
            date_time,
            extra: String::new(),
        })
    }

    fn auction(id: i64, seller: i64, category: i64, date_time: i64, expires: i64) -> Event {
        Event::Auction(Auction {
            id,
            item_name: format!("item-{id}"),
            description: format!("description of {id}"),
            initial_bid: 1,
            reserve: 2,
            date_time,
            expires,
            seller,
            category,
            extra: format!("auction-extra-{id}"),
        })
    }

    fn bid(auction: i64, bidder: i64, price: i64, date_time: i64) -> Event {
        bid_with_extra(auction, bidder, price, date_time, "")
    }

    fn bid_with_extra(auction: i64, bidder: i64, price: i64, date_time: i64, extra: &str) -> Event {
        Event::Bid(Bid {
            auction,
            bidder,
            price,
            channel: "Google".to_owned(),
            url: "https://www.nexmark.com/item.htm".to_owned(),
            date_time,
            extra: extra.to_owned(),
        })
    }

    /// `rows` in a canonical order (objects' keys sorted), so multisets compare with `==`.
    fn sorted(mut rows: Vec<Value>) -> Vec<Value> {
        fn canonical(value: &Value) -> String {
            match value {
                Value::Object(map) => {
                    let sorted: BTreeMap<&String, String> =
                        map.iter().map(|(k, v)| (k, canonical(v))).collect();
                    format!("{sorted:?}")
                }
                other => other.to_string(),
            }
        }
        rows.sort_by_cached_key(canonical);
        rows
    }

    #[track_caller]
    fn assert_rows(actual: Vec<Value>, expected: Vec<Value>) {
        assert_eq!(sorted(actual), sorted(expected));
    }

    /// A q9 row for the hand-made `auction(..)` / `bid(..)` events above.
    fn q9_row(
        (id, seller, category, date_time, expires): (i64, i64, i64, i64, i64),
        (bidder, price, bid_time, bid_extra): (i64, i64, i64, &str),
    ) -> Value {
        json!({
            "id": id, "itemName": format!("item-{id}"),
            "description": format!("description of {id}"),
            "initialBid": 1, "reserve": 2, "dateTime": date_time, "expires": expires,
            "seller": seller, "category": category, "extra": format!("auction-extra-{id}"),
            "auction": id, "bidder": bidder, "price": price,
            "bid_dateTime": bid_time, "bid_extra": bid_extra,
        })
    }

    // --- q14-q22 ------------------------------------------------------------------------------

    fn bid_at(
        auction: i64,
        bidder: i64,
        price: i64,
        date_time: i64,
        channel: &str,
        url: &str,
    ) -> Event {
        Event::Bid(Bid {
            auction,
            bidder,
            price,
            channel: channel.to_owned(),
            url: url.to_owned(),
            date_time,
            extra: String::new(),
        })
    }

    #[test]
    fn day_of_is_the_utc_calendar_date() {
        assert_eq!(day_of(0), "1970-01-01");
        assert_eq!(day_of(-1), "1969-12-31");
        assert_eq!(day_of(1_700_000_000_000), "2023-11-14");
        // 2024-02-29 23:59:59.999, then midnight of March 1st.
        assert_eq!(day_of(1_709_251_199_999), "2024-02-29");
        assert_eq!(day_of(1_709_251_200_000), "2024-03-01");
        assert_eq!(minute_of(1_700_000_000_000), "22:13");
        assert_eq!(hour_of(-1), 23);
    }

    #[test]
    fn q14_keeps_prices_strictly_inside_the_range_and_names_the_time_of_day() {
        let hour = 3_600_000;
        let events = vec![
            // 0.908 × 1,101,322 = 1,000,000.376: in; 1,101,321 gives 999,999.468: out.
            bid_with_extra(1, 1, 1_101_322, 7 * hour, "abcc"),
            bid(2, 1, 1_101_321, 8 * hour),
            // 0.908 × 55,066,079 = 49,999,999.732: in; 55,066,080 gives 50,000,000.64: out.
            bid(3, 1, 55_066_079, 18 * hour + 3_599_999),
            bid(4, 1, 55_066_080, 8 * hour),
            bid(5, 1, 2_000_000, 19 * hour),
            bid(6, 1, 2_000_000, 20 * hour),
            bid(7, 1, 2_000_000, 6 * hour + 3_599_999),
        ];
        let kinds: BTreeMap<i64, String> = q14(&events)
            .iter()
            .map(|r| {
                (
                    r["auction"].as_i64().unwrap(),
                    r["bidTimeType"].as_str().unwrap().to_owned(),
                )
            })
            .collect();
        let expected: BTreeMap<i64, String> = [
            (1, "otherTime"),
            (3, "dayTime"),
            (5, "otherTime"),
            (6, "nightTime"),
            (7, "nightTime"),
        ]
        .into_iter()
        .map(|(a, k)| (a, k.to_owned()))
        .collect();
        assert_eq!(kinds, expected);
        let first = &q14(&events)[0];
        assert_eq!(first["price"], json!(1_000_000.376));
        assert_eq!(first["c_counts"], json!(2));
    }

    #[test]
    fn q15_counts_per_day_and_price_rank_with_distinct_bidders_and_auctions() {
        let day = 86_400_000;
        let events = vec![
            bid(1, 10, 9_999, day - 1),
            bid(1, 10, 10_000, day - 2),
            bid(2, 10, 999_999, day - 3),
            bid(2, 11, 1_000_000, day - 4),
            bid(3, 11, 5, day),
        ];
        let mut first = serde_json::Map::new();
        first.insert("day".into(), json!("1970-01-01"));
        for (name, n) in [
            ("total_bids", 4),
            ("rank1_bids", 1),
            ("rank2_bids", 2),
            ("rank3_bids", 1),
            ("total_bidders", 2),
            ("rank1_bidders", 1),
            ("rank2_bidders", 1),
            ("rank3_bidders", 1),
            ("total_auctions", 2),
            ("rank1_auctions", 1),
            ("rank2_auctions", 2),
            ("rank3_auctions", 1),
        ] {
            first.insert(name.into(), json!(n));
        }
        let rows = q15(&events);
        assert_eq!(rows.len(), 2, "two days");
        assert_eq!(rows[0], Value::Object(first));
        assert_eq!(rows[1]["day"], json!("1970-01-02"));
        assert_eq!(rows[1]["rank1_auctions"], json!(1));
        assert_eq!(rows[1]["rank2_bids"], json!(0));
    }

    #[test]
    fn q16_takes_the_latest_minute_per_channel_and_day() {
        let events = vec![
            bid_at(1, 1, 5, 61_000, "A", ""),
            bid_at(1, 1, 5, 3_600_000, "A", ""),
            bid_at(1, 1, 5, 120_000, "A", ""),
            bid_at(1, 1, 5, 0, "B", ""),
        ];
        let rows = q16(&events);
        let minutes: Vec<(&str, &str, i64)> = rows
            .iter()
            .map(|r| {
                (
                    r["channel"].as_str().unwrap(),
                    r["minute"].as_str().unwrap(),
                    r["total_bids"].as_i64().unwrap(),
                )
            })
            .collect();
        assert_eq!(minutes, [("A", "01:00", 3), ("B", "00:00", 1)]);
    }

    #[test]
    fn q17_truncates_the_mean_price() {
        let events = vec![
            bid(1, 1, 1, 0),
            bid(1, 2, 2, 1),
            bid(1, 3, 2_000_000, 2),
            bid(2, 1, 7, 3),
        ];
        assert_rows(
            q17(&events),
            vec![
                json!({"auction": 1, "day": "1970-01-01", "total_bids": 3, "rank1_bids": 2,
                       "rank2_bids": 0, "rank3_bids": 1, "min_price": 1, "max_price": 2_000_000,
                       "avg_price": 666_667, "sum_price": 2_000_003}),
                json!({"auction": 2, "day": "1970-01-01", "total_bids": 1, "rank1_bids": 1,
                       "rank2_bids": 0, "rank3_bids": 0, "min_price": 7, "max_price": 7,
                       "avg_price": 7, "sum_price": 7}),
            ],
        );
    }

    #[test]
    fn q18_keeps_the_latest_bid_per_bidder_and_auction() {
        let events = vec![
            bid(1, 1, 5, 10),
            bid(1, 1, 7, 30),
            bid(1, 1, 9, 20),
            bid(1, 2, 3, 0),
        ];
        let prices: Vec<i64> = q18(&events)
            .iter()
            .map(|r| r["price"].as_i64().unwrap())
            .collect();
        assert_eq!(prices, [7, 3]);
    }

    #[test]
    fn q19_numbers_the_ten_highest_bids_ties_earliest_first() {
        let mut events: Vec<Event> = (0..12).map(|i| bid(1, i, 100 + i, i)).collect();
        events.push(bid(1, 99, 111, -5));
        let rows = q19(&events);
        let ranked: Vec<(i64, i64)> = rows
            .iter()
            .map(|r| {
                (
                    r["bidder"].as_i64().unwrap(),
                    r["rank_number"].as_i64().unwrap(),
                )
            })
            .collect();
        // Bidder 99's 111 ties bidder 11's and is earlier.
        assert_eq!(
            ranked,
            [
                (99, 1),
                (11, 2),
                (10, 3),
                (9, 4),
                (8, 5),
                (7, 6),
                (6, 7),
                (5, 8),
                (4, 9),
                (3, 10)
            ]
        );
    }

    #[test]
    fn q20_joins_bids_with_category_10_auctions_in_either_order() {
        let events = vec![
            bid(1, 7, 5, 0),
            auction(1, 100, 10, 5, 50),
            auction(2, 100, 11, 5, 50),
            bid(2, 7, 5, 6),
            bid(1, 8, 6, 60),
        ];
        let rows = q20(&events);
        let pairs: Vec<(i64, i64)> = rows
            .iter()
            .map(|r| {
                (
                    r["bidder"].as_i64().unwrap(),
                    r["category"].as_i64().unwrap(),
                )
            })
            .collect();
        assert_eq!(pairs, [(7, 10), (8, 10)]);
        assert_eq!(rows[0]["auction_dateTime"], json!(5));
        assert_eq!(rows[0]["bid_extra"], json!(""));
    }

    #[test]
    fn q21_takes_the_id_from_known_channels_or_the_url() {
        assert_eq!(channel_id_in("channel_id=7&x=1"), Some("7"));
        assert_eq!(
            channel_id_in("https://a/b?query=1&channel_id=42"),
            Some("42")
        );
        assert_eq!(channel_id_in("https://a/b?query=1&channel_id=&x"), Some(""));
        assert_eq!(channel_id_in("https://a/b?xchannel_id=42"), None);
        assert_eq!(channel_id_in("https://a/b?query=1"), None);
        let events = vec![
            bid_at(1, 1, 1, 0, "GOOGLE", "https://a/?q=1&channel_id=9"),
            bid_at(2, 1, 1, 0, "Baidu", ""),
            bid_at(3, 1, 1, 0, "channel-5", "https://a/?q=1&channel_id=5"),
            bid_at(4, 1, 1, 0, "channel-6", "https://a/?q=1"),
        ];
        let rows = q21(&events);
        let ids: Vec<(i64, &str)> = rows
            .iter()
            .map(|r| {
                (
                    r["auction"].as_i64().unwrap(),
                    r["channel_id"].as_str().unwrap(),
                )
            })
            .collect();
        // A known channel's id wins over its URL's; a URL without one drops the bid.
        assert_eq!(ids, [(1, "1"), (2, "3"), (3, "5")]);
    }

    #[test]
    fn q22_splits_the_url_keeping_empty_pieces() {
        let events = vec![
            bid_at(
                1,
                1,
                1,
                0,
                "A",
                "https://www.nexmark.com/ab/c_d/efg/item.htm?query=1",
            ),
            bid_at(2, 1, 1, 0, "A", "https://www.nexmark.com/ab"),
            bid_at(3, 1, 1, 0, "A", ""),
        ];
        let dirs: Vec<[Value; 3]> = q22(&events)
            .into_iter()
            .map(|r| [r["dir1"].clone(), r["dir2"].clone(), r["dir3"].clone()])
            .collect();
        assert_eq!(
            dirs,
            [
                [json!("ab"), json!("c_d"), json!("efg")],
                [json!("ab"), Value::Null, Value::Null],
                [Value::Null, Value::Null, Value::Null],
            ]
        );
    }

    // --- parse_line ---------------------------------------------------------------------------

    #[test]
    fn parse_line_reads_the_schema_examples() {
        let person_line = r#"{"type":"person","person":{"id":1000,"name":"Peter Shultz","emailAddress":"abc@def.com","creditCard":"1234 5678 9012 3456","city":"Boise","state":"ID","dateTime":1700000000000,"extra":"..."}}"#;
        let auction_line = r#"{"type":"auction","auction":{"id":1000,"itemName":"xyz","description":"long text","initialBid":1234,"reserve":2345,"dateTime":1700000000000,"expires":1700000004567,"seller":1000,"category":10,"extra":"..."}}"#;
        let bid_line = r#"{"type":"bid","bid":{"auction":1000,"bidder":1001,"price":4567,"channel":"Google","url":"https://www.nexmark.com/a/b/c/item.htm?query=1","dateTime":1700000000000,"extra":"..."}}"#;
        assert_eq!(
            parse_line(person_line),
            Event::Person(Person {
                id: 1000,
                name: "Peter Shultz".into(),
                email_address: "abc@def.com".into(),
                credit_card: "1234 5678 9012 3456".into(),
                city: "Boise".into(),
                state: "ID".into(),
                date_time: 1_700_000_000_000,
                extra: "...".into(),
            })
        );
        assert_eq!(
            parse_line(auction_line),
            Event::Auction(Auction {
                id: 1000,
                item_name: "xyz".into(),
                description: "long text".into(),
                initial_bid: 1234,
                reserve: 2345,
                date_time: 1_700_000_000_000,
                expires: 1_700_000_004_567,
                seller: 1000,
                category: 10,
                extra: "...".into(),
            })
        );
        assert_eq!(
            parse_line(bid_line),
            Event::Bid(Bid {
                auction: 1000,
                bidder: 1001,
                price: 4567,
                channel: "Google".into(),
                url: "https://www.nexmark.com/a/b/c/item.htm?query=1".into(),
                date_time: 1_700_000_000_000,
                extra: "...".into(),
            })
        );
    }

    #[test]
    fn parse_line_reads_back_what_the_generator_writes() {
        let generator = Generator::new(GeneratorConfig::default());
        let mut line = Vec::new();
        for n in 0..5_000 {
            let event = generator.event(n);
            line.clear();
            write_json_line(&event, &mut line);
            assert_eq!(parse_line(std::str::from_utf8(&line).unwrap()), event);
        }
    }

    #[test]
    #[should_panic(expected = "unexpected bid field \"bidder_id\"")]
    fn parse_line_rejects_unknown_fields() {
        parse_line(
            r#"{"type":"bid","bid":{"auction":1,"bidder":2,"bidder_id":2,"price":3,"channel":"c","url":"u","dateTime":4,"extra":""}}"#,
        );
    }

    #[test]
    #[should_panic(expected = "bid.price is not an integer")]
    fn parse_line_rejects_a_missing_field() {
        parse_line(
            r#"{"type":"bid","bid":{"auction":1,"bidder":2,"channel":"c","url":"u","dateTime":4,"extra":""}}"#,
        );
    }

    // --- q3 -----------------------------------------------------------------------------------

    #[test]
    fn q3_keeps_category_10_auctions_of_sellers_in_or_id_ca() {
        let events = [
            person(1, "Ann", "OR", 0),
            person(2, "Bo", "ID", 0),
            person(3, "Cy", "CA", 0),
            person(4, "Di", "WA", 0),
            auction(100, 1, 10, 1, 50),
            auction(101, 2, 10, 1, 50),
            auction(102, 3, 10, 1, 50),
            auction(103, 4, 10, 1, 50), // seller in WA
            auction(104, 1, 11, 1, 50), // category 11
            auction(105, 9, 10, 1, 50), // seller never registers
            auction(106, 3, 10, 1, 50), // a second auction of Cy
        ];
        let row = |name: &str, id: i64, state: &str, auction: i64| {
            let city = format!("city-{id}");
            json!({"name": name, "city": city, "state": state, "id": auction})
        };
        assert_rows(
            q3(&events),
            vec![
                row("Ann", 1, "OR", 100),
                row("Bo", 2, "ID", 101),
                row("Cy", 3, "CA", 102),
                row("Cy", 3, "CA", 106),
            ],
        );
    }

    #[test]
    fn q3_joins_a_seller_who_appears_after_the_auction() {
        let events = [
            auction(100, 7, 10, 1_000, 5_000),
            bid(100, 8, 10, 2_000),
            person(7, "Late", "CA", 900_000),
        ];
        assert_rows(
            q3(&events),
            vec![json!({"name": "Late", "city": "city-7", "state": "CA", "id": 100})],
        );
    }

    // --- q4 -----------------------------------------------------------------------------------

    #[test]
    fn q4_counts_bids_at_both_ends_and_excludes_bids_outside() {
        let events = [
            auction(1, 50, 10, 1_000, 5_000),
            bid(1, 60, 900, 999),     // before the auction opens: excluded
            bid(1, 60, 10, 1_000),    // exactly at dateTime: included
            bid(1, 61, 20, 5_000),    // exactly at expires: included
            bid(1, 62, 1_000, 5_001), // one ms after expires: excluded
        ];
        assert_rows(q4(&events), vec![json!({"category": 10, "avg_final": 20})]);
        // Without the bid at expires, the bid at dateTime is the final price.
        let at_open_only = [events[0].clone(), events[1].clone(), events[2].clone()];
        assert_rows(
            q4(&at_open_only),
            vec![json!({"category": 10, "avg_final": 10})],
        );
    }

    #[test]
    fn q4_floors_the_mean_and_drops_auctions_without_a_valid_bid() {
        let events = [
            bid(2, 60, 15, 1_500), // arrives before its auction
            auction(1, 50, 10, 1_000, 5_000),
            auction(2, 50, 10, 1_000, 5_000),
            bid(1, 60, 20, 3_000),
            auction(3, 50, 10, 1_000, 5_000), // no bids: dropped, not a 0 in the mean
            auction(4, 50, 11, 1_000, 5_000), // only an out-of-range bid: dropped
            bid(4, 60, 99, 6_000),
            auction(5, 50, 12, 1_000, 5_000), // category 12 has one auction
            bid(5, 60, 7, 4_000),
            bid(5, 60, 8, 4_001),
            bid(77, 60, 1_000, 2_000), // bid on an auction that never appears
        ];
        assert_rows(
            q4(&events),
            vec![
                json!({"category": 10, "avg_final": 17}), // floor((20 + 15) / 2)
                json!({"category": 12, "avg_final": 8}),
            ],
        );
    }

    // --- q5 -----------------------------------------------------------------------------------

    #[test]
    fn q5_bid_at_a_multiple_of_2000_falls_into_the_five_windows_starting_up_to_it() {
        let windows = |rows: Vec<Value>| -> Vec<(i64, i64)> {
            let mut w: Vec<(i64, i64)> = rows
                .iter()
                .map(|r| {
                    assert_eq!(r["num"], 1);
                    (
                        r["starttime"].as_i64().unwrap(),
                        r["endtime"].as_i64().unwrap(),
                    )
                })
                .collect();
            w.sort_unstable();
            w
        };
        let expected = |first: i64| -> Vec<(i64, i64)> {
            (0..5)
                .map(|k| (first + k * 2_000, first + k * 2_000 + 10_000))
                .collect()
        };
        assert_eq!(windows(q5(&[bid(1, 9, 5, 12_000)])), expected(4_000));
        assert_eq!(windows(q5(&[bid(1, 9, 5, 12_001)])), expected(4_000));
        assert_eq!(windows(q5(&[bid(1, 9, 5, 11_999)])), expected(2_000));
        // Before the epoch, windows still align to multiples of 2000.
        assert_eq!(windows(q5(&[bid(1, 9, 5, -1)])), expected(-10_000));
    }

    #[test]
    fn q5_keeps_every_auction_tied_for_the_window_maximum() {
        let events = [
            bid(1, 9, 5, 10_000),
            bid(1, 9, 5, 10_500),
            bid(2, 9, 5, 11_000),
            bid(2, 9, 5, 11_500),
            bid(3, 9, 5, 10_200),
            bid(3, 9, 5, 14_000), // auction 3 leads the windows starting 12000 and 14000 alone
        ];
        let row = |auction: i64, num: u64, start: i64| {
            let end = start + 10_000;
            json!({"auction": auction, "num": num, "starttime": start, "endtime": end})
        };
        // Windows starting 2000 … 10000 contain the first five bids (1: 2, 2: 2, 3: 1);
        // 6000 … 10000 also contain the bid at 14000 (3: 2), a three-way tie.
        let mut expected = vec![];
        for start in [2_000, 4_000] {
            expected.extend([row(1, 2, start), row(2, 2, start)]);
        }
        for start in [6_000, 8_000, 10_000] {
            expected.extend([row(1, 2, start), row(2, 2, start), row(3, 2, start)]);
        }
        expected.extend([row(3, 1, 12_000), row(3, 1, 14_000)]);
        assert_rows(q5(&events), expected);
    }

    // --- q6 -----------------------------------------------------------------------------------

    #[test]
    fn q6_orders_a_sellers_auctions_by_expires_then_id() {
        let events = [
            auction(10, 1, 10, 0, 300),
            auction(12, 1, 10, 0, 200),
            auction(11, 1, 10, 0, 200),
            auction(13, 1, 10, 0, 250), // no valid bid: no row, and not in any mean
            bid(10, 9, 100, 100),
            bid(11, 9, 10, 100),
            bid(12, 9, 40, 100),
            bid(13, 9, 1_000, 251),
            auction(20, 2, 10, 0, 100), // another seller, averaged separately
            bid(20, 9, 7, 50),
        ];
        // Closing order 11 (10), 12 (40), 10 (100): means 10, 25, 50. (Ordering by id alone
        // would give 100, 55, 50; expires then id descending 40, 25, 50.)
        assert_rows(
            q6(&events),
            vec![
                json!({"seller": 1, "avg_price": 10}),
                json!({"seller": 1, "avg_price": 25}),
                json!({"seller": 1, "avg_price": 50}),
                json!({"seller": 2, "avg_price": 7}),
            ],
        );
    }

    #[test]
    fn q6_averages_the_last_10_auctions_only() {
        // 12 auctions closing in id order with final prices 1 … 12, given in reverse.
        let mut events = Vec::new();
        for k in (1..=12).rev() {
            events.push(auction(k, 5, 10, 0, 1_000 + k));
            events.push(bid(k, 9, k, 500));
        }
        // floor(mean(1..=k)) for k <= 10, then floor(mean(2..=11)) = 6, floor(mean(3..=12)) = 7.
        let expected = [1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 7]
            .map(|avg| json!({"seller": 5, "avg_price": avg}))
            .to_vec();
        assert_rows(q6(&events), expected);
    }

    // --- q7 -----------------------------------------------------------------------------------

    #[test]
    fn q7_keeps_every_bid_tied_for_the_window_maximum() {
        let events = [
            bid_with_extra(1, 7, 5, 0, "a"),
            bid_with_extra(2, 8, 9, 3_000, "b"),
            bid_with_extra(3, 9, 9, 9_999, "c"),
            bid_with_extra(4, 7, 1, 10_000, "d"), // first ms of the next window
        ];
        let row = |auction: i64, bidder: i64, price: i64, t: i64, extra: &str| {
            json!({
                "auction": auction, "price": price, "bidder": bidder, "dateTime": t, "extra": extra,
            })
        };
        assert_rows(
            q7(&events),
            vec![
                row(2, 8, 9, 3_000, "b"),
                row(3, 9, 9, 9_999, "c"),
                row(4, 7, 1, 10_000, "d"),
            ],
        );
    }

    // --- q8 -----------------------------------------------------------------------------------

    #[test]
    fn q8_needs_the_person_and_an_auction_in_the_same_window() {
        let events = [
            person(1, "Same", "OR", 10_500),
            auction(100, 1, 10, 19_999, 30_000), // same window [10000, 20000)
            person(2, "Adjacent", "OR", 19_999),
            auction(101, 2, 10, 20_000, 30_000), // next window: no row
            person(3, "Twice", "OR", 25_000),
            auction(102, 3, 10, 21_000, 30_000),
            auction(103, 3, 11, 29_000, 30_000), // two auctions, still one row
            auction(104, 4, 10, 30_000, 40_000), // auction before its seller registers
            person(4, "AuctionFirst", "WA", 39_999),
            person(5, "NoAuction", "OR", 10_000),
        ];
        assert_rows(
            q8(&events),
            vec![
                json!({"id": 1, "name": "Same", "starttime": 10_000}),
                json!({"id": 3, "name": "Twice", "starttime": 20_000}),
                json!({"id": 4, "name": "AuctionFirst", "starttime": 30_000}),
            ],
        );
    }

    // --- q9 -----------------------------------------------------------------------------------

    #[test]
    fn q9_winner_counts_bids_at_both_ends_and_excludes_bids_outside() {
        let a1 = (1, 50, 10, 1_000, 5_000);
        let a2 = (2, 51, 11, 1_000, 5_000);
        let events = [
            bid(1, 60, 900, 999), // before the auction: excluded
            auction(a1.0, a1.1, a1.2, a1.3, a1.4),
            bid(1, 61, 10, 1_000),    // at dateTime: included
            bid(1, 62, 1_000, 5_001), // after expires: excluded
            auction(a2.0, a2.1, a2.2, a2.3, a2.4),
            bid(2, 63, 30, 5_000), // at expires: included, and the highest
            bid(2, 64, 20, 1_000),
            auction(3, 52, 12, 1_000, 5_000), // no bid at all: dropped
        ];
        assert_rows(
            q9(&events),
            vec![
                q9_row(a1, (61, 10, 1_000, "")),
                q9_row(a2, (63, 30, 5_000, "")),
            ],
        );
    }

    #[test]
    fn q9_ties_go_to_the_earliest_bid_then_the_lowest_bidder() {
        let a1 = (1, 50, 10, 0, 10_000);
        let a2 = (2, 50, 10, 0, 10_000);
        let a3 = (3, 50, 10, 0, 10_000);
        let events = [
            auction(a1.0, a1.1, a1.2, a1.3, a1.4),
            auction(a2.0, a2.1, a2.2, a2.3, a2.4),
            auction(a3.0, a3.1, a3.2, a3.3, a3.4),
            // a1: same price, the earliest wins even with a higher bidder id.
            bid_with_extra(1, 9, 50, 3_000, "later"),
            bid_with_extra(1, 8, 50, 4_000, "latest"),
            bid_with_extra(1, 70, 50, 2_000, "earliest"),
            // a2: same price and time, the lowest bidder wins.
            bid_with_extra(2, 72, 50, 2_000, "high bidder"),
            bid_with_extra(2, 71, 50, 2_000, "low bidder"),
            bid_with_extra(2, 1, 49, 1_000, "cheaper"),
            // a3: same price, time and bidder: the smallest extra, whatever the order.
            bid_with_extra(3, 5, 50, 2_000, "b"),
            bid_with_extra(3, 5, 50, 2_000, "a"),
            bid_with_extra(3, 5, 50, 2_000, "c"),
        ];
        let expected = vec![
            q9_row(a1, (70, 50, 2_000, "earliest")),
            q9_row(a2, (71, 50, 2_000, "low bidder")),
            q9_row(a3, (5, 50, 2_000, "a")),
        ];
        assert_rows(q9(&events), expected.clone());
        let mut reversed = events.to_vec();
        reversed.reverse();
        assert_rows(q9(&reversed), expected);
    }

    // --- q11 ----------------------------------------------------------------------------------

    #[test]
    fn q11_gap_of_exactly_10000_merges_and_10001_splits() {
        let events = [
            bid(1, 100, 5, 0),
            bid(1, 100, 5, 10_000), // exactly the gap: same session
            bid(1, 200, 5, 0),
            bid(1, 200, 5, 10_001), // one ms more: new session
        ];
        assert_rows(
            q11(&events),
            vec![
                json!({"bidder": 100, "bid_count": 2, "starttime": 0, "endtime": 20_000}),
                json!({"bidder": 200, "bid_count": 1, "starttime": 0, "endtime": 10_000}),
                json!({"bidder": 200, "bid_count": 1, "starttime": 10_001, "endtime": 20_001}),
            ],
        );
    }

    #[test]
    fn q11_a_late_bid_bridges_two_sessions() {
        let apart = [bid(1, 7, 5, 0), bid(2, 7, 5, 20_000)];
        assert_rows(
            q11(&apart),
            vec![
                json!({"bidder": 7, "bid_count": 1, "starttime": 0, "endtime": 10_000}),
                json!({"bidder": 7, "bid_count": 1, "starttime": 20_000, "endtime": 30_000}),
            ],
        );
        // The bid at 10000 arrives last, 10 s after its predecessor and 10 s before its
        // successor in time: the two sessions become one.
        let bridged = [apart[0].clone(), apart[1].clone(), bid(3, 7, 5, 10_000)];
        assert_rows(
            q11(&bridged),
            vec![json!({"bidder": 7, "bid_count": 3, "starttime": 0, "endtime": 30_000})],
        );
    }

    // --- shuffle_within and order independence on generated events --------------------------

    const GENERATED: u64 = 100_000;

    fn generated() -> Vec<Event> {
        let generator = Generator::new(GeneratorConfig::default());
        (0..GENERATED).map(|n| generator.event(n)).collect()
    }

    /// The events' multiset, as sorted debug strings (`Event` is neither `Ord` nor `Hash`).
    fn multiset(events: &[Event]) -> Vec<String> {
        let mut all: Vec<String> = events.iter().map(|e| format!("{e:?}")).collect();
        all.sort_unstable();
        all
    }

    #[test]
    fn shuffle_within_keeps_the_events_and_bounds_their_disorder() {
        let events = generated();
        // (From time-ordered input, ties broken by position, an event can trail by at most
        // max_delay_ms - 1: it needs a strictly smaller key than a later-positioned one.)
        for max_delay_ms in [0, 2, 250, 3_000] {
            let shuffled = shuffle_within(events.clone(), max_delay_ms, 42);
            assert_eq!(multiset(&shuffled), multiset(&events));
            let mut seen = i64::MIN;
            let (mut late, mut most_late) = (0, 0);
            for (position, event) in shuffled.iter().enumerate() {
                let t = event.date_time();
                assert!(
                    t >= seen.saturating_sub(max_delay_ms),
                    "event {position} at {t} is more than {max_delay_ms} ms behind {seen}"
                );
                if t < seen {
                    late += 1;
                    most_late = most_late.max(seen - t);
                }
                seen = seen.max(t);
            }
            if max_delay_ms == 0 {
                // The generator's events are already in time order: nothing moves.
                assert_eq!(late, 0);
                assert!(shuffled == events);
            } else {
                // The bound is not met by luck: events really are out of order, by up to
                // about the bound.
                assert!(late > 100, "only {late} late events at {max_delay_ms} ms");
                assert!(
                    most_late >= max_delay_ms / 2,
                    "at most {most_late} ms late with a {max_delay_ms} ms bound"
                );
            }
        }
    }

    #[test]
    fn shuffle_within_is_deterministic_per_seed() {
        let events: Vec<Event> = generated().into_iter().take(10_000).collect();
        let a = shuffle_within(events.clone(), 500, 7);
        let b = shuffle_within(events.clone(), 500, 7);
        let c = shuffle_within(events, 500, 8);
        assert!(a == b, "the same seed gave two orders");
        assert!(a != c, "two seeds gave the same order");
    }

    #[test]
    fn q4_and_q6_agree_with_q9_winning_prices_on_generated_events() {
        let events = generated();
        let winners = q9(&events);
        let mut per_category: BTreeMap<i64, (i128, usize)> = BTreeMap::new();
        for row in &winners {
            let (sum, count) = per_category
                .entry(row["category"].as_i64().unwrap())
                .or_default();
            *sum += i128::from(row["price"].as_i64().unwrap());
            *count += 1;
        }
        let from_q9: Vec<Value> = per_category
            .into_iter()
            .map(|(category, (sum, count))| {
                json!({"category": category, "avg_final": floor_mean(sum, count)})
            })
            .collect();
        assert_rows(q4(&events), from_q9);
        // One q6 row per auction with a final price, i.e. per q9 row.
        assert_eq!(q6(&events).len(), winners.len());
    }

    #[test]
    fn every_query_gives_the_same_rows_on_shuffled_input() {
        let ordered = generated();
        let shuffled = shuffle_within(ordered.clone(), 5_000, 1);
        let mut reversed = ordered.clone();
        reversed.reverse();
        type Query = fn(&[Event]) -> Vec<Value>;
        let queries: [(&str, Query); 17] = [
            ("q3", q3),
            ("q4", q4),
            ("q5", q5),
            ("q6", q6),
            ("q7", q7),
            ("q8", q8),
            ("q9", q9),
            ("q11", q11),
            ("q14", q14),
            ("q15", q15),
            ("q16", q16),
            ("q17", q17),
            ("q18", q18),
            ("q19", q19),
            ("q20", q20),
            ("q21", q21),
            ("q22", q22),
        ];
        for (name, query) in queries {
            let expected = sorted(query(&ordered));
            assert!(
                !expected.is_empty(),
                "{name} has no rows: the check would be vacuous"
            );
            assert!(
                sorted(query(&shuffled)) == expected,
                "{name} differs on shuffled input"
            );
            assert!(
                sorted(query(&reversed)) == expected,
                "{name} differs on reversed input"
            );
        }
    }
}
