#!/usr/bin/env bash
# schemathesis (PyPI: an OpenAPI-driven fuzzer) against a live `weir serve`, so that the API's
# document (/api/v1/openapi.json) and the server cannot drift apart: every request the
# document calls valid must be accepted (or answered 404/409/429 for a job or a state that is
# not there or not in that state), every answer must be one the document lists, with its
# media type, headers and schema, and nothing may answer 5xx.
#
#   scripts/schemathesis.sh install        # create the virtualenv if missing
#   scripts/schemathesis.sh run WEIR       # serve with the binary WEIR on a free port, fuzz it
#
# schemathesis is installed, at the version pinned below, into a virtualenv of weir's own
# (${WEIR_SCHEMATHESIS_VENV:-$HOME/.cache/weir/schemathesis-VERSION}), outside the clone,
# the first time: a fresh machine needs nothing but python3 with venv (`make test` installs
# them). The server runs in a throwaway data directory with its catalog in memory, hosting
# jobs/examples/auction-state.yaml (keyed state to look up, checkpoints to list), so that
# job 1 exists and some requests reach past "no such job" (scripts/schemathesis.toml points
# the state lookups and tails at it). SCHEMATHESIS_EXAMPLES (default 100) is the examples per
# operation of the fuzzing phase, after the coverage phase's boundary values: about 40 s on two
# cores. One worker: hypothesis's source parsing is not thread-safe on Python 3.11 (an
# occasional "AST constructor recursion depth mismatch" with two).
set -euo pipefail
cmd="${1:?usage: schemathesis.sh install | run WEIR}"
version=4.32.5
venv="${WEIR_SCHEMATHESIS_VENV:-$HOME/.cache/weir/schemathesis-$version}"
here="$(cd "$(dirname "$0")" && pwd)"

install() {
  if [ -x "$venv/bin/schemathesis" ] && "$venv/bin/schemathesis" --version 2>/dev/null | grep -q "$version"; then
    return 0
  fi
  command -v python3 >/dev/null || { echo "python3 not found: install it (make test does)" >&2; exit 1; }
  echo "installing schemathesis $version into $venv (the API fuzzer the tests run)" >&2
  rm -rf "$venv"
  mkdir -p "$(dirname "$venv")"
  python3 -m venv "$venv" >&2 || { rm -rf "$venv"; echo "could not create a virtualenv at $venv (apt-get install python3-venv)" >&2; exit 1; }
  "$venv/bin/pip" install --quiet --disable-pip-version-check "schemathesis==$version" >&2 \
    || { rm -rf "$venv"; echo "pip could not install schemathesis $version from PyPI into $venv" >&2; exit 1; }
}

case "$cmd" in
  install)
    install
    ;;
  run)
    weir="${2:?missing the weir binary}"
    install
    dir="$(mktemp -d)"
    pid=""
    # The server stops its job and exits on SIGTERM; one that has not within 20 s is killed.
    cleanup() {
      if [ -n "$pid" ]; then
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 1 200); do
          kill -0 "$pid" 2>/dev/null || break
          sleep 0.1
        done
        kill -9 "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
      fi
      rm -rf "$dir"
    }
    trap cleanup EXIT
    port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
    base="http://127.0.0.1:$port"
    WEIR_DATA_DIR="$dir/data" "$weir" serve "$here/../jobs/examples/auction-state.yaml" \
      --catalog none --listen "127.0.0.1:$port" \
      --set sources.nexmark.rate=2000 --set checkpoint.interval=1s \
      </dev/null >"$dir/serve.log" 2>&1 &
    pid=$!
    for _ in $(seq 1 300); do
      if python3 -c "import urllib.request; urllib.request.urlopen('$base/api/v1/openapi.json', timeout=2)" 2>/dev/null; then
        break
      fi
      kill -0 "$pid" 2>/dev/null || { echo "weir serve exited:" >&2; cat "$dir/serve.log" >&2; exit 1; }
      sleep 0.1
    done
    # Every check but the three that need what this API has not: authorization per object
    # (one token sees everything), auth that can be ignored (none is asked on loopback) and
    # resources that live on after a DELETE (there is none).
    status=0
    # From the throwaway directory, so that nothing it might write lands in the clone.
    cd "$dir"
    "$venv/bin/schemathesis" --config-file "$here/schemathesis.toml" run "$base/api/v1/openapi.json" \
      --checks all \
      --exclude-checks ignored_auth,object_level_authorization,use_after_free \
      --phases examples,coverage,fuzzing \
      --max-examples "${SCHEMATHESIS_EXAMPLES:-100}" \
      --seed 51 --workers 1 --request-timeout 20 \
      --suppress-health-check too_slow,filter_too_much \
      --generation-database none --no-color \
      || status=$?
    if [ "$status" -ne 0 ]; then
      echo "--- weir serve's log ($dir/serve.log):" >&2
      tail -n 50 "$dir/serve.log" >&2
    fi
    exit "$status"
    ;;
  *)
    echo "unknown command: $cmd" >&2; exit 2 ;;
esac
