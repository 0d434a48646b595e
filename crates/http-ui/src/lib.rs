//! `weir serve`: a long-running host of many jobs, its REST API, Prometheus metrics and web
//! dashboard.
//!
//! One process hosts any number of jobs ([`Host`]): each job's tasks are owned by its run's
//! supervisor, and one shared checkpoint scheduler triggers every job's checkpoints, as in
//! `weir run`. The [`router`] serves, on axum:
//!
//! - the REST API under `/api/v1` (JSON in and out; a job is submitted as its YAML file):
//!   submit, validate, list, detail (DAG, per-operator counts, rates, backpressure,
//!   watermarks), cancel, savepoints (an id to poll), stop with a savepoint, restart from a
//!   snapshot, checkpoint history and details, recent exceptions, the scheduler's metrics,
//!   lookups of queryable state by key (rate-limited per client);
//!   described by the OpenAPI document at `/api/v1/openapi.json` (generated from the views'
//!   types), shown by the viewer at `/api/v1/docs`;
//! - `/metrics` in the Prometheus text format;
//! - the dashboard (`web/`, embedded) at `/`.
//!
//! Listening anywhere but loopback needs a bearer token ([`Access`]). Request bodies are
//! limited to [`limits::MAX_BODY`] and, with the headers, must arrive in time ([`Timeouts`]);
//! paths and names in submitted jobs are confined to the server's working directory
//! ([`paths`]), the endpoints they reach to the server's allow-list ([`endpoints`]).
//!
//! # Layout
//! The modules stand in layers. A module imports only modules of its own layer or below,
//! never one above, and no modules import each other in a circle: `layering.rs` checks both
//! on the source. From the bottom:
//!
//! - **L0**, what the rest stands on:
//!   - [`error`]: [`ApiError`], one HTTP status each;
//!   - [`lifecycle`]: [`JobState`], where a hosted job is in its life, and its names;
//!   - [`overrides`]: `--set` overrides as the server reads them;
//!   - [`paths`]: what a submitted job may name on the filesystem;
//!   - [`endpoints`]: what a submitted job may reach over the network;
//!   - [`limits`]: [`JobLimits`], what one hosted job may ask of the server, and
//!     [`limits::MAX_BODY`];
//!   - [`auth`]: [`Access`], the bearer-token rule and its middleware;
//!   - [`ratelimit`]: rate limits per client (state lookups), on governor;
//!   - [`redact`]: a job's secrets, masked in answers and log lines;
//!   - [`db`]: what the PostgreSQL catalog and the fleet share (a connection, the DDL lock);
//!   - [`assets`]: the embedded dashboard files.
//! - **L1**, what is kept of jobs: [`catalog`] ([`catalog::Catalog`]: the jobs kept across
//!   restarts of the server, in SQLite or PostgreSQL) and [`logs`] (each job's log lines).
//! - **L2**, [`job`]: [`HostedJob`], one job's state machine, samples, savepoints,
//!   exceptions.
//! - **L3**, [`host`]: [`Host`], starting, restarting and stopping jobs; limits; the sampler.
//!   In a fleet it asks for each run's lease through a hook ([`host::Leases`]).
//! - **L4**, [`fleet`]: servers sharing one PostgreSQL catalog (leases, fencing, placement,
//!   takeovers, drains). It implements the host's hook, builds this server's host and drives
//!   it.
//! - **L5**, read-only projections: [`view`] (the JSON views of jobs, operators, edges and
//!   checkpoints, and the types of requests) and [`prometheus`] (the `/metrics` text).
//! - **L6**, the HTTP surface: [`api`] ([`router`]: the routes and their handlers) and
//!   [`openapi`] (the API's OpenAPI document, generated from the views' types), which `api`
//!   serves and which uses nothing of `api`.
//!
//! This root wires the layers together: [`Server`] binds (failing with [`ServeError`]) and
//! gives the router the host and, in a fleet, the fleet; [`Watcher`] shows the job of a `weir
//! run --listen`.
//!
//! # Example
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use weir_http_ui::{Access, Host, HostConfig};
//!
//! let scheduler = Arc::new(weir_scheduler::Scheduler::new(tokio::runtime::Handle::current())?);
//! let host = Host::new(scheduler, HostConfig::default());
//! let app = weir_http_ui::router(host.clone(), Access::open());
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! axum::serve(listener, app).await?;
//! # Ok(())
//! # }
//! ```

pub mod api;
pub mod assets;
pub mod auth;
pub mod catalog;
pub mod db;
pub mod endpoints;
pub mod error;
pub mod fleet;
pub mod host;
pub mod job;
pub mod lifecycle;
pub mod limits;
pub mod logs;
pub mod openapi;
pub mod overrides;
pub mod paths;
pub mod prometheus;
pub mod ratelimit;
pub mod redact;
pub mod view;

