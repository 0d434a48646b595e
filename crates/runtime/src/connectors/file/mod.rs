//! `file`: JSON lines in part files of a directory, committed exactly once.
//!
//! Each subtask writes into a hidden file, `.part-<subtask>-<writer>-<n>.inprogress` (`writer`
//! unique to the process and subtask). At a checkpoint
//! barrier `id` it flushes and fsyncs that file and renames it to
//! `.part-<subtask>-<id>.jsonl.pending`: a transaction, recorded in the checkpoint. When the
//! checkpoint is complete the job commits it by renaming it to `part-<subtask>-<id>.jsonl`
//! (and fsyncing the directory). A part file that is visible is therefore complete and covered
//! by a completed checkpoint: a crash leaves only hidden files, which the next run removes.
//! At the end of a bounded input the last file becomes a transaction of the job's final
//! snapshot and is committed the same way.
//!
//! A run that restores snapshot `n` commits the transactions it holds (again, if they were
//! already: commits are idempotent) and removes part files of snapshots after `n`, which
//! belong to a history the restore discards: the output is then exactly what the restored
//! run will have produced. A run that does not restore replaces the directory's part files.
//! The sink owns `part-*` and `.part-*` files in its directory and nothing else there.

use std::path::{Path, PathBuf};

use arrow_array::RecordBatch;
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use tokio::io::AsyncWriteExt;

use crate::api::connector::{
    HostLimits, Hosted, Location, Reach, Secret, ServerFile, SinkConnector, SinkContext,
    SpecProblem,
};
use crate::api::two_phase::{Committer, Recovered, Stage, TwoPhase, TwoPhaseFactory};
use crate::api::{OperatorError, Sink, SinkFactory, SnapshotTransaction, SubtaskContext};
use crate::config::SinkFormat;
use crate::format::json::JsonEncoder;

/// The keys of `kind: file`: JSON lines in files `part-<subtask>-<checkpoint>.jsonl` of a
/// directory, committed exactly once.
#[derive(Clone, Debug, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct FileSinkSpec {
    /// The input: a node name, or `node.port`.
    pub from: String,
    /// The output directory (created if missing).
    #[schemars(length(min = 1))]
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1024))]
    pub parallelism: Option<u32>,
    /// `json` (the default), or `changelog-json` to write each row's change kind.
    #[serde(default, skip_serializing_if = "SinkFormat::is_default")]
    pub format: SinkFormat,
}

impl SinkConnector for FileSinkSpec {
    fn from(&self) -> &str {
        &self.from
    }

    fn parallelism(&self) -> Option<u32> {
        self.parallelism
    }

    fn plan(
        &self,
        input: &arrow_schema::SchemaRef,
        _cx: SinkContext<'_>,
    ) -> Result<std::sync::Arc<dyn SinkFactory>, Vec<SpecProblem>> {
        super::check_changes(input, self.format)?;
        Ok(std::sync::Arc::new(TwoPhaseFactory(
            FileSinkFactory::new(PathBuf::from(&self.path)).with_format(self.format),
        )))
    }
}

/// It writes its directory on the machine that runs it.
impl Hosted for FileSinkSpec {
    fn endpoints(&self) -> Vec<Reach> {
        Vec::new()
    }

    fn server_files(&self) -> Vec<ServerFile> {
        Vec::new()
    }

    fn locations(&self) -> Vec<Location> {
        vec![Location {
            at: "/path".into(),
            path: self.path.clone(),
        }]
    }

    fn secrets(&self) -> Vec<Secret> {
        Vec::new()
    }

    fn within(&self, _limits: &HostLimits) -> Vec<SpecProblem> {
        Vec::new()
    }
}

/// Encoded bytes buffered before a write to the file.
const FLUSH_BYTES: usize = 1 << 20;

/// A pending part file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transaction {
    /// The snapshot it belongs to.
    pub id: u64,
    /// Its hidden name while pending.
    pub pending: String,
    /// Its name once committed.
    pub visible: String,
}

impl SnapshotTransaction for Transaction {
    fn snapshot(&self) -> u64 {
        self.id
    }
}

fn part_name(subtask: usize, id: u64) -> String {
    format!("part-{subtask}-{id:010}.jsonl")
}

