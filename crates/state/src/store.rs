//! The RocksDB store under a keyed state backend: one database per operator subtask, one column
//! family per state plus one for timers.
//!
//! # Key layout
//! A state entry's RocksDB key is `[key group: u16 BE][key length: varint][key][namespace]`.
//! The key-group prefix makes every key group a contiguous range, so a key-group range can be
//! read or exported on its own (rescaling on restore). Values are the state's encoding, preceded
//! by the write time (i64 LE, epoch ms) for states with a TTL.
//!
//! Writes reach RocksDB in batches (the tables' write-back caches, the timers' overlay) with the
//! write-ahead log off: durability comes from checkpoints, not from the WAL.
//!
//! # Catalog
//! The column family `_meta` records what a reader of the files needs beyond the entries
//! themselves, so that a reopened database, or a native snapshot of one, explains itself: the
//! key groups and range (`layout`), and for each state whether its values carry the TTL
//! write-time prefix (`state/<name>`).
//!
//! # TTL
//! Every state column family has a compaction filter factory reading the state's TTL from a
//! `TtlSlot` that registering the state fills: expired entries are dropped by compaction in a
//! fresh, a reopened and a restored database alike. Until the state is registered the slot is
//! empty and compaction keeps everything.

use std::collections::HashMap;
use std::ffi::CStr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rocksdb::compaction_filter::{CompactionFilter, Decision};
use rocksdb::compaction_filter_factory::{CompactionFilterContext, CompactionFilterFactory};
use rocksdb::{
    BlockBasedOptions, Cache, ColumnFamily, DB, DBCompressionType, Options, WriteBatch,
    WriteOptions,
};

use crate::codec::{get_varint, put_varint};
use crate::error::StateError;
use crate::key_groups::KeyGroupRange;
use crate::keys::KeyRef;
use crate::query::{SharedDb, now_ms};
use crate::snapshot::StateMeta;

/// A RocksDB key and its value.
pub(crate) type KeyValue = (Vec<u8>, Vec<u8>);
/// A write to RocksDB: a key and its new value, `None` to delete it.
pub(crate) type KeyWrite = (Vec<u8>, Option<Vec<u8>>);

/// Column family of the timers.
pub(crate) const TIMERS_CF: &str = "_timers";
/// Column family of the catalog (see the module documentation).
pub(crate) const META_CF: &str = "_meta";

/// Whether a column family holds a state (not the timers, the catalog or RocksDB's default).
pub(crate) fn is_state_cf(name: &str) -> bool {
    name != "default" && name != TIMERS_CF && name != META_CF
}

/// Catalog key of the layout: key groups and range, u32 LE each.
const LAYOUT_KEY: &[u8] = b"layout";
/// Catalog key prefix of a state: `state/<name>` → `[0]` (no TTL) or `[1][ttl ms: i64 LE]`.
const STATE_PREFIX: &[u8] = b"state/";

/// The TTL a state column family's compaction filter applies, and its clock: empty until the
/// state is registered (then nothing expires).
pub(crate) type TtlSlot = Mutex<Option<(i64, crate::Clock)>>;

/// Makes one [`TtlFilter`] per compaction from the state's [`TtlSlot`].
struct TtlFilterFactory(Arc<TtlSlot>);

impl CompactionFilterFactory for TtlFilterFactory {
    type Filter = TtlFilter;

    fn create(&mut self, _context: CompactionFilterContext) -> TtlFilter {
        let slot = match self.0.lock() {
            Ok(slot) => slot.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        };
        // One clock reading per compaction: an entry expiring during it goes next time.
        TtlFilter(slot.map(|(ttl_ms, clock)| (ttl_ms, clock())))
    }

    fn name(&self) -> &CStr {
        c"weir-ttl-factory"
    }
}

/// Drops entries whose write time (the value's first 8 bytes) is older than the TTL.
struct TtlFilter(Option<(i64, i64)>);

