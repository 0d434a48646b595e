//! JSON lines from files, decoded by a declared schema, as a parallel source.
//!
//! The files are cut into chunks (`chunk-size`) handed to subtasks round-robin, so the
//! subtasks' positions in event time stay close and their watermarks advance together. A line
//! belongs to the chunk holding its first byte, so chunks partition the lines exactly.
//!
//! A line that fails (bad JSON, a value that does not fit the schema, longer than
//! `max-line-length`) fails the job naming its file, line number and byte offset, or under
//! `on-error: skip` is skipped and counted. The line number is counted only then
//! ([`line_number`]), by reading the file up to the line: chunks start mid-file, and counting
//! as lines go by would need every earlier chunk counted first.
//!
//! A checkpoint records what each subtask has left to read, as chunks (the current one from
//! its next unread line). A restore deals every old subtask's remaining chunks out again
//! round-robin, in file order, so any parallelism reads each remaining line exactly once.
//!
//! A subtask decodes what it reads either inline, on its own task, or, when cores are free
//! (`decode-threads`, by default the machine's cores over the source's parallelism), on a few
//! threads of its own ahead of what it emits ([`ahead`]): one file at parallelism 1 then keeps
//! every core busy, and what comes out, batch for batch, and what a checkpoint records are
//! the same as inline.
//!
//! # Layout
//! - this module: the source, its decoding of one line, its checkpoints and its factory, and
//!   its connector (planning, and what a server asks of it).
//! - [`ahead`]: decoding on threads of the subtask's own, ahead of the ordered emit.
//! - `spec`: its keys ([`JsonlSourceSpec`]).

mod ahead;
mod spec;
#[cfg(test)]
mod tests;

pub use spec::JsonlSourceSpec;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::RecordBatch;
use futures::future::BoxFuture;

use crate::api::{OperatorError, Source, SourceEvent, SubtaskMetrics};
use indexmap::IndexMap;

use crate::api::connector::{
    HostLimits, Hosted, Location, PlannedSource, Reach, Secret, ServerFile, SourceConnector,
    SourceContext, SpecProblem,
};
use crate::config::{ByteSize, EventTimeSpec, OnError};
use crate::format::json::{DecodeError, Decoded, JsonDecoder, JsonLayout, JsonType};
use crate::format::lines::{Chunk, LineReader, LineTooLong, LongLines, line_number, plan_chunks};
use ahead::DecodeAhead;

/// Read buffer per subtask.
const READ_BUFFER: usize = 1 << 20;

/// The layout a source spec declares, or a message saying what is missing.
pub fn layout(spec: &JsonlSourceSpec) -> Result<JsonLayout, String> {
    layout_of(&spec.schema, &spec.variants)
}

/// The layout of `schema` or `variants` (of any source that decodes JSON objects).
pub fn layout_of(
    schema: &Option<IndexMap<String, JsonType>>,
    variants: &Option<IndexMap<String, IndexMap<String, JsonType>>>,
) -> Result<JsonLayout, String> {
    let layout = match (schema, variants) {
        (Some(schema), None) => JsonLayout::Single(schema.clone()),
        (None, Some(variants)) => JsonLayout::Variants(variants.clone()),
        (Some(_), Some(_)) => return Err("declare either `schema` or `variants`, not both".into()),
        (None, None) => {
            return Err(
                "declare the lines' fields with `schema` (one shape) or `variants` (tagged lines)"
                    .into(),
            );
        }
    };
    layout.validate().map_err(|e| e.to_string())?;
    Ok(layout)
}

/// The files a source reads, with their sizes, in name order.
pub fn list_files(path: &Path) -> std::io::Result<Vec<(PathBuf, u64)>> {
    let meta = std::fs::metadata(path)?;
    if meta.is_file() {
        return Ok(vec![(path.to_path_buf(), meta.len())]);
    }
    let mut files = Vec::new();
    for entry in std::fs::read_dir(path)? {
        let entry = entry?;
        let name = entry.file_name();
        if name.to_string_lossy().starts_with('.') {
            continue;
        }
        let meta = entry.metadata()?;
        if meta.is_file() {
            files.push((entry.path(), meta.len()));
        }
    }
    files.sort();
    Ok(files)
}

