//! What `weir validate` refuses beyond the schema: values that are well-typed but would make a
//! run fail at start or misbehave (a checkpoint every nanosecond, a TTL of zero), each reported
//! at its key with its line and column. A connector checks its own keys when it plans
//! (`crate::api::connector`).
//!
//! The rule: a job that validates starts. Anything `weir run` would refuse at start, and
//! anything that would make a run spin or exhaust memory, is refused here instead.

use super::problems::{Problem, SpecSource, pointer};
use super::{HumanDuration, JobSpec, RestartStrategy};

/// The shortest checkpoint interval and timeout (Flink's minimum, too): below it a job does
/// nothing but checkpoint, and a zero interval or timeout cannot be scheduled at all.
pub const MIN_CHECKPOINT_TIME: HumanDuration = HumanDuration(std::time::Duration::from_millis(10));

/// The most nodes (sources, transforms and sinks together) one job may have.
pub const MAX_NODES: usize = 1000;

/// Adds a problem for every setting of `spec` that would fail or misbehave at run time.
pub fn check_settings(spec: &JobSpec, src: &SpecSource, problems: &mut Vec<Problem>) {
    let nodes = spec.sources.len() + spec.transforms.len() + spec.sinks.len();
    if nodes > MAX_NODES {
        problems.push(src.at_value(
            "",
            format!("the job has {nodes} nodes; at most {MAX_NODES} are allowed"),
        ));
    }
    let at_least = |problems: &mut Vec<Problem>, at: &str, value: HumanDuration, min, what| {
        if value < min {
            problems.push(src.at_value(at, format!("{what} must be at least {min}, not {value}")));
        }
    };
    let cp = &spec.checkpoint;
    if let Some(interval) = cp.interval {
        at_least(
            problems,
            "/checkpoint/interval",
            interval,
            MIN_CHECKPOINT_TIME,
            "a checkpoint interval",
        );
        at_least(
            problems,
            "/checkpoint/timeout",
            cp.timeout,
            MIN_CHECKPOINT_TIME,
            "a checkpoint timeout",
        );
    }
    check_restart(spec, src, problems);
    let one_ms = HumanDuration::from_millis(1);
    if let Some(ttl) = spec.state.ttl {
        at_least(problems, "/state/ttl", ttl, one_ms, "a state TTL");
    }
    if let Some(mb) = spec.mini_batch {
        at_least(
            problems,
            "/mini-batch/interval",
            mb.interval,
            one_ms,
            "a mini-batch interval",
        );
    }
    for (name, t) in &spec.transforms {
        if let Some(ttl) = t.node().state_ttl() {
            let at = pointer(&["transforms", name, "state-ttl"]);
            at_least(problems, &at, ttl, one_ms, "a state TTL");
        }
        if let Some(mb) = t.node().mini_batch() {
            let at = pointer(&["transforms", name, "mini-batch", "interval"]);
            at_least(problems, &at, mb.interval, one_ms, "a mini-batch interval");
        }
    }
}

/// The restart strategy's keys: each applies to some strategies only, and a key written for
/// another strategy would silently do nothing.
fn check_restart(spec: &JobSpec, src: &SpecSource, problems: &mut Vec<Problem>) {
    let r = &spec.restart;
    let only = |key: &str, strategies: &[RestartStrategy], names: &str| {
        let at = pointer(&["restart", key]);
        (src.written(&at) && !strategies.contains(&r.strategy)).then(|| {
            src.at_key(
                &at,
                format!(
                    "`{key}` applies to `strategy: {names}` only; this job's strategy is `{}`",
                    strategy_name(r.strategy)
                ),
            )
        })
    };
    use RestartStrategy::{ExponentialDelay, FailureRate, FixedDelay};
    let exponential = [ExponentialDelay];
    problems.extend(
        [
            only(
                "max-attempts",
                &[FixedDelay, ExponentialDelay],
                "fixed-delay or exponential-delay",
            ),
            only("max-delay", &exponential, "exponential-delay"),
            only("multiplier", &exponential, "exponential-delay"),
            only("jitter", &exponential, "exponential-delay"),
            only("reset-after", &exponential, "exponential-delay"),
            only("max-failures", &[FailureRate], "failure-rate"),
            only("interval", &[FailureRate], "failure-rate"),
        ]
        .into_iter()
        .flatten(),
    );
    let least = HumanDuration::from_millis(10);
    if let Some(reset) = r.reset_after.filter(|d| *d < least) {
        problems.push(src.at_value(
            "/restart/reset-after",
            format!("`reset-after` must be at least {least}, not {reset}"),
        ));
    }
    if r.interval < least {
        problems.push(src.at_value(
            "/restart/interval",
            format!("`interval` must be at least {least}, not {}", r.interval),
        ));
    }
}

fn strategy_name(s: RestartStrategy) -> &'static str {
    match s {
        RestartStrategy::FixedDelay => "fixed-delay",
        RestartStrategy::ExponentialDelay => "exponential-delay",
        RestartStrategy::FailureRate => "failure-rate",
    }
}

#[cfg(test)]
mod tests {
    use crate::spec::load::parse_str;

