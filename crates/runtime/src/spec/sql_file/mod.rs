//! SQL job files: a job written as Flink SQL statements (`weir run job.sql`).
//!
//! A SQL job file is a list of statements, each ending in `;`:
//!
//! | statement | becomes |
//! |---|---|
//! | `SET 'key' = 'value'` | a job setting: Flink's names where weir has the same thing (`parallelism.default`, `execution.checkpointing.interval`, `execution.checkpointing.mode`, `state.backend.type`, `table.exec.state.ttl`, `pipeline.name`), or any key of a YAML job by its path (`SET 'batch-size' = '4096'`) |
//! | `CREATE [TEMPORARY] TABLE t (...) WITH ('connector' = ...)` | a source when a query reads `t`, a sink when an `INSERT` writes it ([`tables`]) |
//! | `CREATE [TEMPORARY] VIEW v AS SELECT ...` | a `sql` node named `v` |
//! | `INSERT INTO t SELECT ...` | a `sql` node named `insert-into-t` whose columns take `t`'s names by position, and the sink `t` reading it |
//! | `CREATE TABLE t WITH (...) AS SELECT ...` | the same, with the query's own column names |
//! | `EXECUTE STATEMENT SET BEGIN ... END;`, `BEGIN STATEMENT SET; ... END;` | the `INSERT`s inside, in one job, as Flink's statement sets |
//!
//! The result is the tree a YAML job file would give (`weir explain` prints it as such), read
//! by the same steps ([`super::load`]): `--set` overrides, `${VAR}` references (in every
//! string, queries included, as in YAML; `$${` writes a literal `${`), the schema, serde.
//! Every node, key and query carries its place in the `.sql` file, so a problem found
//! anywhere later (a wrong option, a type error in a query's clause) is reported at its line
//! and column there.
//!
//! Tables of one event kind per row (Flink's Nexmark DDL: an `event_type` column and one
//! `ROW` column per kind) are read through the ports of weir's multi-port sources; see
//! [`variants`].

mod statements;
mod tables;
mod variants;

use std::collections::HashMap;

use serde_json::{Map, Value};
use sqlparser::tokenizer::Location;

use super::env::Environment;
use super::load::{LoadedJob, Override, decode_tree};
use super::positions::{Position, PositionIndex, TextStart, escape_segment};
use super::problems::{Problem, SpecError, SpecSource};
use statements::{Statement, read_statements};

/// Whether a job text is a SQL job file: named `*.sql`, or (a text submitted over HTTP has no
/// name) opening with a statement's first keyword rather than a YAML key.
pub fn looks_like_sql(file: &str, text: &str) -> bool {
    if file.ends_with(".sql") {
        return true;
    }
    let mut rest = text;
    loop {
        rest = rest.trim_start();
        if let Some(comment) = rest.strip_prefix("--") {
            rest = comment.split_once('\n').map_or("", |(_, after)| after);
        } else if let Some(comment) = rest.strip_prefix("/*") {
            rest = comment.split_once("*/").map_or("", |(_, after)| after);
        } else {
            break;
        }
    }
    let word: String = rest
        .chars()
        .take_while(|c| c.is_ascii_alphabetic())
        .collect();
    let after = rest[word.len()..].chars().next();
    ["SET", "CREATE", "INSERT", "EXECUTE", "BEGIN"]
        .iter()
        .any(|k| k.eq_ignore_ascii_case(&word))
        && after.is_some_and(char::is_whitespace)
}

