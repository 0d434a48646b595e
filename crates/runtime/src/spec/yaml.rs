//! The one YAML pass over a job file.
//!
//! saphyr-parser's events (with the span of every node) are read in a loop with an explicit
//! stack, and give, in the same pass: the tree that the schema check and serde read (a
//! `serde_json::Value`), the line and column of every key and value ([`PositionIndex`]), and,
//! when asked, the byte span of every scalar (the API masks secrets in the text as written).
//! The limits of a job file ([`MAX_DEPTH`], [`MAX_NODES`], [`MAX_EXPANDED_BYTES`], one
//! document) are checked as the events arrive, so an alias bomb is refused before it expands
//! and nothing here recurses on the depth of the text.
//!
//! Scalars mean what they meant when serde_yaml read job files (YAML 1.2's core schema as
//! serde_yaml resolved it): `true`/`false` (also `True`, `TRUE`, ...) are booleans, `yes`, `no`,
//! `on` and `off` are text; `~`, `null` and nothing are null; `0x`, `0o`, `0b` and decimal
//! integers are numbers unless they have a leading zero (`010` is text); quoted and block
//! scalars are always text. The core tags `!!str`, `!!int`, `!!float`, `!!bool` and `!!null`
//! are applied; any other tag is refused, since nothing in a job file gives it a meaning.
//! YAML 1.1's merge key `<<` is an ordinary key (and so an unknown one). A key written twice
//! in one mapping is refused at its second occurrence.

use std::collections::HashMap;
use std::ops::Range;

use saphyr_parser::{Event, Marker, Parser, ScalarStyle, Span, Tag};
use serde_json::{Map, Number, Value};

use super::positions::{
    MAX_DEPTH, MAX_INDEX_BYTES, MAX_NODES, Position, PositionIndex, Refusal, TextStart,
    escape_segment,
};

/// The most bytes of text a job file may expand to, counting every alias as a copy of the
/// text it names: [`MAX_NODES`] alone lets a few aliases of a long string take gigabytes.
pub const MAX_EXPANDED_BYTES: u64 = 64 << 20;

/// One job file, read once.
#[derive(Debug, Default)]
pub struct Document {
    /// The tree, aliases expanded; `Null` for a file with no document or an empty one.
    pub value: Value,
    /// Where each key and value is.
    pub index: PositionIndex,
    /// Every scalar written in the text, in text order (only from [`parse_with_spans`]).
    pub scalars: Vec<ScalarSpan>,
}

/// A scalar as written in the text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScalarSpan {
    /// Its bytes in the text, quotes included, its anchor and tag not; a block scalar's are
    /// its content lines, without the `|` or `>` line.
    pub bytes: Range<usize>,
    /// Whether it is a block scalar (`|` or `>`), whose text has no escapes or quotes.
    pub block: bool,
    /// Its content, escapes and folding resolved (`hunter2` for `"\x68unter2"`).
    pub text: String,
    /// Whether it is a mapping key.
    pub key: bool,
}

/// Reads `text` (see the module docs).
pub fn parse(text: &str) -> Result<Document, Refusal> {
    Builder::new(text, false).run()
}

/// [`parse`], also recording every scalar's span ([`Document::scalars`]).
pub fn parse_with_spans(text: &str) -> Result<Document, Refusal> {
    Builder::new(text, true).run()
}

/// Where the text of a quoted or block scalar starting at byte `start` begins.
fn text_start(text: &str, start: usize, mark: &Marker, style: ScalarStyle) -> TextStart {
    match style {
        ScalarStyle::Literal | ScalarStyle::Folded => {
            // The span may start at the `|`/`>` indicator or at the content: skip the
            // indicator's line, then blank lines; the first content line gives the indent.
            let rest = text.get(start..).unwrap_or_default();
            let mut line = mark.line();
            let body;
            if rest.starts_with(['|', '>']) {
                match rest.find('\n') {
                    Some(i) => {
                        body = &rest[i + 1..];
                        line += 1;
                    }
                    None => body = "",
                }
            } else {
                // At the content: back to the start of its line.
                let line_start = text[..start.min(text.len())]
                    .rfind('\n')
                    .map_or(0, |i| i + 1);
                body = text.get(line_start..).unwrap_or_default();
            }
            for l in body.split('\n') {
                if l.trim().is_empty() {
                    line += 1;
                    continue;
                }
                let indent = l.len() - l.trim_start_matches(' ').len();
                return TextStart::Block { line, indent };
            }
            TextStart::Block { line, indent: 0 }
        }
        _ => TextStart::Quoted(Position {
            line: mark.line(),
            column: mark.col() + 2,
        }),
    }
}

