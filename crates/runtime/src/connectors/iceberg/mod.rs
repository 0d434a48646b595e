//! `iceberg`: rows into an Apache Iceberg table, one Iceberg snapshot per completed checkpoint.
//!
//! # How a row becomes visible
//! Each subtask writes Parquet data files into the table's `data/` directory through the
//! Apache Iceberg crate's writers (rolling at `target-file-size`, one open file per partition
//! it has rows for). At a checkpoint's barrier it closes them: their descriptions (path,
//! partition, row count, column statistics) are its transaction, kept in the checkpoint. No
//! reader sees the files yet: only the table's metadata makes a file part of the table.
//!
//! When the checkpoint is complete the job commits: the transactions of every subtask for one
//! checkpoint become one Iceberg snapshot (a fast append) through the catalog's
//! compare-and-swap of the table's metadata location. The snapshot's summary records the
//! writer (`weir.writer`: the job's sink and this run), the checkpoint (`weir.checkpoint`) and
//! the subtasks it holds (`weir.subtasks`), so a commit that is repeated (the job's own, then
//! a restore's; or one whose answer was lost with the connection) finds its snapshot in the
//! table's history and does nothing. A commit that fails is tried again on the table as it
//! now is, the history read again first.
//!
//! # A restore, and files nobody references
//! A restore commits the transactions its checkpoint holds (idempotently) before any subtask
//! starts, then deletes this sink's data files that no snapshot of the table references:
//! what a killed process wrote after its last barrier, and transactions of checkpoints that
//! never completed. Only files named by this sink (`weir-<sink>-...`) are considered, so other
//! writers' files, even in progress, are left alone. A run that restores nothing appends to
//! what the table holds (as Flink's Iceberg sink does); it does not truncate it.
//!
//! # What it does not do
//! The Iceberg crate (0.10) commits only appends: it writes equality-delete files but has no
//! transaction that adds them, nor one that replaces files. So an updating input (after a
//! `GROUP BY` with no window, a `LEFT JOIN`) is refused at validate time, and small files are
//! not compacted by weir: `target-file-size` and the checkpoint interval set their size, and
//! Spark's or pyiceberg's maintenance can rewrite them.

pub mod catalog;
pub mod storage;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::str::FromStr;
use std::sync::{Arc, Mutex};

use arrow_array::{Array, ArrayRef, RecordBatch, new_null_array};
use arrow_schema::{DataType, SchemaRef};
use futures::future::BoxFuture;
use iceberg::arrow::{RecordBatchPartitionSplitter, schema_to_arrow_schema};
use iceberg::io::FileIOBuilder;
use iceberg::spec::{
    DataFile, DataFileFormat, FormatVersion, NestedField, PrimitiveType, Schema as IcebergSchema,
    Transform, Type, UnboundPartitionSpec, deserialize_data_file_from_json,
    serialize_data_file_to_json,
};
use iceberg::table::Table;
use iceberg::transaction::{ApplyTransactionAction, Transaction as IcebergTransaction};
use iceberg::writer::base_writer::data_file_writer::DataFileWriterBuilder;
use iceberg::writer::file_writer::ParquetWriterBuilder;
use iceberg::writer::file_writer::location_generator::{
    DefaultFileNameGenerator, DefaultLocationGenerator,
};
use iceberg::writer::file_writer::rolling_writer::RollingFileWriterBuilder;
use iceberg::writer::partitioning::PartitioningWriter;
use iceberg::writer::partitioning::fanout_writer::FanoutWriter;
use iceberg::writer::partitioning::unpartitioned_writer::UnpartitionedWriter;
use iceberg::{Catalog, ErrorKind, NamespaceIdent, TableCreation, TableIdent};
use serde::{Deserialize, Serialize};

use crate::api::connector::{
    Endpoint, HostLimits, Hosted, Location, Reach, Secret, ServerFile, SinkConnector, SinkContext,
    SpecProblem,
};
use crate::api::two_phase::{Committer, Recovered, Stage, TwoPhase, TwoPhaseFactory};
use crate::api::{OperatorError, Sink, SinkFactory, SnapshotTransaction, SubtaskContext};
use crate::config::StorageSpec;

use self::catalog::{CatalogUri, SqlCatalog};
use self::storage::{WeirStorage, WeirStorageFactory};

/// The keys of `kind: iceberg`: rows into an Apache Iceberg table, committed once per
/// completed checkpoint.
#[derive(Clone, Debug, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct IcebergSinkSpec {
    /// The input: a node name, or `node.port`. It must be append-only (see the sink's docs).
    pub from: String,
    /// The catalog that holds the table.
    pub catalog: IcebergCatalogSpec,
    /// Where new tables go (`<warehouse>/<namespace>/<table>`) and how to reach it:
    /// `s3://bucket/prefix` or a local path, or a map with the `url` and the S3 settings of
    /// `checkpoint.storage` (`endpoint`, `region`, `access-key-id`, `secret-access-key`,
    /// `allow-http`, ...; unset ones from the `AWS_*` environment). A table's files are
    /// written where its metadata says, which must be inside the warehouse.
    pub warehouse: StorageSpec,
    /// The table's namespace: `db` or `db.schema` (created when missing, with the table).
    #[schemars(length(min = 1, max = 255))]
    pub namespace: String,
    /// The table's name.
    #[schemars(length(min = 1, max = 255))]
    pub table: String,
    /// Create the table (and its namespace) from the input's columns when it does not exist
    /// (default true). An existing table must have every input column, of the same type.
    #[serde(default = "default_true")]
    pub create_table: bool,
    /// How a created table is partitioned: each entry a column (identity), or
    /// `year(c)`, `month(c)`, `day(c)`, `hour(c)`, `bucket[n](c)` or `truncate[w](c)`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub partition_by: Vec<String>,
    /// A data file is closed and a new one begun past this size (default 128 MiB); files are
    /// closed at every checkpoint too, so the checkpoint interval also bounds their size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_file_size: Option<crate::config::ByteSize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1024))]
    pub parallelism: Option<u32>,
}

