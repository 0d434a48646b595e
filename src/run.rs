//! `weir run`: one job in this process, with a progress bar and a summary.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tokio_util::sync::CancellationToken;
use weir_http_ui::redact::Secrets;
use weir_runtime::api::{BEGINNING_OF_TIME, END_OF_TIME};
use weir_runtime::api::{JobMetrics, NodeRole};
use weir_runtime::exec::job::{self, JobControl, JobOptions, JobSummary};
use weir_runtime::exec::restore::RestoreFrom;
use weir_runtime::spec::load::Override;

/// `eprintln!` with the secrets of the jobs this process runs masked ([`job_secrets`]), as
/// its log lines are masked by [`weir_http_ui::redact::MaskedStderr`].
macro_rules! say {
    ($($arg:tt)*) => {
        eprintln!("{}", weir_http_ui::redact::registry().mask(&format!($($arg)*)))
    };
}
pub(crate) use say;

/// The secrets of the job at `path` with `overrides`, collected as `weir serve` collects a
/// submitted job's (the values of keys naming a password, secret, token or credential, aliases
/// expanded, and the passwords of connection strings) and registered, so that this process's
/// log lines and messages ([`say!`]) mask them for as long as the handle lives. A file that
/// cannot be read or parsed has none to find; the check that follows reports why.
pub fn job_secrets(path: &Path, overrides: &[Override]) -> Arc<Secrets> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    weir_http_ui::redact::registry().register(Secrets::of_job(&text, overrides))
}

/// What `weir run` was asked to do.
pub struct RunArgs<'a> {
    pub path: &'a Path,
    pub overrides: &'a [Override],
    pub quiet: bool,
    pub summary_json: Option<&'a Path>,
    pub from: Option<RestoreFrom>,
    /// Serve the job's `/metrics` and read-only dashboard here while it runs.
    pub listen: Option<std::net::SocketAddr>,
    pub token: Option<String>,
}

/// The multi-threaded runtime `weir run` and `weir serve` run on; `None` (reported) when the
/// system refuses one.
pub fn runtime() -> Option<tokio::runtime::Runtime> {
    match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => Some(rt),
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            None
        }
    }
}

