//! The OpenAPI document against the router's real answers: every route is driven (GET and
//! POST, successes and errors) and each answer's body is validated with `jsonschema` against
//! the schema the document gives for its path, method and status, with the document's
//! components as the root so that `$ref`s resolve. The document's objects are closed and list
//! the keys always sent as `required`, so a handler that sends a key its type does not declare,
//! or leaves one out, fails here.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::StatusCode;
use serde_json::{Value, json};
use weir_http_ui::{Access, HostConfig};

use crate::serve::{Answer, RelativeDir, app, app_with, call, call_with, wait_for};

/// Every route of `router_with` the document must list (the dashboard's files aside), as
/// (method, path): kept by hand on purpose, so that a route added to the router without its
/// documentation, or documentation without a route, fails a test.
pub(crate) const ROUTES: &[(&str, &str)] = &[
    ("GET", "/api/v1/jobs"),
    ("POST", "/api/v1/jobs"),
    ("POST", "/api/v1/jobs/validate"),
    ("GET", "/api/v1/jobs/{id}"),
    ("GET", "/api/v1/jobs/{id}/spec"),
    ("POST", "/api/v1/jobs/{id}/cancel"),
    ("POST", "/api/v1/jobs/{id}/stop"),
    ("POST", "/api/v1/jobs/{id}/restart"),
    ("POST", "/api/v1/jobs/{id}/rescale"),
    ("GET", "/api/v1/jobs/{id}/savepoints"),
    ("POST", "/api/v1/jobs/{id}/savepoints"),
    ("GET", "/api/v1/jobs/{id}/savepoints/{request}"),
    ("GET", "/api/v1/jobs/{id}/checkpoints"),
    ("GET", "/api/v1/jobs/{id}/checkpoints/{checkpoint}"),
    ("GET", "/api/v1/jobs/{id}/exceptions"),
    ("GET", "/api/v1/jobs/{id}/logs"),
    ("GET", "/api/v1/jobs/{id}/snapshots"),
    ("GET", "/api/v1/jobs/{id}/nodes/{node}/tail"),
    ("GET", "/api/v1/jobs/{id}/state/{operator}/{state}"),
    ("GET", "/api/v1/scheduler"),
    ("GET", "/api/v1/fleet"),
    ("POST", "/api/v1/fleet/drain"),
    ("GET", "/metrics"),
    ("GET", "/api/v1/openapi.json"),
    ("GET", "/api/v1/docs"),
];

/// The document, and what has been checked against it.
pub(crate) struct Checker {
    doc: Value,
    /// (method, path template) → statuses answered and validated.
    seen: BTreeMap<(String, String), BTreeSet<u16>>,
}

impl Checker {
    async fn new(app: &Router) -> Checker {
        let a = call(app, "GET", "/api/v1/openapi.json", Body::empty()).await;
        assert_eq!(a.status, StatusCode::OK);
        let mut checker = Checker {
            doc: a.json(),
            seen: BTreeMap::new(),
        };
        assert_eq!(checker.doc["openapi"], "3.1.0");
        checker.validate("GET", "/api/v1/openapi.json", &a);
        checker
    }

    /// A checker of answers got elsewhere (another test's server processes) against `doc`.
    pub(crate) fn of(doc: Value) -> Checker {
        Checker {
            doc,
            seen: BTreeMap::new(),
        }
    }

    /// The document's path template that `uri` is an instance of (the one with the most
    /// literal segments: `/jobs/validate` before `/jobs/{id}`).
    pub(crate) fn template_of(&self, uri: &str) -> String {
        let path = uri.split('?').next().unwrap_or(uri);
        let segments: Vec<&str> = path.split('/').collect();
        let mut best: Option<(usize, &String)> = None;
        for template in self.doc["paths"].as_object().unwrap().keys() {
            let parts: Vec<&str> = template.split('/').collect();
            if parts.len() != segments.len() {
                continue;
            }
            let matches = parts
                .iter()
                .zip(&segments)
                .all(|(p, s)| p == s || (p.starts_with('{') && !s.is_empty()));
            if !matches {
                continue;
            }
            let literal = parts.iter().filter(|p| !p.starts_with('{')).count();
            if best.is_none_or(|(n, _)| literal > n) {
                best = Some((literal, template));
            }
        }
        match best {
            Some((_, t)) => t.clone(),
            None => panic!("{uri} is not a documented route"),
        }
    }

