//! Nexmark q3–q11 and q15–q20 against the plain-loop references of `nexmark_reference`, at
//! parallelism 1 and 2, chained and unchained, from the generator and from JSON lines, in order
//! and shuffled within the allowed out-of-orderness, on the heap and on RocksDB, with aggregates
//! in two phases (the default) and in one. The updating queries (q15–q17) are written as a
//! changelog and folded into their final table, which must be the reference's.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::OnceLock;

use serde_json::Value;
use weir_runtime::connectors::nexmark::{Event, Generator, GeneratorConfig, write_json_line};

use crate::nexmark_reference as reference;
use crate::support::*;

const EVENTS: u64 = 200_000;
/// Event time between events: 1 ms spreads 200,000 events over 200 s, so the windowed queries
/// see many windows (20 tumbling, 100 sliding) rather than a couple.
const DELAY_MS: u64 = 1;
/// Out-of-orderness of the shuffled input, in ms (reorders up to ~2,000 events).
const SHUFFLE_MS: i64 = 2_000;

fn events() -> &'static [Event] {
    static EVENTS_: OnceLock<Vec<Event>> = OnceLock::new();
    EVENTS_.get_or_init(|| {
        let generator = Generator::new(GeneratorConfig {
            inter_event_delay_ns: DELAY_MS * 1_000_000,
            ..GeneratorConfig::default()
        });
        (0..EVENTS).map(|n| generator.event(n)).collect()
    })
}

fn write_events(name: &str, events: &[Event]) -> std::path::PathBuf {
    let path =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}-{}.jsonl", std::process::id()));
    let mut out = Vec::new();
    for e in events {
        write_json_line(e, &mut out);
    }
    std::fs::write(&path, out).unwrap();
    path
}

/// The events, in order, as a JSON-lines file.
fn ordered_file() -> &'static Path {
    static FILE: OnceLock<std::path::PathBuf> = OnceLock::new();
    FILE.get_or_init(|| write_events("nexmark-ordered", events()))
}

/// The same events shuffled within [`SHUFFLE_MS`], as a JSON-lines file.
fn shuffled_file() -> &'static Path {
    static FILE: OnceLock<std::path::PathBuf> = OnceLock::new();
    FILE.get_or_init(|| {
        write_events(
            "nexmark-shuffled",
            &reference::shuffle_within(events().to_vec(), SHUFFLE_MS, 7),
        )
    })
}

/// Reduces an upsert stream to its final row per key (rows of a key are in order within the
/// part file of the subtask owning the key).
fn final_rows(rows: Vec<Value>, key: &str) -> Vec<Value> {
    let mut last: BTreeMap<String, Value> = BTreeMap::new();
    for r in rows {
        last.insert(r[key].to_string(), r);
    }
    last.into_values().collect()
}

/// The output columns of SCHEMA.md, in order.
fn expected_columns(query: &str) -> &'static [&'static str] {
    match query {
        "q3" => &["name", "city", "state", "id"],
        "q4" => &["category", "avg_final"],
        "q5" => &["auction", "num", "starttime", "endtime"],
        "q6" => &["seller", "avg_price"],
        "q7" => &["auction", "price", "bidder", "dateTime", "extra"],
        "q8" => &["id", "name", "starttime"],
        "q9" => &[
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
            "auction",
            "bidder",
            "price",
            "bid_dateTime",
            "bid_extra",
        ],
        "q11" => &["bidder", "bid_count", "starttime", "endtime"],
        "q15" => &Q15_COLUMNS,
        "q16" => &Q16_COLUMNS,
        "q17" => &[
            "auction",
            "day",
            "total_bids",
            "rank1_bids",
            "rank2_bids",
            "rank3_bids",
            "min_price",
            "max_price",
            "avg_price",
            "sum_price",
        ],
        "q20" => &[
            "auction",
            "bidder",
            "price",
            "channel",
            "url",
            "bid_dateTime",
            "bid_extra",
            "itemName",
            "description",
            "initialBid",
            "reserve",
            "auction_dateTime",
            "expires",
            "seller",
            "category",
            "auction_extra",
        ],
        _ => &[],
    }
}

