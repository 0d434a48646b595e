//! `postgres`: rows into a PostgreSQL table, batched through weir's fair connection pool,
//! exactly once with checkpoints.
//!
//! # How rows travel
//! Each subtask hands its batches to a *writer* task of its own (over a channel of
//! [`QUEUED_BATCHES`], so a slow database back-pressures the job instead of buffering without
//! bound). The writer collects rows until `batch-size` rows or `flush-interval` after the
//! first, then writes them with one `COPY ... FROM STDIN (FORMAT csv)` on a connection from the
//! sink's pool (shared by its subtasks). Transient failures (connection lost or refused, server
//! shutting down, serialization conflicts) are retried with exponential backoff; permanent ones
//! (bad credentials, a missing table or column, a value the column cannot hold) fail the job
//! with the server's message, naming the table and column.
//!
//! # Exactly once (checkpoints on)
//! PostgreSQL cannot hold a transaction open across a process crash, and `PREPARE
//! TRANSACTION` is off on a default server, so the two phases of [`crate::api::sink`] go through a
//! *staging table*, `<table>__weir_stage`: the same columns plus a transaction tag, a batch
//! number and a sequence.
//! - Between barriers, batches are copied into the staging table under the subtask's current
//!   tag. They are durable but invisible in the target table.
//! - At barrier `n` the writer flushes and the tag becomes the subtask's transaction for
//!   snapshot `n` (in the checkpoint); a new tag starts.
//! - When the checkpoint is complete, the job commits: one statement *moves* the tagged rows,
//!   `WITH moved AS (DELETE FROM stage WHERE tag = ANY(..) RETURNING ..) INSERT INTO table ..`.
//!   Moving is atomic and idempotent: a second commit of the same tags (a restore commits
//!   again) finds nothing left, and two concurrent commits cannot both see a row, because the
//!   `DELETE` locks it.
//! - A restore commits the snapshot's transactions, then recreates the staging table empty:
//!   whatever it still held was written after the snapshot and is produced again.
//!
//! A batch whose `COPY` failed ambiguously (the connection dropped before the answer) is
//! deleted by tag and batch number before it is written again, so a retry never stages a row
//! twice. With a `key`, the move is an upsert (`ON CONFLICT (key) DO UPDATE`, keeping the last
//! row of each key): replays and changelogs converge on the latest value per key.
//!
//! # Without checkpoints
//! Batches go straight into the table (at least once: a retry after an ambiguous failure may
//! repeat a batch), or with a `key` through the staging table and a move per batch, so that
//! a repeat is an idempotent upsert.
//!
//! # Changes (an updating input)
//! The sink takes an updating stream ([`crate::changelog`]) when it has a `key`: each staged
//! row carries whether it is taken back (`-U`, `-D`) or added (`+I`, `+U`), and the move
//! applies the last change of each key in the moved transactions: a row added is upserted, a
//! row taken back is deleted by its key (one statement, so the table never shows half of a
//! checkpoint's changes). The last change is the one staged last (`_weir_seq`): a key's changes
//! all reach one subtask, in order, because the planner partitions a sink's updating input by
//! its key unless the edge is forward (`plan/build.rs`).
//!
//! One job writes through a staging table: two jobs writing the same table need different
//! tables (or `staging-table` names).
//!
//! # Fencing an older copy of the job
//! Each run (a job's attempt, after every restart and takeover) recreates the staging table
//! with a constraint of its own, [`RUN_FENCE`]: every tag must start with the run's token, a
//! random number drawn by the run's `recover`. A copy of the job that no longer owns it (a
//! server of a fleet paused past its lease, a process thought dead) can then stage nothing
//! once the newer run has started: its `COPY` violates the constraint, and the copy stops
//! with an error saying it was fenced ([`PgFailure::fenced`]), never retried. Without the
//! constraint its rows would land under tags nobody commits and stay in the staging table
//! for good. A copy's transaction in flight holds the staging table's lock: the newer run
//! ends that copy's sessions before it recreates the table (else a paused copy would hold
//! it up for as long as it is paused), so rows staged before the fence are dropped with the
//! old table or moved by the restored snapshot's commit, never left behind.

mod client;
mod encode;
mod spec;
pub mod tls;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use futures::SinkExt;
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use weir_connection_pool::{Pool, PoolMetrics};

pub(crate) use self::client::is_transient;
pub use self::client::{PgConnection, PgFailure, PgManager};
use self::encode::{encode_csv, ident};
pub use self::encode::{sql_type, unsupported_column};

