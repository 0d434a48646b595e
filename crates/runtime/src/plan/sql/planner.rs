//! A query → weir's own operators.
//!
//! The planner walks a query's clauses in SQL's order (FROM, WHERE, GROUP BY, SELECT, and the
//! enclosing query's filter on a rank) and emits the node a person would write for each:
//! `filter`, `map`, `key-by` before every keyed operator, `aggregate`, `window-aggregate`,
//! `top-n`, `over-aggregate`, `join` (with the times after which each side stops matching),
//! `window-join`. Every emitted node is planned at once by the ordinary planner
//! ([`super::Lowering::emit`]), so its output columns and types are the real ones and a type
//! error is reported at the SQL that made the node.
//!
//! Nesting (subqueries in FROM) is walked recursively; the parser refuses queries nested
//! deeper than [`super::text`]'s limit, so the depth here is bounded too.

use indexmap::IndexMap;
use sqlparser::ast::{self, Expr, Spanned};
use sqlparser::tokenizer::Span;

use super::rel::{
    Bound, HIDDEN, PendingRank, Rel, Scope, Side, Tvf, WindowCols, is_window_col, plain,
    plain_columns,
};
use super::text::{self, call_args, call_name, column, conjuncts, same_name};
use super::{Lowering, SqlError};
use crate::spec::{
    AggregateSpec, FilterSpec, HumanDuration, KeyBySpec, MapSpec, OuterMode, OverAggregateSpec,
    TieBreak, TopNSpec, TransformSpec, WindowAggregateSpec, WindowSpec,
};

/// The most rows a Top-N keeps per partition.
const MAX_TOP_N: u32 = 100_000;

/// The most queries one UNION ALL joins.
const MAX_UNION_INPUTS: usize = 64;

const AGGREGATES: &[&str] = &["count", "sum", "min", "max", "avg", "max_by", "min_by"];

pub(super) fn is_aggregate(f: &ast::Function) -> bool {
    f.over.is_none() && AGGREGATES.contains(&call_name(f).as_str())
}

fn unsupported(span: Span, what: &str) -> SqlError {
    SqlError::at(span, format!("{what} is not supported in a `sql` node"))
}

