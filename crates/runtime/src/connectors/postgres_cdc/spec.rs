//! The keys of `kind: postgres-cdc`.

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::config::{EventTimeSpec, HumanDuration, OnError};
use crate::format::json::ScalarType;

/// The changes of PostgreSQL tables, followed through a logical replication slot (`pgoutput`):
/// first a consistent snapshot of the tables, then every insert, update and delete committed
/// after it, exactly once with checkpoints. Each table is an output port, an upsert stream keyed
/// by its `key`.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct PostgresCdcSourceSpec {
    /// A libpq-style connection string (`host=127.0.0.1 port=5432 user=weir dbname=shop`) or
    /// URL (`postgresql://weir@db:5432/shop?sslmode=verify-full`), TLS settings as the
    /// `postgres` sink's. The user needs the `REPLICATION` attribute (or to be a superuser),
    /// `SELECT` on the tables, and, with `create: true`, the right to create a publication
    /// (owner of the tables).
    #[schemars(length(min = 1))]
    pub connection: String,
    /// The tables to follow, each an output port named by `name` (default: the table's name).
    #[schemars(length(min = 1, max = 64))]
    pub tables: Vec<CdcTableSpec>,
    /// The publication naming the tables (default `weir_<job>_<node>`). With `create: true` it
    /// is created for the tables when missing; an existing one must include every table.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub publication: Option<String>,
    /// The logical replication slot (default `weir_<job>_<node>`). It keeps the WAL the job
    /// has not yet checkpointed; its confirmed position advances when a checkpoint completes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub slot: Option<String>,
    /// Create the publication and the slot when missing. A fresh start (no checkpoint to
    /// restore) with `snapshot: initial` also drops and recreates an inactive slot left by an
    /// earlier run, since only a new slot exports the snapshot the copy is read at.
    #[serde(default = "yes")]
    pub create: bool,
    /// `initial`: on a fresh start, copy the tables as they are at the slot's creation, then
    /// follow the changes committed after it (no gap, no overlap). `never`: follow changes
    /// from the slot's position only.
    #[serde(default)]
    pub snapshot: SnapshotMode,
    /// Rows fetched per round trip while copying a table.
    #[serde(default = "default_snapshot_fetch")]
    #[schemars(range(min = 1, max = 1_000_000))]
    pub snapshot_fetch: u32,
    /// How often a quiet source writes a heartbeat into the WAL (a logical decoding message,
    /// no table touched) and moves its position past it, so the slot's confirmed position
    /// keeps up with the server and WAL does not pile up while the tables do not change.
    #[serde(default = "default_heartbeat")]
    pub heartbeat: HumanDuration,
    /// What a value that does not read as its declared type does (a `numeric` too large for
    /// `int`, text in a `timestamp` column): fail the job naming table, column and position,
    /// or skip the change and count it.
    #[serde(default)]
    pub on_error: OnError,
    /// Watermarks: `column` names a `timestamp` column of the tables.
    #[serde(default)]
    pub event_time: EventTimeSpec,
}

/// One table followed by the source.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct CdcTableSpec {
    /// `schema.table`, or `table` in the `public` schema.
    #[schemars(length(min = 1, max = 127))]
    pub table: String,
    /// The output port's name (default: the table's name without its schema).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub name: Option<String>,
    /// The columns read and their types (`int`, `float`, `string`, `bool`, `timestamp`); the
    /// table's other columns are not read. See the module's table of PostgreSQL types.
    #[schemars(length(min = 1))]
    pub schema: IndexMap<String, ScalarType>,
    /// The table's primary key (or, on a table with `REPLICA IDENTITY FULL` and no primary
    /// key, columns the job may take as one): the port's upsert key. Checked against the
    /// table when the job starts.
    #[schemars(length(min = 1))]
    pub key: Vec<String>,
}

impl CdcTableSpec {
    /// The schema and the table's names, unquoted (`public` when no schema is given).
    pub fn qualified(&self) -> (String, String) {
        match self.table.split_once('.') {
            Some((schema, table)) => (schema.to_owned(), table.to_owned()),
            None => ("public".to_owned(), self.table.clone()),
        }
    }

    /// The output port's name.
    pub fn port(&self) -> String {
        self.name.clone().unwrap_or_else(|| self.qualified().1)
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum SnapshotMode {
    #[default]
    Initial,
    Never,
}

fn yes() -> bool {
    true
}

fn default_snapshot_fetch() -> u32 {
    10_000
}

fn default_heartbeat() -> HumanDuration {
    HumanDuration(std::time::Duration::from_secs(10))
}
