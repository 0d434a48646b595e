//! The NATS source: a stream's partitions assigned by [`owner`], stream sequences in
//! checkpoints, per-partition watermarks (see the module docs of [`super`]).
//!
//! A subtask is three kinds of task. [`NatsSourceFactory::create`] (once per subtask and
//! attempt) starts the subtask's [`Reader`], which connects, reads the stream's info, keeps the
//! partitions the subtask owns and resolves where each starts (the restored sequence, else
//! `start-from`) and, for `stop-at: end`, where it ends. For each partition it starts a
//! [`Pump`]: an ephemeral pull consumer at the partition's position, without acks, whose
//! messages it checks for order (a message before the position is a repeat, a gap in the
//! consumer's sequence means the consumer lost messages and is made again from the position)
//! and passes on over a bounded channel. The reader decodes them into batches and sends each
//! with the positions after it to the [`PartitionedSource`] the task polls, so what a
//! checkpoint records is exactly what the task has emitted. A server that restarts costs a
//! consumer (made again at the position once the client has reconnected); a stream that is
//! deleted fails the job.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer};
use futures::{FutureExt, StreamExt};
use tokio::sync::mpsc;

use super::spec::{NatsMetadata, NatsSourceSpec, NatsStartFrom, NatsStartPosition, NatsStopAt};
use super::{connect, headers_json, millis, partition_filter, stream};
use crate::api::{OperatorError, Source, SourceFactory, SubtaskContext, SubtaskMetrics};
use crate::config::OnError;
use crate::connectors::partitioned::records::{MetaValue, RecordDecoder, ValueFormat};
use crate::connectors::partitioned::{
    self, AbortOnDrop, Fetched, MAX_BATCH_DELAY, Part, PartitionedSource, Parts, Position,
    REPORT_EVERY, owner,
};

/// How long the reader waits for a message before it looks at its partitions again
/// (idleness, progress).
const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// Messages a consumer is asked for at once.
const PULL_BATCH: usize = 1024;
/// A pull request's idle heartbeat: two missed ones (a server gone) make the consumer again.
const HEARTBEAT: Duration = Duration::from_secs(1);
/// How long a pull request waits on the server for messages.
const PULL_EXPIRES: Duration = Duration::from_secs(5);
/// A consumer the server has not heard from for this long is removed by it (the pumps of a
/// crashed job leave theirs behind).
const INACTIVE_THRESHOLD: Duration = Duration::from_secs(60);
/// How long a partition may go without a consumer (the server unreachable) before the
/// source fails and the job restarts.
const GIVE_UP_AFTER: Duration = Duration::from_secs(120);
/// Runs of messages the pumps may hold for the reader: with [`PUMP_RUN`], up to 4,096
/// messages, so that a pump keeps pulling (a pump blocked on a full channel asks the server
/// for nothing, and each stall costs a round trip) while a slow job still holds it back.
const PUMPED: usize = 64;
/// The most messages in one run from a pump to its reader.
const PUMP_RUN: usize = 64;

/// Makes the subtasks of a NATS source.
pub struct NatsSourceFactory {
    spec: NatsSourceSpec,
    format: ValueFormat,
    node: String,
    /// With `durable`: the task that acknowledges completed checkpoints' sequences to it.
    acker: std::sync::Mutex<Option<Acker>>,
    /// The columns built per port (projection pushdown); empty: all of them.
    read: Vec<Vec<bool>>,
}

impl NatsSourceFactory {
    pub fn new(spec: &NatsSourceSpec, format: ValueFormat, node: &str) -> Self {
        Self {
            spec: spec.clone(),
            format,
            node: node.to_owned(),
            acker: std::sync::Mutex::new(None),
            read: Vec::new(),
        }
    }

    fn what(&self) -> String {
        format!("NATS source `{}`", self.node)
    }
}

impl SourceFactory for NatsSourceFactory {
    fn prepare(&self, _parallelism: usize) -> Result<Option<u64>, OperatorError> {
        Ok(None)
    }

    fn project(&self, read: &[Vec<bool>]) -> Option<Arc<dyn SourceFactory>> {
        Some(Arc::new(Self {
            read: read.to_vec(),
            ..Self::new(&self.spec, self.format.clone(), &self.node)
        }))
    }