impl Lowering<'_> {
    /// Plans a query; its rows are the returned relation.
    pub(super) fn query(&mut self, q: &ast::Query) -> Result<Rel, SqlError> {
        let span = q.span();
        if q.with.is_some() {
            return Err(unsupported(span, "WITH"));
        }
        if let Some(o) = &q.order_by {
            return Err(SqlError::at(
                o.span(),
                "ORDER BY outside OVER(...) would sort an endless stream: use ROW_NUMBER() OVER \
                 (PARTITION BY window_start, window_end ORDER BY ...) for a Top-N",
            ));
        }
        if q.limit_clause.is_some() || q.fetch.is_some() {
            return Err(unsupported(span, "LIMIT/FETCH on a stream"));
        }
        self.set_expr(&q.body)
    }

    fn set_expr(&mut self, body: &ast::SetExpr) -> Result<Rel, SqlError> {
        match body {
            ast::SetExpr::Select(s) => self.select(s),
            ast::SetExpr::Query(q) => self.query(q),
            ast::SetExpr::SetOperation {
                op: ast::SetOperator::Union,
                set_quantifier: ast::SetQuantifier::All,
                ..
            } => {
                // A chain of UNION ALLs is as deep as it is long: walk it with a stack.
                let mut leaves = Vec::new();
                let mut stack = vec![body];
                while let Some(e) = stack.pop() {
                    match e {
                        ast::SetExpr::SetOperation {
                            left,
                            op: ast::SetOperator::Union,
                            set_quantifier: ast::SetQuantifier::All,
                            right,
                        } => {
                            stack.push(right);
                            stack.push(left);
                        }
                        other => leaves.push(other),
                    }
                    if leaves.len() + stack.len() > MAX_UNION_INPUTS {
                        return Err(SqlError::at(
                            body.span(),
                            format!("a UNION ALL of more than {MAX_UNION_INPUTS} queries"),
                        ));
                    }
                }
                let mut from = Vec::new();
                let mut times = Vec::new();
                for leaf in leaves {
                    let rel = self.set_expr(leaf)?;
                    self.append_only(&rel, leaf.span(), "UNION ALL")?;
                    let rel = self.settled(rel)?;
                    from.push(rel.from.clone());
                    times.push(rel.time.clone());
                }
                let schema = self.emit(
                    "union",
                    TransformSpec::Union(crate::spec::UnionSpec { from }),
                    body.span(),
                )?;
                let mut rel = Rel::new(self.last(), &schema, None);
                if times.windows(2).all(|w| w[0] == w[1]) {
                    rel.time = times.first().cloned().flatten();
                }
                Ok(rel)
            }
            other => Err(SqlError::at(
                other.span(),
                "only SELECT and UNION ALL are supported in a `sql` node",
            )),
        }
    }

    fn select(&mut self, s: &ast::Select) -> Result<Rel, SqlError> {
        let rewritten = super::legacy::group_window(s)?;
        let s = rewritten.as_ref().unwrap_or(s);
        let grouped = super::legacy::group_expressions(s)?;
        let s = grouped.as_ref().unwrap_or(s);
        let span = s.select_token.0.span;
        if s.top.is_some()
            || s.into.is_some()
            || !s.lateral_views.is_empty()
            || s.prewhere.is_some()
            || !s.cluster_by.is_empty()
            || !s.distribute_by.is_empty()
            || !s.sort_by.is_empty()
            || s.qualify.is_some()
            || !s.named_window.is_empty()
        {
            return Err(unsupported(
                span,
                "this clause (TOP, INTO, QUALIFY, WINDOW, ...)",
            ));
        }
        let mut group_by = match &s.group_by {
            ast::GroupByExpr::Expressions(exprs, modifiers) if modifiers.is_empty() => {
                exprs.clone()
            }
            ast::GroupByExpr::Expressions(..) | ast::GroupByExpr::All(_) => {
                return Err(unsupported(span, "GROUP BY ALL, ROLLUP, CUBE"));
            }
        };
        // SELECT DISTINCT columns: a running GROUP BY them with no aggregate, whose rows
        // appear once (+I) and, over an updating input, go when their last copy does (-D).
        match &s.distinct {
            None => {}
            Some(ast::Distinct::Distinct) => {
                if !group_by.is_empty() {
                    return Err(SqlError::at(
                        span,
                        "SELECT DISTINCT beside GROUP BY: the groups are distinct already; \
                         leave DISTINCT out",
                    ));
                }
                for item in &s.projection {
                    match item {
                        ast::SelectItem::UnnamedExpr(
                            e @ (Expr::Identifier(_) | Expr::CompoundIdentifier(_)),
                        ) => group_by.push(e.clone()),
                        _ => {
                            return Err(SqlError::at(
                                span,
                                "SELECT DISTINCT takes plain columns (write `SELECT DISTINCT a, \
                                 b`, computing expressions in a subquery first)",
                            ));
                        }
                    }
                }
            }
            Some(_) => return Err(unsupported(span, "DISTINCT ON")),
        }
        let mut wheres = s.selection.as_ref().map(conjuncts).unwrap_or_default();
        let relations = self.from(&s.from, span)?;
        let analysis = Projection::of(s)?;
        match relations {
            From::One(side) => {
                let side = self.semi_join(side, &mut wheres, s)?;
                let side = match side {
                    Done::Planned(rel) => return Ok(rel),
                    Done::Side(side) => side,
                };
                let side = self.rank_filter(side, &mut wheres, &analysis)?;
                let side = self.filter(side, wheres)?;
                self.after_from(side, &group_by, &analysis, s)
            }
            From::Two(left, right, on, OuterMode::Inner) => {
                wheres.extend(on);
                self.join(left, right, wheres, &group_by, &analysis, s)
            }
            From::Two(left, right, on, mode) => {
                self.outer_join(left, right, (on, mode), wheres, &group_by, &analysis, s)
            }
        }
    }

    /// The relations of FROM: one, or two joined (`a JOIN b ON ...` or `a, b`).
    fn from(&mut self, from: &[ast::TableWithJoins], span: Span) -> Result<From, SqlError> {
        match from {
            [] => Err(SqlError::at(span, "a SELECT needs FROM")),
            [one] if one.joins.is_empty() => Ok(From::One(self.factor(&one.relation)?)),
            [one] if one.joins.len() == 1 => {
                let join = &one.joins[0];
                let (c, mode) = match &join.join_operator {
                    ast::JoinOperator::Join(c) | ast::JoinOperator::Inner(c) => {
                        (c, OuterMode::Inner)
                    }
                    ast::JoinOperator::Left(c) | ast::JoinOperator::LeftOuter(c) => {
                        (c, OuterMode::Left)
                    }
                    ast::JoinOperator::Right(c) | ast::JoinOperator::RightOuter(c) => {
                        (c, OuterMode::Right)
                    }
                    ast::JoinOperator::FullOuter(c) => (c, OuterMode::Full),
                    _ => {
                        return Err(SqlError::at(
                            join.relation.span(),
                            "only [INNER] JOIN and LEFT, RIGHT and FULL [OUTER] JOIN are \
                             supported (write a semi or anti join as `x IN (SELECT ...)`, a \
                             cross join with an ON equality)",
                        ));
                    }
                };
                let on = match c {
                    ast::JoinConstraint::On(e) => conjuncts(e),
                    ast::JoinConstraint::None if mode == OuterMode::Inner => vec![],
                    ast::JoinConstraint::None => {
                        return Err(SqlError::at(
                            join.relation.span(),
                            "an outer join needs ON (its condition decides which rows are \
                             padded with nulls)",
                        ));
                    }
                    _ => {
                        return Err(unsupported(
                            join.relation.span(),
                            "JOIN ... USING/NATURAL (write ON a.x = b.x)",
                        ));
                    }
                };
                let left = self.factor(&one.relation)?;
                let right = self.factor(&join.relation)?;
                Ok(From::Two(left, right, on, mode))
            }
            [a, b] if a.joins.is_empty() && b.joins.is_empty() => {
                let left = self.factor(&a.relation)?;
                let right = self.factor(&b.relation)?;
                Ok(From::Two(left, right, vec![], OuterMode::Inner))
            }
            _ => Err(SqlError::at(
                span,
                "a SELECT joins at most two relations; nest the others in a subquery",
            )),
        }
    }

    /// One relation of FROM: a node of the job, a subquery or a window TVF.
    pub(super) fn factor(&mut self, factor: &ast::TableFactor) -> Result<Side, SqlError> {
        match factor {
            ast::TableFactor::Table {
                name,
                alias,
                args: None,
                ..
            } => {
                let written = name.to_string();
                let parts: Vec<String> = name
                    .0
                    .iter()
                    .map(|p| p.as_ident().map(|i| i.value.clone()).unwrap_or_default())
                    .collect();
                let rel = self.input(&parts, name.span())?;
                let alias = match alias {
                    Some(a) => a.name.value.clone(),
                    None => parts.last().cloned().unwrap_or(written),
                };
                Ok(Side { alias, rel })
            }
            ast::TableFactor::Derived {
                lateral: false,
                subquery,
                alias,
                ..
            } => {
                let rel = self.query(subquery)?;
                let alias = alias
                    .as_ref()
                    .map(|a| a.name.value.clone())
                    .unwrap_or_else(|| "t".to_string());
                Ok(Side { alias, rel })
            }
            ast::TableFactor::TableFunction { expr, alias } => {
                let (side, alias_default) = self.tvf(expr)?;
                let alias = alias
                    .as_ref()
                    .map(|a| a.name.value.clone())
                    .unwrap_or(alias_default);
                Ok(Side { alias, rel: side })
            }
            other => Err(unsupported(
                other.span(),
                &format!("`{}` in FROM", text_head(&other.to_string())),
            )),
        }
    }

    /// `TUMBLE(TABLE t, DESCRIPTOR(c), size)`, `HOP(TABLE t, DESCRIPTOR(c), slide, size)`,
    /// `SESSION(TABLE t [PARTITION BY k], DESCRIPTOR(c), gap)`.
    fn tvf(&mut self, expr: &Expr) -> Result<(Rel, String), SqlError> {
        let Expr::Function(f) = expr else {
            return Err(SqlError::at(
                expr.span(),
                "expected a window function: TUMBLE, HOP or SESSION",
            ));
        };
        let name = call_name(f);
        let args = call_args(f)?;
        let mut args: Vec<&Expr> = args
            .into_iter()
            .map(|a| a.ok_or_else(|| SqlError::at(f.name.span(), "`*` is not an argument here")))
            .collect::<Result<_, _>>()?;
        if args.is_empty() {
            return Err(SqlError::at(f.name.span(), format!("{name} needs TABLE t")));
        }
        let table = args.remove(0);
        let parts: Vec<String> = match table {
            Expr::Identifier(i) => vec![i.value.clone()],
            Expr::CompoundIdentifier(p) => p.iter().map(|i| i.value.clone()).collect(),
            other => {
                return Err(SqlError::at(
                    other.span(),
                    format!("{name}'s first argument is `TABLE name` (a node of the job)"),
                ));
            }
        };
        let mut rel = self.input(&parts, table.span())?;
        let side = Side {
            alias: String::new(),
            rel: rel.clone(),
        };
        let scope = Scope::One(&side);
        let mut partition = Vec::new();
        if let Some(Expr::Function(p)) = args.first()
            && call_name(p) == "partition"
        {
            let keys: Vec<&Expr> = call_args(p)?.into_iter().flatten().collect();
            partition = plain_columns(&scope, keys, "PARTITION BY")?;
            args.remove(0);
        }
        let descriptor = match args.first() {
            Some(Expr::Function(d)) if call_name(d) == "descriptor" => {
                match plain_columns(&scope, call_args(d)?.into_iter().flatten(), "DESCRIPTOR")?
                    .as_slice()
                {
                    [c] => c.clone(),
                    _ => {
                        return Err(SqlError::at(
                            d.name.span(),
                            "DESCRIPTOR names one column: DESCRIPTOR(dateTime)",
                        ));
                    }
                }
            }
            _ => {
                return Err(SqlError::at(
                    f.name.span(),
                    format!("{name}'s second argument is DESCRIPTOR(time column)"),
                ));
            }
        };
        let durations: Vec<i64> = args[1..]
            .iter()
            .map(|a| text::interval_millis(a))
            .collect::<Result<_, _>>()?;
        let ms = |v: i64| HumanDuration(std::time::Duration::from_millis(v.max(0) as u64));
        let window = match (name.as_str(), durations.as_slice()) {
            ("tumble", [size]) => WindowSpec::Tumbling { size: ms(*size) },
            ("hop", [slide, size]) => WindowSpec::Sliding {
                size: ms(*size),
                slide: ms(*slide),
            },
            ("session", [gap]) => WindowSpec::Session { gap: ms(*gap) },
            ("cumulate", _) => {
                return Err(unsupported(f.name.span(), "CUMULATE windows"));
            }
            (other, _) => {
                let usage = match other {
                    "tumble" => "TUMBLE(TABLE t, DESCRIPTOR(time), size)".to_string(),
                    "hop" => "HOP(TABLE t, DESCRIPTOR(time), slide, size)".to_string(),
                    "session" => {
                        "SESSION(TABLE t [PARTITION BY k], DESCRIPTOR(time), gap)".to_string()
                    }
                    _ => format!("`{name}` is not a window function: use TUMBLE, HOP or SESSION"),
                };
                return Err(SqlError::at(f.name.span(), usage));
            }
        };
        if !partition.is_empty() && !matches!(window, WindowSpec::Session { .. }) {
            return Err(SqlError::at(
                f.name.span(),
                "PARTITION BY is for SESSION windows; group by the key instead",
            ));
        }
        self.append_only(&rel, f.name.span(), "a window")?;
        rel.tvf = Some(Tvf {
            window,
            time: descriptor,
            partition,
            span: f.name.span(),
        });
        Ok((rel, parts.last().cloned().unwrap_or_default()))
    }

    /// A relation as a node of its own columns: a pending window TVF applied, the planner's
    /// own columns left out (the inputs of a union must have the same columns).
    fn settled(&mut self, rel: Rel) -> Result<Rel, SqlError> {
        let rel = if rel.tvf.is_some() {
            self.window_rows(Side {
                alias: String::new(),
                rel,
            })?
            .rel
        } else {
            rel
        };
        if rel.visible().count() == rel.cols.len() {
            return Ok(rel);
        }
        let columns: IndexMap<String, String> =
            rel.visible().map(|c| (c.to_string(), column(c))).collect();
        self.final_map(
            Side {
                alias: String::new(),
                rel,
            },
            columns,
            Span::empty(),
        )
    }

    pub(super) fn append_only(&self, rel: &Rel, span: Span, what: &str) -> Result<(), SqlError> {
        if let Some(at) = rel.updating {
            return Err(SqlError::at(
                span,
                format!(
                    "{what} reads an updating stream (the running GROUP BY or Top-N at {}): \
                     joins, windows and OVER take append-only input (a filter, a projection, \
                     another GROUP BY or a Top-N without a window may read it); aggregate in \
                     a window instead",
                    self.describe(at)
                ),
            ));
        }
        if let Some(rank) = &rel.rank {
            return Err(SqlError::at(
                rank.span,
                format!(
                    "the rank column `{}` must be filtered in the enclosing query (`WHERE {} <= N`): \
                     that makes it a Top-N",
                    rank.column, rank.column
                ),
            ));
        }
        Ok(())
    }

    /// WHERE conjuncts over one relation: a `filter` node.
    pub(super) fn filter(&mut self, mut side: Side, wheres: Vec<Expr>) -> Result<Side, SqlError> {
        if wheres.is_empty() {
            return Ok(side);
        }
        // Over an updating stream too: a filter passes each row's kind, and an update's old
        // and new versions are each kept or dropped by the condition.
        let span = wheres[0].span();
        let mut rendered = Vec::new();
        let mut spans = Vec::new();
        for w in &wheres {
            spans.push(w.span());
            if let Some(tvf) = &side.rel.tvf {
                let refs = super::rel::referenced(&Scope::One(&side), w)?;
                if refs.iter().any(|(_, c)| is_window_col(c))
                    && side.rel.column("window_start").is_none()
                {
                    return Err(SqlError::at(
                        w.span(),
                        format!(
                            "a condition on window_start/window_end is applied after the window \
                             ({}): filter in an enclosing query",
                            self.describe(tvf.span)
                        ),
                    ));
                }
            }
            rendered.push(Scope::One(&side).render(w)?);
        }
        let predicate = rendered.join(" AND ");
        let located: Vec<(String, Span)> = rendered.iter().cloned().zip(spans).collect();
        self.emit(
            "filter",
            TransformSpec::Filter(FilterSpec {
                from: side.rel.from.clone(),
                predicate,
                parallelism: self.parallelism,
            }),
            span,
        )
        .map_err(|e| first_bad(&side.rel, &located).unwrap_or(e))?;
        side.rel = side.rel.with_from(self.last());
        Ok(side)
    }

    /// Everything after FROM and WHERE over one relation.
    pub(super) fn after_from(
        &mut self,
        side: Side,
        group_by: &[Expr],
        p: &Projection,
        s: &ast::Select,
    ) -> Result<Rel, SqlError> {
        let span = s.select_token.0.span;
        if !group_by.is_empty() || p.has_aggregates {
            if p.has_window_functions {
                return Err(unsupported(span, "a window function beside GROUP BY"));
            }
            return self.group(side, group_by, p, s);
        }
        if s.having.is_some() {
            return Err(SqlError::at(span, "HAVING needs GROUP BY"));
        }
        if let Some(over) = &p.over {
            return self.over(side, p, over.clone());
        }
        if side.rel.updating.is_none() {
            self.append_only(&side.rel, span, "SELECT")?;
        }
        self.project(side, p)
    }

    /// The columns a TUMBLE adds, computed by a `map` for a consumer that reads the rows
    /// themselves (a Top-N per window, a filter, a projection).
    pub(super) fn window_rows(&mut self, side: Side) -> Result<Side, SqlError> {
        let Some(tvf) = side.rel.tvf.clone() else {
            return Ok(side);
        };
        let WindowSpec::Tumbling { size } = tvf.window else {
            return Err(SqlError::at(
                tvf.span,
                "HOP and SESSION windows are supported under GROUP BY window_start, window_end \
                 (a window aggregate) and in window joins; a row belongs to several HOP windows \
                 and to a session only once it closes",
            ));
        };
        let size = size.as_millis_i64();
        let mut columns = IndexMap::new();
        for name in side.rel.visible() {
            columns.insert(name.to_string(), column(name));
        }
        let time = column(&tvf.time);
        columns.insert(
            "window_start".to_string(),
            format!("date_bin(INTERVAL '{size}' MILLISECOND, {time})"),
        );
        columns.insert(
            "window_end".to_string(),
            format!(
                "date_bin(INTERVAL '{size}' MILLISECOND, {time}) + INTERVAL '{size}' MILLISECOND"
            ),
        );
        let schema = self.emit(
            "window",
            TransformSpec::Map(MapSpec {
                from: side.rel.from.clone(),
                columns,
                parallelism: self.parallelism,
            }),
            tvf.span,
        )?;
        let mut rel = Rel::new(self.last(), &schema, side.rel.time.clone());
        rel.window = Some(WindowCols::named(true));
        Ok(Side {
            alias: side.alias,
            rel,
        })
    }

    /// The SELECT list over one relation (no aggregates): a `map`, unless it would copy
    /// every column as it is. A rank column becomes a pending Top-N. Over a TUMBLE, the
    /// window's columns are computed in the same `map` when the list selects them as they are.
    fn project(&mut self, side: Side, p: &Projection) -> Result<Rel, SqlError> {
        let tumble = match &side.rel.tvf {
            Some(Tvf {
                window: WindowSpec::Tumbling { size },
                time,
                ..
            }) => Some((size.as_millis_i64(), time.clone())),
            _ => None,
        };
        if side.rel.tvf.is_some() && (tumble.is_none() || self.window_in_expressions(&side, p)?) {
            let side = self.window_rows(side)?;
            return self.project(side, p);
        }
        let window_value = |c: &str| -> Option<String> {
            let (size, time) = tumble.as_ref()?;
            let start = format!("date_bin(INTERVAL '{size}' MILLISECOND, {})", column(time));
            if same_name(c, "window_start") {
                Some(start)
            } else if same_name(c, "window_end") {
                Some(format!("{start} + INTERVAL '{size}' MILLISECOND"))
            } else {
                None
            }
        };
        let scope = Scope::One(&side);
        let mut columns: IndexMap<String, String> = IndexMap::new();
        let mut located: Vec<(String, Span)> = Vec::new();
        let mut rank = None;
        for item in &p.items {
            match item {
                Item::Star(qualifier) => {
                    if let Some(q) = qualifier
                        && !same_name(q, &side.alias)
                    {
                        return Err(SqlError::at(
                            p.span,
                            format!("`{q}.*` names no relation of this FROM"),
                        ));
                    }
                    for c in side.rel.visible() {
                        columns.insert(c.to_string(), column(c));
                    }
                    for w in ["window_start", "window_end"] {
                        if let Some(v) = window_value(w) {
                            columns.insert(w.to_string(), v);
                        }
                    }
                }
                Item::Expr { expr, name } => {
                    if let Some(r) = rank_call(expr)? {
                        rank = Some(self.pending_rank(&side, r, name.clone(), expr.span())?);
                        continue;
                    }
                    let name = name.clone().unwrap_or_else(|| default_name(expr));
                    let value = match super::rel::plain(&scope, expr)? {
                        Some((_, c))
                            if side.rel.column(&c).is_none() && window_value(&c).is_some() =>
                        {
                            window_value(&c).unwrap_or_default()
                        }
                        _ => scope.render(expr)?,
                    };
                    located.push((value.clone(), expr.span()));
                    if columns.insert(name.clone(), value).is_some() {
                        return Err(SqlError::at(
                            expr.span(),
                            format!("the column `{name}` is selected twice: name one with AS"),
                        ));
                    }
                }
            }
        }
        // A TUMBLE's end determines its start: a Top-N partitioned by both keys by the end
        // alone when the start is not selected (one column less to compute, hash and keep).
        let start_by_end = tumble.is_some()
            && rank.as_ref().is_some_and(|r| {
                r.partition.iter().any(|c| c == "window_end")
                    && r.partition.iter().any(|c| c == "window_start")
            })
            && side.rel.column("window_start").is_none()
            && !window_value("window_start").is_some_and(|v| columns.values().any(|x| *x == v));
        // A Top-N needs its partition, order and firing columns even when not selected.
        if let Some(rank) = &rank {
            let mut needs = rank_needs(&side.rel, rank);
            for c in rank.partition.iter().chain(&rank.order) {
                let c = c.split(' ').next().unwrap_or(c);
                if window_value(c).is_some()
                    && side.rel.column(c).is_none()
                    && !needs.iter().any(|n| n == c)
                    && !(start_by_end && c == "window_start")
                {
                    needs.push(c.to_string());
                }
            }
            for c in needs {
                let value = match window_value(&c) {
                    Some(v) if side.rel.column(&c).is_none() => v,
                    _ => column(&c),
                };
                if !columns.values().any(|v| *v == value) {
                    columns.insert(format!("{HIDDEN}{c}"), value);
                }
            }
        }
        let identity = columns.len() == side.rel.cols.len()
            && columns
                .iter()
                .zip(&side.rel.cols)
                .all(|((k, v), (c, _))| k == c && v == &column(c));
        let mut rel = if identity {
            let mut rel = side.rel.clone();
            rel.tvf = None;
            rel
        } else {
            let schema = self
                .emit(
                    "project",
                    TransformSpec::Map(MapSpec {
                        from: side.rel.from.clone(),
                        columns: columns.clone(),
                        parallelism: self.parallelism,
                    }),
                    p.span,
                )
                .map_err(|e| first_bad(&side.rel, &located).unwrap_or(e))?;
            let mut rel = Rel::new(self.last(), &schema, None);
            carry_properties(&side.rel, &mut rel, &columns);
            if tumble.is_some() {
                let holding = |w: &str| {
                    let v = window_value(w)?;
                    columns
                        .iter()
                        .find(|(_, x)| **x == v)
                        .map(|(k, _)| k.clone())
                };
                let start = holding("window_start");
                let end = holding("window_end");
                if let (Some(start), Some(end)) = (start.clone().or(end.clone()), end)
                    && (start != end || start_by_end)
                {
                    rel.window = Some(WindowCols {
                        start,
                        end,
                        rows: true,
                    });
                }
            }
            rel
        };
        if let Some(mut r) = rank {
            let name_of = |c: &str| -> String {
                if identity {
                    return c.to_string();
                }
                let c = if start_by_end && c == "window_start" {
                    "window_end"
                } else {
                    c
                };
                let value = match window_value(c) {
                    Some(v) if side.rel.column(c).is_none() => v,
                    _ => column(c),
                };
                columns
                    .iter()
                    .find(|(_, v)| **v == value)
                    .map(|(k, _)| k.clone())
                    .unwrap_or_else(|| c.to_string())
            };
            let mut partition: Vec<String> = Vec::new();
            for c in &r.partition {
                let n = name_of(c);
                if !partition.contains(&n) {
                    partition.push(n);
                }
            }
            r.partition = partition;
            r.order = r
                .order
                .iter()
                .map(|o| {
                    let (c, dir) = o.split_once(' ').unwrap_or((o, ""));
                    format!("{} {dir}", column(&name_of(c)))
                        .trim_end()
                        .to_string()
                })
                .collect();
            rel.rank = Some(r);
        }
        Ok(rel)
    }

    /// Whether an item of the list computes with a window column (rather than selecting it
    /// as it is), which needs the columns first.
    fn window_in_expressions(&self, side: &Side, p: &Projection) -> Result<bool, SqlError> {
        let scope = Scope::One(side);
        for item in &p.items {
            let Item::Expr { expr, .. } = item else {
                continue;
            };
            if rank_call(expr)?.is_some() || super::rel::plain(&scope, expr)?.is_some() {
                continue;
            }
            if super::rel::referenced(&scope, expr)?
                .iter()
                .any(|(_, c)| is_window_col(c) && side.rel.column(c).is_none())
            {
                return Ok(true);
            }
        }
        Ok(false)
    }

    pub(super) fn pending_rank(
        &mut self,
        side: &Side,
        call: RankCall<'_>,
        name: Option<String>,
        span: Span,
    ) -> Result<PendingRank, SqlError> {
        let Some(column) = name else {
            return Err(SqlError::at(
                span,
                "name the rank: ROW_NUMBER() OVER (...) AS rn",
            ));
        };
        let scope = Scope::One(side);
        let partition = plain_columns(&scope, &call.spec.partition_by, "PARTITION BY")?;
        let columns = plain_columns(
            &scope,
            call.spec.order_by.iter().map(|o| &o.expr),
            "ORDER BY",
        )?;
        let order: Vec<String> = columns
            .into_iter()
            .zip(&call.spec.order_by)
            .map(|(c, o)| match o.options.sort {
                Some(ast::OrderBySort::Desc) => format!("{c} DESC"),
                Some(ast::OrderBySort::Asc) => format!("{c} ASC"),
                _ => c,
            })
            .collect();
        if order.is_empty() {
            return Err(SqlError::at(span, "a rank needs ORDER BY"));
        }
        if call.spec.window_frame.is_some() {
            return Err(SqlError::at(span, "a rank takes no frame (ROWS/RANGE)"));
        }
        let by_time_desc = match (&call.spec.order_by[..], &order[..]) {
            ([by], [_]) => {
                matches!(by.options.sort, Some(ast::OrderBySort::Desc))
                    && side.rel.time.is_some()
                    && side.rel.time == plain(&scope, &by.expr)?.map(|(_, c)| c)
            }
            _ => false,
        };
        Ok(PendingRank {
            column,
            partition,
            order,
            with_ties: call.with_ties,
            by_time_desc,
            span,
        })
    }

    /// `WHERE rn <= N` over a relation with a pending rank: a `top-n` fired when the window
    /// (or the time bound) of its partition closes, or, for any other partition, a running
    /// `top-n` that emits its rows' changes (over an append-only or an updating input). The
    /// rank is a column of its rows when the query reads it (`SELECT *` does), as Flink emits
    /// the rank number only then; a `ROW_NUMBER() ... <= 1` by the time attribute `DESC` whose
    /// rank is not read is Flink's deduplication keeping the last row, where of rows with equal
    /// times the last to arrive wins.
    fn rank_filter(
        &mut self,
        side: Side,
        wheres: &mut Vec<Expr>,
        p: &Projection,
    ) -> Result<Side, SqlError> {
        let Some(rank) = side.rel.rank.clone() else {
            return Ok(side);
        };
        let mut limit = None;
        let mut rest = Vec::new();
        for w in wheres.drain(..) {
            match (limit, rank_limit(&w, &rank.column)) {
                (None, Some(n)) => limit = Some((n, w.span())),
                _ => rest.push(w),
            }
        }
        *wheres = rest;
        let Some((n, at)) = limit else {
            return Err(SqlError::at(
                rank.span,
                format!(
                    "filter the rank in the enclosing query (`WHERE {} <= N`): weir plans \
                     ROW_NUMBER()/RANK() as a Top-N",
                    rank.column
                ),
            ));
        };
        let Some(n) = u32::try_from(n)
            .ok()
            .filter(|n| (1..=MAX_TOP_N).contains(n))
        else {
            return Err(SqlError::at(
                at,
                format!("a Top-N keeps 1 to {MAX_TOP_N} rows: rn <= N with 1 ≤ N ≤ {MAX_TOP_N}"),
            ));
        };
        let rel = &side.rel;
        let window = rel
            .window
            .as_ref()
            .filter(|w| rank.partition.contains(&w.start) && rank.partition.contains(&w.end));
        // A window's or a bound's partition is final at a known time: fired then, append-only.
        // Any other partition never is: a running Top-N, whose rows are updated for good.
        let fire_at = if let Some(w) = window {
            Some(if w.rows {
                format!("{} - INTERVAL '1' MILLISECOND", column(&w.end))
            } else {
                column(&w.end)
            })
        } else {
            rel.bound
                .as_ref()
                .filter(|b| b.keys.iter().all(|k| rank.partition.contains(k)))
                .map(|bound| column(&bound.column))
        };
        let running = fire_at.is_none();
        let emit_rank = reads_rank(&rank.column, wheres, p);
        let tie_break = if !emit_rank && !rank.with_ties && n == 1 && rank.by_time_desc {
            TieBreak::Latest
        } else {
            TieBreak::Earliest
        };
        let keyed = self.key_by(&side.rel, &rank.partition, rank.span)?;
        let visible: Vec<String> = side.rel.visible().map(str::to_string).collect();
        let hidden = visible.len() != side.rel.cols.len();
        let schema = self.emit(
            "top-n",
            TransformSpec::TopN(TopNSpec {
                from: keyed,
                order_by: rank.order.clone(),
                n,
                with_ties: rank.with_ties,
                fire_at,
                columns: hidden.then_some(visible.clone()),
                rank_column: emit_rank.then(|| rank.column.clone()),
                tie_break,
                parallelism: self.parallelism,
            }),
            rank.span,
        )?;
        let mut rel = Rel::new(self.last(), &schema, None);
        rel.time = side.rel.time.clone().filter(|t| rel.column(t).is_some());
        rel.updating = side.rel.updating.or(running.then_some(rank.span));
        rel.window = side
            .rel
            .window
            .clone()
            .filter(|w| rel.type_of(&w.start).is_some() && rel.type_of(&w.end).is_some());
        Ok(Side {
            alias: side.alias,
            rel,
        })
    }

    /// A `key-by` on plain columns.
    pub(super) fn key_by(
        &mut self,
        rel: &Rel,
        keys: &[String],
        span: Span,
    ) -> Result<String, SqlError> {
        let keys = if keys.is_empty() {
            // One group: every row to one subtask.
            vec!["0 AS __all".to_string()]
        } else {
            keys.iter().map(|k| column(k)).collect()
        };
        self.emit(
            "key-by",
            TransformSpec::KeyBy(KeyBySpec {
                from: rel.from.clone(),
                keys,
            }),
            span,
        )?;
        Ok(self.last())
    }

    /// GROUP BY (or aggregates without it): `aggregate`, or `window-aggregate` when the input
    /// is a window TVF grouped by its `window_start, window_end`.
    fn group(
        &mut self,
        side: Side,
        group_by: &[Expr],
        p: &Projection,
        s: &ast::Select,
    ) -> Result<Rel, SqlError> {
        let span = s.select_token.0.span;
        if side.rel.updating.is_none() {
            // Only the rank column check: a running GROUP BY takes updates.
            self.append_only(&side.rel, span, "GROUP BY")?;
        }
        let scope = Scope::One(&side);
        let mut keys: Vec<String> = Vec::new();
        let mut window_keys = 0;
        for g in group_by {
            let (qualifier, name) = match g {
                Expr::Identifier(i) => (None, i),
                Expr::CompoundIdentifier(parts) if parts.len() == 2 => (Some(&parts[0]), &parts[1]),
                other => {
                    return Err(SqlError::at(
                        other.span(),
                        "GROUP BY takes columns (compute an expression in a subquery first)",
                    ));
                }
            };
            let c = scope.resolve(qualifier, name)?.1;
            if is_window_col(&c) && side.rel.tvf.is_some() {
                window_keys += 1;
            } else if !keys.contains(&c) {
                keys.push(c);
            }
        }
        let windowed = match &side.rel.tvf {
            Some(tvf) if window_keys == 2 => Some(tvf.clone()),
            Some(tvf) => {
                return Err(SqlError::at(
                    tvf.span,
                    "over a window TVF, GROUP BY window_start, window_end (and the keys)",
                ));
            }
            None => None,
        };
        if let Some(tvf) = &windowed {
            for k in &tvf.partition {
                if !keys.contains(k) {
                    return Err(SqlError::at(
                        tvf.span,
                        format!("the session's PARTITION BY `{k}` must be in GROUP BY too"),
                    ));
                }
            }
            if matches!(tvf.window, WindowSpec::Session { .. }) && keys.is_empty() {
                return Err(SqlError::at(
                    tvf.span,
                    "a SESSION window needs a key: SESSION(TABLE t PARTITION BY k, ...) and \
                     GROUP BY k, window_start, window_end",
                ));
            }
        }
        // The aggregate calls, named; the SELECT list and HAVING read them as columns.
        let mut calls: IndexMap<String, String> = IndexMap::new();
        let mut outputs: Vec<(String, Expr)> = Vec::new();
        for item in &p.items {
            let Item::Expr { expr, name } = item else {
                return Err(SqlError::at(p.span, "`*` is not allowed with GROUP BY"));
            };
            let name = name.clone().unwrap_or_else(|| default_name(expr));
            let expr = integer_averages(&scope, expr);
            // An item that is one aggregate call takes the item's name.
            let direct = matches!(&expr, Expr::Function(f) if is_aggregate(f));
            let rewritten =
                self.aggregate_items(&scope, &expr, &mut calls, direct.then_some(&name))?;
            outputs.push((name, rewritten));
        }
        let having = match &s.having {
            Some(h) => {
                let h = integer_averages(&scope, h);
                Some(self.aggregate_items(&scope, &h, &mut calls, None)?)
            }
            None => None,
        };
        if calls.is_empty() && windowed.is_some() {
            // The distinct keys of each window (Nexmark's q8): a window aggregate emits one row
            // per key and window with some aggregate, which nothing reads.
            calls.insert(format!("{HIDDEN}agg0"), "count(*)".to_string());
        }
        // A GROUP BY of a window aggregate's rows by their window (Flink's cascaded window
        // aggregate, Nexmark q5's maximum of the windows' counts): a window aggregate too, so
        // each window is emitted once and its state freed, rather than a running aggregate.
        let cascade = match (&side.rel.tvf, &side.rel.window) {
            (None, Some(w)) if !w.rows && keys.contains(&w.start) && keys.contains(&w.end) => {
                Some(w.clone())
            }
            _ => None,
        };
        let (keyed, windowed) = match &cascade {
            Some(w) => (
                self.cascade_keys(&side.rel, &keys, w, span)?,
                Some(cascade_window(span)),
            ),
            None => (self.key_by(&side.rel, &keys, span)?, windowed),
        };
        let (kind, spec) = match &windowed {
            Some(tvf) => (
                "window-aggregate",
                TransformSpec::WindowAggregate(WindowAggregateSpec {
                    from: keyed,
                    time: column(&tvf.time),
                    window: tvf.window.clone(),
                    aggregates: calls,
                    allowed_lateness: HumanDuration::ZERO,
                    queryable: None,
                    parallelism: self.parallelism,
                }),
            ),
            None => (
                "aggregate",
                TransformSpec::Aggregate(AggregateSpec {
                    from: keyed,
                    aggregates: calls,
                    // The job's `mini-batch`, as for its `state.ttl`, applies when planned.
                    mini_batch: None,
                    state_ttl: None,
                    queryable: None,
                    parallelism: self.parallelism,
                }),
            ),
        };
        let schema = self.emit(kind, spec, span)?;
        let mut rel = Rel::new(self.last(), &schema, None);
        if windowed.is_some() {
            rel.window = Some(WindowCols::named(false));
        } else {
            rel.updating = Some(span);
        }
        if let Some(w) = &cascade {
            rel = self.cascade_bounds(rel, w, span)?;
        }
        let after = Side {
            alias: side.alias.clone(),
            rel,
        };
        let after = match having {
            Some(h) => {
                let predicate = Scope::One(&after).render(&h)?;
                self.emit(
                    "having",
                    TransformSpec::Filter(FilterSpec {
                        from: after.rel.from.clone(),
                        predicate,
                        parallelism: self.parallelism,
                    }),
                    span,
                )?;
                Side {
                    alias: after.alias.clone(),
                    rel: after.rel.with_from(self.last()),
                }
            }
            None => after,
        };
        // The SELECT list over the aggregate's output: keys, window, aggregates.
        let mut columns = IndexMap::new();
        for (name, e) in &outputs {
            columns.insert(name.clone(), Scope::One(&after).render(e)?);
        }
        self.final_map(after, columns, p.span)
    }

    /// A cascaded window aggregate's input: its rows stamped with their window's time (its
    /// end - 1 ms, as Flink's `window_time`: the rows of a window are emitted before the
    /// watermark that passes it, so none is late), keyed by the GROUP BY with the window's
    /// bounds renamed (the window aggregate names its own `window_start`, `window_end`).
    fn cascade_keys(
        &mut self,
        rel: &Rel,
        keys: &[String],
        w: &WindowCols,
        span: Span,
    ) -> Result<String, SqlError> {
        let mut columns: IndexMap<String, String> = rel
            .cols
            .iter()
            .map(|(c, _)| (c.clone(), column(c)))
            .collect();
        columns.insert(
            format!("{HIDDEN}wt"),
            format!("{} - INTERVAL '1' MILLISECOND", column(&w.end)),
        );
        self.emit_map("window-time", &rel.from, columns, span)?;
        let keys = keys
            .iter()
            .map(|k| {
                if *k == w.start {
                    format!("{} AS {HIDDEN}ws", column(k))
                } else if *k == w.end {
                    format!("{} AS {HIDDEN}we", column(k))
                } else {
                    column(k)
                }
            })
            .collect();
        self.emit(
            "key-by",
            TransformSpec::KeyBy(KeyBySpec {
                from: self.last(),
                keys,
            }),
            span,
        )?;
        Ok(self.last())
    }

    /// A cascaded window aggregate's output with its input's window bounds back under their
    /// names, in place of the 1 ms window it was computed in.
    fn cascade_bounds(&mut self, rel: Rel, w: &WindowCols, span: Span) -> Result<Rel, SqlError> {
        let mut columns: IndexMap<String, String> = IndexMap::new();
        for (c, _) in &rel.cols {
            if is_window_col(c) {
                continue;
            }
            let name = if *c == format!("{HIDDEN}ws") {
                w.start.clone()
            } else if *c == format!("{HIDDEN}we") {
                w.end.clone()
            } else {
                c.clone()
            };
            columns.insert(name, column(c));
        }
        let schema = self.emit_map("window-bounds", &rel.from, columns, span)?;
        let mut out = Rel::new(self.last(), &schema, None);
        out.window = Some(WindowCols {
            start: w.start.clone(),
            end: w.end.clone(),
            rows: false,
        });
        Ok(out)
    }

    /// Takes the aggregate calls out of `expr`, naming each (an item that is one call gets
    /// the item's name), and returns `expr` over those names.
    fn aggregate_items(
        &mut self,
        scope: &Scope<'_>,
        expr: &Expr,
        calls: &mut IndexMap<String, String>,
        name: Option<&String>,
    ) -> Result<Expr, SqlError> {
        let mut replace = |f: &ast::Function| -> Result<Option<String>, SqlError> {
            if !is_aggregate(f) {
                return Ok(None);
            }
            let mut call = f.clone();
            call.name = ast::ObjectName::from(vec![ast::Ident::new(call_name(f))]);
            let text = call.to_string();
            if let Some((n, _)) = calls.iter().find(|(_, t)| **t == text) {
                return Ok(Some(n.clone()));
            }
            let n = match name {
                Some(n) if !calls.contains_key(n) => n.clone(),
                _ => format!("{HIDDEN}agg{}", calls.len()),
            };
            calls.insert(n.clone(), text);
            Ok(Some(n))
        };
        scope.rewrite(expr, &mut replace)
    }

    /// A `map` to `columns`, unless they are the relation's own columns in order.
    fn final_map(
        &mut self,
        side: Side,
        columns: IndexMap<String, String>,
        span: Span,
    ) -> Result<Rel, SqlError> {
        let identity = columns.len() == side.rel.cols.len()
            && columns
                .iter()
                .zip(&side.rel.cols)
                .all(|((k, v), (c, _))| k == c && v == &column(c));
        if identity {
            return Ok(side.rel);
        }
        let schema = self.emit(
            "project",
            TransformSpec::Map(MapSpec {
                from: side.rel.from.clone(),
                columns: columns.clone(),
                parallelism: self.parallelism,
            }),
            span,
        )?;
        let mut rel = Rel::new(self.last(), &schema, None);
        carry_properties(&side.rel, &mut rel, &columns);
        Ok(rel)
    }

    /// Aggregates `OVER (PARTITION BY ... ORDER BY time ROWS BETWEEN n PRECEDING AND CURRENT
    /// ROW)`: an `over-aggregate`.
    fn over(&mut self, side: Side, p: &Projection, over: ast::WindowSpec) -> Result<Rel, SqlError> {
        let span = p.span;
        self.append_only(&side.rel, span, "OVER")?;
        let side = match &side.rel.tvf {
            Some(_) => self.window_rows(side)?,
            None => side,
        };
        let scope = Scope::One(&side);
        let partition = plain_columns(&scope, &over.partition_by, "PARTITION BY")?;
        let mut order_by = Vec::new();
        for o in &over.order_by {
            let e = scope.render(&o.expr)?;
            let dir = match o.options.sort {
                Some(ast::OrderBySort::Desc) => " DESC",
                _ => "",
            };
            order_by.push(format!("{e}{dir}"));
        }
        if order_by.is_empty() {
            return Err(SqlError::at(span, "OVER needs ORDER BY its time column"));
        }
        let rows = match &over.window_frame {
            Some(frame) if frame.units == ast::WindowFrameUnits::Rows => {
                let preceding = match &frame.start_bound {
                    ast::WindowFrameBound::Preceding(Some(n)) => text::integer(n),
                    ast::WindowFrameBound::CurrentRow => Some(0),
                    _ => None,
                };
                let ends_here = matches!(
                    frame.end_bound,
                    None | Some(ast::WindowFrameBound::CurrentRow)
                );
                match preceding {
                    Some(n) if ends_here && n < 100_000 => n as u32 + 1,
                    _ => {
                        return Err(SqlError::at(
                            span,
                            "OVER frames are ROWS BETWEEN n PRECEDING AND CURRENT ROW (n < \
                             100000): an unbounded frame keeps every row",
                        ));
                    }
                }
            }
            _ => {
                return Err(SqlError::at(
                    span,
                    "OVER needs a frame ROWS BETWEEN n PRECEDING AND CURRENT ROW (RANGE frames \
                     are not supported)",
                ));
            }
        };
        let mut calls: IndexMap<String, String> = IndexMap::new();
        let mut columns: IndexMap<String, String> = IndexMap::new();
        let mut wanted: Option<String> = None;
        for item in &p.items {
            match item {
                Item::Star(_) => {
                    for c in side.rel.visible() {
                        columns.insert(c.to_string(), column(c));
                    }
                }
                Item::Expr { expr, name } => {
                    let name = name.clone().unwrap_or_else(|| default_name(expr));
                    let expr = &integer_averages(&scope, expr);
                    let direct = matches!(expr, Expr::Function(f) if f.over.is_some());
                    let mut error = None;
                    let mut replace = |f: &ast::Function| -> Result<Option<String>, SqlError> {
                        let Some(ast::WindowType::WindowSpec(w)) = &f.over else {
                            return Ok(None);
                        };
                        let text = w.to_string();
                        match &wanted {
                            None => wanted = Some(text),
                            Some(t) if *t != text => {
                                error = Some(SqlError::at(
                                    f.name.span(),
                                    "every OVER of one SELECT must be the same window",
                                ));
                                return Ok(None);
                            }
                            Some(_) => {}
                        }
                        let mut call = f.clone();
                        call.over = None;
                        call.name = ast::ObjectName::from(vec![ast::Ident::new(call_name(f))]);
                        let text = call.to_string();
                        if let Some((n, _)) = calls.iter().find(|(_, t)| **t == text) {
                            return Ok(Some(n.clone()));
                        }
                        let n = if direct && !calls.contains_key(&name) {
                            name.clone()
                        } else {
                            format!("{HIDDEN}over{}", calls.len())
                        };
                        calls.insert(n.clone(), text);
                        Ok(Some(n))
                    };
                    let e = scope.rewrite(expr, &mut replace)?;
                    if let Some(err) = error {
                        return Err(err);
                    }
                    columns.insert(name, e.to_string());
                }
            }
        }
        let keyed = self.key_by(&side.rel, &partition, span)?;
        let schema = self.emit(
            "over-aggregate",
            TransformSpec::OverAggregate(OverAggregateSpec {
                from: keyed,
                order_by,
                rows,
                aggregates: calls,
                parallelism: self.parallelism,
            }),
            span,
        )?;
        let after = Side {
            alias: side.alias.clone(),
            rel: Rel::new(self.last(), &schema, side.rel.time.clone()),
        };
        // Column references in the items were resolved against the input; the over-aggregate
        // keeps every input column and adds the aggregates, so they read the same.
        self.final_map(after, columns, span)
    }
}