    /// The problems of `GOOD` with `extra` lines appended (or replacing keys via `--set`).
    fn problems_with(sets: &[&str]) -> Vec<crate::spec::Problem> {
        let text = "\
name: demo
sources:
  gen: {kind: nexmark, events: 1000}
  file: {kind: jsonl, path: data.jsonl, schema: {a: int}}
transforms:
  by: {kind: key-by, from: gen.bid, keys: [auction]}
  agg: {kind: aggregate, from: by, aggregates: {n: count(*)}}
sinks:
  out: {kind: blackhole, from: agg}
  raw: {kind: blackhole, from: file}
";
        let overrides: Vec<crate::spec::load::Override> =
            sets.iter().map(|s| s.parse().unwrap()).collect();
        let loaded = parse_str("job.yaml", text, &overrides).unwrap();
        let mut problems = loaded.problems.clone();
        super::check_settings(&loaded.spec, &loaded.source, &mut problems);
        problems
    }

    #[test]
    fn a_job_with_sane_settings_has_no_problems() {
        assert!(problems_with(&["checkpoint.interval=1s"]).is_empty());
    }

    #[test]
    fn zero_and_tiny_checkpoint_times_are_refused_at_their_keys() {
        for (set, key) in [
            ("checkpoint.interval=0", "checkpoint.interval"),
            ("checkpoint.interval=1ns", "checkpoint.interval"),
            ("checkpoint.timeout=0", "checkpoint.timeout"),
        ] {
            let mut sets = vec![set];
            if !set.starts_with("checkpoint.interval") {
                sets.push("checkpoint.interval=1s");
            }
            let p = problems_with(&sets);
            assert_eq!(p.len(), 1, "{set}: {p:#?}");
            assert_eq!(p[0].path, key);
            assert!(p[0].message.contains("at least 10ms"), "{}", p[0].message);
        }
    }

    #[test]
    fn a_zero_state_ttl_is_refused_for_the_job_and_per_transform() {
        let p = problems_with(&["state.ttl=0"]);
        assert_eq!(p.len(), 1, "{p:#?}");
        assert_eq!(p[0].path, "state.ttl");
        let p = problems_with(&["transforms.agg.state-ttl=500us"]);
        assert_eq!(p.len(), 1, "{p:#?}");
        assert_eq!(p[0].path, "transforms.agg.state-ttl");
    }

    #[test]
    fn a_zero_mini_batch_interval_is_refused_for_the_job_and_per_transform() {
        assert!(problems_with(&["mini-batch={interval: 1s, size: 1000}"]).is_empty());
        let p = problems_with(&["mini-batch={interval: 0s, size: 1000}"]);
        assert_eq!(p.len(), 1, "{p:#?}");
        assert_eq!(p[0].path, "mini-batch.interval");
        let p = problems_with(&["transforms.agg.mini-batch={interval: 0s, size: 10}"]);
        assert_eq!(p.len(), 1, "{p:#?}");
        assert_eq!(p[0].path, "transforms.agg.mini-batch.interval");
        assert!(p[0].message.contains("at least 1ms"), "{}", p[0].message);
    }

    #[test]
    fn restart_keys_of_another_strategy_are_refused_at_their_keys() {
        assert!(problems_with(&["restart.reset-after=2s", "restart.jitter=0.2"]).is_empty());
        let p = problems_with(&["restart.strategy=fixed-delay", "restart.max-delay=1m"]);
        assert_eq!(p.len(), 1, "{p:#?}");
        assert_eq!(p[0].path, "restart.max-delay");
        assert!(
            p[0].message.contains("exponential-delay") && p[0].message.contains("fixed-delay"),
            "{}",
            p[0].message
        );
        let p = problems_with(&["restart.strategy=failure-rate", "restart.max-attempts=5"]);
        assert_eq!(p.len(), 1, "{p:#?}");
        assert_eq!(p[0].path, "restart.max-attempts");
        let p = problems_with(&["restart.max-failures=5", "restart.interval=1m"]);
        assert_eq!(p.len(), 2, "{p:#?}");
        assert!(
            problems_with(&[
                "restart.strategy=failure-rate",
                "restart.max-failures=5",
                "restart.interval=1m"
            ])
            .is_empty()
        );
    }

    #[test]
    fn restart_periods_too_short_to_mean_anything_are_refused() {
        let p = problems_with(&["restart.reset-after=0"]);
        assert_eq!(p.len(), 1, "{p:#?}");
        assert_eq!(p[0].path, "restart.reset-after");
        let p = problems_with(&["restart.strategy=failure-rate", "restart.interval=1ms"]);
        assert_eq!(p.len(), 1, "{p:#?}");
        assert_eq!(p[0].path, "restart.interval");
    }

    #[test]
    fn positions_point_at_the_key_in_the_file() {
        let text = "name: demo\ncheckpoint:\n  interval: 1ns\nsources:\n  gen: {kind: nexmark}\n\
                    sinks:\n  out: {kind: blackhole, from: gen.bid}\n";
        let loaded = parse_str("job.yaml", text, &[]).unwrap();
        let mut problems = Vec::new();
        super::check_settings(&loaded.spec, &loaded.source, &mut problems);
        assert_eq!(problems.len(), 1, "{problems:#?}");
        assert_eq!((problems[0].line, problems[0].column), (Some(3), Some(13)));
    }
}
