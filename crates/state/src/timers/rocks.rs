//! The RocksDB backend's timers: a column family whose keys sort as timers fire, an in-memory
//! overlay of changes not yet written, and a read frontier past the timers already fired.

use std::collections::{BTreeMap, VecDeque};

use super::{TimeDomain, Timer};
use crate::codec::{get_ordered_i64, get_varint, put_ordered_i64, put_varint};
use crate::error::StateError;
use crate::store::{KeyWrite, Store, TIMERS_CF};

/// Timers fetched per range read.
const FETCH: usize = 1024;
/// Overlay entries before they are written to RocksDB anyway.
const OVERLAY_LIMIT: usize = 65_536;

pub(crate) fn domain_byte(domain: TimeDomain) -> u8 {
    match domain {
        TimeDomain::EventTime => 0,
        TimeDomain::ProcessingTime => 1,
    }
}

/// The domain of [`domain_byte`]'s byte.
fn domain_of(byte: u8) -> TimeDomain {
    if byte == 0 {
        TimeDomain::EventTime
    } else {
        TimeDomain::ProcessingTime
    }
}

/// `[domain][time, ordered][group u16 BE][varint key length][key][namespace]`.
pub(crate) fn timer_key(domain: TimeDomain, timer: &Timer) -> Vec<u8> {
    let mut out = Vec::with_capacity(12 + timer.key.len() + timer.namespace.len());
    out.push(domain_byte(domain));
    put_ordered_i64(&mut out, timer.time);
    out.extend_from_slice(&(timer.key_group as u16).to_be_bytes());
    put_varint(&mut out, timer.key.len() as u64);
    out.extend_from_slice(&timer.key);
    out.extend_from_slice(&timer.namespace);
    out
}

pub(crate) fn decode_timer(mut bytes: &[u8]) -> Result<(TimeDomain, Timer), String> {
    let (&d, rest) = bytes.split_first().ok_or("empty timer key")?;
    bytes = rest;
    let domain = if d == 0 {
        TimeDomain::EventTime
    } else {
        TimeDomain::ProcessingTime
    };
    let time = get_ordered_i64(&mut bytes)?;
    if bytes.len() < 2 {
        return Err("short timer key".into());
    }
    let group = u16::from_be_bytes([bytes[0], bytes[1]]) as u32;
    bytes = &bytes[2..];
    let n = get_varint(&mut bytes)? as usize;
    if bytes.len() < n {
        return Err("short timer key".into());
    }
    let (key, ns) = bytes.split_at(n);
    Ok((
        domain,
        Timer {
            time,
            key_group: group,
            key: key.into(),
            namespace: ns.into(),
        },
    ))
}

pub(crate) fn encode_hold(hold: Option<i64>) -> Vec<u8> {
    hold.map_or_else(Vec::new, |h| h.to_le_bytes().to_vec())
}

pub(crate) fn decode_hold(bytes: &[u8]) -> Option<i64> {
    <[u8; 8]>::try_from(bytes).ok().map(i64::from_le_bytes)
}

/// A change of the overlay.
#[derive(Clone, Copy, Debug)]
struct Change {
    /// `Some(hold)`: set (with that hold); `None`: deleted.
    set: Option<Option<i64>>,
    /// Whether RocksDB holds this timer (so a deletion must reach it).
    stored: bool,
}

/// A timer read from RocksDB and due: its key, the timer, its hold.
type DueTimer = (Vec<u8>, Timer, Option<i64>);

/// The timers of one operator subtask in RocksDB.
#[derive(Debug)]
pub struct RocksTimers {
    /// Changes not yet written: `Some(hold)` sets, `None` deletes.
    overlay: BTreeMap<(u8, Timer), Change>,
    /// Due timers already read (and deleted) from RocksDB, per domain, in RocksDB key order,
    /// with their keys.
    due: [VecDeque<DueTimer>; 2],
    /// Per domain, the RocksDB key just after the last timer read: reads resume here, so they
    /// never step over the tombstones of timers already fired (a RocksDB queue read from its
    /// start would, and slow down with every timer ever fired). Timers set below it go straight
    /// to `due`.
    frontier: [Vec<u8>; 2],
    /// The time of the frontier per domain: timers later than it skip the key comparison.
    frontier_time: [i64; 2],
    /// Timer keys ever written to RocksDB: deleting a timer that only ever lived in the overlay
    /// just forgets it, with no tombstone.
    written: crate::table::Written,
    /// Hold time → pending timers holding it.
    holds: BTreeMap<i64, u64>,
}

