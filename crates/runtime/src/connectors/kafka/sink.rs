//! The Kafka sink: rows as JSON records, at least once, or exactly once through one Kafka
//! transaction per completed checkpoint with a commit marker (see the module docs of
//! [`super`]).
//!
//! # Exactly once (checkpoints on, `delivery: exactly-once`)
//! - Between barriers a subtask keeps its rows, encoded (key and value), in memory.
//! - At barrier `n` they become the subtask's transaction for snapshot `n`; every transaction
//!   not yet known to be committed goes into the checkpoint (the protocol of
//!   [`crate::api::two_phase`], whose stage here is `KafkaStage`).
//! - When the checkpoint completes, the job commits: per writer (the subtask that wrote the
//!   rows), a producer with transactional id `<prefix>-<writer>` writes the rows in one Kafka
//!   transaction that also commits the offset `n + 1` for the group
//!   `<prefix>-<writer>-<lineage>` (on partition 0 of the topic): the *marker*. The lineage is
//!   a random name of the attempt that made the transaction: snapshot ids are unique within
//!   one checkpoint history only, and a fresh run of the job must not take an earlier run's
//!   marker for its own. A commit first reads the marker and skips the
//!   transactions it covers, so committing again (on restore, after a crash mid-commit) never
//!   writes a row twice; the marker is written in the same transaction as the rows, so it
//!   cannot say "committed" for rows that are not.
//! - Opening a producer with a transactional id fences every earlier producer of that id and
//!   aborts what it left open: a restored job starts by opening the writers it inherits.
//!
//! Rows wait in memory and in checkpoints until their checkpoint completes, so the output
//! trails the input by about one checkpoint interval (as any exactly-once Kafka sink does:
//! `read_committed` consumers see a transaction only once it commits).
//!
//! # At least once
//! Rows are sent as they come (idempotent producer, `acks=all`); every barrier and the end
//! wait until all were acknowledged, so a checkpoint covers only delivered rows. A failure
//! between barriers sends the rows since the last checkpoint again.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arrow_array::{Array, RecordBatch};
use futures::future::BoxFuture;
use rdkafka::ClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerGroupMetadata};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::DeliveryResult;
use rdkafka::producer::{BaseRecord, Producer, ProducerContext, ThreadedProducer};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use serde::{Deserialize, Serialize};

use super::spec::{Delivery, KafkaSinkSpec};
use super::{Closing, REQUEST_TIMEOUT, client_config, external};
use crate::api::two_phase::{Committer, Recovered, Stage, TwoPhase};
use crate::api::{OperatorError, Sink, SnapshotTransaction, SubtaskContext};
use crate::connectors::partitioned::values::ValueEncoder;
use crate::format::json::JsonEncoder;

/// How long a producer may wait for its queue to drain before a send is retried.
const QUEUE_FULL_WAIT: Duration = Duration::from_millis(5);

/// One record: key and value (`None`: a record without a value, an `upsert-json` delete).
/// Checkpoints of earlier versions, whose values were all there, read back as they were.
type Record = (Option<String>, Option<String>);

/// The rows of one writer for one snapshot.
#[derive(Debug, Serialize, Deserialize)]
pub struct Transaction {
    writer: usize,
    snapshot: u64,
    /// The attempt that made it (random per attempt): snapshot ids are unique only within
    /// one job's checkpoint history, and a marker must not mistake another history's
    /// snapshot for this one's.
    lineage: String,
    records: Vec<Record>,
}

impl SnapshotTransaction for Transaction {
    fn snapshot(&self) -> u64 {
        self.snapshot
    }
}

/// Rows to records.
struct Encoder {
    values: ValueEncoder,
    keys: JsonEncoder,
    key: Vec<usize>,
}

impl Encoder {
    fn new(key: Vec<usize>, values: ValueEncoder) -> Self {
        Self {
            values,
            keys: JsonEncoder::new(),
            key,
        }
    }

