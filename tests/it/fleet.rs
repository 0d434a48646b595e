//! Several `weir serve` processes as one fleet on one PostgreSQL catalog (a throwaway cluster
//! of the test's own), their jobs checkpointing to S3 (moto) or a shared directory and
//! writing to file sinks in a shared directory and to PostgreSQL tables:
//!
//! - Six jobs submitted to one server spread two by two over three; the server owning the most
//!   is SIGKILLed and its jobs run on the others within the lease time plus a restore; another
//!   server is drained and its jobs move by savepoint. Every job's committed output equals an
//!   uninterrupted run's: nothing lost, nothing twice. Every server's jobs list is the
//!   fleet's, each job with the server running it.
//! - A server SIGSTOPped past its lease, then SIGCONTinued, finds its job taken over, stops
//!   its copy and commits nothing more, nor leaves rows in its PostgreSQL sink's staging table; a server cut off from the catalog (a proxy that drops
//!   its connections) stops its copies by itself and the other server resumes them. Outputs
//!   again equal an uninterrupted run's.
//! - A server whose runtime is blocked for three lease times still renews its lease (the
//!   renewals run on a thread of their own): a busy server is not taken for a dead one.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::recovery::{committed_rows, weir};
use crate::support::{free_port, job_file};

/// The lease time of the tests' fleets: short, so that takeovers happen within a test.
const LEASE: &str = "2s";

/// Events of each job: at 20,000 events/s, 24 s of input, so that every job still runs when
/// the test kills, pauses, drains or cuts off its server, however busy the machine.
const EVENTS: u64 = 480_000;

/// q5's overrides for job `name`: `events` bounded input paced to run for several seconds,
/// checkpoints every 200 ms into `storage` (shared by the servers), output into `out/<name>`
/// (a file sink) or the table `<name>` (`table` with the cluster's connection).
fn q5(name: &str, table: Option<&str>, storage: &str, events: u64) -> (String, Vec<String>) {
    let mut overrides = vec![
        format!("name={name}"),
        format!("sources.nexmark.events={events}"),
        "sources.nexmark.rate=20000".into(),
        "checkpoint.interval=200ms".into(),
        format!("checkpoint.storage={storage}"),
    ];
    match table {
        None => {
            overrides.push("sinks.out.kind=file".into());
            overrides.push(format!("sinks.out.path=out/{name}"));
        }
        Some(connection) => {
            overrides.push(format!("sinks.out.table={name}"));
            overrides.push(format!("sinks.out.connection={connection}"));
        }
    }
    let job = if table.is_some() {
        "jobs/nexmark/q5-postgres.yaml"
    } else {
        "jobs/nexmark/q5.yaml"
    };
    (std::fs::read_to_string(job_file(job)).unwrap(), overrides)
}

/// One `weir serve` of a fleet, in the shared directory `dir`, keeping its own data in
/// `dir/data-<n>`.
struct Server {
    child: Child,
    base: String,
    log: PathBuf,
}

impl Server {
    /// Server `n`, with `env` besides (an S3 server's endpoint and credentials).
    fn start(dir: &Path, n: usize, catalog: &str, allow: &str, env: &[(&str, String)]) -> Self {
        Self::start_on(dir, &n.to_string(), free_port(), catalog, allow, env)
    }

