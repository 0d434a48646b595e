//! Splitting a SQL job file into statements, and a cursor over one statement's tokens.
//!
//! sqlparser reads queries, but not Flink's DDL (`WATERMARK FOR`, computed columns, `ROW<...>`,
//! `WITH ('k' = 'v')`), so statements are read here from sqlparser's tokens and only their
//! expressions and queries are handed to its parser.

use sqlparser::dialect::GenericDialect;
use sqlparser::tokenizer::{Location, Token, TokenWithSpan, Tokenizer};

use super::{Job, SqlFileError};

/// The most statements a SQL job file may hold.
const MAX_STATEMENTS: usize = 1024;

/// One statement: its tokens (no whitespace or comments), where it starts and where its `;`
/// (or the end of the text) is.
#[derive(Debug)]
pub(super) struct Statement {
    pub(super) tokens: Vec<TokenWithSpan>,
    pub(super) start: Location,
    pub(super) end: Location,
}

/// The statements of a text. `EXECUTE STATEMENT SET BEGIN ... END;` and `BEGIN STATEMENT SET;
/// ... END;` are dropped around the statements they hold.
pub(super) fn read_statements(text: &str) -> Result<Vec<Statement>, SqlFileError> {
    let dialect = GenericDialect {};
    let tokens = Tokenizer::new(&dialect, text)
        .tokenize_with_location()
        .map_err(|e| SqlFileError::at(e.location, format!("cannot read the SQL: {}", e.message)))?;
    let mut out = Vec::new();
    let mut current: Vec<TokenWithSpan> = Vec::new();
    let mut depth = 0usize;
    let mut in_set = false;
    for token in tokens {
        match &token.token {
            Token::Whitespace(_) => continue,
            Token::EOF => break,
            Token::LParen => depth += 1,
            Token::RParen => depth = depth.saturating_sub(1),
            _ => {}
        }
        // `EXECUTE STATEMENT SET BEGIN` opens a set without a `;`.
        if current.len() == 3
            && is(&current, &["EXECUTE", "STATEMENT", "SET"])
            && word(&token.token, "BEGIN")
        {
            current.clear();
            in_set = true;
            continue;
        }
        if token.token == Token::SemiColon && depth == 0 {
            let end = token.span.start;
            let statement = std::mem::take(&mut current);
            if is(&statement, &["BEGIN", "STATEMENT", "SET"]) && statement.len() == 3 {
                in_set = true;
                continue;
            }
            if in_set && is(&statement, &["END"]) && statement.len() == 1 {
                in_set = false;
                continue;
            }
            if let Some(first) = statement.first() {
                if out.len() >= MAX_STATEMENTS {
                    return Err(SqlFileError::at(
                        first.span.start,
                        format!("a SQL job file holds at most {MAX_STATEMENTS} statements"),
                    ));
                }
                let start = first.span.start;
                out.push(Statement {
                    tokens: statement,
                    start,
                    end,
                });
            }
            continue;
        }
        current.push(token);
    }
    if let Some(first) = current.first() {
        if in_set && is(&current, &["END"]) && current.len() == 1 {
            return Ok(out);
        }
        let end = current.last().map_or(first.span.end, |t| t.span.end);
        let start = first.span.start;
        out.push(Statement {
            tokens: current,
            start,
            end,
        });
    } else if in_set {
        return Err(SqlFileError::at(
            Location::new(0, 0),
            "the statement set is not closed with `END;`",
        ));
    }
    Ok(out)
}

fn word(token: &Token, keyword: &str) -> bool {
    matches!(token, Token::Word(w) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(keyword))
}

fn is(tokens: &[TokenWithSpan], words: &[&str]) -> bool {
    tokens.len() >= words.len() && tokens.iter().zip(words).all(|(t, w)| word(&t.token, w))
}

/// A cursor over a statement's tokens.
pub(super) struct Cursor<'s> {
    tokens: &'s [TokenWithSpan],
    i: usize,
}

impl<'s> Cursor<'s> {
    pub(super) fn new(tokens: &'s [TokenWithSpan]) -> Self {
        Cursor { tokens, i: 0 }
    }

