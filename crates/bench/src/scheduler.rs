//! `weir bench scheduler`: the shared checkpoint-trigger scheduler beside per-pipeline thread
//! pools.

use std::time::Duration;

pub(crate) fn run(
    measure: Duration,
    runs: usize,
    pipelines: &[usize],
    max_spin: Option<Duration>,
    prewake: Option<Duration>,
) -> anyhow::Result<()> {
    use weir_scheduler::bench;
    let mut config = weir_scheduler::SchedulerConfig::default();
    if let Some(max_spin) = max_spin {
        config.max_spin = max_spin;
    }
    if let Some(prewake) = prewake {
        config.prewake = prewake;
    }
    let mut cells = bench::default_cells(measure);
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
    let results = bench::sweep(&config, &cells, runs, |done| {
        eprintln!(
            "{}",
            bench::table(std::slice::from_ref(done))
                .lines()
                .last()
                .unwrap_or("")
        );
    })?;
    println!("{}", bench::table(&results));
    println!("{}", bench::flatness(&results));
    Ok(())
}
