//! The source's one subtask and the reader task behind it: checks, the snapshot, the stream.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use futures::future::BoxFuture;
use pg_walstream::{
    CancellationToken, ColumnValue, EventType, LogicalReplicationStream, ReplicationError,
    ReplicationSlotOptions, ReplicationStreamConfig, RetryConfig, RowData, SharedLsnFeedback,
};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::spec::SnapshotMode;
use super::values::{Rows, readable_as};
use crate::api::metrics::PartitionProgress;
use crate::api::{OperatorError, Source, SourceEvent, SourceFactory, SubtaskContext};
use crate::changelog::RowKind;
use crate::config::OnError;
use crate::connectors::postgres::tls::PgConnect;
use crate::format::json::ScalarType;

/// The prefix of the source's heartbeat messages in the WAL.
const HEARTBEAT_PREFIX: &str = "weir.heartbeat";

/// Chunks the reader may hold ready for the subtask: a bounded queue, so a slow job holds the
/// reader (and the replication stream behind it) back rather than buffering without bound.
const QUEUED_CHUNKS: usize = 4;

/// Where the source is, as a checkpoint records it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Position {
    /// The slot this position is in.
    pub slot: String,
    /// Every transaction committed before this LSN has been emitted (its rows, or nothing for
    /// a transaction that touched no table of the source); the stream resumes here. While the
    /// snapshot is read, the slot's consistent point.
    pub lsn: u64,
    /// The snapshot's progress, while it is read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<SnapshotProgress>,
}

/// How far the snapshot got: tables before `table` are copied, and of `table` the rows up to
/// the key `after` (in key order).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotProgress {
    pub table: usize,
    /// The key's values (PostgreSQL's text form) of the last row emitted of `table`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<Vec<Option<String>>>,
    /// Rows emitted of `table`.
    #[serde(default)]
    pub rows: u64,
}

/// One table as planned.
#[derive(Debug)]
pub struct TablePlan {
    pub schema_name: String,
    pub table_name: String,
    /// The port's schema: the declared columns, then the row kind.
    pub port: SchemaRef,
    pub columns: Vec<String>,
    pub types: Vec<ScalarType>,
    /// Indexes of the key's columns among `columns`.
    pub key: Vec<usize>,
}

impl TablePlan {
    fn display(&self) -> String {
        format!("{}.{}", self.schema_name, self.table_name)
    }

    fn quoted(&self) -> String {
        format!("{}.{}", ident(&self.schema_name), ident(&self.table_name))
    }
}

/// What the factory and the subtask share.
#[derive(Debug)]
pub struct Shared {
    pub connect: PgConnect,
    /// The connection string with `replication=database`, for the replication connection.
    pub replication: String,
    pub tables: Vec<TablePlan>,
    pub slot: String,
    pub publication: String,
    pub create: bool,
    pub snapshot: SnapshotMode,
    pub fetch: u32,
    pub heartbeat: Duration,
    pub on_error: OnError,
    /// The running stream's feedback to the server: the position a completed checkpoint
    /// covers becomes the slot's confirmed position through it.
    pub feedback: Mutex<Option<Arc<SharedLsnFeedback>>>,
    /// The position of the latest completed checkpoint, for the reader to confirm at once.
    pub confirmed: AtomicU64,
}

impl Shared {
    fn table_index(&self, schema: &str, table: &str) -> Option<usize> {
        self.tables
            .iter()
            .position(|t| t.schema_name == schema && t.table_name == table)
    }
}

/// Makes the source's subtask and confirms positions to the slot.
pub struct CdcFactory {
    pub shared: Arc<Shared>,
}

impl SourceFactory for CdcFactory {
    fn prepare(&self, _parallelism: usize) -> Result<Option<u64>, OperatorError> {
        Ok(None)
    }

    fn create(&self, ctx: &SubtaskContext) -> Result<Box<dyn Source>, OperatorError> {
        let restored = match &ctx.restore {
            None => None,
            Some(restore) => {
                let mut found = None;
                for state in restore.own_states() {
                    let p: Position = serde_json::from_value(state.clone()).map_err(|e| {
                        OperatorError::Data(format!(
                            "postgres-cdc: a checkpointed position is not valid: {e}"
                        ))
                    })?;
                    found = Some(p);
                }
                found
            }
        };
        if let Some(p) = &restored
            && p.slot != self.shared.slot
        {
            return Err(OperatorError::refused(
                format!(
                    "postgres-cdc: the checkpoint was taken reading slot `{}`, and the job now \
                     names slot `{}`: its position means nothing in another slot; restore \
                     with the old slot, or start afresh (without --from) to copy the tables again",
                    p.slot, self.shared.slot
                ),
                None,
            ));
        }
        let (tx, rx) = mpsc::channel(QUEUED_CHUNKS);
        let reader = Reader {
            shared: self.shared.clone(),
            tx: tx.clone(),
            metrics: ctx.metrics.clone(),
            batch_rows: ctx.batch_size.max(1),
            progress: Vec::new(),
            wal_end: Arc::new(AtomicU64::new(0)),
            type_oids: Vec::new(),
        };
        let position = restored.clone();
        let task = tokio::spawn(async move {
            if let Err(e) = reader.run(restored).await {
                // The subtask reads this error next; if it is gone, so is the job.
                let _ = tx.send(Err(e)).await;
            }
        });
        Ok(Box::new(CdcSource {
            rx,
            reader: task,
            position,
        }))
    }

