//! Splitting files into byte-range chunks for parallel readers, and reading their lines.
//!
//! Chunks partition the lines of a file exactly (Hadoop's rule): a line belongs to the chunk that
//! holds its first byte. A reader of chunk `[start, end)` therefore skips to just after the first
//! `'\n'` at or after `start - 1` (unless `start == 0`) and reads every line that starts before
//! `end`, finishing the last one past `end`. A final line without `'\n'` is a line; a file's
//! trailing `'\n'` does not start an empty one.
//!
//! Chunk `c` of all files' chunks goes to subtask `c % parallelism`: round-robin keeps the
//! subtasks at similar event times, so their watermarks stay close.
//!
//! A line longer than the reader's limit is never buffered whole: it fails the read
//! ([`LineTooLong`]) or, with [`LongLines::Skip`], is read past up to its `'\n'` and counted.
//!
//! Readers count no lines: a chunk starts mid-file, so its line numbers are only known after
//! counting the newlines of everything before it. [`line_number`] does that lazily, when a
//! message must name a line, so neither planning nor the per-line path pays for it.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> std::io::Result<()> {
//! use weir_runtime::format::lines::{DEFAULT_BUFFER_SIZE, LineReader, plan_chunks};
//! let dir = tempfile::tempdir()?;
//! let path = dir.path().join("in.jsonl");
//! std::fs::write(&path, "a\nbb\nccc\n")?;
//! // Subtask 1 of 2 with 3-byte chunks owns the chunk [3, 6), where only `ccc` starts.
//! let chunks = plan_chunks(&[(path, 9)], 3, 1, 2);
//! let mut reader = LineReader::new(chunks, DEFAULT_BUFFER_SIZE);
//! let mut lines = Vec::new();
//! while reader
//!     .next_lines(|line, _offset, _path| {
//!         lines.push(line.to_vec());
//!         Ok::<_, std::io::Error>(())
//!     })
//!     .await?
//! {}
//! assert_eq!(lines, vec![b"ccc".to_vec()]);
//! # Ok(())
//! # }
//! ```

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::fs::File;
use tokio::io::AsyncReadExt;

/// Default size of one chunk of a file: 4 MiB.
pub const DEFAULT_CHUNK_SIZE: u64 = 4 << 20;

/// Default size of one read: 1 MiB.
pub const DEFAULT_BUFFER_SIZE: usize = 1 << 20;

/// Smallest read while inside a chunk, so tiny chunks do not mean tiny reads.
const MIN_READ: u64 = 8 << 10;

/// Default longest line: a file without line breaks must not fill memory.
pub const DEFAULT_MAX_LINE_LENGTH: usize = 256 << 20;

/// Read size once past a chunk's end, where only the rest of one line is still needed.
const TAIL_READ: usize = 64 << 10;

/// Most unread bytes a read copies to the front of the buffer it reads into (see [`Buffer`]);
/// behind a longer partial line, the read's bytes are appended to it instead.
const MAX_CARRY: usize = 64 << 10;

/// What a [`LineReader`] does with a line longer than its limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LongLines {
    /// Stop reading with [`LineTooLong`].
    #[default]
    Fail,
    /// Read past the line to its `'\n'` without buffering it, and count it
    /// ([`LineReader::take_long_lines_skipped`]).
    Skip,
}

/// A line longer than a reader's limit, under [`LongLines::Fail`]. The reader stays at the
/// line: [`LineReader::position`] points at it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line} (byte {offset}) of {} is longer than {limit} bytes", path.display())]
pub struct LineTooLong {
    /// The file.
    pub path: PathBuf,
    /// File offset of the line's first byte.
    pub offset: u64,
    /// One-based line number in the file ([`line_number`]).
    pub line: u64,
    /// The reader's limit.
    pub limit: usize,
}

impl From<LineTooLong> for std::io::Error {
    fn from(e: LineTooLong) -> Self {
        std::io::Error::new(std::io::ErrorKind::InvalidData, e)
    }
}

/// The one-based number of the line that starts at byte `offset` of `path`: one more than the
/// newlines before it.
///
/// Reads the file up to `offset`, so it costs a pass over that prefix: it is meant for the
/// message of a failure, not for every line.
pub async fn line_number(path: &Path, offset: u64) -> std::io::Result<u64> {
    let mut file = File::open(path).await?.take(offset);
    let mut buf = vec![0; DEFAULT_BUFFER_SIZE];
    let mut newlines = 0u64;
    loop {
        let read = file.read(&mut buf).await?;
        if read == 0 {
            return Ok(newlines + 1);
        }
        newlines += memchr::memchr_iter(b'\n', &buf[..read]).count() as u64;
    }
}

/// A byte range of a file; its lines are those that start inside it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// The file.
    pub path: PathBuf,
    /// First byte of the range.
    pub start: u64,
    /// One past the last byte of the range.
    pub end: u64,
}

/// The chunks subtask `subtask` of `parallelism` reads: each file (with its length) is cut into
/// `chunk_size`-byte chunks, in order, and chunk `c` of the whole list goes to subtask
/// `c % parallelism`. Empty files have no chunks.
///
/// # Panics
///
/// If `chunk_size` is 0 or `subtask >= parallelism`.
pub fn plan_chunks(
    files: &[(PathBuf, u64)],
    chunk_size: u64,
    subtask: usize,
    parallelism: usize,
) -> Vec<Chunk> {
    assert!(chunk_size > 0, "chunk_size must be at least 1 byte");
    assert!(
        subtask < parallelism,
        "subtask {subtask} out of range for parallelism {parallelism}"
    );
    let mut chunks = Vec::new();
    let mut index = 0usize;
    for (path, len) in files {
        let mut start = 0;
        while start < *len {
            let end = start.saturating_add(chunk_size).min(*len);
            if index % parallelism == subtask {
                chunks.push(Chunk {
                    path: path.clone(),
                    start,
                    end,
                });
            }
            index += 1;
            start = end;
        }
    }
    chunks
}

