//! A job's checkpoints in storage: naming, listing, loading, retention.
//!
//! # Layout under the storage root
//! ```text
//! <job>/chk-0000000007/_metadata          complete once this exists (written last)
//! <job>/chk-0000000007/operator-state-0   merged non-keyed state of many subtasks (-1, -2...)
//! <job>/chk-0000000007/<node>-<i>/...     files of one subtask's keyed snapshot
//! <job>/shared/<lineage>/<node>-<i>/*.sst RocksDB files shared by incremental checkpoints
//! <job>/sp-0000000009/...                 a savepoint: self-contained, never shares files
//! <job>/final-0000000012/...              the last transactions of a bounded run
//! ```
//! Identifiers come from one sequence per job (checkpoints, savepoints and final snapshots
//! alike), continued across runs, so "the latest" is the one with the highest id.

use std::collections::HashSet;
use std::sync::Arc;

use crate::error::{RestoreError, StorageError};
use crate::metadata::{CheckpointMetadata, MAX_METADATA_BYTES, METADATA, SnapshotKind};
use crate::storage::{CheckpointStorage, delete_prefix};

/// A snapshot directory found in storage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Listed {
    pub kind: SnapshotKind,
    pub id: u64,
    /// Whether its metadata exists (it may still be corrupt).
    pub has_metadata: bool,
    /// Whether its directory cannot be looked into: not permitted, or something other than a
    /// directory is at its name. It may be complete, so "the latest" tries it and reports why
    /// it cannot be used rather than pass over it in silence; retention leaves it to a person.
    pub unreadable: bool,
}

impl Listed {
    /// Whether the snapshot may be complete: a candidate for "the latest".
    pub fn may_be_complete(&self) -> bool {
        self.has_metadata || self.unreadable
    }
}

/// Where one snapshot lives: a storage and the key of its directory.
#[derive(Clone, Debug)]
pub struct SnapshotRef {
    pub storage: Arc<dyn CheckpointStorage>,
    pub dir: String,
}

impl SnapshotRef {
    /// The key of `path`, relative to the snapshot's directory (`../` allowed).
    pub fn key(&self, path: &str) -> String {
        join(&self.dir, path)
    }

    /// The snapshot's id, read from its directory's name (`chk-0000000007`: 7).
    pub fn id(&self) -> Option<u64> {
        parse_dir(self.dir.rsplit('/').next()?).map(|(_, id)| id)
    }

    /// The snapshot's location, for messages.
    pub fn location(&self) -> String {
        self.storage.location(&self.dir)
    }

    /// Loads and verifies the metadata, reading at most [`MAX_METADATA_BYTES`] of it. Metadata
    /// that is not a regular file, cannot be read or is too large is
    /// [`RestoreError::Unreadable`]; damaged metadata is [`RestoreError::Corrupt`].
    pub async fn metadata(&self) -> Result<CheckpointMetadata, RestoreError> {
        let key = self.key(METADATA);
        let bytes = match self.storage.get(&key, MAX_METADATA_BYTES).await {
            Ok(bytes) => bytes,
            Err(e) if e.is_not_found() => {
                return Err(RestoreError::Corrupt {
                    location: self.location(),
                    reason: format!(
                        "it has no {METADATA} (the checkpoint never completed, or this is not a checkpoint directory)"
                    ),
                });
            }
            Err(e) => return Err(RestoreError::reading(self.location(), e)),
        };
        CheckpointMetadata::decode(&bytes).map_err(|reason| RestoreError::Corrupt {
            location: self.storage.location(&key),
            reason,
        })
    }
}

