//! `postgres-cdc`: the changes of PostgreSQL tables, read from a logical replication slot with
//! the built-in `pgoutput` plug-in, exactly once with checkpoints.
//!
//! # What it reads
//! Each table of `tables` is an output port: an *upsert* stream keyed by the table's `key` (its
//! primary key), in which an insert or an update is the key's new row (`+U`) and a delete is the
//! key (`-D`). The planner reads such a port through the changelog normaliser
//! ([`crate::operators::normalize`]), which keeps each key's last row and makes it a retract
//! stream: the old row of an update comes from there, so a table needs no `REPLICA IDENTITY
//! FULL`. An update that changes a row's key deletes the old key's row, then writes the new.
//!
//! # From the snapshot to the stream, with no gap and no overlap
//! A fresh start (no checkpoint to restore) with `snapshot: initial` creates the slot with
//! `EXPORT_SNAPSHOT`, imports that snapshot into a `REPEATABLE READ` transaction on a second
//! connection, and copies each table in key order through a cursor. The slot's consistent
//! point is the snapshot's point in time: every transaction committed after it comes from the
//! stream, started at that point once the copy is done, and none committed before it does.
//!
//! # Exactly once
//! The reader task (one per source; a slot has one reader, so the source runs one subtask)
//! sends the subtask rows of whole transactions, each with the position after it: the end
//! LSN of its commit. A checkpoint records the position after the rows the subtask returned
//! ([`source::Position`]), so a barrier never falls inside a transaction, and a sink that
//! commits with checkpoints never shows half of one. When a checkpoint completes, its
//! position becomes the slot's confirmed position (the stream's feedback, sent after the next
//! message the source reads, a heartbeat at the latest); the server keeps the WAL after it. A restore starts the stream at the checkpoint's position, skipping
//! transactions that end at or before it; a slot confirmed past it (a restore of an older
//! checkpoint) or gone is refused with what to do, since the changes between are lost.
//!
//! While the snapshot is read, a checkpoint records the copy's progress: the table and the
//! last key emitted. A run killed mid-copy cannot import its snapshot again (it died with
//! the connection that exported it), so the restored run reads the rest of the table at a new
//! snapshot and then streams from the slot's consistent point: changes committed between the
//! two points arrive again from the stream, where they re-apply what the copy already shows
//! (the normaliser drops a row equal to its key's last one, and a delete of a key it never
//! saw), and each key's last change is still its last. Rows of the copy may so show a later
//! state for a moment before the stream's changes catch up; the tables end equal.
//!
//! # A quiet database
//! A slot holds back the WAL after its confirmed position, and the position moves only with
//! changes the source reads: on a database whose other tables (or other databases) change and
//! whose followed tables do not, WAL would pile up. Every `heartbeat`, the source writes a
//! logical decoding message into the WAL (Debezium's heartbeat, without a table); reading it
//! back moves the position past it, and the next checkpoint confirms it.
//!
//! # What stops the job (with a message saying what to do)
//! A `TRUNCATE` of a followed table; a declared column dropped, renamed or retyped; a table
//! without a primary key whose replica identity is not `FULL`; a declared type the column
//! cannot be read as (see [`values`]); a `key` other than the primary key; `wal_level` other
//! than `logical`. Columns added to a table are not read until declared.

mod source;
mod spec;
pub mod values;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use arrow_schema::{Field, Schema, SchemaRef};

pub use self::source::{Position, SnapshotProgress, lsn_text};
pub use self::spec::{CdcTableSpec, PostgresCdcSourceSpec, SnapshotMode};
use crate::api::connector::{
    HostLimits, Hosted, Location, PlannedSource, Reach, Secret, ServerFile, SourceConnector,
    SourceContext, SpecProblem,
};
use crate::changelog::ChangelogMode;
use crate::config::{EventTimeSpec, HumanDuration};
use crate::connectors::postgres::tls;
use crate::format::json::ScalarType;

impl SourceConnector for PostgresCdcSourceSpec {
    /// A replication slot has one reader.
    fn parallelism(&self) -> Option<u32> {
        Some(1)
    }

    fn event_time(&self) -> &EventTimeSpec {
        &self.event_time
    }

    fn ports(&self) -> Vec<String> {
        self.tables.iter().map(CdcTableSpec::port).collect()
    }