/// The first of `items` (an expression as rendered, and where the query has it) that does not
/// compile over `rel`'s columns: a type error shown at the item rather than at its clause.
fn first_bad(rel: &Rel, items: &[(String, Span)]) -> Option<SqlError> {
    let schema = arrow_schema::Schema::new(
        rel.cols
            .iter()
            .map(|(n, t)| arrow_schema::Field::new(n, t.clone(), true))
            .collect::<Vec<_>>(),
    );
    items.iter().find_map(|(text, span)| {
        crate::expr::Expr::compile(text, &schema)
            .err()
            .map(|e| SqlError::at(*span, e.to_string()))
    })
}

/// After a `map`: the time column, window columns and bound survive when copied as they were.
fn carry_properties(from: &Rel, to: &mut Rel, columns: &IndexMap<String, String>) {
    let copied = |c: &str| -> Option<String> {
        columns
            .iter()
            .find(|(_, v)| **v == column(c))
            .map(|(k, _)| k.clone())
    };
    to.time = from.time.as_deref().and_then(copied);
    if let Some(w) = &from.window
        && let (Some(start), Some(end)) = (copied(&w.start), copied(&w.end))
    {
        to.window = Some(WindowCols {
            start,
            end,
            rows: w.rows,
        });
    }
    if let Some(b) = &from.bound
        && let Some(c) = copied(&b.column)
    {
        let keys: Option<Vec<String>> = b.keys.iter().map(|k| copied(k)).collect();
        if let Some(keys) = keys {
            to.bound = Some(Bound { column: c, keys });
        }
    }
    to.updating = from.updating;
}