pub use self::spec::{PostgresPoolSpec, PostgresRetrySpec, PostgresSinkSpec};
use crate::api::connector::{
    Endpoint, HostLimits, Hosted, Location, Reach, Secret, ServerFile, SinkConnector, SinkContext,
    SpecProblem,
};
use crate::api::two_phase::{Committer, Recovered, Stage, TwoPhase, TwoPhaseFactory};
use crate::api::{OperatorError, Sink, SinkFactory, SnapshotTransaction, SubtaskContext};

/// What the sink needs of its input, checked at planning: every column of a type it can
/// write, and every `key` column present.
fn check_input(spec: &PostgresSinkSpec, schema: &arrow_schema::Schema) -> Vec<SpecProblem> {
    let mut problems = Vec::new();
    if let Some((column, ty)) = unsupported_column(schema) {
        problems.push(SpecProblem::at(
            "from",
            format!("column `{column}` has type {ty}, which the postgres sink cannot write"),
        ));
    }
    for (i, key) in spec.key.iter().enumerate() {
        if schema.field_with_name(key).is_err() {
            let names = schema
                .fields()
                .iter()
                .map(|f| format!("`{}`", f.name()))
                .collect::<Vec<_>>()
                .join(", ");
            problems.push(SpecProblem::at(
                &format!("/key/{i}"),
                format!("the input has no column `{key}` (it has {names})"),
            ));
        }
    }
    problems
}

impl SinkConnector for PostgresSinkSpec {
    fn from(&self) -> &str {
        &self.from
    }

    fn parallelism(&self) -> Option<u32> {
        self.parallelism
    }

    fn changes_key(&self) -> Option<&[String]> {
        (!self.key.is_empty()).then_some(self.key.as_slice())
    }

    fn plan(
        &self,
        input: &SchemaRef,
        _cx: SinkContext<'_>,
    ) -> Result<Arc<dyn SinkFactory>, Vec<SpecProblem>> {
        // An updating stream's changes are applied by `key`: upserts and deletes.
        let mode = crate::changelog::ChangelogMode::of(input);
        let data = crate::changelog::ChangelogMode::append().apply(input);
        let mut problems = check_input(self, &data);
        if !mode.is_append() && self.key.is_empty() {
            problems.push(SpecProblem::at(
                "key",
                format!(
                    "the input is an updating stream ({}): set `key:` to its key, so that each \
                     change replaces or deletes the row it is about",
                    mode.describe()
                ),
            ));
        }
        if !problems.is_empty() {
            return Err(problems);
        }
        let factory = PostgresSinkFactory::new(self, data, !mode.is_append())
            .map_err(|m| SpecProblem::at("connection", m))?;
        Ok(Arc::new(TwoPhaseFactory(factory)))
    }
}

/// It reaches its database; a root certificate file (`sslrootcert`) would be read on the
/// server's machine; the connection's password is a secret.
impl Hosted for PostgresSinkSpec {
    fn endpoints(&self) -> Vec<Reach> {
        connection_endpoints(&self.connection)
    }

    fn server_files(&self) -> Vec<ServerFile> {
        connection_files(&self.connection)
    }

    fn locations(&self) -> Vec<Location> {
        Vec::new()
    }

    fn secrets(&self) -> Vec<Secret> {
        vec![Secret::Connection(self.connection.clone())]
    }

    fn within(&self, _limits: &HostLimits) -> Vec<SpecProblem> {
        Vec::new()
    }
}

/// The database a `connection` key (the sink's, the CDC source's) reaches.
pub(crate) fn connection_endpoints(connection: &str) -> Vec<Reach> {
    vec![Reach {
        at: "/connection".into(),
        endpoint: Endpoint::Postgres {
            connection: connection.to_owned(),
        },
    }]
}

/// The file of the server's a `connection` key would make the client read (`sslrootcert`).
pub(crate) fn connection_files(connection: &str) -> Vec<ServerFile> {
    tls::root_certificate_file(connection)
        .map(|_| ServerFile {
            at: "/connection".into(),
            key: false,
            what: "`sslrootcert` makes the PostgreSQL client read a file".into(),
        })
        .into_iter()
        .collect()
}

/// Batches a subtask may queue for its writer while a write is in flight.
pub const QUEUED_BATCHES: usize = 4;

/// The staging table's constraint that admits only the current run's tags (see the module's
/// "Fencing an older copy of the job").
pub const RUN_FENCE: &str = "weir_stage_run";

/// How long recreating the staging table waits for the lock an older copy's transaction in
/// flight holds before it is retried (with the sink's backoff, and logged), rather than
/// waiting silently for a copy that may be paused.
const STAGE_LOCK_TIMEOUT: &str = "10s";

