//! The vocabulary job files share, beneath both the job model ([`crate::spec`]) and the
//! connectors whose specs are written in it: durations and byte sizes ([`units`]), how a source
//! derives event time ([`EventTimeSpec`]), what a record that cannot be read does
//! ([`OnError`]), and where weir keeps its files ([`paths`]).
//!
//! # Layout
//! - [`units`]: `100ms`, `1h 30m`, `64MiB` in job files.
//! - [`paths`]: the data directory, and names made safe as path components.
//! - [`storage`]: a local path or S3 with its settings (checkpoints, the Iceberg warehouse).

pub mod paths;
pub mod storage;
pub mod units;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use self::storage::{StorageSettings, StorageSpec};
pub use self::units::{ByteSize, HumanDuration, SignedDuration};

/// What to do with a record that cannot be read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum OnError {
    #[default]
    Fail,
    Skip,
}

/// How a sink writes rows: JSON lines, or JSON lines with each row's change kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum SinkFormat {
    /// One JSON object per row. Takes an append-only stream, or an updating stream with a
    /// key that never deletes, whose new versions (`+I`, `+U`) it writes: the last line per
    /// key is the key's row.
    #[default]
    Json,
    /// One JSON object per row with its kind as a last field `"op"`: `"+I"`, `"-U"`, `"+U"`
    /// or `"-D"` (Flink's short forms). Takes any stream.
    ChangelogJson,
}

impl SinkFormat {
    /// Whether rows are written with their change kind.
    pub fn is_changelog(self) -> bool {
        self == SinkFormat::ChangelogJson
    }

    /// Whether it is `json`, which a spec need not write.
    pub fn is_default(&self) -> bool {
        *self == SinkFormat::Json
    }
}

/// How a source derives event time and watermarks.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct EventTimeSpec {
    /// The timestamp column that carries event time (in every output port). Without it the
    /// source emits no watermarks until it ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub column: Option<String>,
    /// Bounded out-of-orderness: the watermark trails the largest event time seen by this much
    /// (plus 1 ms), so records up to this late are still on time.
    #[serde(default)]
    pub max_out_of_orderness: HumanDuration,
    /// A subtask that produces nothing for this long is marked idle and stops holding back
    /// the watermark downstream until it produces again. Leave out to never go idle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_timeout: Option<HumanDuration>,
}
