//! Reading a snapshot back: verified metadata, operator state, keyed-state files fetched to
//! local directories.
//!
//! Everything is verified before the job starts: the metadata's checksum, every operator
//! state's range checksum (the ranges are read with the seek-free [`reader`](crate::reader)),
//! and every keyed file's size and checksum as it is fetched. A
//! snapshot that fails any check is reported with its location, so the caller can fall back to
//! an older one.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use weir_state::key_groups::KeyGroupRange;
use weir_state::snapshot::{RestoreSource, SnapshotFormat};

use crate::catalog::SnapshotRef;
use crate::error::RestoreError;
use crate::metadata::{CheckpointMetadata, FileRef, KeyedFormat, KeyedHandle};
use crate::reader::{self, ReaderConfig, RestoreStats, Wanted};

/// An opened, verified snapshot.
#[derive(Debug)]
pub struct Restored {
    pub snapshot: SnapshotRef,
    pub metadata: CheckpointMetadata,
    /// Each subtask's operator state, verified: (node index in the metadata, subtask) → bytes.
    operator: HashMap<(usize, u32), Vec<u8>>,
    /// How the operator state was read.
    pub stats: RestoreStats,
}

impl Restored {
    /// Reads and verifies the metadata and the operator state of `snapshot`, the latter with
    /// the seek-free [`reader`](crate::reader) (one request per merged file when the ranges
    /// are contiguous).
    pub async fn open(snapshot: SnapshotRef) -> Result<Self, RestoreError> {
        Self::open_with(snapshot, &ReaderConfig::default()).await
    }

    /// [`Restored::open`] with the reader's settings given.
    pub async fn open_with(
        snapshot: SnapshotRef,
        config: &ReaderConfig,
    ) -> Result<Self, RestoreError> {
        let metadata = snapshot.metadata().await?;
        let corrupt = |reason: String| RestoreError::Corrupt {
            location: snapshot.location(),
            reason,
        };
        // What to read: every subtask's range, each checked against its file's size.
        let mut keys = Vec::new();
        let mut wanted = Vec::new();
        let mut expected = Vec::new();
        for (n, node) in metadata.nodes.iter().enumerate() {
            for s in &node.subtasks {
                let Some(range) = &s.operator else {
                    continue;
                };
                let what = format!("operator state of `{}` subtask {}", node.name, s.subtask);
                let file = metadata
                    .operator_state
                    .get(range.file as usize)
                    .ok_or_else(|| {
                        corrupt(format!(
                            "{what} is in merged file {}, which the metadata does not list",
                            range.file
                        ))
                    })?;
                if range
                    .offset
                    .checked_add(range.length)
                    .is_none_or(|end| end > file.size)
                {
                    return Err(corrupt(format!("{what} lies outside `{}`", file.path)));
                }
                keys.push((n, s.subtask));
                wanted.push(Wanted {
                    key: snapshot.key(&file.path),
                    offset: range.offset,
                    length: range.length,
                });
                expected.push((what, range.xxh3.clone()));
            }
        }
        let (states, stats) = reader::read(snapshot.storage.as_ref(), &wanted, config).await?;
        // Every range must match its checksum.
        for ((bytes, (what, xxh3)), w) in states.iter().zip(&expected).zip(&wanted) {
            if crate::metadata::checksum(bytes) != *xxh3 {
                return Err(RestoreError::Corrupt {
                    location: snapshot.storage.location(&w.key),
                    reason: format!("{what}: checksum mismatch"),
                });
            }
        }
        tracing::info!(
            location = %snapshot.location(),
            ranges = stats.ranges,
            files = stats.files,
            seeks_performed = stats.seeks_performed,
            seeks_skipped = stats.seeks_skipped,
            requests = stats.requests,
            bytes_read = stats.bytes_read,
            elapsed_us = stats.elapsed_us,
            "operator state read"
        );
        Ok(Self {
            operator: keys.into_iter().zip(states).collect(),
            snapshot,
            metadata,
            stats,
        })
    }

    pub fn location(&self) -> String {
        self.snapshot.location()
    }

