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
//! - `cli`: the `weir bench` subcommands and their flags ([`BenchArgs`]), and [`run`].
//! - `measure`: what every benchmark of a job shares: a measured run (`Sample`:
//!   events, wall and CPU time), medians, the generated JSON-lines input, number formatting.
//! - One module per subcommand, each with its arms side by side:
//!   - `nexmark`: Nexmark queries, chained beside unchained, generator and JSON lines;
//!   - `backends`: Nexmark queries on RocksDB beside the heap backend;
//!   - `timers`: timer set+delete with holds beside the scan that recomputes the hold;
//!   - `checkpoint`: a job checkpointing every second beside the same job without;
//!   - `mini_batch`: a running aggregate with hot keys, mini-batched beside not;
//!   - `restore`: the seek-free restore reader beside one request per offset;
//!   - `query`: queryable state, direct lookups beside ordered ones, under load;
//!   - `scheduler`: the shared checkpoint-trigger scheduler beside per-pipeline pools;
//!   - `pool`: the connection pool's combiner beside a mutex;
//!   - `postgres`: the PostgreSQL sink, at least once and exactly once, beside a blackhole,
//!     and changelogs applied by key (upserts and deletes) beside plain inserts;
//!   - `serve`: `weir serve`'s API latency with many jobs, and the cost of live dashboards;
//!   - `kafka`: the Kafka source beside the file source, and latency through Kafka.
//!   - `nats`: the NATS source beside the file source, and latency through NATS JetStream;
//!   - `json`: weir's JSON-lines decoder beside arrow-json on the Nexmark file, and
//!     `json_file`: the file job at parallelism 1 decoding ahead beside inline, and the
//!     fixed cost of a bounded file job.
//! - [`generator`]: a micro benchmark of the Nexmark generator's Arrow path, which no
//!   subcommand runs yet.

mod backends;
mod checkpoint;
mod cli;
pub mod generator;
mod json;
mod json_file;
mod kafka;
mod measure;
mod mini_batch;
mod nats;
mod nexmark;
mod pool;
mod postgres;
mod postgres_cdc;
mod query;
mod restore;
mod scheduler;
mod serve;
mod timers;

pub use cli::{BenchArgs, run};
