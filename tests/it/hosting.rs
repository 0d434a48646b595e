//! `weir serve` keeps its jobs, and supervises them by what failed.
//!
//! - A real `weir serve` process with three jobs (one checkpointing into a file sink, one
//!   bounded and finished, one failed on bad data) is SIGKILLed; a new one on the same data
//!   directory lists all three with their ids and histories, resumes the checkpointing job from
//!   its latest checkpoint, and that job's committed output equals an uninterrupted run's.
//!   Once with the embedded SQLite catalog, once with a PostgreSQL catalog on a throwaway
//!   cluster.
//! - Rescale 1 → 2 → 1 through the API, with output equal to an uninterrupted run's.
//! - `reset-after`: failures spread out further than the healthy period never exhaust the
//!   restart budget; the same failures close together do.

use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_array::RecordBatch;
use axum::body::Body;
use axum::http::StatusCode;
use serde_json::Value;
use weir_http_ui::auth::Access;
use weir_runtime::api::{Operator, OperatorError, SubtaskContext};
use weir_runtime::plan::Factory;

use crate::recovery::{committed_rows, weir};
use crate::serve::{RelativeDir, app, call, wait_for};
use crate::support::{free_port, job_file, multiset, run_job};

/// q5 as the hosted tests run it: bounded, slow enough to be interrupted, checkpointing into
/// a file sink at `out` (relative to the server's working directory).
fn q5_overrides(out: &str, events: u64, rate: u64) -> Vec<String> {
    vec![
        format!("sources.nexmark.events={events}"),
        format!("sources.nexmark.rate={rate}"),
        "checkpoint.interval=200ms".into(),
        "sinks.out.kind=file".into(),
        format!("sinks.out.path={out}"),
    ]
}

/// The rows q5 with these overrides produces, run in this process without interruption.
fn golden(overrides: &[String], out: &Path) -> std::collections::BTreeMap<String, usize> {
    let mut o: Vec<String> = overrides
        .iter()
        .filter(|o| !o.starts_with("sinks.out.path=") && !o.starts_with("sources.nexmark.rate="))
        .cloned()
        .collect();
    o.push(format!("sinks.out.path={}", out.display()));
    o.push("checkpoint.storage=".to_string() + &out.with_extension("ck").display().to_string());
    run_job(&job_file("jobs/nexmark/q5.yaml"), &o);
    let rows = multiset(committed_rows(out));
    assert!(!rows.is_empty(), "the golden run produced nothing");
    rows
}

/// A `weir serve` child process on a free port, in `dir`, keeping its data in `dir/data`.
struct ServeProcess {
    child: Child,
    base: String,
}

impl ServeProcess {
    fn start(dir: &Path, catalog: Option<&str>) -> Self {
        let port = free_port();
        let mut cmd = weir(&dir.join("data"));
        cmd.current_dir(dir)
            .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
            .env_remove("WEIR_TOKEN")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(dir.join("serve.log"))
                    .unwrap(),
            ));
        if let Some(c) = catalog {
            cmd.args(["--catalog", c]);
        }
        let child = cmd.spawn().unwrap();
        let server = ServeProcess {
            child,
            base: format!("http://127.0.0.1:{port}"),
        };
        // Up when the API answers (a liveness wait, bounded at 30 s).
        for _ in 0..300 {
            if server.try_get("/api/v1/jobs").is_some() {
                return server;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!(
            "weir serve did not come up: {}",
            std::fs::read_to_string(dir.join("serve.log")).unwrap_or_default()
        );
    }

    fn try_get(&self, path: &str) -> Option<Value> {
        crate::support::try_get(&self.base, path)
    }

    fn get(&self, path: &str) -> Value {
        self.try_get(path)
            .unwrap_or_else(|| panic!("GET {path} failed"))
    }

    /// Submits `job` with `overrides`; its id.
    fn submit(&self, job: &str, overrides: &[String]) -> String {
        crate::support::submit(&self.base, job, overrides)
    }

    /// Polls `path` until `done` holds (a liveness wait, bounded at 60 s).
    fn wait(&self, path: &str, done: impl Fn(&Value) -> bool) -> Value {
        crate::support::wait_until(&self.base, path, Duration::from_secs(60), done)
    }

    fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// Ctrl-C: the server writes its catalog, stops its jobs and exits.
    fn interrupt(mut self) {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(self.child.id()).unwrap());
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
        let status = self.child.wait().unwrap();
        assert!(status.success(), "weir serve exited with {status}");
    }
}

