//! Pooled connections to external systems for weir's sinks, with every change to the pool's state
//! run through a fair combiner executor (lesson 4 of `DESIGN.md`).
//!
//! A [`Combiner`] lets whichever thread wins its flag apply everyone's queued actions to shared
//! state, so a contended state stays in one core's cache and callers never block on a lock. Unlike
//! Vert.x's first combiner, a run *yields* after a number of actions or a time budget and posts a
//! resume, so no caller is kept combining indefinitely; actions wait on a fetch-and-add ring, not a
//! CAS loop; and the follow-up work of an action (waking a waiter, opening a connection) runs
//! after the combining section.
//!
//! The [`Pool`] on top is generic over a [`Manager`] (connect, check, recycle): a maximum size, an
//! idle minimum, acquires with a timeout served in FIFO order, recycle and check on return,
//! replacement of broken connections, a maximum lifetime and idle eviction (a maintenance task the
//! pool owns), a clean [`Pool::close`], and [`PoolMetrics`].
//!
//! # Layout
//! - [`combiner`]: the combiner executor ([`Combiner`], [`CombinedState`], [`CombinerConfig`]).
//! - `queue`: its fetch-and-add action ring (why this queue, and its protocol).
//! - `flag`: the combiner flag and the state it guards, as one try-lock.
//! - `sync`: `std` or loom primitives for those three, chosen by `--cfg weir_loom`.
//! - [`manager`]: the [`Manager`] trait a kind of connection implements.
//! - `state`: the pool's state machine (the actions and their follow-ups).
//! - [`pool`]: [`Pool`], [`PoolBuilder`], [`PooledConnection`] and the pool's tasks.
//! - `exec`: what runs the pool's state changes (the combiner).
//! - [`metrics`] and `histogram`: [`PoolMetrics`] and the acquire-latency histogram.
//! - [`error`]: [`PoolError`], what can go wrong.
//! - `bench_internals` (with the `bench-internals` feature): what `weir bench pool` (the lesson-4
//!   benchmark in `crates/bench`: mutex vs combiner vs combiner with yield) needs beyond the
//!   public API: a pool over a wrapped state, run through a mutex or a combiner of its choice.
//!
//! `queue` and `flag` are the crate's only modules with `unsafe` (a cell handed between threads
//! by a sequence number, and one guarded by the flag; every block says why it is sound), and the
//! loom models check both: loom's cells fail a model in which two accesses race.
//!
//! # Example
//! ```
//! use std::sync::atomic::{AtomicU64, Ordering};
//! use weir_connection_pool::{Manager, Pool, PoolError};
//!
//! /// Connections that are numbers.
//! struct Numbers(AtomicU64);
//!
//! impl Manager for Numbers {
//!     type Connection = u64;
//!     type Error = std::io::Error;
//!
//!     async fn connect(&self) -> Result<u64, std::io::Error> {
//!         Ok(self.0.fetch_add(1, Ordering::Relaxed))
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let pool = Pool::builder(Numbers(AtomicU64::new(0))).max_size(2).build();
//! let first = pool.acquire().await.unwrap();
//! let mut second = pool.acquire().await.unwrap();
//! assert_ne!(*first, *second);
//! second.mark_broken(); // closed when dropped, and replaced on demand
//! drop((first, second));
//! assert_eq!(pool.metrics().broken, 1);
//! pool.close().await;
//! assert!(matches!(pool.acquire().await, Err(PoolError::Closed)));
//! # }
//! ```
//!
//! # Verification
//! The lock-free parts (the ring, the flag hand-off with its re-check, yielding and resuming, the
//! bound on one caller's run) are model-checked with loom: `src/loom_models.rs` explores every
//! interleaving of small scenarios, up to a preemption bound of 3 (`LOOM_MAX_PREEMPTIONS`
//! overrides it), against the code that ships, compiled with loom's primitives. Run, in a target
//! directory of its own (the cfg changes every build flag, so sharing one would rebuild it):
//!
//! ```text
//! RUSTFLAGS="--cfg weir_loom" CARGO_TARGET_DIR=target/loom \
//!     cargo test --release -p weir-connection-pool --lib loom_models
//! ```
//!
//! (`make loom` runs exactly this, and `make test` runs `make loom`.) It takes about a minute of
//! model checking on the project's 2-core machine, plus the first build. Stress tests with real
//! threads, the queue's unit tests (including its wraparound) and the pool's behaviour tests
//! (mostly on paused time) run with the normal `cargo test --release -p weir-connection-pool`.
//! The benchmark is `weir bench pool`.

#[cfg(feature = "bench-internals")]
pub mod bench_internals;
pub mod combiner;
pub mod error;
mod exec;
#[allow(unsafe_code)]
mod flag;
mod histogram;
pub mod manager;
pub mod metrics;
pub mod pool;
#[allow(unsafe_code)]
mod queue;
mod state;
mod sync;

#[cfg(all(test, weir_loom))]
mod loom_models;

pub use combiner::{CombinedState, Combiner, CombinerConfig, CombinerStats};
pub use error::PoolError;
pub use histogram::LatencySummary;
pub use manager::Manager;
pub use metrics::PoolMetrics;
pub use pool::{Pool, PoolBuilder, PooledConnection};