fn default_true() -> bool {
    true
}

/// An Iceberg catalog: Iceberg's SQL catalog (the tables of Java's `JdbcCatalog` and
/// pyiceberg's `SqlCatalog`) on SQLite or PostgreSQL.
#[derive(Clone, Debug, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct IcebergCatalogSpec {
    /// `sqlite:<path>` (`sqlite:///var/lib/weir/catalog.db`) or a PostgreSQL URL
    /// (`postgresql://user:pass@host/db?sslmode=verify-full`; TLS as the `postgres` sink's).
    #[schemars(length(min = 1))]
    pub uri: String,
    /// The catalog's name: the `catalog_name` of its rows, as readers name it (default
    /// `weir`).
    #[serde(default = "default_catalog_name")]
    #[schemars(length(min = 1, max = 255))]
    pub name: String,
}

fn default_catalog_name() -> String {
    "weir".into()
}

/// Data files close past this size unless `target-file-size` says otherwise.
const DEFAULT_TARGET_FILE_SIZE: u64 = 128 << 20;

/// The warehouse's storage settings, read as the checkpoint storage's.
fn warehouse_config(spec: &StorageSpec) -> Result<weir_checkpoint::StorageConfig, String> {
    spec.config()
}

impl IcebergSinkSpec {
    fn namespace_ident(&self) -> Result<NamespaceIdent, String> {
        if self.namespace.split('.').any(|p| p.trim().is_empty()) {
            return Err(format!(
                "`{}` is not a namespace: write `db` or `db.schema`",
                self.namespace
            ));
        }
        NamespaceIdent::from_strs(self.namespace.split('.')).map_err(|e| e.to_string())
    }

    /// Every problem of the spec that does not need the input.
    fn problems(&self) -> Vec<SpecProblem> {
        let mut out = Vec::new();
        if let Err(e) = CatalogUri::parse(&self.catalog.uri) {
            out.push(SpecProblem::at("catalog.uri", e));
        }
        match warehouse_config(&self.warehouse) {
            Err(e) => out.push(SpecProblem::at("warehouse", e)),
            Ok(config) => {
                if let Ok(weir_checkpoint::object::StorageKind::Local(p)) = config.kind()
                    && !p.is_absolute()
                    && p.to_str().is_none()
                {
                    out.push(SpecProblem::at("warehouse", "the path is not valid UTF-8"));
                }
            }
        }
        if let Err(e) = self.namespace_ident() {
            out.push(SpecProblem::at("namespace", e));
        }
        if self.table.trim().is_empty() || self.table.contains(['/', '.']) {
            out.push(SpecProblem::at(
                "table",
                format!("`{}` is not a table name (no `.` or `/`)", self.table),
            ));
        }
        if self.target_file_size.is_some_and(|s| s.0 < 1 << 20) {
            out.push(SpecProblem::at(
                "target-file-size",
                "a data file of less than 1 MiB makes a table of tiny files; give at least 1MiB",
            ));
        }
        out
    }
}

impl SinkConnector for IcebergSinkSpec {
    fn from(&self) -> &str {
        &self.from
    }

    fn parallelism(&self) -> Option<u32> {
        self.parallelism
    }

    fn plan(
        &self,
        input: &SchemaRef,
        cx: SinkContext<'_>,
    ) -> Result<Arc<dyn SinkFactory>, Vec<SpecProblem>> {
        let mut problems = self.problems();
        let mode = crate::changelog::ChangelogMode::of(input);
        if !mode.is_append() {
            problems.push(SpecProblem::at(
                "from",
                "the input is an updating stream, and the Iceberg sink only appends: Apache \
                 Iceberg's Rust crate (0.10) cannot yet commit the delete files that updates \
                 need. Write it to a `postgres` sink (which applies updates), or to `kafka` \
                 with `format: changelog-json`",
            ));
        }
        let columns = match table_schema(input) {
            Ok(schema) => Some(schema),
            Err(e) => {
                problems.push(SpecProblem::at("from", e));
                None
            }
        };
        let mut partition = Vec::new();
        for (i, entry) in self.partition_by.iter().enumerate() {
            match parse_partition(entry) {
                Ok((column, transform)) => {
                    let known = columns
                        .as_ref()
                        .is_none_or(|s| s.field_by_name(&column).is_some());
                    if known {
                        partition.push((column, transform));
                    } else {
                        problems.push(SpecProblem::at(
                            &format!("partition-by.{i}"),
                            format!("the input has no column `{column}`"),
                        ));
                    }
                }
                Err(e) => problems.push(SpecProblem::at(&format!("partition-by.{i}"), e)),
            }
        }
        let (Some(columns), true) = (columns, problems.is_empty()) else {
            return Err(problems);
        };
        let namespace = self
            .namespace_ident()
            .map_err(|e| vec![SpecProblem::at("namespace", e)])?;
        let warehouse =
            warehouse_config(&self.warehouse).map_err(|e| vec![SpecProblem::at("warehouse", e)])?;
        let uri = CatalogUri::parse(&self.catalog.uri)
            .map_err(|e| vec![SpecProblem::at("catalog.uri", e)])?;
        let writer = format!(
            "{:016x}",
            xxhash_rust::xxh3::xxh3_64(format!("{}\0{}", cx.job, cx.node).as_bytes())
        );
        Ok(Arc::new(TwoPhaseFactory(IcebergSinkFactory {
            config: Arc::new(Config {
                catalog_name: self.catalog.name.clone(),
                uri,
                warehouse,
                table: TableIdent::new(namespace, self.table.clone()),
                create: self.create_table,
                input: input.clone(),
                columns,
                partition,
                target_file_size: self
                    .target_file_size
                    .map_or(DEFAULT_TARGET_FILE_SIZE, |s| s.0),
                writer,
            }),
            run: Mutex::new(None),
        })))
    }
}

