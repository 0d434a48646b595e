//! The job host: many jobs in one process, one checkpoint scheduler for all of them.
//!
//! Submitting a job checks it (the job file's problems, then what it may name on the server's
//! filesystem: [`crate::paths`]), starts it with [`weir_runtime::exec::job::start`] on the
//! process's runtime with the shared [`Scheduler`], and hands its `RunningJob` to a waiter task
//! that records how it ended. Every task the host spawns (waiters, savepoint requests, the
//! sampler) sits in one `JoinSet`; [`Host::shutdown`] cancels every job, waits for them within
//! a grace period and aborts what is left.
//!
//! Bounds: at most `max_running` jobs run at once and `max_kept` are remembered (finished jobs
//! are forgotten oldest first); each job keeps a bounded sample history, exception list and
//! savepoint list ([`crate::job`]).

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Duration;

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use weir_checkpoint::JobCheckpoints;
use weir_checkpoint::metadata::SnapshotKind;
use weir_runtime::exec::job::{self, JobOptions};
use weir_runtime::exec::restore::RestoreFrom;
use weir_runtime::plan::Plan;
use weir_runtime::spec::load::Override;
use weir_scheduler::Scheduler;

use crate::ApiError;
use crate::job::HostedJob;
use crate::limits::JobLimits;

/// Limits of a host.
#[derive(Clone, Debug)]
pub struct HostConfig {
    /// Jobs running at once; a submit beyond it is refused with 429.
    pub max_running: usize,
    /// Jobs remembered, running or not; the oldest ended ones are forgotten first.
    pub max_kept: usize,
    /// How often every running job's counters are sampled (rates, sparklines).
    pub sample_every: Duration,
    /// State lookups per second per client (bearer token, else address); beyond it, 429.
    pub lookup_rate: f64,
    /// State lookups a client may send at once before the rate applies.
    pub lookup_burst: u32,
    /// What one job may ask for (subtasks, checkpoint interval, batch sizes, generator rate).
    pub limits: JobLimits,
    /// The S3 endpoints, Kafka brokers and PostgreSQL hosts submitted jobs may reach
    /// ([`crate::endpoints`]); by default only the server's own storage.
    pub endpoints: crate::endpoints::Endpoints,
}

impl Default for HostConfig {
    fn default() -> Self {
        HostConfig {
            max_running: 256,
            max_kept: 1024,
            sample_every: Duration::from_secs(1),
            lookup_rate: 100.0,
            lookup_burst: 200,
            limits: JobLimits::default(),
            endpoints: crate::endpoints::Endpoints::from_env(),
        }
    }
}

/// Job files checked at once by [`Host::check_isolated`]: checking is CPU work, and a flood of
/// requests must not take every core from the running jobs.
pub const CHECKS_AT_ONCE: usize = 2;

/// The stack of a checking thread: far more than the bounded recursion of loading and
/// compiling needs (a tokio worker has 2 MiB).
const CHECK_STACK_BYTES: usize = 32 << 20;

/// Many jobs in one process.
pub struct Host {
    config: HostConfig,
    scheduler: Arc<Scheduler>,
    jobs: RwLock<BTreeMap<u64, Arc<HostedJob>>>,
    next_id: AtomicU64,
    /// Serialises starts: the checks of [`Self::admit`] and the start they allow cannot
    /// interleave with another start (two running copies of one checkpointed job would share
    /// its checkpoint directory).
    starting: tokio::sync::Mutex<()>,
    /// Every task the host spawned: one waiter per run, one per savepoint request, the sampler.
    tasks: Mutex<JoinSet<()>>,
    shutdown: CancellationToken,
    /// Per-client budget of state lookups.
    lookups: crate::ratelimit::RateLimiter,
}

impl Host {
    /// A host on the current tokio runtime, triggering checkpoints with `scheduler`.
    pub fn new(scheduler: Arc<Scheduler>, config: HostConfig) -> Arc<Self> {
        let lookups = crate::ratelimit::RateLimiter::new(config.lookup_rate, config.lookup_burst);
        let host = Arc::new(Host {
            lookups,
            config,
            scheduler,
            jobs: RwLock::new(BTreeMap::new()),
            next_id: AtomicU64::new(0),
            starting: tokio::sync::Mutex::new(()),
            tasks: Mutex::new(JoinSet::new()),
            shutdown: CancellationToken::new(),
        });
        host.spawn(sampler(
            Arc::downgrade(&host),
            host.config.sample_every,
            host.shutdown.clone(),
        ));
        host
    }

    pub fn config(&self) -> &HostConfig {
        &self.config
    }

