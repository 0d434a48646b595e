//! The NATS sink: rows as JSON messages into a JetStream stream, at least once, or exactly once
//! through deterministic `Nats-Msg-Id`s and the stream's duplicate window (see the module docs
//! of [`super`]).
//!
//! # Exactly once (checkpoints on, `delivery: exactly-once`)
//! - Between barriers a subtask keeps its rows, encoded (subject and payload), in memory.
//! - At barrier `n` they become the subtask's transaction for snapshot `n`; every transaction
//!   not yet known to be committed goes into the checkpoint ([`Unconfirmed`]).
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
//!
//! # At least once
//! Rows are published as they come (at most `max-in-flight` awaiting their acknowledgement);
//! every barrier and the end wait until all were acknowledged, so a checkpoint covers only
//! stored rows. A failure between barriers publishes the rows since the last checkpoint again.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use arrow_array::RecordBatch;
use async_nats::jetstream::{self, context::PublishAckFuture, context::PublishErrorKind};
use bytes::Bytes;
use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use serde::{Deserialize, Serialize};

use super::connect;
use crate::api::{
    OperatorError, Sink, SinkFactory, SinkRestore, SnapshotTransaction, SubtaskContext,
    Unconfirmed, decode_transactions,
};
use crate::format::json::JsonEncoder;
use crate::spec::kafka::Delivery;
use crate::spec::nats::NatsSinkSpec;

/// Computes each row's subject from its columns (the `{expression}` parts of `subject`).
pub type SubjectFn = Arc<dyn Fn(&RecordBatch) -> Result<Vec<String>, OperatorError> + Send + Sync>;

/// Where a row goes.
#[derive(Clone)]
pub enum Subjects {
    Literal(String),
    Computed(SubjectFn),
}

/// One message: subject and payload.
type Record = (String, String);

/// The rows of one writer for one snapshot.
#[derive(Debug, Serialize, Deserialize)]
struct Transaction {
    writer: usize,
    snapshot: u64,
    /// The attempt that made it (random per attempt): part of every message id.
    lineage: String,
    records: Vec<Record>,
}

impl SnapshotTransaction for Transaction {
    fn snapshot(&self) -> u64 {
        self.snapshot
    }
}

/// Rows to messages.
struct Encoder {
    values: JsonEncoder,
    subjects: Subjects,
    buffer: Vec<u8>,
}

impl Encoder {
    fn new(subjects: Subjects) -> Self {
        Self {
            values: JsonEncoder::new(),
            subjects,
            buffer: Vec::new(),
        }
    }