    fn encode(&mut self, batch: &RecordBatch, out: &mut Vec<Record>) -> Result<(), OperatorError> {
        let values = self.values.encode(batch)?;
        let keys: Vec<Option<String>> = match self.key[..] {
            [] => vec![None; batch.num_rows()],
            // One column: its value as text (a string without quotes), as Kafka tools show keys.
            [column] => {
                let options = arrow_cast::display::FormatOptions::default().with_null("");
                let formatter =
                    arrow_cast::display::ArrayFormatter::try_new(batch.column(column), &options)
                        .map_err(|e| OperatorError::Data(format!("Kafka sink key: {e}")))?;
                (0..batch.num_rows())
                    .map(|row| {
                        (!batch.column(column).is_null(row))
                            .then(|| formatter.value(row).to_string())
                    })
                    .collect()
            }
            // Several: a JSON object of them.
            _ => {
                let projected = batch
                    .project(&self.key)
                    .map_err(|e| OperatorError::Internal(format!("projecting the key: {e}")))?;
                let mut buffer = Vec::new();
                lines(&mut self.keys, &projected, &mut buffer)?
                    .into_iter()
                    .map(Some)
                    .collect()
            }
        };
        out.extend(
            values
                .into_iter()
                .map(|(row, value)| (keys.get(row).cloned().flatten(), value)),
        );
        Ok(())
    }
}

/// The rows of `batch` as JSON object texts.
fn lines(
    encoder: &mut JsonEncoder,
    batch: &RecordBatch,
    buffer: &mut Vec<u8>,
) -> Result<Vec<String>, OperatorError> {
    buffer.clear();
    encoder
        .encode(batch, buffer)
        .map_err(|e| OperatorError::Data(format!("Kafka sink: {e}")))?;
    let text = std::str::from_utf8(buffer)
        .map_err(|e| OperatorError::Internal(format!("the JSON encoder wrote non-UTF-8: {e}")))?;
    // JSON escapes line breaks inside strings: every '\n' ends a row.
    Ok(text.lines().map(str::to_owned).collect())
}

/// Remembers the first failed delivery of an at-least-once producer.
#[derive(Default)]
struct Deliveries {
    failed: Mutex<Option<String>>,
}

impl ClientContext for Deliveries {
    fn error(&self, error: KafkaError, reason: &str) {
        super::client_error(&error, reason);
    }
}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((e, _)) = result
            && let Ok(mut failed) = self.failed.lock()
        {
            failed.get_or_insert_with(|| e.to_string());
        }
    }
}

type KafkaProducer = ThreadedProducer<Deliveries>;

/// Sends `records` to `topic`, waiting while the producer's queue is full.
fn send_all(producer: &KafkaProducer, topic: &str, records: &[Record]) -> Result<(), KafkaError> {
    for (key, value) in records {
        let mut record = BaseRecord::<str, str>::to(topic);
        if let Some(v) = value {
            record = record.payload(v.as_str());
        }
        if let Some(k) = key {
            record = record.key(k.as_str());
        }
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                    record = back;
                    std::thread::sleep(QUEUE_FULL_WAIT);
                }
                Err((e, _)) => return Err(e),
            }
        }
    }
    Ok(())
}

/// What the sink's factory and commits share.
struct Shared {
    spec: KafkaSinkSpec,
    prefix: String,
    /// Names this attempt's transactions (see [`Transaction::lineage`]); set by `prepare`.
    lineage: Mutex<String>,
    /// Transactional producers by writer index, opened (fenced) once per attempt.
    writers: tokio::sync::Mutex<HashMap<usize, Arc<KafkaProducer>>>,
    /// Marker consumers by group.
    markers: Mutex<HashMap<String, Arc<Marker>>>,
}

/// The consumer that reads a marker group and names it in transactions.
struct Marker {
    consumer: Closing<BaseConsumer>,
    group: ConsumerGroupMetadata,
}

impl Shared {
    fn transactional_id(&self, writer: usize) -> String {
        format!("{}-{writer}", self.prefix)
    }

    /// The marker group of a transaction: per writer and lineage, so that a marker only ever
    /// speaks of transactions of one timeline of snapshots (a fresh run of the job, whose
    /// snapshot ids start again, has markers of its own).
    fn marker_group(&self, t: &Transaction) -> String {
        format!("{}-{}-{}", self.prefix, t.writer, t.lineage)
    }

