#!/usr/bin/env bash
# Builds and runs weir's fuzz targets (fuzz/, with cargo-fuzz and libFuzzer). Their bodies live
# in crates/fuzz-targets, whose smoke test (`cargo test`, part of `make test`) replays the same
# seeds and deterministic mutants of them without this build; this script is the coverage-guided
# search.
#
#   scripts/fuzz.sh build              # build every target
#   scripts/fuzz.sh smoke [RUNS]       # each target: replay its seeds, then RUNS (2000) inputs
#   scripts/fuzz.sh run [SECONDS]      # each target: fuzz for SECONDS (60) from its seeds
#
# RocksDB is not compiled again. With RocksDB's prebuilt library (scripts/rocksdb-lib.sh) the
# targets link that. Otherwise: every target links weir-state, whose RocksDB backend is C++
# that takes some 25 minutes to compile on two cores; the fuzz build has flags of its own and
# so a target directory of its own, where librocksdb-sys would compile it from scratch.
# Instead the build reuses the `librocksdb.a` that the main build (`make build`, or `make
# test` before this) left in $CARGO_TARGET_DIR (through librocksdb-sys's ROCKSDB_LIB_DIR): the
# same librocksdb-sys version, picked by the version fuzz/Cargo.lock resolves. RocksDB itself
# is then not instrumented, which costs nothing: no target reaches it.
#
# The targets are built without a sanitizer (`--sanitizer none`): weir forbids `unsafe`, so
# AddressSanitizer would mostly slow the runs down; what fuzzing finds here are panics,
# overflows (overflow checks and debug assertions are on), stack overflows, leaks of time and
# memory (`-timeout`, `-rss_limit_mb`). Stable Rust serves: RUSTC_BOOTSTRAP=1 lets cargo-fuzz
# pass the unstable flags it needs.
#
# Inputs a run finds go to $FUZZ_TARGET_DIR/corpus/TARGET, not to fuzz/seeds (checked in),
# and crashes to $FUZZ_TARGET_DIR/artifacts/TARGET; every crash becomes a file in
# fuzz/seeds/TARGET (replayed by every smoke run, this script's and `make test`'s) and a
# regression test named after the bug, in the crate that had it.
set -euo pipefail
cd "$(dirname "$0")/.."
cmd="${1:?usage: fuzz.sh build | smoke [RUNS] | run [SECONDS]}"
main_target="$(realpath -m "${CARGO_TARGET_DIR:-target}")"
fuzz_target="${FUZZ_TARGET_DIR:-$main_target/fuzz}"
# One per file of fuzz/fuzz_targets (crates/fuzz-targets tests that each has its seeds).
targets=()
for file in fuzz/fuzz_targets/*.rs; do targets+=("$(basename "$file" .rs)"); done
cargo_fuzz_version=0.13.2

# The librocksdb-sys version fuzz/Cargo.lock resolves, e.g. 0.19.0+11.8.1.
rocksdb_version() {
  awk '/^name = "librocksdb-sys"$/ { getline; gsub(/version = |"/, ""); print; exit }' "$1"
}

# The directory holding the main build's librocksdb.a of `version`.
find_rocksdb_lib() {
  local version="$1" output
  for output in "$main_target"/release/build/librocksdb-sys-*/output; do
    [ -f "$output" ] || continue
    if grep -q "^cargo:cargo_manifest_dir=.*/librocksdb-sys-${version//./\\.}\$" "$output" &&
       [ -f "$(dirname "$output")/out/librocksdb.a" ]; then
      echo "$(dirname "$output")/out"
      return 0
    fi
  done
  return 1
}

build() {
  if ! cargo fuzz --version 2>/dev/null | grep -q "$cargo_fuzz_version"; then
    echo "installing cargo-fuzz $cargo_fuzz_version" >&2
    cargo install cargo-fuzz --version "$cargo_fuzz_version" --locked
  fi
  local version lib
  version="$(rocksdb_version fuzz/Cargo.lock)"
  if [ "$version" != "$(rocksdb_version Cargo.lock)" ]; then
    echo "fuzz/Cargo.lock has librocksdb-sys $version, Cargo.lock $(rocksdb_version Cargo.lock):" \
      "run \`cargo update -p librocksdb-sys\` in fuzz/ so that the prebuilt library fits" >&2
    exit 1
  fi
  if [ -z "${ROCKSDB_LIB_DIR:-}" ] && lib="$(scripts/rocksdb-lib.sh dir)" && [ -n "$lib" ]; then
    export ROCKSDB_LIB_DIR="$lib"
  fi
  if [ -n "${ROCKSDB_LIB_DIR:-}" ]; then
    # RocksDB's prebuilt shared library, found where it was linked from (the run path;
    # cargo-fuzz sets RUSTFLAGS, which replace .cargo/config.toml's).
    (cd fuzz && RUSTC_BOOTSTRAP=1 RUSTFLAGS="-C link-arg=-Wl,-rpath,$ROCKSDB_LIB_DIR" \
      cargo fuzz build --sanitizer none --codegen-units 16 --target-dir "$fuzz_target")
    return
  fi
  if ! lib="$(find_rocksdb_lib "$version")"; then
    echo "no librocksdb.a of librocksdb-sys $version under $main_target/release/build:" \
      "build the workspace first (make build)" >&2
    exit 1
  fi
  (cd fuzz && ROCKSDB_LIB_DIR="$lib" ROCKSDB_STATIC=1 RUSTC_BOOTSTRAP=1 \
    cargo fuzz build --sanitizer none --codegen-units 16 --target-dir "$fuzz_target")
}

# Runs target $1 with libFuzzer arguments $2...: new inputs into the scratch corpus, seeds read.
run_target() {
  local target="$1"
  shift
  mkdir -p "$fuzz_target/corpus/$target" "$fuzz_target/artifacts/$target"
  "$fuzz_target/x86_64-unknown-linux-gnu/release/$target" \
    -artifact_prefix="$fuzz_target/artifacts/$target/" -max_len=8192 -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 "$@" \
    "$fuzz_target/corpus/$target" "fuzz/seeds/$target"
}

case "$cmd" in
  build) build ;;
  smoke)
    build
    for target in "${targets[@]}"; do
      log="$fuzz_target/smoke-$target.log"
      start=$SECONDS
      if ! run_target "$target" -seed=1 -runs="${2:-2000}" >"$log" 2>&1; then
        tail -n 60 "$log" >&2
        echo "fuzz smoke: $target FAILED (log: $log, input in $fuzz_target/artifacts/$target)" >&2
        exit 1
      fi
      echo "fuzz smoke: $target ok in $((SECONDS - start))s:" \
        "$(grep -oE '^stat::number_of_executed_units: [0-9]+' "$log" | grep -oE '[0-9]+$') inputs" >&2
    done
    ;;
  run)
    build
    for target in "${targets[@]}"; do
      echo "fuzz: $target for ${2:-60}s" >&2
      run_target "$target" -max_total_time="${2:-60}"
    done
    ;;
  *) echo "usage: fuzz.sh build | smoke [RUNS] | run [SECONDS]" >&2; exit 2 ;;
esac
