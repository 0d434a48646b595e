//! What `weir bench pool` (in `crates/bench`) needs beyond the pool's public API, behind the
//! `bench-internals` feature: a pool whose state changes run through a plain mutex (the
//! benchmark's baseline arm) or through a combiner of the benchmark's configuration (one that
//! never yields is its naive arm), over the pool's state wrapped by the benchmark (which adds
//! busy work to every action). None of it is meant for production; that is why it is a feature
//! and not public API.

use std::sync::{Mutex, PoisonError};

use crate::combiner::{CombinedState, Combiner, CombinerConfig, CombinerStats};
use crate::exec::{Exec, StateExecutor};
use crate::manager::Manager;
use crate::pool::{Pool, PoolBuilder};

/// How a benchmark's pool runs its state changes.
#[derive(Clone, Copy, Debug)]
pub enum Executor {
    /// The combiner, with this configuration (without yield for the naive arm).
    Combiner(CombinerConfig),
    /// The baseline: a plain mutex around the state, taken by every caller for its own action.
    Mutex,
}

/// A state behind a benchmark's wrapper.
pub type WrappedState<A, F> = Box<dyn CombinedState<Action = A, FollowUp = F>>;

impl<A: Send, F> CombinedState for WrappedState<A, F> {
    type Action = A;
    type FollowUp = F;

    fn apply(&mut self, action: A, follow_ups: &mut Vec<F>) {
        (**self).apply(action, follow_ups);
    }
}

/// Wraps the pool's state (a type private to this crate) in a state of the benchmark's own.
pub trait WrapState {
    fn wrap<S: CombinedState + 'static>(&self, state: S) -> WrappedState<S::Action, S::FollowUp>;
}

/// A benchmark arm's executor (see [`Executor`]).
enum BenchExec<A: Send, F> {
    Combiner(Box<Combiner<WrappedState<A, F>>>),
    Mutex(Mutex<WrappedState<A, F>>),
}

impl<A: Send, F> StateExecutor<A, F> for BenchExec<A, F> {
    fn submit(&self, action: A) -> Vec<F> {
        match self {
            Self::Combiner(combiner) => combiner.submit(action),
            Self::Mutex(state) => {
                let mut follow_ups = Vec::new();
                state
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .apply(action, &mut follow_ups);
                follow_ups
            }
        }
    }

    fn resume(&self) -> Vec<F> {
        match self {
            Self::Combiner(combiner) => combiner.resume(),
            Self::Mutex(_) => Vec::new(),
        }
    }

    fn stats(&self) -> CombinerStats {
        match self {
            Self::Combiner(combiner) => combiner.stats(),
            Self::Mutex(_) => CombinerStats::default(),
        }
    }
}

impl<M: Manager> PoolBuilder<M> {
    /// Builds the pool (as [`build`](Self::build) does) for a benchmark arm: its state, wrapped
    /// by `wrap`, runs through `executor`.
    ///
    /// # Panics
    /// As [`build`](Self::build).
    pub fn build_bench(self, executor: Executor, wrap: &impl WrapState) -> Pool<M> {
        self.build_with(|state, resume| {
            let state = wrap.wrap(state);
            Exec::Plugged(Box::new(match executor {
                Executor::Combiner(config) => {
                    BenchExec::Combiner(Box::new(Combiner::new(state, config, move || {
                        resume.post()
                    })))
                }
                Executor::Mutex => BenchExec::Mutex(Mutex::new(state)),
            }))
        })
    }
}
