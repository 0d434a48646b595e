//! Decoding ahead: a subtask's lines decoded on threads of its own while it emits, in file
//! order, what is already decoded.
//!
//! The subtask's task still does the reading, with the same [`LineReader`] as inline: each
//! call of [`LineReader::next_lines`] (one buffer-full, up to 1 MiB, of one chunk) becomes a
//! *piece*: its lines copied out with their offsets, and the reader's position after them.
//! Pieces go to the decode threads over a bounded channel, and into a queue in read order,
//! each with a one-shot reply. [`DecodeAhead::next`] reads one more piece, and more while the
//! piece at the front is not decoded yet (up to the bound), then waits for that piece and
//! returns its batches: the queue grows only while the threads are behind. A thread decodes a piece as inline
//! decoding decodes one read (batches of `batch-size` rows per port, the rest at the piece's
//! end), so the batches are the same, in the same order, as inline.
//!
//! **Checkpoints stay exact**: what a checkpoint records is the position after the last piece
//! *returned* ([`DecodeAhead::emitted`]), not the reader's; pieces read or decoded but not
//! returned are read again after a restore. **Failures stay in order**: a read that fails
//! (an I/O error, a line too long under `on-error: fail`) takes its place in the queue behind
//! the pieces read before it, and a line that does not decode fails its piece, so the job
//! fails on the first bad line in file order with the message inline decoding gives.
//!
//! **Bounded**: at most `2 × threads` pieces are in flight (read and not yet returned): each
//! thread can decode one while the next one waits for it, so no thread idles while the task
//! is busy emitting, and a piece is one read, so a subtask holds at most `2 × threads` MiB of
//! lines (plus their decoded columns, about as large) beyond what inline decoding holds. The
//! channel to the threads holds at most the pieces in flight, so sending never waits.
//!
//! **Behind the operators**: a decode thread runs at a lower priority than the job's tasks
//! (nice +10), so it takes the cores the operators leave idle and not theirs: a join reading
//! the file keeps its core, and a query whose decoding is the bottleneck still decodes on every
//! core (BENCHMARKS.md, "The join's pairs built once, and decode threads behind the
//! operators").
//!
//! **Owned**: the threads belong to the [`DecodeAhead`], which belongs to the source. Dropping
//! it (the job ends, is cancelled or fails) tells the threads to stop, closes their channel
//! and joins them: a thread finishes at most the piece it is decoding, and none outlives its
//! source.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use arrow_array::RecordBatch;
use tokio::sync::oneshot;

use super::{Decoding, LineDecoder, LineFailure};
use crate::api::{OperatorError, SourceEvent, SubtaskMetrics};
use crate::format::lines::LineReader;

/// Pieces in flight per decode thread (see the module's documentation).
const PIECES_PER_THREAD: usize = 2;

/// Decode threads of a subtask and the pieces it has read and not yet returned.
pub(super) struct DecodeAhead {
    /// Pieces to decode; `None` once the threads are told to stop.
    jobs: Option<SyncSender<Piece>>,
    /// Set when the source is dropped: a thread then decodes nothing more.
    stop: Arc<AtomicBool>,
    workers: Vec<JoinHandle<()>>,
    /// Threads running (tests check that dropping the source stops them all).
    live: Arc<AtomicUsize>,
    /// Pieces read and not yet returned, in read order.
    queue: VecDeque<Entry>,
    /// Most entries in `queue`.
    bound: usize,
    /// Buffers of returned pieces, reused for the next reads (at most `bound`).
    spare: Vec<Lines>,
    /// Lines delivered by a read that has not returned yet: a read cancelled while it counts
    /// the line number of a line too long keeps what it delivered before it here.
    reading: Option<Lines>,
    /// The reader has no more lines, or failed.
    read_all: bool,
    /// The reader's position after the last piece returned: what a checkpoint records.
    emitted: (usize, u64),
}

