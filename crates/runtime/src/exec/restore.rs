//! Choosing the snapshot a run starts from and turning it into what each new subtask needs.
//!
//! `--from latest` takes the job's newest snapshot with metadata, and every restart after a
//! failure the newest one of its own run ([`RestoreFrom::Newest`]): what is complete on
//! storage decides, never a count kept in memory. One that fails verification (a truncated,
//! corrupt or missing file) or cannot be read (metadata that is a directory, a link or a FIFO,
//! a file it may not open) is skipped with a warning naming it and why, and the one before it
//! is tried. An explicitly named snapshot is used or refused, never silently replaced.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use weir_checkpoint::catalog::SnapshotRef;
use weir_checkpoint::metadata::{FileRef, KeyedFormat, SnapshotKind};
use weir_checkpoint::restore::Restored;
use weir_checkpoint::{JobCheckpoints, LocalStorage, RestoreError, RestoreStats};
use weir_state::key_groups::KeyGroupRange;

use crate::api::{SinkRestore, SubtaskRestore, SubtaskState};
use crate::plan::{Factory, Plan};

/// Where a run starts from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RestoreFrom {
    /// The job's newest usable snapshot; a fresh start if it has none.
    Latest,
    /// A checkpoint or savepoint directory (or its `_metadata` file).
    Path(PathBuf),
    /// The newest usable snapshot with an id above `above` (those a run took itself: ids
    /// continue above every earlier one), else `otherwise` (the snapshot the run began from;
    /// `None`: a fresh start). Where a restart after a failure goes.
    Newest {
        above: u64,
        otherwise: Option<Box<RestoreFrom>>,
    },
}

/// A snapshot made ready for a run.
pub struct Prepared {
    pub id: u64,
    pub kind: SnapshotKind,
    pub location: String,
    /// Per node index, per new subtask.
    pub subtasks: HashMap<usize, Vec<Arc<SubtaskRestore>>>,
    /// Per sink node index.
    pub sinks: HashMap<usize, SinkRestore>,
    /// Shared files the coordinator may refer to instead of storing again, per (node index,
    /// subtask), for subtasks restored one to one from a native RocksDB checkpoint.
    pub reuse: HashMap<(usize, u32), HashMap<String, FileRef>>,
    /// How the operator state was read (seeks, requests, bytes).
    pub stats: RestoreStats,
}

/// The snapshot directory `path` names (it may name the metadata file in it).
fn snapshot_dir(path: &Path) -> &Path {
    if path.file_name().is_some_and(|n| n == "_metadata") {
        path.parent().unwrap_or(path)
    } else {
        path
    }
}

/// An object-storage URL (`s3://...`), as opposed to a local path or `file://` URL.
fn remote(location: &str) -> bool {
    location.contains("://") && !location.starts_with("file://")
}

/// The snapshot `path` names: a snapshot directory or its metadata file, as a local path or
/// a URL (`s3://bucket/prefix/job/chk-0000000007`, reached with the `AWS_*` environment).
pub fn snapshot_at(path: &Path) -> Result<SnapshotRef, RestoreError> {
    let text = path.to_string_lossy();
    if remote(&text) {
        let url = text.trim_end_matches('/');
        let url = url.strip_suffix("/_metadata").unwrap_or(url);
        let not_a_snapshot = || RestoreError::Corrupt {
            location: text.to_string(),
            reason: "not a snapshot directory".into(),
        };
        let (root, name) = url.rsplit_once('/').ok_or_else(not_a_snapshot)?;
        let storage = weir_checkpoint::object::open(&weir_checkpoint::StorageConfig::url(root))?;
        return Ok(SnapshotRef {
            storage,
            dir: name.to_string(),
        });
    }
    let dir = snapshot_dir(path);
    let (root, name) =
        weir_checkpoint::storage::split_local(dir).ok_or_else(|| RestoreError::Corrupt {
            location: path.display().to_string(),
            reason: "not a snapshot directory".into(),
        })?;
    Ok(SnapshotRef {
        storage: Arc::new(LocalStorage::new(root)),
        dir: name,
    })
}

