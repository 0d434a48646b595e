#!/usr/bin/env python3
"""Nexmark on Apache Flink and on weir, side by side (issue 26): `make bench-peers`.

Both engines run each Nexmark query over the same JSON-lines file. For every query the script
first checks that they produce the same rows (one untimed run each, writing to files), then
times interleaved runs (Flink, weir, Flink, weir, ...) with each engine's blackhole sink, each
run started once the machine is idle, and prints medians: Flink's net job runtime, weir's
whole-process wall time, and the peak memory (maximum resident set) of each.

An updating result (a join, GROUP BY or Top-N with no window) is compared as the table it
describes: Flink's changelog, written as debezium-json, folded into its final multiset of rows,
and weir's the same way from `changelog-json` (q15-q19), or as the last row per key of its
upsert stream (q4). WEIR_UPSERT_KEYS and WEIR_CHANGELOG say how per query.

Each engine runs at every parallelism it is given (`--flink-parallelism`, `--weir-parallelism`;
Flink at 1 and weir at 1 and 2 by default), every one checked for the same rows and timed, and
the ratio compares each engine at its best: the lower of its medians, as issue 26's target
("at each engine's best parallelism") asks. Flink's default is 1 because on this machine its
parallelism 2 is slower (BENCHMARKS.md); `--flink-parallelism 1,2` measures that again.

Layout:
  * `main` drives everything; it needs only the standard library.
  * `check_main` (the `check` subcommand) compares one query's rows. The driver runs it in a
    process of its own so that it stays small itself: a child's peak RSS as the kernel reports
    it (wait4's ru_maxrss) includes the parent's at the moment of the fork, and a driver that
    had held a million rows would inflate weir's figure.
  * `flink_main` (the `flink` subcommand) runs one query on a fresh Flink local mini-cluster
    (PyFlink's JVM) and prints one JSON line with its measurements. The driver starts it in the
    PyFlink virtualenv's Python, once per run, so that no run inherits a warm JVM.
  * `weir_main` (the `weir` subcommand) times one query on weir alone, no Flink and no row
    check: for measuring a change to weir between sittings.
  * The Flink SQL texts live in scripts/peers/flink/: nexmark.sql declares the file and one view
    per event type, qN.sql holds the query (after any statements of its own); udf/ holds the
    Nexmark benchmark's Java function that q14 calls, which scripts/bench-peers.sh compiles
    into the jar passed as --udf-jar.

The Kafka arm (`--kafka-broker`, issue 46) reads the same events from a Kafka topic instead:
the script starts Apache Kafka's broker (scripts/kafka-broker.sh), produces the file's lines to
a topic of 4 partitions (line i to partition i % 4, so each partition is in event-time order),
and both engines read the topic from its start to its end at the start: Flink with its Kafka
SQL connector (`--kafka-jar`, fetched by scripts/bench-peers.sh), weir with its Kafka source.
Each tracks event time per partition, so the rows are those of the file.

scripts/bench-peers.sh checks for Java, installs PyFlink once, then runs this file; `make
bench-peers` makes the data file first when it is missing.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import decimal
import itertools
import json
import os
import re
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KAFKA_SCRIPT = ROOT / "scripts" / "kafka-broker.sh"
# The Kafka arm's topic: the file's lines, one record each, spread over this many partitions.
KAFKA_PARTITIONS = 4
# The text of weir's Nexmark jobs that names their file source (replaced for the Kafka arm).
WEIR_FILE_SOURCE = "    kind: jsonl\n    path: data/nexmark.jsonl\n"
FLINK_SQL = ROOT / "scripts" / "peers" / "flink"
ALL_QUERIES = [
    "q0", "q1", "q2", "q3", "q4", "q5", "q6", "q7", "q8", "q9", "q11",
    "q14", "q15", "q16", "q17", "q18", "q19", "q20", "q21", "q22",
]  # fmt: skip
# q10 and q12 need processing time and q13 a side-input file: not run.

# weir's q4 is an upsert stream keyed by category (every change of a category's average is a
# row); its result is the last row per key.
WEIR_UPSERT_KEYS = {"q4": ["category"]}

# weir's updating results written whole, each row with its kind (`format: changelog-json`, a
# field "op": +I, -U, +U, -D), and folded into their final table as a multiset: the running
# aggregates q15-q17 and deduplication q18 (keyed; -U/+U), and the running Top-N q19 (keyed
# by auction and rank_number; -U/+U as bids move down a rank). Folding checks the retractions too: each takes back a row that was there.
WEIR_CHANGELOG = {"q15", "q16", "q17", "q18", "q19"}

# Columns that stay certain where arrival order decides ties: q19 numbers bids of equal price
# in the order they arrive, which at parallelism above 1 depends on how subtasks interleave (in
# either engine), so there only the price at each rank of each auction is compared.
TIE_FREE_COLUMNS = {"q19": ["auction", "rank_number", "price"]}

# Timestamps as engines write them in JSON: weir's file sink and Flink's debezium-json format
# ("2023-11-14 22:13:20.123Z" or ISO 8601 with a T).
TIMESTAMP = re.compile(r"^\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:?\d{2})?$")


class BenchError(Exception):
    """A failure with a message that says what to do; printed without a traceback."""


# --------------------------------------------------------------------------------------------
# Flink: one query on a local mini-cluster (runs in the PyFlink virtualenv).
# --------------------------------------------------------------------------------------------


def sql_statements(path: Path, replacements: dict[str, str]) -> list[str]:
    """The `;`-separated statements of a SQL file, without `--` comment lines."""
    text = path.read_text()
    for key, value in replacements.items():
        text = text.replace("${" + key + "}", value)
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("--")]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]


def vm_hwm_kib(pid: int) -> int:
    """The peak resident set (VmHWM) of a live process, in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise BenchError(f"no VmHWM in /proc/{pid}/status")


