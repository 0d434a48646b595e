//! The Kafka source's read path, under rust-rdkafka's: librdkafka's batch consume
//! (`rd_kafka_consume_batch_queue`) on a queue of the reader's own.
//!
//! rust-rdkafka's `BaseConsumer::poll` hands out one record per call: a queue pop with its
//! timeout set up from the clock, an event and an `Arc` per record, and the reader's own clock
//! reads around each. A source that reads a million records a second spent more time there
//! than in decoding them. Here every partition a reader owns forwards its fetched records to
//! one [`RecordQueue`] of the reader's (`rd_kafka_queue_forward`, set before the partition is
//! assigned, which librdkafka keeps across its own fetch restarts), and the reader empties it
//! up to a batch at a time. The consumer's own queue keeps what is not a record (statistics,
//! errors of the client), which the reader still serves with `BaseConsumer::poll`. A record's
//! value and key point into the buffer librdkafka fetched them in (it copies no uncompressed
//! record), and the decoder reads them there.
//!
//! This is the runtime's one module with `unsafe`: rust-rdkafka does not wrap the batch calls.
//! What makes it sound:
//! - the queue handle holds the consumer (an `Arc`) and is destroyed before it lets go of it,
//!   so librdkafka never sees a handle of a destroyed client;
//! - the records of a batch are borrowed from the queue ([`Records`] holds `&mut RecordQueue`)
//!   and destroyed when the batch is dropped, before the next batch is taken; a [`Record`]
//!   borrows its batch, so no value or key outlives its message;
//! - librdkafka's queue calls lock internally; the handle is used by one thread at a time.

use std::ffi::{CStr, CString, c_char, c_void};
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::Duration;

use rdkafka::bindings as rd;
use rdkafka::consumer::Consumer;
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaRespErr;

use super::Closing;
use super::source::KafkaConsumer;

/// A queue of the reader's own that its partitions' records are forwarded to.
pub struct RecordQueue {
    queue: NonNull<rd::rd_kafka_queue_t>,
    /// The records of the current batch (destroyed by [`Records`]' drop).
    taken: Vec<*mut rd::rd_kafka_message_t>,
    /// Kept until the queue's handle is destroyed (see `Drop`).
    consumer: Arc<Closing<KafkaConsumer>>,
}

// SAFETY: librdkafka's queue and message calls may be made from any thread (they lock what
// they share); `RecordQueue` is used by one thread at a time, through `&mut self` for the
// batch it holds.
unsafe impl Send for RecordQueue {}

impl RecordQueue {
    /// A new queue of `consumer`'s, taking batches of at most `capacity` records.
    pub fn new(consumer: Arc<Closing<KafkaConsumer>>, capacity: usize) -> Option<Self> {
        // SAFETY: the client pointer is valid while `consumer` lives, which the queue keeps.
        let queue = unsafe { rd::rd_kafka_queue_new(consumer.client().native_ptr()) };
        Some(Self {
            queue: NonNull::new(queue)?,
            taken: Vec::with_capacity(capacity.max(1)),
            consumer,
        })
    }

    /// Sends the records fetched from `topic`'s `partition` to this queue. Called before the
    /// partition is assigned, so that no record of it goes to the consumer's own queue.
    pub fn forward(&self, topic: &str, partition: i32) -> Result<(), String> {
        let name = CString::new(topic).map_err(|_| format!("topic name `{topic}` has a NUL"))?;
        // SAFETY: the client is alive (see `new`); `name` outlives the call; the partition's
        // handle is destroyed at once (forwarding stays, set on the partition's own queue).
        unsafe {
            let part = rd::rd_kafka_queue_get_partition(
                self.consumer.client().native_ptr(),
                name.as_ptr(),
                partition,
            );
            if part.is_null() {
                return Err(format!("no queue for {topic}/{partition}"));
            }
            rd::rd_kafka_queue_forward(part, self.queue.as_ptr());
            rd::rd_kafka_queue_destroy(part);
        }
        Ok(())
    }

    /// The records that arrive within `timeout`, up to `max` (at most the queue's capacity):
    /// returns as soon as it has `max`, or when `timeout` is over.
    pub fn take(&mut self, timeout: Duration, max: usize) -> Records<'_> {
        self.release();
        let max = max.clamp(1, self.taken.capacity());
        let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
        // SAFETY: `taken` has room for `max` pointers, which librdkafka fills from the start
        // and counts in its return value (-1 on an error: none).
        unsafe {
            let n = rd::rd_kafka_consume_batch_queue(
                self.queue.as_ptr(),
                ms,
                self.taken.as_mut_ptr(),
                max,
            );
            self.taken.set_len(usize::try_from(n).unwrap_or(0).min(max));
        }
        Records { queue: self }
    }

    /// Destroys the records of the last batch.
    fn release(&mut self) {
        for message in self.taken.drain(..) {
            // SAFETY: each pointer came from `rd_kafka_consume_batch_queue` and is destroyed
            // once (drained).
            unsafe { rd::rd_kafka_message_destroy(message) };
        }
    }
}

