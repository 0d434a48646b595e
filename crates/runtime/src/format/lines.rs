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

use std::io::SeekFrom;
use std::path::{Path, PathBuf};

use tokio::fs::File;
use tokio::io::{AsyncReadExt, AsyncSeekExt};

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
    /// The chunk being read; `chunks.len()` when all are done.
    current: usize,
    /// File offset of the next unread line of the current chunk; `None` while the chunk's first
    /// line is still to be found.
    next_line: Option<u64>,
    /// Unread bytes of the current chunk's file. Once `next_line` is known, `buf[0]` is its
    /// first byte.
    buf: Vec<u8>,
    /// File offset of `buf[0]`.
    buf_start: u64,
    /// The file read last, kept open so that its next chunk needs no open (and, when it
    /// continues where the last read stopped, no seek).
    file: Option<OpenFile>,
    /// Sizes of the chunks before `current`.
    done_bytes: u64,
}

#[derive(Debug)]
struct OpenFile {
    path: PathBuf,
    file: File,
    /// Where the file's cursor is.
    position: u64,
    /// The last read at `position` returned no bytes.
    eof: bool,
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
            current: 0,
            next_line: None,
            buf: Vec::new(),
            buf_start: 0,
            file: None,
            done_bytes: 0,
        }
    }

    /// Sets the longest line accepted (default [`DEFAULT_MAX_LINE_LENGTH`]); a longer one makes
    /// [`next_lines`](Self::next_lines) fail with [`std::io::ErrorKind::InvalidData`].
    pub fn with_max_line_length(mut self, bytes: usize) -> Self {
        self.max_line_length = bytes;
        self
    }

    /// Reads the next buffer-full and calls `f(line, offset_in_file, path)` for each complete
    /// line in it (without its `'\n'`). Returns `Ok(false)`, without calling `f`, once every chunk
    /// has been read.
    ///
    /// If `f` fails, reading stops there and the error is returned: the lines before were
    /// consumed, the failed one was not ([`position`](Self::position) points at it).
    pub async fn next_lines<E: From<std::io::Error>>(
        &mut self,
        mut f: impl FnMut(&[u8], u64, &Path) -> Result<(), E>,
    ) -> Result<bool, E> {
        loop {
            let Some(chunk) = self.chunks.get(self.current) else {
                return Ok(false);
            };
            let end = chunk.end;
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

            let eof = self.fill().await?;
            let chunk = &self.chunks[self.current];
            let (consumed, result) = deliver(&self.buf, next_line, end, eof, &chunk.path, &mut f);
            self.buf.drain(..consumed);
            self.buf_start += consumed as u64;
            let next_line = next_line + consumed as u64;
            self.next_line = Some(next_line);
            result?;
            if next_line >= end || (eof && self.buf.is_empty()) {
                self.finish_chunk(Some(next_line));
            } else if self.buf.len() > self.max_line_length {
                // What is left is the start of one line that has no end in sight.
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!(
                        "the line at byte {next_line} of {} is longer than {} bytes",
                        chunk_path(&self.chunks, self.current).display(),
                        self.max_line_length
                    ),
                )
                .into());
            }
            return Ok(true);
        }
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
        let (current, offset) = self.position();
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
            if let Some(i) = memchr::memchr(b'\n', &self.buf) {
                self.buf.drain(..=i);
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
        let want = if at < chunk.end {
            let size = self.buffer_size as u64;
            (chunk.end - at).clamp(MIN_READ.min(size), size) as usize
        } else {
            self.buffer_size.min(TAIL_READ)
        };
        let file = match &mut self.file {
            Some(open) if open.path == chunk.path => open,
            slot => {
                let file = File::open(&chunk.path).await?;
                slot.insert(OpenFile {
                    path: chunk.path.clone(),
                    file,
                    position: 0,
                    eof: false,
                })
            }
        };
        if file.position != at {
            file.file.seek(SeekFrom::Start(at)).await?;
            file.position = at;
            file.eof = false;
        }
        self.buf.reserve(want);
        let read = (&mut file.file)
            .take(want as u64)
            .read_buf(&mut self.buf)
            .await?;
        file.position += read as u64;
        file.eof = read == 0;
        Ok(file.eof)
    }
}

fn chunk_path(chunks: &[Chunk], index: usize) -> &Path {
    chunks.get(index).map_or(Path::new(""), |c| &c.path)
}

/// Calls `f` for each line at the front of `buf` (which starts at file offset `offset`) that
/// starts before `end` and is complete: ended by `'\n'`, or by the end of the file when `eof`.
/// Returns how many bytes were consumed and `f`'s error, if any.
fn deliver<E>(
    buf: &[u8],
    mut offset: u64,
    end: u64,
    eof: bool,
    path: &Path,
    f: &mut impl FnMut(&[u8], u64, &Path) -> Result<(), E>,
) -> (usize, Result<(), E>) {
    let mut consumed = 0;
    while offset < end {
        let rest = &buf[consumed..];
        let (line, next) = match memchr::memchr(b'\n', rest) {
            Some(i) => (&rest[..i], i + 1),
            None if eof && !rest.is_empty() => (rest, rest.len()),
            None => break,
        };
        if let Err(e) = f(line, offset, path) {
            return (consumed, Err(e));
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
        assert!(
            err.to_string().starts_with("the line at byte 6 of "),
            "{err}"
        );
        assert_eq!(lines, [b"short".to_vec()]);
        assert_eq!(reader.position(), (0, 6));

        let mut roomy = LineReader::new(chunks, 100).with_max_line_length(5000);
        assert_eq!(read_all(&mut roomy, &path).await.len(), 3);
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
