#!/usr/bin/env bash
# `make bench`'s Iceberg arm: Nexmark bids into an Iceberg table on the S3 test server (a SQLite
# catalog) beside the same job into the file sink, in the same sitting, alternating; then the
# table's files per checkpoint and their mean size (read by pyiceberg) and the cost of one
# catalog commit (the sink's own timing of each, from its debug log).
#
#   scripts/bench-iceberg.sh [WEIR] [EVENTS] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
weir="${1:-target/release/weir}"
events="${2:-20000000}"
rounds="${3:-2}"
scripts/pyiceberg.sh install
work="$(mktemp -d)"
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
trap 'scripts/s3-server.sh stop "$work/s3" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
scripts/s3-server.sh start "$work/s3" "$port" weir-bench
"${WEIR_PYICEBERG_VENV:-$HOME/.cache/weir/pyiceberg}/bin/python" scripts/bench_iceberg.py \
  "$weir" "$work" "http://127.0.0.1:$port" "$events" "$rounds"
