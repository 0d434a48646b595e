//! The shared checkpoint-trigger scheduler of a weir process.
//!
//! This crate will own the one scheduler that triggers checkpoints for every pipeline of every
//! job in the process: a fixed, small set of threads whatever the number of pipelines, per-pipeline
//! leases that cancel only their own triggers, sub-millisecond due times, ticks that find their
//! pipeline still busy coalesced and counted instead of queued, and a scheduling-delay histogram
//! (actual start minus due time) per pipeline. See lesson 1 of `DESIGN.md`: Apache SeaTunnel's
//! per-pipeline pools and the traps of its shared one.
//!
//! It is empty until the checkpoint issue lands; nothing in the engine calls it yet.
