//! Storing and publishing a snapshot: [`Upload`] stores one subtask's keyed-state files (shared
//! files of earlier checkpoints referred to, not stored again), and [`Publish`] lays every
//! subtask's operator state out in merged files ([`merge_operator_states`]), writes them, then
//! writes the metadata (the moment the snapshot becomes visible). The coordinator runs both
//! off its loop, as background work, and has the runtime commit once a snapshot is published.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use weir_state::snapshot::{KeyedSnapshot, SnapshotFormat};

use crate::catalog::{JobCheckpoints, join};
use crate::error::StorageError;
use crate::fence::Fenced;
use crate::metadata::{
    CheckpointMetadata, FileRef, KeyedFormat, KeyedHandle, NodeState, SnapshotKind, StateInfo,
    StateRange, StoredSubtask, VERSION, checksum, now_ms,
};
use crate::protocol::{Completed, NodeInfo};

/// Stores one keyed snapshot's files.
pub(crate) struct Upload {
    pub(crate) storage: Arc<dyn crate::storage::CheckpointStorage>,
    /// The snapshot's directory key.
    pub(crate) dir: String,
    /// The subtask's directory name in it (`<node>-<subtask>`).
    pub(crate) own: String,
    /// For checkpoints: where shared files go (relative to the job directory) and the shared
    /// files already stored, by name.
    pub(crate) shared: Option<(String, HashMap<String, FileRef>)>,
}

impl Upload {
    pub(crate) async fn run(self, snapshot: KeyedSnapshot) -> Result<KeyedHandle, StorageError> {
        let result = self.store(&snapshot).await;
        let _ = tokio::fs::remove_dir_all(&snapshot.dir).await;
        result
    }

    async fn store(&self, snapshot: &KeyedSnapshot) -> Result<KeyedHandle, StorageError> {
        let mut files = Vec::with_capacity(snapshot.files.len());
        for f in &snapshot.files {
            let local: PathBuf = snapshot.dir.join(&f.name);
            match (&self.shared, f.shared) {
                (Some((shared_dir, stored)), true) => {
                    if let Some(r) = stored.get(&f.name).filter(|r| r.size == f.size) {
                        files.push(r.clone());
                        continue;
                    }
                    // `dir` is `<job>/<kind>-<id>`: shared files sit beside it.
                    let path = format!("../{shared_dir}/{}", f.name);
                    let placed = self
                        .storage
                        .put_file(&join(&self.dir, &path), local)
                        .await?;
                    files.push(FileRef::new(path, placed));
                }
                _ => {
                    let path = format!("{}/{}", self.own, f.name);
                    let placed = self
                        .storage
                        .put_file(&join(&self.dir, &path), local)
                        .await?;
                    files.push(FileRef::new(path, placed));
                }
            }
        }
        Ok(KeyedHandle {
            format: match snapshot.format {
                SnapshotFormat::Logical => KeyedFormat::Logical,
                SnapshotFormat::RocksNative => KeyedFormat::RocksNative,
            },
            key_groups: [snapshot.range.start, snapshot.range.end],
            files,
            states: snapshot
                .states
                .iter()
                .map(|s| StateInfo {
                    name: s.name.clone(),
                    ttl_ms: s.ttl_ms,
                })
                .collect(),
        })
    }
}

/// Writes a snapshot's merged operator-state files and its metadata.
pub(crate) struct Publish {
    pub(crate) catalog: JobCheckpoints,
    pub(crate) job: String,
    pub(crate) key_groups: u32,
    pub(crate) nodes: Vec<NodeInfo>,
    pub(crate) id: u64,
    pub(crate) kind: SnapshotKind,
    pub(crate) triggered_at: i64,
    pub(crate) subtasks: HashMap<(usize, u32), StoredSubtask>,
    pub(crate) operator_states: HashMap<(usize, u32), Vec<u8>>,
    /// In a fleet, the lease the snapshot is published through ([`crate::fence`]).
    pub(crate) fence: Option<Arc<dyn crate::fence::Fence>>,
}

/// The merged operator-state files' names: `operator-state-0`, `operator-state-1`, ...
pub const OPERATOR_STATE: &str = "operator-state";

/// Size at which a merged operator-state file is closed and the next one begun. Operator
/// state is small (positions, assignments, pending transactions), so usually one file holds
/// every subtask's; the cap only bounds how much one file (and one write) holds when it is not.
pub const MERGED_FILE_TARGET: usize = 64 << 20;

/// (node index, subtask): whose state.
pub type SubtaskKey = (usize, u32);

