//! The runtime's module graph, checked: no circle between its top-level modules, and operators
//! and connectors see only the contract ([`crate::api`]) and the modules beneath it, never the
//! planner or the executor (`DESIGN.md` draws the graph).
//!
//! The graph is read from the source text: every `crate::<module>` a file names outside its
//! tests (its `#[cfg(test)]` part, and modules of tests in files of their own, `tests.rs`),
//! `use crate::{a, b}` groups included.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Top-level modules that operators and connectors must not name.
const ABOVE_THE_CONTRACT: [&str; 4] = ["exec", "plan", "query", "testing"];

/// Every `.rs` file under `dir`.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .expect("the source directory")
        .map(|e| e.expect("a directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs")
            // A module of tests (`mod tests;` under `#[cfg(test)]`) is a test.
            && path.file_name().is_none_or(|n| n != "tests.rs")
        {
            out.push(path);
        }
    }
}

/// The top-level module a file belongs to (`exec` for `exec/task.rs`, `lib` for `lib.rs`).
fn module_of(root: &Path, file: &Path) -> String {
    let relative = file.strip_prefix(root).expect("a file under the root");
    let first = relative
        .components()
        .next()
        .expect("a path")
        .as_os_str()
        .to_string_lossy();
    first.trim_end_matches(".rs").to_owned()
}

/// The text of a file without its comments and its `#[cfg(test)]` part.
fn code(text: &str) -> String {
    let text = match text.find("#[cfg(test)]") {
        Some(i) => &text[..i],
        None => text,
    };
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The top-level modules `code` names as `crate::<module>`, groups included.
fn named_modules(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        rest = &rest[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let name: String = item
                    .trim()
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() {
                    out.insert(name);
                }
            }
        } else {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if name.chars().next().is_some_and(|c| c.is_ascii_lowercase()) {
                out.insert(name);
            }
        }
    }
    out
}

/// Module → the other top-level modules it names.
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&root, &mut files);
    let modules: BTreeSet<String> = files.iter().map(|f| module_of(&root, f)).collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let from = module_of(&root, file);
        let text = std::fs::read_to_string(file).expect("a source file");
        let named = named_modules(&code(&text));
        let entry = graph.entry(from.clone()).or_default();
        for to in named {
            if to != from && modules.contains(&to) {
                entry.insert(to);
            }
        }
    }
    graph
}

/// A circle through `start`, if there is one (depth-first, iterative).
fn circle(graph: &BTreeMap<String, BTreeSet<String>>, start: &str) -> Option<Vec<String>> {
    let mut stack = vec![(start.to_owned(), vec![start.to_owned()])];
    let mut seen = BTreeSet::new();
    while let Some((at, path)) = stack.pop() {
        for next in graph.get(&at).into_iter().flatten() {
            if next == start {
                let mut found = path.clone();
                found.push(start.to_owned());
                return Some(found);
            }
            if seen.insert(next.clone()) {
                let mut longer = path.clone();
                longer.push(next.clone());
                stack.push((next.clone(), longer));
            }
        }
    }
    None
}

#[test]
fn the_runtime_modules_form_no_circle() {
    let graph = graph();
    for module in graph.keys() {
        if module == "lib" {
            continue;
        }
        assert_eq!(
            circle(&graph, module),
            None,
            "the runtime's modules must not import each other in a circle"
        );
    }
}

#[test]
fn operators_and_connectors_see_only_the_contract_and_what_is_beneath_it() {
    let graph = graph();
    for module in ["operators", "connectors"] {
        let named = graph.get(module).expect("the module exists");
        let above: Vec<&String> = named
            .iter()
            .filter(|m| ABOVE_THE_CONTRACT.contains(&m.as_str()))
            .collect();
        assert!(above.is_empty(), "`{module}` imports {above:?}");
        assert!(named.contains("api"), "`{module}` implements the contract");
    }
}

#[test]
fn the_checks_read_groups_and_skip_comments_and_tests() {
    let text = "use crate::{api::Operator, keys};\n// crate::exec\nuse crate::spec::X;\n\
                #[cfg(test)]\nmod tests { use crate::plan; }";
    let named = named_modules(&code(text));
    assert_eq!(
        named.into_iter().collect::<Vec<_>>(),
        ["api", "keys", "spec"]
    );
    let mut g = BTreeMap::new();
    g.insert("a".to_owned(), BTreeSet::from(["b".to_owned()]));
    g.insert("b".to_owned(), BTreeSet::from(["a".to_owned()]));
    assert_eq!(
        circle(&g, "a"),
        Some(vec!["a".into(), "b".into(), "a".into()])
    );
}
