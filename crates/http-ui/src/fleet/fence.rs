//! A job's fence in a fleet ([`weir_checkpoint::fence`]): every call is one statement that
//! names the lease's owner and epoch, so it does nothing once another server took the lease.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use weir_checkpoint::Fenced;

use super::Fleet;
use crate::db::{id_of, id_sql};

/// The fence of one job's copy on this server, at one lease epoch.
#[derive(Debug)]
pub struct JobFence {
    pub(crate) fleet: Arc<Fleet>,
    pub(crate) job: u64,
    pub(crate) epoch: u64,
}

type Answer<T> = Pin<Box<dyn Future<Output = Result<T, Fenced>> + Send + 'static>>;

impl JobFence {
    fn refused(&self) -> Fenced {
        Fenced::Taken(format!(
            "fenced: job {}'s lease (epoch {}) was taken over by another server of the fleet, which runs the job now",
            self.job, self.epoch
        ))
    }
}

impl weir_checkpoint::Fence for JobFence {
    fn reserve(&self, after: u64, count: u64) -> Answer<u64> {
        let fleet = self.fleet.clone();
        let (job, epoch, me) = (self.job, self.epoch, fleet.me().to_owned());
        let refused = self.refused();
        Box::pin(async move {
            let row = fleet
                .ops
                .run("reserving snapshot ids", move |c| {
                    Box::pin(async move {
                        c.query_opt(
                            "UPDATE weir_leases
                             SET next_checkpoint = GREATEST(next_checkpoint, $4::BIGINT + 1) + $5::BIGINT
                             WHERE job_id = $1 AND owner = $2 AND epoch = $3
                             RETURNING next_checkpoint - $5::BIGINT",
                            &[
                                &id_sql(job),
                                &me,
                                &id_sql(epoch),
                                &id_sql(after),
                                &id_sql(count),
                            ],
                        )
                        .await
                    })
                })
                .await
                .map_err(|e| Fenced::unknown("reserving snapshot ids", e))?;
            let first: i64 = row
                .ok_or(refused)?
                .try_get(0)
                .map_err(|e| Fenced::unknown("reserving snapshot ids", e))?;
            Ok(id_of(first))
        })
    }

    fn publish(&self, id: u64, location: String) -> Answer<()> {
        let fleet = self.fleet.clone();
        let (job, epoch, me) = (self.job, self.epoch, fleet.me().to_owned());
        let refused = self.refused();
        Box::pin(async move {
            // An older snapshot completing after a newer one (several in flight) is
            // published, but does not become the latest.
            let updated = fleet
                .ops
                .run("publishing a snapshot", move |c| {
                    Box::pin(async move {
                        c.execute(
                            "UPDATE weir_leases
                             SET latest = CASE WHEN latest_id IS NULL OR latest_id < $4::BIGINT
                                               THEN $5::TEXT ELSE latest END,
                                 latest_id = GREATEST(COALESCE(latest_id, 0), $4::BIGINT)
                             WHERE job_id = $1 AND owner = $2 AND epoch = $3",
                            &[&id_sql(job), &me, &id_sql(epoch), &id_sql(id), &location],
                        )
                        .await
                    })
                })
                .await
                .map_err(|e| Fenced::unknown("publishing a snapshot", e))?;
            if updated == 1 { Ok(()) } else { Err(refused) }
        })
    }

    fn latest(&self) -> Answer<Option<String>> {
        let fleet = self.fleet.clone();
        let (job, epoch, me) = (self.job, self.epoch, fleet.me().to_owned());
        let refused = self.refused();
        Box::pin(async move {
            let row = fleet
                .ops
                .run("reading the latest snapshot", move |c| {
                    Box::pin(async move {
                        c.query_opt(
                            "SELECT latest FROM weir_leases
                             WHERE job_id = $1 AND owner = $2 AND epoch = $3",
                            &[&id_sql(job), &me, &id_sql(epoch)],
                        )
                        .await
                    })
                })
                .await
                .map_err(|e| Fenced::unknown("reading the latest snapshot", e))?;
            row.ok_or(refused)?
                .try_get(0)
                .map_err(|e| Fenced::unknown("reading the latest snapshot", e))
        })
    }
}
