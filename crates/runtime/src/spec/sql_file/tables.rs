//! `CREATE TABLE`: columns, computed columns, the watermark, the primary key and the `WITH`
//! options, and how a table becomes a weir source or sink.
//!
//! | `'connector'` | read (a source) | written (a sink) |
//! |---|---|---|
//! | `nexmark` | `kind: nexmark`: Flink's Nexmark DDL (an `event_type` INT and `person`, `auction`, `bid` ROWs); options `events.num`, `first-event.rate` (= `next-event.rate`), `rate.limited`, the three proportions (1, 3, 46 only), weir's `seed` and `base-time` | |
//! | `filesystem` | `kind: jsonl` (`'format' = 'json'`): `path`, `json.ignore-parse-errors`; a `type` STRING column and ROW columns read as Nexmark's file of one event kind per line | `kind: file`: `path`, `'format' = 'json'` or weir's `changelog-json` |
//! | `blackhole` | | `kind: blackhole` |
//! | `print` | | `kind: stdout`, each row with its change kind (`changelog-json`) |
//!
//! Types: `TINYINT`, `SMALLINT`, `INT`, `BIGINT` are weir's INT; `FLOAT`, `DOUBLE` its FLOAT;
//! `STRING`, `VARCHAR(n)`, `CHAR(n)` STRING; `BOOLEAN`; `TIMESTAMP(p)` and `TIMESTAMP_LTZ(p)`
//! (read as UTC) TIMESTAMP; `ROW<...>` nested fields (columns `outer.inner`). A sink's columns
//! may also be `DECIMAL(p, s)`, written as weir computes them (it has no DECIMAL type yet);
//! a source's may not.

use std::collections::{BTreeSet, HashSet};

use indexmap::IndexMap;
use serde_json::{Map, Value, json};
use sqlparser::ast::Expr;
use sqlparser::dialect::GenericDialect;
use sqlparser::parser::Parser;
use sqlparser::tokenizer::{Location, Token, TokenWithSpan, Tokenizer};

use super::statements::{Cursor, Statement};
use super::variants::{self, Kind, VariantTable};
use super::{Job, Query, SqlFileError};
use crate::spec::positions::Position;

/// How deep `ROW` types may nest.
const MAX_ROW_DEPTH: usize = 8;

/// The tables declared, by name.
#[derive(Default)]
pub(super) struct Tables {
    tables: IndexMap<String, Table>,
}

impl Tables {
    pub(super) fn contains(&self, name: &str) -> bool {
        self.tables.contains_key(name)
    }
}

/// A declared column's type.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum ColumnType {
    Int,
    Float,
    String,
    Bool,
    Timestamp,
    Decimal,
    Row(Vec<(String, ColumnType)>),
}

impl ColumnType {
    /// The type in a JSON source's schema (`int`, a nested map for a ROW).
    pub(super) fn json(&self, table: &str, column: &str) -> Result<Value, String> {
        // ROW nesting is bounded by MAX_ROW_DEPTH when it is read.
        Ok(match self {
            ColumnType::Int => json!("int"),
            ColumnType::Float => json!("float"),
            ColumnType::String => json!("string"),
            ColumnType::Bool => json!("bool"),
            ColumnType::Timestamp => json!("timestamp"),
            ColumnType::Decimal => {
                return Err(format!(
                    "`{table}`.`{column}` is a DECIMAL, which weir cannot read yet: declare it \
                     DOUBLE (or BIGINT for whole numbers)"
                ));
            }
            ColumnType::Row(fields) => {
                let mut map = Map::new();
                for (name, ty) in fields {
                    map.insert(name.clone(), ty.json(table, &format!("{column}.{name}"))?);
                }
                Value::Object(map)
            }
        })
    }
}

/// One `CREATE TABLE`.
pub(super) struct Table {
    pub(super) name: String,
    pub(super) at: Position,
    pub(super) columns: Vec<(String, ColumnType)>,
    pub(super) computed: Vec<(String, Expr)>,
    /// The watermark's column, its delay in milliseconds, and where it is written.
    pub(super) watermark: Option<(String, u64, Location)>,
    options: IndexMap<String, (String, Location)>,
    /// Written by `CREATE TABLE ... AS SELECT`.
    ctas: bool,
}

