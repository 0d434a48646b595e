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
//!
//! In a fleet of servers, each run goes under a lease the host asks of the fleet through a
//! hook ([`Leases`]); the fleet ([`crate::fleet`]) sits above the host and drives it (jobs
//! taken over, lost and drained).

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Duration;

use tokio::task::{JoinHandle, JoinSet};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use weir_checkpoint::JobCheckpoints;
use weir_checkpoint::metadata::SnapshotKind;
use weir_runtime::exec::job::{self, JobOptions, RunningJob};
use weir_runtime::exec::restore::RestoreFrom;
use weir_runtime::plan::Plan;
use weir_runtime::spec::load::Override;
use weir_scheduler::Scheduler;

use crate::catalog::persist::Persister;
use crate::catalog::{Catalog, StoredJob};
use crate::error::ApiError;
use crate::job::{Definition, HostedJob};
use crate::lifecycle::JobState;
use crate::limits::JobLimits;

mod leases;

pub use leases::{LeaseCall, Leases};

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
    /// The environment variables submitted jobs may read with `${VAR}` (`--allow-env`); by
    /// default none.
    pub env: weir_runtime::spec::env::AllowedEnv,
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
            env: weir_runtime::spec::env::AllowedEnv::default(),
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
    jobs: Arc<RwLock<BTreeMap<u64, Arc<HostedJob>>>>,
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
    /// Where the jobs are kept across restarts of the server, if anywhere.
    persister: Option<Arc<Persister>>,
    /// The persister's background writer, stopped (after a last flush) at shutdown.
    writer: Mutex<Option<(CancellationToken, JoinHandle<()>)>>,
    /// Set at shutdown once the catalog has the jobs' last states: the cancellations that
    /// stop every job then are not written (a restarted server resumes the jobs instead).
    closing: Arc<std::sync::atomic::AtomicBool>,
    /// The leases of this server's fleet, if it is one server of a fleet ([`Leases`]).
    leases: Option<Arc<dyn Leases>>,
}

/// How to submit a job besides its file.
#[derive(Clone, Debug, Default)]
pub struct SubmitOptions {
    /// `--set` overrides, `key.path=value` each.
    pub overrides: Vec<String>,
    /// The parallelism of every node that does not set its own (an override of
    /// `parallelism`).
    pub parallelism: Option<u32>,
    /// A snapshot of the job's own checkpoint storage to start from: `latest`, `sp-<id>`,
    /// `chk-<id>` or `final-<id>`.
    pub from: Option<String>,
}

impl Host {
    /// A host on the current tokio runtime, triggering checkpoints with `scheduler`, that
    /// keeps its jobs in memory only.
    pub fn new(scheduler: Arc<Scheduler>, config: HostConfig) -> Arc<Self> {
        Self::build(scheduler, config, None, None)
    }

    /// A host that keeps its jobs in `catalog`: every change is written there, and
    /// [`Self::recover`] brings back what an earlier server left.
    pub fn with_catalog(
        scheduler: Arc<Scheduler>,
        config: HostConfig,
        catalog: Catalog,
    ) -> Arc<Self> {
        Self::build(
            scheduler,
            config,
            Some(Persister::new(Arc::new(catalog))),
            None,
        )
    }

    /// A host that is one server of a fleet, keeping its jobs in the fleet's shared `catalog`
    /// ([`Catalog::open_fleet`]) and running each under a lease from `leases`. The fleet
    /// builds it ([`crate::fleet::Fleet::host`]), and drives it from then on.
    pub fn in_fleet(
        scheduler: Arc<Scheduler>,
        config: HostConfig,
        catalog: Catalog,
        leases: Arc<dyn Leases>,
    ) -> Arc<Self> {
        Self::build(
            scheduler,
            config,
            Some(Persister::new(Arc::new(catalog))),
            Some(leases),
        )
    }

