//! Exactly-once recovery, in the style of Arroyo's smoke tests: each stateful Nexmark job runs
//! to completion once (the golden output), then runs again as a child process that checkpoints
//! every 200 ms and is killed with SIGKILL at random points, each time restarted with
//! `--from latest`, until a run completes. The committed output must equal the golden output
//! exactly: nothing lost, nothing twice. Restarts may change the parallelism (the state is
//! redistributed by key group) and the state backend switches are covered by savepoints.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::support::{assert_same_rows, job_file, multiset, read_parts, run_job};

pub(crate) fn weir(data: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_weir"));
    c.env("WEIR_DATA_DIR", data)
        .env("RUST_LOG", "warn,weir_checkpoint=info,weir_runtime=info");
    c
}

/// A seeded xorshift (kill times, test data).
pub(crate) struct Rng(pub(crate) u64);
impl Rng {
    pub(crate) fn between(&mut self, lo: u64, hi: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        lo + self.0 % (hi - lo)
    }
}

/// Events per run and the generator's rate: a full run takes about two seconds, so kills land
/// before, between and during checkpoints.
const EVENTS: u64 = 150_000;
const RATE: u64 = 75_000;

struct Case<'a> {
    query: &'a str,
    /// The runs with kills run the SQL twin (`jobs/nexmark/sql/`); the golden run is always
    /// the YAML job.
    sql: bool,
    /// For a changelog (a running aggregate emits a row per changed key per batch, and batch
    /// boundaries depend on timing): compare the last row of each key.
    upsert_key: Option<&'a str>,
    backend: &'a str,
    /// Parallelism of each run (the last repeats).
    parallelism: &'a [u32],
    seed: u64,
    kills: usize,
}

fn overrides(case: &Case<'_>, out: &Path, parallelism: u32) -> Vec<String> {
    vec![
        format!("sources.nexmark.events={EVENTS}"),
        format!("parallelism={parallelism}"),
        format!("state.backend={}", case.backend),
        "sinks.out.kind=file".into(),
        format!("sinks.out.path={}", out.display()),
    ]
}

/// The committed rows of `dir`, files in snapshot order (then subtask): a key's rows come in
/// the order they were produced.
pub(crate) fn committed_rows(dir: &Path) -> Vec<serde_json::Value> {
    let mut files: Vec<(u64, String, PathBuf)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter_map(|p| {
            let name = p.file_name()?.to_str()?.to_string();
            let rest = name.strip_prefix("part-")?.strip_suffix(".jsonl")?;
            let (subtask, id) = rest.rsplit_once('-')?;
            Some((id.parse().ok()?, subtask.to_string(), p))
        })
        .collect();
    files.sort();
    let mut rows = Vec::new();
    for (_, _, path) in files {
        for line in std::fs::read_to_string(&path).unwrap().lines() {
            rows.push(serde_json::from_str(line).unwrap());
        }
    }
    assert_eq!(
        rows.len(),
        read_parts(dir).len(),
        "every part file is named by its snapshot"
    );
    rows
}

fn comparable(
    case: &Case<'_>,
    rows: Vec<serde_json::Value>,
) -> std::collections::BTreeMap<String, usize> {
    match case.upsert_key {
        Some(key) => {
            let mut last = std::collections::BTreeMap::new();
            for r in rows {
                last.insert(r[key].to_string(), r);
            }
            multiset(last.into_values())
        }
        None => multiset(rows),
    }
}

fn golden(case: &Case<'_>, dir: &Path) -> std::collections::BTreeMap<String, usize> {
    let out = dir.join("golden");
    let mut o = overrides(case, &out, 1);
    o.push("state.backend=heap".into());
    run_job(&job_file(&format!("jobs/nexmark/{}.yaml", case.query)), &o);
    let rows = comparable(case, committed_rows(&out));
    assert!(
        !rows.is_empty(),
        "{}: the golden run produced nothing",
        case.query
    );
    rows
}

fn spawn(case: &Case<'_>, data: &Path, out: &Path, run: usize) -> Child {
    let p = case.parallelism[run.min(case.parallelism.len() - 1)];
    let mut cmd = weir(data);
    let job = if case.sql {
        format!("jobs/nexmark/sql/{}.yaml", case.query)
    } else {
        format!("jobs/nexmark/{}.yaml", case.query)
    };
    cmd.arg("run")
        .arg(job_file(&job))
        .arg("--quiet")
        .args(["--from", "latest"]);
    for o in overrides(case, out, p) {
        cmd.args(["--set", &o]);
    }
    cmd.args([
        "--set",
        &format!("sources.nexmark.rate={RATE}"),
        "--set",
        "checkpoint.interval=200ms",
    ]);
    cmd.stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("weir runs")
}

