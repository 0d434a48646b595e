//! A source task: the loop that polls a source, derives watermarks from what it returns,
//! injects checkpoint barriers between its batches, and ends its streams.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use arrow_array::RecordBatch;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::chain::{Chain, Member, Target, TaskFailure, Work, fail, operator_snapshot};
use super::task::{Reporting, acknowledge, recv_or_never};
use crate::api::time::max_event_time;
use crate::api::{
    BEGINNING_OF_TIME, Barrier, END_OF_TIME, EventTime, OperatorError, Source, SourceEvent,
    SubtaskMetrics, SubtaskState,
};

/// Source subtasks of a checkpointed job that have read all their input. A source subtask
/// that is done stays up (injecting barriers, so checkpoints go on) until all are: a finished
/// task could not take part in a checkpoint any more.
#[derive(Debug)]
pub struct SourcesDone {
    remaining: AtomicUsize,
    pub(super) all: CancellationToken,
}

impl SourcesDone {
    pub fn new(sources: usize) -> Arc<Self> {
        let all = CancellationToken::new();
        if sources == 0 {
            all.cancel();
        }
        Arc::new(Self {
            remaining: AtomicUsize::new(sources),
            all,
        })
    }

    pub(super) fn arrive(&self) {
        if self.remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.all.cancel();
        }
    }
}

/// What a source task needs to take part in checkpoints.
pub struct SourceCheckpointing {
    /// Barriers the coordinator asks this source to inject.
    pub barriers: mpsc::Receiver<Barrier>,
    pub done: Arc<SourcesDone>,
    /// Restored event-time progress: (watermark emitted, largest event time seen).
    pub restored: (Option<i64>, Option<i64>),
}

/// What woke a source task up.
enum Step {
    Stop,
    Barrier(Barrier),
    Next(Result<SourceEvent, OperatorError>),
}

/// A source task's loop and its event-time bookkeeping.
pub(super) struct SourceRun<'a> {
    pub(super) member: &'a Member,
    pub(super) source: &'a mut dyn Source,
    pub(super) ports: &'a [Vec<Target>],
    pub(super) metrics: &'a SubtaskMetrics,
    pub(super) event_time: &'a EventTime,
    pub(super) chain: &'a mut Chain,
    pub(super) stop: &'a CancellationToken,
    pub(super) reporting: Option<&'a Reporting>,
    pub(super) checkpointing: Option<SourceCheckpointing>,
}

impl SourceRun<'_> {
    pub(super) async fn run(&mut self) -> Result<(), TaskFailure> {
        let all: Vec<Target> = self.ports.iter().flatten().copied().collect();
        let restored = self
            .checkpointing
            .as_ref()
            .map_or((None, None), |c| c.restored);
        let mut watermarks = WatermarkGenerator::new(self.event_time, restored);
        let mut idle = false;
        loop {
            let step = {
                let next = self.source.next();
                tokio::pin!(next);
                loop {
                    let idle_after = self.event_time.idle_timeout.filter(|_| !idle);
                    let barriers = self.checkpointing.as_mut().map(|c| &mut c.barriers);
                    tokio::select! {
                        biased;
                        _ = self.stop.cancelled() => break Step::Stop,
                        Some(b) = recv_or_never(barriers) => break Step::Barrier(b),
                        r = &mut next => break Step::Next(r),
                        _ = sleep_or_never(idle_after) => {
                            idle = true;
                            self.chain.each(&all, Work::Idle).await?;
                        }
                    }
                }
            };
            match step {
                Step::Stop => {
                    // A stop request: end the streams without advancing event time, so
                    // nothing fires on incomplete data; everything already sent is drained
                    // downstream.
                    return self.end(&all).await;
                }
                Step::Barrier(barrier) => self.barrier(&all, barrier, &watermarks).await?,
                Step::Next(result) => match result.map_err(|e| fail(&self.member.name, e))? {
                    SourceEvent::Batches(batches) => {
                        let working = std::time::Instant::now();
                        let mut rows = false;
                        for (port, batch) in batches {
                            if batch.num_rows() == 0 {
                                continue;
                            }
                            rows = true;
                            watermarks.observe(port, &batch);
                            SubtaskMetrics::add(&self.metrics.records_out, batch.num_rows() as u64);
                            self.metrics.tail.record(&batch);
                            for t in &self.ports[port] {
                                self.chain.run(Work::Batch(*t, 0, batch.clone())).await?;
                            }
                        }
                        if rows {
                            idle = false;
                        }
                        if let Some(watermark) = watermarks.advance(self.source.watermark_bound()) {
                            idle = false;
                            self.metrics.watermark.store(watermark, Ordering::Relaxed);
                            self.chain
                                .each(&all, |t| Work::Watermark(t, watermark))
                                .await?;
                        }
                        if !idle && self.source.idle() {
                            idle = true;
                            self.chain.each(&all, Work::Idle).await?;
                        }
                        SubtaskMetrics::add(
                            &self.metrics.busy_ns,
                            working.elapsed().as_nanos() as u64,
                        );
                    }
                    SourceEvent::End => {
                        watermarks.end();
                        self.metrics.watermark.store(END_OF_TIME, Ordering::Relaxed);
                        self.chain
                            .each(&all, |t| Work::Watermark(t, END_OF_TIME))
                            .await?;
                        self.wait_for_other_sources(&all, &watermarks).await?;
                        return self.end(&all).await;
                    }
                },
            }
        }
    }

    /// Snapshots the source's position, then sends the barrier after everything it emitted.
    async fn barrier(
        &mut self,
        all: &[Target],
        barrier: Barrier,
        watermarks: &WatermarkGenerator,
    ) -> Result<(), TaskFailure> {
        let state = self
            .source
            .snapshot()
            .map_err(|e| fail(&self.member.name, e))?;
        let (watermark, max_seen) = watermarks.progress();
        let blob = SubtaskState {
            watermark,
            max_seen,
            state,
        };
        let own = operator_snapshot(self.member, &blob)?;
        SubtaskMetrics::add(&self.metrics.barriers, 1);
        self.chain.each(all, |t| Work::Barrier(t, barrier)).await?;
        // A source injects barriers: nothing to align.
        acknowledge(
            self.chain,
            self.reporting,
            barrier,
            vec![own],
            std::time::Duration::ZERO,
        )
        .await;
        Ok(())
    }

    /// A checkpointed source whose input ended waits, still injecting barriers, until every
    /// source of the job has ended (or a stop).
    async fn wait_for_other_sources(
        &mut self,
        all: &[Target],
        watermarks: &WatermarkGenerator,
    ) -> Result<(), TaskFailure> {
        let Some(c) = self.checkpointing.as_ref() else {
            return Ok(());
        };
        c.done.arrive();
        let everyone = c.done.all.clone();
        loop {
            let barriers = self.checkpointing.as_mut().map(|c| &mut c.barriers);
            tokio::select! {
                biased;
                _ = self.stop.cancelled() => return Ok(()),
                _ = everyone.cancelled() => return Ok(()),
                Some(b) = recv_or_never(barriers) => {
                    self.barrier(all, b, watermarks).await?;
                }
            }
        }
    }

    async fn end(&mut self, all: &[Target]) -> Result<(), TaskFailure> {
        self.chain.each(all, Work::End).await?;
        self.metrics.finished.store(true, Ordering::Relaxed);
        Ok(())
    }
}

