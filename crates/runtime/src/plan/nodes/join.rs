//! `join`: a regular join of two `key-by` nodes on their keys, each side kept until its
//! optional `*-until` time passes the watermark (and under the operator's state TTL).

use std::sync::Arc;

use super::Explained;
use super::{Compiled, Planned, Planner, PrunedJoin, columns_of};
use crate::expr::Expr;
use crate::keys::KeySelector;
use crate::operators::join::{Join, JoinDef};
use crate::operators::keyed::KeyEncoder;
use crate::spec::JobSpec;
use crate::spec::JoinSpec;

pub(super) fn plan(p: &mut Planner<'_, '_>, j: &JoinSpec) -> Option<Compiled> {
    let left = p.keyed_input(0, "left");
    let right = p.keyed_input(1, "right");
    let ((lk, ls), (rk, rs)) = (left?, right?);
    p.same_keys(&lk, &rk);
    let left_until = match &j.left_until {
        Some(u) => Some(p.time("left-until", u, &ls)?),
        None => None,
    };
    let right_until = match &j.right_until {
        Some(u) => Some(p.time("right-until", u, &rs)?),
        None => None,
    };
    let pruned = p.pruned_join(
        [(&ls, &j.left_as), (&rs, &j.right_as)],
        &[],
        j.condition.as_deref(),
        j.columns.as_ref(),
    )?;
    let mut planned = planned([lk, rk], pruned, [left_until, right_until]);
    planned.state_ttl = j.state_ttl;
    Some(Compiled::Operator(planned))
}

/// A regular or interval join's operator: `until` says how long each side's rows are kept.
pub(super) fn planned(
    keys: [Arc<KeySelector>; 2],
    pruned: PrunedJoin,
    until: [Option<Expr>; 2],
) -> Planned {
    let out = pruned.projection.schema.clone();
    let mut reads = pruned.reads;
    for (read, until) in reads.always.iter_mut().zip(&until) {
        read.extend(columns_of(until));
    }
    let def = Arc::new(JoinDef {
        inputs: pruned.inputs,
        keep: pruned.keep,
        until,
        joined: pruned.joined,
        condition: pruned.condition,
        projection: pruned.projection,
    });
    let mut planned = Planned::keyed(
        out,
        Arc::new(move |ctx, state| {
            Ok(Box::new(
                Join::new(
                    def.clone(),
                    [
                        KeyEncoder::new(keys[0].clone())?,
                        KeyEncoder::new(keys[1].clone())?,
                    ],
                    state,
                )?
                .restored(ctx.restore.as_deref()),
            ))
        }),
    );
    planned.reads = Some(reads);
    planned
}

/// What `weir explain` says the node keeps and what fires it.
pub(super) fn explain(j: &JoinSpec, _: &JobSpec) -> Explained {
    let side = |until: &Option<String>, name: &str| match until {
        Some(u) => format!("{name} rows until the watermark passes `{u}`"),
        None => format!("{name} rows for good (until idle for state.ttl)"),
    };
    let bounded = j.left_until.is_some() && j.right_until.is_some();
    Explained {
        state: Some(format!(
            "{}; {}{}",
            side(&j.left_until, "left"),
            side(&j.right_until, "right"),
            if bounded {
                ""
            } else {
                " — a regular join: unbounded unless state.ttl is set"
            }
        )),
        timers: (j.left_until.is_some() || j.right_until.is_some())
            .then(|| "event time: each row's until (then it is dropped)".into()),
    }
}
