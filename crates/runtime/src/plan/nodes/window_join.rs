//! `window-join`: a join of two `key-by` nodes within each tumbling or sliding event-time
//! window, emitted when the watermark passes the window's end.

use std::sync::Arc;

use arrow_schema::{DataType, Field, TimeUnit};

use super::Explained;
use super::{Compiled, Planned, Planner, columns_of};
use crate::operators::keyed::KeyEncoder;
use crate::operators::window_join::{WindowJoin, WindowJoinDef};
use crate::spec::JobSpec;
use crate::spec::WindowJoinSpec;

pub(super) fn plan(p: &mut Planner<'_, '_>, j: &WindowJoinSpec) -> Option<Compiled> {
    let left = p.keyed_input(0, "left");
    let right = p.keyed_input(1, "right");
    let ((lk, ls), (rk, rs)) = (left?, right?);
    p.same_keys(&lk, &rk);
    let windowing = p.windowing("window", &j.window)?;
    if windowing.is_session() {
        p.problem(
            "window",
            "a window join takes tumbling or sliding windows, not sessions",
        );
        return None;
    }
    let lt = p.time("left-time", &j.left_time, &ls);
    let rt = p.time("right-time", &j.right_time, &rs);
    let ts = DataType::Timestamp(TimeUnit::Millisecond, None);
    let windows = [
        Field::new("window_start", ts.clone(), true),
        Field::new("window_end", ts, true),
    ];
    let pruned = p.pruned_join(
        [(&ls, &j.left_as), (&rs, &j.right_as)],
        &windows,
        j.condition.as_deref(),
        j.columns.as_ref(),
    )?;
    let out = pruned.projection.schema.clone();
    let mut reads = pruned.reads;
    for (read, time) in reads.always.iter_mut().zip([&lt, &rt]) {
        read.extend(columns_of(time));
    }
    let def = Arc::new(WindowJoinDef {
        inputs: pruned.inputs,
        keep: pruned.keep,
        times: [lt?, rt?],
        windowing,
        mode: j.mode,
        joined: pruned.joined,
        condition: pruned.condition,
        projection: pruned.projection,
    });
    let keys = [lk, rk];
    let mut planned = Planned::keyed(
        out,
        Arc::new(move |ctx, state| {
            Ok(Box::new(WindowJoin::new(
                def.clone(),
                [
                    KeyEncoder::new(keys[0].clone())?,
                    KeyEncoder::new(keys[1].clone())?,
                ],
                state,
                ctx.metrics.clone(),
            )?))
        }),
    );
    planned.reads = Some(reads);
    Some(Compiled::Operator(planned))
}

/// What `weir explain` says the node keeps and what fires it.
pub(super) fn explain(w: &WindowJoinSpec, _: &JobSpec) -> Explained {
    Explained {
        mini_batch: None,
        state: Some(format!(
            "both sides' rows per key and window ({})",
            super::describe_window(&w.window)
        )),
        timers: Some("event time: each window's end".into()),
    }
}
