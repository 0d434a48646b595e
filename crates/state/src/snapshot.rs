//! Checkpoint snapshots of a keyed state backend, and restore, at any parallelism.
//!
//! At a checkpoint barrier the operator's task thread calls [`KeyedStateBackend::snapshot`]: it
//! writes the snapshot's files into a new directory and describes them in a [`KeyedSnapshot`];
//! the checkpoint layer uploads them off-thread. On restore it downloads the files of the old
//! subtasks whose key groups overlap the new subtask's, and builds the backend with
//! [`KeyedStateBackend::restore_heap`] or [`KeyedStateBackend::restore_rocksdb`] from their
//! [`RestoreSource`]s. As in Apache Flink's keyed state backends, there are two formats:
//!
//! - [`SnapshotFormat::Logical`]: one canonical file that either backend writes and either
//!   reads (savepoints; the heap backend's checkpoints), laid out by key group with an index, so
//!   a restore reads only the groups it owns. See [`logical`] for the layout.
//! - [`SnapshotFormat::RocksNative`]: a RocksDB checkpoint (hard links to the immutable SST
//!   files, plus the small files describing them). Its SST files are marked
//!   [`SnapshotFile::shared`]: a later snapshot lists the unchanged ones again under the same
//!   names, so only new files need uploading (an incremental checkpoint). See [`native`].
//!
//! Any format restores into either backend, at the same or another parallelism: the entries
//! and timers of the key groups in the new range are kept, the others skipped. A RocksDB
//! restore of one source whose range is exactly the new one just links its files.
//!
//! States are registered by the operator *after* the backend is built, with their Rust types.
//! A heap restore therefore stages the raw entries per state name; registering the state
//! decodes them (see [`KeyedStateBackend`]'s `staged`). A RocksDB restore writes the entries into
//! the state's column family; registering it learns its keys in one pass. Timers and watermark
//! holds are restored at once. Write times of states with a TTL survive every combination, so
//! an entry expires when it would have without the restore.
//!
//! # Example
//! ```
//! use weir_state::key_groups::KeyGroupRange;
//! use weir_state::{KeyRef, KeyedStateBackend, SnapshotFormat};
//!
//! let dir = tempfile::tempdir()?;
//! let mut state = KeyedStateBackend::heap(128, KeyGroupRange::of_subtask(0, 128, 1));
//! let counts = state.value_state::<i64>("count")?;
//! state.value(&counts).put(KeyRef::new(3, b"a"), b"", 1)?;
//! state.value(&counts).put(KeyRef::new(100, b"b"), b"", 2)?;
//! let snapshot = state.snapshot(&dir.path().join("chk-1"), SnapshotFormat::Logical)?;
//!
//! // Restored at parallelism 2, the second subtask holds groups 64..128 only.
//! let range = KeyGroupRange::of_subtask(1, 128, 2);
//! let mut second = KeyedStateBackend::restore_heap(128, range, &[snapshot.source()])?;
//! let counts = second.value_state::<i64>("count")?;
//! assert_eq!(second.value(&counts).get(KeyRef::new(100, b"b"), b"")?, Some(2));
//! assert_eq!(second.value(&counts).get(KeyRef::new(3, b"a"), b"")?, None);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod logical;
pub mod native;
pub(crate) mod overlay;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use rocksdb::WriteBatch;

use crate::backend::{EncodeValue, KeyedStateBackend};
use crate::error::StateError;
use crate::heap::{Slot, SlotRef};
use crate::key_groups::KeyGroupRange;
use crate::store::{RocksConfig, Store, TIMERS_CF, entry_key, storage};
use crate::timers::{HeapTimers, RocksTimers, TimeDomain, Timer, Timers, encode_hold, timer_key};

/// How a snapshot is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SnapshotFormat {
    /// One canonical, backend-independent file ([`logical`]).
    Logical,
    /// A RocksDB checkpoint of the RocksDB backend's database ([`native`]).
    RocksNative,
}

/// One file of a snapshot, in [`KeyedSnapshot::dir`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotFile {
    pub name: String,
    pub size: u64,
    /// Immutable and uniquely named within this backend's lineage
    /// ([`KeyedSnapshot::lineage`]): a later snapshot of the same lineage listing a file of the
    /// same name lists the same bytes, so an upload of it may be reused (RocksDB's `*.sst`).
    /// Files not shared (MANIFEST, CURRENT, OPTIONS, the logical file) are new every time.
    pub shared: bool,
}

