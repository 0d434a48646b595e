//! What the dashboard reads from `weir serve`'s API, checked against what the job must have
//! done: per-subtask figures that add up to the node's and expose a hot key, a live tail whose
//! rows satisfy the job's own filter, a job's log with its failure, the effective job with its
//! overrides and defaults, snapshots that exist on disk, a checkpoint's per-subtask acks, and
//! every problem of a job file in one round.

use std::time::Duration;

use axum::body::Body;
use axum::http::StatusCode;
use serde_json::Value;
use weir_http_ui::{Access, HostConfig, JobLimits};

use crate::serve::{RelativeDir, app, app_with, call, wait_for};

/// Captures hosted jobs' log lines in this test process, as `weir serve` does (once).
pub(crate) fn capture_job_logs() {
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let _ = tracing_subscriber::registry()
        .with(
            weir_http_ui::logs::JobLogLayer
                .with_filter(tracing_subscriber::filter::LevelFilter::INFO),
        )
        .try_init();
}

async fn submit(app: &axum::Router, query: &str, job: String) -> String {
    let a = call(app, "POST", &format!("/api/v1/jobs{query}"), job).await;
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.text);
    a.json()["id"].as_str().unwrap().to_owned()
}

fn node<'a>(job: &'a Value, name: &str) -> &'a Value {
    job["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == name)
        .unwrap_or_else(|| panic!("no node {name} in {job}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subtasks_add_up_to_their_node_and_a_hot_key_is_flagged_as_skew() {
    let (host, app) = app(Access::open());
    // Half of Nexmark's bids go to one hot auction: keyed by auction at parallelism 2, one
    // subtask gets it (and its share of the rest), the other only its share of the rest.
    let id = submit(
        &app,
        "?parallelism=2",
        "name: skewed\n\
         two-phase-aggregation: false\n\
         sources:\n  nexmark: {kind: nexmark, rate: 40000, parallelism: 1}\n\
         transforms:\n  by-auction: {kind: key-by, from: nexmark.bid, keys: [auction]}\n  \
         counts: {kind: aggregate, from: by-auction, aggregates: {bids: count(*)}}\n\
         sinks:\n  out: {kind: blackhole, from: counts}\n"
            .to_owned(),
    )
    .await;
    let uri = format!("/api/v1/jobs/{id}");
    let job = wait_for(&app, &uri, |v| {
        v["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n["name"] == "counts" && n["skewed"] == true)
    })
    .await;
    let counts = node(&job, "counts");
    let subtasks = counts["subtasks"].as_array().unwrap();
    assert_eq!(subtasks.len(), 2);
    // The hot subtask has more than twice the other's input over the last interval.
    let rates: Vec<f64> = subtasks
        .iter()
        .map(|t| t["rate-in"].as_f64().unwrap())
        .collect();
    let (hi, lo) = (rates[0].max(rates[1]), rates[0].min(rates[1]));
    assert!(hi > 2.0 * lo, "{rates:?}");
    assert!(counts["skew"].as_f64().unwrap() > 2.0);
    // The source at parallelism 1 has no skew to speak of.
    assert_eq!(node(&job, "nexmark")["skew"], Value::Null);
    // Keyed state: keys on each subtask, and their sum is the node's.
    let job = wait_for(&app, &uri, |v| {
        node(v, "counts")["subtasks"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["state-keys"].as_u64().is_some_and(|k| k > 0))
    })
    .await;
    let counts = node(&job, "counts");
    let keys: u64 = counts["subtasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["state-keys"].as_u64().unwrap())
        .sum();
    assert_eq!(counts["state-keys"].as_u64(), Some(keys));
    // Once cancelled and drained, the subtasks' records add up to the node's (the node's
    // figure is read the same instant).
    let a = call(&app, "POST", &format!("{uri}/cancel"), Body::empty()).await;
    assert_eq!(a.status, StatusCode::ACCEPTED, "{}", a.text);
    let job = wait_for(&app, &uri, |v| v["state"] == "cancelled").await;
    for n in job["nodes"].as_array().unwrap() {
        for key in ["records-in", "records-out"] {
            let sum: u64 = n["subtasks"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t[key].as_u64().unwrap())
                .sum();
            assert_eq!(n[key].as_u64(), Some(sum), "{} {key}", n["name"]);
        }
    }
    // The hot auction's subtask read more in all, too.
    let totals: Vec<u64> = node(&job, "counts")["subtasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["records-in"].as_u64().unwrap())
        .collect();
    assert!(totals.iter().max() > totals.iter().min(), "{totals:?}");
    host.shutdown(Duration::from_secs(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tail_shows_the_nodes_last_rows_while_someone_watches() {
    let (host, app) = app(Access::open());
    let id = submit(
        &app,
        "",
        "name: tailed\n\
         sources:\n  nexmark: {kind: nexmark, rate: 20000}\n\
         transforms:\n  dear:\n    kind: filter\n    from: nexmark.bid\n    where: price > 5000000\n  \
         q1: {kind: map, from: dear, columns: {auction: auction, price: price, cents: price * 100}}\n\
         sinks:\n  out: {kind: blackhole, from: q1}\n"
            .to_owned(),
    )
    .await;
    let uri = format!("/api/v1/jobs/{id}/nodes/q1/tail");
    // The first request starts the recording; rows come while it is kept on.
    let tail = wait_for(&app, &uri, |v| {
        v["subtasks"][0]["rows"]
            .as_array()
            .is_some_and(|r| !r.is_empty())
    })
    .await;
    assert_eq!(tail["watching"], true);
    let rows = tail["subtasks"][0]["rows"].as_array().unwrap();
    assert!(rows.len() <= tail["rows-per-subtask"].as_u64().unwrap() as usize);
    for row in rows {
        // Every row passed the filter and was mapped as the job says.
        let price = row["price"].as_i64().unwrap();
        assert!(price > 5_000_000, "{row}");
        assert_eq!(row["cents"].as_i64(), Some(price * 100), "{row}");
        assert!(row["auction"].is_i64(), "{row}");
    }
    // A sink's tail is what it received.
    let sink = wait_for(&app, &format!("/api/v1/jobs/{id}/nodes/out/tail"), |v| {
        v["subtasks"][0]["rows"]
            .as_array()
            .is_some_and(|r| !r.is_empty())
    })
    .await;
    assert!(sink["subtasks"][0]["rows"][0]["cents"].is_i64(), "{sink}");
    let missing = call(
        &app,
        "GET",
        &format!("/api/v1/jobs/{id}/nodes/nope/tail"),
        Body::empty(),
    )
    .await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND, "{}", missing.text);
    host.shutdown(Duration::from_secs(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_jobs_error_is_in_its_own_log_and_not_in_another_jobs() {
    capture_job_logs();
    let dir = RelativeDir::new("job-logs");
    std::fs::create_dir_all(&dir.0).unwrap();
    let input = format!("{}/clicks.jsonl", dir.0);
    std::fs::write(&input, "{\"user\": \"a\"}\nnot json at all\n").unwrap();
    let (host, app) = app(Access::open());
    let quiet = submit(&app, "", crate::serve::q1("quiet", "")).await;
    let failing = submit(
        &app,
        "",
        format!(
            "name: failing\n\
             sources:\n  clicks: {{kind: jsonl, path: {input}, schema: {{user: string}}}}\n\
             sinks:\n  out: {{kind: blackhole, from: clicks}}\n"
        ),
    )
    .await;
    wait_for(&app, &format!("/api/v1/jobs/{failing}"), |v| {
        v["state"] == "failed"
    })
    .await;
    let logs = wait_for(&app, &format!("/api/v1/jobs/{failing}/logs"), |v| {
        v["lines"].as_array().is_some_and(|l| !l.is_empty())
    })
    .await;
    let lines = logs["lines"].as_array().unwrap();
    assert!(
        lines
            .iter()
            .any(|l| l["level"] == "error" && l["message"].as_str().unwrap().contains("line 2")),
        "{logs}"
    );
    // Lines after the last one seen: none new.
    let last = lines.last().unwrap()["seq"].as_u64().unwrap();
    let after = call(
        &app,
        "GET",
        &format!("/api/v1/jobs/{failing}/logs?after={last}"),
        Body::empty(),
    )
    .await
    .json();
    assert_eq!(after["lines"].as_array().unwrap().len(), 0, "{after}");
    // The other job's log has none of it.
    let other = call(
        &app,
        "GET",
        &format!("/api/v1/jobs/{quiet}/logs"),
        Body::empty(),
    )
    .await
    .json();
    assert!(
        other["lines"]
            .as_array()
            .unwrap()
            .iter()
            .all(|l| !l["message"].as_str().unwrap().contains("line 2")),
        "{other}"
    );
    host.shutdown(Duration::from_secs(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_effective_job_has_the_overrides_and_the_defaults_and_masks_secrets() {
    let (host, app) = app(Access::open());
    let id = submit(
        &app,
        "?set=sources.nexmark.rate%3D1234&parallelism=1",
        crate::serve::q1("effective", "description: 'secret: hunter2'\n"),
    )
    .await;
    let submitted = call(
        &app,
        "GET",
        &format!("/api/v1/jobs/{id}/spec"),
        Body::empty(),
    )
    .await;
    assert_eq!(submitted.status, StatusCode::OK);
    assert!(submitted.text.contains("rate: 20000"), "{}", submitted.text);
    let effective = call(
        &app,
        "GET",
        &format!("/api/v1/jobs/{id}/spec?view=effective"),
        Body::empty(),
    )
    .await;
    assert_eq!(effective.status, StatusCode::OK);
    let text = &effective.text;
    assert!(
        text.contains("# override: sources.nexmark.rate=1234"),
        "{text}"
    );
    // The value that runs is the override's, and defaults nobody wrote are filled in.
    let spec = weir_runtime::spec::yaml::parse(text).unwrap().value;
    assert_eq!(spec["sources"]["nexmark"]["rate"].as_u64(), Some(1234));
    assert!(spec["batch-size"].as_u64().is_some(), "{text}");
    assert!(spec["channel-capacity"].as_u64().is_some(), "{text}");
    let bad = call(
        &app,
        "GET",
        &format!("/api/v1/jobs/{id}/spec?view=other"),
        Body::empty(),
    )
    .await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    host.shutdown(Duration::from_secs(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_snapshots_that_exist_are_listed_and_a_checkpoint_has_every_subtasks_ack() {
    let dir = RelativeDir::new("snapshots-listed");
    let (host, app) = app(Access::open());
    let id = submit(
        &app,
        "?parallelism=2",
        format!(
            "name: listed\n\
             two-phase-aggregation: false\n\
             sources:\n  nexmark: {{kind: nexmark, rate: 20000}}\n\
             transforms:\n  by-auction: {{kind: key-by, from: nexmark.bid, keys: [auction]}}\n  \
             counts: {{kind: aggregate, from: by-auction, aggregates: {{bids: count(*)}}}}\n\
             sinks:\n  out: {{kind: blackhole, from: counts}}\n\
             checkpoint: {{interval: 100ms, storage: {}, retained: 2}}\n",
            dir.0
        ),
    )
    .await;
    let uri = format!("/api/v1/jobs/{id}");
    // More checkpoints than retention keeps.
    let cps = wait_for(&app, &format!("{uri}/checkpoints"), |v| {
        v["completed"].as_u64().is_some_and(|c| c >= 5)
    })
    .await;
    let a = call(&app, "POST", &format!("{uri}/cancel"), Body::empty()).await;
    assert_eq!(a.status, StatusCode::ACCEPTED, "{}", a.text);
    wait_for(&app, &uri, |v| v["state"] == "cancelled").await;
    let listed = call(&app, "GET", &format!("{uri}/snapshots"), Body::empty())
        .await
        .json();
    let names: Vec<String> = listed["snapshots"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap().to_owned())
        .collect();
    // What is on disk, read independently: snapshot folders with their metadata.
    let job_dir = std::fs::read_dir(&dir.0)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.is_dir() && p.file_name().unwrap() != "shared")
        .unwrap();
    let mut on_disk: Vec<(u64, String)> = std::fs::read_dir(&job_dir)
        .unwrap()
        .filter_map(|e| {
            let e = e.unwrap();
            let name = e.file_name().into_string().unwrap();
            let (kind, id) = name.split_once('-')?;
            let id: u64 = id.parse().ok()?;
            e.path()
                .join("_metadata")
                .exists()
                .then(|| (id, format!("{kind}-{id}")))
        })
        .collect();
    on_disk.sort_by_key(|e| std::cmp::Reverse(e.0));
    let on_disk: Vec<String> = on_disk.into_iter().map(|(_, n)| n).collect();
    assert_eq!(names, on_disk, "listed {listed}");
    assert!(names.len() <= 2, "retention keeps 2: {names:?}");
    // The history has more than exist: choosing one of those is refused, a listed one runs.
    let oldest = cps["history"][0]["name"].as_str().unwrap().to_owned();
    assert!(!names.contains(&oldest));
    let refused = call(
        &app,
        "POST",
        &format!("{uri}/restart"),
        format!("{{\"from\": \"{oldest}\"}}"),
    )
    .await;
    assert_eq!(refused.status, StatusCode::NOT_FOUND, "{}", refused.text);
    // A completed checkpoint's detail has an ack per subtask of every node (5 subtasks:
    // the source, key-by folded, counts ×2, the sink ×2).
    let latest = cps["latest"]["id"].as_u64().unwrap();
    let detail = call(
        &app,
        "GET",
        &format!("{uri}/checkpoints/{latest}"),
        Body::empty(),
    )
    .await
    .json();
    let acks = detail["acks"].as_array().unwrap();
    let subtasks: usize = detail["metadata"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["subtasks"].as_array().unwrap().len())
        .sum();
    assert_eq!(acks.len(), subtasks, "{detail}");
    for ack in acks {
        assert!(
            ack["acked-after-ms"].as_u64().unwrap()
                <= detail["checkpoint"]["duration-ms"].as_u64().unwrap(),
            "{ack}"
        );
    }
    let restarted = call(
        &app,
        "POST",
        &format!("{uri}/restart"),
        format!("{{\"from\": \"{}\"}}", names[0]),
    )
    .await;
    assert_eq!(restarted.status, StatusCode::ACCEPTED, "{}", restarted.text);
    assert!(restarted.text.contains("\"run\":2"), "{}", restarted.text);
    host.shutdown(Duration::from_secs(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validation_reports_every_problem_in_one_round() {
    let (host, app) = app_with(
        Access::open(),
        HostConfig {
            limits: JobLimits {
                max_generator_rate: 1000,
                ..JobLimits::default()
            },
            ..HostConfig::default()
        },
    );
    // A wrong value in one source, a rate over the server's limit in another, and an
    // unknown key in a sink: all three at once.
    let a = call(
        &app,
        "POST",
        "/api/v1/jobs/validate",
        "name: rounds\n\
         sources:\n  a: {kind: nexmark, events: lots}\n  b: {kind: nexmark, rate: 5000}\n\
         sinks:\n  x: {kind: blackhole, from: a.bid, colour: red}\n  y: {kind: blackhole, from: b.bid}\n",
    )
    .await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST, "{}", a.text);
    let problems = a.json()["problems"].as_array().unwrap().clone();
    let keys: Vec<&str> = problems
        .iter()
        .map(|p| p["key"].as_str().unwrap())
        .collect();
    for key in ["sources.a.events", "sources.b.rate", "sinks.x.colour"] {
        assert!(keys.contains(&key), "{key} missing from {keys:?}");
    }
    // The source whose value was wrong gets no limit problem from its default.
    assert!(
        !problems
            .iter()
            .any(|p| p["key"] == "sources.a" || p["key"] == "sources.a.rate"),
        "{problems:?}"
    );
    host.shutdown(Duration::from_secs(10)).await;
}
