#!/usr/bin/env python3
"""Failover time of a weir fleet (issue 22), for `make bench-fleet`.

Three `weir serve` processes share a throwaway PostgreSQL catalog (scripts/pg-cluster.sh) and
keep checkpoints on a throwaway S3 server (scripts/s3-server.sh, moto). One stateful job runs
on RocksDB, checkpointing every second, its state grown to the size asked for. Then, again and
again, the server running it is SIGKILLed (and started again, so there are always three), and
the job's way back is timed in three parts, polling the API every 20 ms:

- lease expiry: from the kill until another server holds the job's lease (the fleet view);
- restore: from there until the job runs again (its run count goes up, state `running`);
- first checkpoint: from there until the new run has completed a checkpoint.

The total (kill to the moved job's first new checkpoint) is what the issue asks for. Prints
p50 and p99 per part and state size; the lease time is a setting (`--lease-ttl`), so the
expiry part is mostly that setting.

    scripts/bench_fleet.py WEIR [--kills 20] [--state-mb 10,1024] [--lease-ttl 3s]
                           [--min-state-mib 1024]
"""

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def http(method, url, body=None, content_type=None, timeout=30):
    data = body.encode() if isinstance(body, str) else body
    req = urllib.request.Request(url, data=data, method=method)
    if content_type:
        req.add_header("Content-Type", content_type)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")
    except (urllib.error.URLError, ConnectionError, TimeoutError, socket.timeout):
        return None, None


def wait(what, probe, within=120.0, every=0.02):
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        got = probe()
        if got:
            return got
        time.sleep(every)
    sys.exit(f"bench-fleet: {what} did not happen within {within:.0f} s")


# The job: bids folded into a bounded key space (`keys` keys), a count, the top price and the
# latest URL per key, on RocksDB: the state grows until every key was seen, then stays.
JOB = """\
name: fleet-state-{run}
sources:
  nexmark:
    kind: nexmark
    rate: {rate}
transforms:
  keyed:
    kind: map
    from: nexmark.bid
    columns:
      k: (auction * 1000003 + bidder) % {keys}
      price: price
      url: url
      dateTime: dateTime
  by-key:
    kind: key-by
    from: keyed
    keys: [k]
  per-key:
    kind: aggregate
    from: by-key
    aggregates:
      bids: count(*)
      top: max(price)
      last_url: max_by(url, dateTime)
sinks:
  out:
    kind: blackhole
    from: per-key
state:
  backend: rocksdb
checkpoint:
  interval: 1s
  storage:
    url: s3://weir-fleet/{run}
    endpoint: {s3}
    allow-http: true
    region: us-east-1
    access-key-id: weir-bench-key
    secret-access-key: weir-bench-secret
"""


class Server:
    def __init__(self, weir, work, n, catalog, s3, lease):
        self.weir, self.work, self.n = weir, work, n
        self.catalog, self.s3, self.lease = catalog, s3, lease
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.proc = None

    def start(self):
        log = open(os.path.join(self.work, f"serve-{self.n}.log"), "ab")
        env = dict(os.environ, WEIR_DATA_DIR=os.path.join(self.work, f"data-{self.n}"),
                   RUST_LOG="warn")
        env.pop("WEIR_TOKEN", None)
        self.proc = subprocess.Popen(
            [self.weir, "serve", "--listen", f"127.0.0.1:{self.port}", "--catalog", self.catalog,
             "--advertise", self.base, "--lease-ttl", self.lease, "--allow-endpoint", self.s3],
            cwd=self.work, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=log)
        wait(f"server {self.n} to answer", lambda: http("GET", self.base + "/api/v1/fleet")[0] == 200,
             within=60)

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()


def percentile(values, p):
    s = sorted(values)
    if not s:
        return float("nan")
    k = min(len(s) - 1, max(0, int(round(p / 100.0 * (len(s) - 1)))))
    return s[k]


def fleet_job(server, job):
    status, view = http("GET", server.base + "/api/v1/fleet")
    if status != 200:
        return None
    for j in view["jobs"]:
        if j["id"] == job:
            return j
    return None