impl Default for RocksTimers {
    fn default() -> Self {
        Self::new()
    }
}

impl RocksTimers {
    pub fn new() -> Self {
        Self {
            overlay: BTreeMap::new(),
            due: [VecDeque::new(), VecDeque::new()],
            frontier: [Vec::new(), Vec::new()],
            frontier_time: [i64::MIN, i64::MIN],
            written: crate::table::Written::new(),
            holds: BTreeMap::new(),
        }
    }

    /// Timers of a reopened or restored store, in one pass over them (once, on restore; never
    /// per record or per watermark): the holds rebuilt, and the filter of written timers
    /// refilled so that setting a new timer needs no read.
    pub fn rebuild(store: &Store) -> Result<Self, StateError> {
        let mut t = Self::new();
        let (holds, written) = (&mut t.holds, &mut t.written);
        store.scan(TIMERS_CF, &[], None, |key, value| {
            let (domain, timer) = decode_timer(key).map_err(|message| StateError::Codec {
                state: TIMERS_CF.into(),
                message,
            })?;
            written.insert(&(domain_byte(domain), timer));
            if let Some(h) = decode_hold(value) {
                *holds.entry(h).or_insert(0) += 1;
            }
            Ok(())
        })?;
        Ok(t)
    }

    /// Makes RocksDB hold every pending timer, for a snapshot of its files: writes the overlay,
    /// and writes back the due timers already read (and deleted) from RocksDB, moving the read
    /// frontier back to the first of them so that they are read again in order.
    pub(crate) fn persist(&mut self, store: &Store) -> Result<(), StateError> {
        self.flush(store)?;
        let mut writes = Vec::new();
        for d in 0..2 {
            let due = std::mem::take(&mut self.due[d]);
            let Some((first, timer, _)) = due.front() else {
                continue;
            };
            self.frontier[d] = first.clone();
            self.frontier_time[d] = timer.time;
            for (key, timer, hold) in due {
                self.written.insert(&(d as u8, timer));
                writes.push((key, Some(encode_hold(hold))));
            }
        }
        store.write(TIMERS_CF, writes)
    }

    fn add_hold(&mut self, hold: Option<i64>) {
        if let Some(h) = hold {
            *self.holds.entry(h).or_insert(0) += 1;
        }
    }

    fn release_hold(&mut self, hold: Option<i64>) {
        if let Some(h) = hold
            && let Some(n) = self.holds.get_mut(&h)
        {
            *n -= 1;
            if *n == 0 {
                self.holds.remove(&h);
            }
        }
    }

    /// A pending timer's hold and whether RocksDB holds it: from the overlay, else from the
    /// filter of written timers, confirmed by one point read when the filter says "maybe" (so
    /// a false positive costs one read, never a tombstone left behind).
    fn previous(
        &self,
        store: &Store,
        entry: &(u8, Timer),
        domain: TimeDomain,
    ) -> Result<(Option<i64>, bool), StateError> {
        if let Some(change) = self.overlay.get(entry) {
            return Ok((change.set.flatten(), change.stored));
        }
        if !self.written.may_contain(entry) {
            return Ok((None, false));
        }
        let found = store.get(TIMERS_CF, &timer_key(domain, &entry.1))?;
        Ok((found.as_deref().and_then(decode_hold), found.is_some()))
    }

    /// Where a timer (by its RocksDB key) sits in the fetched list, if reading has passed its
    /// place.
    fn due_position(
        &self,
        domain: TimeDomain,
        time: i64,
        key: impl FnOnce() -> Vec<u8>,
    ) -> Option<(Vec<u8>, Result<usize, usize>)> {
        let d = domain_byte(domain) as usize;
        if self.frontier[d].is_empty() || time > self.frontier_time[d] {
            return None;
        }
        let key = key();
        let passed = key < self.frontier[d];
        if !passed {
            return None;
        }
        let pos = self.due[d].binary_search_by(|(k, _, _)| k.as_slice().cmp(&key));
        Some((key, pos))
    }