fn position(mark: &Marker) -> Position {
    Position {
        line: mark.line(),
        column: mark.col() + 1,
    }
}

/// An open mapping or list.
struct Frame {
    pointer: String,
    node: Open,
    /// Its anchor (0: none).
    anchor: usize,
    /// The expanded counts when it opened, to size an anchored node.
    nodes_before: u64,
    bytes_before: u64,
}

enum Open {
    Map {
        map: Map<String, Value>,
        /// The key whose value comes next, or `None` when a key comes next.
        key: Option<String>,
    },
    Seq(Vec<Value>),
}

/// What an anchor names: a scalar's value, or where a mapping or list sits in the tree (it is
/// copied from there when an alias names it, so that only aliased nodes are ever copied).
enum Anchored {
    Scalar(Value),
    Node(String),
}

struct Anchor {
    what: Anchored,
    /// Its expanded size: values and bytes of text.
    nodes: u64,
    bytes: u64,
}

struct Builder<'t> {
    text: &'t str,
    spans: bool,
    stack: Vec<Frame>,
    doc: Document,
    /// The finished top-level node.
    root: Option<Value>,
    anchors: HashMap<usize, Anchor>,
    documents: usize,
    /// Values so far, every alias counted as the size of the node it names.
    nodes: u64,
    /// Bytes of scalar text so far, counted the same way.
    bytes: u64,
    /// The bytes of every path in the index (see [`MAX_INDEX_BYTES`]).
    index_bytes: usize,
    /// Whether character indices are byte offsets.
    ascii: bool,
    /// The last character index turned into a byte offset, and that offset: spans come in
    /// text order, so turning them is one walk over the text.
    cursor: (usize, usize),
}

impl<'t> Builder<'t> {
    fn new(text: &'t str, spans: bool) -> Self {
        Self {
            text,
            spans,
            stack: Vec::new(),
            doc: Document::default(),
            root: None,
            anchors: HashMap::new(),
            documents: 0,
            nodes: 0,
            bytes: 0,
            index_bytes: 0,
            ascii: text.is_ascii(),
            cursor: (0, 0),
        }
    }

    fn run(mut self) -> Result<Document, Refusal> {
        let mut parser = Parser::new_from_str(self.text);
        loop {
            let (event, span) = match parser.next_event() {
                None => break,
                Some(Ok(next)) => next,
                Some(Err(e)) => {
                    return Err(Refusal::at(
                        format!("not valid YAML: {}", e.info()),
                        position(e.marker()),
                    ));
                }
            };
            match event {
                Event::StreamEnd => break,
                Event::DocumentStart(_) => {
                    self.documents += 1;
                    if self.documents > 1 {
                        return Err(Refusal::at(
                            "a job file holds one YAML document; a second one starts here (`---`)"
                                .into(),
                            position(&span.start),
                        ));
                    }
                }
                Event::Scalar(value, style, anchor, tag) => {
                    self.scalar(&value, style, anchor, tag.as_deref(), span)?;
                }
                Event::Alias(anchor) => self.alias(anchor, span)?,
                Event::MappingStart(anchor, tag) => {
                    self.open(true, anchor, tag.as_deref(), span)?
                }
                Event::SequenceStart(anchor, tag) => {
                    self.open(false, anchor, tag.as_deref(), span)?;
                }
                Event::MappingEnd | Event::SequenceEnd => self.close()?,
                Event::Nothing | Event::StreamStart | Event::DocumentEnd => {}
            }
            if self.index_bytes > MAX_INDEX_BYTES {
                return Err(Refusal::at(
                    "the document's keys are too long and too deeply nested to index".into(),
                    position(&span.start),
                ));
            }
        }
        self.doc.value = self.root.take().unwrap_or(Value::Null);
        Ok(self.doc)
    }

