//! `weir bench pool`: the lesson-4 benchmark of the connection pool (`weir-connection-pool`):
//! pool acquire/release throughput and p99 acquire latency through a plain mutex around the
//! pool state, the combiner without yield, and the combiner with yield, in one process.
//!
//! Each measurement builds a fresh multi-threaded tokio runtime with `threads` workers and a pool
//! of `threads × tasks_per_thread` connections (a no-op manager, all opened up front), then runs
//! that many tasks, each acquiring and dropping a connection in a loop for `duration`. Rates are
//! printed in operations per millisecond (an acquire and its release are one operation), the unit
//! of lesson 4's figures. Nobody waits
//! for a connection: what is measured is the cost of the pool's state changes and of the
//! synchronisation around them. Every action additionally does `work` units of [`busy_work`]
//! inside the critical section, the stand-in for a heavier state change: the pool's state is
//! wrapped in [`Busy`], and the arms other than the production one are built through the pool's
//! `bench-internals` feature. Arms are interleaved run by run; throughput and p99 are medians
//! over runs, the longest combining run is the worst seen.
//!
//! A second table measures the executor alone, the way Vert.x measured its combiner (ops/ms):
//! `threads` OS threads submit fire-and-forget actions of `work` units for `duration`, through a
//! mutex, the combiner without yield, and the combiner with yield (a parked thread runs the posted
//! resumes). Without a pool around it, this shows the queue under contention and, in the longest
//! run, the trap the yield avoids.
//!
//! Call [`measure_all`] outside any tokio runtime (it builds its own).

use std::fmt;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use weir_connection_pool::bench_internals::{Executor, WrapState, WrappedState};
use weir_connection_pool::{
    CombinedState, Combiner, CombinerConfig, CombinerStats, Manager, Pool, PoolError,
};

/// Spends `units` units of CPU time: four dependent xorshift steps each (about 10 ns on the
/// project's machine; [`BenchReport::ns_per_unit`] has the measured figure). Xorshift rather than
/// multiply-add: the compiler folds unrolled multiply-adds into one.
pub fn busy_work(units: u32) {
    let mut x = std::hint::black_box(u64::from(units) | 0x9E37_79B9_7F4A_7C15);
    for _ in 0..u64::from(units) * 4 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
    }
    std::hint::black_box(x);
}

/// Wraps the pool's state in [`Busy`] with `work` units per action.
struct BusyWork(u32);

impl WrapState for BusyWork {
    fn wrap<S: CombinedState + 'static>(&self, state: S) -> WrappedState<S::Action, S::FollowUp> {
        Box::new(Busy {
            state,
            work: self.0,
        })
    }
}

/// A state whose every action first does `work` units of [`busy_work`], inside the critical
/// section.
struct Busy<S> {
    state: S,
    work: u32,
}

impl<S: CombinedState> CombinedState for Busy<S> {
    type Action = S::Action;
    type FollowUp = S::FollowUp;

    fn apply(&mut self, action: S::Action, follow_ups: &mut Vec<S::FollowUp>) {
        if self.work != 0 {
            busy_work(self.work);
        }
        self.state.apply(action, follow_ups);
    }
}

/// What to measure.
#[derive(Clone, Debug)]
pub struct BenchConfig {
    /// Runtime worker threads to measure with.
    pub threads: Vec<usize>,
    /// Units of busy work per action, inside the critical section.
    pub work: Vec<u32>,
    /// Acquiring tasks per worker thread.
    pub tasks_per_thread: usize,
    /// How long each measurement runs.
    pub duration: Duration,
    /// Runs per measurement (medians are reported).
    pub runs: usize,
    /// The combiner-with-yield arm's configuration (the no-yield arm uses it without yielding).
    pub combiner: CombinerConfig,
}

impl Default for BenchConfig {
    /// 1–4 threads, work 0, 1, 10 and 20, two tasks per thread, 3 runs of 300 ms, the default
    /// combiner configuration.
    fn default() -> Self {
        Self {
            threads: vec![1, 2, 3, 4],
            work: vec![0, 1, 10, 20],
            tasks_per_thread: 2,
            duration: Duration::from_millis(300),
            runs: 3,
            combiner: CombinerConfig::default(),
        }
    }
}

