#!/usr/bin/env bash
# RocksDB's library, prebuilt, so that a build does not compile RocksDB's C++ (about 25 minutes
# of two cores, the larger part of a clean build).
#
#   scripts/rocksdb-lib.sh dir     # print the directory holding librocksdb.so, fetching it once;
#                                  # print nothing (and say why on stderr) when there is none
#
# The library comes from Maven Central: RocksDB's own Java artifact, `org.rocksdb:rocksdbjni`,
# carries RocksDB compiled for linux64 as a shared library that exports RocksDB's whole C API
# (the `rocksdb_*` functions the `rocksdb` crate calls; JNI adds functions of its own beside
# them). The version is the one librocksdb-sys bundles, read from Cargo.lock (`0.19.0+11.8.1`
# is RocksDB 11.8.1), so the bindings librocksdb-sys generates from its bundled headers match
# the library exactly. The jar's SHA-256 is pinned below; a version without a pinned checksum,
# a failed download or a checksum that does not match prints nothing, and the build compiles
# RocksDB from source as before (the same crate features either way: only the library's origin
# differs). `WEIR_ROCKSDB=source` asks for that compile.
#
# It lands in ${WEIR_CACHE:-~/.cache/weir}/rocksdb-VERSION/lib, outside the clone, extracted
# into a temporary directory and renamed into place, so a crash mid-way leaves nothing that
# looks installed. scripts/cargo.sh points librocksdb-sys at it (ROCKSDB_LIB_DIR) and the
# linker's run path at it (LD_RUN_PATH), so the binaries find it without LD_LIBRARY_PATH.
set -euo pipefail
cd "$(dirname "$0")/.."

# rocksdbjni-VERSION.jar's SHA-256, as Maven Central served it (its .sha1 checked as well when
# pinned).
declare -A SHA256=(
  [11.8.1]=628ed387887f4a431df480857954df2a28b4389bfe24858ccdec611cabf65dbf
)
REPOSITORY="${WEIR_MAVEN_REPOSITORY:-https://repo1.maven.org/maven2}"

cmd="${1:?usage: rocksdb-lib.sh dir}"
[ "$cmd" = dir ] || { echo "usage: rocksdb-lib.sh dir" >&2; exit 2; }

if [ "${WEIR_ROCKSDB:-}" = source ]; then
  exit 0
fi
case "$(uname -s)-$(uname -m)" in
  Linux-x86_64) ;;
  *) echo "rocksdb: no prebuilt library for $(uname -s)-$(uname -m): compiling RocksDB" >&2; exit 0 ;;
esac
if ldd --version 2>&1 | grep -qi musl; then
  echo "rocksdb: no prebuilt library for musl: compiling RocksDB" >&2
  exit 0
fi

# 11.8.1 from librocksdb-sys's `0.19.0+11.8.1`.
version="$(awk '/^name = "librocksdb-sys"$/ { getline; gsub(/version = |"/, ""); print; exit }' Cargo.lock)"
version="${version#*+}"
sha="${SHA256[$version]:-}"
if [ -z "$sha" ]; then
  echo "rocksdb: no pinned checksum for rocksdbjni $version (add it to scripts/rocksdb-lib.sh):" \
    "compiling RocksDB" >&2
  exit 0
fi

cache="${WEIR_CACHE:-${HOME:-/root}/.cache/weir}"
root="$cache/rocksdb-$version"
if [ -f "$root/lib/librocksdb.so" ]; then
  echo "$root/lib"
  exit 0
fi

mkdir -p "$cache"
(
  flock 9
  [ -f "$root/lib/librocksdb.so" ] && exit 0
  echo "rocksdb: fetching RocksDB $version, prebuilt (rocksdbjni from Maven Central, once)" >&2
  work="$(mktemp -d "$cache/rocksdb-fetch.XXXXXX")"
  chmod 755 "$work"
  trap 'rm -rf "$work"' EXIT
  # Python, not curl or unzip: the machine has it whichever packages are installed yet.
  python3 - "$REPOSITORY/org/rocksdb/rocksdbjni/$version/rocksdbjni-$version.jar" \
      "$sha" "$work" <<'EOF'
import hashlib, os, shutil, sys, urllib.request, zipfile

url, want, work = sys.argv[1:4]
jar = os.path.join(work, "rocksdbjni.jar")
with urllib.request.urlopen(url, timeout=60) as answer, open(jar, "wb") as out:
    shutil.copyfileobj(answer, out, 1 << 20)
digest = hashlib.sha256()
with open(jar, "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
        digest.update(block)
if digest.hexdigest() != want:
    sys.exit(f"rocksdb: {url} has SHA-256 {digest.hexdigest()}, not the pinned {want}")
os.makedirs(os.path.join(work, "lib"))
with zipfile.ZipFile(jar) as z, z.open("librocksdbjni-linux64.so") as so, \
        open(os.path.join(work, "lib", "librocksdb.so"), "wb") as out:
    shutil.copyfileobj(so, out, 1 << 20)
os.chmod(os.path.join(work, "lib", "librocksdb.so"), 0o755)
os.remove(jar)
EOF
  rm -rf "$root"
  mv "$work" "$root"
  trap - EXIT
) 9>"$cache/rocksdb.lock" || {
  echo "rocksdb: could not fetch the prebuilt library (above): compiling RocksDB" >&2
  exit 0
}
[ -f "$root/lib/librocksdb.so" ] && echo "$root/lib"
exit 0
