//! The vocabulary job files share, beneath both the job model ([`crate::spec`]) and the
//! connectors whose specs are written in it: durations and byte sizes ([`units`]), how a source
//! derives event time ([`EventTimeSpec`]), what a record that cannot be read does
//! ([`OnError`]), and where weir keeps its files ([`paths`]).
//!
//! # Layout
//! - [`units`]: `100ms`, `1h 30m`, `64MiB` in job files.
//! - [`paths`]: the data directory, and names made safe as path components.

pub mod paths;
pub mod units;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use self::units::{ByteSize, HumanDuration, SignedDuration};

/// What to do with a record that cannot be read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum OnError {
    #[default]
    Fail,
    Skip,
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
