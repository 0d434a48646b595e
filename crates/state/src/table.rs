//! One state's table: a hash map from (key group, key, namespace) to a value, optionally
//! backed by RocksDB.
//!
//! Without a store (the heap backend) the map holds everything. With a store (the RocksDB
//! backend) it is a bounded write-back cache: a miss reads RocksDB once and remembers the answer
//! (absent included), writes stay in the cache marked dirty, and when the cache is full every
//! dirty entry goes to RocksDB in one write batch and the cache starts empty. Hot keys therefore
//! cost what they cost on the heap; cold ones cost a point read.
//!
//! A state with a TTL stamps every write with the clock; an entry older than the TTL reads as
//! absent, and is removed: on the heap by a sweep every so many writes, in RocksDB by a
//! compaction filter.

use crate::codec::StateValue;
use crate::error::StateError;
use crate::heap::{Slot, SlotMap, SlotRef};
use crate::keys::KeyRef;
use crate::snapshot::Staged;
use crate::store::{KeyWrite, Store, decode_entry_key, entry_key};

/// What registering a state does to the values its column family already holds, when they
/// were written with another TTL setting (a state that gained or lost its TTL since the
/// snapshot it was restored from).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Relayout {
    /// The layout is the table's already.
    Keep,
    /// Drop the 8-byte write-time prefix (the state no longer has a TTL).
    Strip,
    /// Prefix this write time (the state gained a TTL: its entries start their life now).
    Stamp(i64),
}

/// Rewrites gathered before one batch goes to the store.
const REWRITE_BATCH: usize = 4096;

/// A cached entry.
#[derive(Debug)]
pub(crate) struct Entry<T> {
    /// The value, or `None` when known to be absent (a deletion waiting for flush, or a cached
    /// miss).
    pub(crate) value: Option<T>,
    /// Written since the last flush.
    pub(crate) dirty: bool,
    /// When the value was last written (for TTL), epoch ms.
    pub(crate) written: i64,
}

/// A Bloom filter of the keys a table has written to RocksDB: a miss on a key it has never
/// written needs no read (new windows, new keys: most misses of a streaming job).
///
/// One blocked filter of 2^24 bits (2 MiB, allocated on the first write to the store): every
/// probe touches one 64-byte block, so asking costs one cache miss however many keys were
/// written (~0.1% false positives at a million keys; more keys only mean more reads, never
/// wrong answers). A filter that grew in layers was tried first: each layer added a cache miss
/// to every negative answer, and the timer benchmark lost 3× between 1,000 and 1,000,000
/// pending timers.
///
/// The filter must see every key the store holds: a reopened or restored store's are fed to
/// it in one pass when the state is registered ([`Table::load_stored`]) or the timers rebuilt
/// ([`crate::RocksTimers::rebuild`]).
pub(crate) struct Written {
    bits: Vec<u64>,
    hasher: hashbrown::DefaultHashBuilder,
}

impl std::fmt::Debug for Written {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Written({} bits)", self.bits.len() * 64)
    }
}

const FILTER_BITS: u64 = 1 << 24;

impl Written {
    pub(crate) fn new() -> Self {
        Self {
            bits: Vec::new(),
            hasher: hashbrown::DefaultHashBuilder::default(),
        }
    }

    /// Three bits of one 512-bit block.
    fn probes(&self, slot: impl std::hash::Hash) -> [u64; 3] {
        use std::hash::BuildHasher;
        let a = self.hasher.hash_one(slot);
        let b = a.rotate_left(21) ^ 0x9e37_79b9_7f4a_7c15;
        let block = (a % (FILTER_BITS / 512)) * 512;
        [
            block + (b & 511),
            block + ((b >> 9) & 511),
            block + ((b >> 18) & 511),
        ]
    }

    pub(crate) fn insert(&mut self, slot: impl std::hash::Hash) {
        if self.bits.is_empty() {
            self.bits = vec![0; (FILTER_BITS / 64) as usize];
        }
        for p in self.probes(slot) {
            self.bits[(p / 64) as usize] |= 1 << (p % 64);
        }
    }

    /// Whether the store may hold `slot`.
    pub(crate) fn may_contain(&self, slot: impl std::hash::Hash) -> bool {
        if self.bits.is_empty() {
            return false;
        }
        self.probes(slot)
            .iter()
            .all(|p| self.bits[(p / 64) as usize] & (1 << (p % 64)) != 0)
    }
}

#[derive(Debug)]
pub(crate) struct Table<T> {
    pub(crate) name: String,
    pub(crate) cache: SlotMap<Entry<T>>,
    /// Keys written to the store (RocksDB).
    written: Written,
    /// Entries kept before flushing (RocksDB only).
    capacity: usize,
    /// Time to live in ms, if any.
    ttl: Option<i64>,
    /// Writes since the last TTL sweep (heap only).
    writes_since_sweep: usize,
    scratch: Vec<u8>,
}

