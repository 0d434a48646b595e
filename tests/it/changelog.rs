//! Updating streams end to end: SQL that makes updates (a GROUP BY of a GROUP BY, HAVING,
//! SELECT DISTINCT) run into a `changelog-json` file sink, whose changelog, applied row by row
//! to a table by a plain loop, must be well formed and build the table a naive computation
//! over the events gives, at parallelism 1 and 2 on both state backends; so must a running
//! Top-N and a deduplication (Nexmark q19, q18) against a naive sort. And the refusals: an
//! append-only operator or format after an updating stream, at the line of the job file.

use std::collections::BTreeMap;

use serde_json::Value;
use weir_runtime::connectors::nexmark::{Event, Generator, GeneratorConfig};

use crate::support::*;

const EVENTS: u64 = 60_000;

fn events() -> Vec<Event> {
    let generator = Generator::new(GeneratorConfig {
        inter_event_delay_ns: 1_000_000,
        ..GeneratorConfig::default()
    });
    (0..EVENTS).map(|n| generator.event(n)).collect()
}

/// A job of one `sql` node `q` over the Nexmark generator, written to `sink`.
fn job(query: &str, sink: &str) -> String {
    let mut text = format!(
        "name: changelog\nsources:\n  nexmark:\n    kind: nexmark\n    events: {EVENTS}\n    \
         inter-event-delay: 1ms\ntransforms:\n  q:\n    kind: sql\n    query: |\n"
    );
    for line in query.lines() {
        text.push_str("      ");
        text.push_str(line);
        text.push('\n');
    }
    text.push_str(&format!("sinks:\n  out:\n{sink}"));
    text
}

/// Applies a changelog (rows with `"op"`) to a table keyed by `key`, checking that it is
/// well formed: a `-U` or `-D` takes back exactly the key's live row, a `+I` or `+U` never
/// lands on a live row.
pub(crate) fn apply(rows: &[Value], key: &[&str]) -> BTreeMap<String, Value> {
    let mut table: BTreeMap<String, Value> = BTreeMap::new();
    for row in rows {
        let mut row = row.clone();
        let op = row
            .as_object_mut()
            .and_then(|o| o.remove("op"))
            .unwrap_or_else(|| panic!("a row without its kind: {row}"));
        let k: Vec<String> = key.iter().map(|c| row[*c].to_string()).collect();
        let k = k.join("|");
        match op.as_str() {
            Some("+I" | "+U") => {
                assert!(
                    !table.contains_key(&k),
                    "{op} over the live row of {k}: {row}"
                );
                table.insert(k, row);
            }
            Some("-U" | "-D") => {
                assert_eq!(
                    table.remove(&k),
                    Some(row),
                    "{op} of a row never emitted ({k})"
                );
            }
            other => panic!("an unknown kind {other:?}"),
        }
    }
    table
}

/// Runs `query` into a changelog-json file sink under each configuration; the changelogs.
fn changelogs(query: &str) -> Vec<(&'static str, Vec<Value>)> {
    let configs: &[(&str, &[&str])] = &[
        ("p=1, heap", &["parallelism=1"]),
        ("p=2, heap", &["parallelism=2"]),
        ("p=2, rocksdb", &["parallelism=2", "state.backend=rocksdb"]),
    ];
    let mut out = Vec::new();
    for (name, overrides) in configs {
        let dir = out_dir();
        let file = dir.path().join("job.yaml");
        let sink = format!(
            "    kind: file\n    from: q\n    format: changelog-json\n    path: {}\n",
            dir.path().join("out").display()
        );
        std::fs::write(&file, job(query, &sink)).unwrap();
        let o: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
        let summary = run_job(&file, &o);
        assert_eq!(summary.events, EVENTS, "{name}: every event read");
        // Part files sort by subtask, then checkpoint: each key's changes in their order.
        out.push((*name, read_parts(&dir.path().join("out"))));
    }
    out
}

/// Runs `query` into a changelog-json file sink under each configuration; the tables its
/// changelogs build.
fn tables(query: &str, key: &[&str]) -> Vec<(&'static str, BTreeMap<String, Value>)> {
    changelogs(query)
        .into_iter()
        .map(|(name, rows)| (name, apply(&rows, key)))
        .collect()
}

fn auctions(events: &[Event]) -> impl Iterator<Item = (i64, i64)> + '_ {
    events.iter().filter_map(|e| match e {
        Event::Auction(a) => Some((a.seller, a.category)),
        _ => None,
    })
}

