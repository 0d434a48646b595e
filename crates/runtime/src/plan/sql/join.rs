//! Joins: `a JOIN b ON ...` (or `a, b WHERE ...`) and the window semi join of
//! `x IN (SELECT ... FROM TABLE(TUMBLE(...)) WHERE window_start = ... AND window_end = ...)`.
//!
//! The conjuncts of ON and WHERE are sorted by the sides they read: one side's go into a
//! `filter` before that side's `key-by`; `a.x = b.y` become the join key; the rest stay the
//! join's condition. A conjunct that bounds one side's event time by the other's
//! (`b.t BETWEEN a.t AND a.expires`) also tells each side when it can no longer match, which
//! is when the join drops it from state (`left-until`/`right-until`): without such a bound a
//! join keeps both sides for good (as Flink's regular join does; `state.ttl` applies).

use indexmap::IndexMap;
use sqlparser::ast::{self, BinaryOperator as B, Expr, Spanned};

use super::planner::{Done, Item, Projection};
use super::rel::{Bound, HIDDEN, Rel, Scope, Side, is_window_col, plain, referenced};
use super::text::{column, conjuncts, same_name};
use super::{Lowering, SqlError};
use crate::spec::{JoinMode, JoinSpec, OuterMode, TransformSpec, WindowJoinSpec};

/// The conjuncts of a join, sorted.
struct Sorted {
    left: Vec<Expr>,
    right: Vec<Expr>,
    keys: Vec<(String, String)>,
    /// The conjuncts the keys came from.
    keys_at: Vec<Expr>,
    /// `window_start = window_start`, `window_end = window_end` pairs seen.
    window_pairs: usize,
    condition: Vec<Expr>,
}

fn sort(left: &Side, right: &Side, conds: Vec<Expr>) -> Result<Sorted, SqlError> {
    let scope = Scope::Two(left, right, false);
    let mut out = Sorted {
        left: vec![],
        right: vec![],
        keys: vec![],
        keys_at: vec![],
        window_pairs: 0,
        condition: vec![],
    };
    for c in conds {
        let refs = referenced(&scope, &c)?;
        let reads = |side: usize| refs.iter().any(|(s, _)| *s == side);
        match (reads(0), reads(1)) {
            (true, false) => out.left.push(c),
            (false, true) => out.right.push(c),
            (false, false) => out.condition.push(c),
            (true, true) => {
                if let Expr::BinaryOp {
                    left: a,
                    op: B::Eq,
                    right: b,
                } = &c
                    && let (Some(x), Some(y)) = (plain(&scope, a)?, plain(&scope, b)?)
                    && x.0 != y.0
                {
                    let (l, r) = if x.0 == 0 { (x.1, y.1) } else { (y.1, x.1) };
                    if is_window_col(&l) && is_window_col(&r) && same_name(&l, &r) {
                        out.window_pairs += 1;
                        // Also a key when the windows are already columns (a regular join).
                        if left.rel.tvf.is_none() || right.rel.tvf.is_none() {
                            out.keys.push((l, r));
                            out.keys_at.push(c.clone());
                        }
                    } else {
                        out.keys.push((l, r));
                        out.keys_at.push(c.clone());
                    }
                    continue;
                }
                out.condition.push(c);
            }
        }
    }
    Ok(out)
}

/// When each side stops matching, from the conjuncts that bound one side's event time by
/// the other's: (left-until, right-until) as expressions over that side's own columns, and
/// the same over the joined row (for a later Top-N's firing time).
#[derive(Default)]
struct Untils {
    left: Option<(String, Expr)>,
    right: Option<(String, Expr)>,
}

