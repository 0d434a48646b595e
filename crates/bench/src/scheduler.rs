//! `weir bench scheduler`: one scheduled thread pool per pipeline beside the shared scheduler
//! (`weir-scheduler`), in one process.
//!
//! - **per-pipeline** (the baseline, as Apache SeaTunnel's dev branch): each pipeline has its
//!   own pool of two threads over a delay queue, like Java's `ScheduledThreadPoolExecutor` with
//!   `scheduleAtFixedRate` (leader/follower waiting, the next run due one period after the
//!   previous *due* time, so a late pool catches up instead of skipping). The trigger body runs
//!   on the pool thread; its waiting part is a blocking sleep, as in Java.
//! - **shared**: one [`Scheduler`]; the trigger's bookkeeping runs inline on the timer thread
//!   and its waiting part is a tokio sleep that holds no thread.
//!
//! Pipelines' first due times are spread evenly over one interval (pipelines start at different
//! times in a real process). Each arm runs alone; the process's threads, CPU time (getrusage)
//! and the delays of ticks that started in the measurement window are reported. The machine
//! may be shared, so each cell runs several times with the arms interleaved, and every figure
//! is the median over runs.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use tokio::runtime::Handle;
use weir_scheduler::histogram::Histogram;
use weir_scheduler::{BoxFuture, Scheduler, SchedulerConfig, SchedulerError, Tick};

/// Stack size of the per-pipeline arm's threads: 10,000 of them at 5,000 pipelines.
const POOL_STACK: usize = 64 * 1024;
/// Threads per pipeline in the per-pipeline arm (SeaTunnel's pool size).
const POOL_THREADS: usize = 2;
/// Time between setting an arm up and its first due time.
const SETTLE: Duration = Duration::from_millis(100);

/// Locks, ignoring poisoning: no code panics while holding these locks.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// `weir bench scheduler`: the sweep of [`default_cells`] (or those of `pipelines`), printed.
pub(crate) fn run(
    measure: Duration,
    runs: usize,
    pipelines: &[usize],
    max_spin: Option<Duration>,
    prewake: Option<Duration>,
    sweep_kind: Sweep,
) -> anyhow::Result<()> {
    let mut config = SchedulerConfig::default();
    if let Some(max_spin) = max_spin {
        config.max_spin = max_spin;
    }
    if let Some(prewake) = prewake {
        config.prewake = prewake;
    }
    let mut cells = match sweep_kind {
        Sweep::Idle => default_cells(measure),
        Sweep::Contended => contended_cells(measure),
        Sweep::All => {
            let mut all = default_cells(measure);
            all.extend(contended_cells(measure));
            all
        }
    };
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
    let results = sweep(&config, &cells, runs, |done| {
        eprintln!(
            "{}",
            table(std::slice::from_ref(done))
                .lines()
                .last()
                .unwrap_or("")
        );
    })?;
    let (idle, contended): (Vec<_>, Vec<_>) = results
        .into_iter()
        .partition(|[r, _]| r.cell.beside == Beside::Nothing);
    if !idle.is_empty() {
        println!("{}", table(&idle));
        println!("{}", flatness(&idle));
    }
    if !contended.is_empty() {
        println!();
        println!(
            "Contended: beside one spinning thread per core, and beside {SATURATING_JOB} \
             unbounded at parallelism 2 checkpointing every second."
        );
        println!();
        println!("{}", table(&contended));
        if let Some(line) = job_delays(&contended) {
            println!("{line}");
        }
    }
    Ok(())
}

/// Which cells `weir bench scheduler` runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Sweep {
    /// The idle machine's sweep ([`default_cells`]).
    Idle,
    /// Beside busy cores and a saturated job ([`contended_cells`]).
    Contended,
    /// Both.
    All,
}

/// One measurement: both arms with the same pipelines and body.
#[derive(Debug, Clone, Copy)]
pub struct Cell {
    pub pipelines: usize,
    /// Checkpoint interval of every pipeline.
    pub interval: Duration,
    /// The trigger's waiting part: a blocking sleep (per-pipeline) or a tokio sleep (shared).
    /// Zero: bookkeeping only.
    pub body: Duration,
    /// Measurement window, after the first due time.
    pub measure: Duration,
    /// What runs beside the arm while it is measured.
    pub beside: Beside,
}

