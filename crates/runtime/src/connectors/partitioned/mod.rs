//! What every source reading a partitioned log shares: Kafka topics and NATS JetStream streams
//! are both read partition by partition, and everything that makes such a source exactly-once
//! and well-behaved in event time lives here, once.
//!
//! - **Assignment** ([`owner`]): a partition belongs to one subtask by a pure function of the
//!   log's name, the partition and the parallelism (Flink's `KafkaSourceEnumerator` rule); no
//!   client-side group rebalances inside a job.
//! - **Positions in checkpoints** ([`Position`], [`restored_positions`]): every checkpoint holds
//!   the position of each partition a subtask reads (the Kafka offset, the NATS stream
//!   sequence of the next record); on restore every new subtask sees the positions of all old
//!   subtasks and keeps those of the partitions it now owns, so a restore at another
//!   parallelism is only a different assignment.
//! - **Per-partition event time** ([`Parts`]): each partition's largest event time is tracked
//!   apart and the subtask's watermark follows the live partition furthest behind (Flink's
//!   per-split watermarks), so partitions that are each in order are never late however the
//!   client interleaves them; with `idle-timeout` a quiet partition stops holding the others
//!   back, and a subtask without partitions is idle at once.
//! - **Progress** ([`Parts::report`]): each partition's position, end and lag, for the job's
//!   API, the dashboard and `/metrics`.
//! - **The source half** ([`PartitionedSource`]): a connector's reader (a thread or a task)
//!   decodes records into batches ahead of the job's task and sends each with the positions
//!   after it ([`Fetched`]) over a small bounded channel; the source hands them to the task,
//!   so what a checkpoint records is exactly what the task has emitted.
//! - **Records** ([`records`]): values (JSON or raw) and metadata columns to Arrow batches.

pub mod records;
pub mod values;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use arrow_array::{Array, Int64Array, RecordBatch, TimestampMillisecondArray};
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};

use crate::api::{
    OperatorError, PartitionProgress, Source, SourceEvent, SubtaskContext, SubtaskMetrics,
};

/// Batches a reader may decode ahead of the task: enough to overlap decoding with the task's
/// work, few enough that a slow job back-pressures the reader (and so the log's client).
pub const READ_AHEAD: usize = 4;

/// The longest a decoded row waits in a reader for its batch to fill.
pub const MAX_BATCH_DELAY: Duration = Duration::from_millis(20);

/// How often a quiet reader publishes its partitions' progress (the ends still move).
pub const REPORT_EVERY: Duration = Duration::from_secs(1);

/// The subtask (of `parallelism`) that reads `partition` of the log `log` (a topic, a
/// stream): the log's partitions are spread round-robin from a start that depends on its name,
/// so several logs do not all pile their partition 0 onto subtask 0.
pub fn owner(log: &str, partition: i32, parallelism: usize) -> usize {
    let parallelism = parallelism.max(1) as u64;
    let start = xxhash_rust::xxh3::xxh3_64(log.as_bytes()) % parallelism;
    ((start + u64::from(partition.unsigned_abs())) % parallelism) as usize
}

/// The position of one partition: where the next record to read is (a Kafka offset, a NATS
/// stream sequence).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Position {
    /// The log: a Kafka topic, a NATS stream.
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
}

/// A subtask's state in a checkpoint: its partitions' positions.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct SourceState {
    pub partitions: Vec<Position>,
}

impl SourceState {
    pub fn encode(positions: &[Position]) -> Result<Option<serde_json::Value>, OperatorError> {
        serde_json::to_value(SourceState {
            partitions: positions.to_vec(),
        })
        .map(Some)
        .map_err(|e| OperatorError::Internal(format!("encoding partition positions: {e}")))
    }
}

/// The positions of every partition the restored snapshot holds, of all old subtasks (`None`
/// when the subtask does not restore, or restores a snapshot without positions). `what` names
/// the source in errors (`Kafka source `in``).
pub fn restored_positions(
    ctx: &SubtaskContext,
    what: &str,
) -> Result<Option<Vec<Position>>, OperatorError> {
    let Some(restore) = ctx
        .restore
        .as_ref()
        .filter(|r| r.own_states().next().is_some())
    else {
        return Ok(None);
    };
    let mut all = Vec::new();
    for state in restore.own_states() {
        let s: SourceState = serde_json::from_value(state.clone()).map_err(|e| {
            OperatorError::Data(format!("{what}: a checkpointed position is not valid: {e}"))
        })?;
        all.extend(s.partitions);
    }
    Ok(Some(all))
}