/// Reads a SQL job file into a job, leniently as [`super::load::parse_str`] does.
pub fn parse(
    file: &str,
    text: &str,
    overrides: &[Override],
    env: &dyn Environment,
) -> Result<LoadedJob, SpecError> {
    let mut job = Job::new(text);
    let statements = match read_statements(text) {
        Ok(statements) => statements,
        Err(e) => {
            let source = SpecSource::indexed(file, PositionIndex::default());
            return Err(source.error(vec![e.problem(None)]));
        }
    };
    if statements.is_empty() {
        let source = SpecSource::indexed(file, PositionIndex::default());
        return Err(source.error(vec![Problem {
            path: String::new(),
            line: None,
            column: None,
            message: "the SQL job file holds no statement".into(),
            origin: None,
        }]));
    }
    let stem = std::path::Path::new(file)
        .file_stem()
        .and_then(|s| s.to_str())
        .filter(|s| !s.is_empty())
        .unwrap_or("job");
    job.set(&["name"], Value::String(stem.to_string()), None);
    for statement in statements {
        job.statement(statement);
    }
    job.finish();
    let Job {
        tree,
        index,
        mut problems,
        ..
    } = job;
    let source = SpecSource::indexed(file, index);
    for p in &mut problems {
        if p.line.is_none()
            && let Some(at) = source.index.value(&pointer_of(&p.path))
        {
            p.line = Some(at.line);
            p.column = Some(at.column);
        }
    }
    if !problems.is_empty() && !tree.contains_key("sources") {
        return Err(source.error(problems));
    }
    decode_tree(Value::Object(tree), source, problems, overrides, env)
}

fn pointer_of(dotted: &str) -> String {
    if dotted.is_empty() {
        return String::new();
    }
    dotted
        .split('.')
        .map(|s| format!("/{}", escape_segment(s)))
        .collect()
}

/// A problem in the SQL text, at a place.
#[derive(Debug)]
pub(super) struct SqlFileError {
    pub(super) at: Option<Location>,
    pub(super) message: String,
}

impl SqlFileError {
    pub(super) fn at(at: Location, message: impl Into<String>) -> Self {
        SqlFileError {
            at: (at.line > 0).then_some(at),
            message: message.into(),
        }
    }

    fn problem(self, fallback: Option<Position>) -> Problem {
        let at = self
            .at
            .map(|l| Position {
                line: l.line as usize,
                column: l.column as usize,
            })
            .or(fallback);
        Problem {
            path: String::new(),
            line: at.map(|p| p.line),
            column: at.map(|p| p.column),
            message: self.message,
            origin: None,
        }
    }
}

/// The job being made from the statements.
struct Job<'t> {
    text: &'t str,
    /// Byte offset of the start of each line.
    lines: Vec<usize>,
    tree: Map<String, Value>,
    index: PositionIndex,
    problems: Vec<Problem>,
    tables: tables::Tables,
    /// Views and INSERTs, in the file's order.
    queries: Vec<Query>,
    /// Where each setting was SET (by its path), to report one set twice.
    settings: HashMap<String, Position>,
}

/// A view, or an INSERT's query.
struct Query {
    /// The `sql` node's name.
    node: String,
    /// Where the statement starts.
    at: Position,
    /// The query's text, and where it starts in the file.
    text: String,
    text_at: Position,
    /// INSERT: the table written, and the column names its query's columns take.
    target: Option<(String, Vec<String>)>,
}

impl<'t> Job<'t> {
    fn new(text: &'t str) -> Self {
        let mut lines = vec![0];
        lines.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        Job {
            text,
            lines,
            tree: Map::new(),
            index: PositionIndex::default(),
            problems: Vec::new(),
            tables: tables::Tables::default(),
            queries: Vec::new(),
            settings: HashMap::new(),
        }
    }

    /// The byte offset of a tokenizer location (1-based line, column in characters).
    fn offset(&self, at: Location) -> usize {
        let line = (at.line as usize).saturating_sub(1);
        let Some(&start) = self.lines.get(line) else {
            return self.text.len();
        };
        let end = self.lines.get(line + 1).copied().unwrap_or(self.text.len());
        let row = &self.text[start..end];
        let column = (at.column as usize).saturating_sub(1);
        start + row.char_indices().nth(column).map_or(row.len(), |(i, _)| i)
    }