    fn checkpoint_complete(&self, states: Vec<serde_json::Value>) {
        let lsn = states
            .into_iter()
            .filter_map(|s| serde_json::from_value::<Position>(s).ok())
            .map(|p| p.lsn)
            .max();
        let feedback = self.shared.feedback.lock().ok().and_then(|f| f.clone());
        if let (Some(lsn), Some(feedback)) = (lsn, feedback) {
            feedback.update_flushed_lsn(lsn);
            feedback.update_applied_lsn(lsn);
            self.shared.confirmed.fetch_max(lsn, Ordering::Relaxed);
        }
    }
}

/// Rows of whole transactions (or of one fetch of the snapshot) and the position after them.
struct Chunk {
    batches: Vec<(usize, RecordBatch)>,
    position: Position,
}

/// The subtask: reads what its reader task sends. The task belongs to it (aborted on drop).
pub struct CdcSource {
    rx: mpsc::Receiver<Result<Chunk, OperatorError>>,
    reader: JoinHandle<()>,
    position: Option<Position>,
}

impl Drop for CdcSource {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

impl Source for CdcSource {
    fn next(&mut self) -> BoxFuture<'_, Result<SourceEvent, OperatorError>> {
        Box::pin(async move {
            loop {
                // `recv` is cancel-safe: a chunk is either taken whole, or left in the queue.
                match self.rx.recv().await {
                    Some(Ok(chunk)) => {
                        self.position = Some(chunk.position);
                        if !chunk.batches.is_empty() {
                            return Ok(SourceEvent::Batches(chunk.batches));
                        }
                    }
                    Some(Err(e)) => return Err(e),
                    None => {
                        return Err(OperatorError::Internal(
                            "postgres-cdc: the reader task ended without a word".into(),
                        ));
                    }
                }
            }
        })
    }

    fn snapshot(&mut self) -> Result<Option<serde_json::Value>, OperatorError> {
        self.position
            .as_ref()
            .map(serde_json::to_value)
            .transpose()
            .map_err(|e| OperatorError::Internal(format!("postgres-cdc position: {e}")))
    }
}

/// A task aborted when its handle is dropped.
struct Owned(JoinHandle<()>);

impl Drop for Owned {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The table as the server describes it, checked against the declared columns.
struct Described {
    /// Type OIDs of the declared columns, in declared order.
    type_oids: Vec<u32>,
    /// Type names of the key's columns (`format_type`), for the snapshot's key comparisons.
    key_types: Vec<String>,
    /// The planner's estimate of its rows, for progress.
    estimate: i64,
}

struct Reader {
    shared: Arc<Shared>,
    tx: mpsc::Sender<Result<Chunk, OperatorError>>,
    metrics: Arc<crate::api::SubtaskMetrics>,
    batch_rows: usize,
    /// Per table's snapshot progress, then the stream's.
    progress: Vec<PartitionProgress>,
    /// The server's WAL position, as the heartbeat last read it.
    wal_end: Arc<AtomicU64>,
    /// Each table's declared columns' type OIDs when the job started.
    type_oids: Vec<Vec<u32>>,
}

impl Reader {
    async fn run(mut self, restored: Option<Position>) -> Result<(), OperatorError> {
        let shared = self.shared.clone();
        let (client, driver) = shared
            .connect
            .connect()
            .await
            .map_err(|e| pg_error(&e, "connecting"))?;
        let _driver = Owned(driver);
        client
            .batch_execute("SET TIME ZONE 'UTC'")
            .await
            .map_err(|e| pg_error(&e, "setting the time zone"))?;
        let wal_level: String = client
            .query_one("SHOW wal_level", &[])
            .await
            .map_err(|e| pg_error(&e, "reading wal_level"))?
            .get(0);
        if wal_level != "logical" {
            return Err(OperatorError::refused(
                format!(
                    "postgres-cdc: the server's wal_level is `{wal_level}`; logical replication \
                     needs `wal_level = logical` (in postgresql.conf, or ALTER SYSTEM SET \
                     wal_level = logical; then restart the server)"
                ),
                None,
            ));
        }
        let mut described = Vec::new();
        for table in &shared.tables {
            described.push(describe(&client, table).await?);
        }
        self.type_oids = described.iter().map(|d| d.type_oids.clone()).collect();
        self.progress = shared
            .tables
            .iter()
            .zip(&described)
            .map(|(t, d)| PartitionProgress {
                topic: format!("{} (snapshot)", t.display()),
                partition: 0,
                position: 0,
                end: Some(d.estimate.max(0)),
                pending: None,
            })
            .chain(std::iter::once(PartitionProgress {
                topic: format!("{} (wal)", shared.slot),
                partition: 0,
                position: 0,
                end: None,
                pending: None,
            }))
            .collect();
        ensure_publication(&client, &shared).await?;
        let slot = slot_state(&client, &shared.slot).await?;
        if let Some(SlotState {
            active: Some(pid), ..
        }) = slot
        {
            return Err(OperatorError::external_message(format!(
                "postgres-cdc: slot `{}` is in use by the server's process {pid} (an earlier \
                 run of the job still ending, or another reader); retrying",
                shared.slot
            )));
        }
        let config = ReplicationStreamConfig::builder(&shared.slot, &shared.publication)
            .with_protocol_version(1)
            .with_messages(true)
            .with_feedback_interval(Duration::from_secs(1))
            .with_connection_timeout(Duration::from_secs(10))
            .with_health_check_interval(Duration::from_secs(30))
            .with_retry_config(RetryConfig {
                max_attempts: 3,
                initial_delay: Duration::from_millis(200),
                max_delay: Duration::from_secs(2),
                multiplier: 2.0,
                max_duration: Duration::from_secs(10),
                jitter: true,
            });
        let (stream, lsn) = match restored {
            Some(position) => {
                let Some(slot) = slot else {
                    return Err(OperatorError::refused(
                        format!(
                            "postgres-cdc: slot `{}` is gone (dropped by hand?), and with it the \
                             changes since the checkpoint: they cannot be read again. Start the \
                             job afresh (without --from) to copy the tables anew",
                            shared.slot
                        ),
                        None,
                    ));
                };
                if slot.confirmed > position.lsn {
                    return Err(OperatorError::refused(
                        format!(
                            "postgres-cdc: slot `{}` has confirmed changes up to {}, past the \
                             restored checkpoint's {}: the changes between them are gone from \
                             the slot. Restore the latest checkpoint, or start afresh",
                            shared.slot,
                            lsn_text(slot.confirmed),
                            lsn_text(position.lsn)
                        ),
                        None,
                    ));
                }
                let stream = open(&shared, config).await?;
                self.send(Vec::new(), position.clone()).await?;
                if let Some(progress) = position.snapshot {
                    // A snapshot cut short: its exported snapshot died with the run that read
                    // it. The rest of the tables is read at a new snapshot, later than the
                    // slot's consistent point: changes between the two arrive again from the
                    // stream, where they re-apply what the copy already shows (an upsert of
                    // the same row, a delete of a row that is gone), and each key's last
                    // change is still its last.
                    tracing::info!(
                        table = %shared.tables.get(progress.table).map(TablePlan::display).unwrap_or_default(),
                        rows = progress.rows,
                        "postgres-cdc: resuming a copy cut short, after its last key, at a new snapshot"
                    );
                    client
                        .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                        .await
                        .map_err(|e| pg_error(&e, "starting the snapshot"))?;
                    self.copy(&client, &described, progress, position.lsn)
                        .await?;
                }
                (stream, position.lsn)
            }
            None => self.fresh(&client, &described, slot, config).await?,
        };
        self.follow(stream, lsn).await
    }

