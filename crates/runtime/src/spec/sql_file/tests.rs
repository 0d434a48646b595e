//! SQL job files: what each statement becomes, and where problems are reported.

use super::statement::{duration, setting};
use super::*;
use crate::plan::check_str;
use crate::spec::env::ProcessEnv;
use crate::spec::{SinkSpec, SourceSpec, TransformSpec};

fn load(text: &str) -> LoadedJob {
    parse("job.sql", text, &[], &ProcessEnv).unwrap_or_else(|e| panic!("{e}"))
}

/// The problems of a text, as `line:column message`.
fn problems(text: &str) -> Vec<String> {
    match check_str("job.sql", text, &[]) {
        Ok(_) => Vec::new(),
        Err(e) => e
            .problems
            .iter()
            .map(|p| {
                format!(
                    "{}:{} {}",
                    p.line.unwrap_or(0),
                    p.column.unwrap_or(0),
                    p.message
                )
            })
            .collect(),
    }
}

const NEXMARK: &str = "CREATE TABLE datagen (
    event_type int,
    person ROW<id BIGINT, name VARCHAR, `dateTime` TIMESTAMP(3)>,
    auction ROW<id BIGINT, seller BIGINT, `dateTime` TIMESTAMP(3), expires TIMESTAMP(3)>,
    bid ROW<auction BIGINT, price BIGINT, `dateTime` TIMESTAMP(3)>,
    `dateTime` AS CASE WHEN event_type = 0 THEN person.`dateTime`
                       WHEN event_type = 1 THEN auction.`dateTime`
                       ELSE bid.`dateTime` END,
    WATERMARK FOR `dateTime` AS `dateTime` - INTERVAL '4' SECOND
) WITH ('connector' = 'nexmark', 'events.num' = '1000', 'first-event.rate' = '1000');
CREATE VIEW bid AS SELECT bid.auction, bid.price, `dateTime` FROM datagen WHERE event_type = 2;
";

#[test]
fn a_sql_file_is_told_from_yaml_by_its_name_or_first_word() {
    assert!(looks_like_sql("q.sql", "name: x"));
    assert!(looks_like_sql(
        "submitted",
        "-- a job\nCREATE TABLE t (a INT)"
    ));
    assert!(looks_like_sql("submitted", "/* x */ set 'a' = 'b';"));
    assert!(!looks_like_sql("job.yaml", "name: create\nsources: {}"));
    assert!(!looks_like_sql("submitted", "create: 1"));
    assert!(!looks_like_sql("submitted", "# CREATE TABLE\nname: x"));
}

#[test]
fn flink_settings_map_onto_the_job_and_weir_keys_are_read_by_path() {
    let (path, value) = setting("parallelism.default", "2").expect("known");
    assert_eq!((path, value), (vec!["parallelism".into()], Value::from(2)));
    let (path, value) = setting("state.backend.type", "hashmap").expect("known");
    assert_eq!(path, vec!["state", "backend"]);
    assert_eq!(value, Value::from("heap"));
    let (path, value) = setting("execution.checkpointing.mode", "AT_LEAST_ONCE").expect("known");
    assert_eq!(path, vec!["checkpoint", "mode"]);
    assert_eq!(value, Value::from("at-least-once"));
    let (path, value) = setting("checkpoint.storage", "file:///tmp/x").expect("a weir key");
    assert_eq!(path, vec!["checkpoint", "storage"]);
    assert_eq!(value, Value::from("file:///tmp/x"));
    assert_eq!(duration("10 s"), Value::from("10s"));
    assert_eq!(duration("1 min"), Value::from("1min"));
    assert_eq!(duration("500"), Value::from("500ms"));
    let unknown = setting("table.exec.source.idle-timeout", "1s").unwrap_err();
    assert!(unknown.contains("no setting"), "{unknown}");
    let client = setting("sql-client.execution.result-mode", "tableau").unwrap_err();
    assert!(client.contains("SQL client"), "{client}");
}

