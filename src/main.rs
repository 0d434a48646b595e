//! `weir`: run YAML-defined streaming jobs.
//!
//! # Layout
//! - `main.rs`: the command line.
//! - `run.rs`: `weir run`: a job with a progress bar, Ctrl-C handling and a summary.
//! - `savepoint.rs`: `weir savepoint JOB.yaml`: ask a local `weir run` for a savepoint.
//! - `serve.rs`: `weir serve`: host jobs behind the HTTP API and the dashboard.
//! - `client.rs`: `weir submit`, `weir jobs`, `weir cancel`, `weir savepoint ID`: a client of
//!   `weir serve`.
//! - `reference.rs`: `weir schema --markdown`: the key tables of the book's reference pages.
//!
//! `weir bench`, the benchmarks `make bench` prints, is the `weir-bench` crate
//! (`crates/bench`): this binary only parses its arguments and calls `weir_bench::run`. It is
//! the default feature `bench`, which `make run` leaves out (the binary serves sooner).

mod client;
mod reference;
mod run;
mod savepoint;
mod serve;

/// mimalloc instead of the system allocator: profiles of the stateful Nexmark queries showed
/// glibc's malloc and free (with its consolidation passes) at 15–20% of samples; operators
/// allocate and free many small objects (keys, rows, timers) per batch.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Turns transparent huge pages off for the process, unless `MIMALLOC_ALLOW_THP` asks mimalloc
/// for its own choice. mimalloc asks for huge pages for its arenas, so a 2 MiB region is
/// resident (and zeroed) whole as soon as one byte of it is touched: without them the Nexmark
/// file jobs peak 35–45% lower at the same speed (BENCHMARKS.md, "Transparent huge pages off by
/// default"). Called before any thread starts; the flag is the process's, and a failure (a
/// kernel without THP) changes nothing.
fn huge_pages_off() {
    if std::env::var_os("MIMALLOC_ALLOW_THP").is_none() {
        let _ = nix::sys::prctl::set_thp_disable(true);
    }
}

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use weir_runtime::exec::restore::RestoreFrom;
use weir_runtime::spec::load::Override;

/// `weir --version`: the version and the commit the binary was built from (`build.rs`).
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("WEIR_BUILD_COMMIT"),
    ")"
);

#[derive(Parser)]
#[command(
    name = "weir",
    version = VERSION,
    about = "A miniature stream-processing engine: YAML jobs, event time, exactly-once state."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum ServerCommand {
    /// List the fleet's servers (heartbeat, load, draining) and its jobs with their servers.
    List {
        #[command(flatten)]
        server: client::ServerArgs,
    },
    /// Move every job of the server at URL to the fleet's other servers (each stops with a
    /// savepoint there and resumes from it elsewhere), and stop placing jobs on it: for an
    /// upgrade without downtime.
    Drain { url: String },
}

