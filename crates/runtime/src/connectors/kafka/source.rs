//! The Kafka source: partitions assigned by [`owner`], offsets in checkpoints, per-partition
//! watermarks (see the module docs of [`super`]; the machinery it shares with the NATS source
//! is [`crate::connectors::partitioned`]).
//!
//! A subtask is two halves. [`KafkaSourceFactory::create`] (once per subtask and attempt) asks
//! the cluster for the topics' partitions, keeps the ones the subtask owns, resolves where each
//! starts (the restored offset, else `start-from`) and, for `stop-at: latest`, where it ends;
//! then it starts the subtask's [`Reader`] on a thread of its own. The reader takes its
//! partitions' records a batch at a time from a queue of its own ([`super::fetch`]), decodes
//! them into batches and sends each batch with the positions after it over a bounded channel
//! to the [`PartitionedSource`], which the task polls: what the source's snapshot says is
//! exactly what the task has emitted.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::statistics::Statistics;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use rdkafka::{ClientContext, Message};

use super::fetch::{Record, RecordQueue};
use super::spec::{KafkaMetadata, KafkaSourceSpec, StartFrom, StartPosition, StopAt};
use super::{Closing, REQUEST_TIMEOUT, RecordMeta, client_config, external};
use crate::api::{OperatorError, Source, SourceFactory, SubtaskContext, SubtaskMetrics};
use crate::config::OnError;
use crate::connectors::partitioned::records::{RecordDecoder, ValueFormat, headers_json};
use crate::connectors::partitioned::{
    self, Fetched, MAX_BATCH_DELAY, Part, PartitionedSource, Parts, Position, REPORT_EVERY, owner,
};

/// The most records the reader takes from its queue at a time.
const TAKE: usize = 4096;

/// librdkafka's consumer settings the source changes, unless the job's `properties` set them.
/// librdkafka prefetches up to `queued.min.messages` records (100,000 by default) and, when
/// that many are queued, waits `fetch.queue.backoff.ms` (1,000 ms by default) before it
/// fetches again: a reader faster than the broker emptied the queue in a fifth of that second
/// and then waited out the rest (the Kafka source read 0.2 million events a second where it
/// decodes a million). 10 ms keeps the queue topped up; 32,000 records (about 9 MB of Nexmark
/// events) and 32 MB at most are enough to hide a fetch's round trip at that rate.
const FETCH_DEFAULTS: [(&str, &str); 3] = [
    ("fetch.queue.backoff.ms", "10"),
    ("queued.min.messages", "32000"),
    ("queued.max.messages.kbytes", "32768"),
];

/// How often librdkafka reports the partitions' ends (for lag).
const STATISTICS_INTERVAL: &str = "1000";

/// The consumer's context: keeps the ends of the partitions from librdkafka's statistics.
#[derive(Default)]
pub struct ReaderContext {
    ends: std::sync::Mutex<HashMap<(String, i32), i64>>,
}

impl ClientContext for ReaderContext {
    fn error(&self, error: KafkaError, reason: &str) {
        super::client_error(&error, reason);
    }

    fn stats(&self, statistics: Statistics) {
        let Ok(mut ends) = self.ends.lock() else {
            return;
        };
        for (name, topic) in statistics.topics {
            for (id, p) in topic.partitions {
                // `ls_offset` is the last stable offset (`read_committed`'s end), -1 when
                // unknown: then the high watermark (a broker without transactions reports
                // no stable offset, and there every record is committed).
                let end = if p.ls_offset >= 0 {
                    p.ls_offset
                } else {
                    p.hi_offset
                };
                if id >= 0 && end >= 0 {
                    ends.insert((name.clone(), id), end);
                }
            }
        }
    }
}

impl ConsumerContext for ReaderContext {}

pub(super) type KafkaConsumer = BaseConsumer<ReaderContext>;

/// Which topics a source reads.
#[derive(Clone, Debug)]
pub enum Topics {
    Named(Vec<String>),
    Pattern(regex::Regex),
}