    /// Calls the router and validates the answer.
    async fn call(
        &mut self,
        app: &Router,
        method: &str,
        uri: &str,
        body: impl Into<Body>,
        authorization: Option<&str>,
    ) -> Answer {
        let a = call_with(app, method, uri, body, authorization).await;
        let template = self.template_of(uri);
        self.validate(method, &template, &a);
        a
    }

    async fn get(&mut self, app: &Router, uri: &str) -> Answer {
        self.call(app, "GET", uri, Body::empty(), None).await
    }

    async fn post(&mut self, app: &Router, uri: &str, body: impl Into<Body>) -> Answer {
        self.call(app, "POST", uri, body, None).await
    }

    /// Checks `a` against the document's response for `method`, `template` and its status:
    /// the status must be listed, its content type too, and a JSON body must validate.
    pub(crate) fn validate(&mut self, method: &str, template: &str, a: &Answer) {
        let what = format!("{method} {template} → {}", a.status.as_u16());
        let operation = &self.doc["paths"][template][method.to_lowercase()];
        assert!(
            operation.is_object(),
            "{method} {template} is not documented"
        );
        let response = &operation["responses"][a.status.as_str()];
        assert!(
            response.is_object(),
            "{what}: the document does not list this status. Body: {}",
            a.text
        );
        let content = response["content"]
            .as_object()
            .unwrap_or_else(|| panic!("{what}: no content documented"));
        let media = |t: &str| t.split(';').next().unwrap_or("").trim().to_owned();
        let (_, media_type) = content
            .iter()
            .find(|(t, _)| media(t) == media(&a.content_type))
            .unwrap_or_else(|| {
                panic!(
                    "{what}: answered as `{}`, documented as {:?}",
                    a.content_type,
                    content.keys().collect::<Vec<_>>()
                )
            });
        if media(&a.content_type) == "application/json" {
            let errors = self.errors(&media_type["schema"], &a.json());
            assert!(
                errors.is_empty(),
                "{what}: the answer does not match the document:\n{}\n{}",
                errors.join("\n"),
                a.text
            );
        }
        self.seen
            .entry((method.to_owned(), template.to_owned()))
            .or_default()
            .insert(a.status.as_u16());
    }

    /// Why `instance` does not validate against `schema` (empty if it does), `schema` rooted
    /// in the document's components.
    fn errors(&self, schema: &Value, instance: &Value) -> Vec<String> {
        let mut rooted = schema.clone();
        rooted["components"] = self.doc["components"].clone();
        let validator = jsonschema::draft202012::new(&rooted)
            .unwrap_or_else(|e| panic!("the document's schema does not compile: {e}"));
        validator
            .iter_errors(instance)
            .map(|e| format!("  at `{}`: {e}", e.instance_path()))
            .collect()
    }

    /// The schema of a component, as a `$ref` into the document.
    fn component(name: &str) -> Value {
        json!({ "$ref": format!("#/components/schemas/{name}") })
    }
}

/// A job that checkpoints and keeps running, with a queryable aggregate over the 300 clicks of
/// `jobs/examples/clicks.jsonl` (as in `query.rs`), a Nexmark source that a filter empties.
fn job(name: &str, storage: &str) -> String {
    format!(
        "name: {name}\n\
         parallelism: 1\n\
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
         \x20   queryable: [accumulators]\n\
         sinks:\n\
         \x20 out: {{kind: blackhole, from: per-user}}\n\
         checkpoint: {{interval: 100ms, storage: {storage}}}\n"
    )
}

