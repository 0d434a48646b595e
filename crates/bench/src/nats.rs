//! `weir bench nats`: the NATS source beside the JSON-lines file source on the same events,
//! and the end-to-end latency from publish to the output stream, at least once and exactly
//! once.
//!
//! Without `--servers` it starts a `nats-server -js` of its own with `scripts/nats-server.sh`
//! (run from the repository's root, as `make bench` does), its store under `--data`, so the
//! throughput stream (about 0.3 GB for 1,000,000 events) is filled once and kept between runs
//! without filling the machine's own server.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use async_nats::jetstream;
use clap::Args;
use futures::StreamExt;
use weir_runtime::spec::load::Override;

use crate::measure::{Sample, ensure_jsonl, group, median, run_with};

#[derive(Args)]
pub struct BenchNatsArgs {
    /// A NATS server with JetStream to use (`host:port`); leave out to start one for the
    /// benchmark.
    #[arg(long)]
    servers: Option<String>,
    /// Nexmark events in the throughput stream (and file).
    #[arg(long, default_value_t = 1_000_000)]
    events: u64,
    /// Partitions of the benchmark's streams (subjects `<stream>.<p>`).
    #[arg(long, default_value_t = 4)]
    partitions: u32,
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    parallelism: Vec<u32>,
    /// Runs per arm of the throughput table (the median is reported).
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Events per second published while latency is measured.
    #[arg(long, default_value_t = 50_000)]
    rate: u64,
    /// How long latency is measured per arm (after a warm-up of a quarter of it).
    #[arg(long, default_value = "20s", value_parser = humantime::parse_duration)]
    latency_for: Duration,
    /// Where the job files live.
    #[arg(long, default_value = "jobs")]
    jobs: PathBuf,
    #[arg(long, default_value = "data/bench")]
    data: PathBuf,
}

/// A server the benchmark started, stopped when dropped.
struct OwnServer {
    dir: PathBuf,
}

impl OwnServer {
    fn start(dir: &Path) -> anyhow::Result<(Self, String)> {
        let dir = dir.to_path_buf();
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        std::fs::create_dir_all(&dir)?;
        script(&["start", &dir.display().to_string(), &port.to_string()])?;
        Ok((Self { dir }, format!("127.0.0.1:{port}")))
    }
}

impl Drop for OwnServer {
    fn drop(&mut self) {
        let _ = script(&["stop", &self.dir.display().to_string()]);
    }
}

