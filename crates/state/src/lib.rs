//! Keyed state and timers for weir's operators.
//!
//! Keys are hashed into a fixed number of *key groups* (the job's `key-groups`, 128 by
//! default); a keyed operator's subtask owns a contiguous range of groups, and state is stored
//! and rescaled by group, so a restore at another parallelism hands out whole groups.
//!
//! # Layout
//! - [`key_groups`]: key hash → key group → subtask, and key-group ranges.
//!
//! The state backends (heap and RocksDB: value, list, map and aggregating state per key and
//! namespace) and the timer service, whose set, delete, fire and watermark-hold reads cost
//! O(log n) whatever the number of pending timers (lesson 3 of `DESIGN.md`), arrive with the
//! event-time issue.
//!
//! # Example
//! ```
//! use weir_state::key_groups::{key_group_for_hash, subtask_for_key_group, KeyGroupRange};
//! let group = key_group_for_hash(0xdead_beef, 128);
//! let subtask = subtask_for_key_group(group, 128, 4);
//! assert!(KeyGroupRange::of_subtask(subtask, 128, 4).contains(group));
//! ```

pub mod key_groups;
