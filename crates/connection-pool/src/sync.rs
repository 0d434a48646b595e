//! The synchronisation primitives of the lock-free parts ([`crate::queue`], [`crate::flag`] and
//! [`crate::combiner`]): `std`'s in normal builds, loom's when built with `--cfg weir_loom`, so
//! the loom models in `loom_models.rs` explore every interleaving of exactly the code that ships.

#[cfg(not(weir_loom))]
pub(crate) use std::sync::atomic::{AtomicUsize, Ordering};

#[cfg(weir_loom)]
pub(crate) use loom::sync::atomic::{AtomicUsize, Ordering};

/// A cell whose exclusive access a protocol guarantees rather than a lock: `std`'s, behind the
/// closure-based API of loom's, which under `--cfg weir_loom` also checks that no two accesses
/// race (a model where they could fails).
#[cfg(not(weir_loom))]
#[derive(Debug)]
pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

#[cfg(not(weir_loom))]
impl<T> UnsafeCell<T> {
    pub(crate) fn new(value: T) -> Self {
        Self(std::cell::UnsafeCell::new(value))
    }

    /// Calls `f` with a pointer to the value; dereferencing it is the caller's `unsafe`.
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}

#[cfg(weir_loom)]
pub(crate) use loom::cell::UnsafeCell;

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
