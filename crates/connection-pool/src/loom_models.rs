//! Loom models of the lock-free parts: the action ring, the combiner flag with its re-check, the
//! uncontended fast path, yielding and resuming, and helping when the ring is full. Loom runs each
//! model under every interleaving (and every weak-memory outcome it models) up to a preemption
//! bound, against this crate's own code compiled with loom's primitives (see `sync.rs`).
//!
//! Run as "Verification" in `lib.rs` says.

use loom::sync::Arc;
use loom::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use loom::thread;

use crate::combiner::{CombinedState, Combiner, CombinerConfig};
use crate::flag::FlagCell;
use crate::queue::ActionQueue;

/// Applies numbers; each one's follow-up is the number, so callers learn what was applied.
struct Tally;

impl CombinedState for Tally {
    type Action = u32;
    type FollowUp = u32;

    fn apply(&mut self, action: u32, follow_ups: &mut Vec<u32>) {
        follow_ups.push(action);
    }
}

/// Checks that each submitter's actions apply in the order it submitted them.
struct InOrder {
    next: [u32; 3],
}

impl CombinedState for InOrder {
    /// (submitter, sequence number)
    type Action = (usize, u32);
    type FollowUp = ();

    fn apply(&mut self, (who, seq): (usize, u32), _: &mut Vec<()>) {
        assert_eq!(
            self.next[who], seq,
            "submitter {who}'s actions applied out of order"
        );
        self.next[who] += 1;
    }
}

/// Runs `f` under loom with a preemption bound of 3 (every model finishes in seconds to about a
/// minute on the project's machine), or `LOOM_MAX_PREEMPTIONS` if set.
fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(3);
    }
    builder.check(f);
}

/// Two threads and the main one each submit one action, with `config`; returns every follow-up
/// handed back by the three `submit` calls.
fn three_submitters(combiner: &Arc<Combiner<Tally>>) -> Vec<u32> {
    let t1 = thread::spawn({
        let combiner = Arc::clone(combiner);
        move || combiner.submit(1)
    });
    let t2 = thread::spawn({
        let combiner = Arc::clone(combiner);
        move || combiner.submit(2)
    });
    let mut seen = combiner.submit(3);
    seen.extend(t1.join().expect("submitter 1"));
    seen.extend(t2.join().expect("submitter 2"));
    seen
}

#[test]
fn concurrent_submitters_strand_nothing() {
    model(|| {
        let combiner = Arc::new(Combiner::new(
            Tally,
            CombinerConfig::default()
                .flag_spins(1)
                .without_yield()
                .queue_capacity(4),
            || false,
        ));
        // Once every submit has returned, every action has been applied exactly once and its
        // follow-up handed to exactly one caller: nobody had to call resume.
        let mut seen = three_submitters(&combiner);
        seen.sort_unstable();
        assert_eq!(seen, vec![1, 2, 3]);
    });
}

#[test]
fn one_submitters_actions_apply_in_submission_order() {
    model(|| {
        let combiner = Arc::new(Combiner::new(
            InOrder { next: [0; 3] },
            CombinerConfig::default()
                .flag_spins(1)
                .without_yield()
                .queue_capacity(4),
            || false,
        ));
        // Thread 0 submits twice while two others race it: its second action must not overtake
        // its first, whatever state the queue and the flag are in between.
        let twice = thread::spawn({
            let combiner = Arc::clone(&combiner);
            move || {
                let _ = combiner.submit((0, 0));
                let _ = combiner.submit((0, 1));
            }
        });
        let other = thread::spawn({
            let combiner = Arc::clone(&combiner);
            move || {
                let _ = combiner.submit((1, 0));
            }
        });
        let _ = combiner.submit((2, 0));
        twice.join().expect("submitter 0");
        other.join().expect("submitter 1");
        // Everything was applied (the combiner re-checks), so a last resume finds nothing.
        assert_eq!(combiner.stats().actions, 4);
    });
}

