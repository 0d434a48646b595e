//! The PostgreSQL CDC source against real servers (`scripts/pg-cluster.sh`, `wal_level =
//! logical`): each test starts a throwaway cluster of its own.
//!
//! - A mirror through SIGKILLs and a database restart: a writer makes random inserts,
//!   updates (key changes included) and deletes on two tables while a job mirrors them into
//!   two keyed tables through the PostgreSQL sink; the job is killed at random points and
//!   resumed with `--from latest` (once at another parallelism), and the database is stopped
//!   for a while mid-run. When the writer stops and the job catches up, each target equals its
//!   source (`EXCEPT` both ways is empty), and the slot's confirmed position has advanced past
//!   the last change.
//! - A join of a CDC table with a stream of events from a file, kept current while the table
//!   changes (renames, deletes, customers that arrive after their orders), checked against a
//!   naive join of the final table with the events.
//! - Problems that stop the job with what to do: a table without a primary key, a type weir
//!   cannot read as declared, a dropped column, a `TRUNCATE`, a slot dropped by hand.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::postgres::Cluster;
use crate::recovery::{Rng, weir};

const SOURCES: &str = "
CREATE TABLE src_a (id int PRIMARY KEY, v text, n bigint, ts timestamptz(3), big text);
ALTER TABLE src_a REPLICA IDENTITY FULL;
CREATE TABLE src_b (k1 int, k2 text, amount numeric(12, 2), flag boolean, PRIMARY KEY (k1, k2));
INSERT INTO src_a SELECT g, 'v' || g, g * 10, timestamptz '2026-01-01 00:00:00+00' + g * interval '1.5 s', NULL
  FROM generate_series(1, 50000) g;
INSERT INTO src_b SELECT g % 40, 'x' || (g / 40), g * 1.25, g % 3 = 0 FROM generate_series(0, 399) g;
";

/// The mirror job: both tables into keyed tables of the same cluster.
fn mirror_job(dir: &Path, connection: &str) -> PathBuf {
    let job = dir.join("mirror.yaml");
    std::fs::write(
        &job,
        format!(
            "name: cdc-mirror
sources:
  cdc:
    kind: postgres-cdc
    connection: {connection}
    heartbeat: 300ms
    snapshot-fetch: 20
    tables:
      - table: public.src_a
        name: a
        schema: {{id: int, v: string, n: int, ts: timestamp, big: string}}
        key: [id]
      - table: src_b
        name: b
        schema: {{k1: int, k2: string, amount: float, flag: bool}}
        key: [k1, k2]
checkpoint:
  interval: 200ms
restart: {{strategy: exponential-delay, delay: 100ms, max-delay: 1s, max-attempts: 1000}}
sinks:
  a:
    kind: postgres
    from: cdc.a
    connection: {connection}
    table: tgt_a
    key: [id]
    create-table: true
    batch-size: 200
    retry: {{max-attempts: 1}}
  b:
    kind: postgres
    from: cdc.b
    connection: {connection}
    table: tgt_b
    key: [k1, k2]
    create-table: true
    batch-size: 200
    retry: {{max-attempts: 1}}
"
        ),
    )
    .unwrap();
    job
}

/// One random transaction of 1 to 4 changes over reused keys: inserts (or upserts), updates,
/// key changes, deletes, large values stored out of line and updates that leave them as they
/// are.
fn transaction(rng: &mut Rng) -> String {
    let mut sql = String::from("BEGIN;");
    for _ in 0..rng.between(1, 5) {
        let id = rng.between(1, 3600);
        let b = (rng.between(0, 45), rng.between(0, 12));
        let n = rng.between(0, 1_000_000);
        sql.push_str(&match rng.between(0, 10) {
            0 | 1 => format!(
                "INSERT INTO src_a VALUES ({id}, 'i{n}', {n}, now(), NULL) ON CONFLICT (id) DO \
                 UPDATE SET v = excluded.v, n = excluded.n, ts = excluded.ts;"
            ),
            2 => format!("UPDATE src_a SET n = n + 1, v = 'u{n}' WHERE id = {id};"),
            3 => format!(
                "UPDATE src_a SET id = {} WHERE id = {id} AND NOT EXISTS (SELECT 1 FROM src_a \
                 WHERE id = {});",
                id + 7,
                id + 7
            ),
            4 => format!("DELETE FROM src_a WHERE id = {id};"),
            5 => format!(
                "UPDATE src_a SET big = (SELECT string_agg(md5(random()::text), '') FROM \
                 generate_series(1, 200)) WHERE id = {id};"
            ),
            6 => format!(
                "INSERT INTO src_b VALUES ({}, 'x{}', {n}.{:02}, {}) ON CONFLICT (k1, k2) DO \
                 UPDATE SET amount = excluded.amount, flag = excluded.flag;",
                b.0,
                b.1,
                n % 100,
                n.is_multiple_of(2)
            ),
            7 => format!(
                "UPDATE src_b SET flag = NOT flag, amount = NULL WHERE k1 = {} AND k2 = 'x{}';",
                b.0, b.1
            ),
            8 => format!("DELETE FROM src_b WHERE k1 = {} AND k2 = 'x{}';", b.0, b.1),
            _ => format!(
                "UPDATE src_b SET k2 = 'y{n}' WHERE k1 = {} AND k2 = 'x{}';",
                b.0, b.1
            ),
        });
    }
    sql.push_str("COMMIT;\n");
    sql
}

