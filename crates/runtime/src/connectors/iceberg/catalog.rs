//! Iceberg's SQL catalog (the JDBC catalog's tables, as Java's `JdbcCatalog` and pyiceberg's
//! `SqlCatalog` keep them) on SQLite or PostgreSQL, through the drivers weir already has.
//!
//! A table is a row of `iceberg_tables` naming its current metadata file; a commit writes the
//! new metadata file and moves the row to it with a compare-and-swap on the old location, so
//! two writers never both win. Namespaces are rows of `iceberg_namespace_properties` (an
//! `exists` row for one with no properties, as pyiceberg writes).
//!
//! Iceberg's own `iceberg-catalog-sql` crate was not used: it reaches SQLite through sqlx,
//! whose SQLite driver links a different `libsqlite3-sys` than weir's `rusqlite` (a crate
//! graph may hold only one library linking `sqlite3`), and it would add sqlx to every build.

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use iceberg::io::FileIO;
use iceberg::spec::{TableMetadata, TableMetadataBuilder};
use iceberg::table::Table;
use iceberg::{
    Catalog, Error, ErrorKind, Namespace, NamespaceIdent, Result, TableCommit, TableCreation,
    TableIdent,
};

use crate::connectors::postgres::tls::PgConnect;

const TABLES: &str = "iceberg_tables";
const NAMESPACES: &str = "iceberg_namespace_properties";

/// Where the catalog's rows live.
enum Db {
    Sqlite(Arc<Mutex<rusqlite::Connection>>),
    Postgres {
        connect: Box<PgConnect>,
        /// The open connection, dropped after any error so the next call connects again.
        client: Box<PgClient>,
    },
}

/// The PostgreSQL catalog's open connection and the task that drives it.
type PgClient = tokio::sync::Mutex<Option<(tokio_postgres::Client, tokio::task::JoinHandle<()>)>>;

/// A value bound to a statement: every column of the catalog's tables is text.
type Params = Vec<Option<String>>;

impl Db {
    /// Runs `sql` (with `?` placeholders) and returns its rows, every column as text.
    async fn query(&self, sql: &str, params: Params) -> Result<Vec<Vec<Option<String>>>> {
        match self {
            Db::Sqlite(conn) => {
                let conn = conn.clone();
                let sql = sql.to_string();
                blocking(move || {
                    let conn = conn.lock().map_err(|_| poisoned())?;
                    let mut stmt = conn.prepare_cached(&sql).map_err(sqlite_error)?;
                    let width = stmt.column_count();
                    let rows = stmt
                        .query_map(rusqlite::params_from_iter(params.iter()), |row| {
                            (0..width)
                                .map(|i| row.get::<_, Option<String>>(i))
                                .collect::<rusqlite::Result<Vec<_>>>()
                        })
                        .map_err(sqlite_error)?;
                    rows.collect::<rusqlite::Result<Vec<_>>>()
                        .map_err(sqlite_error)
                })
                .await
            }
            Db::Postgres { .. } => {
                let sql = numbered(sql);
                self.with_pg(|client| {
                    Box::pin(async move {
                        let refs = pg_params(&params);
                        let rows = client.query(&sql, &refs).await?;
                        rows.iter()
                            .map(|r| {
                                (0..r.len())
                                    .map(|i| r.try_get::<_, Option<String>>(i))
                                    .collect::<std::result::Result<Vec<_>, _>>()
                            })
                            .collect()
                    })
                })
                .await
            }
        }
    }

    /// Runs `sql` and returns how many rows it changed.
    async fn execute(&self, sql: &str, params: Params) -> Result<u64> {
        match self {
            Db::Sqlite(conn) => {
                let conn = conn.clone();
                let sql = sql.to_string();
                blocking(move || {
                    let conn = conn.lock().map_err(|_| poisoned())?;
                    let n = conn
                        .execute(&sql, rusqlite::params_from_iter(params.iter()))
                        .map_err(sqlite_error)?;
                    Ok(n as u64)
                })
                .await
            }
            Db::Postgres { .. } => {
                let sql = numbered(sql);
                self.with_pg(|client| {
                    Box::pin(async move {
                        let refs = pg_params(&params);
                        client.execute(&sql, &refs).await
                    })
                })
                .await
            }
        }
    }

