//! Where each key and value of a YAML document sits, by JSON-pointer path.
//!
//! serde decodes the document; this index answers "which line and column is
//! `/transforms/q1/columns/price`?" for error messages. It is built from yaml-rust2's marked
//! event stream in one pass, once per file.

use std::collections::HashMap;

use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
use yaml_rust2::scanner::Marker;

/// A 1-based line and column in the job file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Position {
    pub line: usize,
    pub column: usize,
}

/// Positions of the nodes of one YAML document.
#[derive(Debug, Default)]
pub struct PositionIndex {
    /// Path → position of the value node.
    values: HashMap<String, Position>,
    /// Path → position of the key (for entries of mappings).
    keys: HashMap<String, Position>,
}

impl PositionIndex {
    /// Index `text`. A document that does not parse, or that a [`Limits`] check refuses,
    /// yields an empty index (serde reports syntax errors with their own position).
    pub fn build(text: &str) -> Self {
        Self::build_checked(text).unwrap_or_default()
    }

    /// Index `text` in one iterative pass over its events, refusing a document that is nested
    /// deeper than [`MAX_DEPTH`], expands (through aliases) to more than [`MAX_NODES`] values,
    /// or holds more than one document. It runs before anything else reads the text: the tree
    /// decoders and validators after it recurse once per level and copy every alias.
    ///
    /// A syntax error is refused too, with its position: the limits hold only for text read to
    /// its end, and the parser after this one would otherwise read what this one could not.
    pub fn build_checked(text: &str) -> Result<Self, Refusal> {
        let mut builder = Builder::default();
        let mut limits = Limits::default();
        let mut parser = Parser::new_from_str(text);
        loop {
            let (event, mark) = match parser.next_token() {
                Ok(next) => next,
                // Refused rather than left to serde_yaml: the limits below only hold for text
                // this pass has read to the end.
                Err(e) => {
                    return Err(Refusal {
                        message: format!("not valid YAML: {}", e.info()),
                        position: position(*e.marker()),
                    });
                }
            };
            if matches!(event, Event::StreamEnd) {
                break;
            }
            limits.check(&event, mark)?;
            builder.on_event(event, mark);
            if builder.bytes > MAX_INDEX_BYTES {
                return Err(Refusal {
                    message: "the document's keys are too long and too deeply nested to index"
                        .into(),
                    position: position(mark),
                });
            }
        }
        Ok(builder.index)
    }

    /// The position of the value at `pointer` (a JSON pointer such as `/sources/gen/events`),
    /// or of its nearest ancestor that exists in the text.
    pub fn value(&self, pointer: &str) -> Option<Position> {
        let mut p = pointer;
        loop {
            if let Some(pos) = self.values.get(p) {
                return Some(*pos);
            }
            p = parent(p)?;
        }
    }

    /// Whether the text has an entry at `pointer` itself (not only an ancestor of it).
    pub fn contains(&self, pointer: &str) -> bool {
        self.keys.contains_key(pointer) || self.values.contains_key(pointer)
    }

    /// The position of the key of the entry at `pointer`, falling back to its value.
    pub fn key(&self, pointer: &str) -> Option<Position> {
        self.keys
            .get(pointer)
            .copied()
            .or_else(|| self.value(pointer))
    }
}

/// The deepest nesting of mappings and lists a job file may have (the job format itself needs
/// five or six levels; serde_yaml refuses more than 128).
pub const MAX_DEPTH: usize = 64;

/// The most values (keys, scalars, mappings, lists) a job file may expand to, counting each
/// alias as a copy of what it names: an "alias bomb" of a few KiB otherwise expands to millions.
pub const MAX_NODES: u64 = 100_000;

/// The most bytes the paths of the position index may take together (a 1 MiB job file of
/// ordinary keys takes a few MiB).
const MAX_INDEX_BYTES: usize = 64 << 20;

/// Why a job file is refused before it is read: the message and where the limit was crossed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub message: String,
    pub position: Position,
}

/// The running counts of [`PositionIndex::build_checked`]'s limits.
#[derive(Default)]
struct Limits {
    /// Open mappings and lists: for each, its anchor (0: none) and `expanded` when it opened.
    open: Vec<(usize, u64)>,
    /// Values so far, with every alias counted as the size of its anchored node.
    expanded: u64,
    /// The expanded size of each anchored node, by yaml-rust2's anchor id.
    anchored: HashMap<usize, u64>,
    /// Documents begun.
    documents: usize,
}

impl Limits {
    fn check(&mut self, event: &Event, mark: Marker) -> Result<(), Refusal> {
        let refuse = |message: String| Refusal {
            message,
            position: position(mark),
        };
        match event {
            Event::DocumentStart => {
                self.documents += 1;
                if self.documents > 1 {
                    return Err(refuse(
                        "a job file holds one YAML document; a second one starts here (`---`)"
                            .into(),
                    ));
                }
            }
            Event::Scalar(_, _, anchor, _) => {
                self.expanded += 1;
                if *anchor != 0 {
                    self.anchored.insert(*anchor, 1);
                }
            }
            Event::Alias(anchor) => {
                self.expanded = self
                    .expanded
                    .saturating_add(self.anchored.get(anchor).copied().unwrap_or(1));
            }
            Event::MappingStart(anchor, _) | Event::SequenceStart(anchor, _) => {
                self.open.push((*anchor, self.expanded));
                self.expanded += 1;
                if self.open.len() > MAX_DEPTH {
                    return Err(refuse(format!(
                        "the document nests more than {MAX_DEPTH} mappings or lists deep"
                    )));
                }
            }
            Event::MappingEnd | Event::SequenceEnd => {
                if let Some((anchor, before)) = self.open.pop()
                    && anchor != 0
                {
                    self.anchored.insert(anchor, self.expanded - before);
                }
            }
            _ => {}
        }
        if self.expanded > MAX_NODES {
            return Err(refuse(format!(
                "the document expands to more than {MAX_NODES} values (an alias `*name` counts \
                 as a copy of the node it names)"
            )));
        }
        Ok(())
    }
}

