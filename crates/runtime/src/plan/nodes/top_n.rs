//! `top-n`: the first `n` rows per key by an order, fired at an event time, over a `key-by`
//! node.

use std::sync::Arc;

use super::Explained;
use super::{Compiled, Planned, Planner, Reads, columns_of};
use crate::operators::keyed::KeyEncoder;
use crate::operators::top_n::{TopN, TopNDef};
use crate::spec::JobSpec;
use crate::spec::TopNSpec;

pub(super) fn plan(p: &mut Planner<'_, '_>, t: &TopNSpec) -> Option<Compiled> {
    let (keys, schema) = p.keyed_input(0, "from")?;
    let order = p.order("order-by", &t.order_by, &schema);
    let fire_at = p.time("fire-at", &t.fire_at, &schema);
    let columns: Vec<usize> = match &t.columns {
        None => (0..schema.fields().len()).collect(),
        Some(names) => {
            let mut idx = Vec::new();
            for (n, name) in names.iter().enumerate() {
                match schema.index_of(name) {
                    Ok(i) => idx.push(i),
                    Err(_) => {
                        let known: Vec<&str> =
                            schema.fields().iter().map(|f| f.name().as_str()).collect();
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
    let out = Arc::new(schema.project(&columns).ok()?);
    let mut read = columns_of(order.iter().map(|(e, _)| e));
    read.extend(columns_of(&fire_at));
    let reads = Reads::through(read, columns.iter().copied());
    let def = Arc::new(TopNDef {
        order,
        n: t.n.max(1) as usize,
        with_ties: t.with_ties,
        fire_at: fire_at?,
        input: schema,
        columns,
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

/// What `weir explain` says the node keeps and what fires it.
pub(super) fn explain(t: &TopNSpec, _: &JobSpec) -> Explained {
    Explained {
        state: Some(format!(
            "the best {} rows per key and firing time{}",
            t.n,
            if t.with_ties { " (ties kept)" } else { "" }
        )),
        timers: Some(format!(
            "event time: `{}` (then the rows are emitted and dropped)",
            t.fire_at
        )),
    }
}
