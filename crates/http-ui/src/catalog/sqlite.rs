//! The catalog in an SQLite file (the default, under the data directory).
//!
//! One connection, used on blocking threads one call at a time. The file is in write-ahead-log
//! mode with `synchronous = FULL` (a committed write survives a crash of the process or the
//! machine) and `locking_mode = EXCLUSIVE`, taken at open: a second server on the same file is
//! refused instead of resuming the same jobs.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use rusqlite::{Connection, OptionalExtension, params};

use super::{CatalogError, Row, TABLES, check_version};

/// An open SQLite catalog.
pub struct SqliteCatalog {
    location: String,
    /// The connection; a std mutex, as every use is a short blocking call on a blocking
    /// thread (never held across an await).
    conn: Arc<Mutex<Connection>>,
}

impl SqliteCatalog {
    /// Opens (creating) the catalog at `path` and takes it for this process.
    pub async fn open(path: PathBuf) -> Result<Self, CatalogError> {
        let location = path.display().to_string();
        let at = location.clone();
        let conn = tokio::task::spawn_blocking(move || open_blocking(&path, &at))
            .await
            .map_err(|e| store(&location, "opening", e))??;
        Ok(Self {
            location,
            conn: Arc::new(Mutex::new(conn)),
        })
    }

    pub fn location(&self) -> &str {
        &self.location
    }

    /// Runs `f` on the connection on a blocking thread.
    async fn with<T: Send + 'static>(
        &self,
        what: &'static str,
        f: impl FnOnce(&mut Connection) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T, CatalogError> {
        let conn = self.conn.clone();
        let location = self.location.clone();
        tokio::task::spawn_blocking(move || {
            let mut conn = conn
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            f(&mut conn).map_err(|e| store(&location, what, e))
        })
        .await
        .map_err(|e| store(&self.location, what, e))?
    }

    pub async fn allocate_id(&self) -> Result<u64, CatalogError> {
        self.with("allocating a job id", |conn| {
            let tx = conn.transaction()?;
            let last: Option<String> = tx
                .query_row(
                    "SELECT value FROM weir_catalog WHERE key = 'last-id'",
                    [],
                    |r| r.get(0),
                )
                .optional()?;
            let next = last.and_then(|v| v.parse::<u64>().ok()).unwrap_or(0) + 1;
            tx.execute(
                "INSERT INTO weir_catalog (key, value) VALUES ('last-id', ?1)
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                params![next.to_string()],
            )?;
            tx.commit()?;
            Ok(next)
        })
        .await
    }

    pub(crate) async fn save(&self, row: Row) -> Result<(), CatalogError> {
        self.with("writing a job", move |conn| {
            conn.execute(
                "INSERT INTO weir_jobs (id, name, state, updated_at, document, checksum)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                 ON CONFLICT (id) DO UPDATE SET name = excluded.name, state = excluded.state,
                   updated_at = excluded.updated_at, document = excluded.document,
                   checksum = excluded.checksum",
                params![
                    id_sql(row.id),
                    row.name,
                    row.state,
                    row.updated_at,
                    row.document,
                    row.checksum
                ],
            )?;
            Ok(())
        })
        .await
    }

    pub async fn delete(&self, id: u64) -> Result<(), CatalogError> {
        self.with("forgetting a job", move |conn| {
            conn.execute("DELETE FROM weir_jobs WHERE id = ?1", params![id_sql(id)])?;
            Ok(())
        })
        .await
    }

    pub(crate) async fn rows(&self) -> Result<Vec<Row>, CatalogError> {
        self.with("reading the jobs", |conn| {
            let mut stmt = conn.prepare(
                "SELECT id, name, state, updated_at, document, checksum FROM weir_jobs
                 ORDER BY id",
            )?;
            let rows = stmt.query_map([], |r| {
                Ok(Row {
                    epoch: None,
                    id: u64::try_from(r.get::<_, i64>(0)?).unwrap_or(0),
                    name: r.get(1)?,
                    state: r.get(2)?,
                    updated_at: r.get(3)?,
                    document: r.get(4)?,
                    checksum: r.get(5)?,
                })
            })?;
            rows.collect()
        })
        .await
    }
}

/// Ids are stored as SQLite's 64-bit signed integers; an id never comes near the sign bit.
fn id_sql(id: u64) -> i64 {
    i64::try_from(id).unwrap_or(i64::MAX)
}

fn store(
    location: &str,
    what: &str,
    source: impl std::error::Error + Send + Sync + 'static,
) -> CatalogError {
    CatalogError::Store {
        location: location.to_owned(),
        what: what.to_owned(),
        source: Box::new(source),
    }
}

