//! Flink's row-wise string functions: `lpad`, `rpad`, `translate`, `concat_ws`, `initcap`,
//! `repeat`, `reverse`, `replace`, `locate`/`instr`/`POSITION(a IN s)`, `left`, `right`, `chr`,
//! `ascii`, `startswith`, `endswith`, `elt`, and the regular-expression tests and rewrites
//! `regexp`, `regexp_replace`, `regexp_count`, `regexp_instr`, `regexp_substr`.
//!
//! As everywhere in weir, lengths and positions count characters (Flink counts UTF-16 code
//! units: the same outside the astral planes). A NULL argument gives NULL, except where a
//! function's doc says otherwise. Results longer than [`rowwise::MAX_RESULT_BYTES`] fail the row
//! rather than exhaust memory.

use std::sync::Mutex;

use regex::Regex;

use super::cast;
use super::compile::Origin;
use super::error::ExprError;
use super::functions::Call;
use super::node::Node;
use super::rowwise::{self, Datum, Out, Plain, RowFunction};
use super::strings::{compile_regex, string_operand};
use super::types::{Literal, SqlType};

/// Accepts an INT (or NULL) count or position.
fn int_operand(node: Node, function: &str, origin: &Origin) -> Result<Node, ExprError> {
    match node.ty {
        SqlType::Int => Ok(node),
        SqlType::Null => Ok(cast::implicit(node, SqlType::Int)),
        other => Err(origin.type_error(format!(
            "{function} needs an INT, but `{}` is {other}",
            node.sql
        ))),
    }
}

/// The string functions of this file; `Ok(None)` for another name.
pub(crate) fn compile(call: &Call<'_>) -> Result<Option<Node>, ExprError> {
    let name = call.name;
    let origin = call.origin;
    // (argument kinds: S string, I int), result type, traits, function
    use SqlType::{Bool, Int, String as Str};
    type Shape = (&'static [u8], SqlType, rowwise::Traits, Plain);
    let shape: Shape = match name {
        "lpad" => (b"SIS", Str, rowwise::STRICT_FALLIBLE, |a, s| {
            pad(a, s, true)
        }),
        "rpad" => (b"SIS", Str, rowwise::STRICT_FALLIBLE, |a, s| {
            pad(a, s, false)
        }),
        "translate" => (b"SSS", Str, rowwise::STRICT, translate),
        "initcap" => (b"S", Str, rowwise::STRICT, initcap),
        "repeat" => (b"SI", Str, rowwise::STRICT_FALLIBLE, repeat),
        "reverse" => (b"S", Str, rowwise::STRICT, |a, s| {
            s.extend(text(a, 0).chars().rev());
            Ok(Out::Written)
        }),
        "replace" => (b"SSS", Str, rowwise::STRICT_FALLIBLE, replace),
        "locate" => (b"SSI", Int, rowwise::STRICT, |a, _| {
            Ok(Out::Int(locate(text(a, 0), text(a, 1), int(a, 2))))
        }),
        "instr" => (b"SS", Int, rowwise::STRICT, |a, _| {
            Ok(Out::Int(locate(text(a, 1), text(a, 0), 1)))
        }),
        "left" => (b"SI", Str, rowwise::STRICT, |a, _| {
            Ok(Out::Str(left(text(a, 0), int(a, 1))))
        }),
        "right" => (b"SI", Str, rowwise::STRICT, |a, _| {
            Ok(Out::Str(right(text(a, 0), int(a, 1))))
        }),
        "chr" => (b"I", Str, rowwise::STRICT, chr),
        "ascii" => (b"S", Int, rowwise::STRICT, |a, _| {
            Ok(Out::Int(
                text(a, 0)
                    .chars()
                    .next()
                    .map_or(0, |c| i64::from(u32::from(c))),
            ))
        }),
        "startswith" => (b"SS", Bool, rowwise::STRICT, |a, _| {
            Ok(Out::Bool(text(a, 0).starts_with(text(a, 1))))
        }),
        "endswith" => (b"SS", Bool, rowwise::STRICT, |a, _| {
            Ok(Out::Bool(text(a, 0).ends_with(text(a, 1))))
        }),
        "concat_ws" => return concat_ws(call).map(Some),
        "elt" => return elt(call).map(Some),
        "regexp" | "regexp_replace" | "regexp_count" | "regexp_instr" | "regexp_substr" => {
            return regexp(call).map(Some);
        }
        _ => return Ok(None),
    };
    let (kinds, ty, traits, function) = shape;
    // locate's start is optional (1 by default).
    let max = kinds.len();
    let min = if name == "locate" { 2 } else { max };
    call.arity(min, Some(max))?;
    let mut args = Vec::with_capacity(max);
    for (i, kind) in kinds.iter().enumerate() {
        let arg = match call.args.get(i) {
            Some(_) => call.value(i)?,
            None => Node::literal(Literal::int(1), SqlType::Int, "1".to_owned()),
        };
        args.push(match kind {
            b'I' => int_operand(arg, name, origin)?,
            _ => string_operand(arg, name, origin)?,
        });
    }
    Ok(Some(rowwise::plain(args, ty, traits, function, origin)))
}

/// `POSITION(needle IN s)`: `locate(needle, s)`.
pub(crate) fn position(needle: Node, haystack: Node, origin: &Origin) -> Result<Node, ExprError> {
    let args = vec![
        string_operand(needle, "POSITION", origin)?,
        string_operand(haystack, "POSITION", origin)?,
    ];
    Ok(rowwise::plain(
        args,
        SqlType::Int,
        rowwise::STRICT,
        |a, _| Ok(Out::Int(locate(text(a, 0), text(a, 1), 1))),
        origin,
    ))
}

/// Argument `i` of a strict function over strings (never NULL there).
fn text<'a>(args: &[Datum<'a>], i: usize) -> &'a str {
    args[i].str().unwrap_or_default()
}

