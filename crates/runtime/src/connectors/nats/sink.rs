//! The NATS sink: rows as JSON messages into a JetStream stream, at least once, or exactly once
//! through deterministic `Nats-Msg-Id`s and the stream's duplicate window (see the module docs
//! of [`super`]).
//!
//! # Exactly once (checkpoints on, `delivery: exactly-once`)
//! - Between barriers a subtask keeps its rows, encoded (subject and payload), in memory.
//! - At barrier `n` they become the subtask's transaction for snapshot `n`; every transaction
//!   not yet known to be committed goes into the checkpoint (the protocol of
//!   [`crate::api::two_phase`], whose stage here is `NatsStage`).
//! - When the checkpoint completes, the job commits: each transaction's rows are published in
//!   order, the `i`-th with the id `weir:<job>:<sink>:<writer>:<lineage>:<n>:<i>`, and the
//!   commit returns once the stream has acknowledged every one. A restore commits the
//!   transactions of its snapshot again; the server drops every message whose id it already
//!   stored within its duplicate window, so each row is stored once. The lineage (random per
//!   attempt, kept in the transaction) keeps a fresh run of the job, whose snapshot ids may
//!   repeat an earlier run's, from having its rows dropped as another run's duplicates.
//! - The window must cover the longest time between a first publish and its repeat: a
//!   transaction stays in checkpoints until one says it was committed (a checkpoint timeout
//!   at most), and a restart waits up to `restart.max-delay`. The sink refuses to start on a
//!   stream whose window is shorter.
//! - A repeat can come later than any window (a job resumed the next morning), so each commit
//!   is also recorded where the messages go: a *commit marker* per writer and lineage in a
//!   JetStream key-value bucket (`commit-markers`, `weir_commits` by default) says which
//!   snapshot's transaction was stored whole, and which one a commit began (and when). A
//!   commit of a transaction the marker says is stored publishes nothing; one that began more
//!   than half a window ago and never finished first reads the stream from that time (headers
//!   only) for the message ids already stored, and publishes only the others. A restore drops
//!   the markers of lineages its snapshot no longer holds.
//! - Every message carries `Weir-Checkpoint` (the snapshot) and `Weir-Sequence` (its position
//!   in the writer's transaction) headers: a retried commit stores what a broker failure lost
//!   *after* messages that followed it, so a consumer that needs one key's updates in order
//!   (an upsert stream) keeps, per key, the greatest (checkpoint, sequence) it has seen and
//!   drops an older one. One key's updates come from one writer when the sink's input is
//!   keyed (a keyed operator feeding it), which is what makes that order total.
//!
//! # At least once
//! Rows are published as they come (at most `max-in-flight` awaiting their acknowledgement);
//! every barrier and the end wait until all were acknowledged, so a checkpoint covers only
//! stored rows. A failure between barriers publishes the rows since the last checkpoint again.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arrow_array::RecordBatch;
use async_nats::jetstream::{self, context::PublishAckFuture, context::PublishErrorKind};
use bytes::Bytes;
use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use serde::{Deserialize, Serialize};

use weir_state::clock::now_ms;

use super::connect;
use super::spec::NatsSinkSpec;
pub use super::subjects::Subjects;
use crate::api::two_phase::{Committer, Recovered, Stage, TwoPhase};
use crate::api::{OperatorError, Sink, SnapshotTransaction, SubtaskContext};
use crate::connectors::kafka::spec::Delivery;
use crate::connectors::kafka::spec::KafkaSinkFormat;
use crate::connectors::partitioned::values::ValueEncoder;

/// One message: subject and payload.
type Record = (String, String);

/// The rows of one writer for one snapshot.
#[derive(Debug, Serialize, Deserialize)]
pub struct Transaction {
    writer: usize,
    snapshot: u64,
    /// The attempt that made it (random per attempt): part of every message id.
    lineage: String,
    records: Vec<Record>,
}

impl Transaction {
    /// Its message at `position`, for errors.
    fn place(&self, position: usize) -> Published {
        Published::Message {
            writer: self.writer,
            snapshot: self.snapshot,
            position,
        }
    }
}

impl SnapshotTransaction for Transaction {
    fn snapshot(&self) -> u64 {
        self.snapshot
    }
}

/// Rows to messages.
struct Encoder {
    values: ValueEncoder,
    subjects: Subjects,
}

impl Encoder {
    fn new(subjects: Subjects, format: KafkaSinkFormat) -> Self {
        Self {
            values: ValueEncoder::new(format, false, "NATS sink"),
            subjects,
        }
    }

    fn encode(&mut self, batch: &RecordBatch, out: &mut Vec<Record>) -> Result<(), OperatorError> {
        // Every row has a payload: `upsert-json`, whose deletes have none, is refused.
        let values = self
            .values
            .encode(batch)?
            .into_iter()
            .filter_map(|(row, v)| v.map(|v| (row, v)));
        match &self.subjects {
            Subjects::Literal(subject) => out.extend(values.map(|(_, v)| (subject.clone(), v))),
            Subjects::Computed(template) => {
                let subjects = template.subjects(batch)?;
                out.extend(values.filter_map(|(row, v)| Some((subjects.get(row)?.clone(), v))));
            }
        }
        Ok(())
    }
}

