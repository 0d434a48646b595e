//! Helpers shared by the end-to-end tests.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::Value;
use weir_runtime::exec::job::JobSummary;
use weir_runtime::spec::load::Override;

/// The repository root (where `jobs/` lives).
pub fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

pub fn job_file(rel: &str) -> PathBuf {
    repo().join(rel)
}

/// Runs the repository's script `rel` (`scripts/pg-cluster.sh`, `scripts/s3-server.sh`: the
/// throwaway servers the tests start) with `args`, and fails the test with its stderr if it
/// fails.
pub fn script(rel: &str, args: &[&str]) {
    let out = std::process::Command::new(job_file(rel))
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{rel} {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs script `rel` with `args` and ignores how it ends: for stopping a server on drop.
pub fn script_quietly(rel: &str, args: &[&str]) {
    let _ = std::process::Command::new(job_file(rel))
        .args(args)
        .stdin(std::process::Stdio::null())
        .output();
}

/// Runs a job file in this process with `--set`-style overrides.
pub fn run_job(job: &Path, overrides: &[String]) -> JobSummary {
    let plan = plan(job, overrides).unwrap_or_else(|e| panic!("{e}"));
    run_plan(&plan, false)
}

/// Plans a job file with `--set`-style overrides (which must parse); the job's problems as
/// text.
pub fn plan(job: &Path, overrides: &[String]) -> Result<weir_runtime::plan::Plan, String> {
    let overrides: Vec<Override> = overrides.iter().map(|o| o.parse().unwrap()).collect();
    weir_runtime::plan::check_file(job, &overrides).map_err(|e| e.to_string())
}

/// Runs `plan` in-process to its end, on a runtime of its own; with `scheduler`, a checkpoint
/// scheduler on that runtime triggers the plan's periodic checkpoints.
pub fn run_plan(plan: &weir_runtime::plan::Plan, scheduler: bool) -> JobSummary {
    try_run_plan(plan, scheduler).unwrap_or_else(|e| panic!("{e}"))
}

/// [`run_plan`], returning the job's error instead of panicking.
pub fn try_run_plan(
    plan: &weir_runtime::plan::Plan,
    scheduler: bool,
) -> Result<JobSummary, String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let scheduler = scheduler.then(|| {
        std::sync::Arc::new(weir_scheduler::Scheduler::new(runtime.handle().clone()).unwrap())
    });
    let options = weir_runtime::exec::job::JobOptions {
        scheduler,
        ..Default::default()
    };
    runtime
        .block_on(async {
            weir_runtime::exec::job::start(plan, options)
                .await?
                .wait()
                .await
        })
        .map_err(|e| e.to_string())
}

/// Every line of every `part-*.jsonl` in `dir`, parsed.
pub fn read_parts(dir: &Path) -> Vec<Value> {
    let mut rows = Vec::new();
    let mut names: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    names.sort();
    for path in names {
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        assert!(
            !name.ends_with(".inprogress"),
            "an unfinished part file was left: {name}"
        );
        if !(name.starts_with("part-") && name.ends_with(".jsonl")) {
            continue;
        }
        for line in std::fs::read_to_string(&path).unwrap().lines() {
            rows.push(serde_json::from_str(line).unwrap_or_else(|e| panic!("{name}: {e}: {line}")));
        }
    }
    rows
}

/// Rows as a multiset of their canonical JSON text (keys sorted, so only names and values
/// count; column order is checked separately).
pub fn multiset(rows: impl IntoIterator<Item = Value>) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for r in rows {
        *m.entry(canonical(&r)).or_insert(0) += 1;
    }
    m
}

fn canonical(v: &Value) -> String {
    match v {
        Value::Object(map) => {
            let sorted: BTreeMap<&String, String> =
                map.iter().map(|(k, v)| (k, canonical(v))).collect();
            let fields: Vec<String> = sorted
                .iter()
                .map(|(k, v)| format!("{}:{v}", serde_json::to_string(k).unwrap()))
                .collect();
            format!("{{{}}}", fields.join(","))
        }
        Value::Array(items) => format!(
            "[{}]",
            items.iter().map(canonical).collect::<Vec<_>>().join(",")
        ),
        other => other.to_string(),
    }
}

/// The keys of an output row, in the order they were written.
pub fn columns(row: &Value) -> Vec<String> {
    row.as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default()
}