/// Auctions per seller, by a plain loop.
fn per_seller(events: &[Event]) -> BTreeMap<i64, i64> {
    let mut counts: BTreeMap<i64, i64> = BTreeMap::new();
    for (seller, _) in auctions(events) {
        *counts.entry(seller).or_default() += 1;
    }
    counts
}

#[test]
fn a_group_by_of_a_group_by_builds_the_table_of_a_naive_count() {
    let events = events();
    // Sellers per number of auctions: moving a seller from n to n + 1 takes it back from n,
    // and a count that no seller has any more is deleted.
    let per_seller = per_seller(&events);
    let mut expected: BTreeMap<i64, i64> = BTreeMap::new();
    for n in per_seller.values() {
        *expected.entry(*n).or_default() += 1;
    }
    let query = "SELECT n, COUNT(*) AS sellers, MAX(seller) AS top\n\
                 FROM (SELECT seller, COUNT(*) AS n FROM nexmark.auction GROUP BY seller)\n\
                 GROUP BY n";
    for (config, table) in tables(query, &["n"]) {
        let got: BTreeMap<i64, i64> = table
            .values()
            .map(|r| (r["n"].as_i64().unwrap(), r["sellers"].as_i64().unwrap()))
            .collect();
        assert_eq!(got, expected, "{config}");
        for row in table.values() {
            let n = row["n"].as_i64().unwrap();
            let top = per_seller
                .iter()
                .filter(|(_, c)| **c == n)
                .map(|(s, _)| *s)
                .max();
            assert_eq!(
                row["top"].as_i64(),
                top,
                "{config}: MAX over retractions, n = {n}"
            );
        }
    }
}

#[test]
fn having_and_distinct_over_updates_build_the_tables_of_naive_loops() {
    let events = events();
    let per_seller = per_seller(&events);
    let busy: BTreeMap<i64, i64> = per_seller
        .iter()
        .filter(|(_, n)| **n >= 3)
        .map(|(s, n)| (*s, *n))
        .collect();
    let query =
        "SELECT seller, COUNT(*) AS n FROM nexmark.auction GROUP BY seller HAVING COUNT(*) >= 3";
    for (config, table) in tables(query, &["seller"]) {
        let got: BTreeMap<i64, i64> = table
            .values()
            .map(|r| (r["seller"].as_i64().unwrap(), r["n"].as_i64().unwrap()))
            .collect();
        assert_eq!(got, busy, "{config}");
    }

    let categories: std::collections::BTreeSet<i64> = auctions(&events).map(|(_, c)| c).collect();
    for (config, table) in tables(
        "SELECT DISTINCT category FROM nexmark.auction",
        &["category"],
    ) {
        let got: std::collections::BTreeSet<i64> = table
            .values()
            .map(|r| r["category"].as_i64().unwrap())
            .collect();
        assert_eq!(got, categories, "{config}");
    }
}

#[test]
fn an_append_only_consumer_of_an_updating_stream_is_refused_where_it_reads_it() {
    // A plain JSON file cannot take a row back: the GROUP BY of a GROUP BY deletes.
    let text = job(
        "SELECT n, COUNT(*) AS sellers\nFROM (SELECT seller, COUNT(*) AS n FROM nexmark.auction GROUP BY seller)\nGROUP BY n",
        "    kind: file\n    from: q\n    path: out\n",
    );
    let Err(err) = weir_runtime::plan::check_str("job.yaml", &text, &[]) else {
        panic!("a plain file after deletes was accepted");
    };
    let message = err.to_string();
    assert!(message.contains("changelog-json"), "{message}");
    assert!(message.contains("deletes rows"), "{message}");
    assert_eq!(err.problems[0].path, "sinks.out.from", "{message}");

    // A keyed stream that never deletes is written as its new versions.
    let text = job(
        "SELECT seller, COUNT(*) AS n FROM nexmark.auction GROUP BY seller",
        "    kind: file\n    from: q\n    path: out\n",
    );
    assert!(weir_runtime::plan::check_str("job.yaml", &text, &[]).is_ok());

    // A window over an updating stream.
    let text = "name: w\nsources:\n  nexmark: {kind: nexmark}\ntransforms:\n  by-seller: {kind: key-by, from: nexmark.auction, keys: [seller]}\n  counts:\n    kind: aggregate\n    from: by-seller\n    aggregates: {n: count(*)}\n  by-n: {kind: key-by, from: counts, keys: [seller]}\n  windows:\n    kind: window-aggregate\n    from: by-n\n    time: dateTime\n    window: {type: tumbling, size: 10s}\n    aggregates: {c: count(*)}\nsinks:\n  out: {kind: blackhole, from: windows}\n";
    let Err(err) = weir_runtime::plan::check_str("job.yaml", text, &[]) else {
        panic!("a window over updates was accepted");
    };
    let message = err.to_string();
    assert!(message.contains("is an updating stream"), "{message}");
    assert!(
        message.contains("window-aggregate takes only append-only input"),
        "{message}"
    );
    assert_eq!(err.problems[0].line, Some(13), "{message}");
}

