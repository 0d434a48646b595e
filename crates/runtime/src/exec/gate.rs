//! The input gate of a task: all its input channels, merged, with watermarks combined.
//!
//! A task with several input channels (one per upstream subtask, over every input edge) reads
//! them through one gate. The gate polls the channels round-robin (no channel can starve the
//! others), tracks each channel's watermark and idleness, and forwards the combined watermark,
//! the minimum over the channels that are neither idle nor finished, only when it advances.
//!
//! Checkpoint barriers are *aligned* (exactly-once): a channel that has delivered barrier `n`
//! is not read again until every other running channel has delivered it too, so the task
//! snapshots its state after exactly the records before the barrier on every input. Each
//! channel is polled individually, so holding one back needs no buffering: its records wait
//! in its bounded channel (and its sender, if the channel fills, waits: backpressure). A
//! finished channel counts as aligned. In at-least-once mode no channel is held back: the
//! barrier goes on once every channel has delivered it, and records after it on a fast
//! channel may be in the snapshot (and replayed after a restore).

use std::future::poll_fn;
use std::pin::Pin;
use std::task::Poll;

use arrow_array::RecordBatch;
use async_channel::Receiver;
use futures::Stream;

use crate::api::{BEGINNING_OF_TIME, Barrier, Message, Watermark};

/// What the gate hands to its task.
#[derive(Debug)]
pub enum GateEvent {
    /// A batch on logical input `input`.
    Batch { input: usize, batch: RecordBatch },
    /// The combined watermark advanced.
    Watermark(i64),
    /// Every input still running is idle.
    Idle,
    /// A barrier arrived on every running input (aligned in exactly-once mode); `alignment`
    /// is how long the first input to deliver it was held back.
    Barrier {
        barrier: Barrier,
        alignment: std::time::Duration,
    },
    /// Every input has ended.
    End,
}

/// An upstream subtask went away without ending its stream: it failed or was cancelled.
#[derive(Debug, thiserror::Error)]
#[error("an upstream subtask stopped without ending its stream (it failed or was cancelled)")]
pub struct UpstreamGone;

struct Channel {
    rx: Pin<Box<Receiver<Message>>>,
    /// The logical input (0 or 1 for two-input operators) this channel feeds.
    input: usize,
    watermark: i64,
    idle: bool,
    finished: bool,
    /// Delivered the barrier being aligned: not read until the others have too.
    blocked: bool,
    /// The last barrier this channel delivered (at-least-once bookkeeping).
    last_barrier: u64,
}

pub struct InputGate {
    channels: Vec<Channel>,
    running: usize,
    /// Hold channels back at barriers (exactly-once) or not (at-least-once).
    aligned: bool,
    /// The barriers seen on some but not all running channels, oldest first, with how many
    /// channels have delivered each.
    barriers: std::collections::VecDeque<(Barrier, usize)>,
    /// When the oldest barrier in `barriers` first arrived.
    first_arrival: Option<std::time::Instant>,
    /// The last combined watermark handed out (never decreases).
    watermark: i64,
    /// Whether the last status handed out was `Idle`.
    idle: bool,
    cursor: usize,
}

impl InputGate {
    /// A gate over `(receiver, logical input)` pairs.
    pub fn new(inputs: Vec<(Receiver<Message>, usize)>) -> Self {
        let channels: Vec<Channel> = inputs
            .into_iter()
            .map(|(rx, input)| Channel {
                rx: Box::pin(rx),
                input,
                watermark: BEGINNING_OF_TIME,
                idle: false,
                finished: false,
                blocked: false,
                last_barrier: 0,
            })
            .collect();
        Self {
            running: channels.len(),
            aligned: true,
            barriers: std::collections::VecDeque::new(),
            first_arrival: None,
            channels,
            watermark: BEGINNING_OF_TIME,
            idle: false,
            cursor: 0,
        }
    }

    /// Lets barriers through without holding channels back (at-least-once checkpoints).
    pub fn unaligned(mut self) -> Self {
        self.aligned = false;
        self
    }

