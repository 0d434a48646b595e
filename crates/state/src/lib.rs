//! Keyed state and timers for weir's operators.
//!
//! Keys are hashed into a fixed number of *key groups* (the job's `key-groups`, 128 by
//! default); a keyed operator's subtask owns a contiguous range of groups, and state is stored
//! and rescaled by group, so a restore at another parallelism hands out whole groups.
//!
//! An operator subtask owns one [`KeyedStateBackend`]: it registers typed states (value, list,
//! map, aggregating) and reaches them through short views scoped to a key and a namespace (a
//! window, or none); an aggregating state folds inputs into an accumulator in place through
//! an [`Aggregator`]. Its [`TimerService`] fires
//! event-time and processing-time timers in time order and keeps watermark holds in an ordered
//! multiset, so no operation scans pending timers.
//!
//! # Layout
//! - [`clock`]: the wall clock in epoch milliseconds, for every crate of weir.
//! - [`key_groups`]: key hash → key group → subtask, and key-group ranges.
//! - [`keys`]: [`KeyRef`] (a record's key) and [`Window`] (the usual namespace).
//! - [`codec`]: encodings of state values and ordered map keys.
//! - [`backend`]: the backend, typed state ids and views.
//! - [`heap`]: the hash map under every table.
//! - [`table`]: a state's table: all in memory (heap), or a write-back cache over RocksDB.
//! - [`store`]: the RocksDB database of a subtask: column families, key layout, batches.
//! - [`timers`]: the timer service and watermark holds: `timers/heap.rs` in memory,
//!   `timers/rocks.rs` in RocksDB, `timers/service.rs` the [`TimerService`] operators use.
//! - [`query`]: queryable state: direct RocksDB-snapshot reads and ordered reads.
//! - [`snapshot`]: checkpoint snapshots (logical, or RocksDB-native and incremental) and
//!   restore at any parallelism, by key group.
//! - [`error`]: what can go wrong ([`StateError`]).
//!
//! # Example
//! ```
//! use weir_state::key_groups::{key_group_for_hash, KeyGroupRange};
//! use weir_state::{KeyRef, KeyedStateBackend, TimeDomain, Window};
//!
//! let mut state = KeyedStateBackend::heap(128, KeyGroupRange::of_subtask(0, 128, 1));
//! let counts = state.value_state::<i64>("count").unwrap();
//! let key = KeyRef::new(key_group_for_hash(42, 128), b"auction-42");
//! let window = Window::new(0, 10_000);
//! let ns = window.to_namespace();
//! state.value(&counts).modify(key, &ns, || 0, |c| *c += 1).unwrap();
//! state.timers().set(TimeDomain::EventTime, window.max_timestamp(), key, &ns, None).unwrap();
//! let fired = state.timers().pop_due(TimeDomain::EventTime, 9_999).unwrap().unwrap();
//! assert_eq!(state.value(&counts).remove(fired.key(), &fired.namespace).unwrap(), Some(1));
//! ```

pub mod backend;
pub mod clock;
pub mod codec;
pub mod error;
pub mod heap;
pub mod key_groups;
pub mod keys;
pub mod query;
pub mod snapshot;
pub mod store;
pub mod table;
pub mod timers;

#[cfg(test)]
mod conformance;
#[cfg(test)]
mod snapshot_tests;

/// A clock in epoch milliseconds (processing time, for TTL).
pub type Clock = std::sync::Arc<dyn Fn() -> i64 + Send + Sync>;

pub use backend::{
    AggregatingId, AggregatingState, Aggregator, KeyedStateBackend, ListId, ListState, MapId,
    MapState, StateOptions, ValueId, ValueState, system_clock,
};
pub use codec::{MapKey, StateValue};
pub use error::StateError;
pub use keys::{KeyRef, NO_NAMESPACE, Window};
pub use query::{Filter, Found, QueryEntry, Select, StateReader};
pub use rocksdb::Cache as BlockCache;
pub use snapshot::{KeyedSnapshot, RestoreSource, SnapshotFile, SnapshotFormat, StateMeta};
pub use store::{Compression, RocksConfig, StoreCounters};
pub use timers::{HeapTimers, RocksTimers, TimeDomain, Timer, TimerService};