impl CompactionFilter for TtlFilter {
    fn filter(&mut self, _level: u32, _key: &[u8], value: &[u8]) -> Decision {
        let Some((ttl_ms, now)) = self.0 else {
            return Decision::Keep;
        };
        match value.get(..8).and_then(|b| <[u8; 8]>::try_from(b).ok()) {
            Some(t) if i64::from_le_bytes(t).saturating_add(ttl_ms) <= now => Decision::Remove,
            _ => Decision::Keep,
        }
    }

    fn name(&self) -> &CStr {
        c"weir-ttl"
    }
}

/// Compression of RocksDB files.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    None,
    Lz4,
    Zstd,
}

/// Settings of the RocksDB backend (the job's `state` section).
#[derive(Clone)]
pub struct RocksConfig {
    /// The subtask's database directory (created; removed when the backend closes).
    pub path: PathBuf,
    /// Block cache shared by every database of the job.
    pub block_cache: Cache,
    /// Memtable size per column family.
    pub write_buffer: usize,
    pub compression: Compression,
    /// Entries each state keeps in its write-back cache before flushing to RocksDB.
    pub cache_entries: usize,
}

impl std::fmt::Debug for RocksConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RocksConfig")
            .field("path", &self.path)
            .field("write_buffer", &self.write_buffer)
            .field("compression", &self.compression)
            .field("cache_entries", &self.cache_entries)
            .finish()
    }
}

impl RocksConfig {
    /// A block cache of `bytes`, to share between the databases of a job.
    pub fn shared_block_cache(bytes: usize) -> Cache {
        Cache::new_lru_cache(bytes)
    }
}

/// Counters of RocksDB work, for tests and metrics (the point-read and iterator-step counts
/// are what shows that timer operations never scan).
#[derive(Debug, Default)]
pub struct StoreCounters {
    pub point_reads: AtomicU64,
    pub iterator_steps: AtomicU64,
    pub batches_written: AtomicU64,
    pub entries_written: AtomicU64,
}

impl StoreCounters {
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }
}

/// A subtask's RocksDB database.
pub struct Store {
    /// Shared with queryable-state readers ([`crate::query::StateReader`]), which hold it
    /// only for the length of one lookup: see [`SharedDb`] for what that ownership means for
    /// closing.
    db: Option<Arc<SharedDb>>,
    /// When each state's table last wrote all its cached changes through to RocksDB (epoch
    /// ms): what a direct read of the state is as fresh as.
    written_through: HashMap<String, Arc<AtomicI64>>,
    /// States whose cache is written through at least this often (ms), by name: a
    /// queryable state's `max-staleness` (see [`crate::query`]).
    max_staleness: Vec<(String, i64)>,
    /// Options of the column families created after opening. rust-rocksdb's `create_cf` does
    /// not keep what its options own alive, so the store keeps them until the database is
    /// closed.
    created: Vec<Options>,
    /// The TTL slot of each state column family, read by its compaction filter.
    ttl_slots: HashMap<String, Arc<TtlSlot>>,
    path: PathBuf,
    config: RocksConfig,
    write_options: WriteOptions,
    pub(crate) counters: Arc<StoreCounters>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Store({})", self.path.display())
    }
}

pub(crate) fn storage(
    context: &str,
    e: impl std::error::Error + Send + Sync + 'static,
) -> StateError {
    StateError::Storage {
        context: context.to_owned(),
        source: Some(Box::new(e)),
    }
}

