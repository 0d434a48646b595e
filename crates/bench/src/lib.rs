//! weir's benchmarks: the arms `weir bench` runs and the tables it prints (`make bench` runs
//! them all; `BENCHMARKS.md` records their figures). `weir bench` is a thin layer over this
//! crate: the binary parses [`BenchArgs`] as one of its subcommands and hands them to [`run`].
//!
//! Every benchmark runs its baseline arm in the same process and prints ratios. The machine is
//! shared and noisy, so every figure is a median over several runs, arms are interleaved run by
//! run, and each table reports the ratio between arms next to the absolute numbers. CPU time is
//! the process's user + system time over the run (getrusage), so "events/s per core" is events
//! divided by CPU seconds actually used.
//!
//! # Layout
//! - `lib.rs`: the `weir bench` subcommands and their flags ([`BenchArgs`]), and every
//!   benchmark of a job run through the runtime.
//! - `serve`: `weir bench serve`: API latency with many jobs, the cost of live dashboards.
//! - `kafka`: `weir bench kafka`: the Kafka source beside the file source, and end-to-end
//!   latency through Kafka.

mod kafka;
mod serve;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use nix::sys::resource::{UsageWho, getrusage};
use weir_runtime::spec::load::Override;

#[derive(Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    which: Bench,
}

#[derive(Subcommand)]
enum Bench {
    /// Timer set+delete throughput with 1,000 to 1,000,000 timers pending, heap and RocksDB,
    /// beside the naive arm that recomputes the watermark hold by scanning every timer.
    Timers {
        /// Pending timer counts to measure at.
        #[arg(long, value_delimiter = ',', default_value = "1000,100000,1000000")]
        pending: Vec<u64>,
        /// Set+delete pairs per measurement of the real arms.
        #[arg(long, default_value_t = 200_000)]
        ops: u64,
        /// Longest the scan arm may run per measurement.
        #[arg(long, default_value = "3s", value_parser = humantime::parse_duration)]
        scan_budget: Duration,
        #[arg(long, default_value = "data/bench")]
        data: PathBuf,
    },
    /// The shared checkpoint-trigger scheduler beside per-pipeline thread pools, for 1 to
    /// 5,000 pipelines and trigger bodies of 0, 500 µs and 5 ms, plus an overload case.
    Scheduler {
        /// How long each cell is measured per run.
        #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
        measure: Duration,
        /// Runs per cell (the median is reported).
        #[arg(long, default_value_t = 3)]
        runs: usize,
        /// Only these pipeline counts (default: all of the sweep).
        #[arg(long, value_delimiter = ',')]
        pipelines: Vec<usize>,
        /// The shared scheduler's busy-wait bound (default: the engine's).
        #[arg(long, value_parser = humantime::parse_duration)]
        max_spin: Option<Duration>,
        /// The shared scheduler's early wake-up before long sleeps end (default: the
        /// engine's; 0s disables it).
        #[arg(long, value_parser = humantime::parse_duration)]
        prewake: Option<Duration>,
    },
    /// The connection pool's state changes through a plain mutex, the combiner without yield
    /// and the combiner with yield, at 1 to 4 threads and 0 to 20 units of work per action.
    Pool {
        /// How long each cell is measured per run.
        #[arg(long, default_value = "300ms", value_parser = humantime::parse_duration)]
        measure: Duration,
        #[arg(long, default_value_t = 3)]
        runs: usize,
        #[arg(long, value_delimiter = ',', default_value = "1,2,3,4")]
        threads: Vec<usize>,
        #[arg(long, value_delimiter = ',', default_value = "0,1,10,20")]
        work: Vec<u32>,
        /// Acquiring tasks per runtime thread.
        #[arg(long, default_value_t = 2)]
        tasks_per_thread: usize,
    },
    /// Rows per second into PostgreSQL through the `postgres` sink (straight, and exactly once
    /// with checkpoints) beside the same job into a blackhole sink.
    Postgres {
        /// The server to write to (a table `weir_bench_rows` is dropped and recreated there).
        #[arg(
            long,
            default_value = "host=127.0.0.1 port=5432 user=postgres dbname=postgres"
        )]
        connection: String,
        #[arg(long, default_value = "jobs/nexmark/q1.yaml")]
        job: PathBuf,
        /// The node whose rows are written.
        #[arg(long, default_value = "q1")]
        from: String,
        #[arg(long, default_value_t = 1_000_000)]
        events: u64,
        #[arg(long, value_delimiter = ',', default_value = "1,2")]
        parallelism: Vec<u32>,
        #[arg(long, default_value_t = 3)]
        runs: usize,
        #[arg(long, default_value = "data/bench")]
        data: PathBuf,
    },
    /// `weir serve`: API latency with many jobs hosted, and the throughput cost of ten live
    /// dashboards.
    Serve(crate::serve::BenchServeArgs),
    /// The Kafka source beside the file source on the same events (q1), and end-to-end
    /// latency through Kafka, at least once and exactly once.
    Kafka(crate::kafka::BenchKafkaArgs),
    /// Nexmark q5 checkpointing every second beside the same job without checkpoints.
    Checkpoint {
        #[arg(long, default_value = "jobs/nexmark/q5.yaml")]
        job: PathBuf,
        #[arg(long, default_value_t = 10_000_000)]
        events: u64,
        /// Time between checkpoints in the checkpointing arm.
        #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
        interval: Duration,
        #[arg(long, value_delimiter = ',', default_value = "heap,rocksdb")]
        backends: Vec<String>,
        #[arg(long, default_value_t = 3)]
        runs: usize,
        #[arg(long, default_value = "data/bench")]
        data: PathBuf,
    },
    /// Restore of operator state with 101 to 510 offsets in merged files: weir's seek-free
    /// reader beside one seek and ranged request per offset, from an in-memory store with
    /// injected per-request latency and from an S3-compatible server.
    Restore {
        /// Numbers of offsets (subtasks with operator state) to restore.
        #[arg(long, value_delimiter = ',', default_value = "101,203,307,409,510")]
        offsets: Vec<usize>,
        /// Latency injected per request into the in-memory store.
        #[arg(long, value_delimiter = ',', default_value = "5ms,20ms", value_parser = humantime::parse_duration)]
        latency: Vec<Duration>,
        /// Mean bytes of operator state per offset.
        #[arg(long, default_value_t = 256)]
        state_bytes: usize,
        /// An S3-compatible endpoint (e.g. `http://127.0.0.1:9000`) whose bucket `weir-bench`
        /// is used as well; credentials from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY
        /// (default `test`). Skipped when unreachable.
        #[arg(long)]
        s3: Option<String>,
        #[arg(long, default_value_t = 3)]
        runs: usize,
    },
    /// Nexmark queries on RocksDB beside the heap backend.
    Backends {
        #[arg(long, value_delimiter = ',', default_value = "q4,q5,q6,q9,q11")]
        queries: Vec<String>,
        #[arg(long, default_value_t = 3_000_000)]
        events: u64,
        #[arg(long, value_delimiter = ',', default_value = "1,2")]
        parallelism: Vec<u32>,
        #[arg(long, default_value_t = 3)]
        runs: usize,
        #[arg(long, default_value = "jobs/nexmark")]
        jobs: PathBuf,
        #[arg(long, default_value = "data/bench")]
        data: PathBuf,
    },
    /// Queryable state: lookup latency and CPU on the direct path (RocksDB snapshot on the
    /// caller's thread) beside the ordered path (the operator's mailbox), and the job's
    /// throughput with and without a steady lookup load, while a Nexmark query runs on RocksDB.
    Query {
        #[arg(long, default_value = "jobs/nexmark/q11.yaml")]
        job: PathBuf,
        /// The keyed operator looked up, and its state.
        #[arg(long, default_value = "sessions")]
        operator: String,
        #[arg(long, default_value = "sessions")]
        state: String,
        #[arg(long, default_value_t = 10_000_000)]
        events: u64,
        /// Lookups per second in the loaded arms.
        #[arg(long, default_value_t = 1000)]
        rate: u64,
        /// The state's `max-staleness` (how often the operator writes it through).
        #[arg(long, default_value = "1s")]
        max_staleness: String,
        #[arg(long, default_value_t = 3)]
        runs: usize,
        #[arg(long, default_value = "data/bench")]
        data: PathBuf,
    },
    /// Nexmark queries with a blackhole sink, chained beside unchained, from the generator and
    /// from a JSON-lines file.
    Nexmark {
        /// Queries to run (job files jobs/nexmark/<q>.yaml and <q>-jsonl.yaml).
        #[arg(long, value_delimiter = ',', default_value = "q0,q1,q2")]
        queries: Vec<String>,
        /// Sources: `generator`, `jsonl`, or both.
        #[arg(long, value_delimiter = ',', default_value = "generator,jsonl")]
        sources: Vec<String>,
        /// Events per run from the generator.
        #[arg(long, default_value_t = 10_000_000)]
        events: u64,
        /// Events in the JSON-lines file (smaller: the file is written once, ~220 B per event).
        #[arg(long, default_value_t = 4_000_000)]
        jsonl_events: u64,
        /// Parallelism values to run.
        #[arg(long, value_delimiter = ',', default_value = "1,2")]
        parallelism: Vec<u32>,
        /// Runs per arm (the median is reported).
        #[arg(long, default_value_t = 3)]
        runs: usize,
        /// Where the job files are.
        #[arg(long, default_value = "jobs/nexmark")]
        jobs: PathBuf,
        /// Where the generated JSON-lines input is kept between runs.
        #[arg(long, default_value = "data/bench")]
        data: PathBuf,
    },
}

