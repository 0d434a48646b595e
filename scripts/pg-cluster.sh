#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for the tests: its own data directory and a loopback port,
# trust authentication, no fsync (nothing in it outlives the test).
#
#   scripts/pg-cluster.sh start DIR PORT   # initdb DIR/data if needed, then start; waits until ready
#   scripts/pg-cluster.sh stop DIR         # fast shutdown; waits until stopped
#
# The server refuses to run as root, so as root the cluster belongs to the `postgres` user
# (created by Debian's postgresql package, which `make test` installs when missing).
set -euo pipefail
cmd="${1:?usage: pg-cluster.sh start DIR PORT | stop DIR}"
dir="${2:?missing DIR}"
bin="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)"
[ -x "$bin/pg_ctl" ] || { echo "PostgreSQL server binaries not found under /usr/lib/postgresql (install the postgresql package)" >&2; exit 1; }
as_owner=()
if [ "$(id -u)" -eq 0 ]; then
  as_owner=(runuser -u postgres --)
fi
case "$cmd" in
  start)
    port="${3:?missing PORT}"
    mkdir -p "$dir"
    [ "$(id -u)" -eq 0 ] && chown postgres "$dir"
    if [ ! -f "$dir/data/PG_VERSION" ]; then
      "${as_owner[@]}" "$bin/initdb" -D "$dir/data" -A trust -U postgres --no-sync -E UTF8 >"$dir/initdb.log" 2>&1 \
        || { cat "$dir/initdb.log" >&2; exit 1; }
    fi
    "${as_owner[@]}" "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
      -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off" \
      start >/dev/null || { cat "$dir/server.log" >&2; exit 1; }
    ;;
  stop)
    "${as_owner[@]}" "$bin/pg_ctl" -D "$dir/data" -m fast -w -t 60 stop >/dev/null
    ;;
  *)
    echo "unknown command: $cmd" >&2; exit 2 ;;
esac