impl Store {
    /// Opens the database at `config.path`: a fresh one (anything there removed first) when
    /// `fresh`, otherwise the one there with all its column families.
    pub fn open(config: RocksConfig, fresh: bool) -> Result<Store, StateError> {
        let path = config.path.clone();
        if fresh && path.exists() {
            std::fs::remove_dir_all(&path)
                .map_err(|e| storage(&format!("clearing {}", path.display()), e))?;
        }
        std::fs::create_dir_all(&path)
            .map_err(|e| storage(&format!("creating {}", path.display()), e))?;
        let mut opts = Self::cf_options(&config, None);
        opts.create_if_missing(true);
        opts.create_missing_column_families(true);
        // Two background threads: the machine weir targets has few cores, and the operator
        // threads matter more than compaction catching up.
        opts.increase_parallelism(2);
        // Checkpoints flush every column family at once (`flush_all`).
        opts.set_atomic_flush(true);
        let mut families = vec![TIMERS_CF.to_string(), META_CF.to_string()];
        if !fresh {
            for cf in DB::list_cf(&opts, &path).unwrap_or_default() {
                if cf != "default" && !families.contains(&cf) {
                    families.push(cf);
                }
            }
        }
        let mut ttl_slots = HashMap::new();
        let descriptors: Vec<_> = families
            .iter()
            .map(|name| {
                let slot = is_state_cf(name).then(|| {
                    let slot = Arc::new(TtlSlot::default());
                    ttl_slots.insert(name.clone(), slot.clone());
                    slot
                });
                rocksdb::ColumnFamilyDescriptor::new(name, Self::cf_options(&config, slot))
            })
            .collect();
        let db = DB::open_cf_descriptors(&opts, &path, descriptors)
            .map_err(|e| storage(&format!("opening RocksDB at {}", path.display()), e))?;
        let mut write_options = WriteOptions::new();
        write_options.disable_wal(true);
        let opened = now_ms();
        let written_through = ttl_slots
            .keys()
            .map(|name| (name.clone(), Arc::new(AtomicI64::new(opened))))
            .collect();
        Ok(Store {
            db: Some(Arc::new(SharedDb::new(db))),
            written_through,
            max_staleness: Vec::new(),
            created: Vec::new(),
            ttl_slots,
            path,
            config,
            write_options,
            counters: Arc::new(StoreCounters::default()),
        })
    }

    /// Options of a column family; a state's (`ttl` given) drop expired entries in compaction.
    fn cf_options(config: &RocksConfig, ttl: Option<Arc<TtlSlot>>) -> Options {
        let mut opts = Options::default();
        opts.set_write_buffer_size(config.write_buffer);
        opts.set_compression_type(match config.compression {
            Compression::None => DBCompressionType::None,
            Compression::Lz4 => DBCompressionType::Lz4,
            Compression::Zstd => DBCompressionType::Zstd,
        });
        let mut table = BlockBasedOptions::default();
        table.set_block_cache(&config.block_cache);
        table.set_bloom_filter(10.0, false);
        opts.set_block_based_table_factory(&table);
        if let Some(slot) = ttl {
            // Expired entries are dropped when compaction rewrites them: state with a TTL does
            // not grow forever even if nobody reads it again.
            opts.set_compaction_filter_factory(TtlFilterFactory(slot));
        }
        opts
    }

    pub(crate) fn db(&self) -> Result<&DB, StateError> {
        self.db
            .as_deref()
            .map(SharedDb::db)
            .ok_or_else(|| StateError::Closed("the RocksDB store".into()))
    }

    /// The database, to share with a queryable-state reader.
    /// RocksDB's own estimates over every column family: (keys, bytes of live data, SST files
    /// and memtables). Cheap: properties RocksDB keeps up to date, no scan.
    pub(crate) fn estimate(&self) -> Result<(u64, u64), StateError> {
        let db = self.db()?;
        let (mut keys, mut bytes) = (0u64, 0u64);
        // Every state has its written-through mark: its column families are these names.
        for name in self.written_through.keys() {
            let Some(cf) = db.cf_handle(name) else {
                continue;
            };
            let int = |property: &str| {
                db.property_int_value_cf(&cf, property)
                    .ok()
                    .flatten()
                    .unwrap_or(0)
            };
            keys = keys.saturating_add(int("rocksdb.estimate-num-keys"));
            bytes = bytes
                .saturating_add(int("rocksdb.estimate-live-data-size"))
                .saturating_add(int("rocksdb.cur-size-all-mem-tables"));
        }
        Ok((keys, bytes))
    }

