//! Tests of the generator: the batch path against the plain path, the split, Beam's invariants,
//! and the JSON lines.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Int64Type, TimestampMillisecondType};
use arrow_array::{Array, RecordBatch};

use super::*;

const SEEDS: [u64; 4] = [0, 1, 0xdead_beef, u64::MAX];

fn generator(seed: u64) -> Arc<Generator> {
    Arc::new(Generator::new(GeneratorConfig {
        seed,
        ..GeneratorConfig::default()
    }))
}

fn ints(batch: &RecordBatch, column: &str) -> Vec<i64> {
    let array = batch.column_by_name(column).expect("column exists");
    assert_eq!(array.null_count(), 0, "{column} has no nulls");
    array.as_primitive::<Int64Type>().values().to_vec()
}

fn times(batch: &RecordBatch, column: &str) -> Vec<i64> {
    let array = batch.column_by_name(column).expect("column exists");
    assert_eq!(array.null_count(), 0, "{column} has no nulls");
    array
        .as_primitive::<TimestampMillisecondType>()
        .values()
        .to_vec()
}

fn strings(batch: &RecordBatch, column: &str) -> Vec<String> {
    let array = batch.column_by_name(column).expect("column exists");
    assert_eq!(array.null_count(), 0, "{column} has no nulls");
    array
        .as_string::<i32>()
        .iter()
        .map(|s| s.expect("not null").to_owned())
        .collect()
}

/// The rows of `batch`, in order, per kind, as model events.
fn batch_rows(batch: &GeneratedBatch) -> HashMap<EventKind, Vec<Event>> {
    let mut rows = HashMap::new();
    if let Some(b) = &batch.person {
        assert_eq!(b.schema(), person_schema());
        let (id, name, email, card, city, state, time, extra) = (
            ints(b, "id"),
            strings(b, "name"),
            strings(b, "emailAddress"),
            strings(b, "creditCard"),
            strings(b, "city"),
            strings(b, "state"),
            times(b, "dateTime"),
            strings(b, "extra"),
        );
        let persons = (0..b.num_rows())
            .map(|i| {
                Event::Person(Person {
                    id: id[i],
                    name: name[i].clone(),
                    email_address: email[i].clone(),
                    credit_card: card[i].clone(),
                    city: city[i].clone(),
                    state: state[i].clone(),
                    date_time: time[i],
                    extra: extra[i].clone(),
                })
            })
            .collect();
        rows.insert(EventKind::Person, persons);
    }
    if let Some(b) = &batch.auction {
        assert_eq!(b.schema(), auction_schema());
        let (id, item, desc, initial, reserve, time, expires, seller, category, extra) = (
            ints(b, "id"),
            strings(b, "itemName"),
            strings(b, "description"),
            ints(b, "initialBid"),
            ints(b, "reserve"),
            times(b, "dateTime"),
            times(b, "expires"),
            ints(b, "seller"),
            ints(b, "category"),
            strings(b, "extra"),
        );
        let auctions = (0..b.num_rows())
            .map(|i| {
                Event::Auction(Auction {
                    id: id[i],
                    item_name: item[i].clone(),
                    description: desc[i].clone(),
                    initial_bid: initial[i],
                    reserve: reserve[i],
                    date_time: time[i],
                    expires: expires[i],
                    seller: seller[i],
                    category: category[i],
                    extra: extra[i].clone(),
                })
            })
            .collect();
        rows.insert(EventKind::Auction, auctions);
    }
    if let Some(b) = &batch.bid {
        assert_eq!(b.schema(), bid_schema());
        let (auction, bidder, price, channel, url, time, extra) = (
            ints(b, "auction"),
            ints(b, "bidder"),
            ints(b, "price"),
            strings(b, "channel"),
            strings(b, "url"),
            times(b, "dateTime"),
            strings(b, "extra"),
        );
        let bids = (0..b.num_rows())
            .map(|i| {
                Event::Bid(Bid {
                    auction: auction[i],
                    bidder: bidder[i],
                    price: price[i],
                    channel: channel[i].clone(),
                    url: url[i].clone(),
                    date_time: time[i],
                    extra: extra[i].clone(),
                })
            })
            .collect();
        rows.insert(EventKind::Bid, bids);
    }
    rows
}