/// Headers every exactly-once message carries: its snapshot and its position in the
/// transaction, the version a consumer orders one key's updates by.
pub const CHECKPOINT_HEADER: &str = "Weir-Checkpoint";
pub const SEQUENCE_HEADER: &str = "Weir-Sequence";

/// A header name as the client keeps it, from a static string: no parse and no allocation,
/// as it is made for every message.
fn header_name(name: &'static str) -> async_nats::HeaderName {
    async_nats::HeaderName::from_static(name)
}

/// One writer's commit progress, kept in the commit-marker bucket.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Marker {
    /// The newest snapshot whose transaction is stored whole.
    done: u64,
    /// A commit that began and has not been seen to end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    started: Option<Started>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Started {
    snapshot: u64,
    /// When it began (epoch ms).
    at_ms: i64,
}

/// The commit markers of one sink: a key per writer and lineage in a JetStream key-value
/// bucket.
struct Markers {
    store: jetstream::kv::Store,
    bucket: String,
    /// `<job>.<sink>.`, each made safe as a key token.
    prefix: String,
    what: String,
}

/// `name` as one token of a key-value key (`[-_A-Za-z0-9]`; anything else becomes `_`).
fn key_token(name: &str) -> String {
    crate::config::paths::safe_name(name)
}

impl Markers {
    /// The bucket `bucket`, created (history 1, file storage) if missing.
    async fn open(
        js: &jetstream::Context,
        bucket: &str,
        job: &str,
        node: &str,
        what: String,
    ) -> Result<Self, OperatorError> {
        use jetstream::context::GetStreamErrorKind as K;
        let stream = format!("KV_{bucket}");
        let missing = match js.get_stream(&stream).await {
            Ok(_) => false,
            Err(e) => match e.kind() {
                K::JetStream(j) if j.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND => true,
                _ => {
                    return Err(OperatorError::external(
                        format!("{what}: reading the commit-marker bucket `{bucket}`"),
                        e,
                    ));
                }
            },
        };
        if missing {
            // The stream a key-value bucket is, made directly: the client's own bucket
            // creation first asks for account details a 2.9 server does not give.
            let config = jetstream::stream::Config {
                name: stream.clone(),
                description: Some("weir: which exactly-once commits are stored".into()),
                subjects: vec![format!("$KV.{bucket}.>")],
                max_messages_per_subject: 1,
                storage: jetstream::stream::StorageType::File,
                num_replicas: 1,
                allow_rollup: true,
                deny_delete: true,
                allow_direct: true,
                discard: jetstream::stream::DiscardPolicy::New,
                ..Default::default()
            };
            if let Err(e) = js.create_stream(config).await {
                use jetstream::context::CreateStreamErrorKind as C;
                // Made meanwhile by another writer of the job: fine.
                let exists = matches!(e.kind(), C::JetStream(j) if j.error_code() == jetstream::ErrorCode::STREAM_NAME_EXIST);
                if !exists {
                    return Err(match e.kind() {
                        C::TimedOut => OperatorError::external(
                            format!("{what}: creating the commit-marker bucket `{bucket}`"),
                            e,
                        ),
                        _ => OperatorError::refused(
                            format!(
                                "{what}: cannot create the commit-marker bucket `{bucket}` ({e}): \
                                 create it (`nats kv add {bucket} --history 1`) or allow this \
                                 user to, or name another with `commit-markers`"
                            ),
                            Some(Box::new(e)),
                        ),
                    });
                }
            }
        }
        let store = js.get_key_value(bucket).await.map_err(|e| {
            OperatorError::external(
                format!("{what}: opening the commit-marker bucket `{bucket}`"),
                e,
            )
        })?;
        Ok(Self {
            store,
            bucket: bucket.to_owned(),
            prefix: format!("{}.{}.", key_token(job), key_token(node)),
            what,
        })
    }

    fn key(&self, writer: usize, lineage: &str) -> String {
        format!("{}{writer}.{}", self.prefix, key_token(lineage))
    }

    fn failed(&self, doing: &str, e: impl Into<crate::api::error::BoxError>) -> OperatorError {
        OperatorError::external(
            format!(
                "{}: {doing} in the commit-marker bucket `{}`",
                self.what, self.bucket
            ),
            e,
        )
    }