/// Reads the lines of a list of chunks with large buffered reads.
///
/// Lines are handed to a callback as slices of the read buffer: there is no allocation per line,
/// and the buffer only grows when one line is longer than it.
#[derive(Debug)]
pub struct LineReader {
    chunks: Vec<Chunk>,
    buffer_size: usize,
    /// Longest line accepted; the buffer grows to hold a line, up to this.
    max_line_length: usize,
    /// What a longer line does.
    long_lines: LongLines,
    /// Reading past a line longer than the limit (under [`LongLines::Skip`]): `next_line` is
    /// its start, the buffer holds none of it, and `buf_start` is how far it has been read.
    discarding: bool,
    /// Lines skipped for their length since the last [`take_long_lines_skipped`](Self::take_long_lines_skipped).
    long_lines_skipped: u64,
    /// The chunk being read; `chunks.len()` when all are done.
    current: usize,
    /// File offset of the next unread line of the current chunk; `None` while the chunk's first
    /// line is still to be found.
    next_line: Option<u64>,
    /// Unread bytes of the current chunk's file. Once `next_line` is known, the first of them
    /// is its first byte.
    buf: Buffer,
    /// File offset of the first unread byte in `buf`.
    buf_start: u64,
    /// The file read last, kept open so that its next chunk needs no open.
    file: Option<OpenFile>,
    /// Sizes of the chunks before `current`.
    done_bytes: u64,
}

#[derive(Debug)]
struct OpenFile {
    path: PathBuf,
    /// Read with `pread` on the blocking pool, so it has no cursor to keep.
    file: Arc<std::fs::File>,
}

/// The unread bytes of a [`LineReader`], `data[lo..hi]`, and the buffer its next read goes into.
///
/// A read goes straight into `spare` behind a copy of the unread bytes (the start of a line,
/// usually a few hundred bytes), and the two buffers then swap: the bytes read are copied once,
/// by the kernel, not again from a read buffer of tokio's into this one, and consuming lines
/// moves nothing. Both buffers stay initialized at their largest length, so a read zeroes
/// nothing either.
///
/// **Cancel-safe**: a read owns `spare` while it runs and never touches `data`. A read whose
/// future is dropped takes only `spare` with it (the next read allocates another), so the
/// reader stays where it was and reads the same bytes again.
#[derive(Debug, Default)]
struct Buffer {
    data: Vec<u8>,
    lo: usize,
    hi: usize,
    spare: Vec<u8>,
    /// How many of the unread bytes, from the front, are known to hold no `'\n'`: a line read
    /// in many pieces is searched once, not again from its start after every read.
    clean: usize,
}

impl Buffer {
    fn bytes(&self) -> &[u8] {
        &self.data[self.lo..self.hi]
    }

    fn len(&self) -> usize {
        self.hi - self.lo
    }

    fn is_empty(&self) -> bool {
        self.lo == self.hi
    }

    /// Drops the first `n` unread bytes.
    fn consume(&mut self, n: usize) {
        debug_assert!(n <= self.len(), "consumed more than was read");
        let n = n.min(self.len());
        self.lo += n;
        self.clean = self.clean.saturating_sub(n);
        if self.lo == self.hi {
            self.clear();
        }
    }

    fn clear(&mut self) {
        (self.lo, self.hi, self.clean) = (0, 0, 0);
    }

    /// Whether the unread bytes hold a `'\n'`, searching only what was not searched before.
    fn has_newline(&mut self) -> bool {
        match memchr::memchr(b'\n', &self.data[self.lo + self.clean..self.hi]) {
            Some(i) => {
                self.clean += i;
                true
            }
            None => {
                self.clean = self.len();
                false
            }
        }
    }

    /// Reads up to `want` bytes of `file` at `at` (the file offset just after the unread bytes)
    /// after the unread bytes, with one `pread` on tokio's blocking pool. Returns how many were
    /// read: 0 at the end of the file.
    async fn read(
        &mut self,
        file: &Arc<std::fs::File>,
        at: u64,
        want: usize,
    ) -> std::io::Result<usize> {
        let carry = self.len();
        // Behind a long partial line the read goes to the front of `spare` and is appended,
        // so that a line read in many pieces is not copied again with each one.
        let behind = if carry <= MAX_CARRY { carry } else { 0 };
        let mut next = std::mem::take(&mut self.spare);
        if next.len() < behind + want {
            next.resize(behind + want, 0);
        }
        next[..behind].copy_from_slice(&self.data[self.lo..self.lo + behind]);
        let file = file.clone();
        let (next, read) = tokio::task::spawn_blocking(move || {
            let read = file.read_at(&mut next[behind..behind + want], at);
            (next, read)
        })
        .await
        .map_err(|e| std::io::Error::other(format!("a file read stopped: {e}")))?;
        let read = match read {
            Ok(read) => read,
            Err(e) => {
                self.spare = next;
                return Err(e);
            }
        };
        if behind == carry {
            self.spare = std::mem::replace(&mut self.data, next);
            (self.lo, self.hi) = (0, carry + read);
        } else {
            // Keep the unread bytes where they are unless the data buffer is full behind them;
            // then move them to the front (if they are not there) and grow the buffer.
            if self.data.len() < self.hi + read {
                if self.lo > 0 {
                    self.data.copy_within(self.lo..self.hi, 0);
                    (self.lo, self.hi) = (0, carry);
                }
                if self.data.len() < carry + read {
                    // The vector's capacity doubles: a long line costs a linear number of
                    // copies, and at most twice the limit of memory.
                    self.data.resize(carry + read, 0);
                }
            }
            self.data[self.hi..self.hi + read].copy_from_slice(&next[..read]);
            self.hi += read;
            self.spare = next;
        }
        Ok(read)
    }
}