fn int(args: &[Datum<'_>], i: usize) -> i64 {
    args[i].int().unwrap_or_default()
}

/// The byte offset where character `n` (from 0) starts, or `None` past the end.
fn char_offset(text: &str, n: usize) -> Option<usize> {
    text.char_indices()
        .map(|(offset, _)| offset)
        .chain(std::iter::once(text.len()))
        .nth(n)
}

/// Flink's `LPAD`/`RPAD`: `s` padded with repetitions of `pad` to `length` characters, or cut to
/// them. NULL for a negative length or an empty pad.
fn pad<'a>(args: &[Datum<'a>], out: &mut String, left: bool) -> Result<Out<'a>, String> {
    let (text, length, pad) = (text(args, 0), int(args, 1), text(args, 2));
    let Ok(length) = usize::try_from(length) else {
        return Ok(Out::Null);
    };
    let chars = text.chars().count();
    if length <= chars {
        return Ok(Out::Str(
            &text[..char_offset(text, length).unwrap_or(text.len())],
        ));
    }
    if pad.is_empty() {
        return Ok(Out::Null);
    }
    rowwise::check_size(length)?;
    let padding = pad.chars().cycle().take(length - chars);
    if left {
        out.extend(padding);
        out.push_str(text);
    } else {
        out.push_str(text);
        out.extend(padding);
    }
    Ok(Out::Written)
}

/// Flink's `TRANSLATE(s, from, to)`: each character of `from` in `s` becomes the character at the
/// same place in `to`, or is removed when `to` is shorter; the first occurrence in `from` wins.
fn translate<'a>(args: &[Datum<'a>], out: &mut String) -> Result<Out<'a>, String> {
    let (text, from, to) = (text(args, 0), text(args, 1), text(args, 2));
    let to: Vec<char> = to.chars().collect();
    for c in text.chars() {
        match from.chars().position(|f| f == c) {
            Some(index) => out.extend(to.get(index)),
            None => out.push(c),
        }
    }
    Ok(Out::Written)
}

/// Flink's `INITCAP`: the first character of each word (a run of letters and digits) upper
/// case, the others lower case.
fn initcap<'a>(args: &[Datum<'a>], out: &mut String) -> Result<Out<'a>, String> {
    let mut in_word = false;
    for c in text(args, 0).chars() {
        if in_word {
            out.extend(c.to_lowercase());
        } else {
            out.extend(c.to_uppercase());
        }
        in_word = c.is_alphanumeric();
    }
    Ok(Out::Written)
}