impl Drop for RecordQueue {
    fn drop(&mut self) {
        self.release();
        // SAFETY: the handle came from `rd_kafka_queue_new` and is destroyed once, while the
        // client it belongs to is still alive (`self.consumer` is dropped after this).
        unsafe { rd::rd_kafka_queue_destroy(self.queue.as_ptr()) };
    }
}

/// The records of one [`RecordQueue::take`], destroyed when it is dropped.
pub struct Records<'q> {
    queue: &'q mut RecordQueue,
}

impl Records<'_> {
    pub fn is_empty(&self) -> bool {
        self.queue.taken.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = Record<'_>> {
        self.queue.taken.iter().filter_map(|&m| {
            // SAFETY: the message is alive until the batch is dropped, which the borrow of
            // `self` outlasts.
            unsafe { m.as_ref() }.map(|message| Record { message })
        })
    }
}

impl Drop for Records<'_> {
    fn drop(&mut self) {
        self.queue.release();
    }
}

/// One record of a batch (or the error librdkafka put in its place).
#[derive(Clone, Copy)]
pub struct Record<'a> {
    message: &'a rd::rd_kafka_message_t,
}

impl<'a> Record<'a> {
    /// The error this entry stands for: the end of a partition, or a consumer error.
    pub fn error(&self) -> Option<KafkaError> {
        match self.message.err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR => None,
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__PARTITION_EOF => {
                Some(KafkaError::PartitionEOF(self.message.partition))
            }
            e => Some(KafkaError::MessageConsumption(e.into())),
        }
    }

    /// The topic's handle: the same for every record of a topic (a cheap identity).
    pub fn topic_id(&self) -> usize {
        self.message.rkt as usize
    }

    pub fn topic(&self) -> &'a str {
        if self.message.rkt.is_null() {
            return "";
        }
        // SAFETY: librdkafka's topic handle outlives its messages, and its name is a
        // NUL-terminated string it owns.
        let name = unsafe { CStr::from_ptr(rd::rd_kafka_topic_name(self.message.rkt)) };
        name.to_str().unwrap_or("")
    }

    pub fn partition(&self) -> i32 {
        self.message.partition
    }

    pub fn offset(&self) -> i64 {
        self.message.offset
    }

    pub fn payload(&self) -> Option<&'a [u8]> {
        bytes(self.message.payload, self.message.len)
    }

    pub fn key(&self) -> Option<&'a [u8]> {
        bytes(self.message.key, self.message.key_len)
    }

    /// The record's timestamp in milliseconds, when it has one.
    pub fn timestamp(&self) -> Option<i64> {
        let mut kind = rd::rd_kafka_timestamp_type_t::RD_KAFKA_TIMESTAMP_NOT_AVAILABLE;
        // SAFETY: the message is alive (borrowed); librdkafka only reads it.
        let ms = unsafe { rd::rd_kafka_message_timestamp(self.message, &mut kind) };
        (ms != -1 && kind != rd::rd_kafka_timestamp_type_t::RD_KAFKA_TIMESTAMP_NOT_AVAILABLE)
            .then_some(ms)
    }

    /// The record's headers, in order: name and value (`None` for a null value).
    pub fn headers(&self) -> Vec<(&'a str, Option<&'a [u8]>)> {
        let mut out = Vec::new();
        let mut headers: *mut rd::rd_kafka_headers_t = std::ptr::null_mut();
        // SAFETY: the message is alive (borrowed); librdkafka parses its headers once and
        // keeps them with the message, which outlives the names and values returned.
        unsafe {
            let found = rd::rd_kafka_message_headers(self.message, &mut headers);
            if found != RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR || headers.is_null() {
                return out;
            }
            for idx in 0..rd::rd_kafka_header_cnt(headers) {
                let mut name: *const c_char = std::ptr::null();
                let mut value: *const c_void = std::ptr::null();
                let mut size = 0usize;
                let got =
                    rd::rd_kafka_header_get_all(headers, idx, &mut name, &mut value, &mut size);
                if got != RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR || name.is_null() {
                    break;
                }
                let name = CStr::from_ptr(name).to_str().unwrap_or("");
                out.push((name, bytes(value.cast_mut(), size)));
            }
        }
        out
    }
}

/// A librdkafka buffer as a slice (`None` for a null pointer: no value, no key).
fn bytes<'a>(ptr: *mut c_void, len: usize) -> Option<&'a [u8]> {
    if ptr.is_null() {
        return None;
    }
    // SAFETY: librdkafka gives `len` readable bytes at `ptr`, alive as long as the message
    // (the caller's lifetime `'a` is the message's borrow).
    Some(unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) })
}
