//! `map`: named expressions over the input's columns, one output column each.

use std::sync::Arc;

use arrow_schema::{Field, Schema};

use super::Explained;
use super::{Compiled, Planned, Planner, Reads};
use crate::changelog::{self, ChangelogMode};
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
    // An updating input's kinds pass through; its key stays the key if every key column is
    // kept as it is (perhaps renamed), else the output has none.
    let mode = ChangelogMode::of(&input);
    let op = changelog::op_column(&input);
    let key = mode.key().and_then(|key| {
        key.iter()
            .map(|k| {
                let column = input.index_of(k).ok()?;
                fields
                    .iter()
                    .zip(&exprs)
                    .find(|(_, e)| e.as_column() == Some(column))
                    .map(|(field, _)| field.name().clone())
            })
            .collect::<Option<Vec<String>>>()
    });
    let schema = mode.with_key(key).apply(&Schema::new(fields));
    let out = schema.clone();
    let mut outputs: Vec<Vec<(usize, usize)>> = exprs
        .iter()
        .map(|e| e.columns().into_iter().map(|c| (0, c)).collect())
        .collect();
    outputs.extend(op.map(|op| vec![(0, op)]));
    let reads = Reads {
        always: vec![Default::default()],
        outputs,
    };
    let columns: Arc<[Expr]> = exprs.into();
    let mut planned = Planned::stateless(
        schema,
        Arc::new(move |_| {
            Ok(Box::new(
                Map::new(columns.clone(), out.clone()).carrying_kinds(op),
            ))
        }),
    );
    planned.reads = Some(reads);
    Some(Compiled::Operator(planned))
}

/// What `weir explain` says the node keeps and what fires it: nothing: it works on each batch alone.
pub(super) fn explain(_: &MapSpec, _: &JobSpec) -> Explained {
    Explained::default()
}