    pub(super) fn set(
        &mut self,
        store: &Store,
        domain: TimeDomain,
        timer: Timer,
        hold: Option<i64>,
    ) -> Result<(), StateError> {
        if let Some((key, pos)) =
            self.due_position(domain, timer.time, || timer_key(domain, &timer))
        {
            let due = &mut self.due[domain_byte(domain) as usize];
            let previous = match pos {
                Ok(i) => Some(std::mem::replace(&mut due[i].2, hold)),
                Err(i) => {
                    due.insert(i, (key, timer, hold));
                    None
                }
            };
            self.release_hold(previous.flatten());
            self.add_hold(hold);
            return Ok(());
        }
        let entry = (domain_byte(domain), timer);
        let (previous, stored) = self.previous(store, &entry, domain)?;
        self.release_hold(previous);
        self.add_hold(hold);
        self.overlay.insert(
            entry,
            Change {
                set: Some(hold),
                stored,
            },
        );
        if self.overlay.len() >= OVERLAY_LIMIT {
            self.flush(store)?;
        }
        Ok(())
    }

    pub(super) fn delete(
        &mut self,
        store: &Store,
        domain: TimeDomain,
        timer: Timer,
    ) -> Result<(), StateError> {
        match self
            .due_position(domain, timer.time, || timer_key(domain, &timer))
            .map(|(_, p)| p)
        {
            Some(Ok(i)) => {
                if let Some((_, _, hold)) = self.due[domain_byte(domain) as usize].remove(i) {
                    self.release_hold(hold);
                }
                return Ok(());
            }
            // Below the read frontier and not due: already fired, or never set.
            Some(Err(_)) => return Ok(()),
            None => {}
        }
        let entry = (domain_byte(domain), timer);
        let (previous, stored) = self.previous(store, &entry, domain)?;
        self.release_hold(previous);
        if !stored {
            // Never written to RocksDB: forgetting it is the whole deletion.
            self.overlay.remove(&entry);
            return Ok(());
        }
        self.overlay.insert(
            entry,
            Change {
                set: None,
                stored: true,
            },
        );
        if self.overlay.len() >= OVERLAY_LIMIT {
            self.flush(store)?;
        }
        Ok(())
    }

    /// The writes that would make RocksDB hold every pending timer, as [`Self::persist`] does,
    /// leaving this in memory as it is: the overlay's changes and the due timers already read
    /// (and deleted) from RocksDB. The two are disjoint: timers below the read frontier live in
    /// `due`, the overlay holds only those above it.
    pub(crate) fn pending_writes(&self) -> Vec<KeyWrite> {
        let mut writes = Vec::with_capacity(self.overlay.len());
        for (entry, change) in &self.overlay {
            writes.push((
                timer_key(domain_of(entry.0), &entry.1),
                change.set.map(encode_hold),
            ));
        }
        for due in &self.due {
            for (key, _, hold) in due {
                writes.push((key.clone(), Some(encode_hold(*hold))));
            }
        }
        writes
    }

    /// Writes the overlay to RocksDB in one batch.
    pub fn flush(&mut self, store: &Store) -> Result<(), StateError> {
        if self.overlay.is_empty() {
            return Ok(());
        }
        let overlay = std::mem::take(&mut self.overlay);
        let mut writes = Vec::with_capacity(overlay.len());
        for (entry, change) in overlay {
            if change.set.is_some() {
                self.written.insert(&entry);
            }
            writes.push((
                timer_key(domain_of(entry.0), &entry.1),
                change.set.map(encode_hold),
            ));
        }
        store.write(TIMERS_CF, writes)
    }