impl Table {
    fn option(&self, key: &str) -> Option<&str> {
        self.options.get(key).map(|(v, _)| v.as_str())
    }

    /// Where the `CREATE TABLE` starts.
    pub(super) fn location(&self) -> Location {
        Location::new(self.at.line as u64, self.at.column as u64)
    }

    fn option_at(&self, key: &str) -> Position {
        self.options
            .get(key)
            .map_or(self.at, |(_, at)| position(*at))
    }
}

fn position(at: Location) -> Position {
    Position {
        line: at.line as usize,
        column: at.column as usize,
    }
}

/// `CREATE [TEMPORARY] TABLE [IF NOT EXISTS] t [(...)] [COMMENT '...'] WITH (...) [AS
/// SELECT ...]`, after `TABLE`.
pub(super) fn create(
    job: &mut Job<'_>,
    c: &mut Cursor<'_>,
    statement: &Statement,
) -> Result<(), SqlFileError> {
    if c.eat_word("IF") {
        c.expect_word("NOT")?;
        c.expect_word("EXISTS")?;
    }
    let (name, name_at) = c.name("the table's name")?;
    if job.tables.contains(&name) || job.queries.iter().any(|q| q.node == name) {
        return Err(SqlFileError::at(
            name_at,
            format!("`{name}` is declared twice"),
        ));
    }
    let mut table = Table {
        name: name.clone(),
        at: statement.position(),
        columns: Vec::new(),
        computed: Vec::new(),
        watermark: None,
        options: IndexMap::new(),
        ctas: false,
    };
    if c.peek_token() == Some(&Token::LParen) {
        c.next();
        elements(c, &mut table)?;
    }
    if c.eat_word("COMMENT") {
        c.string("the comment, quoted")?;
    }
    if c.at_word("PARTITIONED") {
        return Err(SqlFileError::at(
            c.peek_location(),
            "`PARTITIONED BY` is for Flink's batch tables: weir's file sink writes one file \
             per subtask",
        ));
    }
    c.expect_word("WITH")?;
    c.expect(
        &Token::LParen,
        "`(` and the table's options (`'connector' = ...`)",
    )?;
    loop {
        let at = c.peek_location();
        let key = c.string("an option's name, quoted (`'connector'`)")?;
        c.expect(&Token::Eq, "`=`")?;
        let value = c.string("the option's value, quoted")?;
        if table.options.insert(key.clone(), (value, at)).is_some() {
            return Err(SqlFileError::at(
                at,
                format!("the option `{key}` is given twice"),
            ));
        }
        if c.peek_token() == Some(&Token::Comma) {
            c.next();
            continue;
        }
        c.expect(&Token::RParen, "`,` or `)`")?;
        break;
    }
    if c.at_word("LIKE") {
        return Err(SqlFileError::at(
            c.peek_location(),
            "`CREATE TABLE ... LIKE` is not supported: declare the table's columns",
        ));
    }
    if c.eat_word("AS") {
        if !table.columns.is_empty() {
            return Err(SqlFileError::at(
                name_at,
                "a table made `AS SELECT` takes its columns from the query: declare none",
            ));
        }
        table.ctas = true;
        super::statement::ctas(job, c, statement, &name)?;
    }
    c.end()?;
    job.tables.tables.insert(name, table);
    Ok(())
}