/// Runs `case` to completion through `case.kills` SIGKILLs; returns the stderr of each run.
fn run_with_kills(case: &Case<'_>, data: &Path, out: &Path) -> Vec<String> {
    run_through_kills(case.query, case.seed, case.kills, |run| {
        spawn(case, data, out, run)
    })
}

/// [`crate::support::run_through_kills`] with kills between 0.3 and 1.8 s: a full run of the
/// cases takes about two seconds, so kills land before, between and during checkpoints.
pub(crate) fn run_through_kills(
    what: &str,
    seed: u64,
    kills: usize,
    spawn: impl FnMut(usize) -> Child,
) -> Vec<String> {
    let window = Duration::from_millis(300)..Duration::from_millis(1800);
    crate::support::run_through_kills(what, seed, kills, window, spawn).0
}

fn check(case: Case<'_>) {
    let dir = tempfile::tempdir().unwrap();
    let expected = golden(&case, dir.path());
    let data = dir.path().join("data");
    let out = dir.path().join("out");
    let logs = run_with_kills(&case, &data, &out);
    let what = format!(
        "{} on {} at parallelism {:?}, seed {}",
        case.query, case.backend, case.parallelism, case.seed
    );
    let leftovers: Vec<PathBuf> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with('.'))
        .collect();
    if !leftovers.is_empty() {
        eprintln!("{what}: logs of the runs:\n{}", logs.join("\n---\n"));
        for e in std::fs::read_dir(&out).unwrap() {
            eprintln!("  {}", e.unwrap().file_name().to_string_lossy());
        }
    }
    assert!(
        leftovers.is_empty(),
        "{what}: uncommitted files left: {leftovers:?}"
    );
    let got = comparable(&case, committed_rows(&out));
    if got != expected {
        eprintln!("{what}: logs of the runs:\n{}", logs.join("\n---\n"));
    }
    assert_same_rows(&what, &got, &expected);
    // The last run restored something (the kills were not all before the first checkpoint)
    // or completed on its own; either way its working directories are gone.
    assert!(
        !data.join("state").exists()
            || std::fs::read_dir(data.join("state"))
                .unwrap()
                .next()
                .is_none(),
        "{what}: the runs' working directories were removed"
    );
}

#[test]
fn sql_jobs_survive_kills_with_the_rows_of_their_yaml_twins() {
    for (query, upsert_key, backend, parallelism, seed) in [
        ("q0", None, "heap", &[1u32][..], 1),
        ("q1", None, "rocksdb", &[2][..], 11),
        ("q2", None, "heap", &[2, 1][..], 21),
        ("q3", None, "rocksdb", &[1][..], 31),
        ("q4", Some("category"), "rocksdb", &[1, 2][..], 41),
        ("q5", None, "heap", &[2, 1][..], 51),
        ("q6", None, "rocksdb", &[1][..], 61),
        ("q7", None, "heap", &[2][..], 71),
        ("q8", None, "rocksdb", &[1][..], 81),
        ("q9", None, "heap", &[1, 2][..], 91),
        ("q11", None, "rocksdb", &[2][..], 111),
    ] {
        check(Case {
            sql: true,
            query,
            upsert_key,
            backend,
            parallelism,
            seed,
            kills: 2,
        });
    }
}

#[test]
fn q3_join_survives_kills_on_heap() {
    check(Case {
        sql: false,
        query: "q3",
        upsert_key: None,
        backend: "heap",
        parallelism: &[1],
        seed: 3,
        kills: 2,
    });
}

#[test]
fn q4_join_then_aggregate_survives_kills_on_rocksdb() {
    check(Case {
        sql: false,
        query: "q4",
        upsert_key: Some("category"),
        backend: "rocksdb",
        parallelism: &[1],
        seed: 4,
        kills: 2,
    });
}

#[test]
fn q5_windows_and_top_n_survive_kills_on_heap_and_rocksdb() {
    check(Case {
        sql: false,
        query: "q5",
        upsert_key: None,
        backend: "heap",
        parallelism: &[1],
        seed: 5,
        kills: 3,
    });
    check(Case {
        sql: false,
        query: "q5",
        upsert_key: None,
        backend: "rocksdb",
        parallelism: &[1],
        seed: 55,
        kills: 2,
    });
}

#[test]
fn q6_over_aggregate_survives_kills_on_heap() {
    check(Case {
        sql: false,
        query: "q6",
        upsert_key: None,
        backend: "heap",
        parallelism: &[1],
        seed: 6,
        kills: 2,
    });
}

#[test]
fn q7_survives_kills_on_rocksdb() {
    check(Case {
        sql: false,
        query: "q7",
        upsert_key: None,
        backend: "rocksdb",
        parallelism: &[1],
        seed: 7,
        kills: 2,
    });
}

