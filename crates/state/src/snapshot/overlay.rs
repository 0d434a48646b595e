//! The overlay of a native snapshot: what the RocksDB backend held only in memory when it took
//! the RocksDB checkpoint.
//!
//! The backend's write-back caches and its timers' overlay absorb most writes of a streaming
//! job: a window's state is created, updated and deleted without RocksDB ever seeing it. Pushing
//! all of that into RocksDB at every checkpoint costs a write, a memtable flush and, later, a
//! tombstone, for state that would have lived and died in memory; measured on Nexmark q5 with a
//! checkpoint every second, that was the whole 27% the checkpoints cost (see BENCHMARKS.md). So
//! a native snapshot writes it *beside* the RocksDB checkpoint instead, in this file: exactly the
//! writes a flush would have made, per column family, in key order, while the cache stays as it
//! was. A restore applies them on top of the checkpoint's database (when it restores its files)
//! or merges them into what it reads (any other restore); either way the state restored is the
//! state a flush followed by a checkpoint would have produced.
//!
//! # Layout
//! ```text
//! magic "WEIROVL\0" (8) · version u8
//! families: varint, then per family: name (varint length, bytes) · writes (varint), then per
//!     write, in key order: key (varint length, bytes) · 0 (delete) | 1 · value (varint length, bytes)
//! checksum u64 LE: xxh3-64 of every byte before it
//! ```

use std::collections::BTreeMap;
use std::path::Path;

use crate::codec::{get_varint, put_varint};
use crate::error::StateError;
use crate::store::{KeyWrite, Store, storage};

/// The overlay's name inside a native snapshot's directory.
pub(crate) const FILE_NAME: &str = "weir-overlay";
const MAGIC: &[u8; 8] = b"WEIROVL\0";
const VERSION: u8 = 1;

/// Pending writes per column family, each family's in key order with one write per key.
/// The writes of one column family, by key (`None` deletes).
pub(crate) type Writes = BTreeMap<Vec<u8>, Option<Vec<u8>>>;

#[derive(Debug, Default)]
pub(crate) struct Overlay {
    families: BTreeMap<String, Writes>,
}

impl Overlay {
    /// Adds `writes` to column family `cf`; a later write of a key replaces an earlier one.
    pub(crate) fn add(&mut self, cf: &str, writes: Vec<KeyWrite>) {
        if writes.is_empty() {
            return;
        }
        self.families
            .entry(cf.to_string())
            .or_default()
            .extend(writes);
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.families.is_empty()
    }

    /// The writes of column family `cf`, by key.
    pub(crate) fn family(&self, cf: &str) -> Option<&Writes> {
        self.families.get(cf)
    }

