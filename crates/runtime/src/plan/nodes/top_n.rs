//! `top-n`: the first `n` rows per key by an order, over a `key-by` node: fired at an event
//! time (`fire-at`, append-only), or without it kept up to date as an updating stream.

use std::sync::Arc;

use super::Explained;
use super::{Compiled, Planned, Planner, Reads, columns_of};
use crate::changelog::{self, ChangelogMode};
use crate::keys::KeySelector;
use crate::operators::keyed::KeyEncoder;
use arrow_schema::{DataType, Field, Schema};

use crate::operators::running_top_n::{RunningTopN, RunningTopNDef};
use crate::operators::top_n::{Keep, TopN, TopNDef};
use crate::spec::{JobSpec, TieBreak, TopNSpec};

pub(super) fn plan(p: &mut Planner<'_, '_>, t: &TopNSpec) -> Option<Compiled> {
    let (keys, schema) = p.keyed_input(0, "from")?;
    let order = p.order("order-by", &t.order_by, &schema);
    let fire_at = t
        .fire_at
        .as_ref()
        .map(|sql| p.time("fire-at", sql, &schema));
    // The data columns: an updating input's row kind is not one of them.
    let data = changelog::op_column(&schema).unwrap_or(schema.fields().len());
    let columns: Vec<usize> = match &t.columns {
        None => (0..data).collect(),
        Some(names) => {
            let mut idx = Vec::new();
            for (n, name) in names.iter().enumerate() {
                match schema.index_of(name) {
                    Ok(i) if i < data => idx.push(i),
                    _ => {
                        let known: Vec<&str> = schema.fields()[..data]
                            .iter()
                            .map(|f| f.name().as_str())
                            .collect();
                        p.problem(
                            &format!("columns/{n}"),
                            format!("no column `{name}`; columns: {}", known.join(", ")),
                        );
                    }
                }
            }
            idx
        }
    };
    let mut projected = schema.project(&columns).ok()?;
    if let Some(rank) = &t.rank_column {
        if projected.index_of(rank).is_ok() {
            p.problem(
                "rank-column",
                format!("`{rank}` is already an emitted column: name the rank otherwise"),
            );
        }
        let mut fields: Vec<_> = projected.fields().iter().cloned().collect();
        fields.push(Arc::new(Field::new(rank, DataType::Int64, false)));
        projected = Schema::new_with_metadata(fields, projected.metadata().clone());
    }
    let read = columns_of(order.iter().map(|(e, _)| e));
    let keep = Keep {
        n: t.n.max(1) as usize,
        with_ties: t.with_ties,
        latest: t.tie_break == TieBreak::Latest,
    };
    let Some(fire_at) = fire_at else {
        let reads = Reads::through(read, columns.iter().copied());
        return running(t, keep, keys, schema, order, reads, columns, &projected);
    };
    let out = Arc::new(projected);
    let mut read = read;
    read.extend(columns_of(&fire_at));
    let reads = Reads::through(read, columns.iter().copied());
    let def = Arc::new(TopNDef {
        order,
        keep,
        fire_at: fire_at?,
        input: schema,
        columns,
        rank: t.rank_column.is_some(),
        schema: out.clone(),
    });
    let mut planned = Planned::keyed(
        out,
        Arc::new(move |ctx, state| {
            Ok(Box::new(TopN::new(
                def.clone(),
                KeyEncoder::new(keys.clone())?,
                state,
                ctx.metrics.clone(),
            )?))
        }),
    );
    planned.reads = Some(reads);
    Some(Compiled::Operator(planned))
}

/// A top-n without `fire-at`: a [`RunningTopN`] over an append-only or updating input.
#[allow(clippy::too_many_arguments)]
fn running(
    t: &TopNSpec,
    keep: Keep,
    keys: Arc<KeySelector>,
    schema: arrow_schema::SchemaRef,
    order: Vec<(crate::expr::Expr, bool)>,
    reads: Reads,
    columns: Vec<usize>,
    projected: &arrow_schema::Schema,
) -> Option<Compiled> {
    let updating_input = !ChangelogMode::of(&schema).is_append();
    let data = changelog::op_column(&schema).unwrap_or(schema.fields().len());
    // The partition's columns name the output's rows when each is a column that is emitted.
    let key: Option<Vec<String>> = keys
        .exprs()
        .iter()
        .map(|e| {
            let i = e.as_column()?;
            let j = columns.iter().position(|c| *c == i)?;
            Some(projected.field(j).name().clone())
        })
        .collect();
    let rank = t.rank_column.as_deref();
    let mode = RunningTopNDef::output_mode(keep, rank, updating_input, key);
    let out = mode.apply(projected);
    let input = Arc::new(schema.project(&(0..data).collect::<Vec<_>>()).ok()?);
    let def = Arc::new(RunningTopNDef {
        order,
        keep,
        input,
        updating_input,
        columns,
        rank: rank.is_some(),
        schema: out.clone(),
    });
    let mut planned = Planned::keyed(
        out,
        Arc::new(move |_, state| {
            Ok(Box::new(RunningTopN::new(
                def.clone(),
                KeyEncoder::new(keys.clone())?,
                state,
            )?))
        }),
    );
    planned.reads = Some(reads);
    Some(Compiled::Operator(planned))
}

/// What `weir explain` says the node keeps and what fires it.
pub(super) fn explain(t: &TopNSpec, _: &JobSpec) -> Explained {
    let mut ties = String::new();
    if t.with_ties {
        ties.push_str(" (ties kept)");
    }
    if t.tie_break == TieBreak::Latest {
        ties.push_str(" (of equal rows, the last to arrive first)");
    }
    if let Some(rank) = &t.rank_column {
        ties.push_str(&format!(", ranked in `{rank}`"));
    }
    match &t.fire_at {
        Some(fire_at) => Explained {
            mini_batch: None,
            state: Some(format!(
                "the best {} rows per key and firing time{ties}",
                t.n
            )),
            timers: Some(format!(
                "event time: `{fire_at}` (then the rows are emitted and dropped)"
            )),
        },
        None => Explained {
            mini_batch: None,
            state: Some(format!(
                "per key for good: the best {} rows{ties} (every live row, over an updating \
                 input); each change to them is emitted",
                t.n
            )),
            timers: None,
        },
    }
}