    /// Opens writer `writer`: fences earlier producers of its id and aborts what they left.
    fn open(&self, writer: usize) -> Result<KafkaProducer, OperatorError> {
        let id = self.transactional_id(writer);
        let producer: KafkaProducer = client_config(
            &self.spec.bootstrap_servers,
            &self.spec.properties,
            &[("transactional.id", &id), ("enable.idempotence", "true")],
        )
        .create_with_context(Deliveries::default())
        .and_then(|p: KafkaProducer| p.init_transactions(REQUEST_TIMEOUT).map(|()| p))
        .map_err(|e| {
            external(
                format!(
                    "Kafka sink: opening the transactional producer `{id}` on {}",
                    self.spec.bootstrap_servers
                ),
                e,
            )
        })?;
        Ok(producer)
    }

    fn marker(&self, group: &str) -> Result<Arc<Marker>, KafkaError> {
        let mut markers = self.markers.lock().map_err(|_| KafkaError::Canceled)?;
        if let Some(m) = markers.get(group) {
            return Ok(m.clone());
        }
        let consumer: Closing<BaseConsumer> = client_config(
            &self.spec.bootstrap_servers,
            &self.spec.properties,
            &[
                ("group.id", group),
                ("enable.auto.commit", "false"),
                ("isolation.level", "read_committed"),
            ],
        )
        .create()
        .map(Closing::new)?;
        let group_metadata = consumer.group_metadata().ok_or(KafkaError::Canceled)?;
        let marker = Arc::new(Marker {
            consumer,
            group: group_metadata,
        });
        markers.insert(group.to_owned(), marker.clone());
        Ok(marker)
    }

    /// The snapshot after the last one whose rows the marker's writer committed (0: none).
    /// A marker the cluster did not return is an error, never "none": that would write
    /// committed rows a second time.
    fn committed_up_to(&self, marker: &Marker) -> Result<u64, KafkaError> {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition(&self.spec.topic, 0);
        let committed = marker.consumer.committed_offsets(tpl, REQUEST_TIMEOUT)?;
        // librdkafka answers a failed request as a whole with `Err`, and a partition it could
        // not fetch with an error on that partition's entry (and no offset).
        let entry = committed
            .find_partition(&self.spec.topic, 0)
            .ok_or(KafkaError::OffsetFetch(RDKafkaErrorCode::UnknownPartition))?;
        entry.error()?;
        Ok(match entry.offset() {
            Offset::Offset(n) => u64::try_from(n).unwrap_or(0),
            // No offset committed for the group: no transaction of the marker's yet.
            _ => 0,
        })
    }

    /// Writes one transaction's rows with its marker, unless the marker says it was.
    fn commit_one(&self, producer: &KafkaProducer, t: &Transaction) -> Result<bool, KafkaError> {
        let marker = self.marker(&self.marker_group(t))?;
        if t.snapshot < self.committed_up_to(&marker)? {
            return Ok(false);
        }
        producer.begin_transaction()?;
        let written = (|| {
            send_all(producer, &self.spec.topic, &t.records)?;
            let mut offsets = TopicPartitionList::new();
            offsets.add_partition_offset(
                &self.spec.topic,
                0,
                Offset::Offset(i64::try_from(t.snapshot + 1).unwrap_or(i64::MAX)),
            )?;
            producer.send_offsets_to_transaction(&offsets, &marker.group, REQUEST_TIMEOUT)?;
            producer.commit_transaction(REQUEST_TIMEOUT)
        })();
        if let Err(e) = written {
            let _ = producer.abort_transaction(REQUEST_TIMEOUT);
            return Err(e);
        }
        Ok(true)
    }

