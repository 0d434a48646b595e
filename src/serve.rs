//! `weir serve`: host jobs behind the HTTP API and the dashboard until Ctrl-C.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use weir_http_ui::catalog::CatalogConfig;
use weir_http_ui::{JobLimits, ServeConfig, Server};

/// What one hosted job may ask of the server (see `weir_http_ui::limits`).
#[derive(clap::Args, Debug, Clone)]
pub struct LimitArgs {
    /// Most subtasks of one job (every operator's parallelism added up).
    #[arg(long, default_value_t = JobLimits::default().max_job_subtasks)]
    pub max_job_subtasks: usize,
    /// Most subtasks of all running jobs together.
    #[arg(long, default_value_t = JobLimits::default().max_subtasks)]
    pub max_subtasks: usize,
    /// Shortest checkpoint interval a job may ask for.
    #[arg(long, default_value = "100ms", value_parser = humantime::parse_duration)]
    pub min_checkpoint_interval: std::time::Duration,
    /// Largest `batch-size` (records per batch).
    #[arg(long, default_value_t = JobLimits::default().max_batch_size)]
    pub max_batch_size: u32,
    /// Largest `channel-capacity` (batches per channel).
    #[arg(long, default_value_t = JobLimits::default().max_channel_capacity)]
    pub max_channel_capacity: u32,
    /// Most chunks a JSON-lines source may cut its files into.
    #[arg(long, default_value_t = JobLimits::default().max_chunks)]
    pub max_chunks: u64,
    /// Fastest generator, in events/s (an unbounded generator must set a `rate`).
    #[arg(long, default_value_t = JobLimits::default().max_generator_rate)]
    pub max_generator_rate: u64,
}

impl From<LimitArgs> for JobLimits {
    fn from(a: LimitArgs) -> Self {
        JobLimits {
            max_job_subtasks: a.max_job_subtasks,
            max_subtasks: a.max_subtasks,
            min_checkpoint_interval: a.min_checkpoint_interval,
            max_batch_size: a.max_batch_size,
            max_channel_capacity: a.max_channel_capacity,
            max_chunks: a.max_chunks,
            max_generator_rate: a.max_generator_rate,
        }
    }
}

/// What `weir serve` was asked to do.
pub struct ServeArgs {
    pub listen: SocketAddr,
    pub token: Option<String>,
    pub limits: JobLimits,
    /// Jobs to start with the server, and the overrides applied to each (`key.path=value`).
    pub jobs: Vec<PathBuf>,
    pub overrides: Vec<String>,
    /// Where the server keeps its jobs across restarts (`None`: in memory only).
    pub catalog: Option<CatalogConfig>,
    /// `--allow-endpoint`: S3 endpoints, Kafka brokers, NATS servers and PostgreSQL hosts
    /// submitted jobs may reach.
    pub allow_endpoints: Vec<String>,
    /// `--allow-env`: environment variables submitted jobs may read with `${VAR}`.
    pub allow_env: Vec<String>,
    /// `--advertise`: be one server of a fleet.
    pub fleet: Option<weir_http_ui::fleet::FleetConfig>,
}

pub fn serve(args: ServeArgs) -> ExitCode {
    let Some(runtime) = crate::run::runtime() else {
        return ExitCode::FAILURE;
    };
    let mut config = ServeConfig {
        listen: args.listen,
        token: args.token,
        catalog: args.catalog.clone(),
        fleet: args.fleet.clone(),
        ..ServeConfig::default()
    };
    config.host.limits = args.limits;
    config.host.env = weir_runtime::spec::env::AllowedEnv::new(args.allow_env.iter().cloned());
    for entry in &args.allow_endpoints {
        match config.host.endpoints.clone().allow(entry) {
            Ok(endpoints) => config.host.endpoints = endpoints,
            Err(why) => {
                eprintln!("error: --allow-endpoint {why}");
                return ExitCode::FAILURE;
            }
        }
    }
    runtime.block_on(async move {
        let server = match Server::bind(config).await {
            Ok(s) => s,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        };
        if let Some(fleet) = &server.fleet {
            eprintln!(
                "weir serve: one server of the fleet at {} (this one: {}, lease {:?})",
                server
                    .host
                    .catalog()
                    .map_or_else(String::new, |c| c.location().to_owned()),
                fleet.url(),
                fleet.lease_ttl()
            );
        } else if let Some(catalog) = server.host.catalog() {
            let jobs = server.host.jobs();
            let live = jobs.iter().filter(|j| j.state().is_live()).count();
            eprintln!(
                "weir serve: job catalog at {} ({} jobs, {live} resuming)",
                catalog.location(),
                jobs.len()
            );
        }
        for path in &args.jobs {
            let text = match std::fs::read_to_string(path) {
                Ok(t) => t,
                Err(e) => {
                    eprintln!("error: reading {}: {e}", path.display());
                    return ExitCode::FAILURE;
                }
            };
            let name = path.display().to_string();
            // A job the catalog already runs (the same file, the same overrides) is resumed,
            // not started a second time.
            let resumed = server.host.jobs().into_iter().find(|j| {
                j.state().is_live() && j.text == text && j.definition().overrides == args.overrides
            });
            if let Some(job) = resumed {
                eprintln!("{name} is job {}, resumed from the catalog", job.id);
                continue;
            }
            match server.host.submit(&name, &text, &args.overrides).await {
                Ok(job) => eprintln!("started {name} as job {}", job.id),
                // In a fleet, another server may run it already (this one restarted).
                Err(e @ weir_http_ui::ApiError::Conflict(_)) if server.fleet.is_some() => {
                    eprintln!("{name} is not started here: {e}");
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::FAILURE;
                }
            }
        }
        eprintln!("weir serve: dashboard at http://{}/", server.addr);
        eprintln!(
            "           API at http://{}/api/v1 (Ctrl-C stops every job and exits)",
            server.addr
        );
        let shutdown = async {
            let _ = tokio::signal::ctrl_c().await;
            eprintln!("\nstopping: cancelling every job");
        };
        match server.run(shutdown).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        }
    })
}
