//! `file`: JSON lines in `part-<subtask>.jsonl` files of a directory.
//!
//! Each subtask writes `part-<subtask>.jsonl.inprogress` and, when its input ends, flushes it,
//! fsyncs it, renames it to `part-<subtask>.jsonl` and fsyncs the directory: a part file that
//! exists is complete, and a crashed run leaves only `.inprogress` files behind. A run replaces
//! the part files of the previous run of the same sink (the sink owns `part-*.jsonl` in its
//! directory and nothing else there).

use std::path::{Path, PathBuf};

use arrow_array::RecordBatch;
use futures::future::BoxFuture;
use tokio::io::AsyncWriteExt;

use super::sink::Sink;
use crate::error::OperatorError;
use crate::format::json::JsonEncoder;

/// Encoded bytes buffered before a write to the file.
const FLUSH_BYTES: usize = 1 << 20;

pub struct FileSink {
    dir: PathBuf,
    part: PathBuf,
    temp: PathBuf,
    file: Option<tokio::fs::File>,
    buffer: Vec<u8>,
    encoder: JsonEncoder,
}

impl FileSink {
    pub fn new(dir: &Path, subtask: usize) -> Self {
        let part = dir.join(format!("part-{subtask}.jsonl"));
        let temp = dir.join(format!("part-{subtask}.jsonl.inprogress"));
        Self {
            dir: dir.to_path_buf(),
            part,
            temp,
            file: None,
            buffer: Vec::with_capacity(FLUSH_BYTES + (64 << 10)),
            encoder: JsonEncoder::new(),
        }
    }

    /// Before a run: creates the directory, removes leftover `.inprogress` files and part
    /// files of subtasks this run will not have.
    pub fn prepare(dir: &Path, parallelism: usize) -> std::io::Result<()> {
        std::fs::create_dir_all(dir)?;
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            let Some(rest) = name.strip_prefix("part-") else {
                continue;
            };
            let stale = if rest.ends_with(".jsonl.inprogress") {
                true
            } else if let Some(n) = rest.strip_suffix(".jsonl") {
                n.parse::<usize>().is_ok_and(|n| n >= parallelism)
            } else {
                false
            };
            if stale {
                std::fs::remove_file(entry.path())?;
            }
        }
        Ok(())
    }

    fn io_error(&self, what: &str, e: std::io::Error) -> OperatorError {
        OperatorError::external(format!("{what} {}", self.temp.display()), e)
    }

    async fn flush_buffer(&mut self) -> Result<(), OperatorError> {
        if self.file.is_none() {
            let file = tokio::fs::File::create(&self.temp)
                .await
                .map_err(|e| self.io_error("creating", e))?;
            self.file = Some(file);
        }
        if let Some(file) = self.file.as_mut() {
            if let Err(e) = file.write_all(&self.buffer).await {
                return Err(self.io_error("writing", e));
            }
        }
        self.buffer.clear();
        Ok(())
    }
}

impl Sink for FileSink {
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

    fn finish(&mut self) -> BoxFuture<'_, Result<(), OperatorError>> {
        Box::pin(async move {
            self.flush_buffer().await?;
            if let Some(mut file) = self.file.take() {
                file.flush()
                    .await
                    .map_err(|e| self.io_error("flushing", e))?;
                file.sync_all()
                    .await
                    .map_err(|e| self.io_error("syncing", e))?;
            }
            tokio::fs::rename(&self.temp, &self.part)
                .await
                .map_err(|e| self.io_error("publishing", e))?;
            let dir = self.dir.clone();
            tokio::task::spawn_blocking(move || std::fs::File::open(&dir)?.sync_all())
                .await
                .map_err(|e| OperatorError::Internal(format!("directory sync task: {e}")))?
                .map_err(|e| OperatorError::external(format!("syncing {}", self.dir.display()), e))
        })
    }
}
