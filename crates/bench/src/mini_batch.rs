//! `weir bench mini-batch`: a running aggregate with hot keys (Nexmark's bids per auction, and
//! auctions per number of bids downstream) with a mini-batch beside without, in the same
//! process: events/s, and the rows each aggregate emits.

use std::path::Path;

use weir_runtime::spec::load::Override;

use crate::measure::{Sample, group, median, run_with};

/// The aggregate of the job whose output rows are counted, and the last one.
const HOT: &str = "per-auction";
const LAST: &str = "auctions-per-count";

pub(crate) struct MiniBatchBench<'a> {
    pub(crate) job: &'a Path,
    pub(crate) events: u64,
    pub(crate) interval: &'a str,
    pub(crate) size: u32,
    pub(crate) parallelism: &'a [u32],
    pub(crate) backends: &'a [String],
    pub(crate) runs: usize,
    pub(crate) data: &'a Path,
}

/// One run: its sample, and the rows out of the hot aggregate and of the last one.
struct Run {
    sample: Sample,
    hot_rows: u64,
    last_rows: u64,
}

pub(crate) fn run(b: &MiniBatchBench<'_>) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    println!(
        "{} from the generator ({} events), blackhole sink; `mini-batch: {{interval: {}, size: \
         {}}}` beside none; median of {} runs per arm, arms interleaved; rows = rows emitted \
         by `{HOT}` (hot keys) and by `{LAST}` (over its updates).",
        b.job.display(),
        group(b.events),
        b.interval,
        b.size,
        b.runs
    );
    println!();
    println!(
        "| backend | p | mini-batch events/s | none events/s | mini-batch/none | mini-batch `{HOT}` rows | none `{HOT}` rows | none/mini-batch rows | mini-batch `{LAST}` rows | none `{LAST}` rows |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for backend in b.backends {
        for &p in b.parallelism {
            let mut arms: [Vec<Run>; 2] = [Vec::new(), Vec::new()];
            for _ in 0..b.runs {
                for (arm, batched) in [(0, true), (1, false)] {
                    let mut sets = vec![
                        format!("sources.nexmark.events={}", b.events),
                        format!("parallelism={p}"),
                        "sinks.out={kind: blackhole, from: auctions-per-count}".to_string(),
                        format!("state.backend={backend}"),
                        format!("state.path={}/state", b.data.display()),
                    ];
                    if batched {
                        sets.push(format!(
                            "mini-batch={{interval: {}, size: {}}}",
                            b.interval, b.size
                        ));
                    } else {
                        sets.push("mini-batch=null".to_string());
                    }
                    let overrides: Vec<Override> = sets
                        .iter()
                        .map(|o| o.parse().map_err(anyhow::Error::msg))
                        .collect::<Result<_, _>>()?;
                    let (sample, summary) =
                        run_with(&runtime, b.job, &overrides, Default::default())?;
                    let rows = |node: &str| {
                        summary
                            .nodes
                            .iter()
                            .find(|n| n.name == node)
                            .map_or(0, |n| n.records_out)
                    };
                    arms[arm].push(Run {
                        sample,
                        hot_rows: rows(HOT),
                        last_rows: rows(LAST),
                    });
                }
            }
            let rate = |a: &[Run]| median(a.iter().map(|r| r.sample.rate()).collect());
            let rows =
                |a: &[Run], f: fn(&Run) -> u64| median(a.iter().map(|r| f(r) as f64).collect());
            let (m, n) = (rate(&arms[0]), rate(&arms[1]));
            let (mh, nh) = (
                rows(&arms[0], |r| r.hot_rows),
                rows(&arms[1], |r| r.hot_rows),
            );
            let (ml, nl) = (
                rows(&arms[0], |r| r.last_rows),
                rows(&arms[1], |r| r.last_rows),
            );
            println!(
                "| {backend} | {p} | {} | {} | {:.2}× | {} | {} | {:.1}× | {} | {} |",
                group(m as u64),
                group(n as u64),
                m / n,
                group(mh as u64),
                group(nh as u64),
                nh / mh.max(1.0),
                group(ml as u64),
                group(nl as u64),
            );
        }
    }
    Ok(())
}
