//! The keys of `kind: jsonl`.

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::config::{ByteSize, EventTimeSpec, OnError};
use crate::format::json::JsonType;

/// JSON lines read from one file or from every file of a directory (in name order), split into
/// chunks that parallel subtasks read round-robin.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct JsonlSourceSpec {
    /// A file, or a directory whose files are all read. Relative paths are relative to the
    /// working directory.
    #[schemars(length(min = 1))]
    pub path: String,
    /// One shape for every line: field name → type (`int`, `float`, `string`, `bool`,
    /// `timestamp`) or a nested map for a nested object (read as columns `outer.inner`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<IndexMap<String, JsonType>>,
    /// Lines that hold one object under a key naming its variant (Nexmark's
    /// `{"type":"bid","bid":{...}}`): variant → its fields. Each variant is an output port;
    /// lines of undeclared variants are skipped and counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variants: Option<IndexMap<String, IndexMap<String, JsonType>>>,
    /// What a line that does not parse, does not fit the schema or is longer than
    /// `max-line-length` does: fail the job (naming the file, line number and byte offset), or
    /// skip it and count it.
    #[serde(default)]
    pub on_error: OnError,
    /// Size of the file chunks handed to subtasks.
    #[serde(default = "default_chunk_size")]
    pub chunk_size: ByteSize,
    /// Longest line read (without its line break); a longer one is never held in memory whole,
    /// and `on-error` decides whether it fails the job or is skipped.
    #[serde(default = "default_max_line_length")]
    pub max_line_length: ByteSize,
    /// Threads each subtask decodes lines on, ahead of emitting them in file order (default:
    /// the machine's cores over the source's parallelism; at most the machine's cores); 0 or
    /// 1 decode on the subtask's own task, as it reads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 64))]
    pub decode_threads: Option<u32>,
    /// Subtasks of this source (default: the job's parallelism).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1024))]
    pub parallelism: Option<u32>,
    /// Watermarks; set `column` to the timestamp field that carries event time.
    #[serde(default)]
    pub event_time: EventTimeSpec,
}

fn default_chunk_size() -> ByteSize {
    ByteSize(4 * 1024 * 1024)
}

fn default_max_line_length() -> ByteSize {
    ByteSize(crate::format::lines::DEFAULT_MAX_LINE_LENGTH as u64)
}