/// It reaches its catalog's database and its warehouse's S3 endpoint, and writes its local
/// warehouse and SQLite file on the machine that runs it.
impl Hosted for IcebergSinkSpec {
    fn endpoints(&self) -> Vec<Reach> {
        let mut out = Vec::new();
        if let Ok(CatalogUri::Postgres(connection)) = CatalogUri::parse(&self.catalog.uri) {
            out.push(Reach {
                at: "/catalog/uri".into(),
                endpoint: Endpoint::Postgres { connection },
            });
        }
        if let StorageSpec::Settings(s) = &self.warehouse
            && let Some(endpoint) = &s.endpoint
        {
            out.push(Reach {
                at: "/warehouse/endpoint".into(),
                endpoint: Endpoint::ObjectStore {
                    endpoint: endpoint.clone(),
                },
            });
        }
        out
    }

    fn server_files(&self) -> Vec<ServerFile> {
        match CatalogUri::parse(&self.catalog.uri) {
            Ok(CatalogUri::Postgres(connection)) => {
                crate::connectors::postgres::connection_files(&connection)
                    .into_iter()
                    .map(|f| ServerFile {
                        at: "/catalog/uri".into(),
                        ..f
                    })
                    .collect()
            }
            _ => Vec::new(),
        }
    }

    fn locations(&self) -> Vec<Location> {
        let mut out = Vec::new();
        if let Ok(CatalogUri::Sqlite(path)) = CatalogUri::parse(&self.catalog.uri) {
            out.push(Location {
                at: "/catalog/uri".into(),
                path: path.display().to_string(),
            });
        }
        if let Ok(config) = warehouse_config(&self.warehouse)
            && let Ok(weir_checkpoint::object::StorageKind::Local(p)) = config.kind()
        {
            let at = match &self.warehouse {
                StorageSpec::Settings(_) => "/warehouse/url",
                StorageSpec::Url(_) => "/warehouse",
            };
            out.push(Location {
                at: at.into(),
                path: p.display().to_string(),
            });
        }
        out
    }

    fn secrets(&self) -> Vec<Secret> {
        let mut out = vec![Secret::Connection(self.catalog.uri.clone())];
        if let StorageSpec::Settings(s) = &self.warehouse
            && let Some(secret) = &s.secret_access_key
        {
            out.push(Secret::Value(secret.clone()));
        }
        out
    }

    fn within(&self, _limits: &HostLimits) -> Vec<SpecProblem> {
        Vec::new()
    }
}

/// `column` or `transform(column)`, as `(column, transform)`.
fn parse_partition(entry: &str) -> Result<(String, Transform), String> {
    let entry = entry.trim();
    let Some(open) = entry.find('(') else {
        if entry.is_empty() || entry.contains([')', '[', ']', ' ']) {
            return Err(format!("`{entry}` is not a column or `transform(column)`"));
        }
        return Ok((entry.to_string(), Transform::Identity));
    };
    let Some(inner) = entry[open + 1..].strip_suffix(')') else {
        return Err(format!("`{entry}` has no closing `)`"));
    };
    let name = entry[..open].trim();
    let transform = match name {
        "identity" | "year" | "month" | "day" | "hour" => {
            Transform::from_str(name).map_err(|e| e.to_string())?
        }
        n if n.starts_with("bucket[") || n.starts_with("truncate[") => {
            let n_ok = n
                .split_once('[')
                .and_then(|(_, rest)| rest.strip_suffix(']'))
                .and_then(|w| w.parse::<u32>().ok())
                .is_some_and(|w| w > 0);
            if !n_ok {
                return Err(format!(
                    "`{n}` needs a positive whole number in brackets, e.g. `bucket[16](id)`"
                ));
            }
            Transform::from_str(n).map_err(|e| e.to_string())?
        }
        other => {
            return Err(format!(
                "`{other}` is not a partition transform: use a column, or year, month, day, \
                 hour, bucket[n] or truncate[w] of one"
            ));
        }
    };
    let column = inner.trim();
    if column.is_empty() {
        return Err(format!("`{entry}` names no column"));
    }
    Ok((column.to_string(), transform))
}

/// The Iceberg type of a weir column, if Iceberg has one.
fn iceberg_type(name: &str, t: &DataType) -> Result<PrimitiveType, String> {
    Ok(match t {
        DataType::Boolean => PrimitiveType::Boolean,
        DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::UInt8 | DataType::UInt16 => {
            PrimitiveType::Int
        }
        DataType::Int64 | DataType::UInt32 => PrimitiveType::Long,
        DataType::Float32 => PrimitiveType::Float,
        DataType::Float64 => PrimitiveType::Double,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => PrimitiveType::String,
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => PrimitiveType::Binary,
        DataType::Date32 => PrimitiveType::Date,
        DataType::Timestamp(_, None) => PrimitiveType::Timestamp,
        DataType::Timestamp(_, Some(_)) => PrimitiveType::Timestamptz,
        DataType::Decimal128(p, s) if *p <= 38 && *s >= 0 => PrimitiveType::Decimal {
            precision: u32::from(*p),
            scale: *s as u32,
        },
        other => {
            return Err(format!(
                "the column `{name}` is {other}, which an Iceberg table cannot hold: cast it \
                 (BIGINT, DOUBLE, STRING, TIMESTAMP, DECIMAL(p, s), ...) in a map before the sink"
            ));
        }
    })
}

/// The Iceberg schema of a table made from the input's columns (ids from 1, in order).
fn table_schema(input: &SchemaRef) -> Result<IcebergSchema, String> {
    let mut fields = Vec::new();
    let mut id = 0;
    for f in input.fields() {
        if f.name() == crate::changelog::OP {
            continue;
        }
        id += 1;
        let t = Type::Primitive(iceberg_type(f.name(), f.data_type())?);
        // Every column optional: weir's rows may hold nulls wherever the schema allows, and
        // a required column refuses a whole file for one.
        fields.push(Arc::new(NestedField::optional(id, f.name(), t)));
    }
    IcebergSchema::builder()
        .with_fields(fields)
        .build()
        .map_err(|e| e.to_string())
}

