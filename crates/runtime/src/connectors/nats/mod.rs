//! `nats`: a JetStream source and sink, both exactly-once with checkpoints, over `async-nats`
//! (the official client of the NATS project; async on tokio, as the rest of weir).
//!
//! # Source
//! A stream is read as `partitions` partitions: partition `p` is the subjects of `subjects`
//! with `{partition}` replaced by `p` (as a subject mapping with `partition(n, ...)` writes
//! them), an unpartitioned stream is one partition. Partitions are assigned to subtasks, their
//! positions (the stream sequence of the next message) go into every checkpoint, and their event
//! time and idleness are tracked apart, by the machinery the Kafka source shares
//! ([`crate::connectors::partitioned`]). Each partition is read by an ephemeral, ordered pull
//! consumer created at its position (no acks, no durable state on the server): a restore, at
//! any parallelism, creates consumers at the checkpointed sequences. See [`source`].
//!
//! # Sink
//! Exactly once is the write-ahead design of the Kafka sink with JetStream's de-duplication
//! in place of Kafka's transactions: the rows a subtask receives between barriers become its
//! transaction for that checkpoint, stored in it; when the checkpoint completes, they are
//! published, each with a `Nats-Msg-Id` derived from job, sink, subtask, lineage, checkpoint
//! and sequence, and the commit waits for every acknowledgement. A commit repeated after a
//! failure publishes the same messages with the same ids, which the stream drops as duplicates
//! as long as its duplicate window covers the time a repeat can take: the sink refuses to start
//! when the window is shorter than the checkpoint timeout plus the longest restart delay. See
//! [`sink`].

pub mod sink;
pub mod source;
pub mod spec;
pub mod subjects;

use std::time::Duration;

use async_nats::ServerAddr;
use async_nats::jetstream;

use std::sync::Arc;

use arrow_schema::SchemaRef;

use self::spec::{NatsAuth, NatsMetadata, PARTITION_PLACEHOLDER};
use self::spec::{NatsSinkSpec, NatsSourceSpec};
use self::subjects::Subjects;
use crate::api::connector::{
    Endpoint, HostLimits, Hosted, Location, PlannedSource, Reach, Secret, ServerFile,
    SinkConnector, SinkContext, SourceConnector, SourceContext, SpecProblem,
};
use crate::api::{OperatorError, SinkFactory};
use crate::config::EventTimeSpec;
use crate::connectors::kafka::spec::Delivery;
use crate::connectors::partitioned::records::{MetaType, MetadataField};
use crate::connectors::partitioned::records::{ValueSpec, value_format};

/// How long connecting, and one JetStream request, may take.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

impl MetadataField for NatsMetadata {
    fn column_type(self) -> MetaType {
        match self {
            NatsMetadata::Subject | NatsMetadata::Headers => MetaType::Text,
            NatsMetadata::Sequence | NatsMetadata::Partition => MetaType::Int,
            NatsMetadata::Time => MetaType::Time,
        }
    }
}

/// The addresses of a `servers` list (`host:port,...`, each optionally `nats://...`).
pub fn server_addrs(servers: &str) -> Result<Vec<ServerAddr>, String> {
    let mut out = Vec::new();
    for entry in servers.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        out.push(
            entry
                .parse::<ServerAddr>()
                .map_err(|e| format!("`{entry}` is not a NATS server address ({e})"))?,
        );
    }
    if out.is_empty() {
        return Err("name at least one server".into());
    }
    Ok(out)
}