/// The parenthesised list of a table's columns, computed columns, watermark and key.
fn elements(c: &mut Cursor<'_>, table: &mut Table) -> Result<(), SqlFileError> {
    loop {
        let at = c.peek_location();
        if c.eat_word("WATERMARK") {
            c.expect_word("FOR")?;
            let column = c.ident("the watermark's column")?;
            c.expect_word("AS")?;
            let tokens = c.until_comma_or_close();
            let expr = expression(tokens, at)?;
            let delay = watermark_delay(&column, &expr).map_err(|m| SqlFileError::at(at, m))?;
            if table.watermark.replace((column, delay, at)).is_some() {
                return Err(SqlFileError::at(at, "a table has one WATERMARK"));
            }
        } else if c.at_word("PRIMARY") || c.at_word("CONSTRAINT") {
            if c.eat_word("CONSTRAINT") {
                c.ident("the constraint's name")?;
            }
            c.expect_word("PRIMARY")?;
            c.expect_word("KEY")?;
            c.expect(&Token::LParen, "`(`")?;
            loop {
                c.ident("a key column")?;
                if c.peek_token() == Some(&Token::Comma) {
                    c.next();
                    continue;
                }
                c.expect(&Token::RParen, "`)`")?;
                break;
            }
            if !(c.eat_word("NOT") && c.eat_word("ENFORCED")) {
                return Err(SqlFileError::at(
                    c.peek_location(),
                    "write the key as Flink does, `PRIMARY KEY (...) NOT ENFORCED`: weir does \
                     not check it either",
                ));
            }
        } else {
            let column = c.ident("a column's name, or WATERMARK or PRIMARY KEY")?;
            let seen = table.columns.iter().any(|(n, _)| *n == column)
                || table.computed.iter().any(|(n, _)| *n == column);
            if seen {
                return Err(SqlFileError::at(
                    at,
                    format!("the column `{column}` is declared twice"),
                ));
            }
            if c.eat_word("AS") {
                let tokens = c.until_comma_or_close();
                let expr = expression(tokens, at)?;
                table.computed.push((column, expr));
            } else {
                let ty = column_type(c, 0)?;
                if c.at_word("METADATA") {
                    return Err(SqlFileError::at(
                        c.peek_location(),
                        "metadata columns are not supported in SQL job files yet",
                    ));
                }
                table.columns.push((column, ty));
            }
            if c.eat_word("COMMENT") {
                c.string("the comment, quoted")?;
            }
        }
        match c.peek_token() {
            Some(Token::Comma) => {
                c.next();
            }
            Some(Token::RParen) => {
                c.next();
                return Ok(());
            }
            _ => {
                return Err(SqlFileError::at(
                    c.peek_location(),
                    format!("expected `,` or `)`, found `{}`", c.peek_text()),
                ));
            }
        }
    }
}