/// Pairs the rows of `batch` with the event numbers `numbers` the batch consumed (kinds not in
/// `want` are skipped), checking that every row is used exactly once.
fn number_rows(batch: &GeneratedBatch, numbers: &[u64], want: Kinds) -> Vec<(u64, Event)> {
    let mut rows: HashMap<EventKind, std::vec::IntoIter<Event>> = batch_rows(batch)
        .into_iter()
        .map(|(kind, rows)| (kind, rows.into_iter()))
        .collect();
    let mut out = Vec::new();
    for &n in numbers {
        let kind = Generator::kind(n);
        if !want.contains(kind) {
            continue;
        }
        let row = rows
            .get_mut(&kind)
            .and_then(Iterator::next)
            .unwrap_or_else(|| panic!("batch is missing the {kind:?} row of event {n}"));
        out.push((n, row));
    }
    for (kind, mut rest) in rows {
        assert!(rest.next().is_none(), "batch has extra {kind:?} rows");
    }
    out
}

/// Drains `split` in batches of `batch_events`, returning every event with its number, checking
/// each batch's bookkeeping along the way.
fn drain(
    split: &mut Split,
    subtask: u64,
    parallelism: u64,
    batch_events: usize,
) -> Vec<(u64, Event)> {
    let mut out = Vec::new();
    while !split.is_done() {
        let position = split.position();
        let batch = split.next_batch(batch_events, Kinds::ALL);
        assert!(batch.events > 0 && batch.events <= batch_events as u64);
        assert_eq!(split.position(), position + batch.events);
        let numbers: Vec<u64> = (position..position + batch.events)
            .map(|p| subtask + p * parallelism)
            .collect();
        let last = *numbers.last().expect("non-empty batch");
        assert_eq!(
            batch.max_event_time,
            Some(split.generator().event_time(last))
        );
        out.extend(number_rows(&batch, &numbers, Kinds::ALL));
    }
    out
}

fn json_line(event: &Event) -> String {
    let mut out = Vec::new();
    write_json_line(event, &mut out);
    String::from_utf8(out).expect("JSON lines are UTF-8")
}

#[test]
fn batch_rows_equal_plain_events_for_several_seeds() {
    for seed in SEEDS {
        let generator = generator(seed);
        let mut split = Split::new(generator.clone(), 0, 1, Some(20_011));
        let events = drain(&mut split, 0, 1, 1000);
        assert_eq!(events.len(), 20_011);
        for (n, event) in events {
            assert_eq!(event, generator.event(n), "seed {seed}, event {n}");
        }
    }
}

#[test]
fn subtasks_together_produce_every_event_exactly_once() {
    const TOTAL: u64 = 100_003;
    let generator = generator(42);
    let mut single: Vec<String> = (0..TOTAL).map(|n| json_line(&generator.event(n))).collect();
    single.sort_unstable();
    for parallelism in 1..=4u64 {
        let mut union = Vec::new();
        let mut numbers = Vec::new();
        for subtask in 0..parallelism {
            let mut split = Split::new(
                generator.clone(),
                subtask as usize,
                parallelism as usize,
                Some(TOTAL),
            );
            for (n, event) in drain(&mut split, subtask, parallelism, 4093) {
                assert_eq!(n % parallelism, subtask);
                assert_eq!(event, generator.event(n), "p {parallelism}, event {n}");
                numbers.push(n);
                union.push(json_line(&event));
            }
            assert_eq!(split.remaining(), Some(0));
            assert_eq!(split.next_batch(10, Kinds::ALL).events, 0);
        }
        numbers.sort_unstable();
        assert_eq!(numbers, (0..TOTAL).collect::<Vec<_>>(), "p {parallelism}");
        union.sort_unstable();
        assert!(
            union == single,
            "p {parallelism}: union differs from the single sequence"
        );
    }
}