/// A state as a snapshot records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateMeta {
    pub name: String,
    /// The state's TTL when the snapshot was taken: its entries carry write times.
    pub ttl_ms: Option<i64>,
}

/// What a snapshot wrote, for the checkpoint layer to upload and to restore from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyedSnapshot {
    pub format: SnapshotFormat,
    pub key_groups: u32,
    /// The key groups of the subtask that took it.
    pub range: KeyGroupRange,
    /// The directory holding [`Self::files`].
    pub dir: PathBuf,
    pub files: Vec<SnapshotFile>,
    /// The states in it, registered or restored (and not registered since).
    pub states: Vec<StateMeta>,
    /// Identifies the backend instance that took the snapshot: fresh for every backend built,
    /// reopened or restored. Shared files may be reused between snapshots of one lineage only:
    /// RocksDB numbers its files per database, so two lineages (a rescaled restore starts a
    /// new database; two restores of one checkpoint continue its numbering separately) can
    /// each name different bytes `000012.sst`. After a restore that linked a source's files
    /// ([`KeyedStateBackend::restore_rocksdb`] of one native source at the same range), the
    /// files the new backend lists under a name the source listed are those bytes too.
    pub lineage: u64,
}

impl KeyedSnapshot {
    /// Where a restore finds this snapshot when its files are (still, or again) in
    /// [`Self::dir`].
    pub fn source(&self) -> RestoreSource {
        RestoreSource {
            format: self.format,
            range: self.range,
            dir: self.dir.clone(),
        }
    }
}

/// One old subtask's snapshot, downloaded for a restore.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RestoreSource {
    pub format: SnapshotFormat,
    /// The key groups of the old subtask ([`KeyedSnapshot::range`]).
    pub range: KeyGroupRange,
    /// A local directory holding the files named in its [`KeyedSnapshot`].
    pub dir: PathBuf,
}

/// Entries of one state restored into a heap backend, not yet decoded (the state's type is
/// known only when the operator registers it).
#[derive(Debug, Default)]
pub(crate) struct Staged {
    /// The state's TTL in the snapshot: whether `written` of the entries means anything.
    pub(crate) ttl_ms: Option<i64>,
    pub(crate) entries: Vec<StagedEntry>,
}

#[derive(Debug)]
pub(crate) struct StagedEntry {
    pub(crate) slot: Slot,
    pub(crate) written: i64,
    /// The value's [`crate::StateValue`] encoding.
    pub(crate) value: Box<[u8]>,
}

/// Where the entries and timers read from a snapshot go: a heap backend or a RocksDB store.
pub(crate) trait Sink {
    /// Declares a state of a source (read at `origin`); returns the index that
    /// [`Self::entry`] takes for it. Two sources may declare the same state.
    fn state(&mut self, meta: &StateMeta, origin: &Path) -> Result<usize, StateError>;
    /// One live entry; `written` is its write time if its state has a TTL, else 0.
    fn entry(
        &mut self,
        state: usize,
        slot: SlotRef<'_>,
        written: i64,
        value: &[u8],
    ) -> Result<(), StateError>;
    fn timer(
        &mut self,
        domain: TimeDomain,
        timer: Timer,
        hold: Option<i64>,
    ) -> Result<(), StateError>;
}

/// The error of two sources disagreeing on whether a state has a TTL.
fn ttl_mismatch(origin: &Path, name: &str) -> StateError {
    StateError::Snapshot {
        path: origin.to_path_buf(),
        message: format!(
            "state `{name}` has a TTL here and not in another source of the same restore"
        ),
    }
}

/// Stages entries for a heap backend and sets its timers.
#[derive(Default)]
struct HeapSink {
    states: Vec<(String, Staged)>,
    timers: HeapTimers,
}

impl Sink for HeapSink {
    fn state(&mut self, meta: &StateMeta, origin: &Path) -> Result<usize, StateError> {
        if let Some(i) = self.states.iter().position(|(n, _)| *n == meta.name) {
            if self.states[i].1.ttl_ms.is_some() != meta.ttl_ms.is_some() {
                return Err(ttl_mismatch(origin, &meta.name));
            }
            return Ok(i);
        }
        self.states.push((
            meta.name.clone(),
            Staged {
                ttl_ms: meta.ttl_ms,
                entries: Vec::new(),
            },
        ));
        Ok(self.states.len() - 1)
    }

    fn entry(
        &mut self,
        state: usize,
        slot: SlotRef<'_>,
        written: i64,
        value: &[u8],
    ) -> Result<(), StateError> {
        self.states[state].1.entries.push(StagedEntry {
            slot: slot.to_owned(),
            written,
            value: value.into(),
        });
        Ok(())
    }

