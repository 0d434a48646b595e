//! Fencing: which copy of a job may publish its snapshots, when more than one process could be
//! running it.
//!
//! In a fleet (`weir serve --advertise`), a job belongs to the server holding its lease in the
//! shared catalog, and a server that lost its lease (paused past the expiry, cut off from the
//! catalog) may run its copy for a while before it notices. Three rules keep that copy from
//! doing harm, all checked by the catalog in the statement that does the work:
//! - **Ids**: checkpoint ids come from the lease holder's catalog in blocks
//!   ([`Fence::reserve`]); a block is never given twice, so two copies never write into the
//!   same snapshot directory, and the new holder's ids are all above the old one's.
//! - **Publish**: a snapshot counts once the catalog records it as the job's latest
//!   ([`Fence::publish`]), after its metadata is written and before any sink commits. A copy
//!   whose lease was taken is refused there: its snapshot is never restored and the sink
//!   transactions it prepared are never committed.
//! - **Restore**: "the latest snapshot" is what the catalog recorded ([`Fence::latest`]), never
//!   the newest metadata found in storage, where a refused copy's files may sit.
//!
//! A job without a fence (`weir run`, a single `weir serve`) publishes by writing its metadata,
//! as before.

use futures::future::BoxFuture;

/// Why a fenced operation was refused.
#[derive(Clone, Debug, thiserror::Error)]
pub enum Fenced {
    /// The lease is another holder's: this copy must stop for good (another runs the job).
    #[error("{0}")]
    Taken(String),
    /// The catalog did not answer, so nobody can say whose the lease is: the copy publishes
    /// and commits nothing meanwhile, and asks again (a restart does), until the catalog
    /// answers either way.
    #[error("the fleet's catalog cannot say whose the job's lease is ({doing}): {source}")]
    Unknown {
        doing: String,
        #[source]
        source: std::sync::Arc<dyn std::error::Error + Send + Sync>,
    },
}

impl Fenced {
    /// The catalog failed while `doing` something.
    pub fn unknown(doing: &str, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        Fenced::Unknown {
            doing: doing.to_owned(),
            source: std::sync::Arc::new(source),
        }
    }

    /// Whether the lease is known to be another holder's (the copy must stop for good).
    pub fn is_taken(&self) -> bool {
        matches!(self, Fenced::Taken(_))
    }
}

/// Who may publish a job's snapshots: the holder of its lease.
pub trait Fence: Send + Sync + std::fmt::Debug + 'static {
    /// Reserves `count` checkpoint ids above `after` that no holder of the job is ever given
    /// again; returns the first (the block is `first..first + count`).
    fn reserve(&self, after: u64, count: u64) -> BoxFuture<'static, Result<u64, Fenced>>;

    /// Records snapshot `id` at `location` as the job's latest, if the lease is still this
    /// holder's. Refused otherwise: the caller must not commit anything of it.
    fn publish(&self, id: u64, location: String) -> BoxFuture<'static, Result<(), Fenced>>;

    /// The location of the job's latest published snapshot, if it has one.
    fn latest(&self) -> BoxFuture<'static, Result<Option<String>, Fenced>>;
}

/// Ids reserved at once: a job checkpointing every 100 ms asks the catalog about every 3 s.
pub const ID_BLOCK: u64 = 64;
