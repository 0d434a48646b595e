//! `kind: sql`: every Nexmark query written in SQL (`jobs/nexmark/sql/`) gives the rows of its
//! hand-written YAML twin at parallelism 1 and 2 on both state backends, and the stateful ones
//! the rows of the plain-loop references; problems in a query come with the line and column of
//! the job file; `weir explain` shows the operators a query became. (Kills with `--from
//! latest` are in `recovery`.)

use std::collections::BTreeMap;
use std::process::Command;

use serde_json::Value;
use weir_runtime::connectors::nexmark::{Event, Generator, GeneratorConfig};

use crate::nexmark_reference as reference;
use crate::support::*;

const EVENTS: u64 = 100_000;
const DELAY_MS: u64 = 1;

const QUERIES: &[&str] = &[
    "q0", "q1", "q2", "q3", "q4", "q5", "q6", "q7", "q8", "q9", "q11", "q14", "q15", "q16", "q17",
    "q20", "q21", "q22",
];

/// The columns keying a query's updating result, whose last row per key is its final row.
fn upsert_key(query: &str) -> Option<&'static [&'static str]> {
    match query {
        "q4" => Some(&["category"]),
        "q15" => Some(&["day"]),
        "q16" => Some(&["channel", "day"]),
        "q17" => Some(&["auction", "day"]),
        "q18" => Some(&["bidder", "auction"]),
        "q19" => Some(&["auction", "rank_number"]),
        _ => None,
    }
}

/// The last row per `key` (rows of a key are in order in the part file of its subtask).
fn last_per_key(rows: Vec<Value>, key: &[&str]) -> Vec<Value> {
    let mut last: BTreeMap<String, Value> = BTreeMap::new();
    for r in rows {
        let k: Vec<String> = key.iter().map(|c| r[*c].to_string()).collect();
        last.insert(k.join("|"), r);
    }
    last.into_values().collect()
}

fn events() -> Vec<Event> {
    let generator = Generator::new(GeneratorConfig {
        inter_event_delay_ns: DELAY_MS * 1_000_000,
        ..GeneratorConfig::default()
    });
    (0..EVENTS).map(|n| generator.event(n)).collect()
}

/// Runs a job to the end with its result in a file sink; its rows (the last per key of an
/// upsert stream).
fn rows(job: &str, query: &str, overrides: &[&str]) -> BTreeMap<String, usize> {
    let out = out_dir();
    let mut o: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
    o.push(format!("sources.nexmark.events={EVENTS}"));
    o.push(format!("sources.nexmark.inter-event-delay={DELAY_MS}ms"));
    o.push(format!(
        "sinks.out={{kind: file, from: {query}, path: {}}}",
        out.path().display()
    ));
    let summary = run_job(&job_file(job), &o);
    assert_eq!(summary.events, EVENTS, "{job}: every event read");
    let rows = read_parts(out.path());
    match upsert_key(query) {
        Some(key) => multiset(last_per_key(rows, key)),
        None => multiset(rows),
    }
}

fn reference_of(query: &str, events: &[Event]) -> Option<Vec<Value>> {
    Some(match query {
        "q3" => reference::q3(events),
        "q4" => reference::q4(events),
        "q5" => reference::q5(events),
        "q6" => reference::q6(events),
        "q7" => reference::q7(events),
        "q8" => reference::q8(events),
        "q9" => reference::q9(events),
        "q11" => reference::q11(events),
        "q14" => reference::q14(events),
        "q15" => reference::q15(events),
        "q16" => reference::q16(events),
        "q17" => reference::q17(events),
        "q18" => reference::q18(events),
        "q19" => reference::q19(events),
        "q20" => reference::q20(events),
        "q21" => reference::q21(events),
        "q22" => reference::q22(events),
        _ => return None,
    })
}

#[test]
fn every_sql_nexmark_query_equals_its_yaml_twin_and_the_reference() {
    let events = events();
    let configs: &[(&str, &[&str])] = &[
        ("p=1, heap", &["parallelism=1"]),
        ("p=2, heap", &["parallelism=2"]),
        (
            "p=1, rocksdb",
            &[
                "parallelism=1",
                "state.backend=rocksdb",
                "state.cache-entries=64",
            ],
        ),
        (
            "p=2, rocksdb",
            &[
                "parallelism=2",
                "state.backend=rocksdb",
                "state.cache-entries=64",
            ],
        ),
    ];
    for query in QUERIES {
        for (what, overrides) in configs {
            let mut overrides: Vec<&str> = overrides.to_vec();
            let state = format!("state.path={}/sql-state", env!("CARGO_TARGET_TMPDIR"));
            overrides.push(&state);
            let yaml = rows(&format!("jobs/nexmark/{query}.yaml"), query, &overrides);
            let sql = rows(&format!("jobs/nexmark/sql/{query}.yaml"), query, &overrides);
            assert!(
                !yaml.is_empty(),
                "{query}, {what}: the YAML job produced rows"
            );
            assert_same_rows(&format!("{query} in SQL vs YAML, {what}"), &sql, &yaml);
            if *what == "p=2, rocksdb"
                && let Some(expected) = reference_of(query, &events)
            {
                let expected = match upsert_key(query) {
                    Some(key) => last_per_key(expected, key),
                    None => expected,
                };
                assert_same_rows(
                    &format!("{query} in SQL vs the reference, {what}"),
                    &sql,
                    &multiset(expected),
                );
            }
        }
    }
}