/// The snapshot `path` names, reached through the job's own storage when it lies there (so
/// the job's endpoint and credentials apply); and whether it is in the job's directory (only
/// then can it lend shared files to the next checkpoints).
fn resolve(catalog: &JobCheckpoints, path: &Path) -> Result<(SnapshotRef, bool), RestoreError> {
    let text = path.to_string_lossy();
    if remote(&text) {
        let root = catalog.storage().location("");
        let Some(key) = text.strip_prefix(root.as_str()) else {
            return Ok((snapshot_at(path)?, false));
        };
        let key = key.trim_matches('/');
        let dir = key.strip_suffix("/_metadata").unwrap_or(key).to_string();
        let in_job = dir.rsplit_once('/').map(|(parent, _)| parent) == Some(catalog.job_dir());
        let snapshot = SnapshotRef {
            storage: catalog.storage().clone(),
            dir,
        };
        return Ok((snapshot, in_job));
    }
    let job_dir = std::fs::canonicalize(catalog.storage().location(catalog.job_dir()));
    let parent = std::fs::canonicalize(snapshot_dir(path))
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf));
    let in_job = matches!((job_dir, parent), (Ok(a), Some(b)) if a == b);
    Ok((snapshot_at(path)?, in_job))
}

/// Picks and prepares the snapshot to start from: `None` for a fresh start.
pub async fn prepare(
    plan: &Plan,
    catalog: &JobCheckpoints,
    from: &RestoreFrom,
    work: &Path,
) -> Result<Option<Prepared>, RestoreError> {
    // `Newest` falls back on what it names, one level at a time (no recursion on nesting).
    let mut from = from;
    loop {
        match from {
            RestoreFrom::Newest { above, otherwise } => {
                if let Some(p) = prepare_newest(plan, catalog, *above, work).await? {
                    return Ok(Some(p));
                }
                match otherwise {
                    Some(next) => from = next,
                    None => return Ok(None),
                }
            }
            RestoreFrom::Latest => return prepare_latest(plan, catalog, work).await,
            RestoreFrom::Path(path) => {
                return prepare_path(plan, catalog, path, work).await.map(Some);
            }
        }
    }
}

/// The newest usable snapshot above id `above`, skipping unusable ones with a warning; `None`
/// if there is none.
async fn prepare_newest(
    plan: &Plan,
    catalog: &JobCheckpoints,
    above: u64,
    work: &Path,
) -> Result<Option<Prepared>, RestoreError> {
    let candidates = catalog.complete_newest_first().await?;
    let above = candidates
        .into_iter()
        .take_while(|c| c.id().is_some_and(|id| id > above));
    Ok(first_usable(plan, above, work).await?.ok())
}

/// The first of `candidates` (newest first) that can be used; each that cannot is skipped
/// with a warning naming it and why (shown by `weir run` on stderr, and in a server's log).
/// `Err(last)` when none can, with the last reason.
async fn first_usable(
    plan: &Plan,
    candidates: impl IntoIterator<Item = SnapshotRef>,
    work: &Path,
) -> Result<Result<Prepared, Option<RestoreError>>, RestoreError> {
    let mut last = None;
    for candidate in candidates {
        let location = candidate.location();
        match prepare_one(plan, candidate, work).await {
            Ok(p) => return Ok(Ok(p)),
            Err(e) if e.is_unusable_snapshot() => {
                tracing::warn!(
                    job = %plan.spec.name,
                    snapshot = %location,
                    reason = %e,
                    "skipping a snapshot that cannot be used; trying the one before it"
                );
                last = Some(e);
            }
            Err(e) => return Err(e),
        }
    }
    Ok(Err(last))
}

/// The snapshot `path` names, used or refused (never silently replaced).
async fn prepare_path(
    plan: &Plan,
    catalog: &JobCheckpoints,
    path: &Path,
    work: &Path,
) -> Result<Prepared, RestoreError> {
    let (snapshot, in_job) = resolve(catalog, path)?;
    let mut prepared = prepare_one(plan, snapshot, work).await?;
    // Shared files are referred to relative to the job's directory: only a snapshot in this
    // job's directory can lend them to the next checkpoints.
    if !in_job {
        prepared.reuse.clear();
    }
    Ok(prepared)
}

/// `--from latest`: the job's newest usable snapshot, `None` if it has no snapshot at all, an
/// error if it has some and none is usable.
async fn prepare_latest(
    plan: &Plan,
    catalog: &JobCheckpoints,
    work: &Path,
) -> Result<Option<Prepared>, RestoreError> {
    let candidates = catalog.complete_newest_first().await?;
    if candidates.is_empty() {
        tracing::info!(job = %plan.spec.name, "no snapshot to restore: starting fresh");
        return Ok(None);
    }
    let last = match first_usable(plan, candidates, work).await? {
        Ok(p) => return Ok(Some(p)),
        Err(last) => last,
    };
    Err(last.unwrap_or_else(|| RestoreError::NoneFound {
        job: plan.spec.name.clone(),
        location: catalog.storage().location(catalog.job_dir()),
    }))
}