    /// The per-client budget of state lookups.
    pub fn lookups(&self) -> &crate::ratelimit::RateLimiter {
        &self.lookups
    }

    pub fn scheduler(&self) -> &Scheduler {
        &self.scheduler
    }

    /// Every job, by id.
    pub fn jobs(&self) -> Vec<Arc<HostedJob>> {
        self.jobs
            .read()
            .map(|j| j.values().cloned().collect())
            .unwrap_or_default()
    }

    /// The job with id `id` (as written in a URL: see [`parse_id`]).
    pub fn job(&self, id: &str) -> Result<Arc<HostedJob>, ApiError> {
        let n = parse_id(id).ok_or_else(|| ApiError::no_job(id))?;
        self.jobs
            .read()
            .ok()
            .and_then(|j| j.get(&n).cloned())
            .ok_or_else(|| ApiError::no_job(id))
    }

    /// [`Host::check`] on a thread of its own, so that no job file can hurt the server: the
    /// thread has a large stack (the loader and the expression compiler bound their recursion;
    /// this is the margin behind those bounds), a panic in it is caught and reported as a bug,
    /// and at most [`CHECKS_AT_ONCE`] run together (the rest wait their turn).
    pub async fn check_isolated(
        file: &str,
        text: &str,
        overrides: &[Override],
        config: &HostConfig,
    ) -> Result<Plan, ApiError> {
        static TURNS: std::sync::LazyLock<tokio::sync::Semaphore> =
            std::sync::LazyLock::new(|| tokio::sync::Semaphore::new(CHECKS_AT_ONCE));
        let _turn = TURNS
            .acquire()
            .await
            .map_err(|_| ApiError::Internal("the job checker is closed".into()))?;
        let (file, text, overrides) = (file.to_owned(), text.to_owned(), overrides.to_vec());
        let config = config.clone();
        isolated(move || Self::check(&file, &text, &overrides, &config)).await
    }

    /// Checks a job file without starting it: its problems, what it names on disk, what it
    /// asks of the server (`config.limits`) and the endpoints it would reach (which
    /// `config.endpoints` must allow). `file` names the text in messages.
    pub fn check(
        file: &str,
        text: &str,
        overrides: &[Override],
        config: &HostConfig,
    ) -> Result<Plan, ApiError> {
        let invalid = |e: weir_runtime::spec::SpecError| ApiError::Invalid {
            message: e.to_string(),
            problems: e.problems,
        };
        let mut loaded =
            weir_runtime::spec::load::parse_str(file, text, overrides).map_err(invalid)?;
        // Before planning, which may look at the files a job names.
        let problems = crate::paths::check(&loaded.source, &loaded.spec);
        loaded.problems.extend(problems);
        // Only a job without problems of its own: a field left out because it was wrong
        // (`events: lots`) would read as its default here (an unbounded generator).
        if loaded.problems.is_empty() {
            let problems = config.limits.check(&loaded.source, &loaded.spec);
            loaded.problems.extend(problems);
        }
        let problems = crate::endpoints::check(&loaded.source, &loaded.spec, &config.endpoints);
        loaded.problems.extend(problems);
        weir_runtime::plan::build(&loaded).map_err(invalid)
    }

    /// Checks and starts a job; `file` names its text in messages.
    pub async fn submit(
        self: &Arc<Self>,
        file: &str,
        text: &str,
        overrides: &[Override],
    ) -> Result<Arc<HostedJob>, ApiError> {
        let plan = Self::check_isolated(file, text, overrides, &self.config).await?;
        let _starting = self.starting.lock().await;
        self.admit(&plan, None)?;
        // Before the start, whose log lines may quote the job's values.
        let secrets =
            crate::redact::registry().register(crate::redact::Secrets::of_job(text, overrides));
        let running = job::start(&plan, self.options(None))
            .await
            .map_err(|e| secrets.mask_error(ApiError::Start(e.to_string())))?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        let job = Arc::new(HostedJob::new(id, text.to_owned(), plan, secrets, &running));
        self.insert(job.clone());
        let waiter = job.clone();
        self.spawn(async move { waiter.ended(running.wait().await) });
        tracing::info!(job = %job.name, id, "job submitted");
        Ok(job)
    }