/// The columns a pending Top-N reads beyond the SELECT list.
fn rank_needs(rel: &Rel, rank: &PendingRank) -> Vec<String> {
    let mut needs: Vec<String> = rank.partition.clone();
    for o in &rank.order {
        needs.push(o.split(' ').next().unwrap_or(o).to_string());
    }
    if let Some(w) = &rel.window {
        needs.extend([w.start.clone(), w.end.clone()]);
    }
    if let Some(b) = &rel.bound {
        needs.push(b.column.clone());
        needs.extend(b.keys.iter().cloned());
    }
    if let Some(t) = &rel.time {
        needs.push(t.clone());
    }
    let mut out: Vec<String> = Vec::new();
    for n in needs {
        if rel.type_of(&n).is_some() && !out.contains(&n) {
            out.push(n);
        }
    }
    out
}

/// Whether the query reads the rank column `rank` past its filter: `*` or a mention in the
/// projection or the rest of `WHERE`.
fn reads_rank(rank: &str, wheres: &[Expr], p: &Projection) -> bool {
    let mut exprs = Vec::new();
    for item in &p.items {
        match item {
            Item::Expr { expr, .. } => exprs.push(expr),
            Item::Star(_) => return true,
        }
    }
    exprs.into_iter().chain(wheres).any(|expr| {
        ast::visit_expressions(expr, |e| {
            let named = match e {
                Expr::Identifier(i) => Some(i),
                Expr::CompoundIdentifier(parts) => parts.last(),
                _ => None,
            };
            if named.is_some_and(|i| same_name(&i.value, rank)) {
                return std::ops::ControlFlow::Break(());
            }
            std::ops::ControlFlow::Continue(())
        })
        .is_break()
    })
}

