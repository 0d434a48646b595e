//! What every [`CheckpointStorage`] must do, as checks each implementation's tests run (local
//! files, an in-memory object store, a real S3-compatible server in the end-to-end tests), and
//! hand-made snapshots for tests and `weir bench restore`.
//!
//! The checks return what differs instead of panicking, so they can live outside `cfg(test)`,
//! behind the `testing` feature, and be shared by the crate's tests and the end-to-end tests.

use std::sync::Arc;

use crate::catalog::{JobCheckpoints, parse_dir};
use crate::error::StorageError;
use crate::metadata::{
    CheckpointMetadata, FileRef, KeyedFormat, KeyedHandle, NodeState, SnapshotKind, StateRange,
    StoredSubtask, VERSION,
};
use crate::storage::{CheckpointStorage, Placed, delete_prefix};

/// Fails with `what` unless `actual == expected`.
fn same<T: PartialEq + std::fmt::Debug>(what: &str, actual: T, expected: T) -> Result<(), String> {
    if actual == expected {
        Ok(())
    } else {
        Err(format!("{what}: {actual:?}, expected {expected:?}"))
    }
}

fn failed(what: &str) -> impl Fn(StorageError) -> String + '_ {
    move |e| format!("{what}: {e}")
}

/// Puts, whole and ranged reads, listing by key prefix (not by path segment), deletes, the
/// errors of missing objects and of ranges past an object's end, and reads refused for
/// objects larger than asked or of another length than recorded, under `job/`.
pub async fn objects(s: &dyn CheckpointStorage) -> Result<(), String> {
    let placed = s
        .put("job/chk-1/a", b"hello world".to_vec())
        .await
        .map_err(failed("put"))?;
    same("size", placed.size, 11)?;
    same(
        "get",
        s.get("job/chk-1/a", 11).await.map_err(failed("get"))?,
        b"hello world".to_vec(),
    )?;
    match s.get("job/chk-1/a", 10).await {
        Err(e) if e.source.kind() == std::io::ErrorKind::FileTooLarge && e.is_unreadable() => {}
        other => {
            return Err(format!(
                "get beyond its most: {other:?}, expected FileTooLarge"
            ));
        }
    }
    let scratch = std::env::temp_dir().join(format!(
        "weir-fixture-{}-{}",
        std::process::id(),
        crate::catalog::safe_name(&s.location("job"))
    ));
    for (recorded, immutable) in [(10, false), (12, false), (10, true), (12, true)] {
        let local = scratch.join(format!("{recorded}-{immutable}"));
        let got = s
            .get_to_file("job/chk-1/a", local.clone(), immutable, recorded)
            .await;
        let copied = std::fs::metadata(&local).map_or(0, |m| m.len());
        match got {
            Err(e)
                if e.source.kind() == std::io::ErrorKind::InvalidData
                    && e.to_string()
                        .contains(&format!("metadata records {recorded}")) => {}
            other => {
                return Err(format!(
                    "get_to_file of 11 bytes recorded as {recorded}: {other:?}, expected a refusal"
                ));
            }
        }
        // Refused before copying, or stopped at the recorded size and removed.
        same("bytes copied of a refused file", copied, 0)?;
    }
    let local = scratch.join("whole");
    let placed = s
        .get_to_file("job/chk-1/a", local.clone(), false, 11)
        .await
        .map_err(failed("get_to_file"))?;
    let hello = Placed {
        size: 11,
        xxh3: xxhash_rust::xxh3::xxh3_64(b"hello world"),
    };
    same("get_to_file", placed, hello)?;
    let _ = std::fs::remove_dir_all(&scratch);
    let world = s
        .get_range("job/chk-1/a", 6..11)
        .await
        .map_err(failed("get_range"))?;
    same("get_range", world, b"world".to_vec())?;
    s.put("job/chk-2/b", vec![1, 2, 3])
        .await
        .map_err(failed("put"))?;
    s.put("job/chk-10/c", vec![]).await.map_err(failed("put"))?;
    let keys =
        |v: Vec<crate::storage::ObjectInfo>| v.into_iter().map(|o| o.key).collect::<Vec<_>>();
    same(
        "list job/chk-1",
        keys(s.list("job/chk-1").await.map_err(failed("list"))?),
        vec!["job/chk-1/a".to_string(), "job/chk-10/c".to_string()],
    )?;
    same(
        "list job/",
        s.list("job/").await.map_err(failed("list"))?.len(),
        3,
    )?;
    let past_end = s.get_range("job/chk-2/b", 0..10).await;
    match past_end {
        Err(e) if e.source.kind() == std::io::ErrorKind::UnexpectedEof => {}
        other => {
            return Err(format!(
                "a range past the end: {other:?}, expected UnexpectedEof"
            ));
        }
    }
    same(
        "delete_prefix",
        delete_prefix(s, "job/chk-1/")
            .await
            .map_err(failed("delete_prefix"))?,
        1,
    )?;
    match s.get("job/chk-1/a", 11).await {
        Err(e) if e.is_not_found() => {}
        other => return Err(format!("a deleted object: {other:?}, expected not found")),
    }
    s.delete("job/never")
        .await
        .map_err(failed("deleting what is not there"))?;
    delete_prefix(s, "job/")
        .await
        .map_err(failed("delete_prefix"))?;
    Ok(())
}