pub fn run(args: RunArgs<'_>) -> ExitCode {
    // Before anything can print or log a value of the job.
    let _secrets = job_secrets(args.path, args.overrides);
    let plan = match weir_runtime::plan::check_file(args.path, args.overrides) {
        Ok(plan) => plan,
        Err(e) => {
            say!("{e}");
            return ExitCode::FAILURE;
        }
    };
    let Some(runtime) = crate::run::runtime() else {
        return ExitCode::FAILURE;
    };
    let checkpointing = plan.spec.checkpoint.enabled();
    // One process, one running copy of a checkpointed job: two would share (and fight over)
    // its checkpoint directory.
    let _pid = if checkpointing {
        match PidFile::acquire(plan.name()) {
            Ok(p) => Some(p),
            Err(e) => {
                say!("error: {e}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        None
    };
    let scheduler = if checkpointing {
        match weir_scheduler::Scheduler::dedicated(weir_scheduler::SchedulerConfig::default()) {
            Ok(s) => Some(Arc::new(s)),
            Err(e) => {
                say!("error: cannot start the checkpoint scheduler: {e}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        None
    };
    let options = JobOptions {
        from: args.from,
        scheduler,
        guard: None,
        fence: None,
    };
    runtime.block_on(async move {
        // The run's log lines also go to its own log, which `--listen` serves.
        let log = weir_http_ui::logs::JobLog::new();
        let running =
            match tracing::Instrument::instrument(job::start(&plan, options), log.span()).await {
                Ok(r) => r,
                Err(e) => {
                    say!("error: {e}");
                    return ExitCode::FAILURE;
                }
            };
        let watcher = match args.listen {
            None => None,
            Some(listen) => {
                let config = weir_http_ui::ServeConfig {
                    listen,
                    token: args.token.clone(),
                    ..weir_http_ui::ServeConfig::default()
                };
                let text = std::fs::read_to_string(args.path).unwrap_or_default();
                match weir_http_ui::Watcher::start(config, text, plan.clone(), &running, log).await
                {
                    Ok(w) => {
                        eprintln!(
                            "serving the job's /metrics and dashboard at http://{}/ (read-only)",
                            w.addr()
                        );
                        Some(w)
                    }
                    Err(e) => {
                        eprintln!("error: --listen {listen}: {e}");
                        running.stopper().cancel();
                        let _ = running.wait().await;
                        return ExitCode::FAILURE;
                    }
                }
            }
        };
        let metrics = running.metrics();
        let signals = tokio::spawn(handle_signals(running.stopper(), running.control()));
        let progress = (!args.quiet).then(|| Progress::start(metrics.clone()));
        let result = running.wait().await;
        signals.abort();
        let _ = signals.await;
        if let Some(p) = progress {
            p.finish().await;
        }
        if let Some(w) = watcher {
            let outcome = match &result {
                Ok(summary) => Ok(summary.clone()),
                Err(e) => Err(e.to_string()),
            };
            if let Err(e) = w.ended(outcome).await {
                eprintln!("warning: stopping the dashboard: {e}");
            }
        }
        match result {
            Ok(summary) => {
                say!("{}", render_summary(&summary).trim_end());
                if let Some(file) = args.summary_json {
                    let written = serde_json::to_vec_pretty(&summary)
                        .map_err(std::io::Error::other)
                        .and_then(|bytes| std::fs::write(file, bytes));
                    if let Err(e) = written {
                        say!("error: writing {}: {e}", file.display());
                        return ExitCode::FAILURE;
                    }
                }
                ExitCode::SUCCESS
            }
            Err(e) => {
                say!("error: {e}");
                ExitCode::FAILURE
            }
        }
    })
}

/// Ctrl-C stops the job: with a savepoint when it checkpoints (its path is printed; resume
/// with `--from`), otherwise by draining. A second Ctrl-C exits at once. `SIGUSR1` takes a
/// savepoint and `SIGUSR2` stops with one (what `weir savepoint` sends).
async fn handle_signals(stopper: CancellationToken, control: JobControl) {
    use futures::StreamExt;
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut usr1), Ok(mut usr2)) = (
        signal(SignalKind::user_defined1()),
        signal(SignalKind::user_defined2()),
    ) else {
        say!(
            "warning: cannot listen for SIGUSR1/SIGUSR2: `weir savepoint` will not reach this job"
        );
        return;
    };
    let mut savepoints = futures::stream::FuturesUnordered::new();
    let mut interrupted = false;
    loop {
        tokio::select! {
            r = tokio::signal::ctrl_c() => {
                if r.is_err() || interrupted {
                    std::process::exit(130);
                }
                interrupted = true;
                if control.checkpoints() {
                    say!("\nstopping with a savepoint (Ctrl-C again to abort)");
                    savepoints.push(savepoint(control.clone(), true, stopper.clone()));
                } else {
                    say!("\nstopping: sources end, in-flight records drain, sinks flush (Ctrl-C again to abort)");
                    stopper.cancel();
                }
            }
            Some(()) = usr1.recv() => savepoints.push(savepoint(control.clone(), false, stopper.clone())),
            Some(()) = usr2.recv() => savepoints.push(savepoint(control.clone(), true, stopper.clone())),
            Some(()) = savepoints.next(), if !savepoints.is_empty() => {}
        }
    }
}

fn savepoint(
    control: JobControl,
    stop: bool,
    stopper: CancellationToken,
) -> futures::future::BoxFuture<'static, ()> {
    Box::pin(async move {
        match control.savepoint(stop).await {
            Ok(done) => say!(
                "\nsavepoint {} written to {}",
                done.metadata.id,
                done.location
            ),
            Err(e) => {
                say!("\nerror: savepoint failed: {e}");
                if stop {
                    say!("stopping without one: the next run resumes from the latest checkpoint");
                    stopper.cancel();
                }
            }
        }
    })
}

/// `{data dir}/run/<job>.pid`: which process runs a checkpointed job, held under an exclusive
/// `flock` for as long as the job runs. The lock, not the file's presence or a pid that may have
/// been reused, says whether the job runs: two `weir run`s of one job cannot both take it (the
/// old check-then-write let both pass), and a process that died (SIGKILL) let go of it with
/// its file descriptors, so its file is simply taken over. Removed on a clean exit.
pub struct PidFile {
    path: PathBuf,
    /// Held until drop; closing the file releases the lock.
    _lock: nix::fcntl::Flock<std::fs::File>,
}

/// Whether the lock on an open pid file could be taken: no, yes, or the file went away.
enum Locked {
    /// Another process holds it.
    Busy(std::fs::File),
    Held(nix::fcntl::Flock<std::fs::File>),
}

impl PidFile {
    pub fn path_of(job: &str) -> PathBuf {
        weir_runtime::spec::paths::data_dir()
            .join("run")
            .join(format!("{}.pid", weir_runtime::spec::paths::safe_name(job)))
    }

    /// Tries the lock of the pid file at `path`, open as `file`, without waiting.
    fn try_lock(file: std::fs::File, path: &Path) -> Result<Locked, String> {
        use nix::fcntl::{Flock, FlockArg};
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(held) => Ok(Locked::Held(held)),
            Err((file, nix::errno::Errno::EWOULDBLOCK)) => Ok(Locked::Busy(file)),
            Err((_, e)) => Err(format!("locking {}: {e}", path.display())),
        }
    }

    /// The process running `job`, if one is: the pid in a file whose lock another process holds.
    pub fn running(job: &str) -> Option<i32> {
        use std::io::{Read, Seek};
        let path = Self::path_of(job);
        let file = std::fs::File::open(&path).ok()?;
        let Ok(Locked::Busy(mut file)) = Self::try_lock(file, &path) else {
            return None;
        };
        // The holder writes its pid right after taking the lock: give it a moment.
        for _ in 0..50 {
            let mut text = String::new();
            let pid = file
                .rewind()
                .and_then(|()| file.read_to_string(&mut text))
                .ok()
                .and_then(|_| text.trim().parse::<i32>().ok());
            if let Some(pid) = pid {
                return (pid != std::process::id() as i32).then_some(pid);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        None
    }

    fn acquire(job: &str) -> Result<Self, String> {
        use std::io::Write;
        use std::os::unix::fs::MetadataExt;
        let path = Self::path_of(job);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        }
        // A holder that exits removes the file after we opened it, so the lock we then get is
        // on a file no one else can find: check that the path still names what we locked.
        for _ in 0..10 {
            let file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&path)
                .map_err(|e| format!("opening {}: {e}", path.display()))?;
            let mut held = match Self::try_lock(file, &path)? {
                Locked::Held(held) => held,
                Locked::Busy(_) => {
                    let by = Self::running(job)
                        .map_or_else(|| "another process".to_string(), |p| format!("process {p}"));
                    return Err(format!(
                        "job `{job}` is already running as {by} ({}); stop it first",
                        path.display()
                    ));
                }
            };
            let same = match (held.metadata(), std::fs::metadata(&path)) {
                (Ok(ours), Ok(named)) => ours.dev() == named.dev() && ours.ino() == named.ino(),
                _ => false,
            };
            if !same {
                continue;
            }
            held.set_len(0)
                .and_then(|()| held.write_all(std::process::id().to_string().as_bytes()))
                .map_err(|e| format!("writing {}: {e}", path.display()))?;
            return Ok(Self { path, _lock: held });
        }
        Err(format!(
            "{} keeps being replaced while it is locked; is another weir starting the job?",
            path.display()
        ))
    }
}

impl Drop for PidFile {
    fn drop(&mut self) {
        // Removed while still locked (the lock goes after, with the file): a process that opens
        // it in between finds it gone on its check and opens the path again.
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A progress bar on standard error, refreshed from the job's metrics.
struct Progress {
    bar: ProgressBar,
    ticker: tokio::task::JoinHandle<()>,
}

impl Progress {
    fn start(metrics: Arc<JobMetrics>) -> Self {
        let (_, total) = metrics.progress();
        let bar = match total {
            Some(t) => ProgressBar::new(t).with_style(
                ProgressStyle::with_template(
                    "{spinner} [{elapsed_precise}] [{bar:30}] {percent:>3}% {msg}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
            ),
            None => ProgressBar::new_spinner().with_style(
                ProgressStyle::with_template("{spinner} [{elapsed_precise}] {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            ),
        };
        bar.set_draw_target(ProgressDrawTarget::stderr_with_hz(5));
        let b = bar.clone();
        let ticker = tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(200));
            let mut last = (0u64, std::time::Instant::now());
            let mut rate = 0.0;
            loop {
                tick.tick().await;
                let events = metrics.events();
                let now = std::time::Instant::now();
                let dt = now.duration_since(last.1).as_secs_f64();
                if dt > 0.5 {
                    rate = (events - last.0) as f64 / dt;
                    last = (events, now);
                }
                let (done, _) = metrics.progress();
                b.set_position(done);
                b.set_message(format!(
                    "{} events, {}/s, watermark {}",
                    group(events),
                    group(rate as u64),
                    watermark(metrics.watermark())
                ));
            }
        });
        Self { bar, ticker }
    }

    async fn finish(self) {
        self.ticker.abort();
        let _ = self.ticker.await;
        self.bar.finish_and_clear();
    }
}

fn watermark(w: i64) -> String {
    match w {
        BEGINNING_OF_TIME => "none yet".into(),
        END_OF_TIME => "end of input".into(),
        ms => utc(ms),
    }
}

/// Epoch ms as `YYYY-MM-DD hh:mm:ss.mmm` (UTC).
fn utc(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%d %H:%M:%S%.3f").to_string())
        .unwrap_or_else(|| format!("{ms} ms"))
}

pub use weir_runtime::config::units::group;

pub fn render_summary(s: &JobSummary) -> String {
    let secs = s.elapsed.as_secs_f64();
    let mut out = format!(
        "job `{}` finished in {:.2} s: {} events, {} events/s\n",
        s.job,
        secs,
        group(s.events),
        group(s.events_per_second() as u64)
    );
    if let Some(from) = &s.restored_from {
        out.push_str(&format!("  restored from {from}\n"));
    }
    if let Some(r) = &s.restore {
        let st = &r.stats;
        out.push_str(&format!(
            "  read {} operator states from {} files: {} requests, {} seeks ({} skipped), {}\n",
            st.ranges,
            st.files,
            st.requests,
            st.seeks_performed,
            st.seeks_skipped,
            humantime::format_duration(Duration::from_micros(st.elapsed_us)),
        ));
    }
    if s.restarts > 0 {
        out.push_str(&format!(
            "  restarted {} times after failures\n",
            s.restarts
        ));
    }
    if s.checkpoints > 0 {
        out.push_str(&format!(
            "  {} checkpoints completed\n",
            group(s.checkpoints)
        ));
    }
    if let Some(snapshot) = &s.snapshot {
        out.push_str(&format!("  snapshot: {snapshot}\n"));
    }
    let width = s
        .nodes
        .iter()
        .map(|n| n.name.len())
        .max()
        .unwrap_or(4)
        .max(4);
    let kinds = s
        .nodes
        .iter()
        .map(|n| n.kind.len())
        .max()
        .unwrap_or(4)
        .max(4);
    out.push_str(&format!(
        "  {:width$}  {:kinds$}  {:>3}  {:>14}  {:>14}  {:>10}\n",
        "node", "kind", "p", "records in", "records out", "blocked"
    ));
    for n in &s.nodes {
        let input = if n.role == NodeRole::Source {
            "-".to_string()
        } else {
            group(n.records_in)
        };
        let output = if n.role == NodeRole::Sink {
            "-".to_string()
        } else {
            group(n.records_out)
        };
        out.push_str(&format!(
            "  {:width$}  {:kinds$}  {:>3}  {:>14}  {:>14}  {:>9.2}s\n",
            n.name,
            n.kind,
            n.parallelism,
            input,
            output,
            n.backpressure.as_secs_f64()
        ));
        if n.skipped > 0 {
            out.push_str(&format!(
                "  {:width$}  ({} records skipped)\n",
                "",
                group(n.skipped)
            ));
        }
        if n.late_dropped > 0 {
            out.push_str(&format!(
                "  {:width$}  ({} late records dropped)\n",
                "",
                group(n.late_dropped)
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_grouped_by_thousands() {
        assert_eq!(group(0), "0");
        assert_eq!(group(999), "999");
        assert_eq!(group(1000), "1,000");
        assert_eq!(group(1234567), "1,234,567");
    }

    #[test]
    fn watermarks_print_as_utc_times() {
        assert_eq!(utc(1_700_000_000_000), "2023-11-14 22:13:20.000");
        assert_eq!(utc(0), "1970-01-01 00:00:00.000");
        assert_eq!(watermark(END_OF_TIME), "end of input");
    }
}