/// What the planner decided, shared by the factory and its subtasks.
#[derive(Debug)]
struct Config {
    catalog_name: String,
    uri: CatalogUri,
    warehouse: weir_checkpoint::StorageConfig,
    table: TableIdent,
    create: bool,
    input: SchemaRef,
    /// The table's columns as the input makes them (for `create-table` and the check of an
    /// existing table).
    columns: IcebergSchema,
    partition: Vec<(String, Transform)>,
    target_file_size: u64,
    /// Names this sink (its job and node) in data file names and snapshot summaries.
    writer: String,
}

/// The table as this run writes it, loaded by `recover`.
struct Run {
    catalog: SqlCatalog,
    /// Names this run apart from earlier ones: transactions carry it into checkpoints.
    lineage: String,
    table: Table,
    /// The table's columns as Arrow (with their Iceberg field ids), which data files hold.
    arrow: SchemaRef,
    /// For each table column, the input column that fills it (`None`: nulls).
    sources: Vec<Option<usize>>,
}

pub struct IcebergSinkFactory {
    config: Arc<Config>,
    run: Mutex<Option<Arc<Run>>>,
}

/// Data files one subtask closed at one barrier.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Transaction {
    /// The snapshot whose barrier closed them.
    pub snapshot: u64,
    pub subtask: usize,
    /// The run that wrote them (see [`Run::lineage`]).
    pub lineage: String,
    /// The partition spec they were written for.
    pub spec: i32,
    /// Each data file as Iceberg's JSON description of it.
    pub files: Vec<String>,
}

impl SnapshotTransaction for Transaction {
    fn snapshot(&self) -> u64 {
        self.snapshot
    }
}

/// The snapshot summary keys of weir's commits.
const SUMMARY_WRITER: &str = "weir.writer";
const SUMMARY_CHECKPOINT: &str = "weir.checkpoint";
const SUMMARY_SUBTASKS: &str = "weir.subtasks";

fn iceberg_error(what: &str, e: iceberg::Error) -> OperatorError {
    let message = format!("{what}: {e}");
    match e.kind() {
        // The table or its data is not what the job needs: the same job fails the same way.
        ErrorKind::DataInvalid
        | ErrorKind::FeatureUnsupported
        | ErrorKind::NamespaceNotFound
        | ErrorKind::TableNotFound
        | ErrorKind::PreconditionFailed => OperatorError::refused(message, Some(Box::new(e))),
        _ => OperatorError::external(message, e),
    }
}

impl IcebergSinkFactory {
    async fn open_catalog(&self) -> Result<(SqlCatalog, WeirStorage), OperatorError> {
        let c = &self.config;
        let s3 = match c.warehouse.kind() {
            Ok(weir_checkpoint::object::StorageKind::S3 { bucket, .. }) => {
                let store = weir_checkpoint::object::ObjectStorage::s3(&c.warehouse)
                    .map_err(|e| OperatorError::refused(format!("the warehouse: {e}"), None))?;
                Some((bucket, store.store().clone()))
            }
            _ => None,
        };
        let storage = WeirStorage::new(s3);
        let file_io =
            FileIOBuilder::new(Arc::new(WeirStorageFactory::new(storage.clone()))).build();
        let catalog = SqlCatalog::open(
            &c.catalog_name,
            &c.uri,
            warehouse_url(&c.warehouse),
            file_io,
        )
        .await
        .map_err(|e| iceberg_error("opening the Iceberg catalog", e))?;
        Ok((catalog, storage))
    }

    /// The table, created (with its namespace) if missing and allowed.
    async fn table(&self, catalog: &SqlCatalog) -> Result<Table, OperatorError> {
        let c = &self.config;
        if catalog
            .table_exists(&c.table)
            .await
            .map_err(|e| iceberg_error("reading the Iceberg catalog", e))?
        {
            return catalog
                .load_table(&c.table)
                .await
                .map_err(|e| iceberg_error(&format!("loading the table {}", c.table), e));
        }
        if !c.create {
            return Err(OperatorError::refused(
                format!(
                    "the Iceberg table {} does not exist in catalog `{}`; create it, or set \
                     `create-table: true`",
                    c.table, c.catalog_name
                ),
                None,
            ));
        }
        let namespace = c.table.namespace();
        if !catalog
            .namespace_exists(namespace)
            .await
            .map_err(|e| iceberg_error("reading the Iceberg catalog", e))?
        {
            match catalog.create_namespace(namespace, HashMap::new()).await {
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::NamespaceAlreadyExists => {}
                Err(e) => return Err(iceberg_error("creating the namespace", e)),
            }
        }
        let mut spec = UnboundPartitionSpec::builder();
        for (column, transform) in &c.partition {
            let Some(field) = c.columns.field_by_name(column) else {
                return Err(OperatorError::Internal(format!("no column {column}")));
            };
            spec = spec
                .add_partition_field(field.id, partition_name(column, transform), *transform)
                .map_err(|e| iceberg_error("the partition spec", e))?;
        }
        let creation = TableCreation::builder()
            .name(c.table.name().to_string())
            .schema(c.columns.clone())
            .partition_spec(spec.build())
            .format_version(FormatVersion::V2)
            .build();
        match catalog.create_table(namespace, creation).await {
            Ok(t) => Ok(t),
            // Another subtask's process or job made it meanwhile: use theirs.
            Err(e) if e.kind() == ErrorKind::TableAlreadyExists => catalog
                .load_table(&c.table)
                .await
                .map_err(|e| iceberg_error(&format!("loading the table {}", c.table), e)),
            Err(e) => Err(iceberg_error(&format!("creating the table {}", c.table), e)),
        }
    }

