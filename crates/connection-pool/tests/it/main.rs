//! Behaviour tests of the combiner (with real threads) and of the pool (with tokio, mostly on
//! paused time), built as one test binary.
//!
//! # Layout
//! - `support`: a manager whose connections report their holders, `settle`, a seeded generator.
//! - `combiner`: nothing lost or run twice, submission order, bounded runs, yields resumed.
//! - `pool`: served-or-timed-out, no shared connections, FIFO waiters, replacement, lifetimes,
//!   idle eviction, close.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod combiner;
mod pool;
mod support;
