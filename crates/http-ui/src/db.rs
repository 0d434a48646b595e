//! What the server's two users of PostgreSQL share: the job catalog (`catalog::postgres`) and
//! the fleet's tables (`fleet::db`) each hold a connection with the task driving it
//! ([`Conn`]), create their tables under one advisory lock ([`DDL_LOCK`]: they may share a
//! database), and keep ids as PostgreSQL's `BIGINT`.

use tokio::task::JoinHandle;

/// The advisory lock key serialising table creation: \"weir\", then 2.
pub(crate) const DDL_LOCK: i64 = 0x7765_6972_0000_0002;

/// A connection and the task that drives its socket (aborted with it). Both the job catalog and
/// the fleet hold theirs this way.
pub(crate) struct Conn {
    pub(crate) client: tokio_postgres::Client,
    pub(crate) driver: JoinHandle<()>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

/// A row id as PostgreSQL keeps it.
pub(crate) fn id_sql(id: u64) -> i64 {
    i64::try_from(id).unwrap_or(i64::MAX)
}

/// A count or id back from PostgreSQL.
pub(crate) fn id_of(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}
