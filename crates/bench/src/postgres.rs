//! `weir bench postgres`: rows per second into PostgreSQL through the `postgres` sink.
//!
//! Two tables, each with its baseline arm:
//! - `job`: a Nexmark job's rows into the sink (at least once, and exactly once with
//!   checkpoints) beside the same job into a blackhole sink;
//! - `changes` (issue 45): changelogs into the sink with a `key` (upserts and deletes), 0% to
//!   50% of their rows updates and deletes of live keys, beside as many plain inserts into a
//!   table with no key. The sink is driven straight, as the executor drives it (no source
//!   makes a changelog of a chosen share of changes), and every run's table is compared with
//!   the changes applied to a map, so the benchmark also proves the sink right.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use weir_runtime::api::connector::{SinkConnector, SinkContext};
use weir_runtime::api::{OperatorError, SubtaskContext};
use weir_runtime::changelog::{ChangelogMode, RowKind};
use weir_runtime::spec::PostgresSinkSpec;
use weir_runtime::spec::load::Override;

use crate::measure::{group, median, run_with};

pub(crate) struct PostgresBench {
    pub(crate) connection: String,
    pub(crate) tables: Vec<PgTable>,
    pub(crate) job: PathBuf,
    pub(crate) from: String,
    pub(crate) events: u64,
    pub(crate) changes_rows: u64,
    pub(crate) changes: Vec<u32>,
    pub(crate) parallelism: Vec<u32>,
    pub(crate) runs: usize,
    pub(crate) data: PathBuf,
}

/// The tables `weir bench postgres` prints.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum PgTable {
    /// A Nexmark job's rows into the sink beside a blackhole sink.
    Job,
    /// Changelogs into the keyed sink beside plain inserts.
    Changes,
}

/// The three arms of the job table.
const PG_ARMS: [&str; 3] = ["blackhole", "postgres", "postgres exactly-once"];

/// Rows per batch the changes table hands the sink (the executor's default batch size).
const CHANGES_BATCH: usize = 1024;

pub(crate) fn run(b: &PostgresBench) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
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
    if b.tables.contains(&PgTable::Job) {
        run_job(b, &runtime, &client)?;
    }
    if b.tables.contains(&PgTable::Changes) {
        if b.tables.contains(&PgTable::Job) {
            println!();
        }
        run_changes(b, &runtime, &client)?;
    }
    drop(client);
    driver.abort();
    Ok(())
}

/// The job table: the job's rows into the blackhole, postgres and exactly-once arms.
fn run_job(
    b: &PostgresBench,
    runtime: &tokio::runtime::Runtime,
    client: &tokio_postgres::Client,
) -> anyhow::Result<()> {
    const TABLE: &str = "weir_bench_rows";
    let scheduler = Arc::new(weir_scheduler::Scheduler::new(runtime.handle().clone())?);
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
                let (sample, summary) = run_with(runtime, &b.job, &o, options)?;
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
    Ok(())
}

/// What one arm of the changes table writes: plain inserts into a table with no key, or a
/// changelog into the keyed sink.
struct ChangesArm {
    /// `None`: the plain inserts; `Some(p)`: the keyed sink, `p`% of the rows changes.
    percent: Option<u32>,
    /// The rows, partitioned by key among the sink's subtasks, in batches.
    batches: Vec<Vec<RecordBatch>>,
    rows: u64,
    /// Rows that update or delete a live key (`-U`, `+U`, `-D`).
    changed: u64,
    /// The table the rows must leave behind.
    expected: HashMap<i64, Row>,
}

/// One row of the changes table's input (and of its table, `id` the key).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Row {
    id: i64,
    /// The position of the change that wrote the row, so an update is visible in the table.
    seq: i64,
    price: i64,
    note: String,
}

/// A seeded xorshift generator: the same changelog on every machine.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn row(&mut self, id: i64, seq: i64) -> Row {
        Row {
            id,
            seq,
            price: (self.next() % 100_000_000) as i64,
            note: format!("{:016x}", self.next()),
        }
    }
}

/// A well-formed changelog of at least `rows` rows (one more when it ends on an update's pair),
/// `percent` of them changes of a key that is live at that point: each change picks a live key
/// at random and, in turn, updates it (`-U` of its row, `+U` of the new one) or deletes it
/// (`-D` of its row). Every other row inserts a new key (`+I`). A delete (one row) comes with
/// an update (two) and takes a key that an insert made, so above 75% there are not enough live
/// keys: the share of changes stays at 75%.
fn changelog(rows: u64, percent: u32, seed: u64) -> Vec<(RowKind, Row)> {
    let mut random = XorShift(seed | 1);
    let mut live: Vec<Row> = Vec::new();
    let mut out = Vec::with_capacity(rows as usize + 1);
    let (mut changed, mut next_id, mut update) = (0u64, 0i64, true);
    while (out.len() as u64) < rows {
        let seq = out.len() as i64;
        if live.is_empty() || changed * 100 >= u64::from(percent) * out.len() as u64 {
            let row = random.row(next_id, seq);
            next_id += 1;
            live.push(row.clone());
            out.push((RowKind::Insert, row));
            continue;
        }
        let i = (random.next() % live.len() as u64) as usize;
        if update {
            let new = random.row(live[i].id, seq);
            out.push((
                RowKind::UpdateBefore,
                std::mem::replace(&mut live[i], new.clone()),
            ));
            out.push((RowKind::UpdateAfter, new));
            changed += 2;
        } else {
            out.push((RowKind::Delete, live.swap_remove(i)));
            changed += 1;
        }
        update = !update;
    }
    out
}

