//! [`TimerService`]: the view of a backend's timers that operators use, in memory or in
//! RocksDB.

use super::{HeapTimers, RocksTimers, TimeDomain, Timer};
use crate::error::StateError;
use crate::keys::KeyRef;
use crate::store::Store;

/// The timers of a backend: in memory or in RocksDB.
#[derive(Debug)]
pub(crate) enum Timers {
    Heap(HeapTimers),
    Rocks(RocksTimers),
}

/// A view of a backend's timers (see [the module documentation](super)).
pub struct TimerService<'a> {
    timers: &'a mut Timers,
    store: Option<&'a Store>,
}

impl<'a> TimerService<'a> {
    pub(crate) fn new(timers: &'a mut Timers, store: Option<&'a Store>) -> Self {
        Self { timers, store }
    }

    fn rocks(&mut self) -> Option<(&mut RocksTimers, &Store)> {
        match (&mut *self.timers, self.store) {
            (Timers::Rocks(t), Some(s)) => Some((t, s)),
            _ => None,
        }
    }

    /// Sets a timer. Setting the same (domain, time, key, namespace) again replaces its hold;
    /// it still fires once.
    pub fn set(
        &mut self,
        domain: TimeDomain,
        time: i64,
        key: KeyRef<'_>,
        namespace: &[u8],
        hold: Option<i64>,
    ) -> Result<(), StateError> {
        if let Some((t, s)) = self.rocks() {
            let timer = Timer {
                time,
                key_group: key.group,
                key: key.bytes.into(),
                namespace: namespace.into(),
            };
            return t.set(s, domain, timer, hold);
        }
        if let Timers::Heap(t) = &mut *self.timers {
            t.set(domain, time, key, namespace, hold);
        }
        Ok(())
    }

    /// Deletes a timer if it is pending.
    pub fn delete(
        &mut self,
        domain: TimeDomain,
        time: i64,
        key: KeyRef<'_>,
        namespace: &[u8],
    ) -> Result<(), StateError> {
        if let Some((t, s)) = self.rocks() {
            let timer = Timer {
                time,
                key_group: key.group,
                key: key.bytes.into(),
                namespace: namespace.into(),
            };
            return t.delete(s, domain, timer);
        }
        if let Timers::Heap(t) = &mut *self.timers {
            t.delete(domain, time, key, namespace);
        }
        Ok(())
    }

    /// Removes and returns the earliest timer with time ≤ `up_to`, if any.
    pub fn pop_due(&mut self, domain: TimeDomain, up_to: i64) -> Result<Option<Timer>, StateError> {
        if let Some((t, s)) = self.rocks() {
            return t.pop_due(s, domain, up_to);
        }
        match &mut *self.timers {
            Timers::Heap(t) => Ok(t.pop_due(domain, up_to)),
            Timers::Rocks(_) => Err(StateError::Closed("the RocksDB store".into())),
        }
    }

    /// The earliest pending time in `domain`.
    pub fn next_time(&mut self, domain: TimeDomain) -> Result<Option<i64>, StateError> {
        if let Some((t, s)) = self.rocks() {
            return t.next_time(s, domain);
        }
        match &*self.timers {
            Timers::Heap(t) => Ok(t.next_time(domain)),
            Timers::Rocks(_) => Ok(None),
        }
    }

    /// The least hold of all pending timers.
    pub fn min_hold(&self) -> Option<i64> {
        match &*self.timers {
            Timers::Heap(t) => t.min_hold(),
            Timers::Rocks(t) => t.min_hold(),
        }
    }

    /// The operator's output watermark for an input watermark: held back by pending holds.
    pub fn output_watermark(&self, input: i64) -> i64 {
        self.min_hold()
            .map_or(input, |h| input.min(h.saturating_sub(1)))
    }

    /// Pending timers of `domain` (O(n) for RocksDB: for tests and metrics).
    pub fn len(&mut self, domain: TimeDomain) -> Result<usize, StateError> {
        if let Some((t, s)) = self.rocks() {
            return t.len(s, domain);
        }
        match &*self.timers {
            Timers::Heap(t) => Ok(t.len(domain)),
            Timers::Rocks(_) => Ok(0),
        }
    }

    /// The minimum hold computed the naive way, by visiting every pending timer: what Beam's
    /// Flink runner did on every timer set and delete. weir never calls this; it exists as the
    /// baseline arm of `weir bench timers`, which shows what the ordered multiset saves.
    pub fn min_hold_by_scan(&mut self) -> Result<Option<i64>, StateError> {
        if let Some((t, s)) = self.rocks() {
            return t.min_hold_by_scan(s);
        }
        match &*self.timers {
            Timers::Heap(t) => Ok(t.iter().filter_map(|(_, _, h)| h).min()),
            Timers::Rocks(_) => Ok(None),
        }
    }

    pub fn is_empty(&mut self) -> Result<bool, StateError> {
        Ok(self.len(TimeDomain::EventTime)? == 0 && self.len(TimeDomain::ProcessingTime)? == 0)
    }
}