/// One arm of the benchmark.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Arm {
    /// A plain `std::sync::Mutex` around the pool state: every caller applies its own action.
    Mutex,
    /// The combiner, never yielding.
    Combiner,
    /// The combiner, yielding by count and time budget.
    CombinerYield,
}

impl Arm {
    /// All arms, baseline first.
    pub const ALL: [Arm; 3] = [Arm::Mutex, Arm::Combiner, Arm::CombinerYield];
}

/// One measurement: an arm at a thread count and a work amount.
#[derive(Clone, Copy, Debug)]
pub struct BenchRow {
    pub arm: Arm,
    pub threads: usize,
    pub work: u32,
    /// Acquire+release pairs per second (median over runs).
    pub acquires_per_sec: f64,
    /// 99th percentile acquire latency (median over runs).
    pub p99: Duration,
    /// The most actions one combining run applied (worst over runs; 0 for the mutex arm).
    pub longest_run_actions: u64,
    /// The longest single combining run, wall-clock (worst over runs).
    pub longest_run: Duration,
    /// The 99th percentile combining run duration (worst over runs).
    pub run_p99: Duration,
}

/// Every measurement, printable as markdown tables.
#[derive(Clone, Debug)]
pub struct BenchReport {
    pub config: BenchConfig,
    /// Measured cost of one unit of [`busy_work`].
    pub ns_per_unit: f64,
    /// The pool measurements (`acquires_per_sec` is acquire+release pairs per second).
    pub rows: Vec<BenchRow>,
    /// The executor-alone measurements (`acquires_per_sec` is actions per second; `p99` is
    /// unused).
    pub executor_rows: Vec<BenchRow>,
}

impl BenchReport {
    /// The row of `arm` at `threads` and `work`.
    pub fn row(&self, arm: Arm, threads: usize, work: u32) -> Option<&BenchRow> {
        self.rows
            .iter()
            .find(|r| r.arm == arm && r.threads == threads && r.work == work)
    }

    /// The executor-alone row of `arm` at `threads` and `work`.
    pub fn executor_row(&self, arm: Arm, threads: usize, work: u32) -> Option<&BenchRow> {
        self.executor_rows
            .iter()
            .find(|r| r.arm == arm && r.threads == threads && r.work == work)
    }
}

fn micros(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1e6)
}

/// A per-second rate as a per-millisecond one, with thousands separators.
fn per_ms(per_sec: f64) -> String {
    thousands(per_sec / 1e3)
}

fn thousands(x: f64) -> String {
    let digits = format!("{:.0}", x.max(0.0));
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

impl fmt::Display for BenchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.config;
        writeln!(
            f,
            "pool acquire+release, {} task(s) per thread, {} run(s) of {:?}; one work unit = {:.1} ns; \
             yield arm: at most {} actions or {:?} per run",
            c.tasks_per_thread,
            c.runs,
            c.duration,
            self.ns_per_unit,
            c.combiner.actions_per_run(),
            c.combiner.budget().unwrap_or(Duration::ZERO),
        )?;
        writeln!(f)?;
        writeln!(
            f,
            "| threads | work | mutex ops/ms | mutex p99 µs | combiner ops/ms | combiner p99 µs | combiner longest run (actions / µs) | yield ops/ms | yield p99 µs | yield longest run (actions / µs) | yield run p99 µs | yield/mutex |"
        )?;
        writeln!(
            f,
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        )?;
        for &work in &c.work {
            for &threads in &c.threads {
                let (Some(m), Some(n), Some(y)) = (
                    self.row(Arm::Mutex, threads, work),
                    self.row(Arm::Combiner, threads, work),
                    self.row(Arm::CombinerYield, threads, work),
                ) else {
                    continue;
                };
                writeln!(
                    f,
                    "| {threads} | {work} | {} | {} | {} | {} | {} / {} | {} | {} | {} / {} | {} | {:.2}× |",
                    per_ms(m.acquires_per_sec),
                    micros(m.p99),
                    per_ms(n.acquires_per_sec),
                    micros(n.p99),
                    n.longest_run_actions,
                    micros(n.longest_run),
                    per_ms(y.acquires_per_sec),
                    micros(y.p99),
                    y.longest_run_actions,
                    micros(y.longest_run),
                    micros(y.run_p99),
                    y.acquires_per_sec / m.acquires_per_sec.max(1.0),
                )?;
            }
        }
        if self.executor_rows.is_empty() {
            return Ok(());
        }
        writeln!(f)?;
        writeln!(
            f,
            "executor alone: fire-and-forget submissions from OS threads, actions per ms (longest run: actions / µs)"
        )?;
        writeln!(f)?;
        writeln!(
            f,
            "| threads | work | mutex ops/ms | combiner ops/ms | combiner longest run | yield ops/ms | yield longest run | yield run p99 µs | yield/mutex |"
        )?;
        writeln!(f, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|")?;
        for &work in &c.work {
            for &threads in &c.threads {
                let (Some(m), Some(n), Some(y)) = (
                    self.executor_row(Arm::Mutex, threads, work),
                    self.executor_row(Arm::Combiner, threads, work),
                    self.executor_row(Arm::CombinerYield, threads, work),
                ) else {
                    continue;
                };
                writeln!(
                    f,
                    "| {threads} | {work} | {} | {} | {} / {} | {} | {} / {} | {} | {:.2}× |",
                    per_ms(m.acquires_per_sec),
                    per_ms(n.acquires_per_sec),
                    n.longest_run_actions,
                    micros(n.longest_run),
                    per_ms(y.acquires_per_sec),
                    y.longest_run_actions,
                    micros(y.longest_run),
                    micros(y.run_p99),
                    y.acquires_per_sec / m.acquires_per_sec.max(1.0),
                )?;
            }
        }
        Ok(())
    }
}