impl LineReader {
    /// A reader of `chunks` in order, reading `buffer_size` bytes at a time.
    ///
    /// # Panics
    ///
    /// If `buffer_size` is 0.
    pub fn new(chunks: Vec<Chunk>, buffer_size: usize) -> Self {
        assert!(buffer_size > 0, "buffer_size must be at least 1 byte");
        LineReader {
            chunks,
            buffer_size,
            max_line_length: DEFAULT_MAX_LINE_LENGTH,
            long_lines: LongLines::Fail,
            discarding: false,
            long_lines_skipped: 0,
            current: 0,
            next_line: None,
            buf: Buffer::default(),
            buf_start: 0,
            file: None,
            done_bytes: 0,
        }
    }

    /// Sets the longest line accepted, in bytes without its `'\n'` (default
    /// [`DEFAULT_MAX_LINE_LENGTH`]); what a longer one does is [`with_long_lines`](Self::with_long_lines).
    pub fn with_max_line_length(mut self, bytes: usize) -> Self {
        self.max_line_length = bytes;
        self
    }

    /// Sets what a line longer than the limit does (default [`LongLines::Fail`]).
    pub fn with_long_lines(mut self, long_lines: LongLines) -> Self {
        self.long_lines = long_lines;
        self
    }

    /// Lines skipped for their length (under [`LongLines::Skip`]) since the last call.
    pub fn take_long_lines_skipped(&mut self) -> u64 {
        std::mem::take(&mut self.long_lines_skipped)
    }

    /// Reads the next buffer-full and calls `f(line, offset_in_file, path)` for each complete
    /// line in it (without its `'\n'`). Returns `Ok(false)`, without calling `f`, once every chunk
    /// has been read.
    ///
    /// If `f` fails, reading stops there and the error is returned: the lines before were
    /// consumed, the failed one was not ([`position`](Self::position) points at it). A line
    /// longer than the limit is, under [`LongLines::Fail`], a [`LineTooLong`] error with the
    /// same position rule.
    pub async fn next_lines<E: From<std::io::Error> + From<LineTooLong>>(
        &mut self,
        mut f: impl FnMut(&[u8], u64, &Path) -> Result<(), E>,
    ) -> Result<bool, E> {
        loop {
            let Some(chunk) = self.chunks.get(self.current) else {
                return Ok(false);
            };
            let end = chunk.end;
            if self.discarding {
                self.discard().await?;
                return Ok(true);
            }
            let next_line = match self.next_line {
                Some(line) => line,
                None => match self.find_first_line().await? {
                    Some(line) => line,
                    None => {
                        self.finish_chunk(None);
                        continue;
                    }
                },
            };
            if next_line >= end {
                self.finish_chunk(Some(next_line));
                continue;
            }

            // Read more only when the buffer holds no complete line: with chunks smaller than
            // a read, reading on every call would pile the file up in memory, and a partial
            // line plus one read is what bounds the buffer (`max_line_length` + a read).
            let eof = if self.buf.has_newline() {
                false
            } else {
                self.fill().await?
            };
            if !eof && !self.buf.has_newline() {
                // Only the start of a line so far: nothing to deliver.
                return match self.partial_line(next_line).await? {
                    Some(too_long) => Err(too_long.into()),
                    None => Ok(true),
                };
            }
            let chunk = &self.chunks[self.current];
            let limits = Limits {
                max: self.max_line_length,
                skip: self.long_lines == LongLines::Skip,
                skipped: &mut self.long_lines_skipped,
            };
            let (consumed, result) = deliver(
                self.buf.bytes(),
                next_line,
                end,
                eof,
                &chunk.path,
                limits,
                &mut f,
            );
            self.buf.consume(consumed);
            self.buf_start += consumed as u64;
            let next_line = next_line + consumed as u64;
            self.next_line = Some(next_line);
            match result {
                Ok(()) => {}
                Err(Stop::Callback(e)) => return Err(e),
                Err(Stop::TooLong) => return Err(self.too_long(next_line).await?.into()),
            }
            if next_line >= end || (eof && self.buf.is_empty()) {
                self.finish_chunk(Some(next_line));
            } else if let Some(too_long) = self.partial_line(next_line).await? {
                return Err(too_long.into());
            }
            return Ok(true);
        }
    }

    /// What is buffered is the start of one line (at `offset`) that has no end in sight: once
    /// longer than the limit it fails the read (the error returned) or is skipped from here on.
    async fn partial_line(&mut self, offset: u64) -> std::io::Result<Option<LineTooLong>> {
        if self.buf.len() <= self.max_line_length {
            return Ok(None);
        }
        match self.long_lines {
            LongLines::Fail => Ok(Some(self.too_long(offset).await?)),
            LongLines::Skip => {
                self.buf_start += self.buf.len() as u64;
                self.buf.clear();
                self.discarding = true;
                Ok(None)
            }
        }
    }

    /// The error for the over-long line at `offset` of the current chunk's file.
    async fn too_long(&self, offset: u64) -> std::io::Result<LineTooLong> {
        let path = chunk_path(&self.chunks, self.current).to_path_buf();
        let line = line_number(&path, offset).await?;
        Ok(LineTooLong {
            path,
            offset,
            line,
            limit: self.max_line_length,
        })
    }