/// The naive reference: the changes applied one by one to a map, checking on the way that
/// the changelog is well formed (an insert of a key not live, a row taken back that is the
/// key's live row, each `-U` followed by the `+U` of its key).
fn apply(changes: &[(RowKind, Row)]) -> anyhow::Result<HashMap<i64, Row>> {
    let mut table = HashMap::new();
    let mut updating: Option<i64> = None;
    for (i, (kind, row)) in changes.iter().enumerate() {
        anyhow::ensure!(
            updating.is_none_or(|id| *kind == RowKind::UpdateAfter && id == row.id),
            "change {i}: a -U of key {updating:?} is not followed by its +U"
        );
        updating = None;
        match kind {
            RowKind::Insert => anyhow::ensure!(
                table.insert(row.id, row.clone()).is_none(),
                "change {i}: +I of key {}, which is live",
                row.id
            ),
            RowKind::UpdateAfter => {
                table.insert(row.id, row.clone());
            }
            RowKind::UpdateBefore | RowKind::Delete => {
                anyhow::ensure!(
                    table.remove(&row.id).as_ref() == Some(row),
                    "change {i}: {} of a row that is not key {}'s live row",
                    kind.short(),
                    row.id
                );
                if *kind == RowKind::UpdateBefore {
                    updating = Some(row.id);
                }
            }
        }
    }
    Ok(table)
}

/// The arm's rows as the batches of `parallelism` subtasks, each row with the subtask of its
/// key (as the planner partitions a keyed sink's updating input), in order.
fn changes_arm(
    changes: &[(RowKind, Row)],
    percent: Option<u32>,
    parallelism: usize,
) -> anyhow::Result<ChangesArm> {
    let data = Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("seq", DataType::Int64, false),
        Field::new("price", DataType::Int64, false),
        Field::new("note", DataType::Utf8, false),
    ]);
    let schema = match percent {
        None => Arc::new(data),
        // Every kind may occur, as in the output of a running aggregate, even where none but
        // +I does (0%): the sink takes the path of an updating stream.
        Some(_) => ChangelogMode::updating(&RowKind::ALL, Some(vec!["id".into()])).apply(&data),
    };
    let mut parts: Vec<Vec<&(RowKind, Row)>> = vec![Vec::new(); parallelism];
    for change in changes {
        parts[change.1.id.rem_euclid(parallelism as i64) as usize].push(change);
    }
    let mut batches = Vec::with_capacity(parallelism);
    for part in parts {
        let mut subtask = Vec::new();
        for chunk in part.chunks(CHANGES_BATCH) {
            let mut columns: Vec<ArrayRef> = vec![
                Arc::new(Int64Array::from_iter_values(chunk.iter().map(|c| c.1.id))),
                Arc::new(Int64Array::from_iter_values(chunk.iter().map(|c| c.1.seq))),
                Arc::new(Int64Array::from_iter_values(
                    chunk.iter().map(|c| c.1.price),
                )),
                Arc::new(StringArray::from_iter_values(
                    chunk.iter().map(|c| c.1.note.as_str()),
                )),
            ];
            if percent.is_some() {
                columns.push(weir_runtime::changelog::op_array(chunk.iter().map(|c| c.0)));
            }
            subtask.push(RecordBatch::try_new(schema.clone(), columns)?);
        }
        batches.push(subtask);
    }
    let changed = changes.iter().filter(|c| c.0 != RowKind::Insert).count() as u64;
    Ok(ChangesArm {
        percent,
        batches,
        rows: changes.len() as u64,
        changed,
        expected: apply(changes)?,
    })
}

