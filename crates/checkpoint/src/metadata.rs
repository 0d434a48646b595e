//! A completed checkpoint's metadata: what every subtask's state is and where its bytes are.
//!
//! The metadata is the last object of a checkpoint to be written; its presence (and a valid
//! checksum) is what makes the checkpoint complete. On disk it is one header line,
//! `weir-checkpoint 1 xxh3=<16 hex digits>`, followed by the JSON document the header's checksum
//! covers. Every file the metadata refers to carries its size and xxh3, so a restore detects
//! truncated, replaced and bit-flipped files before using them, and reads no more of a file
//! than its recorded size. Paths in the metadata are refused unless they stay in the
//! snapshot's directory (or the job's `shared/` folder), and the metadata itself is read only
//! up to [`MAX_METADATA_BYTES`].

use serde::{Deserialize, Serialize};
use weir_state::key_groups::KeyGroupRange;

use crate::storage::Placed;

/// Version of the metadata format.
pub const VERSION: u32 = 1;
const MAGIC: &str = "weir-checkpoint";
/// The metadata's name inside a checkpoint's directory.
pub const METADATA: &str = "_metadata";
/// The most bytes a snapshot's metadata may hold. It lists every file and range of the
/// snapshot at some hundred bytes each, so 64 MiB is hundreds of thousands of them, far beyond
/// any real job, yet small enough that reading a damaged one into memory is harmless.
pub const MAX_METADATA_BYTES: u64 = 64 << 20;
/// Where a shared file's path starts: the job's `shared/` folder, beside the snapshot.
const SHARED_PREFIX: &str = "../shared/";

/// What a snapshot is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum SnapshotKind {
    /// Periodic, owned by the engine: retained N at a time, may share files with others.
    Checkpoint,
    /// Triggered by a user, owned by the user: self-contained, kept until deleted.
    Savepoint,
    /// Written when a bounded job ends: it holds only the sinks' last transactions, so a crash
    /// while committing them never loses or repeats output. Restoring it just commits them.
    Final,
}

impl SnapshotKind {
    /// The directory prefix of this kind (`chk`, `sp`, `final`).
    pub fn prefix(self) -> &'static str {
        match self {
            SnapshotKind::Checkpoint => "chk",
            SnapshotKind::Savepoint => "sp",
            SnapshotKind::Final => "final",
        }
    }
}

/// A stored file: its key relative to the snapshot's directory (`../shared/...` for files
/// shared between checkpoints), size and checksum.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FileRef {
    pub path: String,
    pub size: u64,
    /// xxh3-64, as 16 hex digits.
    pub xxh3: String,
}

impl FileRef {
    pub fn new(path: String, placed: Placed) -> Self {
        Self {
            path,
            size: placed.size,
            xxh3: format!("{:016x}", placed.xxh3),
        }
    }

    pub fn placed(&self) -> Option<Placed> {
        Some(Placed {
            size: self.size,
            xxh3: u64::from_str_radix(&self.xxh3, 16).ok()?,
        })
    }

    /// Whether the file belongs to several checkpoints (an incremental RocksDB SST).
    pub fn is_shared(&self) -> bool {
        self.path.starts_with("../")
    }

    /// Checks that the path stays where a snapshot's files live: in the snapshot's directory,
    /// or, for a shared file, in the job's `shared/` folder (`../shared/...`). Metadata is data
    /// anyone with the folder can edit; a path that climbed out (`../../etc/passwd`, an
    /// absolute name) would have restore read and copy any file the process can reach.
    pub fn check_path(&self) -> Result<(), String> {
        let inner = self.path.strip_prefix(SHARED_PREFIX).unwrap_or(&self.path);
        let stays = inner
            .split('/')
            .all(|part| !part.is_empty() && part != "." && part != "..");
        if stays {
            Ok(())
        } else {
            Err(format!(
                "file `{}` lies outside the snapshot's directory and the job's shared/ folder",
                self.path
            ))
        }
    }
}

/// A byte range of one of the merged operator-state files.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StateRange {
    /// Which merged file ([`CheckpointMetadata::operator_state`]) holds the range; metadata
    /// written before there could be several has none (the only file, 0).
    #[serde(default)]
    pub file: u32,
    pub offset: u64,
    pub length: u64,
    /// xxh3-64 of the range, as 16 hex digits.
    pub xxh3: String,
}

/// How a keyed snapshot is laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum KeyedFormat {
    /// weir's backend-independent file of entries by key group (heap checkpoints, savepoints).
    Logical,
    /// A RocksDB checkpoint: its SST files (shared between checkpoints), manifest and options.
    RocksNative,
}

/// A state of a keyed snapshot: its name and time to live.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StateInfo {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<i64>,
}

