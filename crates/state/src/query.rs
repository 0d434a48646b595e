//! Queryable state: reading a subtask's keyed state from outside its task.
//!
//! Two paths, one answer ([`Found`]):
//!
//! - **Direct** (RocksDB): a [`StateReader`] reads a RocksDB snapshot of the subtask's
//!   database on the caller's thread. Nothing is queued to the operator and it never waits
//!   for it (lesson 2 of `DESIGN.md`). The operator's tables are write-back caches, so the
//!   database holds each state as of its table's last *write-through* (a savepoint, a cache
//!   eviction, an ordered lookup, or the state's `max-staleness`): the answer carries that
//!   time, [`Found::as_of_ms`].
//! - **Ordered** ([`KeyedStateBackend::read_ordered`]): the operator's own task answers
//!   between two batches. It sees every write the operator made before (read-your-writes);
//!   the heap backend has only this path.
//!
//! # Why the direct read is safe
//!
//! *Ownership.* The database handle is an `Arc<SharedDb>` owned by the subtask's
//! [`Store`](crate::store::Store). A reader keeps only a `Weak` and upgrades it for the length
//! of one lookup, so it can never resurrect a closed store, and while it reads, its strong
//! reference keeps the database open: the store's `close` cannot free it under the reader
//! (the last holder closes it and removes the directory), and `close_keeping_files` (before a
//! reopen) waits the few milliseconds a lookup takes. Column-family handles borrow from the
//! database and creating one needs it exclusively (`Arc::get_mut`), so states are all
//! registered before a reader exists. Every answer is freshly allocated and owned by the
//! caller: no buffer is recycled, so no late completion can write into someone else's answer
//! (BookKeeper's corruption).
//!
//! *Visibility.* A table writes its changes in one RocksDB `WriteBatch` (atomic: a snapshot
//! sees all of it or none), and only after that write returns stores the write-through time
//! (`Release`). A reader loads the time (`Acquire`) *before* taking its snapshot, so the
//! snapshot contains at least every write up to that time: the freshness it reports is a
//! lower bound, never a promise the data cannot keep. All entries of one answer come from one
//! snapshot, so they are mutually consistent (no torn reads across keys or namespaces).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use rocksdb::DB;

use crate::backend::KeyedStateBackend;
use crate::error::StateError;
use crate::heap::SlotRef;
use crate::keys::KeyRef;
use crate::store::{decode_entry_key, entry_key, storage};

/// Wall-clock epoch milliseconds: the clock of the write-through stamps, and of the freshness a
/// lookup reports against them.
pub use crate::clock::now_ms;

/// The longest `close_keeping_files` waits for lookups in flight to let go of the database.
const EXCLUSIVE_WAIT: Duration = Duration::from_secs(2);

/// A subtask's RocksDB database, shared between its store and queries reading it.
///
/// Fields drop in order: the database closes first, then `remover` deletes its directory if
/// the store asked for that while a query still held the database.
pub(crate) struct SharedDb {
    db: DB,
    remover: DirRemover,
}

/// Removes a directory when dropped, if told to.
struct DirRemover(Mutex<Option<PathBuf>>);

impl Drop for DirRemover {
    fn drop(&mut self) {
        let path = match self.0.get_mut() {
            Ok(p) => p.take(),
            Err(poisoned) => poisoned.into_inner().take(),
        };
        if let Some(path) = path {
            // Nobody is left to report a failure to: a directory left behind is a run's
            // working copy, removed with the run's directory when the job ends.
            let _ = std::fs::remove_dir_all(&path);
        }
    }
}

impl SharedDb {
    pub(crate) fn new(db: DB) -> Self {
        Self {
            db,
            remover: DirRemover(Mutex::new(None)),
        }
    }

    pub(crate) fn db(&self) -> &DB {
        &self.db
    }

    pub(crate) fn db_mut(&mut self) -> &mut DB {
        &mut self.db
    }