    /// Commits `transactions` in snapshot order per writer. A writer whose commit failed is
    /// dropped (and opened again, fencing whatever it left, by the next commit).
    async fn commit(self: Arc<Self>, mut list: Vec<Transaction>) -> Result<(), OperatorError> {
        list.sort_by_key(|t| (t.writer, t.snapshot));
        let mut by_writer: BTreeMap<usize, Vec<Transaction>> = BTreeMap::new();
        for t in list {
            by_writer.entry(t.writer).or_default().push(t);
        }
        let mut writers = self.writers.lock().await;
        for (w, transactions) in by_writer {
            let producer = match writers.get(&w) {
                Some(producer) => producer.clone(),
                None => {
                    let shared = self.clone();
                    let producer = Arc::new(blocking_task(move || shared.open(w)).await??);
                    writers.insert(w, producer.clone());
                    producer
                }
            };
            let shared = self.clone();
            let result = blocking_task(move || {
                for t in &transactions {
                    shared.commit_one(&producer, t)?;
                }
                Ok::<(), KafkaError>(())
            })
            .await?;
            if let Err(e) = result {
                writers.remove(&w);
                let hint = if e.rdkafka_error_code() == Some(RDKafkaErrorCode::UnsupportedFeature) {
                    " (the broker cannot commit transactions: use `delivery: at-least-once` with it)"
                } else {
                    ""
                };
                return Err(external(
                    format!(
                        "Kafka sink: committing to topic `{}` as `{}`{hint}",
                        self.spec.topic,
                        self.transactional_id(w)
                    ),
                    e,
                ));
            }
        }
        Ok(())
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

/// Runs blocking librdkafka work off the async workers.
async fn blocking_task<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, OperatorError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| OperatorError::Internal(format!("a Kafka commit task failed: {e}")))
}

/// Makes the Kafka sink's subtasks and commits their transactions.
pub struct KafkaSinkFactory {
    shared: Arc<Shared>,
    key: Vec<usize>,
    /// `upsert-json`: the input's upsert key is the record key (see [`ValueEncoder`]).
    skip_before: bool,
}

impl KafkaSinkFactory {
    /// `key` holds the input columns (by index) that key each record; `skip_before` says the
    /// input's upsert key is the record key; `job` names the default transactional-id prefix,
    /// with `node`.
    pub fn new(
        spec: &KafkaSinkSpec,
        (key, skip_before): (Vec<usize>, bool),
        job: &str,
        node: &str,
    ) -> Self {
        let prefix = spec
            .transactional_id_prefix
            .clone()
            .unwrap_or_else(|| format!("weir-{job}-{node}"));
        Self {
            shared: Arc::new(Shared {
                spec: spec.clone(),
                prefix,
                lineage: Mutex::new(new_lineage()),
                writers: tokio::sync::Mutex::new(HashMap::new()),
                markers: Mutex::new(HashMap::new()),
            }),
            key,
            skip_before,
        }
    }

    fn encoder(&self) -> Encoder {
        Encoder::new(
            self.key.clone(),
            ValueEncoder::new(self.shared.spec.format, self.skip_before, "Kafka sink"),
        )
    }
}

impl Committer for KafkaSinkFactory {
    type Transaction = Transaction;
    const SINK: &'static str = "Kafka";