    fn checkpoint_complete(&self, states: Vec<serde_json::Value>) {
        let Some(durable) = &self.spec.durable else {
            return;
        };
        let positions = partitioned::completed_positions(states);
        if positions.is_empty() {
            return;
        }
        let Ok(mut acker) = self.acker.lock() else {
            return;
        };
        if acker.is_none() {
            let Ok(handle) = tokio::runtime::Handle::try_current() else {
                return;
            };
            *acker = Some(Acker::start(&handle, &self.spec, durable, &self.what()));
        }
        if let Some(a) = acker.as_ref() {
            a.completed(positions);
        }
    }

    fn create(&self, ctx: &SubtaskContext) -> Result<Box<dyn Source>, OperatorError> {
        let what = self.what();
        let restored = partitioned::restored_positions(ctx, &what)?;
        let handle = tokio::runtime::Handle::try_current().map_err(|e| {
            OperatorError::Internal(format!("{what}: made outside a tokio runtime: {e}"))
        })?;
        let (tx, rx) = partitioned::channel();
        let owned: Vec<u32> = (0..self.spec.partitions)
            .filter(|p| owner(&self.spec.stream, *p as i32, ctx.parallelism) == ctx.subtask)
            .collect();
        // Until the reader has resolved them, a checkpoint records the restored positions of
        // the partitions this subtask owns (or none).
        let positions: Vec<Position> = restored
            .iter()
            .flatten()
            .filter(|p| p.topic == self.spec.stream && owned.contains(&(p.partition as u32)))
            .cloned()
            .collect();
        let idle = owned.is_empty() && self.spec.stop_at.is_none();
        let reader = Reader {
            spec: self.spec.clone(),
            decoder: RecordDecoder::new(
                &self.format,
                &self.spec.metadata,
                &ctx.want,
                ctx.batch_size,
            )
            .reading(&self.read),
            event_columns: partitioned::event_columns(
                &self.format.ports(&self.spec.metadata),
                self.spec.event_time.column.as_deref(),
            ),
            owned,
            restored,
            batch_size: ctx.batch_size.max(1),
            metrics: ctx.metrics.clone(),
            what,
        };
        let task = AbortOnDrop(handle.spawn(async move {
            if let Err(e) = reader.run(&tx).await {
                let _ = tx.send(Fetched::Failed(e)).await;
            }
        }));
        Ok(Box::new(PartitionedSource::new(
            rx,
            positions,
            idle,
            "a NATS reader task",
            Box::new(move || drop(task)),
        )))
    }
}

/// A subtask's reader: resolves its partitions, starts their pumps, decodes their messages.
struct Reader {
    spec: NatsSourceSpec,
    decoder: RecordDecoder<NatsMetadata>,
    event_columns: Vec<Option<usize>>,
    /// The partitions this subtask reads.
    owned: Vec<u32>,
    restored: Option<Vec<Position>>,
    batch_size: usize,
    metrics: Arc<SubtaskMetrics>,
    what: String,
}

/// What the reader needs of a message (moved twice on its way, so no more than that), with
/// what its reply subject says, parsed once (by the pump).
struct Pulled {
    message: Body,
    /// The stream sequence.
    seq: u64,
    /// Messages of the partition after this one.
    pending: u64,
    /// When the stream stored it, epoch milliseconds.
    time: i64,
}

/// A message's subject, headers and payload.
struct Body {
    subject: async_nats::Subject,
    headers: Option<async_nats::HeaderMap>,
    payload: bytes::Bytes,
}

impl From<async_nats::Message> for Body {
    fn from(m: async_nats::Message) -> Self {
        Body {
            subject: m.subject,
            headers: m.headers,
            payload: m.payload,
        }
    }
}

/// What a pump passes to its reader: messages go in runs (whatever the consumer had ready, up
/// to [`PUMP_RUN`]), so the channel's cost is paid per run, not per message.
enum Pumped {
    Messages(usize, Vec<Pulled>),
    /// The partition has reached its `stop-at` end.
    Done(usize),
    /// The partition's pending count (messages after the position), for lag.
    Pending(usize, u64),
    Failed(OperatorError),
}