/// What runs in the process beside an arm while it is measured: the scheduler's delay on an
/// idle machine says little about a machine whose cores are busy, which is when a checkpoint
/// is needed most.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Beside {
    Nothing,
    /// One thread per core, each spinning.
    BusyThreads,
    /// Nexmark q5 from the generator, unbounded and flat out at parallelism 2, checkpointing
    /// every second: its data tasks keep every core busy. In the shared arm its checkpoint
    /// triggers go through the arm's scheduler, as they would in `weir serve`.
    SaturatedJob,
}

impl Beside {
    fn label(self) -> &'static str {
        match self {
            Beside::Nothing => "",
            Beside::BusyThreads => " + busy cores",
            Beside::SaturatedJob => " + saturated job",
        }
    }
}

/// The job of [`Beside::SaturatedJob`].
const SATURATING_JOB: &str = "jobs/nexmark/q5.yaml";

impl Cell {
    /// Whether the body outlasts the interval.
    pub fn is_overload(&self) -> bool {
        self.body > self.interval
    }
}

/// The sweep `weir bench scheduler` runs: P = 1 to 5,000 with bodies of 0, 500 µs and 5 ms,
/// then overload (a body of 1.5 intervals) at P = 100 and 1,000.
///
/// The interval is 100 ms up to P = 10 (so that those cells still have 30–300 ticks to take
/// quantiles of) and 1 s from P = 100 on (at most 5,000 ticks per second at P = 5,000, a dense
/// schedule already). Both arms of a cell always share its interval.
pub fn default_cells(measure: Duration) -> Vec<Cell> {
    let interval = interval_for;
    let mut cells = Vec::new();
    for pipelines in [1, 10, 100, 1_000, 5_000] {
        for body_us in [0, 500, 5_000] {
            cells.push(Cell {
                pipelines,
                interval: interval(pipelines),
                body: Duration::from_micros(body_us),
                measure,
                beside: Beside::Nothing,
            });
        }
    }
    for pipelines in [100, 1_000] {
        cells.push(Cell {
            pipelines,
            interval: interval(pipelines),
            body: interval(pipelines).mul_f64(1.5),
            measure,
            beside: Beside::Nothing,
        });
    }
    cells
}

/// The interval of a cell of `pipelines` (see [`default_cells`]).
fn interval_for(pipelines: usize) -> Duration {
    if pipelines <= 10 {
        Duration::from_millis(100)
    } else {
        Duration::from_secs(1)
    }
}

/// The contended sweep: both arms beside one spinning thread per core at P = 1, 100 and 1,000
/// (bodies 0 and 500 µs), then beside a saturated Nexmark job at P = 1 and 100 (body 0).
pub fn contended_cells(measure: Duration) -> Vec<Cell> {
    let interval = interval_for;
    let mut cells = Vec::new();
    for pipelines in [1, 100, 1_000] {
        for body_us in [0, 500] {
            cells.push(Cell {
                pipelines,
                interval: interval(pipelines),
                body: Duration::from_micros(body_us),
                measure,
                beside: Beside::BusyThreads,
            });
        }
    }
    for pipelines in [1, 100] {
        cells.push(Cell {
            pipelines,
            interval: interval(pipelines),
            body: Duration::ZERO,
            measure,
            beside: Beside::SaturatedJob,
        });
    }
    cells
}

/// Which arm a result is from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arm {
    PerPipeline,
    Shared,
}

/// What one arm measured.
#[derive(Debug, Clone)]
pub struct ArmResult {
    pub arm: Arm,
    pub cell: Cell,
    /// Ticks whose trigger started in the window.
    pub fired: u64,
    /// Ticks coalesced from setup to the end of the window (the per-pipeline arm never
    /// coalesces: it runs late).
    pub coalesced: u64,
    /// Triggers that panicked in the window, summed over runs (a broken arm if not 0).
    pub panicked: u64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
    /// Threads of the whole process in the middle of the window.
    pub threads: usize,
    /// Threads the arm added to the process (its pools, or the scheduler's own).
    pub arm_threads: usize,
    /// CPU time (user + system) of the process in the window, as a share of one core.
    pub cpu_share: f64,
    /// Share of one core the shared scheduler spent busy-waiting for precision.
    pub spin_share: f64,
    /// Beside a saturated job, in the shared arm: the p99 delay of the job's own checkpoint
    /// triggers (µs), from the scheduler's metrics.
    pub job_p99_us: Option<f64>,
}

