//! The job catalog: what `weir serve` knows of its jobs, kept where a restart of the server
//! finds it again.
//!
//! Every submitted job is one row: its id (allocated once, never reused), its name and state,
//! and a JSON document ([`StoredJob`]) with the job file as submitted, its overrides, its
//! runs, failures, checkpoints and savepoints. A server that starts reads every row back
//! ([`Catalog::load`]); the host resumes the jobs that were running and lists the others
//! with their history.
//!
//! Two stores, one schema:
//! - [`sqlite`] (the default): a file under the data directory, `catalog.sqlite`. SQLite
//!   (through `rusqlite`, on the system's libsqlite3) is the embedded store Arroyo also uses
//!   for this: one file, transactions, and a write-ahead log whose frames carry checksums, so
//!   a crash mid-write leaves the last committed catalog.
//! - [`postgres`]: `--catalog postgres://...`, for a catalog that outlives the machine.
//!
//! Each row also carries an xxh3 checksum of its document: a row damaged outside weir is
//! reported at load and left alone, never read as something else. The catalog records its
//! schema version; one written by a newer weir is refused with a clear message, and a server
//! holds its catalog alone (SQLite: an exclusive lock; PostgreSQL: an advisory lock), so two
//! servers never resume the same jobs.

pub mod persist;
pub mod postgres;
pub mod sqlite;

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The version of the catalog's tables and documents that this weir writes and reads.
pub const SCHEMA_VERSION: u32 = 1;

/// Where the catalog is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CatalogConfig {
    /// An SQLite file.
    Sqlite(PathBuf),
    /// A PostgreSQL database, by connection string.
    Postgres(String),
}

impl CatalogConfig {
    /// `postgres://...` or `postgresql://...` (or a `key=value` connection string with a
    /// `host=`): PostgreSQL; anything else is the path of an SQLite file.
    pub fn parse(text: &str) -> Self {
        let t = text.trim();
        if t.starts_with("postgres://") || t.starts_with("postgresql://") || t.contains("host=") {
            CatalogConfig::Postgres(t.to_owned())
        } else {
            CatalogConfig::Sqlite(PathBuf::from(t.strip_prefix("sqlite://").unwrap_or(t)))
        }
    }

    /// The default: `catalog.sqlite` under weir's data directory.
    pub fn default_sqlite() -> Self {
        CatalogConfig::Sqlite(weir_runtime::spec::paths::data_dir().join("catalog.sqlite"))
    }

    /// Where it is, for messages, without a password.
    pub fn describe(&self) -> String {
        match self {
            CatalogConfig::Sqlite(path) => path.display().to_string(),
            CatalogConfig::Postgres(url) => mask_password(url),
        }
    }
}