/// q18 (deduplication with no window) and q19 (a running Top-10 with its rank numbers) have
/// no YAML twin: their SQL alone, written as a changelog and folded into its final table,
/// against the reference: q18 at parallelism 1 and 2 on both backends, q19 at parallelism 1
/// on both (at 2, which of two equal prices ranks first depends on how two generators' bids
/// interleave: `changelog::q19_running_top_10_numbers_each_auctions_highest_bids` checks the
/// prices per rank there).
#[test]
fn sql_q18_and_q19_equal_the_reference() {
    let events = events();
    let rocksdb = |p: &'static str| -> [&'static str; 3] {
        [p, "state.backend=rocksdb", "state.cache-entries=64"]
    };
    for (query, configs) in [
        (
            "q18",
            vec![
                &["parallelism=1"][..],
                &["parallelism=2"],
                &rocksdb("parallelism=2"),
            ],
        ),
        (
            "q19",
            vec![&["parallelism=1"][..], &rocksdb("parallelism=1")],
        ),
    ] {
        let key = upsert_key(query).expect("a key");
        let expected = multiset(last_per_key(
            reference_of(query, &events).expect("a reference"),
            key,
        ));
        for config in configs {
            let out = out_dir();
            let mut o: Vec<String> = config.iter().map(|s| s.to_string()).collect();
            o.push(format!(
                "state.path={}/sql-state",
                env!("CARGO_TARGET_TMPDIR")
            ));
            o.push(format!("sources.nexmark.events={EVENTS}"));
            o.push(format!("sources.nexmark.inter-event-delay={DELAY_MS}ms"));
            o.push(format!(
                "sinks.out={{kind: file, from: {query}, path: {}, format: changelog-json}}",
                out.path().display()
            ));
            let summary = run_job(&job_file(&format!("jobs/nexmark/sql/{query}.yaml")), &o);
            assert_eq!(summary.events, EVENTS, "{query}: every event read");
            let table = crate::changelog::apply(&read_parts(out.path()), key);
            assert_same_rows(
                &format!("{query} in SQL vs the reference, {config:?}"),
                &multiset(table.into_values()),
                &expected,
            );
        }
    }
}

/// A job whose one transform is `query` (written as a block scalar from line 7, indented 6).
fn job_with(query: &str) -> String {
    let mut text = String::from(
        "name: sql-problems\nsources:\n  nexmark:\n    kind: nexmark\ntransforms:\n  q:\n    kind: sql\n    query: |\n",
    );
    for line in query.lines() {
        text.push_str("      ");
        text.push_str(line);
        text.push('\n');
    }
    text.push_str("sinks:\n  out:\n    kind: blackhole\n    from: q\n");
    text
}

/// The one problem of a job with `query`: (line, column, message).
fn problem(query: &str) -> (usize, usize, String) {
    let text = job_with(query);
    let err = match weir_runtime::plan::check_str("job.yaml", &text, &[]) {
        Ok(_) => panic!("the query was accepted:\n{query}"),
        Err(e) => e,
    };
    assert_eq!(err.problems.len(), 1, "one problem: {err}");
    let p = &err.problems[0];
    assert_eq!(p.path, "transforms.q.query", "{err}");
    (
        p.line.expect("a line"),
        p.column.expect("a column"),
        p.message.clone(),
    )
}

#[test]
fn problems_in_a_query_have_the_line_and_column_of_the_job_file() {
    // The query starts on line 9, column 7 of the file.
    let (line, column, message) = problem("SELECT auction,\n       pricee\nFROM nexmark.bid");
    assert_eq!((line, column), (10, 14), "{message}");
    assert!(message.contains("unknown column `pricee`"), "{message}");
    assert!(message.contains("did you mean `price`"), "{message}");

    let (line, column, message) = problem("SELECT auction\nFROM nexmark.bid\nWHERE");
    assert_eq!(line, 11, "{message}");
    assert!(column >= 7, "{message}");
    assert!(message.contains("cannot parse the query"), "{message}");

    let (line, column, message) = problem("SELECT auction FROM nexmark.bid\nORDER BY price");
    assert_eq!((line, column), (10, 16), "at the ordered column: {message}");
    assert!(message.contains("ORDER BY"), "{message}");

    // A type error, found by the expression compiler, at the item that has it.
    let (line, column, message) =
        problem("SELECT auction,\n       price + 'x' AS p\nFROM nexmark.bid");
    assert_eq!(line, 10, "{message}");
    assert_eq!(column, 14, "{message}");

    let (line, _, message) = problem("SELECT * FROM nexmark.bids");
    assert_eq!(line, 9, "{message}");
    assert!(message.contains("did you mean `nexmark.bid`"), "{message}");
}