    pub(crate) fn shared_db(&self) -> Option<&Arc<SharedDb>> {
        self.db.as_ref()
    }

    /// When state `name` was last written through (see the field).
    pub(crate) fn written_through(&self, name: &str) -> Option<Arc<AtomicI64>> {
        self.written_through.get(name).cloned()
    }

    pub(crate) fn set_max_staleness(&mut self, name: &str, max_ms: i64) {
        self.max_staleness.retain(|(n, _)| n != name);
        self.max_staleness.push((name.to_string(), max_ms));
    }

    pub(crate) fn max_staleness(&self) -> &[(String, i64)] {
        &self.max_staleness
    }

    /// State `name`'s table has just written every cached change to RocksDB.
    pub(crate) fn mark_written_through(&self, name: &str) {
        if let Some(at) = self.written_through.get(name) {
            // Release: a reader that loads this time and then takes a RocksDB snapshot sees
            // every write made before it (the write returned before this store).
            at.store(now_ms(), Ordering::Release);
        }
    }

    /// The column family of state `name`, created (with an empty TTL slot) if missing.
    pub(crate) fn ensure_state(&mut self, name: &str) -> Result<Arc<TtlSlot>, StateError> {
        if let Some(slot) = self.ttl_slots.get(name) {
            return Ok(slot.clone());
        }
        if !is_state_cf(name) {
            return Err(StateError::Invalid(format!(
                "`{name}` is reserved and cannot name a state"
            )));
        }
        let slot = Arc::new(TtlSlot::default());
        let opts = Self::cf_options(&self.config, Some(slot.clone()));
        let shared = self
            .db
            .as_mut()
            .ok_or_else(|| StateError::Closed("the RocksDB store".into()))?;
        // Creating a column family needs the database exclusively: states are registered when
        // the operator is made, before any query reader shares it.
        let db = Arc::get_mut(shared).map(SharedDb::db_mut).ok_or_else(|| {
            StateError::Invalid(format!(
                "state `{name}` registered while queries share the store; register states first"
            ))
        })?;
        db.create_cf(name, &opts)
            .map_err(|e| storage(&format!("creating state `{name}`"), e))?;
        self.created.push(opts);
        self.ttl_slots.insert(name.to_string(), slot.clone());
        self.written_through
            .insert(name.to_string(), Arc::new(AtomicI64::new(now_ms())));
        Ok(slot)
    }

    /// Arms the compaction filter of state `name` with its TTL and records the state's layout
    /// in the catalog (call once its column family is in that layout).
    pub(crate) fn set_state_ttl(
        &mut self,
        name: &str,
        ttl: Option<(i64, crate::Clock)>,
    ) -> Result<(), StateError> {
        let ttl_ms = ttl.as_ref().map(|(t, _)| *t);
        let slot = self.ensure_state(name)?;
        match slot.lock() {
            Ok(mut s) => *s = ttl,
            Err(poisoned) => *poisoned.into_inner() = ttl,
        }
        self.record_state(name, ttl_ms)
    }

    /// Records in the catalog whether state `name`'s values carry the TTL prefix.
    pub(crate) fn record_state(&self, name: &str, ttl_ms: Option<i64>) -> Result<(), StateError> {
        self.write(
            META_CF,
            [(state_record_key(name), Some(encode_ttl(ttl_ms)))],
        )
    }

    /// The catalog's record of state `name`: `None` if it has none (a state new to this
    /// database, or one written before the catalog existed).
    pub(crate) fn recorded_state(&self, name: &str) -> Result<Option<Option<i64>>, StateError> {
        match self.get(META_CF, &state_record_key(name))? {
            None => Ok(None),
            Some(v) => decode_ttl(&v)
                .map(Some)
                .map_err(|message| StateError::Codec {
                    state: format!("{META_CF}/{name}"),
                    message,
                }),
        }
    }

