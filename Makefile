# weir: `make run` builds weir and serves the default job with the dashboard; `make test` checks everything;
# `make docs` builds the book (docs/); `make install` puts weir on the PATH; `make bench` prints the
# benchmark tables whose current figures are in BENCHMARKS.md; `make bench-peers` runs Nexmark on
# Apache Flink beside weir; `make bench-fleet` times a fleet's failover; `make fuzz` fuzzes the decoders
# of untrusted input.
#
# Everything builds with the release profile (tests and lints too), so C/C++ dependencies
# are compiled once, not once per profile.

SHELL      := /bin/bash
# Every cargo command links RocksDB's prebuilt library when there is one rather than compile
# its C++ (scripts/cargo.sh, scripts/rocksdb-lib.sh); WEIR_ROCKSDB=source compiles it.
CARGO      ?= scripts/cargo.sh
TARGET_DIR := $(or $(CARGO_TARGET_DIR),target)
WEIR       := $(TARGET_DIR)/release/weir
JOB        ?= jobs/nexmark/q1.yaml
# `make run` serves the default job unbounded at a steady rate, checkpointing, so that the
# dashboard has something live to show (`make run JOB=... SERVE_SET=` for another job).
SERVE_SET  ?= --set sources.nexmark.events=null --set sources.nexmark.rate=200000 --set checkpoint.interval=2s
# System packages the build needs: a C/C++ toolchain (Rust links with it; RocksDB is C++),
# libclang (bindgen generates RocksDB's bindings with it), and SQLite's library with
# pkg-config (the job catalog of `weir serve` links the system's libsqlite3).
BUILD_PACKAGES := gcc g++ libc6-dev libclang-dev libsqlite3-dev pkg-config
# What the tests need besides: PostgreSQL's server binaries and psql (the PostgreSQL sink's
# tests start throwaway clusters of their own with scripts/pg-cluster.sh; openssl makes the
# TLS test's throwaway certificate authority), Chromium with
# its WebDriver (the dashboard's end-to-end test drives a headless browser), and Python with
# venv (the checkpoint-storage tests start S3-compatible moto_server instances with
# scripts/s3-server.sh, which installs moto[server] from PyPI into a virtualenv if missing, and
# the API fuzzer schemathesis runs from one of its own, scripts/schemathesis.sh).
# The Kafka tests start Apache Kafka's own broker (KRaft, one JVM per test) with
# scripts/kafka-broker.sh, which fetches its JARs from Maven Central with Maven into
# ~/.cache/weir/kafka-4.4.0 once (in the background while weir compiles): hence a JDK 17 and
# Maven. The NATS tests use the server on 127.0.0.1:4222 when one answers, else start Debian's
# nats-server with JetStream on a free port (scripts/nats-server.sh).
TEST_PACKAGES  := postgresql postgresql-client openssl chromium chromium-driver python3 python3-venv nats-server openjdk-17-jdk-headless maven

.PHONY: run test docs install bench bench-peers bench-fleet build build-bench deps toolchain lint loom fuzz fuzz-smoke nexmark-data clean

toolchain:
	@command -v cargo >/dev/null || { echo "cargo not found: install Rust (https://rustup.rs) first" >&2; exit 1; }

deps: toolchain
	@scripts/ensure-packages.sh $(BUILD_PACKAGES)

# The `weir` binary alone: `make test` then compiles only what the tests add, reusing every
# dependency this compiled, because the `workspace-hack` crate (cargo-hakari) gives each shared
# dependency the same features in both builds (checked by tests/it/toolchain.rs). RocksDB's
# C++ is not compiled at all when its prebuilt library can be fetched (scripts/rocksdb-lib.sh).
build: deps
	$(CARGO) build --release -p weir --bin weir --no-default-features

# The binary with `weir bench` (its default feature `bench`), for the benchmark targets.
build-bench: deps
	$(CARGO) build --release -p weir --bin weir

## Build and start `weir serve` with the default job running; it prints the dashboard's URL.
run: build
	$(WEIR) serve $(JOB) $(SERVE_SET)

## Formatting, lints (warnings are errors), every test, the API fuzzer, and the book's checks
## (scripts/docs.sh: the generated reference is current, links resolve, job files in the docs
## validate, it builds). The API fuzzer is schemathesis (PyPI, pinned; installed into
## ~/.cache/weir/schemathesis-<version> the first time) against a live `weir serve` on a free
## port with a throwaway data directory, zero failures required, under a minute:
## `scripts/schemathesis.sh run $(WEIR)` (settings in scripts/schemathesis.toml).
test: deps
	@scripts/ensure-packages.sh $(TEST_PACKAGES)
	@scripts/s3-server.sh install
	@scripts/schemathesis.sh install
	@scripts/kafka-broker.sh install-background
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --release --workspace --all-targets -- -D warnings
	@scripts/kafka-broker.sh install
	$(CARGO) test --release --workspace
	scripts/schemathesis.sh run $(WEIR)
	@$(MAKE) --no-print-directory loom
	@scripts/docs.sh check $(WEIR)