#[cfg(test)]
mod layering;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

pub use api::router;
pub use auth::Access;
pub use error::ApiError;
pub use host::{Host, HostConfig};
pub use job::HostedJob;
pub use lifecycle::JobState;
pub use limits::JobLimits;

/// Where and how `weir serve` listens.
#[derive(Clone, Debug)]
pub struct ServeConfig {
    pub listen: SocketAddr,
    /// Required unless `listen` is loopback.
    pub token: Option<String>,
    pub host: HostConfig,
    /// How long jobs get to drain at shutdown before they are aborted.
    pub grace: Duration,
    /// How long a client may take to send a request.
    pub timeouts: Timeouts,
    /// Where the server keeps its jobs across restarts; `None` keeps them in memory only
    /// (`weir serve` uses `catalog.sqlite` under the data directory unless told otherwise).
    pub catalog: Option<catalog::CatalogConfig>,
    /// Answer reads only: every request that would change something is refused (`weir run
    /// --listen`, which shows the one job it runs).
    pub read_only: bool,
    /// Be one server of a fleet sharing the PostgreSQL `catalog` ([`fleet`]).
    pub fleet: Option<fleet::FleetConfig>,
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            token: None,
            host: HostConfig::default(),
            grace: Duration::from_secs(10),
            timeouts: Timeouts::default(),
            catalog: None,
            read_only: false,
            fleet: None,
        }
    }
}

/// How long a client may take to send a request. Without them a client that sends half a
/// request and waits holds its connection (a socket, a task, buffers) forever, and a few
/// thousand such clients exhaust the server's file descriptors.
///
/// There is no deadline on a handler's own work: a slow client is what these bound, and
/// abandoning a submit or a restart half-way through starting a job would leave it neither
/// running nor refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// From the moment the server waits for a request (a new connection, or the end of the
    /// previous response on a kept-alive one) to the end of its headers; then the connection
    /// is closed. Also closes idle kept-alive connections.
    pub header_read: Duration,
    /// From the end of the headers to the end of the body; then 408 and the connection is
    /// closed.
    pub body_read: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            header_read: Duration::from_secs(10),
            body_read: api::BODY_TIMEOUT,
        }
    }
}