/// q15's columns (Flink's sink table).
const Q15_COLUMNS: [&str; 13] = [
    "day",
    "total_bids",
    "rank1_bids",
    "rank2_bids",
    "rank3_bids",
    "total_bidders",
    "rank1_bidders",
    "rank2_bidders",
    "rank3_bidders",
    "total_auctions",
    "rank1_auctions",
    "rank2_auctions",
    "rank3_auctions",
];

/// q16's: q15's after `channel`, with `minute` after `day`.
const Q16_COLUMNS: [&str; 15] = [
    "channel",
    "day",
    "minute",
    "total_bids",
    "rank1_bids",
    "rank2_bids",
    "rank3_bids",
    "total_bidders",
    "rank1_bidders",
    "rank2_bidders",
    "rank3_bidders",
    "total_auctions",
    "rank1_auctions",
    "rank2_auctions",
    "rank3_auctions",
];

struct Query {
    name: &'static str,
    /// The output column keying an upsert result, if the result is an upsert stream.
    upsert_key: Option<&'static str>,
    /// The key of an updating result, written as a changelog (`format: changelog-json`) and
    /// folded into its final table.
    changelog_key: Option<&'static [&'static str]>,
    reference: fn(&[Event]) -> Vec<Value>,
}

fn check(q: &Query) {
    let expected = multiset((q.reference)(events()));
    assert!(
        !expected.is_empty(),
        "{}: the reference produced nothing",
        q.name
    );
    let mut runs: Vec<(String, std::path::PathBuf, Vec<String>)> = Vec::new();
    for parallelism in [1, 2] {
        for chaining in [true, false] {
            let common = vec![
                format!("parallelism={parallelism}"),
                format!("chaining={chaining}"),
            ];
            let mut generator = common.clone();
            generator.push(format!("sources.nexmark.events={EVENTS}"));
            generator.push(format!("sources.nexmark.inter-event-delay={DELAY_MS}ms"));
            runs.push((
                format!("generator, p={parallelism}, chaining={chaining}"),
                job_file(&format!("jobs/nexmark/{}.yaml", q.name)),
                generator,
            ));
            let mut file = common.clone();
            file.push(format!("sources.nexmark.path={}", ordered_file().display()));
            runs.push((
                format!("jsonl, p={parallelism}, chaining={chaining}"),
                job_file(&format!("jobs/nexmark/{}-jsonl.yaml", q.name)),
                file,
            ));
        }
        // Settings whose default changes the plan but not the rows, turned off so both ways
        // stay checked: aggregating in two phases, keeping q5's sliding windows as slices, and
        // decoding only the columns read.
        let mut off = vec![("one-phase aggregation", "two-phase-aggregation=false")];
        if q.name == "q5" {
            off.push(("whole windows", "window-slicing=false"));
        }
        // Projection pushdown leaves unread columns null; with it off every column is built.
        if q.name == "q4" {
            off.push(("every column decoded", "projection-pushdown=false"));
        }
        for (what, setting) in off {
            runs.push((
                format!("jsonl, {what}, p={parallelism}"),
                job_file(&format!("jobs/nexmark/{}-jsonl.yaml", q.name)),
                vec![
                    format!("parallelism={parallelism}"),
                    setting.into(),
                    format!("sources.nexmark.path={}", ordered_file().display()),
                ],
            ));
        }
        runs.push((
            format!("shuffled jsonl, p={parallelism}"),
            job_file(&format!("jobs/nexmark/{}-jsonl.yaml", q.name)),
            vec![
                format!("parallelism={parallelism}"),
                format!("sources.nexmark.path={}", shuffled_file().display()),
                format!("sources.nexmark.event-time.max-out-of-orderness={SHUFFLE_MS}ms"),
            ],
        ));
    }
    // The same on RocksDB, with a write-back cache small enough that state really goes
    // through the store.
    let rocks = |mut o: Vec<String>| {
        o.push("state.backend=rocksdb".into());
        o.push("state.cache-entries=64".into());
        o.push(format!("state.path={}/state", env!("CARGO_TARGET_TMPDIR")));
        o
    };
    runs.push((
        "generator on rocksdb, p=2".into(),
        job_file(&format!("jobs/nexmark/{}.yaml", q.name)),
        rocks(vec![
            "parallelism=2".into(),
            format!("sources.nexmark.events={EVENTS}"),
            format!("sources.nexmark.inter-event-delay={DELAY_MS}ms"),
        ]),
    ));
    runs.push((
        "shuffled jsonl on rocksdb, p=1".into(),
        job_file(&format!("jobs/nexmark/{}-jsonl.yaml", q.name)),
        rocks(vec![
            format!("sources.nexmark.path={}", shuffled_file().display()),
            format!("sources.nexmark.event-time.max-out-of-orderness={SHUFFLE_MS}ms"),
        ]),
    ));
    for (what, job, mut overrides) in runs {
        let out = out_dir();
        let format = match q.changelog_key {
            Some(_) => ", format: changelog-json",
            None => "",
        };
        overrides.push(format!(
            "sinks.out={{kind: file, from: {}, path: {}{format}}}",
            q.name,
            out.path().display()
        ));
        let summary = run_job(&job, &overrides);
        assert_eq!(
            summary.events, EVENTS,
            "{}, {what}: every event read",
            q.name
        );
        let late: u64 = summary.nodes.iter().map(|n| n.late_dropped).sum();
        assert_eq!(
            late, 0,
            "{}, {what}: nothing is late within the out-of-orderness",
            q.name
        );
        let mut rows = read_parts(out.path());
        if let Some(key) = q.changelog_key {
            rows = crate::changelog::apply(&rows, key).into_values().collect();
        }
        if let Some(first) = rows.first() {
            let expected: Vec<String> = expected_columns(q.name)
                .iter()
                .map(|c| c.to_string())
                .collect();
            assert_eq!(
                columns(first),
                expected,
                "{}: the columns of SCHEMA.md, in order",
                q.name
            );
        }
        if let Some(key) = q.upsert_key {
            rows = final_rows(rows, key);
        }
        assert_same_rows(&format!("{}, {what}", q.name), &multiset(rows), &expected);
    }
}