impl<T: StateValue> Table<T> {
    /// A table whose store holds nothing of it yet, so misses on keys it never wrote need no
    /// read; a reopened or restored store's keys are learnt with [`Self::load_stored`].
    pub(crate) fn new(name: &str, capacity: usize, ttl: Option<i64>) -> Self {
        Self {
            name: name.to_string(),
            cache: SlotMap::default(),
            written: Written::new(),
            capacity: capacity.max(1),
            ttl,
            writes_since_sweep: 0,
            scratch: Vec::new(),
        }
    }

    /// The cached entry of `slot`, inserted empty when absent. With a store, a new entry is
    /// filled from it (unless the filter of written keys rules it out): one probe of the cache
    /// on a hit, one read of the store on a true miss.
    fn entry(
        &mut self,
        store: Option<&Store>,
        slot: SlotRef<'_>,
    ) -> Result<&mut Entry<T>, StateError> {
        if let Some(store) = store
            && self.cache.len() >= self.capacity
            && self.cache.get(slot).is_none()
        {
            self.flush(Some(store))?;
            self.cache.clear();
        }
        let may_be_stored = store.is_some() && self.written.may_contain(slot);
        let (entry, inserted) = self.cache.get_or_insert_flagged(slot, || Entry {
            value: None,
            dirty: false,
            written: 0,
        });
        if inserted
            && may_be_stored
            && let Some(store) = store
        {
            entry_key(
                KeyRef::new(slot.group, slot.key),
                slot.ns,
                &mut self.scratch,
            );
            if let Some(bytes) = store.get(&self.name, &self.scratch)? {
                let (written, payload) = if self.ttl.is_some() {
                    let (t, rest) = bytes.split_at(8.min(bytes.len()));
                    (
                        <[u8; 8]>::try_from(t).map(i64::from_le_bytes).unwrap_or(0),
                        rest,
                    )
                } else {
                    (0, &bytes[..])
                };
                entry.value =
                    Some(T::from_bytes(payload).map_err(|message| StateError::Codec {
                        state: self.name.clone(),
                        message,
                    })?);
                entry.written = written;
            }
        }
        Ok(entry)
    }

    /// Forgets an entry that is absent and need not be written (heap: always; RocksDB: when
    /// the store never had it).
    fn forget_if_absent(&mut self, store: Option<&Store>, slot: SlotRef<'_>) {
        let drop = match self.cache.get(slot) {
            Some(e) => e.value.is_none() && (store.is_none() || !self.written.may_contain(slot)),
            None => false,
        };
        if drop {
            self.cache.remove(slot);
        }
    }

    /// Read-only lookup (a miss is cached with a store, not inserted on the heap).
    pub(crate) fn peek(
        &mut self,
        store: Option<&Store>,
        slot: SlotRef<'_>,
        now: i64,
    ) -> Result<Option<&T>, StateError> {
        let ttl = self.ttl;
        let live = |e: &Entry<T>| ttl.is_none_or(|ttl| e.written.saturating_add(ttl) > now);
        if store.is_none() {
            return Ok(self
                .cache
                .get(slot)
                .filter(|e| live(e))
                .and_then(|e| e.value.as_ref()));
        }
        let entry = self.entry(store, slot)?;
        Ok(if live(entry) {
            entry.value.as_ref()
        } else {
            None
        })
    }

    /// Sets the value of `slot` (no read needed).
    pub(crate) fn put(
        &mut self,
        store: Option<&Store>,
        slot: SlotRef<'_>,
        value: T,
        now: i64,
    ) -> Result<(), StateError> {
        if store.is_some() && self.cache.len() >= self.capacity && self.cache.get(slot).is_none() {
            self.flush(store)?;
            self.cache.clear();
        }
        self.cache.insert(
            slot,
            Entry {
                value: Some(value),
                dirty: true,
                written: now,
            },
        );
        self.wrote(store, now);
        Ok(())
    }

    /// Read-modify-write with removal: `f` sees the value (or `None`) and may change or clear it.
    pub(crate) fn update<R>(
        &mut self,
        store: Option<&Store>,
        slot: SlotRef<'_>,
        now: i64,
        f: impl FnOnce(&mut Option<T>) -> R,
    ) -> Result<R, StateError> {
        let ttl = self.ttl;
        let entry = self.entry(store, slot)?;
        if ttl.is_some_and(|ttl| entry.written.saturating_add(ttl) <= now) {
            entry.value = None;
        }
        let r = f(&mut entry.value);
        entry.dirty = true;
        entry.written = now;
        // A second lookup only when there may be something to forget: for a present value
        // it would be a second hash and key comparison per update.
        if entry.value.is_none() {
            self.forget_if_absent(store, slot);
        }
        self.wrote(store, now);
        Ok(r)
    }

