//! Sources and sinks: where records enter and leave a job.
//!
//! # Layout
//! - [`source`] / [`sink`]: the two traits every connector implements.
//! - [`nexmark`]: the Nexmark event generator (pure function of seed and event number).
//! - [`nexmark_source`]: the generator as a parallel, rate-limitable source.
//! - [`jsonl_source`]: JSON lines from files, split into chunks across subtasks.
//! - [`kafka`]: Kafka topics in (partition-aware, per-partition watermarks) and out
//!   (transactional).
//! - [`blackhole`], [`stdout`], [`file_sink`], [`postgres`]: sinks.

pub mod blackhole;
pub mod file_sink;
pub mod jsonl_source;
pub mod kafka;
pub mod nexmark;
pub mod nexmark_source;
pub mod postgres;
pub mod sink;
pub mod source;
pub mod stdout;