    fn timer(
        &mut self,
        domain: TimeDomain,
        timer: Timer,
        hold: Option<i64>,
    ) -> Result<(), StateError> {
        self.timers
            .set(domain, timer.time, timer.key(), &timer.namespace, hold);
        Ok(())
    }
}

/// Entries written per batch into a restored RocksDB.
const RESTORE_BATCH: usize = 16_384;

/// Writes entries and timers into a fresh RocksDB store, in batches, in its own layout: state
/// values prefixed by their write time when the snapshot had a TTL for the state (the catalog
/// records it, so registering the state with another setting rewrites them).
struct RocksSink<'a> {
    store: &'a mut Store,
    states: Vec<StateMeta>,
    batch: WriteBatch,
    scratch: Vec<u8>,
}

impl RocksSink<'_> {
    fn write_if_full(&mut self) -> Result<(), StateError> {
        if self.batch.len() >= RESTORE_BATCH {
            self.store.write_batch(std::mem::take(&mut self.batch))?;
        }
        Ok(())
    }

    fn finish(mut self) -> Result<(), StateError> {
        self.store.write_batch(std::mem::take(&mut self.batch))
    }
}

impl Sink for RocksSink<'_> {
    fn state(&mut self, meta: &StateMeta, origin: &Path) -> Result<usize, StateError> {
        if let Some(i) = self.states.iter().position(|s| s.name == meta.name) {
            if self.states[i].ttl_ms.is_some() != meta.ttl_ms.is_some() {
                return Err(ttl_mismatch(origin, &meta.name));
            }
            return Ok(i);
        }
        self.store.ensure_state(&meta.name)?;
        self.store.record_state(&meta.name, meta.ttl_ms)?;
        self.states.push(meta.clone());
        Ok(self.states.len() - 1)
    }

    fn entry(
        &mut self,
        state: usize,
        slot: SlotRef<'_>,
        written: i64,
        value: &[u8],
    ) -> Result<(), StateError> {
        let meta = &self.states[state];
        entry_key(
            crate::KeyRef::new(slot.group, slot.key),
            slot.ns,
            &mut self.scratch,
        );
        let cf = self.store.cf(&meta.name)?;
        if meta.ttl_ms.is_some() {
            let mut v = Vec::with_capacity(8 + value.len());
            v.extend_from_slice(&written.to_le_bytes());
            v.extend_from_slice(value);
            self.batch.put_cf(cf, &self.scratch, v);
        } else {
            self.batch.put_cf(cf, &self.scratch, value);
        }
        self.write_if_full()
    }

    fn timer(
        &mut self,
        domain: TimeDomain,
        timer: Timer,
        hold: Option<i64>,
    ) -> Result<(), StateError> {
        let cf = self.store.cf(crate::store::TIMERS_CF)?;
        self.batch
            .put_cf(cf, timer_key(domain, &timer), encode_hold(hold));
        self.write_if_full()
    }
}

/// The groups of `a` that are also in `b` (empty if none).
fn intersect(a: KeyGroupRange, b: KeyGroupRange) -> KeyGroupRange {
    let start = a.start.max(b.start);
    KeyGroupRange {
        start,
        end: a.end.min(b.end).max(start),
    }
}

/// Reads the entries and timers of `source` in the groups of `range` into `sink`.
fn read_source(
    source: &RestoreSource,
    key_groups: u32,
    range: KeyGroupRange,
    sink: &mut dyn Sink,
) -> Result<(), StateError> {
    let groups = intersect(range, source.range);
    match source.format {
        SnapshotFormat::Logical => {
            let mut reader = logical::Reader::open(&source.dir.join(logical::FILE_NAME))?;
            reader.check(key_groups, source.range)?;
            reader.read(groups, sink)
        }
        SnapshotFormat::RocksNative => {
            native::read(&source.dir, key_groups, source.range, groups, sink)
        }
    }
}

/// A new lineage id: random enough that two backends never share one.
pub(crate) fn new_lineage() -> u64 {
    use std::hash::BuildHasher;
    use std::sync::atomic::{AtomicU64, Ordering};
    static MADE: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    // RandomState is seeded randomly per process (and varies per instance within one).
    std::collections::hash_map::RandomState::new().hash_one((
        nanos,
        std::process::id(),
        MADE.fetch_add(1, Ordering::Relaxed),
    ))
}