    async fn get(&self, writer: usize, lineage: &str) -> Result<Marker, OperatorError> {
        let key = self.key(writer, lineage);
        match self
            .store
            .get(&key)
            .await
            .map_err(|e| self.failed("reading a marker", e))?
        {
            None => Ok(Marker::default()),
            Some(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
                OperatorError::Data(format!(
                    "{}: the commit marker `{key}` in `{}` is not weir's ({e}): remove it",
                    self.what, self.bucket
                ))
            }),
        }
    }

    async fn put(
        &self,
        writer: usize,
        lineage: &str,
        marker: &Marker,
    ) -> Result<(), OperatorError> {
        let value = serde_json::to_vec(marker)
            .map_err(|e| OperatorError::Internal(format!("encoding a commit marker: {e}")))?;
        self.store
            .put(self.key(writer, lineage), Bytes::from(value))
            .await
            .map(|_| ())
            .map_err(|e| self.failed("writing a marker", e))
    }

    /// Removes this sink's markers of lineages other than `keep`.
    async fn prune(&self, keep: &HashSet<String>) -> Result<(), OperatorError> {
        let mut keys = self
            .store
            .keys()
            .await
            .map_err(|e| self.failed("listing markers", e))?;
        let keep: HashSet<String> = keep.iter().map(|l| key_token(l)).collect();
        let mut stale = Vec::new();
        while let Some(key) = keys.next().await {
            let key = key.map_err(|e| self.failed("listing markers", e))?;
            let Some(rest) = key.strip_prefix(&self.prefix) else {
                continue;
            };
            if rest
                .split_once('.')
                .is_some_and(|(_, lineage)| !keep.contains(lineage))
            {
                stale.push(key);
            }
        }
        for key in stale {
            self.store
                .purge(&key)
                .await
                .map_err(|e| self.failed("removing a marker", e))?;
        }
        Ok(())
    }
}

/// What the factory and its commits share.
struct Shared {
    spec: NatsSinkSpec,
    job: String,
    node: String,
    /// The duplicate window an exactly-once sink needs (checkpoint timeout plus the longest
    /// restart delay).
    window_needed: Duration,
    /// Names this attempt's transactions; set by `prepare`.
    lineage: Mutex<String>,
    /// The connection commits publish through, made by `prepare`.
    js: tokio::sync::Mutex<Option<jetstream::Context>>,
    /// Per (writer, lineage), the newest snapshot whose transaction this process published
    /// and saw acknowledged. A transaction stays in checkpoints until one confirms its commit,
    /// so the next commit often holds it again: it is skipped without asking the marker.
    committed: Mutex<HashMap<(usize, String), u64>>,
    /// The stream the sink writes to and its duplicate window, found by `check_window`.
    stream: Mutex<Option<(String, Duration)>>,
    /// The commit markers, opened by the first exactly-once `prepare`.
    markers: tokio::sync::OnceCell<Markers>,
    /// Per (writer, lineage), the marker as this process last read or wrote it: a writer's
    /// marker changes only through its commits, which run one at a time, so it is read from
    /// the bucket once per lineage (a restored one), not once per commit.
    known: Mutex<HashMap<(usize, String), Marker>>,
    /// What the commits cost in round trips (see [`CommitStats`]).
    stats: CommitCounters,
}

/// The round trips exactly-once commits made, so far, in a sink's process. A commit of one
/// writer's transaction reads its marker at most once per lineage, writes it twice (begun,
/// stored), and waits for the stream's acknowledgements once, at its end, whatever the number
/// of messages: the publishes between are pipelined (`max-in-flight` at once).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CommitStats {
    /// Transactions published (not skipped as already stored).
    pub transactions: u64,
    /// Messages published.
    pub messages: u64,
    /// Commit markers read from the bucket.
    pub marker_reads: u64,
    /// Commit markers written to the bucket.
    pub marker_writes: u64,
    /// Times a commit waited for every acknowledgement still outstanding.
    pub drains: u64,
    /// The most publishes that awaited their acknowledgement at once: `max-in-flight` when a
    /// transaction is at least that long, as the publishes are pipelined.
    pub peak_in_flight: u64,
}

#[derive(Default)]
struct CommitCounters {
    transactions: AtomicU64,
    messages: AtomicU64,
    marker_reads: AtomicU64,
    marker_writes: AtomicU64,
    drains: AtomicU64,
    peak_in_flight: AtomicU64,
}

impl CommitCounters {
    fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    fn get(&self) -> CommitStats {
        CommitStats {
            transactions: self.transactions.load(Ordering::Relaxed),
            messages: self.messages.load(Ordering::Relaxed),
            marker_reads: self.marker_reads.load(Ordering::Relaxed),
            marker_writes: self.marker_writes.load(Ordering::Relaxed),
            drains: self.drains.load(Ordering::Relaxed),
            peak_in_flight: self.peak_in_flight.load(Ordering::Relaxed),
        }
    }
}

impl Shared {
    fn what(&self) -> String {
        format!("NATS sink `{}`", self.node)
    }