/// A column's type, after its name. ROW nesting is bounded by [`MAX_ROW_DEPTH`].
fn column_type(c: &mut Cursor<'_>, depth: usize) -> Result<ColumnType, SqlFileError> {
    let at = c.peek_location();
    let name = c.ident("a type (BIGINT, STRING, TIMESTAMP(3), ROW<...>, ...)")?;
    let upper = name.to_ascii_uppercase();
    let ty = match upper.as_str() {
        "TINYINT" | "SMALLINT" | "INT" | "INTEGER" | "BIGINT" => ColumnType::Int,
        "FLOAT" | "REAL" => ColumnType::Float,
        "DOUBLE" => {
            c.eat_word("PRECISION");
            ColumnType::Float
        }
        "DECIMAL" | "DEC" | "NUMERIC" => ColumnType::Decimal,
        "STRING" | "VARCHAR" | "CHAR" => ColumnType::String,
        "BOOLEAN" | "BOOL" => ColumnType::Bool,
        "TIMESTAMP" | "TIMESTAMP_LTZ" => ColumnType::Timestamp,
        "ROW" => {
            if depth >= MAX_ROW_DEPTH {
                return Err(SqlFileError::at(
                    at,
                    format!("ROW types nest at most {MAX_ROW_DEPTH} deep"),
                ));
            }
            let close = match c.peek_token() {
                Some(Token::Lt) => Token::Gt,
                Some(Token::LParen) => Token::RParen,
                _ => {
                    return Err(SqlFileError::at(
                        c.peek_location(),
                        "expected `<` and the ROW's fields (`ROW<id BIGINT, name STRING>`)",
                    ));
                }
            };
            c.next();
            let mut fields: Vec<(String, ColumnType)> = Vec::new();
            loop {
                let field_at = c.peek_location();
                let field = c.ident("a field's name")?;
                if fields.iter().any(|(n, _)| *n == field) {
                    return Err(SqlFileError::at(
                        field_at,
                        format!("the field `{field}` is declared twice"),
                    ));
                }
                let ty = column_type(c, depth + 1)?;
                if c.eat_word("COMMENT") {
                    c.string("the comment, quoted")?;
                }
                fields.push((field, ty));
                if c.peek_token() == Some(&Token::Comma) {
                    c.next();
                    continue;
                }
                c.expect(&close, &format!("`,` or `{close}`"))?;
                break;
            }
            ColumnType::Row(fields)
        }
        _ => {
            return Err(SqlFileError::at(
                at,
                format!(
                    "weir has no column type `{name}`: it reads BIGINT (and the other integers), \
                     DOUBLE, FLOAT, STRING, VARCHAR, BOOLEAN, TIMESTAMP(3), TIMESTAMP_LTZ(3) and \
                     ROW<...>; DECIMAL in sinks"
                ),
            ));
        }
    };
    // `(p)`, `(p, s)`.
    if !matches!(ty, ColumnType::Row(_)) && c.peek_token() == Some(&Token::LParen) {
        c.next();
        loop {
            match c.next().map(|t| &t.token) {
                Some(Token::Number(..)) => {}
                _ => {
                    return Err(SqlFileError::at(at, format!("expected `{name}(n)`")));
                }
            }
            match c.next().map(|t| &t.token) {
                Some(Token::Comma) => continue,
                Some(Token::RParen) => break,
                _ => return Err(SqlFileError::at(at, format!("expected `{name}(n)`"))),
            }
        }
    }
    if upper == "TIMESTAMP" && (c.at_word("WITH") || c.at_word("WITHOUT")) {
        c.next();
        c.eat_word("LOCAL");
        c.expect_word("TIME")?;
        c.expect_word("ZONE")?;
    }
    if c.eat_word("NOT") {
        c.expect_word("NULL")?;
    } else {
        c.eat_word("NULL");
    }
    Ok(ty)
}

/// An expression of a computed column or watermark.
fn expression(tokens: &[TokenWithSpan], at: Location) -> Result<Expr, SqlFileError> {
    if tokens.is_empty() {
        return Err(SqlFileError::at(at, "expected an expression"));
    }
    let dialect = GenericDialect {};
    let mut parser = Parser::new(&dialect)
        .with_recursion_limit(64)
        .with_tokens_with_locations(tokens.to_vec());
    let expr = parser.parse_expr().map_err(|e| {
        SqlFileError::at(
            tokens[0].span.start,
            format!("cannot parse the expression: {e}"),
        )
    })?;
    let next = parser.peek_token();
    if next.token != Token::EOF {
        return Err(SqlFileError::at(
            next.span.start,
            format!("unexpected `{}` after the expression", next.token),
        ));
    }
    Ok(expr)
}

/// `c - INTERVAL 'n' UNIT` (or `c`): the delay, in weir's terms: Flink's watermark `c - d`
/// says no row at `c - d` or before follows; weir's `max-out-of-orderness: m` trails by
/// `m + 1 ms`. So `m = d - 1 ms`.
fn watermark_delay(column: &str, expr: &Expr) -> Result<u64, String> {
    use sqlparser::ast::{BinaryOperator, Interval};
    let is_column = |e: &Expr| matches!(e, Expr::Identifier(i) if i.value == column);
    let refuse = || {
        format!(
            "weir reads a watermark as `WATERMARK FOR {column} AS {column} - INTERVAL 'n' UNIT` \
             (or `AS {column}`): a bounded out-of-orderness of the column itself"
        )
    };
    if is_column(expr) {
        return Ok(0);
    }
    let Expr::BinaryOp {
        left,
        op: BinaryOperator::Minus,
        right,
    } = expr
    else {
        return Err(refuse());
    };
    if !is_column(left) {
        return Err(refuse());
    }
    let Expr::Interval(Interval {
        value,
        leading_field,
        ..
    }) = right.as_ref()
    else {
        return Err(refuse());
    };
    let text = match value.as_ref() {
        Expr::Value(v) => match &v.value {
            sqlparser::ast::Value::SingleQuotedString(s) => s.clone(),
            sqlparser::ast::Value::Number(n, _) => n.clone(),
            _ => return Err(refuse()),
        },
        _ => return Err(refuse()),
    };
    let unit_ms: f64 = match leading_field
        .as_ref()
        .map(|f| f.to_string().to_ascii_uppercase())
        .as_deref()
    {
        Some("MILLISECOND") | Some("MILLISECONDS") => 1.0,
        Some("SECOND") | Some("SECONDS") | None => 1000.0,
        Some("MINUTE") | Some("MINUTES") => 60_000.0,
        Some("HOUR") | Some("HOURS") => 3_600_000.0,
        Some("DAY") | Some("DAYS") => 86_400_000.0,
        _ => return Err(refuse()),
    };
    let n: f64 = text.trim().parse().map_err(|_| refuse())?;
    let ms = n * unit_ms;
    if !ms.is_finite() || !(0.0..=365.0 * 86_400_000.0).contains(&ms) || ms.fract() != 0.0 {
        return Err(format!(
            "the watermark's delay `{text}` is not a whole number of milliseconds up to a year"
        ));
    }
    Ok((ms as u64).saturating_sub(1))
}

