//! The coordinator against fake tasks: what is injected, published, committed and refused.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::mpsc;
use weir_state::key_groups::KeyGroupRange;
use weir_state::snapshot::{KeyedSnapshot, SnapshotFile, SnapshotFormat};

use crate::catalog::JobCheckpoints;
use crate::coordinator::*;
use crate::error::CheckpointError;
use crate::metadata::{METADATA, SnapshotKind};
use crate::protocol::*;
use crate::publish::merge_operator_states;
use crate::storage::{CheckpointStorage, LocalStorage};

/// Records what the coordinator asks of the runtime.
struct FakeJob {
    injected: mpsc::UnboundedSender<Barrier>,
    /// For each commit: the snapshot id and whether its metadata already existed.
    commits: Mutex<Vec<(u64, bool)>>,
    stops: AtomicUsize,
    storage: Arc<dyn CheckpointStorage>,
    catalog: JobCheckpoints,
    refuse: Mutex<Option<String>>,
    /// When set, each commit waits for a permit of it (tests of commits that take time).
    gate: Mutex<Option<Arc<tokio::sync::Semaphore>>>,
    /// Commits running now, and the most that ever ran at once.
    running: Arc<AtomicUsize>,
    most_running: Arc<AtomicUsize>,
    /// Snapshot ids whose commit fails.
    fail_commit: Mutex<Vec<u64>>,
}

impl JobHooks for FakeJob {
    fn inject(&self, barrier: Barrier) -> Result<(), String> {
        if let Some(why) = self.refuse.lock().unwrap().clone() {
            return Err(why);
        }
        let _ = self.injected.send(barrier);
        Ok(())
    }

    fn committed(&self, completed: Arc<Completed>) -> BoxFuture<'static, Result<(), String>> {
        let key = format!(
            "{}/{METADATA}",
            self.catalog
                .dir_key(completed.metadata.kind, completed.metadata.id)
        );
        let visible = std::path::Path::new(&self.storage.location(&key)).exists();
        let id = completed.metadata.id;
        self.commits.lock().unwrap().push((id, visible));
        let gate = self.gate.lock().unwrap().clone();
        let fail = self.fail_commit.lock().unwrap().contains(&id);
        let (running, most) = (self.running.clone(), self.most_running.clone());
        Box::pin(async move {
            let now = running.fetch_add(1, Ordering::SeqCst) + 1;
            most.fetch_max(now, Ordering::SeqCst);
            if let Some(gate) = gate {
                gate.acquire().await.unwrap().forget();
            }
            running.fetch_sub(1, Ordering::SeqCst);
            if fail {
                Err(format!("the broker refused snapshot {id}"))
            } else {
                Ok(())
            }
        })
    }

    fn stop_sources(&self) {
        self.stops.fetch_add(1, Ordering::SeqCst);
    }
}

struct Harness {
    _dir: tempfile::TempDir,
    root: std::path::PathBuf,
    job: Arc<FakeJob>,
    handle: CoordinatorHandle,
    injected: mpsc::UnboundedReceiver<Barrier>,
    task: tokio::task::JoinHandle<()>,
}

fn config() -> CoordinatorConfig {
    CoordinatorConfig {
        timeout: Duration::from_secs(5),
        min_pause: Duration::ZERO,
        max_concurrent: 1,
        retained: 2,
        lineage: "L1".into(),
        last_id: 0,
        reuse: HashMap::new(),
        fence: None,
    }
}

fn harness(config: CoordinatorConfig, tasks: usize) -> Harness {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("checkpoints");
    let storage: Arc<dyn CheckpointStorage> = Arc::new(LocalStorage::new(&root));
    let catalog = JobCheckpoints::new(storage.clone(), "job");
    let (tx, injected) = mpsc::unbounded_channel();
    let job = Arc::new(FakeJob {
        injected: tx,
        commits: Mutex::new(Vec::new()),
        stops: AtomicUsize::new(0),
        storage,
        catalog: catalog.clone(),
        refuse: Mutex::new(None),
        gate: Mutex::new(None),
        running: Arc::new(AtomicUsize::new(0)),
        most_running: Arc::new(AtomicUsize::new(0)),
        fail_commit: Mutex::new(Vec::new()),
    });
    let nodes = vec![
        NodeInfo {
            name: "src".into(),
            kind: "nexmark".into(),
            parallelism: 1,
        },
        NodeInfo {
            name: "agg".into(),
            kind: "aggregate".into(),
            parallelism: 1,
        },
    ];
    let (handle, future) = coordinator(
        config,
        catalog,
        "job".into(),
        128,
        nodes,
        (0..tasks).map(|t| format!("t{t}")).collect(),
        job.clone(),
    );
    let task = tokio::spawn(future);
    Harness {
        _dir: dir,
        root,
        job,
        handle,
        injected,
        task,
    }
}