    /// The database, if nobody else holds it; otherwise the last holder to let go closes it
    /// and removes `path` (a query that was reading when the store closed).
    pub(crate) fn close_or_defer(shared: Arc<SharedDb>, path: &Path) -> Option<DB> {
        match Arc::try_unwrap(shared) {
            Ok(s) => Some(s.db),
            Err(shared) => {
                // We still hold `shared`, so no reader can be the last one before this is set.
                match shared.remover.0.lock() {
                    Ok(mut p) => *p = Some(path.to_path_buf()),
                    Err(poisoned) => *poisoned.into_inner() = Some(path.to_path_buf()),
                }
                None
            }
        }
    }

    /// The database for the store alone, waiting (briefly: one lookup) for readers to finish.
    pub(crate) fn exclusive(mut shared: Arc<SharedDb>) -> Result<DB, StateError> {
        let started = Instant::now();
        loop {
            match Arc::try_unwrap(shared) {
                Ok(s) => return Ok(s.db),
                Err(back) if started.elapsed() < EXCLUSIVE_WAIT => {
                    shared = back;
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(_) => {
                    return Err(StateError::storage(format!(
                        "a state query still reads the store after {EXCLUSIVE_WAIT:?}"
                    )));
                }
            }
        }
    }
}

/// A predicate on a stored entry's (key group, key, namespace), run where the state is read.
pub type Filter<'a> = dyn FnMut(u32, &[u8], &[u8]) -> bool + 'a;

/// What a query reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Select {
    /// The entries of one key: of one namespace, or (`namespace` `None`) of every namespace
    /// (every window of the key, say), in namespace order, at most `limit`.
    Key {
        group: u32,
        key: Vec<u8>,
        namespace: Option<Vec<u8>>,
        limit: usize,
    },
    /// Entries of every key whose (group, key, namespace) passes the caller's filter, in
    /// store order, at most `limit` found and `budget` examined (a scan costs what it
    /// examines: the budget bounds it).
    Scan { limit: usize, budget: usize },
}

/// One state entry as stored: its key and namespace, and the value's encoding (without the
/// TTL write-time prefix).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueryEntry {
    pub group: u32,
    pub key: Vec<u8>,
    pub namespace: Vec<u8>,
    pub value: Vec<u8>,
}

/// A query's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    pub entries: Vec<QueryEntry>,
    /// The state as of this time (epoch ms): every write the operator made before it is in
    /// the answer. Direct reads: the state's last write-through; ordered reads: the read.
    pub as_of_ms: i64,
    /// Entries examined.
    pub examined: usize,
    /// Whether the limit or the budget cut the answer short.
    pub truncated: bool,
}

/// Reads one state of one subtask directly: see the module documentation for why that is
/// safe. Cheap to clone; outliving the store is fine (lookups then fail with
/// [`StateError::Storage`]).
#[derive(Clone)]
pub struct StateReader {
    db: Weak<SharedDb>,
    state: String,
    ttl_ms: Option<i64>,
    written_through: Arc<AtomicI64>,
}

impl std::fmt::Debug for StateReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StateReader({})", self.state)
    }
}

impl StateReader {
    pub fn state(&self) -> &str {
        &self.state
    }

    /// When the state was last written through to RocksDB (epoch ms).
    pub fn written_through_ms(&self) -> i64 {
        self.written_through.load(Ordering::Acquire)
    }