/// Runs both arms of one cell `runs` times, interleaved (the arm that goes first alternates),
/// and reports for each arm the median over its runs of every figure. `runtime` must not be
/// driving the calling thread: this blocks.
pub fn run_cell(
    runtime: &Handle,
    config: &SchedulerConfig,
    cell: &Cell,
    runs: usize,
) -> anyhow::Result<[ArmResult; 2]> {
    let mut per_pipeline = Vec::with_capacity(runs);
    let mut shared = Vec::with_capacity(runs);
    let per_pipeline_run = || -> anyhow::Result<ArmResult> {
        let load = Load::start(runtime, cell.beside, None)?;
        let result = per_pipeline_arm(cell);
        load.stop()?;
        Ok(result?)
    };
    for run in 0..runs.max(1) {
        if run % 2 == 0 {
            per_pipeline.push(per_pipeline_run()?);
            shared.push(shared_arm(runtime, config, cell)?);
        } else {
            shared.push(shared_arm(runtime, config, cell)?);
            per_pipeline.push(per_pipeline_run()?);
        }
    }
    Ok([median(per_pipeline), median(shared)])
}

/// What runs beside an arm (see [`Beside`]), from before the arm is set up until after it is
/// measured. Dropped without [`stop`](Self::stop) (an arm failed), it still stops its spinners
/// and cancels its job.
struct Load<'a> {
    runtime: &'a Handle,
    stop: Arc<std::sync::atomic::AtomicBool>,
    spinners: Vec<JoinHandle<()>>,
    job: Option<weir_runtime::exec::job::RunningJob>,
    /// The saturated job's checkpoints and state, removed when the load stops.
    dir: Option<std::path::PathBuf>,
}

impl Drop for Load<'_> {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(job) = &self.job {
            job.stopper().cancel();
        }
    }
}

impl<'a> Load<'a> {
    /// Starts the load; a saturated job's checkpoint triggers go through `scheduler` when one is
    /// given (else the job starts a scheduler of its own, as `weir run` does).
    fn start(
        runtime: &'a Handle,
        beside: Beside,
        scheduler: Option<Arc<Scheduler>>,
    ) -> anyhow::Result<Self> {
        let mut load = Load {
            runtime,
            stop: Arc::new(std::sync::atomic::AtomicBool::new(false)),
            spinners: Vec::new(),
            job: None,
            dir: None,
        };
        match beside {
            Beside::Nothing => {}
            Beside::BusyThreads => {
                for i in 0..thread::available_parallelism().map_or(2, |n| n.get()) {
                    let stop = Arc::clone(&load.stop);
                    load.spinners
                        .push(thread::Builder::new().name(format!("busy-{i}")).spawn(
                            move || {
                                let mut x = 0u64;
                                while !stop.load(Ordering::Relaxed) {
                                    x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
                                }
                            },
                        )?);
                }
            }
            Beside::SaturatedJob => {
                let dir = std::env::temp_dir()
                    .join(format!("weir-bench-scheduler-{}", std::process::id()));
                let overrides: Vec<weir_runtime::spec::load::Override> = [
                    "sources.nexmark.events=null".to_owned(),
                    "parallelism=2".to_owned(),
                    "sinks.out.kind=blackhole".to_owned(),
                    "checkpoint.interval=1s".to_owned(),
                    format!("checkpoint.storage={}", dir.join("cp").display()),
                    format!("state.path={}", dir.join("state").display()),
                ]
                .iter()
                .map(|s| s.parse().map_err(anyhow::Error::msg))
                .collect::<Result<_, _>>()?;
                let plan = weir_runtime::plan::check_file(
                    std::path::Path::new(SATURATING_JOB),
                    &overrides,
                )?;
                let options = weir_runtime::exec::job::JobOptions {
                    scheduler,
                    ..Default::default()
                };
                let job = runtime.block_on(weir_runtime::exec::job::start(&plan, options))?;
                // Until its tasks are all running flat out.
                thread::sleep(Duration::from_millis(500));
                load.job = Some(job);
                load.dir = Some(dir);
            }
        }
        Ok(load)
    }

    /// Stops the load and waits for it: the spinners joined, the job ended and its files gone.
    fn stop(mut self) -> anyhow::Result<()> {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.spinners.drain(..) {
            let _ = t.join();
        }
        if let Some(job) = self.job.take() {
            job.stopper().cancel();
            self.runtime.block_on(job.wait())?;
        }
        if let Some(dir) = self.dir.take() {
            std::fs::remove_dir_all(dir)?;
        }
        Ok(())
    }
}

