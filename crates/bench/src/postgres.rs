//! `weir bench postgres`: rows per second into PostgreSQL through the `postgres` sink (at
//! least once, and exactly once with checkpoints) beside the same job into a blackhole sink.

use std::path::PathBuf;

use weir_runtime::spec::load::Override;

use crate::measure::{group, median, run_with};

pub(crate) struct PostgresBench {
    pub(crate) connection: String,
    pub(crate) job: PathBuf,
    pub(crate) from: String,
    pub(crate) events: u64,
    pub(crate) parallelism: Vec<u32>,
    pub(crate) runs: usize,
    pub(crate) data: PathBuf,
}

/// The three arms of the sink benchmark.
const PG_ARMS: [&str; 3] = ["blackhole", "postgres", "postgres exactly-once"];

pub(crate) fn run(b: &PostgresBench) -> anyhow::Result<()> {
    const TABLE: &str = "weir_bench_rows";
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let scheduler = std::sync::Arc::new(weir_scheduler::Scheduler::new(runtime.handle().clone())?);
    let client = runtime.block_on(async {
        let (client, connection) = b
            .connection
            .parse::<tokio_postgres::Config>()?
            .connect(tokio_postgres::NoTls)
            .await?;
        Ok::<_, tokio_postgres::Error>((client, tokio::spawn(connection)))
    });
    let (client, driver) = client.map_err(|e| {
        anyhow::anyhow!(
            "connecting to {} (is PostgreSQL running?): {e}",
            b.connection
        )
    })?;
    println!(
        "{} ({} events from the generator): rows of `{}` into PostgreSQL (`{}`) beside a blackhole \
         sink; exactly-once checkpoints every 1s (rows staged, then moved). Median of {} runs \
         per arm, arms interleaved.",
        b.job.display(),
        group(b.events),
        b.from,
        b.connection,
        b.runs
    );
    println!();
    println!(
        "| p | rows | blackhole rows/s | postgres rows/s | exactly-once rows/s | postgres / blackhole | exactly-once / postgres |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for &p in &b.parallelism {
        let mut rates: [Vec<f64>; 3] = Default::default();
        let mut rows = 0;
        for _ in 0..b.runs {
            for (arm, name) in PG_ARMS.iter().enumerate() {
                runtime.block_on(client.batch_execute(&format!(
                    "DROP TABLE IF EXISTS {TABLE}, {TABLE}__weir_stage"
                )))?;
                let sink = if arm == 0 {
                    format!("sinks.out={{kind: blackhole, from: {}}}", b.from)
                } else {
                    format!(
                        "sinks.out={{kind: postgres, from: {}, connection: '{}', table: {TABLE}, create-table: true}}",
                        b.from, b.connection
                    )
                };
                let mut o = vec![
                    format!("sources.nexmark.events={}", b.events),
                    format!("parallelism={p}"),
                    sink,
                ];
                let mut options = weir_runtime::exec::job::JobOptions::default();
                if arm == 2 {
                    o.push("checkpoint.interval=1s".into());
                    o.push(format!(
                        "checkpoint.storage={}",
                        b.data.join("checkpoints").display()
                    ));
                    options.scheduler = Some(scheduler.clone());
                }
                let o: Vec<Override> = o
                    .iter()
                    .map(|s| s.parse().map_err(anyhow::Error::msg))
                    .collect::<Result<_, _>>()?;
                let (sample, summary) = run_with(&runtime, &b.job, &o, options)?;
                let written = summary
                    .nodes
                    .iter()
                    .find(|n| n.name == "out")
                    .map_or(0, |n| n.records_in);
                if arm > 0 {
                    let count: i64 = runtime
                        .block_on(client.query_one(&format!("SELECT count(*) FROM {TABLE}"), &[]))?
                        .get(0);
                    anyhow::ensure!(
                        count as u64 == written,
                        "{name}: {count} rows in the table, {written} written"
                    );
                }
                rows = written;
                rates[arm].push(written as f64 / sample.wall.as_secs_f64().max(1e-9));
            }
        }
        let [bh, pg, eo] = rates.map(median);
        println!(
            "| {p} | {} | {} | {} | {} | {:.2}× | {:.2}× |",
            group(rows),
            group(bh as u64),
            group(pg as u64),
            group(eo as u64),
            pg / bh,
            eo / pg
        );
    }
    runtime.block_on(client.batch_execute(&format!(
        "DROP TABLE IF EXISTS {TABLE}, {TABLE}__weir_stage"
    )))?;
    drop(client);
    driver.abort();
    Ok(())
}
