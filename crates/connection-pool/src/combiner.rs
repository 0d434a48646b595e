//! The combiner executor: whichever thread wins the flag runs everyone's queued actions against the
//! shared state, and yields after a number of actions or a time budget.
//!
//! # Protocol
//!
//! [`Combiner::submit`] puts the action on the `ActionQueue` (one fetch-and-add), then announces
//! it on the flag: one read-modify-write that sets its `PENDING` bit and tells whether somebody
//! holds the flag; if nobody does, the submitter takes it (a compare-exchange). (With the flag
//! free and no ticket outstanding, a submitter takes the flag first and applies its action
//! without the queue round trip; one that finds the flag held and nobody queued watches the flag
//! for a few spins first, see [`CombinerConfig::flag_spins`].) The flag and the state are one
//! value (`flag::FlagCell`): the winner has the state, pops and applies actions until the queue
//! reads empty or the run reaches its limit, releases the flag (a swap that reads `PENDING`),
//! and
//!
//! - when the queue read empty and an action was announced while it held the flag, re-checks the
//!   queue: the flag's writes are all read-modify-writes, so an announcement either came before
//!   the release (which then sees it, and the holder goes round again, or yields if its limit is
//!   reached) or after it (and the announcer found the flag free and takes it itself); so no
//!   action is stranded, with no fence on either side (`flag.rs` has the argument);
//! - when the run hit its limit, calls the resume hook (the pool posts a tokio task that calls
//!   [`Combiner::resume`]) and returns to its caller, while concurrent submitters keep draining. If
//!   the hook cannot post (the pool is shutting down), the caller carries on, as a new run.
//!
//! A *run* is everything one call applies, across the times it takes the flag again after a
//! re-check: the action limit and the time budget bound the run, not each pass under the flag.
//! (Bounding each pass would let a caller whose pass drained the queue re-check, find a newcomer,
//! and start a fresh pass with a fresh count, for as long as actions keep arriving: the trap of
//! lesson 4. The loom model `no_caller_combines_past_its_action_limit` pins this.)
//!
//! Follow-up work an action produces (waking a waiter, opening a connection) is collected and
//! handed back to the submitting caller, which runs it after the flag is released, outside the
//! combining section.
//!
//! Actions should not panic (the pool's are plain bookkeeping). If one does, the panic unwinds into
//! the combining caller and the flag is released on the way out: the combiner keeps working on
//! whatever state the action left, the actions queued behind it run at the next submission, and
//! the follow-ups collected so far are dropped.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;

use crate::flag::{FlagCell, FlagGuard};
use crate::histogram::Histogram;
use crate::queue::{ActionQueue, Consumer};
use crate::sync::{Backoff, spin_loop};

/// State driven through a [`Combiner`]: actions are applied one at a time, in queue order, by
/// whichever thread holds the combiner flag.
pub trait CombinedState: Send {
    /// A change to the state, sent from any thread.
    type Action: Send;
    /// Work an action leaves to do once the combining section is over (waking a waiter, opening a
    /// connection): handed back to the submitting caller, which runs it.
    type FollowUp;

    /// Applies `action`, pushing any follow-up work onto `follow_ups`. Keep it short and
    /// non-blocking: every queued submitter waits for it.
    fn apply(&mut self, action: Self::Action, follow_ups: &mut Vec<Self::FollowUp>);
}

/// How long one combining run may last before it yields, and how many actions may wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CombinerConfig {
    max_actions_per_run: usize,
    time_budget: Option<Duration>,
    queue_capacity: usize,
    flag_spins: u32,
}

impl Default for CombinerConfig {
    /// Yield after 64 actions or 50 µs, whichever comes first; a queue of 1,024 actions; a
    /// submitter that finds the flag held and nobody queued watches it for 32 spins.
    fn default() -> Self {
        Self {
            max_actions_per_run: 64,
            time_budget: Some(Duration::from_micros(50)),
            queue_capacity: 1024,
            flag_spins: 32,
        }
    }
}