    fn recover(
        &self,
        parallelism: usize,
        restored: Option<Recovered<Transaction>>,
    ) -> BoxFuture<'_, Result<(), OperatorError>> {
        let list = restored.map(|r| r.transactions).unwrap_or_default();
        Box::pin(async move {
            if self.shared.spec.delivery != Delivery::ExactlyOnce {
                return Ok(());
            }
            if let Ok(mut lineage) = self.shared.lineage.lock() {
                *lineage = new_lineage();
            }
            // Open (fence) this attempt's writers and those the snapshot inherits, so nothing
            // an earlier incarnation left open survives; then commit what the snapshot holds.
            let mut ids: Vec<usize> = (0..parallelism).collect();
            ids.extend(list.iter().map(|t| t.writer));
            ids.sort_unstable();
            ids.dedup();
            {
                let mut writers = self.shared.writers.lock().await;
                writers.clear();
                for w in ids {
                    let shared = self.shared.clone();
                    let producer = blocking_task(move || shared.open(w)).await??;
                    writers.insert(w, Arc::new(producer));
                }
            }
            self.shared.clone().commit(list).await
        })
    }

    fn create(&self, ctx: &SubtaskContext) -> Result<Box<dyn Sink>, OperatorError> {
        let spec = &self.shared.spec;
        if spec.delivery == Delivery::ExactlyOnce && ctx.checkpointing {
            let lineage = self
                .shared
                .lineage
                .lock()
                .map(|l| l.clone())
                .map_err(|_| OperatorError::Internal("the Kafka sink's lineage lock".into()))?;
            return Ok(Box::new(TwoPhase::new(
                KafkaStage {
                    writer: ctx.subtask,
                    lineage,
                    encoder: self.encoder(),
                    rows: Vec::new(),
                },
                ctx.checkpoint_base,
            )));
        }
        let producer: KafkaProducer = client_config(
            &spec.bootstrap_servers,
            &spec.properties,
            &[("enable.idempotence", "true"), ("acks", "all")],
        )
        .create_with_context(Deliveries::default())
        .map_err(|e| {
            external(
                format!(
                    "Kafka sink: creating a producer for {}",
                    spec.bootstrap_servers
                ),
                e,
            )
        })?;
        Ok(Box::new(DirectSink {
            producer: Arc::new(producer),
            topic: spec.topic.clone(),
            encoder: self.encoder(),
            records: Vec::new(),
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

    /// An aborted transaction's rows were never sent: they exist only in the checkpoint.
    fn abort(&self, _transactions: Vec<Transaction>) -> Result<(), OperatorError> {
        Ok(())
    }
}

/// Exactly once: rows kept (encoded) until their checkpoint completes; a pre-commit makes
/// them the writer's transaction for the snapshot, durable in the checkpoint.
struct KafkaStage {
    writer: usize,
    lineage: String,
    encoder: Encoder,
    rows: Vec<Record>,
}

impl Stage for KafkaStage {
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

/// At least once: rows sent as they come, all acknowledged at every barrier and at the end.
struct DirectSink {
    producer: Arc<KafkaProducer>,
    topic: String,
    encoder: Encoder,
    records: Vec<Record>,
}

impl DirectSink {
    fn failed(&self) -> Result<(), OperatorError> {
        let failed = self
            .producer
            .context()
            .failed
            .lock()
            .map(|f| f.clone())
            .unwrap_or_else(|_| Some("the delivery report lock was poisoned".into()));
        match failed {
            Some(e) => Err(OperatorError::external_message(format!(
                "Kafka sink: a record to topic `{}` failed: {e}",
                self.topic
            ))),
            None => Ok(()),
        }
    }

    /// Waits until every record sent was acknowledged (or failed).
    async fn flush(&mut self) -> Result<(), OperatorError> {
        let producer = self.producer.clone();
        blocking_task(move || producer.flush(REQUEST_TIMEOUT))
            .await?
            .map_err(|e| {
                external(
                    format!("Kafka sink: flushing records to topic `{}`", self.topic),
                    e,
                )
            })?;
        self.failed()
    }
}

impl Sink for DirectSink {
    fn write(&mut self, batch: RecordBatch) -> BoxFuture<'_, Result<(), OperatorError>> {
        Box::pin(async move {
            self.failed()?;
            self.records.clear();
            self.encoder.encode(&batch, &mut self.records)?;
            let producer = self.producer.clone();
            let topic = self.topic.clone();
            let records = std::mem::take(&mut self.records);
            // Sends return at once unless the producer's queue is full, when they wait for it
            // to drain: off the async workers.
            blocking_task(move || send_all(&producer, &topic, &records))
                .await?
                .map_err(|e| {
                    external(
                        format!("Kafka sink: sending records to topic `{}`", self.topic),
                        e,
                    )
                })
        })
    }

    fn prepare_commit(
        &mut self,
        _checkpoint: u64,
        _committed: u64,
    ) -> BoxFuture<'_, Result<Option<serde_json::Value>, OperatorError>> {
        Box::pin(async move {
            self.flush().await?;
            Ok(None)
        })
    }

    fn finish(
        &mut self,
        _committed: u64,
    ) -> BoxFuture<'_, Result<Option<serde_json::Value>, OperatorError>> {
        Box::pin(async move {
            self.flush().await?;
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

    fn json() -> ValueEncoder {
        ValueEncoder::new(
            crate::connectors::kafka::spec::KafkaSinkFormat::Json,
            false,
            "t",
        )
    }

    fn pending(state: Option<serde_json::Value>) -> Vec<Transaction> {
        state.map_or_else(Vec::new, |s| {
            crate::api::decode_transactions(vec![s], "Kafka").expect("transactions")
        })
    }

    /// Rows wait for their barrier, every unconfirmed transaction goes into each checkpoint,
    /// and a transaction is forgotten once a later checkpoint says it was committed.
    #[test]
    fn transactions_follow_barriers_and_commits() {
        let mut sink = TwoPhase::new(
            KafkaStage {
                writer: 3,
                lineage: "l".into(),
                encoder: Encoder::new(vec![0], json()),
                rows: Vec::new(),
            },
            10,
        );
        let block = |f: BoxFuture<'_, Result<Option<serde_json::Value>, OperatorError>>| {
            futures::executor::block_on(f).expect("sink call")
        };
        futures::executor::block_on(sink.write(batch(&[1, 2]))).expect("write");
        let at_11 = pending(block(sink.prepare_commit(11, 10)));
        assert_eq!(at_11.len(), 1);
        assert_eq!((at_11[0].writer, at_11[0].snapshot), (3, 11));
        assert_eq!(
            at_11[0].records,
            vec![
                (Some("1".into()), Some(r#"{"id":1,"name":"n\n1"}"#.into())),
                (Some("2".into()), Some(r#"{"id":2,"name":"n\n2"}"#.into())),
            ]
        );
        futures::executor::block_on(sink.write(batch(&[3]))).expect("write");
        // 11 not confirmed yet: both go into checkpoint 12.
        let at_12 = pending(block(sink.prepare_commit(12, 10)));
        assert_eq!(
            at_12.iter().map(|t| t.snapshot).collect::<Vec<_>>(),
            [11, 12]
        );
        // 12 confirmed: nothing left, and a barrier without rows adds nothing.
        assert!(pending(block(sink.prepare_commit(13, 12))).is_empty());
        futures::executor::block_on(sink.write(batch(&[4]))).expect("write");
        let last = pending(block(sink.finish(12)));
        assert_eq!(last.iter().map(|t| t.snapshot).collect::<Vec<_>>(), [14]);
    }

    #[test]
    fn keys_are_one_column_as_text_or_several_as_an_object() {
        let b = batch(&[7]);
        let mut rows = Vec::new();
        Encoder::new(vec![1], json())
            .encode(&b, &mut rows)
            .expect("encode");
        assert_eq!(rows[0].0.as_deref(), Some("n\n7"));
        rows.clear();
        Encoder::new(vec![0, 1], json())
            .encode(&b, &mut rows)
            .expect("encode");
        assert_eq!(rows[0].0.as_deref(), Some(r#"{"id":7,"name":"n\n7"}"#));
    }

    fn shared(servers: &str, topic: &str) -> Shared {
        let spec: KafkaSinkSpec = serde_json::from_value(serde_json::json!({
            "from": "in",
            "bootstrap-servers": servers,
            "topic": topic,
            "delivery": "exactly-once",
        }))
        .expect("spec");
        Shared {
            spec,
            prefix: "t".into(),
            lineage: Mutex::new("l".into()),
            writers: tokio::sync::Mutex::new(HashMap::new()),
            markers: Mutex::new(HashMap::new()),
        }
    }

    /// A marker the cluster answers for without an offset reads as "nothing committed"; one it
    /// answers for with an error on the partition (librdkafka's mock cluster does for a topic
    /// it does not have) is an error, not "nothing committed", which would write the
    /// transaction's rows a second time.
    #[test]
    fn a_marker_that_could_not_be_read_is_an_error_not_nothing_committed() {
        let mock = rdkafka::mocking::MockCluster::new(1).expect("mock cluster");
        mock.create_topic("out", 1, 1).expect("topic");
        let servers = mock.bootstrap_servers();
        let t = Transaction {
            writer: 0,
            snapshot: 1,
            lineage: "l".into(),
            records: Vec::new(),
        };
        let known = shared(&servers, "out");
        let marker = known.marker(&known.marker_group(&t)).expect("marker");
        assert_eq!(known.committed_up_to(&marker).expect("read"), 0);
        let unknown = shared(&servers, "not-there");
        let marker = unknown.marker(&unknown.marker_group(&t)).expect("marker");
        let read = unknown.committed_up_to(&marker);
        assert!(
            matches!(
                read,
                Err(KafkaError::OffsetFetch(
                    RDKafkaErrorCode::UnknownTopicOrPartition
                ))
            ),
            "{read:?}"
        );
    }
}