    /// The text between two locations (`end` exclusive).
    fn slice(&self, start: Location, end: Location) -> &'t str {
        let (a, b) = (self.offset(start), self.offset(end));
        self.text.get(a..b.max(a)).unwrap_or_default()
    }

    fn error(&mut self, e: SqlFileError, fallback: Position) {
        self.problems.push(e.problem(Some(fallback)));
    }

    /// Sets a value at a path of the tree, recording where the file wrote it.
    fn set(&mut self, path: &[&str], value: Value, at: Option<Position>) {
        let mut node = &mut self.tree;
        let mut pointer = String::new();
        for (i, key) in path.iter().enumerate() {
            pointer.push('/');
            pointer.push_str(&escape_segment(key));
            if let Some(at) = at {
                self.index.values.insert(pointer.clone(), at);
                self.index.keys.insert(pointer.clone(), at);
            }
            if i + 1 == path.len() {
                node.insert(key.to_string(), value);
                return;
            }
            let entry = node
                .entry(key.to_string())
                .or_insert_with(|| Value::Object(Map::new()));
            if !entry.is_object() {
                *entry = Value::Object(Map::new());
            }
            let Value::Object(next) = entry else { return };
            node = next;
        }
    }

    /// Records where a query's text starts, for positions inside it.
    fn text_at(&mut self, path: &[&str], at: Position) {
        let pointer: String = path
            .iter()
            .map(|k| format!("/{}", escape_segment(k)))
            .collect();
        self.index.texts.insert(pointer, TextStart::Quoted(at));
    }

    fn statement(&mut self, statement: Statement) {
        let at = statement.position();
        match statement::read(self, &statement) {
            Ok(()) => {}
            Err(e) => self.error(e, at),
        }
    }

    /// Places the tables and queries read into the tree.
    fn finish(&mut self) {
        let queries = std::mem::take(&mut self.queries);
        let tables = std::mem::take(&mut self.tables);
        tables::place(self, &tables, &queries);
        self.tables = tables;
        self.queries = queries;
    }
}

/// Reading one statement into the job.
mod statement {
    use serde_json::Value;
    use sqlparser::tokenizer::Token;

    use super::statements::{Cursor, Statement};
    use super::{Job, Query, SqlFileError, tables};
    use crate::spec::load::Override;
    use crate::spec::positions::Position;

    pub(super) fn read(job: &mut Job<'_>, statement: &Statement) -> Result<(), SqlFileError> {
        let mut c = Cursor::new(&statement.tokens);
        let first = c.peek_location();
        if c.eat_word("SET") {
            return set(job, &mut c);
        }
        if c.eat_word("CREATE") {
            c.eat_word("TEMPORARY");
            if c.eat_word("TABLE") {
                return tables::create(job, &mut c, statement);
            }
            if c.eat_word("VIEW") {
                return view(job, &mut c, statement);
            }
            return Err(SqlFileError::at(
                c.peek_location(),
                "weir reads `CREATE [TEMPORARY] TABLE` and `CREATE [TEMPORARY] VIEW`; other \
                 CREATE statements (functions, catalogs, databases) are not supported",
            ));
        }
        if c.eat_word("INSERT") {
            return insert(job, &mut c, statement);
        }
        Err(SqlFileError::at(
            first,
            format!(
                "a SQL job file holds SET, CREATE TABLE, CREATE VIEW and INSERT INTO statements, \
                 not `{}`; a query on its own has nowhere to go: write `INSERT INTO t SELECT ...` \
                 with `t` a table of `'connector' = 'print'` to see its rows",
                c.peek_text()
            ),
        ))
    }