/// Asserts two multisets are equal, showing a few differences if not.
pub fn assert_same_rows(
    what: &str,
    actual: &BTreeMap<String, usize>,
    expected: &BTreeMap<String, usize>,
) {
    if actual == expected {
        return;
    }
    let count = |m: &BTreeMap<String, usize>| m.values().sum::<usize>();
    let missing: Vec<_> = expected
        .iter()
        .filter(|(k, n)| actual.get(*k) != Some(n))
        .take(3)
        .collect();
    let extra: Vec<_> = actual
        .iter()
        .filter(|(k, n)| expected.get(*k) != Some(n))
        .take(3)
        .collect();
    panic!(
        "{what}: {} rows, expected {}\n  expected but not (as often) produced: {missing:#?}\n  produced but not (as often) expected: {extra:#?}",
        count(actual),
        count(expected)
    );
}

/// Events in the shared Nexmark JSON-lines input.
pub const JSONL_EVENTS: u64 = 200_000;

/// A Nexmark JSON-lines file of [`JSONL_EVENTS`] events, written once per test run by
/// `weir nexmark generate`'s code path.
pub fn nexmark_jsonl() -> &'static Path {
    static FILE: OnceLock<PathBuf> = OnceLock::new();
    FILE.get_or_init(|| {
        use weir_runtime::connectors::nexmark::{Generator, GeneratorConfig, write_file};
        let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
            "nexmark-{JSONL_EVENTS}-{}.jsonl",
            std::process::id()
        ));
        write_file(
            &Generator::new(GeneratorConfig::default()),
            JSONL_EVENTS,
            &path,
        )
        .unwrap();
        path
    })
}

/// A loopback port nothing listens on (for a server a test starts, or to be refused).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A fresh, empty directory for a sink, removed when the value is dropped.
pub fn out_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("weir-out-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap()
}

/// An HTTP client of a `weir serve` child process, for the tests that start one: answers of
/// any status come back (the tests assert on them), within a minute.
pub fn agent() -> ureq::Agent {
    ureq::Agent::new_with_config(
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(std::time::Duration::from_secs(60)))
            .build(),
    )
}

/// `GET base + path` as JSON, if it answered 200.
pub fn try_get(base: &str, path: &str) -> Option<Value> {
    let mut r = agent().get(format!("{base}{path}")).call().ok()?;
    (r.status() == 200).then_some(())?;
    serde_json::from_str(&r.body_mut().read_to_string().ok()?).ok()
}

