//! Queryable state through `weir serve`'s API in-process, and `weir state` against a real
//! server: lookups by key and prefix on the direct path (RocksDB snapshot, no message to the
//! operator) and the ordered path (the operator's mailbox), checked against counts computed
//! here from the input file; the 404s, the 400s and the per-client 429.
//!
//! The test job aggregates the 300 clicks of `jobs/examples/clicks.jsonl` per user; a Nexmark
//! source that a filter empties keeps it running after the file is read, so its state can be
//! looked up at leisure.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::StatusCode;
use serde_json::Value;
use weir_http_ui::{Access, HostConfig};

use crate::serve::{app, app_with, call, call_with, wait_for};
use crate::support::repo;

/// Per user (exactly as written): (clicks, total duration_ms), read from the file with serde,
/// not with weir.
fn expected() -> BTreeMap<String, (i64, i64)> {
    let text = std::fs::read_to_string(repo().join("jobs/examples/clicks.jsonl")).unwrap();
    let mut counts = BTreeMap::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(line).unwrap();
        let e = counts
            .entry(v["user"].as_str().unwrap().to_string())
            .or_insert((0, 0));
        e.0 += 1;
        e.1 += v["duration_ms"].as_i64().unwrap();
    }
    counts
}

/// The test job; `queryable` is the aggregate's declaration, `state` the state section.
fn job(name: &str, queryable: &str, state: &str) -> String {
    format!(
        "name: {name}\n\
         parallelism: 2\n\
         two-phase-aggregation: false\n\
         sources:\n\
         \x20 clicks:\n\
         \x20   kind: jsonl\n\
         \x20   path: jobs/examples/clicks.jsonl\n\
         \x20   schema: {{user: string, page: string, ts: timestamp, duration_ms: int, device: {{kind: string, os: string}}}}\n\
         \x20 idle: {{kind: nexmark, rate: 1000}}\n\
         transforms:\n\
         \x20 c: {{kind: map, from: clicks, columns: {{user: user, ms: duration_ms}}}}\n\
         \x20 never: {{kind: filter, from: idle.bid, where: \"bidder < 0\"}}\n\
         \x20 n: {{kind: map, from: never, columns: {{user: \"'nobody'\", ms: price}}}}\n\
         \x20 all: {{kind: union, from: [c, n]}}\n\
         \x20 by-user: {{kind: key-by, from: all, keys: [user]}}\n\
         \x20 per-user:\n\
         \x20   kind: aggregate\n\
         \x20   from: by-user\n\
         \x20   aggregates: {{views: count(*), total_ms: sum(ms)}}\n\
         \x20   queryable: {queryable}\n\
         sinks:\n\
         \x20 out: {{kind: blackhole, from: per-user}}\n\
         {state}"
    )
}

const ROCKSDB: &str = "state: {backend: rocksdb}\n";

/// Submits `text` and waits until the aggregate has read every click; returns the job's URI.
async fn running(app: &Router, text: &str) -> String {
    let a = call(app, "POST", "/api/v1/jobs", text.to_string()).await;
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.text);
    let uri = format!("/api/v1/jobs/{}", a.json()["id"].as_str().unwrap());
    let clicks = expected().values().map(|(n, _)| n).sum::<i64>();
    wait_for(app, &uri, |v| {
        node(v, "per-user")["records-in"].as_i64() == Some(clicks)
    })
    .await;
    uri
}

fn node<'a>(job: &'a Value, name: &str) -> &'a Value {
    job["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == name)
        .unwrap()
}

async fn control_messages(app: &Router, uri: &str) -> i64 {
    let job = call(app, "GET", uri, Body::empty()).await.json();
    node(&job, "per-user")["control-messages"].as_i64().unwrap()
}

fn lookup_uri(job: &str, key: &str, path: &str) -> String {
    let key: String = key
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect();
    format!("{job}/state/per-user/accumulators?key={key}&path={path}")
}

