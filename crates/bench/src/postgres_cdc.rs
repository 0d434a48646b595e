//! `weir bench postgres-cdc`: the PostgreSQL CDC source against a real server (issue 52).
//!
//! Three tables, each beside its floor, arms interleaved run by run:
//! - `snapshot`: rows per second copying a table of `rows` rows (the source's subtask driven
//!   straight, as the executor drives it, until it has returned every row) beside `COPY
//!   (SELECT ...) TO STDOUT` of the same columns, the fastest way out of the server.
//! - `stream`: changes per second reading a backlog of `backlog` committed changes from a slot
//!   (`snapshot: never`), beside the server decoding the same backlog alone
//!   (`pg_logical_slot_peek_binary_changes` on a twin slot: pgoutput's work, no client).
//! - `latency`: a job mirroring a table into a keyed table (`weir run`, a child process) while
//!   a writer commits `rate` changes per second (transactions of 100 upserts); the time from a
//!   transaction's commit to its rows being visible in the target, polled every 5 ms, at least
//!   once (no checkpoints) and exactly once (1 s checkpoints). Writers commit with
//!   `synchronous_commit = on` (the test clusters default to off).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use weir_runtime::api::SubtaskContext;
use weir_runtime::api::connector::{SourceConnector, SourceContext};
use weir_runtime::api::{Source, SourceEvent};
use weir_runtime::connectors::postgres_cdc::PostgresCdcSourceSpec;

use crate::measure::median;

#[derive(Debug, clap::Args)]
pub(crate) struct BenchCdcArgs {
    /// The server (tables `weir_bench_cdc_*`, their publications and slots are dropped and
    /// recreated there). It needs `wal_level = logical`.
    #[arg(
        long,
        default_value = "host=127.0.0.1 port=5432 user=postgres dbname=postgres"
    )]
    connection: String,
    /// Which tables: `snapshot`, `stream`, `latency`.
    #[arg(long, value_delimiter = ',', default_value = "snapshot,stream,latency")]
    tables: Vec<String>,
    /// Rows of the snapshot's table.
    #[arg(long, default_value_t = 1_000_000)]
    rows: u64,
    /// Changes in the stream's backlog.
    #[arg(long, default_value_t = 300_000)]
    backlog: u64,
    /// Changes per second the latency table's writer commits.
    #[arg(long, default_value_t = 10_000)]
    rate: u64,
    /// Seconds the latency table's writer runs, per arm.
    #[arg(long, default_value_t = 15)]
    seconds: u64,
    #[arg(long, default_value_t = 3)]
    runs: usize,
    #[arg(long, default_value = "data/bench")]
    data: PathBuf,
}

pub(crate) fn run(b: BenchCdcArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let client = runtime.block_on(connect(&b.connection))?;
    let runs = b.runs.max(1);
    if b.tables.iter().any(|t| t == "snapshot") {
        runtime.block_on(snapshot(&b, &client, runs))?;
    }
    if b.tables.iter().any(|t| t == "stream") {
        runtime.block_on(stream(&b, &client, runs))?;
    }
    if b.tables.iter().any(|t| t == "latency") {
        runtime.block_on(latency(&b, &client))?;
    }
    Ok(())
}

async fn connect(connection: &str) -> anyhow::Result<tokio_postgres::Client> {
    let (client, driver) = connection
        .parse::<tokio_postgres::Config>()?
        .connect(tokio_postgres::NoTls)
        .await
        .map_err(|e| anyhow::anyhow!("connecting to {connection} (is PostgreSQL running?): {e}"))?;
    tokio::spawn(driver);
    // The throwaway clusters run with `synchronous_commit = off`, where a commit's WAL is
    // flushed (and so decoded for a slot) up to 200 ms later: the writers commit as a
    // production server would.
    client.batch_execute("SET synchronous_commit = on").await?;
    Ok(client)
}

const TABLE: &str = "weir_bench_cdc";

/// Drops the bench's slots (waiting for their readers to go) and publication.
async fn reset(client: &tokio_postgres::Client) -> anyhow::Result<()> {
    for _ in 0..100 {
        let active: i64 = client
            .query_one(
                "SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE 'weir_bench_cdc%' \
                 AND active",
                &[],
            )
            .await?
            .get(0);
        if active == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    client
        .batch_execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots \
             WHERE slot_name LIKE 'weir_bench_cdc%'; \
             DROP PUBLICATION IF EXISTS weir_bench_cdc",
        )
        .await?;
    Ok(())
}

