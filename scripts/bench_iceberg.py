"""The Iceberg sink's benchmark (run by scripts/bench-iceberg.sh, which starts the S3 server)."""

import os
import re
import statistics
import subprocess
import sys
import time

from pyiceberg.catalog.sql import SqlCatalog

weir, work, endpoint, events, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
env = dict(os.environ, AWS_ENDPOINT=endpoint, AWS_ALLOW_HTTP="true", AWS_ACCESS_KEY_ID="test",
           AWS_SECRET_ACCESS_KEY="test", AWS_REGION="us-east-1",
           RUST_LOG="warn,weir_runtime::connectors::iceberg=debug")
base = open("jobs/examples/iceberg-bids.yaml").read().split("sinks:")[0]
base = base.replace("interval: 5s", "interval: 1s")


def job(name, sink):
    path = os.path.join(work, name + ".yaml")
    with open(path, "w") as f:
        f.write(base + "sinks:\n  lake:\n    from: euros\n" + sink)
    return path


def run(path, data):
    started = time.monotonic()
    p = subprocess.run([weir, "run", path, "--quiet", "--set", f"sources.nexmark.events={events}"],
                       env=dict(env, WEIR_DATA_DIR=data), capture_output=True, text=True)
    elapsed = time.monotonic() - started
    if p.returncode != 0:
        sys.exit(f"{path} failed:\n{p.stderr}")
    return elapsed, p.stderr


rows_file = rows_ice = 0
times = {"file": [], "iceberg": []}
commits = []
files_per_checkpoint = []
sizes = []
for r in range(rounds):
    out = os.path.join(work, f"files-{r}")
    fj = job(f"file-{r}", f"    kind: file\n    path: {out}\n")
    catalog = os.path.join(work, f"catalog-{r}.db")
    ij = job(f"iceberg-{r}", "    kind: iceberg\n"
             f"    catalog: {{uri: \"sqlite://{catalog}\"}}\n"
             f"    warehouse: s3://weir-bench/lake-{r}\n"
             "    namespace: nexmark\n    table: bids\n    partition-by: [\"hour(dateTime)\"]\n")
    for kind, path in (("file", fj), ("iceberg", ij)) if r % 2 == 0 else (("iceberg", ij), ("file", fj)):
        elapsed, log = run(path, os.path.join(work, f"data-{kind}-{r}"))
        times[kind].append(elapsed)
        if kind == "iceberg":
            plain = re.sub(r"\x1b\[[0-9;]*m", "", log)
            commits += [int(m) / 1000 for m in re.findall(r"micros=(\d+)", plain)]
    rows_file = sum(sum(1 for _ in open(os.path.join(out, n))) for n in os.listdir(out) if n.startswith("part-"))
    table = SqlCatalog("weir", uri=f"sqlite:///{catalog}", warehouse=f"s3://weir-bench/lake-{r}",
                       **{"s3.endpoint": endpoint, "s3.access-key-id": "test",
                          "s3.secret-access-key": "test", "s3.region": "us-east-1"}).load_table("nexmark.bids")
    rows_ice = table.scan().count() if hasattr(table.scan(), "count") else len(table.scan().to_arrow())
    for s in table.snapshots():
        p = s.summary.additional_properties
        n = int(p.get("added-data-files", 0))
        files_per_checkpoint.append(n)
        if n:
            sizes.append(int(p.get("added-files-size", 0)) / n)

assert rows_file == rows_ice, f"the file sink wrote {rows_file} rows and the table holds {rows_ice}"
best = {k: min(v) for k, v in times.items()}
print(f"\nweir bench iceberg: Nexmark bids ({events:,} events, {rows_ice:,} rows, parallelism 2, "
      f"checkpoints every 1 s, partitioned by hour) into Iceberg on the S3 test server (moto), "
      f"a SQLite catalog; best of {rounds} alternating rounds")
print("| sink | seconds | rows/s | vs file sink |")
print("|---|---:|---:|---:|")
for k in ("file", "iceberg"):
    print(f"| {k} | {best[k]:.2f} | {rows_ice / best[k]:,.0f} | {best['file'] / best[k]:.2f}x |")
commits.sort()
print(f"\n| files per checkpoint (mean / max) | mean file size | catalog commit p50 / p99 / max | commits |")
print("|---:|---:|---:|---:|")
p = lambda q: commits[min(len(commits) - 1, int(q * len(commits)))]
print(f"| {statistics.mean(files_per_checkpoint):.1f} / {max(files_per_checkpoint)} | "
      f"{statistics.mean(sizes) / 1e6:.2f} MB | {p(0.5):.1f} / {p(0.99):.1f} / {commits[-1]:.1f} ms | {len(commits)} |")