#[test]
fn q3_joins_auctions_in_category_10_with_sellers_in_or_id_ca() {
    check(&Query {
        name: "q3",
        upsert_key: None,
        changelog_key: None,
        reference: reference::q3,
    });
}

#[test]
fn q4_averages_winning_bids_per_category() {
    check(&Query {
        name: "q4",
        upsert_key: Some("category"),
        changelog_key: None,
        reference: reference::q4,
    });
}

#[test]
fn q5_finds_the_auctions_with_the_most_bids_per_sliding_window() {
    check(&Query {
        name: "q5",
        upsert_key: None,
        changelog_key: None,
        reference: reference::q5,
    });
}

#[test]
fn q6_averages_each_sellers_last_ten_closed_auctions() {
    check(&Query {
        name: "q6",
        upsert_key: None,
        changelog_key: None,
        reference: reference::q6,
    });
}

#[test]
fn q7_keeps_the_highest_bids_of_each_tumbling_window() {
    check(&Query {
        name: "q7",
        upsert_key: None,
        changelog_key: None,
        reference: reference::q7,
    });
}

#[test]
fn q8_finds_people_who_sold_in_the_window_they_registered() {
    check(&Query {
        name: "q8",
        upsert_key: None,
        changelog_key: None,
        reference: reference::q8,
    });
}

#[test]
fn q9_pairs_each_auction_with_its_winning_bid() {
    check(&Query {
        name: "q9",
        upsert_key: None,
        changelog_key: None,
        reference: reference::q9,
    });
}

#[test]
fn q11_counts_bids_per_bidder_session() {
    check(&Query {
        name: "q11",
        upsert_key: None,
        changelog_key: None,
        reference: reference::q11,
    });
}

#[test]
fn q15_counts_bids_bidders_and_auctions_per_day_and_price_rank() {
    check(&Query {
        name: "q15",
        upsert_key: None,
        changelog_key: Some(&["day"]),
        reference: reference::q15,
    });
}

#[test]
fn q16_counts_per_channel_and_day_with_the_latest_minute() {
    check(&Query {
        name: "q16",
        upsert_key: None,
        changelog_key: Some(&["channel", "day"]),
        reference: reference::q16,
    });
}

#[test]
fn q17_sums_up_the_prices_of_each_auction_per_day() {
    check(&Query {
        name: "q17",
        upsert_key: None,
        changelog_key: Some(&["auction", "day"]),
        reference: reference::q17,
    });
}

#[test]
fn q20_joins_every_bid_with_its_category_10_auction() {
    check(&Query {
        name: "q20",
        upsert_key: None,
        changelog_key: None,
        reference: reference::q20,
    });
}
