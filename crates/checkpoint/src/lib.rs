//! Checkpoints, savepoints and restore for weir jobs.
//!
//! A job's [`coordinator`] injects barriers through the runtime, collects every task's
//! snapshot, stores the files, and publishes the checkpoint by writing its [`metadata`] last,
//! atomically and with checksums. [`restore`] reads a snapshot back, verifying everything
//! before the job starts, and [`catalog`] finds "the latest" and removes old checkpoints.
//!
//! # Layout
//! - [`storage`]: the storage interface (object-store shaped) and local files.
//! - [`metadata`]: the metadata document, its on-disk form and checksums.
//! - [`catalog`]: a job's snapshots in storage: naming, listing, retention.
//! - [`protocol`]: what the runtime and the coordinator exchange: barriers, task reports,
//!   completed snapshots, and the [`JobHooks`] the runtime implements.
//! - [`coordinator`]: the coordinator of one job, an actor: triggering, acknowledgements,
//!   timeouts, savepoints.
//! - [`publish`]: storing a snapshot's keyed files, merging operator state, writing the
//!   metadata last.
//! - [`stats`]: counters and recent history of a job's checkpoints, for metrics.
//! - [`restore`]: opening a snapshot and fetching keyed state for new subtasks.
//! - [`reader`]: seek-free reads of many ranges of merged files, and their counters.
//! - [`object`]: storage on S3-compatible object stores through `object_store`.
//! - [`error`]: what can go wrong, grouped by what to do about it.
//! - [`fence`]: which copy of a job may publish its snapshots, in a fleet of servers.
//! - `fixtures` (with the `testing` feature): the behaviour every storage must show, as checks
//!   its tests run, and hand-made snapshots for tests and benchmarks.
//!
//! # Example
//! ```
//! use weir_checkpoint::metadata::{CheckpointMetadata, SnapshotKind, VERSION};
//!
//! let m = CheckpointMetadata {
//!     version: VERSION, job: "q5".into(), id: 3, kind: SnapshotKind::Checkpoint,
//!     triggered_at: 0, completed_at: 5, key_groups: 128, operator_state: vec![], nodes: vec![],
//! };
//! let bytes = m.encode().unwrap();
//! assert_eq!(CheckpointMetadata::decode(&bytes).unwrap(), m);
//! let mut damaged = bytes.clone();
//! damaged.truncate(bytes.len() - 1);
//! assert!(CheckpointMetadata::decode(&damaged).is_err());
//! ```

pub mod catalog;
pub mod coordinator;
#[cfg(test)]
mod coordinator_tests;
pub mod error;
pub mod fence;
#[cfg(any(test, feature = "testing"))]
pub mod fixtures;
pub mod metadata;
pub mod object;
pub mod protocol;
pub mod publish;
pub mod reader;
pub mod restore;
pub mod stats;
pub mod storage;

pub use catalog::{JobCheckpoints, SnapshotRef};
pub use coordinator::{CoordinatorConfig, CoordinatorHandle};
pub use error::{CheckpointError, RestoreError, StorageError};
pub use fence::{Fence, Fenced};
pub use object::{ObjectStorage, StorageConfig};
/// The `object_store` crate, for building an [`ObjectStorage`] over a store of one's own.
pub use object_store;
pub use protocol::{
    Barrier, BarrierKind, Completed, JobHooks, NodeInfo, SubtaskSnapshot, TaskReport,
};
pub use reader::RestoreStats;
pub use stats::CheckpointStats;
pub use storage::{CheckpointStorage, LocalStorage};
