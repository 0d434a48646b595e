//! `join`: a regular join of two `key-by` nodes on their keys, each side kept until its
//! optional `*-until` time passes the watermark (and under the operator's state TTL).

use std::sync::Arc;

use arrow_schema::SchemaRef;

use super::Explained;
use super::{Compiled, Planned, Planner, PrunedJoin, columns_of};
use crate::changelog::{ChangelogMode, RowKind};
use crate::expr::Expr;
use crate::keys::KeySelector;
use crate::operators::join::{Join, JoinDef};
use crate::operators::keyed::KeyEncoder;
use crate::operators::updating_join::{Outer, UpdatingJoin};
use crate::spec::JobSpec;
use crate::spec::{JoinSpec, OuterMode};

pub(super) fn plan(p: &mut Planner<'_, '_>, j: &JoinSpec) -> Option<Compiled> {
    let left = p.keyed_input(0, "left");
    let right = p.keyed_input(1, "right");
    let ((lk, ls), (rk, rs)) = (left?, right?);
    p.same_keys(&lk, &rk);
    let updating_input = !ChangelogMode::of(&ls).is_append() || !ChangelogMode::of(&rs).is_append();
    if updating_input || j.mode != OuterMode::Inner {
        return plan_updating(p, j, [(lk, ls), (rk, rs)], updating_input);
    }
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

/// A join whose output is an updating stream: an outer join, or a join of an updating input.
/// Its rows are kept for good (or until idle for the state TTL): a later change could take
/// back any of them.
fn plan_updating(
    p: &mut Planner<'_, '_>,
    j: &JoinSpec,
    sides: [(Arc<KeySelector>, SchemaRef); 2],
    updating_input: bool,
) -> Option<Compiled> {
    let [(lk, ls), (rk, rs)] = sides;
    for (key, until) in [
        ("left-until", &j.left_until),
        ("right-until", &j.right_until),
    ] {
        if until.is_some() {
            let why = if updating_input {
                "a join of an updating input keeps each side's rows for good: a later change \
                 could take back any of them"
            } else {
                "an outer join keeps each side's rows for good here (an outer interval join, \
                 emitting a row's padded version when its time is up, is not supported)"
            };
            p.problem_at_key(
                key,
                format!("{why}; leave out `{key}` (state.ttl bounds state)"),
            );
        }
    }
    if j.left_until.is_some() || j.right_until.is_some() {
        return None;
    }
    // The kinds are not columns of the rows the join keeps or emits.
    let (ls_data, rs_data) = (
        ChangelogMode::append().apply(&ls),
        ChangelogMode::append().apply(&rs),
    );
    let pruned = p.pruned_join(
        [(&ls_data, &j.left_as), (&rs_data, &j.right_as)],
        &[],
        j.condition.as_deref(),
        j.columns.as_ref(),
    )?;
    let out = ChangelogMode::updating(&[RowKind::Insert, RowKind::Delete], None)
        .apply(&pruned.projection.schema);
    let (left, right) = j.mode.outer_sides();
    let outer = Outer { left, right };
    let reads = pruned.reads;
    let def = Arc::new(JoinDef {
        inputs: pruned.inputs,
        keep: pruned.keep,
        until: [None, None],
        joined: pruned.joined,
        condition: pruned.condition,
        projection: pruned.projection,
    });
    let schema = out.clone();
    let mut planned = Planned::keyed(
        out,
        Arc::new(move |_, state| {
            Ok(Box::new(UpdatingJoin::new(
                def.clone(),
                outer,
                [KeyEncoder::new(lk.clone())?, KeyEncoder::new(rk.clone())?],
                schema.clone(),
                state,
            )?))
        }),
    );
    planned.reads = Some(reads);
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
    let outer = match j.mode {
        OuterMode::Inner => "",
        OuterMode::Left => " — a LEFT join: left rows without a match padded with nulls",
        OuterMode::Right => " — a RIGHT join: right rows without a match padded with nulls",
        OuterMode::Full => " — a FULL join: rows of either side without a match padded with nulls",
    };
    Explained {
        mini_batch: None,
        state: Some(format!(
            "{}; {}{}{outer}",
            side(&j.left_until, "left"),
            side(&j.right_until, "right"),
            if bounded {
                ""
            } else {
                " — a regular join: unbounded unless state.ttl is set"
            }
        )),
        timers: (j.left_until.is_some() || j.right_until.is_some()).then(|| {
            "event time: one per key group and time rows expire (then those rows are \
                 dropped)"
                .into()
        }),
    }
}
