//! The smoke run of every fuzz target, part of `make test` (see the crate docs): its checked-in
//! seeds, then [`DEFAULT_MUTANTS`] deterministic mutants of them, each call bounded in time and
//! run on a stack of libFuzzer's size. A finding names the target, the mutant's number and the
//! file its input was written to; that input belongs in `fuzz/seeds/<target>/` and in a
//! regression test named after the bug.
//!
//! `cargo test --release --workspace -- smoke` runs these tests alone;
//! `WEIR_FUZZ_SMOKE_MUTANTS=N` and `WEIR_FUZZ_SMOKE_SEED=S` run more, or other, mutants.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::{TARGETS, Target};

/// Mutants per target in `make test`: a few seconds of all five together (the job-file
/// loader and planner, the slowest, take about a quarter of a millisecond an input).
const DEFAULT_MUTANTS: u64 = 10_000;
/// The mutants' seed when `WEIR_FUZZ_SMOKE_SEED` does not give one.
const DEFAULT_SEED: u64 = 24;
/// The longest input, as `scripts/fuzz.sh` gives libFuzzer (`-max_len`).
const MAX_LEN: usize = 8192;
/// How long one input may take, as `scripts/fuzz.sh` gives libFuzzer (`-timeout`).
const BOUND: Duration = Duration::from_secs(10);
/// The runner's stack: libFuzzer runs inputs on the main thread, which has 8 MiB on Linux; a
/// recursion that fits there fits here.
const STACK_BYTES: usize = 8 << 20;

/// The workspace's `fuzz/` directory.
fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

/// The checked-in seeds of `target`, by file name.
fn seeds(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = fuzz_dir().join("seeds").join(target);
    let mut seeds: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| {
            let path = entry.expect("a directory entry").path();
            let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            (path.display().to_string(), bytes)
        })
        .collect();
    seeds.sort();
    seeds
}

fn env_number(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v} is not a number")),
        Err(_) => default,
    }
}

/// One input a target failed on.
#[derive(Debug)]
struct Finding {
    /// Which input: a seed file, or `mutant N of seed S`.
    input: String,
    bytes: Vec<u8>,
    /// The panic's message, or that the call did not end in time.
    what: String,
}

/// What a clean run saw.
#[derive(Debug)]
struct Ran {
    inputs: usize,
    slowest: Duration,
}

/// Runs `run` on each of `inputs` (named, with their bytes) in order, on a thread of its own;
/// the first input that panics or takes longer than `bound` is the finding.
fn run_all(
    run: fn(&[u8]),
    inputs: Vec<(String, Vec<u8>)>,
    bound: Duration,
) -> Result<Ran, Box<Finding>> {
    let count = inputs.len();
    let names: Vec<String> = inputs.iter().map(|(name, _)| name.clone()).collect();
    let shared = std::sync::Arc::new(inputs);
    let for_runner = shared.clone();
    // One answer per input; the bound only keeps a runner from getting far ahead of a reader
    // that has stopped listening (it then stops at its next send).
    let (tx, rx) = mpsc::sync_channel::<(Duration, Result<(), String>)>(64);
    let runner = std::thread::Builder::new()
        .name("fuzz-smoke".into())
        .stack_size(STACK_BYTES)
        .spawn(move || {
            for (_, bytes) in for_runner.iter() {
                let started = Instant::now();
                let outcome = std::panic::catch_unwind(|| run(bytes)).map_err(|payload| {
                    payload
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                        .unwrap_or_else(|| "a panic without a message".to_owned())
                });
                if tx.send((started.elapsed(), outcome)).is_err() {
                    return;
                }
            }
        })
        .expect("a thread for the runner");
    let finding = |i: usize, what: String| {
        Box::new(Finding {
            input: names[i].clone(),
            bytes: shared[i].1.clone(),
            what,
        })
    };
    let mut slowest = Duration::ZERO;
    for i in 0..count {
        match rx.recv_timeout(bound) {
            Ok((took, Ok(()))) if took <= bound => slowest = slowest.max(took),
            Ok((took, Ok(()))) => {
                return Err(finding(i, format!("took {took:?} (bound {bound:?})")));
            }
            Ok((_, Err(panic))) => return Err(finding(i, format!("panicked: {panic}"))),
            // The runner is left behind: a stuck call cannot be stopped from outside, and the
            // test fails anyway.
            Err(mpsc::RecvTimeoutError::Timeout) => {
                return Err(finding(i, format!("did not end within {bound:?}")));
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(finding(i, "the runner thread died".to_owned()));
            }
        }
    }
    runner.join().expect("the runner ends after its last input");
    Ok(Ran {
        inputs: count,
        slowest,
    })
}

