//! `over-aggregate`: aggregates over each key's last `rows` rows in event-time order
//! (`OVER (PARTITION BY ... ORDER BY ... ROWS ...)`), one output row per input row.

use std::sync::Arc;

use arrow_schema::{Field, Schema};

use super::Explained;
use super::{Compiled, Planned, Planner, Reads, columns_of, columns_of_calls, split_direction};
use crate::operators::keyed::KeyEncoder;
use crate::operators::over_aggregate::{OverAggregate, OverAggregateDef};
use crate::spec::JobSpec;
use crate::spec::OverAggregateSpec;

pub(super) fn plan(p: &mut Planner<'_, '_>, o: &OverAggregateSpec) -> Option<Compiled> {
    let (keys, schema) = p.keyed_input(0, "from")?;
    let order = p.order("order-by", &o.order_by, &schema);
    let (first, desc) = split_direction(o.order_by.first()?);
    if desc {
        p.problem(
            "order-by/0",
            "the first order-by expression is the rows' time and must be ascending",
        );
    }
    let time = p.time("order-by/0", first, &schema);
    let taken: Vec<String> = schema.fields().iter().map(|f| f.name().clone()).collect();
    let (names, calls) = p.calls(&o.aggregates, &schema, &taken);
    let mut fields: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
    fields.extend(
        names
            .iter()
            .zip(&calls)
            .map(|(n, c)| Field::new(n, c.data_type.clone(), true)),
    );
    let out = Arc::new(Schema::new(fields));
    let mut read = columns_of(order.iter().map(|(e, _)| e));
    read.extend(columns_of(&time));
    read.extend(columns_of_calls(&calls));
    let mut reads = Reads::through(read, 0..schema.fields().len());
    reads.outputs.resize(out.fields().len(), Vec::new());
    let def = Arc::new(OverAggregateDef {
        time: time?,
        order,
        rows: o.rows.max(1) as usize,
        calls,
        input: schema,
        schema: out.clone(),
    });
    let mut planned = Planned::keyed(
        out,
        Arc::new(move |ctx, state| {
            Ok(Box::new(
                OverAggregate::new(
                    def.clone(),
                    KeyEncoder::new(keys.clone())?,
                    state,
                    ctx.metrics.clone(),
                )?
                .restored(ctx.restore.as_deref()),
            ))
        }),
    );
    planned.reads = Some(reads);
    Some(Compiled::Operator(planned))
}

/// What `weir explain` says the node keeps and what fires it.
pub(super) fn explain(o: &OverAggregateSpec, _: &JobSpec) -> Explained {
    Explained {
        mini_batch: None,
        state: Some(format!(
            "the last {} rows per key, and rows waiting for the watermark",
            o.rows
        )),
        timers: o
            .order_by
            .first()
            .map(|t| format!("event time: `{t}` of each row")),
    }
}
