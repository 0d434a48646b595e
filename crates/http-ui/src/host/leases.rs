//! The host's side of a fleet: the hook ([`Leases`]) through which a host that is one server
//! of a fleet asks for the lease each run goes under, and a job's copy here leaving when the
//! job moves to another server. The fleet itself ([`crate::fleet`]) sits above the host: it
//! implements the hook, and takes jobs over and drains them through the host.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use weir_runtime::plan::Plan;

use super::Host;
use crate::error::ApiError;

/// A call of the hook, to await.
pub type LeaseCall<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What the host asks of the fleet it is a server of. Every run of a job here goes under a
/// lease of the fleet's catalog, whose epoch fences what the run writes; the host takes one
/// before a run starts, drops it if the run cannot start, lets it go when the run ends and
/// hands every lease back at shutdown. [`crate::fleet::Fleet`] implements it.
pub trait Leases: Send + Sync {
    /// Takes a lease on job `id` for this server (a new job, or a new run of one that ended
    /// here): its epoch. Refused with 409 if another server holds the job or, for a
    /// `checkpointing` job, runs a checkpointing job of the same `name`; with 503 if the
    /// fleet's catalog cannot answer.
    fn acquire_lease<'a>(
        &'a self,
        id: u64,
        name: &'a str,
        checkpointing: bool,
        subtasks: usize,
    ) -> LeaseCall<'a, Result<u64, ApiError>>;

    /// Drops the lease on job `id` at `epoch` altogether: the job could not start here.
    fn drop_lease(&self, id: u64, epoch: u64) -> LeaseCall<'_, ()>;

    /// The epoch of the lease this server holds on job `id`, if any.
    fn lease_epoch(&self, id: u64) -> Option<u64>;

    /// The run of job `id` here ended: its lease is no longer renewed (the ended document the
    /// catalog writes drops it).
    fn lease_ended(&self, id: u64);

    /// The fence of job `id`'s run here under lease `epoch` ([`weir_checkpoint::fence`]).
    fn lease_fence(self: Arc<Self>, id: u64, epoch: u64) -> Arc<dyn weir_checkpoint::Fence>;

    /// Hands back every lease this server holds and leaves the fleet (at shutdown, once the
    /// copies here have stopped).
    fn release_leases(&self)
    -> LeaseCall<'_, Result<(), Box<dyn std::error::Error + Send + Sync>>>;
}

impl Host {
    /// In a fleet, the lease job `id` runs under here: `claimed` (just taken over), or one
    /// taken now. Outside a fleet, none.
    pub(super) async fn lease(
        &self,
        id: u64,
        plan: &Plan,
        claimed: Option<u64>,
    ) -> Result<Option<u64>, ApiError> {
        let Some(leases) = &self.leases else {
            return Ok(None);
        };
        if claimed.is_some() {
            return Ok(claimed);
        }
        let subtasks = crate::limits::subtasks(&plan.spec);
        leases
            .acquire_lease(id, plan.name(), plan.spec.checkpoint.enabled(), subtasks)
            .await
            .map(Some)
    }

    /// Whether job `id` is kept here (and not moving away): its lease, if this server still
    /// has one in the catalog, is this server's to keep or end.
    pub fn has_job_here(&self, id: u64) -> bool {
        self.jobs
            .read()
            .ok()
            .and_then(|j| j.get(&id).cloned())
            .is_some_and(|j| !j.is_moving())
    }

    /// The fleet gave job `id` to another server (or this one can no longer tell it holds
    /// it): its copy here stops, without writing its end, and the job is no longer listed
    /// here (requests for it go to its new server).
    /// Whether a copy was still running here (a copy whose run met the fence itself has
    /// left already, and said so).
    pub fn lost(&self, id: u64) -> bool {
        let Some(job) = self.remove(id) else {
            return false;
        };
        job.set_moving();
        job.cancel().is_ok()
    }
}
