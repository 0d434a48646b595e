//! Reading a snapshot back: verified metadata, operator state, keyed-state files fetched to
//! local directories.
//!
//! Everything is verified before the job starts: the metadata's checksum, every operator
//! state's range checksum (the ranges are read with the seek-free [`reader`](crate::reader)),
//! and every keyed file's size and checksum as it is fetched. No file is read beyond the size
//! its metadata records, and a file of another size is refused before it is copied. A
//! snapshot that fails any check, or whose files cannot be read (not regular files, not
//! permitted), is reported with its location as [`RestoreError::is_unusable_snapshot`], so
//! the caller can fall back to an older one.

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
                .get_to_file(&key, dir.join(name), immutable, expected.size)
                .await
            {
                Ok(got) => got,
                Err(e) if e.is_not_found() => {
                    return Err(RestoreError::Corrupt {
                        location: self.snapshot.storage.location(&key),
                        reason: "the file is missing".into(),
                    });
                }
                Err(e) => return Err(RestoreError::reading(self.location(), e)),
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::catalog::JobCheckpoints;
    use crate::metadata::{METADATA, SnapshotKind};
    use crate::storage::LocalStorage;

    /// Publishes checkpoint `id` of job `j` whose node `n` has one subtask with one keyed
    /// file, `n-0/state`, holding `content`.
    async fn keyed_snapshot(catalog: &JobCheckpoints, id: u64, content: &[u8]) -> SnapshotRef {
        let snapshot = catalog.snapshot(SnapshotKind::Checkpoint, id);
        let placed = catalog
            .storage()
            .put(&snapshot.key("n-0/state"), content.to_vec())
            .await
            .unwrap();
        let mut m = crate::fixtures::metadata("j", id, SnapshotKind::Checkpoint);
        m.nodes.push(crate::fixtures::keyed_node(
            KeyedFormat::Logical,
            vec![FileRef::new("n-0/state".into(), placed)],
        ));
        catalog.publish(&m).await.unwrap();
        snapshot
    }

    /// Fails the test instead of hanging it when a read blocks or never ends.
    async fn promptly<T>(read: impl std::future::Future<Output = T>) -> T {
        tokio::time::timeout(std::time::Duration::from_secs(10), read)
            .await
            .expect("the restore returned instead of blocking or reading without end")
    }

    fn all_groups() -> [KeyGroupRange; 1] {
        [KeyGroupRange { start: 0, end: 128 }]
    }

    #[tokio::test]
    async fn metadata_that_is_not_a_regular_file_makes_the_snapshot_unusable_not_endless() {
        let dir = tempfile::tempdir().unwrap();
        let catalog = JobCheckpoints::new(Arc::new(LocalStorage::new(dir.path())), "j");
        type Damage = fn(&Path);
        let damages: [(&str, Damage, &str); 5] = [
            (
                "a directory",
                |p| std::fs::create_dir(p).unwrap(),
                "it is a directory",
            ),
            (
                "a link to /dev/zero",
                |p| std::os::unix::fs::symlink("/dev/zero", p).unwrap(),
                "it is a symbolic link",
            ),
            (
                "a dangling link",
                |p| std::os::unix::fs::symlink(p.with_file_name("gone"), p).unwrap(),
                "it is a symbolic link",
            ),
            (
                "a FIFO",
                |p| crate::storage::tests::mkfifo(p),
                "it is a FIFO",
            ),
            (
                "too large",
                // Sparse: as large as refused, without writing (or reading) a byte of it.
                |p| {
                    let f = std::fs::File::create(p).unwrap();
                    f.set_len(crate::metadata::MAX_METADATA_BYTES + 1).unwrap();
                },
                "it is larger than 67108864 bytes",
            ),
        ];
        for (id, (what, damage, reason)) in (1..).zip(damages) {
            let snapshot = keyed_snapshot(&catalog, id, b"state").await;
            let metadata = dir.path().join(&snapshot.dir).join(METADATA);
            std::fs::remove_file(&metadata).unwrap();
            damage(&metadata);
            let e = promptly(Restored::open(snapshot.clone()))
                .await
                .unwrap_err();
            assert!(
                matches!(e, RestoreError::Unreadable { .. }),
                "{what}: unreadable, not an outage: {e:?}"
            );
            assert!(e.is_unusable_snapshot(), "{what}: {e}");
            let text = e.to_string();
            assert!(
                text.starts_with(&format!(
                    "{} is not a usable checkpoint",
                    snapshot.location()
                )),
                "{what}: names the snapshot: {text}"
            );
            assert!(
                text.contains(&metadata.display().to_string()),
                "{what}: {text}"
            );
            assert!(text.contains(reason), "{what}: says why: {text}");
        }
        // Each still claims to be complete, so "the latest" sees (and reports) it.
        assert_eq!(catalog.complete_newest_first().await.unwrap().len(), 5);
    }

    #[tokio::test]
    async fn keyed_files_are_copied_only_when_they_have_the_recorded_length() {
        let dir = tempfile::tempdir().unwrap();
        let catalog = JobCheckpoints::new(Arc::new(LocalStorage::new(dir.path())), "j");
        let content = vec![7u8; 4096];
        let snapshot = keyed_snapshot(&catalog, 1, &content).await;
        let file = dir.path().join(&snapshot.dir).join("n-0/state");
        let local = dir.path().join("work");
        let restored = Restored::open(snapshot).await.unwrap();
        let sources = restored
            .fetch_keyed("n", &all_groups(), &local)
            .await
            .unwrap();
        let fetched = sources[0][0].dir.join("state");
        assert_eq!(std::fs::read(&fetched).unwrap(), content);

        type Damage = fn(&Path);
        let damages: [(&str, Damage, &str); 4] = [
            (
                "one byte longer",
                |p| {
                    let mut bytes = std::fs::read(p).unwrap();
                    bytes.push(0);
                    std::fs::write(p, bytes).unwrap();
                },
                "4097 bytes where the metadata records 4096",
            ),
            (
                "truncated",
                |p| std::fs::write(p, [7u8; 10]).unwrap(),
                "10 bytes where the metadata records 4096",
            ),
            (
                "a link to /dev/zero",
                |p| {
                    std::fs::remove_file(p).unwrap();
                    std::os::unix::fs::symlink("/dev/zero", p).unwrap();
                },
                "it is a symbolic link",
            ),
            (
                "a FIFO",
                |p| {
                    std::fs::remove_file(p).unwrap();
                    crate::storage::tests::mkfifo(p);
                },
                "it is a FIFO",
            ),
        ];
        for (what, damage, reason) in damages {
            let _ = std::fs::remove_file(&file);
            std::fs::write(&file, &content).unwrap();
            damage(&file);
            let e = promptly(restored.fetch_keyed("n", &all_groups(), &local))
                .await
                .unwrap_err();
            assert!(e.is_unusable_snapshot(), "{what}: {e:?}");
            let text = e.to_string();
            assert!(text.contains(&file.display().to_string()), "{what}: {text}");
            assert!(text.contains(reason), "{what}: {text}");
            assert!(
                std::fs::metadata(&fetched).is_err(),
                "{what}: nothing was copied"
            );
        }
    }
}