/// A subtask of a JSON-lines source.
pub struct JsonlSource {
    reader: LineReader,
    /// Decodes inline, when there are no decode threads.
    lines: LineDecoder,
    /// What a decode thread's own [`LineDecoder`] is made from.
    decoding: Decoding,
    pending: Vec<(usize, RecordBatch)>,
    metrics: Arc<SubtaskMetrics>,
    /// Threads to decode ahead on (2 or more), started by the first [`Source::next`]; 0
    /// decodes inline.
    threads: usize,
    ahead: Option<DecodeAhead>,
}

impl JsonlSource {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        spec: &JsonlSourceSpec,
        layout: &JsonLayout,
        files: &[(PathBuf, u64)],
        subtask: usize,
        parallelism: usize,
        want: &[bool],
        batch_size: usize,
        metrics: Arc<SubtaskMetrics>,
    ) -> Self {
        let chunks = plan_chunks(files, spec.chunk_size.0.max(1), subtask, parallelism);
        Self::with_chunks(spec, layout, chunks, want, batch_size, metrics)
    }

    /// A subtask reading `chunks`. Both constructors decode inline; the factory sets the
    /// subtask's [decode threads](Self::with_decode_threads).
    pub fn with_chunks(
        spec: &JsonlSourceSpec,
        layout: &JsonLayout,
        chunks: Vec<Chunk>,
        want: &[bool],
        batch_size: usize,
        metrics: Arc<SubtaskMetrics>,
    ) -> Self {
        let long_lines = match spec.on_error {
            OnError::Fail => LongLines::Fail,
            OnError::Skip => LongLines::Skip,
        };
        let max_line_length = usize::try_from(spec.max_line_length.0).unwrap_or(usize::MAX);
        let decoding = Decoding {
            layout: layout.clone(),
            want: want.to_vec(),
            read: Vec::new(),
            on_error: spec.on_error,
            batch_size: batch_size.max(1),
        };
        Self {
            reader: LineReader::new(chunks, READ_BUFFER)
                .with_max_line_length(max_line_length)
                .with_long_lines(long_lines),
            lines: decoding.decoder(),
            decoding,
            pending: Vec::new(),
            metrics,
            threads: 0,
            ahead: None,
        }
    }

    /// Builds only the columns `read` marks (per port; see [`JsonDecoder::reading`]).
    pub fn reading(mut self, read: &[Vec<bool>]) -> Self {
        self.decoding.read = read.to_vec();
        self.lines = self.decoding.decoder();
        self
    }

    /// Decodes on `threads` threads of the subtask's own, ahead of what it emits; 0 or 1
    /// decode inline.
    pub fn with_decode_threads(mut self, threads: usize) -> Self {
        self.threads = if threads > 1 { threads } else { 0 };
        self
    }

    /// Reads the next buffer-full and decodes it on this task.
    async fn next_inline(&mut self) -> Result<SourceEvent, OperatorError> {
        loop {
            if !self.pending.is_empty() {
                return Ok(SourceEvent::Batches(std::mem::take(&mut self.pending)));
            }
            let decoder = &mut self.lines;
            let pending = &mut self.pending;
            let mut lines = 0u64;
            let mut skipped = 0u64;
            let read = self
                .reader
                .next_lines(|line: &[u8], offset: u64, path: &Path| {
                    lines += 1;
                    decoder.line(line, offset, path, pending, &mut skipped)
                })
                .await;
            let too_long = self.reader.take_long_lines_skipped();
            SubtaskMetrics::add(&self.metrics.skipped, skipped + too_long);
            lines += too_long;
            let more = match read {
                Ok(more) => more,
                Err(failure) => return Err(failure.to_operator_error().await),
            };
            SubtaskMetrics::add(&self.metrics.events, lines);
            self.metrics.progress.store(
                self.reader.bytes_read(),
                std::sync::atomic::Ordering::Relaxed,
            );
            self.lines.flush(&mut self.pending);
            if !more && self.pending.is_empty() {
                return Ok(SourceEvent::End);
            }
        }
    }
}