#[test]
fn seek_resumes_exactly_where_position_was_taken() {
    let generator = generator(7);
    for (subtask, parallelism) in [(0, 1), (2, 3), (3, 4)] {
        let mut split = Split::new(generator.clone(), subtask, parallelism, None);
        split.next_batch(777, Kinds::ALL);
        split.next_batch(100, Kinds::only(EventKind::Bid));
        let checkpoint = split.position();
        assert_eq!(checkpoint, 877);
        let expected: Vec<_> = (0..5)
            .map(|_| batch_rows(&split.next_batch(333, Kinds::ALL)))
            .collect();

        let mut restored = Split::new(generator.clone(), subtask, parallelism, None);
        restored.seek(checkpoint);
        let actual: Vec<_> = (0..5)
            .map(|_| batch_rows(&restored.next_batch(333, Kinds::ALL)))
            .collect();
        assert_eq!(actual, expected);
        assert_eq!(restored.position(), split.position());

        // Seeking backwards replays.
        restored.seek(checkpoint);
        assert_eq!(
            batch_rows(&restored.next_batch(333, Kinds::ALL)),
            expected[0]
        );
    }
}

#[test]
fn unwanted_kinds_are_consumed_not_built() {
    let generator = generator(3);
    let mut all = Split::new(generator.clone(), 1, 2, Some(10_000));
    let mut bids_only = Split::new(generator.clone(), 1, 2, Some(10_000));
    let want = Kinds::only(EventKind::Bid);
    while !all.is_done() {
        let full = all.next_batch(999, Kinds::ALL);
        let partial = bids_only.next_batch(999, want);
        assert_eq!(partial.events, full.events);
        assert_eq!(partial.max_event_time, full.max_event_time);
        assert!(partial.person.is_none() && partial.auction.is_none());
        assert_eq!(partial.bid, full.bid);
    }
    assert!(bids_only.is_done());
    let none = Kinds {
        person: false,
        auction: false,
        bid: false,
    };
    let mut skipping = Split::new(generator, 0, 1, Some(500));
    let batch = skipping.next_batch(1000, none);
    assert_eq!(batch.events, 500);
    assert!(batch.person.is_none() && batch.auction.is_none() && batch.bid.is_none());
    assert!(skipping.is_done());
}

#[test]
fn kinds_without_rows_in_a_batch_are_none() {
    // Events 4..=49 are all bids.
    let mut split = Split::new(generator(0), 0, 1, Some(50));
    split.seek(4);
    let batch = split.next_batch(46, Kinds::ALL);
    assert_eq!(batch.events, 46);
    assert!(batch.person.is_none() && batch.auction.is_none());
    assert_eq!(batch.bid.map(|b| b.num_rows()), Some(46));
    assert!(split.is_done());
}

#[test]
fn split_stops_at_the_total_even_when_it_is_not_a_multiple_of_parallelism() {
    let generator = generator(0);
    for (subtask, parallelism, total, expected) in [
        (0, 3, 10, 4), // 0 3 6 9
        (1, 3, 10, 3), // 1 4 7
        (2, 3, 10, 3), // 2 5 8
        (4, 5, 3, 0),
        (0, 1, 0, 0),
    ] {
        let mut split = Split::new(generator.clone(), subtask, parallelism, Some(total));
        assert_eq!(split.remaining(), Some(expected));
        let batch = split.next_batch(1000, Kinds::ALL);
        assert_eq!(batch.events, expected);
        assert!(split.is_done());
        if expected == 0 {
            assert_eq!(batch.max_event_time, None);
        }
    }
    let unbounded = Split::new(generator, 0, 1, None);
    assert!(!unbounded.is_done());
    assert_eq!(unbounded.remaining(), None);
}

