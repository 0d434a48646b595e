//! Connections to PostgreSQL through weir's pool, what a failure means, and retries.

use tokio::task::JoinHandle;
use tokio_postgres::error::SqlState;
use weir_connection_pool::{Manager, PoolError};

use crate::api::OperatorError;

/// A client and the task that drives its socket. The task belongs to the connection: it ends
/// when the client is dropped (the socket closes), and dropping the connection aborts it in
/// case the server keeps the socket open.
pub struct PgConnection {
    pub client: tokio_postgres::Client,
    driver: JoinHandle<()>,
}

impl Drop for PgConnection {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

/// Opens connections for the sink's pool.
pub struct PgManager {
    pub connect: super::tls::PgConnect,
}

impl Manager for PgManager {
    type Connection = PgConnection;
    type Error = tokio_postgres::Error;

    async fn connect(&self) -> Result<PgConnection, tokio_postgres::Error> {
        let (client, driver) = self.connect.connect().await?;
        let conn = PgConnection { client, driver };
        // Timestamps are written as UTC wall-clock times; a `timestamptz` column must read
        // them as UTC whatever the server's default zone.
        conn.client.batch_execute("SET TIME ZONE 'UTC'").await?;
        Ok(conn)
    }

    async fn check(&self, conn: &mut PgConnection) -> Result<(), tokio_postgres::Error> {
        // A closed socket is the common failure, and free to detect; a ping per return would
        // double the round trips of a sink that writes one batch per acquire.
        if conn.client.is_closed() {
            conn.client.simple_query("").await?;
        }
        Ok(())
    }

    async fn recycle(&self, conn: &mut PgConnection) -> Result<(), tokio_postgres::Error> {
        // A sink never leaves a transaction open on success; after an error mid-transaction
        // the transaction object's drop has queued a ROLLBACK already.
        let _ = conn;
        Ok(())
    }
}

/// A failure, classified: permanent ones fail the job at once, transient ones are retried.
#[derive(Debug)]
pub struct PgFailure {
    pub message: String,
    pub transient: bool,
    /// A newer run of the job took over the staging table ([`Self::fenced`]).
    pub fenced: bool,
}

impl PgFailure {
    /// Describes `e` for an action on `table` (`what` says which).
    pub fn of(e: &tokio_postgres::Error, what: &str, table: &str) -> Self {
        if let Some(db) = e.as_db_error()
            && *db.code() == SqlState::CHECK_VIOLATION
            && db.constraint() == Some(super::RUN_FENCE)
        {
            return Self::fenced(table);
        }
        let transient = is_transient(e);
        let message = match e.as_db_error() {
            Some(db) => {
                let mut m = format!(
                    "{what} `{table}`: {} [SQLSTATE {}]",
                    db.message(),
                    db.code().code()
                );
                if let Some(c) = db.column() {
                    m.push_str(&format!("; column `{c}`"));
                }
                if let Some(d) = db.detail() {
                    m.push_str(&format!("; {d}"));
                }
                if let Some(w) = db.where_() {
                    m.push_str(&format!(" ({w})"));
                }
                if let Some(h) = db.hint() {
                    m.push_str(&format!("; hint: {h}"));
                }
                m
            }
            None => {
                let mut m = format!("{what} `{table}`: {e}");
                let mut source = std::error::Error::source(e);
                while let Some(s) = source {
                    m.push_str(&format!(": {s}"));
                    source = s.source();
                }
                m
            }
        };
        Self {
            message,
            transient,
            fenced: false,
        }
    }

    pub fn pool(e: PoolError<tokio_postgres::Error>, table: &str) -> Self {
        match e {
            PoolError::Connect(e) => Self::of(&e, "connecting to write", table),
            other => Self {
                transient: other.is_transient().unwrap_or(false),
                message: format!("connecting to write `{table}`: {other}"),
                fenced: false,
            },
        }
    }

    /// A newer run of the job recreated the staging table of `table` under its own fence
    /// (see the module's "Fencing an older copy of the job"): this copy must stop, and a
    /// restart would only fence the newer run in turn.
    pub fn fenced(table: &str) -> Self {
        Self {
            fenced: true,
            ..Self::permanent(format!(
                "fenced: a newer run of this job has taken over the staging table of `{table}` \
                 (the job was restarted elsewhere: by another server of the fleet, or in \
                 another process); this copy stops and stages nothing more"
            ))
        }
    }

    pub fn permanent(message: String) -> Self {
        Self {
            message,
            transient: false,
            fenced: false,
        }
    }

    pub fn into_error(self) -> OperatorError {
        let message = format!("postgres sink: {}", self.message);
        if self.fenced {
            // `fenced:` first, as every fencing message starts.
            OperatorError::Fenced(self.message)
        } else if self.transient {
            OperatorError::external_message(message)
        } else {
            OperatorError::refused(message, None)
        }
    }
}

/// Whether retrying `e` may succeed: the connection went away or could not be made, the server
/// is starting or shutting down, or the transaction lost a conflict. Bad credentials, a missing
/// table or column, a value of the wrong type or a violated constraint stay wrong.
pub(crate) fn is_transient(e: &tokio_postgres::Error) -> bool {
    match e.code() {
        Some(code) => {
            let c = code.code();
            c.starts_with("08") // connection exception
                || c.starts_with("53") // insufficient resources
                || c.starts_with("57P") // operator intervention: shutdown, cannot connect now
                || *code == SqlState::T_R_SERIALIZATION_FAILURE
                || *code == SqlState::T_R_DEADLOCK_DETECTED
                || *code == SqlState::LOCK_NOT_AVAILABLE
        }
        // No SQLSTATE: the socket failed, closed, or timed out.
        None => true,
    }
}