    /// Runs `f` on the PostgreSQL connection, connecting first if there is none.
    async fn with_pg<T>(
        &self,
        f: impl for<'c> FnOnce(
            &'c tokio_postgres::Client,
        ) -> futures::future::BoxFuture<
            'c,
            std::result::Result<T, tokio_postgres::Error>,
        >,
    ) -> Result<T> {
        let Db::Postgres { connect, client } = self else {
            return Err(Error::new(
                ErrorKind::Unexpected,
                "not a PostgreSQL catalog",
            ));
        };
        let mut guard = client.lock().await;
        if guard.is_none() {
            *guard = Some(connect.connect().await.map_err(pg_error)?);
        }
        let Some((c, _)) = guard.as_ref() else {
            return Err(Error::new(ErrorKind::Unexpected, "no catalog connection"));
        };
        match f(c).await {
            Ok(v) => Ok(v),
            Err(e) => {
                if let Some((_, driver)) = guard.take() {
                    driver.abort();
                }
                Err(pg_error(e))
            }
        }
    }
}

/// `params` as the PostgreSQL driver binds them.
fn pg_params(params: &Params) -> Vec<&(dyn tokio_postgres::types::ToSql + Sync)> {
    params
        .iter()
        .map(|p| p as &(dyn tokio_postgres::types::ToSql + Sync))
        .collect()
}

/// `?` placeholders as PostgreSQL's `$1`, `$2`, ... (the catalog's statements hold no `?`
/// inside quotes).
fn numbered(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 8);
    let mut n = 0;
    for c in sql.chars() {
        if c == '?' {
            n += 1;
            out.push('$');
            out.push_str(&n.to_string());
        } else {
            out.push(c);
        }
    }
    out
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f).await.map_err(|e| {
        Error::new(ErrorKind::Unexpected, "the catalog's SQLite task").with_source(e)
    })?
}

fn poisoned() -> Error {
    Error::new(
        ErrorKind::Unexpected,
        "the catalog's SQLite connection was poisoned by a panic",
    )
}

fn sqlite_error(e: rusqlite::Error) -> Error {
    Error::new(ErrorKind::Unexpected, "the SQLite catalog").with_source(e)
}

fn pg_error(e: tokio_postgres::Error) -> Error {
    Error::new(ErrorKind::Unexpected, "the PostgreSQL catalog").with_source(e)
}

/// The SQL catalog named `name` (the `catalog_name` of its rows).
pub struct SqlCatalog {
    name: String,
    db: Db,
    file_io: FileIO,
    warehouse: String,
}

impl std::fmt::Debug for SqlCatalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlCatalog")
            .field("name", &self.name)
            .field("warehouse", &self.warehouse)
            .finish()
    }
}

/// Which database a catalog `uri` names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CatalogUri {
    /// `sqlite:` followed by a path (`sqlite:///var/lib/weir/catalog.db`, `sqlite:catalog.db`).
    Sqlite(std::path::PathBuf),
    /// A PostgreSQL URL (`postgres://` or `postgresql://`), TLS by `sslmode` as the sink's.
    Postgres(String),
}

impl CatalogUri {
    pub fn parse(uri: &str) -> std::result::Result<Self, String> {
        if let Some(rest) = uri.strip_prefix("sqlite:") {
            let path = rest.strip_prefix("//").unwrap_or(rest);
            if path.is_empty() {
                return Err(
                    "`sqlite:` needs a path, e.g. `sqlite:///var/lib/weir/catalog.db`".into(),
                );
            }
            return Ok(CatalogUri::Sqlite(path.into()));
        }
        if uri.starts_with("postgres://") || uri.starts_with("postgresql://") {
            return Ok(CatalogUri::Postgres(uri.to_string()));
        }
        Err(
            "a catalog `uri` is `sqlite:<path>` or `postgresql://...` (Iceberg's SQL catalog)"
                .into(),
        )
    }
}

