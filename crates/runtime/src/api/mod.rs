//! The contract between weir's executor and the code it runs: what an operator, a source and
//! a sink implement, what they are given, and what flows between them.
//!
//! Operators ([`crate::operators`]) and connectors ([`crate::connectors`]) import this module
//! (with expressions, formats, keys and `weir_state`) and nothing of the planner or the
//! executor; the executor ([`crate::exec`]) drives them only through it. Adding an operator or
//! a connector means implementing a trait of this module, never reading the executor.
//!
//! # Layout
//! - [`operator`]: [`Operator`], the synchronous per-subtask logic, and [`OperatorFactory`],
//!   which makes one per subtask.
//! - [`source`]: [`Source`], [`SourceFactory`] and [`SourceEvent`].
//! - [`time`]: the ends of event time, [`EventTime`] (how a source's watermarks derive from
//!   its records), and reading time columns.
//! - [`sink`]: [`Sink`], [`SinkFactory`] and the two phases of an exactly-once commit
//!   ([`SinkRestore`], [`Unconfirmed`], [`SnapshotTransaction`]).
//! - [`two_phase`]: that protocol written once: a transactional sink is its
//!   [`two_phase::Stage`] and its [`two_phase::Committer`].
//! - [`context`]: [`SubtaskContext`], what a factory knows of the subtask it makes, and
//!   [`KeyedStateStore`], through which a keyed operator's subtask opens its state.
//! - [`message`]: [`Message`], the one in-band message between tasks, and [`Watermark`].
//! - [`snapshot`]: [`SubtaskState`], what a subtask checkpoints besides keyed state, and
//!   [`SubtaskRestore`], what a restored subtask starts from.
//! - [`metrics`]: the live counters a subtask updates ([`SubtaskMetrics`]) and the job's
//!   ([`JobMetrics`]), read by the CLI and the HTTP API.
//! - [`error`]: [`OperatorError`], why an operator, source or sink failed, grouped by what
//!   the job should do about it.
//! - [`connector`]: what a source or sink kind tells the planner and a hosting server about
//!   itself ([`connector::SourceConnector`], [`connector::SinkConnector`],
//!   [`connector::Hosted`]).
//!
//! # Example
//! An operator that keeps the rows of even `n`, tested without an executor:
//! ```
//! use std::sync::Arc;
//! use arrow_array::{Int64Array, RecordBatch, cast::AsArray, types::Int64Type};
//! use weir_runtime::api::{Operator, OperatorError};
//!
//! struct Even;
//!
//! impl Operator for Even {
//!     fn process_batch(
//!         &mut self,
//!         _input: usize,
//!         batch: RecordBatch,
//!         out: &mut Vec<RecordBatch>,
//!     ) -> Result<(), OperatorError> {
//!         let n = batch.column(0).as_primitive::<Int64Type>();
//!         let keep = arrow_arith::numeric::rem(n, &Int64Array::new_scalar(2))?;
//!         let keep = arrow_ord::cmp::eq(&keep, &Int64Array::new_scalar(0))?;
//!         out.push(arrow_select::filter::filter_record_batch(&batch, &keep)?);
//!         Ok(())
//!     }
//! }
//!
//! let schema = Arc::new(arrow_schema::Schema::new(vec![arrow_schema::Field::new(
//!     "n", arrow_schema::DataType::Int64, false,
//! )]));
//! let batch = RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(vec![1, 2, 3, 4]))])
//!     .unwrap();
//! let mut out = Vec::new();
//! Even.process_batch(0, batch, &mut out).unwrap();
//! assert_eq!(out[0].num_rows(), 2);
//! ```

pub mod connector;
pub mod context;
pub mod error;
pub mod message;
pub mod metrics;
pub mod operator;
pub mod sink;
pub mod snapshot;
pub mod source;
pub mod time;
pub mod two_phase;

pub use context::{KeyedStateStore, SubtaskContext};
pub use error::OperatorError;
pub use message::{Barrier, BarrierKind, Message, Watermark};
pub use metrics::{
    JobMetrics, NodeMetrics, NodeRole, PartitionProgress, SubtaskMetrics, TAIL_ROWS, UNKNOWN,
};
pub use operator::{Operator, OperatorFactory};
pub use sink::{
    Sink, SinkFactory, SinkRestore, SnapshotTransaction, Unconfirmed, decode_transactions,
};
pub use snapshot::{SubtaskRestore, SubtaskState};
pub use source::{Source, SourceEvent, SourceFactory};
pub use time::{BEGINNING_OF_TIME, END_OF_TIME, EventTime};