/// Flink's `REPEAT(s, n)`: `s` `n` times; empty for `n <= 0`.
fn repeat<'a>(args: &[Datum<'a>], out: &mut String) -> Result<Out<'a>, String> {
    let (text, times) = (text(args, 0), int(args, 1));
    let times = usize::try_from(times).unwrap_or(0);
    rowwise::check_size(text.len().saturating_mul(times))?;
    for _ in 0..times {
        out.push_str(text);
    }
    Ok(Out::Written)
}

/// `REPLACE(s, search, replacement)`: every non-overlapping occurrence, left to right (an empty
/// `search` matches between every two characters, as Java's `String.replace`).
fn replace<'a>(args: &[Datum<'a>], out: &mut String) -> Result<Out<'a>, String> {
    let (text, search, replacement) = (text(args, 0), text(args, 1), text(args, 2));
    let matches = if search.is_empty() {
        text.chars().count() + 1
    } else {
        text.matches(search).count()
    };
    let bytes = matches
        .saturating_mul(replacement.len())
        .saturating_add(text.len());
    rowwise::check_size(bytes)?;
    out.push_str(&text.replace(search, replacement));
    Ok(Out::Written)
}

/// Flink's `LOCATE(needle, s, start)`: the 1-based position of the first `needle` in `s` at or
/// after character `start`; 0 if there is none or `start` is below 1.
fn locate(needle: &str, haystack: &str, start: i64) -> i64 {
    let Some(skip) = usize::try_from(start).ok().and_then(|s| s.checked_sub(1)) else {
        return 0;
    };
    let Some(from) = char_offset(haystack, skip) else {
        return 0;
    };
    match haystack[from..].find(needle) {
        Some(found) => (skip + haystack[from..from + found].chars().count() + 1) as i64,
        None => 0,
    }
}

/// Flink's `LEFT(s, n)`: the first `n` characters; empty for a negative `n`.
fn left(text: &str, n: i64) -> &str {
    let n = usize::try_from(n).unwrap_or(0);
    &text[..char_offset(text, n).unwrap_or(text.len())]
}

/// Flink's `RIGHT(s, n)`: the last `n` characters; empty for a negative `n`.
fn right(text: &str, n: i64) -> &str {
    let n = usize::try_from(n).unwrap_or(0);
    let chars = text.chars().count();
    &text[char_offset(text, chars.saturating_sub(n)).unwrap_or(0)..]
}

/// Flink's `CHR(n)`: the character whose code is `n` modulo 256 (Latin-1); empty for a
/// negative `n`.
fn chr<'a>(args: &[Datum<'a>], out: &mut String) -> Result<Out<'a>, String> {
    let n = int(args, 0);
    if n >= 0 {
        out.push(char::from((n & 0xFF) as u8));
    }
    Ok(Out::Written)
}

/// `concat_ws(separator, a, b, ...)`: the arguments that are not NULL, joined by the separator
/// (NULL if it is NULL). Non-STRING arguments are converted as `CAST(x AS STRING)` would.
fn concat_ws(call: &Call<'_>) -> Result<Node, ExprError> {
    call.arity(1, None)?;
    let mut args = call.values()?;
    let rest = args.split_off(1);
    let separator = args
        .pop()
        .map(|sep| string_operand(sep, "concat_ws", call.origin));
    let Some(separator) = separator.transpose()? else {
        return Err(call.origin.type_error("concat_ws needs a separator"));
    };
    let mut args = vec![separator];
    args.extend(
        rest.into_iter()
            .map(|arg| cast::implicit(arg, SqlType::String)),
    );
    Ok(rowwise::plain(
        args,
        SqlType::String,
        rowwise::LENIENT,
        |a, out| {
            let Some(separator) = a[0].str() else {
                return Ok(Out::Null);
            };
            let mut first = true;
            for value in a[1..].iter().filter_map(|d| d.str()) {
                if !first {
                    out.push_str(separator);
                }
                first = false;
                out.push_str(value);
            }
            Ok(Out::Written)
        },
        call.origin,
    ))
}

