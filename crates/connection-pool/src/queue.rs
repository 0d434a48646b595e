//! The combiner's action queue: a bounded multi-producer ring whose producers claim slots with one
//! fetch-and-add, and whose single consumer (whoever holds the combiner flag) takes them in order.
//!
//! # Why this queue
//!
//! Lesson 4 of `DESIGN.md`: Vert.x's CAS-loop queue collapsed under contention (6,424 ops/ms at 8
//! threads) where a fetch-and-add queue held 27,310. A compare-and-swap on a shared tail fails for
//! every producer but one per round and is retried, so contended pushes cost a cache-line transfer
//! *per attempt*; a fetch-and-add always succeeds, so each push costs one transfer whatever the
//! contention. `crossbeam_queue::SegQueue` and `concurrent-queue` both retry a CAS on the tail, and
//! tokio's unbounded mpsc (whose list *is* fetch-and-add indexed) counts messages with a CAS loop,
//! makes `try_recv` park the thread while a sender is mid-push, and charges `poll_recv` to the
//! task's coop budget; hence this small ring over `std` atomics (loom-checked, see
//! `loom_models.rs`).
//!
//! # Protocol
//!
//! Slot `k` carries a sequence number, initially `k`. A producer takes ticket `t` with
//! `tail.fetch_add(1)`; its slot `t % capacity` is free for it when the sequence reads `t`, it
//! writes the value, then stores `t + 1` (release). The consumer at `head = h` finds the value ready
//! when slot `h % capacity` reads `h + 1`, takes it, and stores `h + capacity`, freeing the slot for
//! the ticket one lap later. The sequence number hands each slot's value cell between exactly one
//! producer and the consumer, so the cell needs no lock of its own: this module is one of the
//! crate's two with `unsafe` (the other is `flag`), one block for each side of that hand-off,
//! and under `--cfg weir_loom` the cells are loom's, which fail a model where two accesses race.
//! There is one consumer because popping takes the queue's one [`Consumer`] by `&mut`.
//!
//! A slot still holding the previous lap's value means the ring is full: [`ActionQueue::publish`]
//! hands the value back and the submitter helps drain (see `Combiner::submit`) instead of waiting
//! for somebody else. A claimed but not yet written slot at the head reads as empty: the producer
//! writing it tries the combiner flag right after, so nothing behind it is stranded.

use crossbeam_utils::CachePadded;

use crate::sync::{AtomicUsize, Ordering, UnsafeCell};

struct Slot<T> {
    /// `t` while free for ticket `t`; `t + 1` once ticket `t`'s value is in.
    seq: AtomicUsize,
    /// Written only by the producer holding the slot's ticket and taken only by the consumer,
    /// each while the sequence number says the slot is theirs.
    value: UnsafeCell<Option<T>>,
}

/// The right to pop from one [`ActionQueue`]: there is one per queue, made with it, and
/// [`ActionQueue::pop`] takes it by `&mut`, so two threads can never pop at once. The combiner
/// keeps it with the state its flag guards.
#[derive(Debug)]
pub(crate) struct Consumer {
    /// Which queue this is the consumer of (the address of its slots).
    queue: usize,
}

/// A bounded multi-producer, single-consumer FIFO ring (see the module docs).
pub(crate) struct ActionQueue<T> {
    /// The next ticket to hand out; producers `fetch_add` it.
    tail: CachePadded<AtomicUsize>,
    /// The next ticket to consume. Written only by the consumer (the combiner flag holder); read
    /// by anyone in [`ActionQueue::has_ready`].
    head: CachePadded<AtomicUsize>,
    slots: Box<[Slot<T>]>,
    mask: usize,
}

// SAFETY: the slots' cells are the only part that is not `Sync`, and they are never reached by
// two threads at once: each is handed between one producer and the one consumer by its sequence
// number (see `publish` and `pop`). Values move between threads, hence `T: Send`.
unsafe impl<T: Send> Sync for ActionQueue<T> {}

impl<T> ActionQueue<T> {
    /// A ring of `capacity` slots, and its one consumer.
    ///
    /// # Panics
    /// If `capacity` is not a power of two of at least 2: with one slot, "ready for ticket `t`"
    /// and "free for ticket `t + 1`" would be the same sequence number.
    pub(crate) fn new(capacity: usize) -> (Self, Consumer) {
        Self::with_first_ticket(capacity, 0)
    }