/// What the sink needs to know, shared by its factory, subtasks and writers.
struct Shared {
    /// `"schema"."table"` or `"table"`, quoted.
    table: String,
    /// The table's name as the user wrote it, for messages.
    table_name: String,
    stage: String,
    columns: Vec<String>,
    input: SchemaRef,
    key: Vec<String>,
    create_table: bool,
    batch_rows: usize,
    flush_interval: Duration,
    retry: PostgresRetrySpec,
    connect: tls::PgConnect,
    pool_size: usize,
    acquire_timeout: Duration,
    connect_timeout: Duration,
    /// The pool of the current run, made by `prepare`.
    pool: Mutex<Option<Pool<PgManager>>>,
    /// The current run's token (16 hex digits), drawn by `recover`: every tag it stages
    /// starts with it, and the staging table's [`RUN_FENCE`] admits no other.
    run: Mutex<String>,
    sql: Statements,
}

/// The statements, built once.
struct Statements {
    copy_stage: String,
    copy_table: String,
    undo_batch: String,
    move_rows: String,
}

/// A subtask's staged rows for one snapshot.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transaction {
    pub id: u64,
    pub tag: String,
}

/// Makes the postgres sink's subtasks and commits their transactions.
pub struct PostgresSinkFactory {
    shared: Arc<Shared>,
}

impl PostgresSinkFactory {
    /// `input` is the schema of the rows the sink receives (checked by the planner: every
    /// column has a type the sink can write, and every key column exists).
    ///
    /// `updating`: the rows arrive with their change kind ([`crate::changelog::OP`], after the
    /// columns of `input`), and the sink applies deletes by `key` (which must be set).
    pub fn new(spec: &PostgresSinkSpec, input: SchemaRef, updating: bool) -> Result<Self, String> {
        let connect = tls::PgConnect::parse(&spec.connection)?;
        let qualify = |name: &str| match &spec.schema {
            Some(s) => format!("{}.{}", ident(s), ident(name)),
            None => ident(name),
        };
        let table = qualify(&spec.table);
        let stage_name = spec
            .staging_table
            .clone()
            .unwrap_or_else(|| format!("{}__weir_stage", spec.table));
        let stage = qualify(&stage_name);
        let columns: Vec<String> = input.fields().iter().map(|f| f.name().clone()).collect();
        let list = columns
            .iter()
            .map(|c| ident(c))
            .collect::<Vec<_>>()
            .join(", ");
        let keys = spec
            .key
            .iter()
            .map(|c| ident(c))
            .collect::<Vec<_>>()
            .join(", ");
        // What an upsert does to a row of the key that is there.
        let updates: Vec<String> = columns
            .iter()
            .filter(|c| !spec.key.contains(c))
            .map(|c| format!("{0} = EXCLUDED.{0}", ident(c)))
            .collect();
        let action = if updates.is_empty() {
            "DO NOTHING".to_string()
        } else {
            format!("DO UPDATE SET {}", updates.join(", "))
        };
        let move_rows = if updating {
            let matches = spec
                .key
                .iter()
                .map(|k| format!("t.{0} = l.{0}", ident(k)))
                .collect::<Vec<_>>()
                .join(" AND ");
            // The key's last change: deleted, or upserted. The two sets of keys are
            // disjoint, so no row of the table is touched twice by the one statement.
            format!(
                "WITH moved AS (DELETE FROM {stage} WHERE \"_weir_txn\" = ANY($1) \
                 RETURNING {list}, \"_weir_delete\", \"_weir_seq\"), \
                 last AS (SELECT DISTINCT ON ({keys}) {list}, \"_weir_delete\" FROM moved \
                 ORDER BY {keys}, \"_weir_seq\" DESC), \
                 gone AS (DELETE FROM {table} t USING last l WHERE l.\"_weir_delete\" AND {matches}) \
                 INSERT INTO {table} ({list}) SELECT {list} FROM last WHERE NOT \"_weir_delete\" \
                 ON CONFLICT ({keys}) {action}"
            )
        } else if spec.key.is_empty() {
            format!(
                "WITH moved AS (DELETE FROM {stage} WHERE \"_weir_txn\" = ANY($1) \
                 RETURNING {list}, \"_weir_seq\") \
                 INSERT INTO {table} ({list}) SELECT {list} FROM moved ORDER BY \"_weir_seq\""
            )
        } else {
            format!(
                "WITH moved AS (DELETE FROM {stage} WHERE \"_weir_txn\" = ANY($1) \
                 RETURNING {list}, \"_weir_seq\") \
                 INSERT INTO {table} ({list}) SELECT DISTINCT ON ({keys}) {list} FROM moved \
                 ORDER BY {keys}, \"_weir_seq\" DESC ON CONFLICT ({keys}) {action}"
            )
        };
        let sql = Statements {
            copy_stage: if updating {
                format!(
                    "COPY {stage} ({list}, \"_weir_delete\", \"_weir_txn\", \"_weir_batch\") \
                     FROM STDIN (FORMAT csv)"
                )
            } else {
                format!(
                    "COPY {stage} ({list}, \"_weir_txn\", \"_weir_batch\") FROM STDIN (FORMAT csv)"
                )
            },
            copy_table: format!("COPY {table} ({list}) FROM STDIN (FORMAT csv)"),
            undo_batch: format!(
                "DELETE FROM {stage} WHERE \"_weir_txn\" = $1 AND \"_weir_batch\" = $2"
            ),
            move_rows,
        };
        Ok(Self {
            shared: Arc::new(Shared {
                table,
                table_name: spec.table.clone(),
                stage,
                columns,
                input,
                key: spec.key.clone(),
                create_table: spec.create_table,
                batch_rows: spec.batch_size as usize,
                flush_interval: spec.flush_interval.0,
                retry: spec.retry.clone(),
                connect,
                pool_size: spec.pool.max_size as usize,
                acquire_timeout: spec.pool.acquire_timeout.0,
                connect_timeout: spec.pool.connect_timeout.0,
                pool: Mutex::new(None),
                run: Mutex::new(String::new()),
                sql,
            }),
        })
    }
}

