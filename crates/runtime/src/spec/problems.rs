//! Problems found in a job file, each with its file, line, column and key path.

use std::fmt;

use super::positions::{Position, PositionIndex};

/// One thing wrong with a job file.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Problem {
    /// Dotted key path, e.g. `transforms.q1.columns.price` or `transforms.u.from[1]`.
    pub path: String,
    /// 1-based line in the file; `None` when the value came from a `--set` override.
    pub line: Option<usize>,
    /// 1-based column in the file.
    pub column: Option<usize>,
    /// What is wrong, and what would be right.
    pub message: String,
    /// `--set` when the offending value came from a command-line override.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
}

/// Every problem found in one job file; nothing runs while there is one.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct SpecError {
    pub file: String,
    pub problems: Vec<Problem>,
}

impl std::error::Error for SpecError {}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.problems.len();
        write!(
            f,
            "{} has {n} problem{}:",
            self.file,
            if n == 1 { "" } else { "s" }
        )?;
        for p in &self.problems {
            write!(f, "\n  {}", self.file)?;
            if let (Some(line), Some(col)) = (p.line, p.column) {
                write!(f, ":{line}:{col}")?;
            }
            if let Some(origin) = &p.origin {
                write!(f, " ({origin})")?;
            }
            if p.path.is_empty() {
                write!(f, ": {}", p.message)?;
            } else {
                write!(f, ": {}: {}", p.path, p.message)?;
            }
        }
        Ok(())
    }
}

/// The text a job came from: its name, where its nodes sit, and which paths `--set` replaced.
#[derive(Clone, Debug, Default)]
pub struct SpecSource {
    pub file: String,
    pub(crate) index: PositionIndex,
    /// JSON pointers replaced by `--set` overrides (positions in the file would be misleading).
    pub(crate) overridden: Vec<String>,
    /// Nodes the SQL planner made, each reported at the query that made it.
    pub(crate) generated: Vec<Generated>,
}

/// A node the SQL planner made (`/transforms/q5~1key-by`) and where its problems are shown:
/// the `query` of its `sql` node, at the clause that made it.
#[derive(Clone, Debug)]
pub(crate) struct Generated {
    pub node: String,
    pub target: String,
    pub position: Option<Position>,
}

impl SpecSource {
    pub fn new(file: impl Into<String>, text: &str) -> Self {
        Self::indexed(file, PositionIndex::build(text))
    }

    /// A source whose positions were already indexed (see [`PositionIndex::build_checked`]).
    pub(crate) fn indexed(file: impl Into<String>, index: PositionIndex) -> Self {
        Self {
            file: file.into(),
            index,
            overridden: Vec::new(),
            generated: Vec::new(),
        }
    }

    /// Problems of the node at `node` (a JSON pointer) are shown at `target`, at `position`.
    pub(crate) fn generate(&mut self, node: String, target: String, position: Option<Position>) {
        self.generated.retain(|g| g.node != node);
        self.generated.push(Generated {
            node,
            target,
            position,
        });
    }

    /// Forgets a generated node.
    pub(crate) fn forget(&mut self, node: &str) {
        self.generated.retain(|g| g.node != node);
    }

    /// Whether the SQL planner made the node at `node` (a JSON pointer).
    pub(crate) fn is_generated(&self, node: &str) -> bool {
        self.generated.iter().any(|g| g.node == node)
    }

    /// The position of `line` and `column` inside the text of the scalar at `pointer`.
    pub(crate) fn within(&self, pointer: &str, line: usize, column: usize) -> Option<Position> {
        if self.overridden.iter().any(|o| o == pointer) {
            return None;
        }
        self.index.within(pointer, line, column)
    }

    /// A problem at a position inside the scalar at `pointer` (`None`: the scalar itself).
    pub(crate) fn at_position(
        &self,
        pointer: &str,
        position: Option<Position>,
        message: impl Into<String>,
    ) -> Problem {
        let mut p = self.at_value(pointer, message);
        if let Some(position) = position {
            p.line = Some(position.line);
            p.column = Some(position.column);
        }
        p
    }

