//! Flink's group windows, the form before window TVFs (Nexmark's q11 as the Nexmark project
//! writes it):
//!
//! ```sql
//! SELECT B.bidder, COUNT(*), SESSION_START(B.dateTime, INTERVAL '10' SECOND)
//! FROM bid B GROUP BY B.bidder, SESSION(B.dateTime, INTERVAL '10' SECOND)
//! ```
//!
//! is the window TVF query Flink itself plans it as:
//!
//! ```sql
//! SELECT B.bidder, COUNT(*), window_start
//! FROM TABLE(SESSION(TABLE bid PARTITION BY bidder, DESCRIPTOR(dateTime), INTERVAL '10' SECOND)) B
//! GROUP BY B.bidder, window_start, window_end
//! ```
//!
//! `TUMBLE(time, size)`, `HOP(time, slide, size)` and `SESSION(time, gap)` in GROUP BY;
//! `<window>_START(...)` and `<window>_END(...)` in the SELECT list and HAVING. The window's
//! table is the one relation of FROM.

use std::ops::ControlFlow;

use sqlparser::ast::{self, Expr, Spanned, visit_expressions_mut};
use sqlparser::dialect::GenericDialect;
use sqlparser::parser::Parser;

use super::SqlError;
use super::text::{call_args, call_name};

/// The SELECT with its group window written as a window TVF (`None`: it has none).
pub(super) fn group_window(s: &ast::Select) -> Result<Option<ast::Select>, SqlError> {
    let ast::GroupByExpr::Expressions(exprs, _) = &s.group_by else {
        return Ok(None);
    };
    let windows: Vec<(usize, &ast::Function)> = exprs
        .iter()
        .enumerate()
        .filter_map(|(i, e)| match e {
            Expr::Function(f) if ["tumble", "hop", "session"].contains(&call_name(f).as_str()) => {
                Some((i, f))
            }
            _ => None,
        })
        .collect();
    let (at, f) = match windows.as_slice() {
        [] => return Ok(None),
        [one] => *one,
        [_, second, ..] => {
            return Err(SqlError::at(
                second.1.span(),
                "a GROUP BY holds one group window",
            ));
        }
    };
    let kind = call_name(f);
    let args: Vec<&Expr> = call_args(f)?.into_iter().flatten().collect();
    let sizes = match kind.as_str() {
        "hop" => 2,
        _ => 1,
    };
    let usage = match kind.as_str() {
        "tumble" => "TUMBLE(time, size)",
        "hop" => "HOP(time, slide, size)",
        _ => "SESSION(time, gap)",
    };
    let [time, rest @ ..] = args.as_slice() else {
        return Err(SqlError::at(
            f.span(),
            format!("write the group window as {usage}"),
        ));
    };
    if rest.len() != sizes {
        return Err(SqlError::at(
            f.span(),
            format!("write the group window as {usage}"),
        ));
    }
    let last = |e: &Expr| -> Option<ast::Ident> {
        match e {
            Expr::Identifier(i) => Some(i.clone()),
            Expr::CompoundIdentifier(p) => p.last().cloned(),
            _ => None,
        }
    };
    let Some(time) = last(time) else {
        return Err(SqlError::at(
            time.span(),
            "a group window's first argument is the time column",
        ));
    };
    let [one] = s.from.as_slice() else {
        return Err(SqlError::at(
            f.span(),
            "a group window (GROUP BY TUMBLE(...)) reads one relation: join in a subquery, or \
             write the window TVF (FROM TABLE(TUMBLE(TABLE t, ...)))",
        ));
    };
    let ast::TableFactor::Table {
        name,
        alias,
        args: None,
        ..
    } = &one.relation
    else {
        return Err(SqlError::at(
            f.span(),
            "a group window reads a table or view by name; for a subquery, write the window \
             TVF (FROM TABLE(TUMBLE(TABLE t, ...)))",
        ));
    };
    if !one.joins.is_empty() {
        return Err(SqlError::at(
            f.span(),
            "a group window reads one relation, not a join",
        ));
    }
    let keys: Vec<Expr> = exprs
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != at)
        .map(|(_, e)| e.clone())
        .collect();
    let partition = if kind == "session" {
        let mut names = Vec::new();
        for k in &keys {
            let Some(n) = last(k) else {
                return Err(SqlError::at(
                    k.span(),
                    "GROUP BY takes columns (compute an expression in a subquery first)",
                ));
            };
            names.push(n.to_string());
        }
        if names.is_empty() {
            String::new()
        } else {
            format!(", PARTITION({})", names.join(", "))
        }
    } else {
        String::new()
    };
    let alias = match alias {
        Some(a) => a.name.to_string(),
        None => name
            .0
            .last()
            .map(ToString::to_string)
            .unwrap_or_else(|| name.to_string()),
    };
    let sizes: Vec<String> = rest.iter().map(ToString::to_string).collect();
    let text = format!(
        "SELECT 1 FROM TABLE({}({name}{partition}, DESCRIPTOR({time}), {})) AS {alias}",
        kind.to_uppercase(),
        sizes.join(", ")
    );
    let reparse = |e| {
        SqlError::at(
            f.span(),
            format!("cannot write the group window as a TVF: {e}"),
        )
    };
    let dialect = GenericDialect {};
    let parsed = Parser::new(&dialect)
        .try_with_sql(&text)
        .and_then(|mut p| p.parse_query())
        .map_err(|e| reparse(e.to_string()))?;
    let ast::SetExpr::Select(tvf) = *parsed.body else {
        return Err(reparse("not a SELECT".into()));
    };
    let mut out = s.clone();
    out.from = tvf.from;
    let mut group = keys;
    for c in ["window_start", "window_end"] {
        group.push(Expr::Identifier(ast::Ident::new(c)));
    }
    out.group_by = ast::GroupByExpr::Expressions(group, vec![]);
    // `<window>_START(...)` and `<window>_END(...)` read the window's bounds.
    let mut problem: Option<SqlError> = None;
    let mut bounds = |e: &mut Expr| {
        if let Expr::Function(g) = e {
            let n = call_name(g);
            if let Some(part) = n.strip_suffix("_start").or_else(|| n.strip_suffix("_end"))
                && ["tumble", "hop", "session"].contains(&part)
            {
                if part != kind {
                    problem.get_or_insert(SqlError::at(
                        g.span(),
                        format!("{} of a {} window", n.to_uppercase(), kind.to_uppercase()),
                    ));
                }
                let column = if n.ends_with("_start") {
                    "window_start"
                } else {
                    "window_end"
                };
                *e = Expr::Identifier(ast::Ident::new(column));
            } else if let Some(part) = n
                .strip_suffix("_rowtime")
                .or_else(|| n.strip_suffix("_proctime"))
                && ["tumble", "hop", "session"].contains(&part)
            {
                problem.get_or_insert(SqlError::at(
                    g.span(),
                    format!(
                        "{} is not supported: read {}_END (the window's end) instead",
                        n.to_uppercase(),
                        part.to_uppercase()
                    ),
                ));
            }
        }
        ControlFlow::<()>::Continue(())
    };
    for item in &mut out.projection {
        let _ = visit_expressions_mut(item, &mut bounds);
    }
    if let Some(h) = &mut out.having {
        let _ = visit_expressions_mut(h, &mut bounds);
    }
    if let Some(p) = problem {
        return Err(p);
    }
    Ok(Some(out))
}

