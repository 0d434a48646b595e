//! `sql`: planned before the other nodes, by `plan::sql`, into the kinds a person would
//! write; by the time the nodes are planned none is left. A job that still holds one here
//! was not lowered first (a bug), and gets a problem rather than a panic.

use super::Explained;
use super::{Compiled, Planner};
use crate::spec::JobSpec;
use crate::spec::SqlSpec;

pub(super) fn plan(p: &mut Planner<'_, '_>, _sql: &SqlSpec) -> Option<Compiled> {
    p.problem(
        "query",
        "the query was not planned (this is a bug in weir; please report it)",
    );
    None
}

/// What `weir explain` says the node keeps and what fires it: nothing of its own: it is planned into the nodes `weir explain` lists in its place.
pub(super) fn explain(_: &SqlSpec, _: &JobSpec) -> Explained {
    Explained::default()
}