#[test]
fn event_types_are_exactly_1_3_46_in_every_50() {
    for epoch in [0u64, 1, 17, 1_000_000_007] {
        let kinds: Vec<EventKind> = (epoch * 50..epoch * 50 + 50).map(Generator::kind).collect();
        assert_eq!(kinds[0], EventKind::Person);
        assert!(kinds[1..4].iter().all(|&k| k == EventKind::Auction));
        assert!(kinds[4..].iter().all(|&k| k == EventKind::Bid));
    }
    assert_eq!(PERSON_PROPORTION + AUCTION_PROPORTION + BID_PROPORTION, 50);
    let generator = generator(0);
    for n in 0..500 {
        assert_eq!(generator.event(n).kind(), Generator::kind(n));
    }
}

#[test]
fn person_and_auction_ids_count_up_from_1000() {
    let generator = generator(9);
    let (mut next_person, mut next_auction) = (FIRST_PERSON_ID, FIRST_AUCTION_ID);
    for n in 0..50_000 {
        match generator.event(n) {
            Event::Person(p) => {
                assert_eq!(p.id, next_person, "event {n}");
                next_person += 1;
            }
            Event::Auction(a) => {
                assert_eq!(a.id, next_auction, "event {n}");
                next_auction += 1;
            }
            Event::Bid(_) => {}
        }
    }
    assert_eq!(next_person - FIRST_PERSON_ID, 1000);
    assert_eq!(next_auction - FIRST_AUCTION_ID, 3000);
}

#[test]
fn references_stay_within_generated_ids_plus_lead() {
    for seed in SEEDS {
        let generator = generator(seed);
        let (mut last_person, mut last_auction) = (FIRST_PERSON_ID - 1, FIRST_AUCTION_ID - 1);
        let person_lead = PERSON_ID_LEAD as i64;
        let auction_lead = AUCTION_ID_LEAD as i64;
        for n in 0..200_000 {
            match generator.event(n) {
                Event::Person(p) => last_person = p.id,
                Event::Auction(a) => {
                    last_auction = a.id;
                    assert!(a.seller >= FIRST_PERSON_ID);
                    assert!(a.seller <= last_person + person_lead, "event {n}");
                    // Randomly chosen sellers are among the last 1,000 people (or the hot one).
                    assert!(a.seller > last_person - 1000 - HOT_SELLER_BATCH as i64);
                }
                Event::Bid(b) => {
                    assert!(b.auction >= FIRST_AUCTION_ID && b.bidder >= FIRST_PERSON_ID);
                    assert!(b.auction <= last_auction + auction_lead, "event {n}");
                    assert!(b.bidder <= last_person + person_lead, "event {n}");
                    assert!(b.auction >= last_auction - 100 - HOT_AUCTION_BATCH as i64);
                    assert!(b.bidder > last_person - 1000 - HOT_BIDDER_BATCH as i64);
                }
            }
        }
    }
}

#[test]
fn hot_auctions_sellers_and_bidders_take_their_configured_share() {
    let generator = generator(11);
    let (mut bids, mut hot_auction, mut hot_bidder) = (0u32, 0u32, 0u32);
    let (mut auctions, mut hot_seller) = (0u32, 0u32);
    for n in 0..500_000u64 {
        let last_person = (n / 50) as i64; // 0-based
        match generator.event(n) {
            Event::Bid(b) => {
                let last_auction = (n / 50 * 3 + 2) as i64;
                bids += 1;
                hot_auction += u32::from(b.auction - FIRST_AUCTION_ID == last_auction / 100 * 100);
                hot_bidder += u32::from(b.bidder - FIRST_PERSON_ID == last_person / 100 * 100 + 1);
            }
            Event::Auction(a) => {
                auctions += 1;
                hot_seller += u32::from(a.seller - FIRST_PERSON_ID == last_person / 100 * 100);
            }
            Event::Person(_) => {}
        }
    }
    // 1 - 1/ratio are hot by choice; a few more pick the hot one at random.
    let share = |hits: u32, total: u32| f64::from(hits) / f64::from(total);
    assert!(
        (0.49..0.52).contains(&share(hot_auction, bids)),
        "{}",
        share(hot_auction, bids)
    );
    assert!(
        (0.74..0.77).contains(&share(hot_bidder, bids)),
        "{}",
        share(hot_bidder, bids)
    );
    assert!(
        (0.74..0.77).contains(&share(hot_seller, auctions)),
        "{}",
        share(hot_seller, auctions)
    );
}