#[test]
fn nexmark_ddl_becomes_the_generator_and_a_view_reads_its_port() {
    let text = format!(
        "SET 'parallelism.default' = '2';\n{NEXMARK}CREATE TABLE out (auction BIGINT, p BIGINT, t \
         TIMESTAMP(3)) WITH ('connector' = 'blackhole');\nINSERT INTO out SELECT * FROM bid;\n"
    );
    let loaded = load(&text);
    assert!(loaded.problems.is_empty(), "{:?}", loaded.problems);
    let spec = &loaded.spec;
    assert_eq!(spec.parallelism, 2);
    assert_eq!(spec.name, "job");
    let SourceSpec::Nexmark(n) = &spec.sources["datagen"] else {
        panic!("a nexmark source")
    };
    assert_eq!(n.events, Some(1000));
    // 1,000 events a second: 1 ms of event time apart.
    assert_eq!(n.inter_event_delay.0, std::time::Duration::from_millis(1));
    assert_eq!(n.event_time.column.as_deref(), Some("dateTime"));
    // `- INTERVAL '4' SECOND` says nothing at or before max - 4 s follows: weir's bound is
    // 1 ms less.
    assert_eq!(
        n.event_time.max_out_of_orderness.0,
        std::time::Duration::from_millis(3999)
    );
    let TransformSpec::Sql(view) = &spec.transforms["bid"] else {
        panic!("the view is a sql node")
    };
    let q = view.query.replace('`', "");
    assert!(q.contains("FROM datagen.bid"), "{q}");
    assert!(q.contains("auction AS auction"), "{q}");
    assert!(q.contains("dateTime AS dateTime"), "{q}");
    assert!(!q.contains("event_type"), "{q}");
    let TransformSpec::Sql(insert) = &spec.transforms["insert-into-out"] else {
        panic!("the insert is a sql node")
    };
    assert_eq!(insert.columns, vec!["auction", "p", "t"]);
    let SinkSpec::Blackhole(sink) = &spec.sinks["out"] else {
        panic!("a blackhole")
    };
    assert_eq!(sink.from, "insert-into-out");
    // It plans, and the columns take the sink's names.
    let plan = check_str("job.sql", &text, &[]).unwrap_or_else(|e| panic!("{e}"));
    let out = plan
        .nodes
        .iter()
        .find(|n| n.name == "insert-into-out")
        .expect("the insert's node");
    let names: Vec<&str> = out.ports[0]
        .1
        .fields()
        .iter()
        .map(|f| f.name().as_str())
        .collect();
    assert_eq!(names, ["auction", "p", "t"]);
}

#[test]
fn a_json_file_of_one_event_kind_per_line_reads_its_variants() {
    let text = "CREATE TABLE nexmark (
  `type` STRING,
  bid ROW<auction BIGINT, price BIGINT, `dateTime` BIGINT>,
  person ROW<id BIGINT, `dateTime` BIGINT>,
  `dateTime` AS TO_TIMESTAMP_LTZ(CASE `type` WHEN 'bid' THEN bid.`dateTime`
                                              ELSE person.`dateTime` END, 3),
  WATERMARK FOR `dateTime` AS `dateTime` - INTERVAL '0.001' SECOND
) WITH ('connector' = 'filesystem', 'path' = 'data/nexmark.jsonl', 'format' = 'json');
CREATE VIEW bid AS SELECT bid.auction, bid.price, `dateTime` FROM nexmark WHERE `type` = 'bid';
CREATE TABLE out (auction BIGINT, price BIGINT, `dateTime` TIMESTAMP(3))
  WITH ('connector' = 'print');
INSERT INTO out SELECT auction, price, `dateTime` FROM bid WHERE price > 10;
";
    let loaded = load(text);
    assert!(loaded.problems.is_empty(), "{:?}", loaded.problems);
    let SourceSpec::Jsonl(j) = &loaded.spec.sources["nexmark"] else {
        panic!("a jsonl source")
    };
    let variants = serde_json::to_value(&j.variants).expect("json");
    assert_eq!(variants["bid"]["dateTime"], "timestamp", "{variants}");
    assert_eq!(variants["bid"]["price"], "int");
    assert_eq!(variants["person"]["dateTime"], "timestamp");
    assert_eq!(j.event_time.column.as_deref(), Some("dateTime"));
    assert_eq!(
        j.event_time.max_out_of_orderness.0,
        std::time::Duration::ZERO
    );
    let SinkSpec::Stdout(_) = &loaded.spec.sinks["out"] else {
        panic!("print is stdout")
    };
}

