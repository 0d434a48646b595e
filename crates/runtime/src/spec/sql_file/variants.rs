//! Tables of one event kind per row, read through the ports of a multi-port source.
//!
//! Flink's Nexmark DDL declares one table for all events: an `event_type` column (0 person,
//! 1 auction, 2 bid) and one `ROW` column per kind, of which each row fills one; views pick a
//! kind (`SELECT bid.auction, ... FROM datagen WHERE event_type = 2`). weir's Nexmark source
//! (and its JSON-lines source with `variants`, for the file whose lines are
//! `{"type":"bid","bid":{...}}`) already gives each kind as a port of its own, with flat
//! columns. So a query over such a table is rewritten before it is planned:
//!
//! - its `WHERE` must pick one kind (`event_type = 2`, `type = 'bid'`); that conjunct goes;
//! - it reads that kind's port (`FROM datagen.bid`);
//! - `bid.auction` becomes `auction`; the kind column becomes its value; a computed column
//!   becomes its expression, with the kind's value put in and `CASE` branches of other kinds
//!   folded away (Nexmark's `dateTime AS CASE WHEN event_type = 0 THEN person.dateTime ...`
//!   becomes `dateTime`);
//! - every plain column of the projection keeps its name (`bid.auction AS auction`).
//!
//! A query that reads another kind's field, or the table without picking a kind, is refused
//! with what to write instead. The watermark's column must fold, for every kind, to one field of
//! the kind (the source's `event-time` column, the same name in every port); in a JSON file a
//! computed `TO_TIMESTAMP_LTZ(field, 3)` of an epoch-milliseconds field reads the field as a
//! TIMESTAMP instead.

use std::collections::HashMap;
use std::ops::ControlFlow;

use serde_json::{Map, Value, json};
use sqlparser::ast::{
    self, BinaryOperator, Expr, FunctionArg, FunctionArgExpr, FunctionArguments, Ident, ObjectName,
    ObjectNamePart, SelectItem, SetExpr, TableFactor, visit_expressions_mut, visit_relations,
};
use sqlparser::tokenizer::Location;

use super::SqlFileError;
use super::tables::{ColumnType, Table};

/// Which source reads the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    /// weir's Nexmark generator: `event_type` 0, 1, 2 are `person`, `auction`, `bid`.
    Nexmark,
    /// A JSON-lines file: the kind column's value names the ROW column that holds the event.
    Json,
}

/// A literal the kind column is compared with.
#[derive(Clone, Debug, PartialEq)]
enum Literal {
    Int(i64),
    Text(String),
}

impl Literal {
    fn of(expr: &Expr) -> Option<Literal> {
        let Expr::Value(v) = expr else { return None };
        match &v.value {
            ast::Value::Number(n, _) => n.parse().ok().map(Literal::Int),
            ast::Value::SingleQuotedString(s) => Some(Literal::Text(s.clone())),
            _ => None,
        }
    }

    fn expr(&self) -> Expr {
        Expr::value(match self {
            Literal::Int(i) => ast::Value::Number(i.to_string(), false),
            Literal::Text(s) => ast::Value::SingleQuotedString(s.clone()),
        })
    }

    fn written(&self) -> String {
        match self {
            Literal::Int(i) => i.to_string(),
            Literal::Text(s) => format!("'{s}'"),
        }
    }
}

/// A computed column folded for one port: its expression, or what stops it being read there.
type Computed = (String, Result<Expr, String>);

/// A table of one event kind per row.
#[derive(Debug)]
pub(super) struct VariantTable {
    name: String,
    kind: Kind,
    /// The kind column.
    discriminator: String,
    /// Each kind: the value of the kind column, and the ROW column (the port) that holds it.
    ports: Vec<(Literal, String)>,
    /// The ROW columns' fields.
    rows: Vec<(String, Vec<(String, ColumnType)>)>,
    /// Each port's computed columns, folded for it (`Err`: what stops one being read there).
    computed: HashMap<String, Vec<Computed>>,
    /// The event-time column of every port and the watermark's delay (ms).
    time: Option<(String, u64)>,
    /// Fields of a JSON file read as TIMESTAMPs (port, field): the event-time field.
    timestamps: Vec<(String, String)>,
}