    fn build(
        scheduler: Arc<Scheduler>,
        config: HostConfig,
        persister: Option<Arc<Persister>>,
        leases: Option<Arc<dyn Leases>>,
    ) -> Arc<Self> {
        let lookups = crate::ratelimit::RateLimiter::new(config.lookup_rate, config.lookup_burst);
        let writer = persister.as_ref().map(|p| {
            let stop = CancellationToken::new();
            (stop.clone(), tokio::spawn(p.clone().run(stop)))
        });
        let host = Arc::new(Host {
            lookups,
            config,
            scheduler,
            jobs: Arc::new(RwLock::new(BTreeMap::new())),
            next_id: AtomicU64::new(0),
            starting: tokio::sync::Mutex::new(()),
            tasks: Mutex::new(JoinSet::new()),
            shutdown: CancellationToken::new(),
            persister,
            writer: Mutex::new(writer),
            closing: Arc::new(std::sync::atomic::AtomicBool::new(false)),
            leases,
        });
        host.spawn(sampler(
            Arc::downgrade(&host),
            host.config.sample_every,
            host.shutdown.clone(),
        ));
        host
    }

    /// Cancelled when the host shuts down: the tasks it owns stop on it.
    pub(crate) fn stopping(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// The catalog the host keeps its jobs in, if any.
    pub fn catalog(&self) -> Option<&Arc<Catalog>> {
        self.persister.as_ref().map(|p| p.catalog())
    }

    /// Hands the job's current state to the catalog (written in the background).
    pub fn persist(&self, job: &HostedJob) {
        persist(self.persister.as_ref(), &self.closing, job);
    }

    /// Writes every change still pending to the catalog (tests; shutdown does it itself).
    pub async fn flush_catalog(&self) -> Result<(), crate::catalog::CatalogError> {
        match &self.persister {
            Some(p) => p.flush().await,
            None => Ok(()),
        }
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
        let mut loaded = weir_runtime::spec::load::parse_str_in(file, text, overrides, &config.env)
            .map_err(invalid)?;
        // What `${VAR}`s read is masked in the problems too (a refused endpoint quotes it).
        let secrets = crate::redact::Secrets::default().with(&loaded.env_values);
        // Before planning, which may look at the files a job names.
        let problems = crate::paths::check(&loaded.source, &loaded.spec);
        loaded.problems.extend(problems);
        // Every problem in one round, but not about a node (or top-level key) that has a
        // problem of its own already: a field left out because it was wrong (`events: lots`)
        // reads as its default here (an unbounded generator), which is not the user's value.
        let limits = config.limits.check(&loaded.source, &loaded.spec);
        let owner =
            |path: &str| -> String { path.split('.').take(2).collect::<Vec<_>>().join(".") };
        let troubled: Vec<String> = loaded.problems.iter().map(|p| owner(&p.path)).collect();
        loaded.problems.extend(
            limits
                .into_iter()
                .filter(|limit| !troubled.contains(&owner(&limit.path))),
        );
        let problems = crate::endpoints::check(&loaded.source, &loaded.spec, &config.endpoints);
        loaded.problems.extend(problems);
        let plan = weir_runtime::plan::build(&loaded)
            .map_err(invalid)
            .map_err(|e| secrets.mask_error(e))?;
        // A `sql` node runs as the several operators it is planned into: the limit holds for
        // those.
        let planned = crate::limits::subtasks(&plan.spec);
        if planned > config.limits.max_job_subtasks {
            let problem = loaded.source.at_value(
                "/transforms",
                format!(
                    "the job runs {planned} subtasks once its `sql` nodes are planned; this \
                     server runs at most {} per job (--max-job-subtasks)",
                    config.limits.max_job_subtasks
                ),
            );
            return Err(invalid(loaded.source.error(vec![problem])));
        }
        Ok(plan)
    }

    /// Checks and starts a job; `file` names its text in messages.
    pub async fn submit(
        self: &Arc<Self>,
        file: &str,
        text: &str,
        overrides: &[String],
    ) -> Result<Arc<HostedJob>, ApiError> {
        let options = SubmitOptions {
            overrides: overrides.to_vec(),
            ..SubmitOptions::default()
        };
        self.submit_with(file, text, options).await
    }

    /// Checks and starts a job with overrides, a parallelism or a snapshot to start from.
    pub async fn submit_with(
        self: &Arc<Self>,
        file: &str,
        text: &str,
        options: SubmitOptions,
    ) -> Result<Arc<HostedJob>, ApiError> {
        let mut overrides = options.overrides;
        if let Some(p) = options.parallelism {
            overrides.push(format!("parallelism={p}"));
        }
        let parsed = crate::overrides::parse(&overrides)?;
        let plan = Self::check_isolated(file, text, &parsed, &self.config).await?;
        let _starting = self.starting.lock().await;
        self.admit(&plan, None)?;
        let restore =
            resolve_snapshot(&plan, options.from.as_deref(), &self.config.endpoints).await?;
        let id = self.allocate_id().await?;
        let lease = self.lease(id, &plan, None).await?;
        // Before the start, whose log lines may quote the job's values.
        let secrets = crate::redact::registry().register(
            crate::redact::Secrets::of_job(text, &parsed)
                .with(&plan.env_values)
                .with_connectors(&plan.spec),
        );
        let log = crate::logs::JobLog::new();
        let started = job::start(&plan, self.options(restore, id, lease))
            .instrument(log.span())
            .await;
        let running = match started {
            Ok(running) => running,
            Err(e) => {
                if let (Some(leases), Some(epoch)) = (&self.leases, lease) {
                    leases.drop_lease(id, epoch).await;
                }
                return Err(secrets.mask_error(ApiError::Start(e.to_string())));
            }
        };
        let definition = Definition {
            plan: Arc::new(plan),
            overrides,
        };
        let job = Arc::new(HostedJob::new(
            id,
            text.to_owned(),
            definition,
            secrets,
            &running,
            options.from,
            log,
        ));
        if let Some(epoch) = lease {
            job.set_lease(epoch);
        }
        self.insert(job.clone());
        self.persist(&job);
        self.wait_for(job.clone(), running);
        if self.leases.is_some() {
            // In a fleet the job's document is in the catalog before the client hears of the
            // job: a server that dies now leaves a job another can take over.
            if let Err(e) = self.flush_catalog().await {
                tracing::error!(job = %job.name, id, error = %e, "the job's document could not be written yet; it is retried");
            }
        }
        tracing::info!(job = %job.name, id, "job submitted");
        Ok(job)
    }

    /// Shows a run that the caller started and owns (`weir run --listen`): the job is listed
    /// and observed like any other, but the host holds no task of it. `log` is the log the
    /// caller started the run in ([`crate::logs::JobLog::span`]).
    pub fn adopt(
        &self,
        text: String,
        plan: Plan,
        running: &RunningJob,
        log: Arc<crate::logs::JobLog>,
    ) -> Arc<HostedJob> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        let definition = Definition {
            plan: Arc::new(plan),
            overrides: Vec::new(),
        };
        let secrets = crate::redact::registry().register(
            crate::redact::Secrets::of(&text)
                .with(&definition.plan.env_values)
                .with_connectors(&definition.plan.spec),
        );
        let job = Arc::new(HostedJob::new(
            id, text, definition, secrets, running, None, log,
        ));
        self.insert(job.clone());
        job
    }

