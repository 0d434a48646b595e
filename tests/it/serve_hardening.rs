//! What `weir serve` refuses to be made to do by a request: hang on to half-sent requests,
//! send requests to endpoints its operator did not allow, hand back a secret it was given, read
//! `+1` as job 1 or refuse a `bearer` token spelt in lower case.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::StatusCode;
use weir_http_ui::endpoints::Endpoints;
use weir_http_ui::{Access, HostConfig, ServeConfig, Server, Timeouts};

use crate::serve::{app, app_with, call, call_with, q1};

/// Sends `request` on a new connection and reads until the server closes it (or 10 s pass:
/// then the answer is `None`); returns what came back and how long it took.
fn exchange(addr: SocketAddr, request: &[u8]) -> (Option<String>, Duration) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream.write_all(request).unwrap();
    let started = Instant::now();
    let mut answer = Vec::new();
    let closed = match stream.read_to_end(&mut answer) {
        Ok(_) => true,
        // A reset is a close as well.
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
    };
    let answer = closed.then(|| String::from_utf8_lossy(&answer).into_owned());
    (answer, started.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_sent_requests_are_cut_off_and_whole_ones_are_answered() {
    let limit = Duration::from_millis(500);
    let server = Server::bind(ServeConfig {
        listen: ([127, 0, 0, 1], 0).into(),
        timeouts: Timeouts {
            header_read: limit,
            body_read: limit,
        },
        ..ServeConfig::default()
    })
    .await
    .unwrap();
    let addr = server.addr;
    let background = server.spawn();
    let outcomes = tokio::task::spawn_blocking(move || {
        [
            // Headers that never end.
            &b"GET /api/v1/jobs HTTP/1.1\r\nHost: weir\r\n"[..],
            // A body that never ends.
            b"POST /api/v1/jobs/validate HTTP/1.1\r\nHost: weir\r\nContent-Length: 100\r\n\r\nname: half",
            // Nothing at all.
            b"",
            // A whole request.
            b"GET /api/v1/jobs HTTP/1.1\r\nHost: weir\r\nConnection: close\r\n\r\n",
        ]
        .map(|request| exchange(addr, request))
    })
    .await
    .unwrap();
    let [headers, body, nothing, whole] = outcomes;
    for (what, (answer, took)) in [
        ("headers", &headers),
        ("body", &body),
        ("nothing", &nothing),
    ] {
        let answer = answer
            .as_ref()
            .unwrap_or_else(|| panic!("{what}: the connection was still open after 10 s"));
        assert!(*took < limit * 8, "{what}: closed only after {took:?}");
        assert!(!answer.contains("200 OK"), "{what}: {answer}");
    }
    let body = body.0.unwrap();
    assert!(body.starts_with("HTTP/1.1 408"), "{body}");
    let whole = whole.0.unwrap();
    assert!(whole.starts_with("HTTP/1.1 200"), "{whole}");
    assert!(whole.contains("\"jobs\""), "{whole}");
    background.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_id_is_digits_only() {
    let (host, app) = app(Access::open());
    let submitted = call(&app, "POST", "/api/v1/jobs", q1("digits-only", "")).await;
    assert_eq!(submitted.status, StatusCode::CREATED, "{}", submitted.text);
    let id = submitted.json()["id"].as_str().unwrap().to_owned();
    assert_eq!(id, "1");
    for uri in ["/api/v1/jobs/1", "/api/v1/jobs/01"] {
        let a = call(&app, "GET", uri, Body::empty()).await;
        assert_eq!(a.status, StatusCode::OK, "{uri}: {}", a.text);
    }
    for uri in [
        "/api/v1/jobs/+1",
        "/api/v1/jobs/-1",
        "/api/v1/jobs/%201",
        "/api/v1/jobs/1.0",
        "/api/v1/jobs/1/savepoints/+1",
        "/api/v1/jobs/1/checkpoints/+1",
    ] {
        let a = call(&app, "GET", uri, Body::empty()).await;
        assert_eq!(a.status, StatusCode::NOT_FOUND, "{uri}: {}", a.text);
    }
    let restart = call(&app, "POST", "/api/v1/jobs/1/cancel", Body::empty()).await;
    assert_eq!(restart.status, StatusCode::ACCEPTED, "{}", restart.text);
    host.shutdown(Duration::from_secs(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bearer_scheme_is_accepted_in_any_case() {
    let public: SocketAddr = ([0, 0, 0, 0], 8080).into();
    let (host, app) = app(Access::for_bind(public, Some("s3cret")).unwrap());
    for auth in ["Bearer s3cret", "bearer s3cret", "BEARER s3cret"] {
        let a = call_with(&app, "GET", "/api/v1/jobs", Body::empty(), Some(auth)).await;
        assert_eq!(a.status, StatusCode::OK, "{auth}");
    }
    for auth in ["bearer S3CRET", "bearer", "Basic s3cret"] {
        let a = call_with(&app, "GET", "/api/v1/jobs", Body::empty(), Some(auth)).await;
        assert_eq!(a.status, StatusCode::UNAUTHORIZED, "{auth}");
    }
    host.shutdown(Duration::from_secs(10)).await;
}

/// A checkpointed job whose storage is on `endpoint`.
fn on_endpoint(name: &str, endpoint: &str) -> String {
    q1(
        name,
        &format!(
            "checkpoint:\n  interval: 1s\n  storage:\n    url: s3://weir/{name}\n    \
             endpoint: {endpoint}\n    allow-http: true\n"
        ),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_outside_the_allow_list_are_refused_at_the_key_with_line_and_column() {
    let allowed = Endpoints::default()
        .allow("http://127.0.0.1:9")
        .unwrap()
        .allow("*")
        .unwrap();
    let (host, app) = app_with(
        Access::open(),
        HostConfig {
            endpoints: allowed,
            ..HostConfig::default()
        },
    );
    for endpoint in [
        "http://169.254.169.254",
        "http://[fd00:ec2::254]",
        "http://metadata.google.internal",
        "http://2852039166",
        "http://[fe80::1]:9000",
        "http://[::ffff:169.254.169.254]",
    ] {
        for uri in ["/api/v1/jobs/validate", "/api/v1/jobs"] {
            let a = call(&app, "POST", uri, on_endpoint("ssrf", endpoint)).await;
            assert_eq!(
                a.status,
                StatusCode::BAD_REQUEST,
                "{endpoint} {uri}: {}",
                a.text
            );
            let problems = a.json()["problems"].clone();
            let problem = problems
                .as_array()
                .unwrap()
                .iter()
                .find(|p| p["key"] == "checkpoint.storage.endpoint")
                .unwrap_or_else(|| panic!("{endpoint}: {problems}"))
                .clone();
            assert_eq!(problem["line"], 16, "{problem}");
            assert_eq!(problem["column"], 15, "{problem}");
            assert!(
                problem["message"]
                    .as_str()
                    .unwrap()
                    .contains("link-local or cloud metadata"),
                "{problem}"
            );
        }
    }
    // Listed: allowed, as is any other endpoint under `*` (a name where it points now).
    for endpoint in ["http://127.0.0.1:9", "http://localhost:9000"] {
        let a = call(
            &app,
            "POST",
            "/api/v1/jobs/validate",
            on_endpoint("ok", endpoint),
        )
        .await;
        assert_eq!(a.status, StatusCode::OK, "{endpoint}: {}", a.text);
    }
    // A region that would move the request to another host.
    let region = on_endpoint("region", "http://127.0.0.1:9").replace(
        "allow-http: true",
        "allow-http: true\n    region: \"evil.example#\"",
    );
    let a = call(&app, "POST", "/api/v1/jobs/validate", region).await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST, "{}", a.text);
    assert!(a.text.contains("checkpoint.storage.region"), "{}", a.text);
    host.shutdown(Duration::from_secs(10)).await;

    // Without `*`, only what is listed.
    let (host, app) = app_with(
        Access::open(),
        HostConfig {
            endpoints: Endpoints::default().allow("http://127.0.0.1:9").unwrap(),
            ..HostConfig::default()
        },
    );
    let a = call(
        &app,
        "POST",
        "/api/v1/jobs/validate",
        on_endpoint("other", "http://storage.example:9000"),
    )
    .await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST, "{}", a.text);
    assert!(a.text.contains("--allow-endpoint"), "{}", a.text);
    host.shutdown(Duration::from_secs(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_allowed_by_star_is_refused_at_submit_where_it_points_at_a_refused_address() {
    // A DNS server under a job author's control: its names point wherever they like.
    let dns = |name: &str, _port: u16| -> std::io::Result<Vec<std::net::IpAddr>> {
        match name {
            "rebind.example" => Ok(vec!["169.254.169.254".parse().unwrap()]),
            "mapped.example" => Ok(vec!["::ffff:169.254.170.2".parse().unwrap()]),
            "public.example" => Ok(vec!["93.184.216.34".parse().unwrap()]),
            _ => Err(std::io::Error::other("no such name")),
        }
    };
    let (host, app) = app_with(
        Access::open(),
        HostConfig {
            endpoints: Endpoints::default().allow("*").unwrap().with_lookup(dns),
            ..HostConfig::default()
        },
    );
    for (endpoint, expected) in [
        ("http://rebind.example:9000", "resolves to 169.254.169.254"),
        ("http://mapped.example", "resolves to ::ffff:169.254.170.2"),
        ("http://nowhere.example", "does not resolve"),
    ] {
        for uri in ["/api/v1/jobs/validate", "/api/v1/jobs"] {
            let a = call(&app, "POST", uri, on_endpoint("rebind", endpoint)).await;
            assert_eq!(a.status, StatusCode::BAD_REQUEST, "{endpoint}: {}", a.text);
            let problems = a.json()["problems"].clone();
            let problem = problems
                .as_array()
                .unwrap()
                .iter()
                .find(|p| p["key"] == "checkpoint.storage.endpoint")
                .unwrap_or_else(|| panic!("{endpoint}: {problems}"))
                .clone();
            assert_eq!(
                (problem["line"].clone(), problem["column"].clone()),
                (16.into(), 15.into())
            );
            let message = problem["message"].as_str().unwrap();
            assert!(message.contains(expected), "{endpoint}: {message}");
            assert!(message.contains("--allow-endpoint"), "{message}");
        }
    }
    let a = call(
        &app,
        "POST",
        "/api/v1/jobs/validate",
        on_endpoint("public", "http://public.example:9000"),
    )
    .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text);
    host.shutdown(Duration::from_secs(10)).await;
}

/// A job with a secret under `secret-access-key` that an alias copies to `to`.
fn with_copied_secret(name: &str, to: &str) -> String {
    format!(
        "# hosted by the data team\n\
         name: {name}\n\
         checkpoint:\n  storage:\n    url: s3://weir/{name}\n    \
         secret-access-key: &pw \"hunter2-hunter2\" # rotated monthly\n\
         {to}: *pw\n\
         sources:\n  nexmark: {{kind: nexmark, rate: 1000}}\n\
         sinks:\n  out: {{kind: blackhole, from: nexmark.bid}}\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_copied_by_an_alias_is_masked_in_the_spec_the_list_the_detail_and_errors() {
    let (host, app) = app(Access::open());
    // Refused, with a message that would quote the value it could not read as a number.
    for uri in ["/api/v1/jobs/validate", "/api/v1/jobs"] {
        let a = call(&app, "POST", uri, with_copied_secret("bad", "parallelism")).await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST, "{uri}: {}", a.text);
        assert!(a.text.contains("parallelism"), "{uri}: {}", a.text);
        assert!(!a.text.contains("hunter2"), "{uri}: {}", a.text);
    }
    let submitted = call(
        &app,
        "POST",
        "/api/v1/jobs",
        with_copied_secret("masked", "description"),
    )
    .await;
    assert_eq!(submitted.status, StatusCode::CREATED, "{}", submitted.text);
    assert!(!submitted.text.contains("hunter2"), "{}", submitted.text);
    let id = submitted.json()["id"].as_str().unwrap().to_owned();
    for uri in [
        format!("/api/v1/jobs/{id}/spec"),
        "/api/v1/jobs".to_owned(),
        format!("/api/v1/jobs/{id}"),
        format!("/api/v1/jobs/{id}/exceptions"),
        format!("/api/v1/jobs/{id}/checkpoints"),
    ] {
        let a = call(&app, "GET", &uri, Body::empty()).await;
        assert_eq!(a.status, StatusCode::OK, "{uri}: {}", a.text);
        assert!(!a.text.contains("hunter2"), "{uri}: {}", a.text);
    }
    let spec = call(
        &app,
        "GET",
        &format!("/api/v1/jobs/{id}/spec"),
        Body::empty(),
    )
    .await;
    for kept in ["# hosted by the data team", "# rotated monthly", "******"] {
        assert!(spec.text.contains(kept), "{kept}: {}", spec.text);
    }
    let list = call(&app, "GET", "/api/v1/jobs", Body::empty())
        .await
        .json();
    assert_eq!(list["jobs"][0]["description"], "******", "{list}");
    host.shutdown(Duration::from_secs(10)).await;
}

/// The CDC source, as the PostgreSQL sink: a submitted job reaches only the databases the
/// server allows, and may not name a file of the server's (`sslrootcert`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cdc_source_reaches_only_allowed_databases_and_reads_no_server_file() {
    let (host, app) = app_with(
        Access::open(),
        HostConfig {
            endpoints: Endpoints::default()
                .allow("postgres://127.0.0.1:5432")
                .unwrap(),
            ..HostConfig::default()
        },
    );
    let job = |connection: &str| {
        format!(
            "name: cdc\nsources:\n  db:\n    kind: postgres-cdc\n    connection: {connection}\n    \
             tables:\n      - {{table: t, schema: {{id: int}}, key: [id]}}\n\
             sinks:\n  out: {{kind: blackhole, from: db.t}}\n"
        )
    };
    let ok = call(
        &app,
        "POST",
        "/api/v1/jobs/validate",
        job("host=127.0.0.1 port=5432 user=weir dbname=shop"),
    )
    .await;
    assert_eq!(ok.status, StatusCode::OK, "{}", ok.text);
    let far = call(
        &app,
        "POST",
        "/api/v1/jobs/validate",
        job("host=10.1.2.3 port=5432 user=weir dbname=shop"),
    )
    .await;
    assert_eq!(far.status, StatusCode::BAD_REQUEST, "{}", far.text);
    assert!(
        far.text.contains("sources.db.connection") && far.text.contains("--allow-endpoint"),
        "{}",
        far.text
    );
    let file = call(
        &app,
        "POST",
        "/api/v1/jobs/validate",
        job("host=127.0.0.1 port=5432 user=weir sslmode=verify-full sslrootcert=/etc/passwd"),
    )
    .await;
    assert_eq!(file.status, StatusCode::BAD_REQUEST, "{}", file.text);
    assert!(file.text.contains("sslrootcert"), "{}", file.text);
    host.shutdown(Duration::from_secs(10)).await;
}
