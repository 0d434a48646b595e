//! The timer service: per key and namespace, in event time and processing time, with
//! watermark holds.
//!
//! Timers are ordered by (time, key group, key, namespace), so the due ones come out first
//! without looking at the others: setting, deleting and firing a timer cost O(log n), whatever
//! the number pending. The heap backend keeps them in a `BTreeMap`; the RocksDB backend in a
//! column family whose keys sort the same way, so firing everything due is one ordered range
//! read, and a set or delete is a blind write, through an in-memory overlay that absorbs a timer
//! set and deleted again before it ever reaches RocksDB (a session window moving its end). A timer may carry a *hold*, an output timestamp earlier than its firing
//! time that holds back the operator's output watermark until the timer fires or is deleted.
//! Holds live in an ordered multiset beside the timers, so the minimum hold is read in
//! O(log n) and never recomputed by scanning (lesson 3 of `DESIGN.md`: Beam's Flink runner
//! scanned every timer on every set and lost 50–80% of its Nexmark throughput).

use std::collections::{BTreeMap, VecDeque};

use crate::codec::{get_ordered_i64, get_varint, put_ordered_i64, put_varint};
use crate::error::StateError;
use crate::keys::KeyRef;
use crate::store::{KeyWrite, Store, TIMERS_CF};

/// Which clock a timer follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TimeDomain {
    /// Fires when the watermark reaches the timer's time.
    EventTime,
    /// Fires when the wall clock (epoch ms) reaches the timer's time.
    ProcessingTime,
}

/// A timer that fired.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timer {
    pub time: i64,
    pub key_group: u32,
    pub key: Box<[u8]>,
    pub namespace: Box<[u8]>,
}

impl Timer {
    pub fn key(&self) -> KeyRef<'_> {
        KeyRef::new(self.key_group, &self.key)
    }
}

/// Timers of one domain.
#[derive(Debug, Default)]
struct Queue {
    /// Timer → its hold, if any.
    timers: BTreeMap<Timer, Option<i64>>,
}

/// The timers of one operator subtask in memory (the heap backend).
#[derive(Debug, Default)]
pub struct HeapTimers {
    event: Queue,
    processing: Queue,
    /// Hold time → number of pending timers holding it (an ordered multiset).
    holds: BTreeMap<i64, u64>,
}

impl HeapTimers {
    pub fn new() -> Self {
        Self::default()
    }

    fn queue(&mut self, domain: TimeDomain) -> &mut Queue {
        match domain {
            TimeDomain::EventTime => &mut self.event,
            TimeDomain::ProcessingTime => &mut self.processing,
        }
    }

    fn add_hold(&mut self, hold: Option<i64>) {
        if let Some(h) = hold {
            *self.holds.entry(h).or_insert(0) += 1;
        }
    }

