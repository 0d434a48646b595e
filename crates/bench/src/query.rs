//! `weir bench query`: queryable state while a Nexmark query runs on RocksDB: lookup latency
//! and CPU on the direct path beside the ordered path, and the job's throughput with and
//! without a steady lookup load.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use weir_runtime::spec::load::Override;

use crate::measure::{Sample, cpu_time, group, median};

pub(crate) struct QueryBench {
    pub(crate) job: PathBuf,
    pub(crate) operator: String,
    pub(crate) state: String,
    pub(crate) events: u64,
    pub(crate) rate: u64,
    pub(crate) max_staleness: String,
    pub(crate) runs: usize,
    pub(crate) data: PathBuf,
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
                    .filter_map(|e| e.key.values().next().map(key_text))
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

pub(crate) fn run(b: &QueryBench) -> anyhow::Result<()> {
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
