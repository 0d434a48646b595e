//! Where each key and value of a YAML document sits, by JSON-pointer path.
//!
//! serde decodes the document; this index answers "which line and column is
//! `/transforms/q1/columns/price`?" for error messages. It is built by the one YAML pass over
//! a job file ([`super::yaml`]), with the limits every job file is held to.

use std::collections::HashMap;

/// A 1-based line and column in the job file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Position {
    pub line: usize,
    pub column: usize,
}

/// Positions of the nodes of one YAML document.
#[derive(Clone, Debug, Default)]
pub struct PositionIndex {
    /// Path → position of the value node.
    pub(super) values: HashMap<String, Position>,
    /// Path → position of the key (for entries of mappings).
    pub(super) keys: HashMap<String, Position>,
    /// Path → where the text of a quoted or block scalar starts (for positions inside it,
    /// such as an error in a `sql` node's query).
    pub(super) texts: HashMap<String, TextStart>,
}

/// Where a scalar's text starts in the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum TextStart {
    /// A block scalar (`|`, `>`): its first content line and the content's indentation.
    Block { line: usize, indent: usize },
    /// A quoted scalar: the position of its first character after the quote.
    Quoted(Position),
}

impl PositionIndex {
    /// Index `text`. A document that does not parse, or that the limits refuse, yields an
    /// empty index.
    pub fn build(text: &str) -> Self {
        Self::build_checked(text).unwrap_or_default()
    }

    /// Index `text` ([`super::yaml::parse`]), refusing a document that is nested deeper than
    /// [`MAX_DEPTH`], expands (through aliases) to more than [`MAX_NODES`] values, holds more
    /// than one document, or does not parse.
    pub fn build_checked(text: &str) -> Result<Self, Refusal> {
        super::yaml::parse(text).map(|doc| doc.index)
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

    /// The position of `line` and `column` (1-based) of the text of the scalar at `pointer`:
    /// the start of the scalar's value when its layout is unknown (a plain scalar on one
    /// line reads the same).
    pub fn within(&self, pointer: &str, line: usize, column: usize) -> Option<Position> {
        let line = line.max(1);
        let column = column.max(1);
        match self.texts.get(pointer) {
            Some(TextStart::Block {
                line: first,
                indent,
            }) => Some(Position {
                line: first + line - 1,
                column: indent + column,
            }),
            Some(TextStart::Quoted(start)) if line == 1 => Some(Position {
                line: start.line,
                column: start.column + column - 1,
            }),
            Some(TextStart::Quoted(start)) => Some(Position {
                line: start.line + line - 1,
                column,
            }),
            None => {
                let start = self.values.get(pointer)?;
                Some(if line == 1 {
                    Position {
                        line: start.line,
                        column: start.column + column - 1,
                    }
                } else {
                    Position {
                        line: start.line + line - 1,
                        column,
                    }
                })
            }
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
/// five or six levels).
pub const MAX_DEPTH: usize = 64;

/// The most values (keys, scalars, mappings, lists) a job file may expand to, counting each
/// alias as a copy of what it names: an "alias bomb" of a few KiB otherwise expands to millions.
pub const MAX_NODES: u64 = 100_000;

/// The most bytes the paths of the position index may take together (a 1 MiB job file of
/// ordinary keys takes a few MiB).
pub(super) const MAX_INDEX_BYTES: usize = 64 << 20;

/// Why a job file is refused before it is read: the message, where in the text, and the
/// JSON pointer of the node it is about (empty when it is about the whole text).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub message: String,
    pub position: Position,
    pub pointer: String,
}

impl Refusal {
    pub(super) fn at(message: String, position: Position) -> Self {
        Self {
            message,
            position,
            pointer: String::new(),
        }
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