/// Opens, verifies and fetches one snapshot for `plan`.
async fn prepare_one(
    plan: &Plan,
    snapshot: SnapshotRef,
    work: &Path,
) -> Result<Prepared, RestoreError> {
    let restored = Restored::open(snapshot).await?;
    let location = restored.location();
    let m = &restored.metadata;
    let incompatible = |reason: String| RestoreError::Incompatible {
        location: location.clone(),
        reason,
    };
    if m.key_groups != plan.spec.key_groups {
        return Err(incompatible(format!(
            "it was taken with {} key groups and the job has {}: key groups cannot change",
            m.key_groups, plan.spec.key_groups
        )));
    }
    let mut by_name = HashMap::new();
    for (i, node) in plan.nodes.iter().enumerate() {
        by_name.insert(node.name.as_str(), i);
    }
    for node in &m.nodes {
        let has_state = node
            .subtasks
            .iter()
            .any(|s| s.operator.is_some() || s.keyed.is_some());
        match by_name.get(node.name.as_str()) {
            Some(&i) if plan.nodes[i].kind != node.kind => {
                return Err(incompatible(format!(
                    "`{}` was a `{}` and is now a `{}`",
                    node.name, node.kind, plan.nodes[i].kind
                )));
            }
            None if has_state => {
                return Err(incompatible(format!(
                    "it holds state of `{}`, which the job no longer has",
                    node.name
                )));
            }
            _ => {}
        }
    }

    let mut subtasks = HashMap::new();
    let mut sinks = HashMap::new();
    let mut reuse = HashMap::new();
    for (i, node) in plan.nodes.iter().enumerate() {
        let Some(old) = m.node(&node.name) else {
            continue;
        };
        let states: Vec<SubtaskState> = restored
            .operator_states(&node.name)
            .into_iter()
            .map(|(_, bytes)| {
                SubtaskState::decode(bytes).map_err(|reason| RestoreError::Corrupt {
                    location: location.clone(),
                    reason: format!("`{}`: {reason}", node.name),
                })
            })
            .collect::<Result<_, _>>()?;
        if matches!(node.factory, Factory::Sink(_)) {
            sinks.insert(
                i,
                SinkRestore {
                    checkpoint: m.id,
                    transactions: states.iter().filter_map(|s| s.state.clone()).collect(),
                },
            );
        }
        let ranges: Vec<KeyGroupRange> = (0..node.parallelism)
            .map(|s| KeyGroupRange::of_subtask(s, plan.spec.key_groups, node.parallelism))
            .collect();
        let keyed = if old.subtasks.iter().any(|s| s.keyed.is_some()) {
            restored
                .fetch_keyed(&node.name, &ranges, &work.join(format!("{}", m.id)))
                .await?
        } else {
            vec![Vec::new(); ranges.len()]
        };
        for (s, range) in ranges.iter().enumerate() {
            let same = old.subtasks.iter().find(|o| {
                o.keyed
                    .as_ref()
                    .is_some_and(|k| k.format == KeyedFormat::RocksNative && k.range() == *range)
            });
            if let Some(k) = same.and_then(|o| o.keyed.as_ref()) {
                let shared = k
                    .files
                    .iter()
                    .filter(|f| f.is_shared())
                    .filter_map(|f| Some((f.path.rsplit('/').next()?.to_string(), f.clone())))
                    .collect();
                reuse.insert((i, s as u32), shared);
            }
        }
        let per_subtask = keyed
            .into_iter()
            .map(|keyed| {
                Arc::new(SubtaskRestore {
                    checkpoint: m.id,
                    keyed,
                    states: states.clone(),
                })
            })
            .collect();
        subtasks.insert(i, per_subtask);
    }
    tracing::info!(job = %plan.spec.name, snapshot = m.id, location = %location, "restoring");
    Ok(Prepared {
        id: m.id,
        kind: m.kind,
        location,
        subtasks,
        sinks,
        reuse,
        stats: restored.stats.clone(),
    })
}
