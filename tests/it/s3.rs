//! Checkpoints on a real S3-compatible server: each test starts moto_server of its own
//! (`scripts/s3-server.sh`: a free loopback port, installed if missing) and stops it when done.
//! Tests that count requests or inject faults talk to it through [`Proxy`], a small HTTP proxy
//! of the test's own: it sees every request the storage makes (the counts are independent of
//! weir's own counters) and can answer `503` or stall before forwarding.
//!
//! - Exactly once through SIGKILLs with checkpoints on S3, restoring at the same and at another
//!   parallelism: output equal to the golden run.
//! - Operator state of 101–510 subtasks laid out contiguously: zero seeks and one GET per
//!   merged file; laid out with gaps: exactly one seek and one more GET per large gap.
//! - Faults: failing and slow requests are retried; an incomplete checkpoint (no metadata) is
//!   never restored; corrupt and truncated objects are detected by checksum; retention keeps
//!   the shared files a retained checkpoint uses; bad URLs and unreachable stores are errors
//!   that name the location.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use weir_checkpoint::catalog::JobCheckpoints;
use weir_checkpoint::fixtures;
use weir_checkpoint::metadata::{SnapshotKind, StateRange, checksum};
use weir_checkpoint::reader::ReaderConfig;
use weir_checkpoint::restore::Restored;
use weir_checkpoint::{CheckpointStorage, ObjectStorage, RestoreError, StorageConfig};

use crate::recovery::{Rng, committed_rows, run_through_kills, weir};
use crate::support::{
    assert_same_rows, free_port, job_file, multiset, plan, run_job, script, script_quietly,
    try_run_plan,
};

/// A moto_server of the test's own, stopped on drop.
pub(crate) struct S3Server {
    dir: tempfile::TempDir,
    port: u16,
}

/// The bucket every test uses.
const BUCKET: &str = "weir";
/// Starts and stops the servers.
const S3_SERVER: &str = "scripts/s3-server.sh";

impl S3Server {
    pub(crate) fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        script(
            S3_SERVER,
            &[
                "start",
                &dir.path().display().to_string(),
                &port.to_string(),
                BUCKET,
            ],
        );
        Self { dir, port }
    }

    pub(crate) fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    /// The environment a `weir` child process reaches the server with.
    pub(crate) fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ENDPOINT", self.endpoint()),
            ("AWS_ALLOW_HTTP", "true".into()),
            ("AWS_ACCESS_KEY_ID", "test".into()),
            ("AWS_SECRET_ACCESS_KEY", "test".into()),
            ("AWS_REGION", "us-east-1".into()),
        ]
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        script_quietly(S3_SERVER, &["stop", &self.dir.path().display().to_string()]);
    }
}

/// Storage at `url` on `endpoint`, with test credentials.
fn config(endpoint: &str, url: &str) -> StorageConfig {
    StorageConfig {
        url: url.into(),
        endpoint: Some(endpoint.into()),
        region: Some("us-east-1".into()),
        access_key_id: Some("test".into()),
        secret_access_key: Some("test".into()),
        allow_http: Some(true),
        request_timeout: None,
        max_retries: None,
    }
}

fn storage(config: &StorageConfig) -> Arc<dyn CheckpointStorage> {
    Arc::new(ObjectStorage::s3(config).unwrap())
}

/// A request the proxy saw.
#[derive(Clone, Debug)]
struct Seen {
    method: String,
    path: String,
    /// Answered `503` by the proxy instead of forwarded.
    failed: bool,
}

#[derive(Default)]
struct ProxyState {
    upstream: u16,
    seen: Mutex<Vec<Seen>>,
    /// Answer this many of the next requests of a method with `503`.
    fail: Mutex<Option<(String, u32)>>,
    /// Hold this many of the next requests of a method this long before forwarding.
    stall: Mutex<Option<(String, u32, Duration)>>,
    stop: AtomicBool,
    /// The store is "down": every request's connection is closed unanswered.
    down: AtomicBool,
    connections: Mutex<Vec<JoinHandle<()>>>,
}

