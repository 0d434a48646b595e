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
//! - [`spec`]: the job file format, strict parsing, every problem with its line and column.
//! - [`plan`]: wiring, schemas, expression compilation (one planning file per transform kind
//!   under `plan/nodes/`), chaining, task construction.
//! - [`expr`]: SQL snippets compiled to vectorised evaluators over record batches.
//! - [`operators`]: one file per operator (filter, map, key-by, aggregates, windows, Top-N,
//!   joins), each planned by its namesake in `plan/nodes/`.
//! - [`connectors`]: sources (Nexmark generator, JSON lines, Kafka) and sinks (blackhole,
//!   stdout, files, PostgreSQL, Kafka).
//! - [`format`]: JSON lines to and from Arrow; splitting files for parallel readers.
//! - [`exec`]: messages, input gates, exchanges, tasks, jobs, metrics.
//! - [`query`]: queryable state: lookups of a running job's keyed state by key.
//! - [`error`]: failure categories of running jobs.
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

pub mod connectors;
pub mod error;
pub mod exec;
pub mod expr;
pub mod format;
pub mod operators;
pub mod plan;
pub mod query;
pub mod spec;

/// weir's keyed state crate, for tools built on the runtime (benchmarks, tests).
pub mod state {
    pub use weir_state::key_groups::KeyGroupRange;
    pub use weir_state::*;
}