    /// Reads `select` from one RocksDB snapshot, on the calling thread. A point read costs a
    /// memtable probe and at most a few block reads (block cache, else the page cache of a
    /// local SSD): microseconds, which is why callers run it inline rather than hand it to
    /// a blocking pool (measured in `weir bench query`).
    pub fn read(&self, select: &Select, filter: &mut Filter<'_>) -> Result<Found, StateError> {
        // Held until the end of this call: the store cannot close the database under us.
        let shared = self
            .db
            .upgrade()
            .ok_or_else(|| StateError::Closed(format!("state `{}`", self.state)))?;
        // Before the snapshot: the snapshot then holds at least what was written by then.
        let as_of_ms = self.written_through.load(Ordering::Acquire);
        let db = shared.db();
        let cf = db
            .cf_handle(&self.state)
            .ok_or_else(|| StateError::storage(format!("no column family `{}`", self.state)))?;
        let snapshot = db.snapshot();
        let now = now_ms();
        let mut found = Found {
            entries: Vec::new(),
            as_of_ms,
            examined: 0,
            truncated: false,
        };
        let (from, limit, budget) = match select {
            Select::Key {
                group,
                key,
                namespace,
                limit,
            } => {
                let mut k = Vec::new();
                entry_key(
                    KeyRef::new(*group, key),
                    namespace.as_deref().unwrap_or(&[]),
                    &mut k,
                );
                if namespace.is_some() {
                    found.examined = 1;
                    let value = snapshot
                        .get_cf(cf, &k)
                        .map_err(|e| storage("reading queryable state", e))?;
                    if let Some(value) = value.and_then(|v| self.live(&v, now)) {
                        found.entries.push(QueryEntry {
                            group: *group,
                            key: key.clone(),
                            namespace: namespace.clone().unwrap_or_default(),
                            value,
                        });
                    }
                    return Ok(found);
                }
                (k, *limit, usize::MAX)
            }
            Select::Scan { limit, budget } => (Vec::new(), *limit, *budget),
        };
        let prefix = from.clone();
        let mut opts = rocksdb::ReadOptions::default();
        opts.set_snapshot(&snapshot);
        let mut it = db.raw_iterator_cf_opt(cf, opts);
        it.seek(&from);
        while let Some((k, v)) = it.item() {
            if !k.starts_with(&prefix) {
                break;
            }
            if found.entries.len() >= limit || found.examined >= budget {
                found.truncated = true;
                break;
            }
            found.examined += 1;
            let (group, key, ns) = decode_entry_key(k).map_err(|message| StateError::Codec {
                state: self.state.clone(),
                message,
            })?;
            if filter(group, key, ns)
                && let Some(value) = self.live(v, now)
            {
                found.entries.push(QueryEntry {
                    group,
                    key: key.to_vec(),
                    namespace: ns.to_vec(),
                    value,
                });
            }
            it.next();
        }
        it.status()
            .map_err(|e| storage("scanning queryable state", e))?;
        Ok(found)
    }

    /// The value without its TTL prefix, unless it has expired.
    fn live(&self, stored: &[u8], now: i64) -> Option<Vec<u8>> {
        let Some(ttl) = self.ttl_ms else {
            return Some(stored.to_vec());
        };
        let written = i64::from_le_bytes(stored.get(..8)?.try_into().ok()?);
        (written.saturating_add(ttl) > now).then(|| stored[8..].to_vec())
    }
}

impl KeyedStateBackend {
    /// The names of the registered states.
    pub fn state_names(&self) -> Vec<String> {
        self.tables
            .iter()
            .map(|t| t.table.name().to_string())
            .collect()
    }

    fn table_index(&self, state: &str) -> Result<usize, StateError> {
        self.names.get(state).copied().ok_or_else(|| {
            StateError::Invalid(format!(
                "no state `{state}`; the states are: {}",
                self.state_names().join(", ")
            ))
        })
    }

    /// A direct reader of state `state` (RocksDB backend; `None` on the heap, whose state
    /// only the operator's task can read).
    pub fn state_reader(&self, state: &str) -> Result<Option<StateReader>, StateError> {
        let i = self.table_index(state)?;
        let Some(store) = &self.store else {
            return Ok(None);
        };
        let db = store
            .shared_db()
            .ok_or_else(|| StateError::Closed("the RocksDB store".into()))?;
        let written_through = store
            .written_through(state)
            .ok_or_else(|| StateError::Invalid(format!("state `{state}` has no column family")))?;
        Ok(Some(StateReader {
            db: Arc::downgrade(db),
            state: state.to_string(),
            ttl_ms: self.tables[i].table.ttl(),
            written_through,
        }))
    }