    fn encode(&mut self, batch: &RecordBatch, out: &mut Vec<Record>) -> Result<(), OperatorError> {
        self.buffer.clear();
        self.values
            .encode(batch, &mut self.buffer)
            .map_err(|e| OperatorError::Data(format!("NATS sink: {e}")))?;
        let text = std::str::from_utf8(&self.buffer).map_err(|e| {
            OperatorError::Internal(format!("the JSON encoder wrote non-UTF-8: {e}"))
        })?;
        // JSON escapes line breaks inside strings: every '\n' ends a row.
        let values = text.lines().map(str::to_owned);
        match &self.subjects {
            Subjects::Literal(subject) => out.extend(values.map(|v| (subject.clone(), v))),
            Subjects::Computed(f) => {
                let subjects = f(batch)?;
                out.extend(subjects.into_iter().zip(values));
            }
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
    /// so the next commit often holds it again: it is skipped instead of published a second
    /// time (a restore, in a new process, publishes it again and the stream drops it).
    committed: Mutex<std::collections::HashMap<(usize, String), u64>>,
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

    fn message_id(&self, t: &Transaction, i: usize) -> String {
        format!(
            "weir:{}:{}:{}:{}:{}:{i}",
            self.job, self.node, t.writer, t.lineage, t.snapshot
        )
    }

    /// Refuses a stream whose duplicate window is shorter than the sink needs.
    async fn check_window(&self, js: &jetstream::Context) -> Result<(), OperatorError> {
        let what = self.what();
        let name = match &self.spec.stream {
            Some(name) => name.clone(),
            None => js
                .stream_by_subject(self.spec.subject.clone())
                .await
                .map_err(|e| {
                    OperatorError::refused(
                        format!(
                            "{what}: no stream takes the subject `{}` on {} ({e})",
                            self.spec.subject, self.spec.servers
                        ),
                        Some(Box::new(e)),
                    )
                })?,
        };
        let mut stream = super::stream(js, &name, &self.spec.servers, &what).await?;
        let window = stream
            .info()
            .await
            .map_err(|e| OperatorError::external(format!("{what}: reading `{name}`"), e))?
            .config
            .duplicate_window;
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

    /// Publishes `transactions` in snapshot order per writer, waiting for every
    /// acknowledgement. Idempotent within the stream's duplicate window.
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
        let mut acks = Acks::new(self.spec.max_in_flight as usize, self.what());
        let mut duplicates = 0u64;
        for t in &list {
            for (i, (subject, payload)) in t.records.iter().enumerate() {
                let message = jetstream::message::PublishMessage::build()
                    .payload(Bytes::from(payload.clone()))
                    .message_id(self.message_id(t, i));
                let ack = js
                    .send_publish(subject.clone(), message)
                    .await
                    .map_err(|e| publish_error(&self.what(), subject, e))?;
                duplicates += acks.push(subject.clone(), ack).await?;
            }
        }
        duplicates += acks.wait_all().await?;
        if let Ok(mut committed) = self.committed.lock() {
            for t in &list {
                let done = committed.entry((t.writer, t.lineage.clone())).or_default();
                *done = (*done).max(t.snapshot);
            }
        }
        if duplicates > 0 {
            tracing::info!(target: "nats", "{}: {duplicates} messages of a repeated commit were already stored (dropped by the stream as duplicates)", self.what());
        }
        Ok(())
    }
}

/// Publishes awaiting their acknowledgement, at most `limit` at once.
struct Acks {
    pending: FuturesUnordered<
        BoxFuture<
            'static,
            (
                String,
                Result<jetstream::publish::PublishAck, jetstream::context::PublishError>,
            ),
        >,
    >,
    limit: usize,
    what: String,
}

impl Acks {
    fn new(limit: usize, what: String) -> Self {
        Self {
            pending: FuturesUnordered::new(),
            limit: limit.max(1),
            what,
        }
    }

    /// Adds one; waits for the oldest ones while `limit` are pending. Returns duplicates seen.
    async fn push(&mut self, subject: String, ack: PublishAckFuture) -> Result<u64, OperatorError> {
        self.pending
            .push(Box::pin(async move { (subject, ack.await) }));
        let mut duplicates = 0;
        while self.pending.len() >= self.limit {
            duplicates += self.next().await?;
        }
        Ok(duplicates)
    }

    async fn next(&mut self) -> Result<u64, OperatorError> {
        match self.pending.next().await {
            Some((_, Ok(ack))) => Ok(u64::from(ack.duplicate)),
            Some((subject, Err(e))) => Err(publish_error(&self.what, &subject, e)),
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

/// A publish that failed: no stream for the subject is final; a timeout or a lost connection
/// may pass (the commit, or the job, is tried again).
fn publish_error(what: &str, subject: &str, e: jetstream::context::PublishError) -> OperatorError {
    match e.kind() {
        PublishErrorKind::StreamNotFound => OperatorError::refused(
            format!("{what}: no stream takes the subject `{subject}` (create one that does)"),
            Some(Box::new(e)),
        ),
        _ => OperatorError::external(format!("{what}: publishing to `{subject}`"), e),
    }
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
                committed: Mutex::new(std::collections::HashMap::new()),
            }),
            subjects,
        }
    }
}

impl SinkFactory for NatsSinkFactory {
    fn prepare(
        &self,
        _parallelism: usize,
        restore: Option<&SinkRestore>,
    ) -> BoxFuture<'_, Result<(), OperatorError>> {
        let restored = restore.map(|r| r.transactions.clone()).unwrap_or_default();
        Box::pin(async move {
            let js = self.shared.context().await?;
            if self.shared.spec.delivery != Delivery::ExactlyOnce {
                return Ok(());
            }
            self.shared.check_window(&js).await?;
            if let Ok(mut lineage) = self.shared.lineage.lock() {
                *lineage = new_lineage();
            }
            let list: Vec<Transaction> = decode_transactions(restored, "NATS")?;
            self.shared.commit(list).await
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
            return Ok(Box::new(TransactionalSink {
                writer: ctx.subtask,
                lineage,
                encoder: Encoder::new(self.subjects.clone()),
                rows: Vec::new(),
                pending: Unconfirmed::default(),
                last_barrier: ctx.checkpoint_base,
            }));
        }
        Ok(Box::new(DirectSink {
            shared: self.shared.clone(),
            js: None,
            encoder: Encoder::new(self.subjects.clone()),
            records: Vec::new(),
            acks: Acks::new(self.shared.spec.max_in_flight as usize, self.shared.what()),
        }))
    }