/// Submits `job` with `overrides` to the server at `base`; the new job's id.
pub fn submit(base: &str, job: &str, overrides: &[String]) -> String {
    let mut query = url::form_urlencoded::Serializer::new(String::new());
    for o in overrides {
        query.append_pair("set", o);
    }
    let mut r = agent()
        .post(format!("{base}/api/v1/jobs?{}", query.finish()))
        .content_type("application/yaml")
        .send(job.as_bytes())
        .unwrap();
    let status = r.status().as_u16();
    let text = r.body_mut().read_to_string().unwrap();
    assert_eq!(status, 201, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    v["id"].as_str().unwrap().to_owned()
}

/// Polls `base + path` until `done` holds: a liveness wait, bounded by `within`.
pub fn wait_until(
    base: &str,
    path: &str,
    within: std::time::Duration,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = std::time::Instant::now() + within;
    let mut last = Value::Null;
    while std::time::Instant::now() < deadline {
        if let Some(v) = try_get(base, path) {
            if done(&v) {
                return v;
            }
            last = v;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    panic!("{path} never reached the expected state; it is: {last}");
}

/// The rows a Nexmark query over the events of `file` produces (its `-jsonl` job into a file
/// sink), as a multiset: what a run of the same query over a broker must equal.
pub fn golden_jsonl(query: &str, file: &Path, dir: &Path) -> BTreeMap<String, usize> {
    let out = dir.join(format!("golden-{query}"));
    run_job(
        &job_file(&format!("jobs/nexmark/{query}-jsonl.yaml")),
        &[
            format!("sources.nexmark.path={}", file.display()),
            "sinks.out.kind=file".into(),
            format!("sinks.out.path={}", out.display()),
        ],
    );
    let rows = multiset(read_parts(&out));
    assert!(!rows.is_empty(), "{query}: the golden run produced nothing");
    rows
}

/// q5 over `events` generated events through the file sink, no checkpoints: each row as
/// `[auction, num, starttime, endtime]`, counted.
pub fn golden_q5(events: u64, dir: &Path) -> BTreeMap<[i64; 4], usize> {
    let out = dir.join("golden");
    run_job(
        &job_file("jobs/nexmark/q5.yaml"),
        &[
            format!("sources.nexmark.events={events}"),
            "sinks.out.kind=file".into(),
            format!("sinks.out.path={}", out.display()),
        ],
    );
    let rows = q5_rows(read_parts(&out));
    assert!(!rows.is_empty(), "the golden run produced nothing");
    rows
}

/// q5's rows as `[auction, num, starttime, endtime]`, counted.
pub fn q5_rows(rows: Vec<Value>) -> BTreeMap<[i64; 4], usize> {
    let mut keyed = BTreeMap::new();
    for r in rows {
        let field = |k: &str| r[k].as_i64().unwrap_or_else(|| panic!("{k} in {r}"));
        *keyed
            .entry([
                field("auction"),
                field("num"),
                field("starttime"),
                field("endtime"),
            ])
            .or_insert(0) += 1;
    }
    keyed
}

/// Starts run 0, 1, ... of a job with `spawn` (each restoring the latest checkpoint), kills the
/// first `kills` runs with SIGKILL at a random point of `window` (seeded) after they start,
/// and lets the next run complete. Returns the stderr of each run and how many were killed: a
/// run may end before its kill, and a test that saw no kill proves nothing, so callers that
/// need one check. `what` names the job in failures.
pub fn run_through_kills(
    what: &str,
    seed: u64,
    kills: usize,
    window: std::ops::Range<Duration>,
    mut spawn: impl FnMut(usize) -> std::process::Child,
) -> (Vec<String>, usize) {
    let mut rng = crate::recovery::Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let (lo, hi) = (
        window.start.as_millis() as u64,
        window.end.as_millis() as u64,
    );
    let mut logs = Vec::new();
    let mut killed = 0;
    for run in 0.. {
        assert!(run < kills + 5, "{what}: never completed: {logs:#?}");
        let mut child = spawn(run);
        if run < kills {
            let at = Duration::from_millis(rng.between(lo, hi.max(lo + 1)));
            let started = std::time::Instant::now();
            while started.elapsed() < at && child.try_wait().unwrap().is_none() {
                std::thread::sleep(Duration::from_millis(5));
            }
            if child.try_wait().unwrap().is_none() {
                child.kill().unwrap(); // SIGKILL
                killed += 1;
                let log = child.wait_with_output().unwrap();
                logs.push(String::from_utf8_lossy(&log.stderr).into_owned());
                continue;
            }
        }
        let log = child.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&log.stderr).into_owned();
        assert!(log.status.success(), "{what}: run {run} failed:\n{text}");
        logs.push(text);
        break;
    }
    (logs, killed)
}

/// The table a changelog (rows with an `__op` or `op` field, in order) builds, by `key`,
/// failing on a change a well-formed changelog cannot hold: an `+I` of a live key, a `-U` or
/// `-D` of a row that is not live.
pub fn changelog_table(rows: &[Value], key: &str) -> BTreeMap<String, Value> {
    let mut table = BTreeMap::new();
    for row in rows {
        let mut data = row.as_object().unwrap().clone();
        let op = data.remove("op").or_else(|| data.remove("__op")).unwrap();
        let k = data[key].to_string();
        let data = Value::Object(data);
        match op.as_str().unwrap() {
            "+I" | "+U" => assert!(table.insert(k, data).is_none(), "{row} adds a live key"),
            "-U" | "-D" => assert_eq!(table.remove(&k), Some(data), "{row} takes back no row"),
            other => panic!("unknown kind {other} in {row}"),
        }
    }
    table
}

/// An input for an updating query whose keys come, change and go: `rows` rows `{k, x}` over
/// `keys` keys written to `dir/in.jsonl`; the query, `SELECT k, COUNT(*) AS n, MAX(x) AS m
/// FROM src GROUP BY k HAVING COUNT(*) % modulo <> 0` (the filter drops a key and takes it back
/// as its count moves); and the table a plain loop says it ends with, by `k`.
pub fn counts_having(
    dir: &Path,
    rows: i64,
    keys: i64,
    modulo: i64,
) -> (PathBuf, String, BTreeMap<String, Value>) {
    let input = dir.join("in.jsonl");
    let mut naive: BTreeMap<i64, (i64, i64)> = BTreeMap::new();
    let mut lines = String::new();
    for i in 0..rows {
        let (k, x) = ((i * 7919) % keys, (i * 31) % 1000);
        lines.push_str(&format!("{}\n", serde_json::json!({"k": k, "x": x})));
        let e = naive.entry(k).or_insert((0, i64::MIN));
        e.0 += 1;
        e.1 = e.1.max(x);
    }
    std::fs::write(&input, lines).unwrap();
    let expected = naive
        .iter()
        .filter(|(_, (n, _))| n % modulo != 0)
        .map(|(k, (n, m))| (k.to_string(), serde_json::json!({"k": k, "n": n, "m": m})))
        .collect();
    let query = format!(
        "SELECT k, COUNT(*) AS n, MAX(x) AS m FROM src GROUP BY k HAVING COUNT(*) % {modulo} <> 0"
    );
    (input, query, expected)
}