    /// A fresh start: the slot made (and the tables copied at its snapshot), returning the
    /// stream and where it starts.
    async fn fresh(
        &mut self,
        client: &tokio_postgres::Client,
        described: &[Described],
        slot: Option<SlotState>,
        config: ReplicationStreamConfig,
    ) -> Result<(LogicalReplicationStream, u64), OperatorError> {
        let shared = self.shared.clone();
        let no_slot = |what: &str| {
            OperatorError::refused(
                format!(
                    "postgres-cdc: slot `{}` {what}; set `create: true` to let the job make it",
                    shared.slot
                ),
                None,
            )
        };
        if shared.snapshot == SnapshotMode::Never {
            let stream = match slot {
                Some(_) => open(&shared, config).await?,
                None if shared.create => create_slot(&shared, config, "nothing").await?,
                None => return Err(no_slot("does not exist")),
            };
            let lsn = slot_state(client, &shared.slot)
                .await?
                .map_or(0, |s| s.confirmed);
            self.send_at(Vec::new(), lsn, None).await?;
            return Ok((stream, lsn));
        }
        if slot.is_some() {
            if !shared.create {
                return Err(no_slot(
                    "exists, and a fresh start's snapshot needs a new slot (its exported \
                     snapshot is the copy's point in time)",
                ));
            }
            tracing::info!(slot = %shared.slot, "postgres-cdc: a fresh start drops the slot an earlier run left, to copy the tables at a new one");
            client
                .execute("SELECT pg_drop_replication_slot($1)", &[&shared.slot])
                .await
                .map_err(|e| pg_error(&e, "dropping the earlier run's slot"))?;
        } else if !shared.create {
            return Err(no_slot("does not exist"));
        }
        let stream = create_slot(&shared, config, "export").await?;
        let name = stream
            .exported_snapshot_name()
            .ok_or_else(|| {
                OperatorError::external_message(
                    "postgres-cdc: the new slot exported no snapshot (another reader made it \
                     first?); retrying",
                )
            })?
            .to_owned();
        client
            .batch_execute(&format!(
                "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SET TRANSACTION SNAPSHOT {}",
                literal(&name)
            ))
            .await
            .map_err(|e| pg_error(&e, "importing the slot's snapshot"))?;
        let lsn = slot_state(client, &shared.slot)
            .await?
            .map_or(0, |s| s.confirmed);
        let progress = SnapshotProgress {
            table: 0,
            after: None,
            rows: 0,
        };
        self.send_at(Vec::new(), lsn, Some(progress.clone()))
            .await?;
        self.copy(client, described, progress, lsn).await?;
        Ok((stream, lsn))
    }