/// A keyed snapshot of one "SST" in a scratch directory.
fn keyed(scratch: &std::path::Path, id: u64, sst: &str) -> KeyedSnapshot {
    let dir = scratch.join(format!("snap-{id}"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(sst), format!("sst {sst}")).unwrap();
    std::fs::write(dir.join("MANIFEST-1"), format!("manifest {id}")).unwrap();
    KeyedSnapshot {
        format: SnapshotFormat::RocksNative,
        key_groups: 128,
        range: KeyGroupRange { start: 0, end: 128 },
        dir,
        files: vec![
            SnapshotFile {
                name: sst.into(),
                size: format!("sst {sst}").len() as u64,
                shared: true,
            },
            SnapshotFile {
                name: "MANIFEST-1".into(),
                size: format!("manifest {id}").len() as u64,
                shared: false,
            },
        ],
        states: vec![],
        lineage: 0,
    }
}

async fn ack(h: &Harness, id: u64, task: usize, keyed_snapshot: Option<KeyedSnapshot>) {
    h.handle
        .reports()
        .send(TaskReport::Ack {
            checkpoint: id,
            task,
            subtasks: vec![SubtaskSnapshot {
                node: task,
                subtask: 0,
                operator: Some(format!("state of task {task} at {id}").into_bytes()),
                keyed: keyed_snapshot,
            }],
            // Task t aligned for 5·t + id ms: distinct per task and checkpoint.
            alignment: std::time::Duration::from_millis(5 * task as u64 + id),
        })
        .await
        .unwrap();
}

#[tokio::test]
async fn a_checkpoint_completes_when_every_task_acknowledged_and_commits_after_publishing() {
    let mut h = harness(config(), 2);
    let scratch = h.root.parent().unwrap().join("scratch");
    let pending = tokio::spawn({
        let handle = h.handle.clone();
        async move { handle.checkpoint().await }
    });
    let barrier = h.injected.recv().await.unwrap();
    assert_eq!(barrier.id, 1);
    ack(&h, 1, 0, None).await;
    tokio::task::yield_now().await;
    assert!(!pending.is_finished(), "one task has not acknowledged");
    let snap = keyed(&scratch, 1, "000007.sst");
    let snap_dir = snap.dir.clone();
    ack(&h, 1, 1, Some(snap)).await;
    let completed = pending.await.unwrap().unwrap();
    let m = &completed.metadata;
    assert_eq!((m.id, m.kind), (1, SnapshotKind::Checkpoint));
    assert!(
        !snap_dir.exists(),
        "the scratch directory is removed once stored"
    );
    let keyed = m.nodes[1].subtasks[0].keyed.as_ref().unwrap();
    assert!(
        keyed
            .files
            .iter()
            .any(|f| f.path == "../shared/L1/agg-0/000007.sst")
    );
    assert!(h.root.join("job/shared/L1/agg-0/000007.sst").exists());
    assert!(h.root.join("job/chk-0000000001/agg-0/MANIFEST-1").exists());
    assert_eq!(
        completed.operator_states[&(0, 0)],
        b"state of task 0 at 1".to_vec()
    );
    assert_eq!(
        *h.job.commits.lock().unwrap(),
        [(1, true)],
        "committed once, after the metadata was durable"
    );
    let record = h.handle.stats().snapshot().latest_completed.unwrap();
    assert_eq!(
        record.alignment_ms, 6,
        "the longest alignment of the two tasks' (1 and 6 ms)"
    );
    // A restore sees the same operator state through the merged file.
    let restored =
        crate::restore::Restored::open(h.job.catalog.snapshot(SnapshotKind::Checkpoint, 1))
            .await
            .unwrap();
    assert_eq!(
        restored.operator_states("agg"),
        [(0, &b"state of task 1 at 1"[..])]
    );
    h.task.abort();
}

#[tokio::test]
async fn later_checkpoints_refer_to_stored_shared_files_and_old_ones_are_removed() {
    let mut h = harness(config(), 1);
    let scratch = h.root.parent().unwrap().join("scratch");
    for id in 1..=3u64 {
        let pending = tokio::spawn({
            let handle = h.handle.clone();
            async move { handle.checkpoint().await }
        });
        assert_eq!(h.injected.recv().await.unwrap().id, id);
        // The same SST every time (unchanged state) plus one new one.
        let mut snap = keyed(&scratch, id, "000005.sst");
        let extra = format!("00001{id}.sst");
        std::fs::write(snap.dir.join(&extra), "new").unwrap();
        snap.files.push(SnapshotFile {
            name: extra,
            size: 3,
            shared: true,
        });
        ack(&h, id, 0, Some(snap)).await;
        let done = pending.await.unwrap().unwrap();
        let files: Vec<&str> = done.metadata.nodes[0].subtasks[0]
            .keyed
            .as_ref()
            .unwrap()
            .files
            .iter()
            .map(|f| f.path.as_str())
            .collect();
        assert!(
            files.contains(&"../shared/L1/src-0/000005.sst"),
            "{files:?}"
        );
        // Let retention run before the next trigger.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let listed = h.job.catalog.list().await.unwrap();
    let ids: Vec<u64> = listed.iter().map(|l| l.id).collect();
    assert_eq!(ids, [2, 3], "two retained");
    assert!(
        !h.root.join("job/shared/L1/src-0/000011.sst").exists(),
        "only checkpoint 1 used it"
    );
    assert!(h.root.join("job/shared/L1/src-0/000005.sst").exists());
    h.task.abort();
}

#[tokio::test]
async fn a_savepoint_waits_for_the_checkpoint_in_flight_without_polling() {
    let mut h = harness(config(), 1);
    let checkpoint = tokio::spawn({
        let handle = h.handle.clone();
        async move { handle.checkpoint().await }
    });
    assert_eq!(h.injected.recv().await.unwrap().id, 1);
    let savepoint = tokio::spawn({
        let handle = h.handle.clone();
        async move { handle.savepoint(true).await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        h.injected.try_recv().is_err(),
        "no second barrier while one is in flight"
    );
    // A periodic checkpoint meanwhile is refused (the savepoint goes first).
    assert!(matches!(
        h.handle.checkpoint().await,
        Err(CheckpointError::Skipped(_))
    ));
    ack(&h, 1, 0, None).await;
    checkpoint.await.unwrap().unwrap();
    let barrier = h.injected.recv().await.unwrap();
    assert_eq!(
        (barrier.id, barrier.kind),
        (2, BarrierKind::Savepoint { stop: true })
    );
    ack(&h, 2, 0, None).await;
    let done = savepoint.await.unwrap().unwrap();
    assert_eq!(done.metadata.kind, SnapshotKind::Savepoint);
    assert!(h.root.join("job/sp-0000000002/_metadata").exists());
    assert_eq!(
        h.job.stops.load(Ordering::SeqCst),
        1,
        "stop-with-savepoint ends the sources"
    );
    assert!(matches!(
        h.handle.checkpoint().await,
        Err(CheckpointError::Skipped(_))
    ));
    h.task.abort();
}

#[tokio::test]
async fn a_stop_with_savepoint_ends_the_sources_only_once_its_commit_is_done() {
    let mut h = harness(config(), 1);
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    *h.job.gate.lock().unwrap() = Some(gate.clone());
    let savepoint = tokio::spawn({
        let handle = h.handle.clone();
        async move { handle.savepoint(true).await }
    });
    assert_eq!(h.injected.recv().await.unwrap().id, 1);
    ack(&h, 1, 0, None).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    // Durable, but its output not yet visible: the sources go on (a source that ended now
    // would let the sink discard what the savepoint staged), and the caller waits.
    assert!(h.root.join("job/sp-0000000001/_metadata").exists());
    assert_eq!(h.job.stops.load(Ordering::SeqCst), 0);
    assert!(!savepoint.is_finished());
    gate.add_permits(1);
    savepoint.await.unwrap().unwrap();
    assert_eq!(h.job.stops.load(Ordering::SeqCst), 1);
    h.task.abort();
}

#[tokio::test]
async fn a_stop_with_savepoint_whose_commit_fails_does_not_stop_the_sources() {
    let mut h = harness(config(), 1);
    h.job.fail_commit.lock().unwrap().push(1);
    let savepoint = tokio::spawn({
        let handle = h.handle.clone();
        async move { handle.savepoint(true).await }
    });
    assert_eq!(h.injected.recv().await.unwrap().id, 1);
    ack(&h, 1, 0, None).await;
    let err = savepoint.await.unwrap().unwrap_err();
    assert!(
        matches!(err, CheckpointError::Commit { id: 1, .. }),
        "{err}"
    );
    assert_eq!(h.job.stops.load(Ordering::SeqCst), 0);
    h.task.abort();
}

#[tokio::test]
async fn a_checkpoint_not_acknowledged_in_time_is_abandoned() {
    let mut cfg = config();
    cfg.timeout = Duration::from_millis(100);
    let mut h = harness(cfg, 2);
    let scratch = h.root.parent().unwrap().join("scratch");
    let pending = tokio::spawn({
        let handle = h.handle.clone();
        async move { handle.checkpoint().await }
    });
    h.injected.recv().await.unwrap();
    ack(&h, 1, 0, None).await;
    let err = pending.await.unwrap().unwrap_err();
    assert!(
        matches!(
            err,
            CheckpointError::Timeout { id: 1, ref waiting, .. }
                if waiting == "the acknowledgement of 1 task (`t1`)"
        ),
        "{err}"
    );
    // A late acknowledgement is dropped with its scratch files.
    let late = keyed(&scratch, 1, "000001.sst");
    let late_dir = late.dir.clone();
    ack(&h, 1, 1, Some(late)).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!late_dir.exists());
    assert!(!h.root.join("job/chk-0000000001/_metadata").exists());
    let stats = h.handle.stats().snapshot();
    assert_eq!((stats.completed, stats.failed), (0, 1));
    h.task.abort();
}

#[tokio::test]
async fn min_pause_and_finished_tasks_refuse_triggers() {
    let mut cfg = config();
    cfg.min_pause = Duration::from_secs(60);
    let mut h = harness(cfg, 1);
    let pending = tokio::spawn({
        let handle = h.handle.clone();
        async move { handle.checkpoint().await }
    });
    h.injected.recv().await.unwrap();
    ack(&h, 1, 0, None).await;
    pending.await.unwrap().unwrap();
    let err = h.handle.checkpoint().await.unwrap_err();
    assert!(err.to_string().contains("minimum pause"), "{err}");
    // Savepoints are not held by the pause; a finished task ends checkpointing for good.
    let savepoint = tokio::spawn({
        let handle = h.handle.clone();
        async move { handle.savepoint(false).await }
    });
    assert_eq!(h.injected.recv().await.unwrap().id, 2);
    h.handle
        .reports()
        .send(TaskReport::Finished { task: 0 })
        .await
        .unwrap();
    let err = savepoint.await.unwrap().unwrap_err();
    assert!(err.to_string().contains("finished"), "{err}");
    assert!(matches!(
        h.handle.savepoint(false).await,
        Err(CheckpointError::Skipped(_))
    ));
    // A job whose sources refuse barriers cannot start one either.
    *h.job.refuse.lock().unwrap() = Some("a source has finished".into());
    h.task.abort();
}

#[tokio::test]
async fn the_final_snapshot_holds_the_last_transactions() {
    let h = harness(config(), 1);
    let done = h
        .handle
        .finish(vec![SubtaskSnapshot {
            node: 1,
            subtask: 0,
            operator: Some(b"tail".to_vec()),
            keyed: None,
        }])
        .await
        .unwrap();
    assert_eq!(done.metadata.kind, SnapshotKind::Final);
    assert_eq!(*h.job.commits.lock().unwrap(), [(1, true)]);
    let newest = h.job.catalog.complete_newest_first().await.unwrap();
    assert!(newest[0].dir.ends_with("final-0000000001"));
    h.task.abort();
}

#[test]
fn operator_states_are_merged_into_few_files_of_about_the_target_size() {
    let states: Vec<Vec<u8>> = (0..10u8).map(|i| vec![i; 30 + i as usize]).collect();
    let keyed: Vec<((usize, u32), &[u8])> = states
        .iter()
        .enumerate()
        .map(|(i, s)| ((i / 4, (i % 4) as u32), s.as_slice()))
        .collect();
    // Everything fits one file: the states lie one after the other, in key order.
    let (files, ranges) = merge_operator_states(&keyed, 1 << 20);
    assert_eq!(files.len(), 1);
    assert_eq!(files[0], states.concat());
    let mut at = 0;
    for (((key, range), (expected_key, _)), state) in ranges.iter().zip(&keyed).zip(&states) {
        assert_eq!(key, expected_key);
        assert_eq!(
            (range.file, range.offset, range.length),
            (0, at, state.len() as u64)
        );
        assert_eq!(range.xxh3, crate::metadata::checksum(state));
        at += state.len() as u64;
    }
    // A cap of 100 bytes: a new file when the next state would cross it, never a state split.
    let (files, ranges) = merge_operator_states(&keyed, 100);
    let sizes: Vec<usize> = files.iter().map(Vec::len).collect();
    assert_eq!(sizes, [93, 67, 71, 75, 39]);
    for ((_, range), state) in ranges.iter().zip(&states) {
        let file = &files[range.file as usize];
        let bytes = &file[range.offset as usize..(range.offset + range.length) as usize];
        assert_eq!(bytes, &state[..]);
    }
    // A state larger than the cap gets a file of its own.
    let big = vec![7u8; 500];
    let (files, _) = merge_operator_states(&[((0, 0), &[1u8; 10][..]), ((0, 1), &big[..])], 100);
    assert_eq!(files.iter().map(Vec::len).collect::<Vec<_>>(), [10, 500]);
    assert!(merge_operator_states(&[], 100).0.is_empty());
}

/// A lease in a catalog, modelled plainly: an owner epoch, an id counter, the latest
/// published snapshot. `holder` is the epoch the coordinator under test holds.
#[derive(Debug)]
struct FakeLease {
    epoch: Mutex<u64>,
    holder: u64,
    next_id: Mutex<u64>,
    latest: Mutex<Option<(u64, String)>>,
    reserved: Mutex<Vec<(u64, u64)>>,
    /// The catalog does not answer (a reservation fails with `Fenced::Unknown`).
    unreachable: Mutex<bool>,
}

impl crate::fence::Fence for Arc<FakeLease> {
    fn reserve(&self, after: u64, count: u64) -> BoxFuture<'static, Result<u64, crate::Fenced>> {
        let lease = self.clone();
        Box::pin(async move {
            if *lease.unreachable.lock().unwrap() {
                return Err(crate::Fenced::unknown(
                    "reserving snapshot ids",
                    std::io::Error::from(std::io::ErrorKind::ConnectionRefused),
                ));
            }
            if *lease.epoch.lock().unwrap() != lease.holder {
                return Err(crate::Fenced::Taken("taken".into()));
            }
            let mut next = lease.next_id.lock().unwrap();
            let first = (*next).max(after + 1);
            *next = first + count;
            lease.reserved.lock().unwrap().push((after, first));
            Ok(first)
        })
    }

    fn publish(&self, id: u64, location: String) -> BoxFuture<'static, Result<(), crate::Fenced>> {
        let lease = self.clone();
        Box::pin(async move {
            if *lease.epoch.lock().unwrap() != lease.holder {
                return Err(crate::Fenced::Taken("taken".into()));
            }
            *lease.latest.lock().unwrap() = Some((id, location));
            Ok(())
        })
    }

    fn latest(&self) -> BoxFuture<'static, Result<Option<String>, crate::Fenced>> {
        let latest = self.latest.lock().unwrap().clone().map(|(_, l)| l);
        Box::pin(async move { Ok(latest) })
    }
}

