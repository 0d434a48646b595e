//! Writing jobs to the catalog without making the API wait for it.
//!
//! Whoever changes a job hands its new [`StoredJob`] to the [`Persister`], which keeps only
//! the newest document per job and writes in the background, in order per job: a slow or
//! unreachable store never blocks a request or a job, and an older document never overwrites a
//! newer one. What is pending is bounded by the number of jobs the host keeps (one entry per
//! job), not by the rate of changes. A failed write stays pending (unless a newer document
//! replaced it) and is tried again with backoff; [`Persister::flush`] writes everything now
//! (at shutdown, and for tests).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::{Catalog, CatalogError, StoredJob};

enum Pending {
    Save(Box<StoredJob>),
    Delete,
}

/// The background writer of one catalog.
pub struct Persister {
    catalog: Arc<Catalog>,
    /// Per job id, what is still to write (the newest only).
    pending: Mutex<BTreeMap<u64, Pending>>,
    wake: Notify,
    /// Held while writing: the background loop and a flush never interleave, so the order of
    /// writes per job is the order of changes.
    writing: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for Persister {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Persister")
            .field("catalog", &self.catalog.location())
            .finish()
    }
}

/// The longest wait between attempts to write to a failing store.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

impl Persister {
    pub fn new(catalog: Arc<Catalog>) -> Arc<Self> {
        Arc::new(Self {
            catalog,
            pending: Mutex::new(BTreeMap::new()),
            wake: Notify::new(),
            writing: tokio::sync::Mutex::new(()),
        })
    }

    pub fn catalog(&self) -> &Arc<Catalog> {
        &self.catalog
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Pending>> {
        self.pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Writes `job` soon (replacing any older document of it still pending).
    pub fn save(&self, job: StoredJob) {
        self.pending().insert(job.id, Pending::Save(Box::new(job)));
        self.wake.notify_one();
    }

    /// Forgets job `id` soon.
    pub fn delete(&self, id: u64) {
        self.pending().insert(id, Pending::Delete);
        self.wake.notify_one();
    }

    /// Writes in the background until `stop`; what is pending then is left to [`Self::flush`].
    pub async fn run(self: Arc<Self>, stop: CancellationToken) {
        let mut backoff = Duration::from_millis(100);
        loop {
            tokio::select! {
                () = self.wake.notified() => {}
                () = stop.cancelled() => return,
            }
            match self.write_pending().await {
                Ok(()) => backoff = Duration::from_millis(100),
                Err(e) => {
                    tracing::warn!(error = %e, retry_in = ?backoff, "cannot write the job catalog; retrying");
                    tokio::select! {
                        () = tokio::time::sleep(backoff) => {}
                        () = stop.cancelled() => return,
                    }
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    // Try again even if nothing new arrived.
                    self.wake.notify_one();
                }
            }
        }
    }

    /// Writes everything pending now; the first failure is returned (what failed stays
    /// pending).
    pub async fn flush(&self) -> Result<(), CatalogError> {
        self.write_pending().await
    }

    async fn write_pending(&self) -> Result<(), CatalogError> {
        let _writing = self.writing.lock().await;
        let batch = std::mem::take(&mut *self.pending());
        let mut failed = None;
        let mut left = BTreeMap::new();
        for (id, op) in batch {
            if failed.is_some() {
                left.insert(id, op);
                continue;
            }
            let written = match &op {
                Pending::Save(job) => self.catalog.save(job).await,
                Pending::Delete => self.catalog.delete(id).await,
            };
            if let Err(e) = written {
                failed = Some(e);
                left.insert(id, op);
            }
        }
        if !left.is_empty() {
            let mut pending = self.pending();
            for (id, op) in left {
                // A newer document that arrived meanwhile wins.
                pending.entry(id).or_insert(op);
            }
        }
        failed.map_or(Ok(()), Err)
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::job;
    use super::super::{Catalog, CatalogConfig};
    use super::*;

    #[tokio::test]
    async fn the_newest_document_of_each_job_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let config = CatalogConfig::Sqlite(dir.path().join("c.sqlite"));
        let persister = Persister::new(Arc::new(Catalog::open(&config).await.unwrap()));
        let stop = CancellationToken::new();
        let writer = tokio::spawn(persister.clone().run(stop.clone()));
        let mut one = job(1);
        for state in ["running", "restarting", "running", "finished"] {
            one.state = state.into();
            persister.save(one.clone());
        }
        persister.save(job(2));
        persister.delete(2);
        persister.save(job(3));
        stop.cancel();
        writer.await.unwrap();
        persister.flush().await.unwrap();
        let loaded = persister.catalog().load().await.unwrap();
        let states: Vec<(u64, String)> = loaded
            .jobs
            .iter()
            .map(|j| (j.id, j.state.clone()))
            .collect();
        assert_eq!(
            states,
            [(1, "finished".to_string()), (3, "running".to_string())]
        );
    }
}