    /// Records the key groups and range of this database.
    pub(crate) fn record_layout(
        &self,
        key_groups: u32,
        range: KeyGroupRange,
    ) -> Result<(), StateError> {
        self.write(
            META_CF,
            [(LAYOUT_KEY.to_vec(), Some(encode_layout(key_groups, range)))],
        )
    }

    /// The states of this database, by name, with their recorded TTLs (none if unrecorded).
    pub(crate) fn states(&self) -> Result<Vec<StateMeta>, StateError> {
        let mut names: Vec<&String> = self.ttl_slots.keys().collect();
        names.sort();
        names
            .into_iter()
            .map(|name| {
                Ok(StateMeta {
                    name: name.clone(),
                    ttl_ms: self.recorded_state(name)?.flatten(),
                })
            })
            .collect()
    }

    pub(crate) fn cf(&self, name: &str) -> Result<&ColumnFamily, StateError> {
        self.db()?
            .cf_handle(name)
            .ok_or_else(|| StateError::storage(format!("no column family for state `{name}`")))
    }

    /// One point read.
    pub(crate) fn get(&self, cf: &str, key: &[u8]) -> Result<Option<Vec<u8>>, StateError> {
        StoreCounters::add(&self.counters.point_reads, 1);
        let handle = self.cf(cf)?;
        self.db()?
            .get_pinned_cf(handle, key)
            .map(|v| v.map(|v| v.to_vec()))
            .map_err(|e| storage("reading state", e))
    }

    /// Writes a batch of puts (`Some`) and deletes (`None`) to one column family.
    pub(crate) fn write(
        &self,
        cf: &str,
        entries: impl IntoIterator<Item = (Vec<u8>, Option<Vec<u8>>)>,
    ) -> Result<(), StateError> {
        let handle = self.cf(cf)?;
        let mut batch = WriteBatch::default();
        for (k, v) in entries {
            match v {
                Some(v) => batch.put_cf(handle, k, v),
                None => batch.delete_cf(handle, k),
            }
        }
        if batch.is_empty() {
            return Ok(());
        }
        StoreCounters::add(&self.counters.batches_written, 1);
        StoreCounters::add(&self.counters.entries_written, batch.len() as u64);
        self.db()?
            .write_opt(batch, &self.write_options)
            .map_err(|e| storage("writing state", e))
    }

    /// Entries of `cf` with keys in `[from, to)`, in key order, at most `limit`.
    pub(crate) fn range(
        &self,
        cf: &str,
        from: &[u8],
        to: &[u8],
        limit: usize,
    ) -> Result<Vec<KeyValue>, StateError> {
        let handle = self.cf(cf)?;
        let mut opts = rocksdb::ReadOptions::default();
        opts.set_iterate_upper_bound(to.to_vec());
        let mut it = self.db()?.raw_iterator_cf_opt(handle, opts);
        it.seek(from);
        let mut out = Vec::new();
        while it.valid() && out.len() < limit {
            StoreCounters::add(&self.counters.iterator_steps, 1);
            if let (Some(k), Some(v)) = (it.key(), it.value()) {
                out.push((k.to_vec(), v.to_vec()));
            }
            it.next();
        }
        it.status().map_err(|e| storage("reading a range", e))?;
        Ok(out)
    }