    /// How the input's columns fill the table's, or why they cannot.
    fn bind(&self, table: &Table) -> Result<(SchemaRef, Vec<Option<usize>>), OperatorError> {
        let c = &self.config;
        let schema = table.metadata().current_schema();
        let mut problems = Vec::new();
        let mut sources = Vec::new();
        for field in schema.as_struct().fields() {
            match c.input.index_of(&field.name) {
                Ok(i) => {
                    let want = c.columns.field_by_name(&field.name).map(|f| &f.field_type);
                    if want != Some(&field.field_type) {
                        problems.push(format!(
                            "`{}` is {} in the table and {} in the input",
                            field.name,
                            field.field_type,
                            want.map_or("unknown".to_string(), |t| t.to_string())
                        ));
                    }
                    sources.push(Some(i));
                }
                Err(_) if field.required => problems.push(format!(
                    "the table's required column `{}` is not in the input",
                    field.name
                )),
                Err(_) => sources.push(None),
            }
        }
        for f in c.columns.as_struct().fields() {
            if schema.field_by_name(&f.name).is_none() {
                problems.push(format!(
                    "the input's column `{}` is not in the table",
                    f.name
                ));
            }
        }
        if !problems.is_empty() {
            return Err(OperatorError::refused(
                format!(
                    "the Iceberg table {} does not match the sink's input: {}",
                    c.table,
                    problems.join("; ")
                ),
                None,
            ));
        }
        let arrow = schema_to_arrow_schema(schema)
            .map_err(|e| iceberg_error("the table's schema as Arrow", e))?;
        Ok((Arc::new(arrow), sources))
    }