    pub(crate) fn family_names(&self) -> impl Iterator<Item = &str> {
        self.families.keys().map(String::as_str)
    }

    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(MAGIC);
        out.push(VERSION);
        put_varint(&mut out, self.families.len() as u64);
        for (name, writes) in &self.families {
            put_bytes(&mut out, name.as_bytes());
            put_varint(&mut out, writes.len() as u64);
            for (key, value) in writes {
                put_bytes(&mut out, key);
                match value {
                    None => out.push(0),
                    Some(v) => {
                        out.push(1);
                        put_bytes(&mut out, v);
                    }
                }
            }
        }
        let checksum = xxhash_rust::xxh3::xxh3_64(&out);
        out.extend_from_slice(&checksum.to_le_bytes());
        out
    }

    /// Writes the overlay to `path` (a new file), returning its size. Not fsynced: the
    /// checkpoint layer does that when it stores the snapshot's files.
    pub(crate) fn write(&self, path: &Path) -> Result<u64, StateError> {
        let bytes = self.encode();
        std::fs::write(path, &bytes)
            .map_err(|e| storage(&format!("writing {}", path.display()), e))?;
        Ok(bytes.len() as u64)
    }

    /// The overlay of the native snapshot in `dir`, if it has one (snapshots of an older weir,
    /// or taken with nothing in memory, have none).
    pub(crate) fn read(dir: &Path) -> Result<Option<Self>, StateError> {
        let path = dir.join(FILE_NAME);
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(storage(&format!("reading {}", path.display()), e)),
        };
        Self::decode(&bytes)
            .map(Some)
            .map_err(|message| StateError::Snapshot {
                path,
                message: format!("overlay: {message}"),
            })
    }

    fn decode(bytes: &[u8]) -> Result<Self, String> {
        let body_len = bytes
            .len()
            .checked_sub(8)
            .filter(|n| *n > MAGIC.len())
            .ok_or_else(|| format!("{} bytes is too short", bytes.len()))?;
        let (body, tail) = bytes.split_at(body_len);
        let mut stored = [0u8; 8];
        stored.copy_from_slice(tail);
        if !body.starts_with(MAGIC) {
            return Err("not an overlay file (bad magic)".into());
        }
        if xxhash_rust::xxh3::xxh3_64(body) != u64::from_le_bytes(stored) {
            return Err("checksum mismatch: truncated or damaged".into());
        }
        let mut input = &body[MAGIC.len()..];
        let version = take(&mut input, 1)?[0];
        if version != VERSION {
            return Err(format!("version {version}, this weir reads {VERSION}"));
        }
        let mut overlay = Self::default();
        for _ in 0..get_varint(&mut input)? {
            let name = String::from_utf8(take_bytes(&mut input)?.to_vec())
                .map_err(|_| "a column family name is not UTF-8".to_string())?;
            let mut writes = BTreeMap::new();
            for _ in 0..get_varint(&mut input)? {
                let key = take_bytes(&mut input)?.to_vec();
                let value = match take(&mut input, 1)?[0] {
                    0 => None,
                    1 => Some(take_bytes(&mut input)?.to_vec()),
                    tag => return Err(format!("bad write tag {tag}")),
                };
                writes.insert(key, value);
            }
            overlay.families.insert(name, writes);
        }
        if !input.is_empty() {
            return Err(format!("{} bytes after the last family", input.len()));
        }
        Ok(overlay)
    }

    /// Writes everything into `store` (a database just restored from the snapshot's files).
    pub(crate) fn apply(self, store: &Store) -> Result<(), StateError> {
        for (name, writes) in self.families {
            store.write(&name, writes)?;
        }
        Ok(())
    }
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

fn take<'a>(input: &mut &'a [u8], n: usize) -> Result<&'a [u8], String> {
    if input.len() < n {
        return Err("truncated".into());
    }
    let (head, rest) = input.split_at(n);
    *input = rest;
    Ok(head)
}

fn take_bytes<'a>(input: &mut &'a [u8]) -> Result<&'a [u8], String> {
    let n = usize::try_from(get_varint(input)?).map_err(|_| "a length overflows".to_string())?;
    take(input, n)
}

/// Where a [`Merge`] sends each key and value of its result.
pub(crate) type Emit<'f> = dyn FnMut(&[u8], &[u8]) -> Result<(), StateError> + 'f;

/// Merges a column family read in key order with its overlay: calls `f` with every key and
/// value of the result, in key order (overlay writes replace or delete what was read).
pub(crate) struct Merge<'a> {
    pending: std::iter::Peekable<std::collections::btree_map::Range<'a, Vec<u8>, Option<Vec<u8>>>>,
}

impl<'a> Merge<'a> {
    /// Merges `writes` from `from` on (keys below it are not wanted), up to `to` (exclusive;
    /// `None`: to the end).
    pub(crate) fn new(writes: Option<&'a Writes>, from: &[u8], to: Option<&[u8]>) -> Self {
        static EMPTY: Writes = BTreeMap::new();
        let writes = writes.unwrap_or(&EMPTY);
        let upper = match to {
            Some(to) => std::ops::Bound::Excluded(to.to_vec()),
            None => std::ops::Bound::Unbounded,
        };
        Self {
            pending: writes
                .range((std::ops::Bound::Included(from.to_vec()), upper))
                .peekable(),
        }
    }