fn untils(left: &Side, right: &Side, condition: &[Expr]) -> Result<Untils, SqlError> {
    let two = Scope::Two(left, right, false);
    let sides = [left, right];
    let mut out = Untils::default();
    let mut bounds: Vec<(Expr, bool, Expr)> = Vec::new(); // (x, x is at least, other)
    for c in condition {
        match c {
            Expr::Between {
                expr,
                negated: false,
                low,
                high,
            } => {
                bounds.push(((**expr).clone(), true, (**low).clone()));
                bounds.push(((**expr).clone(), false, (**high).clone()));
            }
            Expr::BinaryOp {
                left: a,
                op,
                right: b,
            } => match op {
                B::GtEq | B::Gt => {
                    bounds.push(((**a).clone(), true, (**b).clone()));
                    bounds.push(((**b).clone(), false, (**a).clone()));
                }
                B::LtEq | B::Lt => {
                    bounds.push(((**a).clone(), false, (**b).clone()));
                    bounds.push(((**b).clone(), true, (**a).clone()));
                }
                _ => {}
            },
            _ => {}
        }
    }
    for (x, at_least, other) in bounds {
        let Some((s, col)) = plain(&two, &x)? else {
            continue;
        };
        // x must be its side's event time; `other` must read only the other side.
        if sides[s].rel.time.as_deref() != Some(col.as_str()) {
            continue;
        }
        let o = 1 - s;
        let refs = referenced(&two, &other)?;
        if refs.is_empty() || refs.iter().any(|(side, _)| *side != o) {
            continue;
        }
        if at_least {
            // x ≥ O.time + k: a row of S matches O rows up to its x - k, all of which have
            // arrived once the watermark passes that.
            let Some(k) = offset_from_time(&two, &other, o, sides[o])? else {
                continue;
            };
            let own = Scope::One(sides[s]);
            let x_own = own.render(&x)?;
            let text = match k {
                0 => x_own,
                k if k > 0 => format!("{x_own} - INTERVAL '{k}' MILLISECOND"),
                k => format!("{x_own} + INTERVAL '{}' MILLISECOND", -k),
            };
            let slot = if s == 0 {
                &mut out.left
            } else {
                &mut out.right
            };
            slot.get_or_insert((text, x.clone()));
        } else {
            // x ≤ other(O): a row of O matches nothing once the watermark passes `other`.
            let own = Scope::One(sides[o]);
            let text = own.render(&other)?;
            let slot = if o == 0 {
                &mut out.left
            } else {
                &mut out.right
            };
            slot.get_or_insert((text, other.clone()));
        }
    }
    Ok(out)
}

/// `O.time`, `O.time + INTERVAL ...` or `O.time - INTERVAL ...`: the offset in ms.
fn offset_from_time(
    scope: &Scope<'_>,
    e: &Expr,
    o: usize,
    side: &Side,
) -> Result<Option<i64>, SqlError> {
    let is_time = |e: &Expr| -> Result<bool, SqlError> {
        Ok(plain(scope, e)?
            .is_some_and(|(s, c)| s == o && side.rel.time.as_deref() == Some(c.as_str())))
    };
    match e {
        Expr::Nested(inner) => offset_from_time(scope, inner, o, side),
        Expr::BinaryOp { left, op, right } if matches!(op, B::Plus | B::Minus) => {
            if !is_time(left)? {
                return Ok(None);
            }
            let Ok(ms) = super::text::interval_millis(right) else {
                return Ok(None);
            };
            Ok(Some(if *op == B::Plus { ms } else { -ms }))
        }
        _ => Ok(is_time(e)?.then_some(0)),
    }
}

/// A `window-join` of two keyed sides over their (equal) windows.
struct WindowJoin<'a> {
    keyed: (String, String),
    sides: (&'a Side, &'a Side),
    windows: (&'a super::rel::Tvf, &'a super::rel::Tvf),
    mode: JoinMode,
    condition: Vec<String>,
    columns: IndexMap<String, String>,
}

impl WindowJoin<'_> {
    fn spec(self, parallelism: Option<u32>) -> TransformSpec {
        TransformSpec::WindowJoin(WindowJoinSpec {
            left: self.keyed.0,
            right: self.keyed.1,
            left_as: self.sides.0.alias.clone(),
            right_as: self.sides.1.alias.clone(),
            left_time: column(&self.windows.0.time),
            right_time: column(&self.windows.1.time),
            window: self.windows.0.window.clone(),
            mode: self.mode,
            condition: (!self.condition.is_empty()).then(|| self.condition.join(" AND ")),
            columns: Some(self.columns),
            parallelism,
        })
    }
}