impl Reader {
    async fn run(mut self, tx: &async_channel::Sender<Fetched>) -> Result<(), OperatorError> {
        let client = connect(&self.spec.servers, &self.spec.auth(), &self.what).await?;
        let js = super::jetstream(client, 1);
        let mut info_stream =
            stream(&js, &self.spec.stream, &self.spec.servers, &self.what).await?;
        let info = info_stream
            .info()
            .await
            .map_err(|e| {
                OperatorError::external(format!("{}: reading the stream's info", self.what), e)
            })?
            .clone();
        let last = info.state.last_sequence;
        let end = self
            .spec
            .stop_at
            .map(|NatsStopAt::End| i64::try_from(last.saturating_add(1)).unwrap_or(i64::MAX));
        let mut parts = Vec::new();
        for &p in &self.owned {
            let next = self.start(&js, p, last).await?;
            parts.push(Part::new(self.spec.stream.clone(), p as i32, next, end));
        }
        let mut parts = Parts::new(
            parts,
            self.event_columns.clone(),
            self.spec.event_time.idle_timeout.map(|d| d.0),
            self.spec.stop_at.is_some(),
        );
        let (pumped_tx, mut pumped) = mpsc::channel(PUMPED);
        let mut pumps = Vec::new();
        for i in 0..parts.len() {
            let part = parts.get(i);
            if part.done {
                continue;
            }
            let pump = Pump {
                js: js.clone(),
                stream: self.spec.stream.clone(),
                filter: partition_filter(self.spec.subjects.as_deref(), part.partition as u32),
                index: i,
                next: u64::try_from(part.next).unwrap_or(1).max(1),
                end: part.end.and_then(|e| u64::try_from(e).ok()),
                what: self.what.clone(),
            };
            pumps.push(AbortOnDrop(tokio::spawn(pump.run(pumped_tx.clone()))));
        }
        drop(pumped_tx);
        let mut last_seq = last;
        parts.report(&self.metrics, |p| end_of(p, last_seq));
        let mut reported = Instant::now();
        let mut was_idle = None;
        let mut buf = Vec::with_capacity(PUMPED);
        // Every pump has ended (each partition reached its end, or there are none).
        let mut drained = false;
        loop {
            if parts.bounded() && parts.all_done() {
                let batches = self.flush(&mut parts)?;
                if !batches.is_empty() {
                    let _ = tx.send(parts.progress(batches, false)).await;
                }
                let _ = tx.send(Fetched::End).await;
                return Ok(());
            }
            let started = Instant::now();
            let mut wait = POLL_INTERVAL;
            let mut changed = false;
            while self.decoder.buffered() < self.batch_size {
                if drained {
                    if !parts.all_done() {
                        return Err(OperatorError::Internal(format!(
                            "{}: a partition's consumer stopped before its end",
                            self.what
                        )));
                    }
                    // Nothing more will come: wait only to look at idleness again.
                    tokio::time::sleep(wait).await;
                    break;
                }
                buf.clear();
                match tokio::time::timeout(wait, pumped.recv_many(&mut buf, PUMPED)).await {
                    Err(_) => break,
                    Ok(0) => {
                        drained = true;
                        continue;
                    }
                    Ok(_) => {}
                }
                for item in buf.drain(..) {
                    match item {
                        Pumped::Messages(i, run) => {
                            for pulled in &run {
                                self.message(&mut parts, i, pulled)?;
                            }
                            // Once per run: reading the clock per message costs more.
                            parts.get_mut(i).last_record = Instant::now();
                        }
                        Pumped::Done(i) => {
                            parts.get_mut(i).done = true;
                            changed = true;
                        }
                        Pumped::Pending(i, pending) => {
                            let p = parts.get_mut(i);
                            p.pending = i64::try_from(pending).ok();
                        }
                        Pumped::Failed(e) => return Err(e),
                    }
                }
                wait = MAX_BATCH_DELAY.saturating_sub(started.elapsed());
                if wait.is_zero() {
                    break;
                }
            }
            let idle = parts.idle();
            if self.decoder.buffered() == 0 && was_idle == Some(idle) && !changed {
                if reported.elapsed() >= REPORT_EVERY {
                    // The stream's end moves while the subtask is quiet: read it for the lag.
                    if let Ok(info) = info_stream.info().await {
                        last_seq = info.state.last_sequence;
                    }
                    parts.report(&self.metrics, |p| end_of(p, last_seq));
                    reported = Instant::now();
                }
                continue;
            }
            was_idle = Some(idle);
            let batches = self.flush(&mut parts)?;
            parts.report(&self.metrics, |p| end_of(p, last_seq));
            reported = Instant::now();
            if tx.send(parts.progress(batches, idle)).await.is_err() {
                // The source is gone (its task stopped).
                return Ok(());
            }
        }
    }