    /// Calls `f` on every entry of `cf` with keys in `[from, to)` (`to` `None`: to the end),
    /// in key order, without copying them.
    pub(crate) fn scan(
        &self,
        cf: &str,
        from: &[u8],
        to: Option<&[u8]>,
        mut f: impl FnMut(&[u8], &[u8]) -> Result<(), StateError>,
    ) -> Result<(), StateError> {
        let handle = self.cf(cf)?;
        let mut opts = rocksdb::ReadOptions::default();
        if let Some(to) = to {
            opts.set_iterate_upper_bound(to.to_vec());
        }
        let mut it = self.db()?.raw_iterator_cf_opt(handle, opts);
        it.seek(from);
        let mut steps = 0;
        while let Some((k, v)) = it.item() {
            steps += 1;
            f(k, v)?;
            it.next();
        }
        StoreCounters::add(&self.counters.iterator_steps, steps);
        it.status().map_err(|e| storage("reading a range", e))
    }

    /// Writes a batch spanning column families.
    pub(crate) fn write_batch(&self, batch: WriteBatch) -> Result<(), StateError> {
        if batch.is_empty() {
            return Ok(());
        }
        StoreCounters::add(&self.counters.batches_written, 1);
        StoreCounters::add(&self.counters.entries_written, batch.len() as u64);
        self.db()?
            .write_opt(batch, &self.write_options)
            .map_err(|e| storage("writing state", e))
    }

    /// Flushes the memtables of every column family to SST files, as one atomic flush: the
    /// column families are written together and recorded in one manifest update, instead of a
    /// flush job, an SST sync and a manifest sync per column family one after the other (a
    /// checkpoint of q5's handful of states spent most of its 160 ms there).
    pub(crate) fn flush_all(&self) -> Result<(), StateError> {
        let db = self.db()?;
        let handles: Vec<&rocksdb::ColumnFamily> = [TIMERS_CF, META_CF]
            .into_iter()
            .chain(self.ttl_slots.keys().map(String::as_str))
            .filter_map(|name| db.cf_handle(name))
            .collect();
        db.flush_cfs_opt(&handles, &rocksdb::FlushOptions::default())
            .map_err(|e| storage("flushing RocksDB", e))?;
        // The default column family holds nothing of weir's; flushing it is a no-op unless
        // something wrote there.
        db.flush().map_err(|e| storage("flushing RocksDB", e))
    }