    async fn context(&self) -> Result<jetstream::Context, OperatorError> {
        let mut js = self.js.lock().await;
        if let Some(js) = js.as_ref() {
            return Ok(js.clone());
        }
        let client = connect(&self.spec.servers, &self.spec.auth(), &self.what()).await?;
        let context = super::jetstream(client, self.spec.max_in_flight as usize);
        *js = Some(context.clone());
        Ok(context)
    }

    /// What every message id of `t` begins with (its position follows).
    fn message_id_prefix(&self, t: &Transaction) -> String {
        format!(
            "weir:{}:{}:{}:{}:{}:",
            self.job, self.node, t.writer, t.lineage, t.snapshot
        )
    }

    /// The stream the sink's subjects belong to: `stream`, or the one that takes its literal
    /// subject. A server that answers that none does is final; one that does not answer (a
    /// timeout, JetStream restarting) may pass.
    async fn stream_name(&self, js: &jetstream::Context) -> Result<String, OperatorError> {
        use jetstream::context::GetStreamByNameErrorKind as K;
        let what = self.what();
        match &self.spec.stream {
            Some(name) => Ok(name.clone()),
            None => js
                .stream_by_subject(self.spec.subject.clone())
                .await
                .map_err(|e| match e.kind() {
                    K::NotFound | K::InvalidSubject => OperatorError::refused(
                        format!(
                            "{what}: no stream takes the subject `{}` on {} (create one that does)",
                            self.spec.subject, self.spec.servers
                        ),
                        Some(Box::new(e)),
                    ),
                    _ => OperatorError::external(
                        format!(
                            "{what}: asking {} which stream takes `{}`",
                            self.spec.servers, self.spec.subject
                        ),
                        e,
                    ),
                }),
        }
    }

    /// Refuses a stream whose duplicate window is shorter than the sink needs.
    async fn check_window(&self, js: &jetstream::Context) -> Result<(), OperatorError> {
        let what = self.what();
        let name = self.stream_name(js).await?;
        let mut stream = super::stream(js, &name, &self.spec.servers, &what).await?;
        let window = stream
            .info()
            .await
            .map_err(|e| OperatorError::external(format!("{what}: reading `{name}`"), e))?
            .config
            .duplicate_window;
        if let Ok(mut found) = self.stream.lock() {
            *found = Some((name.clone(), window));
        }
        if window < self.window_needed {
            return Err(OperatorError::refused(
                format!(
                    "{what}: the stream `{name}` keeps message ids for {} (its duplicate \
                     window), but an exactly-once commit may be repeated up to {} later (the \
                     checkpoint timeout plus the longest restart delay), and a repeat after the \
                     window would store the rows twice: give the stream a longer \
                     `duplicate_window`, or the job a shorter `checkpoint.timeout` or \
                     `restart.max-delay`, or use `delivery: at-least-once`",
                    humantime::format_duration(window),
                    humantime::format_duration(self.window_needed)
                ),
                None,
            ));
        }
        Ok(())
    }

    async fn markers(&self, js: &jetstream::Context) -> Result<&Markers, OperatorError> {
        self.markers
            .get_or_try_init(|| {
                Markers::open(
                    js,
                    &self.spec.commit_markers,
                    &self.job,
                    &self.node,
                    self.what(),
                )
            })
            .await
    }

    /// Publishes `transactions` in snapshot order per writer, each whole before the next,
    /// waiting for every acknowledgement and recording each in its writer's marker.
    /// Idempotent: a transaction its marker says is stored is skipped, and the messages of an
    /// interrupted one are dropped by the stream's duplicate window, or (once that may have
    /// passed) found in the stream and not published again.
    async fn commit(&self, mut list: Vec<Transaction>) -> Result<(), OperatorError> {
        if let Ok(committed) = self.committed.lock() {
            list.retain(|t| {
                committed
                    .get(&(t.writer, t.lineage.clone()))
                    .is_none_or(|done| t.snapshot > *done)
            });
        }
        if list.is_empty() {
            return Ok(());
        }
        list.sort_by_key(|t| (t.writer, t.snapshot));
        let js = self.context().await?;
        let markers = self.markers(&js).await?;
        let mut duplicates = 0u64;
        for mut t in list {
            let mut marker = self.marker(markers, &t).await?;
            if marker.done >= t.snapshot {
                self.remember(&t);
                continue;
            }
            let stored = match marker.started {
                Some(started) if started.snapshot == t.snapshot => {
                    self.already_stored(&js, &t, started).await?
                }
                _ => {
                    marker.started = Some(Started {
                        snapshot: t.snapshot,
                        at_ms: now_ms(),
                    });
                    self.put_marker(markers, &t, &marker).await?;
                    HashSet::new()
                }
            };
            let records = std::mem::take(&mut t.records);
            duplicates += self.publish(&js, &t, records, &stored).await?;
            marker.done = t.snapshot;
            marker.started = None;
            self.put_marker(markers, &t, &marker).await?;
            self.remember(&t);
        }
        if duplicates > 0 {
            tracing::info!(target: "nats", "{}: {duplicates} messages of a repeated commit were already stored (dropped by the stream as duplicates)", self.what());
        }
        Ok(())
    }