impl Shared {
    fn pool(&self) -> Result<Pool<PgManager>, OperatorError> {
        self.pool
            .lock()
            .map_err(|_| OperatorError::Internal("postgres pool lock poisoned".into()))?
            .clone()
            .ok_or_else(|| OperatorError::Internal("postgres sink used before prepare".into()))
    }

    /// Runs `op` on a pooled connection until it succeeds, fails permanently, or has failed
    /// transiently `max-attempts` times, with exponential backoff and jitter in between
    /// ([`PostgresRetrySpec::delays`]). `op` receives
    /// the attempt number (0 first), so a retry can undo what an ambiguous failure may have
    /// left. A connection that failed transiently is marked broken, so the pool replaces it.
    async fn with_retries<T, F>(&self, what: &str, mut op: F) -> Result<T, PgFailure>
    where
        F: FnMut(&mut PgConnection, u32) -> BoxFuture<'_, Result<T, PgFailure>>,
    {
        let pool = self
            .pool()
            .map_err(|e| PgFailure::permanent(e.to_string()))?;
        let mut delays = self.retry.delays();
        let mut attempt = 0;
        loop {
            let result = match pool.acquire().await {
                Ok(mut conn) => {
                    let result = op(&mut conn, attempt).await;
                    if matches!(&result, Err(f) if f.transient) {
                        conn.mark_broken();
                    }
                    result
                }
                Err(e) => Err(PgFailure::pool(e, &self.table_name)),
            };
            match result {
                Ok(v) => {
                    if attempt > 0 {
                        tracing::info!(table = %self.table_name, what, attempts = attempt + 1, "postgres sink succeeded after retries");
                    }
                    return Ok(v);
                }
                Err(f) if f.transient => {
                    let Some(wait) = delays.next() else {
                        // Still a failure that may pass: the job restarts (with its own
                        // backoff) where the sink's retries end.
                        return Err(PgFailure {
                            message: format!(
                                "gave up after {} attempts: {}",
                                attempt + 1,
                                f.message
                            ),
                            transient: true,
                            fenced: false,
                        });
                    };
                    tracing::warn!(
                        table = %self.table_name,
                        what,
                        attempt = attempt + 1,
                        max_attempts = self.retry.max_attempts,
                        retry_in = ?wait,
                        error = %f.message,
                        "postgres sink failed; retrying"
                    );
                    tokio::time::sleep(wait).await;
                    attempt += 1;
                }
                Err(f) => return Err(f),
            }
        }
    }

    /// Moves the rows of `tags` from the staging table into the table.
    async fn move_tags(&self, tags: Vec<String>) -> Result<u64, PgFailure> {
        if tags.is_empty() {
            return Ok(0);
        }
        let table = self.table_name.clone();
        let sql = self.sql.move_rows.clone();
        self.with_retries("committing staged rows into", move |conn, _| {
            let (sql, tags, table) = (sql.clone(), tags.clone(), table.clone());
            Box::pin(async move {
                conn.client
                    .execute(sql.as_str(), &[&tags])
                    .await
                    .map_err(|e| PgFailure::of(&e, "committing staged rows into", &table))
            })
        })
        .await
    }