impl CombinerConfig {
    /// Yield after `actions` actions in one run: no call to [`Combiner::submit`] or
    /// [`Combiner::resume`] applies more than this many actions before it returns (except on a
    /// full queue, where a submitter helps until its own slot is free, a run at a time; and when
    /// the resume hook cannot post a resume).
    ///
    /// # Panics
    /// If `actions` is zero.
    pub fn max_actions_per_run(mut self, actions: usize) -> Self {
        assert!(
            actions > 0,
            "a combining run must be allowed at least one action"
        );
        self.max_actions_per_run = actions;
        self
    }

    /// Yield once a run has lasted `budget`. The clock starts at the run's second action (a run of
    /// one action is not timed) and is read every [`Combiner::CLOCK_EVERY`] actions and at each
    /// re-check, so a run overshoots by at most three actions, or by however long the OS kept the
    /// thread off the processor.
    ///
    /// # Panics
    /// If `budget` is zero.
    pub fn time_budget(mut self, budget: Duration) -> Self {
        assert!(
            !budget.is_zero(),
            "a combining run needs a non-zero time budget"
        );
        self.time_budget = Some(budget);
        self
    }

    /// Never yield: a run lasts as long as actions keep arriving, and nothing waits for a posted
    /// resume (once every submitter has returned, every action has been applied; the resume hook
    /// is never called). The price is the trap of lesson 4: one caller can be kept combining
    /// indefinitely, so the pool does not use it. The tests use it to check that no action is
    /// stranded without the resume path's help, and `weir bench pool` as its naive arm.
    pub fn without_yield(mut self) -> Self {
        self.max_actions_per_run = usize::MAX;
        self.time_budget = None;
        self
    }

    /// Room for `capacity` queued actions. A submitter that finds the ring full helps drain it
    /// rather than wait. Each pool operation (an acquire, a return) queues one action and runs it
    /// before returning, so the queue holds at most one action per thread currently inside
    /// `submit` plus those a yield left behind; the default of 1,024 is ample.
    ///
    /// # Panics
    /// If `capacity` is not a power of two of at least 2.
    pub fn queue_capacity(mut self, capacity: usize) -> Self {
        assert!(
            capacity >= 2 && capacity.is_power_of_two(),
            "the combiner queue capacity must be a power of two of at least 2, got {capacity}"
        );
        self.queue_capacity = capacity;
        self
    }

    /// How many times a submitter that finds the flag held, with no action queued, looks again
    /// before it queues its action (a `spin_loop` hint between looks). If the flag comes free
    /// meanwhile, the submitter applies its own action, as an uncontended one does: a holder's
    /// pass lasts a few hundred nanoseconds, and handing an action to it costs a queue slot, the
    /// flag's re-check and a cross-thread answer, more than the wait. Once anybody has queued, a
    /// submitter queues behind them at once, so nobody is overtaken. Zero queues at once.
    pub fn flag_spins(mut self, spins: u32) -> Self {
        self.flag_spins = spins;
        self
    }

    /// The configured action limit per run (`usize::MAX` without yield).
    pub fn actions_per_run(&self) -> usize {
        self.max_actions_per_run
    }

    /// The configured time budget per run, if any.
    pub fn budget(&self) -> Option<Duration> {
        self.time_budget
    }
}

/// What a combiner has done so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CombinerStats {
    /// Combining runs: everything one call applied, across its re-takes of the flag (a run ends
    /// when the queue reads empty or the run yields). Calls that applied nothing are not counted.
    pub runs: u64,
    /// Actions applied.
    pub actions: u64,
    /// Runs that stopped at their action limit or time budget and posted a resume.
    pub yields: u64,
    /// The most actions a single run applied.
    pub longest_run_actions: u64,
    /// The longest single run, wall-clock from its second action to the end of its last pass
    /// under the flag (a run of one action is not timed). Wall-clock includes any time the OS took the thread off the processor, so on a
    /// busy machine this maximum is usually a preemption; see `runs_over_budget` and `run_p999`.
    pub longest_run: Duration,
    /// The 99th percentile duration of timed runs.
    pub run_p99: Duration,
    /// The 99.9th percentile duration of timed runs.
    pub run_p999: Duration,
    /// Timed runs that lasted longer than the time budget (0 without one).
    pub runs_over_budget: u64,
}

