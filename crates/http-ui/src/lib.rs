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
//!   described by the OpenAPI document at `/api/v1/openapi.json`;
//! - `/metrics` in the Prometheus text format;
//! - the dashboard (`web/`, embedded) at `/`.
//!
//! Listening anywhere but loopback needs a bearer token ([`Access`]). Request bodies are
//! limited to [`api::MAX_BODY`]; paths and names in submitted jobs are confined to the server's
//! working directory ([`paths`]).
//!
//! # Layout
//! - [`host`]: [`Host`]: starting, restarting and stopping jobs; limits; the sampler.
//! - [`job`]: [`HostedJob`]: one job's state machine, samples, savepoints, exceptions.
//! - [`view`]: the JSON views of jobs, operators, edges and checkpoints.
//! - [`api`]: [`router`]: the routes and their handlers.
//! - [`auth`]: [`Access`]: the bearer-token rule and its middleware.
//! - [`paths`]: what a submitted job may name on the filesystem.
//! - [`limits`]: [`JobLimits`]: what one hosted job may ask of the server.
//! - [`prometheus`]: the `/metrics` text.
//! - [`ratelimit`]: token buckets per client (state lookups).
//! - [`assets`]: the embedded dashboard files.
//! - [`error`]: [`ApiError`] (one HTTP status each) and [`ServeError`].
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
pub mod error;
pub mod host;
pub mod job;
pub mod limits;
pub mod paths;
pub mod prometheus;
pub mod ratelimit;
pub mod redact;
pub mod view;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

pub use api::router;
pub use auth::Access;
pub use error::{ApiError, ServeError};
pub use host::{Host, HostConfig};
pub use job::{HostedJob, JobState};
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
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            token: None,
            host: HostConfig::default(),
            grace: Duration::from_secs(10),
        }
    }
}

/// A bound server: its host (to submit start-up jobs to) and the address it listens on.
pub struct Server {
    pub host: Arc<Host>,
    pub addr: SocketAddr,
    listener: tokio::net::TcpListener,
    access: Access,
    grace: Duration,
}

impl Server {
    /// Checks the access rule, starts the scheduler and the host, and binds the listener.
    pub async fn bind(config: ServeConfig) -> Result<Self, ServeError> {
        let access = Access::for_bind(config.listen, config.token.as_deref())?;
        let scheduler = weir_scheduler::Scheduler::new(tokio::runtime::Handle::current())
            .map_err(|e| ServeError::Scheduler(e.to_string()))?;
        let host = Host::new(Arc::new(scheduler), config.host);
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .map_err(|source| ServeError::Bind {
                addr: config.listen,
                source,
            })?;
        let addr = listener.local_addr()?;
        Ok(Server {
            host,
            addr,
            listener,
            access,
            grace: config.grace,
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
        let app = router(self.host.clone(), self.access);
        // Peer addresses let the state-lookup rate limit tell clients without a token apart.
        let app = app.into_make_service_with_connect_info::<SocketAddr>();
        let served = axum::serve(self.listener, app)
            .with_graceful_shutdown(shutdown)
            .await;
        self.host.shutdown(self.grace).await;
        served.map_err(ServeError::Io)
    }
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