/// `rn <= 3`, `rn < 4`, `rn = 1`, `3 >= rn`: the number of rows kept.
fn rank_limit(expr: &Expr, rank: &str) -> Option<i64> {
    let Expr::BinaryOp { left, op, right } = expr else {
        return None;
    };
    let is_rank = |e: &Expr| match e {
        Expr::Identifier(i) => same_name(&i.value, rank),
        Expr::CompoundIdentifier(p) => p.last().is_some_and(|i| same_name(&i.value, rank)),
        _ => false,
    };
    use ast::BinaryOperator as B;
    if is_rank(left) {
        let n = text::integer(right)?;
        match op {
            B::LtEq => Some(n),
            B::Lt => Some(n - 1),
            B::Eq if n == 1 => Some(1),
            _ => None,
        }
    } else if is_rank(right) {
        let n = text::integer(left)?;
        match op {
            B::GtEq => Some(n),
            B::Gt => Some(n - 1),
            B::Eq if n == 1 => Some(1),
            _ => None,
        }
    } else {
        None
    }
}

pub(super) struct RankCall<'a> {
    pub spec: &'a ast::WindowSpec,
    pub with_ties: bool,
}

/// `ROW_NUMBER() OVER (...)` or `RANK() OVER (...)`.
pub(super) fn rank_call(expr: &Expr) -> Result<Option<RankCall<'_>>, SqlError> {
    let Expr::Function(f) = expr else {
        return Ok(None);
    };
    let Some(over) = &f.over else {
        return Ok(None);
    };
    let with_ties = match call_name(f).as_str() {
        "row_number" => false,
        "rank" => true,
        "dense_rank" => {
            return Err(unsupported(
                f.name.span(),
                "DENSE_RANK() (use RANK() or ROW_NUMBER())",
            ));
        }
        _ => return Ok(None),
    };
    match over {
        ast::WindowType::WindowSpec(spec) => Ok(Some(RankCall { spec, with_ties })),
        ast::WindowType::NamedWindow(_) => Err(unsupported(f.name.span(), "named windows")),
    }
}

