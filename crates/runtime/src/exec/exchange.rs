//! Output edges of a task that lead to other tasks: channels and how batches are partitioned.

use std::sync::Arc;
use std::time::Instant;

use arrow_array::{RecordBatch, UInt32Array};
use arrow_select::take::take_record_batch;
use async_channel::{Sender, TrySendError};
use weir_state::key_groups::subtask_for_key_group;

use crate::api::{Message, OperatorError, SubtaskMetrics};
use crate::keys::KeySelector;

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

#[cfg(test)]
mod tests {
    use arrow_array::Int64Array;
    use arrow_schema::{DataType, Field, Schema};
    use futures::FutureExt;

    use super::*;
    use crate::expr::Expr;

    fn batch(values: Vec<i64>) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, true)]));
        RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(values))]).unwrap()
    }

    #[tokio::test]
    async fn a_full_channel_holds_the_sender_until_the_receiver_reads() {
        let (tx, rx) = async_channel::bounded(1);
        let metrics = Arc::new(SubtaskMetrics::default());
        let mut writer = ExchangeWriter::new(vec![tx], Partitioning::Forward, metrics.clone());
        writer.send_batch(batch(vec![1])).await.unwrap();
        {
            // The channel holds one batch: the next send cannot complete.
            let pending = writer.send_batch(batch(vec![2]));
            futures::pin_mut!(pending);
            assert!(
                pending.as_mut().now_or_never().is_none(),
                "the sender must wait"
            );
            assert!(rx.recv().await.is_ok());
            pending.await.unwrap();
        }
        assert!(rx.recv().await.is_ok());
        assert!(
            metrics
                .backpressure_ns
                .load(std::sync::atomic::Ordering::Relaxed)
                > 0,
            "time blocked is counted as backpressure"
        );
    }

    #[tokio::test]
    async fn hash_partitioning_sends_each_key_to_the_subtask_owning_its_group() {
        let schema = batch(vec![]).schema();
        let keys = Arc::new(KeySelector::new(
            vec![Expr::compile("k", &schema).unwrap()],
            vec!["k".into()],
            128,
        ));
        let (txs, rxs): (Vec<_>, Vec<_>) = (0..3).map(|_| async_channel::bounded(16)).unzip();
        let mut writer = ExchangeWriter::new(
            txs,
            Partitioning::Hash(keys.clone()),
            Arc::new(SubtaskMetrics::default()),
        );
        let values: Vec<i64> = (0..500).map(|i| i % 97).collect();
        writer.send_batch(batch(values.clone())).await.unwrap();
        writer.send_batch(batch(values)).await.unwrap();
        let mut owner: std::collections::HashMap<i64, usize> = Default::default();
        let mut total = 0;
        for (subtask, rx) in rxs.iter().enumerate() {
            while let Ok(Message::Batch(b)) = rx.try_recv() {
                let mut hashes = Vec::new();
                let mut groups = Vec::new();
                keys.key_groups_of(&b, &mut hashes, &mut groups).unwrap();
                let col = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
                for (row, g) in groups.iter().enumerate() {
                    assert_eq!(subtask_for_key_group(*g, 128, 3), subtask);
                    let prev = owner.insert(col.value(row), subtask);
                    assert!(prev.is_none_or(|p| p == subtask), "a key on two subtasks");
                    total += 1;
                }
            }
        }
        assert_eq!(total, 1000, "every row delivered exactly once");
        assert!(
            owner
                .values()
                .collect::<std::collections::HashSet<_>>()
                .len()
                > 1
        );
    }
}