    /// Compacts every column family now (what RocksDB does in the background; tests use it to
    /// see the TTL compaction filter at work).
    pub fn compact_all(&self) -> Result<(), StateError> {
        let db = self.db()?;
        for cf in DB::list_cf(&Options::default(), &self.path).unwrap_or_default() {
            if let Some(handle) = db.cf_handle(&cf) {
                db.flush_cf(handle)
                    .map_err(|e| storage("flushing RocksDB", e))?;
                db.compact_range_cf(handle, None::<&[u8]>, None::<&[u8]>);
            }
        }
        Ok(())
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn counters(&self) -> Arc<StoreCounters> {
        self.counters.clone()
    }

    /// Closes the database and removes its directory (the working copy of a run; checkpoints
    /// keep their own copies).
    pub fn close(&mut self) -> Result<(), StateError> {
        if let Some(db) = self.db.take() {
            // A query reading right now keeps the database open; the last one to let go
            // closes it and removes the directory (see `SharedDb`).
            if let Some(db) = SharedDb::close_or_defer(db, &self.path) {
                drop(db);
                std::fs::remove_dir_all(&self.path)
                    .map_err(|e| storage(&format!("removing {}", self.path.display()), e))?;
            }
        }
        Ok(())
    }
}

impl Store {
    /// Flushes memtables and closes the database, keeping its files.
    pub fn close_keeping_files(&mut self) -> Result<(), StateError> {
        if let Some(db) = self.db.take() {
            // The files are reopened next: no query may keep the database open past here.
            let db = SharedDb::exclusive(db)?;
            db.flush().map_err(|e| storage("flushing RocksDB", e))?;
            for cf in DB::list_cf(&Options::default(), &self.path).unwrap_or_default() {
                if let Some(handle) = db.cf_handle(&cf) {
                    db.flush_cf(handle)
                        .map_err(|e| storage("flushing RocksDB", e))?;
                }
            }
        }
        Ok(())
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        let _ = self.close();
    }
}

/// The catalog's TTL record: `[0]` none, `[1][ttl ms: i64 LE]`.
pub(crate) fn encode_ttl(ttl_ms: Option<i64>) -> Vec<u8> {
    match ttl_ms {
        None => vec![0],
        Some(t) => {
            let mut v = vec![1];
            v.extend_from_slice(&t.to_le_bytes());
            v
        }
    }
}

/// The catalog's layout record: key groups, range start and end, u32 LE each.
pub(crate) fn encode_layout(key_groups: u32, range: KeyGroupRange) -> Vec<u8> {
    let mut v = Vec::with_capacity(12);
    for x in [key_groups, range.start, range.end] {
        v.extend_from_slice(&x.to_le_bytes());
    }
    v
}

pub(crate) fn decode_ttl(bytes: &[u8]) -> Result<Option<i64>, String> {
    match bytes {
        [0] => Ok(None),
        [1, rest @ ..] => <[u8; 8]>::try_from(rest)
            .map(|t| Some(i64::from_le_bytes(t)))
            .map_err(|_| format!("a TTL record of {} bytes", bytes.len())),
        _ => Err(format!("a TTL record of {} bytes", bytes.len())),
    }
}

/// The catalog's layout record: (key groups, range).
pub(crate) fn decode_layout(bytes: &[u8]) -> Result<(u32, KeyGroupRange), String> {
    let word = |i: usize| {
        bytes
            .get(i * 4..i * 4 + 4)
            .and_then(|b| <[u8; 4]>::try_from(b).ok())
            .map(u32::from_le_bytes)
            .ok_or_else(|| format!("a layout record of {} bytes", bytes.len()))
    };
    Ok((
        word(0)?,
        KeyGroupRange {
            start: word(1)?,
            end: word(2)?,
        },
    ))
}

/// The catalog key of the layout record.
pub(crate) fn layout_key() -> &'static [u8] {
    LAYOUT_KEY
}

/// The catalog key of a state's record.
pub(crate) fn state_record_key(name: &str) -> Vec<u8> {
    let mut key = STATE_PREFIX.to_vec();
    key.extend_from_slice(name.as_bytes());
    key
}

/// `[group u16 BE][varint key length][key][namespace]`.
pub(crate) fn entry_key(key: KeyRef<'_>, ns: &[u8], out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&(key.group as u16).to_be_bytes());
    put_varint(out, key.bytes.len() as u64);
    out.extend_from_slice(key.bytes);
    out.extend_from_slice(ns);
}

/// Splits a state entry's RocksDB key into (key group, key, namespace).
pub(crate) fn decode_entry_key(bytes: &[u8]) -> Result<(u32, &[u8], &[u8]), String> {
    let (group, mut rest) = match bytes {
        [a, b, rest @ ..] => (u32::from(u16::from_be_bytes([*a, *b])), rest),
        _ => return Err(format!("a state key of {} bytes", bytes.len())),
    };
    let n = usize::try_from(get_varint(&mut rest)?).map_err(|e| e.to_string())?;
    if rest.len() < n {
        return Err(format!("a key of {n} bytes in {} left", rest.len()));
    }
    let (key, ns) = rest.split_at(n);
    Ok((group, key, ns))
}

/// The bounds of a key-group range in a state column family: the smallest key of group
/// `range.start`, and the first key past group `range.end - 1` (`None`: no key is past it).
pub(crate) fn group_bounds(range: KeyGroupRange) -> (Vec<u8>, Option<Vec<u8>>) {
    let start = (range.start.min(u32::from(u16::MAX)) as u16)
        .to_be_bytes()
        .to_vec();
    let end = u16::try_from(range.end)
        .ok()
        .map(|e| e.to_be_bytes().to_vec());
    (start, end)
}
