//! What the planner knows about a relation while it plans a query: where its rows come from,
//! their columns, and the stream properties the next operator depends on (event time, windows,
//! a time after which rows are final, whether it is an updating stream).

use std::ops::ControlFlow;

use arrow_schema::{DataType, SchemaRef};
use sqlparser::ast::{self, Expr, Ident, Spanned};
use sqlparser::tokenizer::Span;

use super::SqlError;
use super::text::{ident, same_name};
use crate::spec::WindowSpec;

/// Columns whose names start with this are the planner's own (a Top-N's firing time, an
/// aggregate used inside an expression); `SELECT *` leaves them out.
pub(super) const HIDDEN: &str = "__";

/// A relation: the node (or `node.port`) its rows come from and what they look like.
#[derive(Clone, Debug)]
pub(super) struct Rel {
    /// What a `from:` names to read it.
    pub from: String,
    pub cols: Vec<(String, DataType)>,
    /// The event-time column, when rows still carry it unchanged.
    pub time: Option<String>,
    /// A window table-valued function applied to the rows of `from`, not planned yet: the
    /// operator that consumes it decides how (a window aggregate, a window join, or a map that
    /// adds the window's columns).
    pub tvf: Option<Tvf>,
    /// Rows carry `window_start` and `window_end`.
    pub window: Option<WindowCols>,
    /// Rows with equal `keys` are final once the watermark passes `column` (the output of a
    /// join whose one side stops matching at that time).
    pub bound: Option<Bound>,
    /// An upsert stream (a running `GROUP BY`): where it was made.
    pub updating: Option<Span>,
    /// A `ROW_NUMBER()`/`RANK()` column the enclosing query must filter on.
    pub rank: Option<PendingRank>,
    /// Qualified names of a join's output: (alias, column) → output column.
    pub qualified: Vec<(String, String, String)>,
}

#[derive(Clone, Debug)]
pub(super) struct Tvf {
    pub window: WindowSpec,
    /// The DESCRIPTOR column.
    pub time: String,
    /// `PARTITION BY` of a session window.
    pub partition: Vec<String>,
    pub span: Span,
}

/// The columns that hold each row's window, and where they came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct WindowCols {
    pub start: String,
    pub end: String,
    /// Rows of a window TVF (the window is complete once the watermark reaches its end - 1
    /// ms), rather than the output of a window aggregate or join (emitted once it passed).
    pub rows: bool,
}

impl WindowCols {
    pub(super) fn named(rows: bool) -> Self {
        WindowCols {
            start: "window_start".into(),
            end: "window_end".into(),
            rows,
        }
    }
}

#[derive(Clone, Debug)]
pub(super) struct Bound {
    pub column: String,
    pub keys: Vec<String>,
}

#[derive(Clone, Debug)]
pub(super) struct PendingRank {
    /// The rank column's name.
    pub column: String,
    pub partition: Vec<String>,
    /// `price DESC`, ...
    pub order: Vec<String>,
    /// RANK() keeps ties; ROW_NUMBER() does not.
    pub with_ties: bool,
    /// Whether the order is the time attribute alone, descending (the latest row first).
    pub by_time_desc: bool,
    pub span: Span,
}

impl Rel {
    pub(super) fn new(from: String, schema: &SchemaRef, time: Option<String>) -> Self {
        Rel {
            from,
            cols: schema
                .fields()
                .iter()
                .map(|f| (f.name().clone(), f.data_type().clone()))
                .collect(),
            time,
            tvf: None,
            window: None,
            bound: None,
            updating: None,
            rank: None,
            qualified: Vec::new(),
        }
    }

    /// The same stream properties over new rows: used after a filter (same columns).
    pub(super) fn with_from(&self, from: String) -> Self {
        Rel {
            from,
            ..self.clone()
        }
    }