/// A connection string with its password replaced by `***`.
fn mask_password(url: &str) -> String {
    if let Ok(mut parsed) = url::Url::parse(url) {
        if parsed.password().is_some() && parsed.set_password(Some("***")).is_ok() {
            return parsed.to_string();
        }
        return parsed.to_string();
    }
    // key=value form: mask `password=...` up to the next space.
    url.split(' ')
        .map(|part| {
            if part.starts_with("password=") {
                "password=***"
            } else {
                part
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// What the catalog keeps of one job.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct StoredJob {
    /// The document's version ([`SCHEMA_VERSION`] when written by this weir).
    pub version: u32,
    pub id: u64,
    pub name: String,
    /// Epoch ms.
    pub submitted_at: i64,
    /// The job file as submitted.
    pub text: String,
    /// `--set` overrides it was submitted (or last rescaled) with, in order.
    #[serde(default)]
    pub overrides: Vec<String>,
    /// Its state when last written (`running`, `restarting`, `finished`, `failed`, ...).
    pub state: String,
    /// Its current (or last) run: 1 for the submitted run, +1 per restart or resume.
    pub run: u32,
    pub started_at: i64,
    pub ended_at: Option<i64>,
    /// The snapshot the current run started from.
    pub restored_from: Option<String>,
    /// Why the job failed, if it did.
    pub error: Option<String>,
    /// Every run so far, oldest first (the newest [`RUNS`] kept).
    #[serde(default)]
    pub runs: Vec<StoredRun>,
    /// Failures, restarts and failed savepoints, oldest first.
    #[serde(default)]
    pub exceptions: Vec<serde_json::Value>,
    /// The checkpoints the server saw the job take, oldest first.
    #[serde(default)]
    pub checkpoints: Vec<serde_json::Value>,
    /// Savepoint requests and how they ended.
    #[serde(default)]
    pub savepoints: Vec<serde_json::Value>,
    /// The summary of the last run that ended.
    #[serde(default)]
    pub summary: Option<serde_json::Value>,
    /// In a fleet: the lease epoch this document was written under. The fleet's catalog
    /// writes it only while that lease is the writer's ([`postgres`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch: Option<u64>,
    /// What the job's runs on other servers counted before its current (or last) run began
    /// (a takeover): shown added to the run's own counts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub carried: Option<StoredTotals>,
    /// The job's counts when the document was written: `carried` and the current run's. A
    /// server that takes the job over carries these on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub totals: Option<StoredTotals>,
}

/// A job's counts: events its sources read, records in and out of each node.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct StoredTotals {
    pub events: u64,
    #[serde(default)]
    pub nodes: Vec<NodeTotals>,
    /// Where the job's input was, of how much, when every source knows its size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<[u64; 2]>,
}

/// One node's counts in [`StoredTotals`], by its name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct NodeTotals {
    pub name: String,
    pub records_in: u64,
    pub records_out: u64,
}

impl StoredTotals {
    /// `self` and `metrics`' counts together.
    pub fn plus(&self, metrics: &weir_runtime::api::JobMetrics) -> StoredTotals {
        let nodes = metrics
            .nodes
            .iter()
            .map(|n| {
                let before = self.node(&n.name);
                NodeTotals {
                    name: n.name.clone(),
                    records_in: before.records_in + n.sum(|t| &t.records_in),
                    records_out: before.records_out + n.sum(|t| &t.records_out),
                }
            })
            .collect();
        let progress = match metrics.progress() {
            (done, Some(total)) => Some([done, total]),
            (_, None) => self.progress,
        };
        StoredTotals {
            events: self.events + metrics.events(),
            nodes,
            progress,
        }
    }

    /// Node `name`'s counts (none if it has none).
    pub fn node(&self, name: &str) -> NodeTotals {
        self.nodes
            .iter()
            .find(|n| n.name == name)
            .cloned()
            .unwrap_or_default()
    }
}

/// Runs remembered per job.
pub const RUNS: usize = 64;
/// Checkpoints remembered per job (the newest).
pub const CHECKPOINTS: usize = 100;

/// One run of a job.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct StoredRun {
    pub run: u32,
    pub started_at: i64,
    pub ended_at: Option<i64>,
    /// How it ended (`finished`, `failed`, `cancelled`, `stopped`), or `running`, or
    /// `interrupted` (the server stopped under it).
    pub state: String,
    pub restored_from: Option<String>,
    pub error: Option<String>,
}

/// Why the catalog cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    /// The store cannot be reached or failed (disk, database).
    #[error("the job catalog at {location}: {what}: {source}")]
    Store {
        location: String,
        what: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Another server holds the catalog.
    #[error(
        "the job catalog at {location} is in use by another weir serve: two servers would \
         resume the same jobs; stop the other one or give this one another --catalog"
    )]
    InUse { location: String },
    /// Written by a newer weir.
    #[error(
        "the job catalog at {location} was written by a newer weir (catalog version {found}; \
         this weir reads version {SCHEMA_VERSION} and older): upgrade weir, or start with \
         another --catalog"
    )]
    Newer { location: String, found: u32 },
    /// A row of the catalog is not what weir wrote.
    #[error("the job catalog at {location}: job {id}: {reason}")]
    Corrupt {
        location: String,
        id: u64,
        reason: String,
    },
}

/// Everything a catalog holds, as read at start.
#[derive(Debug, Default)]
pub struct Loaded {
    /// Jobs by id.
    pub jobs: Vec<StoredJob>,
    /// Rows that could not be read (damaged, or from a newer weir): reported, left alone.
    pub unreadable: Vec<CatalogError>,
}

/// A row as the stores keep it.
pub(crate) struct Row {
    pub id: u64,
    pub name: String,
    pub state: String,
    pub updated_at: i64,
    pub document: String,
    pub checksum: String,
    /// The lease epoch it was written under (in a fleet).
    pub epoch: Option<u64>,
}

