//! The combiner with real threads: nothing lost, nothing run twice, per-submitter order kept,
//! runs bounded by count and by time, yields counted and resumed, follow-ups outside the
//! combining section.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Barrier, mpsc};
use std::thread;
use std::time::Duration;

use weir_connection_pool::{CombinedState, Combiner, CombinerConfig};

/// Records, per submitter, the sequence numbers applied, and checks they come in order.
struct Ledger {
    next: Vec<u64>,
    applied: u64,
}

impl CombinedState for Ledger {
    /// (submitter, sequence number)
    type Action = (usize, u64);
    type FollowUp = (usize, u64);

    fn apply(&mut self, (who, seq): (usize, u64), follow_ups: &mut Vec<(usize, u64)>) {
        assert_eq!(
            self.next[who], seq,
            "submitter {who}'s actions applied out of order"
        );
        self.next[who] += 1;
        self.applied += 1;
        follow_ups.push((who, seq));
    }
}

/// What a contention run saw.
struct Contention {
    combiner: Arc<Combiner<Ledger>>,
    /// The most actions a single `submit` or `resume` call applied.
    most_per_call: usize,
    /// Actions applied by the time every submitter had returned (before any pending resume ran).
    applied_when_submitters_returned: u64,
}

/// `threads` threads submit `per_thread` actions each; a resumer thread runs posted resumes.
/// Checks that every action was applied once, in order, and that every follow-up came back to
/// exactly one caller.
fn contend(threads: usize, per_thread: u64, config: CombinerConfig) -> Contention {
    let resume_pending = Arc::new(AtomicBool::new(false));
    let combiner = Arc::new(Combiner::new(
        Ledger {
            next: vec![0; threads],
            applied: 0,
        },
        config,
        {
            let pending = Arc::clone(&resume_pending);
            move || {
                pending.store(true, SeqCst);
                true
            }
        },
    ));
    let follow_ups = Arc::new(AtomicUsize::new(0));
    let most_per_call = Arc::new(AtomicUsize::new(0));
    let count = {
        let (follow_ups, most_per_call) = (Arc::clone(&follow_ups), Arc::clone(&most_per_call));
        move |applied: Vec<(usize, u64)>| {
            follow_ups.fetch_add(applied.len(), SeqCst);
            most_per_call.fetch_max(applied.len(), SeqCst);
        }
    };
    let submitters_done = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicBool::new(false));
    let resumer = {
        let (combiner, pending, submitters_done, done, count) = (
            Arc::clone(&combiner),
            Arc::clone(&resume_pending),
            Arc::clone(&submitters_done),
            Arc::clone(&done),
            count.clone(),
        );
        thread::spawn(move || {
            // Resumes wait until the submitters are done, so the test can see what they left.
            while !done.load(SeqCst) {
                if submitters_done.load(SeqCst) && pending.swap(false, SeqCst) {
                    count(combiner.resume());
                } else {
                    thread::yield_now();
                }
            }
        })
    };
    let start = Arc::new(Barrier::new(threads));
    let submitters: Vec<_> = (0..threads)
        .map(|who| {
            let (combiner, count, start) =
                (Arc::clone(&combiner), count.clone(), Arc::clone(&start));
            thread::spawn(move || {
                start.wait();
                for seq in 0..per_thread {
                    count(combiner.submit((who, seq)));
                }
            })
        })
        .collect();
    for submitter in submitters {
        submitter.join().unwrap();
    }
    let applied_when_submitters_returned = combiner.stats().actions;
    let total = threads as u64 * per_thread;
    if applied_when_submitters_returned < total {
        // Only a yield may leave work behind, and it posted a resume.
        assert!(
            combiner.stats().yields > 0,
            "actions stranded with no resume posted"
        );
        assert!(
            resume_pending.load(SeqCst),
            "actions stranded with no resume pending"
        );
    }
    submitters_done.store(true, SeqCst);
    // Whatever the last yields left is the resumer's: each resume applies a run and posts
    // another while work is left. Bounded only so that a bug fails rather than hangs.
    for _ in 0..100_000 {
        if follow_ups.load(SeqCst) as u64 == total {
            break;
        }
        thread::sleep(Duration::from_micros(100));
    }
    done.store(true, SeqCst);
    resumer.join().unwrap();
    assert_eq!(follow_ups.load(SeqCst) as u64, total, "actions lost");
    assert_eq!(combiner.stats().actions, total);
    Contention {
        combiner,
        most_per_call: most_per_call.load(SeqCst),
        applied_when_submitters_returned,
    }
}