#[test]
fn q8_window_join_survives_kills_on_heap() {
    check(Case {
        sql: false,
        query: "q8",
        upsert_key: None,
        backend: "heap",
        parallelism: &[1],
        seed: 8,
        kills: 2,
    });
}

#[test]
fn q9_survives_kills_on_rocksdb() {
    check(Case {
        sql: false,
        query: "q9",
        upsert_key: None,
        backend: "rocksdb",
        parallelism: &[1],
        seed: 9,
        kills: 2,
    });
}

#[test]
fn q11_sessions_survive_kills_on_heap() {
    check(Case {
        sql: false,
        query: "q11",
        upsert_key: None,
        backend: "heap",
        parallelism: &[1],
        seed: 11,
        kills: 2,
    });
}

#[test]
fn restores_redistribute_state_from_one_subtask_to_two_and_back() {
    check(Case {
        sql: false,
        query: "q5",
        upsert_key: None,
        backend: "rocksdb",
        parallelism: &[1, 2],
        seed: 12,
        kills: 2,
    });
    check(Case {
        sql: false,
        query: "q9",
        upsert_key: None,
        backend: "heap",
        parallelism: &[2, 1],
        seed: 21,
        kills: 2,
    });
    check(Case {
        sql: false,
        query: "q11",
        upsert_key: None,
        backend: "rocksdb",
        parallelism: &[2, 1],
        seed: 211,
        kills: 2,
    });
}

/// A job's committed changelog (`changelog-json`, an `op` per row) folded into its table by
/// `key`, checking that it is well formed: no `+I`/`+U` over a live row, every `-U`/`-D`
/// takes back the row that is live.
fn fold_changelog(
    rows: &[serde_json::Value],
    key: &str,
) -> std::collections::BTreeMap<String, serde_json::Value> {
    let mut table = std::collections::BTreeMap::new();
    for row in rows {
        let mut row = row.clone();
        let op = row
            .as_object_mut()
            .and_then(|o| o.remove("op"))
            .unwrap_or_else(|| panic!("a row without its op: {row}"));
        let k = row[key].to_string();
        match op.as_str() {
            Some("+I" | "+U") => {
                assert!(
                    table.insert(k.clone(), row).is_none(),
                    "{op} over the live row of {k}"
                );
            }
            Some("-U" | "-D") => {
                assert_eq!(
                    table.remove(&k).as_ref(),
                    Some(&row),
                    "{op} of a row not live"
                );
            }
            _ => panic!("an unknown op {op}"),
        }
    }
    table
}

/// A mini-batched running aggregate with hot keys, and another over its updates
/// (`jobs/examples/bids-per-auction.yaml`), killed with SIGKILL at random points (mostly with
/// changes held in a mini-batch) and resumed from its latest checkpoint, at another
/// parallelism: the changelog it committed is well formed and builds the table of an
/// uninterrupted run without a mini-batch. Held changes are emitted before every barrier, so
/// nothing is lost or repeated.
#[test]
fn a_mini_batched_aggregate_survives_kills_with_the_table_of_a_run_without() {
    let job = job_file("jobs/examples/bids-per-auction.yaml");
    for (backend, seed) in [("heap", 45u64), ("rocksdb", 46)] {
        let dir = tempfile::tempdir().unwrap();
        let sets = |out: &Path| -> Vec<String> {
            vec![
                format!("sources.nexmark.events={EVENTS}"),
                format!("state.backend={backend}"),
                format!("sinks.out.path={}", out.display()),
            ]
        };
        let golden = dir.path().join("golden");
        let mut o = sets(&golden);
        o.push("mini-batch=null".into());
        run_job(&job, &o);
        let expected = fold_changelog(&committed_rows(&golden), "bids");
        assert!(expected.len() > 10, "{expected:?}");

        let data = dir.path().join("data");
        let out = dir.path().join("out");
        run_through_kills("bids-per-auction", seed, 3, |run| {
            let mut cmd = weir(&data);
            cmd.arg("run")
                .arg(&job)
                .arg("--quiet")
                .args(["--from", "latest"]);
            for s in sets(&out) {
                cmd.args(["--set", &s]);
            }
            cmd.args([
                "--set",
                &format!("parallelism={}", 1 + run % 2),
                "--set",
                &format!("sources.nexmark.rate={RATE}"),
                "--set",
                "checkpoint.interval=200ms",
                "--set",
                "mini-batch={interval: 50ms, size: 2000}",
            ]);
            cmd.stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("weir runs")
        });
        let rows = committed_rows(&out);
        let got = fold_changelog(&rows, "bids");
        assert_eq!(got, expected, "{backend}");
    }
}
