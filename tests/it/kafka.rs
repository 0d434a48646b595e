//! The Kafka source and sink against Apache Kafka's own broker (4.4.0, KRaft, one node that is
//! broker and controller), started per test by `scripts/kafka-broker.sh` on a loopback port
//! with its log directory in a temporary folder (so a restarted broker keeps its topics and
//! transaction state). What the tests expect is computed without weir's Kafka code: records
//! are produced and read back with plain librdkafka clients, and query results are compared
//! with the same query over the same events from a JSON-lines file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::Message;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use serde_json::{Value, json};

use crate::recovery::{run_through_kills, weir};
use crate::support::{
    assert_same_rows, changelog_table, counts_having, free_port, golden_jsonl, job_file, multiset,
    nexmark_jsonl, out_dir, plan, read_parts, run_job, script, script_quietly, try_run_plan,
};

const SCRIPT: &str = "scripts/kafka-broker.sh";

/// A broker of this test's own, stopped when dropped.
struct Broker {
    dir: tempfile::TempDir,
    port: u16,
}

impl Broker {
    fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        script(
            SCRIPT,
            &[
                "start",
                &dir.path().display().to_string(),
                &port.to_string(),
            ],
        );
        Broker { dir, port }
    }

    fn servers(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn stop(&self) {
        script(SCRIPT, &["stop", &self.dir.path().display().to_string()]);
    }

    fn restart(&self) {
        self.stop();
        script(
            SCRIPT,
            &[
                "start",
                &self.dir.path().display().to_string(),
                &self.port.to_string(),
            ],
        );
    }

    fn create_topic(&self, name: &str, partitions: u32) {
        script(
            SCRIPT,
            &[
                "topic",
                &self.port.to_string(),
                name,
                &partitions.to_string(),
            ],
        );
    }

    /// Produces `values` to `topic`, value `i` to partition `i % partitions` with key `key(i)`.
    fn produce(
        &self,
        topic: &str,
        partitions: i32,
        values: &[String],
        key: impl Fn(usize) -> Option<String>,
    ) {
        let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
            .set("bootstrap.servers", self.servers())
            .set("linger.ms", "5")
            .create()
            .unwrap();
        for (i, v) in values.iter().enumerate() {
            let k = key(i);
            let mut record = BaseRecord::<str, str>::to(topic)
                .payload(v.as_str())
                .partition(i as i32 % partitions);
            if let Some(k) = &k {
                record = record.key(k.as_str());
            }
            send(&producer, record);
        }
        producer.flush(Duration::from_secs(60)).unwrap();
    }

    /// Every committed record of `topic` (`read_committed`): (partition, offset, key, value).
    fn read_all(&self, topic: &str, partitions: i32) -> Vec<Record> {
        read_to_end(&self.servers(), topic, partitions)
    }
}

/// A record read back: partition, offset, key, value.
type Record = (i32, i64, Option<String>, String);

/// Every committed record of `topic` on `servers`, read by a plain librdkafka consumer
/// (`read_committed`) once no transaction on it is open or settling (see [`settle`]).
fn read_to_end(servers: &str, topic: &str, partitions: i32) -> Vec<Record> {
    settle(servers, topic, partitions);
    read_isolated(servers, topic, partitions, "read_committed")
}

/// The end of each partition of `topic` that a client at `isolation.level` `isolation` is
/// told (`read_committed`: the last stable offset; `read_uncommitted`: the high watermark),
/// `None` for a partition the broker did not answer for.
fn ends(consumer: &BaseConsumer, topic: &str, partitions: i32) -> Vec<Option<i64>> {
    (0..partitions)
        .map(|p| {
            consumer
                .fetch_watermarks(topic, p, Duration::from_secs(10))
                .ok()
                .map(|(_, high)| high)
        })
        .collect()
}

/// Waits until every partition's last stable offset has reached its high watermark: no
/// transaction on `topic` is open, and the last one's markers are written. A committing
/// producer hears "committed" once the coordinator has logged the decision; the markers that
/// make the records visible reach the partitions after that, asynchronously (longer just after
/// a broker restart). Until they do, a `read_committed` reader stops at the last stable offset,
/// before the transaction's records: a read at once after a job's final commit can miss them.
/// A transaction still open after a minute is a sink that left one behind: the test fails.
fn settle(servers: &str, topic: &str, partitions: i32) {
    let client = |isolation: &str| -> BaseConsumer {
        ClientConfig::new()
            .set("bootstrap.servers", servers)
            .set("isolation.level", isolation)
            .create()
            .unwrap()
    };
    let (committed, written) = (client("read_committed"), client("read_uncommitted"));
    let started = Instant::now();
    let deadline = started + Duration::from_secs(60);
    let mut first = None;
    loop {
        let (stable, high) = (
            ends(&committed, topic, partitions),
            ends(&written, topic, partitions),
        );
        if stable.iter().all(Option::is_some) && stable == high {
            if let Some((stable, high)) = first {
                eprintln!(
                    "{topic}: read_committed waited {:?} for transactions to settle (last \
                     stable offsets {stable:?}, high watermarks {high:?})",
                    started.elapsed()
                );
            }
            return;
        }
        first.get_or_insert((stable.clone(), high.clone()));
        assert!(
            Instant::now() < deadline,
            "{topic}: a transaction is still open after a minute: last stable offsets \
             {stable:?}, high watermarks {high:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// [`read_to_end`] at `isolation.level` `isolation`: `read_committed` reads up to the first
/// record of a transaction still open, `read_uncommitted` every record written, aborted or not.
fn read_isolated(servers: &str, topic: &str, partitions: i32, isolation: &str) -> Vec<Record> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", servers)
        .set("group.id", "weir-test-reader")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .set("isolation.level", isolation)
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, Offset::Beginning)
            .unwrap();
    }
    consumer.assign(&tpl).unwrap();
    let mut ended = std::collections::BTreeSet::new();
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while ended.len() < partitions as usize {
        assert!(
            Instant::now() < deadline,
            "reading {topic} took over a minute"
        );
        match consumer.poll(Duration::from_millis(200)) {
            None => {}
            Some(Ok(m)) => out.push((
                m.partition(),
                m.offset(),
                m.key().map(|k| String::from_utf8_lossy(k).into_owned()),
                String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned(),
            )),
            Some(Err(KafkaError::PartitionEOF(p))) => {
                ended.insert(p);
            }
            Some(Err(e)) => eprintln!("test reader: {e}"),
        }
    }
    out
}

/// The rows of a JSON sink topic, checking each record's key is its `auction` column.
fn q5_rows(records: Vec<Record>) -> Vec<Value> {
    records
        .into_iter()
        .map(|(_, _, key, value)| {
            let row: Value = serde_json::from_str(&value).unwrap();
            assert_eq!(key.as_deref(), Some(row["auction"].to_string().as_str()));
            row
        })
        .collect()
}

impl Drop for Broker {
    fn drop(&mut self) {
        script_quietly(SCRIPT, &["stop", &self.dir.path().display().to_string()]);
    }
}

