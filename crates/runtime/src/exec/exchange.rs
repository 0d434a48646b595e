//! Output edges of a task that lead to other tasks: channels and how batches are partitioned.

use std::sync::Arc;
use std::time::Instant;

use arrow_array::{RecordBatch, UInt32Array};
use arrow_select::take::take_record_batch;
use async_channel::{Sender, TrySendError};
use weir_state::key_groups::subtask_for_key_group;

use super::message::Message;
use super::metrics::SubtaskMetrics;
use crate::error::OperatorError;
use crate::operators::key_by::KeySelector;

/// How records of an edge are spread over the receiving subtasks.
#[derive(Clone, Debug)]
pub enum Partitioning {
    /// Subtask i sends to subtask i (equal parallelism).
    Forward,
    /// Whole batches round-robin over all receivers (unequal parallelism, no key).
    Rebalance,
    /// Each row to the subtask owning its key group.
    Hash(Arc<KeySelector>),
}

/// The sending end of one edge, for one sending subtask.
pub struct ExchangeWriter {
    /// One sender per receiving subtask (exactly one for `Forward`).
    senders: Vec<Sender<Message>>,
    partitioning: Partitioning,
    /// Sender metrics: records out and time blocked by backpressure.
    metrics: Arc<SubtaskMetrics>,
    next: usize,
    hashes: Vec<u64>,
    groups: Vec<u32>,
    indices: Vec<Vec<u32>>,
}

/// The receiver is gone: the job is being torn down.
#[derive(Debug, thiserror::Error)]
#[error("a downstream subtask stopped receiving")]
pub struct DownstreamGone;

impl ExchangeWriter {
    pub fn new(
        senders: Vec<Sender<Message>>,
        partitioning: Partitioning,
        metrics: Arc<SubtaskMetrics>,
    ) -> Self {
        let n = senders.len();
        Self {
            senders,
            partitioning,
            metrics,
            next: 0,
            hashes: Vec::new(),
            groups: Vec::new(),
            indices: vec![Vec::new(); n],
        }
    }

    /// Sends `batch`, partitioned; waits (backpressure) while a receiver's channel is full.
    pub async fn send_batch(&mut self, batch: RecordBatch) -> Result<(), OperatorError> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        match &self.partitioning {
            Partitioning::Forward => self.send_to(0, Message::Batch(batch)).await,
            Partitioning::Rebalance => {
                let i = self.next;
                self.next = (self.next + 1) % self.senders.len();
                self.send_to(i, Message::Batch(batch)).await
            }
            Partitioning::Hash(keys) => {
                let n = self.senders.len();
                if n == 1 {
                    return self.send_to(0, Message::Batch(batch)).await;
                }
                let keys = keys.clone();
                keys.key_groups_of(&batch, &mut self.hashes, &mut self.groups)?;
                for v in &mut self.indices {
                    v.clear();
                }
                let key_groups = keys.key_groups();
                for (row, group) in self.groups.iter().enumerate() {
                    let dest = subtask_for_key_group(*group, key_groups, n);
                    self.indices[dest].push(row as u32);
                }
                for dest in 0..n {
                    let rows = self.indices[dest].len();
                    if rows == 0 {
                        continue;
                    }
                    let part = if rows == batch.num_rows() {
                        batch.clone()
                    } else {
                        let idx = UInt32Array::from(std::mem::take(&mut self.indices[dest]));
                        take_record_batch(&batch, &idx)?
                    };
                    self.send_to(dest, Message::Batch(part)).await?;
                }
                Ok(())
            }
        }
    }

    /// Sends a control message to every receiver.
    pub async fn broadcast(&mut self, message: Message) -> Result<(), OperatorError> {
        for i in 0..self.senders.len() {
            self.send_to(i, message.clone()).await?;
        }
        Ok(())
    }

    async fn send_to(&mut self, i: usize, message: Message) -> Result<(), OperatorError> {
        let sender = &self.senders[i];
        match sender.try_send(message) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(message)) => {
                let started = Instant::now();
                let result = sender.send(message).await;
                SubtaskMetrics::add(
                    &self.metrics.backpressure_ns,
                    started.elapsed().as_nanos() as u64,
                );
                result.map_err(|_| downstream_gone())
            }
            Err(TrySendError::Closed(_)) => Err(downstream_gone()),
        }
    }
}

fn downstream_gone() -> OperatorError {
    OperatorError::Cancelled(DownstreamGone.to_string())
}
