//! `weir serve`'s API against the router in-process (`oneshot`, no socket): submitting,
//! listing, inspecting, cancelling, savepoints and restarts of small Nexmark jobs; and what it
//! refuses: bad job files (400 with line, column and key), unknown jobs (404), oversize bodies
//! (413), missing or wrong tokens off loopback (401), paths outside the working directory.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use serde_json::Value;
use tower::ServiceExt;
use weir_http_ui::{Access, Host, HostConfig};

/// A host on the test's runtime, with fast sampling, and its router.
pub(crate) fn app(access: Access) -> (Arc<Host>, Router) {
    app_with(
        access,
        HostConfig {
            sample_every: Duration::from_millis(50),
            ..HostConfig::default()
        },
    )
}

/// Like [`app`], with a host configured by `config`.
pub(crate) fn app_with(access: Access, config: HostConfig) -> (Arc<Host>, Router) {
    let scheduler =
        Arc::new(weir_scheduler::Scheduler::new(tokio::runtime::Handle::current()).unwrap());
    let host = Host::new(scheduler, config);
    let router = weir_http_ui::router(host.clone(), access);
    (host, router)
}

pub(crate) struct Answer {
    pub(crate) status: StatusCode,
    pub(crate) content_type: String,
    pub(crate) text: String,
}

impl Answer {
    pub(crate) fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text))
    }
}

pub(crate) async fn call(app: &Router, method: &str, uri: &str, body: impl Into<Body>) -> Answer {
    call_with(app, method, uri, body, None).await
}

