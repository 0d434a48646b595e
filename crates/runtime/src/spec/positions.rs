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
    /// Index `text`. A document that does not parse yields an empty index (serde reports the
    /// syntax error with its own position).
    pub fn build(text: &str) -> Self {
        let mut builder = Builder::default();
        let mut parser = Parser::new_from_str(text);
        if parser.load(&mut builder, false).is_err() {
            return Self::default();
        }
        builder.index
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

    /// The position of the key of the entry at `pointer`, falling back to its value.
    pub fn key(&self, pointer: &str) -> Option<Position> {
        self.keys
            .get(pointer)
            .copied()
            .or_else(|| self.value(pointer))
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
}

impl Builder {
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
                    self.index.values.insert(path, position(mark));
                    self.value_done();
                }
                None => {
                    if let Some(Frame::Map { path, key }) = self.stack.last_mut() {
                        let entry = format!("{path}/{}", escape_segment(&text));
                        self.index.keys.insert(entry, position(mark));
                        *key = Some(text);
                    }
                }
            },
            Event::Alias(_) => {
                if let Some(path) = self.next_value_path() {
                    self.index.values.insert(path, position(mark));
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
                self.index.values.insert(path.clone(), position(mark));
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
