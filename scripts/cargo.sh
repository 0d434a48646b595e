#!/usr/bin/env bash
# cargo, linking RocksDB's prebuilt library when there is one (scripts/rocksdb-lib.sh), so a
# build does not compile RocksDB's C++. The Makefile runs every cargo command through it.
#
# librocksdb-sys links the library in ROCKSDB_LIB_DIR instead of compiling its bundled copy,
# and a link to it beside the binaries of each profile (target/release/librocksdb.so) is where
# they find it: their run path, set in .cargo/config.toml, is $ORIGIN, $ORIGIN/.. and
# $ORIGIN/../lib/weir. ROCKSDB_LIB_DIR is in no fingerprint but librocksdb-sys's own, so
# switching between the prebuilt library and a compile from source (WEIR_ROCKSDB=source)
# rebuilds librocksdb-sys and relinks what depends on it, nothing else.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
if [ -z "${ROCKSDB_LIB_DIR:-}" ] && dir="$("$here/rocksdb-lib.sh" dir)" && [ -n "$dir" ]; then
  export ROCKSDB_LIB_DIR="$dir"
fi
if [ -n "${ROCKSDB_LIB_DIR:-}" ] && [ -f "$ROCKSDB_LIB_DIR/librocksdb.so" ]; then
  # Doctests are linked and run in temporary directories, where no run path finds the
  # library: the loader's search path does (it is in no fingerprint).
  export LD_LIBRARY_PATH="$ROCKSDB_LIB_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  target="${CARGO_TARGET_DIR:-$here/../target}"
  for profile in release bench-lto; do
    mkdir -p "$target/$profile"
    ln -sfn "$ROCKSDB_LIB_DIR/librocksdb.so" "$target/$profile/librocksdb.so"
  done
fi
exec "${WEIR_CARGO:-cargo}" "$@"