    /// Copies the tables from `from` on, in key order, inside the transaction the caller
    /// began (at the snapshot it set), which this commits.
    async fn copy(
        &mut self,
        client: &tokio_postgres::Client,
        described: &[Described],
        from: SnapshotProgress,
        lsn: u64,
    ) -> Result<(), OperatorError> {
        let shared = self.shared.clone();
        for (i, table) in shared.tables.iter().enumerate().skip(from.table) {
            let (mut after, mut rows) = if i == from.table {
                (from.after.clone(), from.rows)
            } else {
                (None, 0)
            };
            let columns: Vec<String> = table
                .columns
                .iter()
                .map(|c| format!("{}::text", ident(c)))
                .collect();
            // The key qualified by the table's alias: a bare name in ORDER BY would name the
            // output column of the same name, its text, and order `10` before `9`.
            let key: Vec<String> = table
                .key
                .iter()
                .map(|&k| format!("weir_t.{}", ident(&table.columns[k])))
                .collect();
            let mut declare = format!(
                "DECLARE weir_cdc NO SCROLL CURSOR FOR SELECT {} FROM {} AS weir_t",
                columns.join(", "),
                table.quoted()
            );
            let values: Vec<Option<String>> = after.clone().unwrap_or_default();
            if after.is_some() {
                let bound: Vec<String> = described[i]
                    .key_types
                    .iter()
                    .enumerate()
                    .map(|(j, ty)| format!("${}::text::{ty}", j + 1))
                    .collect();
                declare.push_str(&format!(
                    " WHERE ({}) > ({})",
                    key.join(", "),
                    bound.join(", ")
                ));
            }
            declare.push_str(&format!(" ORDER BY {}", key.join(", ")));
            let params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = values
                .iter()
                .map(|v| v as &(dyn tokio_postgres::types::ToSql + Sync))
                .collect();
            client
                .execute(declare.as_str(), &params)
                .await
                .map_err(|e| pg_error(&e, &format!("reading `{}`", table.display())))?;
            let fetch = format!("FETCH {} FROM weir_cdc", shared.fetch);
            loop {
                let messages = client
                    .simple_query(&fetch)
                    .await
                    .map_err(|e| pg_error(&e, &format!("reading `{}`", table.display())))?;
                let mut out = Rows::new(table.port.clone(), table.types.clone());
                let mut batches = Vec::new();
                let mut fetched = 0usize;
                for message in &messages {
                    let tokio_postgres::SimpleQueryMessage::Row(row) = message else {
                        continue;
                    };
                    fetched += 1;
                    if let Err((c, why)) = out.push(RowKind::UpdateAfter, |c| row.get(c)) {
                        self.bad_value(table, c, why, "the snapshot")?;
                    }
                    after = Some(
                        table
                            .key
                            .iter()
                            .map(|&k| row.get(k).map(str::to_owned))
                            .collect(),
                    );
                    if out.len() >= self.batch_rows {
                        batches.push((i, finish(&mut out)?));
                    }
                }
                if !out.is_empty() {
                    batches.push((i, finish(&mut out)?));
                }
                if fetched == 0 {
                    break;
                }
                rows += fetched as u64;
                self.count(fetched);
                if let Some(p) = self.progress.get_mut(i) {
                    p.position = rows as i64;
                    p.end = p.end.map(|e| e.max(rows as i64));
                }
                self.publish_progress();
                let progress = SnapshotProgress {
                    table: i,
                    after: after.clone(),
                    rows,
                };
                self.send_at(batches, lsn, Some(progress)).await?;
            }
            client
                .batch_execute("CLOSE weir_cdc")
                .await
                .map_err(|e| pg_error(&e, &format!("reading `{}`", table.display())))?;
            if let Some(p) = self.progress.get_mut(i) {
                p.end = Some(rows as i64);
            }
        }
        client
            .batch_execute("COMMIT")
            .await
            .map_err(|e| pg_error(&e, "ending the snapshot"))?;
        self.send_at(Vec::new(), lsn, None).await
    }