    /// Checks the table (creating it when asked) and recreates the staging table.
    async fn prepare_tables(self: &Arc<Self>) -> Result<(), PgFailure> {
        let table = self.table_name.clone();
        self.with_retries("preparing", |conn, _| {
            let me = self.clone();
            Box::pin(async move { me.prepare_tables_on(conn).await })
        })
        .await
        .map_err(|mut f| {
            if !f.message.contains(&table) {
                f.message = format!("preparing `{table}`: {}", f.message);
            }
            f
        })
    }

    async fn prepare_tables_on(&self, conn: &mut PgConnection) -> Result<(), PgFailure> {
        let run = self.run()?;
        let name = &self.table_name;
        let db = |e: tokio_postgres::Error| PgFailure::of(&e, "preparing", name);
        if self.create_table {
            let mut defs = Vec::new();
            for f in self.input.fields() {
                let ty = sql_type(f.data_type()).ok_or_else(|| {
                    PgFailure::permanent(format!(
                        "column `{}` has a type the sink cannot write",
                        f.name()
                    ))
                })?;
                defs.push(format!("{} {ty}", ident(f.name())));
            }
            if !self.key.is_empty() {
                let keys: Vec<String> = self.key.iter().map(|k| ident(k)).collect();
                defs.push(format!("PRIMARY KEY ({})", keys.join(", ")));
            }
            conn.client
                .batch_execute(&format!(
                    "CREATE TABLE IF NOT EXISTS {} ({})",
                    self.table,
                    defs.join(", ")
                ))
                .await
                .map_err(db)?;
        }
        let rows = conn
            .client
            .query(
                "SELECT a.attname::text, format_type(a.atttypid, a.atttypmod) \
                 FROM pg_attribute a WHERE a.attrelid = to_regclass($1) \
                 AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
                &[&self.table],
            )
            .await
            .map_err(db)?;
        if rows.is_empty() {
            return Err(PgFailure::permanent(format!(
                "table `{name}` does not exist in the database (create it, or set \
                 `create-table: true` to create it from the sink's input)"
            )));
        }
        let existing: Vec<(String, String)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
        let mut stage_columns = Vec::new();
        for column in &self.columns {
            let Some((_, ty)) = existing.iter().find(|(n, _)| n == column) else {
                return Err(PgFailure::permanent(format!(
                    "table `{name}` has no column `{column}` (it has {}; the sink writes {})",
                    existing
                        .iter()
                        .map(|(n, _)| n.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                    self.columns.join(", ")
                )));
            };
            stage_columns.push(format!("{} {ty}", ident(column)));
        }
        // An older copy of the job (a server paused past its lease) may be in the middle of
        // a write: its transaction holds the staging table's lock, and the `DROP` below would
        // wait for it for as long as the copy is paused. Its sessions are ended instead: what
        // they were writing comes after the snapshot this run restored, and is produced again
        // (every row of a sealed transaction was written before its barrier completed). One
        // job writes through a staging table, so no other sessions hold it.
        match conn
            .client
            .query(
                "SELECT pg_terminate_backend(pid) FROM (SELECT DISTINCT l.pid FROM pg_locks l \
                 JOIN pg_stat_activity a ON a.pid = l.pid \
                 WHERE l.relation = to_regclass($1) AND l.pid <> pg_backend_pid() \
                 AND a.backend_type = 'client backend') older",
                &[&self.stage],
            )
            .await
        {
            Ok(ended) if !ended.is_empty() => tracing::warn!(
                table = %name,
                sessions = ended.len(),
                "ended the sessions of an older copy of the job that held the staging table"
            ),
            Ok(_) => {}
            Err(e) => tracing::warn!(
                table = %name,
                error = %PgFailure::of(&e, "ending older sessions writing", name).message,
                "cannot end the sessions of an older copy of the job: waiting for its locks"
            ),
        }
        // `run` is 16 hex digits (`draw_run`): nothing to quote in the literal.
        let tx = conn.client.transaction().await.map_err(db)?;
        tx.batch_execute(&format!(
            "SET LOCAL lock_timeout = '{STAGE_LOCK_TIMEOUT}'; \
             DROP TABLE IF EXISTS {stage}; CREATE TABLE {stage} ({}, \
             \"_weir_delete\" boolean NOT NULL DEFAULT false, \
             \"_weir_txn\" text NOT NULL, \"_weir_batch\" bigint NOT NULL, \
             \"_weir_seq\" bigserial, \
             CONSTRAINT {fence} CHECK (left(\"_weir_txn\", {len}) = '{run}-'))",
            stage_columns.join(", "),
            stage = self.stage,
            fence = ident(RUN_FENCE),
            len = run.len() + 1,
        ))
        .await
        .map_err(db)?;
        tx.commit().await.map_err(db)
    }

    /// The current run's token.
    fn run(&self) -> Result<String, PgFailure> {
        let run = self
            .run
            .lock()
            .map_err(|_| PgFailure::permanent("postgres run token lock poisoned".into()))?
            .clone();
        if run.is_empty() {
            return Err(PgFailure::permanent(
                "postgres sink used before prepare drew its run token".into(),
            ));
        }
        Ok(run)
    }
}

/// A token for a run: 16 hex digits, different for every run of every process (the process,
/// the time to the nanosecond and a counter, hashed).
fn draw_run() -> String {
    static DRAWN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = DRAWN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    let token = xxhash_rust::xxh3::xxh3_64(format!("{}-{now}-{n}", std::process::id()).as_bytes());
    format!("{token:016x}")
}

impl SnapshotTransaction for Transaction {
    fn snapshot(&self) -> u64 {
        self.id
    }
}

impl Committer for PostgresSinkFactory {
    type Transaction = Transaction;
    const SINK: &'static str = "postgres";