    /// Starts from a restored watermark: lower combined watermarks are not handed out again.
    pub fn with_watermark(mut self, watermark: i64) -> Self {
        self.watermark = watermark;
        self
    }

    /// The watermark of each logical input: the least over its channels still running (a
    /// finished input is at the end of time).
    pub fn input_watermarks(&self) -> Vec<i64> {
        let inputs = self.channels.iter().map(|c| c.input + 1).max().unwrap_or(0);
        let mut out = vec![crate::api::END_OF_TIME; inputs];
        for c in self.channels.iter().filter(|c| !c.finished) {
            out[c.input] = out[c.input].min(c.watermark);
        }
        out
    }

    pub fn watermark(&self) -> i64 {
        self.watermark
    }

    /// Counts barrier `barrier` arriving on channel `i`; returns it once every running
    /// channel has delivered it.
    fn barrier_arrived(&mut self, i: usize, barrier: Barrier) -> Option<GateEvent> {
        let ch = &mut self.channels[i];
        ch.last_barrier = barrier.id;
        if self.aligned {
            ch.blocked = true;
        }
        match self.barriers.iter_mut().find(|(b, _)| b.id == barrier.id) {
            Some((_, n)) => *n += 1,
            None => {
                if self.barriers.is_empty() {
                    self.first_arrival = Some(std::time::Instant::now());
                }
                self.barriers.push_back((barrier, 1));
            }
        }
        self.complete_barrier()
    }

    /// The oldest barrier, if every running channel has delivered it.
    fn complete_barrier(&mut self) -> Option<GateEvent> {
        let running = self.running;
        let &(barrier, arrived) = self.barriers.front()?;
        // Channels that ended without delivering it are no longer running: they count as
        // aligned.
        if arrived < running {
            return None;
        }
        self.barriers.pop_front();
        if self.aligned {
            for ch in &mut self.channels {
                ch.blocked = false;
            }
        }
        let alignment = self
            .first_arrival
            .take()
            .map_or(std::time::Duration::ZERO, |t| t.elapsed());
        if !self.barriers.is_empty() {
            self.first_arrival = Some(std::time::Instant::now());
        }
        Some(GateEvent::Barrier { barrier, alignment })
    }

    /// The next event for the task.
    pub async fn next(&mut self) -> Result<GateEvent, UpstreamGone> {
        loop {
            // In at-least-once mode a later barrier may have completed with an earlier one.
            if let Some(event) = self.complete_barrier() {
                return Ok(event);
            }
            if self.running == 0 {
                return Ok(GateEvent::End);
            }
            let (i, message) = self.recv().await?;
            match message {
                Message::Batch(batch) => {
                    let ch = &mut self.channels[i];
                    ch.idle = false;
                    let input = ch.input;
                    if self.idle {
                        // Becoming active again: the status goes out with the next watermark.
                        self.idle = false;
                    }
                    return Ok(GateEvent::Batch { input, batch });
                }
                Message::Watermark(Watermark::At(t)) => {
                    let ch = &mut self.channels[i];
                    ch.idle = false;
                    ch.watermark = ch.watermark.max(t);
                }
                Message::Watermark(Watermark::Idle) => self.channels[i].idle = true,
                Message::Barrier(barrier) => {
                    if let Some(event) = self.barrier_arrived(i, barrier) {
                        return Ok(event);
                    }
                    continue;
                }
                Message::EndOfInput => {
                    let ch = &mut self.channels[i];
                    ch.finished = true;
                    self.running -= 1;
                    // Barriers this channel already delivered no longer wait on it.
                    let delivered = ch.last_barrier;
                    for (b, n) in &mut self.barriers {
                        if b.id <= delivered {
                            *n -= 1;
                        }
                    }
                    if let Some(event) = self.complete_barrier() {
                        return Ok(event);
                    }
                    if self.running == 0 {
                        return Ok(GateEvent::End);
                    }
                }
            }
            if let Some(event) = self.combine() {
                return Ok(event);
            }
        }
    }