/// Writes random transactions through one `psql` until `stop`; a failed `psql` (the database
/// stopped) is started again after a pause. What the sources hold at the end is the truth the
/// targets are compared with, so a transaction lost to a stop does not matter.
fn writer(port: u16, seed: u64, stop: std::sync::Arc<std::sync::atomic::AtomicBool>) -> u64 {
    let mut rng = Rng(seed | 1);
    let mut written = 0;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let mut psql = Command::new("psql")
            .args(["-h", "127.0.0.1", "-p", &port.to_string()])
            .args([
                "-U",
                "postgres",
                "-d",
                "postgres",
                "-q",
                "-v",
                "ON_ERROR_STOP=1",
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut stdin = psql.stdin.take().unwrap();
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            if stdin.write_all(transaction(&mut rng).as_bytes()).is_err() {
                break;
            }
            written += 1;
            std::thread::sleep(Duration::from_millis(4));
        }
        drop(stdin);
        let _ = psql.wait();
        std::thread::sleep(Duration::from_millis(200));
    }
    written
}

/// Rows in one table and not the other, both ways, for each pair.
fn differences(cluster: &Cluster) -> (i64, i64) {
    let a = "id, v, n, (extract(epoch from ts) * 1000)::bigint, big";
    let b = "k1, k2, amount::float8, flag";
    let count = |src: &str, tgt: &str, cols: &str| -> i64 {
        cluster.psql(&format!(
            "SELECT count(*) FROM ((SELECT {cols} FROM {src} EXCEPT SELECT {cols} FROM {tgt}) \
             UNION ALL (SELECT {cols} FROM {tgt} EXCEPT SELECT {cols} FROM {src})) d"
        ))[0]
            .parse()
            .unwrap()
    };
    (count("src_a", "tgt_a", a), count("src_b", "tgt_b", b))
}

