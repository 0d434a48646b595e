//! `weir bench kafka`: the Kafka source beside the JSON-lines file source on the same events,
//! and the end-to-end latency from produce to `read_committed` visibility, at least once and
//! exactly once.
//!
//! Without `--bootstrap-servers` it starts Apache Kafka's own broker (4.4.0, KRaft) with
//! `scripts/kafka-broker.sh` (run from the repository's root, as `make bench` does).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::Args;
use rdkafka::ClientConfig;
use rdkafka::Message;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use weir_runtime::spec::load::Override;

use crate::measure::{Sample, ensure_jsonl, group, median, run_with};

#[derive(Args)]
pub struct BenchKafkaArgs {
    /// Brokers to use; leave out to start an Apache Kafka broker for the benchmark.
    #[arg(long)]
    bootstrap_servers: Option<String>,
    /// Nexmark events in the throughput topic (and file).
    #[arg(long, default_value_t = 1_000_000)]
    events: u64,
    /// Partitions of the benchmark's topics.
    #[arg(long, default_value_t = 4)]
    partitions: i32,
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    parallelism: Vec<u32>,
    /// Runs per arm of the throughput table (the median is reported).
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Events per second produced while latency is measured.
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

/// A broker the benchmark started, stopped when dropped.
struct OwnBroker {
    dir: PathBuf,
}

impl OwnBroker {
    fn start(dir: &Path) -> anyhow::Result<(Self, String)> {
        let dir = dir.to_path_buf();
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let _ = std::fs::remove_dir_all(&dir);
        script(&["start", &dir.display().to_string(), &port.to_string()])?;
        Ok((Self { dir }, format!("127.0.0.1:{port}")))
    }
}

impl Drop for OwnBroker {
    fn drop(&mut self) {
        let _ = script(&["stop", &self.dir.display().to_string()]);
    }
}

fn script(args: &[&str]) -> anyhow::Result<()> {
    let out = std::process::Command::new("scripts/kafka-broker.sh")
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| {
            anyhow::anyhow!("running scripts/kafka-broker.sh (from the repository root): {e}")
        })?;
    anyhow::ensure!(
        out.status.success(),
        "scripts/kafka-broker.sh {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

fn producer(servers: &str) -> anyhow::Result<ThreadedProducer<DefaultProducerContext>> {
    Ok(ClientConfig::new()
        .set("bootstrap.servers", servers)
        .set("linger.ms", "5")
        .set("queue.buffering.max.messages", "1000000")
        .create()?)
}

fn send(
    producer: &ThreadedProducer<DefaultProducerContext>,
    topic: &str,
    partition: i32,
    value: &str,
) -> anyhow::Result<()> {
    let mut record = BaseRecord::<str, str>::to(topic)
        .payload(value)
        .partition(partition);
    loop {
        match producer.send(record) {
            Ok(()) => return Ok(()),
            Err((KafkaError::MessageProduction(_), back)) => {
                record = back;
                producer.poll(Duration::from_millis(1));
            }
            Err((e, _)) => return Err(e.into()),
        }
    }
}

/// Records in `topic` (the sum of its partitions' high watermarks), if it exists.
fn records_in(servers: &str, topic: &str, partitions: i32) -> Option<i64> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", servers)
        .set("group.id", "weir-bench")
        .create()
        .ok()?;
    let metadata = consumer
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .ok()?;
    let t = metadata.topics().iter().find(|t| t.name() == topic)?;
    if t.error().is_some() || t.partitions().len() != partitions as usize {
        return None;
    }
    let mut total = 0;
    for p in 0..partitions {
        let (low, high) = consumer
            .fetch_watermarks(topic, p, Duration::from_secs(10))
            .ok()?;
        total += high - low;
    }
    Some(total)
}

/// A `jobs/nexmark/q1-jsonl.yaml` reading `topic` instead of its file.
fn kafka_q1(jobs: &Path, servers: &str, topic: &str, dir: &Path) -> anyhow::Result<PathBuf> {
    let text = std::fs::read_to_string(jobs.join("nexmark/q1-jsonl.yaml"))?;
    let file_source = "    kind: jsonl\n    path: data/nexmark.jsonl\n";
    anyhow::ensure!(
        text.contains(file_source),
        "q1-jsonl.yaml: the file source moved"
    );
    let text = text.replace(
        file_source,
        &format!(
            "    kind: kafka\n    bootstrap-servers: {servers}\n    topic: {topic}\n    stop-at: \
             latest\n"
        ),
    );
    let path = dir.join("kafka-q1.yaml");
    std::fs::write(&path, text)?;
    Ok(path)
}

pub(crate) fn run(b: BenchKafkaArgs) -> anyhow::Result<()> {
    std::fs::create_dir_all(&b.data)?;
    let broker = |name: &str| -> anyhow::Result<(Option<OwnBroker>, String)> {
        Ok(match &b.bootstrap_servers {
            Some(s) => (None, s.clone()),
            None => {
                let (own, servers) = OwnBroker::start(&b.data.join(name))?;
                (Some(own), servers)
            }
        })
    };
    {
        let (_own, servers) = broker("kafka-throughput")?;
        throughput(&b, &servers)?;
    }
    println!();
    // A broker of its own, so the latency arms do not share it with the throughput topic's
    // log (~0.5 GB for 1,000,000 events).
    let (_own, servers) = broker("kafka-latency")?;
    latency(&b, &servers)
}

fn throughput(b: &BenchKafkaArgs, servers: &str) -> anyhow::Result<()> {
    let file = ensure_jsonl(&b.data, b.events)?;
    let topic = format!("weir-bench-nexmark-{}", b.events);
    if records_in(servers, &topic, b.partitions) != Some(b.events as i64) {
        let port = servers.rsplit(':').next().unwrap_or("9092");
        script(&["topic", port, &topic, &b.partitions.to_string()])?;
        let t0 = Instant::now();
        let p = producer(servers)?;
        let text = std::fs::read_to_string(&file)?;
        for (i, line) in text.lines().enumerate() {
            send(&p, &topic, i as i32 % b.partitions, line)?;
        }
        p.flush(Duration::from_secs(300))?;
        eprintln!(
            "filled {topic} with {} events in {:.1} s",
            group(b.events),
            t0.elapsed().as_secs_f64()
        );
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let q1_file = b.jobs.join("nexmark/q1-jsonl.yaml");
    let q1_kafka = kafka_q1(&b.jobs, servers, &topic, &b.data)?;
    println!(
        "Nexmark q1 over the same {} events: from a JSON-lines file and from a Kafka topic of {} \
         partitions ({servers}), blackhole sink; median of {} runs per arm, arms interleaved; \
         events/s per core = events / CPU seconds of the weir process.",
        group(b.events),
        b.partitions,
        b.runs
    );
    println!();
    println!(
        "| p | file events/s | file events/s per core | Kafka events/s | Kafka events/s per core | Kafka / file | per core: Kafka / file |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for &p in &b.parallelism {
        let mut file_runs: Vec<Sample> = Vec::new();
        let mut kafka_runs: Vec<Sample> = Vec::new();
        for _ in 0..b.runs.max(1) {
            let o: Vec<Override> = [
                format!("sources.nexmark.path={}", file.display()),
                format!("parallelism={p}"),
            ]
            .iter()
            .map(|s| s.parse().map_err(anyhow::Error::msg))
            .collect::<Result<_, _>>()?;
            file_runs.push(run_with(&runtime, &q1_file, &o, Default::default())?.0);
            let o: Vec<Override> = [format!("parallelism={p}")]
                .iter()
                .map(|s| s.parse().map_err(anyhow::Error::msg))
                .collect::<Result<_, _>>()?;
            let (sample, _) = run_with(&runtime, &q1_kafka, &o, Default::default())?;
            anyhow::ensure!(
                sample.events == b.events,
                "the Kafka run read {} events, not {}",
                sample.events,
                b.events
            );
            kafka_runs.push(sample);
        }
        let rate = |s: &[Sample]| median(s.iter().map(Sample::rate).collect());
        let core = |s: &[Sample]| median(s.iter().map(Sample::per_core).collect());
        let (fr, kr) = (rate(&file_runs), rate(&kafka_runs));
        // The target is per CPU second of weir: the last column.
        let (fc, kc) = (core(&file_runs), core(&kafka_runs));
        println!(
            "| {p} | {} | {} | {} | {} | {:.2}× | {:.2}× |",
            group(fr as u64),
            group(fc as u64),
            group(kr as u64),
            group(kc as u64),
            kr / fr,
            kc / fc
        );
    }
    Ok(())
}

fn now_micros() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

/// The mock cluster's consumers' `fetch.wait.max.ms` (see [`latency`]).
const MOCK_FETCH_WAIT_MS: u32 = 10;

/// Produce → `read_committed` visibility, through a pass-through job, per delivery, on the
/// broker and, for comparison, on librdkafka's mock cluster (no real commit cost).
fn latency(b: &BenchKafkaArgs, servers: &str) -> anyhow::Result<()> {
    println!(
        "End-to-end latency at {} events/s ({} partitions, parallelism 1): from the producer's \
         send to a `read_committed` consumer of the output topic receiving the row, through a \
         Kafka → map → Kafka job; {} measured per arm after a warm-up of a quarter of it. \
         `kafka` is Apache Kafka's broker; exactly once, a row becomes visible when the \
         transaction of the checkpoint after it commits. The mock cluster is librdkafka's (in \
         this process, over TCP): it commits transactions but hides no uncommitted record, so \
         its exactly-once figure is the checkpoint-bound wait of weir's sink without a real \
         broker's commit cost. Its consumers wait at most {MOCK_FETCH_WAIT_MS} ms per fetch \
         (the mock does not answer early when records arrive).",
        group(b.rate),
        b.partitions,
        humantime::format_duration(b.latency_for)
    );
    println!();
    println!(
        "| broker | delivery | checkpoints | rows | p50 ms | p99 ms | max ms | p50 over the interval |"
    );
    println!("|---|---|---|---:|---:|---:|---:|---:|");
    let mock = rdkafka::mocking::MockCluster::new(1)?;
    let mock_servers = mock.bootstrap_servers();
    let port = servers.rsplit(':').next().unwrap_or("9092").to_owned();
    let stamp = std::process::id();
    let arms: [(&str, &str, &str, Option<Duration>); 4] = [
        ("kafka", servers, "at-least-once", None),
        (
            "kafka",
            servers,
            "exactly-once",
            Some(Duration::from_secs(1)),
        ),
        ("mock", &mock_servers, "at-least-once", None),
        (
            "mock",
            &mock_servers,
            "exactly-once",
            Some(Duration::from_secs(1)),
        ),
    ];
    for (arm, (broker, at, delivery, interval)) in arms.into_iter().enumerate() {
        let input = format!("weir-bench-latency-in-{stamp}-{arm}");
        let output = format!("weir-bench-latency-out-{stamp}-{arm}");
        for topic in [&input, &output] {
            if broker == "mock" {
                mock.create_topic(topic, b.partitions, 1)?;
            } else {
                script(&["topic", &port, topic, &b.partitions.to_string()])?;
            }
        }
        let job = b.data.join(format!("kafka-latency-{arm}.yaml"));
        let checkpoint = match interval {
            Some(i) => format!(
                "checkpoint:\n  interval: {}\n  storage: {}\n",
                humantime::format_duration(i),
                b.data.join("kafka-latency-checkpoints").display()
            ),
            None => String::new(),
        };
        // The mock answers an empty fetch only after `fetch.wait.max.ms` (500 ms by default)
        // even when records arrive meanwhile, where a real broker answers as they arrive: a
        // short wait makes its consumers poll as often as a real broker would answer.
        let fetch_wait = if broker == "mock" {
            format!("    properties: {{fetch.wait.max.ms: \"{MOCK_FETCH_WAIT_MS}\"}}\n")
        } else {
            String::new()
        };
        std::fs::write(
            &job,
            format!(
                "name: kafka-latency-{stamp}-{arm}\n{checkpoint}sources:\n  in:\n    kind: kafka\n    \
                 bootstrap-servers: {at}\n    topic: {input}\n    start-from: latest\n    \
                 schema: {{id: int, sent: int}}\n{fetch_wait}transforms:\n  pass:\n    kind: map\n    from: \
                 in\n    columns: {{id: id, sent: sent}}\nsinks:\n  out:\n    kind: kafka\n    \
                 from: pass\n    bootstrap-servers: {at}\n    topic: {output}\n    \
                 delivery: {delivery}\n"
            ),
        )?;
        let wait = if broker == "mock" {
            MOCK_FETCH_WAIT_MS
        } else {
            500
        };
        let (rows, mut latencies) = match measure_latency(b, at, wait, &job, &input, &output) {
            Ok(measured) => measured,
            Err(e) => {
                println!("| {broker} | {delivery} | – | – | failed: {e} | | | |");
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
        let over = match interval {
            Some(i) => format!("{:+.0} ms", p50 - i.as_secs_f64() * 1000.0),
            None => "–".into(),
        };
        println!(
            "| {broker} | {delivery} | {} | {} | {p50:.1} | {p99:.1} | {max:.1} | {over} |",
            interval.map_or("none".to_string(), |i| format!(
                "every {}",
                humantime::format_duration(i)
            )),
            group(rows)
        );
    }
    Ok(())
}

/// Runs `job` while producing `{id, sent}` records at the benchmark's rate into `input` and
/// reading `output`; returns the rows read and the latencies (µs) after the warm-up.
fn measure_latency(
    b: &BenchKafkaArgs,
    servers: &str,
    fetch_wait_ms: u32,
    job: &Path,
    input: &str,
    output: &str,
) -> anyhow::Result<(u64, Vec<i64>)> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let scheduler = Arc::new(weir_scheduler::Scheduler::new(runtime.handle().clone())?);
    let plan = weir_runtime::plan::check_file(job, &[])?;
    let options = weir_runtime::exec::job::JobOptions {
        scheduler: Some(scheduler),
        ..Default::default()
    };
    let running = runtime.block_on(weir_runtime::exec::job::start(&plan, options))?;
    let stop = running.stopper();

    // The reader: everything the job commits to `output`, from now on.
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", servers)
        .set("group.id", "weir-bench-latency")
        .set("isolation.level", "read_committed")
        .set("enable.auto.commit", "false")
        .set("fetch.wait.max.ms", fetch_wait_ms.to_string())
        .create()?;
    let mut tpl = TopicPartitionList::new();
    for p in 0..b.partitions {
        tpl.add_partition_offset(output, p, Offset::Beginning)?;
    }
    consumer.assign(&tpl)?;
    let done = Arc::new(AtomicBool::new(false));
    let reader = {
        let done = done.clone();
        std::thread::spawn(move || {
            let mut seen = Vec::new();
            let mut quiet_since: Option<Instant> = None;
            loop {
                match consumer.poll(Duration::from_millis(100)) {
                    Some(Ok(m)) => {
                        quiet_since = None;
                        let now = now_micros();
                        let sent = m
                            .payload()
                            .and_then(|v| serde_json::from_slice::<serde_json::Value>(v).ok())
                            .and_then(|v| v["sent"].as_i64());
                        if let Some(sent) = sent {
                            seen.push((sent, now - sent));
                        }
                    }
                    _ if done.load(Ordering::Relaxed) => {
                        // After the producer stopped: wait for the last commits.
                        let since = *quiet_since.get_or_insert_with(Instant::now);
                        if since.elapsed() > Duration::from_secs(4) {
                            return seen;
                        }
                    }
                    _ => {}
                }
            }
        })
    };

    // Let the job start and read its start position before producing.
    std::thread::sleep(Duration::from_secs(2));
    let warm_until = now_micros() + (b.latency_for.as_micros() / 4) as i64;
    let produced = (|| -> anyhow::Result<()> {
        let producer = producer(servers)?;
        let started = Instant::now();
        let mut sent = 0u64;
        while started.elapsed() < b.latency_for + b.latency_for / 4 {
            let due = (started.elapsed().as_secs_f64() * b.rate as f64) as u64;
            while sent < due {
                let value = format!("{{\"id\":{sent},\"sent\":{}}}", now_micros());
                send(
                    &producer,
                    input,
                    (sent % b.partitions as u64) as i32,
                    &value,
                )?;
                sent += 1;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        producer.flush(Duration::from_secs(30))?;
        Ok(())
    })();
    done.store(true, Ordering::Relaxed);
    let seen = reader
        .join()
        .map_err(|_| anyhow::anyhow!("the latency reader panicked"))?;
    // Stopped whatever the producer met, so that the job never outlives its arm.
    stop.cancel();
    let _ = runtime.block_on(running.wait());
    produced?;
    let rows = seen.len() as u64;
    let latencies = seen
        .into_iter()
        .filter(|(sent, _)| *sent >= warm_until)
        .map(|(_, l)| l)
        .collect();
    Ok((rows, latencies))
}