    /// Follows the slot from `lsn`: each transaction's changes to the tables, sent whole at its
    /// commit with the position after it.
    async fn follow(
        &mut self,
        mut stream: LogicalReplicationStream,
        lsn: u64,
    ) -> Result<(), OperatorError> {
        let shared = self.shared.clone();
        stream
            .start((lsn > 0).then_some(lsn))
            .await
            .map_err(repl_error)?;
        if let Ok(mut feedback) = shared.feedback.lock() {
            *feedback = Some(stream.shared_lsn_feedback.clone());
        }
        let _heartbeat = Owned(tokio::spawn(heartbeat(
            shared.connect.clone(),
            shared.heartbeat,
            self.wal_end.clone(),
        )));
        // No reconnects inside the library: a lost connection fails the run, which restarts
        // from its checkpoint.
        let cancel = CancellationToken::new();
        let mut emitted = lsn;
        let mut confirmed = 0;
        let mut txn: Option<Txn> = None;
        loop {
            // A checkpoint completed since the last event: its position is confirmed to the
            // server now (the library would wait for 128 messages or the server's ping).
            let covered = shared.confirmed.load(Ordering::Relaxed);
            if covered > confirmed {
                confirmed = covered;
                if let Err(e) = stream.send_feedback().await {
                    tracing::warn!(error = %e, "postgres-cdc: confirming a position failed");
                }
            }
            let event = stream.next_event(&cancel).await.map_err(repl_error)?;
            match event.event_type {
                EventType::Begin { .. } => {
                    // A reconnect replays from the confirmed position: a transaction begun
                    // again starts empty.
                    txn = Some(Txn::new(&shared));
                }
                EventType::Insert {
                    schema,
                    table,
                    data,
                    ..
                } => {
                    if let (Some(i), Some(t)) = (shared.table_index(&schema, &table), &mut txn) {
                        self.change(t, i, None, &data)?;
                    }
                }
                EventType::Update {
                    schema,
                    table,
                    old_data,
                    new_data,
                    ..
                } => {
                    if let (Some(i), Some(t)) = (shared.table_index(&schema, &table), &mut txn) {
                        self.change(t, i, old_data.as_ref(), &new_data)?;
                    }
                }
                EventType::Delete {
                    schema,
                    table,
                    old_data,
                    ..
                } => {
                    if let (Some(i), Some(t)) = (shared.table_index(&schema, &table), &mut txn) {
                        self.delete(t, i, &old_data)?;
                    }
                }
                EventType::Truncate { tables, .. } => {
                    let ours: Vec<&str> = tables
                        .iter()
                        .map(|t| t.as_ref())
                        .filter(|t| {
                            shared
                                .tables
                                .iter()
                                .any(|p| *t == p.display() || *t == p.table_name)
                        })
                        .collect();
                    if !ours.is_empty() {
                        return Err(OperatorError::refused(
                            format!(
                                "postgres-cdc: `{}` was truncated (at {}); weir does not follow a \
                                 TRUNCATE, which says nothing of the rows it removes. Empty the \
                                 job's outputs to match, then start the job afresh (without \
                                 --from) to copy the tables anew",
                                ours.join("`, `"),
                                lsn_text(event.lsn.value())
                            ),
                            None,
                        ));
                    }
                }
                EventType::Relation {
                    namespace,
                    relation_name,
                    columns,
                    ..
                } => {
                    if let Some(i) = shared.table_index(&namespace, &relation_name) {
                        self.check_relation(i, &columns)?;
                    }
                }
                EventType::Commit { end_lsn, .. } => {
                    let Some(t) = txn.take() else { continue };
                    let end = end_lsn.value();
                    if end <= emitted {
                        // Emitted before the restore (or the reconnect): its rows are in.
                        continue;
                    }
                    emitted = end;
                    let batches = t.finish()?;
                    self.stream_progress(emitted);
                    self.send_at(batches, emitted, None).await?;
                }
                EventType::Message {
                    flags,
                    message_lsn,
                    prefix,
                    ..
                } => {
                    // A heartbeat between transactions: nothing before it is unread.
                    let at = message_lsn.value();
                    if flags & 1 == 0
                        && &*prefix == HEARTBEAT_PREFIX
                        && txn.is_none()
                        && at > emitted
                    {
                        emitted = at;
                        self.stream_progress(emitted);
                        self.send_at(Vec::new(), emitted, None).await?;
                    }
                }
                _ => {}
            }
        }
    }

    /// An insert (`old` none) or an update of table `i`. An update that changed the key
    /// deletes the old key's row first. Columns an update left out (unchanged values stored
    /// out of line, TOAST) come from the old row when the table sends it (`REPLICA IDENTITY
    /// FULL`).
    fn change(
        &self,
        txn: &mut Txn,
        i: usize,
        old: Option<&RowData>,
        new: &RowData,
    ) -> Result<(), OperatorError> {
        let table = &self.shared.tables[i];
        if let Some(old) = old {
            let moved = table.key.iter().any(|&k| {
                let c = table.columns[k].as_str();
                old.get(c).and_then(ColumnValue::as_str) != new.get(c).and_then(ColumnValue::as_str)
            });
            if moved {
                self.delete(txn, i, old)?;
            }
        }
        for c in &table.columns {
            if new.get(c).is_none() && old.and_then(|o| o.get(c)).is_none() {
                return Err(OperatorError::refused(
                    format!(
                        "postgres-cdc: an update of `{}` left column `{c}` out (a large value \
                         stored out of line that did not change), and the table does not send \
                         old rows: `ALTER TABLE {} REPLICA IDENTITY FULL` makes it send them",
                        table.display(),
                        table.quoted()
                    ),
                    None,
                ));
            }
        }
        let rows = txn.rows(i);
        let result = rows.push(RowKind::UpdateAfter, |c| {
            let name = table.columns[c].as_str();
            new.get(name)
                .or_else(|| old.and_then(|o| o.get(name)))
                .and_then(ColumnValue::as_str)
        });
        if let Err((c, why)) = result {
            self.bad_value(table, c, why, "a change")?;
        }
        txn.seal(i, self.batch_rows)
    }

    /// A delete of table `i`'s row whose key `old` holds.
    fn delete(&self, txn: &mut Txn, i: usize, old: &RowData) -> Result<(), OperatorError> {
        let table = &self.shared.tables[i];
        let rows = txn.rows(i);
        let result = rows.push(RowKind::Delete, |c| {
            if table.key.contains(&c) {
                old.get(&table.columns[c]).and_then(ColumnValue::as_str)
            } else {
                None
            }
        });
        if let Err((c, why)) = result {
            self.bad_value(table, c, why, "a delete")?;
        }
        txn.seal(i, self.batch_rows)
    }