    /// Whether the job file (or a `--set` override) writes the key at `pointer`, rather than
    /// leaving it to its default.
    pub fn written(&self, pointer: &str) -> bool {
        self.index.contains(pointer) || self.overridden.iter().any(|o| o == pointer)
    }

    /// A problem located at the value of `pointer`.
    pub fn at_value(&self, pointer: &str, message: impl Into<String>) -> Problem {
        self.locate(pointer, message.into(), false)
    }

    /// A problem located at the key of the entry `pointer` (for unknown keys).
    pub fn at_key(&self, pointer: &str, message: impl Into<String>) -> Problem {
        self.locate(pointer, message.into(), true)
    }

    fn locate(&self, pointer: &str, message: String, key: bool) -> Problem {
        let inside = |pointer: &str, node: &str| {
            pointer == node
                || pointer
                    .strip_prefix(node)
                    .is_some_and(|rest| rest.starts_with('/'))
        };
        // The final node of a `sql` node takes its name: its own keys (`query`) stay.
        let generated = self
            .generated
            .iter()
            .find(|g| inside(pointer, &g.node) && !inside(pointer, &g.target));
        if let Some(g) = generated {
            let mut p = self.locate(&g.target.clone(), message, false);
            if let Some(position) = g.position
                && p.origin.is_none()
            {
                p.line = Some(position.line);
                p.column = Some(position.column);
            }
            return p;
        }
        let overridden = self
            .overridden
            .iter()
            .find(|o| pointer == o.as_str() || pointer.starts_with(&format!("{o}/")));
        let (position, origin) = match overridden {
            Some(o) => (None, Some(format!("--set {}", dotted_path(o)))),
            None if key => (self.index.key(pointer), None),
            None => (self.index.value(pointer), None),
        };
        Problem {
            path: dotted_path(pointer),
            line: position.map(|p| p.line),
            column: position.map(|p| p.column),
            message,
            origin,
        }
    }

    /// All `problems`, sorted by position, as one error.
    pub fn error(&self, mut problems: Vec<Problem>) -> SpecError {
        problems.sort_by_key(|p| (p.line.unwrap_or(usize::MAX), p.column.unwrap_or(0)));
        problems.dedup();
        SpecError {
            file: self.file.clone(),
            problems,
        }
    }
}

/// `/transforms/u/from/1` → `transforms.u.from[1]`.
pub fn dotted_path(pointer: &str) -> String {
    let mut out = String::new();
    for segment in pointer.split('/').skip(1) {
        let segment = segment.replace("~1", "/").replace("~0", "~");
        if !segment.is_empty() && segment.bytes().all(|b| b.is_ascii_digit()) {
            out.push('[');
            out.push_str(&segment);
            out.push(']');
        } else {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(&segment);
        }
    }
    out
}

/// A JSON pointer from plain segments.
pub fn pointer(segments: &[&str]) -> String {
    let mut out = String::new();
    for s in segments {
        out.push('/');
        out.push_str(&super::positions::escape_segment(s));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pointers_become_dotted_paths() {
        assert_eq!(dotted_path(""), "");
        assert_eq!(dotted_path("/transforms/q1/where"), "transforms.q1.where");
        assert_eq!(dotted_path("/transforms/u/from/1"), "transforms.u.from[1]");
        assert_eq!(pointer(&["a/b", "c"]), "/a~1b/c");
    }

    #[test]
    fn display_lists_every_problem_with_file_line_and_column() {
        let src = SpecSource::new("job.yaml", "name: x\nparallelism: 0\n");
        let err = src.error(vec![
            src.at_value("/parallelism", "must be at least 1"),
            src.at_value("/name", "bad"),
        ]);
        let text = err.to_string();
        assert!(text.starts_with("job.yaml has 2 problems:"), "{text}");
        assert!(text.contains("job.yaml:1:7: name: bad"), "{text}");
        assert!(
            text.contains("job.yaml:2:14: parallelism: must be at least 1"),
            "{text}"
        );
        assert!(
            text.find("name: bad") < text.find("parallelism"),
            "sorted by line"
        );
    }
}