fn spawn_mirror(data: &Path, job: &Path, parallelism: u32) -> Child {
    let mut cmd = weir(data);
    cmd.arg("run").arg(job).arg("--quiet");
    cmd.args(["--from", "latest"]);
    cmd.args(["--set", &format!("parallelism={parallelism}")]);
    cmd.stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn kill(mut child: Child) -> String {
    let _ = child.kill();
    let out = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_mirror_through_sigkills_and_a_database_restart_equals_its_source_tables() {
    let mut cluster = Cluster::start();
    cluster.psql(SOURCES);
    let dir = tempfile::tempdir().unwrap();
    let job = mirror_job(dir.path(), &cluster.connection());
    let data = dir.path().join("data");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let port = cluster.port();
    let writing = {
        let stop = stop.clone();
        std::thread::spawn(move || writer(port, 52, stop))
    };
    let mut rng = Rng(0x5eed_cdc1);
    let mut logs = Vec::new();
    // Four runs killed: the first in the middle of its copy, the others at random points,
    // the third at parallelism 2, the database stopped for a moment in the middle of the
    // second.
    for run in 0..4 {
        let child = spawn_mirror(&data, &job, if run == 2 { 2 } else { 1 });
        if run == 0 {
            // The first run dies in the middle of its copy, once a checkpoint has committed
            // part of it: the next resumes the copy after its last key.
            let started = Instant::now();
            while started.elapsed() < Duration::from_secs(20) {
                let made = cluster.psql("SELECT count(*) FROM pg_tables WHERE tablename = 'tgt_a'");
                if made == ["1"] && cluster.psql("SELECT count(*) FROM tgt_a") != ["0"] {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            logs.push(kill(child));
            continue;
        }
        let at = Duration::from_millis(rng.between(800, 3000));
        std::thread::sleep(at / 2);
        if run == 1 {
            cluster.stop();
            std::thread::sleep(Duration::from_millis(rng.between(500, 2000)));
            cluster.resume();
        }
        std::thread::sleep(at / 2);
        logs.push(kill(child));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let written = writing.join().unwrap();
    assert!(written > 100, "the writer wrote {written} transactions");
    let end = cluster.psql("SELECT pg_current_wal_lsn()")[0].clone();
    // The last run catches up.
    let child = spawn_mirror(&data, &job, 1);
    let started = Instant::now();
    let mut diff = (-1, -1);
    while started.elapsed() < Duration::from_secs(90) {
        std::thread::sleep(Duration::from_millis(500));
        if cluster.psql("SELECT count(*) FROM pg_tables WHERE tablename IN ('tgt_a', 'tgt_b')")
            == ["2"]
        {
            diff = differences(&cluster);
            if diff == (0, 0) {
                break;
            }
        }
    }
    // The slot confirms past the last change once a checkpoint covers it.
    let mut confirmed = false;
    while started.elapsed() < Duration::from_secs(100) && diff == (0, 0) {
        let advanced = cluster.psql(&format!(
            "SELECT confirmed_flush_lsn >= '{end}' FROM pg_replication_slots \
             WHERE slot_name = 'weir_cdc_mirror_cdc'"
        ));
        if advanced == ["t"] {
            confirmed = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    logs.push(kill(child));
    if std::env::var_os("CDC_LOGS").is_some() || diff != (0, 0) || !confirmed {
        eprintln!(
            "written {written}; logs of the runs:\n{}",
            logs.join("\n---\n")
        );
    }
    assert_eq!(diff, (0, 0), "rows differing (src_a/tgt_a, src_b/tgt_b)");
    assert!(confirmed, "the slot's confirmed position passed {end}");
    let rows = cluster.psql("SELECT count(*) FROM tgt_a")[0]
        .parse::<i64>()
        .unwrap();
    assert!(
        rows > 45_000,
        "the mirror holds the snapshot's rows: {rows}"
    );
    let resumed = logs
        .iter()
        .filter(|l| l.contains("resuming a copy cut short"))
        .count();
    assert!(resumed >= 1, "a run resumed a copy cut short");
}

/// Runs `job` (a source table `t` declared by `tables`) until it fails or `wait` passes;
/// its stderr.
fn run_until_failure(cluster: &Cluster, dir: &Path, tables: &str, wait: Duration) -> String {
    let job = dir.join("job.yaml");
    std::fs::write(
        &job,
        format!(
            "name: cdc-problem
sources:
  cdc:
    kind: postgres-cdc
    connection: {}
    heartbeat: 200ms
    tables:
{tables}
checkpoint:
  interval: 200ms
sinks:
  out: {{kind: blackhole, from: cdc.t}}
",
            cluster.connection()
        ),
    )
    .unwrap();
    let mut cmd = weir(&dir.join("data"));
    let mut child = cmd
        .arg("run")
        .arg(&job)
        .args(["--from", "latest"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while started.elapsed() < wait && child.try_wait().unwrap().is_none() {
        std::thread::sleep(Duration::from_millis(50));
    }
    kill(child)
}

#[test]
fn problems_stop_the_job_saying_what_to_do() {
    let cluster = Cluster::start();
    cluster.psql(
        "CREATE TABLE nokey (id int, v text); INSERT INTO nokey VALUES (1, 'a');
         CREATE TABLE shapes (id int PRIMARY KEY, p point); INSERT INTO shapes VALUES (1, '(1,2)');
         CREATE TABLE t (id int PRIMARY KEY, v text, w int); INSERT INTO t VALUES (1, 'a', 1);",
    );
    let wait = Duration::from_secs(20);
    let table = |name: &str, schema: &str, key: &str| {
        format!("      - {{table: {name}, name: t, schema: {schema}, key: {key}}}")
    };
    // Refused when the job starts.
    for (name, schema, key, says) in [
        (
            "nokey",
            "{id: int, v: string}",
            "[id]",
            ["has no primary key", "REPLICA IDENTITY FULL"],
        ),
        (
            "shapes",
            "{id: int, p: int}",
            "[id]",
            ["column `p` of `public.shapes` is `point`", "`string`"],
        ),
        (
            "t",
            "{id: int, v: string}",
            "[v]",
            ["its primary key is [id]", "declare the primary key"],
        ),
    ] {
        let d = tempfile::tempdir().unwrap();
        let log = run_until_failure(&cluster, d.path(), &table(name, schema, key), wait);
        assert!(says.iter().all(|s| log.contains(s)), "{name}: {log}");
    }
    // Stopped while running: a dropped column, then (on a fresh start) a truncate.
    for (schema, sql, says) in [
        (
            "{id: int, v: string, w: int}",
            "ALTER TABLE t DROP COLUMN w; INSERT INTO t VALUES (2, 'b');",
            "column `w` of `public.t` was dropped or renamed",
        ),
        ("{id: int, v: string}", "TRUNCATE t;", "was truncated"),
    ] {
        let d = tempfile::tempdir().unwrap();
        let port = cluster.port();
        let change = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(3));
            psql_at(port, sql);
        });
        let log = run_until_failure(&cluster, d.path(), &table("t", schema, "[id]"), wait);
        change.join().unwrap();
        assert!(log.contains(says), "{sql}: {log}");
    }

    // A slot dropped by hand between runs: the restore cannot read what it held.
    let spec = table("t", "{id: int, v: string}", "[id]");
    let d = tempfile::tempdir().unwrap();
    let _ = run_until_failure(&cluster, d.path(), &spec, Duration::from_secs(3));
    let started = Instant::now();
    while cluster.psql(
        "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'weir_cdc_problem_cdc' \
         AND active_pid IS NOT NULL",
    ) != ["0"]
    {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the slot stays active"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    cluster.psql("SELECT pg_drop_replication_slot('weir_cdc_problem_cdc')");
    let log = run_until_failure(&cluster, d.path(), &spec, wait);
    assert!(log.contains("slot `weir_cdc_problem_cdc` is gone"), "{log}");
}

fn psql_at(port: u16, sql: &str) {
    let ok = Command::new("psql")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args([
            "-U",
            "postgres",
            "-d",
            "postgres",
            "-q",
            "-v",
            "ON_ERROR_STOP=1",
        ])
        .args(["-c", sql])
        .status()
        .unwrap()
        .success();
    assert!(ok, "psql {sql}");
}

/// Orders from a file enriched with their customers from PostgreSQL: the job's table, once
/// the customers stop changing, is the naive join of the events with the final customers.
#[test]
fn a_cdc_table_joined_with_a_stream_of_events_equals_a_naive_join() {
    let cluster = Cluster::start();
    cluster.psql(
        "CREATE TABLE customers (id int PRIMARY KEY, name text);
         INSERT INTO customers SELECT g, 'c' || g FROM generate_series(1, 40) g;",
    );
    let dir = tempfile::tempdir().unwrap();
    // 500 orders of customers 1..60: customers 41..60 do not exist yet.
    let mut rng = Rng(0xcdc2);
    let orders: Vec<(u64, u64, u64)> = (0..500)
        .map(|i| (i, rng.between(1, 61), rng.between(1, 1000)))
        .collect();
    let lines: String = orders
        .iter()
        .map(|(id, c, amount)| format!("{{\"id\":{id},\"customer\":{c},\"amount\":{amount}}}\n"))
        .collect();
    std::fs::write(dir.path().join("orders.jsonl"), lines).unwrap();
    let job = dir.path().join("join.yaml");
    let connection = cluster.connection();
    std::fs::write(
        &job,
        format!(
            "name: cdc-join
sources:
  db:
    kind: postgres-cdc
    connection: {connection}
    heartbeat: 200ms
    tables:
      - {{table: customers, schema: {{id: int, name: string}}, key: [id]}}
  orders:
    kind: jsonl
    path: {}
    schema: {{id: int, customer: int, amount: int}}
transforms:
  enriched:
    kind: sql
    query: |
      SELECT o.id, o.amount, c.name
      FROM orders o JOIN db.customers c ON o.customer = c.id
checkpoint:
  interval: 200ms
sinks:
  out:
    kind: postgres
    from: enriched
    connection: {connection}
    table: enriched
    key: [id]
    create-table: true
",
            dir.path().join("orders.jsonl").display()
        ),
    )
    .unwrap();
    let data = dir.path().join("data");
    let mut cmd = weir(&data);
    let child = cmd
        .arg("run")
        .arg(&job)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while cluster.psql("SELECT count(*) FROM pg_tables WHERE tablename = 'enriched'") != ["1"] {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no table: {}",
            kill(child)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    cluster.psql(
        "UPDATE customers SET name = name || '-renamed' WHERE id % 3 = 0;
         DELETE FROM customers WHERE id % 7 = 0;
         INSERT INTO customers SELECT g, 'late' || g FROM generate_series(41, 55) g;
         UPDATE customers SET id = 100 + id WHERE id = 5;",
    );
    let customers: std::collections::BTreeMap<u64, String> = cluster
        .psql("SELECT id, name FROM customers")
        .iter()
        .map(|l| {
            let (id, name) = l.split_once('|').unwrap();
            (id.parse().unwrap(), name.to_owned())
        })
        .collect();
    let expected: Vec<String> = orders
        .iter()
        .filter_map(|(id, c, amount)| customers.get(c).map(|n| format!("{id}|{amount}|{n}")))
        .collect();
    let mut got = Vec::new();
    while started.elapsed() < Duration::from_secs(90) {
        got = cluster.psql("SELECT id, amount, name FROM enriched ORDER BY id");
        if got == expected {
            break;
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    let log = kill(child);
    assert_eq!(got.len(), expected.len(), "{log}");
    assert_eq!(got, expected, "{log}");
    assert!(
        expected.iter().any(|r| r.ends_with("-renamed"))
            && expected.iter().any(|r| r.contains("late")),
        "the changes touch the result"
    );
}
