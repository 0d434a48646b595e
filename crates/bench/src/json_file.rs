//! `weir bench json`, second part: the JSON-lines file job at parallelism 1 decoding ahead on
//! threads of its own (`decode-threads`, default: the machine's cores) beside decoding inline
//! (`decode-threads: 0`, one core), and what a bounded file job costs besides its work.
//!
//! - **Decode-ahead beside inline**: Nexmark queries over the same 1 M-event file, blackhole
//!   sink, the two arms interleaved run by run; wall time, events/s, and the cores used (CPU
//!   seconds over wall seconds: 2.0 is both cores of two busy).
//! - **Fixed cost**: the parts of one run of the q0 file job that are not decoding and
//!   processing events: planning (reading and checking the job file), start (restore check,
//!   listing the input, spawning the tasks), the first batch (from the start until the source
//!   has emitted rows) and the end (from the source's end until the summary is ready); and a
//!   whole `weir run` process over a 1,000-event file (process start to exit, summary printed),
//!   which is all fixed cost.
//!
//! The first batch and the source's end are seen by a thread polling the job's metrics every
//! 50 µs, so they are late by at most that.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use weir_runtime::api::JobMetrics;
use weir_runtime::spec::load::Override;

use crate::measure::{Sample, ensure_jsonl, group, median, run_once};

pub(crate) struct FileBench<'a> {
    pub(crate) queries: &'a [String],
    pub(crate) events: u64,
    pub(crate) runs: usize,
    pub(crate) jobs: &'a Path,
    pub(crate) data: &'a Path,
}

fn overrides(texts: &[String]) -> anyhow::Result<Vec<Override>> {
    texts
        .iter()
        .map(|t| t.parse().map_err(anyhow::Error::msg))
        .collect()
}

pub(crate) fn run(b: &FileBench<'_>) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let file = ensure_jsonl(b.data, b.events)?;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let base = |threads: Option<usize>| {
        let mut o = vec![
            format!("sources.nexmark.path={}", file.display()),
            "parallelism=1".to_owned(),
            "sinks.out.kind=blackhole".to_owned(),
        ];
        if let Some(t) = threads {
            o.push(format!("sources.nexmark.decode-threads={t}"));
        }
        overrides(&o)
    };
    let (inline, ahead) = (base(Some(0))?, base(None)?);
    println!(
        "\nThe {}-event file job at parallelism 1: decode-ahead (`decode-threads` default, {cores} \
         threads on {cores} cores) beside inline (`decode-threads: 0`), blackhole sink, median of {} \
         interleaved runs:",
        group(b.events),
        b.runs
    );
    println!(
        "| query | inline s | decode-ahead s | inline ÷ ahead | inline events/s | decode-ahead events/s | inline cores used | decode-ahead cores used |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for q in b.queries {
        let job = b.jobs.join(format!("{q}-jsonl.yaml"));
        let mut arms: [Vec<Sample>; 2] = [Vec::new(), Vec::new()];
        for _ in 0..b.runs {
            arms[0].push(run_once(&runtime, &job, &inline)?);
            arms[1].push(run_once(&runtime, &job, &ahead)?);
            anyhow::ensure!(
                arms[0].last().map(|s| s.events) == arms[1].last().map(|s| s.events),
                "{q}: the arms read different numbers of events"
            );
        }
        let secs = |a: &[Sample]| median(a.iter().map(|s| s.wall.as_secs_f64()).collect());
        let rate = |a: &[Sample]| median(a.iter().map(Sample::rate).collect());
        let used = |a: &[Sample]| {
            median(
                a.iter()
                    .map(|s| s.cpu.as_secs_f64() / s.wall.as_secs_f64().max(1e-9))
                    .collect(),
            )
        };
        let (i, a) = (&arms[0], &arms[1]);
        println!(
            "| {q} | {:.3} | {:.3} | {:.2}× | {} | {} | {:.2} | {:.2} |",
            secs(i),
            secs(a),
            secs(i) / secs(a),
            group(rate(i) as u64),
            group(rate(a) as u64),
            used(i),
            used(a),
        );
    }
    fixed_cost(b, &runtime, &file)
}

/// One run's fixed costs.
#[derive(Clone, Copy, Debug)]
struct Fixed {
    plan: Duration,
    start: Duration,
    /// From the start until the source emitted rows.
    first_batch: Duration,
    /// From the source's end until the summary.
    end: Duration,
    total: Duration,
}