#[test]
fn yielded_runs_are_finished_by_the_resumes_they_post() {
    model(|| {
        let posted = Arc::new(AtomicUsize::new(0));
        let combiner = Arc::new(Combiner::new(
            Tally,
            CombinerConfig::default()
                .flag_spins(1)
                .max_actions_per_run(1)
                .queue_capacity(4),
            {
                let posted = Arc::clone(&posted);
                move || {
                    posted.fetch_add(1, SeqCst);
                    true
                }
            },
        ));
        let mut seen = three_submitters(&combiner);
        // Each posted resume runs once (what the pool's resumer task does).
        let mut ran = 0;
        while ran < posted.load(SeqCst) {
            seen.extend(combiner.resume());
            ran += 1;
        }
        seen.sort_unstable();
        assert_eq!(seen, vec![1, 2, 3]);
        assert!(combiner.stats().longest_run_actions <= 1);
    });
}

#[test]
fn no_caller_combines_past_its_action_limit() {
    // Regression: a caller whose run ended with the queue empty re-checked, found an action that
    // had arrived meanwhile, took the flag again and started a fresh run with a fresh count, so
    // one caller could be kept combining indefinitely while actions kept arriving (the trap of
    // lesson 4). The limit now bounds everything one call applies.
    model(|| {
        let posted = Arc::new(AtomicUsize::new(0));
        let combiner = Arc::new(Combiner::new(
            Tally,
            CombinerConfig::default()
                .flag_spins(1)
                .max_actions_per_run(1)
                .queue_capacity(4),
            {
                let posted = Arc::clone(&posted);
                move || {
                    posted.fetch_add(1, SeqCst);
                    true
                }
            },
        ));
        let submitters: Vec<_> = (1..=2u32)
            .map(|action| {
                let combiner = Arc::clone(&combiner);
                thread::spawn(move || combiner.submit(action))
            })
            .collect();
        let mine = combiner.submit(3);
        assert!(mine.len() <= 1, "one call applied {mine:?}");
        let mut seen = mine;
        for submitter in submitters {
            let theirs = submitter.join().expect("submitter");
            assert!(theirs.len() <= 1, "one call applied {theirs:?}");
            seen.extend(theirs);
        }
        let mut ran = 0;
        while ran < posted.load(SeqCst) {
            seen.extend(combiner.resume());
            ran += 1;
        }
        seen.sort_unstable();
        assert_eq!(seen, vec![1, 2, 3]);
    });
}

#[test]
fn a_resume_racing_submitters_strands_nothing() {
    model(|| {
        let posted = Arc::new(AtomicUsize::new(0));
        let combiner = Arc::new(Combiner::new(
            Tally,
            CombinerConfig::default()
                .flag_spins(1)
                .max_actions_per_run(1)
                .queue_capacity(2),
            {
                let posted = Arc::clone(&posted);
                move || {
                    posted.fetch_add(1, SeqCst);
                    true
                }
            },
        ));
        // A resume posted earlier runs while two submissions race.
        let resumer = thread::spawn({
            let combiner = Arc::clone(&combiner);
            move || combiner.resume()
        });
        let t1 = thread::spawn({
            let combiner = Arc::clone(&combiner);
            move || combiner.submit(1)
        });
        let mut seen = combiner.submit(2);
        seen.extend(t1.join().expect("submitter"));
        seen.extend(resumer.join().expect("resumer"));
        let mut ran = 0;
        while ran < posted.load(SeqCst) {
            seen.extend(combiner.resume());
            ran += 1;
        }
        seen.sort_unstable();
        assert_eq!(seen, vec![1, 2]);
    });
}

