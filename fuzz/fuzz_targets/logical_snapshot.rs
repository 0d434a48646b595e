//! `weir_fuzz_targets::logical_snapshot` under libFuzzer (its body and docs are in `crates/fuzz-targets`,
//! where the smoke test of `make test` runs it too).

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| weir_fuzz_targets::logical_snapshot(data));