fn fixed_cost(
    b: &FileBench<'_>,
    runtime: &tokio::runtime::Runtime,
    file: &Path,
) -> anyhow::Result<()> {
    let job = b.jobs.join("q0-jsonl.yaml");
    let arm = |threads: Option<usize>| {
        let mut o = vec![
            format!("sources.nexmark.path={}", file.display()),
            "parallelism=1".to_owned(),
            "sinks.out.kind=blackhole".to_owned(),
        ];
        o.extend(threads.map(|t| format!("sources.nexmark.decode-threads={t}")));
        overrides(&o)
    };
    let arms = [("inline", arm(Some(0))?), ("decode-ahead", arm(None)?)];
    let mut runs: [Vec<Fixed>; 2] = [Vec::new(), Vec::new()];
    for _ in 0..b.runs {
        for (i, (_, o)) in arms.iter().enumerate() {
            runs[i].push(fixed_once(runtime, &job, o)?);
        }
    }
    let tiny = ensure_jsonl(b.data, 1000)?;
    let mut process = Vec::new();
    for _ in 0..b.runs {
        process.push(weir_run(&job, &tiny)?.as_secs_f64());
    }
    println!(
        "\nFixed cost of a bounded file job (q0 over the {}-event file, parallelism 1; median of {} \
         interleaved runs; first batch and end seen by a 50 µs poll):",
        group(b.events),
        b.runs
    );
    println!(
        "| decoding | planning ms | start ms | first batch ms (from start) | end → summary ms | job total ms | fixed share of the job |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for ((name, _), runs) in arms.iter().zip(&runs) {
        let ms = |f: fn(&Fixed) -> Duration| {
            median(runs.iter().map(|r| f(r).as_secs_f64() * 1e3).collect())
        };
        let fixed = ms(|r| r.plan) + ms(|r| r.first_batch) + ms(|r| r.end);
        println!(
            "| {name} | {:.2} | {:.2} | {:.2} | {:.2} | {:.0} | {:.1}% |",
            ms(|r| r.plan),
            ms(|r| r.start),
            ms(|r| r.first_batch),
            ms(|r| r.end),
            ms(|r| r.total),
            100.0 * fixed / ms(|r| r.total),
        );
    }
    println!(
        "\nA whole `weir run` process of the q0 file job over a 1,000-event file (process start to \
         exit, summary printed), median of {}: {:.1} ms",
        b.runs,
        median(process) * 1e3
    );
    Ok(())
}

/// One run of `job`, timed in its parts.
fn fixed_once(
    runtime: &tokio::runtime::Runtime,
    job: &Path,
    overrides: &[Override],
) -> anyhow::Result<Fixed> {
    let t0 = Instant::now();
    let plan = weir_runtime::plan::check_file(job, overrides)?;
    let planned = t0.elapsed();
    runtime.block_on(async {
        let started = Instant::now();
        let running = weir_runtime::exec::job::start(&plan, Default::default()).await?;
        let start = started.elapsed();
        let stop = Arc::new(AtomicBool::new(false));
        let watcher = {
            let (metrics, stop) = (running.metrics(), stop.clone());
            std::thread::spawn(move || watch(&metrics, started, &stop))
        };
        let summary = running.wait().await;
        let ended = started.elapsed();
        stop.store(true, Ordering::Relaxed);
        let (first, source_end) = watcher
            .join()
            .map_err(|_| anyhow::anyhow!("the metrics watcher panicked"))?;
        summary?;
        Ok(Fixed {
            plan: planned,
            start,
            first_batch: first.unwrap_or(ended),
            end: ended.saturating_sub(source_end.unwrap_or(ended)),
            total: planned + ended,
        })
    })
}

/// When the job's sources first emitted rows and when they all ended, after `started`, as seen
/// every 50 µs until `stop`.
fn watch(
    metrics: &JobMetrics,
    started: Instant,
    stop: &AtomicBool,
) -> (Option<Duration>, Option<Duration>) {
    let (mut first, mut end) = (None, None);
    while !stop.load(Ordering::Relaxed) && end.is_none() {
        if first.is_none() && metrics.sources().any(|n| n.sum(|s| &s.records_out) > 0) {
            first = Some(started.elapsed());
        }
        let finished = metrics.sources().all(|n| {
            n.subtasks
                .iter()
                .all(|s| s.finished.load(Ordering::Relaxed))
        });
        if finished {
            end = Some(started.elapsed());
        }
        std::thread::sleep(Duration::from_micros(50));
    }
    (first, end)
}

/// The wall time of this binary's `weir run job` over `input`, process start to exit.
fn weir_run(job: &Path, input: &Path) -> anyhow::Result<Duration> {
    let exe: PathBuf = std::env::current_exe()?;
    let t0 = Instant::now();
    let status = std::process::Command::new(exe)
        .arg("run")
        .arg(job)
        .arg("--set")
        .arg(format!("sources.nexmark.path={}", input.display()))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()?;
    let took = t0.elapsed();
    anyhow::ensure!(status.success(), "`weir run {}` failed", job.display());
    Ok(took)
}