    /// A ring whose first ticket is `first` (a multiple of `capacity`): the tests start just below
    /// `usize::MAX` to take the tickets and sequence numbers through their wraparound.
    fn with_first_ticket(capacity: usize, first: usize) -> (Self, Consumer) {
        assert!(
            capacity >= 2 && capacity.is_power_of_two(),
            "the combiner queue capacity must be a power of two of at least 2, got {capacity}"
        );
        debug_assert_eq!(
            first & (capacity - 1),
            0,
            "the first ticket must start a lap"
        );
        let slots: Box<[Slot<T>]> = (0..capacity)
            .map(|k| Slot {
                seq: AtomicUsize::new(first.wrapping_add(k)),
                value: UnsafeCell::new(None),
            })
            .collect();
        let consumer = Consumer {
            queue: slots.as_ptr() as usize,
        };
        let queue = Self {
            tail: CachePadded::new(AtomicUsize::new(first)),
            head: CachePadded::new(AtomicUsize::new(first)),
            slots,
            mask: capacity - 1,
        };
        (queue, consumer)
    }

    pub(crate) fn capacity(&self) -> usize {
        self.mask + 1
    }

    /// Claims the next ticket: one fetch-and-add, never retried. The caller must then
    /// [`publish`](Self::publish) a value under it (until it succeeds), or the queue stalls there.
    pub(crate) fn claim(&self) -> usize {
        // Relaxed: the ticket only picks a slot; the slot's sequence number carries the ordering.
        self.tail.fetch_add(1, Ordering::Relaxed)
    }

    /// Writes `value` under `ticket`, or hands it back if the slot still holds the value from one
    /// lap earlier (the ring is full).
    pub(crate) fn publish(&self, ticket: usize, value: T) -> Result<(), T> {
        let slot = &self.slots[ticket & self.mask];
        // Acquire: the consumer's take of the previous lap happens before our write.
        if slot.seq.load(Ordering::Acquire) != ticket {
            return Err(value);
        }
        // SAFETY: the slot is ours alone until we store `ticket + 1` below. `claim` handed out
        // `ticket` once (a fetch-and-add), so no other producer writes this slot in this lap;
        // the sequence number reads `ticket`, so the consumer has taken the previous lap's value
        // (its Release store of `ticket`, our Acquire load) and will not look at the cell again
        // before it reads `ticket + 1`.
        let previous = slot
            .value
            .with_mut(|cell| unsafe { (*cell).replace(value) });
        debug_assert!(previous.is_none(), "a queue slot was overwritten");
        slot.seq.store(ticket.wrapping_add(1), Ordering::Release);
        Ok(())
    }

    /// Takes the value at the head, if it is written. `None` when the queue is empty, or when the
    /// head's producer has claimed its slot but not yet written it.
    ///
    /// # Panics
    /// If `consumer` is another queue's.
    pub(crate) fn pop(&self, consumer: &mut Consumer) -> Option<T> {
        assert_eq!(
            consumer.queue,
            self.slots.as_ptr() as usize,
            "popped with another queue's consumer"
        );
        let head = self.head.load(Ordering::Relaxed);
        let slot = &self.slots[head & self.mask];
        if slot.seq.load(Ordering::Acquire) != head.wrapping_add(1) {
            return None;
        }
        // SAFETY: we are this queue's only consumer (its one `Consumer`, borrowed mutably, checked
        // above), and the sequence number reads `head + 1`: the producer of ticket `head` has
        // written the cell and let go of it (its Release store, our Acquire load), and no producer
        // touches it again before we store `head + capacity` below.
        let value = slot.value.with_mut(|cell| unsafe { (*cell).take() });
        slot.seq
            .store(head.wrapping_add(self.capacity()), Ordering::Release);
        self.head.store(head.wrapping_add(1), Ordering::Release);
        value
    }

    /// Whether no ticket is outstanding: everything claimed has been consumed. Seen from a thread
    /// that claimed a ticket itself, an unconsumed ticket of its own always makes this `false`.
    pub(crate) fn is_empty(&self) -> bool {
        self.tail.load(Ordering::Acquire) == self.head.load(Ordering::Acquire)
    }

    /// Whether the head holds a written value: the combiner's re-check after releasing its flag.
    /// From a thread that is not the consumer the answer may be stale in one direction only: it can
    /// say `true` for a value that was just taken, never `false` for one the head holds.
    pub(crate) fn has_ready(&self) -> bool {
        let head = self.head.load(Ordering::Acquire);
        self.slots[head & self.mask].seq.load(Ordering::Acquire) == head.wrapping_add(1)
    }
}

#[cfg(all(test, not(weir_loom)))]
mod tests {
    use super::ActionQueue;

