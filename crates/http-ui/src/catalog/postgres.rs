//! The catalog in a PostgreSQL database (`weir serve --catalog postgres://...`).
//!
//! One connection, reopened when it breaks. The tables are created if missing; the server
//! holds a session-level advisory lock for as long as it runs, so a second server on the same
//! catalog is refused (jobs spread over several servers are a fleet's work: leases, not this
//! lock). Every write is one statement, atomic by itself; the id counter is advanced with an
//! `UPDATE ... RETURNING` in one statement, so ids are never given twice.

use tokio::sync::Mutex;
use tokio::task::JoinHandle;

use super::{CatalogError, Row, TABLES, check_version};

/// The advisory lock key of a catalog: "weir" in ASCII, then 1.
const LOCK_KEY: i64 = 0x7765_6972_0000_0001;

/// A connection and the task that drives its socket (aborted with it).
struct Conn {
    client: tokio_postgres::Client,
    driver: JoinHandle<()>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

/// An open PostgreSQL catalog.
pub struct PgCatalog {
    url: String,
    location: String,
    /// The connection holding the advisory lock. A tokio mutex: calls await the database
    /// while holding it, one at a time.
    conn: Mutex<Option<Conn>>,
}

impl PgCatalog {
    /// Connects, creates the tables if needed, checks the version and takes the lock.
    pub async fn open(url: String) -> Result<Self, CatalogError> {
        let location = super::CatalogConfig::Postgres(url.clone()).describe();
        let catalog = Self {
            url,
            location,
            conn: Mutex::new(None),
        };
        let conn = catalog.connect().await?;
        *catalog.conn.lock().await = Some(conn);
        Ok(catalog)
    }

    pub fn location(&self) -> &str {
        &self.location
    }

    fn store(&self, what: &str, source: tokio_postgres::Error) -> CatalogError {
        CatalogError::Store {
            location: self.location.clone(),
            what: what.to_owned(),
            source: Box::new(source),
        }
    }

    async fn connect(&self) -> Result<Conn, CatalogError> {
        // sslmode and sslrootcert as the PostgreSQL sink reads them.
        let connect = weir_runtime::connectors::postgres::tls::PgConnect::parse(&self.url)
            .map_err(|e| CatalogError::Store {
                location: self.location.clone(),
                what: "reading the connection string".to_owned(),
                source: e.into(),
            })?;
        let (client, driver) = connect
            .connect()
            .await
            .map_err(|e| self.store("connecting", e))?;
        let conn = Conn { client, driver };
        let locked: bool = conn
            .client
            .query_one("SELECT pg_try_advisory_lock($1)", &[&LOCK_KEY])
            .await
            .and_then(|r| r.try_get(0))
            .map_err(|e| self.store("locking", e))?;
        if !locked {
            return Err(CatalogError::InUse {
                location: self.location.clone(),
            });
        }
        conn.client
            .batch_execute(TABLES)
            .await
            .map_err(|e| self.store("creating its tables", e))?;
        let version: Option<String> = conn
            .client
            .query_opt("SELECT value FROM weir_catalog WHERE key = 'version'", &[])
            .await
            .and_then(|r| r.map(|r| r.try_get(0)).transpose())
            .map_err(|e| self.store("reading its version", e))?;
        check_version(&self.location, version.as_deref())?;
        if version.is_none() {
            conn.client
                .execute(
                    "INSERT INTO weir_catalog (key, value) VALUES ('version', $1)
                     ON CONFLICT (key) DO NOTHING",
                    &[&super::SCHEMA_VERSION.to_string()],
                )
                .await
                .map_err(|e| self.store("recording its version", e))?;
        }
        Ok(conn)
    }

    /// The connection, reopened (and the lock taken again) if it broke.
    async fn client(&self) -> Result<tokio::sync::MutexGuard<'_, Option<Conn>>, CatalogError> {
        let mut guard = self.conn.lock().await;
        if guard.as_ref().is_none_or(|c| c.client.is_closed()) {
            *guard = None;
            *guard = Some(self.connect().await?);
        }
        Ok(guard)
    }

    pub async fn allocate_id(&self) -> Result<u64, CatalogError> {
        let guard = self.client().await?;
        let Some(conn) = guard.as_ref() else {
            return Err(self.gone());
        };
        let row = conn
            .client
            .query_one(
                "INSERT INTO weir_catalog (key, value) VALUES ('last-id', '1')
                 ON CONFLICT (key) DO UPDATE
                   SET value = (weir_catalog.value::BIGINT + 1)::TEXT
                 RETURNING value",
                &[],
            )
            .await
            .and_then(|r| r.try_get::<_, String>(0))
            .map_err(|e| self.store("allocating a job id", e))?;
        let value = row;
        value.parse().map_err(|_| CatalogError::Corrupt {
            location: self.location.clone(),
            id: 0,
            reason: format!("its id counter `{value}` is not a number"),
        })
    }

    pub(crate) async fn save(&self, row: Row) -> Result<(), CatalogError> {
        let guard = self.client().await?;
        let Some(conn) = guard.as_ref() else {
            return Err(self.gone());
        };
        conn.client
            .execute(
                "INSERT INTO weir_jobs (id, name, state, updated_at, document, checksum)
                 VALUES ($1, $2, $3, $4, $5, $6)
                 ON CONFLICT (id) DO UPDATE SET name = excluded.name, state = excluded.state,
                   updated_at = excluded.updated_at, document = excluded.document,
                   checksum = excluded.checksum",
                &[
                    &id_sql(row.id),
                    &row.name,
                    &row.state,
                    &row.updated_at,
                    &row.document,
                    &row.checksum,
                ],
            )
            .await
            .map_err(|e| self.store("writing a job", e))?;
        Ok(())
    }

    pub async fn delete(&self, id: u64) -> Result<(), CatalogError> {
        let guard = self.client().await?;
        let Some(conn) = guard.as_ref() else {
            return Err(self.gone());
        };
        conn.client
            .execute("DELETE FROM weir_jobs WHERE id = $1", &[&id_sql(id)])
            .await
            .map_err(|e| self.store("forgetting a job", e))?;
        Ok(())
    }

    pub(crate) async fn rows(&self) -> Result<Vec<Row>, CatalogError> {
        let guard = self.client().await?;
        let Some(conn) = guard.as_ref() else {
            return Err(self.gone());
        };
        let rows = conn
            .client
            .query(
                "SELECT id, name, state, updated_at, document, checksum FROM weir_jobs
                 ORDER BY id",
                &[],
            )
            .await
            .map_err(|e| self.store("reading the jobs", e))?;
        rows.into_iter()
            .map(|r| {
                Ok(Row {
                    id: u64::try_from(r.try_get::<_, i64>(0)?).unwrap_or(0),
                    name: r.try_get(1)?,
                    state: r.try_get(2)?,
                    updated_at: r.try_get(3)?,
                    document: r.try_get(4)?,
                    checksum: r.try_get(5)?,
                })
            })
            .collect::<Result<Vec<Row>, tokio_postgres::Error>>()
            .map_err(|e| self.store("reading the jobs", e))
    }

    fn gone(&self) -> CatalogError {
        CatalogError::Store {
            location: self.location.clone(),
            what: "using the connection".into(),
            source: "the connection is closed".into(),
        }
    }
}

fn id_sql(id: u64) -> i64 {
    i64::try_from(id).unwrap_or(i64::MAX)
}