    /// Where partition `p` starts: its restored position, else `start-from`.
    async fn start(
        &self,
        js: &jetstream::Context,
        p: u32,
        last: u64,
    ) -> Result<i64, OperatorError> {
        if let Some(restored) = &self.restored {
            return Ok(restored
                .iter()
                .find(|r| r.topic == self.spec.stream && r.partition == p as i32)
                .map_or(1, |r| r.offset));
        }
        let seq = match &self.spec.start_from {
            NatsStartFrom::Position(NatsStartPosition::First) => 1,
            NatsStartFrom::Position(NatsStartPosition::New) => last.saturating_add(1),
            NatsStartFrom::Sequence(n) => (*n).max(1),
            NatsStartFrom::Time(_) => {
                let at = self
                    .spec
                    .start_from
                    .time()
                    .map_err(OperatorError::Data)?
                    .map(|t| t.timestamp_nanos_opt().unwrap_or(i64::MAX))
                    .unwrap_or(0);
                self.first_at(js, p, at, last).await?
            }
        };
        Ok(i64::try_from(seq).unwrap_or(i64::MAX))
    }

    /// The sequence of partition `p`'s first message stored at or after `nanos` (epoch), or
    /// after the stream's last when there is none: read off a consumer made for the purpose.
    async fn first_at(
        &self,
        js: &jetstream::Context,
        p: u32,
        nanos: i64,
        last: u64,
    ) -> Result<u64, OperatorError> {
        let start_time = time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(nanos))
            .map_err(|e| OperatorError::Data(format!("{}: `start-from`: {e}", self.what)))?;
        let config = consumer::pull::Config {
            deliver_policy: consumer::DeliverPolicy::ByStartTime { start_time },
            ack_policy: consumer::AckPolicy::None,
            filter_subject: partition_filter(self.spec.subjects.as_deref(), p).unwrap_or_default(),
            inactive_threshold: INACTIVE_THRESHOLD,
            memory_storage: true,
            num_replicas: 1,
            ..Default::default()
        };
        let failed = |e: &dyn std::fmt::Display| {
            OperatorError::external_message(format!(
                "{}: looking up the first message after `start-from` in partition {p}: {e}",
                self.what
            ))
        };
        let consumer = js
            .create_consumer_on_stream(config, &self.spec.stream)
            .await
            .map_err(|e| failed(&e))?;
        let mut batch = consumer
            .fetch()
            .max_messages(1)
            .messages()
            .await
            .map_err(|e| failed(&e))?;
        let first = match batch.next().await {
            Some(Ok(m)) => m.info().map(|i| i.stream_sequence).ok(),
            _ => None,
        };
        let _ = js
            .delete_consumer_from_stream(&consumer.cached_info().name, &self.spec.stream)
            .await;
        Ok(first.unwrap_or(last.saturating_add(1)))
    }

    /// Decodes one message of partition `i` into the buffered rows.
    fn message(
        &mut self,
        parts: &mut Parts,
        i: usize,
        pulled: &Pulled,
    ) -> Result<(), OperatorError> {
        let Pulled {
            message,
            seq,
            pending,
            time,
        } = pulled;
        let (seq, pending, time) = (*seq, *pending, *time);
        let part = parts.get_mut(i);
        part.next = i64::try_from(seq.saturating_add(1)).unwrap_or(i64::MAX);
        part.pending = i64::try_from(pending).ok();
        let partition = i64::from(part.partition);
        SubtaskMetrics::add(&self.metrics.events, 1);
        let payload: &[u8] = &message.payload;
        let failure = if payload.len() as u64 > self.spec.max_message_size.0 {
            Some(format!(
                "the payload is {} bytes, more than `max-message-size` ({})",
                payload.len(),
                self.spec.max_message_size
            ))
        } else {
            let headers = self
                .decoder
                .wants(NatsMetadata::Headers)
                .then(|| headers_json(message.headers.as_ref()));
            let subject: &str = message.subject.as_ref();
            self.decoder
                .decode(
                    Some(payload),
                    |m| match m {
                        NatsMetadata::Subject => MetaValue::Text(Some(subject)),
                        NatsMetadata::Sequence => MetaValue::Int(i64::try_from(seq).ok()),
                        NatsMetadata::Time => MetaValue::Time(Some(time)),
                        NatsMetadata::Headers => MetaValue::Text(headers.as_deref()),
                        NatsMetadata::Partition => MetaValue::Int(Some(partition)),
                    },
                    i,
                )
                .err()
                .map(|e| e.to_string())
        };
        if let Some(reason) = failure {
            match self.spec.on_error {
                OnError::Skip => SubtaskMetrics::add(&self.metrics.skipped, 1),
                OnError::Fail => {
                    return Err(OperatorError::Data(format!(
                        "{}: stream {} subject {} sequence {seq}: {reason} (set `on-error: skip` \
                         to skip such messages)",
                        self.what, self.spec.stream, message.subject
                    )));
                }
            }
        }
        Ok(())
    }

    fn flush(
        &mut self,
        parts: &mut Parts,
    ) -> Result<Vec<(usize, arrow_array::RecordBatch)>, OperatorError> {
        let flushed = self.decoder.flush().map_err(OperatorError::Internal)?;
        Ok(parts.observe(flushed))
    }
}