    /// `SET 'key' = 'value'`.
    fn set(job: &mut Job<'_>, c: &mut Cursor<'_>) -> Result<(), SqlFileError> {
        let at = c.peek_location();
        let key = c.string("the setting's name, quoted (`SET 'parallelism.default' = '2'`)")?;
        c.expect(&Token::Eq, "`=`")?;
        let value = c.string("the setting's value, quoted")?;
        c.end()?;
        let position = Position {
            line: at.line as usize,
            column: at.column as usize,
        };
        let (path, value) = setting(&key, &value).map_err(|m| SqlFileError::at(at, m))?;
        if let Some(before) = job.settings.insert(path.join("."), position) {
            return Err(SqlFileError::at(
                at,
                format!(
                    "`{}` is set twice (first at line {}, column {})",
                    path.join("."),
                    before.line,
                    before.column
                ),
            ));
        }
        let path: Vec<&str> = path.iter().map(String::as_str).collect();
        job.set(&path, value, Some(position));
        Ok(())
    }

    /// A setting's place in the job and its value.
    pub(super) fn setting(key: &str, value: &str) -> Result<(Vec<String>, Value), String> {
        let one = |k: &str| vec![k.to_string()];
        let two = |a: &str, b: &str| vec![a.to_string(), b.to_string()];
        let text = Value::String(value.to_string());
        Ok(match key {
            "parallelism.default" => (one("parallelism"), number(key, value)?),
            "pipeline.name" => (one("name"), text),
            "execution.checkpointing.interval" => (two("checkpoint", "interval"), duration(value)),
            "execution.checkpointing.timeout" => (two("checkpoint", "timeout"), duration(value)),
            "execution.checkpointing.min-pause" => {
                (two("checkpoint", "min-pause"), duration(value))
            }
            "execution.checkpointing.max-concurrent-checkpoints" => {
                (two("checkpoint", "max-concurrent"), number(key, value)?)
            }
            "execution.checkpointing.num-retained" | "state.checkpoints.num-retained" => {
                (two("checkpoint", "retained"), number(key, value)?)
            }
            "execution.checkpointing.dir" | "state.checkpoints.dir" => {
                (two("checkpoint", "storage"), text)
            }
            "execution.checkpointing.mode" => {
                let mode = match value.to_ascii_uppercase().as_str() {
                    "EXACTLY_ONCE" => "exactly-once",
                    "AT_LEAST_ONCE" => "at-least-once",
                    _ => {
                        return Err(format!(
                            "`{key}` is `EXACTLY_ONCE` or `AT_LEAST_ONCE`, not `{value}`"
                        ));
                    }
                };
                (two("checkpoint", "mode"), Value::String(mode.into()))
            }
            "state.backend.type" | "state.backend" => {
                let backend = match value.to_ascii_lowercase().as_str() {
                    "hashmap" | "heap" => "heap",
                    "rocksdb" => "rocksdb",
                    _ => {
                        return Err(format!("`{key}` is `hashmap` or `rocksdb`, not `{value}`"));
                    }
                };
                (two("state", "backend"), Value::String(backend.into()))
            }
            "table.exec.state.ttl" => (two("state", "ttl"), duration(value)),
            _ if key.starts_with("sql-client.") => {
                return Err(format!(
                    "`{key}` sets up Flink's SQL client, which a job file has no use for: leave \
                     it out"
                ));
            }
            _ if is_weir_path(key) => {
                let o: Override = format!("{key}={value}").parse()?;
                (o.path, o.value)
            }
            _ => {
                return Err(format!(
                    "weir has no setting `{key}`: it reads Flink's parallelism.default, \
                     pipeline.name, execution.checkpointing.interval, .mode, .timeout, \
                     .min-pause, .dir, state.backend.type and table.exec.state.ttl, and any key \
                     of a YAML job by its path (`SET 'batch-size' = '4096'`)"
                ));
            }
        })
    }

    /// A key of a YAML job (`checkpoint.storage`, `batch-size`): weir's keys are kebab-case
    /// and none of Flink's top-level groups.
    fn is_weir_path(key: &str) -> bool {
        const TOP: &[&str] = &[
            "description",
            "parallelism",
            "chaining",
            "two-phase-aggregation",
            "window-slicing",
            "mini-batch",
            "projection-pushdown",
            "batch-size",
            "channel-capacity",
            "key-groups",
            "checkpoint",
            "restart",
            "state",
            "placement",
        ];
        let first = key.split('.').next().unwrap_or_default();
        TOP.contains(&first)
            && key
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
    }