    /// Reads one more buffer-full of the over-long line being skipped, dropping it; at its
    /// `'\n'` (or the end of the file) the line is counted and reading goes on after it.
    async fn discard(&mut self) -> std::io::Result<()> {
        let eof = self.fill().await?;
        let after = match memchr::memchr(b'\n', self.buf.bytes()) {
            Some(i) => {
                self.buf.consume(i + 1);
                self.buf_start += i as u64 + 1;
                self.buf_start
            }
            None => {
                self.buf_start += self.buf.len() as u64;
                self.buf.clear();
                if !eof {
                    return Ok(());
                }
                self.buf_start
            }
        };
        self.discarding = false;
        self.long_lines_skipped += 1;
        self.next_line = Some(after);
        let chunk = &self.chunks[self.current];
        if after >= chunk.end || (eof && self.buf.is_empty()) {
            self.finish_chunk(Some(after));
        }
        Ok(())
    }

    /// `(chunk index, file offset of the next unread line)`: where [`seek`](Self::seek) resumes.
    /// A chunk not started yet reports its start; after the last chunk, `(chunks, 0)`.
    pub fn position(&self) -> (usize, u64) {
        match self.chunks.get(self.current) {
            Some(chunk) => (
                self.current,
                self.next_line.unwrap_or(chunk.start).max(chunk.start),
            ),
            None => (self.chunks.len(), 0),
        }
    }

    /// What is left to read, as chunks: the rest of the current chunk (from the next unread
    /// line, which a reader of these chunks starts at because the byte before it ends a line)
    /// and every chunk after it. A reader of these chunks reads exactly the lines this one has
    /// not delivered yet.
    pub fn remaining(&self) -> Vec<Chunk> {
        self.remaining_at(self.position())
    }

    /// What is left to read from an earlier [`position`](Self::position) of this reader, as
    /// [`remaining`](Self::remaining) would have said then: a reader that reads ahead of what
    /// its caller has used up checkpoints the position its caller reached, not its own.
    pub fn remaining_at(&self, (current, offset): (usize, u64)) -> Vec<Chunk> {
        self.chunks
            .iter()
            .skip(current)
            .enumerate()
            .filter_map(|(i, c)| {
                let start = if i == 0 { offset.max(c.start) } else { c.start };
                (start < c.end).then(|| Chunk {
                    path: c.path.clone(),
                    start,
                    end: c.end,
                })
            })
            .collect()
    }

    /// Resumes at a position returned by [`position`](Self::position) on a reader of the same
    /// chunks.
    pub fn seek(&mut self, (chunk, offset): (usize, u64)) {
        self.current = chunk.min(self.chunks.len());
        self.done_bytes = self.chunks[..self.current]
            .iter()
            .map(|c| c.end - c.start)
            .sum();
        self.buf.clear();
        self.next_line = None;
        self.discarding = false;
        if let Some(chunk) = self.chunks.get(self.current) {
            if offset > chunk.start {
                self.next_line = Some(offset);
            }
            self.buf_start = self.next_line.unwrap_or(chunk.start);
        }
    }

    /// Bytes of the chunks consumed so far, by chunk range: reaches the sum of the chunk sizes
    /// at the end, so it suits a progress bar over the files' lengths.
    pub fn bytes_read(&self) -> u64 {
        let current = match (self.chunks.get(self.current), self.next_line) {
            (Some(chunk), Some(line)) => line.clamp(chunk.start, chunk.end) - chunk.start,
            _ => 0,
        };
        self.done_bytes + current
    }

    /// Moves to the next chunk. When it continues the same file right where this one ended and
    /// `next_line` (the first line at or after this chunk's end) is known, that line is the next
    /// chunk's first line too, and the buffered bytes are kept.
    fn finish_chunk(&mut self, next_line: Option<u64>) {
        let chunk = &self.chunks[self.current];
        self.done_bytes += chunk.end - chunk.start;
        let continues = self
            .chunks
            .get(self.current + 1)
            .is_some_and(|next| next.path == chunk.path && next.start == chunk.end);
        self.current += 1;
        if continues && next_line.is_some() {
            self.next_line = next_line;
        } else {
            self.next_line = None;
            self.buf.clear();
        }
    }

    /// Positions the buffer at the current chunk's first line; `None` if no line starts in it.
    async fn find_first_line(&mut self) -> std::io::Result<Option<u64>> {
        let chunk = &self.chunks[self.current];
        let (start, end) = (chunk.start, chunk.end);
        self.buf.clear();
        if start == 0 {
            self.buf_start = 0;
            self.next_line = Some(0);
            return Ok(Some(0));
        }
        // The first '\n' at or after start - 1 ends the line that belongs to an earlier chunk.
        self.buf_start = start - 1;
        loop {
            let eof = self.fill().await?;
            if let Some(i) = memchr::memchr(b'\n', self.buf.bytes()) {
                self.buf.consume(i + 1);
                self.buf_start += i as u64 + 1;
                let line = self.buf_start;
                self.next_line = Some(line);
                return Ok((line < end).then_some(line));
            }
            self.buf_start += self.buf.len() as u64;
            self.buf.clear();
            if eof || self.buf_start >= end {
                return Ok(None);
            }
        }
    }