/// Runs `cells` (each `runs` times, see [`run_cell`]) on a tokio runtime of its own with one worker
/// per core, calling `each` after each cell.
pub fn sweep(
    config: &SchedulerConfig,
    cells: &[Cell],
    runs: usize,
    mut each: impl FnMut(&[ArmResult; 2]),
) -> anyhow::Result<Vec<[ArmResult; 2]>> {
    let workers = thread::available_parallelism().map_or(2, |n| n.get());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .thread_name("weir-bench-rt")
        .enable_all()
        .build()?;
    let mut results = Vec::with_capacity(cells.len());
    for cell in cells {
        let result = run_cell(runtime.handle(), config, cell, runs)?;
        each(&result);
        results.push(result);
    }
    Ok(results)
}

/// The median of each figure over runs of one arm (upper median for an even count).
fn median(runs: Vec<ArmResult>) -> ArmResult {
    fn mid<T: Copy + PartialOrd>(runs: &[ArmResult], f: impl Fn(&ArmResult) -> T) -> T {
        let mut v: Vec<T> = runs.iter().map(f).collect();
        v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
        v[v.len() / 2]
    }
    ArmResult {
        arm: runs[0].arm,
        cell: runs[0].cell,
        fired: mid(&runs, |r| r.fired),
        coalesced: mid(&runs, |r| r.coalesced),
        panicked: runs.iter().map(|r| r.panicked).sum(),
        p50_us: mid(&runs, |r| r.p50_us),
        p99_us: mid(&runs, |r| r.p99_us),
        max_us: mid(&runs, |r| r.max_us),
        threads: mid(&runs, |r| r.threads),
        arm_threads: mid(&runs, |r| r.arm_threads),
        cpu_share: mid(&runs, |r| r.cpu_share),
        spin_share: mid(&runs, |r| r.spin_share),
        job_p99_us: runs
            .iter()
            .any(|r| r.job_p99_us.is_some())
            .then(|| mid(&runs, |r| r.job_p99_us.unwrap_or(0.0))),
    }
}

/// A Markdown table of results, one row per arm, with the shared/per-pipeline p50 and p99
/// ratios on the shared rows.
pub fn table(results: &[[ArmResult; 2]]) -> String {
    let mut out = String::from(
        "| P | interval | body | arm | p50 µs | p99 µs | max µs | threads | CPU (% of a core) | spin % | fired | coalesced | p50 shared/per | p99 shared/per |\n\
         |---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for [base, shared] in results {
        for r in [base, shared] {
            let body = if r.cell.is_overload() {
                format!("{:?} (overload)", r.cell.body)
            } else {
                format!("{:?}", r.cell.body)
            };
            let ratios = if r.arm == Arm::Shared {
                format!(
                    "{:.2}× | {:.2}×",
                    r.p50_us / base.p50_us.max(1e-3),
                    r.p99_us / base.p99_us.max(1e-3)
                )
            } else {
                " | ".to_owned()
            };
            let arm = match r.arm {
                Arm::PerPipeline => "per-pipeline",
                Arm::Shared => "shared",
            };
            let arm = format!("{arm}{}", r.cell.beside.label());
            out.push_str(&format!(
                "| {} | {:?} | {} | {} | {:.2} | {:.1} | {:.1} | {} | {:.1} | {:.1} | {} | {} | {} |\n",
                r.cell.pipelines,
                r.cell.interval,
                body,
                arm,
                r.p50_us,
                r.p99_us,
                r.max_us,
                r.threads,
                r.cpu_share * 100.0,
                r.spin_share * 100.0,
                r.fired,
                r.coalesced,
                ratios,
            ));
        }
    }
    out
}

/// Beside a saturated job: the delay of the job's own checkpoint triggers in the shared arm.
pub fn job_delays(results: &[[ArmResult; 2]]) -> Option<String> {
    let cells: Vec<String> = results
        .iter()
        .filter_map(|[_, shared]| {
            Some(format!(
                " P = {}: {:.1} µs",
                shared.cell.pipelines, shared.job_p99_us?
            ))
        })
        .collect();
    (!cells.is_empty()).then(|| {
        format!(
            "the saturated job's own checkpoint triggers, p99 (shared arm):{}",
            cells.join(";")
        )
    })
}