    /// A Relation message (sent before a table's first change in the stream, and after each
    /// change of its columns): every declared column still there, of the same type.
    fn check_relation(
        &self,
        i: usize,
        columns: &[pg_walstream::RelationColumn],
    ) -> Result<(), OperatorError> {
        let table = &self.shared.tables[i];
        for (j, c) in table.columns.iter().enumerate() {
            let Some(now) = columns.iter().find(|r| &*r.name == c) else {
                return Err(OperatorError::refused(
                    format!(
                        "postgres-cdc: column `{c}` of `{}` was dropped or renamed while the job \
                         followed it; change the job's `schema` for the table to match, then \
                         start it afresh (without --from)",
                        table.display()
                    ),
                    None,
                ));
            };
            let then = self.type_oids.get(i).and_then(|t| t.get(j)).copied();
            if then.is_some_and(|then| then != now.type_id) {
                return Err(OperatorError::refused(
                    format!(
                        "postgres-cdc: the type of column `{c}` of `{}` changed while the job \
                         followed it; check the job's `schema` for the table, then start it \
                         afresh (without --from)",
                        table.display()
                    ),
                    None,
                ));
            }
        }
        Ok(())
    }

    fn bad_value(
        &self,
        table: &TablePlan,
        column: usize,
        why: &str,
        what: &str,
    ) -> Result<(), OperatorError> {
        match self.shared.on_error {
            OnError::Skip => {
                self.metrics.skipped.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            OnError::Fail => Err(OperatorError::Data(format!(
                "postgres-cdc: in {what} of `{}`, column `{}` (declared `{}`): {why}",
                table.display(),
                table.columns.get(column).map_or("?", String::as_str),
                table.types.get(column).map_or("?", |t| t.name()),
            ))),
        }
    }

    fn count(&self, rows: usize) {
        self.metrics
            .events
            .fetch_add(rows as u64, Ordering::Relaxed);
    }

    fn stream_progress(&mut self, lsn: u64) {
        let end = self.wal_end.load(Ordering::Relaxed);
        if let Some(p) = self.progress.last_mut() {
            p.position = lsn as i64;
            p.end = (end > 0).then_some(end.max(lsn) as i64);
        }
        self.publish_progress();
    }

    fn publish_progress(&self) {
        if let Ok(mut partitions) = self.metrics.partitions.lock() {
            partitions.clone_from(&self.progress);
        }
    }

    /// [`Self::send`] with the position in the source's slot at `lsn`.
    async fn send_at(
        &self,
        batches: Vec<(usize, RecordBatch)>,
        lsn: u64,
        snapshot: Option<SnapshotProgress>,
    ) -> Result<(), OperatorError> {
        let slot = self.shared.slot.clone();
        self.send(
            batches,
            Position {
                slot,
                lsn,
                snapshot,
            },
        )
        .await
    }

    async fn send(
        &self,
        batches: Vec<(usize, RecordBatch)>,
        position: Position,
    ) -> Result<(), OperatorError> {
        self.tx
            .send(Ok(Chunk { batches, position }))
            .await
            .map_err(|_| OperatorError::Cancelled("postgres-cdc: the subtask is gone".into()))
    }
}

/// One transaction's rows, per table, collected until its commit.
struct Txn {
    rows: Vec<Rows>,
    batches: Vec<(usize, RecordBatch)>,
}

impl Txn {
    fn new(shared: &Shared) -> Self {
        Self {
            rows: shared
                .tables
                .iter()
                .map(|t| Rows::new(t.port.clone(), t.types.clone()))
                .collect(),
            batches: Vec::new(),
        }
    }

    fn rows(&mut self, i: usize) -> &mut Rows {
        &mut self.rows[i]
    }

    /// Seals table `i`'s rows into a batch once they fill one. The batches keep the order of
    /// the changes of each table (and so of each key).
    fn seal(&mut self, i: usize, batch_rows: usize) -> Result<(), OperatorError> {
        if self.rows[i].len() >= batch_rows {
            let batch = finish(&mut self.rows[i])?;
            self.batches.push((i, batch));
        }
        Ok(())
    }