#[test]
fn explain_shows_each_nodes_changes() {
    let dir = out_dir();
    let file = dir.path().join("job.yaml");
    std::fs::write(
        &file,
        job(
            "SELECT n, COUNT(*) AS sellers\nFROM (SELECT seller, COUNT(*) AS n FROM nexmark.auction GROUP BY seller)\nGROUP BY n",
            "    kind: stdout\n    from: q\n    format: changelog-json\n",
        ),
    )
    .unwrap();
    let text = plan(&file, &[]).unwrap().explain();
    assert!(text.contains("changes: append"), "{text}");
    assert!(
        text.contains("changes: updating (+I -U +U), key [seller]"),
        "{text}"
    );
    assert!(
        text.contains("changes: updating (+I -U +U -D), key [n]"),
        "{text}"
    );
    assert!(!text.contains("__op"), "the kind is not a column: {text}");
    // At p=2, the one stdout subtask reads the changes hash-partitioned by their key, so that
    // the file sink or a database at another parallelism gets each key's changes in order.
    let text = plan(&file, &["parallelism=2".into()]).unwrap().explain();
    let sink = &text[text.find("out  (sink").expect("the sink")..];
    assert!(sink.contains("reads q, hash-partitioned by [n]"), "{text}");
}

#[test]
fn filtered_aggregates_count_only_what_their_condition_keeps() {
    let events = events();
    let mut expected: BTreeMap<i64, (i64, std::collections::BTreeSet<i64>)> = BTreeMap::new();
    for e in &events {
        if let Event::Bid(b) = e {
            let entry = expected.entry(b.auction).or_default();
            if b.price < 10_000 {
                entry.0 += 1;
            } else {
                entry.1.insert(b.bidder);
            }
        }
    }
    let query = "SELECT auction,\n       COUNT(*) FILTER (WHERE price < 10000) AS cheap,\n       \
                 COUNT(DISTINCT bidder) FILTER (WHERE price >= 10000) AS rich\n\
                 FROM nexmark.bid GROUP BY auction";
    for (config, table) in tables(query, &["auction"]) {
        let got: BTreeMap<i64, (i64, i64)> = table
            .values()
            .map(|r| {
                let n = |c: &str| r[c].as_i64().unwrap();
                (n("auction"), (n("cheap"), n("rich")))
            })
            .collect();
        let want: BTreeMap<i64, (i64, i64)> = expected
            .iter()
            .map(|(a, (cheap, rich))| (*a, (*cheap, rich.len() as i64)))
            .collect();
        assert_eq!(got, want, "{config}");
    }
}

#[test]
fn a_union_merges_streams_of_one_kind() {
    // `counts` (updating, keyed by seller) and a second input made by `extra`.
    let job = |extra: &str| {
        format!(
            "name: u\nsources:\n  nexmark: {{kind: nexmark}}\ntransforms:\n  \
             by-seller: {{kind: key-by, from: nexmark.auction, keys: [seller]}}\n  \
             counts: {{kind: aggregate, from: by-seller, aggregates: {{n: count(*)}}}}\n  \
             by-bidder: {{kind: key-by, from: nexmark.bid, keys: [bidder]}}\n  \
             bids: {{kind: aggregate, from: by-bidder, aggregates: {{n: count(*)}}}}\n  \
             second: {extra}\n  \
             both:\n    kind: union\n    from: [counts, second]\nsinks:\n  \
             out: {{kind: stdout, from: both, format: changelog-json}}\n"
        )
    };
    let plain = job("{kind: map, from: nexmark.bid, columns: {seller: bidder, n: price}}");
    let Err(err) = weir_runtime::plan::check_str("job.yaml", &plain, &[]) else {
        panic!("a union of an updating and an append-only stream was accepted");
    };
    let message = err.to_string();
    assert!(
        message.contains("`counts` is an updating stream and `second` is append-only"),
        "{message}"
    );
    // Two updating streams: a union of their changes.
    let renamed = job("{kind: map, from: bids, columns: {seller: bidder, n: n}}");
    if let Err(e) = weir_runtime::plan::check_str("job.yaml", &renamed, &[]) {
        panic!("{e}");
    }
}