    /// Starts a new run of an ended job, from `from`: `latest` (its newest usable snapshot),
    /// `sp-<id>`, `chk-<id>` or `final-<id>` (one of its snapshots), or nothing (from scratch).
    pub async fn restart(
        self: &Arc<Self>,
        job: &Arc<HostedJob>,
        from: Option<&str>,
    ) -> Result<(), ApiError> {
        let _starting = self.starting.lock().await;
        let state = job.state();
        if state.is_live() {
            return Err(ApiError::Conflict(format!(
                "job {} is still running (it is {}): cancel or stop it first",
                job.id,
                state.name()
            )));
        }
        self.admit(&job.plan, Some(job.id))?;
        let restore = resolve_snapshot(&job.plan, from, &self.config.endpoints).await?;
        let running = job::start(&job.plan, self.options(restore))
            .await
            .map_err(|e| ApiError::Start(e.to_string()))?;
        job.restarted(&running, from.map(str::to_owned));
        let waiter = job.clone();
        self.spawn(async move { waiter.ended(running.wait().await) });
        tracing::info!(job = %job.name, id = job.id, ?from, "job restarted");
        Ok(())
    }

    /// Asks a running job for a savepoint (and to stop once it is complete, with `stop`);
    /// returns the request's id, to poll.
    pub fn savepoint(&self, job: &Arc<HostedJob>, stop: bool) -> Result<u64, ApiError> {
        let (id, control) = job.savepoint_requested(stop)?;
        let job = job.clone();
        self.spawn(async move {
            let result = control.savepoint(stop).await;
            job.savepoint_done(id, result);
        });
        Ok(id)
    }

    /// Stops every job (cancelling them) and every task of the host, waiting up to `grace`
    /// for the jobs to drain before aborting them.
    pub async fn shutdown(&self, grace: Duration) {
        self.shutdown.cancel();
        for job in self.jobs() {
            let _ = job.cancel();
        }
        let mut tasks = match self.tasks.lock() {
            Ok(mut t) => std::mem::take(&mut *t),
            Err(poisoned) => std::mem::take(&mut *poisoned.into_inner()),
        };
        let drained =
            tokio::time::timeout(grace, async { while tasks.join_next().await.is_some() {} }).await;
        if drained.is_err() {
            tracing::warn!(?grace, "jobs did not stop in time; aborting them");
        }
        tasks.abort_all();
        while tasks.join_next().await.is_some() {}
    }

    fn options(&self, from: Option<RestoreFrom>) -> JobOptions {
        JobOptions {
            from,
            scheduler: Some(self.scheduler.clone()),
            guard: Some(self.config.endpoints.guard()),
        }
    }

    /// Whether `plan` may start now (as a new job, or as job `restarting`).
    fn admit(&self, plan: &Plan, restarting: Option<u64>) -> Result<(), ApiError> {
        let jobs = self.jobs();
        let live: Vec<&Arc<HostedJob>> = jobs.iter().filter(|j| j.state().is_live()).collect();
        if live.len() >= self.config.max_running {
            return Err(ApiError::TooMany(format!(
                "{} jobs are running, the most this server runs at once",
                live.len()
            )));
        }
        let running: usize = live
            .iter()
            .filter(|j| Some(j.id) != restarting)
            .map(|j| crate::limits::subtasks(&j.plan.spec))
            .sum();
        self.config
            .limits
            .admit(crate::limits::subtasks(&plan.spec), running)?;
        if plan.spec.checkpoint.enabled() {
            if let Some(other) = live
                .iter()
                .find(|j| j.name == plan.name() && Some(j.id) != restarting)
            {
                return Err(ApiError::Conflict(format!(
                    "job `{}` is already running as job {}: two running copies of a checkpointed job would share its checkpoints",
                    plan.name(),
                    other.id
                )));
            }
        }
        Ok(())
    }

    fn insert(&self, job: Arc<HostedJob>) {
        let Ok(mut jobs) = self.jobs.write() else {
            return;
        };
        jobs.insert(job.id, job);
        while jobs.len() > self.config.max_kept {
            let Some(oldest) = jobs.values().find(|j| !j.state().is_live()).map(|j| j.id) else {
                break;
            };
            jobs.remove(&oldest);
        }
    }

    /// Spawns a task owned by the host (reaping those already finished).
    fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
        let mut tasks = self
            .tasks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        while tasks.try_join_next().is_some() {}
        tasks.spawn(task);
    }
}

/// Samples every running job's counters every `every`, until `shutdown`.
async fn sampler(host: Weak<Host>, every: Duration, shutdown: CancellationToken) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = shutdown.cancelled() => return,
        }
        let Some(live) = host.upgrade() else { return };
        for job in live.jobs() {
            job.sample();
        }
    }
}

