//! What one hosted job may ask of the server: its resource limits.
//!
//! `weir run` trusts its user; a server shares its cores and memory between jobs and clients
//! it does not trust. A job file that validates can still ask for a thousand subtasks, a
//! checkpoint every 10 ms or an unthrottled generator that never ends; on a server that would
//! starve every other job. [`JobLimits::check`] refuses such a job at submit, each problem at
//! the key that asks too much and naming the limit (a `weir serve` flag); the subtasks of all
//! running jobs together are bounded when a job starts ([`JobLimits::admit`]). A job file
//! itself, the body of a submit, is bounded by [`MAX_BODY`].

use std::time::Duration;

use weir_runtime::api::connector::HostLimits;
use weir_runtime::spec::problems::{SpecSource, pointer};
use weir_runtime::spec::{HumanDuration, JobSpec, Problem};

use crate::error::ApiError;

/// Largest request body accepted (a job file): larger ones get 413.
pub const MAX_BODY: usize = 1 << 20;

/// The limits of a server, with defaults for a small shared machine.
#[derive(Clone, Debug, PartialEq)]
pub struct JobLimits {
    /// Subtasks of one job (every operator's parallelism added up): `--max-job-subtasks`.
    pub max_job_subtasks: usize,
    /// Subtasks of every running job together: `--max-subtasks`.
    pub max_subtasks: usize,
    /// The shortest checkpoint interval: `--min-checkpoint-interval`.
    pub min_checkpoint_interval: Duration,
    /// The largest `batch-size` (records per batch): `--max-batch-size`.
    pub max_batch_size: u32,
    /// The largest `channel-capacity` (batches per channel): `--max-channel-capacity`.
    pub max_channel_capacity: u32,
    /// The most chunks a JSON-lines source may cut its files into: `--max-chunks`.
    pub max_chunks: u64,
    /// The fastest generator (events/s); an unbounded generator must set a `rate`:
    /// `--max-generator-rate`.
    pub max_generator_rate: u64,
}

impl Default for JobLimits {
    fn default() -> Self {
        JobLimits {
            max_job_subtasks: 64,
            max_subtasks: 512,
            min_checkpoint_interval: Duration::from_millis(100),
            max_batch_size: 65_536,
            max_channel_capacity: 256,
            max_chunks: 100_000,
            max_generator_rate: 10_000_000,
        }
    }
}

/// The subtasks a job runs: each source, operator and sink at its parallelism (`key-by` and
/// `union` are not tasks of their own).
pub fn subtasks(spec: &JobSpec) -> usize {
    let job = spec.parallelism as usize;
    let sources = spec.sources.values().map(|s| s.parallelism());
    let transforms = spec
        .transforms
        .values()
        .filter(|t| !matches!(t.kind(), "key-by" | "union"))
        .map(|t| t.parallelism());
    let sinks = spec.sinks.values().map(|s| s.parallelism());
    sources
        .chain(transforms)
        .chain(sinks)
        .map(|p| p.map_or(job, |p| p as usize))
        .sum()
}

impl JobLimits {
    /// Every problem of `spec` with these limits, located through `source`.
    pub fn check(&self, source: &SpecSource, spec: &JobSpec) -> Vec<Problem> {
        let mut problems = Vec::new();
        let subtasks = subtasks(spec);
        if subtasks > self.max_job_subtasks {
            problems.push(source.at_value(
                "/parallelism",
                format!(
                    "the job runs {subtasks} subtasks; this server runs at most {} per job \
                     (--max-job-subtasks)",
                    self.max_job_subtasks
                ),
            ));
        }
        if let Some(interval) = spec.checkpoint.interval
            && interval.0 < self.min_checkpoint_interval
        {
            problems.push(source.at_value(
                "/checkpoint/interval",
                format!(
                    "this server checkpoints a job at most every {} \
                         (--min-checkpoint-interval), not every {interval}",
                    HumanDuration(self.min_checkpoint_interval)
                ),
            ));
        }
        if spec.batch_size > self.max_batch_size {
            problems.push(source.at_value(
                "/batch-size",
                format!(
                    "this server allows batches of at most {} records (--max-batch-size)",
                    self.max_batch_size
                ),
            ));
        }
        if spec.channel_capacity > self.max_channel_capacity {
            problems.push(source.at_value(
                "/channel-capacity",
                format!(
                    "this server allows channels of at most {} batches (--max-channel-capacity)",
                    self.max_channel_capacity
                ),
            ));
        }
        // What a connector generates or splits is its own to bound, against these limits.
        let limits = HostLimits {
            max_generator_rate: self.max_generator_rate,
            max_chunks: self.max_chunks,
        };
        let sources = spec
            .sources
            .iter()
            .map(|(name, s)| (pointer(&["sources", name]), s.hosted()));
        let sinks = spec
            .sinks
            .iter()
            .map(|(name, s)| (pointer(&["sinks", name]), s.hosted()));
        for (at, hosted) in sources.chain(sinks) {
            for p in hosted.within(&limits) {
                problems.push(source.at_value(&format!("{at}{}", p.at), p.message));
            }
        }
        problems
    }