    /// Changes the value of `slot` in place, creating it with `init` if absent; says whether
    /// it was created. An emptied value is not removed: callers remove explicitly.
    pub(crate) fn modify<R>(
        &mut self,
        store: Option<&Store>,
        slot: SlotRef<'_>,
        now: i64,
        init: impl FnOnce() -> T,
        f: impl FnOnce(&mut T) -> R,
    ) -> Result<(R, bool), StateError> {
        let ttl = self.ttl;
        let entry = self.entry(store, slot)?;
        let live =
            entry.value.is_some() && ttl.is_none_or(|ttl| entry.written.saturating_add(ttl) > now);
        let created = !live;
        if created {
            entry.value = Some(init());
        }
        entry.dirty = true;
        entry.written = now;
        let r = f(entry.value.as_mut().expect("set just above when absent"));
        self.wrote(store, now);
        Ok((r, created))
    }

    /// Removes the value of `slot`, returning it.
    pub(crate) fn remove(
        &mut self,
        store: Option<&Store>,
        slot: SlotRef<'_>,
        now: i64,
    ) -> Result<Option<T>, StateError> {
        let ttl = self.ttl;
        if store.is_none() && self.cache.get(slot).is_none() {
            return Ok(None);
        }
        let entry = self.entry(store, slot)?;
        let expired = ttl.is_some_and(|ttl| entry.written.saturating_add(ttl) <= now);
        let value = entry.value.take().filter(|_| !expired);
        // A tombstone until the next flush deletes the RocksDB entry, unless there is none.
        entry.dirty = true;
        self.forget_if_absent(store, slot);
        Ok(value)
    }

    /// Changes a list or map in place, creating it with `init` if absent, and drops it if it
    /// is left empty. Whether it emptied is learnt in place, so a collection left non-empty
    /// costs one lookup, not two.
    pub(crate) fn modify_collection<R>(
        &mut self,
        store: Option<&Store>,
        slot: SlotRef<'_>,
        now: i64,
        init: impl FnOnce() -> T,
        empty: impl Fn(&T) -> bool,
        f: impl FnOnce(&mut T) -> R,
    ) -> Result<R, StateError> {
        let ((r, emptied), _) = self.modify(store, slot, now, init, |value| {
            let r = f(value);
            (r, empty(value))
        })?;
        if emptied {
            self.remove_if(store, slot, empty);
        }
        Ok(r)
    }

    /// Drops an entry that became empty (a list or map with nothing left).
    pub(crate) fn remove_if(
        &mut self,
        store: Option<&Store>,
        slot: SlotRef<'_>,
        empty: impl Fn(&T) -> bool,
    ) {
        let Some(entry) = self.cache.get_mut(slot) else {
            return;
        };
        if entry.value.as_ref().is_some_and(empty) {
            entry.value = None;
            entry.dirty = true;
            self.forget_if_absent(store, slot);
        }
    }

    /// Counts a write; on the heap, sweeps expired entries every so many writes (amortised
    /// O(1) per write).
    fn wrote(&mut self, store: Option<&Store>, now: i64) {
        let Some(ttl) = self.ttl else { return };
        if store.is_some() {
            return;
        }
        self.writes_since_sweep += 1;
        if self.writes_since_sweep >= self.cache.len().max(1024) {
            self.writes_since_sweep = 0;
            self.cache
                .retain(|_, e| e.value.is_some() && e.written.saturating_add(ttl) > now);
        }
    }

    /// Writes every dirty entry to the store in one batch.
    pub(crate) fn flush(&mut self, store: Option<&Store>) -> Result<(), StateError> {
        let Some(store) = store else {
            return Ok(());
        };
        let writes = self.dirty_writes(true);
        store.write(&self.name, writes)?;
        store.mark_written_through(&self.name);
        Ok(())
    }