/// `elt(index, a, b, ...)`: the `index`-th (from 1) of the values; NULL when `index` is NULL or
/// out of range.
fn elt(call: &Call<'_>) -> Result<Node, ExprError> {
    call.arity(2, None)?;
    let mut args = call.values()?;
    let values = args.split_off(1);
    let mut nodes = Vec::with_capacity(values.len() + 1);
    nodes.extend(args.into_iter().map(|i| int_operand(i, "elt", call.origin)));
    nodes.extend(
        values
            .into_iter()
            .map(|v| string_operand(v, "elt's values", call.origin)),
    );
    let nodes = nodes.into_iter().collect::<Result<Vec<_>, _>>()?;
    Ok(rowwise::plain(
        nodes,
        SqlType::String,
        rowwise::LENIENT,
        |a, _| {
            let picked = a[0]
                .int()
                .and_then(|i| usize::try_from(i).ok())
                .filter(|&i| i >= 1)
                .and_then(|i| a.get(i));
            Ok(picked.and_then(|d| d.str()).map_or(Out::Null, Out::Str))
        },
        call.origin,
    ))
}

/// What a regular-expression function does with the first or every match.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RegexAction {
    /// `regexp(s, re)`: whether any substring matches.
    Test,
    /// `regexp_replace(s, re, replacement)`: every match replaced.
    Replace,
    /// `regexp_count(s, re)`: how many non-overlapping matches.
    Count,
    /// `regexp_instr(s, re)`: the 1-based character position of the first match, 0 if none.
    Instr,
    /// `regexp_substr(s, re)`: the first match, NULL if none.
    Substr,
}

/// The regular-expression functions. A constant pattern is compiled once and a bad one refused
/// when the job is checked; a pattern read from a column is compiled when it changes, and one
/// that does not compile gives NULL, as in Flink.
fn regexp(call: &Call<'_>) -> Result<Node, ExprError> {
    let (action, arity) = match call.name {
        "regexp" => (RegexAction::Test, 2),
        "regexp_replace" => (RegexAction::Replace, 3),
        "regexp_count" => (RegexAction::Count, 2),
        "regexp_instr" => (RegexAction::Instr, 2),
        _ => (RegexAction::Substr, 2),
    };
    call.arity(arity, Some(arity))?;
    let args = call
        .values()?
        .into_iter()
        .map(|arg| string_operand(arg, call.name, call.origin))
        .collect::<Result<Vec<_>, _>>()?;
    let constant = match args[1].as_literal().and_then(Literal::as_str) {
        Some(pattern) => Some(compile_regex(pattern).map_err(|e| {
            call.origin.invalid_literal(format!(
                "{}'s pattern '{pattern}' does not compile: {e}",
                call.name
            ))
        })?),
        None => None,
    };
    let ty = match action {
        RegexAction::Test => SqlType::Bool,
        RegexAction::Count | RegexAction::Instr => SqlType::Int,
        RegexAction::Replace | RegexAction::Substr => SqlType::String,
    };
    let traits = if action == RegexAction::Replace {
        rowwise::STRICT_FALLIBLE
    } else {
        rowwise::STRICT
    };
    let function = RegexFunction {
        action,
        constant,
        last: Mutex::new(None),
    };
    Ok(rowwise::node(args, ty, traits, function, call.origin))
}

#[derive(Debug)]
struct RegexFunction {
    action: RegexAction,
    /// The pattern, when it is a constant.
    constant: Option<Regex>,
    /// The last pattern read from a column and what it compiled to (`None`: it does not).
    last: Mutex<Option<(String, Option<Regex>)>>,
}