/// The end of a partition for its progress: the stream's last sequence plus one (the position
/// a caught-up partition would have), never before the partition's own position.
fn end_of(part: &Part, last: u64) -> Option<i64> {
    let end = i64::try_from(last.saturating_add(1)).unwrap_or(i64::MAX);
    Some(end.max(part.next))
}

/// One partition's consumer: pulls its messages in order from `next` and passes them on.
struct Pump {
    js: jetstream::Context,
    stream: String,
    filter: Option<String>,
    index: usize,
    /// The stream sequence of the next message to pass on.
    next: u64,
    /// `stop-at`: the first sequence not read.
    end: Option<u64>,
    what: String,
}

/// How a consumer's run ended.
enum Ended {
    /// The partition reached its end, or the reader went away.
    Stop,
    /// The consumer must be made again at the position.
    Remake(String),
}

impl Pump {
    async fn run(mut self, out: mpsc::Sender<Pumped>) {
        let mut backoff = Duration::from_millis(100);
        let mut since = None::<Instant>;
        loop {
            match self.consume(&out, &mut since).await {
                Ok(Ended::Stop) => return,
                Ok(Ended::Remake(why)) => {
                    tracing::info!(target: "nats", "{}: remaking the consumer of partition {} at sequence {}: {why}", self.what, self.index, self.next);
                    backoff = Duration::from_millis(100);
                }
                Err(e) => {
                    let started = *since.get_or_insert_with(Instant::now);
                    if e.retry() == crate::api::error::Retry::Never
                        || started.elapsed() >= GIVE_UP_AFTER
                    {
                        let _ = out.send(Pumped::Failed(e)).await;
                        return;
                    }
                    tracing::warn!(target: "nats", "{e}; trying again in {backoff:?}");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                }
            }
        }
    }

    /// Makes a consumer at `next` and passes its messages on until it must be made again.
    async fn consume(
        &mut self,
        out: &mpsc::Sender<Pumped>,
        since: &mut Option<Instant>,
    ) -> Result<Ended, OperatorError> {
        let config = consumer::pull::Config {
            deliver_policy: consumer::DeliverPolicy::ByStartSequence {
                start_sequence: self.next,
            },
            ack_policy: consumer::AckPolicy::None,
            filter_subject: self.filter.clone().unwrap_or_default(),
            inactive_threshold: INACTIVE_THRESHOLD,
            memory_storage: true,
            num_replicas: 1,
            ..Default::default()
        };
        let consumer = self
            .js
            .create_consumer_on_stream(config, &self.stream)
            .await
            .map_err(|e| self.consumer_error(e))?;
        *since = None;
        let pending = consumer.cached_info().num_pending;
        if self.end.is_some() && pending == 0 {
            let _ = out.send(Pumped::Done(self.index)).await;
            return Ok(Ended::Stop);
        }
        let _ = out.send(Pumped::Pending(self.index, pending)).await;
        let name = consumer.cached_info().name.clone();
        let mut pull = Pull::start(&self.js, &self.stream, &name)
            .await
            .map_err(|e| OperatorError::external(format!("{}: pulling messages", self.what), e))?;
        let mut consumer_seq = 0u64;
        // Runs are as long as what the consumer had ready (often a few messages): each starts
        // small and grows, rather than reserving a whole run's room per send.
        let mut run = Vec::new();
        loop {
            // Wait for one message, then take what else is ready, up to a run.
            let mut next = match pull.next().await {
                Ok(m) => Some(m),
                Err(why) => return Ok(Ended::Remake(why)),
            };
            let mut ended = None;
            while let Some(message) = next.take() {
                let info = match message.status {
                    None | Some(async_nats::StatusCode::OK) => ack_info(&message),
                    Some(status) => match pull.status(status, &message) {
                        Ok(()) => None,
                        Err(why) => {
                            ended = Some(Ended::Remake(why));
                            break;
                        }
                    },
                };
                if let Some(info) = info {
                    if info.consumer_seq != consumer_seq + 1 {
                        ended = Some(Ended::Remake(format!(
                            "consumer sequence {} after {consumer_seq}",
                            info.consumer_seq
                        )));
                        break;
                    }
                    consumer_seq = info.consumer_seq;
                    let (seq, pending) = (info.stream_seq, info.pending);
                    if seq >= self.next {
                        if self.end.is_some_and(|end| seq >= end) {
                            ended = Some(Ended::Stop);
                            break;
                        }
                        self.next = seq + 1;
                        run.push(Pulled {
                            message: message.into(),
                            seq,
                            pending,
                            time: info.time,
                        });
                        let last = self.end.is_some_and(|end| seq + 1 >= end)
                            || (self.end.is_some() && pending == 0);
                        if last {
                            ended = Some(Ended::Stop);
                            break;
                        }
                    }
                }
                if run.len() >= PUMP_RUN {
                    break;
                }
                next = match pull.ready() {
                    Ok(next) => next,
                    Err(why) => {
                        ended = Some(Ended::Remake(why));
                        break;
                    }
                };
            }
            if !run.is_empty() {
                let taken = std::mem::take(&mut run);
                if out.send(Pumped::Messages(self.index, taken)).await.is_err() {
                    return Ok(Ended::Stop);
                }
            }
            match ended {
                Some(Ended::Stop) => {
                    let _ = out.send(Pumped::Done(self.index)).await;
                    return Ok(Ended::Stop);
                }
                Some(remake) => return Ok(remake),
                None => {}
            }
        }
    }