#[test]
fn constructs_with_unbounded_state_or_retractions_are_refused_with_what_and_where() {
    // A rank column named after an emitted one.
    let (line, _, message) = problem(
        "SELECT * FROM (\n  SELECT *, ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price DESC) AS price\n  FROM nexmark.bid\n) WHERE price <= 1",
    );
    assert!(line >= 7, "{message}");
    assert!(message.contains("price"), "{message}");

    // A Top-N of no rows, or of more than a partition may keep.
    for n in ["0", "99999999999"] {
        let (_, _, message) = problem(&format!(
            "SELECT * FROM (\n  SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end ORDER BY price DESC) AS rn\n  FROM TABLE(TUMBLE(TABLE nexmark.bid, DESCRIPTOR(dateTime), INTERVAL '10' SECOND))\n) WHERE rn <= {n}"
        ));
        assert!(message.contains("a Top-N keeps 1 to"), "{message}");
    }

    // A WHERE over an outer join's padded side would filter the joined rows.
    let (line, _, message) = problem(
        "SELECT a.id FROM nexmark.auction a\nLEFT JOIN nexmark.person p ON a.seller = p.id\nWHERE p.state = 'OR'",
    );
    assert_eq!(line, 11, "{message}");
    assert!(message.contains("put it in ON"), "{message}");

    // Joins other than inner and outer.
    let (line, _, message) = problem(
        "SELECT a.id FROM nexmark.auction a\nLEFT SEMI JOIN nexmark.person p ON a.seller = p.id",
    );
    assert_eq!(line, 10, "{message}");
    assert!(message.contains("only [INNER] JOIN"), "{message}");

    // A cross join.
    let (_, _, message) = problem("SELECT a.id FROM nexmark.auction a, nexmark.person p");
    assert!(message.contains("needs an equality"), "{message}");

    // LIMIT, DISTINCT of expressions.
    for (query, what) in [
        (
            "SELECT DISTINCT auction + 1 FROM nexmark.bid",
            "plain columns",
        ),
        ("SELECT auction FROM nexmark.bid LIMIT 10", "LIMIT"),
    ] {
        let (_, _, message) = problem(query);
        assert!(message.contains(what), "{query}: {message}");
    }
}