/// Runs a target on its seeds and `mutants` mutants; panics with the finding, its input saved.
fn smoke(target: &Target, mutants: u64, seed: u64) -> Ran {
    let seeds = seeds(target.name);
    assert!(!seeds.is_empty(), "{}: no seeds", target.name);
    let bytes: Vec<Vec<u8>> = seeds.iter().map(|(_, b)| b.clone()).collect();
    // Each target its own stream of mutants.
    let seed = seed ^ xxhash_rust::xxh3::xxh3_64(target.name.as_bytes());
    let mut inputs = seeds;
    inputs.extend((0..mutants).map(|i| {
        (
            format!("mutant {i} of seed {seed:#x}"),
            crate::mutate::mutant(&bytes, target.tokens, seed, i, MAX_LEN),
        )
    }));
    match run_all(target.run, inputs, BOUND) {
        Ok(ran) => ran,
        Err(finding) => {
            let dir = std::env::temp_dir()
                .join("weir-fuzz-smoke")
                .join(target.name);
            let file = dir.join(format!(
                "crash-{:016x}",
                xxhash_rust::xxh3::xxh3_64(&finding.bytes)
            ));
            let saved = std::fs::create_dir_all(&dir)
                .and_then(|()| std::fs::write(&file, &finding.bytes))
                .map_or_else(
                    |e| format!("(not saved: {e})"),
                    |()| file.display().to_string(),
                );
            let shown: String = finding
                .bytes
                .iter()
                .take(400)
                .copied()
                .map(char::from)
                .collect();
            panic!(
                "fuzz target {}: {} {}\ninput saved to {saved} ({} bytes), starting {shown:?}\n\
                 replay it with the cargo-fuzz binary, add it to fuzz/seeds/{} and a regression test",
                target.name,
                finding.input,
                finding.what,
                finding.bytes.len(),
                target.name
            );
        }
    }
}

/// One test per target, so that they run in parallel and a finding names its target.
macro_rules! smoke_tests {
    ($($name:ident),* $(,)?) => {$(
        #[test]
        fn $name() {
            let target = TARGETS
                .iter()
                .find(|t| t.name == stringify!($name))
                .expect("a target of that name");
            let mutants = env_number("WEIR_FUZZ_SMOKE_MUTANTS", DEFAULT_MUTANTS);
            let seed = env_number("WEIR_FUZZ_SMOKE_SEED", DEFAULT_SEED);
            let started = Instant::now();
            let ran = smoke(target, mutants, seed);
            eprintln!(
                "fuzz smoke {}: {} inputs in {:.1?}, slowest {:.1?}",
                target.name,
                ran.inputs,
                started.elapsed(),
                ran.slowest
            );
        }
    )*};
}

mod targets {
    use super::*;
    smoke_tests!(
        job_file,
        expr,
        jsonl_decode,
        checkpoint_metadata,
        logical_snapshot
    );
}

#[test]
fn every_target_has_seeds_a_smoke_test_and_a_cargo_fuzz_binary() {
    let smoked = [
        "job_file",
        "expr",
        "jsonl_decode",
        "checkpoint_metadata",
        "logical_snapshot",
    ];
    let names: Vec<&str> = TARGETS.iter().map(|t| t.name).collect();
    assert_eq!(names, smoked, "a target without its smoke test above");
    let mut seed_dirs: Vec<String> = std::fs::read_dir(fuzz_dir().join("seeds"))
        .expect("fuzz/seeds")
        .map(|e| {
            e.expect("an entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    seed_dirs.sort();
    let mut sorted = names.clone();
    sorted.sort_unstable();
    assert_eq!(seed_dirs, sorted, "fuzz/seeds has a directory per target");
    let manifest = std::fs::read_to_string(fuzz_dir().join("Cargo.toml")).expect("fuzz/Cargo.toml");
    for name in names {
        let binary = fuzz_dir().join("fuzz_targets").join(format!("{name}.rs"));
        let source = std::fs::read_to_string(&binary)
            .unwrap_or_else(|e| panic!("{}: {e}", binary.display()));
        assert!(
            source.contains(&format!("weir_fuzz_targets::{name}(")),
            "{} fuzzes something else than weir_fuzz_targets::{name}",
            binary.display()
        );
        assert!(
            manifest.contains(&format!(
                "name = \"{name}\"\npath = \"fuzz_targets/{name}.rs\""
            )),
            "fuzz/Cargo.toml has no [[bin]] for {name}"
        );
    }
}

#[test]
fn the_smoke_run_reports_a_panic_and_a_call_that_does_not_end_with_their_input() {
    fn panics_on_x(data: &[u8]) {
        assert!(!data.contains(&b'x'), "found an x");
    }
    fn sleeps_on_s(data: &[u8]) {
        if data.contains(&b's') {
            std::thread::sleep(Duration::from_secs(5));
        }
    }
    let inputs = |v: &[&str]| -> Vec<(String, Vec<u8>)> {
        v.iter()
            .map(|s| (format!("input {s}"), s.as_bytes().to_vec()))
            .collect()
    };
    let ran = run_all(panics_on_x, inputs(&["a", "b", "c"]), BOUND).expect("no x, no finding");
    assert_eq!(ran.inputs, 3);
    // The full bound: printing a panic's backtrace (RUST_BACKTRACE) takes a while.
    let found = run_all(panics_on_x, inputs(&["a", "axe", "x"]), BOUND).expect_err("an x");
    assert_eq!(found.input, "input axe");
    assert_eq!(found.bytes, b"axe");
    assert!(found.what.contains("found an x"), "{}", found.what);
    let bound = Duration::from_millis(200);
    let found = run_all(sleeps_on_s, inputs(&["a", "s", "b"]), bound).expect_err("a sleep");
    assert_eq!(found.input, "input s");
    assert!(found.what.contains("did not end"), "{}", found.what);
}
