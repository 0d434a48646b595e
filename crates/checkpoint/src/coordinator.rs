//! The checkpoint coordinator of one job: triggers barriers, collects acknowledgements, stores
//! the snapshots and publishes the metadata.
//!
//! A checkpoint goes through these steps (Chandy–Lamport with aligned barriers, as in Apache
//! Flink):
//! 1. **Trigger**: the coordinator picks the next id and asks the runtime to inject a barrier at
//!    every source subtask ([`JobHooks::inject`]). Sources snapshot their position and send the
//!    barrier downstream in band, after everything they emitted before it.
//! 2. **Align and snapshot**: a task with several inputs waits until the barrier has arrived on
//!    each, then snapshots every operator of its chain (keyed state through the backend,
//!    operator state as bytes) and forwards the barrier; sinks move what they wrote into a
//!    pending transaction.
//! 3. **Acknowledge**: each task reports its snapshots ([`TaskReport::Ack`]). The coordinator
//!    stores their files (off the task threads) as they come in.
//! 4. **Complete**: with every task acknowledged and every file durable, the merged
//!    operator-state files and then the metadata are written, and only then is the checkpoint
//!    visible (and counted as completed). Old checkpoints are removed beyond the retained
//!    count.
//! 5. **Commit**: the runtime commits the sinks' transactions ([`JobHooks::committed`]).
//!    Commits run one at a time, in checkpoint order: two commits of one sink never run
//!    together (they would share its connections and flow-control budget, and could apply
//!    one key's updates out of order). A snapshot's sink state holds every transaction not yet
//!    known to be committed, so a commit waiting behind a running one is replaced by a newer
//!    snapshot's, which covers it. A commit that fails ends the attempt; the snapshot stands,
//!    and the restore commits it again.
//!
//! One coordinator runs per job as a task that owns all of this state; nothing is shared
//! under a lock. At most `max-concurrent` checkpoints are in flight; one not complete by its
//! deadline is abandoned. A savepoint requested while a checkpoint is in flight waits for it
//! as a queued request that the checkpoint's completion starts: no thread sleeps or polls.
//!
//! The vocabulary it shares with the runtime is in [`crate::protocol`], its counters and
//! history in [`crate::stats`], and storing and publishing a snapshot's files in
//! [`crate::publish`].

use std::collections::{HashMap, HashSet, VecDeque};
use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::FutureExt;
use futures::future::BoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};
use tokio::sync::{mpsc, oneshot};
use weir_state::snapshot::KeyedSnapshot;

use crate::catalog::JobCheckpoints;
use crate::error::{CheckpointError, StorageError};
use crate::fence::{Fence, Fenced, ID_BLOCK};
use crate::metadata::{FileRef, KeyedHandle, SnapshotKind, StoredSubtask, now_ms};
use crate::protocol::{
    Barrier, BarrierKind, Completed, JobHooks, NodeInfo, SubtaskSnapshot, TaskReport,
};
use crate::publish::{Publish, Unpublished, Upload};

/// The coordinator's statistics, re-exported where its callers have always found them.
pub use crate::stats::{CheckpointStats, HISTORY, Outcome, Record, StatsSnapshot, SubtaskAck};

/// Settings of the coordinator (the job's `checkpoint` section).
#[derive(Clone, Debug)]
pub struct CoordinatorConfig {
    pub timeout: Duration,
    pub min_pause: Duration,
    pub max_concurrent: usize,
    pub retained: usize,
    /// A name unique to this run attempt: shared files are stored under it, so files of
    /// different attempts with the same RocksDB name never collide.
    pub lineage: String,
    /// Ids continue after this one.
    pub last_id: u64,
    /// Shared files already stored, per (node index, subtask), by file name: the files of the
    /// checkpoint this run restored from, for subtasks restored one to one. They are referred
    /// to instead of stored again.
    pub reuse: HashMap<(usize, u32), HashMap<String, FileRef>>,
    /// In a fleet: the lease that snapshot ids come from and publishing goes through
    /// ([`crate::fence`]), and the block of ids already reserved for this run.
    pub fence: Option<(Arc<dyn Fence>, Range<u64>)>,
}

