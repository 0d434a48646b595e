//! End-to-end tests of weir's jobs and binary, built as one test binary so linking stays fast.
//!
//! # Layout
//! - `support`: running jobs in-process, reading sink output, the shared Nexmark input file.
//! - `nexmark_stateless`: q0, q1, q2 against a plain-loop reference, every way they can run.
//! - `nexmark_reference`: plain-loop references of q3–q11, independent of weir's operators.
//! - `nexmark_stateful`: q3–q11 against those references, in order and out of order.
//! - `spec_errors`: bad job files report every problem with line, column and key.
//! - `dashboard`: the dashboard in headless Chromium through chromedriver (`make test` installs
//!   both).
//! - `hostile`: job files built to crash or exhaust a server (deep nesting, alias bombs, long
//!   expression chains, settings a run would choke on) against a running one: each refused
//!   with its problem and position, and the running job goes on.
//! - `fleet`: three `weir serve` processes on one PostgreSQL catalog: a SIGKILLed server's jobs
//!   move, a drained server's jobs move by savepoint, a paused or cut-off server commits
//!   nothing after its jobs moved; every output equals an uninterrupted run's.
//! - `hosting`: `weir serve` keeps its jobs: a SIGKILLed server comes back with them (SQLite
//!   and PostgreSQL catalogs) and resumes the running one; rescale 1 → 2 → 1 through the API;
//!   `reset-after` restores the restart budget.
//! - `kafka`: the Kafka source and sink against a broker of the test's own
//!   (`scripts/kafka-broker.sh`): every partition once with its metadata, bad records, missing
//!   topics, q5 and q11 over a topic equal to the same queries over the file, exactly once
//!   through SIGKILLs and rescales, a broker restart mid-run, the exactly-once sink's
//!   transactions on librdkafka's mock cluster, a hosted job's partition lag.
//! - `jsonl`: JSON-lines sources on over-long, invalid and deeply nested lines (skip and fail).
//! - `cli`: the `weir` binary: validate, run (Ctrl-C included), nexmark generate, the example.
//! - `recovery`: SIGKILL at random points, restart from the latest checkpoint, output equal
//!   to the golden run; rescaling on restore.
//! - `checkpoints`: corrupt snapshots skipped with a warning, savepoints from the command line
//!   resumed on the other backend, restarts after a task failure, at-least-once mode.
//! - `postgres`: the PostgreSQL sink against throwaway clusters: exactly once through SIGKILLs,
//!   a server that goes away and comes back, upserts, and the errors that name what is wrong.
//! - `postgres_cdc`: the PostgreSQL CDC source against throwaway clusters: two tables mirrored
//!   into keyed tables through SIGKILLs, a rescale and a database restart, equal at the end;
//!   the problems that stop a job (no primary key, unreadable types, schema changes,
//!   truncates, a slot dropped by hand) with what to do.
//! - `nats`: the NATS JetStream source and sink against a real `nats-server -js` (the machine's
//!   on 127.0.0.1:4222, else one of the test's own): partitions and metadata, bad messages,
//!   a stream partitioned by the server's `partition(n, ...)` mapping, missing streams and
//!   refused sign-ins, q5 and q11 NATS to NATS exactly once through
//!   SIGKILLs and rescales, a server restart mid-run, the duplicate-window check, and a hosted
//!   job's partition lag.
//! - `query`: queryable state through the API (direct and ordered paths, 404s, 429) and
//!   `weir state` against a real server.
//! - `serve`: `weir serve`'s API in-process: submit, inspect, cancel, savepoints, restarts,
//!   and what it refuses (bad files, unknown ids, oversize bodies, missing tokens).
//! - `serve_openapi`: every route's real answers (successes and errors) validated against the
//!   OpenAPI document the server generates, which must list exactly the router's routes.
//! - `serve_views`: what the dashboard reads from the API, checked against what the job must
//!   have done (per-subtask figures, the live tail, a job's log, the effective job, snapshots).
//! - `serve_hardening`: what `weir serve` refuses to be made to do: hold half-sent requests,
//!   reach endpoints it does not allow, hand back secrets (aliases included), read `+1` as 1.
//! - `s3`: checkpoints on an S3-compatible server (moto_server, started per test by
//!   `scripts/s3-server.sh`): kills and rescaling, seek-free restore counted at the server,
//!   retried faults, incomplete and corrupt checkpoints, retention, bad locations.
//! - `sql`: every Nexmark query in SQL gives the rows of its hand-written twin, on both backends
//!   at parallelism 1 and 2; problems in a query come with their line and column.
//! - `topology`: fan-out, union, key-by and parallelism changes in one job.
//! - `toolchain`: the workspace's `rust-version` is at least what every locked dependency needs.
//! - `docs`: the book's generated reference pages are what `weir schema --markdown` writes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod changelog;
mod checkpoints;
mod cli;
mod dashboard;
mod docs;
mod fleet;
mod hostile;
mod hosting;
mod iceberg;
mod jsonl;
mod kafka;
mod nats;
mod nexmark_reference;
mod nexmark_stateful;
mod nexmark_stateless;
mod postgres;
mod postgres_cdc;
mod query;
mod recovery;
mod s3;
mod serve;
mod serve_hardening;
mod serve_openapi;
mod serve_views;
mod spec_errors;
mod sql;
mod support;
mod toolchain;
mod topology;