fn open_blocking(path: &std::path::Path, location: &str) -> Result<Connection, CatalogError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| store(location, "creating its directory", e))?;
    }
    let conn = Connection::open(path).map_err(|e| store(location, "opening", e))?;
    let busy = |e: rusqlite::Error| {
        if e.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy) {
            CatalogError::InUse {
                location: location.to_owned(),
            }
        } else {
            store(location, "preparing", e)
        }
    };
    // No waiting for a lock another server holds: refuse at once.
    conn.busy_timeout(std::time::Duration::ZERO).map_err(busy)?;
    conn.pragma_update(None, "locking_mode", "EXCLUSIVE")
        .map_err(busy)?;
    conn.pragma_update(None, "journal_mode", "WAL")
        .map_err(busy)?;
    conn.pragma_update(None, "synchronous", "FULL")
        .map_err(busy)?;
    // Takes the exclusive lock now (and keeps it): the first write does.
    conn.execute_batch(&format!("BEGIN IMMEDIATE; {TABLES} COMMIT;"))
        .map_err(busy)?;
    let version: Option<String> = conn
        .query_row(
            "SELECT value FROM weir_catalog WHERE key = 'version'",
            [],
            |r| r.get(0),
        )
        .optional()
        .map_err(busy)?;
    check_version(location, version.as_deref())?;
    if version.is_none() {
        conn.execute(
            "INSERT INTO weir_catalog (key, value) VALUES ('version', ?1)",
            params![super::SCHEMA_VERSION.to_string()],
        )
        .map_err(busy)?;
    }
    Ok(conn)
}

#[cfg(test)]
mod tests {
    use super::super::tests::job;
    use super::super::{Catalog, CatalogConfig};
    use super::*;

    fn config(dir: &tempfile::TempDir) -> CatalogConfig {
        CatalogConfig::Sqlite(dir.path().join("nested").join("catalog.sqlite"))
    }

    #[tokio::test]
    async fn jobs_and_ids_survive_closing_and_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let catalog = Catalog::open(&config(&dir)).await.unwrap();
        assert_eq!(catalog.allocate_id().await.unwrap(), 1);
        assert_eq!(catalog.allocate_id().await.unwrap(), 2);
        let mut one = job(1);
        catalog.save(&one).await.unwrap();
        catalog.save(&job(2)).await.unwrap();
        one.state = "finished".into();
        catalog.save(&one).await.unwrap();
        catalog.delete(2).await.unwrap();
        drop(catalog);

        let catalog = Catalog::open(&config(&dir)).await.unwrap();
        let loaded = catalog.load().await.unwrap();
        assert!(loaded.unreadable.is_empty());
        assert_eq!(loaded.jobs, vec![one]);
        // Job 2 is gone, but its id is not given again.
        assert_eq!(catalog.allocate_id().await.unwrap(), 3);
    }

    #[tokio::test]
    async fn a_second_server_on_the_same_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let _first = Catalog::open(&config(&dir)).await.unwrap();
        let e = Catalog::open(&config(&dir)).await.unwrap_err();
        assert!(matches!(e, CatalogError::InUse { .. }), "{e}");
        assert!(e.to_string().contains("another weir serve"), "{e}");
    }

    #[tokio::test]
    async fn a_catalog_of_a_newer_weir_is_refused_and_a_damaged_row_reported() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nested").join("catalog.sqlite");
        let catalog = Catalog::open(&config(&dir)).await.unwrap();
        catalog.save(&job(1)).await.unwrap();
        catalog.save(&job(2)).await.unwrap();
        drop(catalog);
        {
            let conn = Connection::open(&path).unwrap();
            conn.execute(
                "UPDATE weir_jobs SET document = replace(document, 'job-2', 'job-X') WHERE id = 2",
                [],
            )
            .unwrap();
        }
        let catalog = Catalog::open(&config(&dir)).await.unwrap();
        let loaded = catalog.load().await.unwrap();
        assert_eq!(loaded.jobs.iter().map(|j| j.id).collect::<Vec<_>>(), [1]);
        assert_eq!(loaded.unreadable.len(), 1);
        assert!(loaded.unreadable[0].to_string().contains("job 2"));
        drop(catalog);
        {
            let conn = Connection::open(&path).unwrap();
            conn.execute(
                "UPDATE weir_catalog SET value = '99' WHERE key = 'version'",
                [],
            )
            .unwrap();
        }
        let e = Catalog::open(&config(&dir)).await.unwrap_err();
        assert!(matches!(e, CatalogError::Newer { found: 99, .. }), "{e}");
    }
}