type Reply = oneshot::Sender<Result<Arc<Completed>, CheckpointError>>;

enum Request {
    Trigger {
        kind: BarrierKind,
        reply: Reply,
    },
    Final {
        subtasks: Vec<SubtaskSnapshot>,
        reply: Reply,
    },
}

/// A handle to a job's coordinator: cheap to clone.
#[derive(Clone, Debug)]
pub struct CoordinatorHandle {
    requests: mpsc::Sender<Request>,
    reports: mpsc::Sender<TaskReport>,
    stats: Arc<CheckpointStats>,
}

impl CoordinatorHandle {
    /// Triggers a checkpoint and waits for it to complete or fail.
    pub async fn checkpoint(&self) -> Result<Arc<Completed>, CheckpointError> {
        self.request(|reply| Request::Trigger {
            kind: BarrierKind::Checkpoint,
            reply,
        })
        .await
    }

    /// Asks for a checkpoint without waiting to hand the request over (for the scheduler's
    /// timer thread); `None` if the coordinator is busy taking requests. The future resolves
    /// when the checkpoint completes or fails.
    pub fn try_checkpoint(
        &self,
    ) -> Option<BoxFuture<'static, Result<Arc<Completed>, CheckpointError>>> {
        let (tx, rx) = oneshot::channel();
        self.requests
            .try_send(Request::Trigger {
                kind: BarrierKind::Checkpoint,
                reply: tx,
            })
            .ok()?;
        Some(Box::pin(async move {
            rx.await.map_err(|_| CheckpointError::Stopped)?
        }))
    }

    /// Takes a savepoint (after any checkpoint in flight) and waits for it; with `stop`, the
    /// job's sources end once it completes.
    pub async fn savepoint(&self, stop: bool) -> Result<Arc<Completed>, CheckpointError> {
        self.request(|reply| Request::Trigger {
            kind: BarrierKind::Savepoint { stop },
            reply,
        })
        .await
    }

    /// Publishes the final snapshot of a bounded run: the sinks' last transactions.
    pub async fn finish(
        &self,
        subtasks: Vec<SubtaskSnapshot>,
    ) -> Result<Arc<Completed>, CheckpointError> {
        self.request(|reply| Request::Final { subtasks, reply })
            .await
    }

    async fn request(
        &self,
        make: impl FnOnce(Reply) -> Request,
    ) -> Result<Arc<Completed>, CheckpointError> {
        let (tx, rx) = oneshot::channel();
        self.requests
            .send(make(tx))
            .await
            .map_err(|_| CheckpointError::Stopped)?;
        rx.await.map_err(|_| CheckpointError::Stopped)?
    }

    /// Where tasks send their reports.
    pub fn reports(&self) -> mpsc::Sender<TaskReport> {
        self.reports.clone()
    }

    pub fn stats(&self) -> Arc<CheckpointStats> {
        self.stats.clone()
    }
}

/// A snapshot in flight.
struct Pending {
    barrier: Barrier,
    /// What is being taken (a final snapshot has no barrier of its own).
    kind: SnapshotKind,
    triggered_at: i64,
    started: Instant,
    deadline: Instant,
    /// Tasks that have not acknowledged yet.
    waiting: HashSet<usize>,
    /// The longest alignment acknowledged so far.
    alignment: Duration,
    /// Each subtask's ack, for the record.
    acks: Vec<SubtaskAck>,
    /// Stored state per (node, subtask).
    subtasks: HashMap<(usize, u32), StoredSubtask>,
    operator_states: HashMap<(usize, u32), Vec<u8>>,
    /// Keyed snapshots still being stored.
    uploads: usize,
    /// Being published (every task acknowledged and every file stored).
    publishing: bool,
    replies: Vec<Reply>,
}

/// Background work the coordinator's loop drives.
enum Done {
    Uploaded {
        id: u64,
        key: (usize, u32),
        result: Result<KeyedHandle, StorageError>,
    },
    Published {
        id: u64,
        result: Result<Arc<Completed>, Unpublished>,
    },
    /// A snapshot's commit ended; `replies` wait for it (the final snapshot's).
    Committed {
        id: u64,
        result: Result<(), String>,
        completed: Arc<Completed>,
        replies: Vec<Reply>,
    },
    /// Old checkpoints were removed (or a failure logged): nothing to apply.
    Retained,
    /// A block of ids from the fence, starting here (or the lease is lost).
    Reserved(Result<u64, Fenced>),
}