    /// A new job id: from the catalog (never given twice, across restarts), else counted.
    async fn allocate_id(&self) -> Result<u64, ApiError> {
        match self.catalog() {
            Some(catalog) => catalog.allocate_id().await.map_err(|e| {
                tracing::error!(error = %e, "cannot allocate a job id");
                ApiError::Unavailable(format!("the job catalog cannot be written: {e}"))
            }),
            None => Ok(self.next_id.fetch_add(1, Ordering::Relaxed) + 1),
        }
    }

    /// Owns `running` until it ends, then records how (and writes it to the catalog).
    fn wait_for(&self, job: Arc<HostedJob>, running: RunningJob) {
        let persister = self.persister.clone();
        let closing = self.closing.clone();
        let leases = self.leases.clone();
        let jobs = self.jobs.clone();
        self.spawn(async move {
            let result = running.wait().await;
            let fenced = leases.is_some() && matches!(&result, Err(e) if e.is_fenced());
            job.ended(result);
            if fenced {
                // Another server runs the job now (the run said so, once): this copy leaves
                // as one the fleet finds lost does, without writing its end, and its lease
                // is not this server's to renew or end.
                job.set_moving();
                if let Some(leases) = &leases {
                    leases.lease_ended(job.id);
                }
                if let Ok(mut listed) = jobs.write()
                    && listed.get(&job.id).is_some_and(|j| Arc::ptr_eq(j, &job))
                {
                    listed.remove(&job.id);
                }
                job.run_ended.notify_waiters();
                return;
            }
            persist(persister.as_ref(), &closing, &job);
            if let Some(leases) = &leases
                && !job.is_moving()
                && leases.lease_epoch(job.id) == job.lease()
            {
                // The ended document drops the lease when it is written; until then the lease
                // stays (unrenewed), and no other server takes the job.
                leases.lease_ended(job.id);
            }
            job.run_ended.notify_waiters();
        });
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
        let plan = job.plan();
        let restore = resolve_snapshot(&plan, from, &self.config.endpoints).await?;
        self.launch(job, restore, from.map(str::to_owned), None)
            .await?;
        tracing::info!(job = %job.name, id = job.id, ?from, "job restarted");
        Ok(())
    }