impl Drop for ServeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The job of `list` with id `id`.
fn listed<'a>(list: &'a Value, id: &str) -> &'a Value {
    list["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["id"] == id)
        .unwrap_or_else(|| panic!("job {id} is not listed: {list}"))
}

/// The three jobs, the kill, the second server: `catalog` as `weir serve --catalog` takes it.
fn a_killed_server_comes_back_with_its_jobs(catalog: Option<&str>) {
    let dir = tempfile::tempdir().unwrap();
    let q5 = std::fs::read_to_string(job_file("jobs/nexmark/q5.yaml")).unwrap();
    let overrides = q5_overrides("out/q5", 150_000, 30_000);
    let expected = golden(&overrides, &dir.path().join("golden"));

    let first = ServeProcess::start(dir.path(), catalog);
    let checkpointing = first.submit(&q5, &overrides);
    let finished = first.submit(
        "name: bounded\nsources:\n  gen: {kind: nexmark, events: 2000}\n\
         sinks:\n  out: {kind: blackhole, from: gen.bid}\n",
        &[],
    );
    std::fs::write(
        dir.path().join("bad.jsonl"),
        "{\"user\": \"a\"}\nnot json\n",
    )
    .unwrap();
    let failed = first.submit(
        "name: bad-data\nsources:\n  clicks: {kind: jsonl, path: bad.jsonl, schema: {user: string}}\n\
         sinks:\n  out: {kind: blackhole, from: clicks}\n",
        &[],
    );
    first.wait(&format!("/api/v1/jobs/{finished}"), |v| {
        v["state"] == "finished"
    });
    first.wait(&format!("/api/v1/jobs/{failed}"), |v| {
        v["state"] == "failed"
    });
    // Killed once the checkpointing job has checkpoints to resume from, well before its end.
    first.wait(&format!("/api/v1/jobs/{checkpointing}/checkpoints"), |v| {
        v["completed"].as_u64().unwrap_or(0) >= 2
    });
    let before = first.get(&format!("/api/v1/jobs/{checkpointing}"));
    assert_eq!(before["state"], "running", "{before}");
    first.kill();

    let second = ServeProcess::start(dir.path(), catalog);
    let list = second.get("/api/v1/jobs");
    assert_eq!(list["jobs"].as_array().unwrap().len(), 3, "{list}");
    let done = listed(&list, &finished);
    assert_eq!(done["state"], "finished");
    assert_eq!(done["name"], "bounded");
    assert_eq!(
        done["events"], 2000,
        "the finished job keeps its figures: {done}"
    );
    let bad = second.get(&format!("/api/v1/jobs/{failed}"));
    assert_eq!(bad["state"], "failed");
    assert!(bad["error"].as_str().unwrap().contains("line 2"), "{bad}");
    let exceptions = second.get(&format!("/api/v1/jobs/{failed}/exceptions"));
    assert_eq!(
        exceptions["exceptions"][0]["category"], "data",
        "{exceptions}"
    );

    // The checkpointing job resumes from its latest checkpoint and runs to its end.
    let resumed = second.wait(&format!("/api/v1/jobs/{checkpointing}"), |v| {
        v["state"] == "finished"
    });
    assert_eq!(resumed["run"], 2, "{resumed}");
    assert!(
        resumed["restore"]["location"]
            .as_str()
            .is_some_and(|l| l.contains("chk-")),
        "the resumed run restored a checkpoint: {resumed}"
    );
    let got = multiset(committed_rows(&dir.path().join("out/q5")));
    assert_eq!(
        got, expected,
        "the resumed job's output differs from an uninterrupted run's"
    );
    // Ids are never given again.
    let next = second.submit(
        "name: later\nsources:\n  gen: {kind: nexmark, events: 10}\n\
         sinks:\n  out: {kind: blackhole, from: gen.bid}\n",
        &[],
    );
    assert_eq!(next, "4");
    second.interrupt();
}