    pub(super) fn peek(&self) -> Option<&'s TokenWithSpan> {
        self.tokens.get(self.i)
    }

    pub(super) fn peek_token(&self) -> Option<&'s Token> {
        self.peek().map(|t| &t.token)
    }

    /// Where the next token is (the end of the statement when there is none).
    pub(super) fn peek_location(&self) -> Location {
        match self.peek() {
            Some(t) => t.span.start,
            None => self
                .tokens
                .last()
                .map_or(Location::new(0, 0), |t| t.span.end),
        }
    }

    pub(super) fn peek_text(&self) -> String {
        self.peek_token()
            .map_or_else(|| "the end of the statement".into(), ToString::to_string)
    }

    pub(super) fn next(&mut self) -> Option<&'s TokenWithSpan> {
        let t = self.tokens.get(self.i);
        if t.is_some() {
            self.i += 1;
        }
        t
    }

    pub(super) fn at_word(&self, keyword: &str) -> bool {
        self.peek_token().is_some_and(|t| word(t, keyword))
    }

    pub(super) fn eat_word(&mut self, keyword: &str) -> bool {
        if self.at_word(keyword) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    pub(super) fn expect_word(&mut self, keyword: &str) -> Result<(), SqlFileError> {
        if self.eat_word(keyword) {
            Ok(())
        } else {
            Err(SqlFileError::at(
                self.peek_location(),
                format!("expected `{keyword}`, found {}", self.found()),
            ))
        }
    }

    pub(super) fn expect(&mut self, token: &Token, what: &str) -> Result<(), SqlFileError> {
        if self.peek_token() == Some(token) {
            self.i += 1;
            Ok(())
        } else {
            Err(SqlFileError::at(
                self.peek_location(),
                format!("expected {what}, found {}", self.found()),
            ))
        }
    }

    fn found(&self) -> String {
        match self.peek_token() {
            Some(t) => format!("`{t}`"),
            None => "the end of the statement".into(),
        }
    }

    /// The statement ends here.
    pub(super) fn end(&self) -> Result<(), SqlFileError> {
        match self.peek() {
            None => Ok(()),
            Some(t) => Err(SqlFileError::at(
                t.span.start,
                format!("unexpected `{}`: the statement should end here", t.token),
            )),
        }
    }

    /// A quoted string.
    pub(super) fn string(&mut self, what: &str) -> Result<String, SqlFileError> {
        match self.peek_token() {
            Some(Token::SingleQuotedString(s)) => {
                let s = s.clone();
                self.i += 1;
                Ok(s)
            }
            _ => Err(SqlFileError::at(
                self.peek_location(),
                format!("expected {what}, found {}", self.found()),
            )),
        }
    }

    /// A name: a word, quoted or not; `catalog.db.name` gives its last part (weir has one
    /// catalog).
    pub(super) fn name(&mut self, what: &str) -> Result<(String, Location), SqlFileError> {
        let at = self.peek_location();
        let mut name = self.ident(what)?;
        while self.peek_token() == Some(&Token::Period) {
            self.i += 1;
            name = self.ident(what)?;
        }
        Ok((name, at))
    }

    /// One identifier.
    pub(super) fn ident(&mut self, what: &str) -> Result<String, SqlFileError> {
        match self.peek_token() {
            Some(Token::Word(w)) => {
                let v = w.value.clone();
                self.i += 1;
                Ok(v)
            }
            _ => Err(SqlFileError::at(
                self.peek_location(),
                format!("expected {what}, found {}", self.found()),
            )),
        }
    }

    /// The tokens up to the next `,` or `)` at this level of parentheses (not consumed).
    pub(super) fn until_comma_or_close(&mut self) -> &'s [TokenWithSpan] {
        let start = self.i;
        let mut depth = 0usize;
        while let Some(t) = self.tokens.get(self.i) {
            match t.token {
                Token::LParen => depth += 1,
                Token::RParen if depth == 0 => break,
                Token::RParen => depth -= 1,
                Token::Comma if depth == 0 => break,
                _ => {}
            }
            self.i += 1;
        }
        &self.tokens[start..self.i]
    }

    /// The rest of the statement as text (a query), and where it starts.
    pub(super) fn rest(
        &mut self,
        job: &Job<'_>,
        statement: &Statement,
    ) -> Result<(String, crate::spec::positions::Position), SqlFileError> {
        let Some(first) = self.peek() else {
            return Err(SqlFileError::at(
                self.peek_location(),
                "expected a query (`SELECT ...`)",
            ));
        };
        let start = first.span.start;
        self.i = self.tokens.len();
        let text = job.slice(start, statement.end).trim_end().to_string();
        Ok((
            text,
            crate::spec::positions::Position {
                line: start.line as usize,
                column: start.column as usize,
            },
        ))
    }
}

/// Parses a query as far as a SQL job file needs to (which relations it reads, and the
/// rewrite of a view of a table of one event kind per row): Flink's `TABLE t` argument of a
/// window function is read as `t`. The planner parses it again, fully, and reports what does
/// not parse at its place; `None` here.
pub(super) fn parse_query(text: &str) -> Option<sqlparser::ast::Query> {
    let dialect = GenericDialect {};
    let tokens = Tokenizer::new(&dialect, text)
        .tokenize_with_location()
        .ok()?;
    let mut kept: Vec<TokenWithSpan> = Vec::with_capacity(tokens.len());
    for t in tokens {
        let after_paren = kept
            .iter()
            .rev()
            .find(|k| !matches!(k.token, Token::Whitespace(_)))
            .is_some_and(|k| k.token == Token::LParen);
        if after_paren && word(&t.token, "TABLE") {
            continue;
        }
        kept.push(t);
    }
    let mut parser = sqlparser::parser::Parser::new(&dialect)
        .with_recursion_limit(64)
        .with_tokens_with_locations(kept);
    parser.parse_query().ok().map(|q| *q)
}