/// What a SELECT list holds.
pub(super) struct Projection {
    pub items: Vec<Item>,
    pub has_aggregates: bool,
    pub has_window_functions: bool,
    /// The one window of aggregates OVER, if any.
    pub over: Option<ast::WindowSpec>,
    pub span: Span,
}

// A few of these live while one query is planned: boxing would only add indirection.
#[allow(clippy::large_enum_variant)]
pub(super) enum Item {
    /// `*` or `alias.*`.
    Star(Option<String>),
    Expr {
        expr: Expr,
        name: Option<String>,
    },
}

impl Projection {
    pub(super) fn of(s: &ast::Select) -> Result<Self, SqlError> {
        let span = s.select_token.0.span;
        let mut items = Vec::new();
        let mut has_aggregates = false;
        let mut has_window_functions = false;
        let mut over = None;
        for item in &s.projection {
            let (expr, name) = match item {
                ast::SelectItem::Wildcard(_) => {
                    items.push(Item::Star(None));
                    continue;
                }
                ast::SelectItem::QualifiedWildcard(
                    ast::SelectItemQualifiedWildcardKind::ObjectName(n),
                    _,
                ) => {
                    items.push(Item::Star(Some(n.to_string())));
                    continue;
                }
                ast::SelectItem::UnnamedExpr(e) => (e.clone(), None),
                ast::SelectItem::ExprWithAlias { expr, alias } => {
                    (expr.clone(), Some(alias.value.clone()))
                }
                other => return Err(unsupported(other.span(), "this select item")),
            };
            let _ = ast::visit_expressions(&expr, |e| {
                if let Expr::Function(f) = e {
                    if is_aggregate(f) {
                        has_aggregates = true;
                    }
                    if let Some(ast::WindowType::WindowSpec(w)) = &f.over {
                        has_window_functions = true;
                        if !matches!(call_name(f).as_str(), "row_number" | "rank" | "dense_rank") {
                            over.get_or_insert_with(|| w.clone());
                        }
                    }
                }
                std::ops::ControlFlow::<()>::Continue(())
            });
            items.push(Item::Expr { expr, name });
        }
        Ok(Projection {
            items,
            has_aggregates,
            has_window_functions,
            over,
            span,
        })
    }
}

