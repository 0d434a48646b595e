//! JSON-lines sources on bad input: over-long and undecodable lines are skipped and counted
//! under `on-error: skip`, and under `fail` the error names file, line number and byte offset,
//! whichever subtask's chunk the line falls in, decoded inline or on decode threads.

use std::path::Path;

use crate::support::{out_dir, plan, try_run_plan};

/// Longest line the generated jobs accept.
const LIMIT: usize = 16 << 10;

/// What a generated line is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Good,
    TooLong,
    BadJson,
    /// Nested 2,000 deep where an object is declared: refused.
    Deep,
    /// Nested 2,000 deep under an undeclared key: skipped over (without recursion), so the
    /// line decodes.
    DeepIgnored,
}

/// Seeded lines: mostly good, some longer than [`LIMIT`], some invalid JSON, some nested far
/// deeper than any decoder should follow.
fn lines(seed: u64, count: usize) -> Vec<(Kind, String)> {
    let mut state = seed | 1;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    (0..count)
        .map(|i| match next() % 12 {
            0 => (
                Kind::TooLong,
                format!(r#"{{"id":{i},"pad":"{}"}}"#, "x".repeat(2 * LIMIT)),
            ),
            1 => (Kind::BadJson, format!(r#"{{"id":{i},"#)),
            2 => (
                Kind::Deep,
                format!("{}{}", "[".repeat(2_000), "]".repeat(2_000)),
            ),
            3 => (
                Kind::DeepIgnored,
                format!(
                    r#"{{"id":{i},"x":{}1{}}}"#,
                    r#"{"a":"#.repeat(2_000),
                    "}".repeat(2_000)
                ),
            ),
            _ => (Kind::Good, format!(r#"{{"id":{i}}}"#)),
        })
        .collect()
}

fn job(dir: &Path, input: &Path, on_error: &str) -> std::path::PathBuf {
    let job = dir.join("job.yaml");
    std::fs::write(
        &job,
        format!(
            "name: jsonl-errors\nparallelism: 3\nsources:\n  in:\n    kind: jsonl\n    path: {}\n    \
             schema:\n      id: int\n    on-error: {on_error}\n    chunk-size: 256B\n    \
             max-line-length: {LIMIT}B\nsinks:\n  out:\n    kind: blackhole\n    from: in\n",
            input.display()
        ),
    )
    .unwrap();
    job
}

#[test]
fn over_long_and_bad_lines_are_skipped_and_counted_under_skip() {
    let dir = out_dir();
    let input = dir.path().join("in.jsonl");
    let lines = lines(7, 400);
    let text: String = lines.iter().map(|(_, l)| format!("{l}\n")).collect();
    std::fs::write(&input, text).unwrap();
    for threads in [0, 2] {
        let threads = format!("sources.in.decode-threads={threads}");
        let plan = plan(&job(dir.path(), &input, "skip"), &[threads]).unwrap();
        let summary = try_run_plan(&plan, false).unwrap();
        let source = summary.nodes.iter().find(|n| n.name == "in").unwrap();
        let good = [Kind::Good, Kind::DeepIgnored];
        let bad = lines.iter().filter(|(k, _)| !good.contains(k)).count() as u64;
        assert!(lines.iter().any(|(k, _)| *k == Kind::TooLong));
        assert_eq!(source.skipped, bad);
        assert_eq!(source.records_out, lines.len() as u64 - bad);
        assert_eq!(summary.events, lines.len() as u64);
    }
}

#[test]
fn a_bad_line_under_fail_names_file_line_number_and_byte_offset() {
    for (seed, kind) in [(11, Kind::TooLong), (12, Kind::BadJson), (13, Kind::Deep)] {
        let dir = out_dir();
        let input = dir.path().join("in.jsonl");
        // Good lines, then one bad line of `kind` somewhere in the middle: its line number is
        // known naively from its index.
        let mut lines: Vec<String> = (0..300).map(|i| format!(r#"{{"id":{i}}}"#)).collect();
        let at = 100 + (seed as usize * 37) % 150;
        lines[at] = one_line(seed, kind);
        let offset: usize = lines[..at].iter().map(|l| l.len() + 1).sum();
        std::fs::write(&input, lines.join("\n")).unwrap();
        for threads in [0, 2] {
            let threads = format!("sources.in.decode-threads={threads}");
            let plan = plan(&job(dir.path(), &input, "fail"), &[threads]).unwrap();
            let err = try_run_plan(&plan, false).unwrap_err();
            let line = at + 1;
            let expected = match kind {
                Kind::TooLong => format!(
                    "line {line} (byte {offset}) of {} is longer than {LIMIT} bytes",
                    input.display()
                ),
                _ => format!("{}: line {line} (byte {offset}): ", input.display()),
            };
            assert!(
                err.contains(&expected),
                "{kind:?}: expected {expected:?} in {err}"
            );
        }
    }
}

/// One generated line of `kind`.
fn one_line(seed: u64, kind: Kind) -> String {
    lines(seed, 2000)
        .into_iter()
        .find(|(k, _)| *k == kind)
        .map(|(_, l)| l)
        .unwrap()
}