/// A `weir` child that is killed if the test ends (or fails) before it does.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Writes `text` as a job file in `dir`.
fn job(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn reads_every_partition_once_with_its_metadata() {
    let broker = Broker::start();
    broker.create_topic("in", 3);
    let values: Vec<String> = (0..3000)
        .map(|i| json!({"id": i, "name": format!("n{i}")}).to_string())
        .collect();
    broker.produce("in", 3, &values, |i| Some(format!("k{}", i % 7)));
    // What the records are, as a plain consumer reads them.
    let expected: Vec<Value> = broker
        .read_all("in", 3)
        .into_iter()
        .map(|(p, o, k, v)| {
            let v: Value = serde_json::from_str(&v).unwrap();
            json!({"id": v["id"], "name": v["name"], "p": p, "o": o, "k": k})
        })
        .collect();
    assert_eq!(expected.len(), 3000);
    let dir = tempfile::tempdir().unwrap();
    let out = out_dir();
    let file = job(
        dir.path(),
        "job.yaml",
        &format!(
            "name: kafka-read\nparallelism: 2\nsources:\n  in:\n    kind: kafka\n    \
             bootstrap-servers: {}\n    topic: in\n    stop-at: latest\n    schema: {{id: int, \
             name: string}}\n    metadata: {{p: partition, o: offset, k: key}}\nsinks:\n  out:\n    \
             kind: file\n    from: in\n    path: {}\n",
            broker.servers(),
            out.path().display()
        ),
    );
    let summary = run_job(&file, &[]);
    let got = read_parts(out.path());
    assert_same_rows("kafka source", &multiset(got), &multiset(expected));
    assert_eq!(summary.events, 3000, "{summary:?}");
}

/// Records of a topic created while the job runs (found by `topic-pattern`'s discovery) are
/// read once, beside those of the topic that was there at the start, each with the topic,
/// headers and timestamp it was produced with.
#[test]
fn a_topic_created_while_running_is_read_with_headers_and_timestamps() {
    let broker = Broker::start();
    broker.create_topic("ev-a", 2);
    let dir = tempfile::tempdir().unwrap();
    let out = out_dir();
    let file = job(
        dir.path(),
        "job.yaml",
        &format!(
            "name: kafka-discover\nparallelism: 2\ncheckpoint:\n  interval: 200ms\nsources:\n  \
             in:\n    kind: kafka\n    bootstrap-servers: {}\n    topic-pattern: \"ev-.*\"\n    \
             partition-discovery: 300ms\n    schema: {{id: int}}\n    metadata: {{t: topic, h: \
             headers, ts: timestamp}}\nsinks:\n  out:\n    kind: file\n    from: in\n    path: \
             {}\n",
            broker.servers(),
            out.path().display()
        ),
    );
    let mut child = Running(
        weir(dir.path())
            .arg("run")
            .arg(&file)
            .arg("--quiet")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", broker.servers())
        .set("linger.ms", "5")
        .create()
        .unwrap();
    // Record `i`: its headers (the second's value null for every third), and its timestamp.
    let base = 1_700_000_000_000i64;
    let produce = |topic: &str, partitions: i32, ids: std::ops::Range<i64>| {
        for i in ids {
            let value = json!({"id": i}).to_string();
            let mut headers =
                rdkafka::message::OwnedHeaders::new().insert(rdkafka::message::Header {
                    key: "n",
                    value: Some(format!("v{i}").as_str()),
                });
            headers = headers.insert(rdkafka::message::Header::<&str> {
                key: "maybe",
                value: (i % 3 != 0).then_some("x"),
            });
            let record = BaseRecord::<str, str>::to(topic)
                .payload(value.as_str())
                .partition((i % i64::from(partitions)) as i32)
                .timestamp(base + i * 1000)
                .headers(headers);
            send(&producer, record);
        }
        producer.flush(Duration::from_secs(60)).unwrap();
    };
    produce("ev-a", 2, 0..200);
    // Committed rows so far (the file sink's finished parts).
    let committed = |dir: &Path| -> usize {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
            .map(|p| std::fs::read_to_string(p).unwrap().lines().count())
            .sum()
    };
    let wait_for = |rows: usize| {
        let deadline = Instant::now() + Duration::from_secs(60);
        while committed(out.path()) < rows {
            assert!(
                Instant::now() < deadline,
                "fewer than {rows} rows after 60 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    wait_for(200);
    broker.create_topic("ev-b", 3);
    produce("ev-b", 3, 200..500);
    wait_for(500);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.0.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let status = child.0.wait().unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(child.0.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert!(status.success(), "{stderr}");
    // Read without a failure: a record of the new topic outside the reader's queue would
    // fail the job (and its restart would read the records anyway).
    assert!(
        !stderr.contains("ERROR") && !stderr.contains("restart"),
        "{stderr}"
    );
    // Headers as a JSON object in the order they were produced; timestamps as milliseconds.
    let expected = (0..500i64).map(|i| {
        let maybe = if i % 3 != 0 { "\"x\"" } else { "null" };
        json!({
            "id": i,
            "t": if i < 200 { "ev-a" } else { "ev-b" },
            "h": format!("{{\"n\":\"v{i}\",\"maybe\":{maybe}}}"),
            "ts": base + i * 1000,
        })
    });
    assert_same_rows(
        "a topic found while running",
        &multiset(read_parts(out.path())),
        &multiset(expected),
    );
}

#[test]
fn bad_records_fail_naming_their_place_or_are_skipped() {
    let broker = Broker::start();
    broker.create_topic("mixed", 1);
    let mut values: Vec<String> = (0..10).map(|i| json!({"id": i}).to_string()).collect();
    values.insert(5, "{not json".into());
    broker.produce("mixed", 1, &values, |_| None);
    let dir = tempfile::tempdir().unwrap();
    let out = out_dir();
    let text = |on_error: &str| {
        format!(
            "name: kafka-bad\nsources:\n  in:\n    kind: kafka\n    bootstrap-servers: {}\n    \
             topic: mixed\n    stop-at: latest\n    on-error: {on_error}\n    schema: {{id: \
             int}}\nsinks:\n  out:\n    kind: file\n    from: in\n    path: {}\n",
            broker.servers(),
            out.path().display()
        )
    };
    let failing = job(dir.path(), "fail.yaml", &text("fail"));
    let error = try_run_plan(&plan(&failing, &[]).unwrap(), false).unwrap_err();
    assert!(
        error.contains("topic mixed partition 0 offset 5") && error.contains("on-error: skip"),
        "{error}"
    );
    let skipping = job(dir.path(), "skip.yaml", &text("skip"));
    let summary = try_run_plan(&plan(&skipping, &[]).unwrap(), false).unwrap();
    let skipped: u64 = summary.nodes.iter().map(|n| n.skipped).sum();
    assert_eq!(skipped, 1, "{summary:?}");
    assert_eq!(read_parts(out.path()).len(), 10);
}

#[test]
fn a_missing_topic_or_an_unreachable_broker_fails_clearly() {
    let broker = Broker::start();
    let dir = tempfile::tempdir().unwrap();
    let text = |servers: &str| {
        format!(
            "name: kafka-missing\nsources:\n  in:\n    kind: kafka\n    bootstrap-servers: \
             {servers}\n    topic: nowhere\n    format: raw\nsinks:\n  out:\n    kind: \
             blackhole\n    from: in\n"
        )
    };
    let missing = job(dir.path(), "missing.yaml", &text(&broker.servers()));
    let error = try_run_plan(&plan(&missing, &[]).unwrap(), false).unwrap_err();
    assert!(
        error.contains("the topic `nowhere` does not exist"),
        "{error}"
    );
    let unreachable = format!("127.0.0.1:{}", free_port());
    let nobody = job(dir.path(), "nobody.yaml", &text(&unreachable));
    let error = try_run_plan(&plan(&nobody, &[]).unwrap(), false).unwrap_err();
    assert!(
        error.contains(&unreachable) && error.contains("reachable"),
        "{error}"
    );
}

/// Writes the first `events` Nexmark events of the shared JSON-lines input to a file and,
/// round-robin over `partitions`, to `topic`: each partition is in event-time order, the topic
/// as a whole interleaves them.
fn nexmark_topic(broker: &Broker, topic: &str, partitions: i32, events: usize, file: &Path) {
    let text = std::fs::read_to_string(nexmark_jsonl()).unwrap();
    let lines: Vec<String> = text.lines().take(events).map(str::to_owned).collect();
    std::fs::write(file, lines.join("\n") + "\n").unwrap();
    broker.create_topic(topic, partitions as u32);
    broker.produce(topic, partitions, &lines, |_| None);
}

/// A `jobs/nexmark/<query>-jsonl.yaml` job reading `topic` instead of its file.
fn nexmark_kafka_job(query: &str, broker: &Broker, topic: &str) -> String {
    let text =
        std::fs::read_to_string(job_file(&format!("jobs/nexmark/{query}-jsonl.yaml"))).unwrap();
    let file_source = "    kind: jsonl\n    path: data/nexmark.jsonl\n";
    assert!(text.contains(file_source), "{query}: the file source moved");
    text.replace(
        file_source,
        &format!(
            "    kind: kafka\n    bootstrap-servers: {}\n    topic: {topic}\n    stop-at: \
             latest\n",
            broker.servers()
        ),
    )
}

/// Per-partition watermarks make a topic whose partitions are each in event-time order read
/// as the ordered file does: no record is late, and the windows equal the file's. A watermark
/// taken over the subtask (the largest time seen of any partition) would drop the records of
/// whichever partition librdkafka delivers second.
#[test]
fn q5_and_q11_over_a_topic_equal_the_same_queries_over_the_file() {
    let broker = Broker::start();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("events.jsonl");
    nexmark_topic(&broker, "events", 4, 40_000, &file);
    for query in ["q5", "q11"] {
        let expected = golden_jsonl(query, &file, dir.path());
        for parallelism in [1, 2] {
            let out = dir.path().join(format!("{query}-{parallelism}"));
            let text = nexmark_kafka_job(query, &broker, "events");
            let path = job(dir.path(), &format!("{query}.yaml"), &text);
            let summary = run_job(
                &path,
                &[
                    format!("parallelism={parallelism}"),
                    "sinks.out.kind=file".into(),
                    format!("sinks.out.path={}", out.display()),
                ],
            );
            let late: u64 = summary.nodes.iter().map(|n| n.late_dropped).sum();
            assert_eq!(late, 0, "{query} at parallelism {parallelism}: {summary:?}");
            assert_same_rows(
                &format!("{query} from Kafka at parallelism {parallelism}"),
                &multiset(read_parts(&out)),
                &expected,
            );
        }
    }
}

/// `--set`s that make q5's sink write to the topic `q5-out`, keyed by auction.
fn kafka_sink(servers: &str, delivery: &str) -> Vec<String> {
    vec![
        "sinks.out.kind=kafka".into(),
        format!("sinks.out.bootstrap-servers={servers}"),
        "sinks.out.topic=q5-out".into(),
        "sinks.out.key=[auction]".into(),
        format!("sinks.out.delivery={delivery}"),
    ]
}

/// `weir run` of a Nexmark query over a topic, as a child process checkpointing every 200 ms.
fn spawn_nexmark(job: &Path, data: &Path, out: &Path, parallelism: u32, sink: &[String]) -> Child {
    let mut cmd = weir(data);
    cmd.arg("run")
        .arg(job)
        .arg("--quiet")
        .args(["--from", "latest"])
        .args(["--set", &format!("parallelism={parallelism}")])
        .args(["--set", "checkpoint.interval=200ms"]);
    if sink.is_empty() {
        cmd.args(["--set", "sinks.out.kind=file"])
            .args(["--set", &format!("sinks.out.path={}", out.display())]);
    }
    for s in sink {
        cmd.args(["--set", s]);
    }
    cmd.stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("weir runs")
}

/// Kafka in, committed files out, through SIGKILLs at random points and rescales (2 → 1 → 2):
/// the offsets in each checkpoint and the file sink's transactions give exactly the rows of the
/// file-source run.
#[test]
fn kafka_source_is_exactly_once_across_kill9_and_rescale() {
    let broker = Broker::start();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("events.jsonl");
    nexmark_topic(&broker, "events", 4, 60_000, &file);
    for (query, seed) in [("q5", 7), ("q11", 11)] {
        let expected = golden_jsonl(query, &file, dir.path());
        let data = dir.path().join(format!("data-{query}"));
        let out = dir.path().join(format!("out-{query}"));
        let path = job(
            dir.path(),
            &format!("{query}.yaml"),
            &nexmark_kafka_job(query, &broker, "events"),
        );
        let parallelism = [2, 1, 2];
        let logs = run_through_kills(query, seed, 3, |run| {
            spawn_nexmark(&path, &data, &out, parallelism[run % 3], &[])
        });
        let got = multiset(crate::recovery::committed_rows(&out));
        if got != expected {
            eprintln!("{query}: logs of the runs:\n{}", logs.join("\n---\n"));
        }
        assert_same_rows(
            &format!("{query} from Kafka through kills"),
            &got,
            &expected,
        );
    }
}

/// Waits for a child `weir run`, fails the test with its log if it failed, and returns the log.
fn finished(mut child: Child, what: &str) -> String {
    let status = child.wait().unwrap();
    let mut stderr = String::new();
    if let Some(mut e) = child.stderr.take() {
        use std::io::Read;
        let _ = e.read_to_string(&mut stderr);
    }
    assert!(status.success(), "{what} failed:\n{stderr}");
    stderr
}

/// At least once through `count` of every row: each golden row at least once, nothing else.
fn assert_at_least_once(
    what: &str,
    got: &BTreeMap<String, usize>,
    expected: &BTreeMap<String, usize>,
) {
    let missing: Vec<_> = expected
        .keys()
        .filter(|k| !got.contains_key(*k))
        .take(3)
        .collect();
    let foreign: Vec<_> = got
        .keys()
        .filter(|k| !expected.contains_key(*k))
        .take(3)
        .collect();
    assert!(
        missing.is_empty() && foreign.is_empty(),
        "{what}: lost {missing:?}, produced rows no run computes {foreign:?}"
    );
}

/// The broker restarts while a job reads it, or is down when the job starts: the reader
/// reconnects and resumes where it was (the job restarts when it cannot start), and the
/// committed output of the Kafka source (into files) is exactly the file-source run's;
/// an at-least-once Kafka sink in the same situation loses nothing.
#[test]
fn a_broker_restart_mid_run_loses_and_repeats_nothing() {
    let broker = Broker::start();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("events.jsonl");
    nexmark_topic(&broker, "events", 4, 60_000, &file);
    broker.create_topic("q5-out", 2);
    let expected = golden_jsonl("q5", &file, dir.path());
    let path = job(
        dir.path(),
        "q5.yaml",
        &nexmark_kafka_job("q5", &broker, "events"),
    );
    // Kafka into files, exactly once.
    let out = dir.path().join("out");
    let child = spawn_nexmark(&path, &dir.path().join("data-files"), &out, 2, &[]);
    std::thread::sleep(Duration::from_millis(300));
    broker.restart();
    finished(child, "q5 into files across a broker restart");
    assert_same_rows(
        "q5 into files across a broker restart",
        &multiset(crate::recovery::committed_rows(&out)),
        &expected,
    );
    // The broker is down while the job starts: launching fails, and the job restarts (as
    // after any failure of an external system) once it is back.
    broker.stop();
    let out = dir.path().join("out-late");
    let child = spawn_nexmark(&path, &dir.path().join("data-late"), &out, 2, &[]);
    std::thread::sleep(Duration::from_millis(500));
    broker.restart();
    finished(child, "q5 into files with the broker down at start");
    assert_same_rows(
        "q5 into files with the broker down at start",
        &multiset(crate::recovery::committed_rows(&out)),
        &expected,
    );
    // Kafka into Kafka, at least once.
    let out = dir.path().join("out");
    let sink = kafka_sink(&broker.servers(), "at-least-once");
    let child = spawn_nexmark(&path, &dir.path().join("data-kafka"), &out, 2, &sink);
    std::thread::sleep(Duration::from_millis(300));
    broker.restart();
    finished(child, "q5 into Kafka across a broker restart");
    let got = multiset(q5_rows(broker.read_all("q5-out", 2)));
    assert_at_least_once("q5 into Kafka across a broker restart", &got, &expected);
}

/// Kafka in and out at least once, through SIGKILLs at random points and rescales 2 → 1 → 2:
/// every row of the file-source run reaches the output topic, and no other row does.
/// (The exactly-once sink through the same: `kafka_to_kafka_exactly_once_across_...`.)
#[test]
fn kafka_to_kafka_at_least_once_loses_nothing_across_kill9_and_rescale() {
    let broker = Broker::start();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("events.jsonl");
    nexmark_topic(&broker, "events", 4, 60_000, &file);
    let expected = golden_jsonl("q5", &file, dir.path());
    broker.create_topic("q5-out", 3);
    let path = job(
        dir.path(),
        "q5.yaml",
        &nexmark_kafka_job("q5", &broker, "events"),
    );
    let sink = kafka_sink(&broker.servers(), "at-least-once");
    let data = dir.path().join("data");
    let unused = dir.path().join("unused");
    let parallelism = [2, 1, 2, 1];
    let logs = run_through_kills("q5 into Kafka", 23, 3, |run| {
        spawn_nexmark(&path, &data, &unused, parallelism[run % 4], &sink)
    });
    let got = multiset(q5_rows(broker.read_all("q5-out", 3)));
    if got.keys().any(|k| !expected.contains_key(k))
        || expected.keys().any(|k| !got.contains_key(k))
    {
        eprintln!("logs of the runs:\n{}", logs.join("\n---\n"));
    }
    assert_at_least_once("q5 from Kafka into Kafka through kills", &got, &expected);
}

/// Kafka in and Kafka out exactly once, on Apache Kafka's own broker: the sink's records go
/// out in one transaction per checkpoint and per subtask, read back `read_committed`. Through
/// SIGKILLs of weir at random points with rescales 2 → 1 → 2, and then with the broker itself
/// stopped at random points while a run reads, writes and commits (each time the job restarts
/// from the newest durable checkpoint and commits it again): every row of the file-source run,
/// each exactly once.
#[test]
fn kafka_to_kafka_exactly_once_across_kill9_rescale_and_broker_stops() {
    let broker = Broker::start();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("events.jsonl");
    nexmark_topic(&broker, "events", 4, 60_000, &file);
    let expected = golden_jsonl("q5", &file, dir.path());
    let path = job(
        dir.path(),
        "q5.yaml",
        &nexmark_kafka_job("q5", &broker, "events"),
    );
    let mut sink = kafka_sink(&broker.servers(), "exactly-once");
    sink.extend([
        "restart.max-attempts=50".to_string(),
        "restart.delay=300ms".to_string(),
    ]);

    // weir killed.
    broker.create_topic("q5-out", 3);
    let data = dir.path().join("data-kills");
    let unused = dir.path().join("unused");
    let parallelism = [2, 1, 2, 1];
    let logs = run_through_kills("q5 into Kafka exactly once", 31, 3, |run| {
        spawn_nexmark(&path, &data, &unused, parallelism[run % 4], &sink)
    });
    let got = multiset(q5_rows(broker.read_all("q5-out", 3)));
    if got != expected {
        eprintln!("logs of the runs:\n{}", logs.join("\n---\n"));
    }
    assert_same_rows("q5 from Kafka into Kafka through kills", &got, &expected);

    // The broker stopped, at random points, for a random while.
    let mut rng = crate::recovery::Rng(0x4b61_666b);
    for round in 0..2 {
        let topic = format!("q5-out-{round}");
        broker.create_topic(&topic, 3);
        let sink: Vec<String> = sink
            .iter()
            .map(|s| s.replace("topic=q5-out", &format!("topic={topic}")))
            .collect();
        let data = dir.path().join(format!("data-broker-{round}"));
        let mut child = spawn_nexmark(&path, &data, &unused, 2, &sink);
        let mut stops = 0;
        for _ in 0..2 {
            std::thread::sleep(Duration::from_millis(rng.between(200, 1500)));
            if child.try_wait().unwrap().is_some() {
                break;
            }
            broker.stop();
            stops += 1;
            std::thread::sleep(Duration::from_millis(rng.between(300, 2500)));
            broker.restart();
        }
        let log = finished(
            child,
            &format!("round {round}: q5 into Kafka with the broker stopped"),
        );
        eprintln!("round {round}: broker stopped {stops} times");
        let got = multiset(q5_rows(broker.read_all(&topic, 3)));
        if got != expected {
            eprintln!("round {round}: the run's log:\n{log}");
        }
        assert_same_rows(
            &format!("round {round}: q5 into Kafka exactly once, the broker stopped {stops} times"),
            &got,
            &expected,
        );
    }
}

/// Reads of committed output wait for the transactions in flight. A `read_committed` reader
/// stops at the last stable offset: while a transaction is open, or committed but its markers
/// not yet on the partitions (as just after a job's final commit, longer after a broker
/// restart), a read at once misses its records. Taken that way, the exactly-once test above
/// once read 3 of its 7 rows: those of the windows that fired during the run, without the
/// final transaction's.
#[test]
fn reads_of_committed_output_wait_for_transactions_in_flight() {
    let broker = Broker::start();
    broker.create_topic("settling", 2);
    let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", broker.servers())
        .set("transactional.id", "settling")
        .create()
        .unwrap();
    producer.init_transactions(Duration::from_secs(30)).unwrap();
    producer.begin_transaction().unwrap();
    let values: Vec<String> = (0..10).map(|i| json!({"id": i}).to_string()).collect();
    for (i, v) in values.iter().enumerate() {
        send(
            &producer,
            BaseRecord::to("settling")
                .payload(v.as_str())
                .partition(i as i32 % 2),
        );
    }
    producer.flush(Duration::from_secs(30)).unwrap();
    // Open, its records in the log: a bare read stops before them.
    let servers = broker.servers();
    assert!(read_isolated(&servers, "settling", 2, "read_committed").is_empty());
    assert_eq!(
        read_isolated(&servers, "settling", 2, "read_uncommitted").len(),
        10
    );
    let committing = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(2));
        producer
            .commit_transaction(Duration::from_secs(30))
            .unwrap();
    });
    let read: Vec<Value> = read_to_end(&servers, "settling", 2)
        .into_iter()
        .map(|(_, _, _, value)| serde_json::from_str(&value).unwrap())
        .collect();
    committing.join().unwrap();
    let written = values.iter().map(|v| serde_json::from_str(v).unwrap());
    assert_same_rows(
        "read_committed while a transaction commits",
        &multiset(read),
        &multiset(written),
    );
}

/// A transaction a SIGKILL leaves open is settled by the restore as its checkpoint says. The
/// sink writes a checkpoint's rows in one Kafka transaction once the checkpoint completes: the
/// job is killed while that transaction is being written (its first records in the log, no
/// commit yet). Then `read_uncommitted` sees records that `read_committed` does not; the
/// restore fences the killed writer (which aborts its open transaction) and commits the
/// checkpoint's rows again, once: `read_committed` sees every row exactly once, and
/// `read_uncommitted` still finds the aborted records in the log.
#[test]
fn a_transaction_left_open_by_a_kill_is_settled_as_the_checkpoint_says() {
    let broker = Broker::start();
    broker.create_topic("ids", 2);
    broker.create_topic("ids-out", 2);
    const ROWS: usize = 10_000;
    let values: Vec<String> = (0..ROWS).map(|i| json!({"id": i}).to_string()).collect();
    broker.produce("ids", 2, &values, |_| None);
    let dir = tempfile::tempdir().unwrap();
    let path = job(
        dir.path(),
        "pass.yaml",
        &format!(
            "name: kafka-open-txn\nparallelism: 1\nsources:\n  in:\n    kind: kafka\n    \
             bootstrap-servers: {servers}\n    topic: ids\n    schema: {{id: int}}\n\
             transforms:\n  pass:\n    kind: map\n    from: in\n    columns: {{id: id}}\n\
             sinks:\n  out:\n    kind: kafka\n    from: pass\n    bootstrap-servers: \
             {servers}\n    topic: ids-out\n    key: [id]\n    delivery: exactly-once\n    \
             properties: {{batch.num.messages: '1', max.in.flight.requests.per.connection: \
             '1'}}\n",
            servers = broker.servers()
        ),
    );
    let data = dir.path().join("data");
    let run = |restore: bool| {
        let mut cmd = weir(&data);
        cmd.arg("run")
            .arg(&path)
            .arg("--quiet")
            .args(["--set", "checkpoint.interval=2s"]);
        if restore {
            cmd.args(["--from", "latest"])
                .args(["--set", "sources.in.stop-at=latest"]);
        }
        cmd.stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let count = |isolation: &str| read_isolated(&broker.servers(), "ids-out", 2, isolation).len();
    // The first checkpoint's transaction, sent one record per request (the sink's
    // `properties`) so that it stays open for seconds: killed once its first records are in
    // the log.
    // (The high watermark, not the last stable offset, which a `read_committed` client gets.)
    let probe: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", broker.servers())
        .set("isolation.level", "read_uncommitted")
        .create()
        .unwrap();
    let written = || -> i64 {
        (0..2)
            .map(|p| {
                probe
                    .fetch_watermarks("ids-out", p, Duration::from_secs(10))
                    .map_or(0, |(_, high)| high)
            })
            .sum()
    };
    let mut child = Running(run(false));
    let deadline = Instant::now() + Duration::from_secs(60);
    while written() == 0 {
        assert!(
            Instant::now() < deadline,
            "no transaction written after 60 s"
        );
        assert!(child.0.try_wait().unwrap().is_none(), "the job ended");
        std::thread::sleep(Duration::from_millis(1));
    }
    child.0.kill().unwrap();
    child.0.wait().unwrap();
    let (committed, uncommitted) = (count("read_committed"), count("read_uncommitted"));
    assert!(
        committed == 0 && uncommitted > 0,
        "the kill did not land inside the transaction: {committed} rows committed, {uncommitted} \
         written"
    );
    finished(run(true), "the restore");
    let rows: Vec<Value> = read_isolated(&broker.servers(), "ids-out", 2, "read_committed")
        .into_iter()
        .map(|(_, _, key, value)| {
            let row: Value = serde_json::from_str(&value).unwrap();
            assert_eq!(key.as_deref(), Some(row["id"].to_string().as_str()));
            row
        })
        .collect();
    let expected: Vec<Value> = (0..ROWS).map(|i| json!({"id": i})).collect();
    assert_same_rows(
        "read_committed after the restore",
        &multiset(rows),
        &multiset(expected),
    );
    let aborted = count("read_uncommitted") - ROWS;
    assert!(
        aborted >= uncommitted,
        "the open transaction's {uncommitted} records are not in the log as aborted ones \
         ({aborted})"
    );
}

/// The exactly-once sink's transactions against librdkafka's mock cluster (a transaction
/// coordinator that speaks the protocol over TCP, though it neither hides uncommitted records
/// nor keeps transactional offsets): q5 with checkpoints every 200 ms writes each row once,
/// through transactions that begin, carry their marker offsets and commit.
#[test]
fn exactly_once_into_the_mock_cluster() {
    let mock = rdkafka::mocking::MockCluster::new(1).unwrap();
    mock.create_topic("q5-out", 2, 1).unwrap();
    let servers = mock.bootstrap_servers();
    let dir = tempfile::tempdir().unwrap();
    // The generator at 30,000 events/s: a run of about three seconds, a dozen checkpoints.
    let golden_out = dir.path().join("golden");
    run_job(
        &job_file("jobs/nexmark/q5.yaml"),
        &[
            "sources.nexmark.events=90000".into(),
            "sinks.out.kind=file".into(),
            format!("sinks.out.path={}", golden_out.display()),
        ],
    );
    let expected = multiset(read_parts(&golden_out));
    let storage = dir.path().join("checkpoints");
    let plan = plan(
        &job_file("jobs/nexmark/q5.yaml"),
        &[
            "sources.nexmark.events=90000".into(),
            "sources.nexmark.rate=30000".into(),
            "checkpoint.interval=200ms".into(),
            format!("checkpoint.storage={}", storage.display()),
        ]
        .into_iter()
        .chain(kafka_sink(&servers, "exactly-once"))
        .collect::<Vec<_>>(),
    )
    .unwrap();
    let summary = try_run_plan(&plan, true).unwrap();
    assert!(summary.checkpoints > 0, "{summary:?}");
    let rows = read_to_end(&servers, "q5-out", 2);
    assert_same_rows(
        "q5 into the mock cluster",
        &multiset(q5_rows(rows)),
        &expected,
    );
}

/// A server refuses a job whose brokers its operator did not list; a hosted, unbounded Kafka
/// job on a server that lists them shows each partition's position, end and lag in its API and
/// in Prometheus' `weir_source_partition_lag`, and commits the offsets of its completed
/// checkpoints to its `group-id` (read back with a plain consumer of that group).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hosted_job_reports_partition_lag_and_commits_group_offsets() {
    use crate::serve::{RelativeDir, app, app_with, call, wait_for};
    use axum::body::Body;
    use axum::http::StatusCode;

    let broker = Broker::start();
    broker.create_topic("lagged", 3);
    let values: Vec<String> = (0..900).map(|i| format!("v{i}")).collect();
    broker.produce("lagged", 3, &values, |_| None);
    let storage = RelativeDir::new("kafka-lag");
    let text = format!(
        "name: kafka-lag\nparallelism: 2\nsources:\n  in:\n    kind: kafka\n    \
         bootstrap-servers: {}\n    topic: lagged\n    format: raw\n    group-id: weir-lag\n\
         sinks:\n  out: {{kind: blackhole, from: in}}\ncheckpoint: {{interval: 100ms, storage: \
         {}}}\n",
        broker.servers(),
        storage.0
    );
    // A server reaches only the brokers its operator lists.
    let (_host, closed) = app(weir_http_ui::Access::open());
    let refused = call(&closed, "POST", "/api/v1/jobs", text.clone()).await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{}", refused.text);
    let allow = format!("kafka://127.0.0.1:{}", broker.port);
    assert!(
        refused.text.contains(&format!("--allow-endpoint {allow}"))
            && refused.text.contains("bootstrap-servers"),
        "{}",
        refused.text
    );
    let (_host, app) = app_with(
        weir_http_ui::Access::open(),
        weir_http_ui::HostConfig {
            sample_every: Duration::from_millis(50),
            endpoints: weir_http_ui::endpoints::Endpoints::default()
                .allow(&allow)
                .unwrap(),
            ..weir_http_ui::HostConfig::default()
        },
    );
    let submitted = call(&app, "POST", "/api/v1/jobs", text).await;
    assert_eq!(submitted.status, StatusCode::CREATED, "{}", submitted.text);
    let id = submitted.json()["id"].as_str().unwrap().to_owned();
    let uri = format!("/api/v1/jobs/{id}");

    // Every partition read to its end: position = end = 300 (round-robin production), lag 0.
    let detail = wait_for(&app, &uri, |v| {
        let parts = v["nodes"][0]["partitions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        parts.len() == 3 && parts.iter().all(|p| p["position"] == 300 && p["lag"] == 0)
    })
    .await;
    let parts = detail["nodes"][0]["partitions"].as_array().unwrap();
    let mut seen: Vec<(i64, u64)> = parts
        .iter()
        .map(|p| {
            (
                p["partition"].as_i64().unwrap(),
                p["subtask"].as_u64().unwrap(),
            )
        })
        .collect();
    seen.sort();
    assert_eq!(
        seen.iter().map(|s| s.0).collect::<Vec<_>>(),
        [0, 1, 2],
        "{detail}"
    );
    assert!(
        seen.iter().all(|s| s.1 < 2),
        "partitions on subtasks that do not exist: {detail}"
    );
    assert!(
        parts
            .iter()
            .all(|p| p["topic"] == "lagged" && p["end"] == 300),
        "{detail}"
    );

    let metrics = call(&app, "GET", "/metrics", Body::empty()).await.text;
    for p in 0..3 {
        let line = format!(
            "weir_source_partition_lag{{id=\"{id}\",job=\"kafka-lag\",node=\"in\",topic=\"lagged\",partition=\"{p}\"}} 0"
        );
        assert!(metrics.contains(&line), "no `{line}` in:\n{metrics}");
    }

    // A checkpoint completed after the reads commits 300 for each partition to the group.
    let servers = broker.servers();
    let committed = tokio::task::spawn_blocking(move || {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &servers)
            .set("group.id", "weir-lag")
            .create()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let mut tpl = TopicPartitionList::new();
            for p in 0..3 {
                tpl.add_partition("lagged", p);
            }
            let offsets: Vec<Offset> = consumer
                .committed_offsets(tpl, Duration::from_secs(10))
                .map(|t| t.elements().iter().map(|e| e.offset()).collect())
                .unwrap_or_default();
            if offsets.iter().all(|o| *o == Offset::Offset(300)) && offsets.len() == 3
                || Instant::now() > deadline
            {
                return offsets;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    })
    .await
    .unwrap();
    assert_eq!(committed, vec![Offset::Offset(300); 3]);

    let cancelled = call(&app, "POST", &format!("{uri}/cancel"), Body::empty()).await;
    assert_eq!(cancelled.status, StatusCode::ACCEPTED, "{}", cancelled.text);
    wait_for(&app, &uri, |v| v["state"] == "cancelled").await;
}

/// The Kafka sink under the sink conformance suite: visible output is what a `read_committed`
/// consumer reads of the topic.
struct KafkaTopic {
    servers: String,
    topic: &'static str,
    partitions: i32,
}

impl weir_runtime::testing::sink_conformance::SinkUnderTest for KafkaTopic {
    fn factory(&self) -> std::sync::Arc<dyn weir_runtime::api::SinkFactory> {
        use weir_runtime::api::connector::{SinkConnector, SinkContext};
        let spec: weir_runtime::spec::KafkaSinkSpec = serde_json::from_value(json!({
            "from": "in",
            "bootstrap-servers": self.servers,
            "topic": self.topic,
            "delivery": "exactly-once",
        }))
        .unwrap();
        let cx = SinkContext {
            job: "conformance",
            node: "out",
            repeat_within: Duration::from_secs(60),
        };
        spec.plan(&weir_runtime::testing::sink_conformance::schema(), cx)
            .unwrap()
    }

    fn visible(&self) -> futures::future::BoxFuture<'_, Vec<Value>> {
        let (servers, topic, partitions) = (self.servers.clone(), self.topic, self.partitions);
        Box::pin(async move {
            tokio::task::spawn_blocking(move || read_to_end(&servers, topic, partitions))
                .await
                .unwrap()
                .into_iter()
                .map(|(_, _, _, value)| serde_json::from_str(&value).unwrap())
                .collect()
        })
    }
}

/// The sink conformance suite (crash before and after pre-commit, restore commits once, a
/// repeated commit is a no-op, an abort leaves nothing visible) against Apache Kafka.
#[test]
fn the_kafka_sink_conforms() {
    let broker = Broker::start();
    broker.create_topic("conformance", 2);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(weir_runtime::testing::sink_conformance::run(&KafkaTopic {
        servers: broker.servers(),
        topic: "conformance",
        partitions: 2,
    }));
}

/// Produces `(key, value)` records to `topic` (`None` value: a tombstone), record `i` to the
/// partition its key names (`key % partitions`), so that each key's records keep their order.
fn produce_records(
    broker: &Broker,
    topic: &str,
    partitions: i32,
    records: &[(i64, Option<String>)],
) {
    let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", broker.servers())
        .set("linger.ms", "5")
        .create()
        .unwrap();
    for (key, value) in records {
        let key = key.to_string();
        let mut record = BaseRecord::<str, str>::to(topic)
            .key(key.as_str())
            .partition((key.parse::<i64>().unwrap() % i64::from(partitions)) as i32);
        if let Some(v) = value {
            record = record.payload(v.as_str());
        }
        send(&producer, record);
    }
    producer.flush(Duration::from_secs(60)).unwrap();
}

/// Sends `record`, waiting while the producer's queue is full.
fn send(producer: &ThreadedProducer<DefaultProducerContext>, mut record: BaseRecord<'_, str, str>) {
    loop {
        match producer.send(record) {
            Ok(()) => return,
            Err((KafkaError::MessageProduction(_), back)) => {
                record = back;
                std::thread::sleep(Duration::from_millis(5));
            }
            Err((e, _)) => panic!("producing: {e}"),
        }
    }
}

/// Random changes of a table `{id, v, s}` (keys reused after deletion), written to one topic as
/// upserts (value: the row; tombstone: a delete) and to another as Debezium events (with the
/// tombstone Debezium adds after a delete, one event inside `payload`, and one malformed event),
/// read back by weir at parallelism 2: both build the table of a plain loop over the changes,
/// the upserts' deletes of keys never written are counted as skipped, and so is the malformed
/// event.
#[test]
fn upsert_and_debezium_topics_build_the_table_of_a_naive_loop() {
    let broker = Broker::start();
    broker.create_topic("upserts", 3);
    broker.create_topic("events", 3);
    let mut table: BTreeMap<i64, Value> = BTreeMap::new();
    let (mut upserts, mut events) = (Vec::new(), Vec::new());
    let mut unknown_deletes = 0;
    let mut seed = 0x5eed_u64;
    let mut next = |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    for i in 0..3000 {
        let id = next(60) as i64;
        let old = table.get(&id).cloned();
        if next(4) == 0 {
            upserts.push((id, None));
            match old {
                Some(before) => {
                    table.remove(&id);
                    events.push((
                        id,
                        Some(json!({"before": before, "after": null, "op": "d"}).to_string()),
                    ));
                    events.push((id, None));
                }
                None => unknown_deletes += 1,
            }
        } else {
            let row = json!({"id": id, "v": i, "s": format!("s\"{}", i % 5)});
            upserts.push((id, Some(row.to_string())));
            table.insert(id, row.clone());
            let event = match old {
                Some(before) => json!({"before": before, "after": row, "op": "u", "ts_ms": i}),
                None => {
                    json!({"before": null, "after": row, "op": if i % 2 == 0 { "c" } else { "r" }})
                }
            };
            let event = if i == 7 {
                json!({"schema": {"type": "struct"}, "payload": event})
            } else {
                event
            };
            events.push((id, Some(event.to_string())));
        }
    }
    events.push((
        5,
        Some(json!({"before": null, "after": null, "op": "c"}).to_string()),
    ));
    produce_records(&broker, "upserts", 3, &upserts);
    produce_records(&broker, "events", 3, &events);

    let dir = tempfile::tempdir().unwrap();
    let (out_u, out_d) = (out_dir(), out_dir());
    let file = job(
        dir.path(),
        "changes.yaml",
        &format!(
            "name: kafka-changes\nparallelism: 2\nsources:\n  \
             u:\n    kind: kafka\n    bootstrap-servers: {servers}\n    topic: upserts\n    \
             stop-at: latest\n    format: upsert-json\n    key: [id]\n    \
             schema: {{id: int, v: int, s: string}}\n  \
             d:\n    kind: kafka\n    bootstrap-servers: {servers}\n    topic: events\n    \
             stop-at: latest\n    format: debezium-json\n    key: [id]\n    on-error: skip\n    \
             schema: {{id: int, v: int, s: string}}\n\
             sinks:\n  \
             ou: {{kind: file, from: u, path: {}, format: changelog-json}}\n  \
             od: {{kind: file, from: d, path: {}, format: changelog-json}}\n",
            out_u.path().display(),
            out_d.path().display(),
            servers = broker.servers(),
        ),
    );
    let text = plan(&file, &[]).unwrap().explain();
    assert!(text.contains("u.normalize"), "{text}");
    assert!(text.contains("upsert (+U -D), key [id]"), "{text}");
    let summary = run_job(&file, &[]);
    let expected: BTreeMap<String, Value> =
        table.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    assert_eq!(changelog_table(&read_parts(out_u.path()), "id"), expected);
    assert_eq!(changelog_table(&read_parts(out_d.path()), "id"), expected);
    let skipped = |node: &str| {
        summary
            .nodes
            .iter()
            .filter(|n| n.name == node)
            .map(|n| n.skipped)
            .sum::<u64>()
    };
    assert_eq!(skipped("u.normalize"), unknown_deletes, "{summary:?}");
    assert_eq!(skipped("d"), 1, "{summary:?}");
}

/// An updating query's table written to Kafka as upserts and as Debezium events: a plain
/// consumer applying the upsert topic (last value per key, a record without a value deletes)
/// and weir reading the Debezium topic back both hold the table of a naive loop.
#[test]
fn an_updating_query_written_as_upserts_and_debezium_events_reads_back_as_its_table() {
    let broker = Broker::start();
    broker.create_topic("counts-upsert", 2);
    broker.create_topic("counts-debezium", 2);
    let dir = tempfile::tempdir().unwrap();
    let (input, query, expected) = counts_having(dir.path(), 4000, 37, 3);
    let write = job(
        dir.path(),
        "write.yaml",
        &format!(
            "name: kafka-write-changes\nparallelism: 2\nsources:\n  \
             src: {{kind: jsonl, path: {}, schema: {{k: int, x: int}}}}\n\
             transforms:\n  \
             counts:\n    kind: sql\n    \
             query: {query}\n\
             sinks:\n  \
             up:\n    kind: kafka\n    from: counts\n    bootstrap-servers: {servers}\n    \
             topic: counts-upsert\n    format: upsert-json\n    key: [k]\n  \
             dz:\n    kind: kafka\n    from: counts\n    bootstrap-servers: {servers}\n    \
             topic: counts-debezium\n    format: debezium-json\n    key: [k]\n",
            input.display(),
            servers = broker.servers(),
        ),
    );
    run_job(&write, &[]);

    // The upsert topic, applied by a plain consumer in each partition's order.
    let mut compacted: BTreeMap<String, Value> = BTreeMap::new();
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", broker.servers())
        .set("group.id", "weir-test-upserts")
        .set("enable.partition.eof", "true")
        .set("isolation.level", "read_committed")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in 0..2 {
        tpl.add_partition_offset("counts-upsert", p, Offset::Beginning)
            .unwrap();
    }
    consumer.assign(&tpl).unwrap();
    let mut ended = std::collections::BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while ended.len() < 2 && Instant::now() < deadline {
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => {
                let key = String::from_utf8_lossy(m.key().unwrap()).into_owned();
                match m.payload() {
                    Some(v) => {
                        let row: Value = serde_json::from_slice(v).unwrap();
                        assert_eq!(row["k"].to_string(), key);
                        compacted.insert(key, row);
                    }
                    None => {
                        compacted.remove(&key);
                    }
                }
            }
            Some(Err(KafkaError::PartitionEOF(p))) => {
                ended.insert(p);
            }
            _ => {}
        }
    }
    assert_eq!(ended.len(), 2, "the upsert topic was not read to its end");
    assert_eq!(compacted, expected);

    // The Debezium topic, read back by weir.
    let out = out_dir();
    let read = job(
        dir.path(),
        "read.yaml",
        &format!(
            "name: kafka-read-changes\nsources:\n  \
             dz:\n    kind: kafka\n    bootstrap-servers: {}\n    topic: counts-debezium\n    \
             stop-at: latest\n    format: debezium-json\n    schema: {{k: int, n: int, m: int}}\n\
             sinks:\n  out: {{kind: file, from: dz, path: {}, format: changelog-json}}\n",
            broker.servers(),
            out.path().display(),
        ),
    );
    run_job(&read, &[]);
    assert_eq!(changelog_table(&read_parts(out.path()), "k"), expected);
}

/// An upsert topic read exactly once through what fails around it: weir SIGKILLed at random
/// points and resumed with `--from latest` at alternating parallelism, and the broker
/// restarted in the middle of a run. The committed changelog (part files in snapshot order;
/// each key's changes are in one subtask's file per snapshot) must be well formed, so a change
/// read twice after a restore or lost across the broker's restart would show as a `+I` of a
/// live key or a `-U` of a row that is not live, and it must build the naive table.
#[test]
fn an_upsert_topic_is_read_exactly_once_through_kills_and_a_broker_restart() {
    let mut table: BTreeMap<i64, Value> = BTreeMap::new();
    let mut records = Vec::new();
    let mut rng = crate::recovery::Rng(0xfee1);
    for i in 0..CHANGES {
        let id = rng.between(0, 500) as i64;
        if rng.between(0, 5) == 0 {
            records.push((id, None));
            table.remove(&id);
        } else {
            let row = json!({"id": id, "v": i});
            records.push((id, Some(row.to_string())));
            table.insert(id, row);
        }
    }
    read_changes_through_kills("upsert-json", &records, table);
}

/// The same with Debezium's change events: `c`, `u` (with `before`), `d` and the tombstone
/// Debezium writes after each delete, keyed by id as Debezium keys a table's topic.
#[test]
fn debezium_events_are_read_exactly_once_through_kills_and_a_broker_restart() {
    let mut table: BTreeMap<i64, Value> = BTreeMap::new();
    let mut records = Vec::new();
    let mut rng = crate::recovery::Rng(0xdeb1);
    for i in 0..CHANGES {
        let id = rng.between(0, 500) as i64;
        let row = json!({"id": id, "v": i});
        let event = match table.get(&id) {
            Some(old) if rng.between(0, 4) == 0 => {
                let event = json!({"before": old, "after": null, "op": "d"});
                table.remove(&id);
                records.push((id, Some(event.to_string())));
                records.push((id, None));
                continue;
            }
            Some(old) => json!({"before": old, "after": row, "op": "u"}),
            None => json!({"before": null, "after": row, "op": "c"}),
        };
        table.insert(id, row);
        records.push((id, Some(event.to_string())));
    }
    read_changes_through_kills("debezium-json", &records, table);
}

/// Changes in each of the two tests below: enough that a run lasts past its kill. At 60,000 a
/// whole run took 0.4 s with the process's start on CI, and the kill, drawn between 150 and
/// 900 ms, came after it ended (no run killed, so the test proved nothing and said so).
const CHANGES: i64 = 240_000;

/// Produces `records` (key, value) to a 3-partition topic and reads it in `format` through
/// kill -9s and a broker restart into a changelog file; the committed changelog must build
/// `table`.
fn read_changes_through_kills(
    format: &str,
    records: &[(i64, Option<String>)],
    table: BTreeMap<i64, Value>,
) {
    let broker = Broker::start();
    broker.create_topic("changes", 3);
    produce_records(&broker, "changes", 3, records);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let file = job(
        dir.path(),
        "changes.yaml",
        &format!(
            "name: kafka-changes-eo\nsources:\n  \
             u:\n    kind: kafka\n    bootstrap-servers: {}\n    topic: changes\n    \
             stop-at: latest\n    format: {format}\n    key: [id]\n    \
             schema: {{id: int, v: int}}\n\
             checkpoint: {{interval: 100ms}}\n\
             restart: {{strategy: fixed-delay, delay: 200ms, max-attempts: 1000}}\n\
             sinks:\n  out: {{kind: file, from: u, path: {}, format: changelog-json}}\n",
            broker.servers(),
            out.display()
        ),
    );
    let data = dir.path().join("data");
    let (logs, killed) = crate::support::run_through_kills(
        &format!("{format} through kills and a broker restart"),
        31,
        3,
        Duration::from_millis(100)..Duration::from_millis(600),
        |run| {
            let child = weir(&data)
                .arg("run")
                .arg(&file)
                .arg("--quiet")
                .args(["--from", "latest"])
                .args(["--set", &format!("parallelism={}", 1 + run % 2)])
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            if run == 1 {
                std::thread::sleep(Duration::from_millis(100));
                broker.restart();
            }
            child
        },
    );
    assert!(killed >= 1, "at least one run was killed: {logs:#?}");
    let expected: BTreeMap<String, Value> =
        table.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    assert_eq!(
        changelog_table(&crate::recovery::committed_rows(&out), "id"),
        expected,
        "{format}"
    );
}