/// `dir` joined with a relative `path` whose leading `../` climb out of `dir`.
pub fn join(dir: &str, path: &str) -> String {
    let mut parts: Vec<&str> = dir.split('/').filter(|p| !p.is_empty()).collect();
    for p in path.split('/') {
        match p {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    parts.join("/")
}

/// The checkpoints of one job in one storage.
#[derive(Clone, Debug)]
pub struct JobCheckpoints {
    storage: Arc<dyn CheckpointStorage>,
    /// The job's directory key (its name, made safe as a path component).
    job: String,
}

/// A name safe as one path component.
pub fn safe_name(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

impl JobCheckpoints {
    pub fn new(storage: Arc<dyn CheckpointStorage>, job: &str) -> Self {
        Self {
            storage,
            job: safe_name(job),
        }
    }

    pub fn storage(&self) -> &Arc<dyn CheckpointStorage> {
        &self.storage
    }

    /// The job directory's key.
    pub fn job_dir(&self) -> &str {
        &self.job
    }

    pub fn dir_key(&self, kind: SnapshotKind, id: u64) -> String {
        format!("{}/{}-{id:010}", self.job, kind.prefix())
    }

    pub fn snapshot(&self, kind: SnapshotKind, id: u64) -> SnapshotRef {
        SnapshotRef {
            storage: self.storage.clone(),
            dir: self.dir_key(kind, id),
        }
    }

    /// Every snapshot directory of the job, by id.
    pub async fn list(&self) -> Result<Vec<Listed>, StorageError> {
        let prefix = format!("{}/", self.job);
        let mut found: std::collections::BTreeMap<(u64, u8), Listed> = Default::default();
        for object in self.storage.list(&prefix).await? {
            let rest = &object.key[prefix.len()..];
            let mut parts = rest.splitn(2, '/');
            let (Some(dir), file) = (parts.next(), parts.next()) else {
                continue;
            };
            let Some((kind, id)) = parse_dir(dir) else {
                continue;
            };
            let entry = found.entry((id, kind as u8)).or_insert(Listed {
                kind,
                id,
                has_metadata: false,
                unreadable: false,
            });
            // The snapshot's name itself as an object: a folder storage may not read, or a
            // file where its folder belongs.
            let Some(file) = file else {
                entry.unreadable = true;
                continue;
            };
            // Something under `_metadata/` means the metadata's name is taken by a directory
            // (object storage lists what is inside it): the snapshot claims to be complete and
            // its metadata cannot be read, which a restore must say rather than pass over.
            entry.has_metadata |= file == METADATA
                || file
                    .strip_prefix(METADATA)
                    .is_some_and(|rest| rest.starts_with('/'));
        }
        Ok(found.into_values().collect())
    }

    /// The highest id used so far (0 when none), complete or not.
    pub async fn highest_id(&self) -> Result<u64, StorageError> {
        Ok(self.list().await?.iter().map(|l| l.id).max().unwrap_or(0))
    }

    /// Snapshots with metadata, and those that cannot be looked into, newest first: the
    /// candidates for "latest". Final snapshots count: restoring one just finishes the commit
    /// of a completed run.
    pub async fn complete_newest_first(&self) -> Result<Vec<SnapshotRef>, StorageError> {
        let mut listed: Vec<Listed> = self
            .list()
            .await?
            .into_iter()
            .filter(Listed::may_be_complete)
            .collect();
        listed.sort_by_key(|l| std::cmp::Reverse(l.id));
        Ok(listed
            .into_iter()
            .map(|l| self.snapshot(l.kind, l.id))
            .collect())
    }

    /// Writes `metadata` last, making the snapshot complete.
    pub async fn publish(&self, metadata: &CheckpointMetadata) -> Result<(), StorageError> {
        let bytes = metadata.encode().map_err(|e| StorageError {
            op: "encoding",
            location: self
                .storage
                .location(&self.dir_key(metadata.kind, metadata.id)),
            source: std::io::Error::other(e),
        })?;
        let key = join(&self.dir_key(metadata.kind, metadata.id), METADATA);
        self.storage.put(&key, bytes).await.map(|_| ())
    }

    /// Removes a snapshot's own directory (not the shared files it refers to).
    pub async fn remove(&self, kind: SnapshotKind, id: u64) -> Result<(), StorageError> {
        let dir = self.dir_key(kind, id);
        // The metadata goes first: a half-deleted checkpoint must not look complete.
        self.storage.delete(&join(&dir, METADATA)).await?;
        delete_prefix(self.storage.as_ref(), &format!("{dir}/")).await?;
        Ok(())
    }

    /// Keeps the `retained` newest complete checkpoints and removes older ones, incomplete
    /// checkpoints older than `newest`, and shared files no kept snapshot refers to.
    /// Savepoints are the user's and are never removed, nor are snapshots that cannot be looked
    /// into (a person has to). Call only when no checkpoint is in flight: the files of one
    /// being written are not referred to by any metadata yet.
    pub async fn retain(&self, retained: usize, newest: u64) -> Result<Retention, StorageError> {
        let listed = self.list().await?;
        let mut complete: Vec<u64> = listed
            .iter()
            .filter(|l| l.kind == SnapshotKind::Checkpoint && l.has_metadata && !l.unreadable)
            .map(|l| l.id)
            .collect();
        complete.sort_unstable();
        let keep_from = complete.len().saturating_sub(retained.max(1));
        let mut result = Retention::default();
        for id in &complete[..keep_from] {
            self.remove(SnapshotKind::Checkpoint, *id).await?;
            result.removed.push(*id);
        }
        for l in &listed {
            if !l.may_be_complete() && l.id < newest {
                self.remove(l.kind, l.id).await?;
                result.removed_incomplete.push(l.id);
            }
        }
        // Shared files: keep those any remaining snapshot refers to.
        let mut referenced: HashSet<String> = HashSet::new();
        for l in self.list().await?.iter().filter(|l| l.may_be_complete()) {
            let snapshot = self.snapshot(l.kind, l.id);
            match snapshot.metadata().await {
                Ok(m) => referenced.extend(m.files().map(|f| snapshot.key(&f.path))),
                Err(e) => {
                    // A snapshot whose metadata cannot be read might still refer to shared
                    // files: keep everything rather than guess.
                    tracing::warn!(error = %e, "not collecting shared files this time");
                    return Ok(result);
                }
            }
        }
        let shared_prefix = format!("{}/shared/", self.job);
        for object in self.storage.list(&shared_prefix).await? {
            if !referenced.contains(&object.key) {
                self.storage.delete(&object.key).await?;
                result.shared_deleted += 1;
            }
        }
        Ok(result)
    }
}

/// What a retention pass removed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Retention {
    pub removed: Vec<u64>,
    pub removed_incomplete: Vec<u64>,
    pub shared_deleted: usize,
}

/// `chk-0000000007` → (checkpoint, 7).
pub fn parse_dir(name: &str) -> Option<(SnapshotKind, u64)> {
    let (prefix, id) = name.split_once('-')?;
    let kind = match prefix {
        "chk" => SnapshotKind::Checkpoint,
        "sp" => SnapshotKind::Savepoint,
        "final" => SnapshotKind::Final,
        _ => return None,
    };
    Some((kind, id.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::LocalStorage;

    #[test]
    fn relative_paths_climb_out_of_the_snapshot() {
        assert_eq!(join("j/chk-1", "../shared/a.sst"), "j/shared/a.sst");
        assert_eq!(join("j/chk-1", "n-0/keyed"), "j/chk-1/n-0/keyed");
        assert_eq!(
            parse_dir("chk-0000000012"),
            Some((SnapshotKind::Checkpoint, 12))
        );
        assert_eq!(parse_dir("shared"), None);
    }

    /// Running as root, the tests cannot take away a folder's permissions, which root ignores;
    /// a folder replaced by a file (`ENOTDIR`) or by a link to itself (`ELOOP`) cannot be
    /// looked into by root either, and local storage lists them as it lists a folder it may
    /// not read (the integration test `an_unreadable_newest_snapshot_is_passed_over` drops
    /// privileges to take the permissions away for real).
    #[tokio::test]
    async fn snapshots_that_cannot_be_looked_into_are_candidates_reported_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let catalog = JobCheckpoints::new(Arc::new(LocalStorage::new(dir.path())), "j");
        for id in 1..=3 {
            catalog
                .publish(&crate::fixtures::metadata(
                    "j",
                    id,
                    SnapshotKind::Checkpoint,
                ))
                .await
                .unwrap();
        }
        let folder = |id: u64| {
            dir.path()
                .join(catalog.dir_key(SnapshotKind::Checkpoint, id))
        };
        std::fs::remove_dir_all(folder(2)).unwrap();
        std::fs::write(folder(2), b"not a folder").unwrap();
        std::fs::remove_dir_all(folder(3)).unwrap();
        std::os::unix::fs::symlink(folder(3), folder(3)).unwrap();

        let candidates = catalog.complete_newest_first().await.unwrap();
        let ids: Vec<Option<u64>> = candidates.iter().map(SnapshotRef::id).collect();
        assert_eq!(ids, [Some(3), Some(2), Some(1)]);
        for (candidate, why) in candidates[..2]
            .iter()
            .zip(["symbolic links", "Not a directory"])
        {
            let e = candidate.metadata().await.unwrap_err();
            assert!(e.is_unusable_snapshot(), "{e:?}");
            let text = e.to_string();
            assert!(text.starts_with(&candidate.location()), "names it: {text}");
            assert!(text.contains(why), "says why: {text}");
        }
        candidates[2].metadata().await.unwrap();
        assert_eq!(catalog.highest_id().await.unwrap(), 3, "ids are not reused");

        // Retention leaves them for a person to look at.
        let retention = catalog.retain(1, 4).await.unwrap();
        assert!(retention.removed.is_empty(), "{retention:?}");
        assert!(retention.removed_incomplete.is_empty(), "{retention:?}");
        assert!(std::fs::symlink_metadata(folder(2)).unwrap().is_file());
        assert!(std::fs::symlink_metadata(folder(3)).unwrap().is_symlink());
    }

    #[tokio::test]
    async fn a_job_folder_that_cannot_be_listed_is_named_with_what_to_fix() {
        let dir = tempfile::tempdir().unwrap();
        let storage = Arc::new(LocalStorage::new(dir.path()));
        let catalog = JobCheckpoints::new(storage.clone(), "j");
        std::fs::write(dir.path().join("j"), b"a file where the folder belongs").unwrap();
        let e = catalog.complete_newest_first().await.unwrap_err();
        assert_eq!(e.source.kind(), std::io::ErrorKind::NotADirectory, "{e}");
        let text = e.to_string();
        assert!(text.contains(&storage.location("j/")), "names it: {text}");
        assert!(
            text.contains("move the file away"),
            "says what to do: {text}"
        );

        std::fs::remove_file(dir.path().join("j")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("j"), dir.path().join("j")).unwrap();
        let e = catalog.highest_id().await.unwrap_err();
        assert_eq!(e.source.raw_os_error(), Some(libc::ELOOP), "{e}");
        assert!(e.is_unreadable(), "{e}");
        assert!(e.to_string().contains(&storage.location("j/")), "{e}");
    }

    #[tokio::test]
    async fn retention_keeps_the_newest_and_what_they_share() {
        let dir = tempfile::tempdir().unwrap();
        crate::fixtures::retention(Arc::new(LocalStorage::new(dir.path())))
            .await
            .unwrap();
    }
}
