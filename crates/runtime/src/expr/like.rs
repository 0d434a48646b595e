//! `LIKE`, `NOT LIKE`, `ILIKE`, `NOT ILIKE` against a constant pattern compiled once.
//!
//! `%` matches any run of characters and `_` exactly one. The escape character is `\` unless an
//! `ESCAPE 'c'` clause names another (`ESCAPE ''` turns escaping off). The pattern is compiled when
//! the expression is, into a plain string test when it can be (`abc`, `abc%`, `%abc`, `%abc%`)
//! and a small backtracking matcher otherwise, so evaluation neither parses the pattern nor builds
//! a regex per batch, as Arrow's `like` kernel would. ILIKE folds case character by character
//! (simple Unicode lowercase mapping).

use std::sync::Arc;

use arrow_array::{ArrayRef, BooleanArray, RecordBatch};
use sqlparser::ast;

use super::cast;
use super::compile::{Compiler, Origin};
use super::error::{EvalError, ExprError};
use super::node::{Node, Operator};
use super::types::{Literal, SqlType, Value, strings};

/// Compiles `expr [NOT] [I]LIKE pattern [ESCAPE escape]`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn compile(
    compiler: &Compiler<'_>,
    expr: &ast::Expr,
    pattern: &ast::Expr,
    escape: Option<&ast::Expr>,
    negated: bool,
    any: bool,
    case_insensitive: bool,
    origin: &Origin,
) -> Result<Node, ExprError> {
    let keyword = if case_insensitive { "ILIKE" } else { "LIKE" };
    if any {
        return Err(origin.unsupported(format!(
            "{keyword} ANY is not supported; combine several {keyword}s with OR"
        )));
    }
    let input = compiler.value(expr)?;
    let input = match input.ty {
        SqlType::String => input,
        SqlType::Null => cast::implicit(input, SqlType::String),
        other => {
            return Err(origin.type_error(format!(
                "{keyword} needs a STRING on its left, but `{expr}` is {other}; \
                 CAST(x AS STRING) first"
            )));
        }
    };
    let pattern_node = compiler.value(pattern)?;
    let pattern_text = match pattern_node.as_literal() {
        Some(literal) if literal.is_null() => None,
        Some(literal) if literal.as_str().is_some() => literal.as_str().map(str::to_owned),
        _ => {
            return Err(Origin::of(pattern).type_error(format!(
                "{keyword} needs a constant string pattern such as 'abc%', not `{pattern}`"
            )));
        }
    };
    let escape = match escape {
        None => Some('\\'),
        Some(escape) => {
            let text = compiler.constant_str(escape, "the ESCAPE character")?;
            let mut chars = text.as_deref().unwrap_or("").chars();
            match (chars.next(), chars.next()) {
                (None, _) => None,
                (Some(c), None) => Some(c),
                _ => {
                    return Err(Origin::of(escape).type_error(
                        "ESCAPE takes a single character, e.g. ESCAPE '#', or '' for none",
                    ));
                }
            }
        }
    };
    let Some(pattern_text) = pattern_text else {
        // `x LIKE NULL` is NULL.
        return Ok(Node::literal(
            Literal::null(SqlType::Bool),
            SqlType::Bool,
            origin.sql.clone(),
        ));
    };
    let pattern = LikePattern::new(&pattern_text, escape, case_insensitive).map_err(|message| {
        Origin::of(pattern).type_error(format!("invalid {keyword} pattern: {message}"))
    })?;
    Ok(Node::op(
        SqlType::Bool,
        origin.sql.clone(),
        LikeOp {
            input,
            pattern,
            negated,
        },
    ))
}

#[derive(Debug)]
struct LikeOp {
    input: Node,
    pattern: LikePattern,
    negated: bool,
}

impl Operator for LikeOp {
    fn eval(&self, batch: &RecordBatch, sql: &str) -> Result<Value, EvalError> {
        let negated = self.negated;
        self.input.eval(batch)?.map(|array| {
            let strings = strings(array, sql)?;
            let result = BooleanArray::from_unary(strings, |s| self.pattern.matches(s) != negated);
            Ok(Arc::new(result) as ArrayRef)
        })
    }

    fn children(&self) -> Vec<&Node> {
        vec![&self.input]
    }
}

/// One element of a pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Token {
    /// A literal character (already case-folded for ILIKE).
    Char(char),
    /// `_`
    One,
    /// `%` (consecutive ones are merged)
    Many,
}

/// A compiled LIKE pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LikePattern {
    /// No wildcards: string equality.
    Exact(String),
    /// `abc%`
    Prefix(String),
    /// `%abc`
    Suffix(String),
    /// `%abc%`
    Contains(String),
    /// `%`: every string.
    All,
    /// Anything else, matched by [`matches_tokens`]; `fold` is set for ILIKE.
    General { tokens: Vec<Token>, fold: bool },
}