#[test]
fn explain_shows_the_operators_a_query_became() {
    let out = Command::new(env!("CARGO_BIN_EXE_weir"))
        .arg("explain")
        .arg(job_file("jobs/nexmark/sql/q5.yaml"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    for expected in [
        "q5/window-aggregate  (operator `window-aggregate`",
        "reads q5/window-aggregate.local, hash-partitioned by [auction]",
        "state: none (folds each batch into one partial per key and window",
        "state: accumulators per key and slice of 2s (sliding 10s every 2s: a window merges its slices when it fires)",
        "timers: event time: the end of each key's next window to fire, one at a time",
        "q5  (operator `top-n`",
        "hash-partitioned by [starttime, endtime]",
        "columns: auction INT, num INT, starttime TIMESTAMP, endtime TIMESTAMP",
    ] {
        assert!(text.contains(expected), "`{expected}` in:\n{text}");
    }
    assert!(!text.contains("`sql`"), "no opaque sql node:\n{text}");
}

/// The plan of a job whose one transform is `query`, as `weir explain` prints it.
fn explained(query: &str) -> String {
    match weir_runtime::plan::check_str("job.yaml", &job_with(query), &[]) {
        Ok(plan) => plan.explain(),
        Err(e) => panic!("{e}\n{query}"),
    }
}

#[test]
fn joins_unions_and_having_plan_into_the_operators_a_person_would_write() {
    // An interval join: each side leaves state once the other can no longer match it.
    let text = explained(
        "SELECT B.auction, B.price, A.seller\nFROM nexmark.auction A JOIN nexmark.bid B\n  ON A.id = B.auction\n  AND B.dateTime BETWEEN A.dateTime - INTERVAL '5' SECOND AND A.dateTime + INTERVAL '5' SECOND",
    );
    for expected in [
        "q  (operator `join`",
        "reads nexmark.auction (left), hash-partitioned by [id]",
        "reads nexmark.bid (right), hash-partitioned by [auction]",
        "left rows until the watermark passes `dateTime + INTERVAL '5' SECOND`",
        "right rows until the watermark passes `dateTime + INTERVAL '5000' MILLISECOND`",
        "columns: auction INT, price INT, seller INT",
    ] {
        assert!(text.contains(expected), "`{expected}` in:\n{text}");
    }
    // A join without a bound says that its state is unbounded.
    let text = explained(
        "SELECT A.id, P.name FROM nexmark.auction A JOIN nexmark.person P ON A.seller = P.id",
    );
    assert!(text.contains("a regular join: unbounded"), "{text}");

    // A window join of two TUMBLEs.
    let text = explained(
        "SELECT P.id, A.id AS auction, P.window_start\nFROM TABLE(TUMBLE(TABLE nexmark.person, DESCRIPTOR(dateTime), INTERVAL '10' SECOND)) P\nJOIN TABLE(TUMBLE(TABLE nexmark.auction, DESCRIPTOR(dateTime), INTERVAL '10' SECOND)) A\n  ON P.id = A.seller AND P.window_start = A.window_start AND P.window_end = A.window_end",
    );
    for expected in [
        "q  (operator `window-join`",
        "both sides' rows per key and window (tumbling 10s)",
        "columns: id INT, auction INT, window_start TIMESTAMP",
    ] {
        assert!(text.contains(expected), "`{expected}` in:\n{text}");
    }

    // EXISTS with a correlated key plans as the same window semi join as IN.
    let tumble = |t: &str| {
        format!("TABLE(TUMBLE(TABLE nexmark.{t}, DESCRIPTOR(dateTime), INTERVAL '10' SECOND))")
    };
    let with_in = explained(&format!(
        "SELECT P.id, P.name FROM {} P\nWHERE P.id IN (SELECT A.seller FROM {} A\n  WHERE A.window_start = P.window_start AND A.window_end = P.window_end)",
        tumble("person"),
        tumble("auction")
    ));
    let with_exists = explained(&format!(
        "SELECT P.id, P.name FROM {} P\nWHERE EXISTS (SELECT * FROM {} A\n  WHERE A.seller = P.id AND A.window_start = P.window_start AND A.window_end = P.window_end)",
        tumble("person"),
        tumble("auction")
    ));
    assert!(with_in.contains("q  (operator `window-join`"), "{with_in}");
    assert_eq!(with_in, with_exists);

    // UNION ALL: a filter per branch, one union.
    let text = explained(
        "SELECT auction, price FROM nexmark.bid WHERE price > 1000\nUNION ALL\nSELECT auction, price FROM nexmark.bid WHERE price < 10",
    );
    for expected in [
        "q/filter  (operator `filter`",
        "q/filter-2  (operator `filter`",
    ] {
        assert!(text.contains(expected), "`{expected}` in:\n{text}");
    }

    // HAVING over a window aggregate: a filter after it.
    let text = explained(
        "SELECT auction, window_start, window_end, COUNT(*) AS n\nFROM TABLE(TUMBLE(TABLE nexmark.bid, DESCRIPTOR(dateTime), INTERVAL '10' SECOND))\nGROUP BY auction, window_start, window_end\nHAVING COUNT(*) > 10",
    );
    for expected in [
        "q/window-aggregate  (operator `window-aggregate`",
        "q  (operator `filter`",
    ] {
        assert!(text.contains(expected), "`{expected}` in:\n{text}");
    }
}

/// Flink's own Nexmark texts (`jobs/nexmark/flink-sql/`: the Nexmark project's DDL of its
/// generator, its views and each query, as written) give the rows of their YAML twins, at
/// parallelism 1 and 2. The columns are paired by position, as Flink's `INSERT INTO` pairs
/// them (q7's text writes `price` into the sink's `bidder` column, and so does weir); q5's
/// text keeps two of its twin's four columns.
#[test]
fn flink_nexmark_texts_equal_their_yaml_twins() {
    // (query, the twin's columns in the order of the Flink sink's, the updating result's key
    // in the SQL's and the twin's names).
    type Case<'a> = (&'a str, &'a [&'a str], Option<(&'a str, &'a str)>);
    let queries: &[Case] = &[
        (
            "q0",
            &["auction", "bidder", "price", "dateTime", "extra"],
            None,
        ),
        (
            "q1",
            &["auction", "bidder", "price", "dateTime", "extra"],
            None,
        ),
        ("q2", &["auction", "price"], None),
        ("q3", &["name", "city", "state", "id"], None),
        ("q4", &["category", "avg_final"], Some(("id", "category"))),
        ("q5", &["auction", "num"], None),
        ("q8", &["id", "name", "starttime"], None),
        (
            "q11",
            &["bidder", "bid_count", "starttime", "endtime"],
            None,
        ),
        (
            "q7",
            &["auction", "price", "bidder", "dateTime", "extra"],
            None,
        ),
        (
            "q9",
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
                "auction",
                "bidder",
                "price",
                "bid_dateTime",
                "bid_extra",
            ],
            None,
        ),
    ];
    // A row as its values in order (q4's AVG of a BIGINT is a BIGINT, as Flink's, and equals
    // its twin's integer division as it is).
    let values = |row: &Value, columns: &[&str]| -> Value {
        Value::Array(columns.iter().map(|c| row[*c].clone()).collect())
    };
    for (query, twin_columns, key) in queries {
        for parallelism in ["parallelism=1", "parallelism=2"] {
            let run = |job: &str, source: &str, sink: &str, from: &str| -> Vec<Value> {
                let out = out_dir();
                let o = vec![
                    parallelism.to_string(),
                    format!("sources.{source}.events={EVENTS}"),
                    format!(
                        "sinks.{sink}={{kind: file, from: {from}, path: {}, format: \
                         changelog-json}}",
                        out.path().display()
                    ),
                ];
                let summary = run_job(&job_file(job), &o);
                assert_eq!(summary.events, EVENTS, "{job}: every event read");
                read_parts(out.path())
            };
            let sql = run(
                &format!("jobs/nexmark/flink-sql/{query}.sql"),
                "datagen",
                &format!("nexmark_{query}"),
                &format!("insert-into-nexmark_{query}"),
            );
            let twin = run(
                &format!("jobs/nexmark/{query}.yaml"),
                "nexmark",
                "out",
                query,
            );
            let (sql, twin): (Vec<Value>, Vec<Value>) = match key {
                Some((sql_key, twin_key)) => (
                    crate::changelog::apply(&sql, &[sql_key])
                        .into_values()
                        .collect(),
                    crate::changelog::apply(&twin, &[twin_key])
                        .into_values()
                        .collect(),
                ),
                // Append-only results, q5's cascaded window aggregate and its join on the
                // windows' bounds included.
                None => {
                    for r in sql.iter().chain(&twin) {
                        assert_eq!(r["op"], "+I", "{query}: an append-only result: {r}");
                    }
                    (fold_changes(&sql), fold_changes(&twin))
                }
            };
            let sql_columns: Vec<String> = sql
                .first()
                .and_then(Value::as_object)
                .map(|o| o.keys().filter(|k| *k != "op").cloned().collect())
                .unwrap_or_default();
            assert!(
                !twin.is_empty(),
                "{query}, {parallelism}: the twin has rows"
            );
            assert_eq!(
                sql_columns.len(),
                twin_columns.len(),
                "{query}: the Flink text's sink columns {sql_columns:?}"
            );
            // The Flink sink's columns in its declared order: read them from the text.
            let text =
                std::fs::read_to_string(job_file(&format!("jobs/nexmark/flink-sql/{query}.sql")))
                    .expect("the text");
            let sink_columns = declared_columns(&text, &format!("nexmark_{query}"));
            let sink_columns: Vec<&str> = sink_columns.iter().map(String::as_str).collect();
            assert_same_rows(
                &format!("{query} from Flink's text vs its YAML twin, {parallelism}"),
                &multiset(sql.iter().map(|r| values(r, &sink_columns))),
                &multiset(twin.iter().map(|r| values(r, twin_columns))),
            );
        }
    }
}