impl RegexFunction {
    fn apply<'a>(
        &self,
        regex: &Regex,
        args: &[Datum<'a>],
        out: &mut String,
    ) -> Result<Out<'a>, String> {
        let input = text(args, 0);
        Ok(match self.action {
            RegexAction::Test => Out::Bool(regex.is_match(input)),
            RegexAction::Count => Out::Int(regex.find_iter(input).count() as i64),
            RegexAction::Instr => Out::Int(
                regex
                    .find(input)
                    .map_or(0, |m| input[..m.start()].chars().count() as i64 + 1),
            ),
            RegexAction::Substr => regex
                .find(input)
                .map_or(Out::Null, |m| Out::Str(m.as_str())),
            RegexAction::Replace => {
                let Some(replacement) = java_replacement(text(args, 2), regex.captures_len())
                else {
                    // Java refuses a replacement naming a group the pattern lacks; Flink: NULL.
                    return Ok(Out::Null);
                };
                let mut bytes = input.len();
                let mut last = 0;
                for captures in regex.captures_iter(input) {
                    let Some(whole) = captures.get(0) else {
                        continue;
                    };
                    out.push_str(&input[last..whole.start()]);
                    captures.expand(&replacement, out);
                    last = whole.end();
                    bytes = bytes.max(out.len());
                    rowwise::check_size(bytes)?;
                }
                out.push_str(&input[last..]);
                Out::Written
            }
        })
    }
}

impl RowFunction for RegexFunction {
    fn call<'a>(&self, args: &[Datum<'a>], out: &mut String) -> Result<Out<'a>, String> {
        if let Some(regex) = &self.constant {
            return self.apply(regex, args, out);
        }
        let pattern = text(args, 1);
        // A poisoned cache only means another evaluation panicked: start it afresh.
        let mut last = self.last.lock().unwrap_or_else(|poisoned| {
            let mut guard = poisoned.into_inner();
            *guard = None;
            guard
        });
        if last.as_ref().is_none_or(|(known, _)| known != pattern) {
            *last = Some((pattern.to_owned(), compile_regex(pattern).ok()));
        }
        match last.as_ref().and_then(|(_, regex)| regex.as_ref()) {
            Some(regex) => self.apply(regex, args, out),
            None => Ok(Out::Null),
        }
    }
}

/// Rewrites a Java `Matcher.replaceAll` replacement (`$1`, `${name}`, `\$` for a dollar) into the
/// `regex` crate's syntax; `None` when it names a group the pattern does not have (Java throws).
fn java_replacement(java: &str, groups: usize) -> Option<String> {
    let mut out = String::with_capacity(java.len() + 4);
    let mut chars = java.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                let escaped = chars.next()?;
                if escaped == '$' {
                    out.push_str("$$");
                } else {
                    out.push(escaped);
                }
            }
            '$' => match chars.peek() {
                Some('{') => {
                    chars.next();
                    let name: String = chars.by_ref().take_while(|&c| c != '}').collect();
                    out.push_str("${");
                    out.push_str(&name);
                    out.push('}');
                }
                Some(d) if d.is_ascii_digit() => {
                    // Java reads as many digits as still name an existing group.
                    let mut group = 0usize;
                    let mut read_any = false;
                    while let Some(d) = chars.peek().and_then(|d| d.to_digit(10)) {
                        let next = group * 10 + d as usize;
                        if read_any && next >= groups {
                            break;
                        }
                        group = next;
                        read_any = true;
                        chars.next();
                    }
                    if group >= groups {
                        return None;
                    }
                    out.push_str(&format!("${{{group}}}"));
                }
                _ => return None,
            },
            other => out.push(other),
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locate_counts_characters_from_one() {
        assert_eq!(locate("l", "hello", 1), 3);
        assert_eq!(locate("l", "hello", 4), 4);
        assert_eq!(locate("l", "hello", 5), 0);
        assert_eq!(locate("ö", "wörld", 1), 2);
        assert_eq!(locate("d", "wörld", 3), 5);
        assert_eq!(locate("x", "hello", 1), 0);
        assert_eq!(locate("l", "hello", 0), 0);
        assert_eq!(locate("", "hello", 2), 2);
        assert_eq!(locate("l", "hello", 99), 0);
    }

    #[test]
    fn java_replacements_become_the_regex_crates() {
        assert_eq!(java_replacement("x$1y", 2).as_deref(), Some("x${1}y"));
        assert_eq!(java_replacement("$12", 2).as_deref(), Some("${1}2"));
        assert_eq!(java_replacement("$12", 13).as_deref(), Some("${12}"));
        assert_eq!(java_replacement("\\$1", 2).as_deref(), Some("$$1"));
        assert_eq!(java_replacement("${name}", 2).as_deref(), Some("${name}"));
        assert_eq!(java_replacement("$3", 2), None);
        assert_eq!(java_replacement("$", 2), None);
    }
}
