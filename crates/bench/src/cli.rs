//! The `weir bench` subcommands, their flags and defaults, and [`run`], which dispatches to the
//! benchmark a subcommand names.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};

use crate::nexmark::NexmarkBench;
use crate::postgres::PostgresBench;
use crate::query::QueryBench;

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
        /// The idle sweep, the contended one (busy cores, a saturated job), or both.
        #[arg(long, value_enum, default_value = "all")]
        sweep: crate::scheduler::Sweep,
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
    /// Rows per second into PostgreSQL through the `postgres` sink: a job's rows (straight, and
    /// exactly once with checkpoints) beside the same job into a blackhole sink; and
    /// changelogs applied by key (upserts and deletes) beside plain inserts, each run's table
    /// checked against a naive reference.
    Postgres {
        /// The server to write to (tables `weir_bench_rows` and `weir_bench_changes` are
        /// dropped and recreated there).
        #[arg(
            long,
            default_value = "host=127.0.0.1 port=5432 user=postgres dbname=postgres"
        )]
        connection: String,
        /// Which tables: `job` (the job's rows beside a blackhole sink), `changes`
        /// (changelogs into the keyed sink beside plain inserts).
        #[arg(long, value_delimiter = ',', default_value = "job,changes")]
        tables: Vec<crate::postgres::PgTable>,
        #[arg(long, default_value = "jobs/nexmark/q1.yaml")]
        job: PathBuf,
        /// The node whose rows are written.
        #[arg(long, default_value = "q1")]
        from: String,
        #[arg(long, default_value_t = 1_000_000)]
        events: u64,
        /// Rows of each input of the changes table.
        #[arg(long, default_value_t = 1_000_000)]
        changes_rows: u64,
        /// The changes table's shares of rows that update or delete a live key, in percent
        /// (0: the keyed sink with inserts only; at most 75, where deletes use up every key
        /// that inserts make).
        #[arg(long, value_delimiter = ',', default_value = "0,10,50",
              value_parser = clap::value_parser!(u32).range(0..=75))]
        changes: Vec<u32>,
        #[arg(long, value_delimiter = ',', default_value = "1,2")]
        parallelism: Vec<u32>,
        #[arg(long, default_value_t = 3)]
        runs: usize,
        #[arg(long, default_value = "data/bench")]
        data: PathBuf,
    },
    /// The PostgreSQL CDC source: a table's snapshot beside `COPY`, a slot's backlog beside
    /// the server decoding it alone, and commit-to-visible latency of a mirror job at a
    /// steady rate, at least once and exactly once.
    PostgresCdc(crate::postgres_cdc::BenchCdcArgs),
    /// `weir serve`: API latency with many jobs hosted, and the throughput cost of ten live
    /// dashboards.
    Serve(crate::serve::BenchServeArgs),
    /// The Kafka source beside the file source on the same events (q1), and end-to-end
    /// latency through Kafka, at least once and exactly once.
    Kafka(crate::kafka::BenchKafkaArgs),
    /// The NATS source beside the file source on the same events (q1), and end-to-end
    /// latency through NATS JetStream, at least once and exactly once.
    Nats(crate::nats::BenchNatsArgs),
    /// weir's JSON-lines decoder beside arrow-json on the Nexmark file (in memory, one
    /// thread), with and without splitting arrow-json's batches by event type; then the file
    /// job at parallelism 1 decoding ahead on threads beside decoding inline, and the fixed
    /// cost of a bounded file job.
    Json {
        /// Nexmark events in the file.
        #[arg(long, default_value_t = 1_000_000)]
        events: u64,
        /// Runs per arm (the median is reported).
        #[arg(long, default_value_t = 5)]
        runs: usize,
        /// Queries of the file job (job files jobs/nexmark/<q>-jsonl.yaml); `none` skips the
        /// job tables.
        #[arg(long, value_delimiter = ',', default_value = "q0,q1,q5")]
        queries: Vec<String>,
        #[arg(long, default_value = "jobs/nexmark")]
        jobs: PathBuf,
        #[arg(long, default_value = "data/bench")]
        data: PathBuf,
    },
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
    /// A running aggregate with hot keys (bids per auction, then auctions per number of
    /// bids) with a job-level `mini-batch` beside none: events/s and rows emitted.
    MiniBatch {
        #[arg(long, default_value = "jobs/examples/bids-per-auction.yaml")]
        job: PathBuf,
        #[arg(long, default_value_t = 3_000_000)]
        events: u64,
        /// The mini-batch's interval and size in the mini-batched arm.
        #[arg(long, default_value = "1s")]
        interval: String,
        #[arg(long, default_value_t = 10_000)]
        size: u32,
        #[arg(long, value_delimiter = ',', default_value = "1,2")]
        parallelism: Vec<u32>,
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
    /// Nexmark queries with a blackhole sink, chained beside unchained (or in two aggregation
    /// phases beside one, sliced windows beside whole ones, projected sources beside all
    /// columns, SQL beside YAML), from the generator and from a JSON-lines file.
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
        /// What the two arms differ in: chaining, aggregating in two phases, keeping sliding
        /// windows as slices, or SQL.
        #[arg(long, value_enum, default_value = "chaining")]
        compare: crate::nexmark::Compare,
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
        } => crate::timers::run(&pending, ops, scan_budget, &data),
        Bench::Scheduler {
            measure,
            runs,
            pipelines,
            max_spin,
            prewake,
            sweep,
        } => crate::scheduler::run(measure, runs.max(1), &pipelines, max_spin, prewake, sweep),
        Bench::Serve(args) => crate::serve::run(&args),
        Bench::Kafka(args) => crate::kafka::run(args),
        Bench::Nats(args) => crate::nats::run(args),
        Bench::Json {
            events,
            runs,
            queries,
            jobs,
            data,
        } => crate::json::run(events, runs.max(1), &data).and_then(|()| {
            if queries.iter().all(|q| q.is_empty() || q == "none") {
                return Ok(());
            }
            crate::json_file::run(&crate::json_file::FileBench {
                queries: &queries,
                events,
                runs: runs.max(1),
                jobs: &jobs,
                data: &data,
            })
        }),
        Bench::Pool {
            measure,
            runs,
            threads,
            work,
            tasks_per_thread,
        } => crate::pool::run(crate::pool::BenchConfig {
            threads,
            work,
            tasks_per_thread,
            duration: measure,
            runs: runs.max(1),
            ..Default::default()
        }),
        Bench::Postgres {
            connection,
            tables,
            job,
            from,
            events,
            changes_rows,
            changes,
            parallelism,
            runs,
            data,
        } => crate::postgres::run(&PostgresBench {
            connection,
            tables,
            job,
            from,
            events,
            changes_rows,
            changes,
            parallelism,
            runs: runs.max(1),
            data,
        }),
        Bench::PostgresCdc(args) => crate::postgres_cdc::run(args),
        Bench::Checkpoint {
            job,
            events,
            interval,
            backends,
            runs,
            data,
        } => crate::checkpoint::run(&job, events, interval, &backends, runs.max(1), &data),
        Bench::MiniBatch {
            job,
            events,
            interval,
            size,
            parallelism,
            backends,
            runs,
            data,
        } => crate::mini_batch::run(&crate::mini_batch::MiniBatchBench {
            job: &job,
            events,
            interval: &interval,
            size,
            parallelism: &parallelism,
            backends: &backends,
            runs: runs.max(1),
            data: &data,
        }),
        Bench::Restore {
            offsets,
            latency,
            state_bytes,
            s3,
            runs,
        } => crate::restore::run(&offsets, &latency, state_bytes, s3.as_deref(), runs.max(1)),
        Bench::Backends {
            queries,
            events,
            parallelism,
            runs,
            jobs,
            data,
        } => crate::backends::run(&queries, events, &parallelism, runs.max(1), &jobs, &data),
        Bench::Query {
            job,
            operator,
            state,
            events,
            rate,
            max_staleness,
            runs,
            data,
        } => crate::query::run(&QueryBench {
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
            compare,
        } => crate::nexmark::run(&NexmarkBench {
            queries,
            sources,
            events,
            jsonl_events,
            parallelism,
            runs: runs.max(1),
            jobs,
            data,
            compare,
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