/// How flat the shared arm's median delay is across pipeline counts: for each trigger body (the
/// overload cells aside), the lowest and highest p50 over P and their ratio. The target is a
/// ratio within 2×.
pub fn flatness(results: &[[ArmResult; 2]]) -> String {
    let shared: Vec<&ArmResult> = results
        .iter()
        .map(|[_, shared]| shared)
        .filter(|r| !r.cell.is_overload())
        .collect();
    let mut bodies: Vec<Duration> = shared.iter().map(|r| r.cell.body).collect();
    bodies.sort();
    bodies.dedup();
    let spans = bodies.into_iter().filter_map(|body| {
        let cells = || shared.iter().filter(move |r| r.cell.body == body);
        let lo = cells().min_by(|a, b| a.p50_us.total_cmp(&b.p50_us))?;
        let hi = cells().max_by(|a, b| a.p50_us.total_cmp(&b.p50_us))?;
        Some(format!(
            " body {body:?}: {:.2} µs (P = {}) – {:.2} µs (P = {}), {:.2}×",
            lo.p50_us,
            lo.cell.pipelines,
            hi.p50_us,
            hi.cell.pipelines,
            hi.p50_us / lo.p50_us.max(1e-3)
        ))
    });
    format!(
        "shared p50 across P (lowest–highest, ratio):{}",
        spans.collect::<Vec<_>>().join(";")
    )
}

/// The process's threads, from `/proc/self/status` (0 where there is none).
pub fn process_threads() -> usize {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Threads:"))
                .and_then(|n| n.trim().parse().ok())
        })
        .unwrap_or(0)
}

/// CPU time (user + system) of the process so far.
pub fn process_cpu() -> Duration {
    use nix::sys::resource::{UsageWho, getrusage};
    match getrusage(UsageWho::RUSAGE_SELF) {
        Ok(u) => {
            let tv = |t: nix::sys::time::TimeVal| {
                Duration::from_secs(t.tv_sec().max(0) as u64)
                    + Duration::from_micros(t.tv_usec().max(0) as u64)
            };
            tv(u.user_time()) + tv(u.system_time())
        }
        Err(_) => Duration::ZERO,
    }
}

/// The measurement window of a cell set up now: first due times spread from its start.
#[derive(Clone, Copy)]
struct Window {
    start: Instant,
    end: Instant,
}

impl Window {
    fn new(cell: &Cell) -> Self {
        let start = Instant::now() + SETTLE;
        Window {
            start,
            end: start + cell.measure,
        }
    }

    /// First due time of pipeline `i` of `n`: spread evenly over one interval.
    fn first_due(&self, cell: &Cell, i: usize) -> Instant {
        self.start
            + cell
                .interval
                .mul_f64(i as f64 / cell.pipelines.max(1) as f64)
    }
}

fn sleep_until(t: Instant) {
    let now = Instant::now();
    if t > now {
        thread::sleep(t - now);
    }
}

/// Waits out a window, sampling threads in its middle and CPU time at its ends.
fn measure_window(window: &Window) -> (usize, Duration) {
    sleep_until(window.start);
    let cpu0 = process_cpu();
    sleep_until(window.start + (window.end - window.start) / 2);
    let threads = process_threads();
    sleep_until(window.end);
    (threads, process_cpu().saturating_sub(cpu0))
}

fn result(
    arm: Arm,
    cell: &Cell,
    delay: &Histogram,
    (coalesced, panicked): (u64, u64),
    threads: (usize, usize),
    cpu: Duration,
    spin: Duration,
) -> ArmResult {
    let secs = cell.measure.as_secs_f64().max(1e-9);
    ArmResult {
        arm,
        cell: *cell,
        fired: delay.count(),
        coalesced,
        panicked,
        p50_us: delay.quantile(0.5) as f64 / 1_000.0,
        p99_us: delay.quantile(0.99) as f64 / 1_000.0,
        max_us: delay.max() as f64 / 1_000.0,
        threads: threads.0,
        arm_threads: threads.1,
        cpu_share: cpu.as_secs_f64() / secs,
        spin_share: spin.as_secs_f64() / secs,
        job_p99_us: None,
    }
}

// ---------------------------------------------------------------------------------------------
// The shared arm.

