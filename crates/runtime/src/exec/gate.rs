//! The input gate of a task: all its input channels, merged, with watermarks combined.
//!
//! A task with several input channels (one per upstream subtask, over every input edge) reads
//! them through one gate. The gate polls the channels round-robin (no channel can starve the
//! others), tracks each channel's watermark and idleness, and forwards the combined watermark,
//! the minimum over the channels that are neither idle nor finished, only when it advances.
//! Each channel is polled individually so that a later checkpoint barrier can hold one channel
//! back while the others are read (aligned barriers) without buffering.

use std::future::poll_fn;
use std::pin::Pin;
use std::task::Poll;

use arrow_array::RecordBatch;
use async_channel::Receiver;
use futures::Stream;

use super::message::{BEGINNING_OF_TIME, Message, Watermark};

/// What the gate hands to its task.
#[derive(Debug)]
pub enum GateEvent {
    /// A batch on logical input `input`.
    Batch { input: usize, batch: RecordBatch },
    /// The combined watermark advanced.
    Watermark(i64),
    /// Every input still running is idle.
    Idle,
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
}

pub struct InputGate {
    channels: Vec<Channel>,
    running: usize,
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
            })
            .collect();
        Self {
            running: channels.len(),
            channels,
            watermark: BEGINNING_OF_TIME,
            idle: false,
            cursor: 0,
        }
    }

    pub fn watermark(&self) -> i64 {
        self.watermark
    }

    /// The next event for the task.
    pub async fn next(&mut self) -> Result<GateEvent, UpstreamGone> {
        loop {
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
                Message::EndOfInput => {
                    self.channels[i].finished = true;
                    self.running -= 1;
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
                if ch.finished {
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

    #[tokio::test]
    async fn a_vanished_sender_is_an_error_not_an_end() {
        let (tx, mut g) = gate(1);
        drop(tx);
        assert!(g.next().await.is_err());
    }
}
