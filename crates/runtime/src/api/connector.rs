//! The connector contract: what a source or sink kind tells the planner, and a server that
//! hosts the job, about itself.
//!
//! A connector kind is its spec type (the keys of its `kind:` in a job file) implementing
//! [`SourceConnector`] or [`SinkConnector`], and [`Hosted`]. The planner asks it to check its
//! spec and make its factory ([`SourceConnector::plan`], [`SinkConnector::plan`]); problems
//! come back at the key they are about ([`SpecProblem`]), as data. A server (`weir serve`)
//! asks it what it would reach over the network, which files of the server's machine it would
//! read or write, which values are secrets and whether it fits the server's limits
//! ([`Hosted`]). None of these answers has a default: a new connector that forgets one does
//! not compile, where a server that matched on kinds would let it through.
//!
//! The kinds are listed once, in `connectors/mod.rs` (`sources!` and `sinks!`), which makes
//! the spec enums and their dispatch from that list.

use std::sync::Arc;
use std::time::Duration;

use arrow_schema::SchemaRef;

use super::{SinkFactory, SourceFactory};
use crate::config::EventTimeSpec;

/// A problem with a connector's spec, at one of its keys.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpecProblem {
    /// A JSON pointer below the node (`/subject`, `/key/0`); empty for the node itself.
    pub at: String,
    pub message: String,
}

impl SpecProblem {
    /// A problem with the value of `key` (a key of the node, or a pointer below it).
    pub fn at(key: &str, message: impl Into<String>) -> Self {
        let at = if key.is_empty() || key.starts_with('/') {
            key.to_owned()
        } else {
            format!("/{key}")
        };
        Self {
            at,
            message: message.into(),
        }
    }

    /// A problem with the node as a whole.
    pub fn node(message: impl Into<String>) -> Self {
        Self::at("", message)
    }
}

/// One problem as a list, for `?` on a connector's checks.
impl From<SpecProblem> for Vec<SpecProblem> {
    fn from(p: SpecProblem) -> Self {
        vec![p]
    }
}

/// A destination on the network a connector reaches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// Kafka brokers: `host[:port],...` (port 9092 when left out).
    Kafka { servers: String },
    /// NATS servers: `host[:port],...`, each may be `nats://...` (port 4222).
    Nats { servers: String },
    /// A PostgreSQL connection string, libpq `key=value` or a URL (port 5432).
    Postgres { connection: String },
    /// An S3-compatible object store's endpoint URL (`http://127.0.0.1:9000`).
    ObjectStore { endpoint: String },
}

/// A destination, at the key of the spec that names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reach {
    /// A JSON pointer below the node (`/bootstrap-servers`).
    pub at: String,
    pub endpoint: Endpoint,
}

/// A setting that makes a client library read, load or run something on the machine that
/// runs the job (a credentials file, a certificate, a Kafka client's plug-in): a server refuses
/// it in a job a client submitted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerFile {
    /// A JSON pointer below the node; `key` says whether it points at the key itself (a
    /// property's name) or its value.
    pub at: String,
    pub key: bool,
    /// What the setting does, for the message (`` `creds-file` makes the NATS client read a
    /// file``).
    pub what: String,
}

/// A path a connector reads or writes on the machine that runs the job: a server keeps it
/// below its working directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Location {
    /// A JSON pointer below the node (`/path`).
    pub at: String,
    pub path: String,
}

/// Words in a key's name that make its value a secret, whatever the case (`password`,
/// `sasl.password`, `ssl.key.password`, `client-secret`, `token`, `credentials-file`): the one
/// list a job file's keys and a Kafka client's properties are both judged by.
pub const SECRET_WORDS: [&str; 4] = ["password", "secret", "token", "credential"];

/// Whether `name` (a key of a job file, a client property) names a secret: it holds one of
/// [`SECRET_WORDS`], in any case.
pub fn names_a_secret(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    SECRET_WORDS.iter().any(|word| name.contains(word))
}

/// A value of a spec that is a secret: masked in everything a server shows about the job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Secret {
    /// The value itself (a password, a token).
    Value(String),
    /// A connection string, whose password part is the secret.
    Connection(String),
}

/// What a server bounds in submitted jobs that a connector must respect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostLimits {
    /// Events per second of one generating source (`--max-generator-rate`).
    pub max_generator_rate: u64,
    /// Splits (file chunks) of one file source (`--max-chunks`).
    pub max_chunks: u64,
}

/// What a server asks of every connector of a job submitted to it. Nothing has a default.
pub trait Hosted {
    /// Every network destination the connector reaches, at the key that names it.
    fn endpoints(&self) -> Vec<Reach>;

