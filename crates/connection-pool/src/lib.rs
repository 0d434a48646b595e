//! Pooled connections to external systems for weir's sinks.
//!
//! This crate will own the combiner executor (whichever thread wins the flag runs everyone's queued
//! pool actions, yielding after a count or a time budget; lesson 4 of `DESIGN.md`) and the async
//! connection pool built on it: max size, min idle, fair FIFO waiters, health checks, lifetimes.
//!
//! It is empty until the connection-pool issue lands.