#[derive(Subcommand)]
enum Command {
    /// Run a job until its bounded sources end (or Ctrl-C), then print a summary.
    Run {
        /// The job file.
        job: PathBuf,
        /// Override a field of the job: `--set sources.gen.events=1000000`, `--set parallelism=2`.
        #[arg(long = "set", value_name = "KEY=VALUE")]
        overrides: Vec<Override>,
        /// No progress bar (the summary is still printed).
        #[arg(long)]
        quiet: bool,
        /// Also write the summary as JSON to this file.
        #[arg(long, value_name = "FILE")]
        summary_json: Option<PathBuf>,
        /// Start from a checkpoint or savepoint directory, or `latest` (the job's newest
        /// usable snapshot; a fresh start if it has none).
        #[arg(long, value_name = "PATH|latest")]
        from: Option<String>,
        /// Also serve this job's `/metrics`, read-only API and dashboard on this address while
        /// it runs (anything but loopback needs `--token` or WEIR_TOKEN).
        #[arg(long, value_name = "ADDR")]
        listen: Option<std::net::SocketAddr>,
        /// Bearer token clients of `--listen` must send.
        #[arg(long, env = "WEIR_TOKEN", hide_env_values = true)]
        token: Option<String>,
    },
    /// Take a savepoint of a running job and print where it was written: of a job on a
    /// `weir serve` (`weir savepoint ID`, or any argument with `--server`/WEIR_SERVER), or of
    /// a local `weir run` (`weir savepoint JOB.yaml`, signalled through its pid file).
    Savepoint {
        /// A job id on a server, or the job file of a local `weir run`.
        job: String,
        #[arg(long = "set", value_name = "KEY=VALUE")]
        overrides: Vec<Override>,
        /// Ask this `weir serve` (token from WEIR_TOKEN).
        #[arg(long, env = "WEIR_SERVER", value_name = "URL")]
        server: Option<String>,
        /// Stop the job once the savepoint is complete.
        #[arg(long)]
        stop: bool,
        /// Give up waiting after this long.
        #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
        timeout: std::time::Duration,
    },
    /// Host jobs behind an HTTP API and a live dashboard (http://127.0.0.1:8080 by default).
    Serve {
        /// Jobs to start with the server (a job the catalog already runs is resumed, not
        /// started twice).
        jobs: Vec<PathBuf>,
        /// Override a field of every job given here (as for `weir run`).
        #[arg(long = "set", value_name = "KEY=VALUE", value_parser = parse_override_text)]
        overrides: Vec<String>,
        /// Where the server keeps its jobs, so that a restarted server lists them and resumes
        /// those that were running: an SQLite file (default: `catalog.sqlite` under the data
        /// directory), `postgres://...`, or `none` to keep them in memory only.
        #[arg(long, value_name = "PATH|URL|none")]
        catalog: Option<String>,
        /// Address to listen on. Anything but loopback requires a token.
        #[arg(long, default_value = "127.0.0.1:8080")]
        listen: std::net::SocketAddr,
        /// Bearer token clients must send (required off loopback).
        #[arg(long, env = "WEIR_TOKEN", hide_env_values = true)]
        token: Option<String>,
        /// An endpoint submitted jobs may reach: an S3 endpoint (`http://minio:9000`, besides
        /// the server's own AWS_ENDPOINT), a Kafka broker (`kafka://broker:9092`), a NATS
        /// server (`nats://host:4222`) or a PostgreSQL host (`postgres://db:5432`); `*` allows
        /// any but link-local and metadata addresses. Repeatable.
        #[arg(long = "allow-endpoint", value_name = "URL")]
        allow_endpoints: Vec<String>,
        /// An environment variable submitted jobs may read as `${NAME}` (a password, a token);
        /// `PREFIX*` allows every variable with that prefix. Repeatable; by default none.
        #[arg(long = "allow-env", value_name = "NAME")]
        allow_env: Vec<String>,
        /// Be one server of a fleet: the URL the fleet's other servers reach this one at
        /// (`http://10.0.0.5:8080`). Needs a PostgreSQL `--catalog`, shared by every server of
        /// the fleet; jobs are placed on the least loaded server and move when one dies.
        #[arg(long, value_name = "URL")]
        advertise: Option<String>,
        /// In a fleet: how long a server's hold on a job lasts without renewal; a dead
        /// server's jobs move to the others after this.
        #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
        lease_ttl: std::time::Duration,
        #[command(flatten)]
        limits: serve::LimitArgs,
    },
    /// The servers of a fleet: `weir server list`, `weir server drain URL`.
    Server {
        #[command(subcommand)]
        command: ServerCommand,
    },
    /// Submit a job file to a `weir serve` and print its id.
    Submit {
        job: PathBuf,
        /// Override a field of the job (as for `weir run`); kept with the job.
        #[arg(long = "set", value_name = "KEY=VALUE", value_parser = parse_override_text)]
        overrides: Vec<String>,
        /// The parallelism of every node that does not set its own.
        #[arg(long)]
        parallelism: Option<u32>,
        /// Start from a snapshot of the job's checkpoint storage: `latest`, `sp-<id>`,
        /// `chk-<id>` or `final-<id>`.
        #[arg(long, value_name = "SNAPSHOT")]
        from: Option<String>,
        #[command(flatten)]
        server: client::ServerArgs,
    },
    /// Start a new run of an ended job on a `weir serve`, from a snapshot or from scratch.
    Restart {
        id: String,
        /// `latest`, `sp-<id>`, `chk-<id>`, `final-<id>`, or `none` (from scratch, the default).
        #[arg(long, value_name = "SNAPSHOT")]
        from: Option<String>,
        #[command(flatten)]
        server: client::ServerArgs,
    },
    /// Run a checkpointing job of a `weir serve` at another parallelism: a savepoint that
    /// stops it, then a new run from it at `parallelism`.
    Rescale {
        id: String,
        parallelism: u32,
        #[command(flatten)]
        server: client::ServerArgs,
    },
    /// List the jobs of a `weir serve`.
    Jobs {
        #[command(flatten)]
        server: client::ServerArgs,
    },
    /// Cancel a job on a `weir serve`: its sources end and in-flight records drain.
    Cancel {
        id: String,
        #[command(flatten)]
        server: client::ServerArgs,
    },
    /// Look up a running job's queryable state by key on a `weir serve` (token from
    /// WEIR_TOKEN): `weir state ID OPERATOR STATE --key K`.
    State(client::StateArgs),
    /// Check a job file and report every problem with its line, column and key.
    Validate {
        job: PathBuf,
        #[arg(long = "set", value_name = "KEY=VALUE")]
        overrides: Vec<Override>,
    },
    /// Print the plan of a job file: every operator with its keys, state and timers (a `sql`
    /// node shows as the operators it became).
    Explain {
        job: PathBuf,
        #[arg(long = "set", value_name = "KEY=VALUE")]
        overrides: Vec<Override>,
    },
    /// Print the JSON Schema of job files (for editors), or with `--markdown` its key tables.
    Schema {
        /// Print the key of every kind as Markdown tables (the book's reference pages) instead
        /// of the JSON Schema.
        #[arg(long)]
        markdown: bool,
        /// With `--markdown`: write each page into this directory (`job.md`, `sources.md`,
        /// `transforms.md`, `sinks.md`) instead of printing them.
        #[arg(long, value_name = "DIR", requires = "markdown")]
        out: Option<PathBuf>,
    },
    /// Nexmark tools.
    Nexmark {
        #[command(subcommand)]
        command: NexmarkCommand,
    },
    /// Run benchmarks and print tables (see BENCHMARKS.md).
    #[cfg(feature = "bench")]
    Bench(weir_bench::BenchArgs),
    /// Run benchmarks and print tables (see BENCHMARKS.md): not in this build (`make run`
    /// leaves them out; `make bench`, or cargo's default features, build them).
    #[cfg(not(feature = "bench"))]
    Bench {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
        args: Vec<String>,
    },
}

