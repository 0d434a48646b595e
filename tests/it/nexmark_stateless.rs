//! Nexmark q0, q1 and q2 against a reference computed by a plain loop over the same events,
//! at parallelism 1 and 2, chained and unchained, from the generator and from a JSONL file; and
//! q14, q21 and q22 the same way against the references of `nexmark_reference`.

use serde_json::{Value, json};
use weir_runtime::connectors::nexmark::{Event, Generator, GeneratorConfig};

use crate::nexmark_reference as reference;
use crate::support::*;

const EVENTS: u64 = 200_000;

/// Bids as JSON objects with SCHEMA.md's field names, from the generator's plain path.
fn generated_bids() -> Vec<Value> {
    let generator = Generator::new(GeneratorConfig::default());
    (0..EVENTS)
        .filter_map(|n| match generator.event(n) {
            Event::Bid(b) => Some(json!({
                "auction": b.auction, "bidder": b.bidder, "price": b.price,
                "channel": b.channel, "url": b.url, "dateTime": b.date_time, "extra": b.extra,
            })),
            _ => None,
        })
        .collect()
}

/// Bids read straight from the JSONL file with serde_json, without weir's decoder.
fn file_bids() -> Vec<Value> {
    std::fs::read_to_string(nexmark_jsonl())
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| v["type"] == "bid")
        .map(|v| v["bid"].clone())
        .collect()
}

/// The reference result of a query over bids.
fn reference(query: &str, bids: &[Value]) -> Vec<Value> {
    let mut out = Vec::new();
    for b in bids {
        let price = b["price"].as_i64().unwrap();
        let auction = b["auction"].as_i64().unwrap();
        match query {
            "q0" => out.push(json!({
                "auction": auction, "bidder": b["bidder"], "price": price,
                "dateTime": b["dateTime"], "extra": b["extra"],
            })),
            "q1" => {
                // Exact decimal arithmetic: cents × 908 / 1000, written out with 3 decimals.
                let milli = price * 908;
                let euros: f64 = format!("{}.{:03}", milli / 1000, milli % 1000)
                    .parse()
                    .unwrap();
                out.push(json!({
                    "auction": auction, "bidder": b["bidder"], "price": euros,
                    "dateTime": b["dateTime"], "extra": b["extra"],
                }));
            }
            "q2" => {
                if auction % 123 == 0 {
                    out.push(json!({"auction": auction, "price": price}));
                }
            }
            other => panic!("no reference for {other}"),
        }
    }
    out
}

/// Runs `query` from `source` ("generator" or "jsonl") into a file sink; its rows.
fn run(query: &str, source: &str, parallelism: u32, chaining: bool) -> Vec<Value> {
    let out = out_dir();
    let (job, input) = if source == "generator" {
        (
            job_file(&format!("jobs/nexmark/{query}.yaml")),
            format!("sources.nexmark.events={EVENTS}"),
        )
    } else {
        (
            job_file(&format!("jobs/nexmark/{query}-jsonl.yaml")),
            format!("sources.nexmark.path={}", nexmark_jsonl().display()),
        )
    };
    let summary = run_job(
        &job,
        &[
            input,
            format!("parallelism={parallelism}"),
            format!("chaining={chaining}"),
            format!(
                "sinks.out={{kind: file, from: {query}, path: {}}}",
                out.path().display()
            ),
        ],
    );
    assert_eq!(summary.events, EVENTS, "every event consumed exactly once");
    read_parts(out.path())
}

fn check(query: &str, source: &str) {
    let bids = if source == "generator" {
        generated_bids()
    } else {
        file_bids()
    };
    let expected = multiset(reference(query, &bids));
    assert!(!expected.is_empty());
    for parallelism in [1, 2] {
        for chaining in [true, false] {
            let rows = run(query, source, parallelism, chaining);
            let expected_columns = match query {
                "q2" => vec!["auction", "price"],
                _ => vec!["auction", "bidder", "price", "dateTime", "extra"],
            };
            assert_eq!(
                columns(&rows[0]),
                expected_columns,
                "{query}: columns in the job's order"
            );
            let actual = multiset(rows);
            assert_same_rows(
                &format!("{query} from {source}, parallelism {parallelism}, chaining {chaining}"),
                &actual,
                &expected,
            );
        }
    }
}

#[test]
fn q0_passes_every_bid_through() {
    check("q0", "generator");
    check("q0", "jsonl");
}

#[test]
fn q1_converts_prices_exactly_to_three_decimals() {
    check("q1", "generator");
    check("q1", "jsonl");
}

#[test]
fn q2_selects_bids_on_every_123rd_auction() {
    check("q2", "generator");
    check("q2", "jsonl");
}

#[test]
fn generator_and_file_give_the_same_bids() {
    // The file is what `weir nexmark generate` writes; the generator source must agree with it.
    assert_eq!(multiset(generated_bids()), multiset(file_bids()));
}

/// The columns of q14, q21 and q22 (Flink's sink tables), in order.
fn event_query_columns(query: &str) -> &'static [&'static str] {
    match query {
        "q14" => &[
            "auction",
            "bidder",
            "price",
            "bidTimeType",
            "dateTime",
            "extra",
            "c_counts",
        ],
        "q21" => &["auction", "bidder", "price", "channel", "channel_id"],
        "q22" => &[
            "auction", "bidder", "price", "channel", "dir1", "dir2", "dir3",
        ],
        other => panic!("no columns for {other}"),
    }
}

/// A stateless query whose reference reads events: from the generator and from the JSONL
/// file (read back by the reference's own parser), at parallelism 1 and 2, chained and not.
fn check_events(query: &str, reference: fn(&[Event]) -> Vec<Value>) {
    let generator = Generator::new(GeneratorConfig::default());
    let generated: Vec<Event> = (0..EVENTS).map(|n| generator.event(n)).collect();
    let from_file: Vec<Event> = std::fs::read_to_string(nexmark_jsonl())
        .unwrap()
        .lines()
        .map(reference::parse_line)
        .collect();
    for (source, events) in [("generator", &generated), ("jsonl", &from_file)] {
        let expected = multiset(reference(events));
        assert!(!expected.is_empty(), "{query}: the reference has rows");
        for parallelism in [1, 2] {
            for chaining in [true, false] {
                let rows = run(query, source, parallelism, chaining);
                assert_eq!(
                    columns(&rows[0]),
                    event_query_columns(query),
                    "{query}: the columns of Flink's sink table, in order"
                );
                assert_same_rows(
                    &format!(
                        "{query} from {source}, parallelism {parallelism}, chaining {chaining}"
                    ),
                    &multiset(rows),
                    &expected,
                );
            }
        }
    }
}

#[test]
fn q14_prices_mid_range_bids_in_euros_with_time_of_day_and_c_count() {
    check_events("q14", reference::q14);
}

#[test]
fn q21_adds_the_channel_id_from_the_channel_or_the_url() {
    check_events("q21", reference::q21);
}

#[test]
fn q22_splits_the_url_into_its_directories() {
    check_events("q22", reference::q22);
}
