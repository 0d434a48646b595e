#!/usr/bin/env bash
# A/B of two weir binaries on the Nexmark YAML jobs from the generator: the runs alternate
# (base, new, base, new, ...) so the machine's load falls on both alike, and each arm keeps its
# best run. Prints a markdown table of events/s and new ÷ base.
#   scripts/ab-nexmark.sh BASE_WEIR NEW_WEIR [--events N] [--rounds N] [--queries q0,q1,...]
# Build the base binary from another commit into a directory of its own (with librocksdb.so
# beside it, as `make install` lays it out), e.g. from a `git worktree` of that commit.
set -euo pipefail
cd "$(dirname "$0")/.."
base=${1:?usage: $0 BASE_WEIR NEW_WEIR [--events N] [--rounds N] [--queries q0,...]}
new=${2:?usage: $0 BASE_WEIR NEW_WEIR [--events N] [--rounds N] [--queries q0,...]}
shift 2
events=3000000 rounds=5 queries=q0,q1,q2,q3,q4,q5,q7,q8,q9,q11
while [ $# -gt 0 ]; do
  case $1 in
    --events) events=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --queries) queries=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
rate() { # binary query -> events/s of one run
  "$1" run "jobs/nexmark/$2.yaml" --set "sources.nexmark.events=$events" 2>&1 |
    sed -n 's/.*events, \([0-9,]*\) events\/s.*/\1/p' | tr -d ,
}
echo "| query | base events/s | new events/s | new ÷ base |"
echo "|---|---:|---:|---:|"
for q in ${queries//,/ }; do
  best_base=0 best_new=0
  for _ in $(seq "$rounds"); do
    r=$(rate "$base" "$q"); [ -n "$r" ] && [ "$r" -gt "$best_base" ] && best_base=$r
    r=$(rate "$new" "$q"); [ -n "$r" ] && [ "$r" -gt "$best_new" ] && best_new=$r
  done
  [ "$best_base" -gt 0 ] && [ "$best_new" -gt 0 ] || { echo "$q: a run printed no rate" >&2; exit 1; }
  python3 -c "b, n = $best_base, $best_new; print(f'| $q | {b:,} | {n:,} | {n / b:.3f}× |')"
done
