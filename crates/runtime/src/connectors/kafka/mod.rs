//! `kafka`: a partition-aware source and a sink, both exactly-once with checkpoints, over
//! librdkafka (the `rdkafka` crate: the client Arroyo, RisingWave's connectors and most Rust
//! systems use; it speaks every broker version and security setup a user will point it at).
//!
//! # Source
//! Partitions are assigned to subtasks by [`owner`], a pure function of topic, partition and
//! parallelism (Flink's `KafkaSourceEnumerator` rule): no consumer group rebalances inside a
//! job, and a restore at another parallelism simply assigns the checkpointed partitions anew.
//! Each subtask reads with its own consumer on a reader thread (librdkafka's calls block), which
//! decodes records into batches ahead of the task over a small bounded channel, so decoding
//! overlaps the job's work. Every batch carries the offsets after it: the position a checkpoint
//! records is exactly what the task has emitted. Start positions are resolved to offsets before
//! the first record (so a restore never resolves `latest` a second time, later), partitions
//! created while the job runs are found every `partition-discovery` and read from their start,
//! and each partition's event time is tracked apart: the subtask's watermark follows the live
//! partition furthest behind, a partition quiet for `idle-timeout` stops holding it back.
//! See [`source`].
//!
//! # Sink
//! librdkafka cannot resume a transaction in another process (Flink's `KafkaSink` reaches into
//! the Java producer for that; KIP-939 adds it to Java clients only), so the two phases of
//! [`crate::api::sink`] are those of Flink's write-ahead sinks: between barriers a subtask keeps its
//! rows; at barrier `n` they become its transaction for snapshot `n`, stored in the checkpoint;
//! when the checkpoint completes, the rows are written in one Kafka transaction that also
//! commits a *marker*, the offset `n + 1` of a group of the writer's. A commit (again, on
//! restore) first reads the marker and skips what it already covers, so every row reaches
//! `read_committed` consumers once. Transactional ids are `<prefix>-<writer>`: a restarted job
//! fences its previous incarnation and aborts whatever it left open. See [`sink`].

pub mod records;
pub mod sink;
pub mod source;

use std::time::Duration;

use indexmap::IndexMap;
use rdkafka::ClientConfig;

use crate::api::OperatorError;

/// How long one metadata, offsets or transaction request to the cluster may take before the
/// job fails with a message naming the brokers (librdkafka retries inside it).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Client properties weir sets itself, because the guarantees rely on them: a user's
/// `properties` may not override them.
const RESERVED: [&str; 7] = [
    "bootstrap.servers",
    "group.id",
    "enable.auto.commit",
    "enable.auto.offset.store",
    "enable.partition.eof",
    "isolation.level",
    "transactional.id",
];

/// Refuses `properties` that weir sets itself (a problem at plan time, at `properties`).
pub fn check_properties(properties: &IndexMap<String, String>) -> Result<(), String> {
    let reserved: Vec<&str> = properties
        .keys()
        .filter(|k| RESERVED.contains(&k.as_str()))
        .map(String::as_str)
        .collect();
    match reserved.len() {
        0 => Ok(()),
        n => Err(format!(
            "weir sets {} itself: leave {} out of `properties`",
            reserved.join(", "),
            if n == 1 { "it" } else { "them" }
        )),
    }
}

/// A client configuration: the user's properties, then weir's.
pub fn client_config(
    bootstrap_servers: &str,
    properties: &IndexMap<String, String>,
    ours: &[(&str, &str)],
) -> ClientConfig {
    let mut config = ClientConfig::new();
    for (k, v) in properties {
        config.set(k, v);
    }
    config.set("bootstrap.servers", bootstrap_servers);
    for (k, v) in ours {
        config.set(*k, *v);
    }
    config
}