    /// `t`'s writer's marker: as this process last wrote it, else read from the bucket.
    async fn marker(&self, markers: &Markers, t: &Transaction) -> Result<Marker, OperatorError> {
        let key = (t.writer, t.lineage.clone());
        if let Some(marker) = self.known.lock().ok().and_then(|k| k.get(&key).cloned()) {
            return Ok(marker);
        }
        CommitCounters::add(&self.stats.marker_reads, 1);
        let marker = markers.get(t.writer, &t.lineage).await?;
        if let Ok(mut known) = self.known.lock() {
            known.insert(key, marker.clone());
        }
        Ok(marker)
    }

    async fn put_marker(
        &self,
        markers: &Markers,
        t: &Transaction,
        marker: &Marker,
    ) -> Result<(), OperatorError> {
        // Forgotten first: a write that fails may or may not have landed, so the next commit
        // reads the bucket again.
        let key = (t.writer, t.lineage.clone());
        if let Ok(mut known) = self.known.lock() {
            known.remove(&key);
        }
        CommitCounters::add(&self.stats.marker_writes, 1);
        markers.put(t.writer, &t.lineage, marker).await?;
        if let Ok(mut known) = self.known.lock() {
            known.insert(key, marker.clone());
        }
        Ok(())
    }

    fn remember(&self, t: &Transaction) {
        if let Ok(mut committed) = self.committed.lock() {
            let done = committed.entry((t.writer, t.lineage.clone())).or_default();
            *done = (*done).max(t.snapshot);
        }
    }

    /// Publishes `records`, `t`'s messages, but those at the positions `stored`; returns how
    /// many the stream dropped as duplicates. The publishes are pipelined (at most
    /// `max-in-flight` awaiting their acknowledgement) and the acknowledgements waited for
    /// once, at the end. Per message, only what differs is made: its id (the transaction's
    /// prefix and its position), its position's header, the map that holds them; the
    /// payload is moved, not copied.
    async fn publish(
        &self,
        js: &jetstream::Context,
        t: &Transaction,
        records: Vec<Record>,
        stored: &HashSet<usize>,
    ) -> Result<u64, OperatorError> {
        let what = self.what();
        let mut acks = Acks::new(self.spec.max_in_flight as usize, what.clone());
        let mut duplicates = 0;
        let checkpoint = async_nats::HeaderValue::from(t.snapshot.to_string());
        let prefix = self.message_id_prefix(t);
        let mut published = 0u64;
        for (i, (subject, payload)) in records.into_iter().enumerate() {
            if stored.contains(&i) {
                continue;
            }
            let mut headers = async_nats::HeaderMap::new();
            headers.insert(async_nats::header::NATS_MESSAGE_ID, message_id(&prefix, i));
            headers.insert(header_name(CHECKPOINT_HEADER), checkpoint.clone());
            headers.insert(header_name(SEQUENCE_HEADER), i.to_string());
            let message = jetstream::message::PublishMessage::build()
                .payload(Bytes::from(payload))
                .headers(headers);
            let ack = js
                .send_publish(subject, message)
                .await
                .map_err(|e| publish_error(&what, &t.place(i), e))?;
            published += 1;
            duplicates += acks.push(t.place(i), ack).await?;
        }
        duplicates += acks.wait_all().await?;
        CommitCounters::add(&self.stats.drains, 1);
        self.stats
            .peak_in_flight
            .fetch_max(acks.peak as u64, Ordering::Relaxed);
        CommitCounters::add(&self.stats.transactions, 1);
        CommitCounters::add(&self.stats.messages, published);
        Ok(duplicates)
    }