## The book: the reference pages generated from the job file's doc comments, then mdBook into
## docs/book/ (open docs/book/index.html). mdBook is installed from crates.io into
## ~/.cache/weir/mdbook-<version> the first time (a few minutes; see scripts/docs.sh).
docs: build
	scripts/docs.sh build $(WEIR)

## The weir binary, stripped, into $(PREFIX)/bin: /usr/local/bin as root, else ~/.local/bin;
## with RocksDB's prebuilt library, that library into $(PREFIX)/lib/weir, where the binary
## looks first (its run path, scripts/cargo.sh).
PREFIX ?= $(if $(filter 0,$(shell id -u)),/usr/local,$(HOME)/.local)
install: build
	install -d $(PREFIX)/bin
	install -s -m 755 $(WEIR) $(PREFIX)/bin/weir
	@lib="$$(scripts/rocksdb-lib.sh dir)"; if [ -n "$$lib" ] && ldd $(WEIR) | grep -q 'librocksdb.so'; then \
	  install -d $(PREFIX)/lib/weir && install -s -m 755 "$$lib/librocksdb.so" $(PREFIX)/lib/weir/librocksdb.so \
	  && echo "installed $(PREFIX)/lib/weir/librocksdb.so"; fi
	@echo "installed $(PREFIX)/bin/weir ($$($(PREFIX)/bin/weir --version))"
	@case ":$$PATH:" in *":$(PREFIX)/bin:"*) ;; *) echo "note: $(PREFIX)/bin is not on your PATH";; esac

## The fuzz targets (fuzz/, bodies in crates/fuzz-targets: job files, expressions, JSON lines,
## checkpoint metadata, logical snapshots) under libFuzzer, each for FUZZ_SECONDS from its
## checked-in seeds; crashes land in $(TARGET_DIR)/fuzz/artifacts. They link the main build's
## RocksDB library rather than compile RocksDB again (see scripts/fuzz.sh), hence `build` first.
## `make test` runs the same targets without this build: crates/fuzz-targets' smoke test
## replays every seed and 10,000 deterministic mutants of them per target (see its docs for why).
FUZZ_SECONDS ?= 60
fuzz: build
	CARGO_TARGET_DIR=$(TARGET_DIR) scripts/fuzz.sh run $(FUZZ_SECONDS)

## A few seconds of each fuzz target under libFuzzer (its seeds, then 2,000 inputs). The
## instrumented build it needs takes some 19 minutes of two cores from an empty cache.
fuzz-smoke: build
	CARGO_TARGET_DIR=$(TARGET_DIR) scripts/fuzz.sh smoke

## The connection pool's combiner and queue under the loom model checker: every interleaving of
## small scenarios, against the shipped code compiled with loom's primitives. Its own target
## directory: the cfg changes every build flag, so sharing the main one would rebuild it.
loom: deps
	RUSTFLAGS="--cfg weir_loom" CARGO_TARGET_DIR=$(TARGET_DIR)/loom \
	  $(CARGO) test --release -p weir-connection-pool --lib loom_models

## Benchmarks (BENCHMARKS.md has the current figures, docs/benchmarks/log/ their history).
## `weir bench restore`, `weir bench postgres` and `weir bench postgres-cdc` run against servers
## of their own, started and stopped here: moto's S3 (scripts/s3-server.sh) and a throwaway PostgreSQL cluster
## (scripts/pg-cluster.sh: fsync off, as for the tests; `make test` installs both).
bench: build-bench
	$(WEIR) bench nexmark --queries q0,q1,q2
	$(WEIR) bench nexmark --queries q3,q4,q5,q6,q7,q8,q9,q11,q14,q15,q17,q20,q21,q22 --sources generator --events 3000000
	$(WEIR) bench nexmark --compare two-phase --queries q4,q5 --events 3000000
	$(WEIR) bench nexmark --compare slicing --queries q5 --events 3000000
	$(WEIR) bench mini-batch
	$(WEIR) bench nexmark --compare sql --queries q0,q1,q2,q3,q4,q5,q6,q7,q8,q9,q11,q14,q15,q17,q20,q21,q22 --sources generator --events 3000000
	$(WEIR) bench timers
	$(WEIR) bench backends
	$(WEIR) bench scheduler
	$(WEIR) bench checkpoint
	$(WEIR) bench kafka
	$(WEIR) bench json
	$(WEIR) bench nats
	@s3=$$(mktemp -d); port=$$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'); \
	if scripts/s3-server.sh start $$s3 $$port weir-bench; then \
	  $(WEIR) bench restore --s3 http://127.0.0.1:$$port; status=$$?; scripts/s3-server.sh stop $$s3; rm -rf $$s3; exit $$status; \
	else echo "bench restore: no S3 server (scripts/s3-server.sh failed); in-memory store only"; $(WEIR) bench restore; fi
	$(WEIR) bench query
	$(WEIR) bench pool
	$(WEIR) bench serve
	@pg=$$(mktemp -d); port=$$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'); \
	scripts/pg-cluster.sh start $$pg $$port || { rm -rf $$pg; echo "bench postgres: could not start a throwaway PostgreSQL (scripts/pg-cluster.sh; apt-get install postgresql)" >&2; exit 1; }; \
	$(WEIR) bench postgres --connection "host=127.0.0.1 port=$$port user=postgres dbname=postgres" \
	  && $(WEIR) bench postgres-cdc --connection "host=127.0.0.1 port=$$port user=postgres dbname=postgres"; status=$$?; \
	scripts/pg-cluster.sh stop $$pg; rm -rf $$pg; exit $$status
	scripts/bench-stage-fence.sh
	scripts/bench-iceberg.sh $(WEIR)

