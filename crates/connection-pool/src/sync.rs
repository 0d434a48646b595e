//! The synchronisation primitives of the lock-free parts ([`crate::queue`] and
//! [`crate::combiner`]): `std`'s in normal builds, loom's when built with `--cfg weir_loom`, so
//! the loom models in `loom_models.rs` explore every interleaving of exactly the code that ships.

#[cfg(not(weir_loom))]
pub(crate) use std::sync::{
    Mutex, MutexGuard, PoisonError,
    atomic::{AtomicBool, AtomicUsize, Ordering, fence},
};

#[cfg(weir_loom)]
pub(crate) use loom::sync::{
    Mutex, MutexGuard,
    atomic::{AtomicBool, AtomicUsize, Ordering, fence},
};
#[cfg(weir_loom)]
pub(crate) use std::sync::PoisonError;

/// Locks `mutex`, ignoring poisoning: the combiner's mutexes are only ever taken by the one thread
/// that holds the combiner flag (or the one that owns a queue slot), so a panic in an action
/// leaves nothing half-locked, only possibly half-applied state, which the next action sees as is.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Gives up the processor (or, under loom, lets the model schedule another thread).
pub(crate) fn yield_now() {
    #[cfg(not(weir_loom))]
    std::thread::yield_now();
    #[cfg(weir_loom)]
    loom::thread::yield_now();
}

/// A short pause inside a spin loop (under loom, a scheduling point).
pub(crate) fn spin_loop() {
    #[cfg(not(weir_loom))]
    std::hint::spin_loop();
    #[cfg(weir_loom)]
    loom::thread::yield_now();
}

/// Exponential backoff for the rare spin in [`crate::combiner::Combiner::submit`] (a full queue):
/// spin briefly, then give the processor away.
pub(crate) struct Backoff {
    step: u32,
}

impl Backoff {
    const SPIN_LIMIT: u32 = 6;

    pub(crate) fn new() -> Self {
        Self { step: 0 }
    }

    pub(crate) fn snooze(&mut self) {
        if self.step <= Self::SPIN_LIMIT {
            for _ in 0..(1u32 << self.step) {
                spin_loop();
            }
            self.step += 1;
        } else {
            yield_now();
        }
    }
}
