//! Native snapshots of the RocksDB backend: RocksDB checkpoints.
//!
//! A checkpoint is a directory of hard links to the database's SST files (immutable: an
//! unchanged one keeps its name and bytes from one checkpoint to the next) and fresh copies of
//! the small files that describe them (`MANIFEST-*`, `CURRENT`, `OPTIONS-*`). What the backend
//! holds only in memory (its caches' dirty entries, its timers' overlay and due timers) goes
//! beside them in one small file, the [`overlay`](super::overlay), rather than into RocksDB.
//! The catalog (`_meta`, see [`crate::store`]) records the key groups and the states' TTLs, so
//! the directory explains itself to a restore.
//!
//! A restore of exactly one source at exactly its range links (or copies) the files into the
//! working directory, opens the database there and applies the overlay to it. Any other restore
//! opens each source read-only and reads the entries of the new range, merged with the
//! overlay's: per state column family one range read (state keys start with their key group),
//! and for timers (ordered by time) one pass keeping those of the new groups.

use std::path::Path;

use rocksdb::{DB, Options};

use crate::error::StateError;
use crate::heap::SlotRef;
use crate::key_groups::KeyGroupRange;
use crate::store::{
    META_CF, RocksConfig, Store, TIMERS_CF, decode_entry_key, decode_layout, decode_ttl,
    group_bounds, is_state_cf, layout_key, state_record_key, storage,
};
use crate::timers::{decode_hold, decode_timer};

use super::overlay::{FILE_NAME as OVERLAY_FILE, Merge, Overlay};
use super::{RestoreSource, Sink, SnapshotFile, StateMeta};

/// Takes a RocksDB checkpoint of `store` into `dir`, which must not exist, with `overlay` (what
/// is only in memory) beside it; lists its files.
pub(crate) fn checkpoint(
    store: &Store,
    dir: &Path,
    overlay: &Overlay,
) -> Result<Vec<SnapshotFile>, StateError> {
    // The checkpoint flushes memtables itself; flushing every column family first makes that
    // explicit (the write-ahead log is off, so nothing else would hold those writes). With the
    // caches' writes in the overlay, the memtables hold only what full caches spilled since the
    // last checkpoint, often nothing.
    store.flush_all()?;
    let db = store.db()?;
    rocksdb::checkpoint::Checkpoint::new(db)
        .and_then(|c| c.create_checkpoint(dir))
        .map_err(|e| {
            storage(
                &format!("creating a RocksDB checkpoint in {}", dir.display()),
                e,
            )
        })?;
    if !overlay.is_empty() {
        overlay.write(&dir.join(OVERLAY_FILE))?;
    }
    list_files(dir)
}

/// The files of `dir`, by name: `*.sst` shared, the others not.
fn list_files(dir: &Path) -> Result<Vec<SnapshotFile>, StateError> {
    let io = |e: std::io::Error| storage(&format!("listing {}", dir.display()), e);
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let entry = entry.map_err(io)?;
        let meta = entry.metadata().map_err(io)?;
        if !meta.is_file() {
            continue;
        }
        let name = entry.file_name().to_string_lossy().into_owned();
        files.push(SnapshotFile {
            shared: name.ends_with(".sst"),
            name,
            size: meta.len(),
        });
    }
    files.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(files)
}

fn corrupt(dir: &Path, message: String) -> StateError {
    StateError::Snapshot {
        path: dir.to_path_buf(),
        message,
    }
}

/// Fails unless `dir` holds a RocksDB checkpoint (its `CURRENT` file): a missing download.
fn require_checkpoint(dir: &Path) -> Result<(), StateError> {
    let current = dir.join("CURRENT");
    if current.is_file() {
        return Ok(());
    }
    Err(StateError::storage(format!(
        "{}: no RocksDB checkpoint there ({} is missing)",
        dir.display(),
        current.display()
    )))
}