impl SqlCatalog {
    /// Opens the catalog at `uri`, creating its two tables if they are missing. Tables created
    /// without a location go under `warehouse` (`<warehouse>/<namespace>/<table>`).
    pub async fn open(
        name: &str,
        uri: &CatalogUri,
        warehouse: String,
        file_io: FileIO,
    ) -> Result<Self> {
        let db = match uri {
            CatalogUri::Sqlite(path) => {
                let path = path.clone();
                let conn = blocking(move || {
                    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                        std::fs::create_dir_all(dir).map_err(|e| {
                            Error::new(
                                ErrorKind::Unexpected,
                                format!("creating the catalog's directory {}", dir.display()),
                            )
                            .with_source(e)
                        })?;
                    }
                    let conn = rusqlite::Connection::open(&path).map_err(sqlite_error)?;
                    // Another process (pyiceberg, a second job) may hold the lock for a moment.
                    conn.busy_timeout(std::time::Duration::from_secs(10))
                        .map_err(sqlite_error)?;
                    Ok(conn)
                })
                .await?;
                Db::Sqlite(Arc::new(Mutex::new(conn)))
            }
            CatalogUri::Postgres(connection) => Db::Postgres {
                connect: Box::new(
                    PgConnect::parse(connection)
                        .map_err(|e| Error::new(ErrorKind::DataInvalid, e))?,
                ),
                client: Box::new(tokio::sync::Mutex::new(None)),
            },
        };
        let catalog = Self {
            name: name.to_string(),
            db,
            file_io,
            warehouse: warehouse.trim_end_matches('/').to_string(),
        };
        catalog
            .db
            .execute(
                &format!(
                    "CREATE TABLE IF NOT EXISTS {TABLES} (
                        catalog_name VARCHAR(255) NOT NULL,
                        table_namespace VARCHAR(255) NOT NULL,
                        table_name VARCHAR(255) NOT NULL,
                        metadata_location VARCHAR(1000),
                        previous_metadata_location VARCHAR(1000),
                        PRIMARY KEY (catalog_name, table_namespace, table_name))"
                ),
                Vec::new(),
            )
            .await?;
        catalog
            .db
            .execute(
                &format!(
                    "CREATE TABLE IF NOT EXISTS {NAMESPACES} (
                        catalog_name VARCHAR(255) NOT NULL,
                        namespace VARCHAR(255) NOT NULL,
                        property_key VARCHAR(255) NOT NULL,
                        property_value VARCHAR(1000),
                        PRIMARY KEY (catalog_name, namespace, property_key))"
                ),
                Vec::new(),
            )
            .await?;
        Ok(catalog)
    }

    fn table(&self, ident: TableIdent, location: String, metadata: TableMetadata) -> Result<Table> {
        Table::builder()
            .file_io(self.file_io.clone())
            .metadata_location(location)
            .identifier(ident)
            .metadata(metadata)
            // The library's tasks (manifest reads) on the runtime the sink runs on.
            .runtime(iceberg::Runtime::current())
            .build()
    }

    /// The table's current metadata location, if the table exists.
    async fn location_of(&self, ident: &TableIdent) -> Result<Option<String>> {
        let rows = self
            .db
            .query(
                &format!(
                    "SELECT metadata_location FROM {TABLES}
                     WHERE catalog_name = ? AND table_namespace = ? AND table_name = ?"
                ),
                vec![
                    Some(self.name.clone()),
                    Some(ident.namespace().join(".")),
                    Some(ident.name().to_string()),
                ],
            )
            .await?;
        Ok(rows
            .into_iter()
            .next()
            .and_then(|r| r.into_iter().next().flatten()))
    }
}

fn some(s: impl Into<String>) -> Option<String> {
    Some(s.into())
}