    fn corrupt(&self, reason: String) -> RestoreError {
        RestoreError::Corrupt {
            location: self.location(),
            reason,
        }
    }

    /// The operator state of every old subtask of `node`, by old subtask index.
    pub fn operator_states(&self, node: &str) -> Vec<(u32, &[u8])> {
        let Some(n) = self.metadata.nodes.iter().position(|n| n.name == node) else {
            return Vec::new();
        };
        self.metadata.nodes[n]
            .subtasks
            .iter()
            .filter_map(|s| {
                self.operator
                    .get(&(n, s.subtask))
                    .map(|b| (s.subtask, b.as_slice()))
            })
            .collect()
    }

    /// Fetches the keyed state `node`'s new subtasks need, one local directory per old
    /// subtask under `local`, each fetched once. Returns, per entry of `ranges` (the new
    /// subtasks' key groups), the sources to restore from.
    pub async fn fetch_keyed(
        &self,
        node: &str,
        ranges: &[KeyGroupRange],
        local: &Path,
    ) -> Result<Vec<Vec<RestoreSource>>, RestoreError> {
        let Some(n) = self.metadata.node(node) else {
            return Ok(vec![Vec::new(); ranges.len()]);
        };
        let handles: Vec<(u32, &KeyedHandle)> = n
            .subtasks
            .iter()
            .filter_map(|s| s.keyed.as_ref().map(|k| (s.subtask, k)))
            .collect();
        let mut fetched: HashMap<u32, PathBuf> = HashMap::new();
        let mut out = Vec::with_capacity(ranges.len());
        for range in ranges {
            let mut sources = Vec::new();
            for (old, handle) in &handles {
                let old_range = handle.range();
                if old_range.end <= range.start || range.end <= old_range.start {
                    continue;
                }
                let dir = match fetched.get(old) {
                    Some(dir) => dir.clone(),
                    None => {
                        let dir =
                            local.join(format!("{}-{old}", crate::catalog::safe_name(&n.name)));
                        self.fetch_files(&handle.files, &dir, handle.format).await?;
                        fetched.insert(*old, dir.clone());
                        dir
                    }
                };
                sources.push(RestoreSource {
                    format: match handle.format {
                        KeyedFormat::Logical => SnapshotFormat::Logical,
                        KeyedFormat::RocksNative => SnapshotFormat::RocksNative,
                    },
                    range: old_range,
                    dir,
                });
            }
            out.push(sources);
        }
        Ok(out)
    }

    async fn fetch_files(
        &self,
        files: &[FileRef],
        dir: &Path,
        format: KeyedFormat,
    ) -> Result<(), RestoreError> {
        if dir.exists() {
            std::fs::remove_dir_all(dir).map_err(|e| crate::error::local("clearing", dir, e))?;
        }
        for f in files {
            let name = f
                .path
                .rsplit('/')
                .next()
                .filter(|n| !n.is_empty() && *n != "..")
                .ok_or_else(|| self.corrupt(format!("bad file name `{}`", f.path)))?;
            let key = self.snapshot.key(&f.path);
            let expected = f
                .placed()
                .ok_or_else(|| self.corrupt(format!("bad checksum of `{}`", f.path)))?;
            // RocksDB never writes an SST again, so one may be linked rather than copied.
            let immutable = format == KeyedFormat::RocksNative && name.ends_with(".sst");
            let got = match self
                .snapshot
                .storage
                .get_to_file(&key, dir.join(name), immutable)
                .await
            {
                Ok(got) => got,
                Err(e) if e.is_not_found() => {
                    return Err(RestoreError::Corrupt {
                        location: self.snapshot.storage.location(&key),
                        reason: "the file is missing".into(),
                    });
                }
                Err(e) => return Err(e.into()),
            };
            if got != expected {
                return Err(RestoreError::Corrupt {
                    location: self.snapshot.storage.location(&key),
                    reason: if got.size != expected.size {
                        format!(
                            "{} bytes where {} were written (truncated or replaced)",
                            got.size, expected.size
                        )
                    } else {
                        "checksum mismatch: the content changed after it was written".into()
                    },
                });
            }
        }
        Ok(())
    }
}