impl Row {
    /// The row of `job`, its document checksummed.
    pub(crate) fn of(job: &StoredJob) -> Result<Row, serde_json::Error> {
        let document = serde_json::to_string(job)?;
        Ok(Row {
            id: job.id,
            name: job.name.clone(),
            state: job.state.clone(),
            updated_at: weir_state::clock::now_ms(),
            checksum: checksum(&document),
            document,
            epoch: job.epoch,
        })
    }

    /// The job the row holds, if its checksum and version check out.
    pub(crate) fn job(&self, location: &str) -> Result<StoredJob, CatalogError> {
        let corrupt = |reason: String| CatalogError::Corrupt {
            location: location.to_owned(),
            id: self.id,
            reason,
        };
        if checksum(&self.document) != self.checksum {
            return Err(corrupt(
                "its document does not match its checksum (changed outside weir, or damaged)"
                    .into(),
            ));
        }
        #[derive(Deserialize)]
        struct Version {
            version: u32,
        }
        let version: Version = serde_json::from_str(&self.document)
            .map_err(|e| corrupt(format!("its document has no version: {e}")))?;
        if version.version > SCHEMA_VERSION {
            return Err(CatalogError::Newer {
                location: location.to_owned(),
                found: version.version,
            });
        }
        let job: StoredJob = serde_json::from_str(&self.document)
            .map_err(|e| corrupt(format!("its document cannot be read: {e}")))?;
        if job.id != self.id {
            return Err(corrupt(format!("its document names job {}", job.id)));
        }
        Ok(job)
    }
}

/// The checksum the catalog keeps beside a document.
fn checksum(document: &str) -> String {
    format!("{:016x}", xxhash_rust::xxh3::xxh3_64(document.as_bytes()))
}

/// The tables, in SQL both stores understand.
pub(crate) const TABLES: &str = "
CREATE TABLE IF NOT EXISTS weir_catalog (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS weir_jobs (
    id BIGINT PRIMARY KEY,
    name TEXT NOT NULL,
    state TEXT NOT NULL,
    updated_at BIGINT NOT NULL,
    document TEXT NOT NULL,
    checksum TEXT NOT NULL
);
";

/// A job catalog, open.
pub enum Catalog {
    Sqlite(sqlite::SqliteCatalog),
    Postgres(Box<postgres::PgCatalog>),
}

impl std::fmt::Debug for Catalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Catalog").field(&self.location()).finish()
    }
}

impl Catalog {
    /// Opens the PostgreSQL catalog at `url` shared by a fleet, as server `me`: no lock (the
    /// fleet's leases say who runs what), and a job's document is written only under its
    /// lease ([`postgres::PgCatalog::open_shared`]).
    pub async fn open_fleet(url: &str, me: &str) -> Result<Catalog, CatalogError> {
        Ok(Catalog::Postgres(Box::new(
            postgres::PgCatalog::open_shared(url.to_owned(), me.to_owned()).await?,
        )))
    }

    /// Opens (creating if needed) the catalog `config` names, and takes it for this server.
    pub async fn open(config: &CatalogConfig) -> Result<Catalog, CatalogError> {
        Ok(match config {
            CatalogConfig::Sqlite(path) => {
                Catalog::Sqlite(sqlite::SqliteCatalog::open(path.clone()).await?)
            }
            CatalogConfig::Postgres(url) => {
                Catalog::Postgres(Box::new(postgres::PgCatalog::open(url.clone()).await?))
            }
        })
    }

    /// Where the catalog is, for messages.
    pub fn location(&self) -> &str {
        match self {
            Catalog::Sqlite(c) => c.location(),
            Catalog::Postgres(c) => c.location(),
        }
    }

    /// A new job id: one more than any this catalog ever gave, never reused.
    pub async fn allocate_id(&self) -> Result<u64, CatalogError> {
        match self {
            Catalog::Sqlite(c) => c.allocate_id().await,
            Catalog::Postgres(c) => c.allocate_id().await,
        }
    }

    /// Writes `job` (replacing what the catalog held of it), durably before it returns.
    pub async fn save(&self, job: &StoredJob) -> Result<(), CatalogError> {
        let row = Row::of(job).map_err(|e| CatalogError::Store {
            location: self.location().to_owned(),
            what: format!("encoding job {}", job.id),
            source: Box::new(e),
        })?;
        match self {
            Catalog::Sqlite(c) => c.save(row).await,
            Catalog::Postgres(c) => c.save(row).await,
        }
    }