impl VariantTable {
    /// A JSON file's table is of one kind per row when it has one STRING column and the rest
    /// are ROWs (`None`: an ordinary table).
    pub(super) fn detect(table: &Table) -> Option<Result<VariantTable, SqlFileError>> {
        let rows = table
            .columns
            .iter()
            .filter(|(_, t)| matches!(t, ColumnType::Row(_)))
            .count();
        let plain: Vec<_> = table
            .columns
            .iter()
            .filter(|(_, t)| !matches!(t, ColumnType::Row(_)))
            .collect();
        (rows > 0 && plain.len() == 1 && plain[0].1 == ColumnType::String)
            .then(|| VariantTable::new(table, Kind::Json))
    }

    pub(super) fn new(table: &Table, kind: Kind) -> Result<VariantTable, SqlFileError> {
        let name = table.name.clone();
        let shape = || {
            SqlFileError::at(
                table.location(),
                match kind {
                    Kind::Nexmark => format!(
                        "a table of `'connector' = 'nexmark'` is declared as Nexmark's own DDL \
                         does: an INT `event_type` column and ROW columns `person`, `auction` \
                         and `bid` (see jobs/nexmark/flink-sql/); `{name}` is not"
                    ),
                    Kind::Json => format!(
                        "`{name}` has ROW columns and one STRING column: read as a file of one \
                         event kind per line, the STRING names the ROW that holds each line's \
                         event"
                    ),
                },
            )
        };
        let mut discriminator = None;
        let mut rows = Vec::new();
        for (column, ty) in &table.columns {
            match ty {
                ColumnType::Row(fields) => rows.push((column.clone(), fields.clone())),
                ColumnType::Int if kind == Kind::Nexmark && discriminator.is_none() => {
                    discriminator = Some(column.clone());
                }
                ColumnType::String if kind == Kind::Json && discriminator.is_none() => {
                    discriminator = Some(column.clone());
                }
                _ => return Err(shape()),
            }
        }
        let Some(discriminator) = discriminator else {
            return Err(shape());
        };
        let mut ports = Vec::new();
        match kind {
            Kind::Nexmark => {
                let schemas = crate::connectors::nexmark::source::port_schemas();
                for (row, fields) in &rows {
                    let Some(i) = schemas.iter().position(|(p, _)| p == row) else {
                        return Err(shape());
                    };
                    for (field, _) in fields {
                        if schemas[i].1.field_with_name(field).is_err() {
                            return Err(SqlFileError::at(
                                table.location(),
                                format!("weir's Nexmark `{row}` has no field `{field}`"),
                            ));
                        }
                    }
                    ports.push((Literal::Int(i as i64), row.clone()));
                }
            }
            Kind::Json => {
                for (row, _) in &rows {
                    ports.push((Literal::Text(row.clone()), row.clone()));
                }
            }
        }
        let mut v = VariantTable {
            name,
            kind,
            discriminator,
            ports,
            rows,
            computed: HashMap::new(),
            time: None,
            timestamps: Vec::new(),
        };
        for (_, port) in v.ports.clone() {
            let folded: Vec<Computed> = table
                .computed
                .iter()
                .map(|(column, expr)| (column.clone(), v.specialize(expr, &port, None)))
                .collect();
            v.computed.insert(port, folded);
        }
        if let Some((column, delay, wat)) = &table.watermark {
            let mut time: Option<String> = None;
            for (_, port) in v.ports.clone() {
                let field = v
                    .time_field(column, &port)
                    .map_err(|m| SqlFileError::at(*wat, m))?;
                match &time {
                    Some(t) if *t != field => {
                        return Err(SqlFileError::at(
                            *wat,
                            format!(
                                "the watermark's column `{column}` is `{t}` in one kind and \
                                 `{field}` in `{port}`: weir reads event time from one field \
                                 name in every kind"
                            ),
                        ));
                    }
                    _ => time = Some(field),
                }
            }
            v.time = time.map(|t| (t, *delay));
        }
        Ok(v)
    }

    /// The field that carries the watermark's column in `port`.
    fn time_field(&mut self, column: &str, port: &str) -> Result<String, String> {
        let computed = self
            .computed
            .get(port)
            .and_then(|c| c.iter().find(|(n, _)| n == column))
            .map(|(_, e)| e.clone());
        let Some(expr) = computed else {
            return Err(format!(
                "the watermark's column `{column}` is a computed column of `{}`'s event time \
                 (Nexmark's `dateTime AS CASE ...`)",
                self.name
            ));
        };
        let expr = expr?;
        if let Expr::Identifier(field) = &expr {
            return Ok(field.value.clone());
        }
        if self.kind == Kind::Json
            && let Some(field) = epoch_millis(&expr)
        {
            let fields = self
                .rows
                .iter()
                .find(|(r, _)| r == port)
                .map(|(_, f)| f.as_slice())
                .unwrap_or_default();
            if fields
                .iter()
                .any(|(f, t)| *f == field && *t == ColumnType::Int)
            {
                self.timestamps.push((port.to_string(), field.clone()));
                if let Some(c) = self.computed.get_mut(port)
                    && let Some(entry) = c.iter_mut().find(|(n, _)| n == column)
                {
                    entry.1 = Ok(Expr::Identifier(Ident::new(field.clone())));
                }
                return Ok(field);
            }
        }
        Err(format!(
            "the watermark's column `{column}` is `{expr}` for `{port}`: weir takes event time \
             from a TIMESTAMP field of each kind (or, in a JSON file, `TO_TIMESTAMP_LTZ(field, \
             3)` of an epoch-milliseconds field)"
        ))
    }

