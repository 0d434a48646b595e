//! `window-aggregate`: aggregates per key and event-time window (tumbling, sliding or
//! session) over a `key-by` node, emitted when the watermark passes the window's end.

use std::sync::Arc;

use super::Explained;
use super::{Compiled, Planned, Planner, QueryShape, Reads, columns_of, columns_of_calls};
use crate::operators::accumulators::Accumulators;
use crate::operators::keyed::KeyEncoder;
use crate::operators::local_aggregate::LocalWindows;
use crate::operators::window::Windowing;
use crate::operators::window_aggregate::{WindowAggregate, WindowAggregateDef};
use crate::query::StateShape;
use crate::spec::JobSpec;
use crate::spec::WindowAggregateSpec;
use crate::spec::WindowSpec;

/// Whether the window aggregate `w` keeps its windows as slices: with the job's
/// `window-slicing`, for sliding windows without allowed lateness ([`Windowing::sliced`]). A
/// queryable one keeps whole windows, so a lookup reads a window's value as it is stored.
pub(crate) fn keeps_slices(window_slicing: bool, w: &WindowAggregateSpec) -> bool {
    window_slicing
        && w.queryable.is_none()
        && Windowing::from_spec(&w.window)
            .is_ok_and(|windowing| windowing.sliced(w.allowed_lateness.as_millis_i64()))
}

pub(super) fn plan(p: &mut Planner<'_, '_>, w: &WindowAggregateSpec) -> Option<Compiled> {
    let (keys, schema) = p.keyed_input(0, "from")?;
    let time = p.time("time", &w.time, &schema);
    let windowing = p.windowing("window", &w.window);
    let mut taken: Vec<String> = keys.names().to_vec();
    taken.extend(["window_start".to_string(), "window_end".to_string()]);
    let (names, calls) = p.calls(&w.aggregates, &schema, &taken);
    let out = WindowAggregateDef::output_schema(&keys, &names, &calls);
    let mut read = columns_of_calls(&calls);
    read.extend(columns_of(&time));
    let def = Arc::new(WindowAggregateDef {
        time: time?,
        windowing: windowing?,
        lateness: w.allowed_lateness.as_millis_i64(),
        aggs: Accumulators { calls },
        schema: out.clone(),
        sliced: keeps_slices(p.window_slicing, w),
    });
    // Sessions stay one phase: whether a record joins a session depends on the sessions in
    // state, which only the keyed operator sees.
    let local = match def.windowing {
        Windowing::Session { .. } => None,
        windowing => {
            let windows = LocalWindows {
                time: def.time.clone(),
                windowing,
                sliced: def.sliced,
            };
            p.local_phase(&keys, &def.aggs, Some(windows))
        }
    };
    let partials = local.is_some();
    let states: &'static [(&'static str, StateShape)] = match def.windowing {
        Windowing::Session { .. } => &[("sessions", StateShape::Sessions)],
        _ => &[("windows", StateShape::Windows)],
    };
    // The global phase of two phases addresses its state by the same keys over the partials.
    let encoded = local.as_ref().map_or(&keys, |l| &l.partial_keys).clone();
    let mut planned = Planned::keyed(
        out,
        Arc::new(move |ctx, state| {
            Ok(Box::new(
                WindowAggregate::new(
                    def.clone(),
                    KeyEncoder::new(encoded.clone())?,
                    state,
                    ctx.metrics.clone(),
                )?
                .merging_partials(partials),
            ))
        }),
    );
    planned.local = local;
    planned.reads = Some(Reads::only(vec![read]));
    planned.query_shape = Some(QueryShape {
        kind: "window-aggregate",
        values: names,
        keys,
        states,
    });
    Some(Compiled::Operator(planned))
}

/// What `weir explain` says the node keeps and what fires it.
pub(super) fn explain(w: &WindowAggregateSpec, job: &JobSpec) -> Explained {
    let sliced = keeps_slices(job.window_slicing, w);
    let state = match &w.window {
        WindowSpec::Sliding { size, slide } if sliced => format!(
            "accumulators per key and slice of {slide} (sliding {size} every {slide}: a window \
             merges its slices when it fires)"
        ),
        other => format!(
            "accumulators per key and window ({})",
            super::describe_window(other)
        ),
    };
    let timers = if sliced {
        "event time: the end of each key's next window to fire, one at a time (then the \
         window's slices are merged and the oldest is dropped)"
    } else {
        "event time: each window's end (then its state is dropped)"
    };
    Explained {
        mini_batch: None,
        state: Some(state),
        timers: Some(timers.into()),
    }
}