/// An HTTP proxy in front of the server, one request per connection.
pub(crate) struct Proxy {
    port: u16,
    state: Arc<ProxyState>,
    accept: Option<JoinHandle<()>>,
}

impl Proxy {
    pub(crate) fn start(upstream: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(ProxyState {
            upstream,
            ..ProxyState::default()
        });
        let accepting = state.clone();
        let accept = std::thread::spawn(move || {
            for client in listener.incoming() {
                if accepting.stop.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(client) = client else { continue };
                let state = accepting.clone();
                let handle = std::thread::spawn(move || {
                    let _ = serve(client, &state);
                });
                accepting.connections.lock().unwrap().push(handle);
            }
        });
        Self {
            port,
            state,
            accept: Some(accept),
        }
    }

    pub(crate) fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub(crate) fn fail_next(&self, method: &str, n: u32) {
        *self.state.fail.lock().unwrap() = Some((method.into(), n));
    }

    fn stall_next(&self, method: &str, n: u32, by: Duration) {
        *self.state.stall.lock().unwrap() = Some((method.into(), n, by));
    }

    /// Takes the store away (every connection closed unanswered) or brings it back.
    pub(crate) fn set_down(&self, down: bool) {
        self.state.down.store(down, Ordering::SeqCst);
    }

    fn seen(&self) -> Vec<Seen> {
        self.state.seen.lock().unwrap().clone()
    }

    fn clear(&self) {
        self.state.seen.lock().unwrap().clear();
    }

    /// Requests of `method` whose path contains `part`.
    fn count(&self, method: &str, part: &str) -> usize {
        self.seen()
            .iter()
            .filter(|s| s.method == method && s.path.contains(part))
            .count()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(a) = self.accept.take() {
            let _ = a.join();
        }
        for c in self.state.connections.lock().unwrap().drain(..) {
            let _ = c.join();
        }
    }
}

/// Serves one request of `client`: answers 503, or (after a stall) forwards it and copies the
/// answer back. The forwarded request asks the server to close the connection after
/// answering, so the answer ends where the server's stream does.
fn serve(client: TcpStream, state: &ProxyState) -> std::io::Result<()> {
    if state.down.load(Ordering::SeqCst) {
        return Ok(());
    }
    client.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut reader = BufReader::new(client.try_clone()?);
    let mut head = Vec::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Ok(());
        }
        if line == "\r\n" {
            break;
        }
        head.push(line);
    }
    let Some(request_line) = head.first().cloned() else {
        return Ok(());
    };
    let mut parts = request_line.split(' ');
    let method = parts.next().unwrap_or_default().to_string();
    let path = parts.next().unwrap_or_default().to_string();
    let length: usize = head
        .iter()
        .find_map(|h| {
            let (name, value) = h.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().ok())?
        })
        .unwrap_or(0);
    let mut body = vec![0u8; length];
    reader.read_exact(&mut body)?;
    let fail = {
        let mut slot = state.fail.lock().unwrap();
        match slot.as_mut() {
            Some((m, n)) if *m == method && *n > 0 => {
                *n -= 1;
                true
            }
            _ => false,
        }
    };
    state.seen.lock().unwrap().push(Seen {
        method: method.clone(),
        path,
        failed: fail,
    });
    let mut client = client;
    if fail {
        client.write_all(
            b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        )?;
        return Ok(());
    }
    let stall = {
        let mut slot = state.stall.lock().unwrap();
        match slot.as_mut() {
            Some((m, n, by)) if *m == method && *n > 0 => {
                *n -= 1;
                Some(*by)
            }
            _ => None,
        }
    };
    if let Some(d) = stall {
        std::thread::sleep(d);
    }
    let mut upstream = TcpStream::connect(("127.0.0.1", state.upstream))?;
    let mut out = Vec::new();
    for h in &head {
        if !h.to_ascii_lowercase().starts_with("connection:") {
            out.extend_from_slice(h.as_bytes());
        }
    }
    out.extend_from_slice(b"Connection: close\r\n\r\n");
    out.extend_from_slice(&body);
    upstream.write_all(&out)?;
    std::io::copy(&mut upstream, &mut client)?;
    Ok(())
}