/// Polls a savepoint request until it is no longer in progress; the last answer, validated.
async fn savepoint_done(ck: &mut Checker, app: &Router, uri: &str) -> Value {
    let done = wait_for(app, uri, |v| v["status"] != "in-progress").await;
    let a = ck.get(app, uri).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text);
    assert_eq!(done["status"], "completed", "{done}");
    done
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_answers_as_the_openapi_document_says() {
    let dir = RelativeDir::new("openapi");
    let (host, app) = app(Access::open());
    let mut ck = Checker::new(&app).await;

    // The server's own routes.
    for uri in [
        "/api/v1/scheduler",
        "/metrics",
        "/api/v1/docs",
        "/api/v1/jobs",
    ] {
        let a = ck.get(&app, uri).await;
        assert_eq!(a.status, StatusCode::OK, "{uri}: {}", a.text);
    }
    // A server on its own is in no fleet: its fleet routes say so.
    let a = ck.get(&app, "/api/v1/fleet").await;
    assert_eq!(a.status, StatusCode::NOT_FOUND, "{}", a.text);
    let a = ck.post(&app, "/api/v1/fleet/drain", "").await;
    assert_eq!(a.status, StatusCode::NOT_FOUND, "{}", a.text);

    // Validation and submission, refused and accepted.
    let text = job("openapi", &dir.0);
    let a = ck.post(&app, "/api/v1/jobs/validate", text.clone()).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text);
    let bad = "name: bad\nsources:\n  gen: {kind: nexmark, events: lots}\n";
    for uri in ["/api/v1/jobs/validate", "/api/v1/jobs"] {
        let a = ck.post(&app, uri, bad).await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST, "{}", a.text);
        assert!(a.json()["problems"].is_array(), "{}", a.text);
    }
    let a = ck.post(&app, "/api/v1/jobs?sideways=1", text.clone()).await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST, "{}", a.text);
    let a = ck.post(&app, "/api/v1/jobs", text.clone()).await;
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.text);
    let id = a.json()["id"].as_str().unwrap().to_owned();
    let uri = format!("/api/v1/jobs/{id}");
    let twin = ck.post(&app, "/api/v1/jobs", text.clone()).await;
    assert_eq!(twin.status, StatusCode::CONFLICT, "{}", twin.text);
    // Before the first checkpoint, `latest` is null.
    let a = ck.get(&app, &format!("{uri}/checkpoints")).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text);

    // Running: every view of it.
    wait_for(&app, &format!("{uri}/checkpoints"), |v| {
        v["completed"].as_u64().unwrap_or(0) >= 1
    })
    .await;
    wait_for(&app, &uri, |v| {
        v["nodes"]
            .as_array()
            .and_then(|n| n.iter().find(|n| n["name"] == "per-user"))
            .is_some_and(|n| n["records-in"] == 300)
    })
    .await;
    for view in [
        "",
        "/spec",
        "/spec?view=effective",
        "/logs",
        "/logs?after=0&info=true",
        "/exceptions",
        "/savepoints",
        "/snapshots",
        "/checkpoints",
    ] {
        let a = ck.get(&app, &format!("{uri}{view}")).await;
        assert_eq!(a.status, StatusCode::OK, "{view}: {}", a.text);
    }
    for bad in ["/spec?view=sideways", "/spec?sideways=1", "/logs?after=x"] {
        let a = ck.get(&app, &format!("{uri}{bad}")).await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST, "{bad}: {}", a.text);
    }
    let checkpoints = ck.get(&app, &format!("{uri}/checkpoints")).await.json();
    let cid = checkpoints["latest"]["id"].as_u64().unwrap();
    let a = ck.get(&app, &format!("{uri}/checkpoints/{cid}")).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text);
    assert_eq!(a.json()["metadata"]["job"], "openapi");

    // The tail of the Nexmark source: recording starts with the first request.
    let tail = format!("{uri}/nodes/idle/tail");
    let mut rows = 0;
    for _ in 0..100 {
        let a = ck.get(&app, &tail).await;
        assert_eq!(a.status, StatusCode::OK, "{}", a.text);
        rows = a.json()["subtasks"][0]["rows"]
            .as_array()
            .map_or(0, Vec::len);
        if rows > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(rows > 0, "the tail never recorded a row");

    // State lookups: an entry with no window sends `window: null`.
    let state = format!("{uri}/state/per-user/accumulators");
    let a = ck.get(&app, &format!("{state}?key=Gus")).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text);
    let entry = &a.json()["entries"][0];
    assert_eq!(entry.get("window"), Some(&Value::Null), "{entry}");
    let a = ck.get(&app, &format!("{state}?prefix=G&limit=5")).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text);
    for (query, status) in [
        ("?key=nobody-at-all", StatusCode::NOT_FOUND),
        ("?key=Gus&path=sideways", StatusCode::BAD_REQUEST),
        ("?key=Gus&sideways=1", StatusCode::BAD_REQUEST),
    ] {
        let a = ck.get(&app, &format!("{state}{query}")).await;
        assert_eq!(a.status, status, "{query}: {}", a.text);
    }

    // A savepoint, polled to completion; bad bodies and requests.
    let a = ck
        .post(&app, &format!("{uri}/savepoints"), r#"{"stop": false}"#)
        .await;
    assert_eq!(a.status, StatusCode::ACCEPTED, "{}", a.text);
    let request = a.json()["id"].as_u64().unwrap();
    savepoint_done(&mut ck, &app, &format!("{uri}/savepoints/{request}")).await;
    let a = ck.get(&app, &format!("{uri}/savepoints")).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text);
    let a = ck
        .post(&app, &format!("{uri}/savepoints"), r#"{"sideways": 1}"#)
        .await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST, "{}", a.text);
    let a = ck.get(&app, &format!("{uri}/savepoints/999")).await;
    assert_eq!(a.status, StatusCode::NOT_FOUND, "{}", a.text);
    let a = ck.get(&app, &format!("{uri}/checkpoints/999999")).await;
    assert_eq!(a.status, StatusCode::NOT_FOUND, "{}", a.text);
    let a = ck.get(&app, &format!("{uri}/nodes/nowhere/tail")).await;
    assert_eq!(a.status, StatusCode::NOT_FOUND, "{}", a.text);

    // Rescale, refused and done; then stop with a savepoint.
    let a = ck
        .post(&app, &format!("{uri}/rescale"), r#"{"parallelism": "two"}"#)
        .await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST, "{}", a.text);
    let a = ck
        .post(&app, &format!("{uri}/rescale"), r#"{"parallelism": 2}"#)
        .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text);
    wait_for(&app, &format!("{uri}/checkpoints"), |v| {
        v["completed"].as_u64().unwrap_or(0) >= 1
    })
    .await;
    let a = ck.post(&app, &format!("{uri}/stop"), Body::empty()).await;
    assert_eq!(a.status, StatusCode::ACCEPTED, "{}", a.text);
    let request = a.json()["id"].as_u64().unwrap();
    savepoint_done(&mut ck, &app, &format!("{uri}/savepoints/{request}")).await;
    wait_for(&app, &uri, |v| v["state"] == "stopped").await;

    // What a stopped job refuses.
    let a = ck.get(&app, &format!("{state}?key=Gus")).await;
    assert_eq!(a.status, StatusCode::CONFLICT, "{}", a.text);
    for action in ["stop", "cancel", "savepoints"] {
        let a = ck
            .post(&app, &format!("{uri}/{action}"), Body::empty())
            .await;
        assert_eq!(a.status, StatusCode::CONFLICT, "{action}: {}", a.text);
    }
    let a = ck
        .post(&app, &format!("{uri}/rescale"), r#"{"parallelism": 1}"#)
        .await;
    assert_eq!(a.status, StatusCode::CONFLICT, "{}", a.text);

    // Restart: from a bad name, a missing snapshot, then the latest; then cancel.
    for (body, status) in [
        (r#"{"from": "../../etc"}"#, StatusCode::BAD_REQUEST),
        (r#"{"from": "sp-999999"}"#, StatusCode::NOT_FOUND),
        ("", StatusCode::ACCEPTED),
    ] {
        let a = ck.post(&app, &format!("{uri}/restart"), body).await;
        assert_eq!(a.status, status, "{body}: {}", a.text);
    }
    let a = ck.post(&app, &format!("{uri}/cancel"), Body::empty()).await;
    assert_eq!(a.status, StatusCode::ACCEPTED, "{}", a.text);
    wait_for(&app, &uri, |v| v["state"] == "cancelled").await;
    for view in ["", "/checkpoints", "/exceptions", "/logs"] {
        let a = ck.get(&app, &format!("{uri}{view}")).await;
        assert_eq!(a.status, StatusCode::OK, "{view}: {}", a.text);
    }

    // Every job route of a job that does not exist.
    for (method, template) in ROUTES {
        if !template.contains("{id}") {
            continue;
        }
        let path = template
            .replace("{id}", "999")
            .replace("{request}", "1")
            .replace("{checkpoint}", "1")
            .replace("{node}", "out")
            .replace("{operator}", "per-user")
            .replace("{state}", "accumulators");
        let body = if template.ends_with("rescale") {
            r#"{"parallelism": 1}"#
        } else {
            ""
        };
        let a = ck.call(&app, method, &path, body, None).await;
        assert_eq!(
            a.status,
            StatusCode::NOT_FOUND,
            "{method} {path}: {}",
            a.text
        );
    }

    // An oversize job file.
    let mut big = text.clone();
    big.push_str(&"#".repeat(weir_http_ui::api::MAX_BODY));
    let a = ck.post(&app, "/api/v1/jobs", big).await;
    assert_eq!(a.status, StatusCode::PAYLOAD_TOO_LARGE);

    // A read-only server (`weir run --listen`) refuses every POST.
    let read_only = app
        .clone()
        .layer(axum::middleware::from_fn(weir_http_ui::api::refuse_changes));
    for (method, template) in ROUTES.iter().filter(|(m, _)| *m == "POST") {
        let path = template.replace("{id}", &id);
        let a = ck
            .call(&read_only, method, &path, Body::empty(), None)
            .await;
        assert_eq!(
            a.status,
            StatusCode::METHOD_NOT_ALLOWED,
            "{path}: {}",
            a.text
        );
    }
    host.shutdown(Duration::from_secs(10)).await;

    // Off loopback, every route but the document and its viewer needs the token.
    let public = Access::token("s3cret").unwrap();
    let (host, app) = app_with(public, HostConfig::default());
    for (method, template) in ROUTES {
        let path = template
            .replace("{id}", "1")
            .replace("{request}", "1")
            .replace("{checkpoint}", "1")
            .replace("{node}", "out")
            .replace("{operator}", "per-user")
            .replace("{state}", "accumulators");
        let a = ck.call(&app, method, &path, Body::empty(), None).await;
        let open = path == "/api/v1/openapi.json" || path == "/api/v1/docs";
        let want = if open {
            StatusCode::OK
        } else {
            StatusCode::UNAUTHORIZED
        };
        assert_eq!(a.status, want, "{method} {path}: {}", a.text);
    }
    host.shutdown(Duration::from_secs(10)).await;

    // Lookups beyond a client's budget.
    let (host, app) = app_with(
        Access::open(),
        HostConfig {
            lookup_rate: 0.01,
            lookup_burst: 1,
            ..HostConfig::default()
        },
    );
    let lookup = "/api/v1/jobs/1/state/per-user/accumulators?key=Gus";
    let a = ck.get(&app, lookup).await;
    assert_eq!(a.status, StatusCode::NOT_FOUND, "{}", a.text);
    let a = ck.get(&app, lookup).await;
    assert_eq!(a.status, StatusCode::TOO_MANY_REQUESTS, "{}", a.text);
    host.shutdown(Duration::from_secs(10)).await;

    // Every route answered with success and with an error (401 off loopback at least), and
    // everything answered was checked against the document.
    for (method, template) in ROUTES {
        let seen = ck
            .seen
            .get(&(method.to_string(), template.to_string()))
            .cloned()
            .unwrap_or_default();
        // The fleet's routes succeed only in a fleet: `fleet.rs` checks those answers.
        let fleet = template.starts_with("/api/v1/fleet");
        assert!(
            fleet || seen.iter().any(|s| (200..300).contains(s)),
            "{method} {template}: no success checked ({seen:?})"
        );
        let open = *template == "/api/v1/openapi.json" || *template == "/api/v1/docs";
        assert!(
            open || seen.iter().any(|s| *s >= 400),
            "{method} {template}: no error checked ({seen:?})"
        );
    }
    drop(dir);
}

/// The check above cannot pass by luck: an answer with a key its type does not declare, or
/// without one it always sends, or with a null where none may be, is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_document_refuses_unknown_and_missing_keys() {
    let (host, app) = app(Access::open());
    let ck = Checker::new(&app).await;
    let a = call(&app, "POST", "/api/v1/jobs", crate::serve::q1("strict", "")).await;
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.text);
    let overview = a.json();
    let id = overview["id"].as_str().unwrap().to_owned();
    let schema = Checker::component("JobOverview");
    assert_eq!(ck.errors(&schema, &overview), Vec::<String>::new());

    let mut extra = overview.clone();
    extra["surprise"] = json!(1);
    assert!(
        !ck.errors(&schema, &extra).is_empty(),
        "an unknown key passed"
    );
    let mut missing = overview.clone();
    missing.as_object_mut().unwrap().remove("ended-at");
    assert!(
        !ck.errors(&schema, &missing).is_empty(),
        "a missing key passed"
    );
    let mut null = overview.clone();
    null["name"] = Value::Null;
    assert!(!ck.errors(&schema, &null).is_empty(), "a null name passed");

    // Deep in a flattened view too: a node of the job's detail.
    let detail = wait_for(&app, &format!("/api/v1/jobs/{id}"), |v| {
        v["nodes"].as_array().is_some_and(|n| !n.is_empty())
    })
    .await;
    let schema = Checker::component("JobDetail");
    assert_eq!(ck.errors(&schema, &detail), Vec::<String>::new());
    let mut extra = detail.clone();
    extra["nodes"][0]["surprise"] = json!(true);
    assert!(
        !ck.errors(&schema, &extra).is_empty(),
        "an unknown node key passed"
    );
    let mut extra = detail.clone();
    extra["surprise"] = json!(true);
    assert!(
        !ck.errors(&schema, &extra).is_empty(),
        "an unknown key beside the flattened overview passed"
    );
    let mut missing = detail;
    missing.as_object_mut().unwrap().remove("state");
    assert!(
        !ck.errors(&schema, &missing).is_empty(),
        "a missing overview key passed"
    );
    host.shutdown(Duration::from_secs(10)).await;
}