/// What every pass under the flag counts: written by the holder alone at the end of its pass, so
/// plain loads and stores suffice (the flag orders holders) and an uncontended submission pays no
/// atomic read-modify-write for them. They sit beside the flag, in its cache line
/// (`FlagCell::beside`), which the holder's compare-exchange has just brought in: on a line of
/// their own they cost a transfer between cores on most submissions.
struct PassCounters {
    runs: AtomicU64,
    actions: AtomicU64,
    longest_actions: AtomicU64,
}

impl PassCounters {
    fn new() -> Self {
        Self {
            runs: AtomicU64::new(0),
            actions: AtomicU64::new(0),
            longest_actions: AtomicU64::new(0),
        }
    }

    fn bump(counter: &AtomicU64, by: u64) {
        counter.store(counter.load(Relaxed) + by, Relaxed);
    }

    /// Counts what `run` applied since its last pass, and how long it has lasted (up to now: the
    /// end of the pass, before the flag is released and any resume posted). Only with the flag
    /// held.
    fn record_pass(&self, run: &mut Run) {
        if let Some(started) = run.started {
            run.lasted = Some(started.elapsed());
        }
        if run.applied == run.recorded {
            return;
        }
        if run.recorded == 0 {
            Self::bump(&self.runs, 1);
        }
        Self::bump(&self.actions, (run.applied - run.recorded) as u64);
        run.recorded = run.applied;
        let actions = run.applied as u64;
        if actions > self.longest_actions.load(Relaxed) {
            self.longest_actions.store(actions, Relaxed);
        }
    }
}

/// What is known only once a run is over, flag released: its duration, and whether it yielded.
/// Rare (timed runs are those of two actions or more), so read-modify-writes.
struct RunStats {
    yields: AtomicU64,
    over_budget: AtomicU64,
    /// Durations of timed runs (two actions or more).
    run_time: Histogram,
}

impl RunStats {
    fn new() -> Self {
        Self {
            yields: AtomicU64::new(0),
            over_budget: AtomicU64::new(0),
            run_time: Histogram::new(),
        }
    }

    /// Records how long `run` lasted, if it was timed. Once the run is over, flag released.
    fn record_time(&self, run: &Run, budget: Option<Duration>) {
        if let Some(elapsed) = run.lasted {
            self.run_time.record(elapsed);
            if budget.is_some_and(|budget| elapsed > budget) {
                self.over_budget.fetch_add(1, Relaxed);
            }
        }
    }
}

/// One run in progress: what the limits are checked against.
struct Run {
    applied: usize,
    /// How many of `applied` are in [`PassCounters`] already.
    recorded: usize,
    /// Set at the run's second action: an uncontended submission (a run of one action) costs no
    /// clock read, which is 40 ns on the project's machine.
    started: Option<Instant>,
    /// From `started` to the end of the run's latest pass under the flag.
    lasted: Option<Duration>,
}

impl Run {
    fn new() -> Self {
        Self {
            applied: 0,
            recorded: 0,
            started: None,
            lasted: None,
        }
    }
    /// Counts an action about to be applied.
    fn begin_action(&mut self) {
        if self.applied == 1 {
            self.started = Some(Instant::now());
        }
        self.applied += 1;
    }

    /// Whether the run has reached its action limit or (when `read_clock`) its time budget.
    fn spent(&self, config: &CombinerConfig, read_clock: bool) -> bool {
        if self.applied >= config.max_actions_per_run {
            return true;
        }
        match (config.time_budget, self.started) {
            (Some(budget), Some(started)) if read_clock => started.elapsed() >= budget,
            _ => false,
        }
    }
}