    /// Why a consumer could not be made: a stream that is gone is final.
    fn consumer_error(&self, e: jetstream::stream::ConsumerError) -> OperatorError {
        use jetstream::stream::ConsumerErrorKind as K;
        let message = format!(
            "{}: making a consumer of stream `{}` at sequence {}",
            self.what, self.stream, self.next
        );
        match e.kind() {
            K::JetStream(j) if j.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND => {
                OperatorError::refused(
                    format!("{message}: the stream `{}` does not exist", self.stream),
                    Some(Box::new(e)),
                )
            }
            _ => OperatorError::external(message, e),
        }
    }
}

/// A pull consumer's messages, read with the client's own subscription rather than
/// async-nats's JetStream stream, which clones its JetStream context into every message and
/// makes and drops a heartbeat timer for each (a third of the reader's time at a million
/// messages a second). The protocol is JetStream's: a request to
/// `$JS.API.CONSUMER.MSG.NEXT.<stream>.<consumer>` for [`PULL_BATCH`] messages, answered on
/// an inbox; a new request when half of those outstanding have come; status messages for an
/// expired request (408, with what it left undelivered), an idle heartbeat (100), and a
/// consumer gone (409).
struct Pull {
    client: async_nats::Client,
    subscriber: async_nats::Subscriber,
    request_subject: String,
    inbox: String,
    request: bytes::Bytes,
    /// Messages requested and neither delivered nor given up by their request.
    outstanding: usize,
    /// Two heartbeats' time without a message or heartbeat: the server is gone.
    silence: std::pin::Pin<Box<tokio::time::Sleep>>,
}

impl Pull {
    async fn start(
        js: &jetstream::Context,
        stream: &str,
        consumer: &str,
    ) -> Result<Self, async_nats::SubscribeError> {
        let client = js.client();
        let inbox = client.new_inbox();
        let subscriber = client.subscribe(inbox.clone()).await?;
        let request = serde_json::json!({
            "batch": PULL_BATCH,
            "expires": PULL_EXPIRES.as_nanos() as u64,
            "idle_heartbeat": HEARTBEAT.as_nanos() as u64,
        })
        .to_string();
        Ok(Self {
            client,
            subscriber,
            request_subject: format!("$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}"),
            inbox,
            request: bytes::Bytes::from(request),
            outstanding: 0,
            silence: Box::pin(tokio::time::sleep(HEARTBEAT * 2)),
        })
    }

    /// The next message (data or status), asking for more first when half of what was asked
    /// for has come. `Err`: why the consumer must be made again.
    async fn next(&mut self) -> Result<async_nats::Message, String> {
        self.request().await?;
        tokio::select! {
            message = self.subscriber.next() => {
                self.silence
                    .as_mut()
                    .reset(tokio::time::Instant::now() + HEARTBEAT * 2);
                let message = message.ok_or_else(|| "the subscription ended".to_owned())?;
                self.delivered(&message);
                Ok(message)
            }
            () = self.silence.as_mut() => Err("two heartbeats missed".to_owned()),
        }
    }

    /// A message that is ready now, without waiting (`None`: none is).
    fn ready(&mut self) -> Result<Option<async_nats::Message>, String> {
        match self.subscriber.next().now_or_never() {
            None => Ok(None),
            Some(Some(message)) => {
                self.delivered(&message);
                Ok(Some(message))
            }
            Some(None) => Err("the subscription ended".to_owned()),
        }
    }