/// Writes `arm`'s rows through a fresh postgres sink into `table`, as the executor drives a
/// sink: every subtask's batches in turn, and with `checkpoints` a barrier that often
/// (each subtask pre-commits, then the sink commits in the background while rows go on, the
/// next commit waiting for the one before), then the end of input and its commit. Returns
/// the time from the first row to the last commit.
async fn write_arm(
    connection: &str,
    table: &str,
    arm: &ChangesArm,
    checkpoints: Option<Duration>,
) -> anyhow::Result<Duration> {
    let key: Vec<String> = match arm.percent {
        Some(_) => vec!["id".into()],
        None => Vec::new(),
    };
    let spec: PostgresSinkSpec = serde_json::from_value(serde_json::json!({
        "from": "changes",
        "connection": connection,
        "table": table,
        "key": key,
        "create-table": true,
    }))?;
    let schema = arm
        .batches
        .iter()
        .flatten()
        .next()
        .map(|b| b.schema())
        .ok_or_else(|| anyhow::anyhow!("the changes arm has no rows"))?;
    let cx = SinkContext {
        job: "bench-postgres-changes",
        node: "out",
        repeat_within: Duration::from_secs(60),
    };
    let factory = spec.plan(&schema, cx).map_err(|problems| {
        anyhow::anyhow!(
            "planning the sink: {}",
            problems
                .iter()
                .map(|p| format!("{}: {}", p.at, p.message))
                .collect::<Vec<_>>()
                .join("; ")
        )
    })?;
    let parallelism = arm.batches.len();
    factory.prepare(parallelism, None).await?;
    let mut sinks = (0..parallelism)
        .map(|subtask| {
            factory.create(&SubtaskContext {
                subtask,
                parallelism,
                batch_size: CHANGES_BATCH,
                metrics: Arc::default(),
                want: Vec::new(),
                restore: None,
                attempt: 0,
                checkpoint_base: 0,
                checkpointing: checkpoints.is_some(),
                state: None,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let rounds = arm.batches.iter().map(Vec::len).max().unwrap_or(0);
    let t0 = Instant::now();
    let mut last_barrier = t0;
    let (mut checkpoint, mut committed) = (0u64, 0u64);
    let mut commit: Option<(u64, tokio::task::JoinHandle<Result<(), OperatorError>>)> = None;
    for round in 0..rounds {
        futures::future::try_join_all(
            sinks
                .iter_mut()
                .zip(&arm.batches)
                .filter_map(|(sink, batches)| batches.get(round).map(|b| sink.write(b.clone()))),
        )
        .await?;
        let Some(interval) = checkpoints else {
            continue;
        };
        if last_barrier.elapsed() < interval {
            continue;
        }
        last_barrier = Instant::now();
        checkpoint += 1;
        let states = futures::future::try_join_all(
            sinks
                .iter_mut()
                .map(|s| s.prepare_commit(checkpoint, committed)),
        )
        .await?;
        // Commits in checkpoint order: a key's later change must not be applied first.
        if let Some((id, previous)) = commit.take() {
            previous.await??;
            committed = id;
        }
        let states: Vec<_> = states.into_iter().flatten().collect();
        commit = Some((checkpoint, tokio::spawn(factory.commit(states))));
    }
    let states =
        futures::future::try_join_all(sinks.iter_mut().map(|s| s.finish(committed))).await?;
    if let Some((_, previous)) = commit.take() {
        previous.await??;
    }
    let states: Vec<_> = states.into_iter().flatten().collect();
    if !states.is_empty() {
        factory.commit(states).await?;
    }
    Ok(t0.elapsed())
}

/// Checks that `table` holds exactly the rows the arm must leave behind.
async fn check_table(
    client: &tokio_postgres::Client,
    table: &str,
    arm: &ChangesArm,
) -> anyhow::Result<u64> {
    let rows = client
        .query(&format!("SELECT id, seq, price, note FROM {table}"), &[])
        .await?;
    let mut seen = HashMap::with_capacity(rows.len());
    for r in &rows {
        let row = Row {
            id: r.try_get(0)?,
            seq: r.try_get(1)?,
            price: r.try_get(2)?,
            note: r.try_get(3)?,
        };
        let expected = arm.expected.get(&row.id);
        anyhow::ensure!(
            expected == Some(&row),
            "{}: the table holds {row:?}, the reference {expected:?}",
            arm.name()
        );
        anyhow::ensure!(
            seen.insert(row.id, ()).is_none(),
            "{}: the table holds key {} twice",
            arm.name(),
            row.id
        );
    }
    anyhow::ensure!(
        seen.len() == arm.expected.len(),
        "{}: the table holds {} rows, the reference {}",
        arm.name(),
        seen.len(),
        arm.expected.len()
    );
    Ok(seen.len() as u64)
}

impl ChangesArm {
    fn name(&self) -> String {
        match self.percent {
            None => "plain inserts (no key)".into(),
            Some(p) => format!("upserts by key, {p}% changes"),
        }
    }
}

/// The changes table: plain inserts beside the keyed sink applying changelogs with each share
/// of updates and deletes, without checkpoints and exactly once; every run's table checked
/// against the naive reference.
fn run_changes(
    b: &PostgresBench,
    runtime: &tokio::runtime::Runtime,
    client: &tokio_postgres::Client,
) -> anyhow::Result<()> {
    const TABLE: &str = "weir_bench_changes";
    println!(
        "Changelogs of {} rows into the postgres sink by key (`-U`/`-D` deleted, `+I`/`+U` \
         upserted) beside the same number of plain inserts into a table with no key, straight \
         through the sink (batches of {CHANGES_BATCH}, each key's rows to one subtask), without \
         checkpoints and exactly once with a checkpoint every 1s. Each run's table equals the \
         changes applied to a map. Median of {} runs per arm, arms interleaved.",
        group(b.changes_rows),
        b.runs
    );
    println!();
    println!(
        "| checkpoints | p | input | rows | changes | rows in table | rows/s | ÷ plain inserts |"
    );
    println!("|---|---|---|---:|---:|---:|---:|---:|");
    let inputs: Vec<(u32, Vec<(RowKind, Row)>)> = b
        .changes
        .iter()
        .map(|&p| (p, changelog(b.changes_rows, p, 0x5eed_0000 + u64::from(p))))
        .collect();
    // The plain inserts: the rows of a changelog with no changes, as an append-only stream.
    let inserts = changelog(b.changes_rows, 0, 0x5eed_0000);
    for checkpoints in [None, Some(Duration::from_secs(1))] {
        for &p in &b.parallelism {
            let p = usize::try_from(p)?.max(1);
            let mut arms = vec![changes_arm(&inserts, None, p)?];
            for (percent, changes) in &inputs {
                arms.push(changes_arm(changes, Some(*percent), p)?);
            }
            let mut rates: Vec<Vec<f64>> = vec![Vec::new(); arms.len()];
            let mut kept = vec![0u64; arms.len()];
            for _ in 0..b.runs {
                for (i, arm) in arms.iter().enumerate() {
                    runtime.block_on(client.batch_execute(&format!(
                        "DROP TABLE IF EXISTS {TABLE}, {TABLE}__weir_stage"
                    )))?;
                    let wall =
                        runtime.block_on(write_arm(&b.connection, TABLE, arm, checkpoints))?;
                    kept[i] = runtime.block_on(check_table(client, TABLE, arm))?;
                    rates[i].push(arm.rows as f64 / wall.as_secs_f64().max(1e-9));
                }
            }
            let rates: Vec<f64> = rates.into_iter().map(median).collect();
            for (i, arm) in arms.iter().enumerate() {
                println!(
                    "| {} | {p} | {} | {} | {:.1}% | {} | {} | {:.2}× |",
                    if checkpoints.is_some() {
                        "every 1 s"
                    } else {
                        "none"
                    },
                    arm.name(),
                    group(arm.rows),
                    100.0 * arm.changed as f64 / arm.rows.max(1) as f64,
                    group(kept[i]),
                    group(rates[i] as u64),
                    rates[i] / rates[0]
                );
            }
        }
    }
    runtime.block_on(client.batch_execute(&format!(
        "DROP TABLE IF EXISTS {TABLE}, {TABLE}__weir_stage"
    )))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changelog_is_well_formed_and_changes_its_share_of_rows() {
        for percent in [0, 10, 50, 75] {
            let changes = changelog(10_000, percent, 7);
            let table = apply(&changes).expect("a well-formed changelog");
            let changed = changes.iter().filter(|c| c.0 != RowKind::Insert).count();
            let share = 100.0 * changed as f64 / changes.len() as f64;
            assert!(
                (share - f64::from(percent)).abs() < 0.05,
                "{percent}%: {share:.3}% of the rows are changes"
            );
            let deletes = changes.iter().filter(|c| c.0 == RowKind::Delete).count();
            let inserts = changes.len() - changed;
            assert_eq!(table.len(), inserts - deletes, "{percent}%");
            assert_eq!(changes, changelog(10_000, percent, 7), "deterministic");
        }
    }

    #[test]
    fn the_reference_refuses_a_changelog_that_is_not_well_formed() {
        let row = |id, seq| Row {
            id,
            seq,
            price: 1,
            note: String::new(),
        };
        let bad: [&[(RowKind, Row)]; 4] = [
            // A delete of a key that is not live.
            &[(RowKind::Delete, row(1, 0))],
            // A row taken back that is not the key's live row.
            &[(RowKind::Insert, row(1, 0)), (RowKind::Delete, row(1, 5))],
            // A -U without its +U.
            &[
                (RowKind::Insert, row(1, 0)),
                (RowKind::UpdateBefore, row(1, 0)),
                (RowKind::Insert, row(2, 2)),
            ],
            // An insert of a live key.
            &[(RowKind::Insert, row(1, 0)), (RowKind::Insert, row(1, 1))],
        ];
        for changes in bad {
            assert!(apply(changes).is_err(), "{changes:?}");
        }
    }
}
