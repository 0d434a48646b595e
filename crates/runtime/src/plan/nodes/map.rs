//! `map`: named expressions over the input's columns, one output column each.

use std::sync::Arc;

use arrow_schema::{Field, Schema};

use super::Explained;
use super::{Compiled, Planned, Planner, Reads};
use crate::expr::Expr;
use crate::operators::map::Map;
use crate::spec::JobSpec;
use crate::spec::MapSpec;

pub(super) fn plan(p: &mut Planner<'_, '_>, m: &MapSpec) -> Option<Compiled> {
    let input = p.input.clone();
    let mut exprs = Vec::new();
    let mut fields = Vec::new();
    for (name, sql) in &m.columns {
        match Expr::compile(sql, &input) {
            Ok(e) => {
                fields.push(Field::new(name, e.data_type().clone(), true));
                exprs.push(e);
            }
            Err(e) => p.problem(
                &format!("columns/{}", crate::spec::positions::escape_segment(name)),
                e.to_string(),
            ),
        }
    }
    let schema = Arc::new(Schema::new(fields));
    let out = schema.clone();
    let reads = Reads {
        always: vec![Default::default()],
        outputs: exprs
            .iter()
            .map(|e| e.columns().into_iter().map(|c| (0, c)).collect())
            .collect(),
    };
    let columns: Arc<[Expr]> = exprs.into();
    let mut planned = Planned::stateless(
        schema,
        Arc::new(move |_| Ok(Box::new(Map::new(columns.clone(), out.clone())))),
    );
    planned.reads = Some(reads);
    Some(Compiled::Operator(planned))
}

/// What `weir explain` says the node keeps and what fires it: nothing: it works on each batch alone.
pub(super) fn explain(_: &MapSpec, _: &JobSpec) -> Explained {
    Explained::default()
}
