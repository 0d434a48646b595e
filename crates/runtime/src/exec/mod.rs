//! The task executor: messages, channels, input gates, exchanges, tasks and jobs.
//!
//! # Layout
//! - [`message`]: the one in-band message enum (batch, watermark, end of input).
//! - [`gate`]: a task's merged input channels and watermark combination.
//! - [`exchange`]: a task's output edges: forward, rebalance, hash by key group.
//! - [`task`]: one subtask of a chain of operators; chaining without channel hops.
//! - [`job`]: spawning, owning and awaiting all tasks of a job.
//! - [`metrics`]: live counters read by the CLI (and later the HTTP API).

pub mod exchange;
pub mod gate;
pub mod job;
pub mod message;
pub mod metrics;
pub mod task;
