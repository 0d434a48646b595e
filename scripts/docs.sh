#!/usr/bin/env bash
# The book in docs/ (mdBook): its generated reference pages, its build, and the checks that
# `make test` runs on it.
#
#   scripts/docs.sh reference [WEIR]   # write docs/src/reference/ with `WEIR schema --markdown`
#   scripts/docs.sh build [WEIR]       # the reference, then the book into docs/book/ (`make docs`)
#   scripts/docs.sh check [WEIR]       # `make test`: the reference is current, every internal
#                                      # link resolves, every job file in the docs validates, and
#                                      # the book builds (into a temporary directory)
#   scripts/docs.sh mdbook             # print the path of mdbook, installing it if missing
#
# WEIR is the weir binary (default: target/release/weir, or $CARGO_TARGET_DIR/release/weir).
#
# The reference pages are generated but committed: the book reads as Markdown without a build,
# a change of a doc comment shows in review as a change of the reference, and the check (and
# the test `docs` of tests/it) fails while they are stale, so they cannot drift from the code.
#
# mdBook comes from crates.io, built once into ${WEIR_MDBOOK_ROOT:-~/.cache/weir/mdbook-VERSION}
# outside the clone, with `cargo install --locked`: without its `serve` and `watch` features
# (the book is built, not served; that leaves out a web server's dependencies), at nice 10,
# in a target directory of its own under ~/.cache/weir that is removed afterwards. A few minutes
# of two cores, once per machine; an install already there is used as it is.
set -euo pipefail
cd "$(dirname "$0")/.."

MDBOOK_VERSION="0.5.4"
cmd="${1:?usage: docs.sh reference|build|check [WEIR] | mdbook}"
weir="${2:-${CARGO_TARGET_DIR:-target}/release/weir}"
cache="${HOME:-/root}/.cache/weir"
root="${WEIR_MDBOOK_ROOT:-$cache/mdbook-$MDBOOK_VERSION}"

mdbook() {
  local bin="$root/bin/mdbook"
  if [ ! -x "$bin" ]; then
    command -v cargo >/dev/null || { echo "cargo not found: it installs mdbook" >&2; exit 1; }
    mkdir -p "$cache"
    (
      flock 9
      if [ ! -x "$bin" ]; then
        echo "installing mdbook $MDBOOK_VERSION into $root (once; a few minutes)" >&2
        build="$(mktemp -d "$cache/mdbook-build.XXXXXX")"
        trap 'rm -rf "$build"' EXIT
        CARGO_TARGET_DIR="$build" nice -n 10 cargo install mdbook --locked \
          --version "$MDBOOK_VERSION" --root "$root" --no-default-features --features search \
          --quiet >&2
      fi
    ) 9>"$cache/mdbook.lock"
  fi
  echo "$bin"
}

need_weir() {
  [ -x "$weir" ] || { echo "no weir binary at $weir: build it first (make build)" >&2; exit 1; }
}

reference() {
  need_weir
  "$weir" schema --markdown --out docs/src/reference
}

case "$cmd" in
  mdbook)
    mdbook
    ;;
  reference)
    reference
    ;;
  build)
    reference
    "$(mdbook)" build docs
    echo "the book is in docs/book/: open docs/book/index.html" >&2
    ;;
  check)
    need_weir
    status=0
    tmp="$(mktemp -d)"
    trap 'rm -rf "$tmp"' EXIT
    "$weir" schema --markdown --out "$tmp/reference"
    if ! diff -ru docs/src/reference "$tmp/reference" >"$tmp/reference.diff"; then
      cat "$tmp/reference.diff" >&2
      echo "docs/src/reference is stale: run scripts/docs.sh reference and commit it" >&2
      status=1
    fi
    python3 scripts/check_docs.py links || status=1
    python3 scripts/check_docs.py jobs "$weir" || status=1
    if "$(mdbook)" build docs --dest-dir "$tmp/book" >"$tmp/mdbook.log" 2>&1 \
        && ! grep -q '\bERROR\b' "$tmp/mdbook.log"; then
      python3 scripts/check_docs.py html "$tmp/book" || status=1
    else
      cat "$tmp/mdbook.log" >&2
      echo "mdbook could not build the book" >&2
      status=1
    fi
    if [ "$status" -eq 0 ]; then echo "docs: the book builds; links, reference and job files check" >&2; fi
    exit "$status"
    ;;
  *)
    echo "usage: docs.sh reference|build|check [WEIR] | mdbook" >&2
    exit 2
    ;;
esac