fn spec(b: &BenchCdcArgs, snapshot: &str) -> anyhow::Result<PostgresCdcSourceSpec> {
    Ok(serde_json::from_value(serde_json::json!({
        "connection": b.connection,
        "slot": "weir_bench_cdc",
        "publication": "weir_bench_cdc",
        "snapshot": snapshot,
        "tables": [{
            "table": TABLE,
            "schema": {"id": "int", "v": "string", "n": "int", "ts": "timestamp"},
            "key": ["id"],
        }],
    }))?)
}

/// Reads `want` rows from a fresh subtask of `spec`: the time it took.
async fn read_rows(spec: &PostgresCdcSourceSpec, want: u64) -> anyhow::Result<Duration> {
    let planned = spec
        .plan(SourceContext {
            job: "bench",
            node: "cdc",
        })
        .map_err(|p| anyhow::anyhow!("the bench's source: {p:?}"))?;
    let started = Instant::now();
    let mut source: Box<dyn Source> = planned.factory.create(&SubtaskContext {
        subtask: 0,
        parallelism: 1,
        batch_size: 8192,
        metrics: Arc::default(),
        want: vec![true],
        restore: None,
        attempt: 0,
        checkpoint_base: 0,
        checkpointing: true,
        state: None,
    })?;
    let mut rows = 0u64;
    while rows < want {
        match tokio::time::timeout(Duration::from_secs(120), source.next()).await {
            Ok(Ok(SourceEvent::Batches(batches))) => {
                rows += batches
                    .iter()
                    .map(|(_, b)| b.num_rows() as u64)
                    .sum::<u64>();
            }
            Ok(Ok(SourceEvent::End)) => anyhow::bail!("the source ended after {rows} rows"),
            Ok(Err(e)) => anyhow::bail!("the source failed after {rows} rows: {e}"),
            Err(_) => anyhow::bail!("no rows for 120 s after {rows} of {want}"),
        }
    }
    let took = started.elapsed();
    drop(source);
    Ok(took)
}

async fn make_table(client: &tokio_postgres::Client, rows: u64) -> anyhow::Result<()> {
    client
        .batch_execute(&format!(
            "DROP TABLE IF EXISTS {TABLE}; \
             CREATE TABLE {TABLE} (id bigint PRIMARY KEY, v text, n bigint, ts timestamptz); \
             INSERT INTO {TABLE} SELECT g, 'value-' || g, g * 7, \
             timestamptz '2026-01-01 00:00:00+00' + g * interval '1 ms' \
             FROM generate_series(1, {rows}) g"
        ))
        .await?;
    client
        .batch_execute(&format!("VACUUM ANALYZE {TABLE}"))
        .await?;
    Ok(())
}

async fn snapshot(
    b: &BenchCdcArgs,
    client: &tokio_postgres::Client,
    runs: usize,
) -> anyhow::Result<()> {
    reset(client).await?;
    make_table(client, b.rows).await?;
    let spec = spec(b, "initial")?;
    let mut copy = Vec::new();
    let mut cdc = Vec::new();
    for _ in 0..runs {
        let started = Instant::now();
        let sql = format!("COPY (SELECT id, v, n, ts FROM {TABLE}) TO STDOUT");
        let stream = client.copy_out(sql.as_str()).await?;
        futures::pin_mut!(stream);
        let mut bytes = 0usize;
        while let Some(chunk) = futures::StreamExt::next(&mut stream).await {
            bytes += chunk?.len();
        }
        anyhow::ensure!(bytes > 0, "COPY gave nothing");
        copy.push(b.rows as f64 / started.elapsed().as_secs_f64());
        reset(client).await?;
        let took = read_rows(&spec, b.rows).await?;
        cdc.push(b.rows as f64 / took.as_secs_f64());
    }
    reset(client).await?;
    let (copy, cdc) = (median(copy), median(cdc));
    println!(
        "postgres-cdc snapshot: {} rows (id bigint, v text, n bigint, ts timestamptz), median \
         of {runs} runs",
        b.rows
    );
    println!("| arm | rows/s | ÷ COPY |");
    println!("|---|---:|---:|");
    println!("| COPY (SELECT ...) TO STDOUT (the floor) | {copy:.0} | 1.00 |");
    println!(
        "| postgres-cdc snapshot (rows to Arrow batches) | {cdc:.0} | {:.2} |",
        cdc / copy
    );
    Ok(())
}