    /// Reads `select` on the operator's own task (the ordered path): sees every write made
    /// so far. One slot: the table's cache, else the store. Several (every namespace of a
    /// key, a scan): RocksDB writes the state's cache through first and reads the store (so
    /// this also refreshes direct reads); the heap visits its table.
    pub fn read_ordered(
        &mut self,
        state: &str,
        select: &Select,
        filter: &mut Filter<'_>,
    ) -> Result<Found, StateError> {
        let i = self.table_index(state)?;
        let now = (self.clock)();
        let mut found = Found {
            entries: Vec::new(),
            as_of_ms: now_ms(),
            examined: 0,
            truncated: false,
        };
        let mut bytes = Vec::new();
        if let Select::Key {
            group,
            key,
            namespace: Some(ns),
            ..
        } = select
        {
            // One slot: the table's cache answers if it holds the slot (a dirty value is the
            // newest), else the store (RocksDB; on the heap the table holds everything).
            found.examined = 1;
            let slot = SlotRef {
                group: *group,
                key,
                ns,
            };
            let present = match self.tables[i].table.encode_live(slot, now, &mut bytes) {
                Some(present) => present,
                None => match &self.store {
                    None => false,
                    Some(_) => {
                        let reader = self.reader_of(state)?;
                        let mut stored = reader.read(select, filter)?;
                        found.entries.append(&mut stored.entries);
                        return Ok(found);
                    }
                },
            };
            if present {
                found.entries.push(QueryEntry {
                    group: *group,
                    key: key.clone(),
                    namespace: ns.clone(),
                    value: bytes,
                });
            }
            return Ok(found);
        }
        if let Some(store) = &self.store {
            // Several slots: write the table through, then read the store (which also
            // refreshes direct reads of the state).
            self.tables[i].table.flush(Some(store))?;
            let mut stored = self.reader_of(state)?.read(select, filter)?;
            stored.as_of_ms = found.as_of_ms;
            return Ok(stored);
        }
        let table = &self.tables[i].table;
        let (limit, budget, key_of) = match select {
            Select::Key {
                group, key, limit, ..
            } => (*limit, usize::MAX, Some((*group, key.as_slice()))),
            Select::Scan { limit, budget } => (*limit, *budget, None),
        };
        // The heap's map is hashed by (key, namespace): every namespace of a key, or a scan,
        // visits the table (bounded by the subtask's state size).
        table.visit_live(now, &mut |slot, _, value| {
            if found.examined >= budget {
                found.truncated = true;
                return;
            }
            found.examined += 1;
            let wanted = match key_of {
                Some((group, key)) => slot.group == group && *slot.key() == *key,
                None => filter(slot.group, slot.key(), slot.ns()),
            };
            if !wanted {
                return;
            }
            // A scan keeps at most `limit` (in hash order); a key's entries are all kept, to
            // return the first ones in namespace order.
            if key_of.is_none() && found.entries.len() >= limit {
                found.truncated = true;
                return;
            }
            let mut value_bytes = Vec::new();
            value.encode_value(&mut value_bytes);
            found.entries.push(QueryEntry {
                group: slot.group,
                key: slot.key().to_vec(),
                namespace: slot.ns().to_vec(),
                value: value_bytes,
            });
        });
        found
            .entries
            .sort_by(|a, b| (a.group, &a.key, &a.namespace).cmp(&(b.group, &b.key, &b.namespace)));
        if found.entries.len() > limit {
            found.entries.truncate(limit);
            found.truncated = true;
        }
        Ok(found)
    }

    fn reader_of(&self, state: &str) -> Result<StateReader, StateError> {
        self.state_reader(state)?
            .ok_or_else(|| StateError::Invalid("a RocksDB backend without store".into()))
    }

    /// Has the operator write state `state`'s cache through to RocksDB at least every
    /// `max_ms` (checked at batch boundaries by [`Self::write_through_stale`]): direct reads
    /// of it are then never older than that while the operator runs. No effect on the heap.
    pub fn set_max_staleness(&mut self, state: &str, max_ms: i64) -> Result<(), StateError> {
        self.table_index(state)?;
        if let Some(store) = self.store.as_mut() {
            store.set_max_staleness(state, max_ms);
        }
        Ok(())
    }

