//! The fleet's tables in PostgreSQL, and every statement the fleet runs on them.
//!
//! - `weir_servers`: one row per running server process (its instance id, the URL it
//!   advertises, its last heartbeat, whether it drains).
//! - `weir_leases`: one row per live job (running, or waiting to be placed or taken over):
//!   its owner (a server instance, or none), the lease epoch (from the sequence
//!   `weir_epochs`, so an epoch is never given twice), when the lease expires, the job's
//!   subtasks (its load), the next free checkpoint id, and the latest snapshot published.
//!
//! Every time is the database's (`clock_timestamp()`), so servers' clocks never have to
//! agree. Every statement runs within a deadline; a connection that misses one is dropped
//! and opened again on the next call, so a network cut never hangs the caller.

use std::time::Duration;

use std::future::Future;
use std::pin::Pin;
use tokio::sync::Mutex;

use crate::db::Conn;

/// Something the fleet's catalog could not do.
#[derive(Clone, Debug, thiserror::Error)]
pub enum DbError {
    /// The database cannot be reached, or failed, or did not answer in time.
    #[error("the fleet's catalog at {location}: {what}: {reason}")]
    Store {
        location: String,
        what: String,
        reason: String,
    },
    /// A checkpointing job of this name already runs in the fleet.
    #[error("a checkpointing job named `{0}` already runs in the fleet")]
    NameTaken(String),
    /// The job's lease is another server's.
    #[error("job {0} runs on another server of the fleet")]
    Held(u64),
}

/// The fleet's tables, created when missing. Creating them is serialised by a
/// transaction-level advisory lock ([`crate::db::DDL_LOCK`]): servers starting together would
/// otherwise race in the system catalogs.
pub(crate) const TABLES: &str = "
CREATE TABLE IF NOT EXISTS weir_servers (
    id TEXT PRIMARY KEY,
    url TEXT NOT NULL,
    started_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
    heartbeat_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
    draining BOOLEAN NOT NULL DEFAULT false
);
CREATE SEQUENCE IF NOT EXISTS weir_epochs;
CREATE TABLE IF NOT EXISTS weir_leases (
    job_id BIGINT PRIMARY KEY,
    name TEXT NOT NULL,
    checkpointing BOOLEAN NOT NULL,
    owner TEXT,
    placed_on TEXT,
    epoch BIGINT NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL,
    subtasks BIGINT NOT NULL,
    next_checkpoint BIGINT NOT NULL DEFAULT 1,
    latest TEXT,
    latest_id BIGINT
);
CREATE UNIQUE INDEX IF NOT EXISTS weir_leases_checkpointing_name
    ON weir_leases (name) WHERE checkpointing;
";

/// What a statement's closure returns: the work on the connection, borrowing only it.
pub(crate) type DbFuture<'c, T> =
    Pin<Box<dyn Future<Output = Result<T, tokio_postgres::Error>> + Send + 'c>>;

/// One connection to the fleet's database, opened on first use and again after a failure.
pub(crate) struct Link {
    url: String,
    location: String,
    deadline: Duration,
    conn: Mutex<Option<Conn>>,
}

impl Link {
    pub(crate) fn new(url: &str, location: &str, deadline: Duration) -> Self {
        Link {
            url: url.to_owned(),
            location: location.to_owned(),
            deadline,
            conn: Mutex::new(None),
        }
    }

    fn error(&self, what: &str, reason: impl std::fmt::Display) -> DbError {
        DbError::Store {
            location: self.location.clone(),
            what: what.to_owned(),
            reason: reason.to_string(),
        }
    }

    /// Runs `work` on the connection within the deadline (connecting first if needed). On a
    /// failure or a missed deadline the connection is dropped: the next call opens a new one.
    pub(crate) async fn run<T: Send>(
        &self,
        what: &str,
        work: impl for<'c> FnOnce(&'c mut tokio_postgres::Client) -> DbFuture<'c, T> + Send,
    ) -> Result<T, DbError> {
        let attempt = async {
            let mut guard = self.conn.lock().await;
            if guard.as_ref().is_none_or(|c| c.client.is_closed()) {
                *guard = None;
                let connect = weir_runtime::connectors::postgres::tls::PgConnect::parse(&self.url)
                    .map_err(|e| self.error("reading the connection string", e))?;
                let (client, driver) = connect
                    .connect()
                    .await
                    .map_err(|e| self.error("connecting", e))?;
                *guard = Some(Conn { client, driver });
            }
            let Some(conn) = guard.as_mut() else {
                return Err(self.error(what, "no connection"));
            };
            match work(&mut conn.client).await {
                Ok(value) => Ok(value),
                Err(e) => {
                    *guard = None;
                    Err(self.error(what, db_reason(&e)))
                }
            }
        };
        match tokio::time::timeout(self.deadline, attempt).await {
            Ok(result) => result,
            Err(_) => {
                // The lock is free again (the attempt was dropped): forget the connection,
                // which may be cut off.
                *self.conn.lock().await = None;
                Err(self.error(what, format!("no answer within {:?}", self.deadline)))
            }
        }
    }
}

/// The server's message of a database error (tokio-postgres's own says only "db error").
pub(crate) fn db_reason(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => db.message().to_owned(),
        None => e.to_string(),
    }
}

/// Whether `e` is a unique violation (SQLSTATE 23505).
pub(crate) fn unique_violation(e: &tokio_postgres::Error) -> bool {
    e.code() == Some(&tokio_postgres::error::SqlState::UNIQUE_VIOLATION)
}

/// A duration as the whole milliseconds the statements take.
pub(crate) fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}