/// Why `weir serve` cannot start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The access rule refuses the bind (no token off loopback, an empty token).
    #[error(transparent)]
    Access(#[from] auth::AccessError),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot start the checkpoint scheduler: {0}")]
    Scheduler(String),
    #[error("serving: {0}")]
    Io(#[from] std::io::Error),
    /// The job catalog cannot be opened or read.
    #[error(transparent)]
    Catalog(#[from] catalog::CatalogError),
    /// The fleet's catalog cannot be joined.
    #[error("joining the fleet: {0}")]
    Fleet(String),
}

/// A bound server: its host (to submit start-up jobs to) and the address it listens on.
pub struct Server {
    pub host: Arc<Host>,
    /// This server's part in a fleet, if it is one server of a fleet ([`ServeConfig::fleet`]).
    pub fleet: Option<Arc<fleet::Fleet>>,
    pub addr: SocketAddr,
    listener: tokio::net::TcpListener,
    access: Access,
    grace: Duration,
    timeouts: Timeouts,
    read_only: bool,
}

impl Server {
    /// Checks the access rule, starts the scheduler and the host (opening its catalog and
    /// resuming what it holds), and binds the listener.
    pub async fn bind(config: ServeConfig) -> Result<Self, ServeError> {
        let access = Access::for_bind(config.listen, config.token.as_deref())?;
        let scheduler = Arc::new(
            weir_scheduler::Scheduler::dedicated(weir_scheduler::SchedulerConfig::default())
                .map_err(|e| ServeError::Scheduler(e.to_string()))?,
        );
        // The listener first: a server that cannot bind resumes nobody's jobs.
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .map_err(|source| ServeError::Bind {
                addr: config.listen,
                source,
            })?;
        let addr = listener.local_addr()?;
        let (host, fleet) = match (&config.catalog, config.fleet) {
            (Some(catalog::CatalogConfig::Postgres(url)), Some(fleet_config)) => {
                let fleet = fleet::Fleet::join(url, fleet_config)
                    .await
                    .map_err(|e| ServeError::Fleet(e.to_string()))?;
                let catalog = catalog::Catalog::open_fleet(url, fleet.me()).await?;
                (fleet.host(scheduler, config.host, catalog), Some(fleet))
            }
            (_, Some(_)) => {
                return Err(ServeError::Fleet(
                    "a fleet shares a PostgreSQL catalog: start every server with --catalog postgres://... and --advertise URL".into(),
                ));
            }
            (None, None) => (Host::new(scheduler, config.host), None),
            (Some(catalog), None) => {
                let catalog = catalog::Catalog::open(catalog).await?;
                let host = Host::with_catalog(scheduler, config.host, catalog);
                host.recover().await?;
                (host, None)
            }
        };
        Ok(Server {
            host,
            fleet,
            addr,
            listener,
            access,
            grace: config.grace,
            timeouts: config.timeouts,
            read_only: config.read_only,
        })
    }

    /// Serves on the current runtime in the background until [`Background::stop`] (tests,
    /// benchmarks).
    pub fn spawn(self) -> Background {
        let (host, addr) = (self.host.clone(), self.addr);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let serving = tokio::spawn(self.run(async {
            let _ = stopped.await;
        }));
        Background {
            host,
            addr,
            stop,
            serving,
        }
    }

    /// Serves until `shutdown` completes, then stops every job (within the grace period).
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServeError> {
        let mut app = api::router_with(
            self.host.clone(),
            self.fleet.clone(),
            self.access,
            self.timeouts.body_read,
        );
        if self.read_only {
            app = app.layer(axum::middleware::from_fn(api::refuse_changes));
        }
        serve_connections(self.listener, app, self.timeouts.header_read, shutdown).await;
        self.host.shutdown(self.grace).await;
        Ok(())
    }
}

/// Accepts connections on `listener` and serves `app` on each (HTTP/1.1), until `shutdown`
/// completes; then stops accepting, lets every connection finish the request it is serving,
/// and returns once all are closed.
///
/// axum's own `serve` takes no settings; hyper's connection builder is used directly to give
/// every connection its header-read timeout. One task per connection, owned by a `JoinSet`
/// here.
async fn serve_connections(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    header_read: Duration,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    use tower::ServiceExt;

    let stopping = tokio_util::sync::CancellationToken::new();
    let mut connections = tokio::task::JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors, or a connection reset before it was accepted:
                    // the listener itself is fine. Wait a little so that a lasting shortage
                    // does not spin.
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        while connections.try_join_next().is_some() {}
        // Peer addresses let the state-lookup rate limit tell clients without a token apart.
        let service = app.clone().map_request(
            move |mut request: axum::http::Request<hyper::body::Incoming>| {
                request
                    .extensions_mut()
                    .insert(axum::extract::ConnectInfo(peer));
                request.map(axum::body::Body::new)
            },
        );
        let service = hyper_util::service::TowerToHyperService::new(service);
        let stopping = stopping.clone();
        connections.spawn(async move {
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(header_read);
            let connection =
                builder.serve_connection(hyper_util::rt::TokioIo::new(stream), service);
            let mut connection = std::pin::pin!(connection);
            let served = tokio::select! {
                served = connection.as_mut() => served,
                () = stopping.cancelled() => {
                    connection.as_mut().graceful_shutdown();
                    connection.await
                }
            };
            if let Err(e) = served {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
    stopping.cancel();
    while connections.join_next().await.is_some() {}
}

/// A server serving in the background: stop it with [`Background::stop`] (dropping it stops
/// it as well, without waiting for its jobs).
pub struct Background {
    pub host: Arc<Host>,
    pub addr: SocketAddr,
    stop: tokio::sync::oneshot::Sender<()>,
    serving: tokio::task::JoinHandle<Result<(), ServeError>>,
}

impl Background {
    /// Stops serving and every job, and waits for both.
    pub async fn stop(self) -> Result<(), ServeError> {
        let _ = self.stop.send(());
        match self.serving.await {
            Ok(result) => result,
            Err(e) => Err(ServeError::Io(std::io::Error::other(e))),
        }
    }
}

/// `weir run --listen`: the read-only API, `/metrics` and dashboard of the one job a `weir run`
/// runs itself (the job's tasks stay the caller's; the server only observes them).
pub struct Watcher {
    background: Background,
    job: Arc<HostedJob>,
}

impl Watcher {
    /// Serves `config` (read-only) showing `running`, the run of `plan` from the file `text`;
    /// `log` is the log its run was started in ([`logs::JobLog::span`]).
    pub async fn start(
        mut config: ServeConfig,
        text: String,
        plan: weir_runtime::plan::Plan,
        running: &weir_runtime::exec::job::RunningJob,
        log: Arc<logs::JobLog>,
    ) -> Result<Self, ServeError> {
        config.read_only = true;
        config.catalog = None;
        let server = Server::bind(config).await?;
        let job = server.host.adopt(text, plan, running, log);
        Ok(Watcher {
            background: server.spawn(),
            job,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.background.addr
    }

    /// The run ended (the dashboard shows how), then the server stops.
    pub async fn ended(
        self,
        result: Result<weir_runtime::exec::job::JobSummary, String>,
    ) -> Result<(), ServeError> {
        match result {
            Ok(summary) => self.job.ended(Ok(summary)),
            Err(message) => self.job.start_failed(&message),
        }
        self.background.stop().await
    }
}