    fn commit(
        &self,
        states: Vec<serde_json::Value>,
    ) -> BoxFuture<'static, Result<(), OperatorError>> {
        let shared = self.shared.clone();
        Box::pin(async move {
            if shared.spec.delivery != Delivery::ExactlyOnce {
                return Ok(());
            }
            let list: Vec<Transaction> = decode_transactions(states, "NATS")?;
            shared.commit(list).await
        })
    }
}

/// Exactly once: rows kept until their checkpoint completes.
struct TransactionalSink {
    writer: usize,
    lineage: String,
    encoder: Encoder,
    rows: Vec<Record>,
    pending: Unconfirmed<Transaction>,
    last_barrier: u64,
}

impl TransactionalSink {
    fn seal(&mut self, snapshot: u64) {
        if !self.rows.is_empty() {
            self.pending.push(Transaction {
                writer: self.writer,
                snapshot,
                lineage: self.lineage.clone(),
                records: std::mem::take(&mut self.rows),
            });
        }
    }
}

impl Sink for TransactionalSink {
    fn write(&mut self, batch: RecordBatch) -> BoxFuture<'_, Result<(), OperatorError>> {
        let result = self.encoder.encode(&batch, &mut self.rows);
        Box::pin(async move { result })
    }

    fn prepare_commit(
        &mut self,
        checkpoint: u64,
        committed: u64,
    ) -> BoxFuture<'_, Result<Option<serde_json::Value>, OperatorError>> {
        self.seal(checkpoint);
        self.last_barrier = checkpoint;
        let state = self.pending.state(committed);
        Box::pin(async move { Ok(state) })
    }

    fn finish(
        &mut self,
        committed: u64,
    ) -> BoxFuture<'_, Result<Option<serde_json::Value>, OperatorError>> {
        // Named after the snapshot that follows the last barrier, as the Kafka sink's.
        self.seal(self.last_barrier + 1);
        let state = self.pending.state(committed);
        Box::pin(async move { Ok(state) })
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
                .map_err(|e| publish_error(&what, &subject, e))?;
            self.acks.push(subject, ack).await?;
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
        let subjects = Subjects::Computed(Arc::new(|b: &RecordBatch| {
            Ok((0..b.num_rows()).map(|i| format!("out.{i}")).collect())
        }));
        let mut sink = TransactionalSink {
            writer: 2,
            lineage: "l".into(),
            encoder: Encoder::new(subjects),
            rows: Vec::new(),
            pending: Unconfirmed::default(),
            last_barrier: 4,
        };
        let block = |f: BoxFuture<'_, Result<Option<serde_json::Value>, OperatorError>>| {
            futures::executor::block_on(f).expect("sink call")
        };
        futures::executor::block_on(sink.write(batch(&[1, 2]))).expect("write");
        let state = block(sink.prepare_commit(5, 4)).expect("a transaction");
        let list: Vec<Transaction> = decode_transactions(vec![state], "NATS").expect("decode");
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
            factory.shared.message_id(&list[0], 1),
            "weir:job:out:2:l:5:1"
        );
        assert!(block(sink.prepare_commit(6, 5)).is_none());
    }
}