/// A column's name when the query gives none: its own name for a column, else the text.
pub(super) fn default_name(expr: &Expr) -> String {
    match expr {
        Expr::Identifier(i) => i.value.clone(),
        Expr::CompoundIdentifier(p) => p.last().map(|i| i.value.clone()).unwrap_or_default(),
        other => other.to_string(),
    }
}

fn text_head(t: &str) -> String {
    t.chars().take(40).collect()
}

// One per SELECT, while it is planned.
#[allow(clippy::large_enum_variant)]
pub(super) enum From {
    One(Side),
    /// Two relations, the conjuncts of ON and the join's kind.
    Two(Side, Side, Vec<Expr>, OuterMode),
}

pub(super) enum Done {
    Planned(Rel),
    Side(Side),
}

/// `expr` with each `AVG(x)` of an INT `x` as `(SUM(x) / COUNT(x))`, typed as Flink types
/// it: the average of an integer column is of the column's type, the quotient truncated
/// toward zero (Java's integer division). A sum and a count of integers are exact where a
/// FLOAT average loses digits above 2^53 (a sum beyond INT's range fails the job with an
/// overflow, rather than give a wrong average), and both take rows back, so the same holds in
/// a running `GROUP BY` over updates. `FILTER (WHERE ...)` and `OVER (...)` go with both
/// calls; `AVG(DISTINCT x)` is left as it is (and refused where aggregates are compiled).
fn integer_averages(scope: &Scope<'_>, expr: &Expr) -> Expr {
    let mut e = expr.clone();
    let _ = ast::visit_expressions_mut(&mut e, |node| {
        let replacement = match &*node {
            Expr::Function(f) if call_name(f) == "avg" => match &f.args {
                ast::FunctionArguments::List(list)
                    if !matches!(
                        list.duplicate_treatment,
                        Some(ast::DuplicateTreatment::Distinct)
                    ) =>
                {
                    match list.args.as_slice() {
                        [ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(arg))]
                            if scope.type_of(arg) == Some(arrow_schema::DataType::Int64) =>
                        {
                            let call = |name: &str| {
                                let mut c = f.clone();
                                c.name = ast::ObjectName::from(vec![ast::Ident::new(name)]);
                                Box::new(Expr::Function(c))
                            };
                            Some(Expr::Nested(Box::new(Expr::BinaryOp {
                                left: call("sum"),
                                op: ast::BinaryOperator::Divide,
                                right: call("count"),
                            })))
                        }
                        _ => None,
                    }
                }
                _ => None,
            },
            _ => None,
        };
        if let Some(r) = replacement {
            *node = r;
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
    e
}

/// The window a cascaded window aggregate computes in: 1 ms, which holds the rows of one
/// window of its input (stamped with that window's end - 1 ms) and fires as soon as the
/// watermark passes them.
fn cascade_window(span: Span) -> Tvf {
    Tvf {
        window: WindowSpec::Tumbling {
            size: HumanDuration::from_millis(1),
        },
        time: format!("{HIDDEN}wt"),
        partition: Vec::new(),
        span,
    }
}