    /// Commits `transactions`: one Iceberg snapshot per checkpoint, each only with what the
    /// table's history does not already hold. Tried again on the table as it then is after a
    /// failure that may pass.
    async fn commit_all(
        config: &Config,
        catalog: &SqlCatalog,
        transactions: Vec<Transaction>,
    ) -> Result<(), OperatorError> {
        let mut by_snapshot: BTreeMap<(String, u64), Vec<Transaction>> = BTreeMap::new();
        for t in transactions {
            by_snapshot
                .entry((t.lineage.clone(), t.snapshot))
                .or_default()
                .push(t);
        }
        for ((lineage, snapshot), list) in by_snapshot {
            let mut delay = std::time::Duration::from_millis(100);
            let mut attempt = 0;
            loop {
                attempt += 1;
                match Self::commit_one(config, catalog, &lineage, snapshot, &list).await {
                    Ok(()) => break,
                    Err(e)
                        if attempt < COMMIT_ATTEMPTS
                            && e.retry() == crate::api::error::Retry::Backoff =>
                    {
                        tracing::warn!(
                            table = %config.table, checkpoint = snapshot, error = %e,
                            "an Iceberg commit failed; trying again on the table as it now is"
                        );
                        tokio::time::sleep(delay).await;
                        delay = (delay * 2).min(std::time::Duration::from_secs(5));
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(())
    }

    async fn commit_one(
        config: &Config,
        catalog: &SqlCatalog,
        lineage: &str,
        snapshot: u64,
        list: &[Transaction],
    ) -> Result<(), OperatorError> {
        let table = catalog
            .load_table(&config.table)
            .await
            .map_err(|e| iceberg_error(&format!("loading the table {}", config.table), e))?;
        let writer = format!("{}-{lineage}", config.writer);
        let done = committed_subtasks(&table, &writer, snapshot);
        let pending: Vec<&Transaction> =
            list.iter().filter(|t| !done.contains(&t.subtask)).collect();
        if pending.is_empty() {
            return Ok(());
        }
        let metadata = table.metadata();
        let schema = metadata.current_schema();
        let mut files: Vec<DataFile> = Vec::new();
        for t in &pending {
            let Some(spec) = metadata.partition_spec_by_id(t.spec) else {
                return Err(OperatorError::refused(
                    format!(
                        "the table {} no longer has partition spec {} that checkpoint {snapshot}'s \
                         files were written for",
                        config.table, t.spec
                    ),
                    None,
                ));
            };
            let partition_type = spec
                .partition_type(schema)
                .map_err(|e| iceberg_error("the partition type", e))?;
            for json in &t.files {
                files.push(
                    deserialize_data_file_from_json(json, t.spec, &partition_type, schema)
                        .map_err(|e| iceberg_error("a data file of the checkpoint", e))?,
                );
            }
        }
        let subtasks: BTreeSet<usize> = pending.iter().map(|t| t.subtask).collect();
        let added = files.len();
        let properties = HashMap::from([
            (SUMMARY_WRITER.to_string(), writer),
            (SUMMARY_CHECKPOINT.to_string(), snapshot.to_string()),
            (
                SUMMARY_SUBTASKS.to_string(),
                subtasks
                    .iter()
                    .map(|s| s.to_string())
                    .collect::<Vec<_>>()
                    .join(","),
            ),
        ]);
        let tx = IcebergTransaction::new(&table);
        let tx = tx
            .fast_append()
            .add_data_files(files)
            .set_snapshot_properties(properties)
            .apply(tx)
            .map_err(|e| iceberg_error("the append", e))?;
        let started = std::time::Instant::now();
        tx.commit(catalog).await.map_err(|e| {
            iceberg_error(
                &format!("committing checkpoint {snapshot} to {}", config.table),
                e,
            )
        })?;
        tracing::debug!(
            table = %config.table, checkpoint = snapshot, files = added,
            micros = started.elapsed().as_micros() as u64,
            "committed an Iceberg snapshot"
        );
        Ok(())
    }

    /// Deletes this sink's data files that no snapshot of the table references.
    async fn remove_orphans(
        &self,
        table: &Table,
        storage: &WeirStorage,
    ) -> Result<usize, OperatorError> {
        let mut referenced = BTreeSet::new();
        let mut lists = BTreeSet::new();
        for snapshot in table.metadata().snapshots() {
            let list = table
                .manifest_list_reader(snapshot)
                .load()
                .await
                .map_err(|e| iceberg_error("reading a manifest list", e))?;
            for manifest in list.entries() {
                if !lists.insert(manifest.manifest_path.clone()) {
                    continue;
                }
                let m = manifest
                    .load_manifest(table.file_io())
                    .await
                    .map_err(|e| iceberg_error("reading a manifest", e))?;
                for entry in m.entries() {
                    referenced.insert(entry.file_path().to_string());
                }
            }
        }
        let data = format!("{}/data", table.metadata().location().trim_end_matches('/'));
        let prefix = format!("weir-{}-", self.config.writer);
        let orphans = storage
            .list(&data, &prefix)
            .await
            .map_err(|e| iceberg_error("listing the table's data files", e))?;
        let mut removed = 0;
        for path in orphans {
            if referenced.contains(&path) {
                continue;
            }
            table
                .file_io()
                .delete(&path)
                .await
                .map_err(|e| iceberg_error("deleting an unreferenced data file", e))?;
            removed += 1;
        }
        Ok(removed)
    }
}

/// Tries of one checkpoint's commit before the job fails (and a restore commits it again).
const COMMIT_ATTEMPTS: u32 = 5;

/// The subtasks whose files for `snapshot` a snapshot of the table by `writer` already holds.
fn committed_subtasks(table: &Table, writer: &str, snapshot: u64) -> BTreeSet<usize> {
    let mut out = BTreeSet::new();
    for s in table.metadata().snapshots() {
        let p = &s.summary().additional_properties;
        if p.get(SUMMARY_WRITER).map(String::as_str) != Some(writer)
            || p.get(SUMMARY_CHECKPOINT)
                .and_then(|c| c.parse::<u64>().ok())
                != Some(snapshot)
        {
            continue;
        }
        if let Some(list) = p.get(SUMMARY_SUBTASKS) {
            out.extend(list.split(',').filter_map(|s| s.parse::<usize>().ok()));
        }
    }
    out
}

/// The warehouse as a location prefix: `s3://bucket/prefix` or `file:///abs/path`.
fn warehouse_url(config: &weir_checkpoint::StorageConfig) -> String {
    match config.kind() {
        Ok(weir_checkpoint::object::StorageKind::S3 { bucket, prefix }) if prefix.is_empty() => {
            format!("s3://{bucket}")
        }
        Ok(weir_checkpoint::object::StorageKind::S3 { bucket, prefix }) => {
            format!("s3://{bucket}/{prefix}")
        }
        Ok(weir_checkpoint::object::StorageKind::Local(p)) => {
            let abs = std::path::absolute(&p).unwrap_or(p);
            format!("file://{}", abs.display())
        }
        Err(_) => config.url.clone(),
    }
}

/// The partition field's name: the column for identity, else `column_transform`.
fn partition_name(column: &str, transform: &Transform) -> String {
    match transform {
        Transform::Identity => column.to_string(),
        Transform::Bucket(n) => format!("{column}_bucket_{n}"),
        Transform::Truncate(w) => format!("{column}_trunc_{w}"),
        other => format!("{column}_{other}"),
    }
}

/// A name no other run of any process is likely to have made: a data file's and a snapshot
/// summary's mark of the run that wrote it.
fn new_lineage() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static MADE: AtomicU64 = AtomicU64::new(0);
    let seed = format!(
        "{}-{:?}-{}",
        std::process::id(),
        std::time::SystemTime::now(),
        MADE.fetch_add(1, Ordering::Relaxed)
    );
    format!("{:016x}", xxhash_rust::xxh3::xxh3_64(seed.as_bytes()))
}

impl Committer for IcebergSinkFactory {
    type Transaction = Transaction;
    const SINK: &'static str = "iceberg";

    /// Opens the catalog, makes the table if it may, checks it takes the input, commits what
    /// the restored checkpoint holds, and deletes this sink's files no snapshot references.
    fn recover(
        &self,
        _parallelism: usize,
        restored: Option<Recovered<Transaction>>,
    ) -> BoxFuture<'_, Result<(), OperatorError>> {
        Box::pin(async move {
            let (catalog, storage) = self.open_catalog().await?;
            let table = self.table(&catalog).await?;
            self.bind(&table)?;
            if let Some(r) = restored {
                Self::commit_all(&self.config, &catalog, r.transactions).await?;
            }
            let table = catalog.load_table(&self.config.table).await.map_err(|e| {
                iceberg_error(&format!("loading the table {}", self.config.table), e)
            })?;
            let removed = self.remove_orphans(&table, &storage).await?;
            if removed > 0 {
                tracing::info!(
                    table = %self.config.table, files = removed,
                    "deleted data files of this sink that no snapshot references (written after \
                     the last completed checkpoint of an earlier run)"
                );
            }
            let (arrow, sources) = self.bind(&table)?;
            let run = Arc::new(Run {
                catalog,
                lineage: new_lineage(),
                table,
                arrow,
                sources,
            });
            *self
                .run
                .lock()
                .map_err(|_| OperatorError::Internal("the Iceberg sink's run lock".into()))? =
                Some(run);
            Ok(())
        })
    }

    fn create(&self, ctx: &SubtaskContext) -> Result<Box<dyn Sink>, OperatorError> {
        let run = self
            .run
            .lock()
            .map_err(|_| OperatorError::Internal("the Iceberg sink's run lock".into()))?
            .clone()
            .ok_or_else(|| {
                OperatorError::Internal("an Iceberg sink subtask made before `prepare`".into())
            })?;
        let stage = IcebergStage::new(run, self.config.clone(), ctx.subtask)?;
        Ok(Box::new(TwoPhase::new(stage, ctx.checkpoint_base)))
    }

    fn commit(
        &self,
        transactions: Vec<Transaction>,
    ) -> BoxFuture<'static, Result<(), OperatorError>> {
        let run = self.run.lock().ok().and_then(|r| r.clone());
        let config = self.config.clone();
        Box::pin(async move {
            let Some(run) = run else {
                return Err(OperatorError::Internal(
                    "an Iceberg commit before `prepare`".into(),
                ));
            };
            Self::commit_all(&config, &run.catalog, transactions).await
        })
    }

    /// Nothing to do now: files of an aborted transaction are referenced by no snapshot, and
    /// the next run of the job deletes them.
    fn abort(&self, _transactions: Vec<Transaction>) -> Result<(), OperatorError> {
        Ok(())
    }
}

type FileWriterBuilder =
    DataFileWriterBuilder<ParquetWriterBuilder, DefaultLocationGenerator, DefaultFileNameGenerator>;

/// The open data files of one subtask between two barriers.
enum Files {
    Plain(Box<UnpartitionedWriter<FileWriterBuilder>>),
    Partitioned(Box<FanoutWriter<FileWriterBuilder>>),
}

/// One subtask: Parquet data files written through the Iceberg crate's writers.
struct IcebergStage {
    run: Arc<Run>,
    config: Arc<Config>,
    /// Each epoch's writers are made from it (the data file writer's builder is not `Clone`).
    rolling: RollingFileWriterBuilder<
        ParquetWriterBuilder,
        DefaultLocationGenerator,
        DefaultFileNameGenerator,
    >,
    splitter: Option<RecordBatchPartitionSplitter>,
    files: Option<Files>,
    spec: i32,
    partition_type: iceberg::spec::StructType,
    format: FormatVersion,
    subtask: usize,
}

impl IcebergStage {
    fn new(run: Arc<Run>, config: Arc<Config>, subtask: usize) -> Result<Self, OperatorError> {
        let metadata = run.table.metadata();
        let schema = metadata.current_schema().clone();
        let spec = metadata.default_partition_spec().clone();
        let properties = metadata
            .table_properties()
            .map_err(|e| iceberg_error("the table's properties", e))?;
        let parquet = ParquetWriterBuilder::from_table_properties(&properties, schema.clone());
        let locations = DefaultLocationGenerator::new(metadata)
            .map_err(|e| iceberg_error("the table's data location", e))?;
        let names = DefaultFileNameGenerator::new(
            format!("weir-{}-{}-{subtask}", config.writer, run.lineage),
            None,
            DataFileFormat::Parquet,
        );
        let rolling = RollingFileWriterBuilder::new(
            parquet,
            config.target_file_size as usize,
            run.table.file_io().clone(),
            locations,
            names,
        );
        let splitter = if spec.is_unpartitioned() {
            None
        } else {
            Some(
                RecordBatchPartitionSplitter::try_new_with_computed_values(
                    schema.clone(),
                    spec.clone(),
                )
                .map_err(|e| iceberg_error("the table's partitioning", e))?,
            )
        };
        let partition_type = spec
            .partition_type(&schema)
            .map_err(|e| iceberg_error("the table's partition type", e))?;
        Ok(Self {
            spec: spec.spec_id(),
            format: metadata.format_version(),
            run,
            config,
            rolling,
            splitter,
            files: None,
            partition_type,
            subtask,
        })
    }