    fn release_hold(&mut self, hold: Option<i64>) {
        if let Some(h) = hold {
            if let Some(n) = self.holds.get_mut(&h) {
                *n -= 1;
                if *n == 0 {
                    self.holds.remove(&h);
                }
            }
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
    ) {
        let timer = Timer {
            time,
            key_group: key.group,
            key: key.bytes.into(),
            namespace: namespace.into(),
        };
        let previous = self.queue(domain).timers.insert(timer, hold);
        if let Some(previous) = previous {
            self.release_hold(previous);
        }
        self.add_hold(hold);
    }

    /// Deletes a timer; returns whether it was pending.
    pub fn delete(
        &mut self,
        domain: TimeDomain,
        time: i64,
        key: KeyRef<'_>,
        namespace: &[u8],
    ) -> bool {
        let timer = Timer {
            time,
            key_group: key.group,
            key: key.bytes.into(),
            namespace: namespace.into(),
        };
        match self.queue(domain).timers.remove(&timer) {
            Some(hold) => {
                self.release_hold(hold);
                true
            }
            None => false,
        }
    }

    /// Removes and returns the earliest timer with time ≤ `up_to`, if any.
    pub fn pop_due(&mut self, domain: TimeDomain, up_to: i64) -> Option<Timer> {
        let queue = self.queue(domain);
        let entry = queue.timers.first_entry()?;
        if entry.key().time > up_to {
            return None;
        }
        let (timer, hold) = entry.remove_entry();
        self.release_hold(hold);
        Some(timer)
    }

    /// The earliest pending time in `domain`.
    pub fn next_time(&self, domain: TimeDomain) -> Option<i64> {
        let queue = match domain {
            TimeDomain::EventTime => &self.event,
            TimeDomain::ProcessingTime => &self.processing,
        };
        queue.timers.first_key_value().map(|(t, _)| t.time)
    }

    /// The least hold of all pending timers.
    pub fn min_hold(&self) -> Option<i64> {
        self.holds.first_key_value().map(|(h, _)| *h)
    }

    /// The operator's output watermark for an input watermark: held back by pending holds.
    pub fn output_watermark(&self, input: i64) -> i64 {
        self.min_hold()
            .map_or(input, |h| input.min(h.saturating_sub(1)))
    }

    pub fn len(&self, domain: TimeDomain) -> usize {
        match domain {
            TimeDomain::EventTime => self.event.timers.len(),
            TimeDomain::ProcessingTime => self.processing.timers.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.event.timers.is_empty() && self.processing.timers.is_empty()
    }

    /// Every pending timer with its domain and hold (for snapshots).
    pub fn iter(&self) -> impl Iterator<Item = (TimeDomain, &Timer, Option<i64>)> {
        self.event
            .timers
            .iter()
            .map(|(t, h)| (TimeDomain::EventTime, t, *h))
            .chain(
                self.processing
                    .timers
                    .iter()
                    .map(|(t, h)| (TimeDomain::ProcessingTime, t, *h)),
            )
    }
}

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
        if let Some(h) = hold {
            if let Some(n) = self.holds.get_mut(&h) {
                *n -= 1;
                if *n == 0 {
                    self.holds.remove(&h);
                }
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

    fn set(
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

    fn delete(
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
                key: Box::new([]),
                namespace: Box::new([]),
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

    fn pop_due(
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

    fn next_time(&mut self, store: &Store, domain: TimeDomain) -> Result<Option<i64>, StateError> {
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

    fn len(&mut self, store: &Store, domain: TimeDomain) -> Result<usize, StateError> {
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

/// The timers of a backend: in memory or in RocksDB.
#[derive(Debug)]
pub(crate) enum Timers {
    Heap(HeapTimers),
    Rocks(RocksTimers),
}

/// A view of a backend's timers (see the module documentation).
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
            Timers::Rocks(_) => Err(StateError::Storage("the RocksDB store is closed".into())),
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
            Timers::Rocks(t) => t.holds.first_key_value().map(|(h, _)| *h),
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
            t.flush(s)?;
            let mut min = t.due.iter().flatten().filter_map(|(_, _, h)| *h).min();
            let mut from = vec![0u8];
            loop {
                let chunk = s.range(TIMERS_CF, &from, &[0xff; 16], FETCH)?;
                let Some((last, _)) = chunk.last() else { break };
                for (_, v) in &chunk {
                    if let Some(h) = decode_hold(v) {
                        min = Some(min.map_or(h, |m: i64| m.min(h)));
                    }
                }
                from = last.clone();
                from.push(0);
            }
            return Ok(min);
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
#[cfg(test)]
mod tests {
    use super::*;

    /// A seeded xorshift, so the model test needs no extra crates.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    /// (time, key group, key, namespace, hold).
    type ModelTimer = (i64, u32, Vec<u8>, Vec<u8>, Option<i64>);

    /// The naive model: a list of timers, sorted before each firing.
    #[derive(Default)]
    struct Model {
        timers: Vec<ModelTimer>,
    }

    impl Model {
        fn position(&self, t: i64, g: u32, k: &[u8], ns: &[u8]) -> Option<usize> {
            self.timers
                .iter()
                .position(|x| x.0 == t && x.1 == g && x.2 == k && x.3 == ns)
        }
        fn min_hold(&self) -> Option<i64> {
            self.timers.iter().filter_map(|x| x.4).min()
        }
    }

    #[test]
    fn timers_match_a_sorted_list_model_on_random_operations() {
        for seed in 1..=8u64 {
            let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
            let mut service = HeapTimers::new();
            let mut model = Model::default();
            let mut watermark = 0i64;
            for _ in 0..4000 {
                let t = watermark + rng.below(200) as i64;
                let g = rng.below(4) as u32;
                let k = vec![rng.below(6) as u8];
                let ns = vec![rng.below(3) as u8];
                match rng.below(10) {
                    0..=4 => {
                        let hold = (rng.below(2) == 0).then(|| t - rng.below(50) as i64);
                        service.set(TimeDomain::EventTime, t, KeyRef::new(g, &k), &ns, hold);
                        match model.position(t, g, &k, &ns) {
                            Some(i) => model.timers[i].4 = hold,
                            None => model.timers.push((t, g, k, ns, hold)),
                        }
                    }
                    5..=6 => {
                        let deleted =
                            service.delete(TimeDomain::EventTime, t, KeyRef::new(g, &k), &ns);
                        let pos = model.position(t, g, &k, &ns);
                        assert_eq!(deleted, pos.is_some());
                        if let Some(i) = pos {
                            model.timers.remove(i);
                        }
                    }
                    _ => {
                        watermark += rng.below(60) as i64;
                        model.timers.sort();
                        let mut fired = Vec::new();
                        while let Some(timer) = service.pop_due(TimeDomain::EventTime, watermark) {
                            fired.push((
                                timer.time,
                                timer.key_group,
                                timer.key.to_vec(),
                                timer.namespace.to_vec(),
                            ));
                        }
                        let due: Vec<_> = model
                            .timers
                            .iter()
                            .filter(|x| x.0 <= watermark)
                            .map(|x| (x.0, x.1, x.2.clone(), x.3.clone()))
                            .collect();
                        model.timers.retain(|x| x.0 > watermark);
                        assert_eq!(
                            fired, due,
                            "seed {seed}: fired in (time, group, key, namespace) order"
                        );
                    }
                }
                assert_eq!(service.min_hold(), model.min_hold(), "seed {seed}");
                assert_eq!(service.len(TimeDomain::EventTime), model.timers.len());
            }
        }
    }

    #[test]
    fn holds_keep_the_output_watermark_back_until_their_timer_goes() {
        let mut s = HeapTimers::new();
        let key = KeyRef::new(0, b"k");
        s.set(TimeDomain::EventTime, 100, key, b"", Some(40));
        assert_eq!(s.output_watermark(90), 39);
        s.set(TimeDomain::EventTime, 100, key, b"", Some(60));
        assert_eq!(
            s.output_watermark(90),
            59,
            "setting again replaces the hold"
        );
        assert!(s.pop_due(TimeDomain::EventTime, 100).is_some());
        assert_eq!(s.output_watermark(90), 90);
    }

    #[test]
    fn domains_are_separate() {
        let mut s = HeapTimers::new();
        let key = KeyRef::new(1, b"k");
        s.set(TimeDomain::ProcessingTime, 5, key, b"", None);
        assert!(s.pop_due(TimeDomain::EventTime, i64::MAX).is_none());
        assert_eq!(s.next_time(TimeDomain::ProcessingTime), Some(5));
        assert!(s.pop_due(TimeDomain::ProcessingTime, 5).is_some());
    }
}
