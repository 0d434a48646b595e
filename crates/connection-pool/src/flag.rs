//! The combiner's flag and the state it guards, as one value: whoever takes the flag has the
//! state, and nobody else can reach it until the flag is given back.
//!
//! A try-lock with one more bit. `HELD`: an `Acquire` compare-exchange from not held to held
//! takes the flag, an `AcqRel` swap gives it back, so everything a holder did to the state
//! happens before the next holder looks at it. `PENDING`: a submitter that has queued an action
//! sets it ([`FlagCell::announce`], a `Release` read-modify-write) and learns in the same step
//! whether somebody holds the flag; the holder's releasing swap reads it
//! ([`FlagGuard::release`]). Every write to the flag is a read-modify-write, so all of them are
//! totally ordered (the flag's modification order): either the announcement comes first, and the
//! holder's swap sees `PENDING` and synchronises with it (so the queued action is visible to the
//! holder's re-check), or the swap comes first, and the announcement sees the flag free and the
//! submitter takes it itself. No action is stranded, and neither side needs a `SeqCst` fence, as
//! a plain store on one side and a plain load on the other would (a Dekker pair). A take clears
//! `PENDING`: the new holder drains what was announced before it.
//!
//! This replaces a flag *and* a mutex around the state (the mutex was never contended, since only
//! flag holders locked it, but each run paid its lock and unlock) *and* the two fences: an
//! uncontended submission now costs what a mutex's lock and unlock cost, one compare-exchange and
//! one swap. It is one of the crate's two modules with `unsafe` (the other is `queue`); under
//! `--cfg weir_loom` the cell is loom's, which fails a model where two accesses to the state race.
//!
//! The flag, a value `A` kept *beside* it (the combiner's run counters, which every holder
//! writes) and the start of the guarded value are laid out in that order (`repr(C)`), so that a
//! holder finds them in the one cache line its compare-exchange has just brought in, as a
//! mutex's lock word sits next to the data it guards. (Padding the flag on a line of its own
//! cost an extra line transfer between cores per submission; so did counters on another line.)

use crate::sync::{AtomicUsize, Ordering, UnsafeCell};

/// Set while a [`FlagGuard`] exists.
const HELD: usize = 1;
/// Set by [`FlagCell::announce`]: an action was queued since the flag was last taken.
const PENDING: usize = 2;

/// A value behind a flag, with `A` beside the flag for anybody to read (see the module docs).
#[repr(C)]
pub(crate) struct FlagCell<T, A = ()> {
    /// The `HELD` and `PENDING` bits.
    flag: AtomicUsize,
    /// Shared, not guarded: reachable without the flag (so `A` is `Sync`: atomics).
    beside: A,
    value: UnsafeCell<T>,
}

// SAFETY: the value is reached only through a `FlagGuard`, of which at most one exists at a time
// (see `try_take`), and the flag's Release/Acquire pair orders one holder's accesses before the
// next holder's (an announcement in between is a read-modify-write, so it continues the release
// sequence): a mutex's argument, so, as for `Mutex<T>`, `T: Send` suffices. `beside` is not
// guarded: every thread reaches it through `&A`, hence `A: Sync`.
unsafe impl<T: Send, A: Sync> Sync for FlagCell<T, A> {}

impl<T> FlagCell<T> {
    /// A cell with nothing beside the flag (the tests and loom models).
    #[cfg(any(test, weir_loom))]
    pub(crate) fn new(value: T) -> Self {
        Self::with_beside(value, ())
    }
}

impl<T, A> FlagCell<T, A> {
    pub(crate) fn with_beside(value: T, beside: A) -> Self {
        Self {
            flag: AtomicUsize::new(0),
            beside,
            value: UnsafeCell::new(value),
        }
    }

    /// What sits beside the flag: shared with every thread, holder or not.
    pub(crate) fn beside(&self) -> &A {
        &self.beside
    }