    /// The column `name` refers to (exactly, else ignoring case when that is unique).
    pub(super) fn column(&self, name: &str) -> Option<&str> {
        if let Some((n, _)) = self.cols.iter().find(|(n, _)| n == name) {
            return Some(n);
        }
        let mut found = self.cols.iter().filter(|(n, _)| same_name(n, name));
        match (found.next(), found.next()) {
            (Some((n, _)), None) => Some(n),
            _ => None,
        }
    }

    /// Columns a window TVF adds, when one is pending.
    pub(super) fn has_window_column(&self, name: &str) -> bool {
        (self.tvf.is_some() || self.window.is_some())
            && (same_name(name, "window_start") || same_name(name, "window_end"))
    }

    pub(super) fn visible(&self) -> impl Iterator<Item = &str> {
        self.cols
            .iter()
            .map(|(n, _)| n.as_str())
            .filter(|n| !n.starts_with(HIDDEN))
    }

    pub(super) fn type_of(&self, name: &str) -> Option<&DataType> {
        self.cols.iter().find(|(n, _)| n == name).map(|(_, t)| t)
    }
}

/// One relation of a FROM clause under the name the query gives it.
#[derive(Clone, Debug)]
pub(super) struct Side {
    pub alias: String,
    pub rel: Rel,
}

/// Where the names of an expression are looked up.
pub(super) enum Scope<'a> {
    /// One relation: names render as its plain columns.
    One(&'a Side),
    /// The two sides of a join: names render as `alias.column`; with `windowed`, the window
    /// join's own `window_start`/`window_end` render plain.
    Two(&'a Side, &'a Side, bool),
}

