//! The NATS source and sink against a real NATS server with JetStream: the machine's on
//! 127.0.0.1:4222 when one answers (Debian's `nats-server -js`), else one the test starts on a
//! free port with a temporary store (`scripts/nats-server.sh`); a test that restarts its
//! server, or needs one configured (users), always starts its own. Every test works in streams
//! of its own, named after the test and the process, and deletes them at its end.
//!
//! What the tests expect is computed without weir's NATS code: messages are published and read
//! back with plain `async-nats` clients, and query results are compared with the same query
//! over the same events from a JSON-lines file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use async_nats::jetstream;
use futures::StreamExt;
use serde_json::{Value, json};

use crate::recovery::{Rng, weir};
use crate::support::{
    assert_same_rows, free_port, golden_jsonl, job_file, multiset, nexmark_jsonl, out_dir, plan,
    read_parts, run_job, run_through_kills, script, script_quietly, try_run_plan,
};

const SCRIPT: &str = "scripts/nats-server.sh";

/// The client side of the tests: one runtime for every test's connections.
fn rt() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap()
    })
}

/// A NATS server with JetStream.
struct Server {
    port: u16,
    /// A server of this test's own: its directory (store, pid, log), removed when dropped.
    own: Option<tempfile::TempDir>,
    config: Option<PathBuf>,
}

impl Server {
    /// The machine's server when it answers, else one of the test's own.
    fn any() -> Self {
        let answers = std::process::Command::new(job_file(SCRIPT))
            .args(["answers", "4222"])
            .status()
            .is_ok_and(|s| s.success());
        if answers {
            Server {
                port: 4222,
                own: None,
                config: None,
            }
        } else {
            Self::own(None)
        }
    }

    /// A server of the test's own, on a free port, configured by `config` (server
    /// configuration text) if given.
    fn own(config: Option<&str>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let config = config.map(|text| {
            let path = dir.path().join("nats.conf");
            std::fs::write(&path, text).unwrap();
            path
        });
        let server = Server {
            port: free_port(),
            own: Some(dir),
            config,
        };
        server.start();
        server
    }

    fn dir(&self) -> String {
        let dir = self.own.as_ref().expect("a server of the test's own");
        dir.path().display().to_string()
    }

    fn start(&self) {
        let mut args = vec!["start".to_owned(), self.dir(), self.port.to_string()];
        if let Some(c) = &self.config {
            args.push(c.display().to_string());
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        script(SCRIPT, &args);
    }

    fn stop(&self) {
        script(SCRIPT, &["stop", &self.dir()]);
    }

    fn restart(&self) {
        self.stop();
        self.start();
    }

    fn servers(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// A JetStream context signed in with `options`.
    fn js_with(&self, options: async_nats::ConnectOptions) -> jetstream::Context {
        let servers = self.servers();
        rt().block_on(async move {
            let client = options.connect(servers).await.unwrap();
            jetstream::new(client)
        })
    }

    fn js(&self) -> jetstream::Context {
        self.js_with(async_nats::ConnectOptions::new())
    }

    /// A stream of this test's own named `<name>-<process>-<n>`, its subjects `<stream>.>`,
    /// deleted when dropped.
    fn stream(&self, name: &str) -> TestStream {
        self.stream_on(self.js(), name, Duration::from_secs(120))
    }

    fn stream_on(&self, js: jetstream::Context, name: &str, window: Duration) -> TestStream {
        static N: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "{name}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let config = jetstream::stream::Config {
            name: name.clone(),
            subjects: vec![format!("{name}.>")],
            duplicate_window: window,
            ..Default::default()
        };
        let created = js.clone();
        rt().block_on(async move { created.create_stream(config).await.unwrap() });
        TestStream { js, name }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.own.is_some() {
            script_quietly(SCRIPT, &["stop", &self.dir()]);
        }
    }
}

/// A stream a test made; deleted when dropped.
struct TestStream {
    js: jetstream::Context,
    name: String,
}

/// A message read back: subject, stream sequence, payload.
type Stored = (String, u64, String);

impl TestStream {
    /// Publishes `(subject suffix, payload)` pairs in order (to `<stream>.<suffix>`), each
    /// acknowledged.
    fn publish(&self, messages: &[(String, String)]) {
        self.publish_with_headers(messages, &[]);
    }

    fn publish_with_headers(&self, messages: &[(String, String)], headers: &[(&str, &str)]) {
        let js = self.js.clone();
        let name = self.name.clone();
        let messages = messages.to_vec();
        let headers: Vec<(String, String)> = headers
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        rt().block_on(async move {
            let mut acks = futures::stream::FuturesOrdered::new();
            for (suffix, payload) in messages {
                let mut map = async_nats::HeaderMap::new();
                for (k, v) in &headers {
                    map.insert(k.as_str(), v.as_str());
                }
                let ack = js
                    .publish_with_headers(format!("{name}.{suffix}"), map, payload.into())
                    .await
                    .unwrap();
                acks.push_back(ack.into_future());
                if acks.len() >= 1024 {
                    acks.next().await.unwrap().unwrap();
                }
            }
            while let Some(ack) = acks.next().await {
                ack.unwrap();
            }
        });
    }

    /// Every message the stream holds, in order, read by a plain consumer.
    fn read_all(&self) -> Vec<Stored> {
        self.read_messages()
            .into_iter()
            .map(|m| {
                let seq = m.info().unwrap().stream_sequence;
                (
                    m.subject.to_string(),
                    seq,
                    String::from_utf8_lossy(&m.payload).into_owned(),
                )
            })
            .collect()
    }