    /// Takes the flag if it is free, clearing `PENDING` (the taker drains what was announced). A
    /// read first, so losers only share the cache line while a run is on, then a
    /// compare-exchange, again only if `PENDING` changed in between.
    pub(crate) fn try_take(&self) -> Option<FlagGuard<'_, T, A>> {
        let mut seen = self.flag.load(Ordering::Relaxed);
        loop {
            if seen & HELD != 0 {
                return None;
            }
            match self
                .flag
                .compare_exchange(seen, HELD, Ordering::Acquire, Ordering::Relaxed)
            {
                // A guard only on success: one built on failure too would give back, when
                // dropped, the flag somebody else holds (the loom models caught that once).
                Ok(_) => return Some(FlagGuard { cell: self }),
                Err(now) => seen = now,
            }
        }
    }

    /// Tells the holder, if any, that an action was queued: sets `PENDING` (`Release`, so the
    /// action is visible to whoever reads the bit or takes the flag after this) and returns
    /// whether the flag was held. If it was not, the caller must try to take it itself.
    pub(crate) fn announce(&self) -> bool {
        self.flag.fetch_or(PENDING, Ordering::Release) & HELD != 0
    }
}

/// The flag, held: the only way to the value. [`release`](Self::release) gives it back; so does
/// the drop, if the code using the value panics.
pub(crate) struct FlagGuard<'a, T, A = ()> {
    cell: &'a FlagCell<T, A>,
}

impl<T, A> FlagGuard<'_, T, A> {
    /// Runs `f` on the value. (A closure rather than `DerefMut` because loom's cell only lends its
    /// value for the length of a call, which is how it checks accesses.)
    pub(crate) fn with_mut<R>(&mut self, f: impl FnOnce(&mut T) -> R) -> R {
        // SAFETY: this guard is the only one (the compare-exchange in `try_take` succeeded, and
        // the flag stays held until the guard is released or dropped), and the previous holder's
        // accesses happen before ours (its Release swap, our Acquire compare-exchange). `&mut
        // self` keeps a second call from overlapping this one, and `f` cannot keep the reference:
        // `R` is chosen outside the call, so it cannot borrow from the value.
        self.cell.value.with_mut(|value| f(unsafe { &mut *value }))
    }

    /// Gives the flag back; returns whether an action was announced while it was held (the
    /// announcer counted on the holder, so the queue must be looked at again).
    pub(crate) fn release(self) -> bool {
        let pending = self.cell.flag.swap(0, Ordering::AcqRel) & PENDING != 0;
        // Given back already: the drop must not give it back again (it may be somebody else's).
        std::mem::forget(self);
        pending
    }
}

/// Only on a panic under the flag ([`FlagGuard::release`] otherwise): the flag comes back, and
/// what was announced meanwhile waits for the next submission.
impl<T, A> Drop for FlagGuard<'_, T, A> {
    fn drop(&mut self) {
        self.cell.flag.swap(0, Ordering::AcqRel);
    }
}

#[cfg(all(test, not(weir_loom)))]
mod tests {
    use super::FlagCell;

    #[test]
    fn one_guard_at_a_time_and_the_flag_comes_back_on_release() {
        let cell = FlagCell::new(0u32);
        let mut guard = cell.try_take().expect("free at first");
        assert!(
            cell.try_take().is_none(),
            "a second guard while one is held"
        );
        // Regression (found by the loom models): a failed take built a guard anyway, whose drop
        // gave the holder's flag back.
        assert!(
            cell.try_take().is_none(),
            "a failed take leaves the flag with its holder"
        );
        guard.with_mut(|value| *value += 1);
        assert!(!guard.release(), "nothing was announced");
        let mut again = cell.try_take().expect("free after the release");
        assert_eq!(again.with_mut(|value| *value), 1);
    }

    #[test]
    fn an_announcement_reaches_the_holder_or_finds_the_flag_free() {
        let cell = FlagCell::new(());
        let guard = cell.try_take().expect("free");
        assert!(cell.announce(), "held: the holder will look");
        assert!(guard.release(), "the holder sees the announcement");
        assert!(
            !cell.announce(),
            "free: the announcer must take the flag itself"
        );
        let guard = cell
            .try_take()
            .expect("an announcement does not hold the flag");
        assert!(!guard.release(), "the take cleared the announcement");
    }

    #[test]
    fn a_panic_under_the_flag_gives_it_back() {
        let cell = FlagCell::new(0u32);
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut guard = cell.try_take().expect("free");
            guard.with_mut(|_| panic!("an action panicked"));
        }));
        assert!(result.is_err());
        assert!(cell.try_take().is_some(), "the flag was given back");
    }
}