/// The columns a `CREATE TABLE name (...)` declares, in order (a naive reading of the DDL:
/// one column per line, as the Nexmark texts write their sinks).
fn declared_columns(text: &str, table: &str) -> Vec<String> {
    let start = text
        .find(&format!("CREATE TABLE {table} ("))
        .unwrap_or_else(|| panic!("{table} is declared"));
    text[start..]
        .lines()
        .skip(1)
        .take_while(|l| !l.trim_start().starts_with(')'))
        .filter_map(|l| l.split_whitespace().next())
        .map(|c| c.trim_matches('`').to_string())
        .collect()
}

/// The rows a changelog without a key leaves: each `+I`/`+U` adds its row, each `-D`/`-U`
/// takes one equal row back (which must be there).
fn fold_changes(rows: &[Value]) -> Vec<Value> {
    let mut live: BTreeMap<String, (Value, usize)> = BTreeMap::new();
    for row in rows {
        let mut row = row.clone();
        let op = row
            .as_object_mut()
            .and_then(|o| o.remove("op"))
            .unwrap_or_else(|| panic!("a row without its kind: {row}"));
        let k = row.to_string();
        match op.as_str() {
            Some("+I" | "+U") => live.entry(k).or_insert((row, 0)).1 += 1,
            Some("-D" | "-U") => {
                let n = live
                    .get_mut(&k)
                    .unwrap_or_else(|| panic!("{op} of a row not there: {row}"));
                n.1 -= 1;
                if n.1 == 0 {
                    live.remove(&k);
                }
            }
            _ => panic!("an unknown kind {op}"),
        }
    }
    live.into_values()
        .flat_map(|(row, n)| std::iter::repeat_n(row, n))
        .collect()
}

/// Flink's q5 text: its maximum of the windows' counts is a window aggregate over a window
/// aggregate's rows (cascaded), and its join on both windows' bounds keeps each row only until
/// the watermark passes its window's end, as Flink's window join does: no state kept for good.
#[test]
fn flink_q5_text_plans_a_cascaded_window_and_a_join_that_frees_its_state() {
    let out = Command::new(env!("CARGO_BIN_EXE_weir"))
        .arg("explain")
        .arg(job_file("jobs/nexmark/flink-sql/q5.sql"))
        .output()
        .expect("weir explain runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("left rows until the watermark passes `endtime`; right rows until the watermark passes `endtime`"),
        "{text}"
    );
    assert!(!text.contains("unbounded"), "{text}");
    assert_eq!(
        text.matches("(operator `window-aggregate`").count(),
        3,
        "the counts twice (both sides) and their maximum: {text}"
    );
}