/// Connects to `servers` with `auth`; `what` names the connector in errors. The client
/// reconnects by itself for as long as it lives (a server restarting is not a failure); a
/// first connection that fails is (and the job restarts, as after any failure of an external
/// system), unless the servers refused the sign-in: that is final.
pub async fn connect(
    servers: &str,
    auth: &NatsAuth,
    what: &str,
) -> Result<async_nats::Client, OperatorError> {
    let addrs = server_addrs(servers).map_err(|m| OperatorError::Data(format!("{what}: {m}")))?;
    let mut options = async_nats::ConnectOptions::new()
        .name(format!("weir {what}"))
        .connection_timeout(REQUEST_TIMEOUT)
        .request_timeout(Some(REQUEST_TIMEOUT))
        // Reconnection is the client's: keep trying, each attempt logged.
        .max_reconnects(None)
        .event_callback({
            let what = what.to_owned();
            move |event| {
                let what = what.clone();
                async move {
                    match event {
                        async_nats::Event::Disconnected => {
                            tracing::warn!(target: "nats", "{what}: disconnected from the server; reconnecting")
                        }
                        async_nats::Event::Connected => {
                            tracing::info!(target: "nats", "{what}: connected")
                        }
                        // The client was dropped: the connector is done with it.
                        async_nats::Event::Closed => {
                            tracing::debug!(target: "nats", "{what}: connection closed")
                        }
                        other => tracing::warn!(target: "nats", "{what}: {other}"),
                    }
                }
            }
        });
    if let (Some(user), Some(password)) = (&auth.user, &auth.password) {
        options = options.user_and_password(user.clone(), password.clone());
    }
    if let Some(token) = &auth.token {
        options = options.token(token.clone());
    }
    if let Some(path) = &auth.creds_file {
        options = options.credentials_file(path).await.map_err(|e| {
            OperatorError::refused(
                format!("{what}: cannot read the credentials file `{path}`: {e}"),
                Some(Box::new(e)),
            )
        })?;
    }
    options.connect(addrs).await.map_err(|e| {
        use async_nats::ConnectErrorKind as K;
        match e.kind() {
            K::AuthorizationViolation | K::Authentication => OperatorError::refused(
                format!(
                    "{what}: the NATS server at {servers} refused the sign-in ({e}): check \
                     `user`/`password`, `token` or `creds-file`"
                ),
                Some(Box::new(e)),
            ),
            _ => OperatorError::external(
                format!(
                    "{what}: cannot connect to the NATS server at {servers} (is it reachable?)"
                ),
                e,
            ),
        }
    })
}

/// A JetStream context whose requests time out after [`REQUEST_TIMEOUT`]; publishes awaiting
/// acknowledgement are bounded by `max_in_flight` (a publish beyond waits).
pub fn jetstream(client: async_nats::Client, max_in_flight: usize) -> jetstream::Context {
    jetstream::ContextBuilder::new()
        .timeout(REQUEST_TIMEOUT)
        .max_ack_inflight(max_in_flight.max(1))
        .backpressure_on_inflight(true)
        .build(client)
}

/// The stream `name` with its current info. A missing stream is final; anything else (no
/// JetStream answer yet, a timeout) may pass.
pub async fn stream(
    js: &jetstream::Context,
    name: &str,
    servers: &str,
    what: &str,
) -> Result<jetstream::stream::Stream, OperatorError> {
    use jetstream::context::GetStreamErrorKind as K;
    js.get_stream(name).await.map_err(|e| match e.kind() {
        K::JetStream(j) if j.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND => {
            OperatorError::refused(
                format!("{what}: the stream `{name}` does not exist on {servers}"),
                Some(Box::new(e)),
            )
        }
        K::EmptyName | K::InvalidStreamName => OperatorError::refused(
            format!("{what}: `{name}` is not a valid stream name"),
            Some(Box::new(e)),
        ),
        _ => OperatorError::external(
            format!(
                "{what}: cannot read the stream `{name}` from {servers} (is JetStream enabled?)"
            ),
            e,
        ),
    })
}

impl SourceConnector for NatsSourceSpec {
    fn parallelism(&self) -> Option<u32> {
        self.parallelism
    }

    fn event_time(&self) -> &EventTimeSpec {
        &self.event_time
    }

    fn ports(&self) -> Vec<String> {
        crate::format::json::layout::variant_ports(&self.variants)
    }