impl Scope<'_> {
    fn sides(&self) -> Vec<&Side> {
        match self {
            Scope::One(a) => vec![*a],
            Scope::Two(a, b, _) => vec![*a, *b],
        }
    }

    /// Resolves a (possibly qualified) name: the index of its side and the column.
    pub(super) fn resolve(
        &self,
        qualifier: Option<&Ident>,
        name: &Ident,
    ) -> Result<(usize, String), SqlError> {
        let sides = self.sides();
        let span = name.span;
        if let Some(q) = qualifier {
            for (i, side) in sides.iter().enumerate() {
                if let Some((_, _, out)) = side
                    .rel
                    .qualified
                    .iter()
                    .find(|(a, c, _)| same_name(a, &q.value) && same_name(c, &name.value))
                {
                    return Ok((i, out.clone()));
                }
            }
            let Some(i) = sides.iter().position(|s| same_name(&s.alias, &q.value)) else {
                let known: Vec<&str> = sides.iter().map(|s| s.alias.as_str()).collect();
                return Err(SqlError::at(
                    q.span,
                    format!(
                        "`{}` names no relation of this FROM (it has {})",
                        q.value,
                        known.join(", ")
                    ),
                ));
            };
            return match sides[i].rel.column(&name.value) {
                Some(c) => Ok((i, c.to_string())),
                None if sides[i].rel.has_window_column(&name.value) => {
                    Ok((i, name.value.to_ascii_lowercase()))
                }
                None => Err(unknown_column(&name.value, &sides[i].rel, span)),
            };
        }
        let mut found = Vec::new();
        for (i, side) in sides.iter().enumerate() {
            if let Some(c) = side.rel.column(&name.value) {
                found.push((i, c.to_string()));
            } else if side.rel.has_window_column(&name.value) {
                found.push((i, name.value.to_ascii_lowercase()));
            }
        }
        if found.len() > 1 && matches!(self, Scope::Two(_, _, true)) && is_window_col(&name.value) {
            found.truncate(1);
        }
        match found.len() {
            1 => Ok(found.remove(0)),
            0 => Err(unknown_column(&name.value, &sides[0].rel, span)),
            _ => Err(SqlError::at(
                span,
                format!(
                    "`{}` is a column of both {} and {}: qualify it (`{}.{}`)",
                    name.value, sides[0].alias, sides[1].alias, sides[0].alias, name.value
                ),
            )),
        }
    }

    /// `expr` with every column reference resolved: plain names for one relation,
    /// `alias.column` for two. Subqueries, aggregates and window functions are refused here
    /// (the planner takes them out before rendering what is left).
    pub(super) fn render(&self, expr: &Expr) -> Result<String, SqlError> {
        Ok(self.rewrite(expr, &mut |_| Ok(None))?.to_string())
    }

    /// The type of `expr` over one relation's columns; `None` over two, or when it does not
    /// compile (which the node made of it reports, at its clause).
    pub(super) fn type_of(&self, expr: &Expr) -> Option<DataType> {
        let Scope::One(side) = self else {
            return None;
        };
        let text = self.render(expr).ok()?;
        let schema = arrow_schema::Schema::new(
            side.rel
                .cols
                .iter()
                .map(|(n, t)| arrow_schema::Field::new(n, t.clone(), true))
                .collect::<Vec<_>>(),
        );
        crate::expr::Expr::compile(&text, &schema)
            .ok()
            .map(|e| e.data_type().clone())
    }

    /// Like [`Scope::render`], but `replace` may substitute a call (an aggregate, a window
    /// function) by a column before it is refused.
    pub(super) fn rewrite(
        &self,
        expr: &Expr,
        replace: &mut dyn FnMut(&ast::Function) -> Result<Option<String>, SqlError>,
    ) -> Result<Expr, SqlError> {
        refuse_subqueries(expr)?;
        let mut e = expr.clone();
        let flow =
            ast::visit_expressions_mut(&mut e, |node| match self.rewrite_one(node, replace) {
                Ok(()) => ControlFlow::Continue(()),
                Err(err) => ControlFlow::Break(err),
            });
        match flow {
            ControlFlow::Break(err) => Err(err),
            ControlFlow::Continue(()) => Ok(e),
        }
    }

    fn rewrite_one(
        &self,
        node: &mut Expr,
        replace: &mut dyn FnMut(&ast::Function) -> Result<Option<String>, SqlError>,
    ) -> Result<(), SqlError> {
        let (qualifier, name) = match node {
            Expr::Identifier(name) => (None, name.clone()),
            Expr::CompoundIdentifier(parts) if parts.len() == 2 => {
                (Some(parts[0].clone()), parts[1].clone())
            }
            Expr::CompoundIdentifier(parts) => {
                let span = parts.first().map_or(Span::empty(), |p| p.span);
                return Err(SqlError::at(
                    span,
                    format!(
                        "`{}` has too many parts: write `alias.column`",
                        parts
                            .iter()
                            .map(|p| p.value.as_str())
                            .collect::<Vec<_>>()
                            .join(".")
                    ),
                ));
            }
            Expr::Function(f) => {
                if let Some(column) = replace(f)? {
                    *node = Expr::Identifier(ident(&column));
                    return Ok(());
                }
                if f.over.is_some() {
                    return Err(SqlError::at(
                        f.name.span(),
                        format!(
                            "the window function {} is supported as a column of a SELECT \
                             (ROW_NUMBER/RANK for Top-N, an aggregate OVER the last rows)",
                            f.name
                        ),
                    ));
                }
                if super::planner::is_aggregate(f) {
                    return Err(SqlError::at(
                        f.name.span(),
                        format!(
                            "the aggregate {} is not allowed here (only in a SELECT list or \
                             HAVING of a query with GROUP BY)",
                            f.name
                        ),
                    ));
                }
                return Ok(());
            }
            _ => return Ok(()),
        };
        let (side, column) = self.resolve(qualifier.as_ref(), &name)?;
        *node = match self {
            Scope::One(_) => Expr::Identifier(ident(&column)),
            Scope::Two(_, _, true) if is_window_col(&column) => Expr::Identifier(ident(&column)),
            Scope::Two(..) => {
                let alias = &self.sides()[side].alias;
                Expr::CompoundIdentifier(vec![ident(alias), ident(&column)])
            }
        };
        Ok(())
    }
}