    /// The positions of `t`'s messages already in the stream, for a commit that began at
    /// `started` and never finished. Within half the duplicate window of its start the
    /// stream drops a repeat by itself (none are looked up); later, the stream is read from
    /// a minute before the start (headers only) for `t`'s message ids.
    async fn already_stored(
        &self,
        js: &jetstream::Context,
        t: &Transaction,
        started: Started,
    ) -> Result<HashSet<usize>, OperatorError> {
        let Some((stream, window)) = self.stream.lock().ok().and_then(|s| s.clone()) else {
            return Ok(HashSet::new());
        };
        let elapsed = Duration::from_millis(u64::try_from(now_ms() - started.at_ms).unwrap_or(0));
        if elapsed < window / 2 {
            return Ok(HashSet::new());
        }
        let what = self.what();
        tracing::info!(target: "nats", "{what}: the commit of snapshot {} (writer {}) began {} ago, longer than half the stream's duplicate window: reading `{stream}` for what it stored", t.snapshot, t.writer, humantime::format_duration(Duration::from_secs(elapsed.as_secs())));
        let failed = |e: &dyn std::fmt::Display| {
            OperatorError::external_message(format!(
                "{what}: reading `{stream}` for the messages of an interrupted commit: {e}"
            ))
        };
        let mut info = js.get_stream(&stream).await.map_err(|e| failed(&e))?;
        let last = info
            .info()
            .await
            .map_err(|e| failed(&e))?
            .state
            .last_sequence;
        let from_nanos = i128::from(started.at_ms.saturating_sub(60_000)) * 1_000_000;
        let start_time =
            time::OffsetDateTime::from_unix_timestamp_nanos(from_nanos).map_err(|e| failed(&e))?;
        let consumer = info
            .create_consumer(jetstream::consumer::pull::OrderedConfig {
                deliver_policy: jetstream::consumer::DeliverPolicy::ByStartTime { start_time },
                headers_only: true,
                ..Default::default()
            })
            .await
            .map_err(|e| failed(&e))?;
        if consumer.cached_info().num_pending == 0 {
            return Ok(HashSet::new());
        }
        let mut messages = consumer.messages().await.map_err(|e| failed(&e))?;
        let prefix = self.message_id_prefix(t);
        let prefix = prefix.as_str();
        let mut stored = HashSet::new();
        while let Some(message) = tokio::time::timeout(super::REQUEST_TIMEOUT, messages.next())
            .await
            .map_err(|_| failed(&"no message within the request timeout"))?
        {
            let message = message.map_err(|e| failed(&e))?;
            if let Some(i) = super::header(message.headers.as_ref(), "Nats-Msg-Id")
                .and_then(|id| id.strip_prefix(prefix))
                .and_then(|i| i.parse::<usize>().ok())
            {
                stored.insert(i);
            }
            if message.info().is_ok_and(|i| i.stream_sequence >= last) {
                break;
            }
        }
        tracing::info!(target: "nats", "{what}: {} of the {} messages of snapshot {}'s transaction (writer {}) were stored before the commit was interrupted", stored.len(), t.records.len(), t.snapshot, t.writer);
        Ok(stored)
    }
}

/// What a failed publish names: the subject (at least once), or the message's place in its
/// transaction (exactly once, where a subject is shared by many and the place says more).
enum Published {
    To(String),
    Message {
        writer: usize,
        snapshot: u64,
        position: usize,
    },
}

impl std::fmt::Display for Published {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Published::To(subject) => write!(f, "to `{subject}`"),
            Published::Message {
                writer,
                snapshot,
                position,
            } => write!(
                f,
                "of message {position} of snapshot {snapshot}'s transaction (writer {writer})"
            ),
        }
    }
}

/// Publishes awaiting their acknowledgement, at most `limit` at once.
struct Acks {
    pending: FuturesUnordered<
        BoxFuture<
            'static,
            (
                Published,
                Result<jetstream::publish::PublishAck, jetstream::context::PublishError>,
            ),
        >,
    >,
    limit: usize,
    /// The most that were pending at once.
    peak: usize,
    what: String,
}

impl Acks {
    fn new(limit: usize, what: String) -> Self {
        Self {
            pending: FuturesUnordered::new(),
            limit: limit.max(1),
            peak: 0,
            what,
        }
    }

    /// Adds one; waits for the oldest ones while `limit` are pending. Returns duplicates seen.
    async fn push(
        &mut self,
        published: Published,
        ack: PublishAckFuture,
    ) -> Result<u64, OperatorError> {
        self.pending
            .push(Box::pin(async move { (published, ack.await) }));
        self.peak = self.peak.max(self.pending.len());
        let mut duplicates = 0;
        while self.pending.len() >= self.limit {
            duplicates += self.next().await?;
        }
        Ok(duplicates)
    }

    async fn next(&mut self) -> Result<u64, OperatorError> {
        match self.pending.next().await {
            Some((_, Ok(ack))) => Ok(u64::from(ack.duplicate)),
            Some((published, Err(e))) => Err(publish_error(&self.what, &published, e)),
            None => Ok(0),
        }
    }

    /// Waits for every pending acknowledgement. Returns duplicates seen.
    async fn wait_all(&mut self) -> Result<u64, OperatorError> {
        let mut duplicates = 0;
        while !self.pending.is_empty() {
            duplicates += self.next().await?;
        }
        Ok(duplicates)
    }
}

/// A publish that failed: it may pass (the commit, or the job, is tried again). The client
/// says "stream not found" when nothing answered the publish, which is also what a server
/// restarting its JetStream answers for a few seconds: not final (that a stream takes the
/// subject is checked where the server can say so for certain, before the sink starts).
fn publish_error(
    what: &str,
    published: &Published,
    e: jetstream::context::PublishError,
) -> OperatorError {
    match e.kind() {
        PublishErrorKind::StreamNotFound => OperatorError::external(
            format!(
                "{what}: no stream answered the publish {published} (JetStream restarting, \
                 or no stream takes the subject)"
            ),
            e,
        ),
        _ => OperatorError::external(format!("{what}: the publish {published} failed"), e),
    }
}

