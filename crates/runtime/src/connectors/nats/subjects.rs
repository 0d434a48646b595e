//! Where the NATS sink publishes each row: a literal subject, or a template whose
//! `{expression}` parts are SQL expressions over the input's columns, compiled once when the
//! job is planned and evaluated per batch, each value written as text in its place
//! (`bids.{auction % 4}.new`); `{{` and `}}` stand for braces.

use std::sync::Arc;

use arrow_array::{Array, RecordBatch};
use arrow_schema::SchemaRef;

use crate::api::OperatorError;
use crate::expr::Expr;

/// Where a row goes.
#[derive(Clone)]
pub enum Subjects {
    Literal(String),
    Computed(Arc<Template>),
}

/// A subject template compiled against the input's columns.
pub struct Template {
    parts: Vec<Part>,
}

enum Part {
    Text(String),
    Expr(Expr),
}

/// A template as written: text and the SQL of its expressions.
enum Written {
    Text(String),
    Expr(String),
}

impl Subjects {
    /// The subjects `text` describes for an input of `schema`; a problem names what is wrong.
    pub fn compile(text: &str, schema: &SchemaRef) -> Result<Self, String> {
        let written = parse(text)?;
        if let [Written::Text(literal)] = &written[..] {
            if literal.split('.').any(str::is_empty)
                || literal
                    .chars()
                    .any(|c| c.is_whitespace() || c == '*' || c == '>')
            {
                return Err(format!(
                    "`{literal}` is not a subject to publish to: tokens separated by `.`, no \
                     blanks or wildcards"
                ));
            }
            return Ok(Subjects::Literal(literal.clone()));
        }
        let mut parts = Vec::new();
        for part in written {
            parts.push(match part {
                Written::Text(t) => Part::Text(t),
                Written::Expr(sql) => Part::Expr(
                    Expr::compile(&sql, schema).map_err(|e| format!("in `{{{sql}}}`: {e}"))?,
                ),
            });
        }
        Ok(Subjects::Computed(Arc::new(Template { parts })))
    }

    /// Whether every row goes to one subject.
    pub fn is_literal(&self) -> bool {
        matches!(self, Subjects::Literal(_))
    }
}

impl Template {
    /// Each row's subject.
    pub fn subjects(&self, batch: &RecordBatch) -> Result<Vec<String>, OperatorError> {
        let mut out = vec![String::new(); batch.num_rows()];
        for part in &self.parts {
            match part {
                Part::Text(t) => out.iter_mut().for_each(|s| s.push_str(t)),
                Part::Expr(e) => {
                    let values = e.evaluate(batch)?;
                    let options = arrow_cast::display::FormatOptions::default();
                    let formatter = arrow_cast::display::ArrayFormatter::try_new(&values, &options)
                        .map_err(|e| OperatorError::Internal(format!("NATS subject: {e}")))?;
                    for (row, s) in out.iter_mut().enumerate() {
                        if values.is_null(row) {
                            return Err(OperatorError::Data(format!(
                                "NATS sink: a subject expression is NULL for the row {row} of a batch"
                            )));
                        }
                        s.push_str(&formatter.value(row).to_string());
                    }
                }
            }
        }
        if let Some(bad) = out.iter().find(|s| {
            s.is_empty() || s.split('.').any(str::is_empty) || s.contains(char::is_whitespace)
        }) {
            return Err(OperatorError::Data(format!(
                "NATS sink: `{bad}` is not a subject (tokens separated by `.`, no blanks)"
            )));
        }
        Ok(out)
    }
}

/// `text{expr}text...` in parts; `{{` and `}}` stand for braces.
fn parse(text: &str) -> Result<Vec<Written>, String> {
    let mut parts = Vec::new();
    let mut literal = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '{' if chars.peek() == Some(&'{') => {
                chars.next();
                literal.push('{');
            }
            '}' if chars.peek() == Some(&'}') => {
                chars.next();
                literal.push('}');
            }
            '{' => {
                let mut sql = String::new();
                let mut depth = 0usize;
                loop {
                    match chars.next() {
                        None => return Err(format!("`{text}`: a `{{` is never closed")),
                        Some('}') if depth == 0 => break,
                        Some(c) => {
                            match c {
                                '{' => depth += 1,
                                '}' => depth -= 1,
                                _ => {}
                            }
                            sql.push(c);
                        }
                    }
                }
                if sql.trim().is_empty() {
                    return Err(format!("`{text}`: `{{}}` holds no expression"));
                }
                if !literal.is_empty() {
                    parts.push(Written::Text(std::mem::take(&mut literal)));
                }
                parts.push(Written::Expr(sql));
            }
            '}' => return Err(format!("`{text}`: a `}}` closes nothing (write `}}}}`)")),
            c => literal.push(c),
        }
    }
    if !literal.is_empty() || parts.is_empty() {
        parts.push(Written::Text(literal));
    }
    Ok(parts)
}