    /// Reads more of the current file after the buffered bytes. Returns whether the file ended
    /// (a read returned nothing).
    async fn fill(&mut self) -> std::io::Result<bool> {
        let chunk = &self.chunks[self.current];
        let at = self.buf_start + self.buf.len() as u64;
        let want = if self.discarding {
            // Nothing of it is kept, so the reads can be as large as the buffer allows.
            self.buffer_size
        } else if at < chunk.end {
            let size = self.buffer_size as u64;
            (chunk.end - at).clamp(MIN_READ.min(size), size) as usize
        } else {
            // Past the chunk's end only its last line is read: small reads for a line of
            // usual length, growing with it for a long one.
            self.buffer_size.min(TAIL_READ.max(self.buf.len()))
        };
        let file = match &self.file {
            Some(open) if open.path == chunk.path => open.file.clone(),
            _ => {
                let file = Arc::new(File::open(&chunk.path).await?.into_std().await);
                self.file = Some(OpenFile {
                    path: chunk.path.clone(),
                    file: file.clone(),
                });
                file
            }
        };
        let read = self.buf.read(&file, at, want).await?;
        Ok(read == 0)
    }
}

fn chunk_path(chunks: &[Chunk], index: usize) -> &Path {
    chunks.get(index).map_or(Path::new(""), |c| &c.path)
}

/// The line-length rule [`deliver`] applies.
struct Limits<'a> {
    /// Longest line handed to the callback.
    max: usize,
    /// Longer lines are consumed and counted in `skipped`, not an error.
    skip: bool,
    skipped: &'a mut u64,
}

/// Why [`deliver`] stopped early.
enum Stop<E> {
    /// The callback failed on the first line not consumed.
    Callback(E),
    /// The first line not consumed is longer than the limit (and is not to be skipped).
    TooLong,
}

