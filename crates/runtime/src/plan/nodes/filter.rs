//! `filter`: a BOOL condition over the input's columns; the output is the input's schema.

use std::sync::Arc;

use arrow_schema::DataType;

use super::Explained;
use super::{Compiled, Planned, Planner, Reads, sql_type};
use crate::changelog::{ChangelogMode, RowKind};
use crate::expr::Expr;
use crate::operators::filter::Filter;
use crate::spec::FilterSpec;
use crate::spec::JobSpec;

pub(super) fn plan(p: &mut Planner<'_, '_>, f: &FilterSpec) -> Option<Compiled> {
    let schema = p.input.clone();
    let predicate = match Expr::compile(&f.predicate, &schema) {
        Ok(e) if matches!(e.data_type(), DataType::Boolean | DataType::Null) => Arc::new(e),
        Ok(e) => {
            let message = format!(
                "a condition must be BOOL, but `{}` is {}",
                f.predicate,
                sql_type(e.data_type())
            );
            p.problem("where", message);
            return None;
        }
        Err(e) => {
            p.problem("where", e.to_string());
            return None;
        }
    };
    let reads = Reads::through(predicate.columns(), 0..schema.fields().len());
    // Over updates, a condition that keeps one half of an update makes it an insert or a
    // delete (see [`Filter::updating`]).
    let mode = ChangelogMode::of(&schema);
    let mut planned = if mode.has(RowKind::UpdateBefore) {
        let kinds: Vec<RowKind> = RowKind::ALL.into_iter().filter(|k| mode.has(*k)).collect();
        let mut kinds = kinds;
        kinds.push(RowKind::Delete);
        let out =
            ChangelogMode::updating(&kinds, mode.key().map(<[String]>::to_vec)).apply(&schema);
        let made = out.clone();
        Planned::stateless(
            out,
            Arc::new(move |_| Ok(Box::new(Filter::updating(predicate.clone(), made.clone())))),
        )
    } else {
        Planned::stateless(
            schema,
            Arc::new(move |_| Ok(Box::new(Filter::new(predicate.clone())))),
        )
    };
    planned.reads = Some(reads);
    Some(Compiled::Operator(planned))
}

/// What `weir explain` says the node keeps and what fires it: nothing: it works on each batch alone.
pub(super) fn explain(_: &FilterSpec, _: &JobSpec) -> Explained {
    Explained::default()
}