/// The positions in the states of a completed checkpoint's subtasks (states that are not
/// positions are skipped: nothing may depend on this, the checkpoint is the truth).
pub fn completed_positions(states: Vec<serde_json::Value>) -> Vec<Position> {
    states
        .into_iter()
        .filter_map(|s| serde_json::from_value::<SourceState>(s).ok())
        .flat_map(|s| s.partitions)
        .collect()
}

/// One partition a reader owns.
#[derive(Debug)]
pub struct Part {
    pub topic: String,
    pub partition: i32,
    /// The position of the next record to read.
    pub next: i64,
    /// `stop-at`: the position reading stops at (the first not read).
    pub end: Option<i64>,
    /// Read up to `end`: no more records are taken from it.
    pub done: bool,
    /// The largest event time of the partition's records so far.
    pub max_event: Option<i64>,
    pub last_record: Instant,
    /// Records after the position, when the log's client counts them (NATS tells it with
    /// every message; a partition of a NATS stream is not a range of sequences): the lag.
    pub pending: Option<i64>,
}

impl Part {
    pub fn new(topic: String, partition: i32, next: i64, end: Option<i64>) -> Self {
        Self {
            done: end.is_some_and(|end| next >= end),
            topic,
            partition,
            next,
            end,
            max_event: None,
            last_record: Instant::now(),
            pending: None,
        }
    }

    pub fn position(&self) -> Position {
        Position {
            topic: self.topic.clone(),
            partition: self.partition,
            offset: self.next,
        }
    }
}

/// The partitions a reader owns, with what event time and idleness need of them.
#[derive(Debug)]
pub struct Parts {
    parts: Vec<Part>,
    /// Log → partition → index into `parts` (looked up per record without allocating).
    index: HashMap<String, HashMap<i32, usize>>,
    /// Per output port, the index of the event-time column.
    event_columns: Vec<Option<usize>>,
    idle_timeout: Option<Duration>,
    /// `stop-at`: the read ends; idleness does not apply (every partition is read to its end).
    bounded: bool,
}

impl Parts {
    pub fn new(
        parts: Vec<Part>,
        event_columns: Vec<Option<usize>>,
        idle_timeout: Option<Duration>,
        bounded: bool,
    ) -> Self {
        let mut this = Self {
            parts,
            index: HashMap::new(),
            event_columns,
            idle_timeout,
            bounded,
        };
        this.reindex();
        this
    }

    fn reindex(&mut self) {
        self.index.clear();
        for (i, p) in self.parts.iter().enumerate() {
            self.index
                .entry(p.topic.clone())
                .or_default()
                .insert(p.partition, i);
        }
    }

    /// Adds partitions found while running.
    pub fn extend(&mut self, added: Vec<Part>) {
        self.parts.extend(added);
        self.reindex();
    }

    pub fn index_of(&self, topic: &str, partition: i32) -> Option<usize> {
        self.index.get(topic)?.get(&partition).copied()
    }

    pub fn get(&self, i: usize) -> &Part {
        &self.parts[i]
    }

    pub fn get_mut(&mut self, i: usize) -> &mut Part {
        &mut self.parts[i]
    }

    pub fn iter(&self) -> impl Iterator<Item = &Part> {
        self.parts.iter()
    }

    pub fn len(&self) -> usize {
        self.parts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.parts.is_empty()
    }

    pub fn bounded(&self) -> bool {
        self.bounded
    }

    /// A bounded read is over: every partition reached its end.
    pub fn all_done(&self) -> bool {
        self.parts.iter().all(|p| p.done)
    }

    pub fn positions(&self) -> Vec<Position> {
        self.parts.iter().map(Part::position).collect()
    }

    /// Whether nothing the subtask reads can hold event time back: no partitions, or every
    /// partition quiet for `idle-timeout`. Never for a bounded read.
    pub fn idle(&self) -> bool {
        if self.bounded {
            return false;
        }
        let now = Instant::now();
        self.parts.iter().all(|p| self.is_idle(p, now))
    }

    fn is_idle(&self, p: &Part, now: Instant) -> bool {
        self.idle_timeout
            .is_some_and(|t| now.duration_since(p.last_record) >= t)
    }

    /// The least event time over the partitions that may still hold the watermark back.
    pub fn bound(&self) -> Option<i64> {
        let now = Instant::now();
        self.parts
            .iter()
            .filter(|p| !p.done && !self.is_idle(p, now))
            .map(|p| p.max_event.unwrap_or(i64::MIN))
            .min()
    }