    /// Counts `nodes` values and `bytes` bytes more, refusing past the limits.
    fn count(&mut self, nodes: u64, bytes: u64, at: &Marker) -> Result<(), Refusal> {
        self.nodes = self.nodes.saturating_add(nodes);
        self.bytes = self.bytes.saturating_add(bytes);
        if self.nodes > MAX_NODES {
            return Err(Refusal::at(
                format!(
                    "the document expands to more than {MAX_NODES} values (an alias `*name` \
                     counts as a copy of the node it names)"
                ),
                position(at),
            ));
        }
        if self.bytes > MAX_EXPANDED_BYTES {
            return Err(Refusal::at(
                format!(
                    "the document expands to more than {MAX_EXPANDED_BYTES} bytes of text (an \
                     alias `*name` counts as a copy of the node it names)"
                ),
                position(at),
            ));
        }
        Ok(())
    }

    /// The pointer of the node the next value event describes, or `None` when it is a key.
    fn next_pointer(&self) -> Option<String> {
        match self.stack.last() {
            None => Some(String::new()),
            Some(Frame {
                node: Open::Map { key: None, .. },
                ..
            }) => None,
            Some(Frame {
                pointer,
                node: Open::Map { key: Some(k), .. },
                ..
            }) => Some(format!("{pointer}/{}", escape_segment(k))),
            Some(Frame {
                pointer,
                node: Open::Seq(items),
                ..
            }) => Some(format!("{pointer}/{}", items.len())),
        }
    }

    fn record_value(&mut self, pointer: &str, at: &Marker) {
        self.index_bytes += pointer.len();
        self.doc
            .index
            .values
            .insert(pointer.to_owned(), position(at));
    }

    /// Puts a finished value where it belongs: in the open mapping under its key, at the end
    /// of the open list, or at the top.
    fn place(&mut self, value: Value) {
        match self.stack.last_mut() {
            Some(Frame {
                node: Open::Map { map, key },
                ..
            }) => {
                if let Some(k) = key.take() {
                    map.insert(k, value);
                }
            }
            Some(Frame {
                node: Open::Seq(items),
                ..
            }) => items.push(value),
            None => self.root = Some(value),
        }
    }

    /// Takes a finished scalar or alias value as the next key of the open mapping.
    fn key(&mut self, key: String, at: &Marker) -> Result<(), Refusal> {
        let Some(Frame {
            pointer,
            node: Open::Map { map, key: slot },
            ..
        }) = self.stack.last_mut()
        else {
            return Ok(());
        };
        let entry = format!("{pointer}/{}", escape_segment(&key));
        if map.contains_key(&key) {
            let first = self
                .doc
                .index
                .keys
                .get(&entry)
                .map(|p| format!(" (first at line {}, column {})", p.line, p.column))
                .unwrap_or_default();
            return Err(Refusal {
                message: format!("the key `{key}` is written twice in one mapping{first}"),
                position: position(at),
                pointer: entry,
            });
        }
        self.index_bytes += entry.len();
        self.doc.index.keys.insert(entry, position(at));
        *slot = Some(key);
        Ok(())
    }

    fn byte_offset(&mut self, char_index: usize) -> usize {
        if self.ascii {
            return char_index.min(self.text.len());
        }
        let (mut chars, mut bytes) = if char_index >= self.cursor.0 {
            self.cursor
        } else {
            (0, 0)
        };
        for c in self.text[bytes..].chars() {
            if chars == char_index {
                break;
            }
            chars += 1;
            bytes += c.len_utf8();
        }
        self.cursor = (chars, bytes);
        bytes
    }

    fn scalar(
        &mut self,
        text: &str,
        style: ScalarStyle,
        anchor: usize,
        tag: Option<&Tag>,
        span: Span,
    ) -> Result<(), Refusal> {
        self.count(1, text.len() as u64, &span.start)?;
        // YAML reserves these to start a plain scalar; saphyr-parser lets `|` and `>` start
        // one inside `[...]` or `{...}`, where libyaml (and so serde_yaml) refused the text.
        if style == ScalarStyle::Plain
            && let Some(c) = text.chars().next().filter(|c| "|>%@`".contains(*c))
        {
            return Err(Refusal::at(
                format!("not valid YAML: a plain scalar cannot start with `{c}`; quote it"),
                position(&span.start),
            ));
        }
        let pointer = self.next_pointer();
        if self.spans {
            let start = self.byte_offset(span.start.index());
            let end = self.byte_offset(span.end.index()).max(start);
            let start = start + properties_len(self.text.get(start..end).unwrap_or_default());
            // A quoted scalar's span may run on over a comment after it: it ends at its quote.
            let end = match style {
                ScalarStyle::SingleQuoted | ScalarStyle::DoubleQuoted => self
                    .text
                    .get(start..end)
                    .and_then(quoted_len)
                    .map_or(end, |len| start + len),
                _ => end,
            };
            self.doc.scalars.push(ScalarSpan {
                bytes: start..end,
                block: matches!(style, ScalarStyle::Literal | ScalarStyle::Folded),
                text: text.to_owned(),
                key: pointer.is_none(),
            });
        }
        if let Some(p) = &pointer
            && style != ScalarStyle::Plain
        {
            let start = self.byte_offset(span.start.index());
            let layout = text_start(self.text, start, &span.start, style);
            self.index_bytes += p.len();
            self.doc.index.texts.insert(p.clone(), layout);
        }
        let at = pointer.clone().unwrap_or_else(|| self.key_pointer(text));
        let value = resolve(text, style, tag).map_err(|message| Refusal {
            message,
            position: position(&span.start),
            pointer: at,
        })?;
        if anchor != 0 {
            self.anchors.insert(
                anchor,
                Anchor {
                    what: Anchored::Scalar(value.clone()),
                    nodes: 1,
                    bytes: text.len() as u64,
                },
            );
        }
        self.place_at(pointer, value, &span.start)
    }