#[test]
fn a_killed_server_comes_back_with_its_jobs_from_the_sqlite_catalog() {
    // The default catalog: data/catalog.sqlite under the server's data directory.
    a_killed_server_comes_back_with_its_jobs(None);
}

#[test]
fn a_killed_server_comes_back_with_its_jobs_from_a_postgres_catalog() {
    let cluster = crate::postgres::Cluster::start();
    let url = format!("postgres://postgres@127.0.0.1:{}/postgres", cluster.port());
    a_killed_server_comes_back_with_its_jobs(Some(&url));
    assert_eq!(
        cluster.psql("SELECT count(*) FROM weir_jobs"),
        ["4"],
        "the jobs are in the database"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_rescaled_from_one_to_two_and_back_loses_and_repeats_nothing() {
    let dir = RelativeDir::new("rescale");
    let out = format!("{}/out", dir.0);
    let overrides = q5_overrides(&out, 150_000, 25_000);
    let scratch = tempfile::tempdir().unwrap();
    let golden_dir = scratch.path().join("golden");
    let golden_overrides = overrides.clone();
    let expected = tokio::task::spawn_blocking(move || golden(&golden_overrides, &golden_dir))
        .await
        .unwrap();

    let (host, app) = app(Access::open());
    let mut query = url::form_urlencoded::Serializer::new(String::new());
    for o in &overrides {
        query.append_pair("set", o);
    }
    query.append_pair("set", &format!("checkpoint.storage={}/ck", dir.0));
    query.append_pair("parallelism", "1");
    let q5 = std::fs::read_to_string(job_file("jobs/nexmark/q5.yaml")).unwrap();
    let submitted = call(
        &app,
        "POST",
        &format!("/api/v1/jobs?{}", query.finish()),
        q5,
    )
    .await;
    assert_eq!(submitted.status, StatusCode::CREATED, "{}", submitted.text);
    let id = submitted.json()["id"].as_str().unwrap().to_owned();
    let checkpoints = format!("/api/v1/jobs/{id}/checkpoints");
    let completed = |n: u64| move |v: &Value| v["completed"].as_u64().unwrap_or(0) >= n;
    wait_for(&app, &checkpoints, completed(2)).await;

    for (parallelism, run) in [(2, 2), (1, 3)] {
        let rescaled = call(
            &app,
            "POST",
            &format!("/api/v1/jobs/{id}/rescale"),
            format!("{{\"parallelism\": {parallelism}}}"),
        )
        .await;
        assert_eq!(rescaled.status, StatusCode::OK, "{}", rescaled.text);
        let detail = call(&app, "GET", &format!("/api/v1/jobs/{id}"), Body::empty())
            .await
            .json();
        assert_eq!(detail["run"], run, "{detail}");
        let window = detail["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["kind"] == "window-aggregate")
            .unwrap()
            .clone();
        assert_eq!(window["parallelism"], parallelism, "{window}");
        wait_for(&app, &checkpoints, completed(1)).await;
    }
    let done = wait_for(&app, &format!("/api/v1/jobs/{id}"), |v| {
        v["state"] == "finished"
    })
    .await;
    assert_eq!(done["run"], 3, "{done}");
    let got = multiset(committed_rows(Path::new(&out)));
    assert_eq!(got, expected, "the rescaled job's output differs");
    host.shutdown(Duration::from_secs(10)).await;
}

/// An operator that fails once it has run for `after` in the first `attempts` attempts.
struct FailAfter {
    inner: Box<dyn Operator>,
    created: Instant,
    after: Option<Duration>,
}

impl Operator for FailAfter {
    fn process_batch(
        &mut self,
        input: usize,
        batch: RecordBatch,
        out: &mut Vec<RecordBatch>,
    ) -> Result<(), OperatorError> {
        if self.after.is_some_and(|a| self.created.elapsed() >= a) {
            return Err(OperatorError::external_message(
                "injected: the downstream system went away",
            ));
        }
        self.inner.process_batch(input, batch, out)
    }
}

/// Runs an unbounded q1 whose map fails after `healthy_for` in each of its first 4 attempts,
/// with a budget of 2 restarts that resets after 2 s; stops it once it has restarted 4 times.
fn q1_failing_every(healthy_for: Duration) -> Result<u32, String> {
    let mut plan = crate::support::plan(
        &job_file("jobs/nexmark/q1.yaml"),
        &[
            "sources.nexmark.events=null".into(),
            "sources.nexmark.rate=20000".into(),
            "restart={strategy: exponential-delay, max-attempts: 2, delay: 50ms, \
             jitter: 0, reset-after: 2s}"
                .into(),
        ],
    )
    .unwrap();
    let node = plan.nodes.iter_mut().find(|n| n.kind == "map").unwrap();
    let Factory::Operator(inner) = node.factory.clone() else {
        panic!("an operator node")
    };
    node.factory = Factory::Operator(Arc::new(move |ctx: &SubtaskContext| {
        Ok(Box::new(FailAfter {
            inner: inner(ctx)?,
            created: Instant::now(),
            after: (ctx.attempt < 4).then_some(healthy_for),
        }) as Box<dyn Operator>)
    }));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let job = weir_runtime::exec::job::start(&plan, Default::default())
            .await
            .map_err(|e| e.to_string())?;
        let metrics = job.metrics();
        let stop = job.stopper();
        let waiter = tokio::spawn(job.wait());
        // Once the fifth attempt has run a while, stop it; a job that failed ends by itself.
        loop {
            if waiter.is_finished() {
                break;
            }
            if metrics.restarts.load(std::sync::atomic::Ordering::Relaxed) >= 4 {
                tokio::time::sleep(Duration::from_millis(500)).await;
                stop.cancel();
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        waiter
            .await
            .map_err(|e| e.to_string())?
            .map(|summary| summary.restarts)
            .map_err(|e| e.to_string())
    })
}

#[test]
fn failures_spread_wider_than_reset_after_never_exhaust_the_restart_budget() {
    // Each attempt runs 2.5 s (past `reset-after`) before it fails: four failures against a
    // budget of two, and the job lives on.
    assert_eq!(q1_failing_every(Duration::from_millis(2500)), Ok(4));
    // The same four failures 300 ms apart: the third exhausts the budget.
    let e = q1_failing_every(Duration::from_millis(300)).unwrap_err();
    assert!(e.contains("injected"), "{e}");
}

#[test]
fn weir_run_listen_serves_the_jobs_metrics_and_a_read_only_api() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut child = weir(&dir.path().join("data"))
        .args(["run", "--quiet", "--listen", &format!("127.0.0.1:{port}")])
        .arg(job_file("jobs/nexmark/q1.yaml"))
        .args(["--set", "sources.nexmark.events=null"])
        .args(["--set", "sources.nexmark.rate=20000"])
        .env_remove("WEIR_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let base = format!("http://127.0.0.1:{port}");
    let agent = crate::support::agent();
    let get = |path: &str| -> Option<(u16, String)> {
        let mut r = agent.get(format!("{base}{path}")).call().ok()?;
        Some((r.status().as_u16(), r.body_mut().read_to_string().ok()?))
    };
    let mut metrics = String::new();
    for _ in 0..300 {
        if let Some((200, text)) = get("/metrics")
            && text.contains("weir_job_uptime_seconds{")
        {
            metrics = text;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        metrics.contains(r#"weir_job_state{id="1",job="nexmark-q1",state="running"} 1"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"weir_job_state{id="1",job="nexmark-q1",state="failed"} 0"#),
        "{metrics}"
    );
    assert!(
        metrics.contains("weir_job_late_records_dropped_total{"),
        "{metrics}"
    );
    let (status, list) = get("/api/v1/jobs").unwrap();
    assert_eq!(status, 200);
    assert!(list.contains("\"nexmark-q1\""), "{list}");
    // Nothing can be changed through it.
    let mut refused = agent
        .post(format!("{base}/api/v1/jobs/1/cancel"))
        .send_empty()
        .unwrap();
    assert_eq!(refused.status().as_u16(), 405);
    let text = refused.body_mut().read_to_string().unwrap();
    assert!(text.contains("weir serve"), "{text}");
    assert!(child.try_wait().unwrap().is_none(), "the job still runs");
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    assert!(child.wait().unwrap().success());
}