    fn recover(
        &self,
        _parallelism: usize,
        restored: Option<Recovered<Transaction>>,
    ) -> BoxFuture<'_, Result<(), OperatorError>> {
        Box::pin(async move {
            let shared = &self.shared;
            let mut connect = shared.connect.clone();
            connect.config.connect_timeout(shared.connect_timeout);
            let pool = Pool::builder(PgManager { connect })
                .max_size(shared.pool_size)
                .acquire_timeout(shared.acquire_timeout)
                .connect_timeout(shared.connect_timeout)
                .build();
            let old = shared
                .pool
                .lock()
                .map_err(|_| OperatorError::Internal("postgres pool lock poisoned".into()))?
                .replace(pool);
            if let Some(old) = old {
                old.close().await;
            }
            *shared.run.lock().map_err(|_| {
                OperatorError::Internal("postgres run token lock poisoned".into())
            })? = draw_run();
            if let Some(r) = restored {
                let tags = r.transactions.into_iter().map(|t| t.tag).collect();
                let moved = shared
                    .move_tags(tags)
                    .await
                    .map_err(PgFailure::into_error)?;
                tracing::info!(table = %shared.table_name, rows = moved, "committed the restored snapshot's staged rows");
            }
            shared.prepare_tables().await.map_err(PgFailure::into_error)
        })
    }

    fn create(&self, ctx: &SubtaskContext) -> Result<Box<dyn Sink>, OperatorError> {
        let shared = self.shared.clone();
        // Fails if `prepare` has not made the run's pool.
        shared.pool()?;
        let run = shared.run().map_err(PgFailure::into_error)?;
        let (tx, rx) = mpsc::channel(QUEUED_BATCHES);
        let writer = Writer {
            staged: ctx.checkpointing || !shared.key.is_empty(),
            per_batch_move: !ctx.checkpointing && !shared.key.is_empty(),
            shared,
            // The run's token first: the staging table's fence checks it.
            tag_prefix: format!("{run}-{}-{}", ctx.subtask, ctx.attempt),
            epoch: 0,
            batch: 0,
            rows_in_epoch: 0,
            buffered: Vec::new(),
            buffered_rows: 0,
            first_buffered: None,
        };
        let stage = PgSink {
            tx: Some(tx),
            writer: Some(WriterTask(tokio::spawn(writer.run(rx)))),
        };
        Ok(Box::new(TwoPhase::new(stage, ctx.checkpoint_base)))
    }

    fn commit(
        &self,
        transactions: Vec<Transaction>,
    ) -> BoxFuture<'static, Result<(), OperatorError>> {
        let shared = self.shared.clone();
        Box::pin(async move {
            let tags = transactions.into_iter().map(|t| t.tag).collect();
            shared
                .move_tags(tags)
                .await
                .map_err(PgFailure::into_error)?;
            Ok(())
        })
    }

    fn pool_metrics(&self) -> Option<PoolMetrics> {
        self.shared.pool().ok().map(|p| p.metrics())
    }

    /// The staged rows of an aborted transaction stay invisible, and the next run's `recover`
    /// recreates the staging table without them.
    fn abort(&self, _transactions: Vec<Transaction>) -> Result<(), OperatorError> {
        Ok(())
    }
}