/// Reports queued per task before a task waits to send (tasks send one per barrier).
const REPORTS_PER_TASK: usize = 2;

/// Starts the coordinator of a job whose tasks are named by `tasks` (by task index, as they
/// report). The returned future is the coordinator itself: the caller owns it (spawns it and
/// aborts or awaits it).
pub fn coordinator(
    mut config: CoordinatorConfig,
    catalog: JobCheckpoints,
    job: String,
    key_groups: u32,
    nodes: Vec<NodeInfo>,
    tasks: Vec<String>,
    hooks: Arc<dyn JobHooks>,
) -> (CoordinatorHandle, BoxFuture<'static, ()>) {
    // Requests come from a handful of callers (the scheduler, savepoint commands); reports
    // from tasks, at most a couple per task in flight.
    let (requests_tx, requests) = mpsc::channel(16);
    let (reports_tx, reports) = mpsc::channel(tasks.len().max(1) * REPORTS_PER_TASK);
    let stats = Arc::new(CheckpointStats::default());
    let handle = CoordinatorHandle {
        requests: requests_tx,
        reports: reports_tx,
        stats: stats.clone(),
    };
    let next_id = config.last_id + 1;
    let (fence, ids) = match config.fence.take() {
        Some((fence, ids)) => (Some(fence), ids),
        None => (None, 0..0),
    };
    let state = Coordinator {
        fence,
        ids,
        spare: None,
        reserving: false,
        // Seeds the coordinator's own map, which each completed checkpoint replaces.
        reuse: std::mem::take(&mut config.reuse),
        config,
        catalog,
        job,
        key_groups,
        nodes,
        task_names: tasks,
        hooks,
        stats,
        next_id,
        pending: HashMap::new(),
        queued: VecDeque::new(),
        closed: None,
        last_finished: None,
        retaining: false,
        committing: None,
        to_commit: None,
        stop_after_commit: None,
        work: FuturesUnordered::new(),
    };
    (handle, Box::pin(state.run(requests, reports)))
}

struct Coordinator {
    config: CoordinatorConfig,
    catalog: JobCheckpoints,
    job: String,
    key_groups: u32,
    nodes: Vec<NodeInfo>,
    /// The job's tasks by index, for messages (a checkpoint waiting for their acks).
    task_names: Vec<String>,
    hooks: Arc<dyn JobHooks>,
    stats: Arc<CheckpointStats>,
    next_id: u64,
    /// In a fleet, ids come from the fence instead of `next_id`: the block in use, the next
    /// one once reserved, and whether it is being reserved.
    fence: Option<Arc<dyn Fence>>,
    ids: Range<u64>,
    spare: Option<Range<u64>>,
    reserving: bool,
    pending: HashMap<u64, Pending>,
    /// Savepoints waiting for an in-flight checkpoint to finish.
    queued: VecDeque<(BarrierKind, Reply)>,
    /// Why no more snapshots can be taken, once that is so.
    closed: Option<String>,
    last_finished: Option<Instant>,
    /// Shared files stored by the latest completed checkpoint (see [`CoordinatorConfig::reuse`]).
    reuse: HashMap<(usize, u32), HashMap<String, FileRef>>,
    /// Old checkpoints are being removed.
    retaining: bool,
    /// The snapshot whose commit is running: commits run one at a time, in id order.
    committing: Option<u64>,
    /// The newest completed snapshot waiting for its commit, and the replies that wait for
    /// that commit. A newer snapshot replaces it (its sink state covers the older one's).
    to_commit: Option<(Arc<Completed>, Vec<Reply>)>,
    /// A stop-with-savepoint that completed: the sources end once its commit is done, so its
    /// output is visible when the job stops and nothing staged for it is discarded.
    stop_after_commit: Option<u64>,
    work: FuturesUnordered<BoxFuture<'static, Done>>,
}