    /// A data message is one fewer outstanding.
    fn delivered(&mut self, message: &async_nats::Message) {
        if matches!(message.status, None | Some(async_nats::StatusCode::OK)) {
            self.outstanding = self.outstanding.saturating_sub(1);
        }
    }

    async fn request(&mut self) -> Result<(), String> {
        if self.outstanding > PULL_BATCH / 2 {
            return Ok(());
        }
        self.client
            .publish_with_reply(
                self.request_subject.clone(),
                self.inbox.clone(),
                self.request.clone(),
            )
            .await
            .map_err(|e| format!("requesting messages: {e}"))?;
        self.outstanding += PULL_BATCH;
        Ok(())
    }

    /// Accounts for a status message. `Err`: why the consumer must be made again.
    fn status(
        &mut self,
        status: async_nats::StatusCode,
        message: &async_nats::Message,
    ) -> Result<(), String> {
        use async_nats::StatusCode as S;
        match status {
            S::IDLE_HEARTBEAT => Ok(()),
            // A request expired, or the server ended it: what it left undelivered is no longer
            // outstanding (all of it, when the server does not say).
            S::TIMEOUT | S::REQUEST_TERMINATED
                if message.description.as_deref() != Some("Consumer Deleted") =>
            {
                let left = message
                    .headers
                    .as_ref()
                    .and_then(|h| h.get("Nats-Pending-Messages"))
                    .and_then(|v| v.as_str().parse::<usize>().ok())
                    .unwrap_or(self.outstanding);
                self.outstanding = self.outstanding.saturating_sub(left);
                Ok(())
            }
            other => Err(format!(
                "status {other}{}",
                message
                    .description
                    .as_deref()
                    .map(|d| format!(" ({d})"))
                    .unwrap_or_default()
            )),
        }
    }
}

/// What a JetStream message's reply subject says of it.
struct AckInfo {
    stream_seq: u64,
    consumer_seq: u64,
    /// Messages of the consumer after this one.
    pending: u64,
    /// When the stream stored it, epoch milliseconds.
    time: i64,
}

/// Reads a JetStream message's reply subject: `$JS.ACK.<stream>.<consumer>.<delivered>.
/// <stream seq>.<consumer seq>.<nanos>.<pending>`, or with `<domain>.<account>` before the
/// stream and a token after (servers since 2.9). `None`: not a JetStream message.
fn ack_info(message: &async_nats::Message) -> Option<AckInfo> {
    let reply: &str = message.reply.as_ref()?.as_ref();
    let rest = reply.strip_prefix("$JS.ACK.")?;
    let mut tokens = [""; 12];
    let mut n = 0;
    for token in rest.split('.') {
        if n == tokens.len() {
            return None;
        }
        tokens[n] = token;
        n += 1;
    }
    // The tokens after stream and consumer: delivered, stream seq, consumer seq, time, pending.
    let at = match n {
        7 => 2,
        9.. => 4,
        _ => return None,
    };
    let number = |i: usize| tokens[at + i].parse::<u64>().ok();
    Some(AckInfo {
        stream_seq: number(1)?,
        consumer_seq: number(2)?,
        time: millis(i128::from(number(3)?)),
        pending: number(4)?,
    })
}

/// Acknowledges completed checkpoints' sequences to a durable consumer per partition, for
/// monitoring: `nats consumer info <stream> <durable>-<p>` then shows the job's progress.
/// One task, owned by the factory; it is told only the newest positions (older ones are
/// replaced, never queued).
struct Acker {
    positions: tokio::sync::watch::Sender<Vec<Position>>,
    _task: AbortOnDrop<()>,
}

