//! The Iceberg sink against an independent reader: pyiceberg (Apache Iceberg's own Python
//! library, `scripts/pyiceberg.sh`) reads the tables weir wrote through the same SQL catalog,
//! on a local warehouse with a SQLite catalog and on the S3 test server with a PostgreSQL
//! catalog, and what it reads must equal the same job's rows through the file sink: each row
//! once, through SIGKILLs and a stopped catalog database, with no data file left that no
//! snapshot references.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::postgres::Cluster;
use crate::recovery::{Rng, weir};
use crate::s3::{Proxy, S3Server};
use crate::support::{golden_q5, q5_rows, run_through_kills, script};

const EVENTS: u64 = 150_000;

/// q5 into `sink` (the YAML of its sink, indented under `out:`).
fn q5_job(dir: &Path, sink: &str) -> PathBuf {
    let text = std::fs::read_to_string(crate::support::job_file("jobs/nexmark/q5.yaml")).unwrap();
    let head = text.split("sinks:").next().unwrap();
    let job = format!("{head}sinks:\n  out:\n    kind: iceberg\n    from: q5\n{sink}");
    let path = dir.join("q5-iceberg.yaml");
    std::fs::write(&path, job).unwrap();
    path
}

/// What pyiceberg reads of `table` (see `scripts/iceberg_read.py`).
fn read(catalog: &str, warehouse: &str, table: &str, extra: &[&str]) -> Value {
    script("scripts/pyiceberg.sh", &["install"]);
    let out = Command::new(crate::support::repo().join("scripts/pyiceberg.sh"))
        .arg("read")
        .args([catalog, warehouse, table])
        .args(extra)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "pyiceberg failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn rows(read: &Value) -> Vec<Value> {
    read["rows"].as_array().unwrap().clone()
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn pyiceberg_reads_the_rows_of_the_file_sink_in_the_partitions_they_belong_to() {
    let dir = tempfile::tempdir().unwrap();
    let expected = golden_q5(EVENTS, dir.path());
    let catalog = dir.path().join("catalog.db");
    let warehouse = dir.path().join("warehouse");
    let job = q5_job(
        dir.path(),
        &format!(
            "    catalog: {{uri: \"sqlite://{}\"}}\n    warehouse: {}\n    namespace: nexmark\n    \
             table: q5\n    partition-by: [\"bucket[4](auction)\", \"hour(starttime)\"]\n",
            catalog.display(),
            warehouse.display()
        ),
    );
    let out = weir(&dir.path().join("data"))
        .arg("run")
        .arg(&job)
        .arg("--quiet")
        .args(["--set", &format!("sources.nexmark.events={EVENTS}")])
        .args(["--set", "parallelism=2"])
        .args(["--set", "checkpoint.interval=200ms"])
        .args(["--set", "sources.nexmark.rate=150000"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = read(
        &format!("sqlite:///{}", catalog.display()),
        &format!("file://{}", warehouse.display()),
        "nexmark.q5",
        &["--partitions"],
    );
    assert_eq!(
        q5_rows(rows(&got)),
        expected,
        "the table against the file sink's rows"
    );
    // One snapshot per checkpoint (and the final one), each saying which checkpoint.
    let snapshots = got["snapshots"].as_array().unwrap();
    assert!(
        snapshots.len() > 1,
        "several checkpoints committed: {snapshots:?}"
    );
    let mut checkpoints: Vec<u64> = snapshots
        .iter()
        .map(|s| s["weir.checkpoint"].as_str().unwrap().parse().unwrap())
        .collect();
    let n = checkpoints.len();
    checkpoints.dedup();
    assert_eq!(checkpoints.len(), n, "no checkpoint committed twice");
    // Every file in its partition, by pyiceberg's own transforms, and more than one partition.
    let partitions = got["partitions"].as_array().unwrap();
    assert!(partitions.iter().all(|p| p["ok"] == true), "{partitions:?}");
    let distinct: std::collections::BTreeSet<String> = partitions
        .iter()
        .map(|p| p["partition"].to_string())
        .collect();
    assert!(
        distinct.len() >= 4,
        "rows spread over buckets: {distinct:?}"
    );
    assert_eq!(
        strings(&got["files"]),
        strings(&got["stored"]),
        "no unreferenced file"
    );
}

#[test]
fn sigkills_and_a_stopped_catalog_database_commit_every_row_once_on_s3() {
    let dir = tempfile::tempdir().unwrap();
    let expected = golden_q5(EVENTS, dir.path());
    let s3 = S3Server::start();
    let mut db = Cluster::start();
    let connection = format!(
        "postgresql://postgres@127.0.0.1:{}/postgres?sslmode=disable",
        db.port()
    );
    let job = q5_job(
        dir.path(),
        &format!(
            "    catalog: {{uri: \"{connection}\"}}\n    warehouse:\n      url: s3://weir/lake\n      \
             endpoint: {}\n      allow-http: true\n      region: us-east-1\n      \
             access-key-id: test\n      secret-access-key: test\n      max-retries: 2\n    \
             namespace: nexmark\n    table: q5\n",
            s3.endpoint()
        ),
    );
    let data = dir.path().join("data");
    let spawn = |_run: usize| {
        weir(&data)
            .arg("run")
            .arg(&job)
            .arg("--quiet")
            .args(["--from", "latest"])
            .args(["--set", &format!("sources.nexmark.events={EVENTS}")])
            .args(["--set", "sources.nexmark.rate=75000"])
            .args(["--set", "parallelism=2"])
            .args(["--set", "checkpoint.interval=200ms"])
            .args(["--set", "restart.max-attempts=50"])
            .args(["--set", "restart.delay=300ms"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (mut logs, killed) = run_through_kills(
        "q5 into Iceberg",
        41,
        3,
        Duration::from_millis(300)..Duration::from_millis(2500),
        spawn,
    );
    assert!(killed >= 2, "the runs were killed: {killed}");
    // A last run after one more kill, whose catalog database stops at a random point of its
    // run and comes back: its commits fail, the job restarts and commits what it owes.
    let mut rng = Rng(97);
    let child = spawn(0);
    std::thread::sleep(Duration::from_millis(rng.between(300, 1500)));
    db.stop();
    std::thread::sleep(Duration::from_millis(1500));
    db.resume();
    let log = child.wait_with_output().unwrap();
    logs.push(String::from_utf8_lossy(&log.stderr).into_owned());
    let got = read(
        &format!(
            "postgresql+psycopg2://postgres@127.0.0.1:{}/postgres",
            db.port()
        ),
        "s3://weir/lake",
        "nexmark.q5",
        &["--s3", &s3.endpoint()],
    );
    let got_rows = q5_rows(rows(&got));
    if got_rows != expected || !log.status.success() {
        eprintln!("logs of the runs:\n{}", logs.join("\n---\n"));
    }
    assert!(log.status.success(), "the last run completes");
    let total = |m: &BTreeMap<[i64; 4], usize>| m.values().sum::<usize>();
    assert_eq!(
        total(&got_rows),
        total(&expected),
        "rows against the golden run"
    );
    assert_eq!(got_rows, expected);
    assert_eq!(
        strings(&got["files"]),
        strings(&got["stored"]),
        "every data file on S3 is referenced by the table"
    );
}

#[test]
fn a_table_of_other_columns_and_an_unreachable_catalog_fail_with_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = dir.path().join("catalog.db");
    let warehouse = dir.path().join("warehouse");
    let sink = format!(
        "    catalog: {{uri: \"sqlite://{}\"}}\n    warehouse: {}\n    namespace: nexmark\n    \
         table: q5\n",
        catalog.display(),
        warehouse.display()
    );
    let job = q5_job(dir.path(), &sink);
    let run = |job: &Path, sets: &[&str]| {
        let mut c = weir(&dir.path().join("data"));
        c.arg("run").arg(job).arg("--quiet");
        c.args(["--set", "sources.nexmark.events=20000"]);
        for s in sets {
            c.args(["--set", s]);
        }
        c.output().unwrap()
    };
    let first = run(&job, &[]);
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    // The same table from q5's columns renamed: refused, naming the columns, nothing added.
    let renamed = std::fs::read_to_string(&job)
        .unwrap()
        .replace("      auction: auction", "      item: auction");
    let other = dir.path().join("renamed.yaml");
    std::fs::write(&other, renamed).unwrap();
    let out = run(&other, &[]);
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("does not match the sink's input"), "{text}");
    assert!(text.contains("`item`"), "{text}");
    let before = read(
        &format!("sqlite:///{}", catalog.display()),
        &format!("file://{}", warehouse.display()),
        "nexmark.q5",
        &[],
    );
    assert_eq!(
        before["snapshots"].as_array().unwrap().len(),
        1,
        "nothing more committed"
    );
    // A catalog database nobody answers for: the job fails, saying which catalog.
    let port = crate::support::free_port();
    let out = run(
        &job,
        &[&format!(
            "sinks.out.catalog.uri=postgresql://postgres@127.0.0.1:{port}/postgres?sslmode=disable"
        )],
    );
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("PostgreSQL catalog"), "{text}");
}

#[test]
fn s3_errors_and_an_outage_mid_run_cost_retries_and_restarts_not_rows() {
    let dir = tempfile::tempdir().unwrap();
    let expected = golden_q5(EVENTS, dir.path());
    let s3 = S3Server::start();
    let proxy = Proxy::start(s3.port());
    let catalog = dir.path().join("catalog.db");
    let job = q5_job(
        dir.path(),
        &format!(
            "    catalog: {{uri: \"sqlite://{}\"}}\n    warehouse:\n      url: s3://weir/faults\n      \
             endpoint: {}\n      allow-http: true\n      region: us-east-1\n      \
             access-key-id: test\n      secret-access-key: test\n      max-retries: 1\n      \
             request-timeout: 2s\n    namespace: nexmark\n    table: q5\n",
            catalog.display(),
            proxy.endpoint()
        ),
    );
    let child = weir(&dir.path().join("data"))
        .arg("run")
        .arg(&job)
        .arg("--quiet")
        .args(["--set", &format!("sources.nexmark.events={EVENTS}")])
        .args(["--set", "sources.nexmark.rate=50000"])
        .args(["--set", "parallelism=2"])
        .args(["--set", "checkpoint.interval=200ms"])
        .args(["--set", "restart.max-attempts=50"])
        .args(["--set", "restart.delay=300ms"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Errors on writes (data files, manifests, metadata) early on, then the store gone for a
    // while in the middle of the run.
    std::thread::sleep(Duration::from_millis(600));
    proxy.fail_next("PUT", 4);
    std::thread::sleep(Duration::from_millis(700));
    proxy.set_down(true);
    std::thread::sleep(Duration::from_millis(1500));
    proxy.set_down(false);
    let log = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&log.stderr);
    assert!(log.status.success(), "the run completes: {text}");
    let got = read(
        &format!("sqlite:///{}", catalog.display()),
        "s3://weir/faults",
        "nexmark.q5",
        &["--s3", &s3.endpoint()],
    );
    let got_rows = q5_rows(rows(&got));
    if got_rows != expected {
        eprintln!("the run's log:\n{text}");
    }
    assert_eq!(got_rows, expected, "each row once, through the errors");
    assert_eq!(
        strings(&got["files"]),
        strings(&got["stored"]),
        "every data file on S3 is referenced by the table"
    );
}
