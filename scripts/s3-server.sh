#!/usr/bin/env bash
# A throwaway S3-compatible server for the tests: moto_server (PyPI `moto[server]`, in memory)
# on a loopback port, with its pid and log in a directory of the caller's.
#
#   scripts/s3-server.sh install                 # install moto[server] if it is missing
#   scripts/s3-server.sh start DIR PORT [BUCKET...]  # start, wait until it answers, create buckets
#   scripts/s3-server.sh stop DIR                # stop the server started in DIR
#
# moto_server is taken from PATH, else from a virtualenv of weir's own
# (${WEIR_MOTO_VENV:-$HOME/.cache/weir/moto}), which `install` creates when moto_server is on
# neither: a fresh machine needs nothing but python3 (`make test` installs it).
set -euo pipefail
cmd="${1:?usage: s3-server.sh install | start DIR PORT [BUCKET...] | stop DIR}"
venv="${WEIR_MOTO_VENV:-$HOME/.cache/weir/moto}"

find_moto() {
  if command -v moto_server >/dev/null 2>&1; then
    command -v moto_server
  elif [ -x "$venv/bin/moto_server" ]; then
    echo "$venv/bin/moto_server"
  else
    return 1
  fi
}

install() {
  find_moto >/dev/null && return 0
  command -v python3 >/dev/null || { echo "python3 not found: install it (make test does)" >&2; exit 1; }
  echo "installing moto[server] into $venv (the S3-compatible server the tests use)" >&2
  mkdir -p "$(dirname "$venv")"
  python3 -m venv "$venv" >&2
  "$venv/bin/pip" install --quiet --disable-pip-version-check 'moto[server]>=5,<6' >&2
  find_moto >/dev/null || { echo "moto_server is still missing after installing moto[server]" >&2; exit 1; }
}

# Sends an HTTP request to the server; fails unless it answers below 500.
request() {
  python3 - "$1" "$2" <<'EOF'
import sys, urllib.request, urllib.error
method, url = sys.argv[1], sys.argv[2]
try:
    urllib.request.urlopen(urllib.request.Request(url, method=method), timeout=5)
except urllib.error.HTTPError as e:
    sys.exit(0 if e.code < 500 else 1)
except Exception:
    sys.exit(1)
EOF
}

case "$cmd" in
  install)
    install
    ;;
  start)
    dir="${2:?missing DIR}"
    port="${3:?missing PORT}"
    shift 3
    install
    moto="$(find_moto)"
    mkdir -p "$dir"
    "$moto" -H 127.0.0.1 -p "$port" </dev/null >"$dir/server.log" 2>&1 &
    echo $! >"$dir/pid"
    for _ in $(seq 1 300); do
      if request GET "http://127.0.0.1:$port/"; then
        for bucket in "$@"; do
          request PUT "http://127.0.0.1:$port/$bucket" \
            || { echo "could not create bucket $bucket" >&2; cat "$dir/server.log" >&2; exit 1; }
        done
        exit 0
      fi
      if ! kill -0 "$(cat "$dir/pid")" 2>/dev/null; then
        echo "moto_server exited:" >&2; cat "$dir/server.log" >&2; exit 1
      fi
      sleep 0.1
    done
    echo "moto_server did not answer on 127.0.0.1:$port within 30 s:" >&2
    cat "$dir/server.log" >&2
    kill "$(cat "$dir/pid")" 2>/dev/null || true
    exit 1
    ;;
  stop)
    dir="${2:?missing DIR}"
    [ -f "$dir/pid" ] || exit 0
    pid="$(cat "$dir/pid")"
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do
      kill -0 "$pid" 2>/dev/null || { rm -f "$dir/pid"; exit 0; }
      sleep 0.1
    done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$dir/pid"
    ;;
  *)
    echo "unknown command: $cmd" >&2; exit 2 ;;
esac