impl Coordinator {
    async fn run(
        mut self,
        mut requests: mpsc::Receiver<Request>,
        mut reports: mpsc::Receiver<TaskReport>,
    ) {
        loop {
            let deadline = self.pending.values().map(|p| p.deadline).min();
            tokio::select! {
                request = requests.recv() => match request {
                    Some(r) => self.request(r),
                    None => break,
                },
                Some(report) = reports.recv() => self.report(report),
                Some(done) = self.work.next(), if !self.work.is_empty() => self.done(done),
                () = sleep_until(deadline) => self.expire(),
            }
        }
        let ids: Vec<u64> = self.pending.keys().copied().collect();
        for id in ids {
            self.fail(id, CheckpointError::Stopped);
        }
    }

    fn request(&mut self, request: Request) {
        match request {
            Request::Trigger { kind, reply } => self.trigger(kind, reply),
            Request::Final { subtasks, reply } => self.publish_final(subtasks, reply),
        }
    }

    fn skip(&self, reply: Reply, why: String) {
        self.stats.update(|s| s.skipped += 1);
        let _ = reply.send(Err(CheckpointError::Skipped(why)));
    }

    fn trigger(&mut self, kind: BarrierKind, reply: Reply) {
        if let Some(why) = &self.closed {
            return self.skip(reply, why.clone());
        }
        let in_flight = self.pending.len();
        match kind {
            BarrierKind::Checkpoint => {
                if in_flight >= self.config.max_concurrent {
                    return self.skip(reply, format!("{in_flight} already in flight"));
                }
                if !self.queued.is_empty() {
                    return self.skip(reply, "a savepoint is waiting".into());
                }
                if let Some(last) = self.last_finished
                    && last.elapsed() < self.config.min_pause
                {
                    return self.skip(reply, "the minimum pause has not elapsed".into());
                }
                if self.retaining {
                    return self.skip(reply, "old checkpoints are being removed".into());
                }
            }
            BarrierKind::Savepoint { .. } => {
                if in_flight > 0 {
                    // Started by the completion of what is in flight.
                    self.queued.push_back((kind, reply));
                    return;
                }
            }
        }
        self.start(kind, vec![reply]);
    }

    /// The next snapshot id: counted, or in a fleet the next of the reserved block (asking
    /// for the next block once half of this one is used). `None` while the fleet's catalog has
    /// not answered.
    fn take_id(&mut self) -> Option<u64> {
        let Some(fence) = self.fence.clone() else {
            let id = self.next_id;
            self.next_id += 1;
            return Some(id);
        };
        if self.ids.is_empty()
            && let Some(spare) = self.spare.take()
        {
            self.ids = spare;
        }
        let left = self.ids.end.saturating_sub(self.ids.start);
        if left <= ID_BLOCK / 2 && self.spare.is_none() && !self.reserving {
            self.reserving = true;
            let after = self.ids.end.saturating_sub(1).max(self.next_id);
            self.work
                .push(async move { Done::Reserved(fence.reserve(after, ID_BLOCK).await) }.boxed());
        }
        self.ids.next()
    }

    fn start(&mut self, kind: BarrierKind, replies: Vec<Reply>) {
        let Some(id) = self.take_id() else {
            for reply in replies {
                self.skip(
                    reply,
                    "waiting for snapshot ids from the fleet's catalog".into(),
                );
            }
            return;
        };
        let barrier = Barrier { id, kind };
        if let Err(why) = self.hooks.inject(barrier) {
            self.closed.get_or_insert(why.clone());
            for reply in replies {
                self.skip(reply, why.clone());
            }
            return;
        }
        tracing::debug!(job = %self.job, checkpoint = barrier.id, ?kind, "barrier injected");
        let now = Instant::now();
        self.stats.update(|s| s.in_flight.push(barrier.id));
        self.pending.insert(
            barrier.id,
            Pending {
                barrier,
                kind: barrier.snapshot_kind(),
                triggered_at: now_ms(),
                started: now,
                deadline: now + self.config.timeout,
                waiting: (0..self.task_names.len()).collect(),
                alignment: Duration::ZERO,
                acks: Vec::new(),
                subtasks: HashMap::new(),
                operator_states: HashMap::new(),
                uploads: 0,
                publishing: false,
                replies,
            },
        );
    }