    /// The input's rows in the table's columns and types.
    fn to_table(&self, batch: &RecordBatch) -> Result<RecordBatch, OperatorError> {
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(self.run.sources.len());
        for (field, source) in self.run.arrow.fields().iter().zip(&self.run.sources) {
            let column = match source {
                Some(i) => {
                    let c = batch.column(*i);
                    if c.data_type() == field.data_type() {
                        c.clone()
                    } else {
                        arrow_cast::cast(c, field.data_type()).map_err(|e| {
                            OperatorError::Data(format!(
                                "the column `{}` as the Iceberg table's {}: {e}",
                                field.name(),
                                field.data_type()
                            ))
                        })?
                    }
                }
                None => new_null_array(field.data_type(), batch.num_rows()),
            };
            columns.push(column);
        }
        RecordBatch::try_new(self.run.arrow.clone(), columns)
            .map_err(|e| OperatorError::Internal(format!("a batch for the Iceberg table: {e}")))
    }

    async fn write_rows(&mut self, batch: RecordBatch) -> Result<(), OperatorError> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let rows = self.to_table(&batch)?;
        let table = &self.config.table;
        let write_error = |e| iceberg_error(&format!("writing a data file of {table}"), e);
        if self.files.is_none() {
            self.files = Some(match self.splitter {
                None => Files::Plain(Box::new(UnpartitionedWriter::new(
                    DataFileWriterBuilder::new(self.rolling.clone()),
                ))),
                Some(_) => Files::Partitioned(Box::new(FanoutWriter::new(
                    DataFileWriterBuilder::new(self.rolling.clone()),
                ))),
            });
        }
        match (self.files.as_mut(), &self.splitter) {
            (Some(Files::Plain(w)), _) => w.write(rows).await.map_err(write_error)?,
            (Some(Files::Partitioned(w)), Some(splitter)) => {
                for (key, part) in splitter.split(&rows).map_err(write_error)? {
                    w.write(key, part).await.map_err(write_error)?;
                }
            }
            _ => {
                return Err(OperatorError::Internal(
                    "an Iceberg writer without its partitioning".into(),
                ));
            }
        }
        Ok(())
    }

    async fn seal(&mut self, snapshot: u64) -> Result<Option<Transaction>, OperatorError> {
        let Some(files) = self.files.take() else {
            return Ok(None);
        };
        let table = &self.config.table;
        let close_error = |e| iceberg_error(&format!("closing the data files of {table}"), e);
        let closed = match files {
            Files::Plain(w) => w.close().await.map_err(close_error)?,
            Files::Partitioned(w) => w.close().await.map_err(close_error)?,
        };
        if closed.is_empty() {
            return Ok(None);
        }
        let files = closed
            .into_iter()
            .map(|f| serialize_data_file_to_json(f, &self.partition_type, self.format))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| iceberg_error("describing a data file", e))?;
        Ok(Some(Transaction {
            snapshot,
            subtask: self.subtask,
            lineage: self.run.lineage.clone(),
            spec: self.spec,
            files,
        }))
    }
}

impl Stage for IcebergStage {
    type Transaction = Transaction;