    fn number(key: &str, value: &str) -> Result<Value, String> {
        value
            .trim()
            .parse::<u64>()
            .map(Value::from)
            .map_err(|_| format!("`{key}` is a whole number, not `{value}`"))
    }

    /// Flink writes durations as `10 s`, `1 min`, `500 ms` or a number of milliseconds;
    /// weir's keys read `10s`, `1min`, `500ms`.
    pub(super) fn duration(value: &str) -> Value {
        let v = value.trim();
        if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) {
            return Value::String(format!("{v}ms"));
        }
        Value::String(v.split_whitespace().collect::<Vec<_>>().join(""))
    }

    /// `CREATE [TEMPORARY] VIEW v [(a, b)] AS SELECT ...`.
    fn view(
        job: &mut Job<'_>,
        c: &mut Cursor<'_>,
        statement: &Statement,
    ) -> Result<(), SqlFileError> {
        let at = statement.position();
        let (name, name_at) = c.name("the view's name")?;
        if c.peek_token() == Some(&Token::LParen) {
            return Err(SqlFileError::at(
                c.peek_location(),
                "a view's column names are taken from its query: name them there with `AS`",
            ));
        }
        c.expect_word("AS")?;
        let (text, text_at) = c.rest(job, statement)?;
        if job.queries.iter().any(|q| q.node == name) || job.tables.contains(&name) {
            return Err(SqlFileError::at(
                name_at,
                format!("`{name}` is declared twice"),
            ));
        }
        job.queries.push(Query {
            node: name,
            at,
            text,
            text_at,
            target: None,
        });
        Ok(())
    }

    /// `INSERT INTO t [(a, b)] SELECT ...`.
    fn insert(
        job: &mut Job<'_>,
        c: &mut Cursor<'_>,
        statement: &Statement,
    ) -> Result<(), SqlFileError> {
        let at = statement.position();
        if !c.eat_word("INTO") {
            return Err(SqlFileError::at(
                c.peek_location(),
                "weir reads `INSERT INTO t SELECT ...` (`INSERT OVERWRITE` is for batch tables)",
            ));
        }
        let (table, table_at) = c.name("the table written")?;
        let mut columns = Vec::new();
        if c.peek_token() == Some(&Token::LParen) {
            c.next();
            loop {
                let (column, _) = c.name("a column of the table")?;
                columns.push(column);
                if c.peek_token() == Some(&Token::Comma) {
                    c.next();
                    continue;
                }
                c.expect(&Token::RParen, "`)`")?;
                break;
            }
        }
        let (text, text_at) = c.rest(job, statement)?;
        let node = format!("insert-into-{table}");
        if job.queries.iter().any(|q| q.node == node) {
            return Err(SqlFileError::at(
                table_at,
                format!(
                    "`{table}` is written by two INSERTs: write one, with `UNION ALL` of both \
                     queries"
                ),
            ));
        }
        job.queries.push(Query {
            node,
            at,
            text,
            text_at,
            target: Some((table, columns)),
        });
        Ok(())
    }

    /// Where a query's text ends and what it is, for a CTAS.
    pub(super) fn ctas(
        job: &mut Job<'_>,
        c: &mut Cursor<'_>,
        statement: &Statement,
        table: &str,
    ) -> Result<(), SqlFileError> {
        let at = statement.position();
        let (text, text_at) = c.rest(job, statement)?;
        job.queries.push(Query {
            node: format!("insert-into-{table}"),
            at,
            text,
            text_at,
            target: Some((table.to_string(), Vec::new())),
        });
        Ok(())
    }

    impl Statement {
        pub(super) fn position(&self) -> Position {
            let at = self.start;
            Position {
                line: at.line as usize,
                column: at.column as usize,
            }
        }
    }
}

#[cfg(test)]
mod tests;