    fn finish(mut self) -> Result<Vec<(usize, RecordBatch)>, OperatorError> {
        for i in 0..self.rows.len() {
            if !self.rows[i].is_empty() {
                let batch = finish(&mut self.rows[i])?;
                self.batches.push((i, batch));
            }
        }
        Ok(self.batches)
    }
}

fn finish(rows: &mut Rows) -> Result<RecordBatch, OperatorError> {
    rows.finish()
        .map_err(|e| OperatorError::Internal(format!("postgres-cdc batch: {e}")))
}

/// Every `every`, writes a heartbeat into the WAL and reads the server's WAL position (for
/// the lag). Failures are logged and tried again at the next beat: the stream reports a lost
/// server.
async fn heartbeat(connect: PgConnect, every: Duration, wal_end: Arc<AtomicU64>) {
    let mut client = None;
    loop {
        tokio::time::sleep(every).await;
        if client.is_none() {
            match connect.connect().await {
                Ok((c, driver)) => client = Some((c, Owned(driver))),
                Err(e) => {
                    tracing::warn!(error = %e, "postgres-cdc heartbeat: cannot connect");
                    continue;
                }
            }
        }
        let Some((c, _)) = &client else { continue };
        let sql = format!(
            "SELECT pg_logical_emit_message(false, {}, ''), pg_current_wal_lsn()::text",
            literal(HEARTBEAT_PREFIX)
        );
        match c.query_one(sql.as_str(), &[]).await {
            Ok(row) => {
                let at: String = row.get(1);
                if let Ok(lsn) = pg_walstream::parse_lsn(&at) {
                    wal_end.store(lsn, Ordering::Relaxed);
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "postgres-cdc heartbeat failed");
                client = None;
            }
        }
    }
}

async fn open(
    shared: &Shared,
    config: ReplicationStreamConfig,
) -> Result<LogicalReplicationStream, OperatorError> {
    LogicalReplicationStream::new(&shared.replication, config)
        .await
        .map_err(repl_error)
}

/// A stream on a slot it creates, `snapshot` saying what the creation does with its
/// snapshot (`export` it for the copy, or `nothing`).
async fn create_slot(
    shared: &Shared,
    config: ReplicationStreamConfig,
    snapshot: &str,
) -> Result<LogicalReplicationStream, OperatorError> {
    let options = ReplicationSlotOptions {
        snapshot: Some(snapshot.into()),
        ..Default::default()
    };
    let mut stream = open(shared, config.with_slot_options(options)).await?;
    stream.ensure_replication_slot().await.map_err(repl_error)?;
    Ok(stream)
}

#[derive(Clone, Copy, Debug)]
struct SlotState {
    confirmed: u64,
    active: Option<i32>,
}

async fn slot_state(
    client: &tokio_postgres::Client,
    slot: &str,
) -> Result<Option<SlotState>, OperatorError> {
    let row = client
        .query_opt(
            "SELECT coalesce(confirmed_flush_lsn, '0/0')::text, active_pid, plugin::text, \
             database::text = current_database() \
             FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .map_err(|e| pg_error(&e, "reading the slot"))?;
    let Some(row) = row else { return Ok(None) };
    let plugin: Option<String> = row.get(2);
    let here: Option<bool> = row.get(3);
    if plugin.as_deref() != Some("pgoutput") || here != Some(true) {
        return Err(OperatorError::refused(
            format!(
                "postgres-cdc: slot `{slot}` exists, but is not a `pgoutput` logical slot of \
                 this database; name another `slot`"
            ),
            None,
        ));
    }
    let confirmed: String = row.get(0);
    let confirmed = pg_walstream::parse_lsn(&confirmed)
        .map_err(|e| OperatorError::Internal(format!("postgres-cdc: the slot's position: {e}")))?;
    Ok(Some(SlotState {
        confirmed,
        active: row.get(1),
    }))
}

/// The table's columns and keys, checked against the declaration.
async fn describe(
    client: &tokio_postgres::Client,
    table: &TablePlan,
) -> Result<Described, OperatorError> {
    let name = table.display();
    let found = client
        .query_opt(
            "SELECT c.oid, c.relreplident::text, c.reltuples::int8 FROM pg_class c \
             JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p')",
            &[&table.schema_name, &table.table_name],
        )
        .await
        .map_err(|e| pg_error(&e, &format!("describing `{name}`")))?;
    let Some(found) = found else {
        return Err(OperatorError::refused(
            format!("postgres-cdc: there is no table `{name}` in the database"),
            None,
        ));
    };
    let oid: u32 = found.get(0);
    let identity: String = found.get(1);
    let estimate: i64 = found.get(2);
    let columns = client
        .query(
            "SELECT a.attname::text, a.atttypid, t.typname::text, format_type(a.atttypid, a.atttypmod), \
             coalesce(a.attnum = ANY(i.indkey), false) \
             FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid \
             LEFT JOIN pg_index i ON i.indrelid = a.attrelid AND i.indisprimary \
             WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped",
            &[&oid],
        )
        .await
        .map_err(|e| pg_error(&e, &format!("describing `{name}`")))?;
    let mut type_oids = Vec::new();
    for (c, declared) in table.columns.iter().zip(&table.types) {
        let Some(row) = columns.iter().find(|r| r.get::<_, String>(0) == *c) else {
            let names: Vec<String> = columns.iter().map(|r| r.get::<_, String>(0)).collect();
            return Err(OperatorError::refused(
                format!(
                    "postgres-cdc: `{name}` has no column `{c}` (it has {})",
                    names.join(", ")
                ),
                None,
            ));
        };
        let typname: String = row.get(2);
        let pretty: String = row.get(3);
        if !readable_as(&typname, *declared) {
            let can: Vec<&str> = ScalarType::ALL
                .into_iter()
                .filter(|t| readable_as(&typname, *t))
                .map(ScalarType::name)
                .collect();
            return Err(OperatorError::refused(
                format!(
                    "postgres-cdc: column `{c}` of `{name}` is `{pretty}`, which weir cannot read \
                     as `{}`; declare it {}",
                    declared.name(),
                    can.iter()
                        .map(|t| format!("`{t}`"))
                        .collect::<Vec<_>>()
                        .join(" or ")
                ),
                None,
            ));
        }
        type_oids.push(row.get::<_, u32>(1));
    }
    let primary: Vec<String> = columns
        .iter()
        .filter(|r| r.get::<_, bool>(4))
        .map(|r| r.get::<_, String>(0))
        .collect();
    let key: Vec<String> = table
        .key
        .iter()
        .map(|&k| table.columns[k].clone())
        .collect();
    let mut sorted_key = key.clone();
    sorted_key.sort();
    let mut sorted_primary = primary.clone();
    sorted_primary.sort();
    if identity == "f" {
        // Full rows in every update and delete: any key the job declares can be followed.
    } else if primary.is_empty() || identity != "d" {
        return Err(OperatorError::refused(
            format!(
                "postgres-cdc: `{name}` has no primary key {}, so its updates and deletes do not \
                 say which row they change; add a primary key, or `ALTER TABLE {} REPLICA \
                 IDENTITY FULL`",
                if identity == "d" {
                    "and REPLICA IDENTITY DEFAULT"
                } else {
                    "to identify rows by (REPLICA IDENTITY USING INDEX or NOTHING)"
                },
                table.quoted()
            ),
            None,
        ));
    } else if sorted_primary != sorted_key {
        return Err(OperatorError::refused(
            format!(
                "postgres-cdc: the `key` of `{name}` is [{}], and its primary key is [{}]; \
                 declare the primary key (or make the table REPLICA IDENTITY FULL)",
                key.join(", "),
                primary.join(", ")
            ),
            None,
        ));
    }
    let mut key_types = Vec::new();
    for k in &key {
        let row = columns
            .iter()
            .find(|r| r.get::<_, String>(0) == *k)
            .ok_or_else(|| OperatorError::Internal(format!("key column `{k}` vanished")))?;
        key_types.push(row.get::<_, String>(3));
    }
    Ok(Described {
        type_oids,
        key_types,
        estimate,
    })
}

/// The publication exists and names every table (created for them when missing, with
/// `create: true`).
async fn ensure_publication(
    client: &tokio_postgres::Client,
    shared: &Shared,
) -> Result<(), OperatorError> {
    let exists = client
        .query_opt(
            "SELECT 1 FROM pg_publication WHERE pubname = $1",
            &[&shared.publication],
        )
        .await
        .map_err(|e| pg_error(&e, "reading the publication"))?
        .is_some();
    if !exists {
        if !shared.create {
            return Err(OperatorError::refused(
                format!(
                    "postgres-cdc: publication `{}` does not exist; create it (CREATE PUBLICATION \
                     ... FOR TABLE ...) or set `create: true`",
                    shared.publication
                ),
                None,
            ));
        }
        let tables: Vec<String> = shared.tables.iter().map(TablePlan::quoted).collect();
        let sql = format!(
            "CREATE PUBLICATION {} FOR TABLE {}",
            ident(&shared.publication),
            tables.join(", ")
        );
        match client.batch_execute(&sql).await {
            Ok(()) => {}
            // Another run made it at the same moment: checked below like any other.
            Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::DUPLICATE_OBJECT) => {}
            Err(e) => return Err(pg_error(&e, "creating the publication")),
        }
    }
    for table in &shared.tables {
        let listed = client
            .query_opt(
                "SELECT 1 FROM pg_publication_tables WHERE pubname = $1 AND schemaname = $2 \
                 AND tablename = $3",
                &[&shared.publication, &table.schema_name, &table.table_name],
            )
            .await
            .map_err(|e| pg_error(&e, "reading the publication"))?
            .is_some();
        if !listed {
            return Err(OperatorError::refused(
                format!(
                    "postgres-cdc: publication `{}` does not include `{}`; `ALTER PUBLICATION {} \
                     ADD TABLE {}`",
                    shared.publication,
                    table.display(),
                    ident(&shared.publication),
                    table.quoted()
                ),
                None,
            ));
        }
    }
    Ok(())
}

/// `"name"`, quoted for SQL.
pub fn ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// `'text'`, quoted for SQL (standard-conforming strings).
fn literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// An LSN as PostgreSQL writes it (`16/B374D848`).
pub fn lsn_text(lsn: u64) -> String {
    format!("{:X}/{:X}", lsn >> 32, lsn & 0xFFFF_FFFF)
}

/// A failure of the normal connection: transient (retried by restarting the job) when the
/// connection went away or the server is starting or stopping.
fn pg_error(e: &tokio_postgres::Error, what: &str) -> OperatorError {
    let message = match e.as_db_error() {
        Some(db) => format!(
            "postgres-cdc: {what}: {} [SQLSTATE {}]",
            db.message(),
            db.code().code()
        ),
        None => format!("postgres-cdc: {what}: {e}"),
    };
    if crate::connectors::postgres::is_transient(e) {
        OperatorError::external_message(message)
    } else {
        OperatorError::refused(message, None)
    }
}

/// A failure of the replication connection, by the library's own classification.
fn repl_error(e: ReplicationError) -> OperatorError {
    let message = format!("postgres-cdc: replication: {e}");
    if e.is_permanent() {
        OperatorError::refused(message, None)
    } else {
        OperatorError::external_message(message)
    }
}