#[async_trait]
impl Catalog for SqlCatalog {
    async fn list_namespaces(
        &self,
        parent: Option<&NamespaceIdent>,
    ) -> Result<Vec<NamespaceIdent>> {
        let rows = self
            .db
            .query(
                &format!(
                    "SELECT DISTINCT namespace FROM {NAMESPACES} WHERE catalog_name = ?
                     UNION SELECT DISTINCT table_namespace FROM {TABLES} WHERE catalog_name = ?"
                ),
                vec![some(&self.name), some(&self.name)],
            )
            .await?;
        let mut out = Vec::new();
        for name in rows
            .into_iter()
            .filter_map(|r| r.into_iter().next().flatten())
        {
            let ident = NamespaceIdent::from_strs(name.split('.'))?;
            let inside = match parent {
                None => ident.len() == 1,
                Some(p) => ident.len() == p.len() + 1 && ident[..p.len()] == p[..],
            };
            if inside && !out.contains(&ident) {
                out.push(ident);
            }
        }
        Ok(out)
    }

    async fn create_namespace(
        &self,
        namespace: &NamespaceIdent,
        properties: HashMap<String, String>,
    ) -> Result<Namespace> {
        if self.namespace_exists(namespace).await? {
            return Err(Error::new(
                ErrorKind::NamespaceAlreadyExists,
                format!("the namespace {} exists", namespace.join(".")),
            ));
        }
        let name = namespace.join(".");
        let mut rows: Vec<(String, String)> = properties.clone().into_iter().collect();
        if rows.is_empty() {
            rows.push(("exists".into(), "true".into()));
        }
        for (k, v) in rows {
            self.db
                .execute(
                    &format!(
                        "INSERT INTO {NAMESPACES} (catalog_name, namespace, property_key, property_value)
                         VALUES (?, ?, ?, ?)"
                    ),
                    vec![some(&self.name), some(&name), Some(k), Some(v)],
                )
                .await?;
        }
        Ok(Namespace::with_properties(namespace.clone(), properties))
    }

    async fn get_namespace(&self, namespace: &NamespaceIdent) -> Result<Namespace> {
        if !self.namespace_exists(namespace).await? {
            return Err(Error::new(
                ErrorKind::NamespaceNotFound,
                format!("no namespace {}", namespace.join(".")),
            ));
        }
        let rows = self
            .db
            .query(
                &format!(
                    "SELECT property_key, property_value FROM {NAMESPACES}
                     WHERE catalog_name = ? AND namespace = ?"
                ),
                vec![some(&self.name), some(namespace.join("."))],
            )
            .await?;
        let properties = rows
            .into_iter()
            .filter_map(|r| {
                let mut it = r.into_iter();
                Some((
                    it.next().flatten()?,
                    it.next().flatten().unwrap_or_default(),
                ))
            })
            .filter(|(k, _)| k != "exists")
            .collect();
        Ok(Namespace::with_properties(namespace.clone(), properties))
    }

    async fn namespace_exists(&self, namespace: &NamespaceIdent) -> Result<bool> {
        let name = namespace.join(".");
        let rows = self
            .db
            .query(
                &format!(
                    "SELECT namespace FROM {NAMESPACES} WHERE catalog_name = ? AND namespace = ?
                     UNION ALL SELECT table_namespace FROM {TABLES}
                       WHERE catalog_name = ? AND table_namespace = ?"
                ),
                vec![some(&self.name), some(&name), some(&self.name), some(&name)],
            )
            .await?;
        Ok(!rows.is_empty())
    }

    async fn update_namespace(
        &self,
        namespace: &NamespaceIdent,
        properties: HashMap<String, String>,
    ) -> Result<()> {
        if !self.namespace_exists(namespace).await? {
            return Err(Error::new(
                ErrorKind::NamespaceNotFound,
                format!("no namespace {}", namespace.join(".")),
            ));
        }
        let name = namespace.join(".");
        for (k, v) in properties {
            self.db
                .execute(
                    &format!(
                        "DELETE FROM {NAMESPACES} WHERE catalog_name = ? AND namespace = ? AND property_key = ?"
                    ),
                    vec![some(&self.name), some(&name), Some(k.clone())],
                )
                .await?;
            self.db
                .execute(
                    &format!(
                        "INSERT INTO {NAMESPACES} (catalog_name, namespace, property_key, property_value)
                         VALUES (?, ?, ?, ?)"
                    ),
                    vec![some(&self.name), some(&name), Some(k), Some(v)],
                )
                .await?;
        }
        Ok(())
    }