    /// The pointer a problem with a key written as `text` is reported at.
    fn key_pointer(&self, text: &str) -> String {
        let parent = self.stack.last().map_or("", |f| f.pointer.as_str());
        format!("{parent}/{}", escape_segment(text))
    }

    fn alias(&mut self, anchor: usize, span: Span) -> Result<(), Refusal> {
        let Some((nodes, bytes)) = self.anchors.get(&anchor).map(|a| (a.nodes, a.bytes)) else {
            return Err(Refusal::at(
                "an alias names an anchor that is not defined before it".into(),
                position(&span.start),
            ));
        };
        // Counted before it is copied: the copy is what the limits are for.
        self.count(nodes, bytes, &span.start)?;
        let value = self.anchors.get(&anchor).and_then(|a| match &a.what {
            Anchored::Scalar(v) => Some(v.clone()),
            Anchored::Node(at) => self.find(at).cloned(),
        });
        let Some(value) = value else {
            return Err(Refusal::at(
                "an alias names a node that is not finished where the alias is".into(),
                position(&span.start),
            ));
        };
        let pointer = self.next_pointer();
        self.place_at(pointer, value, &span.start)
    }

    /// A finished scalar or alias value: a value at `pointer`, or the key of the mapping being
    /// read when there is none (then it must be text).
    fn place_at(
        &mut self,
        pointer: Option<String>,
        value: Value,
        at: &Marker,
    ) -> Result<(), Refusal> {
        match pointer {
            Some(pointer) => {
                self.record_value(&pointer, at);
                self.place(value);
                Ok(())
            }
            None => {
                let key = key_text(&value).ok_or_else(|| {
                    Refusal::at(
                        format!("a key here is {}; keys are text", describe(&value)),
                        position(at),
                    )
                })?;
                self.key(key, at)
            }
        }
    }

    /// The finished node at `pointer`: inside the innermost open node that holds it.
    fn find(&self, pointer: &str) -> Option<&Value> {
        if let Some(root) = &self.root {
            return root.pointer(pointer);
        }
        let frame = self.stack.iter().rev().find(|f| {
            pointer
                .strip_prefix(f.pointer.as_str())
                .is_some_and(|rest| rest.starts_with('/'))
        })?;
        let rest = &pointer[frame.pointer.len() + 1..];
        let (first, rest) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        let child = match &frame.node {
            Open::Map { map, .. } => map.get(&first.replace("~1", "/").replace("~0", "~")),
            Open::Seq(items) => items.get(first.parse::<usize>().ok()?),
        }?;
        child.pointer(rest)
    }

    fn open(
        &mut self,
        map: bool,
        anchor: usize,
        tag: Option<&Tag>,
        span: Span,
    ) -> Result<(), Refusal> {
        let Some(pointer) = self.next_pointer() else {
            return Err(Refusal::at(
                "a key here is a mapping or a list; keys are text".into(),
                position(&span.start),
            ));
        };
        if let Some(tag) = tag
            && core_suffix(tag).is_none()
        {
            return Err(Refusal {
                message: unknown_tag(tag),
                position: position(&span.start),
                pointer,
            });
        }
        self.count(1, 0, &span.start)?;
        self.record_value(&pointer, &span.start);
        let node = if map {
            Open::Map {
                map: Map::new(),
                key: None,
            }
        } else {
            Open::Seq(Vec::new())
        };
        self.stack.push(Frame {
            pointer,
            node,
            anchor,
            nodes_before: self.nodes - 1,
            bytes_before: self.bytes,
        });
        if self.stack.len() > MAX_DEPTH {
            return Err(Refusal::at(
                format!("the document nests more than {MAX_DEPTH} mappings or lists deep"),
                position(&span.start),
            ));
        }
        Ok(())
    }