/// Runs the benchmark `args` names and prints its tables; failures are reported on standard
/// error and in the exit code.
pub fn run(args: BenchArgs) -> ExitCode {
    let result = match args.which {
        Bench::Timers {
            pending,
            ops,
            scan_budget,
            data,
        } => timers(&pending, ops, scan_budget, &data),
        Bench::Scheduler {
            measure,
            runs,
            pipelines,
            max_spin,
            prewake,
        } => scheduler(measure, runs.max(1), &pipelines, max_spin, prewake),
        Bench::Serve(args) => return crate::serve::main(args),
        Bench::Kafka(args) => crate::kafka::main(args),
        Bench::Pool {
            measure,
            runs,
            threads,
            work,
            tasks_per_thread,
        } => pool(weir_connection_pool::bench::BenchConfig {
            threads,
            work,
            tasks_per_thread,
            duration: measure,
            runs: runs.max(1),
            ..Default::default()
        }),
        Bench::Postgres {
            connection,
            job,
            from,
            events,
            parallelism,
            runs,
            data,
        } => postgres(&PostgresBench {
            connection,
            job,
            from,
            events,
            parallelism,
            runs: runs.max(1),
            data,
        }),
        Bench::Checkpoint {
            job,
            events,
            interval,
            backends,
            runs,
            data,
        } => checkpoint(&job, events, interval, &backends, runs.max(1), &data),
        Bench::Restore {
            offsets,
            latency,
            state_bytes,
            s3,
            runs,
        } => restore(&offsets, &latency, state_bytes, s3.as_deref(), runs.max(1)),
        Bench::Backends {
            queries,
            events,
            parallelism,
            runs,
            jobs,
            data,
        } => backends(&queries, events, &parallelism, runs.max(1), &jobs, &data),
        Bench::Query {
            job,
            operator,
            state,
            events,
            rate,
            max_staleness,
            runs,
            data,
        } => query(&QueryBench {
            job,
            operator,
            state,
            events,
            rate: rate.max(1),
            max_staleness,
            runs: runs.max(1),
            data,
        }),
        Bench::Nexmark {
            queries,
            sources,
            events,
            jsonl_events,
            parallelism,
            runs,
            jobs,
            data,
        } => nexmark(&NexmarkBench {
            queries,
            sources,
            events,
            jsonl_events,
            parallelism,
            runs: runs.max(1),
            jobs,
            data,
        }),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

struct NexmarkBench {
    queries: Vec<String>,
    sources: Vec<String>,
    events: u64,
    jsonl_events: u64,
    parallelism: Vec<u32>,
    runs: usize,
    jobs: PathBuf,
    data: PathBuf,
}

/// One measured run.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Sample {
    pub(crate) events: u64,
    wall: Duration,
    cpu: Duration,
}

impl Sample {
    pub(crate) fn rate(&self) -> f64 {
        self.events as f64 / self.wall.as_secs_f64().max(1e-9)
    }
    pub(crate) fn per_core(&self) -> f64 {
        self.events as f64 / self.cpu.as_secs_f64().max(1e-9)
    }
}

fn cpu_time() -> anyhow::Result<Duration> {
    let usage = getrusage(UsageWho::RUSAGE_SELF)?;
    let tv = |t: nix::sys::time::TimeVal| {
        Duration::from_secs(t.tv_sec() as u64) + Duration::from_micros(t.tv_usec() as u64)
    };
    Ok(tv(usage.user_time()) + tv(usage.system_time()))
}

fn run_once(
    runtime: &tokio::runtime::Runtime,
    job: &Path,
    overrides: &[Override],
) -> anyhow::Result<Sample> {
    run_with(runtime, job, overrides, Default::default()).map(|(sample, _)| sample)
}

pub(crate) fn run_with(
    runtime: &tokio::runtime::Runtime,
    job: &Path,
    overrides: &[Override],
    options: weir_runtime::exec::job::JobOptions,
) -> anyhow::Result<(Sample, weir_runtime::exec::job::JobSummary)> {
    let plan = weir_runtime::plan::check_file(job, overrides)?;
    let cpu0 = cpu_time()?;
    let t0 = Instant::now();
    let summary = runtime.block_on(async {
        weir_runtime::exec::job::start(&plan, options)
            .await?
            .wait()
            .await
    })?;
    let sample = Sample {
        events: summary.events,
        wall: t0.elapsed(),
        cpu: cpu_time()? - cpu0,
    };
    Ok((sample, summary))
}

pub(crate) fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

fn nexmark(b: &NexmarkBench) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let jsonl = if b.sources.iter().any(|s| s == "jsonl") {
        Some(ensure_jsonl(&b.data, b.jsonl_events)?)
    } else {
        None
    };
    println!(
        "Nexmark, blackhole sink; median of {} runs per arm; {} cores; events/s per core = events / CPU seconds used",
        b.runs,
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    println!();
    println!(
        "| query | source | p | chained events/s | unchained events/s | chained/unchained | chained events/s/core | unchained events/s/core |"
    );
    println!("|---|---|---|---:|---:|---:|---:|---:|");
    for q in &b.queries {
        for source in &b.sources {
            let (job, mut base): (PathBuf, Vec<Override>) = match source.as_str() {
                "generator" => (
                    b.jobs.join(format!("{q}.yaml")),
                    vec![
                        format!("sources.nexmark.events={}", b.events)
                            .parse()
                            .map_err(anyhow::Error::msg)?,
                    ],
                ),
                "jsonl" => {
                    let Some(file) = &jsonl else { continue };
                    (
                        b.jobs.join(format!("{q}-jsonl.yaml")),
                        vec![
                            format!("sources.nexmark.path={}", file.display())
                                .parse()
                                .map_err(anyhow::Error::msg)?,
                        ],
                    )
                }
                other => anyhow::bail!("unknown source `{other}`: use generator or jsonl"),
            };
            base.push(
                "sinks.out.kind=blackhole"
                    .parse()
                    .map_err(anyhow::Error::msg)?,
            );
            for &p in &b.parallelism {
                let mut arms: [Vec<Sample>; 2] = [Vec::new(), Vec::new()];
                for _ in 0..b.runs {
                    for (arm, chaining) in [(0, true), (1, false)] {
                        let mut o = base.clone();
                        o.push(
                            format!("parallelism={p}")
                                .parse()
                                .map_err(anyhow::Error::msg)?,
                        );
                        o.push(
                            format!("chaining={chaining}")
                                .parse()
                                .map_err(anyhow::Error::msg)?,
                        );
                        arms[arm].push(run_once(&runtime, &job, &o)?);
                    }
                }
                let rate = |a: &Vec<Sample>| median(a.iter().map(Sample::rate).collect());
                let core = |a: &Vec<Sample>| median(a.iter().map(Sample::per_core).collect());
                let (c, u) = (rate(&arms[0]), rate(&arms[1]));
                println!(
                    "| {q} | {source} | {p} | {} | {} | {:.2}× | {} | {} |",
                    group(c as u64),
                    group(u as u64),
                    c / u,
                    group(core(&arms[0]) as u64),
                    group(core(&arms[1]) as u64),
                );
            }
        }
    }
    Ok(())
}

/// The bench's JSON-lines input, written once and reused while its size matches.
pub(crate) fn ensure_jsonl(dir: &Path, events: u64) -> anyhow::Result<PathBuf> {
    use weir_runtime::connectors::nexmark::{Generator, GeneratorConfig, write_file};
    std::fs::create_dir_all(dir)?;
    let file = dir.join(format!("nexmark-{events}.jsonl"));
    if !file.exists() {
        eprintln!(
            "writing {events} Nexmark events to {} (once)",
            file.display()
        );
        write_file(&Generator::new(GeneratorConfig::default()), events, &file)?;
    }
    Ok(file)
}

fn timers(pending: &[u64], ops: u64, scan_budget: Duration, data: &Path) -> anyhow::Result<()> {
    use weir_runtime::state::{KeyGroupRange, KeyRef, KeyedStateBackend, RocksConfig, TimeDomain};
    println!(
        "Timer set + delete (with holds) while N timers are pending; the scan arm recomputes the \
         hold by visiting every pending timer after each set and each delete (Beam's regression)."
    );
    println!();
    println!(
        "| backend | pending | set+delete/s | scan arm set+delete/s | real / scan | real vs 1,000 pending |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    for backend in ["heap", "rocksdb"] {
        let mut first_rate = None;
        for &n in pending {
            let dir = data.join(format!("timers-{}", std::process::id()));
            let range = KeyGroupRange::of_subtask(0, 128, 1);
            let mut state = match backend {
                "heap" => KeyedStateBackend::heap(128, range),
                _ => KeyedStateBackend::rocksdb(
                    128,
                    range,
                    RocksConfig {
                        path: dir.clone(),
                        block_cache: RocksConfig::shared_block_cache(64 << 20),
                        write_buffer: 64 << 20,
                        compression: weir_runtime::state::Compression::Lz4,
                        cache_entries: 100_000,
                    },
                )?,
            };
            // The pending timers: far in the future, each holding the watermark.
            for i in 0..n {
                let key = i.to_be_bytes();
                state.timers().set(
                    TimeDomain::EventTime,
                    1_000_000_000 + i as i64,
                    KeyRef::new((i % 128) as u32, &key),
                    b"",
                    Some(1_000_000 + i as i64),
                )?;
            }
            state.flush()?;
            let op = |state: &mut KeyedStateBackend, i: u64| -> anyhow::Result<()> {
                let key = (u64::MAX - i).to_be_bytes();
                let k = KeyRef::new((i % 128) as u32, &key);
                let t = 5_000_000 + (i % 10_000) as i64;
                state
                    .timers()
                    .set(TimeDomain::EventTime, t, k, b"w", Some(t - 10))?;
                state.timers().delete(TimeDomain::EventTime, t, k, b"w")?;
                Ok(())
            };
            let t0 = Instant::now();
            for i in 0..ops {
                op(&mut state, i)?;
            }
            state.flush()?;
            let rate = ops as f64 / t0.elapsed().as_secs_f64();
            let t1 = Instant::now();
            let mut scanned = 0u64;
            while t1.elapsed() < scan_budget && scanned < ops {
                op(&mut state, scanned)?;
                // The naive arm: two full scans per pair (after the set and after the delete).
                state.timers().min_hold_by_scan()?;
                state.timers().min_hold_by_scan()?;
                scanned += 1;
            }
            let scan_rate = scanned as f64 / t1.elapsed().as_secs_f64();
            let base = *first_rate.get_or_insert(rate);
            println!(
                "| {backend} | {} | {} | {} | {:.0}× | {:.2}× |",
                group(n),
                group(rate as u64),
                group(scan_rate as u64),
                rate / scan_rate.max(1e-9),
                base / rate,
            );
            state.close()?;
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
    Ok(())
}

fn backends(
    queries: &[String],
    events: u64,
    parallelism: &[u32],
    runs: usize,
    jobs: &Path,
    data: &Path,
) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    println!(
        "Nexmark from the generator ({events} events), blackhole sink, RocksDB state beside heap \
         state; median of {runs} runs per arm, arms interleaved."
    );
    println!();
    println!(
        "| query | p | heap events/s | rocksdb events/s | rocksdb / heap | heap events/s/core | rocksdb events/s/core |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|");
    for q in queries {
        let job = jobs.join(format!("{q}.yaml"));
        for &p in parallelism {
            let mut arms: [Vec<Sample>; 2] = [Vec::new(), Vec::new()];
            for _ in 0..runs {
                for (arm, backend) in [(0, "heap"), (1, "rocksdb")] {
                    let overrides: Vec<Override> = [
                        format!("sources.nexmark.events={events}"),
                        format!("parallelism={p}"),
                        "sinks.out.kind=blackhole".to_string(),
                        format!("state.backend={backend}"),
                        format!("state.path={}/state", data.display()),
                    ]
                    .iter()
                    .map(|o| o.parse().map_err(anyhow::Error::msg))
                    .collect::<Result<_, _>>()?;
                    arms[arm].push(run_once(&runtime, &job, &overrides)?);
                }
            }
            let rate = |a: &Vec<Sample>| median(a.iter().map(Sample::rate).collect());
            let core = |a: &Vec<Sample>| median(a.iter().map(Sample::per_core).collect());
            let (h, r) = (rate(&arms[0]), rate(&arms[1]));
            println!(
                "| {q} | {p} | {} | {} | {:.2}× | {} | {} |",
                group(h as u64),
                group(r as u64),
                r / h,
                group(core(&arms[0]) as u64),
                group(core(&arms[1]) as u64),
            );
        }
    }
    Ok(())
}

struct QueryBench {
    job: PathBuf,
    operator: String,
    state: String,
    events: u64,
    rate: u64,
    max_staleness: String,
    runs: usize,
    data: PathBuf,
}

/// One arm of the query benchmark.
#[derive(Clone, Copy, PartialEq, Eq)]
enum QueryArm {
    /// The job without `queryable:` (no write-through beyond checkpoints and evictions).
    Plain,
    /// Queryable (with its `max-staleness`), no lookups: the baseline of the loaded arms.
    Idle,
    /// Lookups at the rate on the given path.
    Load(weir_runtime::spec::QueryPath),
}

/// What the lookup load measured in one run.
#[derive(Default)]
struct LoadStats {
    /// Nanoseconds per lookup.
    latencies: Vec<u64>,
    found: u64,
    /// CPU time of the thread issuing the lookups (pacing and key scans included).
    thread_cpu: Duration,
}

/// On-CPU time of the calling thread, in ns, from Linux's schedstat (getrusage's per-thread
/// times advance in scheduler ticks).
fn thread_cpu_ns() -> anyhow::Result<u64> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat")?;
    text.split_whitespace()
        .next()
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("cannot read /proc/thread-self/schedstat: `{text}`"))
}