def flink_main(args: argparse.Namespace) -> None:
    """Runs one query on Flink and prints {"net_ms", "jvm_peak_kib", "python_peak_kib"}.

    With `--out DIR` the result goes to DIR as debezium-json (every insert, update and delete,
    so that updating results can be folded into their final table); otherwise to Flink's
    blackhole connector, which discards rows as weir's blackhole sink does.
    """
    # Imported here: the driver runs without PyFlink.
    from pyflink.java_gateway import get_gateway
    from pyflink.table import EnvironmentSettings, Schema, TableDescriptor, TableEnvironment

    t_env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    config = t_env.get_config()
    # 1 is Flink's best setting for one file on this machine (issue 26): one subtask per
    # operator, which with the reader, JIT and GC threads already keeps both cores busy.
    config.set("parallelism.default", str(args.parallelism))
    # Windows on TIMESTAMP_LTZ align in the session time zone; weir's align to the epoch.
    config.set("table.local-time-zone", "UTC")
    # The settings the Flink Nexmark benchmark runs with (object reuse, mini-batch aggregation),
    # without its RocksDB backend: weir keeps state on the heap here, so Flink does too.
    config.set("pipeline.object-reuse", "true")
    config.set("table.exec.mini-batch.enabled", "true")
    config.set("table.exec.mini-batch.allow-latency", "2 s")
    config.set("table.exec.mini-batch.size", "50000")
    # A failure fails the run, rather than restarting the job behind the measurement's back.
    config.set("restart-strategy.type", "none")
    if args.out:
        # The filesystem sink commits its part files on checkpoints; the final checkpoint at the
        # end of the bounded input commits the last ones. Checkpoints go to files beside the
        # output: the default (the JobManager's memory) refuses state over 5 MB.
        config.set("execution.checkpointing.interval", "10 s")
        config.set("execution.checkpointing.storage", "filesystem")
        checkpoints = Path(args.out).resolve().with_name(Path(args.out).name + "-checkpoints")
        config.set("execution.checkpointing.dir", checkpoints.as_uri())

    # The Nexmark benchmark's user-defined functions (q14's count_char); the Kafka connector.
    jars = [Path(j).resolve().as_uri() for j in (args.udf_jar, args.kafka_jar) if j]
    if jars:
        config.set("pipeline.jars", ";".join(jars))

    if args.kafka:
        servers, topic = args.kafka.split("/", 1)
        source = (
            f"'connector' = 'kafka', 'topic' = '{topic}', "
            f"'properties.bootstrap.servers' = '{servers}', "
            "'properties.group.id' = 'weir-bench-peers', "
            "'scan.startup.mode' = 'earliest-offset', 'scan.bounded.mode' = 'latest-offset', "
            "'format' = 'json'"
        )
    else:
        path = str(Path(args.data).resolve())
        source = f"'connector' = 'filesystem', 'path' = '{path}', 'format' = 'json'"
    replacements = {"source": source}
    statements = sql_statements(FLINK_SQL / "nexmark.sql", replacements)
    statements += sql_statements(FLINK_SQL / f"{args.query}.sql", replacements)
    for statement in statements[:-1]:
        t_env.execute_sql(statement)
    table = t_env.sql_query(statements[-1])

    schema = Schema.new_builder().from_resolved_schema(table.get_resolved_schema()).build()
    if args.out:
        sink = (
            TableDescriptor.for_connector("filesystem")
            .option("path", str(Path(args.out).resolve()))
            .format("debezium-json")
        )
    else:
        sink = TableDescriptor.for_connector("blackhole")
    t_env.create_temporary_table("result", sink.schema(schema).build())

    job = table.execute_insert("result").get_job_client().get_job_execution_result().result()
    jvm = get_gateway().jvm.java.lang.ProcessHandle.current().pid()
    print(
        json.dumps(
            {
                "net_ms": job.get_net_runtime(),
                "jvm_peak_kib": vm_hwm_kib(jvm),
                "python_peak_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
            }
        ),
        flush=True,
    )


