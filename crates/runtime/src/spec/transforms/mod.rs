//! The keys of each transform kind, one file each (the kind's operator is
//! `operators/<kind>.rs`, its planning `plan/nodes/<kind>.rs`), and what several kinds share:
//! windows and queryable states.

mod aggregate;
mod filter;
mod interval_join;
mod join;
mod key_by;
mod map;
mod over_aggregate;
mod queryable;
mod sql;
mod top_n;
mod union;
mod window;
mod window_aggregate;
mod window_join;

pub use aggregate::{AggregateSpec, MiniBatchSpec};
pub use filter::FilterSpec;
pub use interval_join::IntervalJoinSpec;
pub use join::{JoinSpec, OuterMode};
pub use key_by::KeyBySpec;
pub use map::MapSpec;
pub use over_aggregate::OverAggregateSpec;
pub use queryable::{QueryPath, QueryableSpec, QueryableStateSpec};
pub use sql::SqlSpec;
pub use top_n::{TieBreak, TopNSpec};
pub use union::UnionSpec;
pub use window::WindowSpec;
pub use window_aggregate::WindowAggregateSpec;
pub use window_join::{JoinMode, WindowJoinSpec};

use super::TransformNode;