/// The (views, total_ms) of an answer's single entry.
fn value_of(answer: &Value) -> (i64, i64) {
    let entries = answer["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 1, "{answer}");
    let v = &entries[0]["value"];
    (
        v["views"].as_i64().unwrap(),
        v["total_ms"].as_i64().unwrap(),
    )
}

/// Polls a direct lookup until it answers `counts` (a liveness wait, bounded at 30 s: the
/// state reaches RocksDB at its next write-through, 404 until then).
async fn written_through(app: &Router, uri: &str, counts: (i64, i64)) {
    for _ in 0..600 {
        let a = call(app, "GET", uri, Body::empty()).await;
        if a.status == StatusCode::OK && value_of(&a.json()) == counts {
            return;
        }
        assert!(
            a.status == StatusCode::OK || a.status == StatusCode::NOT_FOUND,
            "{uri}: {}",
            a.text
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{uri} never answered {counts:?}");
}

async fn cancel(app: &Router, uri: &str) {
    let a = call(app, "POST", &format!("{uri}/cancel"), Body::empty()).await;
    assert_eq!(a.status, StatusCode::ACCEPTED, "{}", a.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_lookups_never_enter_the_operators_queue_and_ordered_ones_do() {
    let (host, app) = app(Access::open());
    let text = job(
        "query-rocksdb",
        "{accumulators: {max-staleness: 50ms}}",
        ROCKSDB,
    );
    let uri = running(&app, &text).await;
    let want = expected();
    let queries = host.jobs()[0].queries().unwrap();

    // Ordered: answered by the operator's task, which has seen every click.
    let before = control_messages(&app, &uri).await;
    for (user, counts) in &want {
        let a = call(
            &app,
            "GET",
            &lookup_uri(&uri, user, "ordered"),
            Body::empty(),
        )
        .await;
        assert_eq!(a.status, StatusCode::OK, "{user}: {}", a.text);
        let answer = a.json();
        assert_eq!(value_of(&answer), *counts, "{user}");
        assert_eq!(answer["entries"][0]["key"]["user"], user.as_str());
        assert_eq!(answer["path"], "ordered");
        assert_eq!(answer["freshness"]["read-your-writes"], true);
    }
    let n = want.len() as i64;
    assert_eq!(control_messages(&app, &uri).await - before, n);
    // /metrics exports the same count.
    let id = uri.rsplit('/').next().unwrap();
    let metrics = call(&app, "GET", "/metrics", Body::empty()).await.text;
    let line = format!(
        "weir_node_control_messages_total{{id=\"{id}\",job=\"query-rocksdb\",node=\"per-user\"}} {}",
        before + n
    );
    assert!(
        metrics.lines().any(|l| l == line),
        "{line} missing from /metrics:\n{metrics}"
    );

    // Direct: as of the last write-through, at most 50 ms behind the operator's writes; wait
    // (liveness only) until the last click has been written through.
    for (user, counts) in &want {
        written_through(&app, &lookup_uri(&uri, user, "direct"), *counts).await;
    }
    let before = control_messages(&app, &uri).await;
    let direct_before = queries
        .counters
        .direct
        .load(std::sync::atomic::Ordering::Relaxed);
    for (user, counts) in &want {
        let a = call(
            &app,
            "GET",
            &lookup_uri(&uri, user, "direct"),
            Body::empty(),
        )
        .await;
        assert_eq!(a.status, StatusCode::OK, "{user}: {}", a.text);
        let answer = a.json();
        assert_eq!(value_of(&answer), *counts, "{user}");
        assert_eq!(answer["path"], "direct");
        assert_eq!(answer["freshness"]["read-your-writes"], false);
        assert!(answer["freshness"]["as-of"].as_i64().unwrap() > 0);
    }
    assert_eq!(
        control_messages(&app, &uri).await,
        before,
        "a direct lookup sent nothing to the operator"
    );
    assert_eq!(
        queries
            .counters
            .direct
            .load(std::sync::atomic::Ordering::Relaxed)
            - direct_before,
        want.len() as u64
    );

    // A scan by key prefix, from every subtask.
    let a = call(
        &app,
        "GET",
        &format!("{uri}/state/per-user/accumulators?prefix=C&limit=1000"),
        Body::empty(),
    )
    .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text);
    let got: BTreeMap<String, i64> = a.json()["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["key"]["user"].as_str().unwrap().to_string(),
                e["value"]["views"].as_i64().unwrap(),
            )
        })
        .collect();
    let want_c: BTreeMap<String, i64> = want
        .iter()
        .filter(|(u, _)| u.starts_with('C'))
        .map(|(u, (n, _))| (u.clone(), *n))
        .collect();
    assert!(!want_c.is_empty());
    assert_eq!(got, want_c);
    cancel(&app, &uri).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heap_state_is_looked_up_on_the_ordered_path_only() {
    let (_host, app) = app(Access::open());
    let uri = running(&app, &job("query-heap", "[accumulators]", "")).await;
    let want = expected();
    let before = control_messages(&app, &uri).await;
    for (user, counts) in want.iter().take(5) {
        let a = call(
            &app,
            "GET",
            &format!("{uri}/state/per-user/accumulators?key={user}"),
            Body::empty(),
        )
        .await;
        assert_eq!(a.status, StatusCode::OK, "{}", a.text);
        assert_eq!(value_of(&a.json()), *counts);
    }
    assert_eq!(control_messages(&app, &uri).await - before, 5);
    let direct = call(
        &app,
        "GET",
        &lookup_uri(&uri, "Gus", "direct"),
        Body::empty(),
    )
    .await;
    assert_eq!(direct.status, StatusCode::BAD_REQUEST, "{}", direct.text);
    assert!(direct.json()["error"].as_str().unwrap().contains("heap"));
    cancel(&app, &uri).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_jobs_operators_states_and_keys_are_404_with_what_exists() {
    let (_host, app) = app(Access::open());
    let uri = running(&app, &job("query-404", "[accumulators]", "")).await;
    for (path, says) in [
        (
            "/api/v1/jobs/999/state/per-user/accumulators?key=Gus".to_string(),
            "no job `999`",
        ),
        (
            format!("{uri}/state/per-users/accumulators?key=Gus"),
            "queryable operators are: per-user",
        ),
        (
            format!("{uri}/state/per-user/windows?key=Gus"),
            "queryable states are: accumulators",
        ),
        (
            format!("{uri}/state/per-user/accumulators?key=Nobody-Here"),
            "holds nothing for key `Nobody-Here`",
        ),
    ] {
        let a = call(&app, "GET", &path, Body::empty()).await;
        assert_eq!(a.status, StatusCode::NOT_FOUND, "{path}: {}", a.text);
        let message = a.json()["error"].as_str().unwrap().to_string();
        assert!(message.contains(says), "{path}: {message}");
    }
    for path in [
        format!("{uri}/state/per-user/accumulators"),
        format!("{uri}/state/per-user/accumulators?key=a&prefix=b"),
        format!("{uri}/state/per-user/accumulators?key=a&path=sideways"),
    ] {
        let a = call(&app, "GET", &path, Body::empty()).await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST, "{path}: {}", a.text);
    }
    cancel(&app, &uri).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_lookups_from_one_client_gets_429_with_retry_after() {
    let (_host, app) = app_with(
        Access::open(),
        HostConfig {
            lookup_rate: 0.5,
            lookup_burst: 3,
            ..HostConfig::default()
        },
    );
    let uri = "/api/v1/jobs/1/state/per-user/accumulators?key=Gus";
    for _ in 0..3 {
        let a = call_with(&app, "GET", uri, Body::empty(), Some("Bearer one")).await;
        assert_eq!(
            a.status,
            StatusCode::NOT_FOUND,
            "within the burst: {}",
            a.text
        );
    }
    let request = axum::http::Request::builder()
        .uri(uri)
        .header("authorization", "Bearer one")
        .body(Body::empty())
        .unwrap();
    let response = tower::ServiceExt::oneshot(app.clone(), request)
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry: u64 = response.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(retry, 2, "one token every 2 s");
    let body = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    assert!(String::from_utf8_lossy(&body).contains("too many state lookups"));
    // Another client has its own budget.
    let other = call_with(&app, "GET", uri, Body::empty(), Some("Bearer two")).await;
    assert_eq!(other.status, StatusCode::NOT_FOUND);
}

#[test]
fn a_queryable_declaration_naming_no_state_of_the_operator_is_refused_with_its_states() {
    let text = job("bad-query", "[acumulators]", ROCKSDB);
    let loaded = weir_runtime::spec::load::parse_str("bad.yaml", &text, &[]).unwrap();
    let Err(e) = weir_runtime::plan::build(&loaded) else {
        panic!("the job was accepted");
    };
    let message = e.to_string();
    assert!(
        message.contains("transforms.per-user.queryable[0]")
            && message.contains("`acumulators` is not a queryable state of this aggregate")
            && message.contains("`accumulators`"),
        "{message}"
    );
}

/// `weir state` (the binary) against a real server on a socket, with a real job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weir_state_prints_a_keys_entries_from_a_running_job() {
    let server = weir_http_ui::Server::bind(weir_http_ui::ServeConfig {
        listen: ([127, 0, 0, 1], 0).into(),
        ..weir_http_ui::ServeConfig::default()
    })
    .await
    .unwrap();
    let (host, addr) = (server.host.clone(), server.addr);
    let background = server.spawn();
    let text = job(
        "query-cli",
        "{accumulators: {max-staleness: 20ms}}",
        ROCKSDB,
    );
    let job = host.submit("job.yaml", &text, &[]).await.unwrap();
    let want = expected();
    let (user, counts) = want.iter().find(|(u, _)| u.as_str() == "Gus").unwrap();
    let mut last = String::new();
    for _ in 0..200 {
        let (id, user_arg, server) = (job.id.to_string(), user.clone(), format!("http://{addr}"));
        let out = tokio::task::spawn_blocking(move || {
            std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
                .args(["state", &id, "per-user", "accumulators"])
                .args(["--key", &user_arg, "--server", &server])
                .env_remove("WEIR_TOKEN")
                .output()
        })
        .await
        .unwrap()
        .unwrap();
        last = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        if out.status.success() {
            let entry: Value = serde_json::from_slice(&out.stdout).unwrap();
            if (
                entry["value"]["views"].as_i64(),
                entry["value"]["total_ms"].as_i64(),
            ) == (Some(counts.0), Some(counts.1))
            {
                assert!(last.contains("direct path"), "{last}");
                background.stop().await.unwrap();
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("weir state never printed {user}'s counts {counts:?}: {last}");
}