    fn plan(&self, cx: SourceContext<'_>) -> Result<PlannedSource, Vec<SpecProblem>> {
        let mut problems = Vec::new();
        let format = value_format(
            ValueSpec {
                format: self.format,
                key: &self.key,
                schema: &self.schema,
                variants: &self.variants,
                keyed_records: false,
            },
            self.metadata.keys(),
        )
        .map_err(|p| problems.push(p))
        .ok();
        if let Err(m) = self.start_from.time() {
            problems.push(SpecProblem::at("start-from", m));
        }
        if let Err(p) = self.auth().check() {
            problems.push(p);
        }
        if let Err(m) = server_addrs(&self.servers) {
            problems.push(SpecProblem::at("servers", m));
        }
        if let Some(idle) = self.event_time.idle_timeout
            && idle < crate::config::HumanDuration::from_millis(1)
        {
            problems.push(SpecProblem::at(
                "/event-time/idle-timeout",
                format!("an idle timeout must be at least 1ms, not {idle}"),
            ));
        }
        let placeholder = self
            .subjects
            .as_deref()
            .is_some_and(|s| s.contains(PARTITION_PLACEHOLDER));
        if self.partitions > 1 && !placeholder {
            problems.push(SpecProblem::at(
                "subjects",
                format!(
                    "a stream read as {} partitions needs `subjects` with \
                     `{PARTITION_PLACEHOLDER}` where each partition's number stands \
                     (`bids.{PARTITION_PLACEHOLDER}.>`)",
                    self.partitions
                ),
            ));
        }
        if let Some(s) = self.subjects.as_deref()
            && (s.split('.').any(str::is_empty) || s.chars().any(char::is_whitespace))
        {
            problems.push(SpecProblem::at(
                "subjects",
                format!("`{s}` is not a subject filter: tokens separated by `.`, no blanks"),
            ));
        }
        let Some(format) = format.filter(|_| problems.is_empty()) else {
            return Err(problems);
        };
        Ok(PlannedSource {
            ports: format.ports(&self.metadata),
            factory: Arc::new(source::NatsSourceFactory::new(self, format, cx.node)),
        })
    }
}

/// What a NATS client of a job reaches and holds, for a server.
fn hosted_client(servers: &str, auth: &NatsAuth) -> (Vec<Reach>, Vec<ServerFile>, Vec<Secret>) {
    let reach = vec![Reach {
        at: "/servers".into(),
        endpoint: Endpoint::Nats {
            servers: servers.to_owned(),
        },
    }];
    let files = auth
        .creds_file
        .iter()
        .map(|_| ServerFile {
            at: "/creds-file".into(),
            key: false,
            what: "`creds-file` makes the NATS client read a file".into(),
        })
        .collect();
    let secrets = [&auth.password, &auth.token]
        .into_iter()
        .flatten()
        .map(|s| Secret::Value(s.clone()))
        .collect();
    (reach, files, secrets)
}

impl Hosted for NatsSourceSpec {
    fn endpoints(&self) -> Vec<Reach> {
        hosted_client(&self.servers, &self.auth()).0
    }

    fn server_files(&self) -> Vec<ServerFile> {
        hosted_client(&self.servers, &self.auth()).1
    }

    fn locations(&self) -> Vec<Location> {
        Vec::new()
    }

    fn secrets(&self) -> Vec<Secret> {
        hosted_client(&self.servers, &self.auth()).2
    }

    /// Its reading is paced by the server.
    fn within(&self, _limits: &HostLimits) -> Vec<SpecProblem> {
        Vec::new()
    }
}

impl SinkConnector for NatsSinkSpec {
    fn from(&self) -> &str {
        &self.from
    }

    fn parallelism(&self) -> Option<u32> {
        self.parallelism
    }