/// The decode threads of a subtask of `spec` at `parallelism`: the machine's cores shared out
/// between the subtasks (so a file read at parallelism 1 on two cores is decoded on two
/// threads, and at parallelism 2 inline by each subtask, as before), or the setting, up to the
/// cores (more threads than cores decode no faster, and a hosted job must not ask a server for
/// thousands).
pub fn decode_threads(spec: &JsonlSourceSpec, parallelism: usize) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    match spec.decode_threads {
        Some(threads) => (threads as usize).min(cores),
        None => cores / parallelism.max(1),
    }
}

impl Source for JsonlSource {
    fn next(&mut self) -> BoxFuture<'_, Result<SourceEvent, OperatorError>> {
        Box::pin(async move {
            if self.threads > 1 && self.ahead.is_none() {
                self.ahead = DecodeAhead::start(self.threads, &self.decoding, &self.reader);
                if self.ahead.is_none() {
                    // No thread could be started: decode inline.
                    self.threads = 0;
                }
            }
            match &mut self.ahead {
                Some(ahead) => ahead.next(&mut self.reader, &self.metrics).await,
                None => self.next_inline().await,
            }
        })
    }

    fn snapshot(&mut self) -> Result<Option<serde_json::Value>, OperatorError> {
        // Between calls of `next` every decoded row has been returned: the reader's position
        // is exactly what was emitted. Reading ahead, the reader is further on; what was
        // emitted is the position after the last piece returned.
        let remaining = match &self.ahead {
            Some(ahead) => self.reader.remaining_at(ahead.emitted()),
            None => self.reader.remaining(),
        };
        let chunks: Vec<ChunkState> = remaining
            .into_iter()
            .map(|c| ChunkState {
                path: c.path,
                start: c.start,
                end: c.end,
            })
            .collect();
        Ok(Some(serde_json::json!({ "chunks": chunks })))
    }
}

/// What a [`LineDecoder`] is made from: one per decode thread, as a [`JsonDecoder`] holds the
/// rows it is building.
#[derive(Clone, Debug)]
struct Decoding {
    layout: JsonLayout,
    want: Vec<bool>,
    /// The columns built per port; empty: all of them.
    read: Vec<Vec<bool>>,
    on_error: OnError,
    batch_size: usize,
}

impl Decoding {
    fn decoder(&self) -> LineDecoder {
        LineDecoder {
            decoder: JsonDecoder::new(&self.layout, &self.want, self.batch_size)
                .reading(&self.read),
            on_error: self.on_error,
            batch_size: self.batch_size,
        }
    }
}

/// Lines into batches of at most `batch_size` rows per port: what happens to each line,
/// inline or on a decode thread.
#[derive(Debug)]
struct LineDecoder {
    decoder: JsonDecoder,
    on_error: OnError,
    batch_size: usize,
}

impl LineDecoder {
    /// Decodes the line at `offset` of `path`, adding full batches to `out` and counting
    /// skipped lines in `skipped`; under `on-error: fail` a line that does not decode stops
    /// it with its place.
    fn line(
        &mut self,
        line: &[u8],
        offset: u64,
        path: &Path,
        out: &mut Vec<(usize, RecordBatch)>,
        skipped: &mut u64,
    ) -> Result<(), LineFailure> {
        match self.decoder.decode_line(line) {
            Ok(Decoded::Row { port }) => {
                if self.decoder.buffered(port) >= self.batch_size {
                    out.extend(self.decoder.flush());
                }
            }
            Ok(Decoded::Skipped) => *skipped += 1,
            Err(error) => match self.on_error {
                OnError::Skip => *skipped += 1,
                OnError::Fail => {
                    return Err(LineFailure::Decode {
                        path: path.to_path_buf(),
                        offset,
                        error,
                    });
                }
            },
        }
        Ok(())
    }