/// Per auction, its bids' count and top price, auctions without a bid included (a LEFT JOIN
/// under a GROUP BY: an auction's padded row is taken back when its first bid comes).
#[test]
fn a_left_join_under_a_group_by_builds_the_table_of_a_naive_loop() {
    let events = events();
    let mut expected: BTreeMap<i64, (i64, Option<i64>)> = BTreeMap::new();
    for e in &events {
        if let Event::Auction(a) = e {
            expected.insert(a.id, (0, None));
        }
    }
    for e in &events {
        if let Event::Bid(b) = e
            && let Some((n, top)) = expected.get_mut(&b.auction)
        {
            *n += 1;
            *top = Some(top.map_or(b.price, |t| t.max(b.price)));
        }
    }
    assert!(
        expected.values().any(|(n, _)| *n == 0) && expected.values().any(|(n, _)| *n > 0),
        "auctions with and without bids"
    );
    let query = "SELECT a.id AS auction, COUNT(b.price) AS bids, MAX(b.price) AS top\n\
                 FROM nexmark.auction AS a LEFT JOIN nexmark.bid AS b ON a.id = b.auction\n\
                 GROUP BY a.id";
    for (config, table) in tables(query, &["auction"]) {
        let got: BTreeMap<i64, (i64, Option<i64>)> = table
            .values()
            .map(|r| {
                let auction = r["auction"].as_i64().unwrap();
                (auction, (r["bids"].as_i64().unwrap(), r["top"].as_i64()))
            })
            .collect();
        assert_eq!(got, expected, "{config}");
    }
}

/// A FULL JOIN of an updating stream (auctions per seller) with people, with a condition on
/// the updating side in ON: a seller pairs with its person once it has two auctions, and
/// until then both appear padded. The retract changelog's rows build the naive join.
#[test]
fn a_full_join_of_an_updating_stream_builds_the_rows_of_a_naive_join() {
    let events = events();
    let per_seller = per_seller(&events);
    let people: Vec<(i64, String)> = events
        .iter()
        .filter_map(|e| match e {
            Event::Person(p) => Some((p.id, p.name.clone())),
            _ => None,
        })
        .collect();
    let mut expected: BTreeMap<String, i64> = BTreeMap::new();
    let mut add = |seller: Option<(i64, i64)>, person: Option<&(i64, String)>| {
        let row = serde_json::json!({
            "seller": seller.map(|s| s.0), "n": seller.map(|s| s.1),
            "id": person.map(|p| p.0), "name": person.map(|p| p.1.clone()),
        });
        *expected.entry(row.to_string()).or_default() += 1;
    };
    let pairs = |(seller, n): (i64, i64), p: &(i64, String)| seller == p.0 && n >= 2;
    for (&seller, &n) in &per_seller {
        let mut matched = false;
        for p in people.iter().filter(|p| pairs((seller, n), p)) {
            matched = true;
            add(Some((seller, n)), Some(p));
        }
        if !matched {
            add(Some((seller, n)), None);
        }
    }
    for p in &people {
        if !per_seller.iter().any(|(s, n)| pairs((*s, *n), p)) {
            add(None, Some(p));
        }
    }
    let query = "SELECT s.seller, s.n, p.id, p.name\n\
                 FROM (SELECT seller, COUNT(*) AS n FROM nexmark.auction GROUP BY seller) AS s\n\
                 FULL OUTER JOIN nexmark.person AS p ON s.seller = p.id AND s.n >= 2";
    for (config, rows) in changelogs(query) {
        assert_eq!(fold(&rows), expected, "{config}");
    }
}

