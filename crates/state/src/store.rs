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

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use rocksdb::{
    BlockBasedOptions, Cache, ColumnFamily, DB, DBCompressionType, Options, WriteBatch,
    WriteOptions,
};

use crate::codec::put_varint;
use crate::error::StateError;
use crate::keys::KeyRef;

/// A RocksDB key and its value.
pub(crate) type KeyValue = (Vec<u8>, Vec<u8>);

/// Column family of the timers.
pub(crate) const TIMERS_CF: &str = "_timers";

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
    db: Option<DB>,
    /// Options of the column families created after opening. rust-rocksdb's `create_cf` does
    /// not keep what its options own (the TTL compaction filter among them) alive, so the store
    /// keeps them until the database is closed.
    created: Vec<Options>,
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

pub(crate) fn storage(context: &str, e: impl std::fmt::Display) -> StateError {
    StateError::Storage(format!("{context}: {e}"))
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
        let mut families = vec![TIMERS_CF.to_string()];
        if !fresh {
            for cf in DB::list_cf(&opts, &path).unwrap_or_default() {
                if cf != "default" && !families.contains(&cf) {
                    families.push(cf);
                }
            }
        }
        let descriptors = families.iter().map(|name| {
            rocksdb::ColumnFamilyDescriptor::new(name, Self::cf_options(&config, None))
        });
        let db = DB::open_cf_descriptors(&opts, &path, descriptors)
            .map_err(|e| storage(&format!("opening RocksDB at {}", path.display()), e))?;
        let mut write_options = WriteOptions::new();
        write_options.disable_wal(true);
        Ok(Store {
            db: Some(db),
            created: Vec::new(),
            path,
            config,
            write_options,
            counters: Arc::new(StoreCounters::default()),
        })
    }

    fn cf_options(config: &RocksConfig, ttl: Option<(i64, crate::Clock)>) -> Options {
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
        if let Some((ttl_ms, clock)) = ttl {
            // Expired entries are dropped when compaction rewrites them: state with a TTL does
            // not grow forever even if nobody reads it again.
            opts.set_compaction_filter(
                "weir-ttl",
                move |_level: u32, _key: &[u8], value: &[u8]| match value
                    .get(..8)
                    .and_then(|b| <[u8; 8]>::try_from(b).ok())
                {
                    Some(t) if i64::from_le_bytes(t).saturating_add(ttl_ms) <= clock() => {
                        rocksdb::compaction_filter::Decision::Remove
                    }
                    _ => rocksdb::compaction_filter::Decision::Keep,
                },
            );
        }
        opts
    }

    fn db(&self) -> Result<&DB, StateError> {
        self.db
            .as_ref()
            .ok_or_else(|| StateError::Storage("the RocksDB store is closed".into()))
    }

    /// Creates the column family of a state.
    pub(crate) fn create_state(
        &mut self,
        name: &str,
        ttl: Option<(i64, crate::Clock)>,
    ) -> Result<(), StateError> {
        let opts = Self::cf_options(&self.config, ttl);
        let db = self
            .db
            .as_mut()
            .ok_or_else(|| StateError::Storage("the RocksDB store is closed".into()))?;
        if db.cf_handle(name).is_none() {
            db.create_cf(name, &opts)
                .map_err(|e| storage(&format!("creating state `{name}`"), e))?;
            self.created.push(opts);
        }
        Ok(())
    }

    pub(crate) fn cf(&self, name: &str) -> Result<&ColumnFamily, StateError> {
        self.db()?
            .cf_handle(name)
            .ok_or_else(|| StateError::Storage(format!("no column family for state `{name}`")))
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
            drop(db);
            std::fs::remove_dir_all(&self.path)
                .map_err(|e| storage(&format!("removing {}", self.path.display()), e))?;
        }
        Ok(())
    }
}

impl Store {
    /// Flushes memtables and closes the database, keeping its files.
    pub fn close_keeping_files(&mut self) -> Result<(), StateError> {
        if let Some(db) = self.db.take() {
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

/// `[group u16 BE][varint key length][key][namespace]`.
pub(crate) fn entry_key(key: KeyRef<'_>, ns: &[u8], out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&(key.group as u16).to_be_bytes());
    put_varint(out, key.bytes.len() as u64);
    out.extend_from_slice(key.bytes);
    out.extend_from_slice(ns);
}