    /// The dirty entries as the writes that would bring the store up to date (a `None` value
    /// deletes). `settle`: they are being written now, so the entries become clean and their
    /// keys known to the store; otherwise (the overlay of a native snapshot, see
    /// [`crate::snapshot::overlay`]) the cache is left as it is, still dirty.
    pub(crate) fn dirty_writes(&mut self, settle: bool) -> Vec<KeyWrite> {
        let mut writes = Vec::new();
        for (slot, entry) in self.cache.iter_mut() {
            if !entry.dirty {
                continue;
            }
            let stored = self.written.may_contain(slot.as_ref());
            if settle {
                entry.dirty = false;
                if entry.value.is_some() && !stored {
                    self.written.insert(slot.as_ref());
                }
            }
            if entry.value.is_none() && !stored {
                // Deleting what was never written: nothing to tell the store.
                continue;
            }
            let mut key = Vec::new();
            entry_key(KeyRef::new(slot.group, slot.key()), slot.ns(), &mut key);
            let value = entry.value.as_ref().map(|v| {
                let mut bytes = Vec::new();
                if self.ttl.is_some() {
                    bytes.extend_from_slice(&entry.written.to_le_bytes());
                }
                v.encode(&mut bytes);
                bytes
            });
            writes.push((key, value));
        }
        writes
    }

    /// Learns which keys the store holds of this table, in one pass over its column family, so
    /// that the filter of written keys is complete again after a reopen or a restore (without
    /// it, every miss would read RocksDB); rewrites the values on the way if `relayout` says so.
    pub(crate) fn load_stored(
        &mut self,
        store: &Store,
        relayout: Relayout,
    ) -> Result<(), StateError> {
        let name = self.name.clone();
        let codec = |message: String| StateError::Codec {
            state: name.clone(),
            message,
        };
        let mut rewrites: Vec<(Vec<u8>, Option<Vec<u8>>)> = Vec::new();
        let written = &mut self.written;
        store.scan(&self.name, &[], None, |key, value| {
            let (group, k, ns) = decode_entry_key(key).map_err(codec)?;
            written.insert(SlotRef { group, key: k, ns });
            let rewritten = match relayout {
                Relayout::Keep => return Ok(()),
                Relayout::Strip => value
                    .get(8..)
                    .ok_or_else(|| codec(format!("a TTL value of {} bytes", value.len())))?
                    .to_vec(),
                Relayout::Stamp(now) => {
                    let mut v = Vec::with_capacity(8 + value.len());
                    v.extend_from_slice(&now.to_le_bytes());
                    v.extend_from_slice(value);
                    v
                }
            };
            rewrites.push((key.to_vec(), Some(rewritten)));
            if rewrites.len() >= REWRITE_BATCH {
                store.write(&name, std::mem::take(&mut rewrites))?;
            }
            Ok(())
        })?;
        store.write(&self.name, rewrites)
    }

    /// Fills a heap table from the entries a restore staged for it (see
    /// [`crate::snapshot`]): decodes every value, and keeps each write time if the snapshot
    /// had a TTL for the state (a state that gained one starts its entries' lives `now`).
    /// Entries already expired are left out.
    pub(crate) fn restore_staged(&mut self, staged: &Staged, now: i64) -> Result<(), StateError> {
        for e in &staged.entries {
            let written = if staged.ttl_ms.is_some() {
                e.written
            } else {
                now
            };
            if self
                .ttl
                .is_some_and(|ttl| written.saturating_add(ttl) <= now)
            {
                continue;
            }
            let value = T::from_bytes(&e.value).map_err(|message| StateError::Codec {
                state: self.name.clone(),
                message,
            })?;
            self.cache.insert(
                e.slot.as_ref(),
                Entry {
                    value: Some(value),
                    dirty: false,
                    written,
                },
            );
        }
        Ok(())
    }

    /// Live entries (present, not expired at `now`) with their write times, for snapshots.
    pub(crate) fn live_at(&self, now: i64) -> impl Iterator<Item = (&Slot, i64, &T)> {
        let ttl = self.ttl;
        self.cache.iter().filter_map(move |(s, e)| {
            let v = e.value.as_ref()?;
            ttl.is_none_or(|ttl| e.written.saturating_add(ttl) > now)
                .then_some((s, e.written, v))
        })
    }

    pub(crate) fn ttl(&self) -> Option<i64> {
        self.ttl
    }

    /// What the cache knows of `slot` at `now`: `Some(Some(v))` a live value, `Some(None)` no
    /// value, `None` not cached (on the heap: absent; with RocksDB the store may hold it).
    pub(crate) fn live_value(&self, slot: SlotRef<'_>, now: i64) -> Option<Option<&T>> {
        let e = self.cache.get(slot)?;
        let live = self
            .ttl
            .is_none_or(|ttl| e.written.saturating_add(ttl) > now);
        Some(e.value.as_ref().filter(|_| live))
    }

    /// Live entries (values present and not expired), for metrics.
    pub(crate) fn live_entries(&self) -> impl Iterator<Item = (&Slot, &T)> {
        self.cache
            .iter()
            .filter_map(|(s, e)| e.value.as_ref().map(|v| (s, v)))
    }
}