    fn close(&mut self) -> Result<(), Refusal> {
        let Some(frame) = self.stack.pop() else {
            return Ok(());
        };
        if frame.anchor != 0 {
            self.anchors.insert(
                frame.anchor,
                Anchor {
                    what: Anchored::Node(frame.pointer),
                    nodes: self.nodes - frame.nodes_before,
                    bytes: self.bytes - frame.bytes_before,
                },
            );
        }
        let value = match frame.node {
            Open::Map { map, .. } => Value::Object(map),
            Open::Seq(items) => Value::Array(items),
        };
        self.place(value);
        Ok(())
    }
}

/// The length of the anchor and tag a scalar's span starts with (`&a !!str `).
fn properties_len(written: &str) -> usize {
    let mut rest = written;
    loop {
        let trimmed = rest.trim_start();
        if !trimmed.starts_with(['&', '!']) {
            return written.len() - trimmed.len();
        }
        let end = trimmed
            .find(|c: char| c.is_whitespace() || ",[]{}".contains(c))
            .unwrap_or(trimmed.len());
        rest = &trimmed[end..];
    }
}

/// The length of the quoted scalar `written` starts with, quotes included: `'` doubled is a
/// quote inside single quotes, `\` escapes the next character inside double quotes.
fn quoted_len(written: &str) -> Option<usize> {
    let mut chars = written.char_indices();
    let (_, quote) = chars.next()?;
    while let Some((i, c)) = chars.next() {
        if quote == '"' && c == '\\' {
            chars.next();
        } else if c == quote {
            if quote == '\'' && written[i + 1..].starts_with('\'') {
                chars.next();
            } else {
                return Some(i + 1);
            }
        }
    }
    None
}

/// The suffix of a tag of YAML's core schema (`str` for `!!str` and
/// `!<tag:yaml.org,2002:str>`), or `None` for any other tag.
fn core_suffix(tag: &Tag) -> Option<&str> {
    const CORE: &str = "tag:yaml.org,2002:";
    if tag.handle == CORE {
        return Some(&tag.suffix);
    }
    if tag.handle.is_empty() {
        return tag.suffix.strip_prefix(CORE);
    }
    None
}

/// A tag as it is written (`!foo`, `!`, `!<tag:...>`).
fn written_tag(tag: &Tag) -> String {
    match (tag.handle.as_str(), tag.suffix.as_str()) {
        ("", "!") => "!".to_owned(),
        ("", suffix) => format!("!<{suffix}>"),
        (handle, suffix) => format!("{handle}{suffix}"),
    }
}

/// A key's text: a key written `5` or `true` is the key `"5"` or `"true"`.
fn key_text(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        Value::Null | Value::Array(_) | Value::Object(_) => None,
    }
}

fn describe(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
        _ => "a scalar",
    }
}

fn unknown_tag(tag: &Tag) -> String {
    format!(
        "the tag `{}` means nothing in a job file: only YAML's own (!!str, !!int, !!float, \
         !!bool, !!null) are read",
        written_tag(tag)
    )
}

/// The value of a scalar (see the module docs for the rules, which are serde_yaml's).
fn resolve(text: &str, style: ScalarStyle, tag: Option<&Tag>) -> Result<Value, String> {
    let Some(tag) = tag else {
        return Ok(if style == ScalarStyle::Plain {
            plain(text)?
        } else {
            Value::String(text.to_owned())
        });
    };
    let Some(suffix) = core_suffix(tag) else {
        return Err(unknown_tag(tag));
    };
    let not = |what: &str| format!("`{text}` is not {what}, as its tag `!!{suffix}` says");
    match suffix {
        "bool" => parse_bool(text)
            .map(Value::Bool)
            .ok_or_else(|| not("a boolean")),
        "int" => match int(text)? {
            Some(v) => Ok(v),
            None => Err(not("an integer")),
        },
        "float" => parse_f64(text).map(float).ok_or_else(|| not("a number")),
        "null" => parse_null(text)
            .then_some(Value::Null)
            .ok_or_else(|| not("null")),
        // `!!str`, and core tags that serde_yaml read as text (`!!binary`, `!!timestamp`).
        _ => Ok(Value::String(text.to_owned())),
    }
}

