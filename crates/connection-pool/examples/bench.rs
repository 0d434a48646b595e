//! Runs the pool benchmark (mutex vs combiner vs combiner with yield), as `weir bench pool` does,
//! without building the rest of weir, and prints its tables:
//! `cargo run --release -p weir-connection-pool --example bench -- [MEASURE_MS] [RUNS] [THREADS,..] [WORK,..] [TASKS_PER_THREAD]`
//! (defaults: 300 ms, 3 runs, threads 1,2,3,4, work 0,1,10,20, 2 tasks per thread).

use std::time::Duration;

use weir_connection_pool::bench::{self, BenchConfig};

fn list<T: std::str::FromStr>(arg: &str) -> Result<Vec<T>, T::Err> {
    arg.split(',').map(str::parse).collect()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let mut config = BenchConfig::default();
    if let Some(ms) = args.next() {
        config.duration = Duration::from_millis(ms.parse()?);
    }
    if let Some(runs) = args.next() {
        config.runs = runs.parse()?;
    }
    if let Some(threads) = args.next() {
        config.threads = list(&threads)?;
    }
    if let Some(work) = args.next() {
        config.work = list(&work)?;
    }
    if let Some(tasks) = args.next() {
        config.tasks_per_thread = tasks.parse()?;
    }
    println!("{}", bench::run(&config)?);
    Ok(())
}