/// The lines of one read, copied out of the reader's buffer.
#[derive(Debug, Default)]
struct Lines {
    path: PathBuf,
    /// The lines back to back, without their `'\n'`.
    bytes: Vec<u8>,
    /// Per line: where it ends in `bytes`, and its offset in the file (for messages).
    ends: Vec<(usize, u64)>,
}

impl Lines {
    fn push(&mut self, line: &[u8], offset: u64, path: &Path) {
        if self.ends.is_empty() {
            self.path = path.to_path_buf();
        }
        self.bytes.extend_from_slice(line);
        self.ends.push((self.bytes.len(), offset));
    }

    fn clear(&mut self) {
        self.bytes.clear();
        self.ends.clear();
    }
}

/// A read's lines on their way to a decode thread.
struct Piece {
    lines: Lines,
    reply: oneshot::Sender<Result<Output, LineFailure>>,
}

/// A decoded piece.
struct Output {
    batches: Vec<(usize, RecordBatch)>,
    /// Lines decoded to nothing: blank, of an unread variant, or bad under `on-error: skip`.
    skipped: u64,
    /// The piece's buffer, to reuse.
    lines: Lines,
}

/// A piece read and not yet returned.
enum Entry {
    Read {
        /// The decode thread's answer.
        decoded: oneshot::Receiver<Result<Output, LineFailure>>,
        /// What is known once it is returned.
        done: ReadDone,
    },
    /// Reading failed here: the job fails when this reaches the front.
    Failed(LineFailure),
}

/// A read as the subtask's metrics and checkpoints see it.
#[derive(Clone, Copy, Debug)]
struct ReadDone {
    /// The reader's position after it.
    position: (usize, u64),
    /// The reader's progress after it.
    bytes_read: u64,
    /// Lines it delivered.
    lines: u64,
    /// Lines it skipped for their length.
    too_long: u64,
}

impl DecodeAhead {
    /// Starts `threads` decode threads for a subtask reading with `reader`; `None` if no
    /// thread could be started.
    pub(super) fn start(
        threads: usize,
        decoding: &Decoding,
        reader: &LineReader,
    ) -> Option<DecodeAhead> {
        let bound = threads * PIECES_PER_THREAD;
        let (jobs, receiver) = sync_channel(bound);
        let receiver = Arc::new(Mutex::new(receiver));
        let stop = Arc::new(AtomicBool::new(false));
        let live = Arc::new(AtomicUsize::new(0));
        let mut workers = Vec::with_capacity(threads);
        for i in 0..threads {
            let (receiver, stop, decoder) = (receiver.clone(), stop.clone(), decoding.decoder());
            live.fetch_add(1, Ordering::SeqCst);
            let alive = Alive(live.clone());
            let spawned = std::thread::Builder::new()
                .name(format!("weir-decode-{i}"))
                .spawn(move || {
                    let _alive = alive;
                    yield_to_operators();
                    decode_pieces(&receiver, &stop, decoder)
                });
            match spawned {
                Ok(worker) => workers.push(worker),
                Err(e) => {
                    // `alive` went with the closure and counted the thread out.
                    tracing::warn!(error = %e, threads = i, "could not start a decode thread");
                    break;
                }
            }
        }
        if workers.is_empty() {
            return None;
        }
        Some(DecodeAhead {
            jobs: Some(jobs),
            stop,
            workers,
            live,
            queue: VecDeque::with_capacity(bound),
            bound,
            spare: Vec::new(),
            reading: None,
            read_all: false,
            emitted: reader.position(),
        })
    }

    /// The reader's position after everything returned so far.
    pub(super) fn emitted(&self) -> (usize, u64) {
        self.emitted
    }

    /// Decode threads running.
    #[cfg(test)]
    pub(super) fn live(&self) -> Arc<AtomicUsize> {
        self.live.clone()
    }