/// The snapshot id in a committed part file's name (`part-3-0000000012.jsonl` → 12).
fn part_id(name: &str) -> Option<u64> {
    let rest = name.strip_prefix("part-")?.strip_suffix(".jsonl")?;
    let (_, id) = rest.rsplit_once('-')?;
    id.parse().ok()
}

pub struct FileSink {
    dir: PathBuf,
    subtask: usize,
    /// The file being written, if anything was written since the last transaction.
    file: Option<(PathBuf, tokio::fs::File)>,
    /// In-progress files made so far (names them uniquely within this sink).
    files_made: u64,
    /// Names this sink's in-progress files apart from any other process's: in a fleet, a
    /// server that lost a job's lease may still be writing into the same directory as the
    /// server that took it over, until it notices.
    writer: u64,
    buffer: Vec<u8>,
    encoder: JsonEncoder,
}

impl FileSink {
    pub fn new(dir: &Path, subtask: usize) -> Self {
        Self {
            dir: dir.to_path_buf(),
            subtask,
            file: None,
            files_made: 0,
            writer: xxhash_rust::xxh3::xxh3_64(
                format!(
                    "{}-{:?}-{subtask}",
                    std::process::id(),
                    std::time::SystemTime::now()
                )
                .as_bytes(),
            ),
            buffer: Vec::with_capacity(FLUSH_BYTES + (64 << 10)),
            encoder: JsonEncoder::new(),
        }
    }

    /// Writes in `format`.
    pub fn with_format(mut self, format: SinkFormat) -> Self {
        self.encoder = super::encoder(format);
        self
    }

    fn io_error(&self, what: &str, path: &Path, e: std::io::Error) -> OperatorError {
        OperatorError::external(format!("{what} {}", path.display()), e)
    }

    async fn flush_buffer(&mut self) -> Result<(), OperatorError> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        if self.file.is_none() {
            let path = self.dir.join(format!(
                ".part-{}-{:016x}-{}.inprogress",
                self.subtask, self.writer, self.files_made
            ));
            self.files_made += 1;
            let file = tokio::fs::File::create(&path)
                .await
                .map_err(|e| self.io_error("creating", &path, e))?;
            self.file = Some((path, file));
        }
        if let Some((path, file)) = self.file.as_mut()
            && let Err(e) = file.write_all(&self.buffer).await
        {
            let path = path.clone();
            return Err(self.io_error("writing", &path, e));
        }
        self.buffer.clear();
        Ok(())
    }

    /// Turns what was written since the last transaction into transaction `id`.
    async fn seal(&mut self, id: u64) -> Result<Option<Transaction>, OperatorError> {
        self.flush_buffer().await?;
        let Some((path, mut file)) = self.file.take() else {
            return Ok(None);
        };
        let synced = async {
            file.flush().await?;
            file.sync_all().await
        };
        synced
            .await
            .map_err(|e| self.io_error("syncing", &path, e))?;
        let visible = part_name(self.subtask, id);
        let pending = format!(".{visible}.pending");
        tokio::fs::rename(&path, self.dir.join(&pending))
            .await
            .map_err(|e| self.io_error("renaming", &path, e))?;
        sync_dir(&self.dir).await?;
        Ok(Some(Transaction {
            id,
            pending,
            visible,
        }))
    }
}

async fn sync_dir(dir: &Path) -> Result<(), OperatorError> {
    let owned = dir.to_path_buf();
    tokio::task::spawn_blocking(move || std::fs::File::open(&owned)?.sync_all())
        .await
        .map_err(|e| OperatorError::Internal(format!("directory sync task: {e}")))?
        .map_err(|e| OperatorError::external(format!("syncing {}", dir.display()), e))
}

/// Rows staged in a hidden in-progress file; a pre-commit syncs it and renames it pending.
/// The transaction of the end of input is named after the snapshot that follows the last
/// barrier: later than every checkpoint this run or an earlier one completed, so a restore of
/// one of them removes it, and never the name of a part file already committed.
impl Stage for FileSink {
    type Transaction = Transaction;