    fn report(&mut self, report: TaskReport) {
        match report {
            TaskReport::Ack {
                checkpoint,
                task,
                subtasks,
                alignment,
            } => self.ack(checkpoint, task, subtasks, alignment),
            TaskReport::Declined {
                checkpoint,
                task,
                reason,
            } => self.fail(
                checkpoint,
                CheckpointError::Failed {
                    id: checkpoint,
                    reason: format!("task {task} declined: {reason}"),
                },
            ),
            TaskReport::Finished { task } => {
                let why = "a task of the job has finished".to_string();
                self.closed.get_or_insert(why.clone());
                let blocked: Vec<u64> = self
                    .pending
                    .iter()
                    .filter(|(_, p)| p.waiting.contains(&task))
                    .map(|(id, _)| *id)
                    .collect();
                for id in blocked {
                    self.fail(
                        id,
                        CheckpointError::Failed {
                            id,
                            reason: format!("task {task} finished before acknowledging"),
                        },
                    );
                }
                while let Some((_, reply)) = self.queued.pop_front() {
                    self.skip(reply, why.clone());
                }
            }
        }
    }

    fn ack(&mut self, id: u64, task: usize, subtasks: Vec<SubtaskSnapshot>, alignment: Duration) {
        let Some(pending) = self.pending.get_mut(&id) else {
            // Late, for an abandoned checkpoint: drop its scratch files.
            discard(subtasks);
            return;
        };
        pending.waiting.remove(&task);
        pending.alignment = pending.alignment.max(alignment);
        let acked_after_ms = pending.started.elapsed().as_millis() as u64;
        for s in &subtasks {
            pending.acks.push(SubtaskAck {
                node: self
                    .nodes
                    .get(s.node)
                    .map_or_else(|| s.node.to_string(), |n| n.name.clone()),
                subtask: s.subtask,
                acked_after_ms,
                alignment_ms: alignment.as_millis() as u64,
            });
        }
        self.absorb(id, subtasks);
        self.maybe_publish(id);
    }

    /// Takes in the snapshots of some subtasks: operator state is kept, keyed files start
    /// being stored.
    fn absorb(&mut self, id: u64, subtasks: Vec<SubtaskSnapshot>) {
        let Some(pending) = self.pending.get_mut(&id) else {
            discard(subtasks);
            return;
        };
        let kind = pending.kind;
        let dir = self.catalog.dir_key(kind, id);
        for s in subtasks {
            let key = (s.node, s.subtask);
            pending.subtasks.insert(
                key,
                StoredSubtask {
                    subtask: s.subtask,
                    operator: None,
                    keyed: None,
                },
            );
            if let Some(bytes) = s.operator {
                pending.operator_states.insert(key, bytes);
            }
            let Some(snapshot) = s.keyed else { continue };
            let node = match self.nodes.get(s.node) {
                Some(node) if kind != SnapshotKind::Final => node,
                _ => {
                    discard_keyed(Some(snapshot));
                    continue;
                }
            };
            pending.uploads += 1;
            let own = format!("{}-{}", crate::catalog::safe_name(&node.name), s.subtask);
            let upload = Upload {
                storage: self.catalog.storage().clone(),
                dir: dir.clone(),
                own: own.clone(),
                // Savepoints are self-contained: they share nothing.
                shared: (kind == SnapshotKind::Checkpoint).then(|| {
                    (
                        format!("shared/{}/{own}", self.config.lineage),
                        self.reuse.get(&key).cloned().unwrap_or_default(),
                    )
                }),
            };
            self.work.push(
                async move {
                    let result = upload.run(snapshot).await;
                    Done::Uploaded { id, key, result }
                }
                .boxed(),
            );
        }
    }