    /// The next batches, in file order, or the end. Cancel-safe: a piece waited for stays at
    /// the front of the queue until it is returned.
    pub(super) async fn next(
        &mut self,
        reader: &mut LineReader,
        metrics: &SubtaskMetrics,
    ) -> Result<SourceEvent, OperatorError> {
        loop {
            // One read per call keeps the queue as full as it was (one piece goes out per
            // call); more only while the front is not decoded yet, so the first batch waits
            // for one read and one decode, not for the queue to fill.
            let mut reads = 0;
            while self.queue.len() < self.bound
                && !self.read_all
                && (reads == 0 || !self.front_ready())
            {
                self.read(reader, metrics).await;
                reads += 1;
            }
            let (decoded, done) = match self.queue.front_mut() {
                None => return Ok(SourceEvent::End),
                // Telling a bad line's number waits: the failure stays at the front.
                Some(Entry::Failed(failure)) => return Err(failure.to_operator_error().await),
                Some(Entry::Read { decoded, done }) => (decoded.await, *done),
            };
            self.queue.pop_front();
            let output = match decoded {
                Err(_) => {
                    return Err(OperatorError::Internal(
                        "a JSON-lines decode thread stopped before its piece was decoded".into(),
                    ));
                }
                Ok(Err(failure)) => {
                    // In place of the piece, so that a cancelled wait for the line number
                    // finds it again; nothing after it is read.
                    self.queue.push_front(Entry::Failed(failure));
                    self.read_all = true;
                    continue;
                }
                Ok(Ok(output)) => output,
            };
            if self.spare.len() < self.bound {
                self.spare.push(output.lines);
            }
            self.emitted = done.position;
            SubtaskMetrics::add(&metrics.events, done.lines + done.too_long);
            SubtaskMetrics::add(&metrics.skipped, output.skipped + done.too_long);
            metrics.progress.store(done.bytes_read, Ordering::Relaxed);
            if !output.batches.is_empty() {
                return Ok(SourceEvent::Batches(output.batches));
            }
        }
    }

    /// Whether the front of the queue can be returned (or failed) without waiting.
    fn front_ready(&self) -> bool {
        match self.queue.front() {
            None => false,
            Some(Entry::Failed(_)) => true,
            // `is_empty` is also true once the thread dropped the reply; then the wait
            // returns at once too, so reading on a little is harmless.
            Some(Entry::Read { decoded, .. }) => !decoded.is_empty(),
        }
    }

    /// Reads one buffer-full and queues it for a decode thread (or, without lines, as a
    /// position to reach; or as a failure).
    async fn read(&mut self, reader: &mut LineReader, metrics: &SubtaskMetrics) {
        let spare = &mut self.spare;
        let lines = self.reading.get_or_insert_with(|| {
            let mut lines = spare.pop().unwrap_or_default();
            lines.clear();
            lines
        });
        let result = reader
            .next_lines(|line: &[u8], offset: u64, path: &Path| {
                lines.push(line, offset, path);
                Ok::<(), LineFailure>(())
            })
            .await;
        let lines = self.reading.take().unwrap_or_default();
        let done = ReadDone {
            position: reader.position(),
            bytes_read: reader.bytes_read(),
            lines: lines.ends.len() as u64,
            too_long: reader.take_long_lines_skipped(),
        };
        let failure = match result {
            Ok(more) => {
                self.read_all = !more;
                None
            }
            Err(failure) => {
                self.read_all = true;
                Some(failure)
            }
        };
        if lines.ends.is_empty() {
            if self.spare.len() < self.bound {
                self.spare.push(lines);
            }
            self.reached(done, metrics);
        } else {
            let (reply, decoded) = oneshot::channel();
            if let Some(jobs) = &self.jobs {
                // Never full: it holds at most the pieces in the queue. If every thread is
                // gone, the dropped reply says so when the piece reaches the front.
                let _ = jobs.try_send(Piece { lines, reply });
            }
            self.queue.push_back(Entry::Read { decoded, done });
        }
        if let Some(failure) = failure {
            self.queue.push_back(Entry::Failed(failure));
        }
    }