async fn sleep_or_never(after: Option<Duration>) {
    match after {
        Some(d) => tokio::time::sleep(d).await,
        None => std::future::pending().await,
    }
}

/// A source subtask's event-time progress, as Flink's bounded-out-of-orderness watermark
/// strategy: the watermark trails the largest event time seen by `max-out-of-orderness` (and
/// one millisecond, so a record at the largest time seen is never late), held back by the
/// source's own bound (its split that is furthest behind), and never goes back.
#[derive(Debug)]
struct WatermarkGenerator {
    /// Per port: the index of the event-time column, if any.
    columns: Vec<Option<usize>>,
    out_of_orderness_ms: i64,
    /// The largest event time seen.
    max_seen: i64,
    /// The last watermark emitted.
    emitted: i64,
}

impl WatermarkGenerator {
    /// Starts from a restored (watermark emitted, largest event time seen), if any.
    fn new(event_time: &EventTime, (watermark, max_seen): (Option<i64>, Option<i64>)) -> Self {
        Self {
            columns: event_time.columns.clone(),
            out_of_orderness_ms: event_time.out_of_orderness_ms,
            max_seen: max_seen.unwrap_or(BEGINNING_OF_TIME),
            emitted: watermark.unwrap_or(BEGINNING_OF_TIME),
        }
    }

    /// Takes in the event times of a batch read from `port`.
    fn observe(&mut self, port: usize, batch: &RecordBatch) {
        if let Some(Some(col)) = self.columns.get(port)
            && let Some(t) = max_event_time(batch.column(*col).as_ref())
        {
            self.max_seen = self.max_seen.max(t);
        }
    }

    /// The next watermark, if event time advanced past the last one; `bound` is the
    /// source's [`watermark_bound`](crate::api::Source::watermark_bound).
    fn advance(&mut self, bound: Option<i64>) -> Option<i64> {
        let progress = bound.map_or(self.max_seen, |b| self.max_seen.min(b));
        let watermark = progress
            .saturating_sub(self.out_of_orderness_ms)
            .saturating_sub(1);
        (progress > BEGINNING_OF_TIME && watermark > self.emitted).then(|| {
            self.emitted = watermark;
            watermark
        })
    }

    /// The input ended: event time is complete.
    fn end(&mut self) {
        self.max_seen = END_OF_TIME;
        self.emitted = END_OF_TIME;
    }

    /// (watermark emitted, largest event time seen), for a checkpoint.
    fn progress(&self) -> (Option<i64>, Option<i64>) {
        let known = |t: i64| (t != BEGINNING_OF_TIME).then_some(t);
        (known(self.emitted), known(self.max_seen))
    }
}