/// What a subtask asks of its writer.
enum Command {
    Rows(RecordBatch),
    /// Flush, and end the current transaction: the answer is its tag if it holds rows.
    Seal(oneshot::Sender<Option<String>>),
}

/// The writer's task, aborted if the sink is dropped without finishing (its job failed).
struct WriterTask(JoinHandle<Result<(), PgFailure>>);

impl Drop for WriterTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// One subtask of the sink: its rows go to a writer task of its own, staged under the
/// current tag; a pre-commit flushes them and ends the tag's transaction.
pub struct PgSink {
    tx: Option<mpsc::Sender<Command>>,
    writer: Option<WriterTask>,
}

impl PgSink {
    /// The writer stopped early: its error.
    async fn writer_error(&mut self) -> OperatorError {
        self.tx = None;
        match self.writer.as_mut() {
            Some(task) => match (&mut task.0).await {
                Ok(Err(f)) => f.into_error(),
                Ok(Ok(())) => OperatorError::Internal("postgres writer ended early".into()),
                Err(e) => OperatorError::Internal(format!("postgres writer task: {e}")),
            },
            None => OperatorError::Internal("postgres writer is gone".into()),
        }
    }

    async fn send(&mut self, command: Command) -> Result<(), OperatorError> {
        let sent = match &self.tx {
            Some(tx) => tx.send(command).await.is_ok(),
            None => false,
        };
        if sent {
            Ok(())
        } else {
            Err(self.writer_error().await)
        }
    }

    /// Ends the current transaction as the one of snapshot `id`, if it holds rows.
    async fn seal(&mut self, id: u64) -> Result<Option<Transaction>, OperatorError> {
        let (reply, answer) = oneshot::channel();
        self.send(Command::Seal(reply)).await?;
        match answer.await {
            Ok(tag) => Ok(tag.map(|tag| Transaction { id, tag })),
            Err(_) => Err(self.writer_error().await),
        }
    }
}

impl Stage for PgSink {
    type Transaction = Transaction;

    fn write(&mut self, batch: RecordBatch) -> BoxFuture<'_, Result<(), OperatorError>> {
        Box::pin(async move {
            if batch.num_rows() == 0 {
                return Ok(());
            }
            let batch = taken_back_as_a_column(batch)?;
            self.send(Command::Rows(batch)).await
        })
    }

    fn pre_commit(
        &mut self,
        snapshot: u64,
    ) -> BoxFuture<'_, Result<Option<Transaction>, OperatorError>> {
        Box::pin(self.seal(snapshot))
    }

    /// The writer flushes what it holds and ends: its failure, if it kept one.
    fn close(&mut self) -> BoxFuture<'_, Result<(), OperatorError>> {
        Box::pin(async move {
            self.tx = None;
            if let Some(task) = self.writer.as_mut() {
                match (&mut task.0).await {
                    Ok(Ok(())) => {}
                    Ok(Err(f)) => return Err(f.into_error()),
                    Err(e) => {
                        return Err(OperatorError::Internal(format!(
                            "postgres writer task: {e}"
                        )));
                    }
                }
            }
            Ok(())
        })
    }
}

/// An updating batch with its kinds as the staging table's `_weir_delete` (true for a row
/// taken back, `-U` or `-D`), which the CSV then carries like any column; an append-only
/// batch as it is.
fn taken_back_as_a_column(batch: RecordBatch) -> Result<RecordBatch, OperatorError> {
    let (Some(op), Some(kinds)) = (
        crate::changelog::op_column(batch.schema_ref()),
        crate::changelog::kinds(&batch),
    ) else {
        return Ok(batch);
    };
    let taken_back: arrow_array::BooleanArray = (0..batch.num_rows())
        .map(|row| Some(!crate::changelog::kind_at(kinds, row).is_addition()))
        .collect();
    let mut fields: Vec<arrow_schema::Field> = batch
        .schema()
        .fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    fields[op] = arrow_schema::Field::new("_weir_delete", arrow_schema::DataType::Boolean, false);
    let mut columns = batch.columns().to_vec();
    columns[op] = Arc::new(taken_back);
    Ok(RecordBatch::try_new(
        Arc::new(arrow_schema::Schema::new(fields)),
        columns,
    )?)
}

