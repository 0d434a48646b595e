//! The bodies of weir's fuzz targets: one function per decoder of untrusted input, fed any
//! bytes. Refusing an input is fine; panicking, hanging or overflowing the stack is a bug.
//!
//! Two drivers call the same functions:
//!
//! - `fuzz/` (cargo-fuzz and libFuzzer, `make fuzz`, `make fuzz-smoke`): each
//!   `fuzz/fuzz_targets/<name>.rs` is one line, a `fuzz_target!` calling its function here, so
//!   coverage-guided fuzzing searches exactly the code below. Its build instruments every
//!   dependency and therefore compiles all of them again (some 19 minutes of two cores from an
//!   empty cache), which is why it is not part of `make test`.
//! - The smoke test of this crate (`smoke`, part of `cargo test --release --workspace` and so
//!   of `make test`): every checked-in seed of every target (`fuzz/seeds/<name>/`, where the
//!   inputs of crashes found are kept too) and 10,000 deterministic mutations of them
//!   (bit flips, truncations, splices, repeated chunks, extreme numbers, each target's
//!   syntax), each call on a thread with libFuzzer's main-thread stack and bounded in time.
//!   It is no search (it has no coverage feedback), but it runs every target's whole path on
//!   damaged input in every test run, and it costs this crate's own code and one test binary:
//!   a member of the main workspace, it reuses every dependency the workspace builds anyway.
//!
//! # Layout
//! - [`job_file`]: the job-file loader and planner, with `--set` overrides.
//! - [`expr`]: the expression parser and compiler, and evaluation of what compiles.
//! - [`jsonl_decode`]: the JSON-lines decoder, and the encoder on what it decoded.
//! - [`checkpoint_metadata`]: a checkpoint's `_metadata` file, decoded and round-tripped.
//! - [`logical_snapshot`]: the logical keyed-state snapshot reader.
//! - `smoke` and `mutate` (tests only): the smoke run and its mutations.
//!
//! # Example
//! ```
//! for target in weir_fuzz_targets::TARGETS {
//!     (target.run)(b"name: [unclosed");
//! }
//! ```

pub mod checkpoint_metadata;
pub mod expr;
pub mod job_file;
pub mod jsonl_decode;
pub mod logical_snapshot;

#[cfg(test)]
mod mutate;
#[cfg(test)]
mod smoke;

pub use checkpoint_metadata::checkpoint_metadata;
pub use expr::expr;
pub use job_file::job_file;
pub use jsonl_decode::jsonl_decode;
pub use logical_snapshot::logical_snapshot;

/// One fuzz target.
#[derive(Clone, Copy, Debug)]
pub struct Target {
    /// Its name: of its cargo-fuzz binary (`fuzz/fuzz_targets/<name>.rs`) and of its seeds
    /// (`fuzz/seeds/<name>/`).
    pub name: &'static str,
    /// Runs one input.
    pub run: fn(&[u8]),
    /// Fragments of the input's syntax that the smoke test's mutations insert: libFuzzer learns
    /// such fragments from coverage, a blind mutator has to be told them.
    pub tokens: &'static [&'static [u8]],
}

/// Every fuzz target.
pub const TARGETS: &[Target] = &[
    Target {
        name: "job_file",
        run: job_file,
        tokens: &[
            b"&a ",
            b"*a",
            b"<<: *a\n",
            b": ",
            b"\n- ",
            b"\n  ",
            b"{",
            b"}",
            b"[",
            b"]",
            b"!!binary ",
            b"!!int ",
            b"---\n",
            b"--set parallelism=0\n",
            b"--set sources.gen.events=-1\n",
            b"\"\\u0000\"",
            b"null",
            b"~",
            b"9223372036854775807",
            b"-9223372036854775808",
            b"18446744073709551616",
            b"1e400",
            b"0",
            b"1ns",
            b"1000d",
            b"0ms",
            b"parallelism: ",
            b"kind: ",
            b"from: ",
            b"where: ",
            b"keys: ",
            b"window: {type: sliding, size: 1000d, slide: 1ms}",
            b"base-time: ",
            b"state-ttl: 0",
            b"checkpoint: {interval: 10ms}",
        ],
    },
    Target {
        name: "expr",
        run: expr,
        tokens: &[
            b" + ",
            b" - ",
            b" * ",
            b" / 0",
            b" % 0",
            b" || ",
            b" AND ",
            b" OR ",
            b"NOT ",
            b"(",
            b")",
            b"CASE WHEN ",
            b" THEN ",
            b" ELSE ",
            b" END",
            b"CAST(",
            b" AS BIGINT)",
            b" AS TIMESTAMP)",
            b" IS NULL",
            b" LIKE '%_\\'",
            b" IN (1, NULL)",
            b" BETWEEN 1 AND 2",
            b"'",
            b"\"device.kind\"",
            b"NULL",
            b"price",
            b"ts",
            b"a",
            b"9223372036854775807",
            b"-9223372036854775808",
            b"1e308",
            b"INTERVAL '1' DAY",
            b"abs(",
            b"lower(",
            b"substring(",
        ],
    },
    Target {
        name: "jsonl_decode",
        run: jsonl_decode,
        tokens: &[
            b"{\"i\": ",
            b"\"o\": {\"o\": {\"s\": ",
            b"{\"bid\": {",
            b"{\"person\": {\"id\": ",
            b"\"t\": \"2024-01-01T00:00:00Z\"",
            b"\"t\": ",
            b"}",
            b"\n",
            b"\r\n",
            b"\"\\u0000\"",
            b"\"\\ud800\"",
            b"1e999",
            b"-0",
            b"9223372036854775808",
            b"-9223372036854775809",
            b"null",
            b"true",
            b"[[[[",
            b", ",
        ],
    },
    Target {
        name: "checkpoint_metadata",
        run: checkpoint_metadata,
        tokens: &[
            b"weir-checkpoint ",
            b"\"version\": ",
            b"\"id\": ",
            b"\"key-groups\": ",
            b"\"../\"",
            b"\"/\"",
            b"4294967296",
            b"18446744073709551615",
            b"-1",
            b"0",
            b"null",
            b"[]",
            b"{}",
            b"\"\"",
            b"\"\\u0000\"",
        ],
    },
    Target {
        name: "logical_snapshot",
        run: logical_snapshot,
        tokens: &[
            &[0; 8],
            &[0xff; 8],
            &[0xff, 0xff, 0xff, 0x7f],
            &[1, 0, 0, 0],
            &[0, 0, 0, 0x80],
            b"WEIRKGS\0",
        ],
    },
];
