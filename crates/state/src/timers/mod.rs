//! The timer service: per key and namespace, in event time and processing time, with
//! watermark holds.
//!
//! Timers are ordered by (time, key group, key, namespace), so the due ones come out first
//! without looking at the others: setting, deleting and firing a timer cost O(log n), whatever
//! the number pending. The heap backend keeps them in a `BTreeMap`; the RocksDB backend in a
//! column family whose keys sort the same way, so firing everything due is one ordered range
//! read, and a set or delete is a blind write, through an in-memory overlay that absorbs a timer
//! set and deleted again before it ever reaches RocksDB (a session window moving its end). A
//! timer may carry a *hold*, an output timestamp earlier than its firing time that holds back
//! the operator's output watermark until the timer fires or is deleted.
//! Holds live in an ordered multiset beside the timers, so the minimum hold is read in
//! O(log n) and never recomputed by scanning (lesson 3 of `DESIGN.md`: Beam's Flink runner
//! scanned every timer on every set and lost 50–80% of its Nexmark throughput).
//!
//! # Layout
//! - `heap`: [`HeapTimers`], the heap backend's timers: a `BTreeMap` per domain, and the holds.
//! - `rocks`: [`RocksTimers`], the RocksDB backend's: the key layout, the overlay of changes
//!   not yet written, and the read frontier.
//! - `service`: [`TimerService`], the view of a backend's timers that operators use, whichever
//!   backend holds them.

mod heap;
mod rocks;
mod service;

use crate::keys::KeyRef;

pub use heap::HeapTimers;
pub use rocks::RocksTimers;
pub(crate) use rocks::{decode_hold, decode_timer, encode_hold, timer_key};
pub use service::TimerService;
pub(crate) use service::Timers;

/// Which clock a timer follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TimeDomain {
    /// Fires when the watermark reaches the timer's time.
    EventTime,
    /// Fires when the wall clock (epoch ms) reaches the timer's time.
    ProcessingTime,
}

/// A timer's key or namespace bytes, inside the timer when short (an integer key, a window
/// namespace). Timers that fire together share their time, so ordering them compares keys:
/// with the bytes inside the timer a `BTreeMap` search reads only its own nodes, not a boxed
/// key per comparison, and setting a timer allocates nothing for them.
pub type TimerBytes = smallvec::SmallVec<[u8; 16]>;

/// A timer that fired.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timer {
    pub time: i64,
    pub key_group: u32,
    pub key: TimerBytes,
    pub namespace: TimerBytes,
}

impl Timer {
    pub fn key(&self) -> KeyRef<'_> {
        KeyRef::new(self.key_group, &self.key)
    }
}