/// The texts Flink runs for q15, q16 and q17 (`scripts/peers/flink/`), which group by an
/// expression (`DATE_FORMAT(dateTime, 'yyyy-MM-dd')`), read from weir's generator through
/// Flink's Nexmark DDL: their final tables equal those of weir's own SQL twins.
#[test]
fn flink_texts_grouping_by_an_expression_equal_weirs_twins() {
    let ddl = std::fs::read_to_string(job_file("jobs/nexmark/flink-sql/q0.sql")).expect("q0");
    let ddl = &ddl[..ddl.find("CREATE TABLE nexmark_q0").expect("q0's sink")];
    for (query, key) in [
        ("q15", &["day"][..]),
        ("q16", &["channel", "day"]),
        ("q17", &["auction", "day"]),
    ] {
        let text = std::fs::read_to_string(job_file(&format!("scripts/peers/flink/{query}.sql")))
            .expect("the peer text");
        let select: String = text
            .lines()
            .filter(|l| !l.trim_start().starts_with("--"))
            .collect::<Vec<_>>()
            .join("\n");
        let dir = out_dir();
        let job = dir.path().join(format!("{query}.sql"));
        std::fs::write(
            &job,
            format!(
                "{ddl}CREATE TABLE result WITH ('connector' = 'blackhole') AS\n{};\n",
                select.trim().trim_end_matches(';')
            ),
        )
        .expect("the job file");
        let run = |job: &std::path::Path, source: &str, sink: &str, from: &str| {
            let out = out_dir();
            let o = vec![
                format!("sources.{source}.events={EVENTS}"),
                format!(
                    "sinks.{sink}={{kind: file, from: {from}, path: {}, format: changelog-json}}",
                    out.path().display()
                ),
            ];
            let summary = run_job(job, &o);
            assert_eq!(summary.events, EVENTS, "{query}: every event read");
            let rows = read_parts(out.path());
            // q17's AVG of a BIGINT is a BIGINT on both sides, compared as it is.
            multiset(crate::changelog::apply(&rows, key).into_values())
        };
        let flink_text = run(&job, "datagen", "result", "insert-into-result");
        let twin = run(
            &job_file(&format!("jobs/nexmark/sql/{query}.yaml")),
            "nexmark",
            "out",
            query,
        );
        assert!(!twin.is_empty(), "{query}: the twin has rows");
        assert_same_rows(
            &format!("{query}: Flink's text vs weir's SQL twin"),
            &flink_text,
            &twin,
        );
    }
}