    /// A read that delivered no line (the end of a chunk, part of a line too long being
    /// skipped): it moves the position of the read before it, or, with nothing queued, what
    /// was emitted.
    fn reached(&mut self, done: ReadDone, metrics: &SubtaskMetrics) {
        match self.queue.back_mut() {
            Some(Entry::Read { done: before, .. }) => {
                before.position = done.position;
                before.bytes_read = done.bytes_read;
                before.too_long += done.too_long;
            }
            // After a failure nothing is read.
            Some(Entry::Failed(_)) => {}
            None => {
                self.emitted = done.position;
                SubtaskMetrics::add(&metrics.events, done.too_long);
                SubtaskMetrics::add(&metrics.skipped, done.too_long);
                metrics.progress.store(done.bytes_read, Ordering::Relaxed);
            }
        }
    }
}

impl Drop for DecodeAhead {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Closing the channel ends the threads waiting for a piece; the flag, those with one.
        self.jobs = None;
        self.queue.clear();
        for worker in self.workers.drain(..) {
            // A thread that panicked has nothing left to stop; its piece's dropped reply was
            // already reported (or never will be needed).
            let _ = worker.join();
        }
        debug_assert_eq!(
            self.live.load(Ordering::SeqCst),
            0,
            "a decode thread outlived its join"
        );
    }
}

/// How much lower than the job's tasks a decode thread runs (a nice value: 10 is about a tenth
/// of their weight where they share a core).
const DECODE_NICENESS: i32 = 10;

/// Lowers the calling decode thread's priority, so that where it shares a core with the job's
/// operators, they, not it, run: decoding ahead then takes only the cores they leave idle. A
/// job whose operators are its bottleneck (a join reading the file) keeps a core for them, and
/// one whose decoding is the bottleneck still decodes on every core, as its operators mostly
/// wait. Best effort: where the call is refused the thread runs at the job's priority.
fn yield_to_operators() {
    #[cfg(target_os = "linux")]
    {
        let tid = rustix::thread::gettid();
        let current = rustix::process::getpriority_process(Some(tid)).unwrap_or(0);
        if let Err(e) = rustix::process::setpriority_process(Some(tid), current + DECODE_NICENESS) {
            tracing::debug!(error = %e, "could not lower a decode thread's priority");
        }
    }
}

/// Counts a decode thread out when it ends, however it ends.
struct Alive(Arc<AtomicUsize>);

impl Drop for Alive {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A decode thread: decodes pieces until the channel closes or the source stops.
fn decode_pieces(receiver: &Mutex<Receiver<Piece>>, stop: &AtomicBool, mut decoder: LineDecoder) {
    loop {
        // One thread waits on the channel at a time; the others wait for the lock.
        let piece = match receiver.lock() {
            Ok(receiver) => receiver.recv(),
            Err(poisoned) => poisoned.into_inner().recv(),
        };
        let Ok(Piece { lines, reply }) = piece else {
            return;
        };
        if stop.load(Ordering::SeqCst) {
            return;
        }
        let decoded = decode(&mut decoder, &lines).map(|(batches, skipped)| Output {
            batches,
            skipped,
            lines,
        });
        // The source may be gone; then nobody waits for it.
        let _ = reply.send(decoded);
    }
}

/// Decodes the lines of one piece as inline decoding decodes one read.
fn decode(
    decoder: &mut LineDecoder,
    lines: &Lines,
) -> Result<(Vec<(usize, RecordBatch)>, u64), LineFailure> {
    let mut batches = Vec::new();
    let mut skipped = 0;
    let mut start = 0;
    for &(end, offset) in &lines.ends {
        let result = decoder.line(
            &lines.bytes[start..end],
            offset,
            &lines.path,
            &mut batches,
            &mut skipped,
        );
        if let Err(failure) = result {
            // Rows before the bad line go with the failed piece, not into the next one.
            decoder.flush(&mut Vec::new());
            return Err(failure);
        }
        start = end;
    }
    decoder.flush(&mut batches);
    Ok((batches, skipped))
}