    fn write(&mut self, batch: RecordBatch) -> BoxFuture<'_, Result<(), OperatorError>> {
        Box::pin(self.write_rows(batch))
    }

    fn pre_commit(
        &mut self,
        snapshot: u64,
    ) -> BoxFuture<'_, Result<Option<Transaction>, OperatorError>> {
        Box::pin(self.seal(snapshot))
    }
}

#[cfg(test)]
mod tests {
    use arrow_array::{Int64Array, StringArray};
    use futures::TryStreamExt;

    use super::*;
    use crate::testing::sink_conformance::{self, SinkUnderTest};

    /// A table in a local warehouse with a SQLite catalog, both in a temporary directory.
    struct LocalTable {
        dir: tempfile::TempDir,
    }

    impl LocalTable {
        fn spec(&self, extra: serde_json::Value) -> IcebergSinkSpec {
            let mut spec = serde_json::json!({
                "from": "in",
                "catalog": {"uri": format!("sqlite://{}/catalog.db", self.dir.path().display())},
                "warehouse": self.dir.path().join("warehouse").display().to_string(),
                "namespace": "weir",
                "table": "out",
            });
            if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
                s.extend(e.clone());
            }
            serde_json::from_value(spec).expect("a valid spec")
        }

        /// Every row of the table's current snapshot, read by the Iceberg crate's own scan.
        async fn rows(&self) -> Vec<serde_json::Value> {
            let storage = WeirStorage::new(None);
            let file_io = FileIOBuilder::new(Arc::new(WeirStorageFactory::new(storage))).build();
            let uri = CatalogUri::parse(&format!(
                "sqlite://{}/catalog.db",
                self.dir.path().display()
            ))
            .expect("a uri");
            let catalog = SqlCatalog::open("weir", &uri, String::new(), file_io)
                .await
                .expect("the catalog");
            let ident = TableIdent::from_strs(["weir", "out"]).expect("a name");
            if !catalog.table_exists(&ident).await.expect("the catalog") {
                return Vec::new();
            }
            let table = catalog.load_table(&ident).await.expect("the table");
            let batches: Vec<RecordBatch> = table
                .scan()
                .select_all()
                .build()
                .expect("a scan")
                .to_arrow()
                .await
                .expect("a stream")
                .try_collect()
                .await
                .expect("the rows");
            let mut out = Vec::new();
            for b in batches {
                let ids = b
                    .column_by_name("id")
                    .and_then(|c| c.as_any().downcast_ref::<Int64Array>())
                    .expect("ids");
                let names = b
                    .column_by_name("name")
                    .and_then(|c| c.as_any().downcast_ref::<StringArray>())
                    .expect("names");
                for i in 0..b.num_rows() {
                    out.push(serde_json::json!({"id": ids.value(i), "name": names.value(i)}));
                }
            }
            out
        }
    }

    fn context() -> SinkContext<'static> {
        SinkContext {
            job: "conformance",
            node: "out",
            repeat_within: std::time::Duration::from_secs(60),
        }
    }

    impl SinkUnderTest for LocalTable {
        fn factory(&self) -> Arc<dyn SinkFactory> {
            self.spec(serde_json::json!({}))
                .plan(&sink_conformance::schema(), context())
                .unwrap_or_else(|p| panic!("{p:?}"))
        }

        fn visible(&self) -> BoxFuture<'_, Vec<serde_json::Value>> {
            Box::pin(self.rows())
        }
    }

    /// Crash before and after pre-commit, a restore commits once, a repeated commit is a
    /// no-op, an abort leaves nothing visible: the suite every transactional sink runs.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_iceberg_sink_conforms() {
        let table = LocalTable {
            dir: tempfile::tempdir().expect("a directory"),
        };
        sink_conformance::run(&table).await;
        // Nothing this sink wrote is left unreferenced once a run has started again: the
        // aborted and never-completed transactions' files are gone.
        table.factory().prepare(1, None).await.expect("a fresh run");
        let data = table.dir.path().join("warehouse/weir/out/data");
        let files: Vec<_> = std::fs::read_dir(&data)
            .expect("the data directory")
            .map(|e| e.expect("an entry").file_name())
            .collect();
        let committed = table.rows().await.len();
        assert_eq!(committed, 100, "a (50), b (30) and e (20)");
        assert_eq!(
            files.len(),
            3,
            "one file per committed transaction: {files:?}"
        );
    }

    #[test]
    fn partition_entries_parse_or_say_what_is_wrong() {
        assert_eq!(
            parse_partition("day(ts)").expect("day"),
            ("ts".to_string(), Transform::Day)
        );
        assert_eq!(
            parse_partition("bucket[16](id)").expect("bucket"),
            ("id".to_string(), Transform::Bucket(16))
        );
        assert_eq!(
            parse_partition("truncate[4]( name )").expect("truncate"),
            ("name".to_string(), Transform::Truncate(4))
        );
        assert_eq!(
            parse_partition("region").expect("identity"),
            ("region".to_string(), Transform::Identity)
        );
        for bad in [
            "bucket(id)",
            "bucket[0](id)",
            "week(ts)",
            "day(ts",
            "day()",
            "",
        ] {
            assert!(parse_partition(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn an_updating_input_and_unwritable_columns_are_refused_at_plan_time() {
        let table = LocalTable {
            dir: tempfile::tempdir().expect("a directory"),
        };
        let list = Arc::new(arrow_schema::Schema::new(vec![arrow_schema::Field::new(
            "tags",
            DataType::List(Arc::new(arrow_schema::Field::new(
                "item",
                DataType::Utf8,
                true,
            ))),
            true,
        )]));
        let problems = table
            .spec(serde_json::json!({}))
            .plan(&list, context())
            .err()
            .expect("refused");
        assert!(format!("{problems:?}").contains("`tags`"), "{problems:?}");
        let problems = table
            .spec(serde_json::json!({"partition-by": ["day(missing)"]}))
            .plan(&sink_conformance::schema(), context())
            .err()
            .expect("refused");
        assert!(
            format!("{problems:?}").contains("no column `missing`"),
            "{problems:?}"
        );
    }
}