#[test]
fn problems_are_reported_at_their_line_and_column_of_the_sql_file() {
    // A type error in a query: at its clause.
    let text = format!(
        "{NEXMARK}CREATE TABLE out (a BIGINT) WITH ('connector' = 'blackhole');\nINSERT INTO out\n\
         SELECT auction FROM bid WHERE price + 'x' > 1;\n"
    );
    let p = problems(&text);
    let line = NEXMARK.lines().count() + 3;
    assert!(
        p.iter().any(|p| p.starts_with(&format!("{line}:"))),
        "line {line}: {p:?}"
    );
    // An unknown option: at the option.
    let p = problems(
        "CREATE TABLE t (a BIGINT) WITH ('connector' = 'blackhole', 'speed' = 'fast');\n\
         CREATE TABLE s (a BIGINT, ts TIMESTAMP(3)) WITH ('connector' = 'filesystem', 'path' = \
         'x', 'format' = 'json');\nINSERT INTO t SELECT a FROM s;",
    );
    assert!(
        p.iter()
            .any(|p| p.starts_with("1:60 ") && p.contains("no option `speed`")),
        "{p:?}"
    );
    // A view that reads the generator's table without picking a kind.
    let p = problems(&format!(
        "{NEXMARK}CREATE VIEW all_events AS SELECT bid.price FROM datagen;\nCREATE TABLE out (p \
         BIGINT) WITH ('connector' = 'blackhole');\nINSERT INTO out SELECT price FROM all_events;"
    ));
    assert!(
        p.iter()
            .any(|p| p.contains("reads one kind of event") && p.contains("event_type = 2 (bid)")),
        "{p:?}"
    );
    // A field of another kind.
    let p = problems(&format!(
        "{NEXMARK}CREATE VIEW x AS SELECT person.name FROM datagen WHERE event_type = 2;\nCREATE \
         TABLE out (p STRING) WITH ('connector' = 'blackhole');\nINSERT INTO out SELECT name FROM x;"
    ));
    assert!(
        p.iter()
            .any(|p| p.contains("`person.name` is a field of another kind")),
        "{p:?}"
    );
    // The INSERT's query gives fewer columns than the table has.
    let p = problems(&format!(
        "{NEXMARK}CREATE TABLE out (a BIGINT, b BIGINT) WITH ('connector' = 'blackhole');\n\
         INSERT INTO out SELECT auction FROM bid;"
    ));
    assert!(
        p.iter()
            .any(|p| p.contains("gives 1 columns (auction) where 2 are named")),
        "{p:?}"
    );
    // A statement weir does not read, and a type it has not.
    let p = problems("SELECT 1;");
    assert!(
        p.iter()
            .any(|p| p.starts_with("1:1 ") && p.contains("INSERT INTO")),
        "{p:?}"
    );
    let p = problems("CREATE TABLE t (a MAP<STRING, INT>) WITH ('connector' = 'blackhole');");
    assert!(
        p.iter()
            .any(|p| p.starts_with("1:19 ") && p.contains("no column type `MAP`")),
        "{p:?}"
    );
    // Statement sets hold INSERTs.
    let text = format!(
        "{NEXMARK}CREATE TABLE a (x BIGINT) WITH ('connector' = 'blackhole');\nCREATE TABLE b (y \
         BIGINT) WITH ('connector' = 'blackhole');\nEXECUTE STATEMENT SET BEGIN\nINSERT INTO a \
         SELECT auction FROM bid;\nINSERT INTO b SELECT price FROM bid;\nEND;"
    );
    assert_eq!(problems(&text), Vec::<String>::new());
}

#[test]
fn a_submitted_text_opening_with_a_statement_is_loaded_as_sql() {
    // What `weir serve` does with a text posted to its API (no file name to go by).
    let text = format!(
        "{NEXMARK}CREATE TABLE out (a BIGINT) WITH ('connector' = 'blackhole');\nINSERT INTO out \
         SELECT auction FROM bid;\n"
    );
    let loaded =
        crate::spec::load::parse_str("submitted", &text, &[]).unwrap_or_else(|e| panic!("{e}"));
    assert!(loaded.problems.is_empty(), "{:?}", loaded.problems);
    assert!(matches!(
        loaded.spec.sources["datagen"],
        SourceSpec::Nexmark(_)
    ));
    assert!(matches!(loaded.spec.sinks["out"], SinkSpec::Blackhole(_)));
}
