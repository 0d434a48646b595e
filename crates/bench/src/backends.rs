//! `weir bench backends`: Nexmark queries on RocksDB beside the heap backend.

use std::path::Path;

use weir_runtime::spec::load::Override;

use crate::measure::{Sample, group, median, run_once};

pub(crate) fn run(
    queries: &[String],
    events: u64,
    parallelism: &[u32],
    runs: usize,
    jobs: &Path,
    data: &Path,
) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    println!(
        "Nexmark from the generator ({events} events), blackhole sink, RocksDB state beside heap \
         state; median of {runs} runs per arm, arms interleaved."
    );
    println!();
    println!(
        "| query | p | heap events/s | rocksdb events/s | rocksdb / heap | heap events/s/core | rocksdb events/s/core |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|");
    for q in queries {
        let job = jobs.join(format!("{q}.yaml"));
        for &p in parallelism {
            let mut arms: [Vec<Sample>; 2] = [Vec::new(), Vec::new()];
            for _ in 0..runs {
                for (arm, backend) in [(0, "heap"), (1, "rocksdb")] {
                    let overrides: Vec<Override> = [
                        format!("sources.nexmark.events={events}"),
                        format!("parallelism={p}"),
                        "sinks.out.kind=blackhole".to_string(),
                        format!("state.backend={backend}"),
                        format!("state.path={}/state", data.display()),
                    ]
                    .iter()
                    .map(|o| o.parse().map_err(anyhow::Error::msg))
                    .collect::<Result<_, _>>()?;
                    arms[arm].push(run_once(&runtime, &job, &overrides)?);
                }
            }
            let rate = |a: &Vec<Sample>| median(a.iter().map(Sample::rate).collect());
            let core = |a: &Vec<Sample>| median(a.iter().map(Sample::per_core).collect());
            let (h, r) = (rate(&arms[0]), rate(&arms[1]));
            println!(
                "| {q} | {p} | {} | {} | {:.2}× | {} | {} |",
                group(h as u64),
                group(r as u64),
                r / h,
                group(core(&arms[0]) as u64),
                group(core(&arms[1]) as u64),
            );
        }
    }
    Ok(())
}