    #[test]
    fn values_come_out_in_ticket_order_across_laps() {
        let (queue, mut consumer) = ActionQueue::new(4);
        for round in 0..5 {
            for k in 0..3 {
                let ticket = queue.claim();
                assert!(queue.publish(ticket, round * 10 + k).is_ok());
            }
            assert!(queue.has_ready());
            for k in 0..3 {
                assert_eq!(queue.pop(&mut consumer), Some(round * 10 + k));
            }
            assert!(!queue.has_ready());
            assert_eq!(queue.pop(&mut consumer), None);
        }
    }

    #[test]
    fn a_full_ring_hands_the_value_back_until_the_slot_is_free() {
        let (queue, mut consumer) = ActionQueue::new(2);
        for v in 0..2 {
            let ticket = queue.claim();
            assert!(queue.publish(ticket, v).is_ok());
        }
        let ticket = queue.claim();
        assert_eq!(queue.publish(ticket, 2), Err(2));
        assert_eq!(queue.pop(&mut consumer), Some(0));
        assert!(queue.publish(ticket, 2).is_ok());
        assert_eq!(queue.pop(&mut consumer), Some(1));
        assert_eq!(queue.pop(&mut consumer), Some(2));
    }

    #[test]
    fn a_claimed_but_unwritten_head_reads_as_empty() {
        let (queue, mut consumer) = ActionQueue::new(4);
        let first = queue.claim();
        let second = queue.claim();
        assert!(queue.publish(second, "second").is_ok());
        assert!(!queue.has_ready());
        assert_eq!(queue.pop(&mut consumer), None);
        assert!(queue.publish(first, "first").is_ok());
        assert_eq!(queue.pop(&mut consumer), Some("first"));
        assert_eq!(queue.pop(&mut consumer), Some("second"));
    }

    #[test]
    fn tickets_and_sequence_numbers_wrap_around_usize_max() {
        // Tickets are `fetch_add`ed without bound and wrap; with a power-of-two capacity the slot
        // (`ticket & mask`) and the sequence numbers (`wrapping_add`) stay consistent across the
        // wrap, including the full-ring check.
        let capacity = 4;
        let (queue, mut consumer) =
            ActionQueue::with_first_ticket(capacity, usize::MAX - (capacity - 1));
        let mut next_out = 0;
        for value in 0..40u32 {
            let ticket = queue.claim();
            if value % 5 == 4 {
                // Fill the ring, see the next publish refused, then drain.
                assert!(queue.publish(ticket, value).is_ok());
                let mut pending = Vec::new();
                for extra in 0..capacity as u32 {
                    pending.push((queue.claim(), 1_000 + extra));
                }
                let (last_ticket, last) = pending.pop().expect("four extra tickets");
                for &(ticket, value) in &pending {
                    assert!(queue.publish(ticket, value).is_ok());
                }
                assert_eq!(
                    queue.publish(last_ticket, last),
                    Err(last),
                    "the ring is full"
                );
                assert_eq!(queue.pop(&mut consumer), Some(value));
                assert!(queue.publish(last_ticket, last).is_ok());
                for (_, value) in pending {
                    assert_eq!(queue.pop(&mut consumer), Some(value));
                }
                assert_eq!(queue.pop(&mut consumer), Some(last));
                next_out = value + 1;
            } else {
                assert!(queue.publish(ticket, value).is_ok());
                assert!(queue.has_ready());
                assert_eq!(queue.pop(&mut consumer), Some(value));
                next_out += 1;
            }
            assert!(queue.is_empty());
            assert!(!queue.has_ready());
        }
        assert_eq!(next_out, 40);
        // Well past the wrap.
        assert!(queue.claim() < usize::MAX / 2);
    }

    #[test]
    #[should_panic(expected = "power of two")]
    fn a_capacity_that_is_not_a_power_of_two_is_refused() {
        let _ = ActionQueue::<u8>::new(3);
    }

    #[test]
    #[should_panic(expected = "at least 2")]
    fn a_single_slot_ring_is_refused() {
        // Regression (found by the loom model of a full ring): with one slot, a second producer
        // took "ready for ticket 0" for "free for ticket 1" and overwrote an unconsumed action.
        let _ = ActionQueue::<u8>::new(1);
    }

    #[test]
    #[should_panic(expected = "another queue's consumer")]
    fn popping_needs_the_queues_own_consumer() {
        let (first, _) = ActionQueue::<u8>::new(2);
        let (_, mut second) = ActionQueue::<u8>::new(2);
        let _ = first.pop(&mut second);
    }
}
