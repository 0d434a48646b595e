//! A fleet: several `weir serve` processes sharing one PostgreSQL catalog, each live job run
//! by exactly one of them, and moved to another when its server dies or drains.
//!
//! The agreement on who runs what is kept in PostgreSQL, not in a consensus of weir's own
//! ([`db`] has the tables):
//! - **Servers** register with a heartbeat (`weir serve --catalog postgres://... --advertise
//!   URL`); a server whose heartbeat is older than the lease time is not placed on.
//! - **Leases**: every live job has one lease row: its owner, an epoch never given twice, and
//!   an expiry the owner renews every quarter of the lease time. Taking a lease (a new job, a
//!   placed one, an expired one) is one `UPDATE` of rows locked with `FOR UPDATE SKIP LOCKED`,
//!   so two servers never take the same job, and each take gives a new epoch. Heartbeats and
//!   renewals run on a thread of their own with its own small runtime and connection: a
//!   server whose data tasks saturate the machine (restoring a large job, say) still renews
//!   on time, so a busy server is never mistaken for a dead one.
//! - **Fencing**: the epoch travels with everything the owner writes for the job: snapshot ids
//!   are reserved and snapshots published through the lease ([`fence`],
//!   [`weir_checkpoint::fence`]), and the job's catalog document is written only with the
//!   lease's epoch. A server that lost a lease it still runs (paused, cut off) is refused at the
//!   first of these, and its sinks commit only what a published snapshot covers, so it can
//!   neither publish nor commit after the takeover. It also stops its copies by itself once it
//!   has not renewed for half the lease time.
//! - **Placement**: a job submitted to any server runs on the live server with the fewest
//!   subtasks (the submit is forwarded there, [`forward`]); an expired lease is taken by the
//!   least loaded live server, one job per round, so a dead server's jobs spread out.
//! - **Drain**: a draining server stops each of its jobs with a savepoint and hands its lease
//!   to the least loaded other server, which resumes it from that savepoint.
//!
//! The fleet sits above the host: it builds this server's host ([`Fleet::host`]), which asks
//! it for each run's lease through a hook ([`crate::host::Leases`]) and knows no more of it,
//! and it moves jobs in (takeovers) and out (drains) through the host's own calls.

pub mod db;
pub mod fence;
pub mod forward;
mod host;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio_util::sync::CancellationToken;

use self::db::{DbError, Link, ms};
use crate::db::{id_of, id_sql};
use crate::host::Host;

/// How a server takes part in a fleet.
#[derive(Clone, Debug)]
pub struct FleetConfig {
    /// The URL the other servers (and forwarded clients) reach this one at.
    pub advertise: String,
    /// How long a lease lasts without renewal: a dead server's jobs move after this.
    pub lease_ttl: Duration,
}

impl FleetConfig {
    /// Flink's default heartbeat timeout is 50 s; jobs here restore in seconds, so ten.
    pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(10);
}

/// A lease this server holds.
#[derive(Clone, Copy, Debug)]
struct Held {
    epoch: u64,
    /// When it was taken: a renewal sent before then cannot have seen it.
    since: Instant,
}

/// What one round of the lease thread learned: when it was sent, and the leases (job, epoch)
/// the database renewed for this server, or why it could not.
#[derive(Clone, Debug)]
pub struct Renewal {
    pub sent: Instant,
    pub leases: Result<Vec<(u64, u64)>, DbError>,
}

/// The thread renewing a server's leases ([`Fleet::renew_on_own_thread`]); stopped and joined
/// by [`LeaseThread::stop`] or when dropped.
pub struct LeaseThread {
    /// The latest renewal (each replaces the last: the reader settles the newest, however
    /// far behind it is).
    pub renewals: tokio::sync::watch::Receiver<Option<Renewal>>,
    halt: CancellationToken,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl LeaseThread {
    /// Stops the thread and waits for it (it drops a statement under way). Blocks briefly:
    /// from async code, call it on a blocking thread.
    pub fn stop(mut self) {
        self.halt_and_join();
    }

    fn halt_and_join(&mut self) {
        self.halt.cancel();
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            tracing::error!("the fleet's lease thread panicked");
        }
    }
}

impl Drop for LeaseThread {
    fn drop(&mut self) {
        self.halt_and_join();
    }
}