    fn done(&mut self, done: Done) {
        match done {
            Done::Retained => self.retaining = false,
            Done::Reserved(result) => {
                self.reserving = false;
                match result {
                    Ok(first) => self.spare = Some(first..first.saturating_add(ID_BLOCK)),
                    Err(fenced) if fenced.is_taken() => {
                        // The fleet stops this copy and says so, once.
                        tracing::debug!(job = %self.job, reason = %fenced, "no more snapshots: the job's lease is another server's");
                        self.closed
                            .get_or_insert(format!("the job's lease is lost: {fenced}"));
                    }
                    // The catalog did not answer: asked again when ids run low.
                    Err(fenced) => {
                        tracing::warn!(job = %self.job, reason = %fenced, "could not reserve snapshot ids; trying again at the next checkpoint");
                    }
                }
            }
            Done::Uploaded { id, key, result } => {
                let Some(pending) = self.pending.get_mut(&id) else {
                    // Abandoned meanwhile: retention removes what was stored.
                    return;
                };
                pending.uploads -= 1;
                match result {
                    Ok(handle) => {
                        if let Some(s) = pending.subtasks.get_mut(&key) {
                            s.keyed = Some(handle);
                        }
                        self.maybe_publish(id);
                    }
                    Err(e) => self.fail(
                        id,
                        CheckpointError::Failed {
                            id,
                            reason: e.to_string(),
                        },
                    ),
                }
            }
            Done::Published { id, result } => {
                let Some(pending) = self.pending.remove(&id) else {
                    return;
                };
                match result {
                    Ok(completed) => self.completed(pending, completed),
                    Err(Unpublished::Failed(reason)) => {
                        self.pending.insert(id, pending);
                        self.fail(id, CheckpointError::Failed { id, reason });
                    }
                    Err(Unpublished::Fenced(fenced)) => {
                        self.pending.insert(id, pending);
                        if fenced.is_taken() {
                            // The fleet stops this copy and says so, once: a copy whose
                            // lease is gone takes no more snapshots meanwhile.
                            self.closed
                                .get_or_insert(format!("the job's lease is lost: {fenced}"));
                        }
                        self.fail(
                            id,
                            CheckpointError::Fenced {
                                id,
                                taken: fenced.is_taken(),
                                reason: fenced.to_string(),
                            },
                        );
                    }
                }
            }
            Done::Committed {
                id,
                result,
                completed,
                replies,
            } => {
                self.committing = None;
                match result {
                    Ok(()) => {
                        for reply in replies {
                            let _ = reply.send(Ok(completed.clone()));
                        }
                        if self.stop_after_commit.is_some_and(|stop| id >= stop) {
                            self.stop_after_commit = None;
                            self.hooks.stop_sources();
                        }
                        self.start_commit();
                    }
                    Err(reason) => {
                        // The snapshot stands: its transactions are committed again on
                        // restore. This attempt takes no more snapshots (the runtime ends it).
                        tracing::error!(job = %self.job, checkpoint = id, error = %reason, "committing the output of a completed snapshot failed");
                        self.closed
                            .get_or_insert(format!("committing snapshot {id} failed"));
                        let error = CheckpointError::Commit { id, reason };
                        let waiting = self.to_commit.take().map(|(_, r)| r).unwrap_or_default();
                        for reply in replies.into_iter().chain(waiting) {
                            let _ = reply.send(Err(error.clone()));
                        }
                    }
                }
            }
        }
    }

    /// Queues the commit of `completed`, which `replies` wait for; starts it unless one is
    /// running.
    fn commit(&mut self, completed: Arc<Completed>, mut replies: Vec<Reply>) {
        if let Some((older, waiting)) = self.to_commit.take() {
            tracing::debug!(job = %self.job, skipped = older.metadata.id, by = completed.metadata.id, "a newer snapshot's commit covers a waiting one");
            replies.extend(waiting);
        }
        self.to_commit = Some((completed, replies));
        self.start_commit();
    }

    fn start_commit(&mut self) {
        if self.committing.is_some() {
            return;
        }
        let Some((completed, replies)) = self.to_commit.take() else {
            return;
        };
        let id = completed.metadata.id;
        self.committing = Some(id);
        let commit = self.hooks.committed(completed.clone());
        self.work.push(
            async move {
                let result = commit.await;
                Done::Committed {
                    id,
                    result,
                    completed,
                    replies,
                }
            }
            .boxed(),
        );
    }

