//! Reading a snapshot back: verified metadata, operator state, keyed-state files fetched to
//! local directories.
//!
//! Everything is verified before the job starts: the metadata's checksum, every operator
//! state's range checksum, and every keyed file's size and checksum as it is fetched. A
//! snapshot that fails any check is reported with its location, so the caller can fall back to
//! an older one.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use weir_state::key_groups::KeyGroupRange;
use weir_state::snapshot::{RestoreSource, SnapshotFormat};

use crate::catalog::SnapshotRef;
use crate::error::RestoreError;
use crate::metadata::{CheckpointMetadata, FileRef, KeyedFormat, KeyedHandle, NodeState};

/// An opened, verified snapshot.
#[derive(Debug)]
pub struct Restored {
    pub snapshot: SnapshotRef,
    pub metadata: CheckpointMetadata,
    /// The merged operator-state file.
    operator_file: Vec<u8>,
}

impl Restored {
    /// Reads and verifies the metadata and the operator state of `snapshot`.
    pub async fn open(snapshot: SnapshotRef) -> Result<Self, RestoreError> {
        let metadata = snapshot.metadata().await?;
        let operator_file = match &metadata.operator_state {
            Some(file) => read_verified(&snapshot, file).await?,
            None => Vec::new(),
        };
        let restored = Self {
            snapshot,
            metadata,
            operator_file,
        };
        // Every range must lie in the file and match its checksum.
        for node in &restored.metadata.nodes {
            for s in &node.subtasks {
                restored.operator_state_of(node, s.subtask)?;
            }
        }
        Ok(restored)
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

    fn operator_state_of(
        &self,
        node: &NodeState,
        subtask: u32,
    ) -> Result<Option<&[u8]>, RestoreError> {
        let Some(range) = node
            .subtasks
            .iter()
            .find(|s| s.subtask == subtask)
            .and_then(|s| s.operator.as_ref())
        else {
            return Ok(None);
        };
        let bytes = usize::try_from(range.offset)
            .ok()
            .zip(usize::try_from(range.offset + range.length).ok())
            .and_then(|(a, b)| self.operator_file.get(a..b))
            .ok_or_else(|| {
                self.corrupt(format!(
                    "operator state of `{}` subtask {subtask} lies outside the operator-state file",
                    node.name
                ))
            })?;
        let actual = crate::metadata::hex(xxhash_rust::xxh3::xxh3_64(bytes));
        if actual != range.xxh3 {
            return Err(self.corrupt(format!(
                "operator state of `{}` subtask {subtask}: checksum mismatch",
                node.name
            )));
        }
        Ok(Some(bytes))
    }

    /// The operator state of every old subtask of `node`, by old subtask index.
    pub fn operator_states(&self, node: &str) -> Vec<(u32, &[u8])> {
        let Some(n) = self.metadata.node(node) else {
            return Vec::new();
        };
        n.subtasks
            .iter()
            .filter_map(|s| {
                self.operator_state_of(n, s.subtask)
                    .ok()
                    .flatten()
                    .map(|b| (s.subtask, b))
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

async fn read_verified(snapshot: &SnapshotRef, file: &FileRef) -> Result<Vec<u8>, RestoreError> {
    let key = snapshot.key(&file.path);
    let bytes = match snapshot.storage.get(&key).await {
        Ok(b) => b,
        Err(e) if e.is_not_found() => {
            return Err(RestoreError::Corrupt {
                location: snapshot.storage.location(&key),
                reason: "the file is missing".into(),
            });
        }
        Err(e) => return Err(e.into()),
    };
    let expected = file.placed().ok_or_else(|| RestoreError::Corrupt {
        location: snapshot.storage.location(&key),
        reason: "bad checksum in the metadata".into(),
    })?;
    crate::storage::verify(&bytes, expected).map_err(|reason| RestoreError::Corrupt {
        location: snapshot.storage.location(&key),
        reason,
    })?;
    Ok(bytes)
}