impl Topics {
    pub fn of(spec: &KafkaSourceSpec) -> Result<Self, String> {
        match (&spec.topic, &spec.topic_pattern) {
            (Some(t), None) => {
                let names = t.names();
                if names.is_empty() || names.iter().any(String::is_empty) {
                    return Err("name at least one topic, and no empty names".into());
                }
                Ok(Topics::Named(names))
            }
            (None, Some(p)) => regex::Regex::new(&format!("^(?:{p})$"))
                .map(Topics::Pattern)
                .map_err(|e| format!("`topic-pattern` is not a regular expression: {e}")),
            (Some(_), Some(_)) => Err("give either `topic` or `topic-pattern`, not both".into()),
            (None, None) => Err("name the topic to read with `topic` (or `topic-pattern`)".into()),
        }
    }
}

/// Makes the subtasks of a Kafka source.
pub struct KafkaSourceFactory {
    spec: KafkaSourceSpec,
    format: ValueFormat,
    topics: Topics,
    /// The event-time column, when the job declares one.
    event_column: Option<String>,
    node: String,
    /// With a `group-id`: the consumer that commits completed checkpoints' offsets to it.
    committer: std::sync::Mutex<Option<Closing<KafkaConsumer>>>,
    /// The columns built per port (projection pushdown); empty: all of them.
    read: Vec<Vec<bool>>,
}

impl KafkaSourceFactory {
    pub fn new(spec: &KafkaSourceSpec, format: ValueFormat, node: &str) -> Result<Self, String> {
        Ok(Self {
            topics: Topics::of(spec)?,
            spec: spec.clone(),
            format,
            event_column: spec.event_time.column.clone(),
            node: node.to_owned(),
            committer: std::sync::Mutex::new(None),
            read: Vec::new(),
        })
    }

    fn consumer(&self) -> Result<Closing<KafkaConsumer>, OperatorError> {
        let group = self
            .spec
            .group_id
            .clone()
            .unwrap_or_else(|| format!("weir-{}", self.node));
        let mut properties = self.spec.properties.clone();
        for (k, v) in FETCH_DEFAULTS {
            properties
                .entry(k.to_owned())
                .or_insert_with(|| v.to_owned());
        }
        client_config(
            &self.spec.bootstrap_servers,
            &properties,
            &[
                ("group.id", &group),
                ("enable.auto.commit", "false"),
                ("enable.auto.offset.store", "false"),
                ("enable.partition.eof", "true"),
                ("isolation.level", "read_committed"),
                // An offset the cluster no longer has (retention deleted it) restarts at the
                // oldest record kept, as Flink's source does.
                ("auto.offset.reset", "earliest"),
                ("statistics.interval.ms", STATISTICS_INTERVAL),
            ],
        )
        .create_with_context(ReaderContext::default())
        .map(Closing::new)
        .map_err(|e| {
            external(
                format!(
                    "Kafka source `{}`: cannot create a consumer for {}",
                    self.node, self.spec.bootstrap_servers
                ),
                e,
            )
        })
    }
}

impl SourceFactory for KafkaSourceFactory {
    fn prepare(&self, _parallelism: usize) -> Result<Option<u64>, OperatorError> {
        Ok(None)
    }

    fn project(&self, read: &[Vec<bool>]) -> Option<Arc<dyn SourceFactory>> {
        let fresh = Self::new(&self.spec, self.format.clone(), &self.node).ok()?;
        Some(Arc::new(Self {
            read: read.to_vec(),
            ..fresh
        }))
    }

    fn checkpoint_complete(&self, states: Vec<serde_json::Value>) {
        if self.spec.group_id.is_none() {
            return;
        }
        let mut tpl = TopicPartitionList::new();
        for p in partitioned::completed_positions(states) {
            let _ = tpl.add_partition_offset(&p.topic, p.partition, Offset::Offset(p.offset));
        }
        if tpl.count() == 0 {
            return;
        }
        let Ok(mut committer) = self.committer.lock() else {
            return;
        };
        if committer.is_none() {
            match self.consumer() {
                Ok(c) => *committer = Some(c),
                Err(e) => {
                    tracing::warn!(node = %self.node, "Kafka source: committing offsets: {e}");
                    return;
                }
            }
        }
        if let Some(c) = committer.as_ref() {
            // Asynchronous: the result comes back on a later poll, which only drains it.
            if let Err(e) = c.commit(&tpl, rdkafka::consumer::CommitMode::Async) {
                tracing::warn!(node = %self.node, "Kafka source: committing offsets: {e}");
            }
            while let Some(event) = c.poll(Duration::ZERO) {
                if let Err(e) = event {
                    tracing::debug!(node = %self.node, "Kafka offset committer: {e}");
                }
            }
        }
    }