fn script(args: &[&str]) -> anyhow::Result<()> {
    let out = std::process::Command::new("scripts/nats-server.sh")
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| {
            anyhow::anyhow!("running scripts/nats-server.sh (from the repository root): {e}")
        })?;
    anyhow::ensure!(
        out.status.success(),
        "scripts/nats-server.sh {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

async fn context(servers: &str) -> anyhow::Result<jetstream::Context> {
    let client = async_nats::connect(servers).await?;
    Ok(jetstream::new(client))
}

/// Makes stream `name` (subjects `<name>.>`), or keeps it when it exists.
async fn ensure_stream(js: &jetstream::Context, name: &str) -> anyhow::Result<u64> {
    let mut stream = js
        .get_or_create_stream(jetstream::stream::Config {
            name: name.to_owned(),
            subjects: vec![format!("{name}.>")],
            duplicate_window: Duration::from_secs(120),
            ..Default::default()
        })
        .await?;
    Ok(stream.info().await?.state.messages)
}

/// Publishes `payload` to `subject`; at most `window` acknowledgements are awaited at once.
struct Publisher {
    js: jetstream::Context,
    acks: futures::stream::FuturesUnordered<
        futures::future::BoxFuture<
            'static,
            Result<jetstream::publish::PublishAck, jetstream::context::PublishError>,
        >,
    >,
    window: usize,
}

impl Publisher {
    fn new(js: jetstream::Context, window: usize) -> Self {
        Self {
            js,
            acks: futures::stream::FuturesUnordered::new(),
            window,
        }
    }

    async fn publish(&mut self, subject: String, payload: String) -> anyhow::Result<()> {
        let ack = self.js.publish(subject, payload.into()).await?;
        self.acks.push(std::future::IntoFuture::into_future(ack));
        while self.acks.len() >= self.window {
            if let Some(ack) = self.acks.next().await {
                ack?;
            }
        }
        Ok(())
    }

    async fn flush(&mut self) -> anyhow::Result<()> {
        while let Some(ack) = self.acks.next().await {
            ack?;
        }
        Ok(())
    }
}

/// A `jobs/nexmark/q1-jsonl.yaml` reading `stream` instead of its file.
fn nats_q1(
    jobs: &Path,
    servers: &str,
    stream: &str,
    partitions: u32,
    dir: &Path,
) -> anyhow::Result<PathBuf> {
    let text = std::fs::read_to_string(jobs.join("nexmark/q1-jsonl.yaml"))?;
    let file_source = "    kind: jsonl\n    path: data/nexmark.jsonl\n";
    anyhow::ensure!(
        text.contains(file_source),
        "q1-jsonl.yaml: the file source moved"
    );
    let text = text.replace(
        file_source,
        &format!(
            "    kind: nats\n    servers: {servers}\n    stream: {stream}\n    subjects: \
             '{stream}.{{partition}}'\n    partitions: {partitions}\n    stop-at: end\n"
        ),
    );
    let path = dir.join("nats-q1.yaml");
    std::fs::write(&path, text)?;
    Ok(path)
}

pub fn run(b: BenchNatsArgs) -> anyhow::Result<()> {
    std::fs::create_dir_all(&b.data)?;
    let server = |name: &str| -> anyhow::Result<(Option<OwnServer>, String)> {
        Ok(match &b.servers {
            Some(s) => (None, s.clone()),
            None => {
                let (own, servers) = OwnServer::start(&b.data.join(name))?;
                (Some(own), servers)
            }
        })
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    {
        let (_own, servers) = server("nats-throughput")?;
        throughput(&b, &runtime, &servers)?;
    }
    println!();
    let (_own, servers) = server("nats-latency")?;
    latency(&b, &runtime, &servers)
}

fn throughput(
    b: &BenchNatsArgs,
    runtime: &tokio::runtime::Runtime,
    servers: &str,
) -> anyhow::Result<()> {
    let file = ensure_jsonl(&b.data, b.events)?;
    let stream = format!("weir-bench-nexmark-{}-{}", b.events, b.partitions);
    runtime.block_on(async {
        let js = context(servers).await?;
        if ensure_stream(&js, &stream).await? != b.events {
            js.delete_stream(&stream).await?;
            ensure_stream(&js, &stream).await?;
            let t0 = Instant::now();
            let text = std::fs::read_to_string(&file)?;
            let mut publisher = Publisher::new(js.clone(), 4096);
            for (i, line) in text.lines().enumerate() {
                let p = i as u64 % u64::from(b.partitions);
                publisher
                    .publish(format!("{stream}.{p}"), line.to_owned())
                    .await?;
            }
            publisher.flush().await?;
            eprintln!(
                "filled {stream} with {} events in {:.1} s",
                group(b.events),
                t0.elapsed().as_secs_f64()
            );
        }
        anyhow::Ok(())
    })?;
    let q1_file = b.jobs.join("nexmark/q1-jsonl.yaml");
    let q1_nats = nats_q1(&b.jobs, servers, &stream, b.partitions, &b.data)?;
    println!(
        "Nexmark q1 over the same {} events: from a JSON-lines file and from a NATS JetStream \
         stream of {} partitions ({servers}), blackhole sink; median of {} runs per arm, arms \
         interleaved; events/s per core = events / CPU seconds of the weir process (the NATS \
         server's CPU is not counted).",
        group(b.events),
        b.partitions,
        b.runs
    );
    println!();
    println!(
        "| p | file events/s | file events/s per core | NATS events/s | NATS events/s per core | NATS / file | per core: NATS / file |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for &p in &b.parallelism {
        let mut file_runs: Vec<Sample> = Vec::new();
        let mut nats_runs: Vec<Sample> = Vec::new();
        for _ in 0..b.runs.max(1) {
            let o: Vec<Override> = [
                format!("sources.nexmark.path={}", file.display()),
                format!("parallelism={p}"),
            ]
            .iter()
            .map(|s| s.parse().map_err(anyhow::Error::msg))
            .collect::<Result<_, _>>()?;
            file_runs.push(run_with(runtime, &q1_file, &o, Default::default())?.0);
            let o: Vec<Override> = [format!("parallelism={p}")]
                .iter()
                .map(|s| s.parse().map_err(anyhow::Error::msg))
                .collect::<Result<_, _>>()?;
            let (sample, _) = run_with(runtime, &q1_nats, &o, Default::default())?;
            anyhow::ensure!(
                sample.events == b.events,
                "the NATS run read {} events, not {}",
                sample.events,
                b.events
            );
            nats_runs.push(sample);
        }
        let rate = |s: &[Sample]| median(s.iter().map(Sample::rate).collect());
        let core = |s: &[Sample]| median(s.iter().map(Sample::per_core).collect());
        let (fr, nr) = (rate(&file_runs), rate(&nats_runs));
        // The target is per CPU second of weir: the last column.
        let (fc, nc) = (core(&file_runs), core(&nats_runs));
        println!(
            "| {p} | {} | {} | {} | {} | {:.2}× | {:.2}× |",
            group(fr as u64),
            group(fc as u64),
            group(nr as u64),
            group(nc as u64),
            nr / fr,
            nc / fc
        );
    }
    Ok(())
}

fn now_micros() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

/// Publish → the row's message in the output stream, through a pass-through job, per
/// delivery.
fn latency(
    b: &BenchNatsArgs,
    runtime: &tokio::runtime::Runtime,
    servers: &str,
) -> anyhow::Result<()> {
    println!(
        "End-to-end latency at {} events/s ({} partitions, parallelism 1): from the publish of \
         an event to a consumer of the output stream receiving its row, through a NATS → map → \
         NATS job; {} measured per arm after a warm-up of a quarter of it. Exactly once \
         publishes a checkpoint's rows when the checkpoint completes, so its latency is bound \
         to the checkpoint interval.",
        group(b.rate),
        b.partitions,
        humantime::format_duration(b.latency_for)
    );
    println!();
    println!(
        "| delivery | checkpoints | rows | p50 ms | p99 ms | max ms | p50 over the interval | stored p50 ms |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|");
    let stamp = std::process::id();
    let arms: [(&str, Option<Duration>); 2] = [
        ("at-least-once", None),
        ("exactly-once", Some(Duration::from_secs(1))),
    ];
    for (arm, (delivery, interval)) in arms.into_iter().enumerate() {
        let input = format!("weir-bench-latency-in-{stamp}-{arm}");
        let output = format!("weir-bench-latency-out-{stamp}-{arm}");
        runtime.block_on(async {
            let js = context(servers).await?;
            ensure_stream(&js, &input).await?;
            ensure_stream(&js, &output).await?;
            anyhow::Ok(())
        })?;
        let job = b.data.join(format!("nats-latency-{arm}.yaml"));
        let checkpoint = match interval {
            Some(i) => format!(
                "checkpoint:\n  interval: {}\n  timeout: 30s\n  storage: {}\n",
                humantime::format_duration(i),
                b.data.join("nats-latency-checkpoints").display()
            ),
            None => String::new(),
        };
        std::fs::write(
            &job,
            format!(
                "name: nats-latency-{stamp}-{arm}\n{checkpoint}sources:\n  in:\n    kind: nats\n    \
                 servers: {servers}\n    stream: {input}\n    subjects: '{input}.{{partition}}'\n    \
                 partitions: {}\n    start-from: new\n    schema: {{id: int, sent: int}}\n\
                 transforms:\n  pass:\n    kind: map\n    from: in\n    columns: {{id: id, sent: \
                 sent}}\nsinks:\n  out:\n    kind: nats\n    from: pass\n    servers: {servers}\n    \
                 subject: {output}.rows\n    stream: {output}\n    delivery: {delivery}\n",
                b.partitions
            ),
        )?;
        let measured = measure_latency(b, runtime, servers, &job, &input, &output);
        runtime.block_on(async {
            if let Ok(js) = context(servers).await {
                let _ = js.delete_stream(&input).await;
                let _ = js.delete_stream(&output).await;
            }
        });
        let (rows, mut latencies, mut stored) = match measured {
            Ok(measured) => measured,
            Err(e) => {
                println!("| {delivery} | – | – | failed: {e} | | | | |");
                continue;
            }
        };
        latencies.sort_unstable();
        let pick = |q: f64| {
            latencies
                .get(((latencies.len() as f64 * q) as usize).min(latencies.len().saturating_sub(1)))
                .map_or(f64::NAN, |us| *us as f64 / 1000.0)
        };
        let (p50, p99, max) = (pick(0.5), pick(0.99), pick(1.0));
        stored.sort_unstable();
        let stored_p50 = stored
            .get(stored.len() / 2)
            .map_or(f64::NAN, |us| *us as f64 / 1000.0);
        let over = match interval {
            Some(i) => format!("{:+.0} ms", p50 - i.as_secs_f64() * 1000.0),
            None => "–".into(),
        };
        println!(
            "| {delivery} | {} | {} | {p50:.1} | {p99:.1} | {max:.1} | {over} | {stored_p50:.1} |",
            interval.map_or("none".to_string(), |i| format!(
                "every {}",
                humantime::format_duration(i)
            )),
            group(rows)
        );
    }
    Ok(())
}

/// Runs `job` while publishing `{id, sent}` events at the benchmark's rate into `input` and
/// reading `output`; returns the rows read and, after the warm-up, the latencies (µs) to the
/// reader and to the row's storing in `output` (by the server's timestamp). The two part when
/// the reader falls behind the stream: on two cores shared with nats-server it can, and then
/// the first measures the reader as much as weir.
fn measure_latency(
    b: &BenchNatsArgs,
    runtime: &tokio::runtime::Runtime,
    servers: &str,
    job: &Path,
    input: &str,
    output: &str,
) -> anyhow::Result<(u64, Vec<i64>, Vec<i64>)> {
    let scheduler = Arc::new(weir_scheduler::Scheduler::new(runtime.handle().clone())?);
    let plan = weir_runtime::plan::check_file(job, &[])?;
    let options = weir_runtime::exec::job::JobOptions {
        scheduler: Some(scheduler),
        ..Default::default()
    };
    let running = runtime.block_on(weir_runtime::exec::job::start(&plan, options))?;
    let stop = running.stopper();
    let result = runtime.block_on(async {
        let js = context(servers).await?;
        // The reader: every row the job stores in `output`, from now on.
        let consumer = js
            .get_stream(output)
            .await?
            .create_consumer(jetstream::consumer::pull::OrderedConfig::default())
            .await?;
        let mut rows = consumer.messages().await?;
        let reader = tokio::spawn(async move {
            let mut seen = Vec::new();
            loop {
                match tokio::time::timeout(Duration::from_secs(4), rows.next()).await {
                    Ok(Some(Ok(m))) => {
                        let now = now_micros();
                        let sent = serde_json::from_slice::<serde_json::Value>(&m.payload)
                            .ok()
                            .and_then(|v| v["sent"].as_i64());
                        if let Some(sent) = sent {
                            // When the server stored the row (its clock is this machine's):
                            // what weir takes, apart from what the reader takes after it.
                            let stored = m.info().map_or(now, |i| {
                                (i.published.unix_timestamp_nanos() / 1000) as i64
                            });
                            seen.push((sent, now - sent, stored - sent));
                        }
                    }
                    // Quiet for 4 s after the publisher stopped (or the stream ended).
                    _ => return seen,
                }
            }
        });
        // Let the job start and resolve `start-from: new` before publishing.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let warm_until = now_micros() + (b.latency_for.as_micros() / 4) as i64;
        let mut publisher = Publisher::new(js.clone(), 4096);
        let started = Instant::now();
        let mut sent = 0u64;
        while started.elapsed() < b.latency_for + b.latency_for / 4 {
            let due = (started.elapsed().as_secs_f64() * b.rate as f64) as u64;
            while sent < due {
                let value = format!("{{\"id\":{sent},\"sent\":{}}}", now_micros());
                let p = sent % u64::from(b.partitions);
                publisher.publish(format!("{input}.{p}"), value).await?;
                sent += 1;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        publisher.flush().await?;
        let seen = reader.await?;
        let rows = seen.len() as u64;
        let (latencies, stored) = seen
            .into_iter()
            .filter(|(sent, _, _)| *sent >= warm_until)
            .map(|(_, read, stored)| (read, stored))
            .unzip();
        anyhow::Ok((rows, latencies, stored))
    });
    // Stopped whatever the arm met, so that the job never outlives it.
    stop.cancel();
    let _ = runtime.block_on(running.wait());
    result
}