#[test]
fn every_action_runs_exactly_once_in_submission_order_under_thread_contention() {
    let seen = contend(4, 20_000, CombinerConfig::default().without_yield());
    let stats = seen.combiner.stats();
    assert_eq!(stats.yields, 0);
    // Without yields nothing waits for a resume: once every submitter has returned, every action
    // has been applied (a stranded action after a flag release would show here).
    assert_eq!(seen.applied_when_submitters_returned, 80_000);
    // Not luck-proof as an assertion, so only a note: runs combined other threads' actions.
    eprintln!(
        "{} actions in {} runs, longest {}",
        stats.actions, stats.runs, stats.longest_run_actions
    );
}

#[test]
fn no_call_applies_more_than_the_action_limit_under_thread_contention() {
    // A ring that cannot fill (a submitter finding it full helps drain it, a run at a time), so
    // each call is one run: no caller is kept combining past the limit, however many arrive.
    let seen = contend(
        4,
        20_000,
        CombinerConfig::default()
            .max_actions_per_run(3)
            .queue_capacity(1 << 17),
    );
    assert!(
        seen.most_per_call <= 3,
        "a call applied {}",
        seen.most_per_call
    );
    assert!(seen.combiner.stats().longest_run_actions <= 3);
}

#[test]
fn submitters_finding_the_queue_full_help_drain_it() {
    let seen = contend(
        4,
        20_000,
        CombinerConfig::default()
            .queue_capacity(2)
            .max_actions_per_run(2),
    );
    assert!(seen.combiner.stats().longest_run_actions <= 2);
}

/// An action that blocks in `apply` until released, so a test can hold a run open. Each action's
/// follow-up is its own number, so callers learn the order actions were applied in.
/// Every other action takes at least `each` (sleeping).
struct Gate {
    entered: Arc<Barrier>,
    release: mpsc::Receiver<()>,
    each: Duration,
}

impl CombinedState for Gate {
    type Action = u32;
    type FollowUp = u32;

    fn apply(&mut self, action: u32, follow_ups: &mut Vec<u32>) {
        if action == 0 {
            self.entered.wait();
            self.release.recv().unwrap();
        } else if !self.each.is_zero() {
            thread::sleep(self.each);
        }
        follow_ups.push(action);
    }
}

/// A combiner over a [`Gate`] whose resume hook only counts (the test plays the resume task).
fn gated(config: CombinerConfig, each: Duration) -> (Arc<Combiner<Gate>>, GateControl) {
    let entered = Arc::new(Barrier::new(2));
    let (release, gate) = mpsc::channel();
    let yields = Arc::new(AtomicUsize::new(0));
    let combiner = Arc::new(Combiner::new(
        Gate {
            entered: Arc::clone(&entered),
            release: gate,
            each,
        },
        config,
        {
            let yields = Arc::clone(&yields);
            move || {
                yields.fetch_add(1, SeqCst);
                true
            }
        },
    ));
    (
        combiner,
        GateControl {
            entered,
            release,
            yields,
        },
    )
}

struct GateControl {
    entered: Arc<Barrier>,
    release: mpsc::Sender<()>,
    yields: Arc<AtomicUsize>,
}

/// Thread A starts a run with action 0 and blocks inside it; actions `1..=queued` are queued
/// meanwhile (their submitters return at once, applying nothing); then A is released. Returns
/// what A's call applied.
fn run_behind_a_blocked_action(
    combiner: &Arc<Combiner<Gate>>,
    control: &GateControl,
    queued: u32,
) -> Vec<u32> {
    let a = thread::spawn({
        let combiner = Arc::clone(combiner);
        move || combiner.submit(0)
    });
    control.entered.wait();
    for action in 1..=queued {
        assert!(combiner.submit(action).is_empty());
    }
    control.release.send(()).unwrap();
    a.join().unwrap()
}

#[test]
fn a_run_yields_at_its_action_limit_and_each_resume_runs_one_more_run() {
    let (combiner, control) = gated(
        CombinerConfig::default().max_actions_per_run(3),
        Duration::ZERO,
    );
    let first = run_behind_a_blocked_action(&combiner, &control, 10);
    assert_eq!(first, vec![0, 1, 2]);
    assert_eq!(control.yields.load(SeqCst), 1);
    // Each posted resume runs one run of at most three actions and, while work is left, posts
    // the next.
    assert_eq!(combiner.resume(), vec![3, 4, 5]);
    assert_eq!(control.yields.load(SeqCst), 2);
    assert_eq!(combiner.resume(), vec![6, 7, 8]);
    assert_eq!(control.yields.load(SeqCst), 3);
    assert_eq!(combiner.resume(), vec![9, 10]);
    // The queue ran dry: no further yield.
    assert_eq!(control.yields.load(SeqCst), 3);
    assert!(combiner.resume().is_empty());
    let stats = combiner.stats();
    assert_eq!((stats.runs, stats.yields, stats.actions), (4, 3, 11));
    assert_eq!(stats.longest_run_actions, 3);
}