#[derive(Subcommand)]
enum NexmarkCommand {
    /// Write Nexmark events as JSON lines (the format of shared/nexmark/SCHEMA.md).
    Generate {
        /// Number of events.
        #[arg(long)]
        events: u64,
        /// Output file (written to a temporary file, then renamed into place).
        #[arg(long)]
        out: PathBuf,
        /// Generator seed.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Event time between events.
        #[arg(long, default_value = "100us", value_parser = humantime::parse_duration)]
        inter_event_delay: std::time::Duration,
    },
}

fn main() -> ExitCode {
    huge_pages_off();
    let cli = Cli::parse();
    init_logging();
    match cli.command {
        Command::Run {
            job,
            overrides,
            quiet,
            summary_json,
            from,
            listen,
            token,
        } => run::run(run::RunArgs {
            path: &job,
            overrides: &overrides,
            quiet,
            summary_json: summary_json.as_deref(),
            listen,
            token,
            from: from.map(|f| match f.as_str() {
                "latest" => RestoreFrom::Latest,
                path => RestoreFrom::Path(PathBuf::from(path)),
            }),
        }),
        Command::Savepoint {
            job,
            overrides,
            server,
            stop,
            timeout,
        } => {
            // A job file names a local `weir run`; anything else (or any `--server`) a job on
            // a server.
            let local = server.is_none() && std::path::Path::new(&job).is_file();
            if local {
                savepoint::savepoint(std::path::Path::new(&job), &overrides, stop, timeout)
            } else if server.is_none() && (job.ends_with(".yaml") || job.ends_with(".yml")) {
                eprintln!("error: no job file {job}");
                ExitCode::FAILURE
            } else if !overrides.is_empty() {
                eprintln!("error: `--set` applies to job files, not to jobs on a server");
                ExitCode::FAILURE
            } else {
                let server = server.unwrap_or_else(|| client::DEFAULT_SERVER.to_owned());
                client::savepoint(&server, &job, stop, timeout)
            }
        }
        Command::Serve {
            jobs,
            overrides,
            listen,
            token,
            allow_endpoints,
            allow_env,
            limits,
            catalog,
            advertise,
            lease_ttl,
        } => serve::serve(serve::ServeArgs {
            fleet: advertise.map(|advertise| weir_http_ui::fleet::FleetConfig {
                advertise,
                lease_ttl,
            }),
            listen,
            token,
            limits: limits.into(),
            jobs,
            overrides,
            allow_endpoints,
            catalog: match catalog.as_deref() {
                Some("none") => None,
                Some(text) => Some(weir_http_ui::catalog::CatalogConfig::parse(text)),
                None => Some(weir_http_ui::catalog::CatalogConfig::default_sqlite()),
            },
            allow_env,
        }),
        Command::Submit {
            job,
            overrides,
            parallelism,
            from,
            server,
        } => client::submit(
            &server,
            &job,
            &client::SubmitArgs {
                overrides,
                parallelism,
                from,
            },
        ),
        Command::Restart { id, from, server } => client::restart(&server, &id, from.as_deref()),
        Command::Rescale {
            id,
            parallelism,
            server,
        } => client::rescale(&server, &id, parallelism),
        Command::Jobs { server } => client::jobs(&server),
        Command::Server {
            command: ServerCommand::List { server },
        } => client::fleet(&server),
        Command::Server {
            command: ServerCommand::Drain { url },
        } => client::drain(&url),
        Command::Cancel { id, server } => client::cancel(&server, &id),
        Command::State(args) => client::state(&args),
        Command::Validate { job, overrides } => validate(&job, &overrides),
        Command::Explain { job, overrides } => explain(&job, &overrides),
        Command::Schema { markdown, out } => schema(markdown, out.as_deref()),
        Command::Nexmark {
            command:
                NexmarkCommand::Generate {
                    events,
                    out,
                    seed,
                    inter_event_delay,
                },
        } => generate(events, &out, seed, inter_event_delay),
        #[cfg(feature = "bench")]
        Command::Bench(args) => weir_bench::run(args),
        #[cfg(not(feature = "bench"))]
        Command::Bench { .. } => {
            eprintln!(
                "error: this weir was built without its benchmarks (the `bench` feature, which \
                 `make run` leaves out): build them with `make bench`, or `cargo build --release`"
            );
            ExitCode::FAILURE
        }
    }
}

