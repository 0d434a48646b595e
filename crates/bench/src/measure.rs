//! What every benchmark of a job shares: a measured run, medians, the generated JSON-lines
//! input, and the tables' number format.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::resource::{UsageWho, getrusage};
use weir_runtime::spec::load::Override;

/// One measured run.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Sample {
    pub(crate) events: u64,
    pub(crate) wall: Duration,
    pub(crate) cpu: Duration,
}

impl Sample {
    pub(crate) fn rate(&self) -> f64 {
        self.events as f64 / self.wall.as_secs_f64().max(1e-9)
    }
    pub(crate) fn per_core(&self) -> f64 {
        self.events as f64 / self.cpu.as_secs_f64().max(1e-9)
    }
}

pub(crate) fn cpu_time() -> anyhow::Result<Duration> {
    let usage = getrusage(UsageWho::RUSAGE_SELF)?;
    let tv = |t: nix::sys::time::TimeVal| {
        Duration::from_secs(t.tv_sec() as u64) + Duration::from_micros(t.tv_usec() as u64)
    };
    Ok(tv(usage.user_time()) + tv(usage.system_time()))
}

pub(crate) fn run_once(
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

/// 1234567 → "1,234,567": the tables' number format (as `weir run`'s summary prints counts).
pub(crate) use weir_runtime::config::units::group;