/// One subtask's keyed state: a backend snapshot's files.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct KeyedHandle {
    pub format: KeyedFormat,
    /// The key groups `[start, end)` the subtask owned.
    pub key_groups: [u32; 2],
    pub files: Vec<FileRef>,
    pub states: Vec<StateInfo>,
}

impl KeyedHandle {
    pub fn range(&self) -> KeyGroupRange {
        KeyGroupRange {
            start: self.key_groups[0],
            end: self.key_groups[1],
        }
    }
}

/// What a snapshot stores of one subtask: where its non-keyed and its keyed state are. (The
/// non-keyed state itself is the runtime's `SubtaskState`.)
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StoredSubtask {
    pub subtask: u32,
    /// Non-keyed state (source positions, pending sink transactions, operator fields, the
    /// watermark), in one of the snapshot's merged operator-state files; its encoding is the
    /// runtime's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operator: Option<StateRange>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keyed: Option<KeyedHandle>,
}

/// One node of the job and the state of each of its subtasks.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NodeState {
    pub name: String,
    /// The node's `kind` (`window-aggregate`, `nexmark`, ...): a restore into a node of another
    /// kind is refused.
    pub kind: String,
    pub parallelism: u32,
    pub subtasks: Vec<StoredSubtask>,
}

/// A completed checkpoint, savepoint or final snapshot.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub struct CheckpointMetadata {
    pub version: u32,
    pub job: String,
    pub id: u64,
    pub kind: SnapshotKind,
    /// Epoch ms.
    pub triggered_at: i64,
    pub completed_at: i64,
    /// Key groups of the job: fixed for the job's lifetime (state is partitioned by them).
    pub key_groups: u32,
    /// The merged operator-state files of all subtasks (few: each holds the state of many
    /// subtasks, in (node, subtask) order), empty if no subtask has operator state. Metadata
    /// written when there was at most one file has a single object here, read as a list of one.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "one_or_many"
    )]
    pub operator_state: Vec<FileRef>,
    pub nodes: Vec<NodeState>,
}

/// Epoch milliseconds now: the clock of [`CheckpointMetadata::triggered_at`] and
/// [`CheckpointMetadata::completed_at`].
pub use weir_state::clock::now_ms;

impl CheckpointMetadata {
    /// Every file the snapshot needs.
    pub fn files(&self) -> impl Iterator<Item = &FileRef> {
        self.operator_state.iter().chain(
            self.nodes
                .iter()
                .flat_map(|n| &n.subtasks)
                .filter_map(|s| s.keyed.as_ref())
                .flat_map(|k| &k.files),
        )
    }

    pub fn node(&self, name: &str) -> Option<&NodeState> {
        self.nodes.iter().find(|n| n.name == name)
    }

    /// Total bytes of the files the snapshot refers to (shared ones included).
    pub fn size(&self) -> u64 {
        self.files().map(|f| f.size).sum()
    }

    /// The metadata object's bytes: header line with the checksum, then the JSON.
    pub fn encode(&self) -> Result<Vec<u8>, String> {
        let json = serde_json::to_vec_pretty(self).map_err(|e| e.to_string())?;
        let mut out = format!(
            "{MAGIC} {VERSION} xxh3={:016x}\n",
            xxhash_rust::xxh3::xxh3_64(&json)
        )
        .into_bytes();
        out.extend_from_slice(&json);
        Ok(out)
    }

    /// Parses and verifies metadata bytes; the error says what is wrong.
    pub fn decode(bytes: &[u8]) -> Result<Self, String> {
        let newline = bytes
            .iter()
            .position(|&b| b == b'\n')
            .ok_or("no header line (truncated?)")?;
        let header = std::str::from_utf8(&bytes[..newline]).map_err(|_| "header is not text")?;
        let json = &bytes[newline + 1..];
        let mut parts = header.split(' ');
        if parts.next() != Some(MAGIC) {
            return Err(format!("not weir checkpoint metadata (header `{header}`)"));
        }
        let version: u32 = parts
            .next()
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("bad header `{header}`"))?;
        if version != VERSION {
            return Err(format!(
                "metadata version {version}; this weir reads version {VERSION}"
            ));
        }
        let expected = parts
            .next()
            .and_then(|c| c.strip_prefix("xxh3="))
            .and_then(|c| u64::from_str_radix(c, 16).ok())
            .ok_or_else(|| format!("bad checksum in header `{header}`"))?;
        let actual = xxhash_rust::xxh3::xxh3_64(json);
        if actual != expected {
            return Err(format!(
                "metadata checksum mismatch (xxh3 {actual:016x}, header says {expected:016x}): truncated or corrupted"
            ));
        }
        let metadata: Self =
            serde_json::from_slice(json).map_err(|e| format!("metadata is not valid: {e}"))?;
        if metadata.version != VERSION {
            return Err(format!("metadata body version {}", metadata.version));
        }
        for file in metadata.files() {
            file.check_path()?;
        }
        Ok(metadata)
    }
}