/// The schema the document gives a query parameter of `method` `template`.
fn parameter_schema(ck: &Checker, method: &str, template: &str, name: &str) -> Value {
    ck.doc["paths"][template][method]["parameters"]
        .as_array()
        .and_then(|p| p.iter().find(|p| p["name"] == name))
        .map(|p| p["schema"].clone())
        .unwrap_or_else(|| panic!("{method} {template} documents no parameter `{name}`"))
}

/// The schema the document gives the JSON body of `POST template`.
fn body_schema(ck: &Checker, template: &str) -> Value {
    ck.doc["paths"][template]["post"]["requestBody"]["content"]["application/json"]["schema"]
        .clone()
}

/// Each request schemathesis found the document calling valid and the server refusing with
/// 400 (issue 51): the server still refuses it, and the document now calls it invalid, while
/// the values the server takes still pass. `scripts/schemathesis.sh` (in `make test`) fuzzes
/// the whole API for more of these; this pins the ones found, without Python.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_server_refuses_with_400_the_document_calls_invalid() {
    let (host, app) = app(Access::open());
    let ck = Checker::new(&app).await;
    let a = call(
        &app,
        "POST",
        "/api/v1/jobs",
        crate::serve::q1("refused", ""),
    )
    .await;
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.text);
    let id = a.json()["id"].as_str().unwrap().to_owned();
    let uri = format!("/api/v1/jobs/{id}");
    let refused = |a: &Answer, what: &str| {
        assert_eq!(a.status, StatusCode::BAD_REQUEST, "{what}: {}", a.text);
    };
    let check = |schema: &Value, bad: Value, good: &[Value], what: &str| {
        assert!(
            !ck.errors(schema, &bad).is_empty(),
            "{what}: the document takes {bad}: {schema}"
        );
        for g in good {
            assert_eq!(ck.errors(schema, g), Vec::<String>::new(), "{what}: {g}");
        }
    };

    // Beyond 64 bits (the server reads a u64).
    let logs = "/api/v1/jobs/{id}/logs";
    refused(
        &call(
            &app,
            "GET",
            &format!("{uri}/logs?after=100000000000000000000"),
            Body::empty(),
        )
        .await,
        "after",
    );
    let big: Value = serde_json::from_str("100000000000000000000").unwrap();
    check(
        &parameter_schema(&ck, "get", logs, "after"),
        big,
        &[json!(0), json!(u64::MAX)],
        "after",
    );
    // An empty view.
    refused(
        &call(&app, "GET", &format!("{uri}/spec?view="), Body::empty()).await,
        "view",
    );
    check(
        &parameter_schema(&ck, "get", "/api/v1/jobs/{id}/spec", "view"),
        json!(""),
        &[json!("submitted"), json!("effective")],
        "view",
    );
    // An empty override, on a submit and a validation.
    for path in ["/api/v1/jobs", "/api/v1/jobs/validate"] {
        let text = crate::serve::q1("overridden", "");
        refused(
            &call(&app, "POST", &format!("{path}?set="), text).await,
            path,
        );
        let schema = &parameter_schema(&ck, "post", path, "set")["items"];
        check(
            schema,
            json!(""),
            &[json!("parallelism=2"), json!("sources.nexmark.rate=")],
            path,
        );
        for bad in ["=1", "a..b=1", "novalue"] {
            assert!(!ck.errors(schema, &json!(bad)).is_empty(), "{path}: {bad}");
        }
    }
    // A state lookup's path that is neither.
    let lookup = "/api/v1/jobs/{id}/state/{operator}/{state}";
    refused(
        &call(
            &app,
            "GET",
            &format!("{uri}/state/q1/s?key=1&path=sideways"),
            Body::empty(),
        )
        .await,
        "path",
    );
    check(
        &parameter_schema(&ck, "get", lookup, "path"),
        json!("sideways"),
        &[json!("direct"), json!("ordered")],
        "path",
    );

    // An ended job: a restart from nothing named, a rescale to nothing.
    let a = call(&app, "POST", &format!("{uri}/cancel"), Body::empty()).await;
    assert_eq!(a.status, StatusCode::ACCEPTED, "{}", a.text);
    wait_for(&app, &uri, |v| !v["ended-at"].is_null()).await;
    refused(
        &call(&app, "POST", &format!("{uri}/restart"), r#"{"from": ""}"#).await,
        "from",
    );
    check(
        &body_schema(&ck, "/api/v1/jobs/{id}/restart"),
        json!({"from": ""}),
        &[
            json!({}),
            json!({"from": null}),
            json!({"from": "latest"}),
            json!({"from": "none"}),
            json!({"from": "chk-0000000007"}),
        ],
        "from",
    );
    refused(
        &call(
            &app,
            "POST",
            &format!("{uri}/rescale"),
            r#"{"parallelism": 0}"#,
        )
        .await,
        "parallelism",
    );
    check(
        &body_schema(&ck, "/api/v1/jobs/{id}/rescale"),
        json!({"parallelism": 0}),
        &[json!({"parallelism": 1}), json!({"parallelism": 1024})],
        "parallelism",
    );

    // The job file is YAML text: a mapping once parsed, as the document says.
    let spec = &ck.doc["paths"]["/api/v1/jobs/{id}/spec"]["get"]["responses"]["200"]["content"];
    assert_eq!(
        spec["application/yaml"]["schema"]["type"], "object",
        "{spec}"
    );
    host.shutdown(Duration::from_secs(10)).await;
}