    /// Server `name` on `port` (a server restarted on its URL).
    fn start_on(
        dir: &Path,
        name: &str,
        port: u16,
        catalog: &str,
        allow: &str,
        env: &[(&str, String)],
    ) -> Self {
        let base = format!("http://127.0.0.1:{port}");
        let log = dir.join(format!("serve-{name}.log"));
        let child = weir(&dir.join(format!("data-{name}")))
            .current_dir(dir)
            .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
            .args(["--catalog", catalog, "--advertise", &base])
            .args(["--lease-ttl", LEASE, "--allow-endpoint", allow])
            .env_remove("WEIR_TOKEN")
            .env("RUST_LOG", "warn,weir_http_ui=info,weir_checkpoint=info")
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(std::fs::File::create(&log).unwrap()))
            .spawn()
            .unwrap();
        let server = Server { child, base, log };
        for _ in 0..300 {
            if server.try_get("/api/v1/fleet").is_some() {
                return server;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("weir serve did not come up: {}", server.log_text());
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn try_get(&self, path: &str) -> Option<Value> {
        crate::support::try_get(&self.base, path)
    }

    /// `method path` and its answer, checked against the server's OpenAPI document.
    fn checked(&self, method: &str, path: &str) -> Value {
        let request = crate::support::agent();
        let url = format!("{}{path}", self.base);
        let mut r = match method {
            "POST" => request.post(url).send_empty(),
            _ => request.get(url).call(),
        }
        .unwrap();
        let answer = crate::serve::Answer {
            status: r.status(),
            content_type: r
                .headers()
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned(),
            text: r.body_mut().read_to_string().unwrap(),
        };
        assert_eq!(answer.status, 200, "{method} {path}: {}", answer.text);
        let doc = self.try_get("/api/v1/openapi.json").unwrap();
        let mut checker = crate::serve_openapi::Checker::of(doc);
        let template = checker.template_of(path);
        checker.validate(method, &template, &answer);
        answer.json()
    }

    /// Submits `job` with `overrides`; its id.
    fn submit(&self, job: &str, overrides: &[String]) -> String {
        crate::support::submit(&self.base, job, overrides)
    }

    /// Polls `path` until `done` holds (a liveness wait, bounded at `within`).
    fn wait(&self, path: &str, within: Duration, done: impl Fn(&Value) -> bool) -> Value {
        crate::support::wait_until(&self.base, path, within, done)
    }

    fn signal(&self, signal: nix::sys::signal::Signal) {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(self.child.id()).unwrap());
        nix::sys::signal::kill(pid, signal).unwrap();
    }

    fn kill(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.signal_quietly();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    /// A stopped process must be continued before it can be killed and reaped cleanly.
    fn signal_quietly(&self) {
        if let Ok(id) = i32::try_from(self.child.id()) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(id),
                nix::sys::signal::Signal::SIGCONT,
            );
        }
    }
}

/// The URLs of the servers a fleet view (`GET /api/v1/fleet`) shows alive.
fn alive(view: &Value) -> Vec<&str> {
    view["servers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|s| s["alive"] == true)
        .filter_map(|s| s["url"].as_str())
        .collect()
}

/// The fleet's jobs by id: (name, state, server).
fn jobs(view: &Value) -> BTreeMap<String, (String, String, Option<String>)> {
    view["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| {
            (
                j["id"].as_str().unwrap().to_owned(),
                (
                    j["name"].as_str().unwrap().to_owned(),
                    j["state"].as_str().unwrap().to_owned(),
                    j["server"].as_str().map(str::to_owned),
                ),
            )
        })
        .collect()
}

/// The output of job `name`: its file sink's committed part files, or its table.
fn output(
    dir: &Path,
    cluster: &crate::postgres::Cluster,
    name: &str,
    table: bool,
) -> BTreeMap<[i64; 4], usize> {
    if !table {
        return crate::support::q5_rows(committed_rows(&dir.join("out").join(name)));
    }
    cluster.q5_rows(name)
}

fn assert_outputs(
    dir: &Path,
    cluster: &crate::postgres::Cluster,
    names: &[(String, bool)],
    expected: &BTreeMap<[i64; 4], usize>,
) {
    for (name, table) in names {
        let got = output(dir, cluster, name, *table);
        let (missing, extra) = difference(expected, &got);
        assert!(
            missing.is_empty() && extra.is_empty(),
            "job {name}: {} rows missing (e.g. {:?}), {} rows extra or repeated (e.g. {:?})",
            missing.len(),
            missing.first(),
            extra.len(),
            extra.first()
        );
    }
}

/// Rows of `expected` not in `got` (by multiplicity), and the other way round.
fn difference(
    expected: &BTreeMap<[i64; 4], usize>,
    got: &BTreeMap<[i64; 4], usize>,
) -> (Vec<[i64; 4]>, Vec<[i64; 4]>) {
    let mut missing = Vec::new();
    let mut extra = Vec::new();
    for (k, n) in expected {
        let g = got.get(k).copied().unwrap_or(0);
        missing.extend(std::iter::repeat_n(*k, n.saturating_sub(g)));
    }
    for (k, n) in got {
        let e = expected.get(k).copied().unwrap_or(0);
        extra.extend(std::iter::repeat_n(*k, n.saturating_sub(e)));
    }
    (missing, extra)
}