/// Collects a subtask's rows and writes them.
struct Writer {
    shared: Arc<Shared>,
    /// Rows go to the staging table (checkpoints on, or upserts).
    staged: bool,
    /// Without checkpoints, staged rows are moved after every batch.
    per_batch_move: bool,
    tag_prefix: String,
    epoch: u64,
    batch: u64,
    rows_in_epoch: u64,
    buffered: Vec<RecordBatch>,
    buffered_rows: usize,
    first_buffered: Option<Instant>,
}

impl Writer {
    fn tag(&self) -> String {
        format!("{}-{}", self.tag_prefix, self.epoch)
    }

    async fn run(mut self, mut rx: mpsc::Receiver<Command>) -> Result<(), PgFailure> {
        loop {
            let deadline = self.first_buffered.map(|t| t + self.shared.flush_interval);
            let command = match deadline {
                Some(at) => tokio::select! {
                    c = rx.recv() => c,
                    () = tokio::time::sleep_until(at.into()) => {
                        self.flush().await?;
                        continue;
                    }
                },
                None => rx.recv().await,
            };
            match command {
                Some(Command::Rows(batch)) => {
                    self.buffered_rows += batch.num_rows();
                    self.buffered.push(batch);
                    self.first_buffered.get_or_insert_with(Instant::now);
                    if self.buffered_rows >= self.shared.batch_rows {
                        self.flush().await?;
                    }
                }
                Some(Command::Seal(reply)) => {
                    self.flush().await?;
                    let tag = (self.staged && !self.per_batch_move && self.rows_in_epoch > 0)
                        .then(|| self.tag());
                    self.epoch += 1;
                    self.batch = 0;
                    self.rows_in_epoch = 0;
                    // The subtask may have gone (its job failed): nothing to tell.
                    let _ = reply.send(tag);
                }
                None => {
                    self.flush().await?;
                    return Ok(());
                }
            }
        }
    }

    async fn flush(&mut self) -> Result<(), PgFailure> {
        self.first_buffered = None;
        if self.buffered.is_empty() {
            return Ok(());
        }
        let tag = self.tag();
        let suffix = if self.staged {
            let mut s = Vec::new();
            s.push(b',');
            encode::quote(&tag, &mut s);
            s.extend_from_slice(format!(",{}", self.batch).as_bytes());
            String::from_utf8(s).map_err(|e| PgFailure::permanent(e.to_string()))?
        } else {
            String::new()
        };
        let mut csv = Vec::with_capacity(self.buffered_rows * 64);
        for b in self.buffered.drain(..) {
            encode_csv(&b, &suffix, &mut csv).map_err(PgFailure::permanent)?;
        }
        let rows = self.buffered_rows as u64;
        self.buffered_rows = 0;
        let data = bytes::Bytes::from(csv);
        let shared = self.shared.clone();
        let (staged, per_batch_move, batch) = (self.staged, self.per_batch_move, self.batch);
        let table = shared.table_name.clone();
        shared
            .with_retries("writing", |conn, attempt| {
                let (shared, data, tag, table) =
                    (shared.clone(), data.clone(), tag.clone(), table.clone());
                Box::pin(async move {
                    let db = |e: tokio_postgres::Error| PgFailure::of(&e, "writing", &table);
                    let tx = conn.client.transaction().await.map_err(db)?;
                    if !staged {
                        copy(&tx, &shared.sql.copy_table, data).await.map_err(db)?;
                        tx.commit().await.map_err(db)?;
                        return Ok(rows);
                    }
                    if attempt > 0 {
                        // The failed attempt may have landed: remove it, in the same
                        // transaction as the new copy.
                        tx.execute(shared.sql.undo_batch.as_str(), &[&tag, &(batch as i64)])
                            .await
                            .map_err(db)?;
                    }
                    copy(&tx, &shared.sql.copy_stage, data).await.map_err(db)?;
                    if per_batch_move {
                        tx.execute(shared.sql.move_rows.as_str(), &[&vec![tag]])
                            .await
                            .map_err(db)?;
                    }
                    tx.commit().await.map_err(db)?;
                    Ok(rows)
                })
            })
            .await?;
        self.batch += 1;
        self.rows_in_epoch += rows;
        Ok(())
    }
}

/// One `COPY ... FROM STDIN` of `data`.
async fn copy(
    client: &tokio_postgres::Transaction<'_>,
    sql: &str,
    data: bytes::Bytes,
) -> Result<u64, tokio_postgres::Error> {
    let sink = client.copy_in::<_, bytes::Bytes>(sql).await?;
    futures::pin_mut!(sink);
    sink.send(data).await?;
    sink.finish().await
}
