//! `weir bench`: benchmarks that run their baseline arm in the same process and print ratios.
//!
//! The machine is shared and noisy, so every figure is a median over several runs, arms are
//! interleaved run by run, and each table reports the ratio between arms next to the absolute
//! numbers. CPU time is the process's user + system time over the run (getrusage), so
//! "events/s per core" is events divided by CPU seconds actually used.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use nix::sys::resource::{UsageWho, getrusage};
use weir_runtime::spec::load::Override;

use crate::run::group;

#[derive(Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    which: Bench,
}

#[derive(Subcommand)]
enum Bench {
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

pub fn main(args: BenchArgs) -> ExitCode {
    let result = match args.which {
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
struct Sample {
    events: u64,
    wall: Duration,
    cpu: Duration,
}

impl Sample {
    fn rate(&self) -> f64 {
        self.events as f64 / self.wall.as_secs_f64().max(1e-9)
    }
    fn per_core(&self) -> f64 {
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
    let plan = weir_runtime::plan::check_file(job, overrides)?;
    let cpu0 = cpu_time()?;
    let t0 = Instant::now();
    let summary =
        runtime.block_on(async { weir_runtime::exec::job::start(&plan)?.wait().await })?;
    Ok(Sample {
        events: summary.events,
        wall: t0.elapsed(),
        cpu: cpu_time()? - cpu0,
    })
}

fn median(mut xs: Vec<f64>) -> f64 {
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
fn ensure_jsonl(dir: &Path, events: u64) -> anyhow::Result<PathBuf> {
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