    /// Adds the rows decoded so far to `out`.
    fn flush(&mut self, out: &mut Vec<(usize, RecordBatch)>) {
        out.extend(self.decoder.flush());
    }
}

/// Why reading lines stopped.
#[derive(Debug)]
enum LineFailure {
    Io(std::io::Error),
    TooLong(LineTooLong),
    /// A line that did not decode, under `on-error: fail`; its line number is not counted yet.
    Decode {
        path: PathBuf,
        offset: u64,
        error: DecodeError,
    },
}

impl From<std::io::Error> for LineFailure {
    fn from(e: std::io::Error) -> Self {
        LineFailure::Io(e)
    }
}

impl From<LineTooLong> for LineFailure {
    fn from(e: LineTooLong) -> Self {
        LineFailure::TooLong(e)
    }
}

impl LineFailure {
    /// The job's error, naming file, line number and byte offset of a bad line. Counting the
    /// line reads the file up to it; if that fails, the message says so instead of a number.
    /// Only that count waits, and the failure is kept while it does, so a caller cancelled
    /// meanwhile can ask again.
    async fn to_operator_error(&self) -> OperatorError {
        match self {
            // The same message and kind as the error itself; `OperatorError` owns its cause.
            LineFailure::Io(e) => std::io::Error::new(e.kind(), e.to_string()).into(),
            LineFailure::TooLong(e) => OperatorError::Data(format!(
                "{e} (raise `max-line-length`, or set `on-error: skip` to skip such lines)"
            )),
            LineFailure::Decode {
                path,
                offset,
                error,
            } => {
                let line = match line_number(path, *offset).await {
                    Ok(line) => line.to_string(),
                    Err(e) => format!("? (counting lines failed: {e})"),
                };
                OperatorError::Data(format!(
                    "{}: line {line} (byte {offset}): {error} (set `on-error: skip` to skip such \
                     lines)",
                    path.display()
                ))
            }
        }
    }
}

/// A chunk left to read.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct ChunkState {
    path: PathBuf,
    start: u64,
    end: u64,
}

#[derive(serde::Deserialize)]
struct SourceState {
    chunks: Vec<ChunkState>,
}

/// The chunks subtask `subtask` of `parallelism` reads after a restore: every old subtask's
/// remaining chunks, in file order, dealt out round-robin.
fn restored_chunks(
    states: impl Iterator<Item = serde_json::Value>,
    subtask: usize,
    parallelism: usize,
) -> Result<Vec<Chunk>, String> {
    let mut all = Vec::new();
    for state in states {
        let s: SourceState = serde_json::from_value(state)
            .map_err(|e| format!("a JSON-lines source position is not valid: {e}"))?;
        all.extend(s.chunks);
    }
    all.sort_by(|a, b| (&a.path, a.start).cmp(&(&b.path, b.start)));
    Ok(all
        .into_iter()
        .enumerate()
        .filter(|(i, _)| i % parallelism == subtask)
        .map(|(_, c)| Chunk {
            path: c.path,
            start: c.start,
            end: c.end,
        })
        .collect())
}

/// Makes the subtasks of a JSON-lines source. The file list is taken once per run, in
/// `prepare`, so every subtask plans its chunks over the same files.
pub struct JsonlSourceFactory {
    spec: JsonlSourceSpec,
    layout: JsonLayout,
    files: std::sync::Mutex<Vec<(PathBuf, u64)>>,
    /// The columns built per port (see [`JsonDecoder::reading`]); empty: all of them.
    read: Vec<Vec<bool>>,
}

impl JsonlSourceFactory {
    pub fn new(spec: &JsonlSourceSpec, layout: JsonLayout) -> Self {
        Self {
            spec: spec.clone(),
            layout,
            files: std::sync::Mutex::new(Vec::new()),
            read: Vec::new(),
        }
    }
}