impl LikePattern {
    /// Compiles `pattern`; fails when it ends in a lone escape character.
    pub(crate) fn new(
        pattern: &str,
        escape: Option<char>,
        case_insensitive: bool,
    ) -> Result<Self, String> {
        let mut tokens: Vec<Token> = Vec::with_capacity(pattern.len());
        let mut chars = pattern.chars();
        while let Some(c) = chars.next() {
            let token = if Some(c) == escape {
                match chars.next() {
                    Some(escaped) => Token::Char(escaped),
                    None => {
                        return Err(format!(
                            "'{pattern}' ends with the escape character '{c}'; write it twice \
                             to match it literally"
                        ));
                    }
                }
            } else {
                match c {
                    '%' => Token::Many,
                    '_' => Token::One,
                    other => Token::Char(other),
                }
            };
            if token == Token::Many && tokens.last() == Some(&Token::Many) {
                continue;
            }
            tokens.push(match token {
                Token::Char(c) if case_insensitive => Token::Char(fold(c)),
                other => other,
            });
        }
        if case_insensitive {
            return Ok(Self::General { tokens, fold: true });
        }
        Ok(Self::classify(tokens))
    }

    /// Recognises the shapes a plain string test answers.
    fn classify(tokens: Vec<Token>) -> Self {
        let literal = |slice: &[Token]| -> Option<String> {
            slice
                .iter()
                .map(|token| match token {
                    Token::Char(c) => Some(*c),
                    _ => None,
                })
                .collect()
        };
        let n = tokens.len();
        let starts = tokens.first() == Some(&Token::Many);
        let ends = n > 0 && tokens.last() == Some(&Token::Many);
        if starts && n == 1 {
            return Self::All;
        }
        let (lo, hi) = (usize::from(starts), n - usize::from(ends));
        match (starts, ends, literal(&tokens[lo..hi])) {
            (false, false, Some(text)) => Self::Exact(text),
            (false, true, Some(text)) => Self::Prefix(text),
            (true, false, Some(text)) => Self::Suffix(text),
            (true, true, Some(text)) => Self::Contains(text),
            _ => Self::General {
                tokens,
                fold: false,
            },
        }
    }

    /// Whether `haystack` matches the whole pattern.
    pub(crate) fn matches(&self, haystack: &str) -> bool {
        match self {
            Self::Exact(text) => haystack == text,
            Self::Prefix(text) => haystack.starts_with(text.as_str()),
            Self::Suffix(text) => haystack.ends_with(text.as_str()),
            Self::Contains(text) => haystack.contains(text.as_str()),
            Self::All => true,
            Self::General { tokens, fold } => matches_tokens(tokens, haystack, *fold),
        }
    }
}

/// Simple case folding for ILIKE.
fn fold(c: char) -> char {
    if c.is_ascii() {
        c.to_ascii_lowercase()
    } else {
        c.to_lowercase().next().unwrap_or(c)
    }
}

/// Wildcard matching with single-star backtracking: on a mismatch, retry from the last `%` one
/// character further on. Worst case O(pattern × haystack), linear for typical patterns.
fn matches_tokens(tokens: &[Token], haystack: &str, case_fold: bool) -> bool {
    let (mut p, mut s) = (0usize, 0usize);
    // (token after the last `%`, haystack position that `%` currently extends to)
    let mut star: Option<(usize, usize)> = None;
    loop {
        if let Some(token) = tokens.get(p) {
            let next = haystack[s..].chars().next();
            match (token, next) {
                (Token::Many, _) => {
                    if p + 1 == tokens.len() {
                        return true;
                    }
                    p += 1;
                    star = Some((p, s));
                    continue;
                }
                (Token::One, Some(c)) => {
                    s += c.len_utf8();
                    p += 1;
                    continue;
                }
                (Token::Char(expected), Some(c))
                    if *expected == if case_fold { fold(c) } else { c } =>
                {
                    s += c.len_utf8();
                    p += 1;
                    continue;
                }
                _ => {}
            }
        } else if s == haystack.len() {
            return true;
        }
        // Mismatch: let the last `%` swallow one more character, or give up.
        let Some((star_p, star_s)) = star else {
            return false;
        };
        let Some(c) = haystack[star_s..].chars().next() else {
            return false;
        };
        star = Some((star_p, star_s + c.len_utf8()));
        p = star_p;
        s = star_s + c.len_utf8();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn like(pattern: &str, haystack: &str) -> bool {
        LikePattern::new(pattern, Some('\\'), false)
            .unwrap()
            .matches(haystack)
    }

    #[test]
    fn simple_shapes_compile_to_string_tests() {
        let p = |s| LikePattern::new(s, Some('\\'), false).unwrap();
        assert_eq!(p("abc"), LikePattern::Exact("abc".into()));
        assert_eq!(p("abc%"), LikePattern::Prefix("abc".into()));
        assert_eq!(p("%abc"), LikePattern::Suffix("abc".into()));
        assert_eq!(p("%%abc%"), LikePattern::Contains("abc".into()));
        assert_eq!(p("%"), LikePattern::All);
        assert_eq!(p("a\\%"), LikePattern::Exact("a%".into()));
        assert!(matches!(p("a_c"), LikePattern::General { .. }));
    }

    #[test]
    fn general_patterns_backtrack_over_percent() {
        assert!(like("a%b%c", "a_b_b_c"));
        assert!(like("a%bc", "abcbc"));
        assert!(!like("a%bc", "abcb"));
        assert!(like("_é_", "hém"));
        assert!(!like("___", "ab"));
        assert!(like("%a_", "banana!"));
        assert!(like("", ""));
        assert!(!like("", "x"));
    }

    #[test]
    fn trailing_escape_is_rejected() {
        assert!(LikePattern::new("abc\\", Some('\\'), false).is_err());
        assert!(LikePattern::new("abc\\", None, false).is_ok());
    }
}