/// A snapshot named by a client, as a location in the job's own checkpoint storage. Only a
/// kind and a number come from the client: no path of theirs reaches the filesystem.
pub async fn resolve_snapshot(
    plan: &Plan,
    from: Option<&str>,
    endpoints: &crate::endpoints::Endpoints,
) -> Result<Option<RestoreFrom>, ApiError> {
    let name = match from {
        None | Some("none") => return Ok(None),
        Some("latest") => return Ok(Some(RestoreFrom::Latest)),
        Some(name) => name,
    };
    let (kind, id) = parse_snapshot_name(name)?;
    let catalog = catalog(plan, endpoints)?;
    let listed = catalog
        .list()
        .await
        .map_err(|e| ApiError::Internal(format!("listing snapshots: {e}")))?;
    if !listed
        .iter()
        .any(|l| l.kind == kind && l.id == id && l.has_metadata)
    {
        return Err(ApiError::NotFound(format!(
            "job `{}` has no snapshot `{name}`",
            plan.name()
        )));
    }
    let location = catalog.storage().location(&catalog.dir_key(kind, id));
    Ok(Some(RestoreFrom::Path(PathBuf::from(location))))
}

/// `sp-3` → (savepoint, 3); `chk-12`, `final-2` likewise.
pub fn parse_snapshot_name(name: &str) -> Result<(SnapshotKind, u64), ApiError> {
    let bad = || {
        ApiError::BadRequest(format!(
            "`{name}` names no snapshot: use `latest`, `none`, `sp-<id>`, `chk-<id>` or `final-<id>`"
        ))
    };
    let (prefix, id) = name.split_once('-').ok_or_else(bad)?;
    let kind = [
        SnapshotKind::Savepoint,
        SnapshotKind::Checkpoint,
        SnapshotKind::Final,
    ]
    .into_iter()
    .find(|k| k.prefix() == prefix)
    .ok_or_else(bad)?;
    let id = parse_id(id).ok_or_else(bad)?;
    Ok((kind, id))
}

/// A number as the API reads it in a URL or a snapshot name: ASCII digits only. `str::parse`
/// also takes a sign (`+1` would name job 1); leading zeros stay allowed, as snapshot folders
/// are written zero-padded (`chk-0000000007`).
pub fn parse_id(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// Runs `work` on a thread of its own with a [`CHECK_STACK_BYTES`] stack; a panic in it is
/// answered as an internal error (a bug), and the caller goes on.
async fn isolated<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("weir-check".into())
        .stack_size(CHECK_STACK_BYTES)
        .spawn(move || {
            let checked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work));
            // The request may have gone away; then nobody needs the answer.
            let _ = tx.send(checked);
        })
        .map_err(|e| ApiError::Internal(format!("cannot start the job checker: {e}")))?;
    match rx.await {
        Ok(Ok(checked)) => checked,
        Ok(Err(_)) => Err(ApiError::Internal(
            "checking the job file failed (a bug in weir; the server goes on)".into(),
        )),
        Err(_) => Err(ApiError::Internal("the job checker stopped".into())),
    }
}

/// The job's checkpoint catalog (its storage was checked when the job was submitted; its S3
/// client connects only where `endpoints` allows).
pub fn catalog(
    plan: &Plan,
    endpoints: &crate::endpoints::Endpoints,
) -> Result<JobCheckpoints, ApiError> {
    let config = plan
        .spec
        .checkpoint
        .storage_config()
        .map_err(ApiError::BadRequest)?;
    let storage = weir_checkpoint::object::open_guarded(&config, Some(&endpoints.guard()))
        .map_err(|e| ApiError::BadRequest(e.to_string()))?;
    Ok(JobCheckpoints::new(storage, plan.name()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Recursion about 4 KiB a level deep: `levels` of it need that much stack.
    fn deep(levels: u32) -> u32 {
        let frame = std::hint::black_box([levels as u8; 4096]);
        if levels == 0 {
            u32::from(frame[0])
        } else {
            deep(levels - 1) + u32::from(frame[levels as usize % 4096] & 1)
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_panic_while_checking_is_an_internal_error_and_the_caller_goes_on() {
        let answer = isolated(|| -> Result<(), ApiError> { panic!("a bug in the checker") }).await;
        match answer {
            Err(ApiError::Internal(message)) => {
                assert!(message.contains("the server goes on"), "{message}");
            }
            other => panic!("expected an internal error, got {other:?}"),
        }
        // The checker's stack holds what a worker thread's 2 MiB would not (8 MiB here).
        let depth = isolated(|| Ok(deep(2048))).await;
        assert!(matches!(depth, Ok(n) if n <= 2048), "{depth:?}");
    }
}