impl Lowering<'_> {
    /// `a LEFT|RIGHT|FULL JOIN b ON ...`: a regular join that also emits the rows of the
    /// preserved side(s) without a match. An ON conjunct over one side filters that side first
    /// when its rows would be padded anyway (the right of a LEFT join), and is part of the
    /// join's condition otherwise; WHERE filters a preserved side first, and is refused over a
    /// side whose rows may be padded (it would filter the joined rows).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn outer_join(
        &mut self,
        left: Side,
        right: Side,
        (on, mode): (Vec<Expr>, OuterMode),
        wheres: Vec<Expr>,
        group_by: &[Expr],
        p: &Projection,
        s: &ast::Select,
    ) -> Result<Rel, SqlError> {
        let (l, r) = mode.outer_sides();
        let preserved = [l, r];
        let mut below = sort(&left, &right, wheres)?;
        let padded_side = |side: usize| preserved[1 - side];
        let refused = below
            .condition
            .first()
            .or(below.left.first().filter(|_| padded_side(0)))
            .or(below.right.first().filter(|_| padded_side(1)));
        if let Some(c) = refused.or(below.keys_at.first()) {
            return Err(SqlError::at(
                c.span(),
                "this WHERE condition reads the side of an outer join whose rows may be padded \
                 with nulls, so it would filter the joined rows: put it in ON, or filter the \
                 join's rows in an enclosing query",
            ));
        }
        let on = sort(&left, &right, on)?;
        for (side, conds) in [(0, on.left), (1, on.right)] {
            if preserved[side] {
                below.condition.extend(conds);
            } else if side == 0 {
                below.left.extend(conds);
            } else {
                below.right.extend(conds);
            }
        }
        below.keys = on.keys;
        below.keys_at = on.keys_at;
        below.window_pairs = on.window_pairs;
        below.condition.extend(on.condition);
        self.join_sorted(left, right, below, mode, group_by, p, s)
    }

    pub(super) fn join(
        &mut self,
        left: Side,
        right: Side,
        conds: Vec<Expr>,
        group_by: &[Expr],
        p: &Projection,
        s: &ast::Select,
    ) -> Result<Rel, SqlError> {
        let sorted = sort(&left, &right, conds)?;
        self.join_sorted(left, right, sorted, OuterMode::Inner, group_by, p, s)
    }

    /// A join of conjuncts sorted by the sides they read. Over an updating input, or outer,
    /// it is a regular join emitting updates: no time bound, no window join, no Top-N.
    #[allow(clippy::too_many_arguments)]
    fn join_sorted(
        &mut self,
        left: Side,
        right: Side,
        sorted: Sorted,
        mode: OuterMode,
        group_by: &[Expr],
        p: &Projection,
        s: &ast::Select,
    ) -> Result<Rel, SqlError> {
        let span = s.select_token.0.span;
        if same_name(&left.alias, &right.alias) {
            return Err(SqlError::at(
                span,
                format!(
                    "both sides of the join are called `{}`: give one an alias",
                    left.alias
                ),
            ));
        }
        let updating =
            mode != OuterMode::Inner || left.rel.updating.is_some() || right.rel.updating.is_some();
        if updating {
            self.append_only_final(&left.rel)?;
            self.append_only_final(&right.rel)?;
        } else {
            self.append_only(&left.rel, span, "a join")?;
            self.append_only(&right.rel, span, "a join")?;
        }
        let window = match (&left.rel.tvf, &right.rel.tvf) {
            (Some(_), Some(b)) if sorted.window_pairs == 2 && updating => {
                return Err(SqlError::at(
                    b.span,
                    "a window join of an updating input, or an outer window join, is not \
                     supported: join the windows' rows with a regular join (window_start and \
                     window_end as columns), or aggregate first",
                ));
            }
            (Some(a), Some(b)) if sorted.window_pairs == 2 => {
                if format!("{:?}", a.window) != format!("{:?}", b.window) {
                    return Err(SqlError::at(
                        b.span,
                        "a window join needs the same window on both sides",
                    ));
                }
                Some((a.clone(), b.clone()))
            }
            _ => None,
        };
        let left = self.filter(left, sorted.left)?;
        let right = self.filter(right, sorted.right)?;
        let (left, right) = match window {
            Some(_) => (left, right),
            None => (self.window_rows_side(left)?, self.window_rows_side(right)?),
        };
        // Conjuncts were sorted against the sides before they were filtered: sort again so
        // that names resolve against the sides as they are now (same columns).
        if sorted.keys.is_empty() {
            return Err(SqlError::at(
                span,
                "a join needs an equality between its sides (a.k = b.k): a cross join keeps \
                 every row of both",
            ));
        }
        let plain_projection = group_by.is_empty() && !p.has_aggregates && p.over.is_none();
        let two = Scope::Two(&left, &right, window.is_some());
        let untils = if window.is_some() || updating {
            Untils::default()
        } else {
            untils(&left, &right, &sorted.condition)?
        };
        // Windowed rows joined on both their windows' bounds, a window aggregate's on at least
        // one side (Flink plans a window join): a window aggregate's rows of a window come
        // before the watermark that passes its end, and a window TVF's rows before the
        // watermark passes their time, so each row leaves state once the watermark passes its
        // window's end.
        let window_ends = match (&left.rel.window, &right.rel.window) {
            (Some(lw), Some(rw)) if window.is_none() && !updating && !(lw.rows && rw.rows) => {
                let keyed = |a: &str, b: &str| sorted.keys.iter().any(|(l, r)| l == a && r == b);
                (keyed(&lw.start, &rw.start) && keyed(&lw.end, &rw.end))
                    .then(|| (column(&lw.end), column(&rw.end)))
            }
            _ => None,
        };
        let mut condition = Vec::new();
        for c in &sorted.condition {
            condition.push(two.render(c)?);
        }
        // The joined row's columns.
        let mut columns: IndexMap<String, String> = IndexMap::new();
        let mut qualified: Vec<(String, String, String)> = Vec::new();
        let sides = [&left, &right];
        let copy_of = |side: usize, col: &str| -> String {
            if window.is_some() && is_window_col(col) {
                column(col)
            } else {
                format!("{}.{}", column(&sides[side].alias), column(col))
            }
        };
        let mut rank = None;
        if plain_projection {
            for item in &p.items {
                match item {
                    Item::Star(q) => {
                        for (i, side) in sides.iter().enumerate() {
                            if q.as_ref().is_some_and(|q| !same_name(q, &side.alias)) {
                                continue;
                            }
                            for c in side.rel.visible() {
                                if window.is_some() && is_window_col(c) && i == 1 {
                                    continue;
                                }
                                if columns.insert(c.to_string(), copy_of(i, c)).is_some() {
                                    return Err(SqlError::at(
                                        p.span,
                                        format!(
                                            "`*` selects `{c}` from both sides: list the \
                                             columns and rename one with AS"
                                        ),
                                    ));
                                }
                                qualified.push((side.alias.clone(), c.to_string(), c.to_string()));
                            }
                        }
                    }
                    Item::Expr { expr, name } => {
                        if let Some(r) = super::planner::rank_call(expr)? {
                            if updating {
                                return Err(SqlError::at(
                                    expr.span(),
                                    "ROW_NUMBER()/RANK() over the rows of an outer join or of \
                                     an updating input: rank them in an enclosing query",
                                ));
                            }
                            rank = Some((r, name.clone(), expr.span()));
                            continue;
                        }
                        let name = name
                            .clone()
                            .unwrap_or_else(|| super::planner::default_name(expr));
                        if let Some((side, col)) = plain(&two, expr)? {
                            qualified.push((sides[side].alias.clone(), col, name.clone()));
                        }
                        if columns.insert(name.clone(), two.render(expr)?).is_some() {
                            return Err(SqlError::at(
                                expr.span(),
                                format!("the column `{name}` is selected twice: name one with AS"),
                            ));
                        }
                    }
                }
            }
        } else {
            // Everything the rest of the SELECT reads, each under its own name (or
            // `alias_column` when both sides have it).
            let mut needed: Vec<(usize, String)> = Vec::new();
            let mut exprs: Vec<&Expr> = group_by.iter().collect();
            for item in &p.items {
                match item {
                    Item::Expr { expr, .. } => exprs.push(expr),
                    Item::Star(_) => {
                        return Err(SqlError::at(p.span, "`*` is not allowed with GROUP BY"));
                    }
                }
            }
            if let Some(h) = &s.having {
                exprs.push(h);
            }
            for e in exprs {
                for r in referenced(&two, e)? {
                    if !needed.contains(&r) {
                        needed.push(r);
                    }
                }
            }
            for (side, col) in &needed {
                let clash = needed
                    .iter()
                    .any(|(s2, c2)| s2 != side && same_name(c2, col));
                let name = if clash {
                    format!("{}_{}", sides[*side].alias, col)
                } else {
                    col.clone()
                };
                columns.insert(name.clone(), copy_of(*side, col));
                qualified.push((sides[*side].alias.clone(), col.clone(), name));
            }
        }
        let out_name = |qualified: &Vec<(String, String, String)>, side: usize, col: &str| {
            qualified
                .iter()
                .find(|(a, c, _)| same_name(a, &sides[side].alias) && c == col)
                .map(|(_, _, n)| n.clone())
        };
        // A Top-N over the join reads its partition and order columns, and fires at a side's
        // bound: copy them when the SELECT list does not.
        let mut bound = None;
        if let Some((call, _, _)) = &rank {
            let mut reads: Vec<(usize, String)> = Vec::new();
            for e in call
                .spec
                .partition_by
                .iter()
                .chain(call.spec.order_by.iter().map(|o| &o.expr))
            {
                reads.extend(referenced(&two, e)?);
            }
            for (side, col) in reads {
                if out_name(&qualified, side, &col).is_none() {
                    let name = format!("{HIDDEN}{}_{col}", sides[side].alias);
                    columns.insert(name.clone(), copy_of(side, &col));
                    qualified.push((sides[side].alias.clone(), col, name));
                }
            }
        }
        // Which side's rows become final at a time: the side with an until, keyed by its
        // join key.
        for (side, until) in [(0usize, &untils.left), (1, &untils.right)] {
            let Some((_, joined)) = until else { continue };
            // The other side's until is its own time; a Top-N fires on the bounded side's
            // bound (the one not equal to its own event time).
            let own_time = plain(&two, joined)?.is_some_and(|(s2, c)| {
                s2 == side && sides[side].rel.time.as_deref() == Some(c.as_str())
            });
            if own_time || bound.is_some() {
                continue;
            }
            let column_name = match plain(&two, joined)? {
                Some((s2, c)) => out_name(&qualified, s2, &c),
                None => None,
            };
            // Without a rank in this SELECT, a bound is kept only when its columns are
            // selected anyway (an enclosing query may still rank the rows).
            let ranked = rank.is_some();
            let column_name = match column_name {
                Some(c) => c,
                None if !ranked => continue,
                None => {
                    let n = format!("{HIDDEN}until");
                    columns.insert(n.clone(), two.render(joined)?);
                    n
                }
            };
            let mut keys = Vec::new();
            let mut complete = true;
            for (l, r) in &sorted.keys {
                let k = if side == 0 { l } else { r };
                let n = match out_name(&qualified, side, k) {
                    Some(n) => n,
                    None if !ranked => {
                        complete = false;
                        break;
                    }
                    None => {
                        let n = format!("{HIDDEN}{}_{k}", sides[side].alias);
                        columns.insert(n.clone(), copy_of(side, k));
                        qualified.push((sides[side].alias.clone(), k.clone(), n.clone()));
                        n
                    }
                };
                keys.push(n);
            }
            if !complete {
                continue;
            }
            bound = Some(Bound {
                column: column_name,
                keys,
            });
        }
        let lk: Vec<String> = sorted.keys.iter().map(|(l, _)| l.clone()).collect();
        let rk: Vec<String> = sorted.keys.iter().map(|(_, r)| r.clone()).collect();
        let lkeyed = self.key_by(&left.rel, &lk, span)?;
        let rkeyed = self.key_by(&right.rel, &rk, span)?;
        let spec = match &window {
            Some((a, b)) => WindowJoin {
                keyed: (lkeyed, rkeyed),
                sides: (&left, &right),
                windows: (a, b),
                mode: JoinMode::Inner,
                condition,
                columns: columns.clone(),
            }
            .spec(self.parallelism),
            None => TransformSpec::Join(JoinSpec {
                left: lkeyed,
                right: rkeyed,
                left_as: left.alias.clone(),
                right_as: right.alias.clone(),
                condition: (!condition.is_empty()).then(|| condition.join(" AND ")),
                left_until: untils
                    .left
                    .as_ref()
                    .map(|(t, _)| t.clone())
                    .or_else(|| window_ends.as_ref().map(|(l, _)| l.clone())),
                right_until: untils
                    .right
                    .as_ref()
                    .map(|(t, _)| t.clone())
                    .or_else(|| window_ends.as_ref().map(|(_, r)| r.clone())),
                mode,
                columns: Some(columns.clone()),
                state_ttl: None,
                parallelism: self.parallelism,
            }),
        };
        let kind = if window.is_some() {
            "window-join"
        } else {
            "join"
        };
        let schema = self.emit(kind, spec, span)?;
        let mut rel = Rel::new(self.last(), &schema, None);
        rel.qualified = qualified.clone();
        // The joined row's event time: either side's time column, copied (an updating join's
        // rows have none: windows do not read them, and a padded side's time is null).
        if updating {
            rel.updating = Some(span);
        }
        for (side, s2) in sides.iter().enumerate().filter(|_| !updating) {
            if let Some(t) = &s2.rel.time
                && let Some(n) = out_name(&qualified, side, t)
            {
                rel.time = Some(n);
                break;
            }
        }
        if window.is_some()
            && rel.column("window_start").is_some()
            && rel.column("window_end").is_some()
        {
            rel.window = Some(super::rel::WindowCols::named(false));
        }
        rel.bound = bound;
        let alias = format!("{}_{}", left.alias, right.alias);
        let out = Side { alias, rel };
        if let Some((call, name, at)) = rank {
            let r = self.pending_rank(&out, call, name, at)?;
            let mut rel = out.rel;
            rel.rank = Some(r);
            return Ok(rel);
        }
        if plain_projection {
            return Ok(out.rel);
        }
        self.after_from(out, group_by, p, s)
    }

    fn window_rows_side(&mut self, side: Side) -> Result<Side, SqlError> {
        if side.rel.tvf.is_some() {
            self.window_rows(side)
        } else {
            Ok(side)
        }
    }

    /// `WHERE x IN (SELECT y FROM TABLE(TUMBLE(...)) r WHERE r.window_start = window_start
    /// AND r.window_end = window_end ...)` over a window TVF: a semi `window-join`.
    pub(super) fn semi_join(
        &mut self,
        side: Side,
        wheres: &mut Vec<Expr>,
        s: &ast::Select,
    ) -> Result<Done, SqlError> {
        let Some(pos) = wheres.iter().position(|w| {
            matches!(
                w,
                Expr::In {
                    target: ast::InTarget::Subquery(_),
                    negated: false,
                    ..
                } | Expr::Exists { negated: false, .. }
            )
        }) else {
            return Ok(Done::Side(side));
        };
        let w = wheres.remove(pos);
        // `x IN (SELECT y ...)` keys on x = y; `EXISTS (SELECT ...)` on its equalities.
        let (outer_key, q) = match &w {
            Expr::In {
                expr,
                target: ast::InTarget::Subquery(q),
                ..
            } => (Some(expr.as_ref()), q),
            Expr::Exists { subquery, .. } => (None, subquery),
            _ => return Ok(Done::Side(side)),
        };
        let span = w.span();
        let Some(tvf) = side.rel.tvf.clone() else {
            return Err(SqlError::at(
                span,
                "`IN (SELECT ...)` and `EXISTS (SELECT ...)` are supported as a window semi \
                 join: both sides window TVFs with window_start and window_end equal \
                 (otherwise the state is unbounded)",
            ));
        };
        let ast::SetExpr::Select(inner) = q.body.as_ref() else {
            return Err(SqlError::at(span, "the IN subquery must be one SELECT"));
        };
        let [from] = inner.from.as_slice() else {
            return Err(SqlError::at(span, "the IN subquery reads one window TVF"));
        };
        if !from.joins.is_empty() || !inner.group_by_is_empty() {
            return Err(SqlError::at(
                span,
                "the IN subquery reads one window TVF, ungrouped",
            ));
        }
        let right = self.factor(&from.relation)?;
        let Some(rtvf) = right.rel.tvf.clone() else {
            return Err(SqlError::at(
                span,
                "the IN subquery must read a window TVF (the same window as the outer query)",
            ));
        };
        if format!("{:?}", rtvf.window) != format!("{:?}", tvf.window) {
            return Err(SqlError::at(
                rtvf.span,
                "a window semi join needs the same window on both sides",
            ));
        }
        let item = match (outer_key, inner.projection.as_slice()) {
            (None, _) => None,
            (
                Some(_),
                [ast::SelectItem::UnnamedExpr(e)]
                | [ast::SelectItem::ExprWithAlias { expr: e, .. }],
            ) => Some(e),
            _ => return Err(SqlError::at(span, "the IN subquery selects one column")),
        };
        let conds = inner.selection.as_ref().map(conjuncts).unwrap_or_default();
        let sorted = sort(&side, &right, conds)?;
        if sorted.window_pairs != 2 {
            return Err(SqlError::at(
                span,
                "the IN subquery must match the windows: WHERE r.window_start = l.window_start \
                 AND r.window_end = l.window_end",
            ));
        }
        if !sorted.left.is_empty() {
            return Err(SqlError::at(
                sorted.left[0].span(),
                "a condition on the outer query's rows belongs in its own WHERE",
            ));
        }
        let two = Scope::Two(&side, &right, true);
        let mut keys = Vec::new();
        if let (Some(expr), Some(item)) = (outer_key, item) {
            let (Some((0, lkey)), Some((1, rkey))) = (plain(&two, expr)?, plain(&two, item)?)
            else {
                return Err(SqlError::at(
                    span,
                    "`x IN (SELECT y ...)`: x a column of the outer query, y of the subquery",
                ));
            };
            keys.push((lkey, rkey));
        }
        keys.extend(sorted.keys.iter().cloned());
        if keys.is_empty() {
            return Err(SqlError::at(
                span,
                "EXISTS needs an equality between the two queries' rows (r.k = l.k) besides \
                 the windows",
            ));
        }
        let condition_exprs = sorted.condition.clone();
        // The outer query's other conjuncts filter its rows first.
        let outer: Vec<Expr> = std::mem::take(wheres);
        let left = self.filter(side, outer)?;
        let right = self.filter(right, sorted.right)?;
        let two = Scope::Two(&left, &right, true);
        let mut condition = Vec::new();
        for c in &condition_exprs {
            condition.push(two.render(c)?);
        }
        let p = Projection::of(s)?;
        if p.has_aggregates || p.has_window_functions || !s.group_by_is_empty() {
            return Err(SqlError::at(
                p.span,
                "over a window semi join, select columns (aggregate in an enclosing query)",
            ));
        }
        let mut columns: IndexMap<String, String> = IndexMap::new();
        for item in &p.items {
            match item {
                Item::Star(_) => {
                    for c in left.rel.visible() {
                        columns.insert(
                            c.to_string(),
                            if is_window_col(c) {
                                column(c)
                            } else {
                                format!("{}.{}", column(&left.alias), column(c))
                            },
                        );
                    }
                    columns.insert("window_start".into(), "window_start".into());
                    columns.insert("window_end".into(), "window_end".into());
                }
                Item::Expr { expr, name } => {
                    let name = name
                        .clone()
                        .unwrap_or_else(|| super::planner::default_name(expr));
                    columns.insert(name, two.render(expr)?);
                }
            }
        }
        let lk: Vec<String> = keys.iter().map(|(l, _)| l.clone()).collect();
        let rk: Vec<String> = keys.iter().map(|(_, r)| r.clone()).collect();
        let lkeyed = self.key_by(&left.rel, &lk, span)?;
        let rkeyed = self.key_by(&right.rel, &rk, span)?;
        let schema = self.emit(
            "window-join",
            WindowJoin {
                keyed: (lkeyed, rkeyed),
                sides: (&left, &right),
                windows: (&tvf, &rtvf),
                mode: JoinMode::Semi,
                condition,
                columns,
            }
            .spec(self.parallelism),
            span,
        )?;
        Ok(Done::Planned(Rel::new(self.last(), &schema, None)))
    }
}

trait GroupByEmpty {
    fn group_by_is_empty(&self) -> bool;
}

impl GroupByEmpty for ast::Select {
    fn group_by_is_empty(&self) -> bool {
        matches!(&self.group_by, ast::GroupByExpr::Expressions(e, m) if e.is_empty() && m.is_empty())
    }
}