impl KeyedStateBackend {
    /// The synchronous part of a checkpoint: writes a snapshot of every state and timer into
    /// `dir`, which is created and must not exist. The heap backend writes only
    /// [`SnapshotFormat::Logical`]; RocksDB either. Nothing is fsynced: the caller's storage
    /// layer does that when it uploads the files.
    pub fn snapshot(
        &mut self,
        dir: &Path,
        format: SnapshotFormat,
    ) -> Result<KeyedSnapshot, StateError> {
        if dir.exists() {
            return Err(StateError::Invalid(format!(
                "snapshot directory {} already exists",
                dir.display()
            )));
        }
        if format == SnapshotFormat::RocksNative && self.store.is_none() {
            return Err(StateError::Invalid(
                "a heap backend writes only logical snapshots".into(),
            ));
        }
        if let Some(parent) = dir.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| storage(&format!("creating {}", parent.display()), e))?;
        }
        let (files, states) = match format {
            SnapshotFormat::Logical => {
                // Everything into RocksDB first: the tables' caches, the timers' overlay and
                // due timers; the logical file is then read from it.
                self.flush()?;
                if let (Some(store), Timers::Rocks(t)) = (self.store.as_ref(), &mut self.timers) {
                    t.persist(store)?;
                }
                std::fs::create_dir(dir)
                    .map_err(|e| storage(&format!("creating {}", dir.display()), e))?;
                let path = dir.join(logical::FILE_NAME);
                let (size, states) = match &self.store {
                    Some(store) => logical::write_rocks(
                        store,
                        self.key_groups,
                        self.range,
                        (self.clock)(),
                        &path,
                    )?,
                    None => self.write_heap_logical(&path)?,
                };
                let file = SnapshotFile {
                    name: logical::FILE_NAME.into(),
                    size,
                    shared: false,
                };
                (vec![file], states)
            }
            SnapshotFormat::RocksNative => {
                let store = self.store.as_ref().ok_or_else(|| {
                    StateError::Invalid("a heap backend writes only logical snapshots".into())
                })?;
                // What is only in memory goes beside RocksDB's files, not into them (see
                // `overlay`): the caches stay as they are.
                let mut pending = overlay::Overlay::default();
                for registered in &mut self.tables {
                    let writes = registered.table.pending_writes();
                    pending.add(registered.table.name(), writes);
                }
                if let Timers::Rocks(t) = &self.timers {
                    pending.add(TIMERS_CF, t.pending_writes());
                }
                (native::checkpoint(store, dir, &pending)?, store.states()?)
            }
        };
        Ok(KeyedSnapshot {
            format,
            key_groups: self.key_groups,
            range: self.range,
            dir: dir.to_path_buf(),
            files,
            states,
            lineage: self.lineage,
        })
    }

    /// The heap backend's logical snapshot: the live entries of every registered table and of
    /// every staged state, and every timer, grouped by key group.
    fn write_heap_logical(&self, path: &Path) -> Result<(u64, Vec<StateMeta>), StateError> {
        /// An entry's value: of a registered table, or staged bytes.
        enum Value<'a> {
            Typed(&'a dyn EncodeValue),
            Raw(&'a [u8]),
        }
        enum Item<'a> {
            Entry {
                state: u32,
                slot: &'a Slot,
                written: i64,
                value: Value<'a>,
            },
            Timer(TimeDomain, &'a Timer, Option<i64>),
        }
        let Timers::Heap(timers) = &self.timers else {
            return Err(StateError::Invalid(
                "a heap snapshot of a backend without heap timers".into(),
            ));
        };
        let now = (self.clock)();
        let range = self.range;
        let mut buckets: Vec<Vec<Item<'_>>> = (0..range.len()).map(|_| Vec::new()).collect();
        let mut outside = None;
        let mut bucket = |group: u32| match range.contains(group) {
            true => Some((group - range.start) as usize),
            false => {
                outside = Some(group);
                None
            }
        };
        let mut states = Vec::new();
        for registered in &self.tables {
            let table = &registered.table;
            let state = states.len() as u32;
            states.push(StateMeta {
                name: table.name().to_string(),
                ttl_ms: table.ttl(),
            });
            let ttl = table.ttl();
            table.visit_live(now, &mut |slot, written, value| {
                if let Some(b) = bucket(slot.group) {
                    buckets[b].push(Item::Entry {
                        state,
                        slot,
                        written: if ttl.is_some() { written } else { 0 },
                        value: Value::Typed(value),
                    });
                }
            });
        }
        let mut staged: Vec<_> = self.staged.iter().collect();
        staged.sort_by(|a, b| a.0.cmp(b.0));
        for (name, s) in staged {
            let state = states.len() as u32;
            states.push(StateMeta {
                name: name.clone(),
                ttl_ms: s.ttl_ms,
            });
            for e in &s.entries {
                let expired = s
                    .ttl_ms
                    .is_some_and(|ttl| e.written.saturating_add(ttl) <= now);
                if let (false, Some(b)) = (expired, bucket(e.slot.group)) {
                    buckets[b].push(Item::Entry {
                        state,
                        slot: &e.slot,
                        written: e.written,
                        value: Value::Raw(&e.value),
                    });
                }
            }
        }
        for (domain, timer, hold) in timers.iter() {
            if let Some(b) = bucket(timer.key_group) {
                buckets[b].push(Item::Timer(domain, timer, hold));
            }
        }
        if let Some(group) = outside {
            return Err(StateError::Invalid(format!(
                "state of key group {group}, outside this subtask's groups {}..{}",
                range.start, range.end
            )));
        }
        let mut writer = logical::Writer::create(path, self.key_groups, range, &states)?;
        let mut scratch = Vec::new();
        for (i, items) in buckets.iter().enumerate() {
            let group = range.start + i as u32;
            for item in items {
                match item {
                    Item::Entry {
                        state,
                        slot,
                        written,
                        value,
                    } => {
                        let bytes = match value {
                            Value::Typed(v) => {
                                scratch.clear();
                                v.encode_value(&mut scratch);
                                &scratch[..]
                            }
                            Value::Raw(b) => b,
                        };
                        writer.entry(group, *state, slot.key(), slot.ns(), *written, bytes)?;
                    }
                    Item::Timer(domain, timer, hold) => {
                        writer.timer(group, *domain, timer, *hold)?
                    }
                }
            }
        }
        Ok((writer.finish()?, states))
    }

    /// A heap backend for the key groups `range` of `key_groups`, holding the entries and
    /// timers of `sources` (any format) in those groups; empty if `sources` is. Entries wait,
    /// undecoded, until their state is registered (then they are decoded into its table, and
    /// a value that does not decode as the registered type fails that registration); those
    /// of a state never registered are kept, and written into this backend's snapshots,
    /// until it is dropped.
    pub fn restore_heap(
        key_groups: u32,
        range: KeyGroupRange,
        sources: &[RestoreSource],
    ) -> Result<Self, StateError> {
        let mut sink = HeapSink::default();
        for source in sources {
            if !intersect(range, source.range).is_empty() {
                read_source(source, key_groups, range, &mut sink)?;
            }
        }
        let mut backend = Self::heap(key_groups, range);
        backend.staged = sink.states.into_iter().collect::<HashMap<_, _>>();
        backend.timers = Timers::Heap(sink.timers);
        Ok(backend)
    }

    /// A RocksDB backend in `config.path` (its working directory, removed on
    /// [`Self::close`] as a fresh one's), for the key groups `range` of `key_groups`, holding
    /// the entries and timers of `sources` (any format) in those groups; empty if `sources`
    /// is. One native source of exactly `range` is restored by linking (or copying) its files
    /// and opening them; otherwise the entries of the new range are copied, in batches, into a
    /// fresh database.
    pub fn restore_rocksdb(
        key_groups: u32,
        range: KeyGroupRange,
        config: RocksConfig,
        sources: &[RestoreSource],
    ) -> Result<Self, StateError> {
        let relevant: Vec<&RestoreSource> = sources
            .iter()
            .filter(|s| !intersect(range, s.range).is_empty())
            .collect();
        if relevant.is_empty() {
            return Self::rocksdb(key_groups, range, config);
        }
        let cache_entries = config.cache_entries;
        let store = match relevant[..] {
            [only] if only.format == SnapshotFormat::RocksNative && only.range == range => {
                native::restore_files(only, key_groups, config)?
            }
            _ => {
                let mut store = Store::open(config, true)?;
                let mut sink = RocksSink {
                    store: &mut store,
                    states: Vec::new(),
                    batch: WriteBatch::default(),
                    scratch: Vec::new(),
                };
                for source in relevant {
                    read_source(source, key_groups, range, &mut sink)?;
                }
                sink.finish()?;
                store
            }
        };
        store.record_layout(key_groups, range)?;
        let timers = RocksTimers::rebuild(&store)?;
        Ok(Self::with_store(
            key_groups,
            range,
            cache_entries,
            store,
            timers,
        ))
    }
}