/// A plain scalar without a tag.
fn plain(text: &str) -> Result<Value, String> {
    if text.is_empty() || parse_null(text) {
        return Ok(Value::Null);
    }
    if let Some(b) = parse_bool(text) {
        return Ok(Value::Bool(b));
    }
    if let Some(v) = int(text)? {
        return Ok(v);
    }
    if !digits_but_not_number(text)
        && let Some(f) = parse_f64(text)
    {
        return Ok(float(f));
    }
    Ok(Value::String(text.to_owned()))
}

/// A float as the tree holds it: `.inf` and `.nan` have no JSON number and become null, as
/// they did when serde_yaml's tree was converted to JSON.
fn float(f: f64) -> Value {
    Number::from_f64(f).map_or(Value::Null, Value::Number)
}

fn parse_null(text: &str) -> bool {
    matches!(text, "null" | "Null" | "NULL" | "~")
}

fn parse_bool(text: &str) -> Option<bool> {
    match text {
        "true" | "True" | "TRUE" => Some(true),
        "false" | "False" | "FALSE" => Some(false),
        _ => None,
    }
}

/// An integer: `Ok(None)` when `text` is not one; an error when it is one beyond 64 bits.
fn int(text: &str) -> Result<Option<Value>, String> {
    if let Some(n) = parse_int(text, u64::from_str_radix) {
        return Ok(Some(Value::from(n)));
    }
    if let Some(n) = parse_negative(text, i64::from_str_radix) {
        return Ok(Some(Value::from(n)));
    }
    if parse_int(text, u128::from_str_radix).is_some()
        || parse_negative(text, i128::from_str_radix).is_some()
    {
        return Err(format!(
            "{text} is out of range: a number here lies between {} and {}",
            i64::MIN,
            u64::MAX
        ));
    }
    Ok(None)
}

/// A non-negative integer: decimal with an optional `+`, or `0x`, `0o`, `0b`.
fn parse_int<T>(
    text: &str,
    radix: fn(&str, u32) -> Result<T, std::num::ParseIntError>,
) -> Option<T> {
    let unsigned = text.strip_prefix('+').unwrap_or(text);
    for (prefix, base) in [("0x", 16), ("0o", 8), ("0b", 2)] {
        if let Some(rest) = unsigned.strip_prefix(prefix) {
            if rest.starts_with(['+', '-']) {
                return None;
            }
            if let Ok(n) = radix(rest, base) {
                return Some(n);
            }
        }
    }
    if unsigned.starts_with(['+', '-']) || digits_but_not_number(text) {
        return None;
    }
    radix(unsigned, 10).ok()
}

/// A negative integer: `-` then decimal, or `-0x`, `-0o`, `-0b`.
fn parse_negative<T>(
    text: &str,
    radix: fn(&str, u32) -> Result<T, std::num::ParseIntError>,
) -> Option<T> {
    for (prefix, base) in [("-0x", 16), ("-0o", 8), ("-0b", 2)] {
        if let Some(rest) = text.strip_prefix(prefix)
            && let Ok(n) = radix(&format!("-{rest}"), base)
        {
            return Some(n);
        }
    }
    if digits_but_not_number(text) {
        return None;
    }
    radix(text, 10).ok()
}

fn parse_f64(text: &str) -> Option<f64> {
    let unsigned = match text.strip_prefix('+') {
        Some(rest) if rest.starts_with(['+', '-']) => return None,
        Some(rest) => rest,
        None => text,
    };
    if let ".inf" | ".Inf" | ".INF" = unsigned {
        return Some(f64::INFINITY);
    }
    if let "-.inf" | "-.Inf" | "-.INF" = text {
        return Some(f64::NEG_INFINITY);
    }
    if let ".nan" | ".NaN" | ".NAN" = text {
        return Some(f64::NAN);
    }
    unsigned.parse::<f64>().ok().filter(|f| f.is_finite())
}

/// A leading zero followed by digits is text in YAML 1.2 (`010`), as serde_yaml read it.
fn digits_but_not_number(text: &str) -> bool {
    let digits = text.strip_prefix(['-', '+']).unwrap_or(text);
    digits.len() > 1 && digits.starts_with('0') && digits[1..].bytes().all(|b| b.is_ascii_digit())
}

