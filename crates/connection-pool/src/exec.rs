//! What runs the pool's state changes: the combiner. (With the `bench-internals` feature, also
//! the executors of the benchmark's arms, plugged in through [`StateExecutor`].)

use crate::combiner::{CombinedState, Combiner, CombinerStats};

/// Runs a state's actions and hands back their follow-up work.
pub(crate) enum Exec<S: CombinedState> {
    Combiner(Box<Combiner<S>>),
    /// A benchmark's arm (see `bench_internals.rs`).
    #[cfg(feature = "bench-internals")]
    Plugged(Box<dyn StateExecutor<S::Action, S::FollowUp>>),
}

/// An executor of a state's actions other than the combiner over the state itself.
#[cfg(feature = "bench-internals")]
pub(crate) trait StateExecutor<A, F>: Send + Sync {
    fn submit(&self, action: A) -> Vec<F>;
    fn resume(&self) -> Vec<F>;
    fn stats(&self) -> CombinerStats;
}

impl<S: CombinedState> Exec<S> {
    pub(crate) fn submit(&self, action: S::Action) -> Vec<S::FollowUp> {
        match self {
            Self::Combiner(combiner) => combiner.submit(action),
            #[cfg(feature = "bench-internals")]
            Self::Plugged(exec) => exec.submit(action),
        }
    }

    pub(crate) fn resume(&self) -> Vec<S::FollowUp> {
        match self {
            Self::Combiner(combiner) => combiner.resume(),
            #[cfg(feature = "bench-internals")]
            Self::Plugged(exec) => exec.resume(),
        }
    }

    pub(crate) fn stats(&self) -> CombinerStats {
        match self {
            Self::Combiner(combiner) => combiner.stats(),
            #[cfg(feature = "bench-internals")]
            Self::Plugged(exec) => exec.stats(),
        }
    }
}