fn catalog_url(port: u16) -> String {
    format!("postgres://postgres@127.0.0.1:{port}/postgres")
}

fn sink_connection(port: u16) -> String {
    format!("host=127.0.0.1 port={port} user=postgres dbname=postgres")
}

#[test]
fn a_killed_servers_jobs_and_a_drained_servers_jobs_move_losing_and_repeating_nothing() {
    let cluster = crate::postgres::Cluster::start();
    let dir = tempfile::tempdir().unwrap();
    let expected = crate::support::golden_q5(EVENTS, dir.path());
    let url = catalog_url(cluster.port());
    let allow = format!("postgres://127.0.0.1:{}", cluster.port());
    // Checkpoints on S3 (the servers' own storage: its endpoint and credentials in their
    // environment).
    let s3 = crate::s3::S3Server::start();
    let mut servers: Vec<Server> = (0..3)
        .map(|n| Server::start(dir.path(), n, &url, &allow, &s3.env()))
        .collect();

    // Six jobs, all submitted to the first server: two write tables, four files.
    let mut names = Vec::new();
    for n in 0..6 {
        let name = format!("q5_{n}");
        let table = n % 3 == 0;
        let connection = sink_connection(cluster.port());
        let (job, overrides) = q5(
            &name,
            table.then_some(connection.as_str()),
            "s3://weir/fleet",
            EVENTS,
        );
        servers[0].submit(&job, &overrides);
        names.push((name, table));
    }
    servers[0].wait("/api/v1/fleet", Duration::from_secs(60), |v| {
        jobs(v).values().all(|j| j.2.is_some())
    });
    let view = servers[0].checked("GET", "/api/v1/fleet");
    let mut load: BTreeMap<String, usize> = BTreeMap::new();
    for (_, _, server) in jobs(&view).values() {
        *load.entry(server.clone().unwrap()).or_default() += 1;
    }
    assert_eq!(
        load.values().copied().collect::<Vec<_>>(),
        [2, 2, 2],
        "placed on the least loaded server each time: {view}"
    );
    // Any server's jobs list is the fleet's: every job once, with the server running it.
    for server in &servers {
        let list = server.checked("GET", "/api/v1/jobs");
        let listed: BTreeMap<String, Option<String>> = list["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|j| {
                (
                    j["id"].as_str().unwrap().to_owned(),
                    j["server"].as_str().map(str::to_owned),
                )
            })
            .collect();
        let placed: BTreeMap<String, Option<String>> = jobs(&view)
            .into_iter()
            .map(|(id, (_, _, server))| (id, server))
            .collect();
        assert_eq!(list["jobs"].as_array().unwrap().len(), 6, "{list}");
        assert_eq!(listed, placed, "{list}");
        assert!(list.get("unanswered").is_none(), "{list}");
    }
    // Every job checkpoints, asked through the first server (forwarded to each owner).
    for id in jobs(&view).keys() {
        servers[0].wait(
            &format!("/api/v1/jobs/{id}/checkpoints"),
            Duration::from_secs(60),
            |v| v["completed"].as_u64().unwrap_or(0) >= 2,
        );
    }

    // SIGKILL a server owning the most jobs (not the one the test talks to).
    let victim = (1..3)
        .max_by_key(|n| load.get(&servers[*n].base).copied().unwrap_or(0))
        .unwrap();
    let victim_url = servers[victim].base.clone();
    let moved: Vec<String> = jobs(&view)
        .iter()
        .filter(|(_, j)| j.2.as_deref() == Some(victim_url.as_str()))
        .map(|(id, _)| id.clone())
        .collect();
    // A quarter of their input read first, so that a total of the last run alone would show.
    for id in &moved {
        servers[0].wait(
            &format!("/api/v1/jobs/{id}"),
            Duration::from_secs(60),
            |v| v["progress"].as_f64().unwrap_or(0.0) >= 0.25,
        );
    }
    let killed = Instant::now();
    servers[victim].kill();
    let view = servers[0].wait("/api/v1/fleet", Duration::from_secs(60), |v| {
        let jobs = jobs(v);
        moved.iter().all(|id| {
            let (_, state, server) = &jobs[id];
            state == "running" && server.as_deref().is_some_and(|s| s != victim_url)
        })
    });
    eprintln!(
        "the killed server's {} jobs run elsewhere after {:?}",
        moved.len(),
        killed.elapsed()
    );
    for id in &moved {
        let detail = servers[0].wait(
            &format!("/api/v1/jobs/{id}"),
            Duration::from_secs(60),
            |v| v["run"].as_u64().unwrap_or(0) >= 2,
        );
        assert!(
            detail["restore"]["location"]
                .as_str()
                .is_some_and(|l| l.starts_with("s3://weir/fleet/") && l.contains("chk-")),
            "job {id} resumed from a checkpoint: {detail}"
        );
    }

    // Drain the other survivor: its jobs move to the first server by savepoint.
    let drained = if victim == 1 { 2 } else { 1 };
    let answer = servers[drained].checked("POST", "/api/v1/fleet/drain");
    let drained_url = servers[drained].base.clone();
    let handed: Vec<&Value> = answer["moved"].as_array().unwrap().iter().collect();
    assert!(!handed.is_empty(), "the drained server had jobs: {view}");
    for m in &handed {
        assert_eq!(m["to"], servers[0].base.as_str(), "{answer}");
    }

    // Everything ends, each job exactly once.
    let end = servers[0].wait("/api/v1/fleet", Duration::from_secs(300), |v| {
        jobs(v).values().all(|j| j.1 == "finished")
    });
    let servers_view = end["servers"].as_array().unwrap();
    assert!(
        servers_view
            .iter()
            .any(|s| s["url"] == drained_url.as_str() && s["draining"] == true),
        "{end}"
    );
    assert_outputs(dir.path(), &cluster, &names, &expected);
    for (n, s) in servers.iter().enumerate() {
        if n != victim {
            assert!(
                !s.log_text().contains("panicked"),
                "server {n} panicked: {}",
                s.log_text()
            );
        }
    }
    // A job taken over shows the whole job's totals: all of its input read, and the events
    // its first server counted carried on (as of that server's last write to the catalog,
    // a second or so before the kill; replayed events count twice).
    for id in &moved {
        let job = servers[0].checked("GET", &format!("/api/v1/jobs/{id}"));
        assert_eq!(job["progress"].as_f64(), Some(1.0), "job {id}: {job}");
        let events = job["events"].as_u64().unwrap_or(0);
        assert!(
            events >= EVENTS * 9 / 10,
            "job {id} counts the events of its first server too: {events} of {EVENTS}: {job}"
        );
    }

    // Restarted on its URL, the killed server is listed once, as its new process; asked
    // about any job of the fleet, it answers (the server keeping the job does) ...
    let port: u16 = victim_url
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap();
    let restarted = Server::start_on(dir.path(), "restarted", port, &url, &allow, &s3.env());
    let fleet = restarted.wait("/api/v1/fleet", Duration::from_secs(30), |v| {
        alive(v).contains(&victim_url.as_str())
    });
    let urls: Vec<&str> = fleet["servers"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["url"].as_str())
        .collect();
    let mut once = urls.clone();
    once.dedup();
    assert_eq!(urls.len(), 3, "one entry per server: {fleet}");
    assert_eq!(urls, once, "one entry per server: {fleet}");
    let ids: Vec<String> = jobs(&end).keys().cloned().collect();
    for id in &ids {
        let job = restarted.checked("GET", &format!("/api/v1/jobs/{id}"));
        assert_eq!(job["state"], "finished", "job {id}: {job}");
    }
    // ... and when no server keeps a job any more, from the catalog (it keeps the job from
    // then on, with the job's totals), asked about one job or listing them all.
    for server in &mut servers {
        let _ = server.child.kill();
        let _ = server.child.wait();
    }
    let first = restarted.checked("GET", &format!("/api/v1/jobs/{}", ids[0]));
    assert_eq!(first["state"], "finished", "{first}");
    // (The list waits for the fleet to see the others gone: a server that does not answer
    // but may be alive keeps its jobs, and is named under `unanswered`.)
    restarted.wait("/api/v1/fleet", Duration::from_secs(30), |v| {
        alive(v).len() == 1
    });
    let list = restarted.checked("GET", "/api/v1/jobs");
    let listed: Vec<&str> = list["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|j| j["id"].as_str())
        .collect();
    assert_eq!(listed.len(), ids.len(), "every job listed once: {list}");
    for id in &ids {
        assert!(listed.contains(&id.as_str()), "job {id} listed: {list}");
        let job = restarted.checked("GET", &format!("/api/v1/jobs/{id}"));
        assert_eq!(job["state"], "finished", "job {id}: {job}");
        assert_eq!(job["progress"].as_f64(), Some(1.0), "job {id}: {job}");
        assert!(
            job["events"].as_u64().unwrap_or(0) >= EVENTS * 9 / 10,
            "job {id}: {job}"
        );
    }
}