    fn create(&self, ctx: &SubtaskContext) -> Result<Box<dyn Source>, OperatorError> {
        let restored =
            partitioned::restored_positions(ctx, &format!("Kafka source `{}`", self.node))?;
        let consumer = Arc::new(self.consumer()?);
        let queue = RecordQueue::new(consumer.clone(), TAKE).ok_or_else(|| {
            OperatorError::Internal(format!(
                "Kafka source `{}`: librdkafka made no queue",
                self.node
            ))
        })?;
        let parts = super::blocking(|| self.assign(&consumer, &queue, ctx, restored.as_deref()))?;
        let (tx, rx) = partitioned::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let positions = parts.iter().map(Part::position).collect();
        let idle = parts.is_empty() && self.spec.stop_at.is_none();
        let parts = Parts::new(
            parts,
            self.event_columns(),
            self.spec.event_time.idle_timeout.map(|d| d.0),
            self.spec.stop_at.is_some(),
        );
        let reader = Reader {
            consumer,
            decoder: RecordDecoder::new(
                &self.format,
                &self.spec.metadata,
                &ctx.want,
                ctx.batch_size,
            )
            .reading(&self.read),
            parts,
            topics: self.topics.clone(),
            on_error: self.spec.on_error,
            max_record_size: self.spec.max_record_size.0,
            discovery: self.spec.partition_discovery.0,
            next_discovery: Instant::now() + self.spec.partition_discovery.0,
            last_part: None,
            subtask: ctx.subtask,
            parallelism: ctx.parallelism,
            batch_size: ctx.batch_size.max(1),
            metrics: ctx.metrics.clone(),
            node: self.node.clone(),
        };
        let thread = {
            let stop = stop.clone();
            std::thread::Builder::new()
                .name(format!("kafka-{}-{}", self.node, ctx.subtask))
                .spawn(move || reader.run(queue, &tx, &stop))
                .map_err(|e| {
                    OperatorError::external("starting a Kafka reader thread".to_string(), e)
                })?
        };
        // The reader notices the stop within one poll interval; it is not joined, so that a
        // drop on an async worker never waits for librdkafka to close the consumer.
        let stop = move || {
            stop.store(true, Ordering::Relaxed);
            drop(thread);
        };
        Ok(Box::new(PartitionedSource::new(
            rx,
            positions,
            idle,
            "a Kafka reader thread",
            Box::new(stop),
        )))
    }
}

impl KafkaSourceFactory {
    /// Per port, the index of the event-time column.
    fn event_columns(&self) -> Vec<Option<usize>> {
        partitioned::event_columns(
            &self.format.ports(&self.spec.metadata),
            self.event_column.as_deref(),
        )
    }

    /// The subtask's partitions and where each starts (and ends); assigns them to `consumer`,
    /// their records forwarded to `queue`.
    fn assign(
        &self,
        consumer: &KafkaConsumer,
        queue: &RecordQueue,
        ctx: &SubtaskContext,
        restored: Option<&[Position]>,
    ) -> Result<Vec<Part>, OperatorError> {
        let all = list_partitions(consumer, &self.topics, &self.spec.bootstrap_servers, true)
            .map_err(|e| e.named(&self.node))?;
        let restored: HashMap<(&str, i32), i64> = restored
            .unwrap_or_default()
            .iter()
            .map(|p| ((p.topic.as_str(), p.partition), p.offset))
            .collect();
        let start_ms = self.spec.start_from.millis().map_err(OperatorError::Data)?;
        let mut parts = Vec::new();
        for (topic, partition) in all {
            if owner(&topic, partition, ctx.parallelism) != ctx.subtask {
                continue;
            }
            let (low, high) = consumer
                .fetch_watermarks(&topic, partition, REQUEST_TIMEOUT)
                .map_err(|e| {
                    external(
                        format!(
                            "Kafka source `{}`: reading the offsets of {topic}/{partition}",
                            self.node
                        ),
                        e,
                    )
                })?;
            let next = match restored.get(&(topic.as_str(), partition)) {
                Some(offset) => *offset,
                // A partition the checkpoint does not know was created after it: from its
                // start, as partitions found while running are.
                None if !restored.is_empty() => low,
                None => self.start_offset(consumer, &topic, partition, (low, high), start_ms)?,
            };
            let end = self.spec.stop_at.map(|StopAt::Latest| high);
            parts.push(Part::new(topic, partition, next, end));
        }
        let mut tpl = TopicPartitionList::new();
        for p in &parts {
            queue.forward(&p.topic, p.partition).map_err(|e| {
                OperatorError::Internal(format!("Kafka source `{}`: {e}", self.node))
            })?;
            tpl.add_partition_offset(&p.topic, p.partition, Offset::Offset(p.next))
                .map_err(|e| external("assigning partitions".to_string(), e))?;
        }
        consumer.assign(&tpl).map_err(|e| {
            external(
                format!("Kafka source `{}`: assigning partitions", self.node),
                e,
            )
        })?;
        Ok(parts)
    }