/// Checks a source's recorded layout against the restore's key groups and the source's range.
fn check_layout(
    dir: &Path,
    recorded: Option<Vec<u8>>,
    key_groups: u32,
    range: KeyGroupRange,
) -> Result<(), StateError> {
    let bytes = recorded.ok_or_else(|| {
        corrupt(
            dir,
            "no layout record: not a checkpoint of weir's RocksDB backend".into(),
        )
    })?;
    let (groups, recorded_range) =
        decode_layout(&bytes).map_err(|m| corrupt(dir, format!("layout record: {m}")))?;
    if groups != key_groups {
        return Err(corrupt(
            dir,
            format!(
                "written with {groups} key groups, restored with {key_groups}: the number of key \
                 groups of a job cannot change"
            ),
        ));
    }
    if recorded_range != range {
        return Err(corrupt(
            dir,
            format!(
                "holds key groups {}..{}, but its source says {}..{}",
                recorded_range.start, recorded_range.end, range.start, range.end
            ),
        ));
    }
    Ok(())
}

/// Reads the entries and timers of `groups` from the checkpoint in `dir` (of the subtask of
/// `range`) into `sink`, opening it read-only.
pub(crate) fn read(
    dir: &Path,
    key_groups: u32,
    range: KeyGroupRange,
    groups: KeyGroupRange,
    sink: &mut dyn Sink,
) -> Result<(), StateError> {
    require_checkpoint(dir)?;
    let opts = Options::default();
    let families = DB::list_cf(&opts, dir)
        .map_err(|e| corrupt(dir, format!("listing column families: {e}")))?;
    let db = DB::open_cf_for_read_only(&opts, dir, &families, false)
        .map_err(|e| corrupt(dir, format!("opening read-only: {e}")))?;
    let meta = db.cf_handle(META_CF).ok_or_else(|| {
        corrupt(
            dir,
            "no catalog: not a checkpoint of weir's RocksDB backend".into(),
        )
    })?;
    let get = |key: &[u8]| {
        db.get_cf(meta, key)
            .map_err(|e| corrupt(dir, format!("reading the catalog: {e}")))
    };
    check_layout(dir, get(layout_key())?, key_groups, range)?;
    let overlay = Overlay::read(dir)?.unwrap_or_default();
    if let Some(unknown) = overlay
        .family_names()
        .find(|n| *n != TIMERS_CF && !families.iter().any(|f| f == n))
    {
        return Err(corrupt(
            dir,
            format!("the overlay writes to `{unknown}`, a column family the checkpoint lacks"),
        ));
    }
    let (from, to) = group_bounds(groups);
    for name in families.iter().filter(|n| is_state_cf(n)) {
        let ttl_ms = match get(&state_record_key(name))? {
            Some(bytes) => decode_ttl(&bytes)
                .map_err(|m| corrupt(dir, format!("catalog of state `{name}`: {m}")))?,
            None => None,
        };
        let state = sink.state(
            &StateMeta {
                name: name.clone(),
                ttl_ms,
            },
            dir,
        )?;
        let cf = db
            .cf_handle(name)
            .ok_or_else(|| corrupt(dir, format!("column family `{name}` vanished")))?;
        let mut emit = |key: &[u8], value: &[u8]| {
            let (group, k, ns) = decode_entry_key(key)
                .map_err(|m| corrupt(dir, format!("a key of state `{name}`: {m}")))?;
            let (written, value) = match ttl_ms {
                None => (0, value),
                Some(_) => {
                    let (t, rest) = value.split_at_checked(8).ok_or_else(|| {
                        corrupt(
                            dir,
                            format!("a TTL value of state `{name}` of {} bytes", value.len()),
                        )
                    })?;
                    let mut stamp = [0u8; 8];
                    stamp.copy_from_slice(t);
                    (i64::from_le_bytes(stamp), rest)
                }
            };
            sink.entry(state, SlotRef { group, key: k, ns }, written, value)
        };
        let mut opts = rocksdb::ReadOptions::default();
        if let Some(to) = &to {
            opts.set_iterate_upper_bound(to.clone());
        }
        let mut merge = Merge::new(overlay.family(name), &from, to.as_deref());
        let mut it = db.raw_iterator_cf_opt(cf, opts);
        it.seek(&from);
        while let Some((key, value)) = it.item() {
            merge.stored(key, value, &mut emit)?;
            it.next();
        }
        it.status()
            .map_err(|e| corrupt(dir, format!("reading state `{name}`: {e}")))?;
        merge.finish(&mut emit)?;
    }
    let timers = db
        .cf_handle(TIMERS_CF)
        .ok_or_else(|| corrupt(dir, "no timers column family".into()))?;
    let mut emit = |key: &[u8], value: &[u8]| {
        let (domain, timer) =
            decode_timer(key).map_err(|m| corrupt(dir, format!("a timer key: {m}")))?;
        if groups.contains(timer.key_group) {
            sink.timer(domain, timer, decode_hold(value))?;
        }
        Ok(())
    };
    let mut merge = Merge::new(overlay.family(TIMERS_CF), &[], None);
    let mut it = db.raw_iterator_cf(timers);
    it.seek_to_first();
    while let Some((key, value)) = it.item() {
        merge.stored(key, value, &mut emit)?;
        it.next();
    }
    it.status()
        .map_err(|e| corrupt(dir, format!("reading timers: {e}")))?;
    merge.finish(&mut emit)
}