pub(crate) async fn call_with(
    app: &Router,
    method: &str,
    uri: &str,
    body: impl Into<Body>,
    authorization: Option<&str>,
) -> Answer {
    let mut request = Request::builder().method(method).uri(uri);
    if let Some(a) = authorization {
        request = request.header(header::AUTHORIZATION, a);
    }
    let response = app
        .clone()
        .oneshot(request.body(body.into()).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let content_type = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    Answer {
        status,
        content_type,
        text: String::from_utf8_lossy(&bytes).into_owned(),
    }
}

async fn assert_no_jobs(app: &Router) {
    let list = call(app, "GET", "/api/v1/jobs", Body::empty()).await.json();
    assert_eq!(list["jobs"].as_array().unwrap().len(), 0, "{list}");
}

/// An unbounded Nexmark q1 at a modest rate: it runs until cancelled.
pub(crate) fn q1(name: &str, extra: &str) -> String {
    format!(
        "name: {name}\n\
         parallelism: 1\n\
         sources:\n  nexmark: {{kind: nexmark, rate: 20000}}\n\
         transforms:\n  q1:\n    kind: map\n    from: nexmark.bid\n    columns: {{auction: auction, price: price * 0.908}}\n\
         sinks:\n  out: {{kind: blackhole, from: q1}}\n{extra}"
    )
}

/// Polls `uri` until `done` holds for its JSON (a liveness wait, bounded at 30 s: no speed is
/// asserted).
pub(crate) async fn wait_for(app: &Router, uri: &str, done: impl Fn(&Value) -> bool) -> Value {
    let mut last = Value::Null;
    for _ in 0..600 {
        let a = call(app, "GET", uri, Body::empty()).await;
        assert_eq!(a.status, StatusCode::OK, "{uri}: {}", a.text);
        let v = a.json();
        if done(&v) {
            return v;
        }
        last = v;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{uri} never reached the expected state; it is: {last}");
}

/// A checkpoint directory relative to the working directory (a server accepts no other),
/// removed when dropped.
pub(crate) struct RelativeDir(pub(crate) String);

impl RelativeDir {
    pub(crate) fn new(test: &str) -> Self {
        let dir = format!("out/serve-tests/{test}-{}", std::process::id());
        let _ = std::fs::remove_dir_all(&dir);
        RelativeDir(dir)
    }
}

impl Drop for RelativeDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_is_submitted_listed_inspected_and_cancelled() {
    let (host, app) = app(Access::open());
    let submitted = call(&app, "POST", "/api/v1/jobs", q1("serve-flow", "")).await;
    assert_eq!(submitted.status, StatusCode::CREATED, "{}", submitted.text);
    let job = submitted.json();
    let id = job["id"].as_str().unwrap().to_owned();
    assert_eq!(job["name"], "serve-flow");
    assert_eq!(job["state"], "running");

    let list = call(&app, "GET", "/api/v1/jobs", Body::empty())
        .await
        .json();
    let jobs = list["jobs"].as_array().unwrap();
    assert!(jobs.iter().any(|j| j["id"] == id.as_str()), "{list}");

    // Records flow: the sink's count and its rate rise above zero.
    let uri = format!("/api/v1/jobs/{id}");
    let detail = wait_for(&app, &uri, |v| {
        v["nodes"][2]["records-in"].as_u64().unwrap_or(0) > 0
            && v["nodes"][2]["rate-in"].as_f64().unwrap_or(0.0) > 0.0
    })
    .await;
    let names: Vec<&str> = detail["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["nexmark", "q1", "out"]);
    assert_eq!(detail["nodes"][0]["role"], "source");
    assert_eq!(detail["nodes"][2]["role"], "sink");
    let edges = detail["edges"].as_array().unwrap();
    assert_eq!(edges.len(), 2, "{detail}");
    assert_eq!(edges[0]["from"], 0);
    assert_eq!(edges[0]["to"], 1);
    assert_eq!(edges[0]["port"], "bid");
    assert_eq!(edges[1]["partitioning"], "forward");
    assert!(
        !detail["nodes"][2]["history"]["rate-in"]
            .as_array()
            .unwrap()
            .is_empty()
    );

    let spec = call(&app, "GET", &format!("{uri}/spec"), Body::empty()).await;
    assert_eq!(spec.text, q1("serve-flow", ""));

    // A job that does not checkpoint takes no savepoint.
    let sp = call(&app, "POST", &format!("{uri}/savepoints"), Body::empty()).await;
    assert_eq!(sp.status, StatusCode::CONFLICT, "{}", sp.text);

    let cancelled = call(&app, "POST", &format!("{uri}/cancel"), Body::empty()).await;
    assert_eq!(cancelled.status, StatusCode::ACCEPTED, "{}", cancelled.text);
    let ended = wait_for(&app, &uri, |v| v["state"] == "cancelled").await;
    assert!(ended["events"].as_u64().unwrap() > 0);
    assert!(ended["ended-at"].as_i64().is_some());
    let again = call(&app, "POST", &format!("{uri}/cancel"), Body::empty()).await;
    assert_eq!(again.status, StatusCode::CONFLICT);

    let metrics = call(&app, "GET", "/metrics", Body::empty()).await;
    assert_eq!(metrics.status, StatusCode::OK);
    assert!(metrics.content_type.starts_with("text/plain"));
    assert!(
        metrics.text.contains(&format!(
            "weir_node_records_in_total{{id=\"{id}\",job=\"serve-flow\",node=\"out\"}}"
        )),
        "{}",
        metrics.text
    );
    assert!(metrics.text.contains("weir_jobs{state=\"cancelled\"} 1"));
    host.shutdown(Duration::from_secs(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_savepoint_is_polled_to_completion_and_a_stopped_job_restarts_from_it() {
    let dir = RelativeDir::new("savepoint");
    let (host, app) = app(Access::open());
    let extra = format!("checkpoint: {{interval: 100ms, storage: {}}}\n", dir.0);
    let submitted = call(&app, "POST", "/api/v1/jobs", q1("serve-savepoint", &extra)).await;
    assert_eq!(submitted.status, StatusCode::CREATED, "{}", submitted.text);
    let id = submitted.json()["id"].as_str().unwrap().to_owned();
    let uri = format!("/api/v1/jobs/{id}");

    // A second running copy of a checkpointed job would share its checkpoints.
    let twin = call(&app, "POST", "/api/v1/jobs", q1("serve-savepoint", &extra)).await;
    assert_eq!(twin.status, StatusCode::CONFLICT, "{}", twin.text);

    let checkpoints = wait_for(&app, &format!("{uri}/checkpoints"), |v| {
        v["completed"].as_u64().unwrap_or(0) >= 2
    })
    .await;
    assert_eq!(checkpoints["enabled"], true);
    assert_eq!(checkpoints["interval-ms"], 100);
    let first = &checkpoints["history"][0];
    assert_eq!(first["status"], "completed", "{checkpoints}");
    assert!(first["bytes"].as_u64().is_some());
    assert!(checkpoints["scheduler"]["fired"].as_u64().unwrap() >= 2);
    let cid = first["id"].as_u64().unwrap();
    let one = call(
        &app,
        "GET",
        &format!("{uri}/checkpoints/{cid}"),
        Body::empty(),
    )
    .await;
    assert_eq!(one.status, StatusCode::OK, "{}", one.text);
    assert_eq!(one.json()["metadata"]["job"], "serve-savepoint");

    let trigger = call(
        &app,
        "POST",
        &format!("{uri}/savepoints"),
        r#"{"stop": false}"#,
    )
    .await;
    assert_eq!(trigger.status, StatusCode::ACCEPTED, "{}", trigger.text);
    let request = trigger.json()["id"].as_u64().unwrap();
    let done = wait_for(&app, &format!("{uri}/savepoints/{request}"), |v| {
        v["status"] != "in-progress"
    })
    .await;
    assert_eq!(done["status"], "completed", "{done}");
    let location = done["location"].as_str().unwrap();
    assert!(std::path::Path::new(location).join("_metadata").is_file());

    // Stop with a savepoint: the job ends as `stopped`, and restarts from it.
    let stop = call(&app, "POST", &format!("{uri}/stop"), Body::empty()).await;
    assert_eq!(stop.status, StatusCode::ACCEPTED, "{}", stop.text);
    let stop_request = stop.json()["id"].as_u64().unwrap();
    // While it stops, nothing else may stop it or take a savepoint of it: schemathesis found
    // a rescale racing a stop answered 503 "it goes on at its parallelism", and that failed
    // savepoint marked the stopping job running again.
    for (what, body) in [
        ("stop", ""),
        ("rescale", r#"{"parallelism": 1}"#),
        ("savepoints", "{}"),
    ] {
        let again = call(&app, "POST", &format!("{uri}/{what}"), body).await;
        assert_eq!(again.status, StatusCode::CONFLICT, "{what}: {}", again.text);
    }
    let savepoint = wait_for(&app, &format!("{uri}/savepoints/{stop_request}"), |v| {
        v["status"] != "in-progress"
    })
    .await;
    assert_eq!(savepoint["status"], "completed", "{savepoint}");
    let stopped = wait_for(&app, &uri, |v| v["state"] == "stopped").await;
    let sp = savepoint["snapshot-id"].as_u64().unwrap();
    assert_eq!(stopped["snapshot"], savepoint["location"]);

    let bad = call(
        &app,
        "POST",
        &format!("{uri}/restart"),
        r#"{"from": "../../etc"}"#,
    )
    .await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST, "{}", bad.text);
    let missing = call(
        &app,
        "POST",
        &format!("{uri}/restart"),
        r#"{"from": "sp-999999"}"#,
    )
    .await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND, "{}", missing.text);
    let body = format!(r#"{{"from": "sp-{sp}"}}"#);
    let restarted = call(&app, "POST", &format!("{uri}/restart"), body).await;
    assert_eq!(restarted.status, StatusCode::ACCEPTED, "{}", restarted.text);
    let running = restarted.json();
    assert_eq!(running["state"], "running");
    assert_eq!(running["run"], 2);
    let detail = wait_for(&app, &uri, |v| v["events"].as_u64().unwrap_or(0) > 0).await;
    assert_eq!(detail["restored-from"], format!("sp-{sp}"));
    // The restore's reads: one savepoint's operator state lies contiguous in its merged
    // file(s), so no seek is needed and one request per file does it.
    let restore = &detail["restore"];
    assert!(
        restore["location"]
            .as_str()
            .and_then(|l| l.rsplit_once("/sp-"))
            .and_then(|(_, n)| n.parse::<u64>().ok())
            == Some(sp),
        "{restore}"
    );
    let ranges = restore["ranges"].as_u64().unwrap();
    assert!(ranges >= 1, "the source's position was read: {restore}");
    assert_eq!(restore["seeks-performed"], 0, "{restore}");
    assert_eq!(restore["seeks-skipped"].as_u64(), Some(ranges), "{restore}");
    assert_eq!(restore["requests"], restore["files"], "{restore}");
    let metrics = call(&app, "GET", "/metrics", Body::empty()).await;
    let id = uri.rsplit('/').next().unwrap();
    assert!(
        metrics.text.contains(&format!(
            "weir_restore_requests{{id=\"{id}\",job=\"serve-savepoint\"}} {}",
            restore["requests"]
        )),
        "{}",
        metrics.text
    );

    host.shutdown(Duration::from_secs(10)).await;
    drop(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_error_fails_the_job_at_once_and_is_listed_with_its_kind() {
    let dir = RelativeDir::new("exceptions");
    std::fs::create_dir_all(&dir.0).unwrap();
    let input = format!("{}/clicks.jsonl", dir.0);
    std::fs::write(&input, "{\"user\": \"a\"}\nnot json\n").unwrap();
    let (host, app) = app(Access::open());
    // A checkpointed job with a restart budget it does not use: retrying cannot mend a
    // malformed line.
    let job = format!(
        "name: serve-failing\n\
         sources:\n  clicks: {{kind: jsonl, path: {input}, schema: {{user: string}}}}\n\
         sinks:\n  out: {{kind: blackhole, from: clicks}}\n\
         checkpoint: {{interval: 100ms, storage: {}/ck}}\n\
         restart: {{max-attempts: 3, delay: 10ms}}\n",
        dir.0
    );
    let submitted = call(&app, "POST", "/api/v1/jobs", job).await;
    assert_eq!(submitted.status, StatusCode::CREATED, "{}", submitted.text);
    let id = submitted.json()["id"].as_str().unwrap().to_owned();
    let failed = wait_for(&app, &format!("/api/v1/jobs/{id}"), |v| {
        v["state"] == "failed"
    })
    .await;
    let error = failed["error"].as_str().unwrap().to_owned();
    assert!(error.contains("line 2"), "{error}");
    let list = call(
        &app,
        "GET",
        &format!("/api/v1/jobs/{id}/exceptions"),
        Body::empty(),
    )
    .await
    .json();
    let exceptions = list["exceptions"].as_array().unwrap();
    assert_eq!(exceptions.len(), 1, "{list}");
    assert_eq!(exceptions[0]["kind"], "failure");
    assert_eq!(exceptions[0]["category"], "data");
    assert_eq!(exceptions[0]["message"], error.as_str());
    assert_eq!(failed["restarts"], 0);
    host.shutdown(Duration::from_secs(10)).await;
    drop(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_failures_are_restarted_and_listed_as_exceptions_with_their_cause() {
    let dir = RelativeDir::new("external");
    std::fs::create_dir_all(&dir.0).unwrap();
    let out = format!("{}/out", dir.0);
    let (host, app) = app(Access::open());
    let job = format!(
        "name: serve-external\n\
         sources:\n  gen: {{kind: nexmark, rate: 20000}}\n\
         sinks:\n  out: {{kind: file, from: gen.bid, path: {out}}}\n\
         checkpoint: {{interval: 100ms, storage: {}/ck}}\n\
         restart: {{strategy: fixed-delay, max-attempts: 1, delay: 10ms}}\n",
        dir.0
    );
    let submitted = call(&app, "POST", "/api/v1/jobs", job).await;
    assert_eq!(submitted.status, StatusCode::CREATED, "{}", submitted.text);
    let id = submitted.json()["id"].as_str().unwrap().to_owned();
    wait_for(&app, &format!("/api/v1/jobs/{id}/checkpoints"), |v| {
        v["completed"].as_u64().unwrap_or(0) >= 2
    })
    .await;
    // The sink's directory becomes a file: committing the next checkpoint's output fails (an
    // I/O error, which may pass), the job restarts, and its new attempt cannot create the
    // directory either, which spends its budget of one restart.
    std::fs::remove_dir_all(&out).unwrap();
    std::fs::write(&out, "not a directory").unwrap();
    let failed = wait_for(&app, &format!("/api/v1/jobs/{id}"), |v| {
        v["state"] == "failed"
    })
    .await;
    let error = failed["error"].as_str().unwrap().to_owned();
    let list = call(
        &app,
        "GET",
        &format!("/api/v1/jobs/{id}/exceptions"),
        Body::empty(),
    )
    .await
    .json();
    let exceptions = list["exceptions"].as_array().unwrap();
    // Newest first: the failure that ended the job, then the one it restarted after.
    assert_eq!(exceptions.len(), 2, "{list}");
    assert_eq!(exceptions[0]["kind"], "failure");
    assert_eq!(exceptions[0]["message"], error.as_str());
    assert_eq!(exceptions[0]["category"], "external");
    assert_eq!(exceptions[1]["kind"], "restart");
    assert_eq!(exceptions[1]["category"], "external");
    assert!(
        exceptions[1]["message"]
            .as_str()
            .unwrap()
            .ends_with("(restart 1)"),
        "{list}"
    );
    assert_eq!(failed["restarts"], 1);
    host.shutdown(Duration::from_secs(10)).await;
    drop(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_job_file_is_refused_with_line_column_and_key() {
    let (host, app) = app(Access::open());
    let bad = "name: bad\n\
               sources:\n  gen: {kind: nexmark, events: lots}\n\
               transforms:\n  f: {kind: filter, from: gen.bid, wher: price > 1}\n\
               sinks:\n  out: {kind: blackhole, from: f}\n";
    for uri in ["/api/v1/jobs", "/api/v1/jobs/validate"] {
        let a = call(&app, "POST", uri, bad).await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST, "{}", a.text);
        let v = a.json();
        let problems = v["problems"].as_array().unwrap();
        let events = problems
            .iter()
            .find(|p| p["key"] == "sources.gen.events")
            .unwrap_or_else(|| panic!("{v}"));
        assert_eq!(events["line"], 3);
        assert_eq!(events["column"], 32);
        let typo = problems
            .iter()
            .find(|p| p["key"] == "transforms.f.wher")
            .unwrap_or_else(|| panic!("{v}"));
        assert_eq!(typo["line"], 5);
        assert!(
            typo["message"].as_str().unwrap().contains("where"),
            "{typo}"
        );
    }

    let syntax = call(&app, "POST", "/api/v1/jobs", "name: x\nsources: {gen: [\n").await;
    assert_eq!(syntax.status, StatusCode::BAD_REQUEST, "{}", syntax.text);
    assert!(syntax.json()["problems"][0]["line"].as_u64().is_some());

    let valid = call(&app, "POST", "/api/v1/jobs/validate", q1("checked", "")).await;
    assert_eq!(valid.status, StatusCode::OK, "{}", valid.text);
    assert_eq!(valid.json()["nodes"], 3);

    // Nothing was started.
    assert_no_jobs(&app).await;
    host.shutdown(Duration::from_secs(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paths_outside_the_working_directory_and_unsafe_names_are_refused() {
    let (host, app) = app(Access::open());
    let job = "name: escape\n\
               sources:\n  gen: {kind: nexmark, events: 10}\n\
               sinks:\n  out: {kind: file, from: gen.bid, path: /tmp/elsewhere}\n\
               checkpoint: {interval: 1s, storage: 'file://../up'}\n";
    let a = call(&app, "POST", "/api/v1/jobs", job).await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST, "{}", a.text);
    let v = a.json();
    let keys: Vec<&str> = v["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, ["sinks.out.path", "checkpoint.storage"], "{v}");
    assert_eq!(v["problems"][0]["line"], 5);

    let named = q1("../../escape", "");
    let a = call(&app, "POST", "/api/v1/jobs", named).await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST, "{}", a.text);
    assert_eq!(a.json()["problems"][0]["key"], "name");
    host.shutdown(Duration::from_secs(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_jobs_and_requests_are_404() {
    let (host, app) = app(Access::open());
    for (method, uri) in [
        ("GET", "/api/v1/jobs/999"),
        ("GET", "/api/v1/jobs/not-a-number"),
        ("POST", "/api/v1/jobs/999/cancel"),
        ("POST", "/api/v1/jobs/999/savepoints"),
        ("GET", "/api/v1/jobs/999/savepoints/1"),
        ("GET", "/api/v1/jobs/999/checkpoints"),
        ("GET", "/api/v1/jobs/999/exceptions"),
        ("GET", "/api/v1/nothing-here"),
    ] {
        let a = call(&app, method, uri, Body::empty()).await;
        assert_eq!(
            a.status,
            StatusCode::NOT_FOUND,
            "{method} {uri}: {}",
            a.text
        );
        assert!(a.json()["error"].is_string());
    }
    let submitted = call(&app, "POST", "/api/v1/jobs", q1("serve-404", "")).await;
    let id = submitted.json()["id"].as_str().unwrap().to_owned();
    for uri in [
        format!("/api/v1/jobs/{id}/savepoints/7"),
        format!("/api/v1/jobs/{id}/checkpoints/7"),
    ] {
        let a = call(&app, "GET", &uri, Body::empty()).await;
        assert_eq!(a.status, StatusCode::NOT_FOUND, "{uri}: {}", a.text);
    }
    host.shutdown(Duration::from_secs(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversize_body_is_413() {
    let (host, app) = app(Access::open());
    let mut big = q1("big", "");
    big.push_str(&"#".repeat(weir_http_ui::api::MAX_BODY));
    for uri in ["/api/v1/jobs", "/api/v1/jobs/validate"] {
        let a = call(&app, "POST", uri, big.clone()).await;
        assert_eq!(a.status, StatusCode::PAYLOAD_TOO_LARGE, "{uri}");
    }
    assert_no_jobs(&app).await;
    host.shutdown(Duration::from_secs(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn off_loopback_every_api_route_needs_the_token() {
    let public: SocketAddr = ([0, 0, 0, 0], 8080).into();
    assert!(Access::for_bind(public, None).is_err());
    let (host, app) = app(Access::for_bind(public, Some("s3cret")).unwrap());
    for (method, uri) in [
        ("GET", "/api/v1/jobs"),
        ("POST", "/api/v1/jobs"),
        ("GET", "/api/v1/jobs/1"),
        ("POST", "/api/v1/jobs/1/cancel"),
        ("GET", "/api/v1/scheduler"),
        ("GET", "/metrics"),
    ] {
        for auth in [
            None,
            Some("Bearer wrong"),
            Some("Bearer s3cre"),
            Some("s3cret"),
        ] {
            let a = call_with(&app, method, uri, q1("nope", ""), auth).await;
            assert_eq!(
                a.status,
                StatusCode::UNAUTHORIZED,
                "{method} {uri} {auth:?}"
            );
        }
    }
    let ok = call_with(
        &app,
        "GET",
        "/api/v1/jobs",
        Body::empty(),
        Some("Bearer s3cret"),
    )
    .await;
    assert_eq!(ok.status, StatusCode::OK);
    let submitted = call_with(
        &app,
        "POST",
        "/api/v1/jobs",
        q1("with-token", ""),
        Some("Bearer s3cret"),
    )
    .await;
    assert_eq!(submitted.status, StatusCode::CREATED, "{}", submitted.text);
    // The document and the dashboard's files hold no data: no token needed.
    let doc = call(&app, "GET", "/api/v1/openapi.json", Body::empty()).await;
    assert_eq!(doc.status, StatusCode::OK);
    let viewer = call(&app, "GET", "/api/v1/docs", Body::empty()).await;
    assert_eq!(viewer.status, StatusCode::OK);
    let page = call(&app, "GET", "/", Body::empty()).await;
    assert_eq!(page.status, StatusCode::OK);
    host.shutdown(Duration::from_secs(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openapi_document_lists_every_route_and_the_dashboard_is_embedded() {
    let (host, app) = app(Access::open());
    let doc = call(&app, "GET", "/api/v1/openapi.json", Body::empty())
        .await
        .json();
    assert_eq!(doc["openapi"], "3.1.0");
    // Exactly the routes of `router_with` but the dashboard's files, each with its methods.
    let mut documented: Vec<String> = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            documented.push(format!("{} {path}", method.to_uppercase()));
        }
    }
    documented.sort();
    let mut expected = crate::serve_openapi::ROUTES
        .iter()
        .map(|(method, path)| format!("{method} {path}"))
        .collect::<Vec<_>>();
    expected.sort();
    assert_eq!(documented, expected);
    let paths = doc["paths"].as_object().unwrap();
    // Every documented GET without parameters answers (the fleet's only in a fleet).
    for (path, ops) in paths {
        if ops.get("get").is_some() && !path.contains('{') && path != "/api/v1/fleet" {
            let a = call(&app, "GET", path, Body::empty()).await;
            assert_eq!(a.status, StatusCode::OK, "{path}");
        }
    }
    for (file, kind) in [
        ("/", "text/html"),
        ("/index.html", "text/html"),
        ("/app.js", "text/javascript"),
        ("/style.css", "text/css"),
        ("/api/v1/docs", "text/html"),
        ("/docs.js", "text/javascript"),
        ("/swagger-ui-bundle.js", "text/javascript"),
        ("/swagger-ui.css", "text/css"),
    ] {
        let a = call(&app, "GET", file, Body::empty()).await;
        assert_eq!(a.status, StatusCode::OK, "{file}");
        assert!(
            a.content_type.starts_with(kind),
            "{file}: {}",
            a.content_type
        );
    }
    // The viewer loads only from this server: its page and script name no other.
    for file in ["/api/v1/docs", "/docs.js"] {
        let a = call(&app, "GET", file, Body::empty()).await;
        assert!(
            !a.text.contains("http:") && !a.text.contains("https:"),
            "{file} may load from elsewhere: {}",
            a.text
        );
    }
    for file in ["/secret.txt", "/..%2FCargo.toml", "/%2E%2E/Cargo.toml"] {
        let a = call(&app, "GET", file, Body::empty()).await;
        assert_eq!(a.status, StatusCode::NOT_FOUND, "{file}");
    }
    host.shutdown(Duration::from_secs(10)).await;
}

/// Many HTTP clients on loopback (bounded: 8 threads × 120 requests, 60 s at most) while
/// four bounded jobs run: every request is answered, and every job's output equals that of
/// the same job run alone.
#[test]
fn concurrent_clients_get_answers_and_leave_job_results_unchanged() {
    const EVENTS: u64 = 200_000;
    let job = |name: &str| {
        format!(
            "name: {name}\n\
             sources:\n  nexmark: {{kind: nexmark, events: {EVENTS}, rate: 100000}}\n\
             transforms:\n  cheap: {{kind: filter, from: nexmark.bid, where: \"price < 10000\"}}\n\
             sinks:\n  out: {{kind: blackhole, from: cheap}}\n"
        )
    };
    let alone = weir_runtime::plan::check_str("alone.yaml", &job("load-alone"), &[]).unwrap();
    let expected = crate::support::run_plan(&alone, false)
        .node("out")
        .unwrap()
        .records_in;
    assert!(expected > 0);

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let server = runtime
        .block_on(weir_http_ui::Server::bind(weir_http_ui::ServeConfig {
            listen: ([127, 0, 0, 1], 0).into(),
            host: HostConfig {
                sample_every: Duration::from_millis(100),
                ..HostConfig::default()
            },
            ..weir_http_ui::ServeConfig::default()
        }))
        .unwrap();
    let base = format!("http://{}", server.addr);
    let background = {
        let _entered = runtime.enter();
        server.spawn()
    };

    let agent = ureq::Agent::new_with_config(
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(30)))
            .build(),
    );
    let mut ids = Vec::new();
    for i in 0..4 {
        let mut r = agent
            .post(&format!("{base}/api/v1/jobs"))
            .send(job(&format!("load-{i}")))
            .unwrap();
        assert_eq!(r.status().as_u16(), 201);
        let v: Value = serde_json::from_str(&r.body_mut().read_to_string().unwrap()).unwrap();
        ids.push(v["id"].as_str().unwrap().to_owned());
    }

    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let clients: Vec<_> = (0..8)
        .map(|c| {
            let (agent, base, ids) = (agent.clone(), base.clone(), ids.clone());
            std::thread::spawn(move || {
                let mut failures = Vec::new();
                for n in 0..120 {
                    if std::time::Instant::now() > deadline {
                        break;
                    }
                    let id = &ids[(c + n) % ids.len()];
                    let uri = match n % 4 {
                        0 => format!("{base}/api/v1/jobs"),
                        1 => format!("{base}/api/v1/jobs/{id}"),
                        2 => format!("{base}/metrics"),
                        _ => format!("{base}/api/v1/jobs/{id}/checkpoints"),
                    };
                    match agent.get(&uri).call() {
                        Ok(mut r) if r.status().as_u16() == 200 => {
                            let _ = r.body_mut().read_to_string();
                        }
                        Ok(r) => failures.push(format!("{uri}: {}", r.status())),
                        Err(e) => failures.push(format!("{uri}: {e}")),
                    }
                }
                failures
            })
        })
        .collect();
    let failures: Vec<String> = clients
        .into_iter()
        .flat_map(|c| c.join().unwrap())
        .collect();
    assert!(failures.is_empty(), "{failures:?}");

    for id in &ids {
        let finished = (0..600).find_map(|_| {
            let mut r = agent.get(&format!("{base}/api/v1/jobs/{id}")).call().ok()?;
            let v: Value = serde_json::from_str(&r.body_mut().read_to_string().ok()?).ok()?;
            if v["state"] == "finished" {
                return Some(v);
            }
            std::thread::sleep(Duration::from_millis(100));
            None
        });
        let v = finished.unwrap_or_else(|| panic!("job {id} did not finish"));
        assert_eq!(v["nodes"][2]["records-in"], expected, "job {id}");
        assert_eq!(v["events"], EVENTS);
    }
    runtime.block_on(background.stop()).unwrap();
}

/// `/metrics` read by a real Prometheus text-format parser (openmetrics-parser's, a pest
/// grammar of the exposition format): every family parses with its type and help, and the
/// scheduler's delay histogram has cumulative buckets ending in `+Inf`, a `_sum` and a `_count`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_parse_as_the_prometheus_text_format() {
    use openmetrics_parser::{PrometheusType, PrometheusValue};
    let dir = RelativeDir::new("metrics-parse");
    let (host, app) = app(Access::open());
    let job = format!(
        "name: scraped\n\
         sources:\n  nexmark: {{kind: nexmark, rate: 20000}}\n\
         transforms:\n  by-auction: {{kind: key-by, from: nexmark.bid, keys: [auction]}}\n  \
         counts: {{kind: aggregate, from: by-auction, aggregates: {{bids: count(*)}}}}\n\
         sinks:\n  out: {{kind: blackhole, from: counts}}\n\
         checkpoint: {{interval: 100ms, storage: {}}}\n",
        dir.0
    );
    let submitted = call(&app, "POST", "/api/v1/jobs", job).await;
    assert_eq!(submitted.status, StatusCode::CREATED, "{}", submitted.text);
    let id = submitted.json()["id"].as_str().unwrap().to_owned();
    wait_for(&app, &format!("/api/v1/jobs/{id}/checkpoints"), |v| {
        v["completed"].as_u64().is_some_and(|c| c >= 3)
    })
    .await;
    let text = call(&app, "GET", "/metrics", Body::empty()).await.text;
    let exposition = openmetrics_parser::prometheus::parse_prometheus(&text)
        .unwrap_or_else(|e| panic!("{e:?} in\n{text}"));
    for (name, family) in &exposition.families {
        assert!(!family.help.is_empty(), "{name} has no HELP");
    }
    for name in [
        "weir_jobs",
        "weir_job_events_total",
        "weir_scheduler_delay_seconds",
    ] {
        assert!(
            exposition.families.contains_key(name),
            "no family {name}: {:?}",
            exposition.families.keys().collect::<Vec<_>>()
        );
    }
    let delay = &exposition.families["weir_scheduler_delay_seconds"];
    assert_eq!(delay.family_type, PrometheusType::Histogram);
    let histogram = delay
        .iter_samples()
        .find_map(|s| match &s.value {
            PrometheusValue::Histogram(v) => Some(v.clone()),
            _ => None,
        })
        .expect("a histogram sample");
    let count = histogram.count.expect("a _count");
    let sum = histogram.sum.expect("a _sum").as_f64();
    assert!(count >= 3, "{histogram:?}");
    assert!(sum > 0.0, "{histogram:?}");
    // Cumulative buckets: never decreasing, the last (`+Inf`) holding every delay.
    let counts: Vec<f64> = histogram.buckets.iter().map(|b| b.count.as_f64()).collect();
    assert!(counts.windows(2).all(|w| w[0] <= w[1]), "{histogram:?}");
    let last = histogram.buckets.last().expect("buckets");
    assert!(last.upper_bound.is_infinite(), "{histogram:?}");
    assert_eq!(last.count.as_f64(), count as f64, "{histogram:?}");
    // The scheduler's own API, read after the scrape, has fired at least as many ticks.
    let api = call(&app, "GET", "/api/v1/scheduler", Body::empty())
        .await
        .json();
    assert!(api["fired"].as_u64().unwrap() >= count, "{api}");
    host.shutdown(Duration::from_secs(10)).await;
}