/// Turns the tables and queries read into the job's sources, transforms and sinks.
pub(super) fn place(job: &mut Job<'_>, tables: &Tables, queries: &[Query]) {
    let written: HashSet<&str> = queries
        .iter()
        .filter_map(|q| q.target.as_ref().map(|(t, _)| t.as_str()))
        .collect();
    // What each query reads, parsed once.
    let reads: Vec<BTreeSet<String>> = queries
        .iter()
        .map(|q| words_read(std::slice::from_ref(q)))
        .collect();
    // Views no INSERT reads (through other views) are left out, as Flink leaves them.
    let mut used = vec![false; queries.len()];
    let mut frontier: Vec<usize> = (0..queries.len())
        .filter(|&i| queries[i].target.is_some())
        .collect();
    while let Some(i) = frontier.pop() {
        if std::mem::replace(&mut used[i], true) {
            continue;
        }
        frontier.extend((0..queries.len()).filter(|&v| {
            queries[v].target.is_none() && reads[i].contains(&queries[v].node.to_lowercase())
        }));
    }
    let words: BTreeSet<&String> = (0..queries.len())
        .filter(|&i| used[i])
        .flat_map(|i| reads[i].iter())
        .collect();
    let queries: Vec<&Query> = (0..queries.len())
        .filter(|&i| used[i])
        .map(|i| &queries[i])
        .collect();
    let mut variants: Vec<VariantTable> = Vec::new();
    for table in tables.tables.values() {
        let read = words.contains(&table.name.to_lowercase());
        if written.contains(table.name.as_str()) {
            if let Err(e) = sink(job, table) {
                job.error(e, table.at);
            }
        } else if read {
            match source(job, table) {
                Ok(Some(v)) => variants.push(v),
                Ok(None) => {}
                Err(e) => job.error(e, table.at),
            }
        }
    }
    for q in queries {
        let q: &Query = q;
        let mut text = q.text.clone();
        let mut verbatim = true;
        for v in &variants {
            match variants::rewrite(&text, v) {
                Ok(Some(rewritten)) => {
                    text = rewritten;
                    verbatim = false;
                }
                Ok(None) => {}
                Err(message) => {
                    job.error(SqlFileError::at(Location::new(0, 0), message), q.text_at);
                }
            }
        }
        let node = q.node.as_str();
        let mut spec = Map::new();
        spec.insert("kind".into(), json!("sql"));
        spec.insert("query".into(), Value::String(text));
        if let Some((table, listed)) = &q.target {
            let Some(t) = tables.tables.get(table) else {
                job.error(
                    SqlFileError::at(
                        Location::new(0, 0),
                        format!(
                            "`{table}` is no table of the file: declare it with `CREATE TABLE \
                             {table} (...) WITH ('connector' = ...)` before the INSERT"
                        ),
                    ),
                    q.at,
                );
                continue;
            };
            let declared: Vec<String> = t.columns.iter().map(|(n, _)| n.clone()).collect();
            let columns = if listed.is_empty() {
                declared
            } else {
                if let Some(unknown) = listed.iter().find(|l| !declared.contains(l))
                    && !t.ctas
                {
                    job.error(
                        SqlFileError::at(
                            Location::new(0, 0),
                            format!("`{table}` has no column `{unknown}`"),
                        ),
                        q.at,
                    );
                    continue;
                }
                if listed.len() != declared.len() {
                    job.error(
                        SqlFileError::at(
                            Location::new(0, 0),
                            format!(
                                "an INSERT into `{table}` writes all of its columns ({}): weir \
                                 fills none with NULL",
                                declared.join(", ")
                            ),
                        ),
                        q.at,
                    );
                    continue;
                }
                listed.clone()
            };
            if !columns.is_empty() {
                spec.insert("columns".into(), json!(columns));
            }
            job.set(&["sinks", table, "from"], json!(node), None);
        }
        job.set(&["transforms", node], Value::Object(spec), Some(q.at));
        if verbatim {
            job.text_at(&["transforms", node, "query"], q.text_at);
        } else {
            job.index
                .values
                .insert(format!("/transforms/{node}/query"), q.at);
        }
    }
    if !job.tree.contains_key("transforms") {
        job.set(&["transforms"], Value::Object(Map::new()), None);
    }
    for section in ["sources", "sinks"] {
        if !job.tree.contains_key(section) {
            job.set(&[section], Value::Object(Map::new()), None);
        }
    }
}

