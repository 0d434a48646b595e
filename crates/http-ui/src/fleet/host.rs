//! The fleet's side of the host: the host it builds for this server, the hook through which
//! that host asks for its runs' leases ([`Leases`]), and jobs moving in (a lease taken over or
//! placed here) and out (a drain).

use std::path::PathBuf;
use std::sync::Arc;

use weir_runtime::exec::restore::RestoreFrom;
use weir_scheduler::Scheduler;

use super::db::DbError;
use super::{Claimed, Fleet};
use crate::catalog::Catalog;
use crate::error::ApiError;
use crate::host::{Host, HostConfig, LeaseCall, Leases};
use crate::job::HostedJob;

impl Fleet {
    /// The host of this server of the fleet: it keeps its jobs in the fleet's shared `catalog`
    /// ([`Catalog::open_fleet`]) and runs each under a lease of the fleet; the fleet takes part
    /// in placement for it, renews its jobs' leases and takes over those of dead servers
    /// ([`Fleet::keep`], a task the host owns).
    pub fn host(
        self: &Arc<Self>,
        scheduler: Arc<Scheduler>,
        config: HostConfig,
        catalog: Catalog,
    ) -> Arc<Host> {
        let host = Host::in_fleet(scheduler, config, catalog, self.clone());
        host.spawn(self.clone().keep(Arc::downgrade(&host), host.stopping()));
        host
    }

    /// Runs a job whose lease this server just took over (or that was placed here), from the
    /// latest snapshot published under the lease.
    pub(crate) async fn resume_claimed(&self, host: &Arc<Host>, claimed: Claimed) {
        let Claimed {
            job: id,
            epoch,
            latest,
        } = claimed;
        let location = self.url().to_owned();
        let stored = match self.document(id).await {
            Ok(Some(row)) => row.job(&location),
            Ok(None) => Err(crate::catalog::CatalogError::Corrupt {
                location: location.clone(),
                id,
                reason: "it has a lease but no document".into(),
            }),
            Err(e) => {
                // The catalog is unreachable: hand the lease back for a later round.
                tracing::warn!(job = id, error = %e, "cannot read a job taken over; handing its lease back");
                if let Err(e) = self.release(id, epoch, None).await {
                    tracing::warn!(job = id, error = %e, "cannot hand back a lease");
                }
                return;
            }
        };
        let stored = match stored {
            Ok(stored) => stored,
            Err(e) => {
                tracing::error!(job = id, error = %e, "a job taken over cannot be read: its lease is dropped, its document left as it is");
                self.forget(id, epoch).await;
                return;
            }
        };
        let overrides = match crate::overrides::parse(&stored.overrides) {
            Ok(o) => o,
            Err(e) => {
                tracing::error!(job = id, error = %e, "a job taken over has overrides that no longer parse; its lease is dropped");
                self.forget(id, epoch).await;
                return;
            }
        };
        let plan = match Host::check_isolated(&stored.name, &stored.text, &overrides, host.config())
            .await
        {
            Ok(plan) => plan,
            Err(refusal) => {
                match weir_runtime::plan::check_str(&stored.name, &stored.text, &overrides) {
                    Ok(plan) => {
                        let job = Arc::new(HostedJob::recovered(&stored, plan));
                        job.set_lease(epoch);
                        host.insert(job.clone());
                        job.start_failed(&format!(
                            "the job was taken over by {location} and cannot run there: {refusal}"
                        ));
                        host.persist(&job);
                        return;
                    }
                    Err(e) => {
                        tracing::error!(job = id, error = %e, "a job taken over no longer plans; its lease is dropped");
                        self.forget(id, epoch).await;
                        return;
                    }
                }
            }
        };
        let job = Arc::new(HostedJob::recovered(&stored, plan));
        job.set_lease(epoch);
        job.lock().exception(
            "failover",
            format!(
                "taken over by {location} (lease epoch {epoch}): resuming from {}",
                latest
                    .as_deref()
                    .unwrap_or("scratch (no snapshot was published)")
            ),
            None,
        );
        host.insert(job.clone());
        let from = latest.map(|l| RestoreFrom::Path(PathBuf::from(l)));
        let name = from.as_ref().map(|_| "latest".to_owned());
        let owner = Arc::clone(host);
        host.spawn(async move {
            match owner.launch_in_turn(&job, from, name, Some(epoch)).await {
                Ok(()) => tracing::info!(job = %job.name, id = job.id, epoch, "job taken over"),
                Err(e) => {
                    tracing::error!(job = %job.name, id = job.id, error = %e, "a job taken over could not start");
                    job.start_failed(&format!("the job was taken over and could not start: {e}"));
                    owner.persist(&job);
                }
            }
        });
    }

