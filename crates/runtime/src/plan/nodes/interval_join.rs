//! `interval-join`: a join of two `key-by` nodes whose right row's time lies within
//! `[left time + lower, left time + upper]`; planned as a regular join whose condition holds
//! the bounds and whose sides are kept only as long as the bounds can still match.

use super::Explained;
use super::{Compiled, Planner};
use crate::spec::IntervalJoinSpec;
use crate::spec::JobSpec;

pub(super) fn plan(p: &mut Planner<'_, '_>, j: &IntervalJoinSpec) -> Option<Compiled> {
    let left = p.keyed_input(0, "left");
    let right = p.keyed_input(1, "right");
    let ((lk, ls), (rk, rs)) = (left?, right?);
    p.same_keys(&lk, &rk);
    let (lower, upper) = (j.lower.as_millis(), j.upper.as_millis());
    if lower > upper {
        p.problem(
            "lower",
            format!("lower ({}) is after upper ({})", j.lower, j.upper),
        );
        return None;
    }
    p.time("left-time", &j.left_time, &ls)?;
    p.time("right-time", &j.right_time, &rs)?;
    let shifted = |base: &str, ms: i64| {
        if ms < 0 {
            format!("({base}) - INTERVAL '{} milliseconds'", -ms)
        } else {
            format!("({base}) + INTERVAL '{ms} milliseconds'")
        }
    };
    let l = format!("{}.{}", j.left_as, j.left_time);
    let r = format!("{}.{}", j.right_as, j.right_time);
    let bounds = format!(
        "{r} BETWEEN {} AND {}",
        shifted(&l, lower),
        shifted(&l, upper)
    );
    let sql = match &j.condition {
        Some(c) => format!("({bounds}) AND ({c})"),
        None => bounds,
    };
    // A left row can match right rows up to its time + upper; a right row can be matched by
    // left rows down to its time - lower.
    let left_until = p.time("left-time", &shifted(&j.left_time, upper), &ls)?;
    let right_until = p.time("right-time", &shifted(&j.right_time, -lower), &rs)?;
    let pruned = p.pruned_join(
        [(&ls, &j.left_as), (&rs, &j.right_as)],
        &[],
        Some(&sql),
        j.columns.as_ref(),
    )?;
    Some(Compiled::Operator(super::join::planned(
        [lk, rk],
        pruned,
        [Some(left_until), Some(right_until)],
    )))
}

/// What `weir explain` says the node keeps and what fires it.
pub(super) fn explain(j: &IntervalJoinSpec, _: &JobSpec) -> Explained {
    Explained {
        mini_batch: None,
        state: Some(format!(
            "both sides' rows within [{}, {}] of the other's time",
            j.lower, j.upper
        )),
        timers: Some("event time: each row's last possible match".into()),
    }
}