#[test]
fn a_yield_that_cannot_post_a_resume_keeps_draining() {
    model(|| {
        // The hook refuses (as the pool's does once it is shutting down): a caller at its limit
        // carries on as a new run, so every action is applied before the submitters return.
        let combiner = Arc::new(Combiner::new(
            Tally,
            CombinerConfig::default()
                .flag_spins(1)
                .max_actions_per_run(1)
                .queue_capacity(4),
            || false,
        ));
        let mut seen = three_submitters(&combiner);
        seen.sort_unstable();
        assert_eq!(seen, vec![1, 2, 3]);
        assert_eq!(combiner.stats().yields, 0);
        assert!(combiner.stats().longest_run_actions <= 1);
    });
}

#[test]
fn a_full_ring_is_drained_by_its_submitters() {
    model(|| {
        // Two slots for three submitters: whoever finds its slot taken helps drain.
        let combiner = Arc::new(Combiner::new(
            Tally,
            CombinerConfig::default()
                .flag_spins(1)
                .without_yield()
                .queue_capacity(2),
            || false,
        ));
        let mut seen = three_submitters(&combiner);
        seen.sort_unstable();
        assert_eq!(seen, vec![1, 2, 3]);
    });
}

#[test]
fn the_ring_hands_values_over_in_order_across_laps() {
    model(|| {
        let (queue, mut consumer) = ActionQueue::new(2);
        let queue = Arc::new(queue);
        let producer = thread::spawn({
            let queue = Arc::clone(&queue);
            move || {
                for value in 0..3u32 {
                    let ticket = queue.claim();
                    let mut value = value;
                    while let Err(back) = queue.publish(ticket, value) {
                        value = back;
                        thread::yield_now();
                    }
                }
            }
        });
        let mut got = Vec::new();
        while got.len() < 3 {
            match queue.pop(&mut consumer) {
                Some(value) => got.push(value),
                None => thread::yield_now(),
            }
        }
        producer.join().expect("producer");
        assert_eq!(got, vec![0, 1, 2]);
        assert!(!queue.has_ready());
    });
}

#[test]
fn the_ring_takes_racing_producers_without_loss() {
    model(|| {
        let (queue, mut consumer) = ActionQueue::new(2);
        let queue = Arc::new(queue);
        let producers: Vec<_> = (0..2u32)
            .map(|value| {
                let queue = Arc::clone(&queue);
                thread::spawn(move || {
                    let ticket = queue.claim();
                    assert!(
                        queue.publish(ticket, value).is_ok(),
                        "two slots, two values"
                    );
                })
            })
            .collect();
        let mut got = Vec::new();
        while got.len() < 2 {
            match queue.pop(&mut consumer) {
                Some(value) => got.push(value),
                None => thread::yield_now(),
            }
        }
        for producer in producers {
            producer.join().expect("producer");
        }
        got.sort_unstable();
        assert_eq!(got, vec![0, 1]);
    });
}

#[test]
fn the_flag_hands_its_value_from_holder_to_holder() {
    // Each holder adds one to the guarded value and counts its turn outside the cell; the cell
    // (loom's) fails the model if two holders' accesses race, and the value must equal the turns.
    // The main thread takes the flag twice, so a holder also follows its own release.
    model(|| {
        let cell = Arc::new(FlagCell::new(0usize));
        let turns = Arc::new(AtomicUsize::new(0));
        let take_once = |cell: &FlagCell<usize>, turns: &AtomicUsize| {
            if let Some(mut held) = cell.try_take() {
                held.with_mut(|value| *value += 1);
                turns.fetch_add(1, SeqCst);
            }
        };
        let others: Vec<_> = (0..2)
            .map(|_| {
                let (cell, turns) = (Arc::clone(&cell), Arc::clone(&turns));
                thread::spawn(move || take_once(&cell, &turns))
            })
            .collect();
        take_once(&cell, &turns);
        take_once(&cell, &turns);
        for other in others {
            other.join().expect("holder");
        }
        let mut held = cell.try_take().expect("free once every holder is done");
        assert_eq!(held.with_mut(|value| *value), turns.load(SeqCst));
    });
}