    /// Every setting that would make a client read, load or run something on the server.
    fn server_files(&self) -> Vec<ServerFile>;

    /// Every path it reads or writes on the machine that runs it.
    fn locations(&self) -> Vec<Location>;

    /// Every secret value it holds.
    fn secrets(&self) -> Vec<Secret>;

    /// Problems with the server's limits (an unbounded generator, a file cut into too many
    /// chunks); what a connector does not generate or split has none.
    fn within(&self, limits: &HostLimits) -> Vec<SpecProblem>;
}

/// What the planner knows of the node a source is.
#[derive(Clone, Copy, Debug)]
pub struct SourceContext<'a> {
    pub job: &'a str,
    pub node: &'a str,
}

/// A source as planned: its output ports with their schemas, and its factory.
pub struct PlannedSource {
    /// (port name, schema); one unnamed port for a single-port source.
    pub ports: Vec<(String, SchemaRef)>,
    pub factory: Arc<dyn SourceFactory>,
}

/// A source kind.
pub trait SourceConnector: Hosted + Send + Sync {
    /// Its own parallelism, when it sets one.
    fn parallelism(&self) -> Option<u32>;

    /// How its event time and watermarks derive from its records.
    fn event_time(&self) -> &EventTimeSpec;

    /// The names of its output ports, known before planning (for `from: node.port`, and the
    /// tables SQL may read); empty for a source of one unnamed port.
    fn ports(&self) -> Vec<String>;

    /// Checks the spec (every problem at once, at its key) and makes the source.
    fn plan(&self, cx: SourceContext<'_>) -> Result<PlannedSource, Vec<SpecProblem>>;
}

/// What the planner knows of the node a sink is.
#[derive(Clone, Copy, Debug)]
pub struct SinkContext<'a> {
    pub job: &'a str,
    pub node: &'a str,
    /// How long after a checkpoint's first commit a restore may repeat it: the checkpoint
    /// timeout plus the longest restart delay (what a de-duplication window must cover).
    pub repeat_within: Duration,
}

/// A sink kind.
pub trait SinkConnector: Hosted + Send + Sync {
    /// The node it reads (`node` or `node.port`).
    fn from(&self) -> &str;

    /// Its own parallelism, when it sets one.
    fn parallelism(&self) -> Option<u32>;

    /// The columns by which it applies an updating stream's changes to a table (a database
    /// sink's key), when it has them: its subtasks read such a stream partitioned by them, so
    /// that every change to one row of the table goes through one subtask, in order.
    fn changes_key(&self) -> Option<&[String]> {
        None
    }

    /// Checks the spec against its input's columns (every problem at once, at its key) and
    /// makes the sink's factory.
    fn plan(
        &self,
        input: &SchemaRef,
        cx: SinkContext<'_>,
    ) -> Result<Arc<dyn SinkFactory>, Vec<SpecProblem>>;
}

/// A boxed connector is the connector (large specs are boxed in the spec enums).
impl<T: Hosted + ?Sized> Hosted for Box<T> {
    fn endpoints(&self) -> Vec<Reach> {
        (**self).endpoints()
    }
    fn server_files(&self) -> Vec<ServerFile> {
        (**self).server_files()
    }
    fn locations(&self) -> Vec<Location> {
        (**self).locations()
    }
    fn secrets(&self) -> Vec<Secret> {
        (**self).secrets()
    }
    fn within(&self, limits: &HostLimits) -> Vec<SpecProblem> {
        (**self).within(limits)
    }
}

impl<T: SourceConnector + ?Sized> SourceConnector for Box<T> {
    fn parallelism(&self) -> Option<u32> {
        (**self).parallelism()
    }
    fn event_time(&self) -> &EventTimeSpec {
        (**self).event_time()
    }
    fn ports(&self) -> Vec<String> {
        (**self).ports()
    }
    fn plan(&self, cx: SourceContext<'_>) -> Result<PlannedSource, Vec<SpecProblem>> {
        (**self).plan(cx)
    }
}

impl<T: SinkConnector + ?Sized> SinkConnector for Box<T> {
    fn from(&self) -> &str {
        (**self).from()
    }
    fn parallelism(&self) -> Option<u32> {
        (**self).parallelism()
    }
    fn changes_key(&self) -> Option<&[String]> {
        (**self).changes_key()
    }
    fn plan(
        &self,
        input: &SchemaRef,
        cx: SinkContext<'_>,
    ) -> Result<Arc<dyn SinkFactory>, Vec<SpecProblem>> {
        (**self).plan(input, cx)
    }
}
