#!/usr/bin/env bash
# A throwaway NATS server with JetStream for the tests and benchmarks: Debian's `nats-server`
# (`make test` installs the package), one server on a loopback port, its JetStream store, pid
# and log in the caller's directory (so a restarted server keeps its streams).
#
#   scripts/nats-server.sh start DIR PORT [CONFIG]   # start (or restart) on DIR, wait until it answers
#   scripts/nats-server.sh stop DIR                  # stop the server started in DIR
#   scripts/nats-server.sh kill DIR                  # SIGKILL it (a crash, for fault tests)
#   scripts/nats-server.sh answers PORT              # exit 0 when a server answers on 127.0.0.1:PORT
#
# CONFIG is a server configuration file (accounts, subject mappings with `partition(n, ...)`,
# users); the command line's address, port and store take precedence over it.
set -euo pipefail
cmd="${1:?usage: nats-server.sh start DIR PORT [CONFIG] | stop DIR | kill DIR | answers PORT}"

find_server() {
  if command -v nats-server >/dev/null 2>&1; then
    command -v nats-server
  elif [ -x /usr/sbin/nats-server ]; then
    echo /usr/sbin/nats-server
  else
    echo "nats-server not found: install Debian's nats-server package (make test does)" >&2
    return 1
  fi
}

# Whether a NATS server answers on the port: it greets every connection with `INFO`.
answers() {
  python3 - "$1" <<'EOF'
import socket, sys
try:
    s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=1)
    s.settimeout(1)
    greeting = s.recv(4)
    s.close()
    sys.exit(0 if greeting == b"INFO" else 1)
except OSError:
    sys.exit(1)
EOF
}

case "$cmd" in
  answers)
    answers "${2:?missing PORT}"
    ;;
  start)
    dir="${2:?missing DIR}"
    port="${3:?missing PORT}"
    config="${4:-}"
    server="$(find_server)"
    mkdir -p "$dir/store"
    args=(-a 127.0.0.1 -p "$port" -js -sd "$dir/store" -l "$dir/server.log")
    if [ -n "$config" ]; then
      args=(-c "$config" "${args[@]}")
    fi
    "$server" "${args[@]}" </dev/null >>"$dir/server.out" 2>&1 &
    echo $! >"$dir/pid"
    for _ in $(seq 1 300); do
      if answers "$port"; then
        exit 0
      fi
      if ! kill -0 "$(cat "$dir/pid")" 2>/dev/null; then
        echo "nats-server exited:" >&2; cat "$dir/server.out" "$dir/server.log" >&2 2>/dev/null; exit 1
      fi
      sleep 0.1
    done
    echo "nats-server did not answer on 127.0.0.1:$port within 30 s:" >&2
    cat "$dir/server.log" >&2 2>/dev/null || true
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
  kill)
    dir="${2:?missing DIR}"
    [ -f "$dir/pid" ] || exit 0
    pid="$(cat "$dir/pid")"
    kill -9 "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.05
    done
    rm -f "$dir/pid"
    ;;
  *)
    echo "unknown command: $cmd" >&2; exit 2 ;;
esac
