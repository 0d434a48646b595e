//! `weir submit`, `weir jobs`, `weir cancel`, `weir savepoint ID`, `weir state`: a command-line client of a
//! `weir serve` (`--server URL` or `WEIR_SERVER`; the token, when the server needs one, from
//! `WEIR_TOKEN`).

use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::Value;

/// The server's address when none is given.
pub const DEFAULT_SERVER: &str = "http://127.0.0.1:8080";

/// Where the server is.
#[derive(clap::Args, Clone, Debug)]
pub struct ServerArgs {
    /// The `weir serve` to talk to. The bearer token, if it needs one, is read from WEIR_TOKEN.
    #[arg(long, env = "WEIR_SERVER", default_value = DEFAULT_SERVER, value_name = "URL")]
    pub server: String,
}

/// A connection to a server's API.
pub struct Client {
    base: String,
    token: Option<String>,
    agent: ureq::Agent,
}

impl Client {
    pub fn new(server: &str) -> Self {
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(60)))
            .build();
        Client {
            base: server.trim_end_matches('/').to_owned(),
            token: std::env::var("WEIR_TOKEN").ok().filter(|t| !t.is_empty()),
            agent: ureq::Agent::new_with_config(config),
        }
    }

    /// `method path` with an optional body; the status and the JSON answer.
    fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<(&str, Vec<u8>)>,
    ) -> anyhow::Result<(u16, Value)> {
        let url = format!("{}{path}", self.base);
        let auth = self.token.as_ref().map(|t| format!("Bearer {t}"));
        let response = match method {
            "GET" => {
                let mut r = self.agent.get(&url);
                if let Some(a) = &auth {
                    r = r.header("Authorization", a);
                }
                r.call()
            }
            _ => {
                let mut r = self.agent.post(&url);
                if let Some(a) = &auth {
                    r = r.header("Authorization", a);
                }
                match body {
                    Some((content_type, bytes)) => r.content_type(content_type).send(bytes),
                    None => r.send_empty(),
                }
            }
        };
        let mut response = response.with_context(|| format!("cannot reach {url}"))?;
        let status = response.status().as_u16();
        let text = response
            .body_mut()
            .read_to_string()
            .with_context(|| format!("reading the answer of {url}"))?;
        let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        Ok((status, value))
    }

    /// Like [`Self::call`], failing with the server's message unless the status is 2xx.
    fn ok(&self, method: &str, path: &str, body: Option<(&str, Vec<u8>)>) -> anyhow::Result<Value> {
        let (status, value) = self.call(method, path, body)?;
        if !(200..300).contains(&status) {
            bail!("{} (HTTP {status})", message(&value));
        }
        Ok(value)
    }
}

/// The `error` of an error answer.
fn message(v: &Value) -> String {
    match v.get("error").and_then(Value::as_str) {
        Some(e) => e.to_owned(),
        None => v.to_string(),
    }
}

