//! The host's part in a fleet ([`crate::fleet`]): the lease each run goes under, and moving
//! jobs in (a lease taken over or placed here) and out (a lease lost, a drain).

use std::path::PathBuf;
use std::sync::Arc;

use weir_runtime::exec::restore::RestoreFrom;
use weir_runtime::plan::Plan;

use super::Host;
use crate::ApiError;
use crate::fleet::Claimed;
use crate::job::HostedJob;

impl Host {
    /// In a fleet, the lease job `id` runs under here: `claimed` (just taken over), or one
    /// taken now. Outside a fleet, none.
    pub(super) async fn lease(
        &self,
        id: u64,
        plan: &Plan,
        claimed: Option<u64>,
    ) -> Result<Option<u64>, ApiError> {
        let Some(fleet) = &self.fleet else {
            return Ok(None);
        };
        if claimed.is_some() {
            return Ok(claimed);
        }
        let subtasks = crate::limits::subtasks(&plan.spec);
        fleet
            .acquire(id, plan.name(), plan.spec.checkpoint.enabled(), subtasks)
            .await
            .map(Some)
            .map_err(|e| match e {
                crate::fleet::db::DbError::NameTaken(_) | crate::fleet::db::DbError::Held(_) => {
                    ApiError::Conflict(format!(
                        "{e}: two running copies of a checkpointed job would share its checkpoints"
                    ))
                }
                other => ApiError::Unavailable(other.to_string()),
            })
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
    pub fn lost(&self, id: u64) {
        let Some(job) = self.jobs.write().ok().and_then(|mut j| j.remove(&id)) else {
            return;
        };
        job.set_moving();
        let _ = job.cancel();
    }

    /// Runs a job whose lease this server just took over (or that was placed here), from the
    /// latest snapshot published under the lease.
    pub(crate) async fn resume_claimed(self: &Arc<Self>, claimed: Claimed) {
        let Some(fleet) = self.fleet.clone() else {
            return;
        };
        let Claimed {
            job: id,
            epoch,
            latest,
        } = claimed;
        let location = fleet.url().to_owned();
        let stored = match fleet.document(id).await {
            Ok(Some(row)) => row.job(&location),
            Ok(None) => Err(crate::catalog::CatalogError::Corrupt {
                location: location.clone(),
                id,
                reason: "it has a lease but no document".into(),
            }),
            Err(e) => {
                // The catalog is unreachable: hand the lease back for a later round.
                tracing::warn!(job = id, error = %e, "cannot read a job taken over; handing its lease back");
                if let Err(e) = fleet.release(id, epoch, None).await {
                    tracing::warn!(job = id, error = %e, "cannot hand back a lease");
                }
                return;
            }
        };
        let stored = match stored {
            Ok(stored) => stored,
            Err(e) => {
                tracing::error!(job = id, error = %e, "a job taken over cannot be read: its lease is dropped, its document left as it is");
                fleet.forget(id, epoch).await;
                return;
            }
        };
        let overrides = match crate::overrides::parse(&stored.overrides) {
            Ok(o) => o,
            Err(e) => {
                tracing::error!(job = id, error = %e, "a job taken over has overrides that no longer parse; its lease is dropped");
                fleet.forget(id, epoch).await;
                return;
            }
        };
        let plan = match Self::check_isolated(&stored.name, &stored.text, &overrides, &self.config)
            .await
        {
            Ok(plan) => plan,
            Err(refusal) => {
                match weir_runtime::plan::check_str(&stored.name, &stored.text, &overrides) {
                    Ok(plan) => {
                        let job = Arc::new(HostedJob::recovered(&stored, plan));
                        job.set_lease(epoch);
                        self.insert(job.clone());
                        job.start_failed(&format!(
                            "the job was taken over by {location} and cannot run there: {refusal}"
                        ));
                        self.persist(&job);
                        return;
                    }
                    Err(e) => {
                        tracing::error!(job = id, error = %e, "a job taken over no longer plans; its lease is dropped");
                        fleet.forget(id, epoch).await;
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
        self.insert(job.clone());
        let host = self.clone();
        self.spawn(async move {
            let _starting = host.starting.lock().await;
            let from = latest.map(|l| RestoreFrom::Path(PathBuf::from(l)));
            let name = from.as_ref().map(|_| "latest".to_owned());
            match host.launch(&job, from, name, Some(epoch)).await {
                Ok(()) => tracing::info!(job = %job.name, id = job.id, epoch, "job taken over"),
                Err(e) => {
                    tracing::error!(job = %job.name, id = job.id, error = %e, "a job taken over could not start");
                    job.start_failed(&format!("the job was taken over and could not start: {e}"));
                    host.persist(&job);
                }
            }
        });
    }

    /// Moves every job of this server to the others of the fleet, for an upgrade or a
    /// shutdown without downtime: the server stops taking jobs, then each job in turn stops
    /// with a savepoint (jobs without checkpoints are cancelled) and its lease is handed to
    /// the least loaded other server, which resumes it from that savepoint. Returns each
    /// job's id and where it went.
    pub async fn drain(self: &Arc<Self>) -> Result<Vec<(u64, Option<String>)>, ApiError> {
        let Some(fleet) = self.fleet.clone() else {
            return Err(ApiError::Conflict(
                "this server is not part of a fleet (start it with --catalog postgres://... --advertise URL)"
                    .into(),
            ));
        };
        fleet.set_draining();
        if let Err(e) = fleet.beat().await {
            tracing::warn!(error = %e, "cannot tell the fleet this server drains; it is told at the next heartbeat");
        }
        let mut moved = Vec::new();
        for job in self.jobs() {
            let (Some(epoch), true) = (job.lease(), job.state().is_live()) else {
                continue;
            };
            if fleet.epoch_of(job.id) != Some(epoch) {
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
            let target = fleet.place(true).await.ok().flatten();
            if let Err(e) = fleet
                .release(job.id, epoch, target.as_ref().map(|t| t.id.as_str()))
                .await
            {
                tracing::error!(job = job.id, error = %e, "cannot hand over a drained job's lease: it moves once the lease expires");
            }
            if let Ok(mut jobs) = self.jobs.write() {
                jobs.remove(&job.id);
            }
            tracing::info!(job = job.id, to = ?target.as_ref().map(|t| &t.url), "job drained");
            moved.push((job.id, target.map(|t| t.url)));
        }
        Ok(moved)
    }
}