/// The id of the message at `position` of a transaction whose ids begin with `prefix`
/// ([`Shared::message_id_prefix`]).
fn message_id(prefix: &str, position: usize) -> String {
    format!("{prefix}{position}")
}

/// A new lineage: unique per attempt in practice (time, process and a counter, hashed).
fn new_lineage() -> String {
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let seed = format!("{nanos}-{}-{n}", std::process::id());
    format!("{:016x}", xxhash_rust::xxh3::xxh3_64(seed.as_bytes()))
}

/// Makes the NATS sink's subtasks and commits their transactions.
pub struct NatsSinkFactory {
    shared: Arc<Shared>,
    subjects: Subjects,
}

impl NatsSinkFactory {
    /// `job` and `node` name the message ids; `window_needed` is what an exactly-once sink
    /// requires of the stream's duplicate window.
    pub fn new(
        spec: &NatsSinkSpec,
        subjects: Subjects,
        job: &str,
        node: &str,
        window_needed: Duration,
    ) -> Self {
        Self {
            shared: Arc::new(Shared {
                spec: spec.clone(),
                job: job.to_owned(),
                node: node.to_owned(),
                window_needed,
                lineage: Mutex::new(new_lineage()),
                js: tokio::sync::Mutex::new(None),
                committed: Mutex::new(HashMap::new()),
                stream: Mutex::new(None),
                markers: tokio::sync::OnceCell::new(),
                known: Mutex::new(HashMap::new()),
                stats: CommitCounters::default(),
            }),
            subjects,
        }
    }
}

impl NatsSinkFactory {
    /// The round trips this sink's exactly-once commits made so far (for tests that pin them).
    pub fn commit_stats(&self) -> CommitStats {
        self.shared.stats.get()
    }
}

impl Committer for NatsSinkFactory {
    type Transaction = Transaction;
    const SINK: &'static str = "NATS";

    fn recover(
        &self,
        _parallelism: usize,
        restored: Option<Recovered<Transaction>>,
    ) -> BoxFuture<'_, Result<(), OperatorError>> {
        let list = restored.map(|r| r.transactions).unwrap_or_default();
        Box::pin(async move {
            let js = self.shared.context().await?;
            if self.shared.spec.delivery != Delivery::ExactlyOnce {
                // A subject no stream takes is refused here, where the server says so for
                // certain (a publish finds only that nothing answered).
                if let Some(name) = &self.shared.spec.stream {
                    super::stream(&js, name, &self.shared.spec.servers, &self.shared.what())
                        .await?;
                } else if matches!(self.subjects, Subjects::Literal(_)) {
                    self.shared.stream_name(&js).await?;
                }
                return Ok(());
            }
            self.shared.check_window(&js).await?;
            let lineage = new_lineage();
            if let Ok(mut current) = self.shared.lineage.lock() {
                current.clone_from(&lineage);
            }
            // Markers of lineages this snapshot no longer holds are of runs no restore goes
            // back to: they go, so the bucket holds a few keys per sink, not one per attempt.
            let mut keep: HashSet<String> = list.iter().map(|t| t.lineage.clone()).collect();
            keep.insert(lineage);
            self.shared.commit(list).await?;
            self.shared.markers(&js).await?.prune(&keep).await
        })
    }

    fn create(&self, ctx: &SubtaskContext) -> Result<Box<dyn Sink>, OperatorError> {
        if self.shared.spec.delivery == Delivery::ExactlyOnce && ctx.checkpointing {
            let lineage = self
                .shared
                .lineage
                .lock()
                .map(|l| l.clone())
                .map_err(|_| OperatorError::Internal("the NATS sink's lineage lock".into()))?;
            return Ok(Box::new(TwoPhase::new(
                NatsStage {
                    writer: ctx.subtask,
                    lineage,
                    encoder: Encoder::new(self.subjects.clone(), self.shared.spec.format),
                    rows: Vec::new(),
                },
                ctx.checkpoint_base,
            )));
        }
        Ok(Box::new(DirectSink {
            shared: self.shared.clone(),
            js: None,
            encoder: Encoder::new(self.subjects.clone(), self.shared.spec.format),
            records: Vec::new(),
            acks: Acks::new(self.shared.spec.max_in_flight as usize, self.shared.what()),
        }))
    }

    fn commit(
        &self,
        transactions: Vec<Transaction>,
    ) -> BoxFuture<'static, Result<(), OperatorError>> {
        let shared = self.shared.clone();
        Box::pin(async move {
            if shared.spec.delivery != Delivery::ExactlyOnce {
                return Ok(());
            }
            shared.commit(transactions).await
        })
    }

    /// An aborted transaction's rows were never published: they exist only in the checkpoint.
    fn abort(&self, _transactions: Vec<Transaction>) -> Result<(), OperatorError> {
        Ok(())
    }
}