    /// Publishes `id` once every task acknowledged and every file is stored.
    fn maybe_publish(&mut self, id: u64) {
        let Some(pending) = self.pending.get_mut(&id) else {
            return;
        };
        if !pending.waiting.is_empty() || pending.uploads > 0 || pending.publishing {
            return;
        }
        pending.publishing = true;
        let publish = Publish {
            catalog: self.catalog.clone(),
            job: self.job.clone(),
            key_groups: self.key_groups,
            nodes: self.nodes.clone(),
            id,
            kind: pending.kind,
            triggered_at: pending.triggered_at,
            subtasks: std::mem::take(&mut pending.subtasks),
            operator_states: std::mem::take(&mut pending.operator_states),
            fence: self.fence.clone(),
        };
        self.work.push(
            async move {
                let result = publish.run().await;
                Done::Published { id, result }
            }
            .boxed(),
        );
    }

    fn completed(&mut self, pending: Pending, completed: Arc<Completed>) {
        let id = completed.metadata.id;
        let kind = completed.metadata.kind;
        let elapsed = pending.started.elapsed();
        tracing::info!(
            job = %self.job,
            checkpoint = id,
            ?kind,
            duration_ms = elapsed.as_millis() as u64,
            bytes = completed.metadata.size(),
            location = %completed.location,
            "snapshot complete"
        );
        self.stats.record(Record {
            id,
            kind,
            triggered_at: pending.triggered_at,
            duration_ms: elapsed.as_millis() as u64,
            alignment_ms: pending.alignment.as_millis() as u64,
            outcome: Outcome::Completed {
                location: completed.location.clone(),
                bytes: completed.metadata.size(),
            },
            acks: pending.acks,
        });
        if kind == SnapshotKind::Checkpoint {
            self.last_finished = Some(Instant::now());
            // Later checkpoints refer to this one's shared files instead of storing them again.
            for (n, node) in completed.metadata.nodes.iter().enumerate() {
                for s in &node.subtasks {
                    let files = s
                        .keyed
                        .iter()
                        .flat_map(|k| &k.files)
                        .filter(|f| f.is_shared());
                    let by_name = files
                        .filter_map(|f| Some((f.path.rsplit('/').next()?.to_string(), f.clone())))
                        .collect();
                    self.reuse.insert((n, s.subtask), by_name);
                }
            }
            if self.pending.is_empty() {
                // No checkpoint starts until this is done: it deletes shared files no
                // metadata refers to, which a checkpoint being stored would have.
                self.retaining = true;
                let catalog = self.catalog.clone();
                let retained = self.config.retained;
                let job = self.job.clone();
                self.work.push(
                    async move {
                        if let Err(e) = catalog.retain(retained, id).await {
                            tracing::warn!(job = %job, error = %e, "removing old checkpoints failed");
                        }
                        Done::Retained
                    }
                    .boxed(),
                );
            }
        }
        // A stop-with-savepoint takes no snapshot after it, and ends the sources once its
        // commit is done (a failed commit fails the attempt instead: the job restarts from the
        // savepoint and goes on, and whoever asked for the stop is told).
        let stop = matches!(pending.barrier.kind, BarrierKind::Savepoint { stop: true });
        if stop {
            self.closed
                .get_or_insert("the job is stopping after its savepoint".into());
            self.stop_after_commit = Some(id);
        }
        // A checkpoint or savepoint is answered once durable; the final snapshot of a bounded
        // run and a stop-with-savepoint once their commit is done too (the run is over only
        // then).
        let waiting = if kind == SnapshotKind::Final || stop {
            pending.replies
        } else {
            for reply in pending.replies {
                let _ = reply.send(Ok(completed.clone()));
            }
            Vec::new()
        };
        self.commit(completed, waiting);
        self.start_queued();
    }

    fn start_queued(&mut self) {
        if !self.pending.is_empty() {
            return;
        }
        if let Some((kind, reply)) = self.queued.pop_front() {
            if let Some(why) = &self.closed {
                let why = why.clone();
                self.skip(reply, why);
            } else {
                self.start(kind, vec![reply]);
            }
        }
    }