    /// Reads the next due timers of `domain` up to `up_to` into `due`: the next chunk from
    /// RocksDB (one range read from the frontier, removed from the store) merged with the
    /// overlay's changes in the same key range. Timers set and fired while in the overlay never
    /// reach RocksDB at all.
    fn fetch(&mut self, store: &Store, domain: TimeDomain, up_to: i64) -> Result<(), StateError> {
        let d = domain_byte(domain);
        let mut from = vec![d];
        put_ordered_i64(&mut from, i64::MIN);
        if self.frontier[d as usize] > from {
            from = self.frontier[d as usize].clone();
        }
        let mut to = vec![d];
        match up_to.checked_add(1) {
            Some(end) => put_ordered_i64(&mut to, end),
            None => to = vec![d + 1],
        }
        let chunk = store.range(TIMERS_CF, &from, &to, FETCH)?;
        // A full chunk may stop short of `up_to`: take overlay changes only up to where it
        // stopped, so the merged order has no holes.
        let limit = (chunk.len() == FETCH)
            .then(|| chunk.last().map(|(k, _)| k.clone()))
            .flatten();
        let mut merged: BTreeMap<Vec<u8>, Option<(Timer, Option<i64>)>> = BTreeMap::new();
        let mut deletes = Vec::with_capacity(chunk.len());
        for (key, value) in chunk {
            let (_, timer) = decode_timer(&key).map_err(|message| StateError::Codec {
                state: TIMERS_CF.into(),
                message,
            })?;
            merged.insert(key.clone(), Some((timer, decode_hold(&value))));
            deletes.push((key, None));
        }
        let from_time = decode_timer(&from).map_or(i64::MIN, |(_, t)| t.time);
        let start = (
            d,
            Timer {
                time: from_time,
                key_group: 0,
                key: Default::default(),
                namespace: Default::default(),
            },
        );
        let mut taken = Vec::new();
        for ((od, timer), change) in self.overlay.range(start..) {
            if *od != d || timer.time > up_to {
                break;
            }
            let key = timer_key(domain, timer);
            if key < from || limit.as_ref().is_some_and(|l| key > *l) {
                continue;
            }
            taken.push((*od, timer.clone()));
            merged.insert(key, change.set.map(|hold| (timer.clone(), hold)));
        }
        for k in taken {
            self.overlay.remove(&k);
        }
        for (key, entry) in merged {
            let mut next = key.clone();
            next.push(0);
            self.frontier[d as usize] = next;
            self.frontier_time[d as usize] = decode_timer(&key).map_or(i64::MAX, |(_, t)| t.time);
            if let Some((timer, hold)) = entry {
                self.due[d as usize].push_back((key, timer, hold));
            }
        }
        store.write(TIMERS_CF, deletes)
    }

    pub(super) fn pop_due(
        &mut self,
        store: &Store,
        domain: TimeDomain,
        up_to: i64,
    ) -> Result<Option<Timer>, StateError> {
        let d = domain_byte(domain) as usize;
        if self.due[d].is_empty() {
            self.fetch(store, domain, up_to)?;
        }
        match self.due[d].front() {
            Some((_, t, _)) if t.time <= up_to => {
                let (_, timer, hold) = self.due[d].pop_front().expect("front exists");
                self.release_hold(hold);
                Ok(Some(timer))
            }
            _ => Ok(None),
        }
    }

    pub(super) fn next_time(
        &mut self,
        store: &Store,
        domain: TimeDomain,
    ) -> Result<Option<i64>, StateError> {
        let d = domain_byte(domain) as usize;
        if let Some((_, t, _)) = self.due[d].front() {
            return Ok(Some(t.time));
        }
        self.flush(store)?;
        let from = vec![domain_byte(domain)];
        let to = vec![domain_byte(domain) + 1];
        let first = store.range(TIMERS_CF, &from, &to, 1)?;
        Ok(match first.first() {
            Some((key, _)) => Some(
                decode_timer(key)
                    .map_err(|message| StateError::Codec {
                        state: TIMERS_CF.into(),
                        message,
                    })?
                    .1
                    .time,
            ),
            None => None,
        })
    }

    /// The least hold of all pending timers.
    pub(super) fn min_hold(&self) -> Option<i64> {
        self.holds.first_key_value().map(|(h, _)| *h)
    }

    /// The least hold by visiting every pending timer (see
    /// [`TimerService::min_hold_by_scan`](super::TimerService::min_hold_by_scan)).
    pub(super) fn min_hold_by_scan(&mut self, store: &Store) -> Result<Option<i64>, StateError> {
        self.flush(store)?;
        let mut min = self.due.iter().flatten().filter_map(|(_, _, h)| *h).min();
        let mut from = vec![0u8];
        loop {
            let chunk = store.range(TIMERS_CF, &from, &[0xff; 16], FETCH)?;
            let Some((last, _)) = chunk.last() else { break };
            for (_, v) in &chunk {
                if let Some(h) = decode_hold(v) {
                    min = Some(min.map_or(h, |m: i64| m.min(h)));
                }
            }
            from = last.clone();
            from.push(0);
        }
        Ok(min)
    }

    pub(super) fn len(&mut self, store: &Store, domain: TimeDomain) -> Result<usize, StateError> {
        self.flush(store)?;
        let d = domain_byte(domain);
        let mut n = self.due[d as usize].len();
        let mut from = vec![d];
        loop {
            let chunk = store.range(TIMERS_CF, &from, &[d + 1], FETCH)?;
            let Some((last, _)) = chunk.last() else { break };
            n += chunk.len();
            from = last.clone();
            from.push(0);
        }
        Ok(n)
    }
}