async fn stream(
    b: &BenchCdcArgs,
    client: &tokio_postgres::Client,
    runs: usize,
) -> anyhow::Result<()> {
    reset(client).await?;
    make_table(client, 1000).await?;
    let spec = spec(b, "never")?;
    let mut server = Vec::new();
    let mut cdc = Vec::new();
    for _ in 0..runs {
        reset(client).await?;
        // One statement each: a slot cannot be made in a transaction that wrote.
        for sql in [
            format!("CREATE PUBLICATION weir_bench_cdc FOR TABLE {TABLE}"),
            "SELECT pg_create_logical_replication_slot('weir_bench_cdc', 'pgoutput')".into(),
            "SELECT pg_create_logical_replication_slot('weir_bench_cdc_twin', 'pgoutput')".into(),
        ] {
            client.batch_execute(&sql).await?;
        }
        // The backlog: upserts over 50,000 keys, 1,000 per transaction.
        let per = 1000u64;
        let mut written = 0u64;
        while written < b.backlog {
            let n = per.min(b.backlog - written);
            client
                .batch_execute(&format!(
                    "INSERT INTO {TABLE} SELECT g % 50000, 'changed-' || g, g, now() \
                     FROM generate_series({written}, {}) g \
                     ON CONFLICT (id) DO UPDATE SET v = excluded.v, n = excluded.n, ts = excluded.ts",
                    written + n - 1
                ))
                .await?;
            written += n;
        }
        let started = Instant::now();
        let decoded: i64 = client
            .query_one(
                "SELECT count(*) FROM pg_logical_slot_peek_binary_changes('weir_bench_cdc_twin', \
                 NULL, NULL, 'proto_version', '1', 'publication_names', 'weir_bench_cdc')",
                &[],
            )
            .await?
            .get(0);
        server.push(b.backlog as f64 / started.elapsed().as_secs_f64());
        anyhow::ensure!(
            decoded as u64 >= b.backlog,
            "the twin slot decoded {decoded} messages"
        );
        let took = read_rows(&spec, b.backlog).await?;
        cdc.push(b.backlog as f64 / took.as_secs_f64());
    }
    reset(client).await?;
    let (server, cdc) = (median(server), median(cdc));
    println!();
    println!(
        "postgres-cdc stream: a backlog of {} committed upserts (1,000 per transaction) read \
         from a slot, median of {runs} runs",
        b.backlog
    );
    println!("| arm | changes/s | ÷ server alone |");
    println!("|---|---:|---:|");
    println!(
        "| pg_logical_slot_peek_binary_changes (pgoutput alone, the floor) | {server:.0} | 1.00 |"
    );
    println!(
        "| postgres-cdc stream (decoded into Arrow batches) | {cdc:.0} | {:.2} |",
        cdc / server
    );
    Ok(())
}