    fn fail(&mut self, id: u64, error: CheckpointError) {
        let Some(pending) = self.pending.remove(&id) else {
            return;
        };
        if matches!(error, CheckpointError::Fenced { taken: true, .. }) {
            // The fleet stops this copy and says so, once.
            tracing::debug!(job = %self.job, checkpoint = id, error = %error, "snapshot abandoned");
        } else {
            tracing::warn!(job = %self.job, checkpoint = id, error = %error, "snapshot abandoned");
        }
        self.stats.record(Record {
            id,
            kind: pending.kind,
            triggered_at: pending.triggered_at,
            duration_ms: pending.started.elapsed().as_millis() as u64,
            alignment_ms: pending.alignment.as_millis() as u64,
            outcome: Outcome::Failed {
                reason: error.to_string(),
            },
            acks: Vec::new(),
        });
        if pending.kind == SnapshotKind::Checkpoint {
            self.last_finished = Some(Instant::now());
        }
        for reply in pending.replies {
            let _ = reply.send(Err(error.clone()));
        }
        self.start_queued();
    }

    fn expire(&mut self) {
        let now = Instant::now();
        // One being published is left to its storage: its metadata may already be written,
        // and a checkpoint whose metadata is durable is never reported as abandoned.
        let expired: Vec<u64> = self
            .pending
            .iter()
            .filter(|(_, p)| p.deadline <= now && !p.publishing)
            .map(|(id, _)| *id)
            .collect();
        for id in expired {
            let waiting = self
                .pending
                .get(&id)
                .map(|p| self.waiting_for(p))
                .unwrap_or_default();
            self.fail(
                id,
                CheckpointError::Timeout {
                    id,
                    after_ms: self.config.timeout.as_millis() as u64,
                    waiting,
                },
            );
        }
    }

    /// What a snapshot in flight is waiting for, for the timeout's message.
    fn waiting_for(&self, p: &Pending) -> String {
        if !p.waiting.is_empty() {
            let mut tasks: Vec<usize> = p.waiting.iter().copied().collect();
            tasks.sort_unstable();
            let names: Vec<String> = tasks
                .iter()
                .take(8)
                .map(|t| match self.task_names.get(*t) {
                    Some(name) => format!("`{name}`"),
                    None => format!("task {t}"),
                })
                .collect();
            let more = tasks.len().saturating_sub(names.len());
            let more = if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            };
            return format!(
                "the acknowledgement of {} task{} ({}{more})",
                tasks.len(),
                if tasks.len() == 1 { "" } else { "s" },
                names.join(", ")
            );
        }
        format!(
            "{} keyed-state snapshot{} still being stored",
            p.uploads,
            if p.uploads == 1 { "" } else { "s" }
        )
    }

    /// The final snapshot of a bounded run: no barrier, the ended tasks' sink transactions.
    fn publish_final(&mut self, subtasks: Vec<SubtaskSnapshot>, reply: Reply) {
        let Some(id) = self.take_id() else {
            discard(subtasks);
            return self.skip(
                reply,
                "no snapshot id for the final snapshot: the fleet's catalog has not answered"
                    .into(),
            );
        };
        let now = Instant::now();
        self.closed.get_or_insert("the job has finished".into());
        self.pending.insert(
            id,
            Pending {
                barrier: Barrier {
                    id,
                    kind: BarrierKind::Checkpoint,
                },
                kind: SnapshotKind::Final,
                triggered_at: now_ms(),
                started: now,
                deadline: now + self.config.timeout,
                waiting: HashSet::new(),
                alignment: Duration::ZERO,
                acks: Vec::new(),
                subtasks: HashMap::new(),
                operator_states: HashMap::new(),
                uploads: 0,
                publishing: false,
                replies: vec![reply],
            },
        );
        self.absorb(id, subtasks);
        self.maybe_publish(id);
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d.into()).await,
        None => std::future::pending().await,
    }
}

fn discard_keyed(keyed: Option<KeyedSnapshot>) {
    if let Some(k) = keyed {
        let _ = std::fs::remove_dir_all(&k.dir);
    }
}

fn discard(subtasks: Vec<SubtaskSnapshot>) {
    for s in subtasks {
        discard_keyed(s.keyed);
    }
}