#[test]
fn fields_stay_in_their_domains() {
    let generator = generator(5);
    let mut categories = [0u32; 5];
    let mut hot_channels = 0u32;
    let mut bids = 0u32;
    for n in 0..100_000 {
        match generator.event(n) {
            Event::Person(p) => {
                assert!(US_STATES.contains(&p.state.as_str()), "{}", p.state);
                assert!(US_CITIES.contains(&p.city.as_str()), "{}", p.city);
                let (first, last) = p.name.split_once(' ').expect("two names");
                assert!(FIRST_NAMES.contains(&first) && LAST_NAMES.contains(&last));
                let card: Vec<&str> = p.credit_card.split(' ').collect();
                assert_eq!(card.len(), 4, "{}", p.credit_card);
                assert!(
                    card.iter()
                        .all(|g| g.len() == 4 && g.bytes().all(|b| b.is_ascii_digit()))
                );
                let (user, domain) = p.email_address.split_once('@').expect("an @");
                assert!(
                    domain.ends_with(".com") && user.len() <= 6,
                    "{}",
                    p.email_address
                );
                assert!(p.extra.bytes().all(|b| b.is_ascii_lowercase()));
            }
            Event::Auction(a) => {
                assert!((10..=14).contains(&a.category));
                categories[(a.category - 10) as usize] += 1;
                assert!((100..=100_000_000).contains(&a.initial_bid));
                assert!(a.reserve >= a.initial_bid + 100);
                assert!(a.expires > a.date_time);
                assert!(!a.item_name.starts_with(' ') && !a.item_name.ends_with(' '));
                assert!(a.item_name.len() < 20 && a.description.len() < 100);
            }
            Event::Bid(b) => {
                bids += 1;
                assert!((100..=100_000_000).contains(&b.price));
                assert!(b.url.starts_with("https://www.nexmark.com/"), "{}", b.url);
                if ["Google", "Facebook", "Baidu", "Apple"].contains(&b.channel.as_str()) {
                    hot_channels += 1;
                    assert!(b.url.ends_with("/item.htm?query=1"), "{}", b.url);
                } else {
                    let k: u32 = b.channel["channel-".len()..]
                        .parse()
                        .expect("channel number");
                    assert!(b.channel.starts_with("channel-") && k < 10_000);
                }
                assert!(b.extra.bytes().all(|b| b.is_ascii_lowercase()));
            }
        }
    }
    assert!(categories.iter().all(|&c| c > 1000), "{categories:?}");
    let hot_share = f64::from(hot_channels) / f64::from(bids);
    assert!((0.49..0.51).contains(&hot_share), "{hot_share}");
}

#[test]
fn extra_padding_gives_beam_average_sizes() {
    for seed in [0, 77] {
        for (person, auction, bid) in [(200, 500, 100), (1000, 2000, 300)] {
            let generator = Generator::new(GeneratorConfig {
                seed,
                avg_person_bytes: person,
                avg_auction_bytes: auction,
                avg_bid_bytes: bid,
                ..GeneratorConfig::default()
            });
            let mut totals: HashMap<EventKind, (usize, usize)> = HashMap::new();
            for n in 0..300_000 {
                let event = generator.event(n);
                let entry = totals.entry(event.kind()).or_default();
                entry.0 += event.size_in_bytes();
                entry.1 += 1;
            }
            for (kind, target) in [
                (EventKind::Person, person),
                (EventKind::Auction, auction),
                (EventKind::Bid, bid),
            ] {
                let (bytes, count) = totals[&kind];
                let average = bytes as f64 / count as f64;
                let error = (average - target as f64).abs() / target as f64;
                assert!(error < 0.02, "seed {seed} {kind:?}: {average} vs {target}");
            }
        }
    }
}

