//! `weir bench checkpoint`: a job checkpointing every second beside the same job without
//! checkpoints, with the checkpoints' durations and sizes.

use std::path::Path;
use std::time::Duration;

use weir_runtime::spec::load::Override;

use crate::measure::{Sample, group, median, run_with};

pub(crate) fn run(
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

/// 1536 → "1.5 KiB".
fn bytes(n: u64) -> String {
    weir_runtime::config::units::ByteSize(n).to_string()
}
