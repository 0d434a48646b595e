#!/usr/bin/env bash
# A throwaway Kafka-protocol broker for the tests: tansu (crates.io, Apache-2.0), one broker
# on a loopback port, its topics in a SQLite file of the caller's directory (so a restarted
# broker keeps them), with its pid and log there too.
#
#   scripts/kafka-broker.sh install           # build tansu into weir's cache if missing
#   scripts/kafka-broker.sh install-background  # the same, in the background
#   scripts/kafka-broker.sh start DIR PORT    # start (or restart) on DIR, wait until it answers
#   scripts/kafka-broker.sh stop DIR          # stop the broker started in DIR
#   scripts/kafka-broker.sh topic PORT NAME PARTITIONS   # create a topic
#
# Debian has no Kafka package and the JVM's Maven repository is out of reach here; tansu is a
# Kafka-compatible broker written in Rust that installs from crates.io. It is taken from PATH
# (`tansu`), else from ${WEIR_TANSU_ROOT:-$HOME/.cache/weir/tansu-0.6.0}, which `install`
# fills with `cargo install` (about 10 minutes of two cores, once; the build directory is
# removed afterwards). Only the SQLite storage engine is built.
set -euo pipefail
cmd="${1:?usage: kafka-broker.sh install | install-background | start DIR PORT | stop DIR | topic PORT NAME PARTITIONS}"
version="0.6.0"
root="${WEIR_TANSU_ROOT:-$HOME/.cache/weir/tansu-$version}"

find_tansu() {
  if command -v tansu >/dev/null 2>&1; then
    command -v tansu
  elif [ -x "$root/bin/tansu" ]; then
    echo "$root/bin/tansu"
  else
    return 1
  fi
}

install() {
  find_tansu >/dev/null && return 0
  command -v cargo >/dev/null || { echo "cargo not found: install Rust first" >&2; exit 1; }
  mkdir -p "$root"
  # One build at a time: a second `install` waits for the first (see `install-background`).
  exec 9>"$root.lock"
  flock 9
  find_tansu >/dev/null && return 0
  echo "building tansu $version into $root (the Kafka-protocol broker the tests use; once)" >&2
  build="$root.build"
  # Its own target directory: it shares nothing with weir's build, and is removed once the
  # binary is installed.
  CARGO_TARGET_DIR="$build" cargo install tansu --version "$version" --locked \
    --features libsql --root "$root" --quiet >&2
  rm -rf "$build"
  find_tansu >/dev/null || { echo "tansu is still missing after cargo install" >&2; exit 1; }
}

# Whether something accepts TCP connections on the port.
listening() {
  python3 - "$1" <<'EOF'
import socket, sys
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=1).close()
except OSError:
    sys.exit(1)
EOF
}

case "$cmd" in
  install)
    install
    ;;
  install-background)
    # Starts the build, if one is needed, at low priority and returns: `make test` begins it
    # before compiling weir, whose build leaves a core idle at times, and waits for it with
    # `install` before the tests run.
    find_tansu >/dev/null && exit 0
    mkdir -p "$(dirname "$root")"
    nohup nice -n 10 "$0" install >"$root.log" 2>&1 </dev/null &
    ;;
  start)
    dir="${2:?missing DIR}"
    port="${3:?missing PORT}"
    install
    tansu="$(find_tansu)"
    mkdir -p "$dir"
    url="tcp://127.0.0.1:$port"
    # tansu reads the database's path relative to its working directory.
    (cd "$dir" && exec "$tansu" broker --listener-url "$url" --advertised-listener-url "$url" \
      --storage-engine "sqlite://tansu.db" </dev/null >>broker.log 2>&1) &
    echo $! >"$dir/pid"
    for _ in $(seq 1 300); do
      if listening "$port"; then
        exit 0
      fi
      if ! kill -0 "$(cat "$dir/pid")" 2>/dev/null; then
        echo "tansu exited:" >&2; cat "$dir/broker.log" >&2; exit 1
      fi
      sleep 0.1
    done
    echo "tansu did not listen on 127.0.0.1:$port within 30 s:" >&2
    cat "$dir/broker.log" >&2
    kill "$(cat "$dir/pid")" 2>/dev/null || true
    exit 1
    ;;
  topic)
    port="${2:?missing PORT}"
    name="${3:?missing NAME}"
    partitions="${4:?missing PARTITIONS}"
    tansu="$(find_tansu)"
    "$tansu" topic create "$name" --partitions "$partitions" --broker "tcp://127.0.0.1:$port" >&2
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
