//! From a checked job spec to an executable graph.
//!
//! Planning resolves the wiring (`from: gen.bid`), orders the nodes topologically, computes
//! every node's output schema and compiles every expression against its input, reporting all
//! problems at once with their positions in the job file. `key-by` and `union` nodes do not
//! survive planning: a `key-by` becomes the hash partitioning of its consumers' input edges and
//! a `union` merges its inputs into its consumers' input gates.
//!
//! # Layout
//! - [`build`]: spec → [`Plan`] (wiring, cycles, sources and sinks, `queryable:`, and the
//!   assembly of the real nodes, with the one keyed-state factory every keyed operator uses).
//! - `nodes`: one file per transform kind, checking its spec against its inputs and saying
//!   how its subtasks are made; `nodes/mod.rs` holds the registry (one line per kind) and the
//!   checks several kinds share. A transform kind is `operators/<kind>.rs` (running it),
//!   `nodes/<kind>.rs` (planning it) and its line in the registry.
//! - [`chaining`]: which nodes run chained in one task.
//! - `projection`: which columns of each source port anything reads, offered to the source
//!   so that it builds only those (projection pushdown).
//! - `sql`: `kind: sql` nodes, planned before the rest into the kinds above (a query becomes
//!   the nodes a person would write); `explain`: a plan as text (`weir explain`).
//!
//! A [`Plan`] is a description: planning opens no state, creates no directory and contacts no
//! external system, so validating a job is cheap and has no side effects. The executor
//! ([`crate::exec`]) makes the run's resources and its tasks from it.

pub mod build;
pub mod chaining;
mod explain;
pub mod footprint;
mod nodes;
mod projection;
mod sql;

use std::sync::Arc;

use arrow_schema::SchemaRef;

pub use crate::api::OperatorFactory;
use crate::api::{EventTime, NodeRole, SinkFactory, SourceFactory};
use crate::keys::KeySelector;
use crate::spec::JobSpec;

pub use build::build;
pub use chaining::Chaining;

use crate::spec::SpecError;
use crate::spec::load::{Override, load_file, parse_str};

/// Loads and plans a job file, reporting every problem of the file at once.
pub fn check_file(path: &std::path::Path, overrides: &[Override]) -> Result<Plan, SpecError> {
    build(&load_file(path, overrides)?)
}

/// Loads and plans a job given as text; `file` names it in messages.
pub fn check_str(file: &str, text: &str, overrides: &[Override]) -> Result<Plan, SpecError> {
    build(&parse_str(file, text, overrides)?)
}

/// How the subtasks of a node are made.
#[derive(Clone)]
pub enum Factory {
    Source {
        factory: Arc<dyn SourceFactory>,
        event_time: EventTime,
    },
    Operator(OperatorFactory),
    Sink(Arc<dyn SinkFactory>),
}

/// An edge into a node.
#[derive(Clone, Debug)]
pub struct PlanEdge {
    /// Index of the producing node in [`Plan::nodes`].
    pub from: usize,
    /// The producer's output port.
    pub port: usize,
    /// The consumer's logical input (0 for single-input operators).
    pub input: usize,
    /// `Some` when a `key-by` partitions this edge by key.
    pub key: Option<Arc<KeySelector>>,
}

/// A node that runs: a source, an operator or a sink.
#[derive(Clone)]
pub struct PlanNode {
    pub name: String,
    /// The `kind` from the job file.
    pub kind: &'static str,
    pub role: NodeRole,
    pub parallelism: usize,
    pub inputs: Vec<PlanEdge>,
    /// Output ports with their schemas (one unnamed port except for multi-port sources).
    pub ports: Vec<(String, SchemaRef)>,
    pub factory: Factory,
    /// Keyed operators: the states declared `queryable`, and how to read them.
    pub queryable: Option<Arc<crate::query::QueryableNode>>,
    /// Sources: the columns built per port, where projection pushdown left some out (see
    /// `projection`); `None`: all of them.
    pub read: Option<Vec<Vec<bool>>>,
}

impl PlanNode {
    /// `batch`, one of this node's output batches, without the columns projection pushdown
    /// left unbuilt (all null, read by nothing): what a view of the node's rows should show.
    pub fn without_unread(&self, batch: arrow_array::RecordBatch) -> arrow_array::RecordBatch {
        let Some(read) = &self.read else {
            return batch;
        };
        let port = self.ports.iter().position(|(_, schema)| {
            Arc::ptr_eq(schema, &batch.schema()) || schema.fields() == batch.schema().fields()
        });
        let Some(read) = port.and_then(|p| read.get(p)) else {
            return batch;
        };
        let kept: Vec<usize> = (0..batch.num_columns())
            .filter(|&c| read.get(c).copied().unwrap_or(true))
            .collect();
        batch.project(&kept).unwrap_or(batch)
    }
}

/// A planned job: nodes in topological order (every edge goes from a lower to a higher index).
#[derive(Clone)]
pub struct Plan {
    pub spec: JobSpec,
    pub nodes: Vec<PlanNode>,
    /// Which nodes run chained in one task.
    pub chains: Chaining,
    /// The values `${VAR}` references read from the environment: a server masks them wherever
    /// it shows the job.
    pub env_values: Vec<String>,
}

impl Plan {
    pub fn name(&self) -> &str {
        &self.spec.name
    }
}