/// Writes checkpoint `id` of job `j` with the operator state of `n` subtasks of one node:
/// merged files of about `file_target` bytes, and `gap` unreferenced bytes before each state
/// whose index is in `gaps_before`. Returns the states and the number of merged files.
async fn write_snapshot(
    catalog: &JobCheckpoints,
    id: u64,
    n: usize,
    file_target: usize,
    gaps_before: &[usize],
    gap: usize,
) -> (Vec<Vec<u8>>, usize) {
    let mut rng = Rng(0x5eed ^ n as u64);
    let mut files: Vec<Vec<u8>> = vec![Vec::new()];
    let mut states = Vec::new();
    let mut ranges = Vec::new();
    for i in 0..n {
        let state: Vec<u8> = (0..rng.between(20, 220))
            .map(|_| rng.between(0, 256) as u8)
            .collect();
        if files.last().unwrap().len() >= file_target {
            files.push(Vec::new());
        }
        let file = files.len() - 1;
        if gaps_before.contains(&i) {
            files[file].extend(std::iter::repeat_n(0xee, gap));
        }
        ranges.push(StateRange {
            file: file as u32,
            offset: files[file].len() as u64,
            length: state.len() as u64,
            xxh3: checksum(&state),
        });
        files[file].extend_from_slice(&state);
        states.push(state);
    }
    let count = files.len();
    fixtures::publish_operator_state(catalog, id, files, ranges)
        .await
        .unwrap();
    (states, count)
}