/// Retention in job `j`: the newest checkpoints stay with the shared files they use; older
/// ones, abandoned ones (files, no metadata) and unused shared files go; savepoints stay.
pub async fn retention(storage: Arc<dyn CheckpointStorage>) -> Result<(), String> {
    let metadata = |id: u64, kind: SnapshotKind, shared: &[&str]| {
        let mut m = metadata("j", id, kind);
        let files = shared
            .iter()
            .map(|f| FileRef::new(format!("../shared/L/n-0/{f}"), Placed { size: 1, xxh3: 0 }))
            .collect();
        m.nodes.push(keyed_node(KeyedFormat::RocksNative, files));
        m
    };
    let jobs = JobCheckpoints::new(storage.clone(), "j");
    for f in ["1.sst", "2.sst", "3.sst"] {
        storage
            .put(&format!("j/shared/L/n-0/{f}"), vec![1])
            .await
            .map_err(failed("put"))?;
    }
    for m in [
        metadata(1, SnapshotKind::Checkpoint, &["1.sst"]),
        metadata(2, SnapshotKind::Checkpoint, &["2.sst"]),
        metadata(3, SnapshotKind::Savepoint, &[]),
    ] {
        jobs.publish(&m).await.map_err(failed("publish"))?;
    }
    // An abandoned checkpoint: files but no metadata.
    storage
        .put("j/chk-0000000004/n-0/x", vec![1])
        .await
        .map_err(failed("put"))?;
    jobs.publish(&metadata(5, SnapshotKind::Checkpoint, &["2.sst", "3.sst"]))
        .await
        .map_err(failed("publish"))?;
    let r = jobs.retain(2, 5).await.map_err(failed("retain"))?;
    same("removed", r.removed, vec![1])?;
    same("removed incomplete", r.removed_incomplete, vec![4])?;
    same("shared files deleted (1.sst only)", r.shared_deleted, 1)?;
    let ids: Vec<Option<(SnapshotKind, u64)>> = jobs
        .complete_newest_first()
        .await
        .map_err(failed("listing"))?
        .iter()
        .map(|s| s.dir.rsplit('/').next().and_then(parse_dir))
        .collect();
    same(
        "left",
        ids,
        vec![
            Some((SnapshotKind::Checkpoint, 5)),
            Some((SnapshotKind::Savepoint, 3)),
            Some((SnapshotKind::Checkpoint, 2)),
        ],
    )?;
    let shared: Vec<String> = storage
        .list("j/shared/")
        .await
        .map_err(failed("listing"))?
        .into_iter()
        .map(|o| o.key)
        .collect();
    same(
        "shared files left",
        shared,
        vec![
            "j/shared/L/n-0/2.sst".to_string(),
            "j/shared/L/n-0/3.sst".to_string(),
        ],
    )?;
    same(
        "highest id",
        jobs.highest_id().await.map_err(failed("listing"))?,
        5,
    )
}

/// Node `n` (an `aggregate`) with one subtask, owning every key group, whose keyed state is
/// `files`.
pub fn keyed_node(format: KeyedFormat, files: Vec<FileRef>) -> NodeState {
    NodeState {
        name: "n".into(),
        kind: "aggregate".into(),
        parallelism: 1,
        subtasks: vec![StoredSubtask {
            subtask: 0,
            operator: None,
            keyed: Some(KeyedHandle {
                format,
                key_groups: [0, 128],
                files,
                states: vec![],
            }),
        }],
    }
}

/// Metadata of snapshot `id` of `job` with no state yet.
pub fn metadata(job: &str, id: u64, kind: SnapshotKind) -> CheckpointMetadata {
    CheckpointMetadata {
        version: VERSION,
        job: job.into(),
        id,
        kind,
        triggered_at: 0,
        completed_at: 0,
        key_groups: 128,
        operator_state: vec![],
        nodes: vec![],
    }
}

/// Publishes checkpoint `id` whose only node, `source`, has one subtask per range: `files`
/// are the merged operator-state files, `ranges[i]` subtask i's range in them.
pub async fn publish_operator_state(
    catalog: &JobCheckpoints,
    id: u64,
    files: Vec<Vec<u8>>,
    ranges: Vec<StateRange>,
) -> Result<(), StorageError> {
    let dir = catalog.dir_key(SnapshotKind::Checkpoint, id);
    let mut m = metadata(catalog.job_dir(), id, SnapshotKind::Checkpoint);
    for (i, bytes) in files.into_iter().enumerate() {
        let name = format!("{}-{i}", crate::publish::OPERATOR_STATE);
        let placed = catalog
            .storage()
            .put(&format!("{dir}/{name}"), bytes)
            .await?;
        m.operator_state.push(FileRef::new(name, placed));
    }
    m.nodes.push(NodeState {
        name: "source".into(),
        kind: "nexmark".into(),
        parallelism: ranges.len() as u32,
        subtasks: ranges
            .into_iter()
            .enumerate()
            .map(|(i, range)| StoredSubtask {
                subtask: i as u32,
                operator: Some(range),
                keyed: None,
            })
            .collect(),
    });
    catalog.publish(&m).await
}