/// What the combiner flag guards: the state, and the right to pop the action queue.
struct Guarded<S> {
    state: S,
    consumer: Consumer,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum RunEnd {
    /// The queue read empty.
    Drained,
    /// The run reached its limit with actions still queued.
    Limit,
}

/// The hook a yielding run calls to have [`Combiner::resume`] called later; returns whether it
/// could arrange that.
type ResumeHook = Box<dyn Fn() -> bool + Send + Sync>;

/// A combiner executor over state `S` (see the module docs).
pub struct Combiner<S: CombinedState> {
    /// The combiner flag and what it guards: whoever holds it is combining. Padded, so that
    /// nothing else shares the lines holders write.
    guarded: CachePadded<FlagCell<Guarded<S>, PassCounters>>,
    queue: ActionQueue<S::Action>,
    config: CombinerConfig,
    resume: ResumeHook,
    stats: RunStats,
}

impl<S: CombinedState> fmt::Debug for Combiner<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Combiner")
            .field("config", &self.config)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl<S: CombinedState> Combiner<S> {
    /// How many actions a run applies between two looks at the clock.
    pub const CLOCK_EVERY: usize = 4;

    /// A combiner over `state`. A run that reaches its limit calls `resume` after releasing the
    /// flag; `resume` must arrange for [`Combiner::resume`] to be called later (post a task) and
    /// return `true`, or return `false` if it cannot, and the run then carries on instead.
    pub fn new(
        state: S,
        config: CombinerConfig,
        resume: impl Fn() -> bool + Send + Sync + 'static,
    ) -> Self {
        let (queue, consumer) = ActionQueue::new(config.queue_capacity);
        Self {
            guarded: CachePadded::new(FlagCell::with_beside(
                Guarded { state, consumer },
                PassCounters::new(),
            )),
            queue,
            config,
            resume: Box::new(resume),
            stats: RunStats::new(),
        }
    }

    /// Queues `action` and, if no other thread is combining, runs the queue. Returns the follow-up
    /// work of the actions this call applied (any submitter's, not only its own), for the caller to
    /// run now that the combining section is over. Returning does not mean `action` has been
    /// applied: another thread may be applying it, or a posted resume will.
    pub fn submit(&self, action: S::Action) -> Vec<S::FollowUp> {
        let mut follow_ups = Vec::new();
        // Uncontended: nobody combining and no ticket outstanding, so apply the action directly
        // instead of sending it round the queue. "No ticket", not "head not ready": a slot claimed
        // but not yet written reads as not ready while actions (maybe this caller's own) wait
        // behind it, and those must not be overtaken. An action whose ticket we cannot see yet
        // is concurrent with ours, with no order to keep.
        // Briefly contended (a holder, nobody queued): the same, once the flag comes free within
        // `flag_spins` looks (see `CombinerConfig::flag_spins`).
        let mut spins = 0;
        while self.queue.is_empty() {
            if let Some(held) = self.guarded.try_take() {
                self.combine_holding(held, Some(action), &mut follow_ups);
                return follow_ups;
            }
            if spins == self.config.flag_spins {
                break;
            }
            spins += 1;
            spin_loop();
        }
        let ticket = self.queue.claim();
        let mut action = action;
        let mut backoff = Backoff::new();
        // A full ring: help drain it (our slot frees once the action one lap ahead is applied).
        while let Err(back) = self.queue.publish(ticket, action) {
            action = back;
            self.combine(&mut follow_ups);
            backoff.snooze();
        }
        self.combine(&mut follow_ups);
        follow_ups
    }

    /// Runs the queue if no other thread is combining: what a posted resume calls. Returns the
    /// follow-up work, as [`Combiner::submit`] does.
    pub fn resume(&self) -> Vec<S::FollowUp> {
        let mut follow_ups = Vec::new();
        self.combine(&mut follow_ups);
        follow_ups
    }

    /// Counters and the longest run so far.
    pub fn stats(&self) -> CombinerStats {
        let run_time = self.stats.run_time.summary();
        let counters = self.guarded.beside();
        CombinerStats {
            runs: counters.runs.load(Relaxed),
            actions: counters.actions.load(Relaxed),
            yields: self.stats.yields.load(Relaxed),
            longest_run_actions: counters.longest_actions.load(Relaxed),
            longest_run: run_time.max,
            run_p99: run_time.p99,
            run_p999: run_time.p999,
            runs_over_budget: self.stats.over_budget.load(Relaxed),
        }
    }

    /// The configuration this combiner runs with.
    pub fn config(&self) -> CombinerConfig {
        self.config
    }

    /// After queueing: tells the holder, if any, that work is waiting (it looks again before it
    /// leaves), else takes the flag and runs the queue. If somebody else takes the flag first,
    /// they took it after the announcement and drain what it announced.
    fn combine(&self, follow_ups: &mut Vec<S::FollowUp>) {
        if self.guarded.announce() {
            return;
        }
        if let Some(held) = self.guarded.try_take() {
            self.combine_holding(held, None, follow_ups);
        }
    }

    /// With the flag taken by the caller: applies `first` and queued actions, releases the flag,
    /// then re-checks (taking the flag again while work is left, nobody else has taken it and the
    /// run is within its limits) or yields.
    fn combine_holding<'a>(
        &'a self,
        mut held: FlagGuard<'a, Guarded<S>, PassCounters>,
        mut first: Option<S::Action>,
        follow_ups: &mut Vec<S::FollowUp>,
    ) {
        let mut run = Run::new();
        loop {
            let end = held
                .with_mut(|guarded| self.apply_queued(guarded, first.take(), &mut run, follow_ups));
            self.guarded.beside().record_pass(&mut run);
            let announced = held.release();
            let yielding = match end {
                RunEnd::Limit => true,
                RunEnd::Drained => {
                    // Nothing announced while we held the flag: whatever was queued before our
                    // take we have drained (or its producer has yet to announce it, and will find
                    // the flag free). Else look: the announced action may be behind our last pop.
                    if !announced || !self.queue.has_ready() {
                        break;
                    }
                    // Work arrived after our last look. Ours to run, unless our run is spent:
                    // going round with a fresh count here would let a steady trickle of actions
                    // keep this caller combining indefinitely.
                    run.spent(&self.config, true)
                }
            };
            if yielding {
                if (self.resume)() {
                    self.stats.yields.fetch_add(1, Relaxed);
                    break;
                }
                // No resume could be posted (shutting down): keep draining, as a new run.
                self.stats.record_time(&run, self.config.time_budget);
                run = Run::new();
            }
            // Whoever holds the flag now re-checks when done, so the work left is theirs.
            match self.guarded.try_take() {
                Some(again) => held = again,
                None => break,
            }
        }
        self.stats.record_time(&run, self.config.time_budget);
    }

    /// One pass under the flag: `first` (if any), then queued actions until the queue reads
    /// empty or `run` reaches its limit. The time budget is checked every [`Self::CLOCK_EVERY`]
    /// actions.
    fn apply_queued(
        &self,
        guarded: &mut Guarded<S>,
        first: Option<S::Action>,
        run: &mut Run,
        follow_ups: &mut Vec<S::FollowUp>,
    ) -> RunEnd {
        let Guarded { state, consumer } = guarded;
        if let Some(action) = first {
            run.begin_action();
            state.apply(action, follow_ups);
        }
        loop {
            if run.spent(&self.config, run.applied.is_multiple_of(Self::CLOCK_EVERY)) {
                return self.limit_or_drained();
            }
            let Some(action) = self.queue.pop(consumer) else {
                return RunEnd::Drained;
            };
            run.begin_action();
            state.apply(action, follow_ups);
        }
    }

    fn limit_or_drained(&self) -> RunEnd {
        if self.queue.has_ready() {
            RunEnd::Limit
        } else {
            RunEnd::Drained
        }
    }
}
