//! The task executor: the only place where a [`Plan`](crate::plan::Plan) becomes running
//! tasks, channels, state stores and working directories.
//!
//! # Layout
//! - [`job`]: starting a job, and steering it from outside ([`job::JobControl`]).
//! - [`supervisor`]: attempts one after another, restarts after failures, how a run ends.
//! - [`restart`]: the restart strategies: whether a failed job restarts, and when.
//! - [`attempt`]: one attempt's tasks, coordinator and lease, from launch to its end.
//! - [`checkpointing`]: each attempt's coordinator and trigger lease, the hooks through which
//!   the coordinator reaches the runtime, and the sinks' last transactions.
//! - [`summary`]: what a finished run did.
//! - [`instantiate`]: a plan → the tasks of one attempt, with their channels and wiring.
//! - [`state`]: where a run keeps keyed state (heap or RocksDB, its working directory).
//! - [`gate`]: a task's merged input channels, watermark combination, barrier alignment.
//! - [`exchange`]: a task's output edges: forward, rebalance, hash by key group.
//! - [`task`]: one subtask of a chain: its input (a source or a gate), its loop, its
//!   acknowledgements to the checkpoint coordinator.
//! - [`chain`]: the operators, exchanges and sinks of one task, joined without channel hops;
//!   snapshots at barriers.
//! - [`source_task`]: a source task's loop and its watermark generator.
//! - [`restore`]: choosing the snapshot to start from and preparing it for the new subtasks.
//! - [`error`]: why a run did not complete ([`error::JobError`], [`error::RunError`]).

pub mod attempt;
pub mod chain;
pub mod checkpointing;
pub mod error;
pub mod exchange;
pub mod gate;
pub mod instantiate;
pub mod job;
pub mod restart;
pub mod restore;
pub mod source_task;
pub mod state;
pub mod summary;
pub mod supervisor;
pub mod task;