    async fn drop_namespace(&self, namespace: &NamespaceIdent) -> Result<()> {
        if !self.list_tables(namespace).await?.is_empty() {
            return Err(Error::new(
                ErrorKind::PreconditionFailed,
                format!("the namespace {} still has tables", namespace.join(".")),
            ));
        }
        self.db
            .execute(
                &format!("DELETE FROM {NAMESPACES} WHERE catalog_name = ? AND namespace = ?"),
                vec![some(&self.name), some(namespace.join("."))],
            )
            .await?;
        Ok(())
    }

    async fn list_tables(&self, namespace: &NamespaceIdent) -> Result<Vec<TableIdent>> {
        let rows = self
            .db
            .query(
                &format!(
                    "SELECT table_name FROM {TABLES} WHERE catalog_name = ? AND table_namespace = ?"
                ),
                vec![some(&self.name), some(namespace.join("."))],
            )
            .await?;
        Ok(rows
            .into_iter()
            .filter_map(|r| r.into_iter().next().flatten())
            .map(|name| TableIdent::new(namespace.clone(), name))
            .collect())
    }

    async fn create_table(
        &self,
        namespace: &NamespaceIdent,
        creation: TableCreation,
    ) -> Result<Table> {
        if !self.namespace_exists(namespace).await? {
            return Err(Error::new(
                ErrorKind::NamespaceNotFound,
                format!("no namespace {}", namespace.join(".")),
            ));
        }
        let ident = TableIdent::new(namespace.clone(), creation.name.clone());
        if self.location_of(&ident).await?.is_some() {
            return Err(Error::new(
                ErrorKind::TableAlreadyExists,
                format!("the table {} exists", ident),
            ));
        }
        let location = match &creation.location {
            Some(l) => l.clone(),
            None => format!(
                "{}/{}/{}",
                self.warehouse,
                namespace.join("/"),
                creation.name
            ),
        };
        let creation = TableCreation {
            location: Some(location.clone()),
            ..creation
        };
        let metadata = TableMetadataBuilder::from_table_creation(creation)?
            .build()?
            .metadata;
        let metadata_location = iceberg::MetadataLocation::new_with_metadata(location, &metadata);
        metadata.write_to(&self.file_io, &metadata_location).await?;
        let metadata_location = metadata_location.to_string();
        let inserted = self
            .db
            .execute(
                &format!(
                    "INSERT INTO {TABLES} (catalog_name, table_namespace, table_name, metadata_location)
                     SELECT ?, ?, ?, ? WHERE NOT EXISTS (SELECT 1 FROM {TABLES}
                       WHERE catalog_name = ? AND table_namespace = ? AND table_name = ?)"
                ),
                vec![
                    some(&self.name),
                    some(namespace.join(".")),
                    some(ident.name()),
                    some(&metadata_location),
                    some(&self.name),
                    some(namespace.join(".")),
                    some(ident.name()),
                ],
            )
            .await?;
        if inserted == 0 {
            return Err(Error::new(
                ErrorKind::TableAlreadyExists,
                format!("the table {} was created by someone else meanwhile", ident),
            ));
        }
        self.table(ident, metadata_location, metadata)
    }

    async fn load_table(&self, ident: &TableIdent) -> Result<Table> {
        let Some(location) = self.location_of(ident).await? else {
            return Err(Error::new(
                ErrorKind::TableNotFound,
                format!("no table {ident} in catalog {}", self.name),
            ));
        };
        let metadata = TableMetadata::read_from(&self.file_io, &location).await?;
        self.table(ident.clone(), location, metadata)
    }