/// A lease taken over (or placed here): the job, the new epoch, the latest snapshot.
#[derive(Debug)]
pub struct Claimed {
    pub job: u64,
    pub epoch: u64,
    pub latest: Option<String>,
}

/// A server of the fleet.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub struct ServerView {
    /// The server process: its URL and a number of its own.
    pub id: String,
    pub url: String,
    /// Milliseconds since its last heartbeat.
    pub heartbeat_age_ms: i64,
    /// Whether it is within the lease time of its last heartbeat.
    pub alive: bool,
    pub draining: bool,
    /// Subtasks of the jobs it holds leases of (its load).
    pub subtasks: u64,
    /// Jobs it holds leases of.
    pub jobs: u64,
    /// Whether this is the server that answered.
    pub this: bool,
}

/// A job of the fleet.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub struct FleetJobView {
    pub id: String,
    pub name: String,
    /// As its owner last wrote it.
    pub state: String,
    /// The URL of the server running it (none: ended, or waiting to be placed).
    pub server: Option<String>,
    /// The lease epoch (none: the job has ended).
    pub epoch: Option<u64>,
    /// The latest snapshot published through the lease.
    pub latest_snapshot: Option<String>,
}

/// `GET /api/v1/fleet`: every server and every job of the fleet.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub struct FleetView {
    /// This server's URL.
    pub server: String,
    pub lease_ttl_ms: u64,
    /// One per URL: a server restarted on its URL is listed as its newest process.
    pub servers: Vec<ServerView>,
    pub jobs: Vec<FleetJobView>,
}

/// A server of the fleet to place a job on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub id: String,
    pub url: String,
}

impl Target {
    /// A server from a row of `SELECT id, url FROM weir_servers`.
    fn of(row: &tokio_postgres::Row) -> Result<Target, tokio_postgres::Error> {
        Ok(Target {
            id: row.try_get(0)?,
            url: row.try_get(1)?,
        })
    }
}

/// This server's part in a fleet.
pub struct Fleet {
    config: FleetConfig,
    /// This process: its URL and a random number, so a server restarted on the same URL is a
    /// new holder (its predecessor's leases expire and are taken like any other).
    me: String,
    location: String,
    /// Heartbeats and renewals, on a connection of their own used only by the lease thread
    /// ([`Fleet::renew_on_own_thread`]): neither a slow fence call nor busy data tasks delay a
    /// renewal.
    keeper: Link,
    /// Takeovers, fences, placement and views.
    ops: Link,
    held: Mutex<HashMap<u64, Held>>,
    draining: AtomicBool,
    /// Requests for jobs that run elsewhere go through it.
    pub forwarder: forward::Forwarder,
}

impl std::fmt::Debug for Fleet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fleet")
            .field("me", &self.me)
            .field("catalog", &self.location)
            .finish()
    }
}

