//! The `weir` binary: validate, schema, nexmark generate, run (with Ctrl-C), and the example job.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::*;

fn weir() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_weir"));
    c.current_dir(repo());
    c
}

#[test]
fn validate_accepts_every_shipped_job() {
    let mut jobs = Vec::new();
    for dir in ["jobs/nexmark", "jobs/examples"] {
        for e in std::fs::read_dir(repo().join(dir)).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "yaml") {
                jobs.push(p);
            }
        }
    }
    assert!(jobs.len() >= 7, "{jobs:?}");
    for job in jobs {
        let out = weir().arg("validate").arg(&job).output().unwrap();
        assert!(
            out.status.success(),
            "{}: {}",
            job.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn validate_reports_every_problem_with_file_line_column_and_key() {
    let dir = out_dir();
    let job = dir.path().join("bad.yaml");
    std::fs::write(
        &job,
        "name: bad\nsources:\n  g: {kind: nexmark, events: -3}\ntransforms:\n  f: {kind: filter, from: g.bid, where: price >}\nsinks:\n  o: {kind: blackhole, from: f, paralelism: 2}\n",
    )
    .unwrap();
    let out = weir().arg("validate").arg(&job).output().unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    let file = job.display().to_string();
    assert!(stderr.contains("has 3 problems"), "{stderr}");
    assert!(stderr.contains(&format!("{file}:3:")), "{stderr}");
    assert!(stderr.contains("sources.g.events"), "{stderr}");
    assert!(
        stderr.contains(&format!("{file}:5:")) && stderr.contains("transforms.f.where"),
        "{stderr}"
    );
    assert!(
        stderr
            .contains("sinks.o.paralelism: unknown key `paralelism`; did you mean `parallelism`?"),
        "{stderr}"
    );
}

#[test]
fn schema_prints_a_json_schema_of_job_files() {
    let out = weir().arg("schema").output().unwrap();
    assert!(out.status.success());
    let schema: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(schema["title"], "weir job");
    assert!(schema["properties"]["sources"].is_object());
    let validator = jsonschema_accepts(&schema, "jobs/nexmark/q1.yaml");
    assert!(
        validator,
        "the shipped job validates against the printed schema"
    );
}

/// Whether the job file, read as YAML, validates against `schema` (structure only).
fn jsonschema_accepts(schema: &Value, job: &str) -> bool {
    let text = std::fs::read_to_string(repo().join(job)).unwrap();
    let instance = weir_runtime::spec::yaml::parse(&text).unwrap().value;
    jsonschema::validator_for(schema)
        .unwrap()
        .is_valid(&instance)
}

#[test]
fn nexmark_generate_writes_the_requested_events() {
    let dir = out_dir();
    let file = dir.path().join("events.jsonl");
    let out = weir()
        .args(["nexmark", "generate", "--events", "5000", "--out"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&file).unwrap();
    let mut kinds = BTreeMap::new();
    for line in text.lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        let kind = v["type"].as_str().unwrap().to_string();
        assert!(v[&kind].is_object(), "{line}");
        *kinds.entry(kind).or_insert(0) += 1;
    }
    assert_eq!(kinds["person"], 100);
    assert_eq!(kinds["auction"], 300);
    assert_eq!(kinds["bid"], 4600);
}

/// Reference for the clicks example: per user, the totals over all qualifying clicks.
fn clicks_reference() -> BTreeMap<String, (i64, i64, f64, f64)> {
    let text = std::fs::read_to_string(repo().join("jobs/examples/clicks.jsonl")).unwrap();
    let mut totals: BTreeMap<String, (i64, i64, f64, f64)> = BTreeMap::new();
    for line in text.lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        let duration = v["duration_ms"].as_i64().unwrap();
        let page = v["page"].as_str().unwrap();
        if duration <= 0 || page.starts_with("/admin") {
            continue;
        }
        let user = v["user"].as_str().unwrap().to_lowercase();
        let mobile = ["phone", "tablet"].contains(&v["device"]["kind"].as_str().unwrap()) as i64;
        let seconds = duration as f64 / 1000.0;
        let t = totals.entry(user).or_insert((0, 0, 0.0, f64::MIN));
        t.0 += 1;
        t.1 += mobile;
        t.2 += seconds;
        t.3 = t.3.max(seconds);
    }
    totals
}

#[test]
fn the_example_job_ends_with_each_users_totals() {
    let dir = out_dir();
    let out = weir()
        .args(["run", "--quiet", "jobs/examples/clicks.yaml", "--set"])
        .arg(format!(
            "sinks.console={{kind: file, from: per-user, path: {}}}",
            dir.path().display()
        ))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // An upsert stream: a user's rows all come from the subtask owning their key, in order,
    // so the last row per user holds the final totals.
    let mut last: BTreeMap<String, Value> = BTreeMap::new();
    for row in read_parts(dir.path()) {
        last.insert(row["user"].as_str().unwrap().to_string(), row);
    }
    let expected = clicks_reference();
    assert_eq!(
        last.keys().collect::<Vec<_>>(),
        expected.keys().collect::<Vec<_>>()
    );
    for (user, (views, mobile, seconds, longest)) in expected {
        let row = &last[&user];
        assert_eq!(row["views"], views, "{user}");
        assert_eq!(row["mobile_views"], mobile, "{user}");
        assert!(
            (row["seconds"].as_f64().unwrap() - seconds).abs() < 1e-6,
            "{user}: {row}"
        );
        assert_eq!(row["longest"].as_f64().unwrap(), longest, "{user}");
    }
}

#[test]
fn ctrl_c_stops_the_sources_drains_and_flushes() {
    let dir = out_dir();
    let summary = dir.path().join("summary.json");
    let sink = dir.path().join("out");
    let child = weir()
        .args([
            "run",
            "--quiet",
            "jobs/nexmark/q1.yaml",
            "--set",
            "sources.nexmark.events=null",
        ])
        .args([
            "--set",
            "sources.nexmark.rate=50000",
            "--set",
            "parallelism=2",
            "--set",
        ])
        .arg(format!(
            "sinks.out={{kind: file, from: q1, path: {}}}",
            sink.display()
        ))
        .arg("--summary-json")
        .arg(&summary)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until output is flowing: a part file in progress exists.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !has_inprogress(&sink) {
        assert!(Instant::now() < deadline, "no output after 60 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    // weir turns transparent huge pages off for itself (checked below, once the child is
    // stopped, where the kernel shows the flag).
    let status = std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    if let Some(thp) = status.lines().find(|l| l.starts_with("THP_enabled:")) {
        assert_eq!(thp.split_whitespace().nth(1), Some("0"), "{thp}");
    }
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary: Value = serde_json::from_slice(&std::fs::read(&summary).unwrap()).unwrap();
    let sink_in = summary["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == "out")
        .unwrap()["records_in"]
        .as_u64()
        .unwrap();
    let rows = read_parts(&sink);
    assert!(sink_in > 0);
    assert_eq!(
        rows.len() as u64,
        sink_in,
        "every record that reached the sink was flushed"
    );
    let bids = summary["nodes"][0]["records_out"].as_u64().unwrap();
    assert_eq!(bids, sink_in, "nothing in flight was lost on the way");
}

fn has_inprogress(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries
            .filter_map(Result::ok)
            .any(|e| e.file_name().to_string_lossy().ends_with(".inprogress"))
    })
}

/// A job whose S3 secret key an alias copies to `to`, reading `input` as JSON lines. It takes
/// no checkpoints, so the storage is never contacted (weir run would list it at the start).
fn leaky_job(dir: &Path, input: &Path, to: &str) -> std::path::PathBuf {
    let job = dir.join("leaky.yaml");
    std::fs::write(
        &job,
        format!(
            "name: leaky\n\
             checkpoint:\n  storage:\n    url: s3://weir/leaky\n    \
             endpoint: http://127.0.0.1:9\n    allow-http: true\n    max-retries: 0\n    \
             access-key-id: weir\n    secret-access-key: &pw hunter2-hunter2\n\
             {to}: *pw\n\
             restart: {{max-attempts: 1, delay: 10ms}}\n\
             sources:\n  in: {{kind: jsonl, path: {}, schema: {{id: int}}}}\n\
             sinks:\n  out: {{kind: blackhole, from: in}}\n",
            input.display()
        ),
    )
    .unwrap();
    job
}

#[test]
fn run_and_validate_mask_the_jobs_secrets_in_their_messages_and_logs() {
    let dir = out_dir();
    let input = dir.path().join("in.jsonl");
    // The second record quotes the secret: its decode error (the run's failure, logged by the
    // supervisor and printed at the end) would show it.
    std::fs::write(&input, "{\"id\": 1}\n{\"id\": \"hunter2-hunter2\"}\n").unwrap();
    let masked = |out: &std::process::Output| {
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!out.status.success(), "{stderr}");
        assert!(!stderr.contains("hunter2"), "the secret leaked: {stderr}");
        assert!(stderr.contains("******"), "{stderr}");
        stderr
    };
    // Refused before it runs, with a problem that quotes the value it cannot read as a number.
    let refused = leaky_job(dir.path(), &input, "parallelism");
    for command in ["validate", "run"] {
        let out = weir()
            .args([command, refused.to_str().unwrap()])
            .env("WEIR_DATA_DIR", dir.path())
            .output()
            .unwrap();
        let stderr = masked(&out);
        assert!(stderr.contains("parallelism"), "{command}: {stderr}");
    }
    // Fails while it runs, on bad data (not restarted): the supervisor's error and the final
    // error quote the record.
    let job = leaky_job(dir.path(), &input, "description");
    let out = weir()
        .args(["run", "--quiet", job.to_str().unwrap()])
        .env("WEIR_DATA_DIR", dir.path())
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    let stderr = masked(&out);
    assert!(
        stderr.contains("retrying cannot help") && stderr.contains("error: "),
        "{stderr}"
    );
    // A secret given on the command line is masked as well.
    let plain = dir.path().join("plain.yaml");
    let text = std::fs::read_to_string(&job)
        .unwrap()
        .replace("&pw hunter2-hunter2", "from-the-command-line")
        .replace("description: *pw\n", "");
    std::fs::write(&plain, text).unwrap();
    let out = weir()
        .args(["run", "--quiet", plain.to_str().unwrap()])
        .args([
            "--set",
            "checkpoint.storage.secret-access-key=hunter2-hunter2",
        ])
        .env("WEIR_DATA_DIR", dir.path())
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    masked(&out);
}

/// A JSON-lines file whose one line is far longer than `max-line-length` (64 MiB against
/// 8 MiB here; the hostile case was 300 MB against the default 256 MiB): with `on-error:
/// fail` the run fails at once naming the file, the line and the limit; with `skip` the line
/// is skipped and counted and the lines after it are read. Both in a time linear in the file
/// (they took minutes when a long line was searched again from its start after every read).
#[test]
fn a_line_far_longer_than_the_limit_fails_or_is_skipped_promptly() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("long.jsonl");
    let mut text = b"{\"a\": 1}\n{\"a\": \"".to_vec();
    text.resize(text.len() + (64 << 20), b'x');
    text.extend_from_slice(b"\"}\n{\"a\": 2}\n");
    std::fs::write(&data, &text).unwrap();
    for on_error in ["fail", "skip"] {
        let job = dir.path().join(format!("{on_error}.yaml"));
        std::fs::write(
            &job,
            format!(
                "name: long-{on_error}\nsources:\n  in:\n    kind: jsonl\n    path: {}\n    \
                 schema: {{a: int}}\n    max-line-length: 8MiB\n    on-error: {on_error}\n\
                 sinks:\n  out: {{kind: stdout, from: in}}\n",
                data.display()
            ),
        )
        .unwrap();
        let started = Instant::now();
        let mut child = weir()
            .arg("run")
            .arg(&job)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        while child.try_wait().unwrap().is_none() {
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "{on_error}: still running after a minute"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let out = child.wait_with_output().unwrap();
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        if on_error == "fail" {
            assert!(!out.status.success(), "{stdout}{stderr}");
            assert!(
                stderr.contains(&format!("line 2 (byte 9) of {}", data.display()))
                    && stderr.contains("longer than 8388608 bytes"),
                "{stderr}"
            );
        } else {
            assert!(out.status.success(), "{stderr}");
            let rows: Vec<&str> = stdout.lines().filter(|l| l.starts_with('{')).collect();
            assert_eq!(rows, ["{\"a\":1}", "{\"a\":2}"], "{stdout}");
            assert!(
                stderr.contains("(1 records skipped)") || stdout.contains("(1 records skipped)"),
                "{stdout}{stderr}"
            );
        }
    }
}

/// A generator job of 1,000 events at `parallelism`, with `exchanges` keyed aggregates (each an
/// exchange of `parallelism` into `parallelism` subtasks).
fn wide_job(parallelism: u32, exchanges: usize) -> String {
    let mut text = format!(
        "name: wide\nparallelism: {parallelism}\n\
         sources:\n  gen: {{kind: nexmark, events: 1000}}\ntransforms:\n"
    );
    for i in 0..exchanges {
        text.push_str(&format!(
            "  by{i}: {{kind: key-by, from: gen.bid, keys: [auction]}}\n  \
             n{i}: {{kind: aggregate, from: by{i}, aggregates: {{n: count(*)}}}}\n"
        ));
    }
    text.push_str("sinks:\n");
    for i in 0..exchanges {
        text.push_str(&format!("  out{i}: {{kind: blackhole, from: n{i}}}\n"));
    }
    text
}

/// The footprint check's estimate of a channel (`plan::footprint::channel_bytes`) is what a
/// channel takes, within a factor of two: the growth of a run's peak memory from parallelism
/// 128 to 512 across one exchange (245,760 more channels, and 384 more subtasks per node),
/// per channel. Were a channel to grow (a larger message, a larger capacity default) and the
/// estimate not with it, the refusal would let through jobs that take the machine.
#[test]
fn a_channels_estimate_is_within_a_factor_of_two_of_what_it_takes() {
    let dir = tempfile::tempdir().unwrap();
    let small = wide_run_peak_kb(dir.path(), 128);
    let large = wide_run_peak_kb(dir.path(), 512);
    let channels = 512u64 * 512 - 128 * 128;
    let measured = large.saturating_sub(small) * 1024 / channels;
    let estimate = weir_runtime::plan::footprint::channel_bytes(1, 8);
    assert!(
        measured * 2 >= estimate && measured <= estimate * 2,
        "a channel takes {measured} bytes (peaks {small} kB at 128, {large} kB at 512); \
         the footprint check counts {estimate}"
    );
}

/// The largest parallelism a job file may ask (1,024) with a keyed exchange runs in bounded
/// memory and time (it went past 3 GB in three seconds; its million channels now take about
/// 1.8 GB); a job whose exchanges would take more than a quarter of the machine's memory is
/// refused before it starts, at its `parallelism`, naming the widest exchange.
/// Runs `wide_job(parallelism, 1)` in `dir` to its end, within 90 s: its peak resident size
/// in kB (the kernel's high-water mark, read while it runs).
fn wide_run_peak_kb(dir: &std::path::Path, parallelism: u32) -> u64 {
    let file = dir.join(format!("wide-{parallelism}.yaml"));
    std::fs::write(&file, wide_job(parallelism, 1)).unwrap();
    let started = Instant::now();
    let mut child = weir()
        .args(["run", "--quiet"])
        .arg(&file)
        .env("WEIR_DATA_DIR", dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut peak_kb = 0u64;
    while child.try_wait().unwrap().is_none() {
        if let Ok(status) = std::fs::read_to_string(format!("/proc/{}/status", child.id())) {
            let hwm = status
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok());
            peak_kb = peak_kb.max(hwm.unwrap_or(0));
        }
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "parallelism {parallelism} still running after 90 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    peak_kb
}

#[test]
fn the_widest_job_a_file_may_ask_runs_bounded_or_is_refused_before_it_starts() {
    let dir = tempfile::tempdir().unwrap();
    let peak_kb = wide_run_peak_kb(dir.path(), 1024);
    assert!(
        peak_kb > 0 && peak_kb < 2_600_000,
        "parallelism 1024 peaked at {peak_kb} kB"
    );

    // Enough exchanges of a million channels each (at least 1,200 bytes a channel) to pass a
    // quarter of this machine's memory.
    let memory = weir_runtime::plan::footprint::machine_memory().expect("Linux");
    let exchanges = (memory / 4 / (1_200 << 20)) as usize + 1;
    let many = dir.path().join("many.yaml");
    std::fs::write(&many, wide_job(1024, exchanges)).unwrap();
    for command in ["validate", "run"] {
        let started = Instant::now();
        let out = weir()
            .arg(command)
            .arg(&many)
            .env("WEIR_DATA_DIR", dir.path())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success(),
            "{command} of {exchanges} exchanges: {stderr}"
        );
        assert!(
            stderr.contains("many.yaml:2:14")
                && stderr.contains("1024 subtasks into 1024")
                && stderr.contains("a quarter of this machine's"),
            "{command}: {stderr}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{command} took {:?}",
            started.elapsed()
        );
    }
}