def measure(weir, work, catalog, s3, lease, state_mb, kills, rate, min_mib):
    servers = [Server(weir, work, n, catalog, s3, lease) for n in range(3)]
    for s in servers:
        s.start()
    try:
        run = f"{state_mb}mb-{int(time.time())}"
        # About 100 bytes a key in RocksDB (key, three accumulators, a URL).
        keys = max(1000, state_mb * 10_000)
        status, job = http("POST", servers[0].base + "/api/v1/jobs",
                           JOB.format(rate=rate, s3=s3, run=run, keys=keys), "application/yaml")
        if status != 201:
            sys.exit(f"bench-fleet: the job was refused: {job}")
        job_id = job["id"]
        started = time.monotonic()
        sizes = []

        def grown():
            # Until the key space is covered (the checkpoint size grew less than 2 % in 10 s)
            # and the state is at least `min_mib` (compactions can pause the growth before).
            s, c = http("GET", servers[0].base + f"/api/v1/jobs/{job_id}/checkpoints")
            latest = (c or {}).get("latest") if s == 200 else None
            sizes.append((latest or {}).get("bytes") or 0)
            if sizes[-1] < min_mib * 2**20:
                return None
            if len(sizes) > 10 and sizes[-11] > 0 and sizes[-1] < sizes[-11] * 1.02:
                return sizes[-1]
            if min_mib and sizes[-1] >= min_mib * 2**20:
                return sizes[-1]
            return None

        size = wait(f"the state to stop growing ({keys} keys)", grown, within=3600, every=1.0)
        print(f"  state {size / 2**20:.1f} MiB after {time.monotonic() - started:.0f} s",
              file=sys.stderr)
        parts = {"lease expiry": [], "restore": [], "first checkpoint": [], "total": []}
        for k in range(kills):
            before = wait("the job to have a server",
                          lambda: (lambda j: j if j and j.get("server") else None)(
                              fleet_job(servers[0], job_id)))
            owner = next(s for s in servers if s.base == before["server"])
            other = next(s for s in servers if s is not owner)
            s, detail = http("GET", other.base + f"/api/v1/jobs/{job_id}")
            run_before = detail["run"] if s == 200 else 0
            # Killed once it has a fresh checkpoint, as a crash would find it.
            t0 = time.monotonic()
            owner.kill()
            moved = wait("another server to take the lease",
                         lambda: (lambda j: j if j and j.get("server") not in (None, owner.base)
                                  else None)(fleet_job(other, job_id)), within=300)
            t1 = time.monotonic()

            def running():
                st, d = http("GET", other.base + f"/api/v1/jobs/{job_id}")
                return d if st == 200 and d["state"] == "running" and d["run"] > run_before else None

            wait("the job to run again", running, within=600)
            t2 = time.monotonic()

            def checkpointed():
                st, c = http("GET", other.base + f"/api/v1/jobs/{job_id}/checkpoints")
                return st == 200 and c["completed"] >= 1

            wait("the new run's first checkpoint", checkpointed, within=600)
            t3 = time.monotonic()
            for name, value in (("lease expiry", t1 - t0), ("restore", t2 - t1),
                                ("first checkpoint", t3 - t2), ("total", t3 - t0)):
                parts[name].append(value)
            print(f"  kill {k + 1}/{kills}: {moved['server']} took it; expiry {t1 - t0:.2f} s, "
                  f"restore {t2 - t1:.2f} s, first checkpoint {t3 - t2:.2f} s", file=sys.stderr)
            owner.start()
        # Ended, so that the fleet does not resume it once the servers stop.
        http("POST", servers[0].base + f"/api/v1/jobs/{job_id}/cancel")
        wait("the job to end",
             lambda: (lambda j: j and j["state"] in ("cancelled", "finished", "failed"))(
                 fleet_job(servers[0], job_id)), within=120)
        return size, parts
    finally:
        for s in servers:
            s.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("weir")
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--state-mb", default="10,1024")
    ap.add_argument("--lease-ttl", default="3s")
    ap.add_argument("--rate", type=int, default=200000)
    ap.add_argument("--min-state-mib", type=int, default=0,
                    help="wait until the state is at least this large before the kills "
                         "(rows of --state-mb at least this large)")
    args = ap.parse_args()
    weir = os.path.abspath(args.weir)
    rows = []
    with tempfile.TemporaryDirectory(prefix="weir-bench-fleet-") as work:
        # The cluster's server runs as `postgres` when started by root: it must reach DIR.
        os.chmod(work, 0o755)
        pg_dir, s3_dir = os.path.join(work, "pg"), os.path.join(work, "s3")
        pg_port, s3_port = free_port(), free_port()
        subprocess.run([os.path.join(HERE, "s3-server.sh"), "install"], check=True)
        subprocess.run([os.path.join(HERE, "pg-cluster.sh"), "start", pg_dir, str(pg_port)],
                       check=True)
        subprocess.run([os.path.join(HERE, "s3-server.sh"), "start", s3_dir, str(s3_port),
                        "weir-fleet"], check=True)
        try:
            catalog = f"postgres://postgres@127.0.0.1:{pg_port}/postgres"
            s3 = f"http://127.0.0.1:{s3_port}"
            for mb in (int(x) for x in args.state_mb.split(",")):
                print(f"state {mb} MB, {args.kills} kills, lease {args.lease_ttl}:", file=sys.stderr)
                # The size floor is for the rows asked to grow that large (a 10 MB row
                # beside a 1 GiB one never would).
                floor = args.min_state_mib if mb >= args.min_state_mib else 0
                size, parts = measure(weir, work, catalog, s3, args.lease_ttl, mb, args.kills,
                                      args.rate, floor)
                rows.append((mb, size, parts))
        finally:
            subprocess.run([os.path.join(HERE, "s3-server.sh"), "stop", s3_dir])
            subprocess.run([os.path.join(HERE, "pg-cluster.sh"), "stop", pg_dir])
    print(f"\nfailover (kill -9 of the job's server to its first new checkpoint), "
          f"lease {args.lease_ttl}, {args.kills} kills per row, seconds")
    print("| state | part | p50 | p99 | min | max |")
    print("|---|---|---|---|---|---|")
    for mb, size, parts in rows:
        for name in ("lease expiry", "restore", "first checkpoint", "total"):
            v = parts[name]
            print(f"| {size / 2**20:.0f} MiB | {name} | {percentile(v, 50):.2f} | "
                  f"{percentile(v, 99):.2f} | {min(v):.2f} | {max(v):.2f} |")


if __name__ == "__main__":
    main()
