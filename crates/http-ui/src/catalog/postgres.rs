//! The catalog in a PostgreSQL database (`weir serve --catalog postgres://...`).
//!
//! One connection, reopened when it breaks. The tables are created if missing (under a
//! transaction-level advisory lock, so servers starting together do not race in the system
//! catalogs). A lone server holds a session-level advisory lock for as long as it runs, so a
//! second server on the same catalog is refused. Every write is one statement, atomic by
//! itself; the id counter is advanced with an `UPDATE ... RETURNING` in one statement, so ids
//! are never given twice.
//!
//! In a fleet ([`PgCatalog::open_shared`]) there is no lock: several servers share the
//! catalog, and a job's document is written only by the holder of its lease: one transaction
//! locks the lease row, checks its owner and epoch against the document's, writes the document,
//! and, when the document says the job ended, drops the lease. A server that lost the lease
//! writes nothing.

use tokio::sync::Mutex;

use super::{CatalogError, Row, TABLES, check_version};
use crate::db::{Conn, DDL_LOCK, id_of, id_sql};

/// The advisory lock key of a catalog: "weir" in ASCII, then 1.
const LOCK_KEY: i64 = 0x7765_6972_0000_0001;

/// Writes a job's row, replacing what the catalog held of it.
const UPSERT_JOB: &str = "INSERT INTO weir_jobs (id, name, state, updated_at, document, checksum)
     VALUES ($1, $2, $3, $4, $5, $6)
     ON CONFLICT (id) DO UPDATE SET name = excluded.name, state = excluded.state,
       updated_at = excluded.updated_at, document = excluded.document,
       checksum = excluded.checksum";

impl Row {
    /// The parameters of [`UPSERT_JOB`], `id` being the row's id as PostgreSQL keeps it.
    fn params<'a>(&'a self, id: &'a i64) -> [&'a (dyn tokio_postgres::types::ToSql + Sync); 6] {
        [
            id,
            &self.name,
            &self.state,
            &self.updated_at,
            &self.document,
            &self.checksum,
        ]
    }
}

/// An open PostgreSQL catalog.
pub struct PgCatalog {
    url: String,
    location: String,
    /// The connection holding the advisory lock. A tokio mutex: calls await the database
    /// while holding it, one at a time.
    conn: Mutex<Option<Conn>>,
    /// In a fleet: this server's id there (no lock is taken; documents are fenced).
    owner: Option<String>,
}

impl PgCatalog {
    /// Connects, creates the tables if needed, checks the version and takes the lock.
    pub async fn open(url: String) -> Result<Self, CatalogError> {
        let location = super::CatalogConfig::Postgres(url.clone()).describe();
        let catalog = Self {
            url,
            location,
            conn: Mutex::new(None),
            owner: None,
        };
        let conn = catalog.connect().await?;
        *catalog.conn.lock().await = Some(conn);
        Ok(catalog)
    }

    /// Opens the catalog shared by a fleet, for server `owner`: the tables are created if
    /// missing, no lock is taken, and documents are written only under their job's lease.
    pub async fn open_shared(url: String, owner: String) -> Result<Self, CatalogError> {
        let location = super::CatalogConfig::Postgres(url.clone()).describe();
        let catalog = Self {
            url,
            location,
            conn: Mutex::new(None),
            owner: Some(owner),
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
        let mut conn = Conn { client, driver };
        if self.owner.is_none() {
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
        }
        let create = async {
            let tx = conn.client.transaction().await?;
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[&DDL_LOCK])
                .await?;
            tx.batch_execute(TABLES).await?;
            tx.commit().await
        };
        create
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
        if let Some(owner) = &self.owner {
            return self.save_fenced(row, owner).await;
        }
        let guard = self.client().await?;
        let Some(conn) = guard.as_ref() else {
            return Err(self.gone());
        };
        let id = id_sql(row.id);
        conn.client
            .execute(UPSERT_JOB, &row.params(&id))
            .await
            .map_err(|e| self.store("writing a job", e))?;
        Ok(())
    }

    /// [`Self::save`] in a fleet: written only under the job's lease, held by `owner` at the
    /// document's epoch; a document saying the job ended drops the lease with it. A document
    /// the lease does not allow is dropped (logged): it comes from a copy that has lost the
    /// job, whose new owner writes the job from now on.
    async fn save_fenced(&self, row: Row, owner: &str) -> Result<(), CatalogError> {
        let Some(epoch) = row.epoch else {
            tracing::debug!(
                job = row.id,
                "not written: a fleet writes a job only under its lease"
            );
            return Ok(());
        };
        let ended = crate::lifecycle::JobState::ended_name(&row.state);
        let mut guard = self.client().await?;
        let Some(conn) = guard.as_mut() else {
            return Err(self.gone());
        };
        let write = async {
            let tx = conn.client.transaction().await?;
            let held = tx
                .query_opt(
                    "SELECT 1 FROM weir_leases WHERE job_id = $1 AND owner = $2 AND epoch = $3
                     FOR UPDATE",
                    &[&id_sql(row.id), &owner, &id_sql(epoch)],
                )
                .await?;
            if held.is_none() {
                tx.rollback().await?;
                return Ok(false);
            }
            let id = id_sql(row.id);
            tx.execute(UPSERT_JOB, &row.params(&id)).await?;
            if ended {
                tx.execute(
                    "DELETE FROM weir_leases WHERE job_id = $1 AND epoch = $2",
                    &[&id_sql(row.id), &id_sql(epoch)],
                )
                .await?;
            }
            tx.commit().await?;
            Ok(true)
        };
        let written: Result<bool, tokio_postgres::Error> = write.await;
        match written {
            Ok(true) => Ok(()),
            Ok(false) => {
                // A fenced copy's document: the fleet said so when it stopped the copy.
                tracing::debug!(
                    job = row.id,
                    epoch,
                    "not written: fenced (the job's lease is no longer this server's)"
                );
                Ok(())
            }
            Err(e) => Err(self.store("writing a job", e)),
        }
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
                    epoch: None,
                    id: id_of(r.try_get(0)?),
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
