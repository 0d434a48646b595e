#!/usr/bin/env bash
# What the PostgreSQL sink's staging fence costs (issue 51, point 4): `COPY` of the same rows
# into a staging table as the sink makes it, with and without the constraint that admits only
# the current run's tags (`weir_stage_run`), the two arms interleaved, on a throwaway cluster
# (scripts/pg-cluster.sh: fsync off, as `make bench` runs the sink's own benchmark).
#
#   scripts/bench-stage-fence.sh [ROWS] [ROUNDS]     # defaults: 1000000 rows, 5 rounds
#
# Prints each arm's median rows/s and their ratio. FENCE=EXPR measures another check in the
# constraint's place (`FENCE='"_weir_batch" >= 0'`: what a check on a bigint column costs).
set -euo pipefail
cd "$(dirname "$0")/.."
rows="${1:-1000000}"
rounds="${2:-5}"
dir="$(mktemp -d)"
chmod 755 "$dir"
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
trap 'scripts/pg-cluster.sh stop "$dir" >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
scripts/pg-cluster.sh start "$dir" "$port" >/dev/null
psql=(psql -h 127.0.0.1 -p "$port" -U postgres -d postgres -At -v ON_ERROR_STOP=1 -q)
run=0123456789abcdef
# The rows a subtask stages: four columns of q5's shape, then the tag and the batch number.
python3 - "$rows" "$run" >"$dir/rows.csv" <<'EOF'
import sys
rows, run = int(sys.argv[1]), sys.argv[2]
out = sys.stdout
for i in range(rows):
    out.write(f"{i},{i % 997},2026-12-07 10:00:{i % 60:02d},2026-12-07 10:00:{(i + 10) % 60:02d},{run}-0-0-{i // 5000},{i // 5000}\n")
EOF
chmod 644 "$dir/rows.csv"
columns='auction bigint, num bigint, starttime timestamp, endtime timestamp,
  "_weir_delete" boolean NOT NULL DEFAULT false, "_weir_txn" text NOT NULL,
  "_weir_batch" bigint NOT NULL, "_weir_seq" bigserial'
copy_cols='(auction, num, starttime, endtime, "_weir_txn", "_weir_batch")'
time_copy() { # table -> seconds
  "${psql[@]}" <<SQL | awk '/^Time:/ { print $2 / 1000 }'
\timing on
COPY $1 $copy_cols FROM '$dir/rows.csv' (FORMAT csv);
SQL
}
plain=()
fenced=()
for ((r = 0; r < rounds; r++)); do
  "${psql[@]}" -c "SET client_min_messages = warning; DROP TABLE IF EXISTS plain; CREATE TABLE plain ($columns);
    DROP TABLE IF EXISTS fenced; CREATE TABLE fenced ($columns,
    CONSTRAINT weir_stage_run CHECK (${FENCE:-left(\"_weir_txn\", 17) = '$run-'}))"
  if ((r % 2 == 0)); then
    plain+=("$(time_copy plain)"); fenced+=("$(time_copy fenced)")
  else
    fenced+=("$(time_copy fenced)"); plain+=("$(time_copy plain)")
  fi
done
python3 - "$rows" "${plain[*]}" "${fenced[*]}" <<'EOF'
import statistics, sys
rows = int(sys.argv[1])
plain = [float(x) for x in sys.argv[2].split()]
fenced = [float(x) for x in sys.argv[3].split()]
p, f = rows / statistics.median(plain), rows / statistics.median(fenced)
print(f"| arm | rows | median rows/s | ÷ no fence |")
print(f"|---|---:|---:|---:|")
print(f"| staging table, no fence | {rows:,} | {p:,.0f} | 1.00× |")
print(f"| staging table with `weir_stage_run` | {rows:,} | {f:,.0f} | {f / p:.2f}× |")
EOF