    /// The next stored entry `(key, value)` was read: emits, in order, the overlay's puts of
    /// keys before it, then the entry itself unless the overlay replaces or deletes it.
    pub(crate) fn stored(
        &mut self,
        key: &[u8],
        value: &[u8],
        f: &mut Emit<'_>,
    ) -> Result<(), StateError> {
        while let Some((k, v)) = self.pending.next_if(|(k, _)| k.as_slice() < key) {
            if let Some(v) = v {
                f(k, v)?;
            }
        }
        match self.pending.next_if(|(k, _)| k.as_slice() == key) {
            Some((k, Some(v))) => f(k, v),
            Some((_, None)) => Ok(()),
            None => f(key, value),
        }
    }

    /// Everything was read: emits the overlay's remaining puts.
    pub(crate) fn finish(mut self, f: &mut Emit<'_>) -> Result<(), StateError> {
        for (k, v) in self.pending.by_ref() {
            if let Some(v) = v {
                f(k, v)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(k: &str, v: &str) -> KeyWrite {
        (k.as_bytes().to_vec(), Some(v.as_bytes().to_vec()))
    }

    fn del(k: &str) -> KeyWrite {
        (k.as_bytes().to_vec(), None)
    }

    #[test]
    fn round_trips_and_detects_damage() {
        let mut o = Overlay::default();
        o.add("count", vec![put("b", "2"), del("a"), put("c", "")]);
        o.add("_timers", vec![put("t1", "h")]);
        o.add("empty", vec![]);
        let bytes = o.encode();
        let back = Overlay::decode(&bytes).unwrap();
        assert_eq!(back.families, o.families);
        assert_eq!(
            back.family_names().collect::<Vec<_>>(),
            ["_timers", "count"]
        );
        for cut in [0, 5, bytes.len() - 1] {
            assert!(Overlay::decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        let mut flipped = bytes.clone();
        flipped[12] ^= 1;
        assert!(Overlay::decode(&flipped).unwrap_err().contains("checksum"));
    }

    /// The merge against a naive one: a map of what was read, overwritten by the overlay.
    #[test]
    fn merge_equals_applying_the_writes_to_what_was_read() {
        let stored: Vec<(String, String)> = ["a", "c", "d", "f", "h"]
            .iter()
            .map(|k| (k.to_string(), format!("old-{k}")))
            .collect();
        let mut o = Overlay::default();
        o.add(
            "s",
            vec![
                put("b", "new-b"),
                del("c"),
                put("d", "new-d"),
                del("e"),
                put("i", "new-i"),
            ],
        );
        for (from, to) in [("", None), ("c", Some("h")), ("d", Some("e"))] {
            let mut naive: BTreeMap<String, String> = stored
                .iter()
                .filter(|(k, _)| k.as_str() >= from && to.is_none_or(|t| k.as_str() < t))
                .cloned()
                .collect();
            for (k, v) in o.family("s").unwrap() {
                let k = String::from_utf8(k.clone()).unwrap();
                if k.as_str() < from || to.is_some_and(|t| k.as_str() >= t) {
                    continue;
                }
                match v {
                    Some(v) => naive.insert(k, String::from_utf8(v.clone()).unwrap()),
                    None => naive.remove(&k),
                };
            }
            let mut merged = Vec::new();
            let mut emit = |k: &[u8], v: &[u8]| {
                merged.push((
                    String::from_utf8(k.to_vec()).unwrap(),
                    String::from_utf8(v.to_vec()).unwrap(),
                ));
                Ok(())
            };
            let mut m = Merge::new(o.family("s"), from.as_bytes(), to.map(str::as_bytes));
            for (k, v) in stored
                .iter()
                .filter(|(k, _)| k.as_str() >= from && to.is_none_or(|t| k.as_str() < t))
            {
                m.stored(k.as_bytes(), v.as_bytes(), &mut emit).unwrap();
            }
            m.finish(&mut emit).unwrap();
            assert_eq!(
                merged,
                naive.into_iter().collect::<Vec<_>>(),
                "{from}..{to:?}"
            );
        }
    }
}