impl Acker {
    fn start(
        handle: &tokio::runtime::Handle,
        spec: &NatsSourceSpec,
        durable: &str,
        what: &str,
    ) -> Self {
        let (positions, mut rx) = tokio::sync::watch::channel(Vec::<Position>::new());
        let spec = spec.clone();
        let durable = durable.to_owned();
        let what = what.to_owned();
        let task = handle.spawn(async move {
            let mut js = None;
            let mut acked: std::collections::HashMap<i32, u64> = Default::default();
            while rx.changed().await.is_ok() {
                let positions = rx.borrow_and_update().clone();
                if js.is_none() {
                    match connect(&spec.servers, &spec.auth(), &what).await {
                        Ok(client) => js = Some(super::jetstream(client, 1)),
                        Err(e) => {
                            tracing::warn!(target: "nats", "{what}: acknowledging to `{durable}`: {e}");
                            continue;
                        }
                    }
                }
                let Some(js) = js.as_ref() else { continue };
                for p in positions {
                    let upto = u64::try_from(p.offset).unwrap_or(0).saturating_sub(1);
                    if upto == 0 || acked.get(&p.partition).is_some_and(|a| *a >= upto) {
                        continue;
                    }
                    match ack_up_to(js, &spec, &durable, p.partition, upto).await {
                        Ok(()) => {
                            acked.insert(p.partition, upto);
                        }
                        Err(e) => {
                            tracing::warn!(target: "nats", "{what}: acknowledging to `{durable}-{}`: {e}", p.partition)
                        }
                    }
                }
            }
        });
        Acker {
            positions,
            _task: AbortOnDrop(task),
        }
    }

    fn completed(&self, positions: Vec<Position>) {
        let _ = self.positions.send(positions);
    }
}

/// Fetches partition `partition`'s durable consumer's messages (headers only) up to stream
/// sequence `upto` and acknowledges the last of them, which acknowledges all before it.
async fn ack_up_to(
    js: &jetstream::Context,
    spec: &NatsSourceSpec,
    durable: &str,
    partition: i32,
    upto: u64,
) -> Result<(), String> {
    let name = format!("{durable}-{partition}");
    let config = consumer::pull::Config {
        durable_name: Some(name.clone()),
        ack_policy: consumer::AckPolicy::All,
        headers_only: true,
        filter_subject: partition_filter(spec.subjects.as_deref(), partition as u32)
            .unwrap_or_default(),
        ..Default::default()
    };
    let consumer: consumer::PullConsumer = js
        .get_stream(&spec.stream)
        .await
        .map_err(|e| e.to_string())?
        .get_or_create_consumer(&name, config)
        .await
        .map_err(|e| e.to_string())?;
    loop {
        let mut batch = consumer
            .fetch()
            .max_messages(PULL_BATCH)
            .messages()
            .await
            .map_err(|e| e.to_string())?;
        let mut last = None;
        let mut reached = false;
        while let Some(Ok(m)) = batch.next().await {
            let Ok(seq) = m.info().map(|i| i.stream_sequence) else {
                continue;
            };
            if seq > upto {
                reached = true;
                break;
            }
            last = Some(m);
            if seq == upto {
                reached = true;
                break;
            }
        }
        let Some(m) = last else { return Ok(()) };
        m.ack().await.map_err(|e| e.to_string())?;
        if reached {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_reply(reply: Option<&str>) -> async_nats::Message {
        async_nats::Message {
            subject: "s.0".into(),
            reply: reply.map(Into::into),
            payload: bytes::Bytes::from_static(b"{}"),
            headers: None,
            status: None,
            description: None,
            length: 2,
        }
    }

    #[test]
    fn a_reply_subject_is_read_in_both_of_its_forms() {
        // Before servers 2.9: stream, consumer, delivered, stream seq, consumer seq, nanos,
        // pending.
        let old = ack_info(&with_reply(Some(
            "$JS.ACK.orders.c1.1.4021.17.1700000000123456789.950",
        )))
        .unwrap();
        assert_eq!(
            (old.stream_seq, old.consumer_seq, old.time, old.pending),
            (4021, 17, 1_700_000_000_123, 950)
        );
        // Since: domain and account hash before, a token after (or not).
        for reply in [
            "$JS.ACK._.AHASH.orders.c1.2.4022.18.1700000000999000000.0.tok",
            "$JS.ACK.hub.AHASH.orders.c1.2.4022.18.1700000000999000000.0",
        ] {
            let new = ack_info(&with_reply(Some(reply))).unwrap();
            assert_eq!(
                (new.stream_seq, new.consumer_seq, new.time, new.pending),
                (4022, 18, 1_700_000_000_999, 0),
                "{reply}"
            );
        }
    }

    #[test]
    fn what_is_not_a_jetstream_reply_is_no_info() {
        for reply in [
            None,
            Some("_INBOX.abc"),
            Some("$JS.ACK.orders.c1.1.4021.17.1700000000123456789"),
            Some("$JS.ACK.orders.c1.1.x.17.1700000000123456789.950"),
            Some("$JS.ACK.a.b.c.d.e.f.g.h.i.j.k.l.m"),
        ] {
            assert!(ack_info(&with_reply(reply)).is_none(), "{reply:?}");
        }
    }
}