    /// [`Self::launch`] in its turn: once no other start is under way (see `starting`).
    pub(crate) async fn launch_in_turn(
        &self,
        job: &Arc<HostedJob>,
        restore: Option<RestoreFrom>,
        from: Option<String>,
        claimed: Option<u64>,
    ) -> Result<(), ApiError> {
        let _starting = self.starting.lock().await;
        self.launch(job, restore, from, claimed).await
    }

    /// Starts a new run of `job` (whose previous run ended) from `restore`; the caller holds
    /// `starting`. In a fleet the run goes under `claimed` (a lease just taken over) or a
    /// lease taken now.
    async fn launch(
        &self,
        job: &Arc<HostedJob>,
        restore: Option<RestoreFrom>,
        from: Option<String>,
        claimed: Option<u64>,
    ) -> Result<(), ApiError> {
        let plan = job.plan();
        self.admit(&plan, Some(job.id))?;
        let lease = self.lease(job.id, &plan, claimed).await?;
        if let Some(epoch) = lease {
            job.set_lease(epoch);
        }
        let running = job::start(&plan, self.options(restore, job.id, lease))
            .instrument(job.log.span())
            .await
            .map_err(|e| ApiError::Start(e.to_string()))?;
        job.restarted(&running, from);
        self.persist(job);
        self.wait_for(job.clone(), running);
        Ok(())
    }

    /// Cancels a running job: its sources end and what is in flight drains.
    pub fn cancel(&self, job: &Arc<HostedJob>) -> Result<(), ApiError> {
        job.cancel()?;
        self.persist(job);
        Ok(())
    }

    /// Asks a running job for a savepoint (and to stop once it is complete, with `stop`);
    /// returns the request's id, to poll.
    pub fn savepoint(&self, job: &Arc<HostedJob>, stop: bool) -> Result<u64, ApiError> {
        let (id, control) = job.savepoint_requested(stop)?;
        self.persist(job);
        let job = job.clone();
        let persister = self.persister.clone();
        let closing = self.closing.clone();
        self.spawn(async move {
            let result = control.savepoint(stop).await;
            job.savepoint_done(id, result);
            persist(persister.as_ref(), &closing, &job);
        });
        Ok(id)
    }