# --------------------------------------------------------------------------------------------
# The driver: check rows, time interleaved runs, print the table.
# --------------------------------------------------------------------------------------------


@dataclass
class Engines:
    """How to start each engine."""

    weir: Path
    python: Path  # the PyFlink virtualenv's interpreter
    data: Path
    # The parallelisms each engine runs at.
    flink_parallelism: list[int] = field(default_factory=lambda: [1])
    weir_parallelism: list[int] = field(default_factory=lambda: [1, 2])
    # The jar of the Nexmark benchmark's user-defined functions, for q14 (None: not built).
    udf_jar: Path | None = None
    # The Kafka arm: "HOST:PORT/TOPIC" both engines read instead of the file, and Flink's
    # Kafka connector.
    kafka: str | None = None
    kafka_jar: Path | None = None
    # weir runs the SQL text Flink runs (scripts/peers/flink/, as a SQL job file) rather than
    # its YAML job (jobs/nexmark/<query>-jsonl.yaml).
    weir_sql: bool = False

    def options(self) -> list[str]:
        """The command-line options that say the same to a child of this script."""
        out = []
        if self.udf_jar is not None:
            out += ["--udf-jar", str(self.udf_jar)]
        if self.kafka is not None:
            out += ["--kafka", self.kafka]
        if self.kafka_jar is not None:
            out += ["--kafka-jar", str(self.kafka_jar)]
        if self.weir_sql:
            out += ["--weir-sql"]
        return out


@dataclass
class Timings:
    """The measurements of one query, per parallelism one entry per timed run."""

    flink_s: dict[int, list[float]] = field(default_factory=lambda: collections.defaultdict(list))
    weir_s: dict[int, list[float]] = field(default_factory=lambda: collections.defaultdict(list))
    flink_peak_mib: dict[int, list[float]] = field(
        default_factory=lambda: collections.defaultdict(list)
    )
    weir_peak_mib: dict[int, list[float]] = field(
        default_factory=lambda: collections.defaultdict(list)
    )