/// Issues lookups at `rate` per second on `path` until `done`, from this thread (its own
/// current-thread runtime, as an HTTP handler's task would). Keys come from a direct scan of
/// the state every 500 ms (not timed), so lookups hit keys the operator holds.
fn lookup_load(
    queries: &weir_runtime::query::Queries,
    b: &QueryBench,
    path: weir_runtime::spec::QueryPath,
    done: &std::sync::atomic::AtomicBool,
) -> anyhow::Result<LoadStats> {
    use weir_runtime::query::LookupRequest;
    use weir_runtime::spec::QueryPath;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut stats = LoadStats::default();
    let mut keys: Vec<String> = Vec::new();
    let mut refreshed = Instant::now() - Duration::from_secs(1);
    let interval = Duration::from_secs_f64(1.0 / b.rate as f64);
    let cpu0 = thread_cpu_ns()?;
    let mut next = Instant::now();
    let mut i = 0usize;
    while !done.load(std::sync::atomic::Ordering::Acquire) {
        if refreshed.elapsed() >= Duration::from_millis(500) {
            let scan = LookupRequest {
                prefix: Some(String::new()),
                limit: Some(200),
                path: Some(QueryPath::Direct),
                ..Default::default()
            };
            if let Ok(a) = rt.block_on(queries.lookup(&b.operator, &b.state, &scan)) {
                let fresh: Vec<String> = a
                    .entries
                    .iter()
                    .filter_map(|e| e["key"].as_object()?.values().next().map(key_text))
                    .collect();
                if !fresh.is_empty() {
                    keys = fresh;
                }
            }
            refreshed = Instant::now();
        }
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        } else if now - next > Duration::from_millis(100) {
            // Far behind (the machine stalled us): restart the schedule, do not burst.
            next = now;
        }
        next += interval;
        let Some(key) = keys.get(i % keys.len().max(1)).cloned() else {
            continue;
        };
        i += 1;
        let request = LookupRequest {
            key: Some(key),
            path: Some(path),
            ..Default::default()
        };
        let t = Instant::now();
        let result = rt.block_on(queries.lookup(&b.operator, &b.state, &request));
        stats.latencies.push(t.elapsed().as_nanos() as u64);
        if result.is_ok() {
            stats.found += 1;
        }
    }
    // Over the whole run: the thread sleeps between lookups, and every switch brings the
    // kernel's count up to date (a read while running can lag by up to a tick).
    stats.thread_cpu = Duration::from_nanos(thread_cpu_ns()?.saturating_sub(cpu0));
    Ok(stats)
}