    /// Flushed batches `(port, batch, partition of each row)` as the task's batches, advancing
    /// each partition's event time by its rows.
    pub fn observe(
        &mut self,
        flushed: Vec<(usize, RecordBatch, Vec<usize>)>,
    ) -> Vec<(usize, RecordBatch)> {
        let mut out = Vec::with_capacity(flushed.len());
        for (port, batch, rows) in flushed {
            if let Some(Some(col)) = self.event_columns.get(port) {
                let column = batch.column(*col);
                let times: Option<Vec<Option<i64>>> =
                    if let Some(a) = column.as_any().downcast_ref::<TimestampMillisecondArray>() {
                        Some(a.iter().collect())
                    } else {
                        column
                            .as_any()
                            .downcast_ref::<Int64Array>()
                            .map(|a| a.iter().collect())
                    };
                for (t, part) in times.unwrap_or_default().into_iter().zip(rows) {
                    if let (Some(t), Some(p)) = (t, self.parts.get_mut(part)) {
                        p.max_event = Some(p.max_event.map_or(t, |m| m.max(t)));
                    }
                }
            }
            out.push((port, batch));
        }
        out
    }

    /// Publishes the partitions' positions and ends (`end_of` each, when known) for the API,
    /// the dashboard and `/metrics`. The positions are those after the batches about to be
    /// sent: the task emits them next.
    pub fn report(&self, metrics: &SubtaskMetrics, end_of: impl Fn(&Part) -> Option<i64>) {
        let progress = self
            .parts
            .iter()
            .map(|p| PartitionProgress {
                topic: p.topic.clone(),
                partition: p.partition,
                position: p.next,
                end: end_of(p),
                pending: p.pending,
            })
            .collect();
        if let Ok(mut partitions) = metrics.partitions.lock() {
            *partitions = progress;
        }
    }

    /// What the task is sent after `batches`: them, and the partitions after them.
    pub fn progress(&self, batches: Vec<(usize, RecordBatch)>, idle: bool) -> Fetched {
        Fetched::Progress {
            batches,
            positions: self.positions(),
            bound: self.bound(),
            idle,
        }
    }
}

/// Per output port, the index of the event-time column `column` (when the job declares one).
pub fn event_columns(
    ports: &[(String, arrow_schema::SchemaRef)],
    column: Option<&str>,
) -> Vec<Option<usize>> {
    ports
        .iter()
        .map(|(_, schema)| column.and_then(|c| schema.index_of(c).ok()))
        .collect()
}

/// What a reader sends its source.
#[derive(Debug)]
pub enum Fetched {
    /// Rows (possibly none) and what the partitions look like after them.
    Progress {
        batches: Vec<(usize, RecordBatch)>,
        positions: Vec<Position>,
        bound: Option<i64>,
        idle: bool,
    },
    /// `stop-at`: every partition reached its end.
    End,
    Failed(OperatorError),
}

/// The channel from a reader to its source: [`READ_AHEAD`] batches deep.
pub fn channel() -> (
    async_channel::Sender<Fetched>,
    async_channel::Receiver<Fetched>,
) {
    async_channel::bounded(READ_AHEAD)
}

/// One subtask of a partitioned source: what its reader sent so far.
pub struct PartitionedSource {
    rx: async_channel::Receiver<Fetched>,
    positions: Vec<Position>,
    bound: Option<i64>,
    idle: bool,
    /// Names the reader in an internal error (`a Kafka reader`).
    reader: &'static str,
    /// Stops the reader (it also stops when it finds its channel closed); run on drop.
    stop: Option<Box<dyn FnOnce() + Send>>,
}

impl PartitionedSource {
    /// A source of what `rx` brings; `positions` are where its partitions start (the state of
    /// a checkpoint before the first batch); `idle`: nothing to read from the start.
    pub fn new(
        rx: async_channel::Receiver<Fetched>,
        positions: Vec<Position>,
        idle: bool,
        reader: &'static str,
        stop: Box<dyn FnOnce() + Send>,
    ) -> Self {
        Self {
            rx,
            positions,
            bound: None,
            idle,
            reader,
            stop: Some(stop),
        }
    }
}

impl Source for PartitionedSource {
    fn next(&mut self) -> BoxFuture<'_, Result<SourceEvent, OperatorError>> {
        Box::pin(async move {
            match self.rx.recv().await {
                Ok(Fetched::Progress {
                    batches,
                    positions,
                    bound,
                    idle,
                }) => {
                    self.positions = positions;
                    self.bound = bound;
                    self.idle = idle;
                    Ok(SourceEvent::Batches(batches))
                }
                Ok(Fetched::End) => Ok(SourceEvent::End),
                Ok(Fetched::Failed(e)) => Err(e),
                Err(_) => Err(OperatorError::Internal(format!(
                    "{} stopped without saying why",
                    self.reader
                ))),
            }
        })
    }

    fn watermark_bound(&self) -> Option<i64> {
        self.bound
    }

    fn idle(&self) -> bool {
        self.idle
    }

    fn snapshot(&mut self) -> Result<Option<serde_json::Value>, OperatorError> {
        SourceState::encode(&self.positions)
    }
}