impl crate::api::SourceFactory for JsonlSourceFactory {
    fn prepare(&self, _parallelism: usize) -> Result<Option<u64>, OperatorError> {
        let path = Path::new(&self.spec.path);
        let files = list_files(path).map_err(|e| {
            OperatorError::external(format!("reading the input {}", path.display()), e)
        })?;
        let total = files.iter().map(|(_, len)| len).sum();
        *self
            .files
            .lock()
            .map_err(|_| OperatorError::Internal("file list lock poisoned".into()))? = files;
        Ok(Some(total))
    }

    fn project(&self, read: &[Vec<bool>]) -> Option<Arc<dyn crate::api::SourceFactory>> {
        Some(Arc::new(Self {
            read: read.to_vec(),
            ..Self::new(&self.spec, self.layout.clone())
        }))
    }

    fn create(&self, ctx: &crate::api::SubtaskContext) -> Result<Box<dyn Source>, OperatorError> {
        let threads = decode_threads(&self.spec, ctx.parallelism);
        if let Some(restore) = ctx
            .restore
            .as_ref()
            .filter(|r| r.own_states().next().is_some())
        {
            let chunks =
                restored_chunks(restore.own_states().cloned(), ctx.subtask, ctx.parallelism)
                    .map_err(OperatorError::Data)?;
            return Ok(Box::new(
                JsonlSource::with_chunks(
                    &self.spec,
                    &self.layout,
                    chunks,
                    &ctx.want,
                    ctx.batch_size,
                    ctx.metrics.clone(),
                )
                .reading(&self.read)
                .with_decode_threads(threads),
            ));
        }
        let files = self
            .files
            .lock()
            .map_err(|_| OperatorError::Internal("file list lock poisoned".into()))?;
        Ok(Box::new(
            JsonlSource::new(
                &self.spec,
                &self.layout,
                &files,
                ctx.subtask,
                ctx.parallelism,
                &ctx.want,
                ctx.batch_size,
                ctx.metrics.clone(),
            )
            .reading(&self.read)
            .with_decode_threads(threads),
        ))
    }
}

/// The smallest `chunk-size`: each chunk is a split with its own position in every
/// checkpoint, so one-byte chunks of a large file are hundreds of millions of splits (a server
/// bounds the count itself: `--max-chunks`).
pub const MIN_CHUNK_SIZE: u64 = 256;

impl SourceConnector for JsonlSourceSpec {
    fn parallelism(&self) -> Option<u32> {
        self.parallelism
    }

    fn event_time(&self) -> &EventTimeSpec {
        &self.event_time
    }

    fn ports(&self) -> Vec<String> {
        crate::format::json::layout::variant_ports(&self.variants)
    }

    fn plan(&self, _cx: SourceContext<'_>) -> Result<PlannedSource, Vec<SpecProblem>> {
        if self.chunk_size.0 < MIN_CHUNK_SIZE {
            return Err(vec![SpecProblem::at(
                "chunk-size",
                format!(
                    "a chunk must be at least {} (each chunk is a split with a position in \
                     every checkpoint), not {}",
                    ByteSize(MIN_CHUNK_SIZE),
                    self.chunk_size
                ),
            )]);
        }
        let layout = layout(self).map_err(SpecProblem::node)?;
        Ok(PlannedSource {
            ports: layout.ports(),
            factory: Arc::new(JsonlSourceFactory::new(self, layout)),
        })
    }
}

/// The files it reads are the server's: below its working directory, and cut into no more
/// chunks than it allows.
impl Hosted for JsonlSourceSpec {
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

    fn within(&self, limits: &HostLimits) -> Vec<SpecProblem> {
        // A path that cannot be listed is reported when the job starts.
        let Ok(files) = list_files(Path::new(&self.path)) else {
            return Vec::new();
        };
        let size = self.chunk_size.0.max(1);
        let chunks: u64 = files.iter().map(|(_, len)| len.div_ceil(size)).sum();
        if chunks <= limits.max_chunks {
            return Vec::new();
        }
        vec![SpecProblem::at(
            "chunk-size",
            format!(
                "{} cut into {chunks} chunks of {}; this server allows at most {} per source \
                 (--max-chunks): use larger chunks",
                self.path, self.chunk_size, limits.max_chunks
            ),
        )]
    }
}