#[test]
fn extra_is_empty_when_the_fixed_fields_exceed_the_average() {
    let generator = Generator::new(GeneratorConfig {
        avg_person_bytes: 10,
        avg_auction_bytes: 10,
        avg_bid_bytes: 10,
        ..GeneratorConfig::default()
    });
    for n in 0..1000 {
        let extra = match generator.event(n) {
            Event::Person(p) => p.extra,
            Event::Auction(a) => a.extra,
            Event::Bid(b) => b.extra,
        };
        assert_eq!(extra, "");
    }
}

#[test]
fn event_time_follows_the_fixed_rate() {
    let generator = generator(0);
    let base = 1_700_000_000_000;
    assert_eq!(generator.event_time(0), base);
    assert_eq!(generator.event_time(9), base);
    assert_eq!(generator.event_time(10), base + 1);
    assert_eq!(generator.event_time(10_000), base + 1000);
    for n in [0, 1, 49, 50, 12_345] {
        assert_eq!(generator.event(n).date_time(), generator.event_time(n));
    }
    let fast = Generator::new(GeneratorConfig {
        inter_event_delay_ns: 1_500_000,
        ..GeneratorConfig::default()
    });
    assert_eq!(fast.event_time(3), base + 4); // floor(4.5)
    assert_eq!(fast.event_time(u64::MAX), i64::MAX);
    let mut previous = i64::MIN;
    for n in 0..100_000 {
        let t = generator.event_time(n);
        assert!(t >= previous);
        previous = t;
    }
}

#[test]
fn auctions_last_on_average_until_100_auctions_later() {
    let generator = generator(0);
    let (mut total, mut count) = (0i64, 0i64);
    for n in 0..300_000 {
        if let Event::Auction(a) = generator.event(n) {
            total += a.expires - a.date_time;
            count += 1;
        }
    }
    // 100 auctions take 100 × 50 / 3 events = 166.6 ms at 10,000 events/s.
    let average = total as f64 / count as f64;
    assert!((160.0..174.0).contains(&average), "{average}");
}

#[test]
fn events_are_a_pure_function_of_seed_and_number() {
    let a = generator(123);
    let b = generator(123);
    let c = generator(124);
    let forwards: Vec<Event> = (0..2000).map(|n| a.event(n)).collect();
    let backwards: Vec<Event> = (0..2000).rev().map(|n| b.event(n)).collect();
    assert!(forwards.iter().eq(backwards.iter().rev()));
    let differing = (0..2000)
        .filter(|&n| c.event(n) != forwards[n as usize])
        .count();
    assert_eq!(differing, 2000, "another seed changes every event");
}