impl Drop for PartitionedSource {
    fn drop(&mut self) {
        self.rx.close();
        if let Some(stop) = self.stop.take() {
            stop();
        }
    }
}

/// Keeps a handle's task running only as long as its owner: aborted when dropped.
#[derive(Debug)]
pub struct AbortOnDrop<T>(pub tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc as StdArc;

    #[test]
    fn every_partition_has_one_owner_and_owners_are_spread() {
        for parallelism in 1..6 {
            let mut counts = vec![0; parallelism];
            for p in 0..12 {
                let o = owner("bids", p, parallelism);
                assert!(o < parallelism);
                counts[o] += 1;
            }
            // 12 partitions over `parallelism` subtasks round-robin: within one of each other.
            let (min, max) = (
                counts.iter().min().copied().unwrap_or(0),
                counts.iter().max().copied().unwrap_or(0),
            );
            assert!(max - min <= 1, "{counts:?}");
        }
        // Consecutive partitions of one log go to consecutive subtasks.
        assert_eq!((owner("t", 0, 4) + 1) % 4, owner("t", 1, 4));
    }

    /// The watermark bound follows the live partition furthest behind; a done partition and
    /// (with a timeout) a quiet one stop holding it back.
    #[test]
    fn the_bound_is_the_least_live_partition() {
        let schema = StdArc::new(arrow_schema::Schema::new(vec![arrow_schema::Field::new(
            "t",
            arrow_schema::DataType::Int64,
            true,
        )]));
        let batch = RecordBatch::try_new(
            schema,
            vec![StdArc::new(Int64Array::from(vec![10, 50, 20]))],
        )
        .expect("batch");
        let mut parts = Parts::new(
            vec![
                Part::new("s".into(), 0, 1, None),
                Part::new("s".into(), 1, 1, None),
            ],
            vec![Some(0)],
            None,
            false,
        );
        assert_eq!(parts.bound(), Some(i64::MIN));
        let out = parts.observe(vec![(0, batch, vec![0, 1, 0])]);
        assert_eq!(out.len(), 1);
        assert_eq!(parts.bound(), Some(20));
        parts.get_mut(0).done = true;
        assert_eq!(parts.bound(), Some(50));
        assert!(!parts.idle());
        let mut quiet = Parts::new(
            vec![Part::new("s".into(), 0, 1, None)],
            vec![None],
            Some(Duration::ZERO),
            false,
        );
        assert!(quiet.idle() && quiet.bound().is_none());
        quiet.extend(vec![Part::new("s".into(), 1, 1, None)]);
        assert_eq!(quiet.index_of("s", 1), Some(1));
        assert!(Parts::new(vec![], vec![], None, false).idle());
    }

    #[test]
    fn positions_of_every_old_subtask_are_restored() {
        let state = |p: i32, o: i64| crate::api::SubtaskState {
            watermark: None,
            max_seen: None,
            state: SourceState::encode(&[Position {
                topic: "s".into(),
                partition: p,
                offset: o,
            }])
            .expect("encode"),
        };
        let ctx = SubtaskContext {
            subtask: 0,
            parallelism: 1,
            batch_size: 8,
            metrics: StdArc::new(SubtaskMetrics::default()),
            want: vec![true],
            restore: Some(StdArc::new(crate::api::SubtaskRestore {
                checkpoint: 3,
                keyed: vec![],
                states: vec![state(0, 7), state(1, 9)],
            })),
            attempt: 0,
            checkpoint_base: 3,
            checkpointing: true,
            state: None,
        };
        let restored = restored_positions(&ctx, "test")
            .expect("valid")
            .expect("some");
        assert_eq!(
            restored
                .iter()
                .map(|p| (p.partition, p.offset))
                .collect::<Vec<_>>(),
            [(0, 7), (1, 9)]
        );
        let states: Vec<serde_json::Value> = vec![
            serde_json::json!({"partitions": [{"topic": "s", "partition": 2, "offset": 5}]}),
            serde_json::json!("not a position"),
        ];
        assert_eq!(completed_positions(states).len(), 1);
    }
}