/// Triggers a checkpoint, again while one is refused for the moment (retention running after
/// the previous one): the barrier injected and the pending trigger.
async fn trigger_injected(
    h: &mut Harness,
) -> (
    Barrier,
    tokio::task::JoinHandle<Result<Arc<Completed>, CheckpointError>>,
) {
    loop {
        let mut pending = tokio::spawn({
            let handle = h.handle.clone();
            async move { handle.checkpoint().await }
        });
        tokio::select! {
            barrier = h.injected.recv() => return (barrier.unwrap(), pending),
            skipped = &mut pending => {
                assert!(matches!(skipped.unwrap(), Err(CheckpointError::Skipped(_))));
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    }
}

#[tokio::test]
async fn with_a_fence_ids_come_from_reserved_blocks_and_a_taken_lease_publishes_and_commits_nothing()
 {
    use crate::fence::ID_BLOCK;
    let lease = Arc::new(FakeLease {
        epoch: Mutex::new(1),
        holder: 1,
        next_id: Mutex::new(100 + ID_BLOCK),
        latest: Mutex::new(None),
        reserved: Mutex::new(Vec::new()),
        unreachable: Mutex::new(false),
    });
    let mut c = config();
    c.fence = Some((Arc::new(lease.clone()), 100..100 + ID_BLOCK));
    let mut h = harness(c, 1);
    // Ids run through the reserved block; past half of it the next block is asked for, above
    // the end of this one.
    let half = ID_BLOCK / 2 + 1;
    for expected in 100..100 + half {
        let (barrier, pending) = trigger_injected(&mut h).await;
        assert_eq!(barrier.id, expected);
        ack(&h, barrier.id, 0, None).await;
        let done = pending.await.unwrap().unwrap();
        assert_eq!(
            lease.latest.lock().unwrap().as_ref().map(|l| l.0),
            Some(done.metadata.id),
            "every completed snapshot is published through the fence"
        );
    }
    assert_eq!(
        *lease.reserved.lock().unwrap(),
        [(100 + ID_BLOCK - 1, 100 + ID_BLOCK)],
        "one more block, asked for once"
    );
    let commits_before = h.job.commits.lock().unwrap().len();
    assert_eq!(commits_before as u64, half);

    // Another holder takes the lease: the next snapshot is stored but refused at publish:
    // not committed, its metadata removed, the fence's latest unchanged.
    *lease.epoch.lock().unwrap() = 2;
    let (barrier, pending) = trigger_injected(&mut h).await;
    ack(&h, barrier.id, 0, None).await;
    let refused = pending.await.unwrap();
    assert!(
        matches!(&refused, Err(e) if e.to_string().contains("not published")),
        "{refused:?}"
    );
    assert_eq!(h.job.commits.lock().unwrap().len(), commits_before);
    let dir = h.root.join("job").join(format!("chk-{:010}", barrier.id));
    assert!(
        !dir.join(METADATA).exists(),
        "a refused snapshot leaves no metadata"
    );
    assert_eq!(
        lease.latest.lock().unwrap().as_ref().map(|l| l.0),
        Some(barrier.id - 1)
    );
    h.task.abort();
}

/// Takes the next checkpoint of a one-task job: triggers it (again while a trigger is
/// skipped, as while old checkpoints are being removed) and acknowledges it.
async fn one_checkpoint(h: &mut Harness) -> Result<Arc<Completed>, CheckpointError> {
    loop {
        let mut pending = tokio::spawn({
            let handle = h.handle.clone();
            async move { handle.checkpoint().await }
        });
        tokio::select! {
            barrier = h.injected.recv() => {
                ack(h, barrier.unwrap().id, 0, None).await;
                return pending.await.unwrap();
            }
            skipped = &mut pending => {
                assert!(matches!(skipped.unwrap(), Err(CheckpointError::Skipped(_))));
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    }
}

/// Two commits of one sink at once could share (and exhaust) its flow-control budget and
/// apply a key's updates out of order: commits run one at a time, in id order, and one waiting
/// behind a running commit is replaced by the next snapshot's (whose sink state covers it).
#[tokio::test]
async fn commits_run_one_at_a_time_and_a_newer_snapshot_covers_a_waiting_one() {
    let mut cfg = config();
    cfg.max_concurrent = 4;
    let mut h = harness(cfg, 1);
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    *h.job.gate.lock().unwrap() = Some(gate.clone());
    // Each checkpoint is answered once durable, while its commit still runs (or waits).
    for id in 1..=3 {
        let done = one_checkpoint(&mut h).await.unwrap();
        assert_eq!(done.metadata.id, id);
    }
    assert_eq!(h.handle.stats().snapshot().completed, 3);
    assert_eq!(
        *h.job.commits.lock().unwrap(),
        [(1, true)],
        "2 and 3 wait while 1 commits"
    );
    gate.add_permits(1);
    // Commit 1 ends; 3 starts (2 was covered by it); nothing ran beside anything else.
    for _ in 0..100 {
        if h.job.commits.lock().unwrap().len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(*h.job.commits.lock().unwrap(), [(1, true), (3, true)]);
    // The final snapshot is answered only once its commit is done.
    let finish = tokio::spawn({
        let handle = h.handle.clone();
        async move { handle.finish(Vec::new()).await }
    });
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert!(!finish.is_finished(), "the final commit waits behind 3's");
    gate.add_permits(2);
    let done = finish.await.unwrap().unwrap();
    assert_eq!(done.metadata.kind, SnapshotKind::Final);
    assert_eq!(
        *h.job.commits.lock().unwrap(),
        [(1, true), (3, true), (4, true)]
    );
    assert_eq!(h.job.most_running.load(Ordering::SeqCst), 1);
    h.task.abort();
}

/// A commit that fails leaves its snapshot complete and counted (a restart restores it and
/// commits again), fails what waits for it, and ends checkpointing for the attempt.
#[tokio::test]
async fn a_failed_commit_keeps_its_snapshot_and_fails_the_final_one_waiting() {
    let mut h = harness(config(), 1);
    h.job.fail_commit.lock().unwrap().push(2);
    one_checkpoint(&mut h).await.unwrap();
    let finish = h.handle.finish(Vec::new()).await.unwrap_err();
    assert_eq!(
        finish,
        CheckpointError::Commit {
            id: 2,
            reason: "the broker refused snapshot 2".into()
        }
    );
    assert!(h.root.join("job/final-0000000002/_metadata").exists());
    assert_eq!(h.handle.stats().snapshot().completed, 2);
    let newest = h.job.catalog.complete_newest_first().await.unwrap();
    assert!(newest[0].dir.ends_with("final-0000000002"));
    h.task.abort();
}

/// A catalog that cannot say whose the lease is (it does not answer) is not a lease taken: the
/// coordinator uses the ids it holds, skips checkpoints while it has none, and goes on with a
/// new block once the catalog answers, where a taken lease stops it for good (above).
#[tokio::test]
async fn with_a_fence_a_catalog_that_does_not_answer_for_a_while_stops_nothing_for_good() {
    let lease = Arc::new(FakeLease {
        epoch: Mutex::new(1),
        holder: 1,
        next_id: Mutex::new(500),
        latest: Mutex::new(None),
        reserved: Mutex::new(Vec::new()),
        unreachable: Mutex::new(true),
    });
    let mut c = config();
    c.fence = Some((Arc::new(lease.clone()), 100..102));
    let mut h = harness(c, 1);
    for expected in [100, 101] {
        let (barrier, pending) = trigger_injected(&mut h).await;
        assert_eq!(barrier.id, expected);
        ack(&h, barrier.id, 0, None).await;
        pending.await.unwrap().unwrap();
    }
    // No ids left and none to be had: skipped, not closed.
    for _ in 0..3 {
        let skipped = h.handle.checkpoint().await;
        assert!(
            matches!(skipped, Err(CheckpointError::Skipped(_))),
            "{skipped:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // The catalog answers again: the next block is used.
    *lease.unreachable.lock().unwrap() = false;
    let (barrier, pending) =
        tokio::time::timeout(Duration::from_secs(10), trigger_injected(&mut h))
            .await
            .expect("checkpoints start again once the catalog answers");
    assert_eq!(
        barrier.id, 500,
        "the first id of the block reserved once it answered"
    );
    ack(&h, barrier.id, 0, None).await;
    pending.await.unwrap().unwrap();
    let stats = h.handle.stats().snapshot();
    assert_eq!(stats.completed, 3);
    h.task.abort();
}