#[test]
fn json_lines_parse_into_the_schema_fields_with_the_right_types() {
    let generator = generator(31);
    for n in 0..5000 {
        let event = generator.event(n);
        let line = json_line(&event);
        assert!(line.ends_with("}}\n") && line.matches('\n').count() == 1);
        let value: serde_json::Value = serde_json::from_str(&line).expect("valid JSON");
        let object = value.as_object().expect("an object");
        assert_eq!(object.len(), 2);
        let kind = object["type"].as_str().expect("a type");
        assert_eq!(kind, event.kind().as_str());
        let fields = object[kind].as_object().expect("a nested object");
        let int = |key: &str| {
            fields[key]
                .as_i64()
                .unwrap_or_else(|| panic!("{key} is an integer"))
        };
        let string = |key: &str| {
            fields[key]
                .as_str()
                .unwrap_or_else(|| panic!("{key} is a string"))
        };
        match &event {
            Event::Person(p) => {
                assert_eq!(fields.len(), 8);
                assert_eq!(int("id"), p.id);
                assert_eq!(string("name"), p.name);
                assert_eq!(string("emailAddress"), p.email_address);
                assert_eq!(string("creditCard"), p.credit_card);
                assert_eq!(string("city"), p.city);
                assert_eq!(string("state"), p.state);
                assert_eq!(int("dateTime"), p.date_time);
                assert_eq!(string("extra"), p.extra);
            }
            Event::Auction(a) => {
                assert_eq!(fields.len(), 10);
                assert_eq!(int("id"), a.id);
                assert_eq!(string("itemName"), a.item_name);
                assert_eq!(string("description"), a.description);
                assert_eq!(int("initialBid"), a.initial_bid);
                assert_eq!(int("reserve"), a.reserve);
                assert_eq!(int("dateTime"), a.date_time);
                assert_eq!(int("expires"), a.expires);
                assert_eq!(int("seller"), a.seller);
                assert_eq!(int("category"), a.category);
                assert_eq!(string("extra"), a.extra);
            }
            Event::Bid(b) => {
                assert_eq!(fields.len(), 7);
                assert_eq!(int("auction"), b.auction);
                assert_eq!(int("bidder"), b.bidder);
                assert_eq!(int("price"), b.price);
                assert_eq!(string("channel"), b.channel);
                assert_eq!(string("url"), b.url);
                assert_eq!(int("dateTime"), b.date_time);
                assert_eq!(string("extra"), b.extra);
            }
        }
    }
}