/// The tables and views the queries read, lower-cased: the relations of their FROMs and
/// joins, and the tables of window functions (`TUMBLE(TABLE bid, ...)`). A query that does
/// not parse reads every word it holds (the planner reports it).
fn words_read<'q>(queries: impl IntoIterator<Item = &'q Query>) -> BTreeSet<String> {
    use sqlparser::ast::{FunctionArg, FunctionArgExpr, FunctionArguments, visit_expressions};
    use std::ops::ControlFlow;
    let dialect = GenericDialect {};
    let mut words = BTreeSet::new();
    for q in queries {
        let Some(query) = super::statements::parse_query(&q.text) else {
            if let Ok(tokens) = Tokenizer::new(&dialect, &q.text).tokenize() {
                for t in tokens {
                    if let Token::Word(w) = t {
                        words.insert(w.value.to_lowercase());
                    }
                }
            }
            continue;
        };
        let _ = sqlparser::ast::visit_relations(&query, |name| {
            if let Some(first) = name.0.first() {
                words.insert(first.to_string().trim_matches(['"', '`']).to_lowercase());
            }
            ControlFlow::<()>::Continue(())
        });
        let _ = visit_expressions(&query, |e| {
            if let Expr::Function(f) = e
                && let FunctionArguments::List(list) = &f.args
                && let Some(FunctionArg::Unnamed(FunctionArgExpr::Expr(Expr::Identifier(t)))) =
                    list.args.first()
            {
                let name = f.name.to_string().to_ascii_uppercase();
                if ["TUMBLE", "HOP", "SESSION", "CUMULATE"].contains(&name.as_str()) {
                    words.insert(t.value.to_lowercase());
                }
            }
            ControlFlow::<()>::Continue(())
        });
    }
    words
}

fn refuse(table: &Table, key: &str, message: impl Into<String>) -> SqlFileError {
    let at = table.option_at(key);
    SqlFileError::at(Location::new(at.line as u64, at.column as u64), message)
}

/// Checks that every option of a table is one its connector knows.
fn known_options(table: &Table, known: &[&str]) -> Result<(), SqlFileError> {
    for key in table.options.keys() {
        if !known.contains(&key.as_str()) {
            return Err(refuse(
                table,
                key,
                format!(
                    "the `{}` connector has no option `{key}` in weir (it reads {})",
                    table.option("connector").unwrap_or_default(),
                    known.join(", ")
                ),
            ));
        }
    }
    Ok(())
}