/// WHERE over the side of an outer join whose rows may be padded would filter the joined rows:
/// refused at the condition, saying to put it in ON.
#[test]
fn a_where_over_the_padded_side_of_an_outer_join_is_refused() {
    let text = job(
        "SELECT a.id, b.price FROM nexmark.auction AS a LEFT JOIN nexmark.bid AS b\n\
         ON a.id = b.auction WHERE b.price > 10",
        "    kind: file\n    from: q\n    format: changelog-json\n    path: out\n",
    );
    let Err(err) = weir_runtime::plan::check_str("job.yaml", &text, &[]) else {
        panic!("a WHERE over the padded side was accepted");
    };
    let message = err.to_string();
    assert!(message.contains("put it in ON"), "{message}");
    // Over the preserved side it filters the left rows first.
    let text = job(
        "SELECT a.id, b.price FROM nexmark.auction AS a LEFT JOIN nexmark.bid AS b\n\
         ON a.id = b.auction WHERE a.category = 10",
        "    kind: file\n    from: q\n    format: changelog-json\n    path: out\n",
    );
    weir_runtime::plan::check_str("job.yaml", &text, &[]).unwrap();
    // A plain file cannot take the padded rows back.
    let text = job(
        "SELECT a.id, b.price FROM nexmark.auction AS a LEFT JOIN nexmark.bid AS b\n\
         ON a.id = b.auction",
        "    kind: file\n    from: q\n    path: out\n",
    );
    let Err(err) = weir_runtime::plan::check_str("job.yaml", &text, &[]) else {
        panic!("a plain file after a LEFT JOIN was accepted");
    };
    assert!(err.to_string().contains("changelog-json"), "{err}");
}

/// Applies a changelog of rows with no key to a multiset of rows (JSON text → copies),
/// checking that a `-U` or `-D` takes back a live row.
fn fold(rows: &[Value]) -> BTreeMap<String, i64> {
    let mut table: BTreeMap<String, i64> = BTreeMap::new();
    for row in rows {
        let mut row = row.clone();
        let op = row
            .as_object_mut()
            .and_then(|o| o.remove("op"))
            .unwrap_or_else(|| panic!("a row without its kind: {row}"));
        let text = row.to_string();
        match op.as_str() {
            Some("+I" | "+U") => *table.entry(text).or_default() += 1,
            Some("-U" | "-D") => {
                let copies = table.entry(text.clone()).or_default();
                assert!(*copies > 0, "{op} of a row that is not live: {text}");
                *copies -= 1;
                if *copies == 0 {
                    table.remove(&text);
                }
            }
            other => panic!("an unknown kind {other:?}"),
        }
    }
    table
}

fn bids(events: &[Event]) -> impl Iterator<Item = &weir_runtime::connectors::nexmark::Bid> {
    events.iter().filter_map(|e| match e {
        Event::Bid(b) => Some(b),
        _ => None,
    })
}

const Q18: &str = "SELECT auction, bidder, price, channel, url, dateTime, extra FROM (\n  SELECT *, ROW_NUMBER() OVER (PARTITION BY bidder, auction ORDER BY dateTime DESC) AS rank_number\n  FROM nexmark.bid\n) WHERE rank_number <= 1";
const Q19: &str = "SELECT * FROM (\n  SELECT *, ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price DESC) AS rank_number\n  FROM nexmark.bid\n) WHERE rank_number <= 10";

#[test]
fn q18_deduplication_keeps_each_bidders_last_bid_per_auction() {
    let events = events();
    // Per (bidder, auction): the time and price of its latest bid (of equal times, the first).
    let mut expected: BTreeMap<(i64, i64), (i64, i64)> = BTreeMap::new();
    for b in bids(&events) {
        let last = expected
            .entry((b.bidder, b.auction))
            .or_insert((b.date_time, b.price));
        if b.date_time > last.0 {
            *last = (b.date_time, b.price);
        }
    }
    assert!(expected.len() > 1000, "{} pairs", expected.len());
    for (config, table) in tables(Q18, &["bidder", "auction"]) {
        let got: BTreeMap<(i64, i64), (i64, i64)> = table
            .values()
            .map(|r| {
                let n = |c: &str| r[c].as_i64().unwrap();
                ((n("bidder"), n("auction")), (n("dateTime"), n("price")))
            })
            .collect();
        assert_eq!(got, expected, "{config}");
        assert!(
            table.values().all(|r| r.get("rank_number").is_none()),
            "{config}: the rank is not a column"
        );
    }
}