    /// Runs a checkpointing job at another parallelism, in one call: a savepoint that stops
    /// it, then a new run from that savepoint with `parallelism` (its keyed state
    /// redistributed by key group). Nodes that set their own parallelism keep it. Returns
    /// once the new run started; if the savepoint fails, the job goes on as it was.
    pub async fn rescale(
        self: &Arc<Self>,
        job: &Arc<HostedJob>,
        parallelism: u32,
    ) -> Result<(), ApiError> {
        if parallelism == 0 {
            return Err(ApiError::BadRequest("a parallelism is at least 1".into()));
        }
        let before = job.definition();
        if !before.plan.spec.checkpoint.enabled() {
            return Err(ApiError::Conflict(format!(
                "job {} does not checkpoint (no `checkpoint.interval`), so it cannot keep its                  state across a rescale: cancel it and submit it again with parallelism={parallelism}",
                job.id
            )));
        }
        let mut overrides: Vec<String> = before
            .overrides
            .iter()
            .filter(|o| !o.trim_start().starts_with("parallelism="))
            .cloned()
            .collect();
        overrides.push(format!("parallelism={parallelism}"));
        let parsed = crate::overrides::parse(&overrides)?;
        let plan = Self::check_isolated(&job.name, &job.text, &parsed, &self.config).await?;
        {
            let _starting = self.starting.lock().await;
            self.admit(&plan, Some(job.id))?;
        }
        // Stop with a savepoint, and wait for the run to end.
        let ended = job.run_ended.notified();
        tokio::pin!(ended);
        ended.as_mut().enable();
        let (request, control) = job.savepoint_requested(true)?;
        self.persist(job);
        let result = control.savepoint(true).await;
        let location = result
            .as_ref()
            .ok()
            .map(|done| (done.location.clone(), format!("sp-{}", done.metadata.id)));
        let failure = result.as_ref().err().map(ToString::to_string);
        job.savepoint_done(request, result);
        self.persist(job);
        let Some((location, name)) = location else {
            return Err(ApiError::Unavailable(format!(
                "job {} was not rescaled: its savepoint failed ({}); it goes on at its parallelism",
                job.id,
                failure.unwrap_or_default()
            )));
        };
        if job.state().is_live() {
            ended.await;
        }
        let _starting = self.starting.lock().await;
        job.redefine(Definition {
            plan: Arc::new(plan),
            overrides,
        });
        if let Err(e) = self
            .launch(
                job,
                Some(RestoreFrom::Path(PathBuf::from(location))),
                Some(name),
                None,
            )
            .await
        {
            // The new definition could not start: the job stays stopped at its savepoint,
            // and a restart (at the old or new parallelism) can take it from there.
            job.start_failed(&e.to_string());
            self.persist(job);
            return Err(e);
        }
        tracing::info!(job = %job.name, id = job.id, parallelism, "job rescaled");
        Ok(())
    }

    /// Brings back the jobs the catalog holds: ended ones as they ended, and those that were
    /// running (or restarting) when the server stopped resumed, each from its latest usable
    /// checkpoint (from scratch if it has none, as a fresh submit would). Returns how many
    /// jobs were read; rows that cannot be read are logged and left in the catalog.
    pub async fn recover(self: &Arc<Self>) -> Result<usize, crate::catalog::CatalogError> {
        let Some(catalog) = self.catalog().cloned() else {
            return Ok(0);
        };
        let loaded = catalog.load().await?;
        for e in &loaded.unreadable {
            tracing::error!(error = %e, "a job of the catalog cannot be read; it is left as it is");
        }
        let count = loaded.jobs.len();
        for stored in loaded.jobs {
            self.recover_one(stored).await;
        }
        Ok(count)
    }

    /// In a fleet, keeps `stored` here, read from the fleet's catalog: a job that ended on a
    /// server that no longer has it (restarted since), asked about here. Nothing runs: its
    /// document is shown as the catalog holds it, and a restart runs it on this server.
    pub(crate) async fn adopt_ended(self: &Arc<Self>, stored: StoredJob) {
        debug_assert!(JobState::ended_name(&stored.state));
        self.recover_one(stored).await;
    }

