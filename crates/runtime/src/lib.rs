//! weir's runtime: job files, planning, records and expressions, operators, connectors, and
//! the task executor that runs them.
//!
//! A job is a YAML file ([`spec`]) describing a DAG of sources, transforms and sinks. The
//! planner ([`plan`]) checks it, compiles its SQL expressions ([`expr`]) once, and decides which
//! operators run chained in one task; the executor ([`exec`]) runs one tokio task per subtask
//! of each chain, joined by bounded channels that carry one in-band message enum, so a slow
//! sink slows its sources instead of filling memory. Records travel as Arrow record batches.
//!
//! # Layout
//! - [`api`]: the contract between the executor and what it runs: the operator, source and
//!   sink traits and their factories, the subtask context, the in-band message, metrics,
//!   snapshots, and [`api::OperatorError`] with its retry decision.
//! - [`spec`]: the job file format, strict parsing, every problem with its line and column.
//! - [`changelog`]: updating streams: each row's kind (`+I`, `-U`, `+U`, `-D`) as a last
//!   column, and a stream's changelog mode in its schema; beneath everything else.
//! - [`config`]: the vocabulary job files share (durations, sizes, event time, `on-error`,
//!   paths), beneath both [`spec`] and the connectors whose keys are written in it.
//! - [`plan`]: spec → a [`plan::Plan`], a pure description: wiring, schemas, expression
//!   compilation (one planning file per transform kind under `plan/nodes/`), chaining.
//! - [`expr`]: SQL snippets compiled to vectorised evaluators over record batches.
//! - [`keys`]: key expressions and the stable key hash behind key groups.
//! - [`operators`]: one file per operator (filter, map, aggregates, windows, Top-N, joins),
//!   each planned by its namesake in `plan/nodes/`.
//! - [`connectors`]: one module per source and sink kind (Nexmark generator, JSON lines,
//!   Kafka, NATS; blackhole, stdout, files, PostgreSQL, Kafka, NATS), each its spec, its
//!   connector (how it plans, what a server asks of it) and its tasks, and the registry that
//!   lists them.
//! - [`format`]: JSON lines to and from Arrow; splitting files for parallel readers.
//! - [`exec`]: a plan → running tasks: jobs, their supervisor and attempts, checkpointing,
//!   tasks and chains, input gates, exchanges, the run's state store.
//! - [`query`]: queryable state: lookups of a running job's keyed state by key.
//!
//! Operators and connectors import only [`api`] and what lies beneath it (`config`, `expr`,
//! `format`, `keys`, `weir_state`; operators also `spec`); no module imports another in a
//! circle. A test of this crate
//! (`layering.rs`) checks both.
//!
//! # Adding a kind
//! - A **transform**: its spec in `spec/transforms/<kind>.rs`, its operator in
//!   `operators/<kind>.rs`, its planning in `plan/nodes/<kind>.rs`, and one line of
//!   `transform_kinds!` in `spec/mod.rs`.
//! - A **source or sink**: a folder `connectors/<name>/` with its spec, its
//!   [`api::connector::SourceConnector`] or [`api::connector::SinkConnector`] and its
//!   [`api::connector::Hosted`] (endpoints, server files, secrets, limits: what `weir serve`
//!   checks and masks), and one line of `sources!` or `sinks!` in `connectors/mod.rs`. A
//!   transactional sink is a [`api::two_phase::Stage`] and a [`api::two_phase::Committer`],
//!   and runs the conformance suite (`testing::sink_conformance`) against its real system.
//!
//! # Example
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let text = "name: demo\nsources:\n  gen: {kind: nexmark, events: 10000}\n\
//!             transforms:\n  big: {kind: filter, from: gen.bid, where: price > 10000}\n\
//!             sinks:\n  out: {kind: blackhole, from: big}\n";
//! let loaded = weir_runtime::spec::load::parse_str("demo.yaml", text, &[]).unwrap();
//! let plan = weir_runtime::plan::build(&loaded).unwrap();
//! let options = weir_runtime::exec::job::JobOptions::default();
//! let job = weir_runtime::exec::job::start(&plan, options).await.unwrap();
//! let summary = job.wait().await.unwrap();
//! assert_eq!(summary.events, 10000);
//! # }
//! ```

pub mod api;
pub mod changelog;
pub mod config;
pub mod connectors;
pub mod exec;
pub mod expr;
pub mod format;
pub mod keys;
pub mod operators;
pub mod plan;
pub mod query;
pub mod spec;

/// A harness that plans one operator from a job file and drives one subtask by hand, and the
/// sink conformance suite (tests only: this crate's, and others' through the `testing`
/// feature).
#[cfg(any(test, feature = "testing"))]
pub mod testing;

#[cfg(test)]
mod layering;

/// weir's keyed state crate, for tools built on the runtime (benchmarks, tests).
pub mod state {
    pub use weir_state::key_groups::KeyGroupRange;
    pub use weir_state::*;
}