/// Lays `states` (in key order) out in merged files of about `target` bytes each: the files'
/// contents and each state's range. A state larger than `target` gets a file of its own;
/// one state is never split across files.
pub fn merge_operator_states(
    states: &[((usize, u32), &[u8])],
    target: usize,
) -> (Vec<Vec<u8>>, Vec<(SubtaskKey, StateRange)>) {
    let mut files: Vec<Vec<u8>> = Vec::new();
    let mut ranges = Vec::with_capacity(states.len());
    for (key, bytes) in states {
        let full = files
            .last()
            .is_none_or(|f| !f.is_empty() && f.len() + bytes.len() > target);
        if full {
            files.push(Vec::new());
        }
        let file = files.len() - 1;
        let merged = &mut files[file];
        ranges.push((
            *key,
            StateRange {
                file: file as u32,
                offset: merged.len() as u64,
                length: bytes.len() as u64,
                xxh3: checksum(bytes),
            },
        ));
        merged.extend_from_slice(bytes);
    }
    (files, ranges)
}

impl Publish {
    pub(crate) async fn run(self) -> Result<Arc<Completed>, Unpublished> {
        let (fence, catalog, id) = (self.fence.clone(), self.catalog.clone(), self.id);
        let (dir, completed) = self.write().await.map_err(Unpublished::Failed)?;
        if let Some(fence) = &fence
            && let Err(fenced) = fence.publish(id, completed.location.clone()).await
        {
            // Never restored (restores go by what the fence recorded): its metadata goes, so
            // that nothing listing storage mistakes it for a snapshot either.
            let _ = catalog
                .storage()
                .delete(&join(&dir, crate::metadata::METADATA))
                .await;
            return Err(Unpublished::Fenced(fenced));
        }
        Ok(completed)
    }

    /// Writes the snapshot's operator state and metadata: its folder, and the snapshot it
    /// is once the fence (if any) records it.
    async fn write(mut self) -> Result<(String, Arc<Completed>), String> {
        let dir = self.catalog.dir_key(self.kind, self.id);
        // Few files for every subtask's operator state, in (node, subtask) order, so a
        // restore reads each front to back in one request.
        let mut keys: Vec<(usize, u32)> = self.operator_states.keys().copied().collect();
        keys.sort_unstable();
        let states: Vec<((usize, u32), &[u8])> = keys
            .iter()
            .map(|k| (*k, self.operator_states[k].as_slice()))
            .collect();
        let (files, ranges) = merge_operator_states(&states, MERGED_FILE_TARGET);
        for (key, range) in ranges {
            self.subtasks
                .entry(key)
                .or_insert(StoredSubtask {
                    subtask: key.1,
                    operator: None,
                    keyed: None,
                })
                .operator = Some(range);
        }
        // Written one after the other: each is one request, and the metadata comes after all.
        let mut operator_state = Vec::with_capacity(files.len());
        for (i, merged) in files.into_iter().enumerate() {
            let name = format!("{OPERATOR_STATE}-{i}");
            let placed = self
                .catalog
                .storage()
                .put(&join(&dir, &name), merged)
                .await
                .map_err(|e| e.to_string())?;
            operator_state.push(FileRef::new(name, placed));
        }
        let mut nodes: Vec<NodeState> = self
            .nodes
            .iter()
            .map(|n| NodeState {
                name: n.name.clone(),
                kind: n.kind.clone(),
                parallelism: n.parallelism,
                subtasks: Vec::new(),
            })
            .collect();
        let mut states: Vec<((usize, u32), StoredSubtask)> = self.subtasks.into_iter().collect();
        states.sort_by_key(|(k, _)| *k);
        for ((node, _), state) in states {
            if let Some(n) = nodes.get_mut(node) {
                n.subtasks.push(state);
            }
        }
        let metadata = CheckpointMetadata {
            version: VERSION,
            job: self.job,
            id: self.id,
            kind: self.kind,
            triggered_at: self.triggered_at,
            completed_at: now_ms(),
            key_groups: self.key_groups,
            operator_state,
            nodes,
        };
        self.catalog
            .publish(&metadata)
            .await
            .map_err(|e| e.to_string())?;
        let location = self.catalog.storage().location(&dir);
        Ok((
            dir,
            Arc::new(Completed {
                location,
                metadata,
                operator_states: self.operator_states,
            }),
        ))
    }
}

/// Why a snapshot was not published.
#[derive(Debug)]
pub(crate) enum Unpublished {
    /// The fence refused it: the lease is another copy's, or the catalog cannot say.
    Fenced(Fenced),
    /// Writing its state or metadata failed.
    Failed(String),
}