/// The operator states a restore read, by subtask.
fn states_of(restored: &Restored) -> Vec<Vec<u8>> {
    restored
        .operator_states("source")
        .into_iter()
        .map(|(_, b)| b.to_vec())
        .collect()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn contiguous_operator_state_restores_with_no_seek_and_one_get_per_merged_file() {
    let server = S3Server::start();
    let proxy = Proxy::start(server.port);
    let catalog = JobCheckpoints::new(
        storage(&config(&proxy.endpoint(), "s3://weir/contiguous")),
        "j",
    );
    runtime().block_on(async {
        for (id, n) in [101, 203, 307, 409, 510].into_iter().enumerate() {
            // About 120 bytes a state: two or three merged files of 24 KB.
            let (states, files) = write_snapshot(&catalog, id as u64 + 1, n, 24_000, &[], 0).await;
            proxy.clear();
            let restored =
                Restored::open(catalog.snapshot(SnapshotKind::Checkpoint, id as u64 + 1))
                    .await
                    .unwrap();
            assert_eq!(states_of(&restored), states, "{n} offsets");
            let s = &restored.stats;
            assert_eq!(s.ranges, n as u64);
            assert_eq!(s.seeks_performed, 0, "{n} offsets: {s:?}");
            assert_eq!(s.seeks_skipped, n as u64);
            assert_eq!(
                s.requests, files as u64,
                "{n} offsets: one request per file"
            );
            assert_eq!(
                proxy.count("GET", "operator-state"),
                files,
                "{n} offsets: the server saw one GET per merged file"
            );
        }
    });
}

#[test]
fn operator_state_with_gaps_costs_one_seek_and_one_get_per_large_gap() {
    let server = S3Server::start();
    let proxy = Proxy::start(server.port);
    let catalog = JobCheckpoints::new(storage(&config(&proxy.endpoint(), "s3://weir/gaps")), "j");
    let reader = ReaderConfig {
        max_gap: 512,
        ..ReaderConfig::default()
    };
    runtime().block_on(async {
        // One file; small gaps (read through) before 10 states, large ones before 7.
        let small: Vec<usize> = (1..=10).map(|i| i * 9).collect();
        let (states, files) = write_snapshot(&catalog, 1, 101, usize::MAX, &small, 500).await;
        assert_eq!(files, 1);
        proxy.clear();
        let restored = Restored::open_with(catalog.snapshot(SnapshotKind::Checkpoint, 1), &reader)
            .await
            .unwrap();
        assert_eq!(states_of(&restored), states);
        let s = &restored.stats;
        assert_eq!((s.seeks_performed, s.requests), (0, 1), "{s:?}");
        assert_eq!(s.gap_bytes, 10 * 500);
        assert_eq!(proxy.count("GET", "operator-state"), 1);

        let large: Vec<usize> = [7, 20, 33, 50, 64, 80, 100].to_vec();
        let (states, _) = write_snapshot(&catalog, 2, 101, usize::MAX, &large, 513).await;
        proxy.clear();
        let restored = Restored::open_with(catalog.snapshot(SnapshotKind::Checkpoint, 2), &reader)
            .await
            .unwrap();
        assert_eq!(states_of(&restored), states);
        let s = &restored.stats;
        assert_eq!((s.seeks_performed, s.seeks_skipped), (7, 94), "{s:?}");
        assert_eq!(s.requests, 8);
        assert_eq!(proxy.count("GET", "operator-state"), 8);
    });
}

#[test]
fn failing_and_slow_requests_are_retried() {
    let server = S3Server::start();
    let proxy = Proxy::start(server.port);
    let mut c = config(&proxy.endpoint(), "s3://weir/faults");
    c.request_timeout = Some(Duration::from_millis(1500));
    let s = storage(&c);
    runtime().block_on(async {
        proxy.fail_next("PUT", 2);
        let placed = s.put("j/a", b"retried".to_vec()).await.unwrap();
        assert_eq!(placed.size, 7);
        let puts: Vec<bool> = proxy
            .seen()
            .iter()
            .filter(|r| r.method == "PUT")
            .map(|r| r.failed)
            .collect();
        assert_eq!(
            puts,
            [true, true, false],
            "two 503s, then the retry went through"
        );

        proxy.clear();
        proxy.stall_next("GET", 1, Duration::from_secs(4));
        assert_eq!(s.get("j/a", 1 << 20).await.unwrap(), b"retried");
        assert_eq!(
            proxy.count("GET", "j/a"),
            2,
            "the stalled GET timed out and was sent again"
        );

        // Retries give up in the end, with the location in the message.
        proxy.fail_next("GET", 1000);
        let mut c = c.clone();
        c.max_retries = Some(2);
        let e = storage(&c).get("j/a", 1 << 20).await.unwrap_err();
        assert!(e.to_string().contains("s3://weir/faults/j/a"), "{e}");
        proxy.fail_next("GET", 0);
    });
}

#[test]
fn incomplete_corrupt_and_truncated_checkpoints_are_never_restored() {
    let server = S3Server::start();
    let s = storage(&config(&server.endpoint(), "s3://weir/damage"));
    let catalog = JobCheckpoints::new(s.clone(), "j");
    runtime().block_on(async {
        write_snapshot(&catalog, 1, 101, usize::MAX, &[], 0).await;
        write_snapshot(&catalog, 2, 101, usize::MAX, &[], 0).await;
        // Checkpoint 3 was interrupted: its files are there, its metadata never was.
        s.put("j/chk-0000000003/operator-state-0", vec![1; 100])
            .await
            .unwrap();
        let newest: Vec<String> = catalog
            .complete_newest_first()
            .await
            .unwrap()
            .into_iter()
            .map(|r| r.dir)
            .collect();
        assert_eq!(newest, ["j/chk-0000000002", "j/chk-0000000001"]);
        let e = Restored::open(catalog.snapshot(SnapshotKind::Checkpoint, 3))
            .await
            .unwrap_err();
        assert!(e.to_string().contains("has no _metadata"), "{e}");
        assert!(
            e.to_string().contains("s3://weir/damage/j/chk-0000000003"),
            "{e}"
        );

        // One flipped byte in checkpoint 2's operator state: its checksum catches it.
        let key = "j/chk-0000000002/operator-state-0";
        let mut bytes = s.get(key, u64::MAX).await.unwrap();
        bytes[1234] ^= 0x01;
        s.put(key, bytes.clone()).await.unwrap();
        let e = Restored::open(catalog.snapshot(SnapshotKind::Checkpoint, 2))
            .await
            .unwrap_err();
        assert!(matches!(e, RestoreError::Corrupt { .. }), "{e}");
        assert!(e.to_string().contains("checksum mismatch"), "{e}");
        assert!(
            e.to_string().contains(&format!("s3://weir/damage/{key}")),
            "{e}"
        );
        // Truncated: reported as corrupt too (so recovery falls back), not as an outage.
        bytes.truncate(bytes.len() / 2);
        s.put(key, bytes).await.unwrap();
        let e = Restored::open(catalog.snapshot(SnapshotKind::Checkpoint, 2))
            .await
            .unwrap_err();
        assert!(matches!(e, RestoreError::Corrupt { .. }), "{e}");
        assert!(e.to_string().contains("truncated"), "{e}");
        // Checkpoint 1 is still whole.
        Restored::open(catalog.snapshot(SnapshotKind::Checkpoint, 1))
            .await
            .unwrap();
    });
}

#[test]
fn storage_on_s3_behaves_as_local_files_do_and_retention_keeps_shared_files_in_use() {
    let server = S3Server::start();
    let endpoint = server.endpoint();
    runtime().block_on(async {
        fixtures::objects(storage(&config(&endpoint, "s3://weir/objects")).as_ref())
            .await
            .unwrap();
        // At the bucket's root too (no prefix).
        fixtures::objects(storage(&config(&endpoint, "s3://weir")).as_ref())
            .await
            .unwrap();
        fixtures::retention(storage(&config(&endpoint, "s3://weir/retention")))
            .await
            .unwrap();
    });
}

#[test]
fn bad_urls_and_unreachable_stores_are_errors_that_name_the_location() {
    let job = job_file("jobs/nexmark/q1.yaml");
    let problems = |set: &str| match plan(&job, &[set.to_string()]) {
        Ok(_) => panic!("`{set}` was accepted"),
        Err(e) => e,
    };
    let e = problems("checkpoint.storage=gs://bucket/x");
    assert!(e.contains("`gs://` is not supported"), "{e}");
    assert!(e.contains("checkpoint.storage"), "{e}");
    let e = problems("checkpoint.storage={url: 's3://b/x', colour: red}");
    assert!(e.contains("colour"), "{e}");
    let e = problems("checkpoint.storage={url: data/x, region: eu-west-1}");
    assert!(e.contains("only apply to s3://"), "{e}");

    let closed = free_port();
    let p = plan(
        &job,
        &[
            "sources.nexmark.events=1000".into(),
            "checkpoint.interval=1s".into(),
            format!(
                "checkpoint.storage={{url: 's3://weir/unreachable', endpoint: 'http://127.0.0.1:{closed}', \
                 allow-http: true, max-retries: 0, access-key-id: a, secret-access-key: b}}"
            ),
        ],
    )
    .unwrap();
    let e = try_run_plan(&p, false).unwrap_err();
    assert!(e.contains("s3://weir/unreachable"), "{e}");
}

#[test]
fn jobs_checkpointing_to_s3_survive_kills_and_restore_at_another_parallelism() {
    let server = S3Server::start();
    let dir = tempfile::tempdir().unwrap();
    let job = job_file("jobs/nexmark/q5.yaml");
    let base = |out: &Path, parallelism: u32| {
        vec![
            "sources.nexmark.events=150000".to_string(),
            format!("parallelism={parallelism}"),
            "state.backend=rocksdb".into(),
            "sinks.out.kind=file".into(),
            format!("sinks.out.path={}", out.display()),
        ]
    };
    let golden = dir.path().join("golden");
    let mut o = base(&golden, 1);
    o.push("state.backend=heap".into());
    run_job(&job, &o);
    let expected = multiset(committed_rows(&golden));
    assert!(!expected.is_empty());

    let data = dir.path().join("data");
    let out = dir.path().join("out");
    // Runs at parallelism 1, 1 (restored one to one), then 2 (state redistributed).
    let parallelism = [1, 1, 2];
    // Seed 63 kills at 1.4 s and 1.1 s, after checkpoints were taken: both restarts restore.
    let logs = run_through_kills("q5 on s3", 63, 2, |run| {
        let mut cmd = weir(&data);
        cmd.envs(server.env())
            .arg("run")
            .arg(&job)
            .arg("--quiet")
            .args(["--from", "latest"]);
        for o in base(&out, parallelism[run.min(2)]) {
            cmd.args(["--set", &o]);
        }
        cmd.args([
            "--set",
            "sources.nexmark.rate=75000",
            "--set",
            "checkpoint.interval=200ms",
            "--set",
            "checkpoint.storage=s3://weir/jobs",
        ]);
        cmd.stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("weir runs")
    });
    let got = multiset(committed_rows(&out));
    if got != expected {
        eprintln!("logs of the runs:\n{}", logs.join("\n---\n"));
    }
    assert_same_rows("q5 checkpointing to S3 through kills", &got, &expected);
    for (run, log) in logs.iter().enumerate().skip(1) {
        assert!(
            log.contains("operator state read") && log.contains("s3://weir/jobs/nexmark-q5/"),
            "run {run} restored from S3:\n{}",
            logs.join("\n---\n")
        );
    }
    assert!(
        !data.join("checkpoints").exists(),
        "nothing was checkpointed locally"
    );
    let objects = runtime().block_on(async {
        storage(&config(&server.endpoint(), "s3://weir/jobs"))
            .list("nexmark-q5/")
            .await
            .unwrap()
    });
    assert!(
        objects.iter().any(|o| o.key.ends_with("/_metadata")),
        "{objects:?}"
    );
}

/// The object store fails, not weir: it goes away at random points, three times in a run, for
/// a random while (checkpoints cannot be stored, restores cannot list), while a job checkpoints
/// to it and writes its output through the transactional file sink. The job restarts, with
/// backoff, from the newest checkpoint complete on the store each time, and its committed
/// output equals an uninterrupted run's, each row once.
#[test]
fn an_object_store_that_goes_away_at_random_points_loses_and_repeats_nothing() {
    let server = S3Server::start();
    let proxy = Proxy::start(server.port);
    let dir = tempfile::tempdir().unwrap();
    let job = job_file("jobs/nexmark/q5.yaml");
    let golden = dir.path().join("golden");
    run_job(
        &job,
        &[
            "sources.nexmark.events=200000".into(),
            "sinks.out.kind=file".into(),
            format!("sinks.out.path={}", golden.display()),
        ],
    );
    let expected = multiset(committed_rows(&golden));
    let out = dir.path().join("out");
    let mut env = server.env();
    for (k, v) in &mut env {
        if *k == "AWS_ENDPOINT" {
            *v = proxy.endpoint();
        }
    }
    let mut child = weir(&dir.path().join("data"))
        .envs(env)
        .arg("run")
        .arg(&job)
        .arg("--quiet")
        .args(["--set", "sources.nexmark.events=200000"])
        .args(["--set", "sources.nexmark.rate=60000"])
        .args(["--set", "parallelism=2"])
        .args(["--set", "state.backend=rocksdb"])
        .args(["--set", "sinks.out.kind=file"])
        .args(["--set", &format!("sinks.out.path={}", out.display())])
        .args(["--set", "checkpoint.interval=200ms"])
        .args(["--set", "checkpoint.timeout=5s"])
        .args(["--set", "checkpoint.storage=s3://weir/jobs"])
        .args([
            "--set",
            "restart={strategy: fixed-delay, delay: 200ms, max-attempts: 1000}",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("weir runs");
    let mut rng = Rng(0x0b5);
    let mut outages = 0;
    for _ in 0..3 {
        std::thread::sleep(Duration::from_millis(rng.between(300, 1000)));
        if child.try_wait().unwrap().is_some() {
            break;
        }
        proxy.set_down(true);
        outages += 1;
        std::thread::sleep(Duration::from_millis(rng.between(300, 2000)));
        proxy.set_down(false);
    }
    let result = child.wait_with_output().unwrap();
    let log = String::from_utf8_lossy(&result.stderr);
    assert!(result.status.success(), "the job failed:\n{log}");
    assert!(outages >= 1, "the job ended before the store went away");
    assert_same_rows(
        "q5 into files with the object store going away",
        &multiset(committed_rows(&out)),
        &expected,
    );
}
