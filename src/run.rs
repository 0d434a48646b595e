//! `weir run`: one job in this process, with a progress bar and a summary.

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use weir_runtime::exec::job::{self, JobSummary};
use weir_runtime::exec::message::{BEGINNING_OF_TIME, END_OF_TIME};
use weir_runtime::exec::metrics::{JobMetrics, NodeRole};
use weir_runtime::spec::load::Override;

pub fn run(
    path: &Path,
    overrides: &[Override],
    quiet: bool,
    summary_json: Option<&Path>,
) -> ExitCode {
    let plan = match weir_runtime::plan::check_file(path, overrides) {
        Ok(plan) => plan,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async move {
        let running = match job::start(&plan) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        };
        let metrics = running.metrics();
        let stopper = running.stopper();
        // Ctrl-C once: stop the sources and drain; twice: exit at once.
        let signals = tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                eprintln!("\nstopping: sources end, in-flight records drain, sinks flush (Ctrl-C again to abort)");
                stopper.cancel();
                if tokio::signal::ctrl_c().await.is_ok() {
                    std::process::exit(130);
                }
            }
        });
        let progress = (!quiet).then(|| Progress::start(metrics.clone()));
        let result = running.wait().await;
        signals.abort();
        if let Some(p) = progress {
            p.finish().await;
        }
        match result {
            Ok(summary) => {
                eprint!("{}", render_summary(&summary));
                if let Some(file) = summary_json {
                    let written = serde_json::to_vec_pretty(&summary)
                        .map_err(std::io::Error::other)
                        .and_then(|bytes| std::fs::write(file, bytes));
                    if let Err(e) = written {
                        eprintln!("error: writing {}: {e}", file.display());
                        return ExitCode::FAILURE;
                    }
                }
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        }
    })
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

/// 1234567 → "1,234,567".
pub fn group(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

pub fn render_summary(s: &JobSummary) -> String {
    let secs = s.elapsed.as_secs_f64();
    let mut out = format!(
        "job `{}` finished in {:.2} s: {} events, {} events/s\n",
        s.job,
        secs,
        group(s.events),
        group(s.events_per_second() as u64)
    );
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