/// Exactly once: rows kept (encoded, with their subjects) until their checkpoint completes;
/// a pre-commit makes them the writer's transaction for the snapshot, durable in the
/// checkpoint.
struct NatsStage {
    writer: usize,
    lineage: String,
    encoder: Encoder,
    rows: Vec<Record>,
}

impl Stage for NatsStage {
    type Transaction = Transaction;

    fn write(&mut self, batch: RecordBatch) -> BoxFuture<'_, Result<(), OperatorError>> {
        let result = self.encoder.encode(&batch, &mut self.rows);
        Box::pin(async move { result })
    }

    fn pre_commit(
        &mut self,
        snapshot: u64,
    ) -> BoxFuture<'_, Result<Option<Transaction>, OperatorError>> {
        let t = (!self.rows.is_empty()).then(|| Transaction {
            writer: self.writer,
            snapshot,
            lineage: self.lineage.clone(),
            records: std::mem::take(&mut self.rows),
        });
        Box::pin(async move { Ok(t) })
    }
}

/// At least once: rows published as they come, all acknowledged at every barrier and the end.
struct DirectSink {
    shared: Arc<Shared>,
    js: Option<jetstream::Context>,
    encoder: Encoder,
    records: Vec<Record>,
    acks: Acks,
}

impl DirectSink {
    async fn publish(&mut self) -> Result<(), OperatorError> {
        let js = match &self.js {
            Some(js) => js.clone(),
            None => {
                let js = self.shared.context().await?;
                self.js = Some(js.clone());
                js
            }
        };
        let what = self.shared.what();
        for (subject, payload) in self.records.drain(..) {
            let ack = js
                .publish(subject.clone(), Bytes::from(payload))
                .await
                .map_err(|e| publish_error(&what, &Published::To(subject.clone()), e))?;
            self.acks.push(Published::To(subject), ack).await?;
        }
        Ok(())
    }
}

impl Sink for DirectSink {
    fn write(&mut self, batch: RecordBatch) -> BoxFuture<'_, Result<(), OperatorError>> {
        Box::pin(async move {
            self.records.clear();
            self.encoder.encode(&batch, &mut self.records)?;
            self.publish().await
        })
    }

    fn prepare_commit(
        &mut self,
        _checkpoint: u64,
        _committed: u64,
    ) -> BoxFuture<'_, Result<Option<serde_json::Value>, OperatorError>> {
        Box::pin(async move {
            self.acks.wait_all().await?;
            Ok(None)
        })
    }

    fn finish(
        &mut self,
        _committed: u64,
    ) -> BoxFuture<'_, Result<Option<serde_json::Value>, OperatorError>> {
        Box::pin(async move {
            self.acks.wait_all().await?;
            Ok(None)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Int64Array, StringArray};
    use arrow_schema::{DataType, Field, Schema};

    fn batch(ids: &[i64]) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, false),
        ]));
        let names: Vec<String> = ids.iter().map(|i| format!("n\n{i}")).collect();
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(ids.to_vec())),
                Arc::new(StringArray::from(names)),
            ],
        )
        .expect("batch")
    }

    /// Rows wait for their barrier; every unconfirmed transaction goes into each checkpoint;
    /// computed subjects go with their rows; ids are a pure function of the transaction.
    #[test]
    fn transactions_follow_barriers_and_ids_are_deterministic() {
        let subjects = Subjects::compile("out.{id - 1}", &batch(&[]).schema()).expect("template");
        let mut sink = TwoPhase::new(
            NatsStage {
                writer: 2,
                lineage: "l".into(),
                encoder: Encoder::new(subjects, KafkaSinkFormat::Json),
                rows: Vec::new(),
            },
            4,
        );
        let block = |f: BoxFuture<'_, Result<Option<serde_json::Value>, OperatorError>>| {
            futures::executor::block_on(f).expect("sink call")
        };
        futures::executor::block_on(sink.write(batch(&[1, 2]))).expect("write");
        let state = block(sink.prepare_commit(5, 4)).expect("a transaction");
        let list: Vec<Transaction> =
            crate::api::decode_transactions(vec![state], "NATS").expect("decode");
        assert_eq!(list.len(), 1);
        assert_eq!(
            list[0].records,
            vec![
                ("out.0".to_owned(), r#"{"id":1,"name":"n\n1"}"#.to_owned()),
                ("out.1".to_owned(), r#"{"id":2,"name":"n\n2"}"#.to_owned()),
            ]
        );
        let factory = NatsSinkFactory::new(
            &serde_json::from_value::<NatsSinkSpec>(
                crate::spec::yaml::parse("{from: x, servers: h, subject: s}")
                    .expect("yaml")
                    .value,
            )
            .expect("spec"),
            Subjects::Literal("s".into()),
            "job",
            "out",
            Duration::ZERO,
        );
        assert_eq!(
            message_id(&factory.shared.message_id_prefix(&list[0]), 1),
            "weir:job:out:2:l:5:1"
        );
        assert!(block(sink.prepare_commit(6, 5)).is_none());
    }
}