def run_flink(engines: Engines, query: str, out: Path | None, parallelism: int) -> dict:
    """One Flink run in a fresh process (and JVM); its measurements."""
    cmd = [
        str(engines.python), __file__, "flink", query, "--data", str(engines.data),
        "--parallelism", str(parallelism),
    ]  # fmt: skip
    if out is not None:
        cmd += ["--out", str(out)]
    # Flink runs its text either way: the options of weir's arms are not its.
    cmd += [o for o in engines.options() if o != "--weir-sql"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        tail = "\n".join(done.stderr.strip().splitlines()[-30:])
        raise BenchError(f"Flink failed on {query} (exit {done.returncode}):\n{tail}")
    return json.loads(lines[-1])


def cpu_busy_and_total() -> tuple[int, int]:
    """The machine's busy and total CPU time so far, in ticks (the first line of /proc/stat)."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    idle = ticks[3] + ticks[4]  # idle and iowait
    return sum(ticks) - idle, sum(ticks)


def settle(max_wait: float = 3.0, idle_share: float = 0.9) -> None:
    """Waits, up to max_wait seconds, until the machine's cores were idle for a fifth of a second.

    A timed run then starts after the previous one's processes have finished exiting (a Flink
    JVM takes a moment to hand back its 1-3 GiB), so that neither engine's time includes the
    other's teardown.
    """
    deadline = time.monotonic() + max_wait
    while time.monotonic() < deadline:
        busy0, total0 = cpu_busy_and_total()
        time.sleep(0.2)
        busy1, total1 = cpu_busy_and_total()
        if total1 > total0 and (busy1 - busy0) / (total1 - total0) <= 1 - idle_share:
            return


def run_weir(
    engines: Engines, query: str, out: Path | None, parallelism: int
) -> tuple[float, float]:
    """One weir run of jobs/nexmark/<query>-jsonl.yaml at `parallelism`: (wall seconds, peak
    RSS in MiB).

    The peak comes from wait4's rusage of the weir process itself. The Kafka arm runs a copy of
    the job whose source reads the topic instead of the file.
    """
    job = ROOT / "jobs" / "nexmark" / f"{query}-jsonl.yaml"
    source = ["--set", f"sources.nexmark.path={engines.data}"]
    with tempfile.TemporaryDirectory() as scratch:
        if engines.weir_sql:
            job = Path(scratch) / f"{query}.sql"
            job.write_text(weir_sql_job(engines, query))
            return run_weir_job(
                engines, query, job, [], out, parallelism, sink="result", node="insert-into-result"
            )
        if engines.kafka is not None:
            servers, topic = engines.kafka.split("/", 1)
            text = job.read_text()
            if WEIR_FILE_SOURCE not in text:
                raise BenchError(f"{job}: the file source moved (no {WEIR_FILE_SOURCE!r})")
            job = Path(scratch) / job.name
            job.write_text(
                text.replace(
                    WEIR_FILE_SOURCE,
                    f"    kind: kafka\n    bootstrap-servers: {servers}\n    topic: {topic}\n"
                    "    stop-at: latest\n",
                )
            )
            source = []
        return run_weir_job(engines, query, job, source, out, parallelism)


def run_weir_job(
    engines: Engines,
    query: str,
    job: Path,
    source: list[str],
    out: Path | None,
    parallelism: int,
    sink: str = "out",
    node: str | None = None,
) -> tuple[float, float]:
    """`run_weir` of the job file `job`, its source set by `source` (options of `weir run`);
    with `out`, the sink `sink` writes the rows of `node` (default: the query's) there."""
    cmd = [
        str(engines.weir), "run", str(job), *source,
        "--set", f"parallelism={parallelism}", "--quiet",
    ]  # fmt: skip
    if out is not None:
        changelog = query in WEIR_CHANGELOG or engines.weir_sql
        format = ", format: changelog-json" if changelog else ""
        node = node or query
        cmd += ["--set", f"sinks.{sink}={{kind: file, from: {node}, path: {out}{format}}}"]
    with tempfile.TemporaryFile() as log:
        start = time.monotonic()
        child = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.monotonic() - start
        child.returncode = os.waitstatus_to_exitcode(status)
        if child.returncode != 0:
            log.seek(0)
            tail = "\n".join(log.read().decode(errors="replace").strip().splitlines()[-30:])
            raise BenchError(
            f"weir failed on {query} at parallelism {parallelism} (exit {child.returncode}):"
            f"\n{tail}"
        )
    return wall, usage.ru_maxrss / 1024


def weir_sql_job(engines: Engines, query: str) -> str:
    """The SQL job file of `query` in the words Flink runs: nexmark.sql's table and views over
    the file, the query's own statements, and the query into a blackhole table (`CREATE TABLE
    result WITH (...) AS SELECT`, Flink's statement set of one)."""
    if engines.kafka is not None:
        raise BenchError("--weir-sql reads the file: SQL job files have no Kafka tables yet")
    source = f"'connector' = 'filesystem', 'path' = '{engines.data}', 'format' = 'json'"
    statements = sql_statements(FLINK_SQL / "nexmark.sql", {"source": source})
    statements += sql_statements(FLINK_SQL / f"{query}.sql", {"source": source})
    head = "".join(f"{s};\n" for s in statements[:-1])
    return f"{head}CREATE TABLE result WITH ('connector' = 'blackhole') AS\n{statements[-1]};\n"


def normalise(value):
    """A value in a form both engines' JSON agree on: numbers exact, timestamps epoch ms."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, (int, decimal.Decimal)):
        number = decimal.Decimal(value)
        # 4146.116000 and 4146.116 are one number; integral values compare as integers.
        return int(number) if number == number.to_integral_value() else number.normalize()
    if isinstance(value, str) and TIMESTAMP.match(value):
        text = value.replace(" ", "T").replace("Z", "+00:00")
        moment = datetime.datetime.fromisoformat(text)
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=datetime.timezone.utc)
        return round(moment.timestamp() * 1000)
    return value


def row_key(row: dict) -> tuple:
    """A row as a hashable tuple, its columns in name order."""
    return tuple((name, normalise(row[name])) for name in sorted(row))


def json_lines(directory: Path):
    """Every JSON object in the files under a directory (hidden part files included)."""
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        if path.name.endswith(".crc"):
            continue
        with path.open() as lines:
            for line in lines:
                if line.strip():
                    yield json.loads(line, parse_float=decimal.Decimal)


def only(rows: collections.Counter, columns: list[str]) -> collections.Counter:
    """The multiset of rows (as row_key tuples) cut down to `columns`."""
    out: collections.Counter = collections.Counter()
    for row, n in rows.items():
        out[tuple((name, value) for name, value in row if name in columns)] += n
    return out


def flink_rows(directory: Path) -> collections.Counter:
    """Flink's debezium-json changelog folded into its final multiset of rows."""
    rows: collections.Counter = collections.Counter()
    for change in json_lines(directory):
        if change.get("before") is not None:
            rows[row_key(change["before"])] -= 1
        if change.get("after") is not None:
            rows[row_key(change["after"])] += 1
    if any(n < 0 for n in rows.values()):
        raise BenchError(f"Flink's changelog in {directory} retracts rows it never inserted")
    return +rows


# The kinds of weir's `changelog-json` rows: +1 a row added, -1 a row taken back.
WEIR_KINDS = {"+I": 1, "+U": 1, "-U": -1, "-D": -1}


def weir_rows(directory: Path, query: str, changelog: bool = False) -> collections.Counter:
    """weir's rows as a multiset: an upsert result (WEIR_UPSERT_KEYS) the last row of each key,
    a changelog (WEIR_CHANGELOG, or every query with `changelog`) folded into its final table,
    else every row."""
    keys = None if changelog else WEIR_UPSERT_KEYS.get(query)
    if keys is not None:
        last = {}
        for row in json_lines(directory):
            last[tuple(normalise(row[k]) for k in keys)] = row_key(row)
        return collections.Counter(last.values())
    if query not in WEIR_CHANGELOG and not changelog:
        return collections.Counter(row_key(row) for row in json_lines(directory))
    rows: collections.Counter = collections.Counter()
    for row in json_lines(directory):
        op = row.pop("op", None)
        if op not in WEIR_KINDS:
            raise BenchError(f"weir's changelog in {directory} has a row of kind {op!r}: {row}")
        rows[row_key(row)] += WEIR_KINDS[op]
    # Counted in no particular order (part files of several subtasks): what must hold is the
    # end, where no row has been taken back more often than it was added.
    if any(n < 0 for n in rows.values()):
        raise BenchError(f"weir's changelog in {directory} takes back rows it never added")
    return +rows


def check_rows(engines: Engines, query: str, scratch: Path) -> str:
    """Runs both engines into files, at each of their parallelisms, and compares every run's
    rows with Flink's first; a summary, or BenchError."""
    reference: collections.Counter | None = None
    note = ""
    runs = [("Flink", p) for p in engines.flink_parallelism]
    runs += [("weir", p) for p in engines.weir_parallelism]
    for engine, parallelism in runs:
        out = scratch / f"{query}-{engine.lower()}-p{parallelism}"
        shutil.rmtree(out, ignore_errors=True)
        if engine == "Flink":
            run_flink(engines, query, out, parallelism)
            rows = flink_rows(out)
        else:
            run_weir(engines, query, out, parallelism)
            rows = weir_rows(out, query, engines.weir_sql)
        if reference is None:
            reference = rows
            continue
        if rows == reference:
            continue
        tie_free = TIE_FREE_COLUMNS.get(query)
        if tie_free and parallelism > 1 and only(rows, tie_free) == only(reference, tie_free):
            note = f" ({engine} at p={parallelism}: {', '.join(tie_free)} only, ties by arrival)"
            continue
        only_flink, only_run = reference - rows, rows - reference

        def sample(rows: collections.Counter) -> str:
            return "\n    ".join(str(r) for r in itertools.islice(rows.elements(), 3))

        first = f"Flink at parallelism {engines.flink_parallelism[0]}"
        this = f"{engine} at parallelism {parallelism}"
        raise BenchError(
            f"{query}: the rows differ: {first} {sum(reference.values()):,} rows, "
            f"{this} {sum(rows.values()):,}; {sum(only_flink.values()):,} only in {first}, "
            f"e.g.\n    {sample(only_flink)}\n  {sum(only_run.values()):,} only in {this}, "
            f"e.g.\n    {sample(only_run)}\n  (outputs kept in {scratch})"
        )
    assert reference is not None, "no parallelism to check"
    return f"{sum(reference.values()):,} rows{note}"


def check_main(args: argparse.Namespace) -> None:
    """Compares one query's rows on both engines; prints a summary, or raises BenchError."""
    print(check_rows(engines_of(args), args.query, Path(args.scratch)))


def run_check(engines: Engines, query: str, scratch: Path) -> str:
    """`check_main` in a child process (see the module's docs for why)."""
    cmd = [
        sys.executable, __file__, "check", query, "--weir", str(engines.weir),
        "--python", str(engines.python), "--data", str(engines.data), "--scratch", str(scratch),
        "--flink-parallelism", ",".join(map(str, engines.flink_parallelism)),
        "--weir-parallelism", ",".join(map(str, engines.weir_parallelism)),
    ]  # fmt: skip
    cmd += engines.options()
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise BenchError(done.stderr.strip().removeprefix("bench-peers: "))
    return done.stdout.strip()


def engines_of(args: argparse.Namespace) -> Engines:
    """The engines and parallelisms the command line names."""

    def parallelisms(text: str, option: str) -> list[int]:
        try:
            values = [int(v) for v in text.split(",")]
        except ValueError:
            values = []
        if not values or any(v < 1 for v in values) or len(set(values)) != len(values):
            raise BenchError(
                f"{option} takes distinct parallelisms of 1 or more, like 1,2; not {text!r}"
            )
        return values

    return Engines(
        weir=Path(args.weir).resolve(),
        python=Path(args.python),
        data=Path(args.data).resolve(),
        flink_parallelism=parallelisms(args.flink_parallelism, "--flink-parallelism"),
        weir_parallelism=parallelisms(args.weir_parallelism, "--weir-parallelism"),
        udf_jar=Path(args.udf_jar).resolve() if args.udf_jar else None,
        kafka=args.kafka,
        kafka_jar=Path(args.kafka_jar).resolve() if args.kafka_jar else None,
        weir_sql=args.weir_sql,
    )


def best(timings: dict[int, list[float]]) -> int:
    """The parallelism with the lowest median."""
    return min(timings, key=lambda p: statistics.median(timings[p]))


def table(engines: Engines, results: dict[str, Timings], checks: dict[str, str]) -> str:
    """The medians as a Markdown table: each engine at each parallelism, the ratio of each at
    its best (Flink's net time over weir's wall time), and the peak memory of those runs."""
    flink_ps, weir_ps = engines.flink_parallelism, engines.weir_parallelism
    one_and_two = {1, 2} <= set(weir_ps)

    def which(p: int, ps: list[int]) -> str:
        """Which parallelism a figure comes from, when there was a choice."""
        return f" (p={p})" if len(ps) > 1 else ""

    header = [f"Flink p={p} net s" for p in flink_ps] + [f"weir p={p} wall s" for p in weir_ps]
    if one_and_two:
        header.append("weir p=1 ÷ p=2")
    header += ["Flink ÷ weir, each at its best", "Flink peak MiB", "weir peak MiB", "rows"]
    lines = ["| query | " + " | ".join(header) + " |", "|---" * (len(header) + 1) + "|"]
    for query, t in results.items():
        med = statistics.median
        cells = [f"{med(t.flink_s[p]):.2f}" for p in flink_ps]
        cells += [f"{med(t.weir_s[p]):.2f}" for p in weir_ps]
        if one_and_two:
            cells.append(f"{med(t.weir_s[1]) / med(t.weir_s[2]):.2f}×")
        fb, wb = best(t.flink_s), best(t.weir_s)
        cells += [
            f"{med(t.flink_s[fb]) / med(t.weir_s[wb]):.1f}×",
            f"{med(t.flink_peak_mib[fb]):,.0f}{which(fb, flink_ps)}",
            f"{med(t.weir_peak_mib[wb]):,.0f}{which(wb, weir_ps)}",
            checks.get(query, "not checked"),
        ]
        lines.append(f"| {query} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


class KafkaBroker:
    """The Kafka arm's broker (scripts/kafka-broker.sh), in a directory of its own, with the
    data file's lines produced to a topic; stopped on exit."""

    def __init__(self, data: Path):
        self.dir = Path(tempfile.mkdtemp(prefix="weir-bench-peers-kafka-"))
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.topic = f"nexmark-{data.stem}"
        self.script("start", str(self.dir), str(self.port))
        self.script("topic", str(self.port), self.topic, str(KAFKA_PARTITIONS))
        started = time.monotonic()
        self.script("produce", str(self.port), self.topic, str(KAFKA_PARTITIONS), str(data))
        print(
            f"Kafka: {data.name} produced to {self.topic} ({KAFKA_PARTITIONS} partitions) on "
            f"127.0.0.1:{self.port} in {time.monotonic() - started:.1f} s",
            file=sys.stderr,
            flush=True,
        )

    def script(self, *args: str) -> None:
        done = subprocess.run([str(KAFKA_SCRIPT), *args], capture_output=True, text=True)
        if done.returncode != 0:
            raise BenchError(f"{KAFKA_SCRIPT.name} {' '.join(args)}: {done.stderr.strip()}")

    def source(self) -> str:
        return f"127.0.0.1:{self.port}/{self.topic}"

    def stop(self) -> None:
        subprocess.run([str(KAFKA_SCRIPT), "stop", str(self.dir)], capture_output=True)
        shutil.rmtree(self.dir, ignore_errors=True)


def main(args: argparse.Namespace) -> None:
    if not args.kafka_broker:
        bench(args)
        return
    if not args.kafka_jar:
        raise BenchError(
            "the Kafka arm needs Flink's Kafka connector: --kafka-jar (scripts/bench-peers.sh "
            "fetches it)"
        )
    broker = KafkaBroker(Path(args.data).resolve())
    try:
        args.kafka = broker.source()
        bench(args)
    finally:
        broker.stop()


def bench(args: argparse.Namespace) -> None:
    engines = engines_of(args)
    for what, path in (("weir binary", engines.weir), ("data file", engines.data)):
        if not path.exists():
            raise BenchError(f"no {what} at {path}")
    queries = args.queries.split(",")
    unknown = [q for q in queries if q not in ALL_QUERIES]
    if unknown:
        raise BenchError(f"unknown queries {unknown}; known: {','.join(ALL_QUERIES)}")
    if "q14" in queries and engines.udf_jar is None:
        raise BenchError(
            "q14 needs the Nexmark benchmark's count_char function: --udf-jar (made by "
            "scripts/bench-peers.sh from scripts/peers/flink/udf/)"
        )

    checks: dict[str, str] = {}
    failed: list[str] = []
    if not args.skip_check:
        scratch = Path(tempfile.mkdtemp(prefix="weir-bench-peers-"))
        for query in queries:
            try:
                checks[query] = "same " + run_check(engines, query, scratch)
            except BenchError as e:
                checks[query], failed = "**differ**", failed + [query]
                print(e, file=sys.stderr)
            print(f"check {query}: {checks[query]}", file=sys.stderr, flush=True)
        if not failed:
            shutil.rmtree(scratch)

    if args.runs == 0:
        if failed:
            raise BenchError(f"rows differ on {','.join(failed)} (see above)")
        return

    # Interleaved: each run of a query on Flink is followed by one on weir (at each
    # parallelism, in turn, the order reversed every other run), and every query gets its
    # first run before any gets its second, so that a slow spell of a shared machine falls on
    # both engines and on many queries rather than on one cell. Each run waits for an idle
    # machine first (`settle`).
    results = {q: Timings() for q in queries}
    for run in range(args.runs):
        arms = [("Flink", p) for p in engines.flink_parallelism]
        arms += [("weir", p) for p in engines.weir_parallelism]
        if run % 2 == 1:
            arms.reverse()
        for query in queries:
            t = results[query]
            for engine, parallelism in arms:
                settle()
                if engine == "Flink":
                    flink = run_flink(engines, query, None, parallelism)
                    t.flink_s[parallelism].append(flink["net_ms"] / 1000)
                    t.flink_peak_mib[parallelism].append(flink["jvm_peak_kib"] / 1024)
                    said = (
                        f"Flink p={parallelism} net {flink['net_ms'] / 1000:.2f} s, JVM peak "
                        f"{flink['jvm_peak_kib'] / 1024:,.0f} MiB, Python client "
                        f"{flink['python_peak_kib'] / 1024:,.0f} MiB"
                    )
                else:
                    wall, peak = run_weir(engines, query, None, parallelism)
                    t.weir_s[parallelism].append(wall)
                    t.weir_peak_mib[parallelism].append(peak)
                    said = f"weir p={parallelism} {wall:.2f} s, {peak:,.0f} MiB"
                print(f"run {run + 1}/{args.runs} {query}: {said}", file=sys.stderr, flush=True)

    read = f"from the Kafka topic {engines.kafka}" if engines.kafka else "from the file"
    if engines.weir_sql:
        read += ", weir running Flink's SQL text"
    print(f"\nNexmark, {engines.data.name} {read}, medians of {args.runs} interleaved runs:\n")
    print(table(engines, results, checks))
    if failed:
        raise BenchError(f"rows differ on {','.join(failed)} (see above)")


def weir_main(args: argparse.Namespace) -> None:
    """Times one query on weir alone, no Flink and no row check: the median wall time and peak
    RSS of --runs runs at each parallelism, each run started on an idle machine. For measuring
    a change to weir itself between sittings of `bench`, which time both engines."""
    try:
        parallelisms = [int(v) for v in args.weir_parallelism.split(",")]
    except ValueError:
        parallelisms = []
    if not parallelisms or any(p < 1 for p in parallelisms):
        raise BenchError(
            f"--weir-parallelism takes parallelisms like 1,2; not {args.weir_parallelism!r}"
        )
    engines = Engines(
        weir=Path(args.weir).resolve(),
        python=Path(sys.executable),
        data=Path(args.data).resolve(),
        weir_parallelism=parallelisms,
        weir_sql=args.weir_sql,
    )
    for what, path in (("weir binary", engines.weir), ("data file", engines.data)):
        if not path.exists():
            raise BenchError(f"no {what} at {path}")
    for parallelism in parallelisms:
        walls, peaks = [], []
        for _ in range(args.runs):
            settle()
            wall, peak = run_weir(engines, args.query, None, parallelism)
            walls.append(wall)
            peaks.append(peak)
        runs = ", ".join(f"{w:.2f}" for w in walls)
        print(
            f"{args.query} weir p={parallelism}: median {statistics.median(walls):.2f} s "
            f"({runs}), peak {statistics.median(peaks):,.0f} MiB",
            flush=True,
        )


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command")

    flink = sub.add_parser("flink", help="run one query on Flink (in the PyFlink virtualenv)")
    flink.add_argument("query", choices=ALL_QUERIES)
    flink.add_argument("--data", required=True, help="the Nexmark JSON-lines file")
    flink.add_argument("--out", help="write the changelog here (default: blackhole)")
    flink.add_argument("--parallelism", type=int, default=1, help="Flink's default parallelism")
    flink.add_argument("--udf-jar", help="the jar of the Nexmark user-defined functions (q14)")
    flink.add_argument("--kafka", help="read HOST:PORT/TOPIC instead of the file")
    flink.add_argument("--kafka-jar", help="Flink's Kafka SQL connector")

    def add_engines(p: argparse.ArgumentParser) -> None:
        p.add_argument("--weir", required=True, help="the weir binary")
        p.add_argument("--python", required=True, help="the PyFlink virtualenv's python")
        p.add_argument("--data", required=True, help="the Nexmark JSON-lines file")
        p.add_argument(
            "--flink-parallelism", default="1", help="Flink's parallelisms, like 1,2 (default 1)"
        )
        p.add_argument(
            "--weir-parallelism", default="1,2", help="weir's parallelisms (default 1,2)"
        )
        p.add_argument("--udf-jar", help="the jar of the Nexmark user-defined functions (q14)")
        p.add_argument("--kafka", help="both engines read HOST:PORT/TOPIC instead of the file")
        p.add_argument("--kafka-jar", help="Flink's Kafka SQL connector (the Kafka arm)")
        p.add_argument(
            "--weir-sql",
            action="store_true",
            help="weir runs the SQL text Flink runs, as a SQL job file, not its YAML job",
        )

    check = sub.add_parser("check", help="compare one query's rows on both engines")
    check.add_argument("query", choices=ALL_QUERIES)
    check.add_argument("--scratch", required=True, help="a directory for both outputs")
    add_engines(check)

    bench = sub.add_parser("bench", help="check rows and time both engines")
    add_engines(bench)
    bench.add_argument("--queries", default=",".join(ALL_QUERIES))
    bench.add_argument(
        "--runs", type=int, default=3, help="timed runs per engine and query (0: check rows only)"
    )
    bench.add_argument("--skip-check", action="store_true", help="time only, compare no rows")
    bench.add_argument(
        "--kafka-broker",
        action="store_true",
        help="the Kafka arm: start a broker, produce the file to a topic, read that",
    )
    alone = sub.add_parser("weir", help="time one query on weir alone (no Flink, no check)")
    alone.add_argument("query", choices=ALL_QUERIES)
    alone.add_argument("--weir", required=True, help="the weir binary")
    alone.add_argument("--data", required=True, help="the Nexmark JSON-lines file")
    alone.add_argument(
        "--weir-parallelism", default="1,2", help="weir's parallelisms (default 1,2)"
    )
    alone.add_argument("--runs", type=int, default=5, help="timed runs per parallelism")
    alone.add_argument(
        "--weir-sql",
        action="store_true",
        help="weir runs the SQL text Flink runs, as a SQL job file, not its YAML job",
    )
    args = parser.parse_args()
    if args.command is None:
        parser.error("a command is needed: bench, check, flink or weir")
    return args


if __name__ == "__main__":
    arguments = parse_args()
    try:
        commands = {"bench": main, "check": check_main, "flink": flink_main, "weir": weir_main}
        commands[arguments.command](arguments)
    except BenchError as error:
        print(f"bench-peers: {error}", file=sys.stderr)
        sys.exit(1)
