//! Reading a query's text: Flink's table-valued-function syntax that sqlparser does not know,
//! identifiers, literals, and rendering expressions back as weir's expression snippets.

use sqlparser::ast::{self, Expr, Ident, Spanned};
use sqlparser::dialect::GenericDialect;
use sqlparser::parser::Parser;
use sqlparser::tokenizer::{Location, Span, Token, TokenWithSpan, Tokenizer};

use super::SqlError;

/// The deepest nesting of a query the planner accepts (subqueries, parentheses): sqlparser
/// refuses deeper text with an error instead of recursing further, and so every walk of the
/// tree here is bounded by it.
const RECURSION_LIMIT: usize = 64;

/// The longest query text accepted, in bytes.
pub(super) const MAX_QUERY_BYTES: usize = 64 * 1024;

/// Parses one `SELECT` statement.
///
/// Flink writes a window table-valued function's input as `TABLE bid` and a session window's
/// key as `TABLE bid PARTITION BY bidder`; sqlparser reads neither inside a function call. The
/// tokens are rewritten before parsing (spans kept, so errors still point into the text):
/// `TABLE` directly after `(` disappears, and `PARTITION BY k` or `PARTITION BY (a, b)` right
/// after that table name becomes one more argument, `PARTITION(k)`.
pub(super) fn parse(sql: &str) -> Result<ast::Query, SqlError> {
    if sql.len() > MAX_QUERY_BYTES {
        return Err(SqlError::at(
            Span::empty(),
            format!("the query is longer than {MAX_QUERY_BYTES} bytes"),
        ));
    }
    let dialect = GenericDialect {};
    let tokens = Tokenizer::new(&dialect, sql)
        .tokenize_with_location()
        .map_err(|e| {
            SqlError::at(
                Span::new(e.location, e.location),
                format!("cannot read the query: {}", e.message),
            )
        })?;
    let tokens = rewrite_table_arguments(tokens);
    let mut parser = Parser::new(&dialect)
        .with_recursion_limit(RECURSION_LIMIT)
        .with_tokens_with_locations(tokens);
    let statement = parser.parse_statement().map_err(|e| parse_error(e, sql))?;
    // One statement; a trailing `;` is fine.
    while parser.consume_token(&Token::SemiColon) {}
    let next = parser.peek_token();
    if next.token != Token::EOF {
        return Err(SqlError::at(
            next.span,
            format!(
                "unexpected `{}` after the query: a `sql` node holds one SELECT",
                next.token
            ),
        ));
    }
    match statement {
        ast::Statement::Query(query) => Ok(*query),
        other => Err(SqlError::at(
            Span::empty(),
            format!(
                "a `sql` node holds one SELECT query, not `{}`",
                first_words(&other.to_string())
            ),
        )),
    }
}