    /// Whether a job of `subtasks` may start beside running jobs that have `running` subtasks.
    pub fn admit(&self, subtasks: usize, running: usize) -> Result<(), ApiError> {
        if running.saturating_add(subtasks) > self.max_subtasks {
            return Err(ApiError::TooMany(format!(
                "the job runs {subtasks} subtasks and {running} are running; this server runs at \
                 most {} (--max-subtasks)",
                self.max_subtasks
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_runtime::spec::load::parse_str;

    fn problems(text: &str, limits: &JobLimits) -> Vec<Problem> {
        let loaded = parse_str("job.yaml", text, &[]).expect("the test job parses");
        assert!(loaded.problems.is_empty(), "{:#?}", loaded.problems);
        limits.check(&loaded.source, &loaded.spec)
    }

    const JOB: &str = "\
name: limited
parallelism: 4
sources:
  gen: {kind: nexmark, events: 1000}
transforms:
  f: {kind: filter, from: gen.bid, where: price > 10}
  by: {kind: key-by, from: f, keys: [auction]}
  agg: {kind: aggregate, from: by, aggregates: {n: count(*)}, parallelism: 2}
sinks:
  out: {kind: blackhole, from: agg}
";

    #[test]
    fn subtasks_add_up_every_task_but_key_by_and_union() {
        let loaded = parse_str("job.yaml", JOB, &[]).expect("parses");
        // gen 4 + f 4 + agg 2 + out 4.
        assert_eq!(subtasks(&loaded.spec), 14);
    }

    #[test]
    fn a_job_within_the_limits_passes() {
        assert!(problems(JOB, &JobLimits::default()).is_empty());
    }

    #[test]
    fn too_many_subtasks_are_refused_at_the_parallelism() {
        let limits = JobLimits {
            max_job_subtasks: 10,
            ..JobLimits::default()
        };
        let p = problems(JOB, &limits);
        assert_eq!(p.len(), 1, "{p:#?}");
        assert_eq!((p[0].path.as_str(), p[0].line), ("parallelism", Some(2)));
        assert!(p[0].message.contains("14 subtasks"), "{}", p[0].message);
        assert!(
            p[0].message.contains("--max-job-subtasks"),
            "{}",
            p[0].message
        );
    }

    #[test]
    fn a_fast_checkpoint_a_huge_batch_and_an_unthrottled_endless_generator_are_refused() {
        let text = "\
name: greedy
batch-size: 1000000
checkpoint: {interval: 10ms}
sources:
  gen: {kind: nexmark}
  fast: {kind: nexmark, rate: 100000000}
sinks:
  out: {kind: blackhole, from: gen.bid}
  out2: {kind: blackhole, from: fast.bid}
";
        let mut p = problems(text, &JobLimits::default());
        p.sort_by_key(|p| p.line);
        let paths: Vec<&str> = p.iter().map(|p| p.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "batch-size",
                "checkpoint.interval",
                "sources.gen",
                "sources.fast.rate"
            ],
            "{p:#?}"
        );
    }

    #[test]
    fn wide_channels_and_a_file_cut_into_too_many_chunks_are_refused() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let file = dir.path().join("in.jsonl");
        // 64 KiB: 256 chunks of the smallest chunk size.
        std::fs::write(&file, vec![b'\n'; 64 << 10]).expect("the input file");
        let text = format!(
            "name: wide\nchannel-capacity: 1000\nsources:\n  \
             in: {{kind: jsonl, path: {}, schema: {{a: int}}, chunk-size: 256B}}\n\
             sinks:\n  out: {{kind: blackhole, from: in}}\n",
            file.display()
        );
        let limits = JobLimits {
            max_chunks: 255,
            ..JobLimits::default()
        };
        let mut p = problems(&text, &limits);
        p.sort_by_key(|p| p.line);
        let found: Vec<(&str, Option<usize>)> =
            p.iter().map(|p| (p.path.as_str(), p.line)).collect();
        assert_eq!(
            found,
            [
                ("channel-capacity", Some(2)),
                ("sources.in.chunk-size", Some(4))
            ],
            "{p:#?}"
        );
        assert!(
            p[0].message.contains("--max-channel-capacity"),
            "{}",
            p[0].message
        );
        assert!(
            p[1].message.contains("256 chunks") && p[1].message.contains("--max-chunks"),
            "{}",
            p[1].message
        );
        let roomy = JobLimits {
            max_chunks: 256,
            max_channel_capacity: 1000,
            ..JobLimits::default()
        };
        assert!(problems(&text, &roomy).is_empty());
    }

    #[test]
    fn the_server_wide_subtask_bound_counts_running_jobs() {
        let limits = JobLimits {
            max_subtasks: 20,
            ..JobLimits::default()
        };
        assert!(limits.admit(14, 6).is_ok());
        let refused = limits.admit(14, 7).unwrap_err();
        assert!(refused.to_string().contains("--max-subtasks"), "{refused}");
    }
}
