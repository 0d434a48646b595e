//! `weir serve`: host jobs behind the HTTP API and the dashboard until Ctrl-C.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use weir_http_ui::{ServeConfig, Server};
use weir_runtime::spec::load::Override;

/// What `weir serve` was asked to do.
pub struct ServeArgs {
    pub listen: SocketAddr,
    pub token: Option<String>,
    /// Jobs to start with the server, and the overrides applied to each.
    pub jobs: Vec<PathBuf>,
    pub overrides: Vec<Override>,
    /// `--allow-endpoint`: S3 endpoints submitted jobs may name besides the server's own.
    pub allow_endpoints: Vec<String>,
}

pub fn serve(args: ServeArgs) -> ExitCode {
    let Some(runtime) = crate::run::runtime() else {
        return ExitCode::FAILURE;
    };
    let mut config = ServeConfig {
        listen: args.listen,
        token: args.token,
        ..ServeConfig::default()
    };
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
        for path in &args.jobs {
            let text = match std::fs::read_to_string(path) {
                Ok(t) => t,
                Err(e) => {
                    eprintln!("error: reading {}: {e}", path.display());
                    return ExitCode::FAILURE;
                }
            };
            let name = path.display().to_string();
            match server.host.submit(&name, &text, &args.overrides).await {
                Ok(job) => eprintln!("started {name} as job {}", job.id),
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