impl Fleet {
    /// Joins the fleet whose catalog is at `url`: creates the tables if missing and
    /// registers this server.
    pub async fn join(url: &str, config: FleetConfig) -> Result<Arc<Fleet>, DbError> {
        let location = crate::catalog::CatalogConfig::Postgres(url.to_owned()).describe();
        let instance = xxhash_rust::xxh3::xxh3_64(
            format!(
                "{}-{:?}-{}",
                std::process::id(),
                std::time::SystemTime::now(),
                config.advertise
            )
            .as_bytes(),
        );
        let me = format!("{}#{:08x}", config.advertise, instance as u32);
        // A renewal gets a quarter of the lease time, the time between rounds: a stuck
        // connection is dropped with three rounds left before the lease could lapse.
        let deadline = (config.lease_ttl / 4).max(Duration::from_millis(200));
        let fleet = Arc::new(Fleet {
            keeper: Link::new(url, &location, deadline),
            ops: Link::new(url, &location, deadline.max(Duration::from_secs(2))),
            location,
            me,
            config,
            held: Mutex::new(HashMap::new()),
            draining: AtomicBool::new(false),
            forwarder: forward::Forwarder::default(),
        });
        fleet
            .ops
            .run("creating the fleet's tables", |c| {
                Box::pin(async move {
                    let tx = c.transaction().await?;
                    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&crate::db::DDL_LOCK])
                        .await?;
                    tx.batch_execute(db::TABLES).await?;
                    tx.commit().await
                })
            })
            .await?;
        fleet.heartbeat(&fleet.ops).await?;
        Ok(fleet)
    }

    /// This server process's id in the fleet.
    pub fn me(&self) -> &str {
        &self.me
    }

    pub fn url(&self) -> &str {
        &self.config.advertise
    }

    pub fn lease_ttl(&self) -> Duration {
        self.config.lease_ttl
    }

    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Held>> {
        self.held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The epoch of the lease this server holds on `job`, if any.
    pub fn epoch_of(&self, job: u64) -> Option<u64> {
        self.held().get(&job).map(|h| h.epoch)
    }

    fn hold(&self, job: u64, epoch: u64) {
        self.held().insert(
            job,
            Held {
                epoch,
                since: Instant::now(),
            },
        );
    }

    /// Forgets the lease on `job` (its copy here stopped or moved).
    pub fn unhold(&self, job: u64) {
        self.held().remove(&job);
    }

    /// The fence of `job`'s copy here, at lease `epoch`.
    pub fn fence(self: &Arc<Self>, job: u64, epoch: u64) -> Arc<dyn weir_checkpoint::Fence> {
        Arc::new(fence::JobFence {
            fleet: self.clone(),
            job,
            epoch,
        })
    }

    /// Sends a heartbeat on `link` (the keeper's, but for the first and a drain's).
    async fn heartbeat(&self, link: &Link) -> Result<(), DbError> {
        let (me, url, draining) = (self.me.clone(), self.url().to_owned(), self.is_draining());
        let forget = ms(self.config.lease_ttl * 60);
        link.run("sending a heartbeat", move |c| {
                Box::pin(async move {
                    c.execute(
                        "INSERT INTO weir_servers (id, url, heartbeat_at, draining)
                         VALUES ($1, $2, clock_timestamp(), $3)
                         ON CONFLICT (id) DO UPDATE
                           SET heartbeat_at = clock_timestamp(), draining = excluded.draining",
                        &[&me, &url, &draining],
                    )
                    .await?;
                    // Servers silent for sixty lease times are forgotten.
                    c.execute(
                        "DELETE FROM weir_servers
                         WHERE heartbeat_at < clock_timestamp() - $1::BIGINT * interval '1 millisecond'",
                        &[&forget],
                    )
                    .await?;
                    Ok(())
                })
            })
            .await
    }

    /// Renews every lease this server holds; returns them, (job, epoch), as the database has
    /// them.
    async fn renew(&self) -> Result<Vec<(u64, u64)>, DbError> {
        let (me, ttl) = (self.me.clone(), ms(self.config.lease_ttl));
        self.keeper
            .run("renewing leases", move |c| {
                Box::pin(async move {
                    let rows = c
                        .query(
                            "UPDATE weir_leases
                             SET expires_at = clock_timestamp() + $2::BIGINT * interval '1 millisecond'
                             WHERE owner = $1
                             RETURNING job_id, epoch",
                            &[&me, &ttl],
                        )
                        .await?;
                    rows.iter()
                        .map(|r| Ok((id_of(r.try_get(0)?), id_of(r.try_get(1)?))))
                        .collect()
                })
            })
            .await
    }

    /// Takes the leases placed on this server and, when it is among the least loaded, one
    /// expired lease (so a dead server's jobs spread over the others, a round at a time).
    async fn claim(&self) -> Result<Vec<Claimed>, DbError> {
        let (me, ttl) = (self.me.clone(), ms(self.config.lease_ttl));
        self.ops
            .run("taking over leases", move |c| {
                Box::pin(async move {
                    let tx = c.transaction().await?;
                    // Load by leases held, among servers alive and not draining.
                    let least: bool = tx
                        .query_one(
                            "WITH load AS (
                               SELECT s.id, COALESCE(SUM(l.subtasks), 0) AS subtasks
                               FROM weir_servers s
                               LEFT JOIN weir_leases l
                                 ON l.owner = s.id AND l.expires_at > clock_timestamp()
                               WHERE s.heartbeat_at > clock_timestamp() - $2::BIGINT * interval '1 millisecond'
                                 AND NOT s.draining
                               GROUP BY s.id)
                             SELECT COALESCE((SELECT subtasks FROM load WHERE id = $1)
                                             <= (SELECT MIN(subtasks) FROM load), false)",
                            &[&me, &ttl],
                        )
                        .await?
                        .try_get(0)?;
                    let placed = tx
                        .query(
                            "SELECT job_id FROM weir_leases
                             WHERE owner IS NULL AND placed_on = $1
                             ORDER BY job_id FOR UPDATE SKIP LOCKED",
                            &[&me],
                        )
                        .await?;
                    let mut ids: Vec<i64> = placed
                        .iter()
                        .map(|r| r.try_get(0))
                        .collect::<Result<_, _>>()?;
                    if least {
                        let orphan = tx
                            .query_opt(
                                "SELECT job_id FROM weir_leases
                                 WHERE expires_at < clock_timestamp() AND NOT (job_id = ANY($1))
                                 ORDER BY expires_at, job_id LIMIT 1 FOR UPDATE SKIP LOCKED",
                                &[&ids],
                            )
                            .await?;
                        if let Some(r) = orphan {
                            ids.push(r.try_get(0)?);
                        }
                    }
                    if ids.is_empty() {
                        tx.commit().await?;
                        return Ok(Vec::new());
                    }
                    let taken = tx
                        .query(
                            "UPDATE weir_leases
                             SET owner = $1, placed_on = NULL, epoch = nextval('weir_epochs'),
                                 expires_at = clock_timestamp() + $3::BIGINT * interval '1 millisecond'
                             WHERE job_id = ANY($2)
                             RETURNING job_id, epoch, latest",
                            &[&me, &ids, &ttl],
                        )
                        .await?;
                    let claimed = taken
                        .iter()
                        .map(|r| {
                            Ok(Claimed {
                                job: id_of(r.try_get(0)?),
                                epoch: id_of(r.try_get(1)?),
                                latest: r.try_get(2)?,
                            })
                        })
                        .collect::<Result<Vec<_>, tokio_postgres::Error>>()?;
                    tx.commit().await?;
                    Ok(claimed)
                })
            })
            .await
    }

    /// Takes a lease on `job` for this server (a new job, or a new run of one that ended
    /// here): its epoch. Refused if another server holds it, or if `checkpointing` and a
    /// checkpointing job of the same name is live in the fleet.
    pub async fn acquire(
        &self,
        job: u64,
        name: &str,
        checkpointing: bool,
        subtasks: usize,
    ) -> Result<u64, DbError> {
        let (me, ttl, name_owned) = (self.me.clone(), ms(self.config.lease_ttl), name.to_owned());
        let subtasks = i64::try_from(subtasks).unwrap_or(i64::MAX);
        let result = self
            .ops
            .run("taking a lease", move |c| {
                Box::pin(async move {
                    let row = c
                        .query_opt(
                            "INSERT INTO weir_leases
                               (job_id, name, checkpointing, owner, epoch, expires_at, subtasks)
                             VALUES ($1, $2, $3, $4, nextval('weir_epochs'),
                                     clock_timestamp() + $5::BIGINT * interval '1 millisecond', $6)
                             ON CONFLICT (job_id) DO UPDATE
                               SET owner = excluded.owner, placed_on = NULL,
                                   epoch = excluded.epoch, expires_at = excluded.expires_at,
                                   subtasks = excluded.subtasks, name = excluded.name,
                                   checkpointing = excluded.checkpointing
                               WHERE weir_leases.owner = excluded.owner
                             RETURNING epoch",
                            &[
                                &id_sql(job),
                                &name_owned,
                                &checkpointing,
                                &me,
                                &ttl,
                                &subtasks,
                            ],
                        )
                        .await;
                    match row {
                        Ok(Some(r)) => Ok(Ok(id_of(r.try_get(0)?))),
                        Ok(None) => Ok(Err(DbError::Held(job))),
                        Err(e) if db::unique_violation(&e) => {
                            Ok(Err(DbError::NameTaken(String::new())))
                        }
                        Err(e) => Err(e),
                    }
                })
            })
            .await?;
        let epoch = result.map_err(|e| match e {
            DbError::NameTaken(_) => DbError::NameTaken(name.to_owned()),
            other => other,
        })?;
        self.hold(job, epoch);
        Ok(epoch)
    }

    /// Gives up the lease on `job` (epoch `epoch`): placed on `to` (which has a lease time to
    /// take it before anyone may), or free for any server at once.
    pub async fn release(&self, job: u64, epoch: u64, to: Option<&str>) -> Result<(), DbError> {
        self.unhold(job);
        let (me, ttl, to) = (
            self.me.clone(),
            ms(self.config.lease_ttl),
            to.map(str::to_owned),
        );
        self.ops
            .run("handing over a lease", move |c| {
                Box::pin(async move {
                    c.execute(
                        "UPDATE weir_leases
                         SET owner = NULL, placed_on = $4,
                             expires_at = clock_timestamp()
                               + (CASE WHEN $4::TEXT IS NULL THEN 0 ELSE $5::BIGINT END)
                                 * interval '1 millisecond'
                         WHERE job_id = $1 AND owner = $2 AND epoch = $3",
                        &[&id_sql(job), &me, &id_sql(epoch), &to, &ttl],
                    )
                    .await?;
                    Ok(())
                })
            })
            .await
    }

    /// Drops the lease on `job` (epoch `epoch`) altogether: the job could not start, or
    /// cannot be read; it is no longer live anywhere. Failures are logged: the lease then
    /// expires and the next server to take it drops it too.
    pub async fn forget(&self, job: u64, epoch: u64) {
        self.unhold(job);
        let result = self
            .ops
            .run("dropping a lease", move |c| {
                Box::pin(async move {
                    c.execute(
                        "DELETE FROM weir_leases WHERE job_id = $1 AND epoch = $2",
                        &[&id_sql(job), &id_sql(epoch)],
                    )
                    .await?;
                    Ok(())
                })
            })
            .await;
        if let Err(e) = result {
            tracing::warn!(job, error = %e, "cannot drop a lease");
        }
    }

    /// Frees every lease this server holds (at shutdown, once its copies have stopped), and
    /// leaves the fleet.
    pub async fn leave(&self) -> Result<(), DbError> {
        self.held().clear();
        let me = self.me.clone();
        self.ops
            .run("leaving the fleet", move |c| {
                Box::pin(async move {
                    c.execute(
                        "UPDATE weir_leases SET owner = NULL, expires_at = clock_timestamp()
                         WHERE owner = $1",
                        &[&me],
                    )
                    .await?;
                    c.execute("DELETE FROM weir_servers WHERE id = $1", &[&me])
                        .await?;
                    Ok(())
                })
            })
            .await
    }

    /// The live, not draining server with the fewest subtasks (this one on a tie), or with
    /// `others_only` the least loaded other one.
    pub async fn place(&self, others_only: bool) -> Result<Option<Target>, DbError> {
        let (me, ttl) = (self.me.clone(), ms(self.config.lease_ttl));
        self.ops
            .run("placing a job", move |c| {
                Box::pin(async move {
                    let row = c
                        .query_opt(
                            "SELECT s.id, s.url FROM weir_servers s
                             LEFT JOIN weir_leases l ON l.owner = s.id
                             WHERE s.heartbeat_at > clock_timestamp() - $2::BIGINT * interval '1 millisecond'
                               AND NOT s.draining AND NOT ($3 AND s.id = $1)
                             GROUP BY s.id, s.url
                             ORDER BY COALESCE(SUM(l.subtasks), 0), (s.id = $1) DESC, s.id
                             LIMIT 1",
                            &[&me, &ttl, &others_only],
                        )
                        .await?;
                    row.as_ref().map(Target::of).transpose()
                })
            })
            .await
    }

    /// The live, not draining server advertising `url`, if there is one.
    pub async fn server(&self, url: &str) -> Result<Option<Target>, DbError> {
        let (url, ttl) = (
            url.trim_end_matches('/').to_owned(),
            ms(self.config.lease_ttl),
        );
        self.ops
            .run("finding a server", move |c| {
                Box::pin(async move {
                    let row = c
                        .query_opt(
                            "SELECT id, url FROM weir_servers
                             WHERE url = $1 AND NOT draining
                               AND heartbeat_at > clock_timestamp() - $2::BIGINT * interval '1 millisecond'
                             ORDER BY heartbeat_at DESC LIMIT 1",
                            &[&url, &ttl],
                        )
                        .await?;
                    row.as_ref().map(Target::of).transpose()
                })
            })
            .await
    }

    /// The URL of the server holding `job`'s lease, if one does.
    pub async fn owner_url(&self, job: u64) -> Result<Option<String>, DbError> {
        self.ops
            .run("finding a job's server", move |c| {
                Box::pin(async move {
                    let row = c
                        .query_opt(
                            "SELECT s.url FROM weir_leases l JOIN weir_servers s ON s.id = l.owner
                             WHERE l.job_id = $1",
                            &[&id_sql(job)],
                        )
                        .await?;
                    row.map(|r| r.try_get(0)).transpose()
                })
            })
            .await
    }

    /// The jobs of the catalog no server holds a lease on, with the state their documents
    /// say.
    pub(crate) async fn unleased(&self) -> Result<Vec<(u64, String)>, DbError> {
        self.ops
            .run("reading the jobs without a lease", |c| {
                Box::pin(async move {
                    let rows = c
                        .query(
                            "SELECT j.id, j.state FROM weir_jobs j
                             LEFT JOIN weir_leases l ON l.job_id = j.id
                             WHERE l.job_id IS NULL ORDER BY j.id",
                            &[],
                        )
                        .await?;
                    rows.iter()
                        .map(|r| Ok((id_of(r.try_get(0)?), r.try_get(1)?)))
                        .collect()
                })
            })
            .await
    }

    /// Job `id`'s document, as the catalog holds it.
    pub(crate) async fn document(&self, id: u64) -> Result<Option<crate::catalog::Row>, DbError> {
        self.ops
            .run("reading a job", move |c| {
                Box::pin(async move {
                    let row = c
                        .query_opt(
                            "SELECT id, name, state, updated_at, document, checksum
                             FROM weir_jobs WHERE id = $1",
                            &[&id_sql(id)],
                        )
                        .await?;
                    row.map(|r| {
                        Ok(crate::catalog::Row {
                            id: id_of(r.try_get(0)?),
                            name: r.try_get(1)?,
                            state: r.try_get(2)?,
                            updated_at: r.try_get(3)?,
                            document: r.try_get(4)?,
                            checksum: r.try_get(5)?,
                            epoch: None,
                        })
                    })
                    .transpose()
                })
            })
            .await
    }

    /// Every server and job of the fleet.
    pub async fn view(&self) -> Result<FleetView, DbError> {
        let (me, ttl) = (self.me.clone(), ms(self.config.lease_ttl));
        let (servers, jobs) = self
            .ops
            .run("reading the fleet", move |c| {
                Box::pin(async move {
                    let servers = c
                        .query(
                            // One entry per server (URL): a server restarted on its URL
                            // is its newest process, not also the old one's row, which stays
                            // until it is forgotten (its leases are taken over meanwhile).
                            "SELECT DISTINCT ON (s.url) s.id, s.url,
                                    (EXTRACT(EPOCH FROM clock_timestamp() - s.heartbeat_at) * 1000)::BIGINT,
                                    s.draining, COALESCE(SUM(l.subtasks), 0)::BIGINT, COUNT(l.job_id)
                             FROM weir_servers s LEFT JOIN weir_leases l ON l.owner = s.id
                             GROUP BY s.id, s.url, s.heartbeat_at, s.draining
                             ORDER BY s.url, s.heartbeat_at DESC, s.id",
                            &[],
                        )
                        .await?;
                    let servers = servers
                        .iter()
                        .map(|r| {
                            let id: String = r.try_get(0)?;
                            let age: i64 = r.try_get(2)?;
                            Ok(ServerView {
                                this: id == me,
                                id,
                                url: r.try_get(1)?,
                                heartbeat_age_ms: age,
                                alive: age < ttl,
                                draining: r.try_get(3)?,
                                subtasks: id_of(r.try_get(4)?),
                                jobs: id_of(r.try_get(5)?),
                            })
                        })
                        .collect::<Result<Vec<_>, tokio_postgres::Error>>()?;
                    let jobs = c
                        .query(
                            "SELECT j.id, j.name, j.state, s.url, l.epoch, l.latest
                             FROM weir_jobs j
                             LEFT JOIN weir_leases l ON l.job_id = j.id
                             LEFT JOIN weir_servers s ON s.id = l.owner
                             ORDER BY j.id",
                            &[],
                        )
                        .await?;
                    let jobs = jobs
                        .iter()
                        .map(|r| {
                            Ok(FleetJobView {
                                id: id_of(r.try_get(0)?).to_string(),
                                name: r.try_get(1)?,
                                state: r.try_get(2)?,
                                server: r.try_get(3)?,
                                epoch: r.try_get::<_, Option<i64>>(4)?.map(id_of),
                                latest_snapshot: r.try_get(5)?,
                            })
                        })
                        .collect::<Result<Vec<_>, tokio_postgres::Error>>()?;
                    Ok((servers, jobs))
                })
            })
            .await?;
        Ok(FleetView {
            server: self.url().to_owned(),
            lease_ttl_ms: u64::try_from(ttl).unwrap_or(0),
            servers,
            jobs,
        })
    }

    /// The URLs of the other live servers, once each (a server restarted on its URL may still
    /// have its old row for a lease time).
    async fn other_live_urls(&self) -> Result<Vec<String>, DbError> {
        let (me, url, ttl) = (
            self.me.clone(),
            self.url().to_owned(),
            ms(self.config.lease_ttl),
        );
        self.ops
            .run("finding the other servers", move |c| {
                Box::pin(async move {
                    let rows = c
                        .query(
                            "SELECT DISTINCT url FROM weir_servers
                             WHERE id <> $1 AND url <> $2
                               AND heartbeat_at > clock_timestamp() - $3::BIGINT * interval '1 millisecond'
                             ORDER BY url",
                            &[&me, &url, &ttl],
                        )
                        .await?;
                    rows.iter().map(|r| r.try_get(0)).collect()
                })
            })
            .await
    }

    /// The jobs lists of the fleet's other live servers (`GET /api/v1/jobs` on each, at once,
    /// with the caller's `authorization`), each overview naming its server; and the servers
    /// that did not answer, with why.
    pub async fn other_servers_jobs(
        &self,
        authorization: Option<&axum::http::HeaderValue>,
    ) -> (Vec<serde_json::Value>, Vec<String>) {
        let urls = match self.other_live_urls().await {
            Ok(urls) => urls,
            Err(e) => return (Vec::new(), vec![format!("the other servers: {e}")]),
        };
        let reads = urls.iter().map(|url| async move {
            let read = self
                .forwarder
                .read_json(url, "/api/v1/jobs", authorization)
                .await;
            (url, read)
        });
        let mut jobs = Vec::new();
        let mut unanswered = Vec::new();
        for (url, read) in futures::future::join_all(reads).await {
            match read {
                // Its own list names it as each job's server already.
                Ok(mut list) => match list.get_mut("jobs").and_then(|v| v.as_array_mut()) {
                    Some(listed) => jobs.append(listed),
                    None => unanswered.push(format!("{url}: its answer has no jobs list")),
                },
                Err(reason) => unanswered.push(format!("{url}: {reason}")),
            }
        }
        (jobs, unanswered)
    }

    /// Keeps this server's part in the fleet until `stop`. The lease thread
    /// ([`Fleet::renew_on_own_thread`]) sends a heartbeat and renews this server's leases
    /// every quarter of the lease time; here, on the host's runtime, each renewal is settled
    /// (a lease found lost stops its copy here) and the leases placed here or expired are
    /// taken over. A server that has not renewed for half the lease time stops every copy it
    /// runs: by then another server may take them. (After a pause the renewal says which
    /// leases are still this server's; only those another server took are stopped.)
    pub(crate) async fn keep(self: Arc<Self>, host: Weak<Host>, stop: CancellationToken) {
        let round = self.config.lease_ttl / 4;
        // The send time of the last renewal settled (before the thread starts, so its first
        // renewal is newer).
        let mut renewed = Instant::now();
        let mut lease_thread = match self.clone().renew_on_own_thread(stop.child_token()) {
            Ok(thread) => thread,
            Err(e) => {
                tracing::error!(error = %e, "cannot start the fleet's lease thread: this server's leases lapse and its jobs move");
                return;
            }
        };
        loop {
            // A tick besides the renewals: a lease thread stuck on a connection still lets
            // this loop notice that half the lease time went by.
            tokio::select! {
                changed = lease_thread.renewals.changed() => if changed.is_err() { break },
                () = tokio::time::sleep(round) => {}
                () = stop.cancelled() => break,
            }
            let Some(host) = host.upgrade() else { break };
            let latest: Option<Renewal> = lease_thread.renewals.borrow_and_update().clone();
            match latest {
                Some(Renewal {
                    sent,
                    leases: Ok(in_db),
                }) if sent > renewed => {
                    renewed = sent;
                    self.settle(&host, &in_db, sent).await;
                }
                _ => {
                    // Past half the lease time another server may take them any moment:
                    // stop every copy here first (the fence refuses them anyway).
                    if renewed.elapsed() > self.config.lease_ttl / 2 {
                        let lost: Vec<u64> = self.held().keys().copied().collect();
                        if !lost.is_empty() {
                            // The fencing of these copies, said once (at the level every
                            // fencing is said at).
                            tracing::warn!(jobs = ?lost, "fenced: the fleet's catalog has not renewed this server's leases for half the lease time; their copies here stop, and another server may take the jobs over");
                        }
                        for job in lost {
                            self.unhold(job);
                            host.lost(job);
                        }
                    }
                    continue;
                }
            }
            if self.is_draining() {
                continue;
            }
            match self.claim().await {
                Ok(claimed) => {
                    for c in claimed {
                        tracing::info!(job = c.job, epoch = c.epoch, latest = ?c.latest, "took over a job's lease");
                        self.hold(c.job, c.epoch);
                        self.resume_claimed(&host, c).await;
                    }
                }
                Err(e) => tracing::warn!(error = %e, "cannot take over leases"),
            }
        }
        if tokio::task::spawn_blocking(move || lease_thread.stop())
            .await
            .is_err()
        {
            tracing::error!("the fleet's lease thread could not be joined");
        }
    }

    /// Starts the lease thread: a heartbeat and the renewal of every lease of this server
    /// every quarter of the lease time, on a current-thread runtime of its own with its own
    /// connection, until `halt` (or [`LeaseThread::stop`]).
    ///
    /// The host's runtime may be saturated by data tasks (a 1 GiB restore on two cores kept
    /// renewals waiting past their deadline there, and leases moved back and forth between
    /// two busy servers): the operating system schedules this thread beside them instead.
    pub fn renew_on_own_thread(
        self: Arc<Self>,
        halt: CancellationToken,
    ) -> std::io::Result<LeaseThread> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let (renewals, latest) = tokio::sync::watch::channel(None);
        let halted = halt.clone();
        let thread = std::thread::Builder::new()
            .name("weir-fleet-lease".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let mut rounds = tokio::time::interval(self.config.lease_ttl / 4);
                    rounds.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                    loop {
                        tokio::select! {
                            _ = rounds.tick() => {}
                            () = halted.cancelled() => return,
                        }
                        let sent = Instant::now();
                        let renewal = async {
                            self.heartbeat(&self.keeper).await?;
                            self.renew().await
                        };
                        let leases = tokio::select! {
                            leases = renewal => leases,
                            () = halted.cancelled() => return,
                        };
                        if let Err(e) = &leases {
                            tracing::warn!(error = %e, "cannot renew this server's leases");
                        }
                        // Every receiver gone: nobody settles renewals any more.
                        if renewals.send(Some(Renewal { sent, leases })).is_err() {
                            return;
                        }
                    }
                });
            })?;
        Ok(LeaseThread {
            renewals: latest,
            halt,
            thread: Some(thread),
        })
    }

    /// Compares the leases held here with those the database renewed: a lease held here but
    /// not renewed (another server took it) stops its copy; a lease renewed but not held here
    /// (its copy stopped) is handed back.
    async fn settle(&self, host: &Arc<Host>, in_db: &[(u64, u64)], sent: Instant) {
        let renewed: HashMap<u64, u64> = in_db.iter().copied().collect();
        let lost: Vec<u64> = self
            .held()
            .iter()
            .filter(|(job, held)| held.since < sent && renewed.get(job) != Some(&held.epoch))
            .map(|(job, _)| *job)
            .collect();
        for job in lost {
            self.unhold(job);
            if host.lost(job) {
                tracing::warn!(
                    job,
                    "fenced: another server holds this job's lease now; the copy here stops"
                );
            }
        }
        let stray: Vec<(u64, u64)> = {
            let held = self.held();
            in_db
                .iter()
                .filter(|(job, epoch)| held.get(job).is_none_or(|h| h.epoch != *epoch))
                .copied()
                .collect()
        };
        for (job, epoch) in stray {
            if host.has_job_here(job) {
                continue;
            }
            tracing::info!(
                job,
                epoch,
                "handing back the lease of a job not running here"
            );
            if let Err(e) = self.release(job, epoch, None).await {
                tracing::warn!(job, error = %e, "cannot hand back a lease");
            }
        }
    }

    /// Marks this server draining: it takes no new jobs, and is not placed on.
    pub fn set_draining(&self) {
        self.draining.store(true, Ordering::Release);
    }

    /// Sends a heartbeat now (the draining flag, for placement elsewhere).
    pub async fn beat(&self) -> Result<(), DbError> {
        self.heartbeat(&self.ops).await
    }
}