    fn write(&mut self, batch: RecordBatch) -> BoxFuture<'_, Result<(), OperatorError>> {
        Box::pin(async move {
            self.encoder
                .encode(&batch, &mut self.buffer)
                .map_err(|e| OperatorError::Internal(e.to_string()))?;
            if self.buffer.len() >= FLUSH_BYTES {
                self.flush_buffer().await?;
            }
            Ok(())
        })
    }

    fn pre_commit(
        &mut self,
        snapshot: u64,
    ) -> BoxFuture<'_, Result<Option<Transaction>, OperatorError>> {
        Box::pin(self.seal(snapshot))
    }
}

/// Makes the file sink's subtasks and commits their transactions.
pub struct FileSinkFactory {
    dir: PathBuf,
    format: SinkFormat,
}

impl FileSinkFactory {
    pub fn new(dir: PathBuf) -> Self {
        Self {
            dir,
            format: SinkFormat::Json,
        }
    }

    /// Its subtasks write in `format`.
    pub fn with_format(mut self, format: SinkFormat) -> Self {
        self.format = format;
        self
    }

    /// Creates the directory, commits the restored transactions, removes stale part files.
    fn prepare_dir(&self, restore: Option<&Recovered<Transaction>>) -> Result<(), OperatorError> {
        let dir = &self.dir;
        let io = |e: std::io::Error| {
            OperatorError::external(format!("preparing output directory {}", dir.display()), e)
        };
        std::fs::create_dir_all(dir).map_err(io)?;
        if let Some(r) = restore {
            commit_in(dir, &r.transactions).map_err(io)?;
        }
        let mut removed_committed = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(io)? {
            let entry = entry.map_err(io)?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            let stale = if name.starts_with(".part-") {
                true
            } else if name.starts_with("part-") && name.ends_with(".jsonl") {
                match (restore, part_id(name)) {
                    (Some(r), Some(id)) => id > r.checkpoint,
                    _ => true,
                }
            } else {
                false
            };
            if stale {
                if restore.is_some() && !name.starts_with('.') {
                    removed_committed.push(name.to_string());
                }
                std::fs::remove_file(entry.path()).map_err(io)?;
            }
        }
        if !removed_committed.is_empty() {
            tracing::warn!(
                dir = %dir.display(),
                files = ?removed_committed,
                "removed output committed after the restored snapshot: it is produced again"
            );
        }
        Ok(())
    }
}

/// Renames pending files to their visible names; a file already renamed is skipped.
fn commit_in(dir: &Path, transactions: &[Transaction]) -> std::io::Result<usize> {
    let mut committed = 0;
    for t in transactions {
        let pending = dir.join(&t.pending);
        let visible = dir.join(&t.visible);
        match std::fs::rename(&pending, &visible) {
            Ok(()) => committed += 1,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && visible.exists() => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(std::io::Error::new(
                    e.kind(),
                    format!(
                        "{} is gone and {} was never made: output of snapshot {} is lost",
                        pending.display(),
                        visible.display(),
                        t.id
                    ),
                ));
            }
            Err(e) => return Err(e),
        }
    }
    if committed > 0 {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(committed)
}

impl Committer for FileSinkFactory {
    type Transaction = Transaction;
    const SINK: &'static str = "file";