fn shared_arm(
    runtime: &Handle,
    config: &SchedulerConfig,
    cell: &Cell,
) -> anyhow::Result<ArmResult> {
    // As `weir run` and `weir serve` start it: trigger futures on its own coordinator runtime.
    let scheduler = Arc::new(Scheduler::dedicated(SchedulerConfig {
        thread_name: "weir-bench-sched".to_owned(),
        ..config.clone()
    })?);
    let load = Load::start(runtime, cell.beside, Some(Arc::clone(&scheduler)))?;
    let window = Window::new(cell);
    let checkpoints = Arc::new(AtomicU64::new(0));
    // Delays of ticks that started in the window, recorded by the triggers themselves, as the
    // per-pipeline arm does: the scheduler's own histograms would also count ticks after the
    // window, and reading them during the run would take the leases' locks. Only the timer
    // thread takes this lock until the arm is torn down.
    let delay = Arc::new(Mutex::new(Histogram::new()));
    let mut leases = Vec::with_capacity(cell.pipelines);
    for i in 0..cell.pipelines {
        let (checkpoints, delay) = (Arc::clone(&checkpoints), Arc::clone(&delay));
        let body = cell.body;
        let trigger = move |tick: Tick| -> Option<BoxFuture> {
            // The bookkeeping: bump a checkpoint id.
            checkpoints.fetch_add(1, Ordering::Relaxed);
            if tick.started >= window.start && tick.started < window.end {
                lock(&delay).record_duration(tick.delay());
            }
            if body.is_zero() {
                None
            } else {
                Some(Box::pin(tokio::time::sleep(body)))
            }
        };
        leases.push(scheduler.register_at(
            format!("pipeline-{i}"),
            window.first_due(cell, i),
            cell.interval,
            trigger,
        )?);
    }
    let before = scheduler.metrics();
    let (threads, cpu) = measure_window(&window);
    let after = scheduler.metrics();
    let spin = Duration::from_micros(
        after
            .precision
            .spin_us
            .saturating_sub(before.precision.spin_us),
    );
    // The saturated job's own lease is the one the arm did not register.
    let job_p99_us = after
        .pipelines
        .iter()
        .find(|p| !p.name.starts_with("pipeline-"))
        .map(|p| p.delay.p99_us);
    drop(leases);
    load.stop()?;
    drop(scheduler);
    let delay = lock(&delay).clone();
    let mut measured = result(
        Arm::Shared,
        cell,
        &delay,
        (
            after.coalesced.saturating_sub(before.coalesced),
            after.panicked.saturating_sub(before.panicked),
        ),
        (threads, after.threads),
        cpu,
        spin,
    );
    measured.job_p99_us = job_p99_us;
    Ok(measured)
}

// ---------------------------------------------------------------------------------------------
// The per-pipeline arm: a miniature ScheduledThreadPoolExecutor per pipeline.

/// One pipeline's pool: two threads over a one-task delay queue.
struct Pool {
    shared: Arc<PoolShared>,
    threads: Vec<JoinHandle<()>>,
}

struct PoolShared {
    state: Mutex<PoolState>,
    /// Java's `available` condition of `DelayedWorkQueue`.
    available: Condvar,
}

struct PoolState {
    /// When the periodic task is next due; `None` while a thread runs it (it is then out of
    /// the queue, as in Java), and until every pool of the arm has started.
    next: Option<Instant>,
    /// Ticks that start in it are measured; set with the first due time.
    window: Option<Window>,
    /// A thread is in a timed wait for the head (Java's `leader`); the others wait untimed.
    leader: bool,
    shutdown: bool,
    /// Delays of runs that started in the window.
    delay: Histogram,
}