    async fn recover_one(self: &Arc<Self>, stored: StoredJob) {
        let resume = JobState::from_name(&stored.state).is_some_and(|s| {
            matches!(
                s,
                JobState::Running | JobState::Restarting | JobState::Stopping
            )
        });
        let overrides = match crate::overrides::parse(&stored.overrides) {
            Ok(o) => o,
            Err(e) => {
                tracing::error!(id = stored.id, error = %e, "a job of the catalog has overrides that no longer parse; it is left in the catalog");
                return;
            }
        };
        // What the job runs; a job to resume must also still pass this server's checks.
        let checked = if resume {
            Self::check_isolated(&stored.name, &stored.text, &overrides, &self.config)
                .await
                .map_err(|e| e.to_string())
        } else {
            Err(String::new())
        };
        let (plan, refusal) = match checked {
            Ok(plan) => (plan, None),
            Err(refusal) => {
                match weir_runtime::plan::check_str(&stored.name, &stored.text, &overrides) {
                    Ok(plan) => (plan, (!refusal.is_empty()).then_some(refusal)),
                    Err(e) => {
                        tracing::error!(id = stored.id, job = %stored.name, error = %e, "a job of the catalog no longer plans; it is left in the catalog");
                        return;
                    }
                }
            }
        };
        let job = Arc::new(HostedJob::recovered(&stored, plan));
        self.insert(job.clone());
        if !resume {
            return;
        }
        if let Some(refusal) = refusal {
            job.start_failed(&format!(
                "the server restarted and the job cannot resume: {refusal}"
            ));
            self.persist(&job);
            return;
        }
        job.lock().exception(
            "resume",
            "the server restarted: resuming the job from its latest checkpoint".into(),
            None,
        );
        let host = self.clone();
        self.spawn(async move {
            let _starting = host.starting.lock().await;
            let plan = job.plan();
            let from = plan
                .spec
                .checkpoint
                .enabled()
                .then_some(RestoreFrom::Latest);
            let name = from.as_ref().map(|_| "latest".to_owned());
            match host.launch(&job, from, name, None).await {
                Ok(()) => tracing::info!(job = %job.name, id = job.id, "job resumed"),
                Err(e) => {
                    tracing::error!(job = %job.name, id = job.id, error = %e, "a job could not resume");
                    job.start_failed(&format!("the server restarted and the job could not resume: {e}"));
                    host.persist(&job);
                }
            }
        });
    }