async fn latency(b: &BenchCdcArgs, client: &tokio_postgres::Client) -> anyhow::Result<()> {
    println!();
    println!(
        "postgres-cdc latency: a writer commits {} changes/s (transactions of 100 upserts) for \
         {} s; commit to visible in the target table (polled every 5 ms)",
        b.rate, b.seconds
    );
    println!(
        "| delivery | checkpoints | transactions | changes/s applied | p50 ms | p99 ms | max ms |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|");
    for (delivery, checkpoint) in [("at least once", None), ("exactly once", Some("1s"))] {
        reset(client).await?;
        client
            .batch_execute(&format!(
                "DROP TABLE IF EXISTS {TABLE}_target, {TABLE}_target__weir_stage; \
                 DROP TABLE IF EXISTS {TABLE}; \
                 CREATE TABLE {TABLE} (id bigint PRIMARY KEY, v text, n bigint, ts timestamptz); \
                 INSERT INTO {TABLE} VALUES (0, 'start', 0, now())"
            ))
            .await?;
        let dir = b.data.join("cdc-latency");
        std::fs::create_dir_all(&dir)?;
        let job = dir.join("job.yaml");
        std::fs::write(
            &job,
            format!(
                "name: bench-cdc-latency\nsources:\n  cdc:\n    kind: postgres-cdc\n    \
                 connection: {c}\n    slot: weir_bench_cdc\n    publication: weir_bench_cdc\n    \
                 heartbeat: 1s\n    tables:\n      - table: {TABLE}\n        \
                 schema: {{id: int, v: string, n: int, ts: timestamp}}\n        key: [id]\n\
                 {ck}sinks:\n  out:\n    kind: postgres\n    from: cdc.{TABLE}\n    \
                 connection: {c}\n    table: {TABLE}_target\n    key: [id]\n    \
                 create-table: true\n    flush-interval: 5ms\n",
                c = b.connection,
                ck = checkpoint
                    .map(|i| format!("checkpoint:\n  interval: {i}\n"))
                    .unwrap_or_default(),
            ),
        )?;
        let _ = std::fs::remove_dir_all(dir.join("data"));
        let mut child = std::process::Command::new(std::env::current_exe()?)
            .env("WEIR_DATA_DIR", dir.join("data"))
            .arg("run")
            .arg(&job)
            .arg("--quiet")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()?;
        let result = measure_latency(b, client).await;
        let _ = child.kill();
        let _ = child.wait();
        let (lat, applied) = result?;
        let pick = |q: f64| lat[((lat.len() - 1) as f64 * q) as usize];
        println!(
            "| {delivery} | {} | {} | {applied:.0} | {:.1} | {:.1} | {:.1} |",
            checkpoint.unwrap_or("off"),
            lat.len(),
            pick(0.5),
            pick(0.99),
            pick(1.0)
        );
    }
    reset(client).await?;
    Ok(())
}

/// Waits for the job's first row, then writes and polls: each transaction's latency (sorted,
/// ms) and the changes per second the target took.
async fn measure_latency(
    b: &BenchCdcArgs,
    client: &tokio_postgres::Client,
) -> anyhow::Result<(Vec<f64>, f64)> {
    let target = format!("SELECT coalesce(max(n), -1) FROM {TABLE}_target");
    let started = Instant::now();
    loop {
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(60),
            "the job never wrote its first row"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
        if let Ok(row) = client.query_one(target.as_str(), &[]).await
            && row.get::<_, i64>(0) >= 0
        {
            break;
        }
    }
    let writer = connect(&b.connection).await?;
    let poller = connect(&b.connection).await?;
    let txns = b.rate * b.seconds / 100;
    let commits: Arc<std::sync::Mutex<Vec<Instant>>> = Arc::default();
    let written = commits.clone();
    let period = Duration::from_secs_f64(100.0 / b.rate as f64);
    let write = tokio::spawn(async move {
        let mut next = Instant::now();
        for t in 1..=txns {
            let lo = t * 100;
            writer
                .batch_execute(&format!(
                    "INSERT INTO {TABLE} SELECT g % 20000, 'v', {t}, now() \
                     FROM generate_series({lo}, {}) g \
                     ON CONFLICT (id) DO UPDATE SET v = excluded.v, n = excluded.n, ts = excluded.ts",
                    lo + 99
                ))
                .await?;
            if let Ok(mut c) = written.lock() {
                c.push(Instant::now());
            }
            next += period;
            tokio::time::sleep_until(next.into()).await;
        }
        Ok::<_, tokio_postgres::Error>(())
    });
    let mut seen = 0u64;
    let mut lat = Vec::new();
    let begun = Instant::now();
    let mut last_at = begun;
    while seen < txns {
        anyhow::ensure!(
            begun.elapsed() < Duration::from_secs(b.seconds + 120),
            "the target reached transaction {seen} of {txns}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
        let now: i64 = poller.query_one(target.as_str(), &[]).await?.get(0);
        let at = Instant::now();
        let now = now.max(0) as u64;
        if now > seen {
            let commits = commits.lock().map(|c| c.clone()).unwrap_or_default();
            for t in seen + 1..=now {
                if let Some(c) = commits.get(t as usize - 1) {
                    lat.push(at.duration_since(*c).as_secs_f64() * 1000.0);
                }
            }
            seen = now;
            last_at = at;
        }
    }
    write.await??;
    lat.sort_by(f64::total_cmp);
    anyhow::ensure!(!lat.is_empty(), "no transaction was seen");
    let applied = (txns * 100) as f64 / last_at.duration_since(begun).as_secs_f64();
    Ok((lat, applied))
}