/// q19 as Flink writes it: `SELECT *` reads the rank, so each auction's ten highest bids come
/// with their `rank_number`, an upsert stream keyed by auction and rank whose `-U`/`+U` move
/// the bids below a new one down a rank. At p=1 bids arrive in time order, so the final table
/// equals the reference's (ties of price go to the earlier bid); at p=2 two generators'
/// bids interleave, so which of two equal prices ranks first is not fixed: the prices per
/// auction and rank are.
#[test]
fn q19_running_top_10_numbers_each_auctions_highest_bids() {
    let events = events();
    let reference = crate::nexmark_reference::q19(&events);
    let price_at = |rows: &mut dyn Iterator<Item = &Value>| -> BTreeMap<(i64, i64), i64> {
        rows.map(|r| {
            let n = |c: &str| r[c].as_i64().unwrap();
            ((n("auction"), n("rank_number")), n("price"))
        })
        .collect()
    };
    let expected = price_at(&mut reference.iter());
    assert!(
        expected.keys().any(|(_, rank)| *rank == 10),
        "some auction has ten bids"
    );
    for (config, rows) in changelogs(Q19) {
        let moved = rows.iter().filter(|r| r["op"] == "-U").count();
        assert!(moved > 100, "{config}: {moved} bids moved down a rank");
        let table = apply(&rows, &["auction", "rank_number"]);
        assert_eq!(price_at(&mut table.values()), expected, "{config}");
        if config.starts_with("p=1") {
            assert_same_rows(
                &format!("q19 vs the reference, {config}"),
                &multiset(table.values().cloned()),
                &multiset(reference.clone()),
            );
        }
    }
}

/// Bids of one bidder on one auction at equal times, in SQL: Flink's q18 (the rank not read,
/// ordered by the time attribute `DESC`) is a deduplication that keeps the last row, so the
/// last of equal times wins; ordered `ASC` it keeps the first row, and with the rank read
/// (`SELECT *`) it is a Top-1 whose first-ranked of equal rows is the first to arrive.
#[test]
fn a_deduplication_by_time_keeps_the_last_of_equal_times_as_flinks() {
    let dir = out_dir();
    let input = dir.path().join("bids.jsonl");
    let mut lines = String::new();
    // (bidder, auction, dateTime, price): two ties on (1, 1) at t=2000, one at (2, 1) at 1000.
    for (bidder, auction, time, price) in [
        (1, 1, 1000, 10),
        (1, 1, 2000, 20),
        (2, 1, 1000, 30),
        (1, 1, 2000, 21),
        (2, 1, 1000, 31),
        (1, 1, 2000, 22),
        (1, 1, 1500, 23),
    ] {
        lines.push_str(&format!(
            "{{\"bidder\": {bidder}, \"auction\": {auction}, \"dateTime\": {time}, \"price\": {price}}}\n"
        ));
    }
    std::fs::write(&input, lines).unwrap();
    for (select, order, expected) in [
        ("bidder, auction, price", "DESC", [22, 31]),
        ("bidder, auction, price", "ASC", [10, 30]),
        ("*", "DESC", [20, 30]),
    ] {
        let out = dir.path().join(format!("out-{}-{order}", select.len()));
        let job = format!(
            "name: dedup-ties\nsources:\n  bids:\n    kind: jsonl\n    path: {}\n    \
             schema: {{bidder: int, auction: int, dateTime: timestamp, price: int}}\n    \
             event-time: {{column: dateTime, max-out-of-orderness: 1s}}\n\
             transforms:\n  q:\n    kind: sql\n    inputs: {{bid: bids}}\n    query: |\n      \
             SELECT {select} FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY bidder, auction \
             ORDER BY dateTime {order}) AS rn FROM bid) WHERE rn <= 1\n\
             sinks:\n  out:\n    kind: file\n    from: q\n    format: changelog-json\n    \
             path: {}\n",
            input.display(),
            out.display()
        );
        let file = dir.path().join("job.yaml");
        std::fs::write(&file, job).unwrap();
        run_job(&file, &[]);
        let table = apply(&read_parts(&out), &["bidder", "auction"]);
        let prices: Vec<i64> = table
            .values()
            .map(|r| r["price"].as_i64().unwrap())
            .collect();
        assert_eq!(
            prices, expected,
            "SELECT {select} ... ORDER BY dateTime {order}"
        );
        let ranked = table
            .values()
            .all(|r| r.get("rn") == Some(&serde_json::json!(1)));
        assert_eq!(ranked, select == "*", "the rank is a column only when read");
    }
}

#[test]
fn explain_shows_a_running_top_ns_changes() {
    let dir = out_dir();
    let file = dir.path().join("job.yaml");
    for (query, changes) in [
        (Q18, "changes: updating (+I -U +U), key [bidder, auction]"),
        (
            Q19,
            "changes: updating (+I -U +U), key [auction, rank_number]",
        ),
    ] {
        let sink = "    kind: stdout\n    from: q\n    format: changelog-json\n";
        std::fs::write(&file, job(query, sink)).unwrap();
        let text = plan(&file, &[]).unwrap().explain();
        assert!(text.contains(changes), "{text}");
        assert!(text.contains("top-n"), "{text}");
    }
}