/// `weir bench pool`: every measurement of `config`, printed.
pub(crate) fn run(config: BenchConfig) -> anyhow::Result<()> {
    println!(
        "Connection pool: acquire+release through a mutex around the pool state, the combiner \
         without yield, and the combiner with yield ({:?}); {} per cell, median of {} runs.",
        config.combiner,
        humantime::format_duration(config.duration),
        config.runs
    );
    println!();
    println!("{}", measure_all(&config)?);
    Ok(())
}

/// Runs every measurement of `config`.
///
/// # Errors
/// If a tokio runtime cannot be built, or an acquire fails (which would be a bug).
///
/// # Panics
/// When called inside a tokio runtime.
pub fn measure_all(config: &BenchConfig) -> io::Result<BenchReport> {
    let ns_per_unit = calibrate();
    let runs = config.runs.max(1);
    let cells = || {
        let mut cells: Vec<(Arm, usize, u32, Vec<Sample>)> = Vec::new();
        for &threads in &config.threads {
            for &work in &config.work {
                for arm in Arm::ALL {
                    cells.push((arm, threads, work, Vec::with_capacity(runs)));
                }
            }
        }
        cells
    };
    let (mut pool_cells, mut executor_cells) = (cells(), cells());
    // Warm up (allocator, page faults, CPU frequency) before the first recorded measurement.
    if let Some(&threads) = config.threads.last() {
        let warm = BenchConfig {
            duration: config.duration.min(Duration::from_millis(100)),
            ..config.clone()
        };
        measure(Arm::Mutex, threads, 0, &warm)?;
    }
    // Arms side by side, run by run.
    for _ in 0..runs {
        for (arm, threads, work, taken) in &mut pool_cells {
            taken.push(measure(*arm, *threads, *work, config)?);
        }
        for (arm, threads, work, taken) in &mut executor_cells {
            taken.push(measure_executor(*arm, *threads, *work, config));
        }
    }
    Ok(BenchReport {
        config: config.clone(),
        ns_per_unit,
        rows: summarise(pool_cells),
        executor_rows: summarise(executor_cells),
    })
}

fn summarise(cells: Vec<(Arm, usize, u32, Vec<Sample>)>) -> Vec<BenchRow> {
    cells
        .into_iter()
        .map(|(arm, threads, work, taken)| {
            let mut rates: Vec<f64> = taken.iter().map(|s| s.acquires_per_sec).collect();
            rates.sort_by(f64::total_cmp);
            let mut p99s: Vec<Duration> = taken.iter().map(|s| s.p99).collect();
            p99s.sort_unstable();
            BenchRow {
                arm,
                threads,
                work,
                acquires_per_sec: rates.get(rates.len() / 2).copied().unwrap_or(0.0),
                p99: p99s.get(p99s.len() / 2).copied().unwrap_or_default(),
                longest_run_actions: taken
                    .iter()
                    .map(|s| s.longest_run_actions)
                    .max()
                    .unwrap_or(0),
                longest_run: taken
                    .iter()
                    .map(|s| s.longest_run)
                    .max()
                    .unwrap_or_default(),
                run_p99: taken.iter().map(|s| s.run_p99).max().unwrap_or_default(),
            }
        })
        .collect()
}