    /// Writes through every state whose `max-staleness` has passed since its last
    /// write-through. Costs a clock read when some state has one, nothing otherwise; call it
    /// between batches.
    pub fn write_through_stale(&mut self) -> Result<(), StateError> {
        let Some(store) = &self.store else {
            return Ok(());
        };
        if store.max_staleness().is_empty() {
            return Ok(());
        }
        let now = now_ms();
        for (name, max_ms) in store.max_staleness() {
            let due = store
                .written_through(name)
                .is_some_and(|at| now.saturating_sub(at.load(Ordering::Acquire)) >= *max_ms);
            if due && let Some(&i) = self.names.get(name.as_str()) {
                self.tables[i].table.flush(Some(store))?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key_groups::KeyGroupRange;
    use crate::store::{Compression, RocksConfig};

    fn rocks(dir: &Path, cache_entries: usize) -> KeyedStateBackend {
        KeyedStateBackend::rocksdb(
            128,
            KeyGroupRange::of_subtask(0, 128, 1),
            RocksConfig {
                path: dir.join("db"),
                block_cache: RocksConfig::shared_block_cache(1 << 20),
                write_buffer: 1 << 20,
                compression: Compression::None,
                cache_entries,
            },
        )
        .unwrap()
    }

    fn all() -> impl FnMut(u32, &[u8], &[u8]) -> bool {
        |_, _, _| true
    }

    fn key(group: u32, key: &[u8]) -> Select {
        Select::Key {
            group,
            key: key.to_vec(),
            namespace: None,
            limit: 100,
        }
    }

    #[test]
    fn a_direct_read_sees_the_state_as_of_its_last_write_through() {
        let dir = tempfile::tempdir().unwrap();
        let mut b = rocks(dir.path(), 1000);
        let id = b.value_state::<i64>("count").unwrap();
        let k = KeyRef::new(7, b"user-1");
        b.value(&id).put(k, b"w1", 1).unwrap();
        b.value(&id).put(k, b"w2", 2).unwrap();
        let reader = b.state_reader("count").unwrap().unwrap();
        assert!(
            reader
                .read(&key(7, b"user-1"), &mut all())
                .unwrap()
                .entries
                .is_empty(),
            "still in the write-back cache"
        );
        b.flush().unwrap();
        let found = reader.read(&key(7, b"user-1"), &mut all()).unwrap();
        let values: Vec<(Vec<u8>, i64)> = found
            .entries
            .iter()
            .map(|e| {
                (
                    e.namespace.clone(),
                    i64::from_le_bytes(e.value[..8].try_into().unwrap()),
                )
            })
            .collect();
        assert_eq!(values, vec![(b"w1".to_vec(), 1), (b"w2".to_vec(), 2)]);
        let exact = Select::Key {
            group: 7,
            key: b"user-1".to_vec(),
            namespace: Some(b"w2".to_vec()),
            limit: 1,
        };
        assert_eq!(reader.read(&exact, &mut all()).unwrap().entries.len(), 1);
        assert!(
            reader
                .read(&key(7, b"user-2"), &mut all())
                .unwrap()
                .entries
                .is_empty()
        );
    }

    #[test]
    fn an_ordered_read_sees_every_write_on_both_backends() {
        let dir = tempfile::tempdir().unwrap();
        let heap = KeyedStateBackend::heap(128, KeyGroupRange::of_subtask(0, 128, 1));
        for mut b in [heap, rocks(dir.path(), 1000)] {
            let id = b.value_state::<i64>("count").unwrap();
            for i in 0..10u8 {
                b.value(&id)
                    .put(KeyRef::new(1, &[i]), b"", i64::from(i))
                    .unwrap();
            }
            let found = b.read_ordered("count", &key(1, &[3]), &mut all()).unwrap();
            assert_eq!(found.entries.len(), 1);
            assert_eq!(found.entries[0].value, 3i64.to_le_bytes());
            let scan = Select::Scan {
                limit: 4,
                budget: 1000,
            };
            let found = b
                .read_ordered("count", &scan, &mut |_, k, _| k[0] % 2 == 0)
                .unwrap();
            assert_eq!(found.entries.len(), 4);
            assert!(found.truncated);
            assert!(matches!(
                b.read_ordered("nope", &scan, &mut all()),
                Err(StateError::Invalid(m)) if m.contains("count")
            ));
        }
    }

    #[test]
    fn max_staleness_writes_the_cache_through_between_batches() {
        let dir = tempfile::tempdir().unwrap();
        let mut b = rocks(dir.path(), 1000);
        let id = b.value_state::<i64>("count").unwrap();
        b.set_max_staleness("count", 0).unwrap();
        let reader = b.state_reader("count").unwrap().unwrap();
        b.value(&id).put(KeyRef::new(1, b"k"), b"", 5).unwrap();
        b.write_through_stale().unwrap();
        assert_eq!(
            reader
                .read(&key(1, b"k"), &mut all())
                .unwrap()
                .entries
                .len(),
            1
        );
    }

    #[test]
    fn a_reader_keeps_a_closing_store_open_until_it_is_done() {
        let dir = tempfile::tempdir().unwrap();
        let mut b = rocks(dir.path(), 1000);
        b.value_state::<i64>("count").unwrap();
        let reader = b.state_reader("count").unwrap().unwrap();
        let held = reader.db.upgrade().unwrap();
        b.close().unwrap();
        assert!(dir.path().join("db").exists(), "a reader still holds it");
        drop(held);
        assert!(
            !dir.path().join("db").exists(),
            "the last holder removed it"
        );
        assert!(matches!(
            reader.read(&key(1, b"k"), &mut all()),
            Err(StateError::Closed(_))
        ));
    }

    /// The operator writes a version to two keys of one state in every batch and flushes
    /// (a write-through) at random moments; readers on other threads must always see both keys
    /// at the same version, never a version the operator has not written, and never go back.
    #[test]
    fn direct_reads_under_concurrent_writes_are_never_torn() {
        let dir = tempfile::tempdir().unwrap();
        let mut b = rocks(dir.path(), 64);
        let id = b.value_state::<i64>("pair").unwrap();
        let reader = b.state_reader("pair").unwrap().unwrap();
        let written = Arc::new(AtomicI64::new(0));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let (reader, written, stop) = (reader.clone(), written.clone(), stop.clone());
                std::thread::spawn(move || {
                    let (mut reads, mut last) = (0u64, 0i64);
                    let scan = Select::Scan {
                        limit: 100,
                        budget: 1000,
                    };
                    while !stop.load(Ordering::Acquire) {
                        let found = reader.read(&scan, &mut |_, _, _| true).unwrap();
                        let versions: Vec<i64> = found
                            .entries
                            .iter()
                            .filter(|e| e.key.starts_with(b"pair-"))
                            .map(|e| i64::from_le_bytes(e.value[..8].try_into().unwrap()))
                            .collect();
                        if versions.is_empty() {
                            continue;
                        }
                        assert_eq!(versions.len(), 2, "both keys or none");
                        assert_eq!(versions[0], versions[1], "a torn read");
                        assert!(versions[0] >= last, "went back in time");
                        assert!(versions[0] <= written.load(Ordering::Acquire));
                        last = versions[0];
                        reads += 1;
                    }
                    reads
                })
            })
            .collect();
        // A deterministic sequence of flush points (xorshift).
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        for version in 1..=20_000i64 {
            // Published before the write: readers may see at most this version.
            written.store(version, Ordering::Release);
            for k in [b"pair-a".as_slice(), b"pair-b"] {
                b.value(&id).put(KeyRef::new(3, k), b"", version).unwrap();
            }
            // Other keys churn the cache (evictions write through mid-way as well).
            let other = format!("other-{}", version % 500);
            b.value(&id)
                .put(KeyRef::new(5, other.as_bytes()), b"", version)
                .unwrap();
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            if rng.is_multiple_of(7) {
                b.flush().unwrap();
            }
        }
        b.flush().unwrap();
        stop.store(true, Ordering::Release);
        let reads: u64 = readers.into_iter().map(|r| r.join().unwrap()).sum();
        assert!(reads > 0, "the readers read something");
        let last = reader.read(&key(3, b"pair-a"), &mut all()).unwrap();
        assert_eq!(last.entries[0].value, 20_000i64.to_le_bytes());
    }
}