/// AVG of an INT column is an INT, as Flink types it: the sum over the count truncated toward
/// zero (Java's integer division: avg(-3, -4) is -3, not -4), exact where a FLOAT average is
/// not (three values near 2^60); NULLs are left out, and a key with only NULLs averages to
/// NULL. Checked in a running GROUP BY, in one that takes rows back (a GROUP BY over a GROUP
/// BY's updates), in a TUMBLE window aggregate and in an OVER, against a naive computation in
/// i128 over seeded random rows; AVG of a DOUBLE stays a DOUBLE.
#[test]
fn avg_of_an_int_is_an_int_truncated_toward_zero_as_flinks() {
    let dir = out_dir();
    let input = dir.path().join("rows.jsonl");
    // (k, v, ts in ms): keys 0..=3 fixed, 10..40 random; g = k % 5; w = ts / 1000.
    let big = 1_i64 << 60;
    let mut rows: Vec<(i64, Option<i64>, i64)> = vec![
        (0, Some(-3), 0),
        (0, Some(-4), 1),
        (1, Some(7), 2),
        (1, Some(8), 3),
        (2, None, 4),
        (2, None, 5),
        (3, Some(big + 1), 6),
        (3, Some(big + 2), 7),
        (3, Some(big + 4), 8),
    ];
    let mut rng = crate::recovery::Rng(0x5eed_a7e2);
    let mut ts = 10;
    for _ in 0..3000 {
        ts += rng.between(1, 8) as i64;
        let k = rng.between(10, 40) as i64;
        let v = (rng.between(0, 10) > 0).then(|| rng.between(0, 2001) as i64 - 1000);
        rows.push((k, v, ts));
    }
    let mut lines = String::new();
    for (k, v, ts) in &rows {
        let v = v.map_or("null".to_string(), |v| v.to_string());
        lines.push_str(&format!(
            "{{\"k\": {k}, \"g\": {}, \"v\": {v}, \"w\": {}, \"ts\": {ts}}}\n",
            k % 5,
            ts / 1000
        ));
    }
    std::fs::write(&input, lines).expect("the input");
    let queries = [
        (
            "running",
            "SELECT k, AVG(v) AS a, AVG(CAST(v AS DOUBLE)) AS f FROM t GROUP BY k",
        ),
        (
            "retracting",
            "SELECT g, AVG(m) AS a FROM (SELECT k, g, MAX(v) AS m FROM t GROUP BY k, g) GROUP BY g",
        ),
        (
            "windowed",
            "SELECT k, MIN(w) AS w, AVG(v) AS a FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), \
             INTERVAL '1' SECOND)) GROUP BY k, window_start, window_end",
        ),
        (
            "over",
            "SELECT k, ts, AVG(v) OVER (PARTITION BY k ORDER BY ts ROWS BETWEEN 2 PRECEDING AND \
             CURRENT ROW) AS a FROM t",
        ),
    ];
    let mut job = format!(
        "name: avg-of-ints\nsources:\n  rows:\n    kind: jsonl\n    path: {}\n    \
         schema: {{k: int, g: int, v: int, w: int, ts: timestamp}}\n    \
         event-time: {{column: ts, max-out-of-orderness: 1s}}\ntransforms:\n",
        input.display()
    );
    for (name, query) in &queries {
        job.push_str(&format!(
            "  {name}:\n    kind: sql\n    inputs: {{t: rows}}\n    query: {query}\n"
        ));
    }
    job.push_str("sinks:\n");
    for (name, _) in &queries {
        job.push_str(&format!(
            "  {name}-out:\n    kind: file\n    from: {name}\n    format: changelog-json\n    \
             path: {}\n",
            dir.path().join(name).display()
        ));
    }
    let file = dir.path().join("job.yaml");
    std::fs::write(&file, job).expect("the job");
    run_job(&file, &[]);

    // The naive average: i128 sum over the count, truncated toward zero; NULL when no values.
    let avg = |values: &[i64]| -> Value {
        if values.is_empty() {
            return Value::Null;
        }
        let sum: i128 = values.iter().map(|&v| v as i128).sum();
        Value::from((sum / values.len() as i128) as i64)
    };
    let int = |r: &Value, c: &str| r[c].as_i64().unwrap_or_else(|| panic!("{c} in {r}"));
    let read = |name: &str| read_parts(&dir.path().join(name));
    // Every average is an INT (or NULL), never a FLOAT.
    let ints = |rows: &[Value]| {
        for r in rows {
            assert!(r["a"].is_null() || r["a"].is_i64(), "an INT average: {r}");
        }
    };

    // Running: the last row of each key.
    let running = read("running");
    ints(&running);
    let table = crate::changelog::apply(&running, &["k"]);
    let mut per_key: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
    for (k, v, _) in &rows {
        let values = per_key.entry(*k).or_default();
        values.extend(v);
    }
    assert_eq!(table.len(), per_key.len(), "a row per key");
    for r in table.values() {
        let values = &per_key[&int(r, "k")];
        assert_eq!(r["a"], avg(values), "AVG(v) of {values:?}");
        match r["f"].as_f64() {
            Some(f) => {
                let naive = values.iter().map(|&v| v as f64).sum::<f64>() / values.len() as f64;
                assert!(
                    r["f"].is_f64() && (f - naive).abs() <= naive.abs() * 1e-12,
                    "{r}"
                );
            }
            None => assert!(values.is_empty(), "{r}"),
        }
    }
    let fixed = |k: i64| table[&k.to_string()]["a"].clone();
    assert_eq!(
        fixed(0),
        Value::from(-3),
        "avg(-3, -4) truncates toward zero"
    );
    assert_eq!(fixed(1), Value::from(7));
    assert_eq!(fixed(2), Value::Null, "only NULLs");
    assert_eq!(fixed(3), Value::from(big + 2), "exact above 2^53");

    // Retracting: per g, the average of its keys' maxima.
    let retracting = read("retracting");
    ints(&retracting);
    let table = crate::changelog::apply(&retracting, &["g"]);
    let mut maxima: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
    for (k, values) in &per_key {
        let m = maxima.entry(k % 5).or_default();
        m.extend(values.iter().max());
    }
    assert_eq!(table.len(), maxima.len(), "a row per g");
    for r in table.values() {
        let values = &maxima[&int(r, "g")];
        assert_eq!(r["a"], avg(values), "AVG of the maxima {values:?}");
    }

    // Windowed: a row per key and second with any row.
    let windowed = read("windowed");
    ints(&windowed);
    let mut per_window: BTreeMap<(i64, i64), Vec<i64>> = BTreeMap::new();
    for (k, v, ts) in &rows {
        per_window.entry((*k, ts / 1000)).or_default().extend(v);
    }
    let expected = per_window
        .iter()
        .map(|((k, w), values)| serde_json::json!({"k": k, "w": w, "a": avg(values)}));
    assert_same_rows(
        "AVG(v) per key and TUMBLE window",
        &multiset(fold_changes(&windowed)),
        &multiset(expected),
    );

    // OVER: each row with the average of its key's last three rows.
    let over = read("over");
    ints(&over);
    let mut last: BTreeMap<i64, Vec<Option<i64>>> = BTreeMap::new();
    let mut expected = Vec::new();
    for (k, v, ts) in &rows {
        let seen = last.entry(*k).or_default();
        seen.push(*v);
        let frame: Vec<i64> = seen.iter().rev().take(3).flatten().copied().collect();
        expected.push((*k, *ts, avg(&frame)));
    }
    let got: Vec<Value> = fold_changes(&over)
        .into_iter()
        .map(|r| serde_json::json!([int(&r, "k"), r["a"]]))
        .collect();
    let expected = expected
        .into_iter()
        .map(|(k, _, a)| serde_json::json!([k, a]));
    assert_same_rows(
        "AVG(v) OVER the last three rows",
        &multiset(got),
        &multiset(expected),
    );
}

