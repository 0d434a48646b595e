//! `weir bench nexmark`: Nexmark queries with a blackhole sink, chained beside unchained (or
//! aggregating in two phases beside one, sliced windows beside whole ones, sources decoding only
//! the columns read beside all of them, SQL beside YAML), from the generator and from a
//! JSON-lines file.

use std::path::PathBuf;

use weir_runtime::spec::load::Override;

use crate::measure::{Sample, ensure_jsonl, group, median, run_once};

pub(crate) struct NexmarkBench {
    pub(crate) queries: Vec<String>,
    pub(crate) sources: Vec<String>,
    pub(crate) events: u64,
    pub(crate) jsonl_events: u64,
    pub(crate) parallelism: Vec<u32>,
    pub(crate) runs: usize,
    pub(crate) jobs: PathBuf,
    pub(crate) data: PathBuf,
    pub(crate) compare: Compare,
}

/// The job setting whose two values the arms differ in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Compare {
    /// `chaining` on beside off.
    Chaining,
    /// `two-phase-aggregation` on beside off.
    TwoPhase,
    /// `window-slicing` on beside off.
    Slicing,
    /// `projection-pushdown` on beside off (JSON-lines source: only the columns some node
    /// reads are decoded, beside all of them).
    Projection,
    /// The query written in SQL (`jobs/nexmark/sql/`) beside its hand-written YAML twin
    /// (generator source only).
    Sql,
}

impl Compare {
    fn setting(self) -> &'static str {
        match self {
            Compare::Chaining => "chaining",
            Compare::TwoPhase => "two-phase-aggregation",
            Compare::Slicing => "window-slicing",
            Compare::Projection => "projection-pushdown",
            Compare::Sql => "",
        }
    }

    /// How the arms are named in the table: (on, off).
    fn names(self) -> (&'static str, &'static str) {
        match self {
            Compare::Chaining => ("chained", "unchained"),
            Compare::TwoPhase => ("two-phase", "one-phase"),
            Compare::Slicing => ("sliced", "whole"),
            Compare::Projection => ("projected", "all-columns"),
            Compare::Sql => ("sql", "yaml"),
        }
    }
}

pub(crate) fn run(b: &NexmarkBench) -> anyhow::Result<()> {
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
    let (on, off) = b.compare.names();
    println!(
        "| query | source | p | {on} events/s | {off} events/s | {on}/{off} | {on} events/s/core | {off} events/s/core |"
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
                    if b.compare == Compare::Sql {
                        continue;
                    }
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
                    for (arm, value) in [(0, true), (1, false)] {
                        let mut o = base.clone();
                        o.push(
                            format!("parallelism={p}")
                                .parse()
                                .map_err(anyhow::Error::msg)?,
                        );
                        let job = if b.compare == Compare::Sql {
                            if value {
                                b.jobs.join("sql").join(format!("{q}.yaml"))
                            } else {
                                job.clone()
                            }
                        } else {
                            o.push(
                                format!("{}={value}", b.compare.setting())
                                    .parse()
                                    .map_err(anyhow::Error::msg)?,
                            );
                            job.clone()
                        };
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