    /// Every message the stream holds, in order, as the client reads it.
    fn read_messages(&self) -> Vec<jetstream::Message> {
        rt().block_on(read_stream(self.js.clone(), self.name.clone()))
    }
}

/// Every message of stream `name`, in order, read by a plain consumer.
async fn read_stream(js: jetstream::Context, name: String) -> Vec<jetstream::Message> {
    {
        {
            let mut stream = js.get_stream(&name).await.unwrap();
            let count = stream.info().await.unwrap().state.messages as usize;
            let consumer = stream
                .create_consumer(jetstream::consumer::pull::Config {
                    ack_policy: jetstream::consumer::AckPolicy::None,
                    ..Default::default()
                })
                .await
                .unwrap();
            let mut out = Vec::with_capacity(count);
            let deadline = Instant::now() + Duration::from_secs(60);
            while out.len() < count {
                assert!(
                    Instant::now() < deadline,
                    "reading {name} took over a minute"
                );
                let mut batch = consumer
                    .batch()
                    .max_messages(1000)
                    .expires(Duration::from_secs(1))
                    .messages()
                    .await
                    .unwrap();
                while let Some(Ok(m)) = batch.next().await {
                    out.push(m);
                }
            }
            out
        }
    }
}

impl Drop for TestStream {
    fn drop(&mut self) {
        let js = self.js.clone();
        let name = self.name.clone();
        let _ = rt().block_on(async move {
            tokio::time::timeout(Duration::from_secs(5), js.delete_stream(&name)).await
        });
    }
}

/// Writes `text` as a job file in `dir`.
fn job(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// Every partition is read once, whatever the parallelism, with each message's metadata.
#[test]
fn reads_every_partition_once_with_its_metadata() {
    let server = Server::any();
    let stream = server.stream("meta");
    let messages: Vec<(String, String)> = (0..3000)
        .map(|i| {
            (
                format!("{}.v", i % 3),
                json!({"id": i, "name": format!("n{i}")}).to_string(),
            )
        })
        .collect();
    stream.publish_with_headers(&messages, &[("origin", "test")]);
    let expected: Vec<Value> = stream
        .read_all()
        .into_iter()
        .map(|(subject, seq, payload)| {
            let v: Value = serde_json::from_str(&payload).unwrap();
            let p: i64 = subject.split('.').nth(1).unwrap().parse().unwrap();
            json!({"id": v["id"], "name": v["name"], "s": subject, "q": seq, "p": p,
                   "h": r#"{"origin":"test"}"#})
        })
        .collect();
    assert_eq!(expected.len(), 3000);
    let dir = tempfile::tempdir().unwrap();
    for parallelism in [1, 2] {
        let out = out_dir();
        let file = job(
            dir.path(),
            "job.yaml",
            &format!(
                "name: nats-read\nparallelism: {parallelism}\nsources:\n  in:\n    kind: nats\n    \
                 servers: {}\n    stream: {}\n    subjects: '{}.{{partition}}.v'\n    \
                 partitions: 3\n    stop-at: end\n    schema: {{id: int, name: string}}\n    \
                 metadata: {{s: subject, q: sequence, p: partition, h: headers, t: time}}\n\
                 sinks:\n  out:\n    kind: file\n    from: in\n    path: {}\n",
                server.servers(),
                stream.name,
                stream.name,
                out.path().display()
            ),
        );
        let summary = run_job(&file, &[]);
        let got: Vec<Value> = read_parts(out.path())
            .into_iter()
            .map(|mut row| {
                // The time the server stored the message: present, and recent.
                let t = row["t"].as_i64().unwrap();
                assert!(t > 1_700_000_000_000, "{row}");
                row.as_object_mut().unwrap().remove("t");
                row
            })
            .collect();
        assert_same_rows(
            &format!("NATS source at parallelism {parallelism}"),
            &multiset(got),
            &multiset(expected.clone()),
        );
        assert_eq!(summary.events, 3000, "{summary:?}");
    }
}

/// Projection pushdown through a NATS source of JSON values: a field the job never reads is
/// skipped, not decoded, so a wrong-typed value in it no longer fails the job (as in Flink's
/// JSON format under projection pushdown); with the pass off, it does.
#[test]
fn a_field_nothing_reads_is_not_decoded_from_nats() {
    let server = Server::any();
    let stream = server.stream("proj");
    let messages: Vec<(String, String)> = (0..500)
        .map(|i| {
            let name = if i % 50 == 7 {
                json!(i)
            } else {
                json!(format!("n{i}"))
            };
            ("x".to_owned(), json!({"id": i, "name": name}).to_string())
        })
        .collect();
    stream.publish(&messages);
    let dir = tempfile::tempdir().unwrap();
    let out = out_dir();
    let file = job(
        dir.path(),
        "job.yaml",
        &format!(
            "name: nats-projected\nsources:\n  in:\n    kind: nats\n    servers: {}\n    \
             stream: {}\n    stop-at: end\n    on-error: fail\n    \
             schema: {{id: int, name: string}}\n\
             transforms:\n  twice:\n    kind: map\n    from: in\n    \
             columns: {{id: id, twice: id * 2}}\n\
             sinks:\n  out:\n    kind: file\n    from: twice\n    path: {}\n",
            server.servers(),
            stream.name,
            out.path().display()
        ),
    );
    let summary = run_job(&file, &[]);
    let expected: Vec<Value> = (0..500i64)
        .map(|i| json!({"id": i, "twice": i * 2}))
        .collect();
    assert_same_rows(
        "NATS source, name unread",
        &multiset(read_parts(out.path())),
        &multiset(expected),
    );
    assert_eq!(summary.events, 500, "{summary:?}");
    let whole = plan(&file, &["projection-pushdown=false".to_owned()]).unwrap();
    let error = try_run_plan(&whole, false).unwrap_err();
    assert!(error.contains("name"), "{error}");
}

/// A message that does not decode fails the job naming its stream, subject and sequence, or
/// is skipped and counted.
#[test]
fn bad_messages_fail_naming_stream_subject_and_sequence_or_are_skipped() {
    let server = Server::any();
    let stream = server.stream("bad");
    let mut messages: Vec<(String, String)> = (0..10)
        .map(|i| ("x".to_owned(), json!({"id": i}).to_string()))
        .collect();
    messages.insert(5, ("x".to_owned(), "{not json".to_owned()));
    stream.publish(&messages);
    let dir = tempfile::tempdir().unwrap();
    let out = out_dir();
    let text = |on_error: &str| {
        format!(
            "name: nats-bad\nsources:\n  in:\n    kind: nats\n    servers: {}\n    stream: {}\n    \
             stop-at: end\n    on-error: {on_error}\n    schema: {{id: int}}\nsinks:\n  out:\n    \
             kind: file\n    from: in\n    path: {}\n",
            server.servers(),
            stream.name,
            out.path().display()
        )
    };
    let failing = job(dir.path(), "fail.yaml", &text("fail"));
    let error = try_run_plan(&plan(&failing, &[]).unwrap(), false).unwrap_err();
    assert!(
        error.contains(&format!(
            "stream {} subject {}.x sequence 6",
            stream.name, stream.name
        )) && error.contains("on-error: skip"),
        "{error}"
    );
    let skipping = job(dir.path(), "skip.yaml", &text("skip"));
    let summary = try_run_plan(&plan(&skipping, &[]).unwrap(), false).unwrap();
    let skipped: u64 = summary.nodes.iter().map(|n| n.skipped).sum();
    assert_eq!(skipped, 1, "{summary:?}");
    assert_eq!(read_parts(out.path()).len(), 10);
}

/// A missing stream, an unreachable server and wrong credentials each fail the job with a
/// message that says what is wrong; the credentials come from the environment through
/// `${VAR}`, and with the right ones the same job runs.
#[test]
fn a_missing_stream_wrong_credentials_or_no_server_fail_clearly() {
    let server = Server::any();
    let dir = tempfile::tempdir().unwrap();
    let text = |servers: &str, stream: &str, auth: &str| {
        format!(
            "name: nats-missing\nsources:\n  in:\n    kind: nats\n    servers: {servers}\n    \
             stream: {stream}\n    stop-at: end\n    format: raw\n{auth}sinks:\n  out:\n    kind: \
             blackhole\n    from: in\n"
        )
    };
    let missing = job(
        dir.path(),
        "missing.yaml",
        &text(&server.servers(), "nowhere", ""),
    );
    let error = try_run_plan(&plan(&missing, &[]).unwrap(), false).unwrap_err();
    assert!(
        error.contains("the stream `nowhere` does not exist"),
        "{error}"
    );
    let unreachable = format!("127.0.0.1:{}", free_port());
    let nobody = job(dir.path(), "nobody.yaml", &text(&unreachable, "s", ""));
    let error = try_run_plan(&plan(&nobody, &[]).unwrap(), false).unwrap_err();
    assert!(
        error.contains(&unreachable) && error.contains("reachable"),
        "{error}"
    );

    // A server that wants a password.
    let guarded = Server::own(Some(
        "authorization {\n  user: weir\n  password: right-one\n}\n",
    ));
    let js = guarded.js_with(async_nats::ConnectOptions::with_user_and_password(
        "weir".into(),
        "right-one".into(),
    ));
    let stream = guarded.stream_on(js, "guarded", Duration::from_secs(120));
    stream.publish(&[("a".to_owned(), "hello".to_owned())]);
    let auth = "    user: weir\n    password: ${WEIR_TEST_NATS_PASSWORD}\n";
    let path = job(
        dir.path(),
        "guarded.yaml",
        &text(&guarded.servers(), &stream.name, auth),
    );
    let data = dir.path().join("data");
    let run = |password: &str| {
        weir(&data)
            .arg("run")
            .arg(&path)
            .arg("--quiet")
            .env("WEIR_TEST_NATS_PASSWORD", password)
            .output()
            .unwrap()
    };
    let wrong = run("wrong");
    let stderr = String::from_utf8_lossy(&wrong.stderr);
    assert!(!wrong.status.success(), "{stderr}");
    assert!(
        stderr.contains("refused the sign-in") && stderr.contains("password"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("wrong"),
        "the password was echoed: {stderr}"
    );
    let right = run("right-one");
    assert!(
        right.status.success(),
        "{}",
        String::from_utf8_lossy(&right.stderr)
    );
    // Unset, the variable is a problem of the file at its line and column.
    let unset = weir(&data)
        .arg("validate")
        .arg(&path)
        .env_remove("WEIR_TEST_NATS_PASSWORD")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&unset.stderr);
    assert!(!unset.status.success());
    assert!(
        stderr.contains("guarded.yaml:10:15")
            && stderr.contains("`WEIR_TEST_NATS_PASSWORD` is not set"),
        "{stderr}"
    );
}

/// Writes the first `events` Nexmark events of the shared JSON-lines input to a file and,
/// round-robin over `partitions` subjects (`<stream>.<p>`), to `stream`: each partition is in
/// event-time order, the stream as a whole interleaves them.
fn nexmark_stream(stream: &TestStream, partitions: usize, events: usize, file: &Path) {
    let text = std::fs::read_to_string(nexmark_jsonl()).unwrap();
    let lines: Vec<String> = text.lines().take(events).map(str::to_owned).collect();
    std::fs::write(file, lines.join("\n") + "\n").unwrap();
    let messages: Vec<(String, String)> = lines
        .into_iter()
        .enumerate()
        .map(|(i, l)| ((i % partitions).to_string(), l))
        .collect();
    stream.publish(&messages);
}

/// A `jobs/nexmark/<query>-jsonl.yaml` job reading `stream` (four partitions) instead of its
/// file.
fn nexmark_nats_job(query: &str, server: &Server, stream: &TestStream) -> String {
    let text =
        std::fs::read_to_string(job_file(&format!("jobs/nexmark/{query}-jsonl.yaml"))).unwrap();
    let file_source = "    kind: jsonl\n    path: data/nexmark.jsonl\n";
    assert!(text.contains(file_source), "{query}: the file source moved");
    text.replace(
        file_source,
        &format!(
            "    kind: nats\n    servers: {}\n    stream: {}\n    subjects: '{}.{{partition}}'\n    \
             partitions: 4\n    stop-at: end\n",
            server.servers(),
            stream.name,
            stream.name
        ),
    )
}

/// `--set`s that make a query's sink publish to `<stream>.<query>` with `delivery`.
fn nats_sink(server: &Server, stream: &TestStream, query: &str, delivery: &str) -> Vec<String> {
    vec![format!(
        "sinks.out={{kind: nats, from: {query}, servers: '{}', subject: '{}.{query}', stream: \
         {}, delivery: {delivery}}}",
        server.servers(),
        stream.name,
        stream.name
    )]
}

/// The rows of a sink stream.
fn rows_of(stream: &TestStream) -> BTreeMap<String, usize> {
    multiset(
        stream
            .read_all()
            .into_iter()
            .map(|(_, _, payload)| serde_json::from_str::<Value>(&payload).unwrap()),
    )
}

/// `weir run` of a Nexmark query over a stream, as a child process checkpointing every
/// 200 ms (a checkpoint timeout of 20 s, so that the sink's duplicate-window check passes on
/// a stream with the server's default window of two minutes).
fn spawn_nexmark(job: &Path, data: &Path, parallelism: u32, sink: &[String]) -> Child {
    let mut cmd = weir(data);
    // The sink says at `info` when a repeated commit's messages were dropped as duplicates.
    cmd.env("RUST_LOG", "nats=info")
        .arg("run")
        .arg(job)
        .arg("--quiet")
        .args(["--from", "latest"])
        .args(["--set", &format!("parallelism={parallelism}")])
        .args(["--set", "checkpoint.interval=200ms"])
        .args(["--set", "checkpoint.timeout=20s"]);
    for s in sink {
        cmd.args(["--set", s]);
    }
    cmd.stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("weir runs")
}

/// How long an uninterrupted `weir run` of `job` takes, to its end (into a scratch stream).
fn calibrate(server: &Server, job: &Path, dir: &Path, query: &str) -> Duration {
    let scratch = server.stream("scratch");
    let sink = nats_sink(server, &scratch, query, "exactly-once");
    let started = Instant::now();
    finished(
        spawn_nexmark(job, &dir.join(format!("data-calibrate-{query}")), 2, &sink),
        &format!("{query}: the uninterrupted run"),
    );
    started.elapsed()
}

/// Per-partition watermarks make a stream whose partitions are each in event-time order read
/// as the ordered file does: no record is late, and the windows equal the file's.
#[test]
fn q5_and_q11_over_a_partitioned_stream_equal_the_same_queries_over_the_file() {
    let server = Server::any();
    let events = server.stream("events");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("events.jsonl");
    nexmark_stream(&events, 4, 40_000, &file);
    for query in ["q5", "q11"] {
        let expected = golden_jsonl(query, &file, dir.path());
        for parallelism in [1, 3] {
            let out = dir.path().join(format!("{query}-{parallelism}"));
            let path = job(
                dir.path(),
                &format!("{query}.yaml"),
                &nexmark_nats_job(query, &server, &events),
            );
            let summary = run_job(
                &path,
                &[
                    format!("parallelism={parallelism}"),
                    "sinks.out.kind=file".into(),
                    format!("sinks.out.path={}", out.display()),
                ],
            );
            let late: u64 = summary.nodes.iter().map(|n| n.late_dropped).sum();
            assert_eq!(late, 0, "{query} at parallelism {parallelism}: {summary:?}");
            assert_same_rows(
                &format!("{query} from NATS at parallelism {parallelism}"),
                &multiset(read_parts(&out)),
                &expected,
            );
        }
    }
}

/// The golden kill -9 test, NATS to NATS: q5 and q11 over a four-partition stream, SIGKILLs
/// at random points (seeded), each run resuming with `--from latest`, rescaling 2 → 1 → 2; the
/// output stream holds exactly the rows of the run over the file: the sequences in each
/// checkpoint make the source exactly-once, the message ids of each committed checkpoint make
/// the sink's repeated commits disappear into the duplicate window.
#[test]
fn nats_to_nats_is_exactly_once_across_kill9_and_rescale() {
    let server = Server::any();
    let events = server.stream("events");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("events.jsonl");
    nexmark_stream(&events, 4, 200_000, &file);
    for (query, seed) in [("q5", 7), ("q11", 11)] {
        let expected = golden_jsonl(query, &file, dir.path());
        let path = job(
            dir.path(),
            &format!("{query}.yaml"),
            &nexmark_nats_job(query, &server, &events),
        );
        let span = calibrate(&server, &path, dir.path(), query);
        let output = server.stream(&format!("out-{query}"));
        let sink = nats_sink(&server, &output, query, "exactly-once");
        let data = dir.path().join(format!("data-{query}"));
        let parallelism = [2, 1, 2];
        let window = span / 10..span / 2;
        let (logs, killed) = run_through_kills(query, seed, 3, window, |run| {
            spawn_nexmark(&path, &data, parallelism[run % 3], &sink)
        });
        assert!(
            killed >= 1,
            "{query}: no run was killed (a run takes {span:?})"
        );
        let repeats = logs.iter().filter(|l| l.contains("already stored")).count();
        eprintln!(
            "{query}: {killed} of 3 runs killed (a run takes {span:?}); {repeats} repeated \
             commits dropped as duplicates"
        );
        let got = rows_of(&output);
        if got != expected {
            eprintln!("{query}: logs of the runs:\n{}", logs.join("\n---\n"));
        }
        assert_same_rows(
            &format!("{query} from NATS into NATS through kills"),
            &got,
            &expected,
        );
    }
}

/// Waits for a child `weir run` and fails the test with its log if it failed.
fn finished(mut child: Child, what: &str) {
    let status = child.wait().unwrap();
    let mut stderr = String::new();
    if let Some(mut e) = child.stderr.take() {
        use std::io::Read;
        let _ = e.read_to_string(&mut stderr);
    }
    assert!(status.success(), "{what} failed:\n{stderr}");
}

/// The server restarts while a job reads from it and writes to it: the consumers are made
/// again at their positions, the commits are repeated, and the output stream holds exactly
/// the rows of the run over the file (exactly once); at least once, every row is there.
#[test]
fn a_server_restart_mid_run_loses_and_repeats_nothing() {
    let server = Server::own(None);
    let events = server.stream("events");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("events.jsonl");
    nexmark_stream(&events, 4, 200_000, &file);
    let expected = golden_jsonl("q5", &file, dir.path());
    let path = job(
        dir.path(),
        "q5.yaml",
        &nexmark_nats_job("q5", &server, &events),
    );
    let span = calibrate(&server, &path, dir.path(), "q5");
    for delivery in ["exactly-once", "at-least-once"] {
        let output = server.stream(&format!("out-{delivery}"));
        let sink = nats_sink(&server, &output, "q5", delivery);
        let mut child = spawn_nexmark(
            &path,
            &dir.path().join(format!("data-{delivery}")),
            2,
            &sink,
        );
        // Halfway through what an uninterrupted run takes: the job is reading and writing.
        std::thread::sleep(span / 2);
        assert!(
            child.try_wait().unwrap().is_none(),
            "the job ended before the restart (a run takes {span:?})"
        );
        server.restart();
        finished(
            child,
            &format!("q5 into NATS ({delivery}) across a server restart"),
        );
        let got = rows_of(&output);
        if delivery == "exactly-once" {
            assert_same_rows("q5 into NATS across a server restart", &got, &expected);
        } else {
            let missing: Vec<_> = expected.keys().filter(|k| !got.contains_key(*k)).collect();
            let foreign: Vec<_> = got.keys().filter(|k| !expected.contains_key(*k)).collect();
            assert!(
                missing.is_empty() && foreign.is_empty(),
                "at least once: lost {missing:?}, produced {foreign:?}"
            );
        }
    }
}

/// The exactly-once sink refuses a stream whose duplicate window cannot cover a repeated
/// commit, and says which settings would.
#[test]
fn the_sink_refuses_a_duplicate_window_shorter_than_a_repeat_can_take() {
    let server = Server::any();
    let short = server.stream_on(server.js(), "short", Duration::from_secs(5));
    let storage = tempfile::tempdir().unwrap();
    let plan = plan(
        &job_file("jobs/nexmark/q1.yaml"),
        &[
            "sources.nexmark.events=1000".into(),
            "checkpoint.interval=100ms".into(),
            format!("checkpoint.storage={}", storage.path().display()),
            format!(
                "sinks.out={{kind: nats, from: q1, servers: '{}', subject: '{}.q1'}}",
                server.servers(),
                short.name
            ),
        ],
    )
    .unwrap();
    let error = try_run_plan(&plan, true).unwrap_err();
    assert!(
        error.contains(&format!(
            "the stream `{}` keeps message ids for 5s",
            short.name
        )) && error.contains("10m 30s")
            && error.contains("checkpoint.timeout"),
        "{error}"
    );
    assert!(short.read_all().is_empty());
}

/// A server refuses a job whose NATS servers its operator did not list; a hosted, unbounded
/// NATS job on a server that lists them shows each partition's position, end and lag in its
/// API and in Prometheus' `weir_source_partition_lag`, and acknowledges the sequences of its
/// completed checkpoints to its `durable` consumers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hosted_job_reports_partition_lag_and_acknowledges_its_durable() {
    use crate::serve::{RelativeDir, app, app_with, call, wait_for};
    use axum::body::Body;
    use axum::http::StatusCode;

    let (server, stream) = tokio::task::spawn_blocking(|| {
        let server = Server::any();
        let stream = server.stream("lagged");
        let messages: Vec<(String, String)> = (0..900)
            .map(|i| ((i % 3).to_string(), format!("v{i}")))
            .collect();
        stream.publish(&messages);
        (server, stream)
    })
    .await
    .unwrap();
    let storage = RelativeDir::new("nats-lag");
    let text = format!(
        "name: nats-lag\nparallelism: 2\nsources:\n  in:\n    kind: nats\n    servers: {}\n    \
         stream: {}\n    subjects: '{}.{{partition}}'\n    partitions: 3\n    format: raw\n    \
         durable: weir-lag\nsinks:\n  out: {{kind: blackhole, from: in}}\ncheckpoint: {{interval: \
         100ms, storage: {}}}\n",
        server.servers(),
        stream.name,
        stream.name,
        storage.0
    );
    // A server reaches only the NATS servers its operator lists.
    let (_host, closed) = app(weir_http_ui::Access::open());
    let refused = call(&closed, "POST", "/api/v1/jobs", text.clone()).await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{}", refused.text);
    let allow = format!("nats://127.0.0.1:{}", server.port);
    assert!(
        refused.text.contains(&format!("--allow-endpoint {allow}"))
            && refused.text.contains("servers")
            && refused.text.contains("\"line\":6"),
        "{}",
        refused.text
    );
    let (_host, app) = app_with(
        weir_http_ui::Access::open(),
        weir_http_ui::HostConfig {
            sample_every: Duration::from_millis(50),
            endpoints: weir_http_ui::endpoints::Endpoints::default()
                .allow(&allow)
                .unwrap(),
            ..weir_http_ui::HostConfig::default()
        },
    );
    let submitted = call(&app, "POST", "/api/v1/jobs", text).await;
    assert_eq!(submitted.status, StatusCode::CREATED, "{}", submitted.text);
    let id = submitted.json()["id"].as_str().unwrap().to_owned();
    let uri = format!("/api/v1/jobs/{id}");

    // Message i went to partition i % 3 as stream sequence i + 1: partition p's last is
    // 898 + p, and each partition, read to its end, has no lag.
    let detail = wait_for(&app, &uri, |v| {
        let parts = v["nodes"][0]["partitions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        parts.len() == 3
            && parts.iter().all(|p| {
                p["lag"] == 0 && p["position"] == 899 + p["partition"].as_i64().unwrap_or(9)
            })
    })
    .await;
    let parts = detail["nodes"][0]["partitions"].as_array().unwrap();
    assert!(
        parts.iter().all(|p| p["topic"] == stream.name.as_str()
            && p["end"] == 901
            && p["subtask"].as_u64().unwrap() < 2),
        "{detail}"
    );
    let metrics = call(&app, "GET", "/metrics", Body::empty()).await.text;
    for p in 0..3 {
        let line = format!(
            "weir_source_partition_lag{{id=\"{id}\",job=\"nats-lag\",node=\"in\",topic=\"{}\",partition=\"{p}\"}} 0",
            stream.name
        );
        assert!(metrics.contains(&line), "no `{line}` in:\n{metrics}");
        let line = format!(
            "weir_source_partition_position{{id=\"{id}\",job=\"nats-lag\",node=\"in\",topic=\"{}\",partition=\"{p}\"}} {}",
            stream.name,
            899 + p
        );
        assert!(metrics.contains(&line), "no `{line}` in:\n{metrics}");
    }

    // A checkpoint completed after the reads acknowledges each partition's last message to
    // `weir-lag-<p>`.
    let js = stream.js.clone();
    let name = stream.name.clone();
    let floors = rt()
        .spawn(async move {
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                let mut floors = Vec::new();
                if let Ok(s) = js.get_stream(&name).await {
                    for p in 0..3 {
                        let floor = match s
                            .get_consumer::<jetstream::consumer::pull::Config>(&format!(
                                "weir-lag-{p}"
                            ))
                            .await
                        {
                            Ok(mut c) => c
                                .info()
                                .await
                                .map(|i| i.ack_floor.stream_sequence)
                                .unwrap_or(0),
                            Err(_) => 0,
                        };
                        floors.push(floor);
                    }
                }
                if floors == [898, 899, 900] || Instant::now() > deadline {
                    return floors;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
        .await
        .unwrap();
    assert_eq!(floors, [898, 899, 900]);

    let cancelled = call(&app, "POST", &format!("{uri}/cancel"), Body::empty()).await;
    assert_eq!(cancelled.status, StatusCode::ACCEPTED, "{}", cancelled.text);
    wait_for(&app, &uri, |v| v["state"] == "cancelled").await;
    tokio::task::spawn_blocking(move || drop((stream, server)))
        .await
        .unwrap();
}

/// A subject with `{expression}` parts sends each row to the subject its columns compute
/// (exactly once, through the duplicate window of the stream named with `stream`).
#[test]
fn rows_go_to_the_subjects_their_columns_compute() {
    let server = Server::any();
    let output = server.stream("computed");
    let golden_out = out_dir();
    let storage = tempfile::tempdir().unwrap();
    // A second of events at 20,000 a second: checkpoints every 100 ms commit along the way.
    let overrides = |sink: String| {
        vec![
            "sources.nexmark.events=20000".to_owned(),
            "sources.nexmark.rate=20000".to_owned(),
            "checkpoint.interval=100ms".to_owned(),
            "checkpoint.timeout=20s".to_owned(),
            format!("checkpoint.storage={}", storage.path().display()),
            sink,
        ]
    };
    run_job(
        &job_file("jobs/nexmark/q2.yaml"),
        &overrides(format!(
            "sinks.out={{kind: file, from: q2, path: {}}}",
            golden_out.path().display()
        )),
    );
    let expected = multiset(read_parts(golden_out.path()));
    assert!(!expected.is_empty());
    let plan = plan(
        &job_file("jobs/nexmark/q2.yaml"),
        &overrides(format!(
            "sinks.out={{kind: nats, from: q2, servers: '{}', subject: '{}.{{auction % 3}}.bid', \
             stream: {}}}",
            server.servers(),
            output.name,
            output.name
        )),
    )
    .unwrap();
    let summary = try_run_plan(&plan, true).unwrap();
    assert!(summary.checkpoints > 0, "{summary:?}");
    let stored = output.read_all();
    for (subject, _, payload) in &stored {
        let row: Value = serde_json::from_str(payload).unwrap();
        let auction = row["auction"].as_i64().unwrap();
        assert_eq!(subject, &format!("{}.{}.bid", output.name, auction % 3));
    }
    assert_same_rows(
        "q2 into computed subjects",
        &multiset(
            stored
                .iter()
                .map(|(_, _, p)| serde_json::from_str::<Value>(p).unwrap()),
        ),
        &expected,
    );
}

/// A stream partitioned by the server's own subject mapping (`partition(3, 1)` of the key
/// token, NATS's deterministic hash) is read as three partitions: every message once, each
/// key always in one partition.
#[test]
fn a_stream_partitioned_by_a_subject_mapping_is_read_as_its_partitions() {
    let server = Server::own(Some(
        "mappings = {\n  \"keyed.*\": \"keyed.{{partition(3,1)}}.{{wildcard(1)}}\"\n}\n",
    ));
    let js = server.js();
    let config = jetstream::stream::Config {
        name: "keyed".into(),
        subjects: vec!["keyed.>".into()],
        ..Default::default()
    };
    let created = js.clone();
    rt().block_on(async move { created.create_stream(config).await.unwrap() });
    let stream = TestStream {
        js,
        name: "keyed".into(),
    };
    // Published to `keyed.<key>`: the server maps each to `keyed.<partition>.<key>`.
    let publisher = stream.js.clone();
    rt().block_on(async move {
        for i in 0..600 {
            publisher
                .publish(
                    format!("keyed.k{}", i % 20),
                    json!({"id": i}).to_string().into(),
                )
                .await
                .unwrap()
                .await
                .unwrap();
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let out = out_dir();
    let file = job(
        dir.path(),
        "job.yaml",
        &format!(
            "name: nats-mapped\nparallelism: 2\nsources:\n  in:\n    kind: nats\n    servers: {}\n    \
             stream: keyed\n    subjects: 'keyed.{{partition}}.*'\n    partitions: 3\n    \
             stop-at: end\n    schema: {{id: int}}\n    metadata: {{s: subject, p: partition}}\n\
             sinks:\n  out:\n    kind: file\n    from: in\n    path: {}\n",
            server.servers(),
            out.path().display()
        ),
    );
    run_job(&file, &[]);
    let rows = read_parts(out.path());
    let mut ids: Vec<i64> = rows.iter().map(|r| r["id"].as_i64().unwrap()).collect();
    ids.sort_unstable();
    assert_eq!(ids, (0..600).collect::<Vec<_>>());
    let mut partition_of_key: BTreeMap<String, i64> = BTreeMap::new();
    for r in &rows {
        let subject = r["s"].as_str().unwrap();
        let tokens: Vec<&str> = subject.split('.').collect();
        assert_eq!(tokens.len(), 3, "{subject}");
        assert_eq!(tokens[1], r["p"].to_string(), "{r}");
        let p = r["p"].as_i64().unwrap();
        assert_eq!(
            *partition_of_key.entry(tokens[2].to_owned()).or_insert(p),
            p,
            "{r}"
        );
    }
    let used: std::collections::BTreeSet<i64> = partition_of_key.values().copied().collect();
    assert!(
        used.len() > 1,
        "20 keys all in one partition: {partition_of_key:?}"
    );
}

/// A message read back with the headers the exactly-once sink writes: payload, message id,
/// and the version a consumer orders one key's updates by (`Weir-Checkpoint`,
/// `Weir-Sequence`).
struct Versioned {
    payload: Value,
    id: String,
    version: (u64, u64),
}

impl TestStream {
    /// Every message of the stream with its weir headers, in stream order.
    fn read_versioned(&self) -> Vec<Versioned> {
        self.read_messages()
            .into_iter()
            .map(|m| {
                let headers = m.headers.clone().expect("weir's messages carry headers");
                // By the name as written: a name the client knows (`Nats-Msg-Id`) is not
                // found again by its text through `get`.
                let header = |name: &str| -> String {
                    headers
                        .iter()
                        .find(|(k, _)| k.to_string() == name)
                        .and_then(|(_, v)| v.first())
                        .unwrap_or_else(|| panic!("no {name} header"))
                        .as_str()
                        .to_owned()
                };
                Versioned {
                    payload: serde_json::from_slice(&m.payload).unwrap(),
                    id: header("Nats-Msg-Id"),
                    version: (
                        header("Weir-Checkpoint").parse().unwrap(),
                        header("Weir-Sequence").parse().unwrap(),
                    ),
                }
            })
            .collect()
    }
}

/// Records of the broker-fault tests: `key` (of `keys`), `n` (its position) and `ts` (event
/// time, 5 ms apart), round-robin over four partitions (`<stream>.<p>`), each partition in
/// event-time order. Returns them as (key, ts).
fn keyed_records(stream: &TestStream, records: usize, keys: u64) -> Vec<(u64, i64)> {
    let base = 1_700_000_000_000i64;
    let rows: Vec<(u64, i64)> = (0..records)
        .map(|i| (i as u64 * 7919 % keys, base + i as i64 * 5))
        .collect();
    let messages: Vec<(String, String)> = rows
        .iter()
        .enumerate()
        .map(|(i, (key, ts))| {
            (
                (i % 4).to_string(),
                json!({"key": key, "n": i, "ts": ts}).to_string(),
            )
        })
        .collect();
    stream.publish(&messages);
    rows
}

/// A job over [`keyed_records`]: per key a running total (`aggregate`, an upsert stream) and a
/// count per one-second tumbling window, each into an exactly-once NATS sink (`<out>.totals`,
/// `<out>.windows`).
fn keyed_job(server: &Server, input: &TestStream, out: &TestStream, extra: &str) -> String {
    format!(
        r#"name: keyed-{out}
parallelism: 2
sources:
  in:
    kind: nats
    servers: '{servers}'
    stream: {input}
    subjects: '{input}.{{partition}}'
    partitions: 4
    stop-at: end
    schema: {{key: int, n: int, ts: timestamp}}
    event-time: {{column: ts}}
transforms:
  by-key: {{kind: key-by, from: in, keys: [key]}}
  totals:
    kind: aggregate
    from: by-key
    aggregates: {{total: count(*)}}
  windows:
    kind: window-aggregate
    from: by-key
    time: ts
    window: {{type: tumbling, size: 1s}}
    aggregates: {{num: count(*)}}
sinks:
  totals-out:
    kind: nats
    from: totals
    servers: '{servers}'
    subject: '{out}.totals'
    stream: {out}
    delivery: exactly-once
{extra}  windows-out:
    kind: nats
    from: windows
    servers: '{servers}'
    subject: '{out}.windows'
    stream: {out}
    delivery: exactly-once
{extra}checkpoint:
  interval: 200ms
  timeout: 5s
restart:
  strategy: exponential-delay
  delay: 100ms
  max-delay: 1s
  max-attempts: 1000
"#,
        servers = server.servers(),
        input = input.name,
        out = out.name,
    )
}

/// Checks the output of [`keyed_job`] against a naive computation over `rows`: every window
/// count once; per key, the running totals in the order of their version strictly increase
/// (no update reordered, none repeated), the last equals the key's count; no message id twice.
fn check_keyed_output(what: &str, out: &TestStream, rows: &[(u64, i64)]) {
    let mut counts: BTreeMap<u64, i64> = BTreeMap::new();
    let mut expected_windows: BTreeMap<(u64, i64), i64> = BTreeMap::new();
    for (key, ts) in rows {
        *counts.entry(*key).or_default() += 1;
        *expected_windows
            .entry((*key, ts - ts.rem_euclid(1000)))
            .or_default() += 1;
    }
    let messages = out.read_versioned();
    let mut ids = std::collections::HashSet::new();
    // Per key: (version, running total) of each update.
    type Updates = Vec<((u64, u64), i64)>;
    let mut totals: BTreeMap<u64, Updates> = BTreeMap::new();
    let mut got_windows: BTreeMap<(u64, i64), Vec<i64>> = BTreeMap::new();
    for m in &messages {
        assert!(
            ids.insert(m.id.clone()),
            "{what}: message id {} twice",
            m.id
        );
        let key = m.payload["key"].as_u64().unwrap();
        if let Some(total) = m.payload.get("total") {
            totals
                .entry(key)
                .or_default()
                .push((m.version, total.as_i64().unwrap()));
        } else {
            let start = m.payload["window_start"].as_i64().unwrap();
            got_windows
                .entry((key, start))
                .or_default()
                .push(m.payload["num"].as_i64().unwrap());
        }
    }
    let wrong: Vec<_> = expected_windows
        .iter()
        .filter(|(k, n)| got_windows.get(k).map(Vec::as_slice) != Some(&[**n][..]))
        .take(5)
        .collect();
    assert!(
        wrong.is_empty() && got_windows.len() == expected_windows.len(),
        "{what}: windows differ from the naive counts ({} expected, {} got): {wrong:?}",
        expected_windows.len(),
        got_windows.len()
    );
    assert_eq!(totals.len(), counts.len(), "{what}: keys with totals");
    for (key, mut updates) in totals {
        updates.sort_by_key(|(version, _)| *version);
        let values: Vec<i64> = updates.iter().map(|(_, t)| *t).collect();
        assert!(
            values.windows(2).all(|w| w[0] < w[1]),
            "{what}: key {key}'s totals in version order do not increase: {values:?}"
        );
        assert_eq!(
            values.last().copied(),
            counts.get(&key).copied(),
            "{what}: key {key}'s last total"
        );
    }
}

/// `weir run` of `job` as a child process, resuming the latest checkpoint of `data`.
fn spawn_job(job: &Path, data: &Path) -> Child {
    let mut cmd = weir(data);
    cmd.env(
        "RUST_LOG",
        "warn,nats=info,weir_checkpoint=info,weir_runtime=info",
    )
    .arg("run")
    .arg(job)
    .arg("--quiet")
    .args(["--from", "latest"]);
    cmd.stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("weir runs")
}

/// What a run's log says first, for a run that did not end (CI shows a failure's output cut
/// short): how many restarts and checkpoints, the warnings and errors, then the last lines.
fn digest(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    let noted: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| l.contains("WARN") || l.contains("ERROR"))
        .collect();
    format!(
        "{} restarts, {} snapshots complete, {} lines; warnings and errors (last 30):\n{}\nlast 40 lines:\n{}",
        log.matches("restarting after a failure").count(),
        log.matches("snapshot complete").count(),
        lines.len(),
        noted[noted.len().saturating_sub(30)..].join("\n"),
        lines[lines.len().saturating_sub(40)..].join("\n")
    )
}

/// Waits for a child `weir run` with a bound: its log, and whether it succeeded.
fn wait_bounded(mut child: Child, bound: Duration, what: &str) -> (bool, String) {
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > bound {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "{what}: still running after {bound:?}:\n{}",
                digest(&String::from_utf8_lossy(&out.stderr))
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The broker fails, not weir: the NATS server is stopped (or killed) at random points, several
/// times in a run, for a random while, inside and between commits. Each time the job restarts
/// from the newest checkpoint complete on storage (never from scratch, whatever its count of
/// completed checkpoints says) and commits it again: every window count lands once, and each
/// key's running totals, read in the order of their version headers, go up one update at a
/// time to the key's count.
#[test]
fn a_broker_stopped_at_random_points_mid_commit_loses_repeats_and_reorders_nothing() {
    let server = Server::own(None);
    let input = server.stream("keyed-in");
    let rows = keyed_records(&input, 120_000, 500);
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng(0x005e_ed43);
    for round in 0..2 {
        let out = server.stream(&format!("keyed-out-{round}"));
        let path = job(
            dir.path(),
            &format!("keyed-{round}.yaml"),
            &keyed_job(&server, &input, &out, ""),
        );
        let data = dir.path().join(format!("data-{round}"));
        let mut child = spawn_job(&path, &data);
        let mut stops = 0;
        for _ in 0..3 {
            std::thread::sleep(Duration::from_millis(rng.between(200, 1200)));
            if child.try_wait().unwrap().is_some() {
                break;
            }
            if rng.between(0, 2) == 0 {
                server.stop();
            } else {
                script(SCRIPT, &["kill", &server.dir()]);
            }
            stops += 1;
            std::thread::sleep(Duration::from_millis(rng.between(300, 3000)));
            server.start();
        }
        let (ok, log) = wait_bounded(child, Duration::from_secs(240), "the job");
        assert!(ok, "round {round}: the job failed:\n{log}");
        assert!(
            stops >= 1,
            "round {round}: the job ended before the broker stopped"
        );
        eprintln!(
            "round {round}: broker stopped {stops} times; {} restarts",
            log.matches("restarting after a failure").count()
        );
        check_keyed_output(&format!("round {round}"), &out, &rows);
    }
}

/// Two commits of one sink used to run at once (a periodic checkpoint's and the final one's)
/// and wait for each other's share of the client's in-flight budget: runs hung for the whole
/// checkpoint timeout. A hundred small runs, each with a budget far below a commit's size, all
/// end promptly with every row.
#[test]
fn a_hundred_small_runs_end_promptly_with_every_row() {
    let server = Server::any();
    let input = server.stream("small-in");
    let rows = keyed_records(&input, 2_000, 50);
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    for run in 0..100 {
        let out = server.stream("small-out");
        let text = keyed_job(&server, &input, &out, "    max-in-flight: 16\n")
            .replace("interval: 200ms", "interval: 20ms")
            .replace("timeout: 5s", "timeout: 60s");
        let path = job(dir.path(), &format!("small-{run}.yaml"), &text);
        let data = dir.path().join(format!("data-{run}"));
        // A hang waits out the 60 s checkpoint timeout: 20 s is far from both.
        let (ok, log) = wait_bounded(
            spawn_job(&path, &data),
            Duration::from_secs(20),
            &format!("run {run}"),
        );
        assert!(ok, "run {run} failed:\n{log}");
        check_keyed_output(&format!("run {run}"), &out, &rows);
    }
    eprintln!("100 runs in {:?}", started.elapsed());
}

/// A commit repeated after the stream's duplicate window has passed (a job resumed long after
/// it failed mid-commit) stores nothing twice: the commit markers say what was stored whole,
/// and an interrupted commit's stored messages are found in the stream and not published
/// again.
#[test]
fn a_resume_after_the_duplicate_window_repeats_nothing() {
    let server = Server::own(None);
    let input = server.stream("late-in");
    let rows = keyed_records(&input, 60_000, 300);
    let dir = tempfile::tempdir().unwrap();
    let window = Duration::from_secs(2);
    let mut rng = Rng(0x1a7e);
    // What an uninterrupted run takes: the broker goes between a tenth and a half of it.
    let span = {
        let scratch = server.stream_on(server.js(), "late-scratch", window);
        let text = keyed_job(&server, &input, &scratch, "")
            .replace("timeout: 5s", "timeout: 1s")
            .replace("max-delay: 1s", "max-delay: 500ms");
        let path = job(dir.path(), "late-scratch.yaml", &text);
        let started = Instant::now();
        let (ok, log) = wait_bounded(
            spawn_job(&path, &dir.path().join("data-scratch")),
            Duration::from_secs(120),
            "the uninterrupted run",
        );
        assert!(ok, "the uninterrupted run failed:\n{log}");
        started.elapsed().as_millis() as u64
    };
    for round in 0..3 {
        let out = server.stream_on(server.js(), &format!("late-out-{round}"), window);
        let text = keyed_job(&server, &input, &out, "")
            .replace("timeout: 5s", "timeout: 1s")
            .replace("max-delay: 1s", "max-delay: 500ms");
        let path = job(dir.path(), &format!("late-{round}.yaml"), &text);
        let data = dir.path().join(format!("data-{round}"));
        let mut child = spawn_job(&path, &data);
        std::thread::sleep(Duration::from_millis(rng.between(span / 10, span / 2)));
        if let Some(status) = child.try_wait().unwrap() {
            let out = child.wait_with_output().unwrap();
            panic!(
                "round {round}: the first run ended ({status}) before the broker went:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        // The broker goes mid-run (a commit in flight fails, and every restart after it), then
        // weir is killed while it is gone: the latest checkpoint holds commits not all stored.
        script(SCRIPT, &["kill", &server.dir()]);
        std::thread::sleep(Duration::from_millis(rng.between(100, 800)));
        let _ = child.kill();
        let _ = child.wait();
        // Twice the duplicate window later, the broker and the job are back.
        std::thread::sleep(window * 2 + Duration::from_millis(500));
        server.start();
        // A resume does what the uninterrupted run did, and a restore: what takes far longer
        // is a hang (the bound scales with the run because CI shares the cores with brokers).
        let (ok, log) = wait_bounded(
            spawn_job(&path, &data),
            Duration::from_millis(span * 8).max(Duration::from_secs(120)),
            "the resume",
        );
        assert!(ok, "round {round}: the resumed job failed:\n{log}");
        eprintln!(
            "round {round}: {} interrupted commits read back from the stream, {} repeats dropped as duplicates",
            log.matches("were stored before the commit was interrupted")
                .count(),
            log.matches("already stored").count()
        );
        check_keyed_output(&format!("round {round}"), &out, &rows);
    }
}

/// The NATS sink under the sink conformance suite: visible output is the stream's messages.
struct NatsStream<'a> {
    server: &'a Server,
    stream: &'a TestStream,
}

impl weir_runtime::testing::sink_conformance::SinkUnderTest for NatsStream<'_> {
    fn factory(&self) -> std::sync::Arc<dyn weir_runtime::api::SinkFactory> {
        use weir_runtime::api::connector::{SinkConnector, SinkContext};
        let spec: weir_runtime::spec::NatsSinkSpec = serde_json::from_value(json!({
            "from": "in",
            "servers": self.server.servers(),
            "subject": format!("{}.out", self.stream.name),
            "stream": self.stream.name,
            "commit-markers": format!("conformance_{}", std::process::id()),
        }))
        .unwrap();
        let cx = SinkContext {
            job: "conformance",
            node: "out",
            repeat_within: Duration::from_secs(60),
        };
        spec.plan(&weir_runtime::testing::sink_conformance::schema(), cx)
            .unwrap()
    }

    fn visible(&self) -> futures::future::BoxFuture<'_, Vec<Value>> {
        Box::pin(async move {
            read_stream(self.stream.js.clone(), self.stream.name.clone())
                .await
                .into_iter()
                .map(|m| serde_json::from_slice(&m.payload).unwrap())
                .collect()
        })
    }
}

/// The sink conformance suite (crash before and after pre-commit, restore commits once, a
/// repeated commit is a no-op, an abort leaves nothing visible) against a real server.
#[test]
fn the_nats_sink_conforms() {
    let server = Server::any();
    let stream = server.stream("conformance");
    rt().block_on(weir_runtime::testing::sink_conformance::run(&NatsStream {
        server: &server,
        stream: &stream,
    }));
}

/// Exactly once, a commit's round trips do not grow with its size (2026-12-06: the latency
/// through an exactly-once job grew with the run's length, and a commit's cost per message
/// was the first suspect). Two writers commit three checkpoints of 1,000 rows each, with a
/// window of 64 publishes in flight: each writer's marker is read from the bucket once and
/// written twice per transaction (begun, stored), each transaction waits for its
/// acknowledgements once, at its end, and the window fills (the publishes are pipelined, not
/// acknowledged one by one). A repeated commit touches nothing.
#[test]
fn a_commit_pipelines_its_publishes_and_touches_its_marker_a_fixed_number_of_times() {
    use weir_runtime::api::{SinkFactory, SubtaskContext, two_phase::TwoPhaseFactory};
    use weir_runtime::connectors::nats::sink::{NatsSinkFactory, Subjects};

    let server = Server::any();
    let stream = server.stream("commit-cost");
    let spec: weir_runtime::spec::NatsSinkSpec = serde_json::from_value(json!({
        "from": "in",
        "servers": server.servers(),
        "subject": format!("{}.out", stream.name),
        "stream": stream.name,
        "max-in-flight": 64,
        "commit-markers": format!("commit_cost_{}", std::process::id()),
    }))
    .unwrap();
    let factory = TwoPhaseFactory(NatsSinkFactory::new(
        &spec,
        Subjects::Literal(format!("{}.out", stream.name)),
        "commit-cost",
        "out",
        Duration::from_secs(60),
    ));
    let schema = weir_runtime::testing::sink_conformance::schema();
    let (writers, checkpoints, rows) = (2usize, 3u64, 1_000i64);
    rt().block_on(async {
        factory.prepare(writers, None).await.expect("prepare");
        let mut sinks: Vec<_> = (0..writers)
            .map(|subtask| {
                factory
                    .create(&SubtaskContext {
                        subtask,
                        parallelism: writers,
                        batch_size: 1024,
                        metrics: Default::default(),
                        want: Vec::new(),
                        restore: None,
                        attempt: 0,
                        checkpoint_base: 0,
                        checkpointing: true,
                        state: None,
                    })
                    .expect("a subtask's sink")
            })
            .collect();
        let mut previous = Vec::new();
        for checkpoint in 1..=checkpoints {
            let mut states = Vec::new();
            for (w, sink) in sinks.iter_mut().enumerate() {
                let first = (checkpoint as i64 * writers as i64 + w as i64) * rows;
                let batch: Vec<Value> = (first..first + rows)
                    .map(|i| json!({"id": i, "name": format!("row {i}")}))
                    .collect();
                sink.write(weir_runtime::testing::batch(&schema, &batch))
                    .await
                    .expect("write");
                states.extend(
                    sink.prepare_commit(checkpoint, checkpoint - 1)
                        .await
                        .expect("pre-commit"),
                );
            }
            factory.commit(states.clone()).await.expect("commit");
            previous = states;
        }
        let before = factory.0.commit_stats();
        factory.commit(previous).await.expect("a repeated commit");
        assert_eq!(
            factory.0.commit_stats(),
            before,
            "a repeated commit made round trips"
        );
    });
    let transactions = writers as u64 * checkpoints;
    let stats = factory.0.commit_stats();
    assert_eq!(stats.transactions, transactions);
    assert_eq!(stats.messages, transactions * rows as u64);
    assert_eq!(
        stats.marker_reads, writers as u64,
        "a marker is read once per writer and lineage, not per commit: {stats:?}"
    );
    assert_eq!(
        stats.marker_writes,
        2 * transactions,
        "a marker is written twice per transaction, not per message: {stats:?}"
    );
    assert_eq!(
        stats.drains, transactions,
        "a transaction waits for its acknowledgements once: {stats:?}"
    );
    assert_eq!(
        stats.peak_in_flight, 64,
        "the publishes fill the window of max-in-flight: {stats:?}"
    );
    assert_eq!(stream.read_all().len(), 6_000, "every row once");
}

/// An updating query's table published as Debezium events (at parallelism 2) and read back by
/// a NATS source of `debezium-json`: the changelog it reads builds the naive table.
#[test]
fn an_updating_query_published_as_debezium_events_reads_back_as_its_table() {
    let server = Server::any();
    let stream = server.stream("changes");
    let dir = tempfile::tempdir().unwrap();
    let (input, query, expected) = crate::support::counts_having(dir.path(), 3000, 29, 4);
    let write = job(
        dir.path(),
        "write.yaml",
        &format!(
            "name: nats-write-changes\nparallelism: 2\nsources:\n  \
             src: {{kind: jsonl, path: {}, schema: {{k: int, x: int}}}}\n\
             transforms:\n  \
             counts:\n    kind: sql\n    \
             query: {query}\n\
             sinks:\n  \
             dz:\n    kind: nats\n    from: counts\n    servers: {}\n    subject: {}.out\n    \
             format: debezium-json\n    delivery: at-least-once\n",
            input.display(),
            server.servers(),
            stream.name,
        ),
    );
    run_job(&write, &[]);
    let out = out_dir();
    let read = job(
        dir.path(),
        "read.yaml",
        &format!(
            "name: nats-read-changes\nsources:\n  \
             dz:\n    kind: nats\n    servers: {}\n    stream: {}\n    stop-at: end\n    \
             format: debezium-json\n    key: [k]\n    schema: {{k: int, n: int, m: int}}\n\
             sinks:\n  out: {{kind: file, from: dz, path: {}, format: changelog-json}}\n",
            server.servers(),
            stream.name,
            out.path().display(),
        ),
    );
    run_job(&read, &[]);
    assert_eq!(
        crate::support::changelog_table(&read_parts(out.path()), "k"),
        expected
    );
}