#[test]
fn json_keys_and_arrow_fields_follow_the_schema_order() {
    let expected: [(&str, SchemaRef, &[&str]); 3] = [
        (
            "person",
            person_schema(),
            &[
                "id",
                "name",
                "emailAddress",
                "creditCard",
                "city",
                "state",
                "dateTime",
                "extra",
            ],
        ),
        (
            "auction",
            auction_schema(),
            &[
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
        ),
        (
            "bid",
            bid_schema(),
            &[
                "auction", "bidder", "price", "channel", "url", "dateTime", "extra",
            ],
        ),
    ];
    let generator = generator(0);
    for (kind, schema, keys) in expected {
        let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(names, keys);
        for field in schema.fields() {
            assert!(field.is_nullable());
            let expected_type = match field.name().as_str() {
                "dateTime" | "expires" => DataType::Timestamp(TimeUnit::Millisecond, None),
                name if keys_are_ints(name) => DataType::Int64,
                _ => DataType::Utf8,
            };
            assert_eq!(field.data_type(), &expected_type, "{kind}.{}", field.name());
        }
        let n = (0..50)
            .find(|&n| Generator::kind(n).as_str() == kind)
            .expect("a kind");
        let line = json_line(&generator.event(n));
        let prefix = format!(r#"{{"type":"{kind}","{kind}":{{"#);
        assert!(line.starts_with(&prefix), "{line}");
        let positions: Vec<usize> = keys
            .iter()
            .map(|key| line.find(&format!(r#""{key}":"#)).expect("key present"))
            .collect();
        assert!(positions.windows(2).all(|w| w[0] < w[1]), "{line}");
    }
}

use arrow_schema::{DataType, SchemaRef, TimeUnit};

fn keys_are_ints(name: &str) -> bool {
    matches!(
        name,
        "id" | "initialBid" | "reserve" | "seller" | "category" | "auction" | "bidder" | "price"
    )
}

#[test]
fn write_json_line_escapes_strings() {
    let tricky =
        "quote\" backslash\\ newline\n tab\t cr\r bell\u{7} nul\u{0} del\u{7f} é ü 雪 🦀 </";
    let event = Event::Person(Person {
        id: -1,
        name: tricky.to_owned(),
        email_address: String::new(),
        credit_card: "\u{1f}\u{8}\u{c}".to_owned(),
        city: "\\\"".to_owned(),
        state: "OR".to_owned(),
        date_time: i64::MIN,
        extra: "x".repeat(3),
    });
    let line = json_line(&event);
    assert!(
        !line[..line.len() - 1].contains('\n'),
        "raw newline in {line:?}"
    );
    assert!(line.contains(r#"\u0007"#) && line.contains(r#"\u0000"#) && line.contains(r#"\b\f"#));
    let value: serde_json::Value = serde_json::from_str(&line).expect("valid JSON");
    let person = &value["person"];
    assert_eq!(person["name"], tricky);
    assert_eq!(person["emailAddress"], "");
    assert_eq!(person["creditCard"], "\u{1f}\u{8}\u{c}");
    assert_eq!(person["city"], "\\\"");
    assert_eq!(person["id"], -1);
    assert_eq!(person["dateTime"], i64::MIN);
}

#[test]
fn write_json_line_appends() {
    let generator = generator(0);
    let mut out = b"existing\n".to_vec();
    write_json_line(&generator.event(0), &mut out);
    write_json_line(&generator.event(5), &mut out);
    let text = String::from_utf8(out).expect("UTF-8");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[0], "existing");
    assert!(lines[1].starts_with(r#"{"type":"person""#));
    assert!(lines[2].starts_with(r#"{"type":"bid""#));
}

#[test]
fn write_file_writes_every_event_and_leaves_no_temporary_file() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("events.jsonl");
    std::fs::write(&path, "old contents\n").expect("write");
    let generator = generator(8);
    write_file(&generator, 1234, &path).expect("write_file");
    let text = std::fs::read_to_string(&path).expect("read");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1234);
    for (n, line) in lines.iter().enumerate() {
        assert_eq!(format!("{line}\n"), json_line(&generator.event(n as u64)));
    }
    let entries: Vec<_> = std::fs::read_dir(dir.path())
        .expect("read dir")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(entries, vec![std::ffi::OsString::from("events.jsonl")]);

    write_file(&generator, 0, &path).expect("write_file");
    assert_eq!(std::fs::read_to_string(&path).expect("read"), "");
}

#[test]
fn write_file_fails_cleanly_on_a_missing_directory() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("missing").join("events.jsonl");
    assert!(write_file(&generator(0), 10, &path).is_err());
    assert!(write_file(&generator(0), 10, std::path::Path::new("/")).is_err());
}

#[test]
fn invalid_config_reports_every_problem() {
    let config = GeneratorConfig {
        num_active_people: 0,
        hot_auction_ratio: 0,
        hot_bidder_ratio: 0,
        avg_bid_bytes: MAX_AVG_BYTES + 1,
        ..GeneratorConfig::default()
    };
    let error = Generator::try_new(config).expect_err("invalid");
    assert_eq!(error.problems.len(), 4, "{error}");
    let message = error.to_string();
    for field in [
        "num_active_people",
        "hot_auction_ratio",
        "hot_bidder_ratio",
        "avg_bid_bytes",
    ] {
        assert!(message.contains(field), "{message}");
    }
    assert!(GeneratorConfig::default().validate().is_ok());
}

#[test]
fn large_configured_sizes_are_served_from_the_text_buffer() {
    let generator = Generator::new(GeneratorConfig {
        avg_auction_bytes: MAX_AVG_BYTES,
        ..GeneratorConfig::default()
    });
    let Event::Auction(a) = generator.event(1) else {
        panic!("event 1 is an auction");
    };
    let size = a.size_in_bytes() as f64;
    assert!(
        (0.79..1.21).contains(&(size / MAX_AVG_BYTES as f64)),
        "{size}"
    );
}

#[test]
fn generator_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Generator>();
    assert_send_sync::<Split>();
}

#[test]
fn debug_output_shows_the_config_not_the_random_text() {
    let split = Split::new(generator(0), 0, 1, None);
    let debug = format!("{split:?}");
    assert!(
        debug.contains("GeneratorConfig") && debug.len() < 1000,
        "{debug}"
    );
}