/// A plan's operator graph, for comparing a Flink text's plan with its YAML twin's: each sink as
/// the expression of what it reads, `kind(inputs)`, an input partitioned by key marked `by key`,
/// a source as `kind.port`. `map` nodes are looked through: they are projections, renames and
/// the views of Flink's DDL, whose names and column orders legitimately differ.
fn operator_graph(plan: &weir_runtime::plan::Plan) -> Vec<String> {
    fn node(plan: &weir_runtime::plan::Plan, i: usize, port: usize) -> String {
        let n = &plan.nodes[i];
        if n.inputs.is_empty() {
            return format!("{}.{}", n.kind, n.ports[port].0);
        }
        if n.kind == "map" && n.inputs.len() == 1 {
            return edge(plan, &n.inputs[0]);
        }
        let mut inputs: Vec<&weir_runtime::plan::PlanEdge> = n.inputs.iter().collect();
        inputs.sort_by_key(|e| e.input);
        let inputs: Vec<String> = inputs.iter().map(|e| edge(plan, e)).collect();
        format!("{}({})", n.kind, inputs.join(", "))
    }
    fn edge(plan: &weir_runtime::plan::Plan, e: &weir_runtime::plan::PlanEdge) -> String {
        let from = node(plan, e.from, e.port);
        match e.key {
            Some(_) => format!("{from} by key"),
            None => from,
        }
    }
    plan.nodes
        .iter()
        .enumerate()
        .filter(|(_, n)| matches!(n.role, weir_runtime::api::metrics::NodeRole::Sink))
        .map(|(i, _)| node(plan, i, 0))
        .collect()
}

/// `weir explain` of each Flink text with a YAML twin and of the twin: the same operator graph
/// (kinds and edges; names, column orders and `map`s aside), or a difference pinned here with
/// its reason: the Flink text's plan as it is, so that a change to either shows.
#[test]
fn flink_texts_and_their_yaml_twins_plan_to_the_same_operators() {
    // (query, `None`: the same graph, or the Flink text's graph and why it differs). Where
    // they differ, the twin is a hand-written shorter plan of the same rows and the text's
    // plan is the one Flink makes of the text too; the rows are compared in
    // `flink_nexmark_texts_equal_their_yaml_twins`.
    let cases: &[(&str, Option<(&str, &str)>)] = &[
        ("q0", None),
        ("q1", None),
        ("q2", None),
        ("q3", None),
        (
            "q4",
            Some((
                "blackhole(aggregate(aggregate(local-aggregate(join(nexmark.auction by key, \
                 nexmark.bid by key)) by key) by key))",
                "the text takes each auction's MAX(price) in a running GROUP BY A.id (an updating \
                 stream, as Flink plans it), which the average per category takes back and \
                 redoes; the twin's Top-1 fired at `expires` emits each auction's price once. \
                 weir has no aggregate fired at the bound of a time-bounded join's side yet",
            )),
        ),
        (
            "q5",
            Some((
                "blackhole(join(window-aggregate(local-aggregate(nexmark.bid) by key) by key, \
                 window-aggregate(local-aggregate(window-aggregate(local-aggregate(nexmark.bid) \
                 by key)) by key) by key))",
                "the text joins each window's counts with their maximum (a cascaded window \
                 aggregate) on the windows' bounds, a join that frees both sides at `endtime` as \
                 Flink's window join does; the twin ranks the counts per window with a Top-N \
                 that keeps ties, one aggregate fewer",
            )),
        ),
        (
            "q7",
            Some((
                "blackhole(join(nexmark.bid by key, window-aggregate(local-aggregate(nexmark.bid) \
                 by key) by key))",
                "the text joins bids with the window maxima on `dateTime BETWEEN window_end - 10 \
                 s AND window_end`, a closed range that also takes a bid at the next window's \
                 first millisecond, so it is an interval join and not a window join (it would \
                 differ on such a bid); the twin ranks each window's bids with a Top-N that \
                 keeps ties",
            )),
        ),
        (
            "q8",
            Some((
                "blackhole(join(window-aggregate(local-aggregate(nexmark.person) by key) by key, \
                 window-aggregate(local-aggregate(nexmark.auction) by key) by key))",
                "the text takes the distinct persons and sellers of each window (two window \
                 aggregates) and joins them on the windows' bounds, a join that frees both \
                 sides at `endtime`; the twin's semi window join emits each person once per \
                 window with an auction of theirs",
            )),
        ),
        ("q9", None),
        ("q11", None),
    ];
    let mut report = String::new();
    for (query, differs) in cases {
        let twin = plan(&job_file(&format!("jobs/nexmark/{query}.yaml")), &[])
            .unwrap_or_else(|e| panic!("{e}"));
        let text = plan(
            &job_file(&format!("jobs/nexmark/flink-sql/{query}.sql")),
            &[],
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let (twin, text) = (operator_graph(&twin), operator_graph(&text));
        let ok = match differs {
            None => twin == text,
            Some((graph, _)) => twin != text && text == [graph.to_string()],
        };
        if !ok {
            report.push_str(&format!(
                "{query}:\n  twin: {twin:?}\n  text: {text:?}\n  expected: {differs:?}\n"
            ));
        }
    }
    assert!(report.is_empty(), "{report}");
}