/// Restores the checkpoint of `source` as the working database at `config.path`: links its
/// SST files (copies them across filesystems), copies the others, and opens it.
pub(crate) fn restore_files(
    source: &RestoreSource,
    key_groups: u32,
    config: RocksConfig,
) -> Result<Store, StateError> {
    require_checkpoint(&source.dir)?;
    let path = config.path.clone();
    let opened = link_files(&source.dir, &path).and_then(|()| Store::open(config, false));
    let store = match opened {
        Ok(store) => store,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&path);
            return Err(e);
        }
    };
    // From here on, dropping the store on an error removes the directory.
    let recorded = store.get(META_CF, layout_key())?;
    check_layout(&source.dir, recorded, key_groups, source.range)?;
    if let Some(overlay) = Overlay::read(&source.dir)? {
        overlay.apply(&store)?;
    }
    Ok(store)
}

/// Fills `to` (emptied first) with the files of the checkpoint in `from`.
fn link_files(from: &Path, to: &Path) -> Result<(), StateError> {
    let io =
        |what: &str, p: &Path, e: std::io::Error| storage(&format!("{what} {}", p.display()), e);
    if to.exists() {
        std::fs::remove_dir_all(to).map_err(|e| io("clearing", to, e))?;
    }
    std::fs::create_dir_all(to).map_err(|e| io("creating", to, e))?;
    for entry in std::fs::read_dir(from).map_err(|e| io("listing", from, e))? {
        let entry = entry.map_err(|e| io("listing", from, e))?;
        let name = entry.file_name();
        let text = name.to_string_lossy();
        // Not followed if it is a link: a link would be copied from wherever it points.
        let kind = entry.file_type().map_err(|e| io("listing", from, e))?;
        // Leftovers of a RocksDB that opened the directory (a read-only restore): not part of
        // the checkpoint.
        // The overlay is applied after opening, not a file of the database.
        if text == "LOCK" || text.starts_with("LOG") || text == OVERLAY_FILE || kind.is_dir() {
            continue;
        }
        if !kind.is_file() {
            return Err(corrupt(
                from,
                format!("`{text}` is not a regular file (a link, a device or a FIFO)"),
            ));
        }
        let (src, dst) = (entry.path(), to.join(&name));
        // SST files are immutable: a link shares them. The others RocksDB may rewrite.
        let linked = text.ends_with(".sst") && std::fs::hard_link(&src, &dst).is_ok();
        if !linked {
            std::fs::copy(&src, &dst).map_err(|e| io("copying", &src, e))?;
        }
    }
    Ok(())
}