fn key_text(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i] as f64
}

fn query(b: &QueryBench) -> anyhow::Result<()> {
    use weir_runtime::spec::QueryPath;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let arms = [
        ("not queryable", QueryArm::Plain),
        ("queryable, no lookups", QueryArm::Idle),
        ("direct lookups", QueryArm::Load(QueryPath::Direct)),
        ("ordered lookups", QueryArm::Load(QueryPath::Ordered)),
    ];
    println!(
        "{} on RocksDB ({} events, parallelism 1), `{}.{}` queryable with max-staleness {}; \
         {} lookups/s by key from one thread in the loaded arms; median of {} runs per arm, \
         arms interleaved.",
        b.job.display(),
        b.events,
        b.operator,
        b.state,
        b.max_staleness,
        b.rate,
        b.runs
    );
    println!();
    // Per arm, per run: (sample, load stats).
    let mut results: Vec<Vec<(Sample, Option<LoadStats>)>> =
        arms.iter().map(|_| Vec::new()).collect();
    for _ in 0..b.runs {
        for (arm, (_, kind)) in arms.iter().enumerate() {
            let mut overrides = vec![
                format!("sources.nexmark.events={}", b.events),
                "parallelism=1".to_string(),
                "sinks.out.kind=blackhole".to_string(),
                "state.backend=rocksdb".to_string(),
                format!("state.path={}/state", b.data.display()),
            ];
            if *kind != QueryArm::Plain {
                overrides.push(format!(
                    "transforms.{}.queryable={{{}: {{max-staleness: {}}}}}",
                    b.operator, b.state, b.max_staleness
                ));
            }
            let overrides: Vec<Override> = overrides
                .iter()
                .map(|o| o.parse().map_err(anyhow::Error::msg))
                .collect::<Result<_, _>>()?;
            let plan = weir_runtime::plan::check_file(&b.job, &overrides)?;
            let cpu0 = cpu_time()?;
            let t0 = Instant::now();
            let (summary, stats) = runtime.block_on(async {
                let job = weir_runtime::exec::job::start(&plan, Default::default()).await?;
                let queries = job.control().queries();
                let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
                let load = match kind {
                    QueryArm::Load(path) => {
                        let (done, path) = (done.clone(), *path);
                        let bench = QueryBench {
                            job: b.job.clone(),
                            operator: b.operator.clone(),
                            state: b.state.clone(),
                            max_staleness: b.max_staleness.clone(),
                            data: b.data.clone(),
                            ..*b
                        };
                        // Owned here and joined below, once the job has ended.
                        Some(std::thread::spawn(move || {
                            lookup_load(&queries, &bench, path, &done)
                        }))
                    }
                    _ => None,
                };
                let summary = job.wait().await;
                done.store(true, std::sync::atomic::Ordering::Release);
                let stats = match load {
                    Some(h) => Some(
                        h.join()
                            .map_err(|_| anyhow::anyhow!("the lookup thread panicked"))??,
                    ),
                    None => None,
                };
                anyhow::Ok((summary?, stats))
            })?;
            let sample = Sample {
                events: summary.events,
                wall: t0.elapsed(),
                cpu: cpu_time()? - cpu0,
            };
            results[arm].push((sample, stats));
        }
    }
    let rate = |arm: usize| median(results[arm].iter().map(|(s, _)| s.rate()).collect());
    // Process CPU per event of the idle arm: what the job costs without lookups.
    let idle_cpu_per_event = median(
        results[1]
            .iter()
            .map(|(s, _)| s.cpu.as_secs_f64() / s.events.max(1) as f64)
            .collect(),
    );
    println!(
        "| arm | events/s | vs queryable, no lookups | lookups | found | p50 | p99 | p99.9 | caller thread CPU per lookup | extra process CPU per lookup |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let base = rate(1);
    let mut p99s = Vec::new();
    for (arm, (name, _)) in arms.iter().enumerate() {
        let r = rate(arm);
        let mut cells = vec!["–".to_string(); 7];
        let loaded: Vec<&LoadStats> = results[arm]
            .iter()
            .filter_map(|(_, l)| l.as_ref())
            .collect();
        if !loaded.is_empty() {
            let mut all: Vec<u64> = loaded
                .iter()
                .flat_map(|l| l.latencies.iter().copied())
                .collect();
            all.sort_unstable();
            let n = all.len().max(1) as f64;
            let found: u64 = loaded.iter().map(|l| l.found).sum();
            let caller: f64 = loaded.iter().map(|l| l.thread_cpu.as_secs_f64()).sum();
            // Extra process CPU over the idle arm at the same number of events, per lookup.
            let extra: f64 = results[arm]
                .iter()
                .map(|(s, _)| s.cpu.as_secs_f64() - idle_cpu_per_event * s.events as f64)
                .sum();
            let p99 = percentile(&all, 0.99);
            p99s.push(p99);
            cells = vec![
                group(all.len() as u64),
                format!("{:.1}%", 100.0 * found as f64 / n),
                us_text(percentile(&all, 0.5)),
                us_text(p99),
                us_text(percentile(&all, 0.999)),
                us_text(caller / n * 1e9),
                us_text(extra / n * 1e9),
            ];
        }
        println!(
            "| {name} | {} | {:+.1}% | {} |",
            group(r as u64),
            100.0 * (r / base - 1.0),
            cells.join(" | ")
        );
    }
    if let [direct, ordered] = p99s[..] {
        println!();
        println!(
            "ordered p99 / direct p99: {:.1}× (target ≥ 3×); throughput with direct lookups vs none: {:+.1}% (target > −5%)",
            ordered / direct.max(1.0),
            100.0 * (rate(2) / base - 1.0)
        );
    }
    Ok(())
}

/// Nanoseconds as microseconds text.
fn us_text(ns: f64) -> String {
    if ns >= 1e6 {
        format!("{:.2} ms", ns / 1e6)
    } else {
        format!("{:.1} µs", ns / 1e3)
    }
}

fn scheduler(
    measure: Duration,
    runs: usize,
    pipelines: &[usize],
    max_spin: Option<Duration>,
    prewake: Option<Duration>,
) -> anyhow::Result<()> {
    use weir_scheduler::bench;
    let mut config = weir_scheduler::SchedulerConfig::default();
    if let Some(max_spin) = max_spin {
        config.max_spin = max_spin;
    }
    if let Some(prewake) = prewake {
        config.prewake = prewake;
    }
    let mut cells = bench::default_cells(measure);
    if !pipelines.is_empty() {
        cells.retain(|c| pipelines.contains(&c.pipelines));
    }
    println!(
        "Checkpoint triggers: per-pipeline 2-thread pools (SeaTunnel's dev branch) beside weir's \
         shared scheduler (busy-wait bound {}, prewake {}); {} per cell, median of {runs} runs.",
        humantime::format_duration(config.max_spin),
        humantime::format_duration(config.prewake),
        humantime::format_duration(measure)
    );
    println!();
    let results = bench::sweep(&config, &cells, runs, |done| {
        eprintln!(
            "{}",
            bench::table(std::slice::from_ref(done))
                .lines()
                .last()
                .unwrap_or("")
        );
    })?;
    println!("{}", bench::table(&results));
    println!("{}", bench::flatness(&results));
    Ok(())
}

fn pool(config: weir_connection_pool::bench::BenchConfig) -> anyhow::Result<()> {
    println!(
        "Connection pool: acquire+release through a mutex around the pool state, the combiner \
         without yield, and the combiner with yield ({:?}); {} per cell, median of {} runs.",
        config.combiner,
        humantime::format_duration(config.duration),
        config.runs
    );
    println!();
    println!("{}", weir_connection_pool::bench::run(&config)?);
    Ok(())
}

struct PostgresBench {
    connection: String,
    job: PathBuf,
    from: String,
    events: u64,
    parallelism: Vec<u32>,
    runs: usize,
    data: PathBuf,
}

/// The three arms of the sink benchmark.
const PG_ARMS: [&str; 3] = ["blackhole", "postgres", "postgres exactly-once"];

fn postgres(b: &PostgresBench) -> anyhow::Result<()> {
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

fn checkpoint(
    job: &Path,
    events: u64,
    interval: Duration,
    backends: &[String],
    runs: usize,
    data: &Path,
) -> anyhow::Result<()> {
    use weir_checkpoint::coordinator::Outcome;
    use weir_checkpoint::metadata::SnapshotKind;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let scheduler = std::sync::Arc::new(weir_scheduler::Scheduler::new(runtime.handle().clone())?);
    let storage = data.join("checkpoints");
    println!(
        "{} from the generator ({} events), blackhole sink: checkpoints every {} beside no \
         checkpoints; median of {runs} runs per arm, arms interleaved. Durations are trigger \
         to metadata published; size is what each checkpoint wrote.",
        job.display(),
        group(events),
        humantime::format_duration(interval)
    );
    println!();
    println!(
        "| backend | events/s without | events/s with | with / without | checkpoints per run | \
         duration p50 | duration max | size p50 |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for backend in backends {
        let mut arms: [Vec<Sample>; 2] = [Vec::new(), Vec::new()];
        let mut durations = Vec::new();
        let mut sizes = Vec::new();
        let mut counts = Vec::new();
        for _ in 0..runs {
            for (arm, samples) in arms.iter_mut().enumerate() {
                let mut o = vec![
                    format!("sources.nexmark.events={events}"),
                    "sinks.out.kind=blackhole".to_string(),
                    format!("state.backend={backend}"),
                    format!("state.path={}/state", data.display()),
                ];
                let mut options = weir_runtime::exec::job::JobOptions::default();
                if arm == 1 {
                    o.push(format!("checkpoint.interval={}ms", interval.as_millis()));
                    o.push(format!("checkpoint.storage={}", storage.display()));
                    options.scheduler = Some(scheduler.clone());
                }
                let o: Vec<Override> = o
                    .iter()
                    .map(|s| s.parse().map_err(anyhow::Error::msg))
                    .collect::<Result<_, _>>()?;
                let (sample, summary) = run_with(&runtime, job, &o, options)?;
                samples.push(sample);
                if arm == 1 {
                    let taken: Vec<_> = summary
                        .checkpoint_history
                        .iter()
                        .filter(|r| r.kind == SnapshotKind::Checkpoint)
                        .filter_map(|r| match r.outcome {
                            Outcome::Completed { bytes, .. } => Some((r.duration_ms, bytes)),
                            Outcome::Failed { .. } => None,
                        })
                        .collect();
                    counts.push(taken.len() as f64);
                    durations.extend(taken.iter().map(|t| t.0 as f64));
                    sizes.extend(taken.iter().map(|t| t.1 as f64));
                    // Each run starts without snapshots of earlier runs.
                    if let Err(e) = std::fs::remove_dir_all(&storage) {
                        anyhow::ensure!(e.kind() == std::io::ErrorKind::NotFound, e);
                    }
                }
            }
        }
        let rate = |a: &Vec<Sample>| median(a.iter().map(Sample::rate).collect());
        let (without, with) = (rate(&arms[0]), rate(&arms[1]));
        let or_zero = |xs: &Vec<f64>| {
            if xs.is_empty() {
                0.0
            } else {
                median(xs.clone())
            }
        };
        let max = durations.iter().copied().fold(0.0, f64::max);
        println!(
            "| {backend} | {} | {} | {:.2}× | {} | {} ms | {} ms | {} |",
            group(without as u64),
            group(with as u64),
            with / without,
            or_zero(&counts),
            or_zero(&durations),
            max,
            bytes(or_zero(&sizes) as u64),
        );
    }
    Ok(())
}

/// The naive restore, the baseline arm of `weir bench restore`: the metadata, then one seek and
/// one ranged request per offset, each range verified.
async fn restore_per_offset(
    snapshot: &weir_checkpoint::catalog::SnapshotRef,
) -> anyhow::Result<weir_checkpoint::RestoreStats> {
    use weir_checkpoint::reader::read_one_per_range;
    let started = Instant::now();
    let metadata = snapshot.metadata().await?;
    let (wanted, sums) = operator_ranges(snapshot, &metadata)?;
    let (states, mut stats) = read_one_per_range(snapshot.storage.as_ref(), &wanted).await?;
    for (bytes, sum) in states.iter().zip(&sums) {
        anyhow::ensure!(
            weir_checkpoint::metadata::checksum(bytes) == *sum,
            "checksum mismatch"
        );
    }
    stats.elapsed_us = started.elapsed().as_micros() as u64;
    Ok(stats)
}

/// Every subtask's operator-state range in `metadata`, and its checksum.
fn operator_ranges(
    snapshot: &weir_checkpoint::catalog::SnapshotRef,
    metadata: &weir_checkpoint::metadata::CheckpointMetadata,
) -> anyhow::Result<(Vec<weir_checkpoint::reader::Wanted>, Vec<String>)> {
    let mut wanted = Vec::new();
    let mut sums = Vec::new();
    for s in metadata.nodes.iter().flat_map(|n| &n.subtasks) {
        if let Some(r) = &s.operator {
            let file = metadata
                .operator_state
                .get(r.file as usize)
                .ok_or_else(|| anyhow::anyhow!("no merged file {}", r.file))?;
            wanted.push(weir_checkpoint::reader::Wanted {
                key: snapshot.key(&file.path),
                offset: r.offset,
                length: r.length,
            });
            sums.push(r.xxh3.clone());
        }
    }
    Ok((wanted, sums))
}

/// Writes checkpoint `id` with the operator state of `offsets` subtasks (about `state_bytes`
/// each, seeded), merged as the coordinator merges it; returns the number of merged files.
async fn write_operator_snapshot(
    catalog: &weir_checkpoint::JobCheckpoints,
    id: u64,
    offsets: usize,
    state_bytes: usize,
) -> anyhow::Result<usize> {
    use weir_checkpoint::publish::{MERGED_FILE_TARGET, merge_operator_states};
    let mut seed = 0x9e37_79b9_7f4a_7c15u64 ^ offsets as u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let states: Vec<Vec<u8>> = (0..offsets)
        .map(|_| {
            let len = state_bytes / 2 + (next() as usize) % state_bytes.max(1);
            (0..len).map(|_| next() as u8).collect()
        })
        .collect();
    let keyed: Vec<((usize, u32), &[u8])> = states
        .iter()
        .enumerate()
        .map(|(i, s)| ((0, i as u32), s.as_slice()))
        .collect();
    let (files, ranges) = merge_operator_states(&keyed, MERGED_FILE_TARGET);
    let count = files.len();
    let ranges = ranges.into_iter().map(|(_, range)| range).collect();
    weir_checkpoint::fixtures::publish_operator_state(catalog, id, files, ranges).await?;
    Ok(count)
}

fn restore(
    offsets: &[usize],
    latencies: &[Duration],
    state_bytes: usize,
    s3: Option<&str>,
    runs: usize,
) -> anyhow::Result<()> {
    use std::sync::Arc;
    use weir_checkpoint::metadata::SnapshotKind;
    use weir_checkpoint::object_store::memory::InMemory;
    use weir_checkpoint::object_store::throttle::{ThrottleConfig, ThrottledStore};
    use weir_checkpoint::restore::Restored;
    use weir_checkpoint::{CheckpointStorage, JobCheckpoints, ObjectStorage, StorageConfig};
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let mut stores: Vec<(String, Arc<dyn CheckpointStorage>)> = latencies
        .iter()
        .map(|latency| {
            let store = ThrottledStore::new(
                InMemory::new(),
                ThrottleConfig {
                    wait_get_per_call: *latency,
                    ..ThrottleConfig::default()
                },
            );
            let storage: Arc<dyn CheckpointStorage> =
                Arc::new(ObjectStorage::new(Arc::new(store), "memory://bench", ""));
            (
                format!(
                    "in memory, {} per request",
                    humantime::format_duration(*latency)
                ),
                storage,
            )
        })
        .collect();
    if let Some(endpoint) = s3 {
        let key = |var: &str| std::env::var(var).unwrap_or_else(|_| "test".into());
        let config = StorageConfig {
            url: format!("s3://weir-bench/{}", std::process::id()),
            endpoint: Some(endpoint.to_string()),
            region: Some(std::env::var("AWS_REGION").unwrap_or_else(|_| "us-east-1".into())),
            access_key_id: Some(key("AWS_ACCESS_KEY_ID")),
            secret_access_key: Some(key("AWS_SECRET_ACCESS_KEY")),
            allow_http: Some(endpoint.starts_with("http://")),
            request_timeout: Some(Duration::from_secs(10)),
            max_retries: Some(1),
        };
        let storage: Arc<dyn CheckpointStorage> = Arc::new(ObjectStorage::s3(&config)?);
        match runtime.block_on(storage.put("probe", vec![0])) {
            Ok(_) => stores.push((format!("S3 server at {endpoint}"), storage)),
            Err(e) => eprintln!("bench restore: skipping the S3 server: {e}"),
        }
    }
    println!(
        "Restore of operator state: the metadata, then every offset's range read and verified. \
         Baseline: one seek and one ranged request per offset (Flink's reader before it skipped \
         seeks); weir: the seek-free reader (sorted ranges, no seek when positioned, contiguous \
         ranges coalesced into one request per merged file). About {state_bytes} B per offset; \
         median span of {runs} runs per arm, arms interleaved."
    );
    println!();
    println!(
        "| store | offsets | merged files | baseline span | baseline requests | weir span | \
         weir requests | seeks performed | seeks skipped | weir / baseline |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (name, storage) in &stores {
        let catalog = JobCheckpoints::new(storage.clone(), "bench-restore");
        for (i, &n) in offsets.iter().enumerate() {
            let id = i as u64 + 1;
            let files = runtime.block_on(write_operator_snapshot(&catalog, id, n, state_bytes))?;
            let snapshot = catalog.snapshot(SnapshotKind::Checkpoint, id);
            let mut base = Vec::new();
            let mut ours = Vec::new();
            let (mut base_stats, mut our_stats) = (None, None);
            for _ in 0..runs {
                let b = runtime.block_on(restore_per_offset(&snapshot))?;
                base.push(b.elapsed_us as f64);
                base_stats = Some(b);
                let started = Instant::now();
                let r = runtime.block_on(Restored::open(snapshot.clone()))?;
                ours.push(started.elapsed().as_micros() as f64);
                our_stats = Some(r.stats);
            }
            let (Some(b), Some(o)) = (base_stats, our_stats) else {
                continue;
            };
            let (base, ours) = (median(base), median(ours));
            println!(
                "| {name} | {n} | {files} | {:.1} ms | {} | {:.1} ms | {} | {} | {} | {:.3}× |",
                base / 1000.0,
                b.requests,
                ours / 1000.0,
                o.requests,
                o.seeks_performed,
                o.seeks_skipped,
                ours / base
            );
        }
        // Leave nothing behind on a real server.
        if name.starts_with("S3") {
            runtime.block_on(async {
                let _ = storage.delete("probe").await;
                weir_checkpoint::storage::delete_prefix(storage.as_ref(), "").await
            })?;
        }
    }
    Ok(())
}

/// 1536 → "1.5 KiB".
fn bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

/// 1234567 → "1,234,567": the tables' number format (as `weir run`'s summary prints counts).
pub(crate) fn group(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}