fn report(result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// What `weir submit` passes besides the file.
#[derive(Clone, Debug, Default)]
pub struct SubmitArgs {
    pub overrides: Vec<String>,
    pub parallelism: Option<u32>,
    pub from: Option<String>,
}

impl SubmitArgs {
    /// The submit route with these options as its query.
    fn path(&self) -> String {
        let mut query = url::form_urlencoded::Serializer::new(String::new());
        for o in &self.overrides {
            query.append_pair("set", o);
        }
        if let Some(p) = self.parallelism {
            query.append_pair("parallelism", &p.to_string());
        }
        if let Some(f) = &self.from {
            query.append_pair("from", f);
        }
        let query = query.finish();
        if query.is_empty() {
            "/api/v1/jobs".to_owned()
        } else {
            format!("/api/v1/jobs?{query}")
        }
    }
}

/// `weir submit JOB.yaml [--set K=V]... [--parallelism N] [--from SNAPSHOT]`: prints the new
/// job's id; problems of the file as `weir validate` prints them.
pub fn submit(server: &ServerArgs, job: &Path, args: &SubmitArgs) -> ExitCode {
    report((|| {
        let text = std::fs::read(job).with_context(|| format!("reading {}", job.display()))?;
        let client = Client::new(&server.server);
        let (status, v) = client.call("POST", &args.path(), Some(("application/yaml", text)))?;
        if status == 400
            && let Some(problems) = v.get("problems").and_then(Value::as_array)
        {
            let n = problems.len();
            eprintln!(
                "{} has {n} problem{}:",
                job.display(),
                if n == 1 { "" } else { "s" }
            );
            for p in problems {
                let at = match (p["line"].as_u64(), p["column"].as_u64()) {
                    (Some(l), Some(c)) => format!(":{l}:{c}"),
                    _ => String::new(),
                };
                let key = p["key"].as_str().unwrap_or_default();
                let text = p["message"].as_str().unwrap_or_default();
                if key.is_empty() {
                    eprintln!("  {}{at}: {text}", job.display());
                } else {
                    eprintln!("  {}{at}: {key}: {text}", job.display());
                }
            }
            bail!("the job was not submitted");
        }
        if status != 201 {
            bail!("{} (HTTP {status})", message(&v));
        }
        let id = v["id"].as_str().unwrap_or_default();
        println!("{id}");
        eprintln!(
            "submitted job `{}` as {id}: {}/#/jobs/{id}",
            v["name"].as_str().unwrap_or_default(),
            client.base
        );
        Ok(())
    })())
}

/// `weir jobs`: one line per job (in a fleet, every server's, with the server running each).
pub fn jobs(server: &ServerArgs) -> ExitCode {
    report((|| {
        let v = Client::new(&server.server).ok("GET", "/api/v1/jobs", None)?;
        let jobs = v["jobs"].as_array().cloned().unwrap_or_default();
        let fleet = jobs.iter().any(|j| j["server"].is_string());
        println!(
            "{:>4}  {:24}  {:11}  {:>14}  {:>12}  {:>9}{}",
            "id",
            "name",
            "state",
            "events",
            "events/s",
            "time",
            if fleet { "  server" } else { "" }
        );
        for j in jobs {
            println!(
                "{:>4}  {:24}  {:11}  {:>14}  {:>12}  {:>8.1}s{}",
                j["id"].as_str().unwrap_or_default(),
                j["name"].as_str().unwrap_or_default(),
                j["state"].as_str().unwrap_or_default(),
                crate::run::group(j["events"].as_u64().unwrap_or(0)),
                crate::run::group(j["events-per-second"].as_f64().unwrap_or(0.0) as u64),
                j["duration-ms"].as_f64().unwrap_or(0.0) / 1000.0,
                j["server"]
                    .as_str()
                    .map(|s| format!("  {s}"))
                    .unwrap_or_default(),
            );
        }
        for missing in v["unanswered"].as_array().into_iter().flatten() {
            eprintln!(
                "not listed: the jobs of {}",
                missing.as_str().unwrap_or_default()
            );
        }
        Ok(())
    })())
}

/// `weir server list`: the fleet's servers and jobs.
pub fn fleet(server: &ServerArgs) -> ExitCode {
    report((|| {
        let v = Client::new(&server.server).ok("GET", "/api/v1/fleet", None)?;
        println!(
            "{:40}  {:9}  {:>8}  {:>5}  {:>9}",
            "server", "state", "subtasks", "jobs", "heartbeat"
        );
        for s in v["servers"].as_array().cloned().unwrap_or_default() {
            let state = if s["draining"].as_bool().unwrap_or(false) {
                "draining"
            } else if s["alive"].as_bool().unwrap_or(false) {
                "alive"
            } else {
                "silent"
            };
            println!(
                "{:40}  {:9}  {:>8}  {:>5}  {:>7.1}s",
                s["url"].as_str().unwrap_or_default(),
                state,
                s["subtasks"].as_u64().unwrap_or(0),
                s["jobs"].as_u64().unwrap_or(0),
                s["heartbeat-age-ms"].as_f64().unwrap_or(0.0) / 1000.0,
            );
        }
        println!();
        println!(
            "{:>4}  {:24}  {:11}  {:40}  {:>6}",
            "id", "name", "state", "server", "epoch"
        );
        for j in v["jobs"].as_array().cloned().unwrap_or_default() {
            println!(
                "{:>4}  {:24}  {:11}  {:40}  {:>6}",
                j["id"].as_str().unwrap_or_default(),
                j["name"].as_str().unwrap_or_default(),
                j["state"].as_str().unwrap_or_default(),
                j["server"].as_str().unwrap_or("-"),
                j["epoch"]
                    .as_u64()
                    .map_or_else(|| "-".to_owned(), |e| e.to_string()),
            );
        }
        Ok(())
    })())
}

/// `weir server drain URL`: moves the server's jobs to the fleet's other servers.
pub fn drain(url: &str) -> ExitCode {
    report((|| {
        let v = Client::new(url).ok("POST", "/api/v1/fleet/drain", None)?;
        let moved = v["moved"].as_array().cloned().unwrap_or_default();
        for m in &moved {
            eprintln!(
                "job {} moved to {}",
                m["id"].as_str().unwrap_or_default(),
                m["to"].as_str().unwrap_or("the first server to take it")
            );
        }
        eprintln!(
            "{url} is drained ({} jobs moved); it takes no new jobs",
            moved.len()
        );
        Ok(())
    })())
}

/// `weir restart ID [--from SNAPSHOT]`: a new run of an ended job.
pub fn restart(server: &ServerArgs, id: &str, from: Option<&str>) -> ExitCode {
    report((|| {
        let path = format!("/api/v1/jobs/{}/restart", segment(id)?);
        let body = serde_json::to_vec(&serde_json::json!({ "from": from }))?;
        let v = Client::new(&server.server).ok("POST", &path, Some(("application/json", body)))?;
        eprintln!(
            "job {id} (`{}`) is {} (run {})",
            v["name"].as_str().unwrap_or_default(),
            v["state"].as_str().unwrap_or_default(),
            v["run"].as_u64().unwrap_or_default()
        );
        Ok(())
    })())
}

/// `weir rescale ID N`: savepoint, stop, and a new run at parallelism `N` from the savepoint.
pub fn rescale(server: &ServerArgs, id: &str, parallelism: u32) -> ExitCode {
    report((|| {
        let path = format!("/api/v1/jobs/{}/rescale", segment(id)?);
        let body = serde_json::to_vec(&serde_json::json!({ "parallelism": parallelism }))?;
        let v = Client::new(&server.server).ok("POST", &path, Some(("application/json", body)))?;
        eprintln!(
            "job {id} (`{}`) runs at parallelism {parallelism} from its savepoint (run {})",
            v["name"].as_str().unwrap_or_default(),
            v["run"].as_u64().unwrap_or_default()
        );
        Ok(())
    })())
}

/// `weir cancel ID`.
pub fn cancel(server: &ServerArgs, id: &str) -> ExitCode {
    report((|| {
        let path = format!("/api/v1/jobs/{}/cancel", segment(id)?);
        let v = Client::new(&server.server).ok("POST", &path, None)?;
        eprintln!(
            "job {id} (`{}`) is {}",
            v["name"].as_str().unwrap_or_default(),
            v["state"].as_str().unwrap_or_default()
        );
        Ok(())
    })())
}

/// `weir savepoint ID --server URL [--stop]`: asks for a savepoint, waits for it, prints where
/// it is.
pub fn savepoint(server: &str, id: &str, stop: bool, timeout: Duration) -> ExitCode {
    report((|| {
        let client = Client::new(server);
        let id = segment(id)?;
        let body = serde_json::to_vec(&serde_json::json!({ "stop": stop }))?;
        let v = client.ok(
            "POST",
            &format!("/api/v1/jobs/{id}/savepoints"),
            Some(("application/json", body)),
        )?;
        let request = v["id"].as_u64().context("the server gave no request id")?;
        eprintln!(
            "asked job {id} for a savepoint{}; waiting for it",
            if stop { " and to stop" } else { "" }
        );
        let deadline = Instant::now() + timeout;
        loop {
            let s = client.ok(
                "GET",
                &format!("/api/v1/jobs/{id}/savepoints/{request}"),
                None,
            )?;
            match s["status"].as_str() {
                Some("completed") => {
                    println!("{}", s["location"].as_str().unwrap_or_default());
                    if let Some(sp) = s["snapshot-id"].as_u64() {
                        eprintln!(
                            "restart from it with POST /api/v1/jobs/{id}/restart {{\"from\": \"sp-{sp}\"}}"
                        );
                    }
                    return Ok(());
                }
                Some("failed") => bail!(
                    "the savepoint failed: {}",
                    s["error"].as_str().unwrap_or("no reason given")
                ),
                _ => {}
            }
            if Instant::now() > deadline {
                bail!("no savepoint after {}", humantime::format_duration(timeout));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    })())
}

/// What `weir state` looks up.
#[derive(clap::Args, Clone, Debug)]
pub struct StateArgs {
    /// The job's id (see `weir jobs`).
    pub id: String,
    /// The keyed operator (a node of the job that declares `queryable:`).
    pub operator: String,
    /// The state (e.g. `accumulators`, `windows`, `sessions`).
    pub state: String,
    /// The key: the key column's value, or a JSON array for several key columns.
    #[arg(long, conflicts_with = "prefix", required_unless_present = "prefix")]
    pub key: Option<String>,
    /// Scan the keys whose (first) column, as text, starts with this.
    #[arg(long)]
    pub prefix: Option<String>,
    /// Most entries to print.
    #[arg(long)]
    pub limit: Option<usize>,
    /// `direct` (a RocksDB snapshot, as fresh as the last write-through) or `ordered`
    /// (answered by the operator between batches: read-your-writes). Default: the state's.
    #[arg(long, value_parser = ["direct", "ordered"])]
    pub path: Option<String>,
    #[command(flatten)]
    pub server: ServerArgs,
}

/// `weir state ID OPERATOR STATE --key K`: prints the entries as JSON lines, and how fresh
/// they are on standard error.
pub fn state(args: &StateArgs) -> ExitCode {
    report((|| {
        let mut query = Vec::new();
        for (name, value) in [
            ("key", args.key.clone()),
            ("prefix", args.prefix.clone()),
            ("limit", args.limit.map(|l| l.to_string())),
            ("path", args.path.clone()),
        ] {
            if let Some(v) = value {
                query.push(format!("{name}={}", percent_encode(&v)));
            }
        }
        let path = format!(
            "/api/v1/jobs/{}/state/{}/{}?{}",
            segment(&args.id)?,
            percent_encode(&args.operator),
            percent_encode(&args.state),
            query.join("&")
        );
        let v = Client::new(&args.server.server).ok("GET", &path, None)?;
        let entries = v["entries"].as_array().cloned().unwrap_or_default();
        for e in &entries {
            println!("{e}");
        }
        let age = v["freshness"]["age-ms"].as_i64().unwrap_or(0);
        eprintln!(
            "{} entr{} from `{}.{}` ({} path{}), as of {} ms ago{}",
            entries.len(),
            if entries.len() == 1 { "y" } else { "ies" },
            args.operator,
            args.state,
            v["path"].as_str().unwrap_or("?"),
            if v["freshness"]["read-your-writes"].as_bool() == Some(true) {
                ", read-your-writes"
            } else {
                ""
            },
            age,
            if v["truncated"].as_bool() == Some(true) {
                "; more entries were left out (raise --limit)"
            } else {
                ""
            }
        );
        Ok(())
    })())
}

/// `s` with everything but unreserved URL characters percent-encoded.
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A job id as one URL path segment (ids are numbers; anything else cannot name a job).
fn segment(id: &str) -> anyhow::Result<&str> {
    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
        bail!("`{id}` is not a job id (see `weir jobs`)");
    }
    Ok(id)
}