    /// Stops every job (cancelling them) and every task of the host, waiting up to `grace`
    /// for the jobs to drain before aborting them.
    pub async fn shutdown(&self, grace: Duration) {
        self.shutdown.cancel();
        // The catalog keeps every job as it is now (running ones as running): the next server
        // resumes them. The cancellations below are this server's, not the jobs' ends.
        if let Some(persister) = &self.persister {
            for job in self.jobs() {
                // In a fleet a job that ended was written when it did, and its lease went
                // with that document: nothing is left to write (nor allowed).
                if self.leases.is_some() && !job.state().is_live() {
                    continue;
                }
                persister.save(job.stored());
            }
            let writer = self
                .writer
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .take();
            if let Some((stop, task)) = writer {
                stop.cancel();
                let _ = task.await;
            }
            if let Err(e) = persister.flush().await {
                tracing::error!(error = %e, "the job catalog could not be written at shutdown");
            }
            self.closing.store(true, Ordering::Release);
        }
        for job in self.jobs() {
            if self.leases.is_some() {
                // Their leases are handed back below, once the copies here have stopped.
                job.set_moving();
            }
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
        if let Some(leases) = &self.leases
            && let Err(e) = leases.release_leases().await
        {
            tracing::error!(error = %e, "cannot hand back this server's leases: its jobs move once they expire");
        }
    }

    fn options(&self, from: Option<RestoreFrom>, id: u64, lease: Option<u64>) -> JobOptions {
        JobOptions {
            from,
            scheduler: Some(self.scheduler.clone()),
            guard: Some(self.config.endpoints.guard()),
            fence: match (&self.leases, lease) {
                (Some(leases), Some(epoch)) => Some(leases.clone().lease_fence(id, epoch)),
                _ => None,
            },
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
            .map(|j| crate::limits::subtasks(&j.plan().spec))
            .sum();
        self.config
            .limits
            .admit(crate::limits::subtasks(&plan.spec), running)?;
        if plan.spec.checkpoint.enabled()
            && let Some(other) = live
                .iter()
                .find(|j| j.name == plan.name() && Some(j.id) != restarting)
        {
            return Err(ApiError::Conflict(format!(
                "job `{}` is already running as job {}: two running copies of a checkpointed job would share its checkpoints",
                plan.name(),
                other.id
            )));
        }
        Ok(())
    }

    /// Lists `job`, forgetting (here and in the catalog) the oldest ended jobs beyond
    /// `max_kept`.
    pub(crate) fn insert(&self, job: Arc<HostedJob>) {
        let Ok(mut jobs) = self.jobs.write() else {
            return;
        };
        jobs.insert(job.id, job);
        while jobs.len() > self.config.max_kept {
            let Some(oldest) = jobs.values().find(|j| !j.state().is_live()).map(|j| j.id) else {
                break;
            };
            jobs.remove(&oldest);
            if let Some(p) = &self.persister {
                p.delete(oldest);
            }
        }
    }

    /// Stops listing job `id`, without writing anything of it to the catalog (the job moved
    /// to another server).
    pub(crate) fn remove(&self, id: u64) -> Option<Arc<HostedJob>> {
        self.jobs.write().ok().and_then(|mut j| j.remove(&id))
    }

    /// Spawns a task owned by the host (reaping those already finished): [`Self::shutdown`]
    /// waits for it within the grace period, then aborts it.
    pub(crate) fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
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
            if job.progress_changed() {
                live.persist(&job);
            }
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

/// A snapshot a job can restart from, as the snapshots route lists it.
#[derive(Debug, serde::Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub struct SnapshotEntry {
    /// What `from` takes: `chk-12`, `sp-3`, `final-4`.
    pub name: String,
    pub kind: SnapshotKind,
    pub id: u64,
}

/// The job's snapshots whose metadata exists in its checkpoint storage, newest first.
pub async fn list_snapshots(
    plan: &Plan,
    endpoints: &crate::endpoints::Endpoints,
) -> Result<Vec<SnapshotEntry>, ApiError> {
    if !plan.spec.checkpoint.enabled() {
        return Ok(Vec::new());
    }
    let catalog = catalog(plan, endpoints)?;
    let mut listed = catalog
        .list()
        .await
        .map_err(|e| ApiError::Unavailable(format!("listing snapshots: {e}")))?;
    listed.retain(|l| l.has_metadata);
    listed.sort_by_key(|l| std::cmp::Reverse(l.id));
    Ok(listed
        .into_iter()
        .map(|l| SnapshotEntry {
            name: format!("{}-{}", l.kind.prefix(), l.id),
            kind: l.kind,
            id: l.id,
        })
        .collect())
}

/// What [`resolve_snapshot`] takes as a snapshot's name, as the API's document states it:
/// `latest`, `none`, or a kind and an id of [`parse_snapshot_name`] (19 digits always fit 64
/// bits; more, zero-padded, are taken too, but need not be documented).
pub const SNAPSHOT_PATTERN: &str = "^(latest|none|(sp|chk|final)-[0-9]{1,19})$";

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

/// Hands `job`'s state to the catalog, unless the host is closing (see [`Host::shutdown`]).
fn persist(
    persister: Option<&Arc<Persister>>,
    closing: &std::sync::atomic::AtomicBool,
    job: &HostedJob,
) {
    let Some(persister) = persister else { return };
    if closing.load(Ordering::Acquire) || job.is_moving() {
        return;
    }
    let stored = job.stored();
    job.mark_persisted();
    persister.save(stored);
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