fn connector(table: &Table) -> Result<&str, SqlFileError> {
    table.option("connector").ok_or_else(|| {
        SqlFileError::at(
            table.location(),
            format!(
                "`{}` names no `'connector'` in its WITH options",
                table.name
            ),
        )
    })
}

/// A table a query reads. `Some` for a table of one event kind per row.
fn source(job: &mut Job<'_>, table: &Table) -> Result<Option<VariantTable>, SqlFileError> {
    let name = table.name.as_str();
    let at = Some(table.at);
    match connector(table)? {
        "nexmark" => {
            known_options(
                table,
                &[
                    "connector",
                    "events.num",
                    "first-event.rate",
                    "next-event.rate",
                    "rate.limited",
                    "person.proportion",
                    "auction.proportion",
                    "bid.proportion",
                    "seed",
                    "base-time",
                ],
            )?;
            let mut spec = Map::new();
            spec.insert("kind".into(), json!("nexmark"));
            let number = |key: &str| -> Result<Option<u64>, SqlFileError> {
                table
                    .option(key)
                    .map(|v| {
                        v.trim().parse::<u64>().map_err(|_| {
                            refuse(table, key, format!("`{key}` is a whole number, not `{v}`"))
                        })
                    })
                    .transpose()
            };
            if let Some(n) = number("events.num")? {
                spec.insert("events".into(), json!(n));
            }
            for (key, expected) in [
                ("person.proportion", 1),
                ("auction.proportion", 3),
                ("bid.proportion", 46),
            ] {
                if let Some(n) = number(key)?
                    && n != expected
                {
                    return Err(refuse(
                        table,
                        key,
                        format!(
                            "weir's Nexmark generator makes persons, auctions and bids as 1 : 3 \
                             : 46, as Nexmark's own does by default: `{key}` is {expected}"
                        ),
                    ));
                }
            }
            let first = number("first-event.rate")?;
            let next = number("next-event.rate")?;
            if let (Some(a), Some(b)) = (first, next)
                && a != b
            {
                return Err(refuse(
                    table,
                    "next-event.rate",
                    "weir's generator keeps one rate: `first-event.rate` and `next-event.rate` \
                     are equal",
                ));
            }
            if let Some(rate) = first.or(next) {
                if rate == 0 || rate > 1_000_000_000 {
                    return Err(refuse(
                        table,
                        "first-event.rate",
                        "the rate is between 1 and 1,000,000,000 events per second",
                    ));
                }
                // Event time advances by 1/rate per event.
                let nanos = 1_000_000_000 / rate;
                spec.insert("inter-event-delay".into(), json!(format!("{nanos}ns")));
                if table
                    .option("rate.limited")
                    .is_some_and(|v| v.eq_ignore_ascii_case("true"))
                {
                    spec.insert("rate".into(), json!(rate));
                }
            }
            if let Some(seed) = number("seed")? {
                spec.insert("seed".into(), json!(seed));
            }
            if let Some(base) = table.option("base-time") {
                let ms: i64 = base
                    .trim()
                    .parse()
                    .map_err(|_| refuse(table, "base-time", "`base-time` is epoch milliseconds"))?;
                spec.insert("base-time".into(), json!(ms));
            }
            let v = VariantTable::new(table, Kind::Nexmark)?;
            spec.insert("event-time".into(), v.event_time());
            job.set(&["sources", name], Value::Object(spec), at);
            Ok(Some(v))
        }
        "filesystem" => {
            known_options(
                table,
                &["connector", "path", "format", "json.ignore-parse-errors"],
            )?;
            let Some(path) = table.option("path") else {
                return Err(refuse(
                    table,
                    "connector",
                    "a filesystem table names its `'path'`",
                ));
            };
            match table.option("format") {
                Some("json") => {}
                other => {
                    return Err(refuse(
                        table,
                        "format",
                        format!(
                            "weir reads files of `'format' = 'json'` (one object per line), not \
                             `{}`",
                            other.unwrap_or("(none given)")
                        ),
                    ));
                }
            }
            let mut spec = Map::new();
            spec.insert("kind".into(), json!("jsonl"));
            spec.insert("path".into(), json!(path));
            if table
                .option("json.ignore-parse-errors")
                .is_some_and(|v| v.eq_ignore_ascii_case("true"))
            {
                spec.insert("on-error".into(), json!("skip"));
            }
            let variant = VariantTable::detect(table);
            let result = if let Some(v) = variant {
                let v = v?;
                spec.insert("variants".into(), v.json_variants()?);
                spec.insert("event-time".into(), v.event_time());
                Some(v)
            } else {
                if !table.computed.is_empty() {
                    return Err(SqlFileError::at(
                        table.location(),
                        format!(
                            "computed columns are read on tables of one event kind per row \
                             (Nexmark's); compute `{}` in a view over `{name}` instead",
                            table.computed[0].0
                        ),
                    ));
                }
                let mut schema = Map::new();
                for (column, ty) in &table.columns {
                    schema.insert(
                        column.clone(),
                        ty.json(name, column)
                            .map_err(|m| SqlFileError::at(Location::new(0, 0), m))?,
                    );
                }
                spec.insert("schema".into(), Value::Object(schema));
                if let Some((column, delay, wat)) = &table.watermark {
                    let ty = table.columns.iter().find(|(n, _)| n == column);
                    if !matches!(ty, Some((_, ColumnType::Timestamp))) {
                        return Err(SqlFileError::at(
                            *wat,
                            format!("the watermark's column `{column}` is no TIMESTAMP column"),
                        ));
                    }
                    spec.insert(
                        "event-time".into(),
                        json!({"column": column, "max-out-of-orderness": format!("{delay}ms")}),
                    );
                }
                None
            };
            job.set(&["sources", name], Value::Object(spec), at);
            Ok(result)
        }
        other => Err(refuse(
            table,
            "connector",
            format!(
                "a SQL job file reads tables of `'connector'` `nexmark` or `filesystem` (JSON); \
                 `{other}` is not available here yet: declare that source in a YAML job"
            ),
        )),
    }
}