/// `value` as block-style YAML that reads back ([`parse`]) as `value`: for showing a job as it
/// runs (the API's effective view). Strings are written plain where that reads back as the
/// same string, double-quoted (as JSON writes them, which YAML reads) otherwise. Recursive:
/// for trees of a fixed shape (a serialised `JobSpec`), not for a user's text.
pub fn to_string(value: &Value) -> String {
    let mut out = String::new();
    match value {
        Value::Object(map) if !map.is_empty() => block(value, 0, &mut out),
        Value::Array(items) if !items.is_empty() => block(value, 0, &mut out),
        other => {
            out.push_str(&scalar_text(other));
            out.push('\n');
        }
    }
    out
}

/// The entries of a non-empty mapping or list, each on its own line at `indent`; the first
/// one's indentation is already written when `out` does not end a line.
fn block(value: &Value, indent: usize, out: &mut String) {
    let pad = |out: &mut String| {
        if out.is_empty() || out.ends_with('\n') {
            out.push_str(&" ".repeat(indent));
        }
    };
    match value {
        Value::Object(map) => {
            for (key, v) in map {
                pad(out);
                out.push_str(&scalar_text(&Value::String(key.clone())));
                out.push(':');
                nested(v, indent + 2, out);
            }
        }
        Value::Array(items) => {
            for v in items {
                pad(out);
                out.push('-');
                match v {
                    Value::Object(map) if !map.is_empty() => {
                        out.push(' ');
                        block(v, indent + 2, out);
                    }
                    _ => nested(v, indent + 2, out),
                }
            }
        }
        _ => {}
    }
}

/// A value after its key's `:` or its item's `-`.
fn nested(value: &Value, indent: usize, out: &mut String) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            out.push('\n');
            block(value, indent, out);
        }
        Value::Array(items) if !items.is_empty() => {
            out.push('\n');
            block(value, indent, out);
        }
        other => {
            out.push(' ');
            out.push_str(&scalar_text(other));
            out.push('\n');
        }
    }
}

/// A scalar (or an empty collection) as YAML text.
fn scalar_text(value: &Value) -> String {
    match value {
        Value::Null => "null".to_owned(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) if plain_reads_back(s) => s.clone(),
        Value::Array(_) => "[]".to_owned(),
        Value::Object(_) => "{}".to_owned(),
        Value::String(s) => serde_json::to_string(s).unwrap_or_else(|_| "\"\"".to_owned()),
    }
}