fn per_pipeline_arm(cell: &Cell) -> Result<ArmResult, SchedulerError> {
    let threads_before = process_threads();
    let checkpoints = Arc::new(AtomicU64::new(0));
    let mut pools: Vec<Pool> = Vec::with_capacity(cell.pipelines);
    let mut failed = None;
    // The pools start idle: starting thousands of threads takes longer than `SETTLE` on a busy
    // machine, and the window (hence every first due time) must not begin before they are all
    // up, or the baseline would be measured late through no fault of its own.
    'spawn: for i in 0..cell.pipelines {
        let shared = Arc::new(PoolShared {
            state: Mutex::new(PoolState {
                next: None,
                window: None,
                leader: false,
                shutdown: false,
                delay: Histogram::new(),
            }),
            available: Condvar::new(),
        });
        let mut pool = Pool {
            shared: Arc::clone(&shared),
            threads: Vec::with_capacity(POOL_THREADS),
        };
        for t in 0..POOL_THREADS {
            let shared = Arc::clone(&shared);
            let checkpoints = Arc::clone(&checkpoints);
            let (interval, body) = (cell.interval, cell.body);
            let spawned = thread::Builder::new()
                .name(format!("pool-{i}-{t}"))
                .stack_size(POOL_STACK)
                .spawn(move || pool_worker(&shared, interval, body, &checkpoints));
            match spawned {
                Ok(handle) => pool.threads.push(handle),
                Err(e) => {
                    failed = Some(e);
                    pools.push(pool);
                    break 'spawn;
                }
            }
        }
        pools.push(pool);
    }
    let measured = match failed {
        None => {
            let window = Window::new(cell);
            for (i, pool) in pools.iter().enumerate() {
                let mut state = lock(&pool.shared.state);
                state.next = Some(window.first_due(cell, i));
                state.window = Some(window);
                drop(state);
                pool.shared.available.notify_all();
            }
            Some(measure_window(&window))
        }
        Some(_) => None,
    };
    for pool in &pools {
        lock(&pool.shared.state).shutdown = true;
        pool.shared.available.notify_all();
    }
    let mut delay = Histogram::new();
    for pool in pools {
        for t in pool.threads {
            let _ = t.join();
        }
        delay.merge(&lock(&pool.shared.state).delay);
    }
    let (threads, cpu) = match (measured, failed) {
        (Some(m), _) => m,
        (None, Some(e)) => return Err(SchedulerError::Spawn(e)),
        (None, None) => (0, Duration::ZERO),
    };
    Ok(result(
        Arm::PerPipeline,
        cell,
        &delay,
        (0, 0),
        (threads, threads.saturating_sub(threads_before)),
        cpu,
        Duration::ZERO,
    ))
}

/// A pool thread: Java's `ThreadPoolExecutor` worker looping on `DelayedWorkQueue::take`, then
/// running the task and re-queueing it one period after its previous due time.
fn pool_worker(pool: &PoolShared, interval: Duration, body: Duration, checkpoints: &AtomicU64) {
    let mut state = lock(&pool.state);
    loop {
        if state.shutdown {
            return;
        }
        let Some(due) = state.next else {
            state = pool
                .available
                .wait(state)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            continue;
        };
        let now = Instant::now();
        if due <= now {
            state.next = None;
            drop(state);
            let started = Instant::now();
            checkpoints.fetch_add(1, Ordering::Relaxed);
            if !body.is_zero() {
                thread::sleep(body);
            }
            state = lock(&pool.state);
            let in_window = state
                .window
                .is_some_and(|w| started >= w.start && started < w.end);
            if in_window {
                state.delay.record_duration(started - due);
            }
            state.next = Some(due + interval);
            pool.available.notify_one();
        } else if state.leader {
            state = pool
                .available
                .wait(state)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        } else {
            state.leader = true;
            let (guard, _) = pool
                .available
                .wait_timeout(state, due - now)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            state = guard;
            state.leader = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shared(pipelines: usize, body_ms: u64, interval_ms: u64, p50_us: f64) -> [ArmResult; 2] {
        let cell = Cell {
            pipelines,
            interval: Duration::from_millis(interval_ms),
            body: Duration::from_millis(body_ms),
            measure: Duration::from_secs(1),
            beside: Beside::Nothing,
        };
        let arm = |arm| ArmResult {
            arm,
            cell,
            fired: 0,
            coalesced: 0,
            panicked: 0,
            p50_us,
            p99_us: 0.0,
            max_us: 0.0,
            threads: 0,
            arm_threads: 0,
            cpu_share: 0.0,
            spin_share: 0.0,
            job_p99_us: None,
        };
        [arm(Arm::PerPipeline), arm(Arm::Shared)]
    }

    #[test]
    fn flatness_spans_each_bodys_lowest_and_highest_p50_and_skips_overload() {
        let results = [
            shared(1, 0, 100, 0.40),
            shared(1000, 0, 1000, 0.10),
            shared(10, 0, 100, 0.20),
            shared(1, 5, 100, 0.30),
            shared(100, 1500, 1000, 9.0), // overload: not part of the sweep
        ];
        assert_eq!(
            flatness(&results),
            "shared p50 across P (lowest–highest, ratio): \
             body 0ns: 0.10 µs (P = 1000) – 0.40 µs (P = 1), 4.00×; \
             body 5ms: 0.30 µs (P = 1) – 0.30 µs (P = 1), 1.00×"
        );
    }
}