/// A table an INSERT writes.
fn sink(job: &mut Job<'_>, table: &Table) -> Result<(), SqlFileError> {
    let name = table.name.as_str();
    if !table.computed.is_empty() || table.watermark.is_some() {
        return Err(SqlFileError::at(
            table.location(),
            format!("`{name}` is written: computed columns and watermarks belong to tables read"),
        ));
    }
    let mut spec = Map::new();
    match connector(table)? {
        "blackhole" => {
            known_options(table, &["connector"])?;
            spec.insert("kind".into(), json!("blackhole"));
        }
        "print" => {
            known_options(table, &["connector"])?;
            spec.insert("kind".into(), json!("stdout"));
            spec.insert("format".into(), json!("changelog-json"));
        }
        "filesystem" => {
            known_options(table, &["connector", "path", "format"])?;
            let Some(path) = table.option("path") else {
                return Err(refuse(
                    table,
                    "connector",
                    "a filesystem table names its `'path'`",
                ));
            };
            spec.insert("kind".into(), json!("file"));
            spec.insert("path".into(), json!(path));
            match table.option("format") {
                Some("json") | None => {}
                Some("changelog-json") => {
                    spec.insert("format".into(), json!("changelog-json"));
                }
                Some(other) => {
                    return Err(refuse(
                        table,
                        "format",
                        format!(
                            "weir writes files of `'format' = 'json'` or `'changelog-json'` (each \
                             row with its change kind), not `{other}`"
                        ),
                    ));
                }
            }
        }
        other => {
            return Err(refuse(
                table,
                "connector",
                format!(
                    "a SQL job file writes tables of `'connector'` `blackhole`, `print` or \
                     `filesystem`; `{other}` is not available here yet: declare that sink in a \
                     YAML job"
                ),
            ));
        }
    }
    for (column, ty) in &table.columns {
        if matches!(ty, ColumnType::Row(_)) {
            return Err(SqlFileError::at(
                table.location(),
                format!("`{name}`.`{column}` is a ROW: weir writes flat rows"),
            ));
        }
    }
    // `from` is set by the INSERT that writes it.
    job.set(&["sinks", name], Value::Object(spec), Some(table.at));
    Ok(())
}