/// A list of files, or (older metadata) one file.
fn one_or_many<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<FileRef>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Many(Vec<FileRef>),
        One(FileRef),
    }
    Ok(match Raw::deserialize(d)? {
        Raw::Many(files) => files,
        Raw::One(file) => vec![file],
    })
}

/// An xxh3 checksum as 16 hex digits.
pub fn hex(xxh3: u64) -> String {
    format!("{xxh3:016x}")
}

/// The checksum of `bytes` as the metadata records it (xxh3-64, 16 hex digits).
pub fn checksum(bytes: &[u8]) -> String {
    hex(xxhash_rust::xxh3::xxh3_64(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> CheckpointMetadata {
        CheckpointMetadata {
            version: VERSION,
            job: "q5".into(),
            id: 7,
            kind: SnapshotKind::Checkpoint,
            triggered_at: 1,
            completed_at: 2,
            key_groups: 128,
            operator_state: vec![FileRef::new(
                "operator-state-0".into(),
                Placed { size: 10, xxh3: 5 },
            )],
            nodes: vec![NodeState {
                name: "counts".into(),
                kind: "window-aggregate".into(),
                parallelism: 1,
                subtasks: vec![StoredSubtask {
                    subtask: 0,
                    operator: None,
                    keyed: Some(KeyedHandle {
                        format: KeyedFormat::RocksNative,
                        key_groups: [0, 128],
                        files: vec![FileRef::new(
                            "../shared/r/counts-0/000009.sst".into(),
                            Placed { size: 3, xxh3: 9 },
                        )],
                        states: vec![],
                    }),
                }],
            }],
        }
    }

    #[test]
    fn metadata_round_trips_and_counts_its_files() {
        let m = sample();
        let bytes = m.encode().unwrap();
        assert!(bytes.starts_with(b"weir-checkpoint 1 xxh3="));
        assert_eq!(CheckpointMetadata::decode(&bytes).unwrap(), m);
        assert_eq!(m.files().count(), 2);
        assert_eq!(m.size(), 13);
        assert!(m.files().any(FileRef::is_shared));
    }

    #[test]
    fn damaged_metadata_is_refused_with_the_reason() {
        let bytes = sample().encode().unwrap();
        let truncated = &bytes[..bytes.len() - 5];
        assert!(
            CheckpointMetadata::decode(truncated)
                .unwrap_err()
                .contains("checksum mismatch")
        );
        let mut flipped = bytes.clone();
        let at = flipped.len() / 2;
        flipped[at] ^= 0x20;
        assert!(CheckpointMetadata::decode(&flipped).is_err());
        assert!(
            CheckpointMetadata::decode(b"hello\n{}")
                .unwrap_err()
                .contains("not weir")
        );
        assert!(CheckpointMetadata::decode(b"").is_err());
    }

    #[test]
    fn paths_that_leave_the_snapshot_are_refused() {
        for bad in [
            "../../etc/passwd",
            "/etc/passwd",
            "../other-job/x",
            "../shared/../../x",
            "counts-0/../../x",
            "counts-0//x",
            "./x",
            "",
            "../shared/",
        ] {
            let mut m = sample();
            m.operator_state[0].path = bad.into();
            let bytes = m.encode().unwrap();
            let e = CheckpointMetadata::decode(&bytes).unwrap_err();
            assert!(
                e.contains(&format!("file `{bad}` lies outside")),
                "{bad}: {e}"
            );
        }
        let mut m = sample();
        m.operator_state[0].path = "counts-0/000012.sst".into();
        assert!(CheckpointMetadata::decode(&m.encode().unwrap()).is_ok());
    }

    #[test]
    fn metadata_with_one_operator_state_file_still_reads() {
        // As weir wrote it before operator state could span several merged files.
        let json = r#"{"version":1,"job":"q5","id":7,"kind":"checkpoint","triggered-at":1,
            "completed-at":2,"key-groups":128,
            "operator-state":{"path":"operator-state","size":10,"xxh3":"0000000000000005"},
            "nodes":[{"name":"src","kind":"nexmark","parallelism":1,"subtasks":[
              {"subtask":0,"operator":{"offset":0,"length":10,"xxh3":"00000000000000aa"}}]}]}"#;
        let header = format!(
            "weir-checkpoint 1 xxh3={:016x}\n",
            xxhash_rust::xxh3::xxh3_64(json.as_bytes())
        );
        let m = CheckpointMetadata::decode(&[header.as_bytes(), json.as_bytes()].concat()).unwrap();
        assert_eq!(m.operator_state.len(), 1);
        assert_eq!(m.operator_state[0].path, "operator-state");
        let range = m.nodes[0].subtasks[0].operator.as_ref().unwrap();
        assert_eq!((range.file, range.offset, range.length), (0, 0, 10));
    }
}