/// Logs go to standard error, filtered by `RUST_LOG` (default: warnings, and weir's info),
/// with the secrets of the jobs this process runs (`weir run`) or hosts (`weir serve`) masked
/// in every line. A second layer copies each hosted job's warnings and errors (and its `info`
/// lines while someone asks) into the job's own log for the API ([`weir_http_ui::logs`]):
/// it has its own filter, so `RUST_LOG` quietens the terminal, not a job's Logs tab.
fn init_logging() {
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(weir_http_ui::redact::MaskedStderr::default)
                .with_filter(filter),
        )
        .with(
            weir_http_ui::logs::JobLogLayer
                .with_filter(tracing_subscriber::filter::LevelFilter::INFO),
        )
        .init();
}

/// `weir schema`: the JSON Schema of job files, or (`--markdown`) the book's reference pages.
fn schema(markdown: bool, out: Option<&std::path::Path>) -> ExitCode {
    let schema = weir_runtime::spec::json_schema();
    if !markdown {
        return match serde_json::to_string_pretty(&schema) {
            Ok(s) => {
                println!("{s}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let pages = match reference::pages(&schema) {
        Ok(pages) => pages,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let Some(dir) = out else {
        print!("{}", reference::joined(&pages));
        return ExitCode::SUCCESS;
    };
    if let Err(e) = std::fs::create_dir_all(dir) {
        eprintln!("error: cannot create {}: {e}", dir.display());
        return ExitCode::FAILURE;
    }
    for page in &pages {
        let path = dir.join(&page.file);
        if let Err(e) = std::fs::write(&path, &page.text) {
            eprintln!("error: cannot write {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}

fn validate(job: &std::path::Path, overrides: &[Override]) -> ExitCode {
    // Its problems may quote a secret (`parallelism: *password`).
    let _secrets = run::job_secrets(job, overrides);
    let checked = weir_runtime::plan::check_file(job, overrides);
    match checked {
        Ok(plan) => {
            println!(
                "{} is valid: job `{}` with {} nodes",
                job.display(),
                plan.name(),
                plan.nodes.len()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            run::say!("{e}");
            ExitCode::FAILURE
        }
    }
}

fn explain(job: &std::path::Path, overrides: &[Override]) -> ExitCode {
    let _secrets = run::job_secrets(job, overrides);
    match weir_runtime::plan::check_file(job, overrides) {
        Ok(plan) => {
            print!("{}", plan.explain());
            ExitCode::SUCCESS
        }
        Err(e) => {
            run::say!("{e}");
            ExitCode::FAILURE
        }
    }
}

fn generate(events: u64, out: &std::path::Path, seed: u64, delay: std::time::Duration) -> ExitCode {
    use weir_runtime::connectors::nexmark::{Generator, GeneratorConfig, write_file};
    let config = GeneratorConfig {
        seed,
        inter_event_delay_ns: u64::try_from(delay.as_nanos()).unwrap_or(u64::MAX),
        ..GeneratorConfig::default()
    };
    let started = std::time::Instant::now();
    match write_file(&Generator::new(config), events, out) {
        Ok(()) => {
            eprintln!(
                "wrote {events} events to {} in {:.2} s",
                out.display(),
                started.elapsed().as_secs_f64()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: writing {}: {e}", out.display());
            ExitCode::FAILURE
        }
    }
}

/// A `--set` given as text, checked as `weir run` checks it.
fn parse_override_text(text: &str) -> Result<String, String> {
    text.parse::<Override>()?;
    Ok(text.to_owned())
}
