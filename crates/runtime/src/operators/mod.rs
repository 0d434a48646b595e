//! Operators: the synchronous, per-subtask logic between sources and sinks.
//!
//! One trait ([`crate::api::Operator`]), one file per operator, planned by its namesake in
//! `plan/nodes/`. An operator receives whole batches and pushes its output batches into `out`;
//! the task that owns it moves them on, either straight into the next chained operator (no
//! channel hop) or into an exchange. Operators never block and never see channels, and import
//! only the contract ([`crate::api`]), expressions, keys and `weir_state`. Keyed operators keep
//! all their state and timers in a `weir_state::KeyedStateBackend`.
//!
//! # Layout
//! - [`filter`], [`map`]: stateless rows in, rows out.
//! - [`keyed`]: encoding keys and whole rows for state.
//! - [`accumulators`]: aggregate functions and their accumulators.
//! - [`aggregate`]: running keyed aggregation.
//! - [`local_aggregate`]: the local phase of two-phase aggregation, chained before the exchange
//!   of a running or windowed aggregate.
//! - [`window`], [`window_aggregate`]: event-time windows and windowed aggregation.
//! - [`top_n`]: per key and time, the first n rows by an order.
//! - [`running_top_n`]: per key, the first n rows by an order, kept up to date (an updating
//!   stream; deduplication with `n: 1`).
//! - [`over_aggregate`]: aggregates over each row's last n rows per key.
//! - [`join`], [`window_join`]: keyed joins (regular, interval, windowed);
//!   [`updating_join`]: regular and outer joins of updating streams.
//! - [`normalize`]: an upsert stream (a source's `upsert-json`) made a retract stream.
//!
//! `union` has no operator: the planner merges the union's inputs into its consumer's input gate;
//! nor has `key-by`: it becomes the hash exchange of its consumers' inputs ([`crate::keys`]).

pub mod accumulators;
pub mod aggregate;
pub mod filter;
pub mod join;
pub mod keyed;
pub mod local_aggregate;
pub mod map;
pub mod normalize;
pub mod over_aggregate;
pub mod running_top_n;
pub mod top_n;
pub mod updating_join;
pub mod window;
pub mod window_aggregate;
pub mod window_join;