/// Whether `s` written as a plain scalar in block context reads back as the string `s`.
fn plain_reads_back(s: &str) -> bool {
    let (Some(first), Some(last)) = (s.chars().next(), s.chars().last()) else {
        return false;
    };
    !"-?:,[]{}#&*!|>'\"%@`".contains(first)
        && !first.is_whitespace()
        && !last.is_whitespace()
        && last != ':'
        && !s.contains(": ")
        && !s.contains(" #")
        && !s.chars().any(char::is_control)
        && matches!(plain(s), Ok(Value::String(_)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn value(text: &str) -> Value {
        parse(text).expect("parses").value
    }

    #[test]
    fn scalars_resolve_as_serde_yaml_resolved_them() {
        let v = value(
            "a: yes\nb: True\nc: ~\nd:\ne: 0x1F\nf: -0o7\ng: 010\nh: 1e3\ni: '1'\nj: .nan\n\
             k: !!str 1\nl: !!float 2\nm: +12\nn: -0\no: 2001-12-14\n",
        );
        assert_eq!(
            v,
            json!({"a": "yes", "b": true, "c": null, "d": null, "e": 31, "f": -7, "g": "010",
                   "h": 1000.0, "i": "1", "j": null, "k": "1", "l": 2.0, "m": 12, "n": 0,
                   "o": "2001-12-14"})
        );
    }

    #[test]
    fn keys_are_text_and_a_second_one_is_refused_where_it_is() {
        assert_eq!(value("1: a\ntrue: b\n"), json!({"1": "a", "true": "b"}));
        let e = parse("a: 1\nb:\n  c: 2\n  'c': 3\n").unwrap_err();
        assert_eq!(e.pointer, "/b/c");
        assert_eq!((e.position.line, e.position.column), (4, 3));
        assert!(
            e.message.contains("first at line 3, column 3"),
            "{}",
            e.message
        );
        assert!(
            parse("~: 1\n")
                .unwrap_err()
                .message
                .contains("keys are text")
        );
        assert!(parse("[a]: 1\n").is_err());
    }

    #[test]
    fn aliases_copy_finished_nodes_and_merge_keys_stay_keys() {
        let v = value("a: &x {k: [1, 2]}\nb: *x\nc: {<<: *x, d: &s str}\ne: [*s, *x]\n");
        assert_eq!(v["b"], json!({"k": [1, 2]}));
        assert_eq!(v["c"], json!({"<<": {"k": [1, 2]}, "d": "str"}));
        assert_eq!(v["e"], json!(["str", {"k": [1, 2]}]));
    }

    #[test]
    fn aliases_of_long_text_are_refused_by_size() {
        let mut text = format!("a: &a {}\nb: [", "x".repeat(1 << 20));
        text.push_str(&vec!["*a"; 100].join(", "));
        text.push_str("]\n");
        let e = parse(&text).unwrap_err();
        assert!(e.message.contains("bytes of text"), "{}", e.message);
        assert_eq!(e.position.line, 2);
    }

    #[test]
    fn reserved_indicators_do_not_start_a_plain_scalar_in_flow_either() {
        for text in ["a: [|, b]\n", "a: {b: >}\n", "a: [x, `y`]\n", "a: [@x]\n"] {
            let e = parse(text).unwrap_err();
            assert!(
                e.message.starts_with("not valid YAML"),
                "{text}: {}",
                e.message
            );
            assert_eq!(e.position.line, 1, "{text}");
        }
        assert_eq!(value("a: ['|', x|y]\n"), json!({"a": ["|", "x|y"]}));
    }

    #[test]
    fn other_tags_are_refused_at_their_node() {
        for text in [
            "a: !foo 1\n",
            "a: !foo {b: 1}\n",
            "a: ! x\n",
            "a: !!int x\n",
        ] {
            let e = parse(text).unwrap_err();
            assert_eq!(e.pointer, "/a", "{text}");
            assert_eq!(e.position.line, 1, "{text}");
        }
        assert_eq!(value("a: !!map {b: !!seq [1]}\n"), json!({"a": {"b": [1]}}));
    }

    #[test]
    fn scalar_spans_are_bytes_of_the_text_as_written() {
        let text = "é: \"caf\\xe9\" # c\nb: |\n  two\n  lines\nc: [plain, 'q']\nd: &k !!str v\n\
                    e: 'it''s' # c\n";
        let doc = parse_with_spans(text).expect("parses");
        let written: Vec<(&str, &str, bool)> = doc
            .scalars
            .iter()
            .map(|s| (&text[s.bytes.clone()], s.text.as_str(), s.key))
            .collect();
        assert_eq!(written[0], ("é", "é", true));
        assert_eq!(written[1], ("\"caf\\xe9\"", "café", false));
        assert_eq!(written[3].1, "two\nlines\n");
        assert!(
            written[3].0.contains("two\n  lines") && written[3].0.starts_with(['|', ' ', 't']),
            "{written:?}"
        );
        assert!(doc.scalars[3].block);
        assert_eq!(written[5], ("plain", "plain", false));
        assert_eq!(written[6], ("'q'", "q", false));
        assert_eq!(written[8], ("v", "v", false));
        assert_eq!(written[10], ("'it''s'", "it's", false));
    }

    #[test]
    fn written_yaml_reads_back_as_the_same_tree() {
        let v = json!({
            "name": "q1", "kind": "nexmark", "empty": "", "yes": "yes", "num": "5",
            "null-text": "null", "colon": "a: b", "hash": "a #b", "lead": "- x", "star": "*x",
            "lines": "a\nb", "space": " x", "int": 5, "neg": -3, "float": 1.5, "t": true,
            "n": null, "list": [1, "two", {"k": "v", "k2": [true]}, [], {}, [[1]]],
            "map": {"a": {"b": {}}, "c": []}, "sql": "SELECT a, b FROM t WHERE a < 5",
            "with space": "x", "-key": 1, "010": "010", "uni": "café ☕",
        });
        let text = to_string(&v);
        assert_eq!(value(&text), v, "{text}");
        assert!(text.contains("name: q1\n"), "{text}");
        assert!(
            text.contains("yes: \"yes\"\n") || text.contains("yes: yes\n"),
            "{text}"
        );
    }
}