## Nexmark q0–q9, q11 and q14–q22 on Apache Flink beside weir (issue 26; not part of `make
## test`): the same JSON-lines file (made once if missing), Flink SQL texts in
## scripts/peers/flink/ against jobs/nexmark/*-jsonl.yaml. It checks that both engines produce
## the same rows (the final table of an updating result), then prints the medians of
## BENCH_PEERS_RUNS interleaved runs with blackhole sinks: Flink's net job runtime (at
## parallelism 1), weir's wall time (at 1 and 2), the ratio of each engine at its best, the
## peak memory of each. Needs Java 11, 17 or 21 (a JDK: q14's Nexmark function is compiled)
## and Python 3.9-3.12; installs PyFlink 2.3 (about 850 MB) into ~/.cache/weir/pyflink once.
## BENCH_PEERS_ARGS passes more options (`--queries q0,q5`, `--skip-check`,
## `--flink-parallelism 1,2`, `--weir-parallelism 1`).
## Then the Kafka arm (issue 46): q0–q9 and q11 again, both engines reading the file's events
## from a topic of 4 partitions on Apache Kafka's broker (started by the script), Flink with
## its Kafka SQL connector (fetched from Maven Central once); BENCH_PEERS_KAFKA_ARGS passes
## more (`--queries q1`).
## Then the SQL arm (issue 47): weir runs the very SQL text Flink runs (scripts/peers/flink/:
## nexmark.sql's table and views over the file, each query into a blackhole table) as a SQL job
## file, on the queries whose text weir plans; BENCH_PEERS_SQL_ARGS passes more.
BENCH_PEERS_RUNS ?= 3
BENCH_PEERS_ARGS ?=
BENCH_PEERS_KAFKA_ARGS ?= --queries q0,q1,q2,q3,q4,q5,q6,q7,q8,q9,q11
BENCH_PEERS_SQL_ARGS ?= --queries q0,q1,q2,q3,q4,q5,q7,q8,q9,q11,q15,q16,q17,q18,q19,q20,q21,q22
bench-peers: build
	@[ -f data/nexmark.jsonl ] || $(MAKE) --no-print-directory nexmark-data
	scripts/bench-peers.sh $(WEIR) data/nexmark.jsonl --runs $(BENCH_PEERS_RUNS) $(BENCH_PEERS_ARGS)
	scripts/bench-peers.sh $(WEIR) data/nexmark.jsonl --runs $(BENCH_PEERS_RUNS) --kafka-broker $(BENCH_PEERS_KAFKA_ARGS)
	scripts/bench-peers.sh $(WEIR) data/nexmark.jsonl --runs $(BENCH_PEERS_RUNS) --weir-sql $(BENCH_PEERS_SQL_ARGS)

## Failover time of a fleet (issue 22; not part of `make test`): three `weir serve` on a
## throwaway PostgreSQL catalog and S3 server (moto), one RocksDB job grown to each state size,
## its server SIGKILLed BENCH_FLEET_KILLS times; prints p50/p99 of lease expiry, restore and
## the first new checkpoint. BENCH_FLEET_ARGS passes more (`--state-mb 10,100 --lease-ttl 3s`).
BENCH_FLEET_KILLS ?= 20
BENCH_FLEET_ARGS ?= --state-mb 10,6000 --min-state-mib 1024 --lease-ttl 3s
bench-fleet: build
	scripts/s3-server.sh install
	python3 scripts/bench_fleet.py $(WEIR) --kills $(BENCH_FLEET_KILLS) $(BENCH_FLEET_ARGS)

## A JSON-lines Nexmark file for the *-jsonl jobs.
nexmark-data: build
	mkdir -p data
	$(WEIR) nexmark generate --events 1000000 --out data/nexmark.jsonl

clean:
	$(CARGO) clean