fn parent(pointer: &str) -> Option<&str> {
    if pointer.is_empty() {
        return None;
    }
    Some(pointer.rfind('/').map_or("", |i| &pointer[..i]))
}

/// Escapes one JSON-pointer segment (RFC 6901).
pub fn escape_segment(segment: &str) -> String {
    segment.replace('~', "~0").replace('/', "~1")
}

fn position(mark: Marker) -> Position {
    Position {
        line: mark.line(),
        column: mark.col() + 1,
    }
}

enum Frame {
    Map {
        path: String,
        /// The key whose value comes next, or `None` when a key comes next.
        key: Option<String>,
    },
    Seq {
        path: String,
        next: usize,
    },
}

#[derive(Default)]
struct Builder {
    stack: Vec<Frame>,
    index: PositionIndex,
    done: bool,
    /// The bytes of every path in the index: each path repeats its ancestors' keys, so long
    /// keys nested deep would make the index quadratic in the text (see [`MAX_INDEX_BYTES`]).
    bytes: usize,
}

impl Builder {
    fn record_value(&mut self, path: String, mark: Marker) {
        self.bytes += path.len();
        self.index.values.insert(path, position(mark));
    }

    /// The path of the node that the next value event describes, or `None` when the next
    /// scalar is a mapping key.
    fn next_value_path(&self) -> Option<String> {
        match self.stack.last() {
            None => Some(String::new()),
            Some(Frame::Map { key: None, .. }) => None,
            Some(Frame::Map {
                path, key: Some(k), ..
            }) => Some(format!("{path}/{}", escape_segment(k))),
            Some(Frame::Seq { path, next }) => Some(format!("{path}/{next}")),
        }
    }

    /// After a complete value: a map expects its next key, a sequence its next item.
    fn value_done(&mut self) {
        match self.stack.last_mut() {
            Some(Frame::Map { key, .. }) => *key = None,
            Some(Frame::Seq { next, .. }) => *next += 1,
            None => self.done = true,
        }
    }
}

impl MarkedEventReceiver for Builder {
    fn on_event(&mut self, ev: Event, mark: Marker) {
        if self.done {
            return;
        }
        match ev {
            Event::Scalar(text, ..) => match self.next_value_path() {
                Some(path) => {
                    self.record_value(path, mark);
                    self.value_done();
                }
                None => {
                    if let Some(Frame::Map { path, key }) = self.stack.last_mut() {
                        let entry = format!("{path}/{}", escape_segment(&text));
                        self.bytes += entry.len();
                        self.index.keys.insert(entry, position(mark));
                        *key = Some(text);
                    }
                }
            },
            Event::Alias(_) => {
                if let Some(path) = self.next_value_path() {
                    self.record_value(path, mark);
                }
                self.value_done();
            }
            Event::MappingStart(..) | Event::SequenceStart(..) => {
                let Some(path) = self.next_value_path() else {
                    // A complex (non-scalar) mapping key: not something a job file uses;
                    // stop indexing rather than guess.
                    self.done = true;
                    return;
                };
                self.record_value(path.clone(), mark);
                if matches!(ev, Event::MappingStart(..)) {
                    self.stack.push(Frame::Map { path, key: None });
                } else {
                    self.stack.push(Frame::Seq { path, next: 0 });
                }
            }
            Event::MappingEnd | Event::SequenceEnd => {
                self.stack.pop();
                self.value_done();
            }
            Event::DocumentEnd => self.done = true,
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "\
name: demo
sources:
  gen:
    kind: nexmark
    events: 10
transforms:
  u:
    kind: union
    from: [a, b]
";

    #[test]
    fn values_and_keys_have_their_line_and_column() {
        let idx = PositionIndex::build(TEXT);
        assert_eq!(idx.value("/name"), Some(Position { line: 1, column: 7 }));
        assert_eq!(
            idx.value("/sources/gen/events"),
            Some(Position {
                line: 5,
                column: 13
            })
        );
        assert_eq!(
            idx.key("/sources/gen/events"),
            Some(Position { line: 5, column: 5 })
        );
        assert_eq!(
            idx.value("/transforms/u/from/1"),
            Some(Position {
                line: 9,
                column: 15
            })
        );
    }

    #[test]
    fn a_missing_path_falls_back_to_its_nearest_ancestor() {
        let idx = PositionIndex::build(TEXT);
        assert_eq!(
            idx.value("/sources/gen/seed"),
            idx.value("/sources/gen"),
            "an absent key points at the mapping that lacks it"
        );
    }

    #[test]
    fn pointer_segments_are_escaped() {
        let idx = PositionIndex::build("a/b:\n  c~d: 1\n");
        assert_eq!(
            idx.value("/a~1b/c~0d"),
            Some(Position { line: 2, column: 8 })
        );
    }
}