    /// Where a partition without a checkpointed offset starts, by `start-from`.
    fn start_offset(
        &self,
        consumer: &KafkaConsumer,
        topic: &str,
        partition: i32,
        (low, high): (i64, i64),
        start_ms: Option<i64>,
    ) -> Result<i64, OperatorError> {
        let lookup = |tpl: TopicPartitionList, what: &str, by_time: bool| {
            let found = if by_time {
                consumer.offsets_for_times(tpl, REQUEST_TIMEOUT)
            } else {
                consumer.committed_offsets(tpl, REQUEST_TIMEOUT)
            };
            found
                .map_err(|e| {
                    external(
                        format!(
                            "Kafka source `{}`: looking up {what} of {topic}/{partition}",
                            self.node
                        ),
                        e,
                    )
                })
                .map(|tpl| {
                    tpl.find_partition(topic, partition)
                        .map(|e| e.offset())
                        .unwrap_or(Offset::Invalid)
                })
        };
        let mut tpl = TopicPartitionList::new();
        Ok(match (&self.spec.start_from, start_ms) {
            (StartFrom::Position(StartPosition::Earliest), _) => low,
            (StartFrom::Position(StartPosition::Latest), _) => high,
            (StartFrom::Position(StartPosition::GroupOffsets), _) => {
                tpl.add_partition(topic, partition);
                match lookup(tpl, "the group's committed offset", false)? {
                    Offset::Offset(n) => n.clamp(low, high),
                    _ => low,
                }
            }
            (_, Some(ms)) => {
                tpl.add_partition_offset(topic, partition, Offset::Offset(ms))
                    .map_err(|e| external("looking up offsets by time".to_string(), e))?;
                match lookup(tpl, "the offset for the start time", true)? {
                    Offset::Offset(n) => n,
                    // No record at or after the time: start at the end.
                    _ => high,
                }
            }
            (_, None) => low,
        })
    }
}

/// Why listing partitions failed.
enum ListError {
    Missing(String),
    Cluster(KafkaError, String),
}

impl ListError {
    fn named(self, node: &str) -> OperatorError {
        match self {
            ListError::Missing(message) => {
                OperatorError::Data(format!("Kafka source `{node}`: {message}"))
            }
            ListError::Cluster(e, servers) => external(
                format!(
                    "Kafka source `{node}`: cannot read the topics' metadata from {servers} \
                     (is the broker reachable?)"
                ),
                e,
            ),
        }
    }
}

