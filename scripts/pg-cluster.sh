#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for the tests: its own data directory and a loopback port,
# trust authentication, no fsync (nothing in it outlives the test), `wal_level=logical` for the
# CDC source.
#
#   scripts/pg-cluster.sh start DIR PORT       # initdb DIR/data if needed, then start; waits until ready
#   scripts/pg-cluster.sh start DIR PORT ssl   # the same, TCP clients only over TLS (see below)
#   scripts/pg-cluster.sh stop DIR             # fast shutdown; waits until stopped
#
# With `ssl`, DIR/tls holds a throwaway certificate authority (ca.pem) and a server certificate
# it signed for IP 127.0.0.1 only (not the name `localhost`), made with openssl; TCP connections
# without TLS are rejected by the cluster's pg_hba.conf, so a client that gets in used TLS.
#
# The server refuses to run as root, so as root the cluster belongs to the `postgres` user
# (created by Debian's postgresql package, which `make test` installs when missing).
set -euo pipefail
cmd="${1:?usage: pg-cluster.sh start DIR PORT [ssl] | stop DIR}"
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
    tls_opts=""
    mkdir -p "$dir"
    if [ "${4:-}" = "ssl" ]; then
      tls="$dir/tls"
      if [ ! -f "$tls/server.key" ]; then
        command -v openssl >/dev/null || { echo "openssl not found (install the openssl package)" >&2; exit 1; }
        mkdir -p "$tls"
        openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
          -subj "/CN=weir test CA" -keyout "$tls/ca.key" -out "$tls/ca.pem" 2>/dev/null
        openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
          -subj "/CN=127.0.0.1" -keyout "$tls/server.key" -out "$tls/server.csr" 2>/dev/null
        printf 'subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n' >"$tls/server.ext"
        openssl x509 -req -in "$tls/server.csr" -CA "$tls/ca.pem" -CAkey "$tls/ca.key" \
          -CAcreateserial -days 2 -extfile "$tls/server.ext" -out "$tls/server.pem" 2>/dev/null
        printf 'local all all trust\nhostssl all all 127.0.0.1/32 trust\nhostnossl all all 0.0.0.0/0 reject\n' \
          >"$tls/pg_hba.conf"
        chmod 600 "$tls/server.key"
        [ "$(id -u)" -eq 0 ] && chown -R postgres "$tls"
      fi
      tls_opts="-c ssl=on -c ssl_cert_file=$tls/server.pem -c ssl_key_file=$tls/server.key -c hba_file=$tls/pg_hba.conf"
    fi
    [ "$(id -u)" -eq 0 ] && chown postgres "$dir"
    if [ ! -f "$dir/data/PG_VERSION" ]; then
      "${as_owner[@]}" "$bin/initdb" -D "$dir/data" -A trust -U postgres --no-sync -E UTF8 >"$dir/initdb.log" 2>&1 \
        || { cat "$dir/initdb.log" >&2; exit 1; }
    fi
    "${as_owner[@]}" "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
      -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c wal_level=logical $tls_opts" \
      start >/dev/null || { cat "$dir/server.log" >&2; exit 1; }
    ;;
  stop)
    "${as_owner[@]}" "$bin/pg_ctl" -D "$dir/data" -m fast -w -t 60 stop >/dev/null
    ;;
  *)
    echo "unknown command: $cmd" >&2; exit 2 ;;
esac