fn calibrate() -> f64 {
    const UNITS: u32 = 200_000;
    busy_work(UNITS / 10);
    let start = Instant::now();
    busy_work(UNITS);
    start.elapsed().as_nanos() as f64 / f64::from(UNITS)
}

struct Sample {
    acquires_per_sec: f64,
    p99: Duration,
    longest_run_actions: u64,
    longest_run: Duration,
    run_p99: Duration,
}

/// Connections that are nothing: opening, checking and recycling complete at once.
struct NullManager;

impl Manager for NullManager {
    type Connection = ();
    type Error = io::Error;

    async fn connect(&self) -> Result<(), io::Error> {
        Ok(())
    }
}

fn measure(arm: Arm, threads: usize, work: u32, config: &BenchConfig) -> io::Result<Sample> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_time()
        .build()?;
    let tasks = threads * config.tasks_per_thread.max(1);
    let executor = match arm {
        Arm::Mutex => Executor::Mutex,
        Arm::Combiner => Executor::Combiner(config.combiner.without_yield()),
        Arm::CombinerYield => Executor::Combiner(config.combiner),
    };
    let duration = config.duration;
    runtime.block_on(async move {
        let pool = Pool::builder(NullManager)
            .max_size(tasks)
            .max_lifetime(None)
            .idle_timeout(None)
            .acquire_timeout(Duration::from_secs(10))
            .build_bench(executor, &BusyWork(work));
        // Open every connection before measuring.
        let mut held = Vec::with_capacity(tasks);
        for _ in 0..tasks {
            held.push(pool.acquire().await.map_err(io::Error::other)?);
        }
        drop(held);

        let stop = Arc::new(AtomicBool::new(false));
        let started = Instant::now();
        let loops: Vec<_> = (0..tasks)
            .map(|_| {
                let pool = pool.clone();
                let stop = Arc::clone(&stop);
                tokio::spawn(async move {
                    let mut acquired: u64 = 0;
                    while !stop.load(Relaxed) {
                        drop(pool.acquire().await?);
                        acquired += 1;
                        // Lets the worker's other tasks run now and then, as a real task would.
                        tokio::task::consume_budget().await;
                    }
                    Ok::<u64, PoolError<io::Error>>(acquired)
                })
            })
            .collect();
        tokio::time::sleep(duration).await;
        stop.store(true, Relaxed);
        let mut acquired = 0;
        for handle in loops {
            acquired += handle
                .await
                .map_err(io::Error::other)?
                .map_err(io::Error::other)?;
        }
        let elapsed = started.elapsed();
        let metrics = pool.metrics();
        pool.close().await;
        Ok(Sample {
            acquires_per_sec: acquired as f64 / elapsed.as_secs_f64(),
            p99: metrics.acquire_latency.p99,
            longest_run_actions: metrics.combiner.longest_run_actions,
            longest_run: metrics.combiner.longest_run,
            run_p99: metrics.combiner.run_p99,
        })
    })
}

/// The executor-alone state: a counter behind `work` units of busy work.
struct Counter {
    work: u32,
    applied: u64,
}

impl CombinedState for Counter {
    type Action = ();
    type FollowUp = ();

    fn apply(&mut self, (): (), _: &mut Vec<()>) {
        busy_work(self.work);
        self.applied += 1;
    }
}

