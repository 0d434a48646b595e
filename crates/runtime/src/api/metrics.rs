//! Live counters of a running job, owned by the runtime and read by anyone.
//!
//! Tasks update them once per batch (never per record) with relaxed atomics; the progress bar,
//! the summary and (later) the HTTP API read them without locking or entering any task.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::Instant;

use weir_state::clock::now_ms;

use super::BEGINNING_OF_TIME;

/// Counters of one subtask of one node.
#[derive(Debug)]
pub struct SubtaskMetrics {
    pub records_in: AtomicU64,
    pub records_out: AtomicU64,
    pub batches_in: AtomicU64,
    /// The subtask's current input watermark (epoch ms; `i64::MIN` before the first).
    pub watermark: AtomicI64,
    /// Nanoseconds spent waiting for room in full output channels: the time this subtask was
    /// slowed by a slower consumer (backpressure).
    pub backpressure_ns: AtomicU64,
    /// Source subtasks: input units consumed (events generated, lines read, skipped included).
    pub events: AtomicU64,
    /// Source subtasks: records dropped by `on-error: skip` or not declared (undeclared variants).
    pub skipped: AtomicU64,
    /// Records an event-time operator dropped for arriving after their window (plus allowed
    /// lateness) closed.
    pub late_dropped: AtomicU64,
    /// Source subtasks: progress in source units (bytes for files, events for the generator).
    pub progress: AtomicU64,
    /// Checkpoint barriers this subtask has processed.
    pub barriers: AtomicU64,
    /// Nanoseconds inputs were held back aligning barriers, in total.
    pub alignment_ns: AtomicU64,
    /// Control messages (ordered state lookups) this subtask's task answered.
    pub control_messages: AtomicU64,
    pub finished: AtomicBool,
    /// Sources that read partitioned logs (Kafka): each partition's position and end, updated
    /// by the source as it reads (a few times a second at most).
    pub partitions: std::sync::Mutex<Vec<PartitionProgress>>,
    /// Nanoseconds the subtask's task spent working on what it received (and, for a
    /// source, emitting what it read), waiting for room downstream included
    /// (`backpressure_ns` says how much of it): counted on the first node of each task.
    pub busy_ns: AtomicU64,
    /// Nanoseconds the subtask's task waited for input (tasks fed by other tasks).
    pub idle_ns: AtomicU64,
    /// Keyed operators: the keys of their state, as the backend estimates them (refreshed
    /// about every second).
    pub state_keys: AtomicU64,
    /// Keyed operators on RocksDB: the bytes of their state (live data, files and memtables,
    /// RocksDB's estimate); [`UNKNOWN`] on the heap.
    pub state_bytes: AtomicU64,
    /// The watermark of each logical input (two for joins), as the subtask's input gate
    /// combines its channels.
    pub input_watermarks: std::sync::Mutex<Vec<i64>>,
    /// The last rows the subtask emitted, kept only while someone watches.
    pub tail: Tail,
}

/// A figure a subtask could not measure.
pub const UNKNOWN: u64 = u64::MAX;

/// Rows kept per subtask for a watcher of its output.
pub const TAIL_ROWS: usize = 20;

/// A subtask's last output rows, for a live preview: recorded only while a watcher asked in the
/// last few seconds, so that a subtask nobody watches pays one relaxed load per batch.
#[derive(Debug, Default)]
pub struct Tail {
    /// Until when (epoch ms) someone watches; 0: nobody.
    watched_until: AtomicI64,
    /// The newest batches, whose rows add up to at most [`TAIL_ROWS`].
    batches: std::sync::Mutex<std::collections::VecDeque<arrow_array::RecordBatch>>,
}

impl Tail {
    /// Records the last rows of `batch`, if someone watches. Called once per emitted batch.
    #[inline]
    pub fn record(&self, batch: &arrow_array::RecordBatch) {
        if self.watched_until.load(Ordering::Relaxed) == 0 {
            return;
        }
        self.record_watched(batch);
    }

    #[cold]
    fn record_watched(&self, batch: &arrow_array::RecordBatch) {
        if now_ms() > self.watched_until.load(Ordering::Relaxed) {
            // The watcher went away: stop recording, drop what was kept.
            self.watched_until.store(0, Ordering::Relaxed);
            self.lock().clear();
            return;
        }
        let rows = batch.num_rows();
        let keep = rows.min(TAIL_ROWS);
        let mut batches = self.lock();
        batches.push_back(batch.slice(rows - keep, keep));
        let mut held: usize = batches.iter().map(|b| b.num_rows()).sum();
        while held > TAIL_ROWS {
            let Some(first) = batches.front_mut() else {
                break;
            };
            let excess = held - TAIL_ROWS;
            if first.num_rows() <= excess {
                held -= first.num_rows();
                batches.pop_front();
            } else {
                *first = first.slice(excess, first.num_rows() - excess);
                held -= excess;
            }
        }
    }

    /// Someone watches for the next `for_ms`: recording starts (or goes on).
    pub fn watch(&self, for_ms: i64) {
        self.watched_until
            .store(now_ms().saturating_add(for_ms), Ordering::Relaxed);
    }

    /// The rows kept, oldest first.
    pub fn rows(&self) -> Vec<arrow_array::RecordBatch> {
        self.lock().iter().cloned().collect()
    }

    fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::VecDeque<arrow_array::RecordBatch>> {
        self.batches
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Where a source subtask is in one partition of a log.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct PartitionProgress {
    pub topic: String,
    pub partition: i32,
    /// The offset of the next record the subtask emits.
    pub position: i64,
    /// The end of the partition as the client last heard it (Kafka: the last stable offset;
    /// NATS: the stream's last sequence plus one), if known.
    pub end: Option<i64>,
    /// Records after the position, when the client counts them (NATS, whose partitions are
    /// subjects, not ranges of sequences): then this is the lag.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pending: Option<i64>,
}

impl PartitionProgress {
    /// Records in the partition not yet emitted, if known: the pending count, else the distance
    /// from the position to the end.
    pub fn lag(&self) -> Option<i64> {
        self.pending
            .or_else(|| self.end.map(|end| end - self.position))
            .map(|lag| lag.max(0))
    }
}

impl Default for SubtaskMetrics {
    fn default() -> Self {
        Self {
            records_in: AtomicU64::new(0),
            records_out: AtomicU64::new(0),
            batches_in: AtomicU64::new(0),
            watermark: AtomicI64::new(BEGINNING_OF_TIME),
            backpressure_ns: AtomicU64::new(0),
            events: AtomicU64::new(0),
            skipped: AtomicU64::new(0),
            late_dropped: AtomicU64::new(0),
            progress: AtomicU64::new(0),
            barriers: AtomicU64::new(0),
            alignment_ns: AtomicU64::new(0),
            control_messages: AtomicU64::new(0),
            finished: AtomicBool::new(false),
            partitions: std::sync::Mutex::new(Vec::new()),
            busy_ns: AtomicU64::new(0),
            idle_ns: AtomicU64::new(0),
            state_keys: AtomicU64::new(0),
            state_bytes: AtomicU64::new(UNKNOWN),
            input_watermarks: std::sync::Mutex::new(Vec::new()),
            tail: Tail::default(),
        }
    }
}

impl SubtaskMetrics {
    #[inline]
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// The watermark of each logical input, as last combined.
    pub fn input_watermarks(&self) -> Vec<i64> {
        self.input_watermarks
            .lock()
            .map(|w| w.clone())
            .unwrap_or_default()
    }

    /// A copy of the partitions' progress (empty for sources of other kinds).
    pub fn partitions(&self) -> Vec<PartitionProgress> {
        self.partitions
            .lock()
            .map(|p| p.clone())
            .unwrap_or_default()
    }
}

/// What kind of node a metrics entry describes.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum NodeRole {
    Source,
    Operator,
    Sink,
}

/// Counters of every subtask of one node.
#[derive(Debug)]
pub struct NodeMetrics {
    pub name: String,
    /// The node's `kind` in the job file (`nexmark`, `filter`, `file`...).
    pub kind: String,
    pub role: NodeRole,
    /// The task (chain) this node runs in: nodes with the same chain id share a task.
    pub chain: usize,
    pub subtasks: Vec<Arc<SubtaskMetrics>>,
    /// Source nodes: the total of `progress` when the input is bounded and its size known.
    pub progress_total: Option<u64>,
}

impl NodeMetrics {
    /// The counters of subtask `s`, shared with the task that updates them.
    pub fn subtask(&self, s: usize) -> Arc<SubtaskMetrics> {
        self.subtasks[s].clone()
    }

    pub fn sum(&self, f: impl Fn(&SubtaskMetrics) -> &AtomicU64) -> u64 {
        self.subtasks
            .iter()
            .map(|s| f(s).load(Ordering::Relaxed))
            .sum()
    }

    /// The node's watermark: the least over its subtasks.
    pub fn watermark(&self) -> i64 {
        self.subtasks
            .iter()
            .map(|s| s.watermark.load(Ordering::Relaxed))
            .min()
            .unwrap_or(BEGINNING_OF_TIME)
    }
}

/// Counters of a whole job.
#[derive(Debug)]
pub struct JobMetrics {
    pub job: String,
    pub started: Instant,
    pub nodes: Vec<Arc<NodeMetrics>>,
    /// Times the job restarted from a checkpoint after a failure. Counters include the work
    /// of every attempt (records replayed after a restart count again).
    pub restarts: AtomicU64,
}

impl JobMetrics {
    pub fn sources(&self) -> impl Iterator<Item = &Arc<NodeMetrics>> {
        self.nodes.iter().filter(|n| n.role == NodeRole::Source)
    }

    /// Input units consumed by all sources.
    pub fn events(&self) -> u64 {
        self.sources().map(|n| n.sum(|s| &s.events)).sum()
    }

    /// Progress over all sources, and its total when every source is bounded and sized.
    pub fn progress(&self) -> (u64, Option<u64>) {
        let done = self.sources().map(|n| n.sum(|s| &s.progress)).sum();
        let total = self
            .sources()
            .map(|n| n.progress_total)
            .try_fold(0u64, |acc, t| t.map(|t| acc + t));
        (done, total)
    }

    /// The job's output watermark: the least over its sinks' input watermarks.
    pub fn watermark(&self) -> i64 {
        self.nodes
            .iter()
            .filter(|n| n.role == NodeRole::Sink)
            .map(|n| n.watermark())
            .min()
            .unwrap_or(BEGINNING_OF_TIME)
    }
}