    /// Recomputes the combined watermark; returns an event if it advanced or went idle.
    fn combine(&mut self) -> Option<GateEvent> {
        let active = self.channels.iter().filter(|c| !c.finished && !c.idle);
        match active.map(|c| c.watermark).min() {
            Some(min) if min > self.watermark || (self.idle && min >= self.watermark) => {
                self.watermark = self.watermark.max(min);
                self.idle = false;
                Some(GateEvent::Watermark(self.watermark))
            }
            Some(_) => None,
            None if !self.idle => {
                self.idle = true;
                Some(GateEvent::Idle)
            }
            None => None,
        }
    }

    /// Receives from the next channel with a message, round-robin.
    async fn recv(&mut self) -> Result<(usize, Message), UpstreamGone> {
        poll_fn(|cx| {
            let n = self.channels.len();
            for k in 0..n {
                let i = (self.cursor + k) % n;
                let ch = &mut self.channels[i];
                if ch.finished || ch.blocked {
                    continue;
                }
                match ch.rx.as_mut().poll_next(cx) {
                    Poll::Ready(Some(m)) => {
                        self.cursor = (i + 1) % n;
                        return Poll::Ready(Ok((i, m)));
                    }
                    Poll::Ready(None) => return Poll::Ready(Err(UpstreamGone)),
                    Poll::Pending => {}
                }
            }
            Poll::Pending
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gate(n: usize) -> (Vec<async_channel::Sender<Message>>, InputGate) {
        let (txs, rxs): (Vec<_>, Vec<_>) = (0..n).map(|_| async_channel::bounded(8)).unzip();
        (
            txs,
            InputGate::new(rxs.into_iter().map(|r| (r, 0)).collect()),
        )
    }

    async fn wm(tx: &async_channel::Sender<Message>, t: i64) {
        tx.send(Message::Watermark(Watermark::At(t))).await.unwrap();
    }

    #[tokio::test]
    async fn the_watermark_is_the_minimum_over_inputs_and_only_advances() {
        let (tx, mut g) = gate(2);
        wm(&tx[0], 10).await;
        wm(&tx[1], 5).await;
        assert!(matches!(g.next().await.unwrap(), GateEvent::Watermark(5)));
        wm(&tx[1], 20).await;
        assert!(matches!(g.next().await.unwrap(), GateEvent::Watermark(10)));
        wm(&tx[0], 30).await;
        assert!(matches!(g.next().await.unwrap(), GateEvent::Watermark(20)));
        // A finished input no longer holds the watermark back.
        tx[1].send(Message::EndOfInput).await.unwrap();
        assert!(matches!(g.next().await.unwrap(), GateEvent::Watermark(30)));
        tx[0].send(Message::EndOfInput).await.unwrap();
        assert!(matches!(g.next().await.unwrap(), GateEvent::End));
    }

    #[tokio::test]
    async fn an_idle_input_does_not_hold_back_the_watermark() {
        let (tx, mut g) = gate(2);
        wm(&tx[0], 10).await;
        tx[1]
            .send(Message::Watermark(Watermark::Idle))
            .await
            .unwrap();
        assert!(matches!(g.next().await.unwrap(), GateEvent::Watermark(10)));
        tx[0]
            .send(Message::Watermark(Watermark::Idle))
            .await
            .unwrap();
        assert!(matches!(g.next().await.unwrap(), GateEvent::Idle));
        wm(&tx[1], 50).await;
        assert!(matches!(g.next().await.unwrap(), GateEvent::Watermark(50)));
    }

    fn barrier(id: u64) -> Message {
        Message::Barrier(Barrier {
            id,
            kind: crate::api::BarrierKind::Checkpoint,
        })
    }

    fn batch(v: i64) -> Message {
        let col: arrow_array::ArrayRef =
            std::sync::Arc::new(arrow_array::Int64Array::from(vec![v]));
        Message::Batch(RecordBatch::try_from_iter([("v", col)]).unwrap())
    }

    fn value(e: &GateEvent) -> Option<i64> {
        use arrow_array::cast::AsArray;
        match e {
            GateEvent::Batch { batch, .. } => Some(
                batch
                    .column(0)
                    .as_primitive::<arrow_array::types::Int64Type>()
                    .value(0),
            ),
            _ => None,
        }
    }

    #[tokio::test]
    async fn an_aligned_barrier_holds_back_the_inputs_that_delivered_it() {
        let (tx, mut g) = gate(2);
        tx[0].send(batch(1)).await.unwrap();
        tx[0].send(barrier(7)).await.unwrap();
        // Records after the barrier on input 0 belong to the next checkpoint.
        tx[0].send(batch(2)).await.unwrap();
        tx[1].send(batch(10)).await.unwrap();
        tx[1].send(batch(11)).await.unwrap();
        tx[1].send(barrier(7)).await.unwrap();
        let mut before = Vec::new();
        loop {
            match g.next().await.unwrap() {
                GateEvent::Barrier { barrier, .. } => {
                    assert_eq!(barrier.id, 7);
                    break;
                }
                e => before.push(value(&e).unwrap()),
            }
        }
        before.sort_unstable();
        assert_eq!(
            before,
            [1, 10, 11],
            "exactly the records before the barrier"
        );
        assert_eq!(value(&g.next().await.unwrap()), Some(2));
    }

    #[tokio::test]
    async fn an_input_that_ends_counts_as_aligned() {
        let (tx, mut g) = gate(3);
        tx[0].send(barrier(1)).await.unwrap();
        tx[1].send(Message::EndOfInput).await.unwrap();
        tx[2].send(barrier(1)).await.unwrap();
        assert!(matches!(
            g.next().await.unwrap(),
            GateEvent::Barrier {
                barrier: Barrier { id: 1, .. },
                ..
            }
        ));
        // An input that delivered the barrier and then ended no longer holds the next one.
        tx[0].send(barrier(2)).await.unwrap();
        tx[0].send(Message::EndOfInput).await.unwrap();
        tx[2].send(barrier(2)).await.unwrap();
        assert!(matches!(
            g.next().await.unwrap(),
            GateEvent::Barrier {
                barrier: Barrier { id: 2, .. },
                ..
            }
        ));
    }

    #[tokio::test]
    async fn at_least_once_barriers_hold_nothing_back() {
        let (txs, rxs): (Vec<_>, Vec<_>) = (0..2).map(|_| async_channel::bounded(8)).unzip();
        let mut g = InputGate::new(rxs.into_iter().map(|r| (r, 0)).collect()).unaligned();
        txs[0].send(barrier(1)).await.unwrap();
        txs[0].send(batch(5)).await.unwrap();
        txs[0].send(barrier(2)).await.unwrap();
        // Input 0 is read past its barriers while input 1 has not delivered them.
        assert_eq!(value(&g.next().await.unwrap()), Some(5));
        txs[1].send(barrier(1)).await.unwrap();
        txs[1].send(barrier(2)).await.unwrap();
        for id in [1, 2] {
            match g.next().await.unwrap() {
                GateEvent::Barrier { barrier, .. } => assert_eq!(barrier.id, id),
                e => panic!("expected barrier {id}, got {e:?}"),
            }
        }
    }

    #[tokio::test]
    async fn a_restored_watermark_is_not_handed_out_again() {
        let (txs, rxs): (Vec<_>, Vec<_>) = (0..1).map(|_| async_channel::bounded(8)).unzip();
        let mut g = InputGate::new(rxs.into_iter().map(|r| (r, 0)).collect()).with_watermark(100);
        wm(&txs[0], 50).await;
        wm(&txs[0], 150).await;
        assert!(matches!(g.next().await.unwrap(), GateEvent::Watermark(150)));
    }

    #[tokio::test]
    async fn a_vanished_sender_is_an_error_not_an_end() {
        let (tx, mut g) = gate(1);
        drop(tx);
        assert!(g.next().await.is_err());
    }
}