    /// The source's `event-time`.
    pub(super) fn event_time(&self) -> Value {
        match &self.time {
            Some((column, delay)) => {
                json!({"column": column, "max-out-of-orderness": format!("{delay}ms")})
            }
            None => json!({}),
        }
    }

    /// A JSON-lines source's `variants`.
    pub(super) fn json_variants(&self) -> Result<Value, SqlFileError> {
        let mut out = Map::new();
        for (row, fields) in &self.rows {
            let mut map = Map::new();
            for (field, ty) in fields {
                let read_as_time = self.timestamps.iter().any(|(p, f)| p == row && f == field);
                let ty = if read_as_time {
                    json!("timestamp")
                } else {
                    ty.json(&self.name, &format!("{row}.{field}"))
                        .map_err(|m| SqlFileError::at(Location::new(0, 0), m))?
                };
                map.insert(field.clone(), ty);
            }
            out.insert(row.clone(), Value::Object(map));
        }
        Ok(Value::Object(out))
    }

    fn port_of(&self, literal: &Literal) -> Option<&str> {
        self.ports
            .iter()
            .find(|(l, _)| l == literal)
            .map(|(_, p)| p.as_str())
    }

    fn kinds(&self) -> String {
        self.ports
            .iter()
            .map(|(l, p)| format!("{} = {} ({p})", self.discriminator, l.written()))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// `expr` for the rows of `port`: fields of the port's ROW become columns, the kind column
    /// its value, computed columns their folded expressions (when `computed` is given), and
    /// CASE branches that can no longer be taken go.
    fn specialize(&self, expr: &Expr, port: &str, qualifier: Option<&str>) -> Result<Expr, String> {
        let mut expr = expr.clone();
        let mut problem: Option<String> = None;
        let value = self
            .ports
            .iter()
            .find(|(_, p)| p == port)
            .map(|(l, _)| l.clone());
        let _ = visit_expressions_mut(&mut expr, |e| {
            let parts: Option<Vec<String>> = match e {
                Expr::Identifier(i) => Some(vec![i.value.clone()]),
                Expr::CompoundIdentifier(parts) => {
                    Some(parts.iter().map(|p| p.value.clone()).collect())
                }
                _ => None,
            };
            if let Some(mut parts) = parts {
                let qualified = parts.len() > 1
                    && (same(&parts[0], &self.name)
                        || qualifier.is_some_and(|q| same(&parts[0], q)))
                    && (parts.len() > 2 || self.is_column(&parts[1]));
                if qualified {
                    parts.remove(0);
                }
                match parts.as_slice() {
                    [one] if *one == self.discriminator => {
                        if let Some(v) = &value {
                            *e = v.expr();
                        }
                    }
                    [one] => {
                        if let Some(c) = self
                            .computed
                            .get(port)
                            .and_then(|c| c.iter().find(|(n, _)| n == one))
                        {
                            match &c.1 {
                                Ok(folded @ Expr::Identifier(_)) => *e = folded.clone(),
                                Ok(folded) => *e = Expr::Nested(Box::new(folded.clone())),
                                Err(m) => problem = problem.take().or(Some(m.clone())),
                            }
                        }
                    }
                    [row, field] if self.rows.iter().any(|(r, _)| r == row) => {
                        if row == port {
                            *e = Expr::Identifier(Ident::new(field.clone()));
                        } else {
                            // Kept visible, so that a branch that survives folding is refused.
                            *e = Expr::Identifier(Ident::new(format!("\u{1}{row}.{field}")));
                        }
                    }
                    _ => {}
                }
            }
            fold(e);
            ControlFlow::<()>::Continue(())
        });
        if let Some(p) = problem {
            return Err(p);
        }
        let mut other: Option<String> = None;
        let _ = visit_expressions_mut(&mut expr, |e| {
            if let Expr::Identifier(i) = e
                && let Some(name) = i.value.strip_prefix('\u{1}')
            {
                other.get_or_insert_with(|| name.to_string());
            }
            ControlFlow::<()>::Continue(())
        });
        if let Some(field) = other {
            return Err(format!(
                "`{field}` is a field of another kind of event than `{port}`: a query of `{}` \
                 reads the kind its WHERE picks",
                self.name
            ));
        }
        Ok(expr)
    }

    fn is_column(&self, name: &str) -> bool {
        name == self.discriminator
            || self.rows.iter().any(|(r, _)| r == name)
            || self
                .computed
                .values()
                .any(|c| c.iter().any(|(n, _)| n == name))
    }
}

fn same(a: &str, b: &str) -> bool {
    a.eq_ignore_ascii_case(b)
}

/// `TO_TIMESTAMP_LTZ(field, 3)`: the field.
fn epoch_millis(expr: &Expr) -> Option<String> {
    let Expr::Function(f) = expr else { return None };
    if !f.name.to_string().eq_ignore_ascii_case("TO_TIMESTAMP_LTZ") {
        return None;
    }
    let FunctionArguments::List(list) = &f.args else {
        return None;
    };
    let args: Vec<&Expr> = list
        .args
        .iter()
        .filter_map(|a| match a {
            FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Some(e),
            _ => None,
        })
        .collect();
    match args.as_slice() {
        [Expr::Identifier(field), precision] if Literal::of(precision) == Some(Literal::Int(3)) => {
            Some(field.value.clone())
        }
        _ => None,
    }
}

/// Whether two literals are equal (`None`: not both literals).
fn equal(a: &Expr, b: &Expr) -> Option<bool> {
    Some(Literal::of(strip(a))? == Literal::of(strip(b))?)
}

fn strip(mut e: &Expr) -> &Expr {
    while let Expr::Nested(inner) = e {
        e = inner;
    }
    e
}

/// Folds a CASE whose conditions are now comparisons of literals (the children are folded
/// already: this runs after them).
fn fold(e: &mut Expr) {
    let Expr::Case {
        operand,
        conditions,
        else_result,
        ..
    } = e
    else {
        return;
    };
    let mut kept = Vec::new();
    let mut taken: Option<Expr> = None;
    for when in conditions.iter() {
        let known = match operand {
            Some(op) => equal(op, &when.condition),
            None => match strip(&when.condition) {
                Expr::BinaryOp {
                    left,
                    op: BinaryOperator::Eq,
                    right,
                } => equal(left, right),
                Expr::BinaryOp {
                    left,
                    op: BinaryOperator::NotEq,
                    right,
                } => equal(left, right).map(|b| !b),
                _ => None,
            },
        };
        match known {
            Some(true) if kept.is_empty() => {
                taken = Some(when.result.clone());
                break;
            }
            Some(false) => {}
            _ => kept.push(when.clone()),
        }
    }
    if let Some(result) = taken {
        *e = result;
    } else if kept.is_empty() {
        *e = match else_result {
            Some(r) => (**r).clone(),
            None => Expr::value(ast::Value::Null),
        };
    } else {
        *conditions = kept;
    }
}

/// The conjuncts of a WHERE, in order (an explicit stack: sqlparser bounds the depth, but a
/// long chain of ANDs is deep on the left).
fn conjuncts(e: Expr) -> Vec<Expr> {
    let mut out = Vec::new();
    let mut stack = vec![e];
    while let Some(e) = stack.pop() {
        match e {
            Expr::BinaryOp {
                left,
                op: BinaryOperator::And,
                right,
            } => {
                stack.push(*right);
                stack.push(*left);
            }
            Expr::Nested(inner)
                if matches!(
                    *inner,
                    Expr::BinaryOp {
                        op: BinaryOperator::And,
                        ..
                    }
                ) =>
            {
                stack.push(*inner);
            }
            other => out.push(other),
        }
    }
    out
}

/// Rewrites a query of `table` to read the port its WHERE picks (`Ok(None)`: it does not read
/// the table).
pub(super) fn rewrite(text: &str, table: &VariantTable) -> Result<Option<String>, String> {
    let Some(mut query) = super::statements::parse_query(text) else {
        // The planner reports it, at its place in the file.
        return Ok(None);
    };
    let mut reads = false;
    let _ = visit_relations(&query, |name| {
        if name.0.last().is_some_and(
            |p| matches!(p, ObjectNamePart::Identifier(i) if same(&i.value, &table.name)),
        ) && name.0.len() == 1
        {
            reads = true;
        }
        ControlFlow::<()>::Continue(())
    });
    if !reads {
        return Ok(None);
    }
    let whole = || {
        format!(
            "`{}` holds one kind of event per row: read it in a query of its own that picks \
             one kind, `SELECT ... FROM {} WHERE {}`, and read that query (a view) here",
            table.name,
            table.name,
            table.kinds()
        )
    };
    let SetExpr::Select(select) = query.body.as_mut() else {
        return Err(whole());
    };
    let [from] = select.from.as_mut_slice() else {
        return Err(whole());
    };
    if !from.joins.is_empty() {
        return Err(whole());
    }
    let TableFactor::Table { name, alias, .. } = &mut from.relation else {
        return Err(whole());
    };
    if !(name.0.len() == 1
        && matches!(&name.0[0], ObjectNamePart::Identifier(i) if same(&i.value, &table.name)))
    {
        return Err(whole());
    }
    let qualifier = alias.as_ref().map(|a| a.name.value.clone());
    // The kind: a conjunct `kind = literal`.
    let mut port: Option<String> = None;
    let mut rest = Vec::new();
    if let Some(selection) = select.selection.take() {
        for c in conjuncts(selection) {
            let picked = match strip(&c) {
                Expr::BinaryOp {
                    left,
                    op: BinaryOperator::Eq,
                    right,
                } => {
                    let is_kind = |e: &Expr| match strip(e) {
                        Expr::Identifier(i) => i.value == table.discriminator,
                        Expr::CompoundIdentifier(p) => {
                            p.len() == 2
                                && p[1].value == table.discriminator
                                && (same(&p[0].value, &table.name)
                                    || qualifier.as_deref().is_some_and(|q| same(&p[0].value, q)))
                        }
                        _ => false,
                    };
                    if is_kind(left) {
                        Literal::of(strip(right))
                    } else if is_kind(right) {
                        Literal::of(strip(left))
                    } else {
                        None
                    }
                }
                _ => None,
            };
            match picked {
                Some(l) if port.is_none() => match table.port_of(&l) {
                    Some(p) => port = Some(p.to_string()),
                    None => {
                        return Err(format!(
                            "{} = {} is no kind of event of `{}` (it has {})",
                            table.discriminator,
                            l.written(),
                            table.name,
                            table.kinds()
                        ));
                    }
                },
                _ => rest.push(c),
            }
        }
    }
    let Some(port) = port else {
        return Err(format!(
            "a query of `{}` reads one kind of event: add `WHERE` one of {}",
            table.name,
            table.kinds()
        ));
    };
    *name = ObjectName(vec![
        ObjectNamePart::Identifier(Ident::new(table.name.clone())),
        ObjectNamePart::Identifier(Ident::new(port.clone())),
    ]);
    select.selection = rest.into_iter().reduce(|a, b| Expr::BinaryOp {
        left: Box::new(a),
        op: BinaryOperator::And,
        right: Box::new(b),
    });
    // Plain columns keep their names once rewritten.
    for item in &mut select.projection {
        match item {
            SelectItem::UnnamedExpr(e) => {
                let name = match e {
                    Expr::Identifier(i) => Some(i.clone()),
                    Expr::CompoundIdentifier(p) => p.last().cloned(),
                    _ => None,
                };
                if let Some(alias) = name {
                    *item = SelectItem::ExprWithAlias {
                        expr: e.clone(),
                        alias,
                    };
                }
            }
            SelectItem::ExprWithAlias { .. } => {}
            _ => {
                return Err(format!(
                    "name the columns a query of `{}` reads (`SELECT bid.auction, ...`): `*` \
                     would read every kind's ROW",
                    table.name
                ));
            }
        }
    }
    // The clauses' expressions, each once (a subquery of the table is refused above).
    let mut exprs: Vec<&mut Expr> = Vec::new();
    for item in &mut select.projection {
        if let SelectItem::ExprWithAlias { expr, .. } | SelectItem::UnnamedExpr(expr) = item {
            exprs.push(expr);
        }
    }
    exprs.extend(select.selection.as_mut());
    exprs.extend(select.having.as_mut());
    if let ast::GroupByExpr::Expressions(group, _) = &mut select.group_by {
        exprs.extend(group.iter_mut());
    }
    for e in exprs {
        *e = table.specialize(e, &port, qualifier.as_deref())?;
    }
    Ok(Some(query.to_string()))
}