fn measure_executor(arm: Arm, threads: usize, work: u32, config: &BenchConfig) -> Sample {
    let counter = Counter { work, applied: 0 };
    let stop = Arc::new(AtomicBool::new(false));
    let submitted = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let stats = match arm {
        Arm::Mutex => {
            let state = Arc::new(Mutex::new(counter));
            let loops: Vec<_> = (0..threads)
                .map(|_| {
                    let (state, stop, submitted) = (
                        Arc::clone(&state),
                        Arc::clone(&stop),
                        Arc::clone(&submitted),
                    );
                    thread::spawn(move || {
                        let mut n = 0;
                        while !stop.load(Relaxed) {
                            let mut follow_ups = Vec::new();
                            state
                                .lock()
                                .unwrap_or_else(PoisonError::into_inner)
                                .apply((), &mut follow_ups);
                            n += 1;
                        }
                        submitted.fetch_add(n, Relaxed);
                    })
                })
                .collect();
            thread::sleep(config.duration);
            stop.store(true, Relaxed);
            for handle in loops {
                let _ = handle.join();
            }
            CombinerStats::default()
        }
        Arm::Combiner | Arm::CombinerYield => {
            let combiner_config = if arm == Arm::Combiner {
                config.combiner.without_yield()
            } else {
                config.combiner
            };
            // The posted resumes run on a parked thread, woken by the hook.
            let resumer_slot: Arc<Mutex<Option<thread::Thread>>> = Arc::new(Mutex::new(None));
            let combiner = Arc::new(Combiner::new(counter, combiner_config, {
                let slot = Arc::clone(&resumer_slot);
                move || match &*slot.lock().unwrap_or_else(PoisonError::into_inner) {
                    Some(resumer) => {
                        resumer.unpark();
                        true
                    }
                    None => false,
                }
            }));
            let resumer = thread::spawn({
                let (combiner, stop) = (Arc::clone(&combiner), Arc::clone(&stop));
                move || {
                    while !stop.load(Relaxed) {
                        thread::park();
                        let _ = combiner.resume();
                    }
                }
            });
            *resumer_slot.lock().unwrap_or_else(PoisonError::into_inner) =
                Some(resumer.thread().clone());
            let loops: Vec<_> = (0..threads)
                .map(|_| {
                    let (combiner, stop, submitted) = (
                        Arc::clone(&combiner),
                        Arc::clone(&stop),
                        Arc::clone(&submitted),
                    );
                    thread::spawn(move || {
                        let mut n = 0;
                        while !stop.load(Relaxed) {
                            let _ = combiner.submit(());
                            n += 1;
                        }
                        submitted.fetch_add(n, Relaxed);
                    })
                })
                .collect();
            thread::sleep(config.duration);
            stop.store(true, Relaxed);
            for handle in loops {
                let _ = handle.join();
            }
            resumer.thread().unpark();
            let _ = resumer.join();
            // What a last yield left behind.
            let _ = combiner.resume();
            combiner.stats()
        }
    };
    let elapsed = started.elapsed();
    Sample {
        acquires_per_sec: submitted.load(Relaxed) as f64 / elapsed.as_secs_f64(),
        p99: Duration::ZERO,
        longest_run_actions: stats.longest_run_actions,
        longest_run: stats.longest_run,
        run_p99: stats.run_p99,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A smoke test: every arm runs, nothing fails or hangs, and the yield arm keeps its runs
    /// within the action limit (an invariant, unlike any throughput figure, which a loaded
    /// machine can miss; the speed comparison is `weir bench pool`'s job).
    #[test]
    fn the_benchmark_measures_every_arm_and_prints_a_table() {
        let config = BenchConfig {
            threads: vec![2],
            work: vec![1],
            tasks_per_thread: 2,
            duration: Duration::from_millis(20),
            runs: 1,
            combiner: CombinerConfig::default(),
        };
        let report = measure_all(&config).unwrap();
        assert_eq!(report.rows.len(), 3);
        assert_eq!(report.executor_rows.len(), 3);
        for arm in Arm::ALL {
            assert!(report.row(arm, 2, 1).is_some(), "{arm:?} missing");
            assert!(
                report.executor_row(arm, 2, 1).is_some(),
                "{arm:?} missing alone"
            );
        }
        let limit = config.combiner.actions_per_run() as u64;
        let yielding = report.row(Arm::CombinerYield, 2, 1).unwrap();
        assert!(yielding.longest_run_actions <= limit);
        let yielding = report.executor_row(Arm::CombinerYield, 2, 1).unwrap();
        assert!(yielding.longest_run_actions <= limit);
        assert_eq!(report.row(Arm::Mutex, 2, 1).unwrap().longest_run_actions, 0);
        let table = report.to_string();
        assert!(table.contains("| 2 | 1 |"), "{table}");
    }
}