    /// Finds a job of the catalog that no server holds a lease on (it ended) for a request
    /// about it here: the URL of the live server that keeps it, if one does (asked in turn,
    /// each within a few seconds); else this server keeps it from now on, read from the
    /// catalog ([`Host::adopt_ended`]), and `None` is the answer: ask here. A job the catalog
    /// does not have, or one still live (between two servers, its lease handed over), is
    /// left for the request to find missing or to ask again.
    pub(crate) async fn find_ended(
        &self,
        host: &Arc<Host>,
        id: u64,
        authorization: Option<&axum::http::HeaderValue>,
    ) -> Result<Option<String>, DbError> {
        let Some(row) = self.document(id).await? else {
            return Ok(None);
        };
        let ended = crate::lifecycle::JobState::ended_name(&row.state);
        if !ended {
            return Ok(None);
        }
        let path = format!("/api/v1/jobs/{id}");
        for url in self.other_live_urls().await? {
            if self
                .forwarder
                .read_json(&url, &path, authorization)
                .await
                .is_ok()
            {
                return Ok(Some(url));
            }
        }
        self.adopt(host, row).await;
        Ok(None)
    }

    /// Keeps here every job of the catalog that ended and is not in `kept` (the jobs this
    /// server and the others listed): for a jobs list that is the whole catalog's.
    pub(crate) async fn adopt_unkept(
        &self,
        host: &Arc<Host>,
        kept: &std::collections::HashSet<u64>,
    ) -> Result<(), DbError> {
        for (id, state) in self.unleased().await? {
            let ended = crate::lifecycle::JobState::ended_name(&state);
            if !ended || kept.contains(&id) {
                continue;
            }
            if let Some(row) = self.document(id).await? {
                self.adopt(host, row).await;
            }
        }
        Ok(())
    }

    async fn adopt(&self, host: &Arc<Host>, row: crate::catalog::Row) {
        let id = row.id;
        match row.job(self.url()) {
            Ok(stored) => host.adopt_ended(stored).await,
            Err(e) => {
                tracing::warn!(job = id, error = %e, "a job of the catalog cannot be read");
            }
        }
    }

    /// Moves every job of this server to the others of the fleet, for an upgrade or a
    /// shutdown without downtime: the server stops taking jobs, then each job in turn stops
    /// with a savepoint (jobs without checkpoints are cancelled) and its lease is handed to
    /// the least loaded other server, which resumes it from that savepoint. Returns each
    /// job's id and where it went.
    pub async fn drain(&self, host: &Host) -> Vec<(u64, Option<String>)> {
        self.set_draining();
        if let Err(e) = self.beat().await {
            tracing::warn!(error = %e, "cannot tell the fleet this server drains; it is told at the next heartbeat");
        }
        let mut moved = Vec::new();
        for job in host.jobs() {
            let (Some(epoch), true) = (job.lease(), job.state().is_live()) else {
                continue;
            };
            if self.epoch_of(job.id) != Some(epoch) {
                continue;
            }
            job.set_moving();
            let ended = job.run_ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            let mut stopped = false;
            if job.plan().spec.checkpoint.enabled()
                && let Ok((request, control)) = job.savepoint_requested(true)
            {
                let result = control.savepoint(true).await;
                stopped = result.is_ok();
                if let Err(e) = &result {
                    tracing::warn!(job = job.id, error = %e, "the drain's savepoint failed: the job moves from its latest checkpoint");
                }
                job.savepoint_done(request, result);
            }
            if !stopped {
                let _ = job.cancel();
            }
            if job.state().is_live() {
                ended.await;
            }
            let target = self.place(true).await.ok().flatten();
            if let Err(e) = self
                .release(job.id, epoch, target.as_ref().map(|t| t.id.as_str()))
                .await
            {
                tracing::error!(job = job.id, error = %e, "cannot hand over a drained job's lease: it moves once the lease expires");
            }
            host.remove(job.id);
            tracing::info!(job = job.id, to = ?target.as_ref().map(|t| &t.url), "job drained");
            moved.push((job.id, target.map(|t| t.url)));
        }
        moved
    }
}

/// The host's hook ([`Leases`]): each call is one of the fleet's own methods (`acquire`,
/// `forget`, `epoch_of`, `unhold`, `fence`, `leave`), the lease errors of [`Fleet::acquire`]
/// answered as the API answers them.
impl Leases for Fleet {
    fn acquire_lease<'a>(
        &'a self,
        id: u64,
        name: &'a str,
        checkpointing: bool,
        subtasks: usize,
    ) -> LeaseCall<'a, Result<u64, ApiError>> {
        Box::pin(async move {
            self.acquire(id, name, checkpointing, subtasks)
                .await
                .map_err(|e| match e {
                    DbError::NameTaken(_) | DbError::Held(_) => ApiError::Conflict(format!(
                        "{e}: two running copies of a checkpointed job would share its checkpoints"
                    )),
                    other => ApiError::Unavailable(other.to_string()),
                })
        })
    }

    fn drop_lease(&self, id: u64, epoch: u64) -> LeaseCall<'_, ()> {
        Box::pin(self.forget(id, epoch))
    }

    fn lease_epoch(&self, id: u64) -> Option<u64> {
        self.epoch_of(id)
    }

    fn lease_ended(&self, id: u64) {
        self.unhold(id);
    }

    fn lease_fence(self: Arc<Self>, id: u64, epoch: u64) -> Arc<dyn weir_checkpoint::Fence> {
        self.fence(id, epoch)
    }

    fn release_leases(
        &self,
    ) -> LeaseCall<'_, Result<(), Box<dyn std::error::Error + Send + Sync>>> {
        Box::pin(async move { self.leave().await.map_err(Into::into) })
    }
}