    fn recover(
        &self,
        _parallelism: usize,
        restored: Option<Recovered<Transaction>>,
    ) -> BoxFuture<'_, Result<(), OperatorError>> {
        // A few renames and removals in one directory, before any subtask runs.
        let result = self.prepare_dir(restored.as_ref());
        Box::pin(async move { result })
    }

    fn create(&self, ctx: &SubtaskContext) -> Result<Box<dyn Sink>, OperatorError> {
        Ok(Box::new(TwoPhase::new(
            FileSink::new(&self.dir, ctx.subtask).with_format(self.format),
            ctx.checkpoint_base,
        )))
    }

    fn commit(
        &self,
        transactions: Vec<Transaction>,
    ) -> BoxFuture<'static, Result<(), OperatorError>> {
        let dir = self.dir.clone();
        Box::pin(async move {
            let d = dir.clone();
            tokio::task::spawn_blocking(move || commit_in(&d, &transactions))
                .await
                .map_err(|e| OperatorError::Internal(format!("commit task: {e}")))?
                .map_err(|e| {
                    OperatorError::external(format!("committing output in {}", dir.display()), e)
                })?;
            Ok(())
        })
    }

    fn abort(&self, transactions: Vec<Transaction>) -> Result<(), OperatorError> {
        for t in transactions {
            match std::fs::remove_file(self.dir.join(&t.pending)) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    return Err(OperatorError::external(
                        format!("discarding {}", t.pending),
                        e,
                    ));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::sink_conformance::{self, SinkUnderTest};

    /// The file sink under the sink conformance suite: what a reader sees is the rows of the
    /// directory's visible part files (hidden in-progress and pending files are not output).
    struct PartFiles {
        dir: tempfile::TempDir,
    }

    impl SinkUnderTest for PartFiles {
        fn factory(&self) -> std::sync::Arc<dyn SinkFactory> {
            let spec: FileSinkSpec = serde_json::from_value(serde_json::json!({
                "from": "in",
                "path": self.dir.path().to_string_lossy(),
            }))
            .unwrap();
            let cx = SinkContext {
                job: "conformance",
                node: "out",
                repeat_within: std::time::Duration::from_secs(60),
            };
            spec.plan(&sink_conformance::schema(), cx).unwrap()
        }

        fn visible(&self) -> BoxFuture<'_, Vec<serde_json::Value>> {
            Box::pin(async move {
                let mut rows = Vec::new();
                for entry in std::fs::read_dir(self.dir.path()).unwrap() {
                    let name = entry.unwrap().file_name().to_string_lossy().into_owned();
                    if !name.starts_with("part-") {
                        continue;
                    }
                    let text = std::fs::read_to_string(self.dir.path().join(&name)).unwrap();
                    rows.extend(text.lines().map(|l| serde_json::from_str(l).unwrap()));
                }
                rows
            })
        }
    }

    /// Crash before and after pre-commit, a restore commits once, a repeated commit is a
    /// no-op, an abort leaves nothing visible: the suite every transactional sink runs.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_file_sink_conforms() {
        let sink = PartFiles {
            dir: tempfile::tempdir().unwrap(),
        };
        sink_conformance::run(&sink).await;
    }

    #[test]
    fn part_names_carry_the_snapshot_id() {
        assert_eq!(part_name(3, 12), "part-3-0000000012.jsonl");
        assert_eq!(part_id("part-3-0000000012.jsonl"), Some(12));
        assert_eq!(part_id("part-3.jsonl"), None);
    }

    fn txn(id: u64) -> Transaction {
        Transaction {
            id,
            pending: format!(".{}.pending", part_name(0, id)),
            visible: part_name(0, id),
        }
    }

    #[test]
    fn restoring_commits_its_transactions_and_drops_what_came_after() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(d.join(part_name(0, 3)), "old\n").unwrap();
        std::fs::write(d.join(part_name(1, 5)), "later history\n").unwrap();
        std::fs::write(d.join(&txn(4).pending), "pending 4\n").unwrap();
        std::fs::write(d.join(".part-0-7.inprogress"), "partial").unwrap();
        std::fs::write(d.join("notes.txt"), "not ours").unwrap();
        let f = FileSinkFactory::new(d.to_path_buf());
        let restore = Recovered {
            checkpoint: 4,
            transactions: vec![txn(4)],
        };
        f.prepare_dir(Some(&restore)).unwrap();
        let mut names: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(
            names,
            [
                "notes.txt",
                "part-0-0000000003.jsonl",
                "part-0-0000000004.jsonl"
            ]
        );
        // Committing again (a crash after the commit) changes nothing.
        f.prepare_dir(Some(&restore)).unwrap();
        assert_eq!(
            std::fs::read_to_string(d.join(part_name(0, 4))).unwrap(),
            "pending 4\n"
        );
        // A transaction whose file vanished is an error, not silent loss.
        let lost = Recovered {
            checkpoint: 9,
            transactions: vec![txn(9)],
        };
        assert!(f.prepare_dir(Some(&lost)).is_err());
        // A fresh run replaces everything of ours.
        f.prepare_dir(None).unwrap();
        assert_eq!(std::fs::read_dir(d).unwrap().count(), 1);
    }
}
