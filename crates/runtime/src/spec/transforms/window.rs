//! Event-time windows, aligned to the epoch.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::config::HumanDuration;

/// How records are grouped into event-time windows, aligned to the epoch.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(tag = "type", rename_all = "kebab-case", deny_unknown_fields)]
pub enum WindowSpec {
    /// Back-to-back windows `[k·size, (k+1)·size)`.
    Tumbling { size: HumanDuration },
    /// Windows of `size` starting every `slide`; a record is in `size / slide` of them.
    Sliding {
        size: HumanDuration,
        slide: HumanDuration,
    },
    /// Per key, records closer than `gap` share a session `[first, last + gap)`; sessions that
    /// come to touch merge.
    Session { gap: HumanDuration },
}