/// The subtask (of `parallelism`) that reads `partition` of `topic`: the topics' partitions
/// are spread round-robin from a start that depends on the topic, so several topics do not all
/// pile their partition 0 onto subtask 0.
pub fn owner(topic: &str, partition: i32, parallelism: usize) -> usize {
    let parallelism = parallelism.max(1) as u64;
    let start = xxhash_rust::xxh3::xxh3_64(topic.as_bytes()) % parallelism;
    ((start + u64::from(partition.unsigned_abs())) % parallelism) as usize
}

/// An error of the cluster: the message says what weir was doing and what the client said
/// (the job's error is shown as one line), and the client's error is kept as the cause.
pub fn external(message: impl Into<String>, error: rdkafka::error::KafkaError) -> OperatorError {
    let message = format!("{}: {error}", message.into());
    OperatorError::external(message, std::io::Error::other(error))
}

/// A client whose drop runs on a thread of its own. Dropping a consumer that has a `group.id`
/// closes it, and librdkafka's close waits for the group's coordinator: with the broker gone
/// that wait has no end, and no async worker, job teardown or server shutdown may hang on
/// it. The closing thread ends when the close does (or with the process).
pub struct Closing<T: Send + 'static>(Option<T>);

impl<T: Send + 'static> Closing<T> {
    pub fn new(client: T) -> Self {
        Closing(Some(client))
    }
}

impl<T: Send + 'static> std::ops::Deref for Closing<T> {
    type Target = T;

    fn deref(&self) -> &T {
        match &self.0 {
            Some(client) => client,
            // Only `drop` takes the client.
            None => unreachable!("a Kafka client used after its drop"),
        }
    }
}

impl<T: Send + 'static> Drop for Closing<T> {
    fn drop(&mut self) {
        if let Some(client) = self.0.take() {
            // If no thread can be started, the client closes here, as it would have anyway.
            let _ = std::thread::Builder::new()
                .name("kafka-close".into())
                .spawn(move || drop(client));
        }
    }
}

/// A client's global errors (librdkafka's error callback). The connection errors a broker's
/// restart causes are warnings: librdkafka reconnects by itself, and an operation that needs
/// the broker fails with its own message if it stays away. Everything else is an error.
pub fn client_error(error: &rdkafka::error::KafkaError, reason: &str) {
    use rdkafka::types::RDKafkaErrorCode as Code;
    // The end of a partition, which `enable.partition.eof` asks for: the reader sees it on
    // its own poll too.
    if matches!(error, rdkafka::error::KafkaError::PartitionEOF(_))
        || error.rdkafka_error_code() == Some(Code::PartitionEOF)
    {
        return;
    }
    let transient = matches!(
        error.rdkafka_error_code(),
        Some(
            Code::AllBrokersDown
                | Code::BrokerTransportFailure
                | Code::Resolve
                | Code::OperationTimedOut
                | Code::RequestTimedOut
                | Code::BrokerNotAvailable
        )
    );
    if transient {
        tracing::warn!(target: "librdkafka", "Kafka client: {error} ({reason})");
    } else {
        tracing::error!(target: "librdkafka", "Kafka client: {error} ({reason})");
    }
}

/// Runs a blocking librdkafka call from async code: on a multi-threaded runtime the worker
/// hands its other tasks to the rest first (`block_in_place`), elsewhere it just blocks.
pub fn blocking<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(f)
        }
        _ => f(),
    }
}

#[cfg(test)]
mod tests {
    use super::owner;

    #[test]
    fn every_partition_has_one_owner_and_owners_are_spread() {
        for parallelism in 1..6 {
            let mut counts = vec![0; parallelism];
            for p in 0..12 {
                let o = owner("bids", p, parallelism);
                assert!(o < parallelism);
                counts[o] += 1;
            }
            // 12 partitions over `parallelism` subtasks round-robin: within one of each other.
            let (min, max) = (
                counts.iter().min().copied().unwrap_or(0),
                counts.iter().max().copied().unwrap_or(0),
            );
            assert!(max - min <= 1, "{counts:?}");
        }
        // Consecutive partitions of one topic go to consecutive subtasks.
        assert_eq!((owner("t", 0, 4) + 1) % 4, owner("t", 1, 4));
    }
}