/// `GROUP BY` an expression (Nexmark q15's `DATE_FORMAT(dateTime, 'yyyy-MM-dd')`) over one
/// relation: the expression computed as a column in a subquery, and the SELECT list and HAVING
/// reading that column wherever they write the expression, as Flink plans it:
///
/// ```sql
/// SELECT DATE_FORMAT(t, 'yyyy-MM-dd') AS day, COUNT(*) FROM bid GROUP BY DATE_FORMAT(t, ...)
/// -- is
/// SELECT __g0 AS day, COUNT(*) FROM (SELECT *, DATE_FORMAT(t, ...) AS __g0 FROM bid) AS bid
/// GROUP BY __g0
/// ```
///
/// `None`: every GROUP BY term is a column, or FROM is not one relation (the planner says
/// what to write).
pub(super) fn group_expressions(s: &ast::Select) -> Result<Option<ast::Select>, SqlError> {
    let ast::GroupByExpr::Expressions(exprs, modifiers) = &s.group_by else {
        return Ok(None);
    };
    let computed: Vec<&Expr> = exprs
        .iter()
        .filter(|e| !matches!(e, Expr::Identifier(_) | Expr::CompoundIdentifier(_)))
        .collect();
    if computed.is_empty() || !modifiers.is_empty() {
        return Ok(None);
    }
    let [one] = s.from.as_slice() else {
        return Ok(None);
    };
    let alias = match &one.relation {
        _ if !one.joins.is_empty() => return Ok(None),
        ast::TableFactor::Table {
            name,
            alias,
            args: None,
            ..
        } => match alias {
            Some(a) => a.name.to_string(),
            None => match name.0.as_slice() {
                [only] => only.to_string(),
                _ => return Ok(None),
            },
        },
        ast::TableFactor::Derived {
            alias: Some(a),
            lateral: false,
            ..
        } => a.name.to_string(),
        _ => return Ok(None),
    };
    let names: Vec<String> = (0..computed.len()).map(|i| format!("__g{i}")).collect();
    let columns: Vec<String> = computed
        .iter()
        .zip(&names)
        .map(|(e, n)| format!("{e} AS {n}"))
        .collect();
    let selection = s
        .selection
        .as_ref()
        .map(|w| format!(" WHERE {w}"))
        .unwrap_or_default();
    let text = format!(
        "SELECT 1 FROM (SELECT *, {} FROM {}{selection}) AS {alias}",
        columns.join(", "),
        one.relation
    );
    let parsed = super::text::parse(&text).map_err(|e| {
        SqlError::at(
            s.select_token.0.span,
            format!(
                "cannot compute the GROUP BY expressions in a subquery: {}",
                e.message
            ),
        )
    })?;
    let ast::SetExpr::Select(derived) = *parsed.body else {
        return Ok(None);
    };
    let mut out = s.clone();
    out.from = derived.from;
    out.selection = None;
    let written: Vec<String> = computed.iter().map(ToString::to_string).collect();
    let column_of = |e: &Expr| -> Option<Expr> {
        let text = e.to_string();
        written
            .iter()
            .position(|w| *w == text)
            .map(|i| Expr::Identifier(ast::Ident::new(names[i].clone())))
    };
    out.group_by = ast::GroupByExpr::Expressions(
        exprs
            .iter()
            .map(|e| column_of(e).unwrap_or_else(|| e.clone()))
            .collect(),
        vec![],
    );
    let mut replace = |e: &mut Expr| {
        if let Some(c) = column_of(e) {
            *e = c;
        }
        ControlFlow::<()>::Continue(())
    };
    for item in &mut out.projection {
        if let ast::SelectItem::UnnamedExpr(e) = item
            && column_of(e).is_some()
        {
            // Named as the expression would have been.
            let alias = ast::Ident::new(super::planner::default_name(e));
            *item = ast::SelectItem::ExprWithAlias {
                expr: e.clone(),
                alias,
            };
        }
        let _ = visit_expressions_mut(item, &mut replace);
    }
    if let Some(h) = &mut out.having {
        let _ = visit_expressions_mut(h, &mut replace);
    }
    Ok(Some(out))
}