    fn plan(&self, cx: SourceContext<'_>) -> Result<PlannedSource, Vec<SpecProblem>> {
        let mut problems = Vec::new();
        let connect = match tls::PgConnect::parse(&self.connection) {
            Ok(c) => Some(c),
            Err(m) => {
                problems.push(SpecProblem::at("connection", m));
                None
            }
        };
        let mut ports = HashSet::new();
        let mut tables = Vec::new();
        for (i, t) in self.tables.iter().enumerate() {
            let at = |key: &str| format!("/tables/{i}/{key}");
            if !ports.insert(t.port()) {
                problems.push(SpecProblem::at(
                    &at("name"),
                    format!(
                        "two tables would be the port `{}`; give one a `name`",
                        t.port()
                    ),
                ));
            }
            let (schema_name, table_name) = t.qualified();
            if schema_name.is_empty() || table_name.is_empty() || table_name.contains('.') {
                problems.push(SpecProblem::at(
                    &at("table"),
                    format!("`{}` is not `schema.table` or `table`", t.table),
                ));
            }
            let mut key = Vec::new();
            for (k, column) in t.key.iter().enumerate() {
                match t.schema.get_index_of(column) {
                    Some(idx) => key.push(idx),
                    None => problems.push(SpecProblem::at(
                        &format!("/tables/{i}/key/{k}"),
                        format!("`{column}` is not a column of the table's `schema`"),
                    )),
                }
            }
            if let Some(column) = &self.event_time.column
                && t.schema.get(column) != Some(&ScalarType::Timestamp)
            {
                problems.push(SpecProblem::at(
                    "/event-time/column",
                    format!(
                        "the event-time column `{column}` must be a `timestamp` column of every \
                         table, and `{}` has none",
                        t.table
                    ),
                ));
            }
            if t.schema.contains_key(crate::changelog::OP) {
                problems.push(SpecProblem::at(
                    &at("schema"),
                    format!("`{}` is weir's own column name", crate::changelog::OP),
                ));
            }
            let fields: Vec<Field> = t
                .schema
                .iter()
                .map(|(name, ty)| Field::new(name, ty.data_type(), true))
                .collect();
            let port: SchemaRef = ChangelogMode::upsert(t.key.clone()).apply(&Schema::new(fields));
            tables.push(source::TablePlan {
                schema_name,
                table_name,
                port,
                columns: t.schema.keys().cloned().collect(),
                types: t.schema.values().copied().collect(),
                key,
            });
        }
        if self.heartbeat < HumanDuration::from_millis(100) {
            problems.push(SpecProblem::at(
                "heartbeat",
                format!(
                    "the heartbeat must be at least 100ms, not {}",
                    self.heartbeat
                ),
            ));
        }
        let slot = self
            .slot
            .clone()
            .unwrap_or_else(|| default_name(cx.job, cx.node));
        if let Err(m) = check_slot_name(&slot) {
            problems.push(SpecProblem::at("slot", m));
        }
        let publication = self
            .publication
            .clone()
            .unwrap_or_else(|| default_name(cx.job, cx.node));
        let Some(connect) = connect.filter(|_| problems.is_empty()) else {
            return Err(problems);
        };
        let ports = tables
            .iter()
            .zip(&self.tables)
            .map(|(p, t)| (t.port(), p.port.clone()))
            .collect();
        let shared = source::Shared {
            connect,
            replication: replication_connection(&self.connection),
            tables,
            slot,
            publication,
            create: self.create,
            snapshot: self.snapshot,
            fetch: self.snapshot_fetch,
            heartbeat: self.heartbeat.0,
            on_error: self.on_error,
            feedback: Mutex::new(None),
            confirmed: std::sync::atomic::AtomicU64::new(0),
        };
        Ok(PlannedSource {
            ports,
            factory: Arc::new(source::CdcFactory {
                shared: Arc::new(shared),
            }),
        })
    }
}

/// It reaches its database; `sslrootcert` would be read on the server's machine; the
/// connection's password is a secret.
impl Hosted for PostgresCdcSourceSpec {
    fn endpoints(&self) -> Vec<Reach> {
        crate::connectors::postgres::connection_endpoints(&self.connection)
    }

    fn server_files(&self) -> Vec<ServerFile> {
        crate::connectors::postgres::connection_files(&self.connection)
    }

    fn locations(&self) -> Vec<Location> {
        Vec::new()
    }

    fn secrets(&self) -> Vec<Secret> {
        vec![Secret::Connection(self.connection.clone())]
    }

    /// Its reading is paced by the database.
    fn within(&self, _limits: &HostLimits) -> Vec<SpecProblem> {
        Vec::new()
    }
}

/// `weir_<job>_<node>`, in the letters a slot's name may hold, at most 63 of them.
fn default_name(job: &str, node: &str) -> String {
    let name: String = format!("weir_{job}_{node}")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .take(63)
        .collect();
    name
}

/// A slot's name holds lower-case letters, digits and underscores (PostgreSQL's rule).
fn check_slot_name(name: &str) -> Result<(), String> {
    if name.is_empty()
        || name.len() > 63
        || !name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
    {
        return Err(format!(
            "`{name}` is not a slot name: 1 to 63 lower-case letters, digits and underscores"
        ));
    }
    Ok(())
}

/// The connection string for the replication connection: `replication=database` added, in
/// the string's own form.
fn replication_connection(connection: &str) -> String {
    let c = connection.trim();
    if c.starts_with("postgres://") || c.starts_with("postgresql://") {
        let sep = if c.contains('?') { '&' } else { '?' };
        format!("{c}{sep}replication=database")
    } else {
        format!("{c} replication=database")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_connections() {
        assert_eq!(
            default_name("Shop-Orders", "cdc.1"),
            "weir_shop_orders_cdc_1"
        );
        assert_eq!(default_name(&"j".repeat(100), "n").len(), 63);
        assert!(check_slot_name("weir_a1").is_ok());
        assert!(check_slot_name("Weir").is_err());
        assert!(check_slot_name("").is_err());
        assert_eq!(
            replication_connection("postgresql://u@h/db"),
            "postgresql://u@h/db?replication=database"
        );
        assert_eq!(
            replication_connection("postgresql://u@h/db?sslmode=require"),
            "postgresql://u@h/db?sslmode=require&replication=database"
        );
        assert_eq!(
            replication_connection("host=h dbname=db"),
            "host=h dbname=db replication=database"
        );
    }

    #[test]
    fn positions_round_trip_through_a_checkpoint() {
        let p = Position {
            slot: "s".into(),
            lsn: 0x16_B374_D848,
            snapshot: Some(SnapshotProgress {
                table: 1,
                after: Some(vec![Some("7".into()), None]),
                rows: 3,
            }),
        };
        let v = serde_json::to_value(&p).expect("a position is JSON");
        assert_eq!(serde_json::from_value::<Position>(v).ok(), Some(p));
        assert_eq!(lsn_text(0x16_B374_D848), "16/B374D848");
    }
}