/// Calls `f` for each line at the front of `buf` (which starts at file offset `offset`) that
/// starts before `end` and is complete: ended by `'\n'`, or by the end of the file when `eof`.
/// Returns how many bytes were consumed, and why it stopped before a line if it did.
fn deliver<E>(
    buf: &[u8],
    mut offset: u64,
    end: u64,
    eof: bool,
    path: &Path,
    limits: Limits<'_>,
    f: &mut impl FnMut(&[u8], u64, &Path) -> Result<(), E>,
) -> (usize, Result<(), Stop<E>>) {
    let mut consumed = 0;
    while offset < end {
        let rest = &buf[consumed..];
        let (line, next) = match memchr::memchr(b'\n', rest) {
            Some(i) => (&rest[..i], i + 1),
            None if eof && !rest.is_empty() => (rest, rest.len()),
            None => break,
        };
        if line.len() > limits.max {
            if !limits.skip {
                return (consumed, Err(Stop::TooLong));
            }
            *limits.skipped += 1;
        } else if let Err(e) = f(line, offset, path) {
            return (consumed, Err(Stop::Callback(e)));
        }
        consumed += next;
        offset += next as u64;
    }
    (consumed, Ok(()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A line as read: (offset, bytes), per chunk list.
    type Lines = Vec<(u64, Vec<u8>)>;

    /// The lines of `data` as a reader must see them: split on '\n', without the empty piece
    /// after a final '\n'.
    fn reference(data: &[u8]) -> Lines {
        let mut lines = Vec::new();
        let mut offset = 0;
        for piece in data.split(|&b| b == b'\n') {
            lines.push((offset, piece.to_vec()));
            offset += piece.len() as u64 + 1;
        }
        if data.is_empty() || data.ends_with(b"\n") {
            lines.pop();
        }
        lines
    }

    async fn read_all(reader: &mut LineReader, expected_path: &Path) -> Lines {
        let mut lines = Vec::new();
        while reader
            .next_lines(|line, offset, path| {
                assert_eq!(path, expected_path);
                lines.push((offset, line.to_vec()));
                Ok::<_, std::io::Error>(())
            })
            .await
            .unwrap()
        {}
        lines
    }

    /// Seeded random file contents: random line lengths (some longer than any buffer used),
    /// empty lines, and sometimes no final '\n'.
    fn random_file(seed: u64) -> Vec<u8> {
        let mut state = seed;
        let mut next = move || {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
        let lines = next() % 60;
        let mut data = Vec::new();
        for i in 0..lines {
            let len = match next() % 10 {
                0 => 0,
                1 => 40 + next() % 200,
                _ => next() % 12,
            };
            data.extend((0..len).map(|j| b'a' + ((i + j) % 26) as u8));
            data.push(b'\n');
        }
        if next() % 2 == 0 {
            data.extend_from_slice(b"last line without newline");
        }
        data
    }

    #[test]
    fn plan_chunks_deals_chunks_round_robin_across_files() {
        let files = [
            (PathBuf::from("a"), 10),
            (PathBuf::from("empty"), 0),
            (PathBuf::from("b"), 5),
        ];
        let chunk = |p: &str, start, end| Chunk {
            path: PathBuf::from(p),
            start,
            end,
        };
        assert_eq!(
            plan_chunks(&files, 4, 0, 2),
            [chunk("a", 0, 4), chunk("a", 8, 10), chunk("b", 4, 5)]
        );
        assert_eq!(
            plan_chunks(&files, 4, 1, 2),
            [chunk("a", 4, 8), chunk("b", 0, 4)]
        );
        assert_eq!(
            plan_chunks(&files, 100, 0, 1),
            [chunk("a", 0, 10), chunk("b", 0, 5)]
        );
        assert_eq!(plan_chunks(&files, 100, 2, 3), []);
    }

    #[tokio::test]
    async fn every_line_is_read_exactly_once_across_subtasks() {
        let dir = tempfile::tempdir().unwrap();
        for seed in 0..12 {
            let data = random_file(seed);
            let path = dir.path().join(format!("f{seed}"));
            std::fs::write(&path, &data).unwrap();
            let expected = reference(&data);
            let len = data.len() as u64;
            let files = [(path.clone(), len)];
            for chunk_size in [1, 2, 3, 7, 16, 61, 250, len.max(1), len + 9] {
                for parallelism in 1..=4 {
                    let mut all = Vec::new();
                    for subtask in 0..parallelism {
                        let chunks = plan_chunks(&files, chunk_size, subtask, parallelism);
                        let total: u64 = chunks.iter().map(|c| c.end - c.start).sum();
                        let buffer = [1, 5, 64, 1 << 20][(seed as usize + subtask) % 4];
                        let mut reader = LineReader::new(chunks, buffer);
                        let lines = read_all(&mut reader, &path).await;
                        assert!(lines.windows(2).all(|w| w[0].0 < w[1].0), "in order");
                        assert_eq!(reader.bytes_read(), total);
                        all.extend(lines);
                    }
                    all.sort();
                    assert_eq!(
                        all, expected,
                        "seed {seed} chunk {chunk_size} p {parallelism}"
                    );
                }
            }
        }
    }

    /// Every read dropped once midway (as a `select!` drops a source's future when a barrier
    /// or a stop comes first), then done again: no line is lost or delivered twice, with
    /// partial lines short enough to be copied in front of a read and long enough to be
    /// appended to.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_read_dropped_midway_loses_and_repeats_no_line() {
        let dir = tempfile::tempdir().unwrap();
        let mut dropped = 0;
        for seed in 0..8 {
            let mut data = random_file(seed);
            if seed % 2 == 0 {
                // A line longer than MAX_CARRY in the middle.
                let at = data.iter().position(|&b| b == b'\n').map_or(0, |i| i + 1);
                let long: Vec<u8> = (0..MAX_CARRY * 2 + 17)
                    .map(|i| b'a' + (i % 26) as u8)
                    .collect();
                data.splice(at..at, long.into_iter().chain([b'\n']));
            }
            let path = dir.path().join(format!("f{seed}"));
            std::fs::write(&path, &data).unwrap();
            let len = data.len() as u64;
            let cases = [
                (len.max(1), 64),
                (61, 64),
                (len.max(1), 4096),
                (len.max(1), 1 << 20),
            ];
            for (chunk_size, buffer) in cases {
                let chunks = plan_chunks(&[(path.clone(), len)], chunk_size, 0, 1);
                let mut reader = LineReader::new(chunks, buffer);
                let mut lines = Vec::new();
                for call in 0.. {
                    // A reader that loses its place may never reach the end.
                    assert!(
                        call < 1_000_000,
                        "seed {seed} chunk {chunk_size}: no end in sight"
                    );
                    let mut got = Vec::new();
                    let attempt = reader.next_lines(|line, offset, _| {
                        got.push((offset, line.to_vec()));
                        Ok::<_, std::io::Error>(())
                    });
                    // Polled once: a read in flight is pending, and then dropped.
                    match futures::FutureExt::now_or_never(attempt) {
                        None => dropped += 1,
                        Some(more) => {
                            lines.append(&mut got);
                            if !more.unwrap() {
                                break;
                            }
                            continue;
                        }
                    }
                    assert!(got.is_empty(), "a dropped read delivered lines");
                    let more = reader
                        .next_lines(|line, offset, _| {
                            lines.push((offset, line.to_vec()));
                            Ok::<_, std::io::Error>(())
                        })
                        .await
                        .unwrap();
                    if !more {
                        break;
                    }
                }
                assert_eq!(lines, reference(&data), "seed {seed} chunk {chunk_size}");
            }
        }
        assert!(dropped > 100, "only {dropped} reads were dropped midway");
    }

    #[tokio::test]
    async fn lines_of_several_files_come_with_their_path_and_offset() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a");
        let b = dir.path().join("b");
        std::fs::write(&a, b"one\ntwo\n").unwrap();
        std::fs::write(&b, b"three\r\nfour").unwrap();
        let chunks = plan_chunks(&[(a.clone(), 8), (b.clone(), 11)], 3, 0, 1);
        let mut reader = LineReader::new(chunks, 2);
        let mut lines = Vec::new();
        while reader
            .next_lines(|line, offset, path| {
                lines.push((
                    path.to_path_buf(),
                    offset,
                    String::from_utf8_lossy(line).into_owned(),
                ));
                Ok::<_, std::io::Error>(())
            })
            .await
            .unwrap()
        {}
        assert_eq!(
            lines,
            [
                (a.clone(), 0, "one".to_owned()),
                (a, 4, "two".to_owned()),
                (b.clone(), 0, "three\r".to_owned()),
                (b, 7, "four".to_owned()),
            ]
        );
        assert_eq!(reader.bytes_read(), 19);
        assert_eq!(reader.position(), (7, 0));
    }

    #[tokio::test]
    async fn seek_resumes_exactly_where_position_was_taken() {
        let dir = tempfile::tempdir().unwrap();
        for seed in 20..28 {
            let data = random_file(seed);
            let path = dir.path().join(format!("f{seed}"));
            std::fs::write(&path, &data).unwrap();
            let files = [(path.clone(), data.len() as u64)];
            for (chunk_size, parallelism) in [(1, 1), (7, 2), (64, 1), (1 << 20, 1), (30, 3)] {
                let chunks = plan_chunks(&files, chunk_size, 0, parallelism);
                let all = read_all(&mut LineReader::new(chunks.clone(), 16), &path).await;
                // Stop after every possible number of calls, resume in a new reader.
                for stop in 0.. {
                    let mut first = LineReader::new(chunks.clone(), 16);
                    let mut lines = Vec::new();
                    let mut more = true;
                    for _ in 0..stop {
                        more = first
                            .next_lines(|line, offset, _| {
                                lines.push((offset, line.to_vec()));
                                Ok::<_, std::io::Error>(())
                            })
                            .await
                            .unwrap();
                    }
                    let mut second = LineReader::new(chunks.clone(), 16);
                    second.seek(first.position());
                    assert_eq!(second.bytes_read(), first.bytes_read());
                    lines.extend(read_all(&mut second, &path).await);
                    assert_eq!(lines, all, "seed {seed} chunk {chunk_size} stop {stop}");
                    // What was left then is still known after reading on.
                    let (at, left) = (first.position(), first.remaining());
                    read_all(&mut first, &path).await;
                    assert_eq!(first.remaining_at(at), left);
                    if !more {
                        break;
                    }
                }
            }
        }
    }

    #[tokio::test]
    async fn a_failing_callback_leaves_its_line_unread() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"a\nbad\nc\n").unwrap();
        let chunks = plan_chunks(&[(path.clone(), 8)], 100, 0, 1);
        let mut reader = LineReader::new(chunks.clone(), 1024);
        let mut seen = Vec::new();
        let result = reader
            .next_lines(|line, _, _| {
                if line == b"bad" {
                    return Err(std::io::Error::other("bad line"));
                }
                seen.push(line.to_vec());
                Ok(())
            })
            .await;
        assert_eq!(result.unwrap_err().to_string(), "bad line");
        assert_eq!(seen, [b"a".to_vec()]);
        assert_eq!(reader.position(), (0, 2));
        // Retrying (here: in a fresh reader) starts at the failed line.
        let mut again = LineReader::new(chunks, 1024);
        again.seek(reader.position());
        assert_eq!(
            read_all(&mut again, &path).await,
            [(2, b"bad".to_vec()), (6, b"c".to_vec())]
        );
    }

    #[tokio::test]
    async fn a_line_longer_than_the_limit_is_an_error_not_a_memory_hog() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let mut data = b"short\n".to_vec();
        data.extend(std::iter::repeat_n(b'x', 5000));
        data.extend_from_slice(b"\nafter\n");
        std::fs::write(&path, &data).unwrap();
        let chunks = plan_chunks(&[(path.clone(), data.len() as u64)], 1 << 20, 0, 1);
        let mut reader = LineReader::new(chunks.clone(), 100).with_max_line_length(1000);
        let mut lines = Vec::new();
        let err = loop {
            match reader
                .next_lines(|line, _, _| {
                    lines.push(line.to_vec());
                    Ok::<_, std::io::Error>(())
                })
                .await
            {
                Ok(true) => {}
                Ok(false) => panic!("the long line was accepted"),
                Err(e) => break e,
            }
        };
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);
        assert_eq!(
            err.to_string(),
            format!(
                "line 2 (byte 6) of {} is longer than 1000 bytes",
                path.display()
            )
        );
        assert_eq!(lines, [b"short".to_vec()]);
        assert_eq!(reader.position(), (0, 6));

        let mut roomy = LineReader::new(chunks, 100).with_max_line_length(5000);
        assert_eq!(read_all(&mut roomy, &path).await.len(), 3);
    }

    /// Seeded random file contents where some lines are far longer than `limit`.
    fn file_with_long_lines(seed: u64, limit: usize) -> Vec<u8> {
        let mut state = seed.wrapping_mul(0x2545_F491_4F6C_DD1D) | 1;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut data = Vec::new();
        for i in 0..next() % 40 {
            let len = match next() % 6 {
                0 => limit + 1 + (next() % (8 * limit as u64)) as usize,
                1 => limit,
                _ => (next() % limit as u64) as usize,
            };
            data.extend((0..len).map(|j| b'a' + ((i as usize + j) % 26) as u8));
            data.push(b'\n');
        }
        if next() % 2 == 0 {
            let len = if next() % 2 == 0 { 3 * limit } else { 3 };
            data.extend(std::iter::repeat_n(b'z', len));
        }
        data
    }

    /// A 16 MiB line starting in the first of many small chunks: read in reads that grow with
    /// it up to the buffer's size (past its chunk's end a reader reads small pieces, for the
    /// usual short last line), so it takes about 16 reads of 1 MiB, not 256 of 64 KiB; both
    /// when it is within the limit and when it is skipped or fails.
    #[tokio::test]
    async fn a_long_line_is_read_in_reads_that_grow_with_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("long.jsonl");
        let long = 16usize << 20;
        let mut data = b"a\n".to_vec();
        data.resize(2 + long, b'x');
        data.extend_from_slice(b"\nb\n");
        std::fs::write(&path, &data).unwrap();
        let files = [(path.clone(), data.len() as u64)];
        for (limit, long_lines, lines) in [
            (long, LongLines::Fail, 3),
            (long - 1, LongLines::Skip, 2),
            (long - 1, LongLines::Fail, 1),
        ] {
            let chunks = plan_chunks(&files, 64 << 10, 0, 1);
            let mut reader = LineReader::new(chunks, DEFAULT_BUFFER_SIZE)
                .with_max_line_length(limit)
                .with_long_lines(long_lines);
            let (mut seen, mut calls) = (0, 0);
            loop {
                calls += 1;
                match reader
                    .next_lines(|_, _, _| {
                        seen += 1;
                        Ok::<_, std::io::Error>(())
                    })
                    .await
                {
                    Ok(true) => {}
                    Ok(false) => break,
                    Err(e) => {
                        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData, "{e}");
                        break;
                    }
                }
            }
            assert_eq!(seen, lines, "limit {limit}, {long_lines:?}");
            // About 16 reads of 1 MiB and a few smaller ones before them (a call reads once).
            assert!(
                calls < 48,
                "{calls} calls for a 16 MiB line (limit {limit}, {long_lines:?})"
            );
        }
    }

    #[tokio::test]
    async fn over_long_lines_are_skipped_and_counted_without_being_buffered() {
        let dir = tempfile::tempdir().unwrap();
        let limit = 50;
        for seed in 0..16 {
            let data = file_with_long_lines(seed, limit);
            let path = dir.path().join(format!("f{seed}"));
            std::fs::write(&path, &data).unwrap();
            let all = reference(&data);
            let long = all.iter().filter(|(_, l)| l.len() > limit).count() as u64;
            let expected: Lines = all.into_iter().filter(|(_, l)| l.len() <= limit).collect();
            let files = [(path.clone(), data.len() as u64)];
            for chunk_size in [1, 7, 64, 333, 1 << 20] {
                for parallelism in 1..=3 {
                    let (mut lines, mut skipped) = (Vec::new(), 0);
                    for subtask in 0..parallelism {
                        let chunks = plan_chunks(&files, chunk_size, subtask, parallelism);
                        let buffer = [1, 16, 64][(seed as usize + subtask) % 3];
                        let mut reader = LineReader::new(chunks, buffer)
                            .with_max_line_length(limit)
                            .with_long_lines(LongLines::Skip);
                        let mut most_buffered = 0;
                        while reader
                            .next_lines(|line, offset, _| {
                                lines.push((offset, line.to_vec()));
                                Ok::<_, std::io::Error>(())
                            })
                            .await
                            .unwrap()
                        {
                            most_buffered = most_buffered.max(reader.buf.len());
                        }
                        skipped += reader.take_long_lines_skipped();
                        assert!(
                            most_buffered <= limit + buffer,
                            "buffered {most_buffered} bytes of a line (limit {limit})"
                        );
                    }
                    lines.sort();
                    let at = format!("seed {seed} chunk {chunk_size} p {parallelism}");
                    assert_eq!(lines, expected, "{at}");
                    assert_eq!(skipped, long, "{at}");
                }
            }
        }
    }

    #[tokio::test]
    async fn an_over_long_line_fails_naming_its_line_number_from_any_chunk() {
        let dir = tempfile::tempdir().unwrap();
        let limit = 50;
        for seed in 100..116 {
            let data = file_with_long_lines(seed, limit);
            let path = dir.path().join(format!("f{seed}"));
            std::fs::write(&path, &data).unwrap();
            // Naively: the line number of each line is its index in the file, plus one.
            let numbered: Vec<(u64, u64, usize)> = reference(&data)
                .into_iter()
                .enumerate()
                .map(|(i, (offset, line))| (i as u64 + 1, offset, line.len()))
                .collect();
            let files = [(path.clone(), data.len() as u64)];
            for (chunk_size, parallelism) in [(1, 1), (13, 3), (100, 2), (1 << 20, 1)] {
                for subtask in 0..parallelism {
                    let chunks = plan_chunks(&files, chunk_size, subtask, parallelism);
                    let owned =
                        |offset: u64| chunks.iter().any(|c| (c.start..c.end).contains(&offset));
                    let first_long = numbered
                        .iter()
                        .find(|&&(_, offset, len)| len > limit && owned(offset));
                    let mut reader =
                        LineReader::new(chunks.clone(), 32).with_max_line_length(limit);
                    let result = loop {
                        match reader
                            .next_lines(|_, _, _| Ok::<_, std::io::Error>(()))
                            .await
                        {
                            Ok(true) => {}
                            Ok(false) => break None,
                            Err(e) => {
                                let inner = e.into_inner().expect("a LineTooLong");
                                break Some(*inner.downcast::<LineTooLong>().unwrap());
                            }
                        }
                    };
                    let at = format!("seed {seed} chunk {chunk_size} subtask {subtask}");
                    match (first_long, result) {
                        (None, None) => {}
                        (Some(&(line, offset, _)), Some(e)) => {
                            assert_eq!((e.line, e.offset, e.limit), (line, offset, limit), "{at}");
                            assert_eq!(e.path, path);
                            assert_eq!(reader.position().1, offset, "{at}: stays at the line");
                        }
                        (expected, got) => panic!("{at}: expected {expected:?}, got {got:?}"),
                    }
                }
            }
        }
    }

    #[tokio::test]
    async fn line_number_counts_the_newlines_before_the_offset() {
        let dir = tempfile::tempdir().unwrap();
        for seed in 0..8 {
            let data = random_file(seed);
            let path = dir.path().join(format!("f{seed}"));
            std::fs::write(&path, &data).unwrap();
            for (i, (offset, _)) in reference(&data).into_iter().enumerate() {
                assert_eq!(line_number(&path, offset).await.unwrap(), i as u64 + 1);
            }
        }
    }

    #[test]
    fn reading_can_happen_on_any_task() {
        fn assert_send<T: Send>(_: &T) {}
        let mut reader = LineReader::new(Vec::new(), 1);
        assert_send(&reader.next_lines(|_, _, _| Ok::<_, std::io::Error>(())));
    }

    #[tokio::test]
    async fn a_missing_file_is_an_io_error() {
        let chunks = vec![Chunk {
            path: PathBuf::from("/nonexistent/weir/file"),
            start: 0,
            end: 5,
        }];
        let mut reader = LineReader::new(chunks, 1024);
        let err = reader
            .next_lines(|_, _, _| Ok::<_, std::io::Error>(()))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
    }
}