/// A TCP proxy on loopback to `upstream` that can cut every connection through it and refuse
/// new ones (a network partition between a server and the database), then heal.
struct Proxy {
    port: u16,
    cut: Arc<AtomicBool>,
    open: Arc<Mutex<Vec<TcpStream>>>,
    stop: Arc<AtomicBool>,
}

impl Proxy {
    fn start(upstream: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let cut = Arc::new(AtomicBool::new(false));
        let open: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (c, o, s) = (cut.clone(), open.clone(), stop.clone());
        std::thread::spawn(move || {
            while !s.load(Ordering::Acquire) {
                let Ok((client, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                };
                if c.load(Ordering::Acquire) {
                    drop(client);
                    continue;
                }
                let _ = client.set_nonblocking(false);
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
                    continue;
                };
                for (from, to) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server.try_clone().unwrap(), client.try_clone().unwrap()),
                ] {
                    std::thread::spawn(move || pump(from, to));
                }
                let mut open = o.lock().unwrap();
                open.push(client);
                open.push(server);
            }
        });
        Proxy {
            port,
            cut,
            open,
            stop,
        }
    }

    fn cut(&self) {
        self.cut.store(true, Ordering::Release);
        for s in self.open.lock().unwrap().drain(..) {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }

    fn heal(&self) {
        self.cut.store(false, Ordering::Release);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        self.cut();
    }
}

