//! The task executor: messages, channels, input gates, exchanges, tasks and jobs.
//!
//! # Layout
//! - [`message`]: the one in-band message enum (batch, watermark, barrier, end of input).
//! - [`gate`]: a task's merged input channels, watermark combination, barrier alignment.
//! - [`exchange`]: a task's output edges: forward, rebalance, hash by key group.
//! - [`task`]: one subtask of a chain of operators; chaining without channel hops; snapshots
//!   at barriers.
//! - [`snapshot`]: the non-keyed state a subtask checkpoints, and what a restored one gets.
//! - [`restore`]: choosing the snapshot to start from and preparing it for the new subtasks.
//! - [`job`]: attempts, their tasks and coordinator, restarts, and how a run ends.
//! - [`metrics`]: live counters read by the CLI (and later the HTTP API).

pub mod exchange;
pub mod gate;
pub mod job;
pub mod message;
pub mod metrics;
pub mod restore;
pub mod snapshot;
pub mod task;