    /// Forgets job `id`.
    pub async fn delete(&self, id: u64) -> Result<(), CatalogError> {
        match self {
            Catalog::Sqlite(c) => c.delete(id).await,
            Catalog::Postgres(c) => c.delete(id).await,
        }
    }

    /// Every job the catalog holds, oldest first.
    pub async fn load(&self) -> Result<Loaded, CatalogError> {
        let rows = match self {
            Catalog::Sqlite(c) => c.rows().await?,
            Catalog::Postgres(c) => c.rows().await?,
        };
        let mut loaded = Loaded::default();
        for row in rows {
            match row.job(self.location()) {
                Ok(job) => loaded.jobs.push(job),
                Err(e) => loaded.unreadable.push(e),
            }
        }
        loaded.jobs.sort_by_key(|j| j.id);
        Ok(loaded)
    }
}

/// The catalog version a store's `weir_catalog` table records, checked against this weir's.
pub(crate) fn check_version(location: &str, recorded: Option<&str>) -> Result<(), CatalogError> {
    let Some(text) = recorded else {
        return Ok(());
    };
    let found: u32 = text.parse().map_err(|_| CatalogError::Corrupt {
        location: location.to_owned(),
        id: 0,
        reason: format!("its recorded version `{text}` is not a number"),
    })?;
    if found > SCHEMA_VERSION {
        return Err(CatalogError::Newer {
            location: location.to_owned(),
            found,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn job(id: u64) -> StoredJob {
        StoredJob {
            version: SCHEMA_VERSION,
            id,
            name: format!("job-{id}"),
            submitted_at: 1_700_000_000_000,
            text: "name: x\n# a comment\n".into(),
            overrides: vec!["parallelism=2".into()],
            state: "running".into(),
            run: 1,
            started_at: 1_700_000_000_001,
            ended_at: None,
            restored_from: None,
            error: None,
            runs: vec![StoredRun {
                run: 1,
                started_at: 1_700_000_000_001,
                ended_at: None,
                state: "running".into(),
                restored_from: None,
                error: None,
            }],
            exceptions: vec![serde_json::json!({"kind": "restart", "message": "boom"})],
            checkpoints: Vec::new(),
            savepoints: Vec::new(),
            summary: None,
            epoch: None,
            carried: None,
            totals: None,
        }
    }

    #[test]
    fn a_row_reads_back_as_the_job_written() {
        let j = job(7);
        let row = Row::of(&j).unwrap();
        assert_eq!(row.job("here").unwrap(), j);
    }

    #[test]
    fn a_changed_document_or_a_newer_version_is_refused_never_misread() {
        let mut row = Row::of(&job(7)).unwrap();
        row.document = row.document.replace("job-7", "job-8");
        let e = row.job("here").unwrap_err();
        assert!(e.to_string().contains("checksum"), "{e}");

        let mut newer = job(7);
        newer.version = SCHEMA_VERSION + 1;
        let e = Row::of(&newer).unwrap().job("here").unwrap_err();
        assert!(matches!(e, CatalogError::Newer { found, .. } if found == SCHEMA_VERSION + 1));
        assert!(e.to_string().contains("newer weir"), "{e}");

        let mut other = Row::of(&job(7)).unwrap();
        other.id = 8;
        assert!(
            other
                .job("here")
                .unwrap_err()
                .to_string()
                .contains("names job 7")
        );
    }

    #[test]
    fn catalog_locations_parse_and_hide_passwords() {
        assert_eq!(
            CatalogConfig::parse("postgres://weir:secret@db:5432/weir").describe(),
            "postgres://weir:***@db:5432/weir"
        );
        assert_eq!(
            CatalogConfig::parse("host=db user=weir password=secret").describe(),
            "host=db user=weir password=***"
        );
        assert_eq!(
            CatalogConfig::parse("/var/lib/weir/catalog.sqlite"),
            CatalogConfig::Sqlite(PathBuf::from("/var/lib/weir/catalog.sqlite"))
        );
    }

    #[test]
    fn a_newer_catalog_version_is_refused() {
        assert!(check_version("here", None).is_ok());
        assert!(check_version("here", Some("1")).is_ok());
        let e = check_version("here", Some("2")).unwrap_err();
        assert!(e.to_string().contains("newer weir"), "{e}");
    }
}