fn pump(mut from: TcpStream, mut to: TcpStream) {
    let mut buf = [0u8; 16 << 10];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Both);
}

#[test]
fn a_paused_server_and_a_server_cut_off_from_the_catalog_commit_nothing_after_their_jobs_move() {
    let cluster = crate::postgres::Cluster::start();
    let dir = tempfile::tempdir().unwrap();
    let expected = crate::support::golden_q5(EVENTS, dir.path());
    let allow = format!("postgres://127.0.0.1:{}", cluster.port());
    let first = Server::start(dir.path(), 0, &catalog_url(cluster.port()), &allow, &[]);
    // The second server reaches the catalog through a proxy the test can cut.
    let proxy = Proxy::start(cluster.port());
    let second = Server::start(dir.path(), 1, &catalog_url(proxy.port), &allow, &[]);

    // One job on each server: the first by its `placement` (else it would stay on the server
    // it was submitted to, on a tie), the second on the emptier server, the first. A placement
    // names a live server of the fleet, so first the second must be one in the first's view
    // (on a loaded machine its first heartbeat may come after its HTTP port opens).
    first.wait("/api/v1/fleet", Duration::from_secs(60), |v| {
        alive(v).contains(&second.base.as_str())
    });
    let mut names = Vec::new();
    let connection = sink_connection(cluster.port());
    for n in 0..2 {
        let name = format!("paused_{n}");
        // The paused server's job writes to PostgreSQL: woken, its copy must stage nothing
        // (the staging table's fence), not only commit nothing.
        let table = (n == 0).then_some(connection.as_str());
        let (job, mut overrides) = q5(&name, table, "ck", EVENTS);
        if n == 0 {
            overrides.push(format!("placement.server={}", second.base));
        }
        first.submit(&job, &overrides);
        names.push((name, n == 0));
    }
    // A placement on no server of the fleet is refused.
    let (job, mut overrides) = q5("nowhere", None, "ck", EVENTS);
    overrides.push("placement.server=http://127.0.0.1:1".into());
    let mut query = url::form_urlencoded::Serializer::new(String::new());
    for o in &overrides {
        query.append_pair("set", o);
    }
    let mut refused = crate::support::agent()
        .post(format!("{}/api/v1/jobs?{}", first.base, query.finish()))
        .send(job.as_bytes())
        .unwrap();
    let text = refused.body_mut().read_to_string().unwrap();
    assert_eq!(refused.status(), 409, "{text}");
    assert!(text.contains("no live server of the fleet"), "{text}");
    let view = first.wait("/api/v1/fleet", Duration::from_secs(60), |v| {
        jobs(v).values().all(|j| j.2.is_some())
    });
    let on_second: Vec<String> = jobs(&view)
        .iter()
        .filter(|(_, j)| j.2.as_deref() == Some(second.base.as_str()))
        .map(|(id, _)| id.clone())
        .collect();
    assert_eq!(on_second.len(), 1, "{view}");
    let id = &on_second[0];
    first.wait(
        &format!("/api/v1/jobs/{id}/checkpoints"),
        Duration::from_secs(60),
        |v| v["completed"].as_u64().unwrap_or(0) >= 2,
    );

    // SIGSTOP the second server well past its lease: the first takes its job over.
    second.signal(nix::sys::signal::Signal::SIGSTOP);
    // (Asked of the fleet's view: a request for the job would be forwarded to the stopped
    // server until the takeover.)
    first.wait("/api/v1/fleet", Duration::from_secs(60), |v| {
        jobs(v)[id].2.as_deref() == Some(first.base.as_str())
    });
    std::thread::sleep(Duration::from_secs(1));
    second.signal(nix::sys::signal::Signal::SIGCONT);
    // Woken, it finds the lease gone and stops its copy: it lists the job no more as its own
    // (its list is the fleet's: the first server's copy is there, named by its server).
    second.wait("/api/v1/jobs", Duration::from_secs(60), |v| {
        v["jobs"].as_array().is_some_and(|j| {
            j.iter()
                .all(|j| j["id"] != id.as_str() || j["server"] != second.base.as_str())
        })
    });
    let log = second.log_text();
    assert!(
        log.contains("has not renewed") || log.contains("fenced: "),
        "the paused server says why it stopped its copy: {log}"
    );
    // Once, at one level: every line about the fencing is a warning saying `fenced`, and
    // no error is logged for it.
    let fenced: Vec<&str> = log.lines().filter(|l| l.contains("fenced")).collect();
    assert!(
        fenced.iter().all(|l| l.contains("WARN")),
        "fencing is a warning: {fenced:#?}"
    );
    assert!(
        !log.lines().any(|l| l.contains("ERROR")),
        "the paused server logs no error: {log}"
    );

    // A third job is placed on the second server (by its `placement`: the paused jobs may have
    // finished by now, and on a tie a job stays on the server it was submitted to); then the
    // second server is cut off from the catalog: it stops its copy by itself, and the first
    // resumes the job.
    // (Once the woken server's heartbeat says it is alive again: a placement names a live
    // server.)
    first.wait("/api/v1/fleet", Duration::from_secs(60), |v| {
        alive(v).contains(&second.base.as_str())
    });
    let name = "cut_off".to_string();
    let (job, mut overrides) = q5(&name, None, "ck", EVENTS);
    overrides.push(format!("placement.server={}", second.base));
    let third = first.submit(&job, &overrides);
    names.push((name, false));
    first.wait("/api/v1/fleet", Duration::from_secs(60), |v| {
        jobs(v)[&third].2.as_deref() == Some(second.base.as_str())
    });
    first.wait(
        &format!("/api/v1/jobs/{third}/checkpoints"),
        Duration::from_secs(60),
        |v| v["completed"].as_u64().unwrap_or(0) >= 2,
    );
    proxy.cut();
    // Taken over: the first server runs it (a second run), however far it has got since.
    first.wait(
        &format!("/api/v1/jobs/{third}"),
        Duration::from_secs(60),
        |v| v["run"].as_u64().unwrap_or(0) >= 2,
    );
    second.wait("/api/v1/jobs", Duration::from_secs(60), |v| {
        v["jobs"].as_array().is_some_and(|j| {
            j.iter()
                .all(|j| j["id"] != third.as_str() || j["server"] != second.base.as_str())
        })
    });
    assert!(
        second.log_text().contains("has not renewed"),
        "the cut-off server stopped its copies by itself: {}",
        second.log_text()
    );
    proxy.heal();

    first.wait("/api/v1/fleet", Duration::from_secs(300), |v| {
        jobs(v).values().all(|j| j.1 == "finished")
    });
    assert_outputs(dir.path(), &cluster, &names, &expected);
    assert_eq!(
        cluster.psql("SELECT count(*) FROM paused_0__weir_stage"),
        ["0"],
        "the paused copy left no staged rows behind"
    );
    // Ctrl-C on a server whose jobs all finished long before: it says nothing about their
    // leases (they ended with the jobs).
    let before = first.log_text().len();
    first.signal(nix::sys::signal::Signal::SIGINT);
    let stopped = Instant::now();
    while first.try_get("/api/v1/fleet").is_some() {
        assert!(
            stopped.elapsed() < Duration::from_secs(30),
            "Ctrl-C stops the server"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(500));
    let log = first.log_text();
    let after = log.get(before..).unwrap_or_default();
    assert!(
        !after.contains("lease") && !after.contains("fenced"),
        "nothing about leases at Ctrl-C: {after}"
    );
}

/// A server whose runtime is saturated (a large restore on two cores) must still renew its
/// leases, or a busy server is taken for a dead one and its jobs move back and forth. The
/// renewals run on a thread of their own: here the runtime's only thread is blocked for three
/// lease times, and the lease must still be this server's, unexpired, renewed all along.
#[test]
fn leases_are_renewed_while_the_servers_runtime_is_blocked() {
    use weir_http_ui::fleet::{Fleet, FleetConfig};

    let cluster = crate::postgres::Cluster::start();
    let url = catalog_url(cluster.port());
    let lease = Duration::from_secs(2);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let halt = tokio_util::sync::CancellationToken::new();
    let (fleet, epoch, mut lease_thread) = runtime.block_on(async {
        let config = FleetConfig {
            advertise: "http://127.0.0.1:9".into(),
            lease_ttl: lease,
        };
        let fleet = Fleet::join(&url, config).await.unwrap();
        let epoch = fleet.acquire(7, "busy", true, 4).await.unwrap();
        let lease_thread = fleet.clone().renew_on_own_thread(halt.clone()).unwrap();
        (fleet, epoch, lease_thread)
    });
    // The runtime's thread is this one: while it sleeps, nothing on that runtime runs.
    let blocked = Instant::now();
    runtime.block_on(async {
        std::thread::sleep(lease * 3);
    });
    let rows = cluster.psql(
        "SELECT owner, epoch, expires_at > clock_timestamp() FROM weir_leases WHERE job_id = 7",
    );
    assert_eq!(
        rows,
        [format!("{}|{epoch}|t", fleet.me())],
        "the lease stayed this server's and unexpired while its runtime was blocked"
    );
    let last = lease_thread.renewals.borrow_and_update().clone().unwrap();
    assert!(
        last.sent > blocked + lease * 2,
        "renewals went on while the runtime was blocked: the last was sent {:?} after the block began",
        last.sent - blocked
    );
    assert_eq!(last.leases.unwrap(), [(7, epoch)]);
    lease_thread.stop();
    // Stopped: the lease now lapses (nobody renews it), as a dead server's would.
    std::thread::sleep(lease + Duration::from_millis(500));
    let rows =
        cluster.psql("SELECT expires_at > clock_timestamp() FROM weir_leases WHERE job_id = 7");
    assert_eq!(rows, ["f"], "a stopped lease thread renews nothing");
}