/// Every partition of the source's topics, sorted. `strict`: a named topic that does not exist
/// is an error (at start); while running it is just not there yet.
fn list_partitions(
    consumer: &KafkaConsumer,
    topics: &Topics,
    servers: &str,
    strict: bool,
) -> Result<Vec<(String, i32)>, ListError> {
    let mut out = Vec::new();
    match topics {
        Topics::Named(names) => {
            for name in names {
                let metadata = consumer
                    .fetch_metadata(Some(name), REQUEST_TIMEOUT)
                    .map_err(|e| ListError::Cluster(e, servers.to_owned()))?;
                let topic = metadata.topics().iter().find(|t| t.name() == name);
                match topic {
                    Some(t) if t.error().is_none() && !t.partitions().is_empty() => {
                        out.extend(t.partitions().iter().map(|p| (name.clone(), p.id())));
                    }
                    _ if strict => {
                        return Err(ListError::Missing(format!(
                            "the topic `{name}` does not exist on {servers}"
                        )));
                    }
                    _ => {}
                }
            }
        }
        Topics::Pattern(pattern) => {
            let metadata = consumer
                .fetch_metadata(None, REQUEST_TIMEOUT)
                .map_err(|e| ListError::Cluster(e, servers.to_owned()))?;
            for t in metadata.topics() {
                if t.error().is_none() && !t.name().starts_with("__") && pattern.is_match(t.name())
                {
                    out.extend(t.partitions().iter().map(|p| (t.name().to_owned(), p.id())));
                }
            }
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// The one partition of a [`Part`], for librdkafka's calls.
fn tpl(part: &Part) -> TopicPartitionList {
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition(&part.topic, part.partition);
    tpl
}

/// A subtask's consumer, on its own thread.
struct Reader {
    /// Its own queue serves what is not a record (statistics, the client's errors); the
    /// records come from the [`RecordQueue`] the reader runs with.
    consumer: Arc<Closing<KafkaConsumer>>,
    decoder: RecordDecoder<KafkaMetadata>,
    parts: Parts,
    topics: Topics,
    on_error: OnError,
    max_record_size: u64,
    discovery: Duration,
    next_discovery: Instant,
    /// The partition of the last record: its topic's handle, its number and its index in
    /// `parts` (records come in runs of one partition; this spares a lookup by name each).
    last_part: Option<(usize, i32, usize)>,
    subtask: usize,
    parallelism: usize,
    batch_size: usize,
    metrics: Arc<SubtaskMetrics>,
    node: String,
}

impl Reader {
    fn run(
        mut self,
        mut queue: RecordQueue,
        tx: &async_channel::Sender<Fetched>,
        stop: &AtomicBool,
    ) {
        if let Err(e) = self.read(&mut queue, tx, stop) {
            let _ = tx.send_blocking(Fetched::Failed(e));
        }
    }

    fn read(
        &mut self,
        queue: &mut RecordQueue,
        tx: &async_channel::Sender<Fetched>,
        stop: &AtomicBool,
    ) -> Result<(), OperatorError> {
        self.report();
        let mut reported = Instant::now();
        let mut was_idle = None;
        loop {
            if stop.load(Ordering::Relaxed) {
                return Ok(());
            }
            if self.parts.bounded() && self.parts.all_done() {
                let _ = tx.send_blocking(Fetched::End);
                return Ok(());
            }
            if !self.parts.bounded() && Instant::now() >= self.next_discovery {
                self.discover(queue)?;
                self.next_discovery = Instant::now() + self.discovery;
            }
            self.serve_events()?;
            let started = Instant::now();
            let mut eof = false;
            // The first record within `MAX_BATCH_DELAY` (a quiet source comes back that often
            // to look at its partitions and `stop`), then what else the consumer has at hand,
            // without waiting, up to a batch: rows leave as soon as the queue runs dry, and a
            // busy source, whose queue does not, still sends full batches.
            let mut first = true;
            loop {
                let (wait, max) = if first {
                    (MAX_BATCH_DELAY.saturating_sub(started.elapsed()), 1)
                } else {
                    let wanted = self.batch_size.saturating_sub(self.decoder.buffered());
                    (Duration::ZERO, wanted.min(TAKE))
                };
                let records = queue.take(wait, max);
                if records.is_empty() {
                    break;
                }
                first = false;
                let now = Instant::now();
                let mut read = 0;
                for record in records.iter() {
                    match record.error() {
                        None => {
                            read += 1;
                            self.record(record, now)?;
                        }
                        Some(KafkaError::PartitionEOF(partition)) => {
                            eof = true;
                            self.reached_end(record.topic(), partition);
                        }
                        Some(e) => self.consumer_error(e)?,
                    }
                }
                SubtaskMetrics::add(&self.metrics.events, read);
                if self.decoder.buffered() >= self.batch_size
                    || started.elapsed() >= MAX_BATCH_DELAY
                {
                    break;
                }
            }
            if eof && self.parts.bounded() {
                self.check_positions();
            }
            let idle = self.parts.idle();
            if self.decoder.buffered() == 0 && was_idle == Some(idle) && !eof {
                // Nothing new to send; the ends (hence the lag) still move.
                if reported.elapsed() >= REPORT_EVERY {
                    self.report();
                    reported = Instant::now();
                }
                continue;
            }
            was_idle = Some(idle);
            let batches = self.flush()?;
            self.report();
            reported = Instant::now();
            let progress = self.parts.progress(batches, idle);
            if tx.send_blocking(progress).is_err() {
                // The source is gone (its task stopped).
                return Ok(());
            }
        }
    }

    /// Publishes the partitions' positions and ends for the API and `/metrics`. The
    /// positions are those after the batches about to be sent: the task emits them next.
    fn report(&self) {
        let ends = self
            .consumer
            .context()
            .ends
            .lock()
            .map(|e| e.clone())
            .unwrap_or_default();
        self.parts.report(&self.metrics, |p| {
            ends.get(&(p.topic.clone(), p.partition)).copied()
        });
    }

    /// What the consumer's own queue holds: statistics (handled by [`ReaderContext`]) and
    /// the client's errors. A record there would be of a partition not forwarded to the
    /// reader's queue, which every assignment is first: the job fails (and restores) rather
    /// than miss it.
    fn serve_events(&self) -> Result<(), OperatorError> {
        match self.consumer.poll(Duration::ZERO) {
            None => Ok(()),
            Some(Ok(message)) => Err(OperatorError::Internal(format!(
                "Kafka source `{}`: a record of {}/{} arrived outside the reader's queue",
                self.node,
                message.topic(),
                message.partition()
            ))),
            Some(Err(e)) => self.consumer_error(e),
        }
    }

    /// Decodes one record into the buffered rows; `now` is when its batch arrived.
    fn record(&mut self, message: Record<'_>, now: Instant) -> Result<(), OperatorError> {
        let i = match self.last_part {
            Some((topic, partition, i))
                if topic == message.topic_id() && partition == message.partition() =>
            {
                i
            }
            _ => {
                let Some(i) = self.parts.index_of(message.topic(), message.partition()) else {
                    return Ok(());
                };
                self.last_part = Some((message.topic_id(), message.partition(), i));
                i
            }
        };
        let offset = message.offset();
        let part = self.parts.get_mut(i);
        if part.done || part.end.is_some_and(|end| offset >= end) {
            self.finish_part(i);
            return Ok(());
        }
        part.next = offset + 1;
        part.last_record = now;
        let value = message.payload();
        let failure = if value.is_some_and(|v| v.len() as u64 > self.max_record_size) {
            Some(format!(
                "the value is {} bytes, more than `max-record-size` ({})",
                value.map_or(0, <[u8]>::len),
                crate::config::ByteSize(self.max_record_size)
            ))
        } else {
            let headers = if self.decoder.wants(KafkaMetadata::Headers) {
                Some(headers_json(message.headers().into_iter()))
            } else {
                None
            };
            let meta = RecordMeta {
                topic: &self.parts.get(i).topic,
                partition: message.partition(),
                offset,
                timestamp: message.timestamp(),
                key: message.key(),
                headers,
            };
            self.decoder
                .decode_keyed(value, message.key(), |m| meta.value(m), i)
                .err()
                .map(|e| e.to_string())
        };
        if let Some(reason) = failure {
            match self.on_error {
                OnError::Skip => SubtaskMetrics::add(&self.metrics.skipped, 1),
                OnError::Fail => {
                    return Err(OperatorError::Data(format!(
                        "Kafka source `{}`: topic {} partition {} offset {offset}: {reason} (set \
                         `on-error: skip` to skip such records)",
                        self.node,
                        message.topic(),
                        message.partition()
                    )));
                }
            }
        }
        if self.parts.get(i).end.is_some_and(|end| offset + 1 >= end) {
            self.finish_part(i);
        }
        Ok(())
    }

    /// A partition reached its `stop-at` end: stop fetching it.
    fn finish_part(&mut self, i: usize) {
        let part = self.parts.get_mut(i);
        if !part.done {
            part.done = true;
            let _ = self.consumer.pause(&tpl(part));
        }
    }

    /// End of `topic`'s `partition`: it has been read up to the cluster's end, which is at
    /// or past the end it had when the subtask started.
    fn reached_end(&mut self, topic: &str, partition: i32) {
        if !self.parts.bounded() {
            return;
        }
        if let Some(i) = self.parts.index_of(topic, partition) {
            self.finish_part(i);
        }
    }

    /// Bounded reads: partitions whose consumer position reached their end (the position
    /// counts transaction markers, which no record's offset does).
    fn check_positions(&mut self) {
        let Ok(positions) = self.consumer.position() else {
            return;
        };
        for i in 0..self.parts.len() {
            let part = self.parts.get(i);
            if part.done {
                continue;
            }
            if let Some(Offset::Offset(pos)) = positions
                .find_partition(&part.topic, part.partition)
                .map(|e| e.offset())
                && part.end.is_some_and(|end| pos >= end)
            {
                self.finish_part(i);
            }
        }
    }

    /// Errors the consumer reports: most are transient (a broker restarting) and librdkafka
    /// retries them itself; those that mean the input is gone or refused fail the job.
    fn consumer_error(&self, e: KafkaError) -> Result<(), OperatorError> {
        use rdkafka::types::RDKafkaErrorCode as Code;
        let fatal = match &e {
            KafkaError::MessageConsumptionFatal(_) => true,
            KafkaError::MessageConsumption(code) => matches!(
                code,
                Code::UnknownTopicOrPartition
                    | Code::UnknownTopic
                    | Code::UnknownPartition
                    | Code::TopicAuthorizationFailed
                    | Code::GroupAuthorizationFailed
                    | Code::SaslAuthenticationFailed
                    | Code::Authentication
            ),
            _ => false,
        };
        if fatal {
            return Err(external(
                format!("Kafka source `{}`: the consumer failed", self.node),
                e,
            ));
        }
        tracing::warn!(node = %self.node, subtask = self.subtask, "Kafka consumer: {e}");
        Ok(())
    }

    /// Partitions created since the last look: assigned from their start (their records
    /// forwarded to `queue` first).
    fn discover(&mut self, queue: &RecordQueue) -> Result<(), OperatorError> {
        let all = match list_partitions(&self.consumer, &self.topics, "", false) {
            Ok(all) => all,
            // The cluster is unreachable for now: look again next time.
            Err(ListError::Cluster(e, _)) => {
                tracing::warn!(node = %self.node, "Kafka partition discovery: {e}");
                return Ok(());
            }
            Err(ListError::Missing(_)) => return Ok(()),
        };
        let mut tpl = TopicPartitionList::new();
        let mut added = Vec::new();
        for (topic, partition) in all {
            if owner(&topic, partition, self.parallelism) != self.subtask
                || self.parts.index_of(&topic, partition).is_some()
            {
                continue;
            }
            let low = match self
                .consumer
                .fetch_watermarks(&topic, partition, REQUEST_TIMEOUT)
            {
                Ok((low, _)) => low,
                Err(e) => {
                    tracing::warn!(node = %self.node, "Kafka partition discovery: {e}");
                    continue;
                }
            };
            queue.forward(&topic, partition).map_err(|e| {
                OperatorError::Internal(format!("Kafka source `{}`: {e}", self.node))
            })?;
            tpl.add_partition_offset(&topic, partition, Offset::Offset(low))
                .map_err(|e| external("assigning a new partition".to_string(), e))?;
            tracing::info!(node = %self.node, subtask = self.subtask, "reading new partition {topic}/{partition} from offset {low}");
            added.push(Part::new(topic, partition, low, None));
        }
        if added.is_empty() {
            return Ok(());
        }
        self.consumer.incremental_assign(&tpl).map_err(|e| {
            external(
                format!("Kafka source `{}`: assigning new partitions", self.node),
                e,
            )
        })?;
        self.parts.extend(added);
        self.last_part = None;
        Ok(())
    }

    /// The buffered rows as batches, advancing each partition's event time by its rows.
    fn flush(&mut self) -> Result<Vec<(usize, arrow_array::RecordBatch)>, OperatorError> {
        let flushed = self.decoder.flush().map_err(OperatorError::Internal)?;
        Ok(self.parts.observe(flushed))
    }
}