pub(super) fn is_window_col(name: &str) -> bool {
    same_name(name, "window_start") || same_name(name, "window_end")
}

fn unknown_column(name: &str, rel: &Rel, span: Span) -> SqlError {
    let known: Vec<&str> = rel.visible().collect();
    let hint = crate::spec::load::closest(name, known.iter().copied())
        .map(|c| format!("; did you mean `{c}`?"))
        .unwrap_or_else(|| format!(" (its columns: {})", known.join(", ")));
    SqlError::at(span, format!("unknown column `{name}`{hint}"))
}

/// Subqueries are planned as joins where the planner finds them (FROM, `IN` in WHERE); any
/// left in an expression are refused.
pub(super) fn refuse_subqueries(expr: &Expr) -> Result<(), SqlError> {
    let flow = ast::visit_expressions(expr, |e| match e {
        Expr::Subquery(q) | Expr::Exists { subquery: q, .. } => ControlFlow::Break(SqlError::at(
            e.span().union(&q.span()),
            "a subquery is supported here only as `x IN (SELECT ...)` or `EXISTS (SELECT ...)` \
             in WHERE over a window TVF (a window semi join), or in FROM"
                .to_string(),
        )),
        Expr::In {
            target: ast::InTarget::Subquery(_),
            ..
        } => ControlFlow::Break(SqlError::at(
            e.span(),
            "`IN (SELECT ...)` is supported as a conjunct of WHERE over a window TVF (a window \
             semi join)"
                .to_string(),
        )),
        _ => ControlFlow::Continue(()),
    });
    match flow {
        ControlFlow::Break(e) => Err(e),
        ControlFlow::Continue(()) => Ok(()),
    }
}

/// The columns of `side` an expression refers to, with the alias it used.
pub(super) fn referenced(scope: &Scope<'_>, expr: &Expr) -> Result<Vec<(usize, String)>, SqlError> {
    let mut out = Vec::new();
    let mut error = None;
    let _ = ast::visit_expressions(expr, |e| {
        let r = match e {
            Expr::Identifier(name) => scope.resolve(None, name).map(Some),
            Expr::CompoundIdentifier(parts) if parts.len() == 2 => {
                scope.resolve(Some(&parts[0]), &parts[1]).map(Some)
            }
            _ => Ok(None),
        };
        match r {
            Ok(Some(found)) => {
                if !out.contains(&found) {
                    out.push(found);
                }
                ControlFlow::Continue(())
            }
            Ok(None) => ControlFlow::Continue(()),
            Err(err) => {
                error = Some(err);
                ControlFlow::Break(())
            }
        }
    });
    match error {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

/// `alias.column` or `column`: (side, column).
pub(super) fn plain(scope: &Scope<'_>, e: &Expr) -> Result<Option<(usize, String)>, SqlError> {
    match e {
        Expr::Identifier(i) => scope.resolve(None, i).map(Some),
        Expr::CompoundIdentifier(p) if p.len() == 2 => scope.resolve(Some(&p[0]), &p[1]).map(Some),
        Expr::Nested(inner) => plain(scope, inner),
        _ => Ok(None),
    }
}

/// The columns a PARTITION BY (or similar) list names; each item must be a plain column.
pub(super) fn plain_columns<'e>(
    scope: &Scope<'_>,
    exprs: impl IntoIterator<Item = &'e Expr>,
    clause: &str,
) -> Result<Vec<String>, SqlError> {
    exprs
        .into_iter()
        .map(|e| match plain(scope, e)? {
            Some((_, c)) => Ok(c),
            None => Err(SqlError::at(
                e.span(),
                format!("{clause} takes columns here (compute an expression in a subquery first)"),
            )),
        })
        .collect()
}