    async fn drop_table(&self, ident: &TableIdent) -> Result<()> {
        let n = self
            .db
            .execute(
                &format!(
                    "DELETE FROM {TABLES} WHERE catalog_name = ? AND table_namespace = ? AND table_name = ?"
                ),
                vec![some(&self.name), some(ident.namespace().join(".")), some(ident.name())],
            )
            .await?;
        if n == 0 {
            return Err(Error::new(
                ErrorKind::TableNotFound,
                format!("no table {ident}"),
            ));
        }
        Ok(())
    }

    async fn purge_table(&self, ident: &TableIdent) -> Result<()> {
        let table = self.load_table(ident).await?;
        self.drop_table(ident).await?;
        self.file_io
            .delete_prefix(table.metadata().location())
            .await
    }

    async fn table_exists(&self, ident: &TableIdent) -> Result<bool> {
        Ok(self.location_of(ident).await?.is_some())
    }

    async fn rename_table(&self, src: &TableIdent, dest: &TableIdent) -> Result<()> {
        if self.table_exists(dest).await? {
            return Err(Error::new(
                ErrorKind::TableAlreadyExists,
                format!("the table {dest} exists"),
            ));
        }
        let n = self
            .db
            .execute(
                &format!(
                    "UPDATE {TABLES} SET table_namespace = ?, table_name = ?
                     WHERE catalog_name = ? AND table_namespace = ? AND table_name = ?"
                ),
                vec![
                    some(dest.namespace().join(".")),
                    some(dest.name()),
                    some(&self.name),
                    some(src.namespace().join(".")),
                    some(src.name()),
                ],
            )
            .await?;
        if n == 0 {
            return Err(Error::new(
                ErrorKind::TableNotFound,
                format!("no table {src}"),
            ));
        }
        Ok(())
    }

    async fn register_table(&self, ident: &TableIdent, metadata_location: String) -> Result<Table> {
        if self.table_exists(ident).await? {
            return Err(Error::new(
                ErrorKind::TableAlreadyExists,
                format!("the table {ident} exists"),
            ));
        }
        let metadata = TableMetadata::read_from(&self.file_io, &metadata_location).await?;
        self.db
            .execute(
                &format!(
                    "INSERT INTO {TABLES} (catalog_name, table_namespace, table_name, metadata_location)
                     VALUES (?, ?, ?, ?)"
                ),
                vec![
                    some(&self.name),
                    some(ident.namespace().join(".")),
                    some(ident.name()),
                    some(&metadata_location),
                ],
            )
            .await?;
        self.table(ident.clone(), metadata_location, metadata)
    }

    /// Writes the new metadata file, then moves the table's row to it if the row still names
    /// the metadata the commit was made from: a conflict (another writer was first) is
    /// retryable, and the library retries it on the table as it now is.
    async fn update_table(&self, commit: TableCommit) -> Result<Table> {
        let ident = commit.identifier().clone();
        let current = self.load_table(&ident).await?;
        let current_location = current.metadata_location_result()?.to_string();
        let staged = commit.apply(current)?;
        let staged_location =
            iceberg::MetadataLocation::from_str(staged.metadata_location_result()?)?;
        staged
            .metadata()
            .write_to(staged.file_io(), &staged_location)
            .await?;
        let staged_location = staged_location.to_string();
        let n = self
            .db
            .execute(
                &format!(
                    "UPDATE {TABLES} SET metadata_location = ?, previous_metadata_location = ?
                     WHERE catalog_name = ? AND table_namespace = ? AND table_name = ?
                       AND metadata_location = ?"
                ),
                vec![
                    some(&staged_location),
                    some(&current_location),
                    some(&self.name),
                    some(ident.namespace().join(".")),
                    some(ident.name()),
                    some(&current_location),
                ],
            )
            .await?;
        if n == 0 {
            return Err(Error::new(
                ErrorKind::CatalogCommitConflicts,
                format!("another writer committed to {ident} first"),
            )
            .with_retryable(true));
        }
        Ok(staged)
    }
}