#[test]
fn a_run_yields_once_it_has_used_its_time_budget() {
    // Each queued action sleeps 2 ms against a 1 ms budget and a generous action limit: the run
    // stops at its first look at the clock. Sleeping guarantees the budget is used up, so this
    // holds however slow the machine.
    let (combiner, control) = gated(
        CombinerConfig::default()
            .max_actions_per_run(1_000)
            .time_budget(Duration::from_millis(1)),
        Duration::from_millis(2),
    );
    let every = Combiner::<Gate>::CLOCK_EVERY;
    let first = run_behind_a_blocked_action(&combiner, &control, 10);
    // The clock starts at the second action and is read every CLOCK_EVERY actions.
    assert_eq!(first.len(), every, "{first:?}");
    assert_eq!(control.yields.load(SeqCst), 1);
    let mut applied = first;
    let mut resumes = 0;
    while applied.len() < 11 {
        let run = combiner.resume();
        assert!(!run.is_empty() && run.len() <= every, "{run:?}");
        applied.extend(run);
        resumes += 1;
    }
    assert_eq!(applied, (0..=10).collect::<Vec<_>>());
    // Every run but the last yielded.
    assert_eq!(control.yields.load(SeqCst), resumes);
    let stats = combiner.stats();
    assert_eq!(stats.yields as usize, resumes);
    assert!(stats.runs_over_budget >= 1);
}

#[test]
fn an_action_submitted_while_the_combiner_yields_still_runs() {
    let (combiner, control) = gated(
        CombinerConfig::default().max_actions_per_run(1),
        Duration::ZERO,
    );
    // A's run stopped at its one-action limit and posted a resume.
    let mut applied = run_behind_a_blocked_action(&combiner, &control, 2);
    assert_eq!(applied, vec![0]);
    assert_eq!(control.yields.load(SeqCst), 1);
    // Before the resume runs, action 3 arrives: its submitter finds the flag free and combines
    // (the oldest queued action, then yields again).
    applied.extend(combiner.submit(3));
    assert_eq!(applied, vec![0, 1]);
    assert_eq!(control.yields.load(SeqCst), 2);
    // The posted resumes run what is left, in order.
    for _ in 0..10 {
        applied.extend(combiner.resume());
    }
    assert_eq!(applied, vec![0, 1, 2, 3]);
    assert_eq!(combiner.stats().longest_run_actions, 1);
}

/// Follow-ups that try to submit again while being run.
struct Echo {
    applied: Vec<u32>,
}

impl CombinedState for Echo {
    type Action = u32;
    type FollowUp = u32;

    fn apply(&mut self, action: u32, follow_ups: &mut Vec<u32>) {
        self.applied.push(action);
        follow_ups.push(action);
    }
}

#[test]
fn follow_ups_run_after_the_combining_section_is_over() {
    let combiner = Combiner::new(
        Echo {
            applied: Vec::new(),
        },
        CombinerConfig::default(),
        || true,
    );
    let follow_ups = combiner.submit(1);
    assert_eq!(follow_ups, vec![1]);
    // Running the follow-up, the caller no longer holds the flag: a submission from it is applied
    // (and its follow-up returned) at once.
    for _ in follow_ups {
        assert_eq!(combiner.submit(2), vec![2]);
    }
    assert_eq!(combiner.stats().actions, 2);
}

struct Fragile;

impl CombinedState for Fragile {
    type Action = bool;
    type FollowUp = ();

    fn apply(&mut self, panic: bool, _: &mut Vec<()>) {
        assert!(!panic, "this action panics");
    }
}

#[test]
fn a_panicking_action_releases_the_flag() {
    let combiner = Combiner::new(Fragile, CombinerConfig::default(), || true);
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| combiner.submit(true)));
    assert!(result.is_err());
    // The next submission finds the flag free and runs.
    let _ = combiner.submit(false);
    assert_eq!(combiner.stats().actions, 1);
}