fn first_words(text: &str) -> String {
    text.split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// sqlparser's errors carry their position in the text ("... at Line: 2, Column: 22"); one at
/// the end of the text carries none, and is shown at the end.
fn parse_error(e: sqlparser::parser::ParserError, sql: &str) -> SqlError {
    let end = {
        let text = sql.trim_end();
        let line = text.lines().count().max(1) as u64;
        let column = text.lines().last().map_or(0, |l| l.chars().count()) as u64 + 1;
        Location::new(line, column)
    };
    let text = e.to_string();
    let text = text.strip_prefix("sql parser error: ").unwrap_or(&text);
    let (message, location) = match text.rsplit_once(" at Line: ") {
        Some((message, at)) => {
            let mut parts = at.split(", Column: ");
            let line = parts.next().and_then(|l| l.trim().parse::<u64>().ok());
            let column = parts.next().and_then(|c| c.trim().parse::<u64>().ok());
            match (line, column) {
                (Some(line), Some(column)) if line > 0 => (message, Location::new(line, column)),
                _ => (message, end),
            }
        }
        None => (text, end),
    };
    SqlError::at(
        Span::new(location, location),
        format!("cannot parse the query: {message}"),
    )
}

fn is_word(token: &Token, keyword: &str) -> bool {
    matches!(token, Token::Word(w) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(keyword))
}

fn rewrite_table_arguments(tokens: Vec<TokenWithSpan>) -> Vec<TokenWithSpan> {
    let significant = |t: &TokenWithSpan| !matches!(t.token, Token::Whitespace(_));
    let mut out: Vec<TokenWithSpan> = Vec::with_capacity(tokens.len());
    let mut i = 0;
    while i < tokens.len() {
        let token = &tokens[i];
        let after_paren = out
            .iter()
            .rev()
            .find(|t| significant(t))
            .is_some_and(|t| t.token == Token::LParen);
        let next_is_name = tokens[i + 1..]
            .iter()
            .find(|t| significant(t))
            .is_some_and(|t| matches!(t.token, Token::Word(_)));
        if after_paren && is_word(&token.token, "TABLE") && next_is_name {
            i += 1;
            // The name, possibly dotted (`nexmark.bid`).
            while i < tokens.len() {
                let t = &tokens[i];
                let part = matches!(t.token, Token::Word(_) | Token::Period)
                    || matches!(t.token, Token::Whitespace(_));
                if !part {
                    break;
                }
                out.push(t.clone());
                i += 1;
                // Stop at the end of the name: a word not followed by `.`.
                if matches!(t.token, Token::Word(_)) {
                    let next = tokens[i..].iter().find(|t| significant(t));
                    if next.is_none_or(|t| t.token != Token::Period) {
                        break;
                    }
                }
            }
            // `PARTITION BY k` → `, PARTITION(k)`; `PARTITION BY (a, b)` → `, PARTITION(a, b)`.
            let rest: Vec<usize> = (i..tokens.len())
                .filter(|&j| significant(&tokens[j]))
                .take(3)
                .collect();
            if rest.len() >= 2
                && is_word(&tokens[rest[0]].token, "PARTITION")
                && is_word(&tokens[rest[1]].token, "BY")
            {
                let partition = tokens[rest[0]].clone();
                out.push(TokenWithSpan::new(Token::Comma, partition.span));
                out.push(partition.clone());
                let by = rest[1];
                let parenthesised = rest
                    .get(2)
                    .is_some_and(|&j| tokens[j].token == Token::LParen);
                if parenthesised {
                    // Copy `(a, b)` as it is.
                    i = by + 1;
                } else {
                    out.push(TokenWithSpan::new(Token::LParen, partition.span));
                    i = by + 1;
                    // One name, possibly dotted.
                    while i < tokens.len() {
                        let t = &tokens[i];
                        if !(matches!(t.token, Token::Word(_) | Token::Period)
                            || (matches!(t.token, Token::Whitespace(_))
                                && out.last().is_some_and(|l| l.token == Token::LParen)))
                        {
                            break;
                        }
                        out.push(t.clone());
                        i += 1;
                    }
                    out.push(TokenWithSpan::new(Token::RParen, partition.span));
                }
            }
            continue;
        }
        out.push(token.clone());
        i += 1;
    }
    out
}

/// The name an identifier gives, and whether it matches `name` (exactly, or ignoring case,
/// as weir's expressions match columns).
pub(super) fn same_name(a: &str, b: &str) -> bool {
    a == b || a.eq_ignore_ascii_case(b)
}

/// An identifier for a column, quoted unless it is a plain lower-case-or-mixed word that
/// reads back as itself.
pub(super) fn ident(name: &str) -> Ident {
    let plain = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !RESERVED.iter().any(|r| r.eq_ignore_ascii_case(name));
    if plain {
        Ident::new(name)
    } else {
        Ident::with_quote('"', name)
    }
}

/// Words that must be quoted to be read as a column.
const RESERVED: &[&str] = &[
    "all",
    "and",
    "as",
    "between",
    "by",
    "case",
    "cast",
    "distinct",
    "else",
    "end",
    "exists",
    "false",
    "from",
    "group",
    "having",
    "in",
    "interval",
    "is",
    "like",
    "not",
    "null",
    "or",
    "order",
    "select",
    "then",
    "true",
    "when",
    "where",
    "window",
    "timestamp",
    "date",
    "time",
    "over",
    "partition",
    "rows",
    "range",
    "table",
];

/// A column name as written in an expression.
pub(super) fn column(name: &str) -> String {
    ident(name).to_string()
}

/// `INTERVAL '10' SECOND` → 10,000 ms.
pub(super) fn interval_millis(expr: &Expr) -> Result<i64, SqlError> {
    match expr {
        Expr::Interval(_) => {
            crate::expr::interval_millis(expr).map_err(|e| SqlError::at(expr.span(), e.to_string()))
        }
        Expr::Nested(inner) => interval_millis(inner),
        other => Err(SqlError::at(
            other.span(),
            format!("expected an INTERVAL such as INTERVAL '10' SECOND, found `{other}`"),
        )),
    }
}

/// A non-negative integer literal (`10` in `ROWS BETWEEN 10 PRECEDING`, `N` in `rn <= N`).
pub(super) fn integer(expr: &Expr) -> Option<i64> {
    match expr {
        Expr::Value(v) => match &v.value {
            ast::Value::Number(digits, _) => digits.parse().ok(),
            _ => None,
        },
        Expr::Nested(inner) => integer(inner),
        _ => None,
    }
}

/// The conjuncts of `a AND b AND c`, without recursion on the depth of the chain.
pub(super) fn conjuncts(expr: &Expr) -> Vec<Expr> {
    let mut out = Vec::new();
    let mut stack = vec![expr];
    while let Some(e) = stack.pop() {
        match e {
            Expr::BinaryOp {
                left,
                op: ast::BinaryOperator::And,
                right,
            } => {
                stack.push(right);
                stack.push(left);
            }
            Expr::Nested(inner)
                if matches!(
                    **inner,
                    Expr::BinaryOp {
                        op: ast::BinaryOperator::And,
                        ..
                    }
                ) =>
            {
                stack.push(inner)
            }
            other => out.push(other.clone()),
        }
    }
    out
}

/// A function call's name in lower case, when the call has no `OVER`.
pub(super) fn call_name(f: &ast::Function) -> String {
    f.name.to_string().to_ascii_lowercase()
}

/// The plain expression arguments of a call (`*` as `None`).
pub(super) fn call_args(f: &ast::Function) -> Result<Vec<Option<&Expr>>, SqlError> {
    match &f.args {
        ast::FunctionArguments::None => Ok(vec![]),
        ast::FunctionArguments::List(list) => list
            .args
            .iter()
            .map(|a| match a {
                ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(e)) => Ok(Some(e)),
                ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Wildcard) => Ok(None),
                other => Err(SqlError::at(
                    f.name.span(),
                    format!("`{other}` is not supported as an argument of {}", f.name),
                )),
            })
            .collect(),
        ast::FunctionArguments::Subquery(_) => Err(SqlError::at(
            f.name.span(),
            format!("a subquery is not supported as the argument of {}", f.name),
        )),
    }
}