    fn plan(
        &self,
        input: &SchemaRef,
        cx: SinkContext<'_>,
    ) -> Result<Arc<dyn SinkFactory>, Vec<SpecProblem>> {
        let mut problems = Vec::new();
        if let Err(p) = self.auth().check() {
            problems.push(p);
        }
        if let Err(m) = server_addrs(&self.servers) {
            problems.push(SpecProblem::at("servers", m));
        }
        let subjects = Subjects::compile(&self.subject, input)
            .map_err(|m| problems.push(SpecProblem::at("subject", m)))
            .ok();
        if subjects.as_ref().is_some_and(|s| !s.is_literal())
            && self.delivery == Delivery::ExactlyOnce
            && self.stream.is_none()
        {
            problems.push(SpecProblem::at(
                "subject",
                "a subject computed from the rows needs the `stream` its subjects belong to, so \
                 that the exactly-once sink can check its duplicate window before it starts",
            ));
        }
        if let Err(p) = super::check_log_sink_changes(input, self.format, &[], false) {
            problems.push(p);
        }
        let Some(subjects) = subjects.filter(|_| problems.is_empty()) else {
            return Err(problems);
        };
        let factory: Arc<dyn crate::api::SinkFactory> =
            Arc::new(crate::api::two_phase::TwoPhaseFactory(
                sink::NatsSinkFactory::new(self, subjects, cx.job, cx.node, cx.repeat_within),
            ));
        Ok(match self.format {
            crate::connectors::kafka::spec::KafkaSinkFormat::Json => {
                Arc::new(super::AfterImages(factory))
            }
            _ => factory,
        })
    }
}

impl Hosted for NatsSinkSpec {
    fn endpoints(&self) -> Vec<Reach> {
        hosted_client(&self.servers, &self.auth()).0
    }

    fn server_files(&self) -> Vec<ServerFile> {
        hosted_client(&self.servers, &self.auth()).1
    }

    fn locations(&self) -> Vec<Location> {
        Vec::new()
    }

    fn secrets(&self) -> Vec<Secret> {
        hosted_client(&self.servers, &self.auth()).2
    }

    fn within(&self, _limits: &HostLimits) -> Vec<SpecProblem> {
        Vec::new()
    }
}

/// The filter subject of partition `p` (`None`: every subject of the stream).
pub fn partition_filter(subjects: Option<&str>, p: u32) -> Option<String> {
    subjects.map(|s| s.replace(PARTITION_PLACEHOLDER, &p.to_string()))
}

/// Epoch milliseconds of a message's time, given in nanoseconds.
pub fn millis(nanos: i128) -> i64 {
    i64::try_from(nanos.div_euclid(1_000_000)).unwrap_or(i64::MAX)
}

/// The first value of header `name` (compared as text: the client parses a name it knows,
/// such as `Nats-Msg-Id`, into a form that a lookup by its text does not find).
pub fn header<'a>(headers: Option<&'a async_nats::HeaderMap>, name: &str) -> Option<&'a str> {
    headers?
        .iter()
        .find(|(k, _)| AsRef::<str>::as_ref(*k) == name)
        .and_then(|(_, values)| values.first())
        .map(|v| v.as_str())
}

/// A message's headers as a JSON object (a repeated name keeps its last value).
pub fn headers_json(headers: Option<&async_nats::HeaderMap>) -> String {
    let Some(headers) = headers else {
        return "{}".to_owned();
    };
    crate::connectors::partitioned::records::headers_json(headers.iter().flat_map(|(k, vs)| {
        let name: &str = k.as_ref();
        vs.iter().map(move |v| (name, Some(v.as_str().as_bytes())))
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn servers_lists_and_partition_filters() {
        assert_eq!(
            server_addrs("127.0.0.1:4222, nats://h:4223").map(|a| a.len()),
            Ok(2)
        );
        assert!(server_addrs(" , ").is_err());
        assert_eq!(
            partition_filter(Some("bids.{partition}.>"), 3).as_deref(),
            Some("bids.3.>")
        );
        assert_eq!(partition_filter(None, 0), None);
    }
}
