//! The server crate's module graph, checked: no circle between its top-level modules, and each
//! module imports only modules of its own layer or below ([`LAYERS`], drawn in `lib.rs`'s
//! `# Layout`).
//!
//! The graph is read from the source text, as `weir_runtime`'s `layering.rs` reads its own:
//! every `crate::<module>` a file names outside its tests, `use crate::{a, b}` groups
//! included. Items named through the root's re-exports (`crate::ApiError`) would hide an edge,
//! so modules may not name them (the root itself may).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The top-level modules, bottom layer first (L0 to L6, as `lib.rs` lists them): a module
/// may import modules of its own layer or of a layer beneath it, never one above. Within a
/// layer, the circle check keeps the direction (`api` uses `openapi`, which may not use
/// `api`).
const LAYERS: [&[&str]; 7] = [
    // L0, the ground: errors, the job's states, the server's rules for submitted jobs, masking,
    // what the two users of PostgreSQL share.
    &[
        "assets",
        "auth",
        "db",
        "endpoints",
        "error",
        "lifecycle",
        "limits",
        "overrides",
        "paths",
        "ratelimit",
        "redact",
    ],
    // L1, what is kept of jobs: their catalog rows, their log lines.
    &["catalog", "logs"],
    // L2, one hosted job.
    &["job"],
    // L3, many jobs in one process.
    &["host"],
    // L4, many servers: the fleet implements the host's `Leases` hook and drives the host.
    &["fleet"],
    // L5, read-only projections of jobs and the host: the JSON views and `/metrics`.
    &["prometheus", "view"],
    // L6, the HTTP surface and its description.
    &["api", "openapi"],
];

/// Modules outside the layers: the root (which wires everything) and this check.
const UNLAYERED: [&str; 2] = ["lib", "layering"];

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
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file belongs to (`fleet` for `fleet/db.rs`, `lib` for `lib.rs`).
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

/// The text of a file without its comments and without the items marked `#[cfg(test)]` (a
/// `mod tests { ... }`, a test-only function: to the end of its braces, or of its line for a
/// `mod x;` or a `use`).
fn code(text: &str) -> String {
    let text: String = text
        .lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n");
    let mut out = String::with_capacity(text.len());
    let mut rest = text.as_str();
    while let Some(i) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..i]);
        let item = &rest[i..];
        let end = match (item.find('{'), item.find(';')) {
            (Some(brace), semicolon) if semicolon.is_none_or(|s| brace < s) => {
                let mut depth = 0usize;
                let mut end = item.len();
                for (at, c) in item.char_indices().skip(brace) {
                    match c {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                end = at + 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                end
            }
            (_, Some(semicolon)) => semicolon + 1,
            (_, None) => item.len(),
        };
        rest = &item[end..];
    }
    out.push_str(rest);
    out
}

/// The names `code` gives after `crate::`, groups included: `(modules, items)`, items being
/// the capitalised names (types and traits re-exported by the root).
fn named(code: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let word = |s: &str| -> String {
        s.trim()
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut names = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        rest = &rest[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            names.extend(group[..end].split(',').map(word));
        } else {
            names.push(word(rest));
        }
    }
    let mut modules = BTreeSet::new();
    let mut items = BTreeSet::new();
    for name in names {
        match name.chars().next() {
            Some(c) if c.is_ascii_lowercase() => modules.insert(name),
            Some(c) if c.is_ascii_uppercase() => items.insert(name),
            _ => false,
        };
    }
    (modules, items)
}

/// Module → the other top-level modules it names, and module → the root's items it names.
type Graph = BTreeMap<String, BTreeSet<String>>;

fn graph() -> (Graph, Graph) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&root, &mut files);
    let modules: BTreeSet<String> = files.iter().map(|f| module_of(&root, f)).collect();
    let mut graph = Graph::new();
    let mut through_root = Graph::new();
    for file in &files {
        let from = module_of(&root, file);
        let text = std::fs::read_to_string(file).expect("a source file");
        let (named_modules, named_items) = named(&code(&text));
        let entry = graph.entry(from.clone()).or_default();
        for to in named_modules {
            if to != from && modules.contains(&to) {
                entry.insert(to);
            }
        }
        if !named_items.is_empty() {
            through_root.entry(from).or_default().extend(named_items);
        }
    }
    (graph, through_root)
}

/// A circle through `start`, if there is one (depth-first, iterative).
fn circle(graph: &Graph, start: &str) -> Option<Vec<String>> {
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

/// The layer of `module` in [`LAYERS`].
fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&module))
}

#[test]
fn the_server_modules_form_no_circle() {
    let (graph, _) = graph();
    for module in graph.keys() {
        if UNLAYERED.contains(&module.as_str()) {
            continue;
        }
        assert_eq!(
            circle(&graph, module),
            None,
            "the server's modules must not import each other in a circle"
        );
    }
}

#[test]
fn every_module_has_a_layer_and_imports_none_above_it() {
    let (graph, _) = graph();
    let mut wrong = Vec::new();
    for (module, named) in &graph {
        if UNLAYERED.contains(&module.as_str()) {
            continue;
        }
        let Some(layer) = layer_of(module) else {
            wrong.push(format!("`{module}` is in no layer: add it to LAYERS"));
            continue;
        };
        for to in named {
            if layer_of(to).is_some_and(|l| l > layer) {
                wrong.push(format!(
                    "`{module}` (layer {layer}) imports `{to}` (layer {})",
                    layer_of(to).unwrap_or_default()
                ));
            }
        }
    }
    for layer in LAYERS {
        for module in layer {
            if !graph.contains_key(*module) {
                wrong.push(format!("LAYERS names `{module}`, which is no module"));
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn modules_name_each_other_not_the_roots_re_exports() {
    let (_, through_root) = graph();
    let named: Vec<_> = through_root
        .iter()
        .filter(|(module, _)| !UNLAYERED.contains(&module.as_str()))
        .collect();
    assert!(
        named.is_empty(),
        "name the module an item lives in (`crate::error::ApiError`), not the root's \
         re-export: {named:?}"
    );
}

#[test]
fn the_checks_read_groups_and_skip_comments_and_tests() {
    let text = "use crate::{error::ApiError, job};\n// crate::api\nuse crate::view::X;\n\
                #[cfg(test)]\nfn only_in_tests() { if true { crate::host::f(); } }\n\
                fn after() -> crate::Host { crate::logs::g() }\n\
                #[cfg(test)]\nmod layering;\n#[cfg(test)]\nmod tests { use crate::fleet; }";
    let (modules, items) = named(&code(text));
    assert_eq!(
        modules.into_iter().collect::<Vec<_>>(),
        ["error", "job", "logs", "view"]
    );
    assert_eq!(items.into_iter().collect::<Vec<_>>(), ["Host"]);
    let mut g = Graph::new();
    g.insert("a".to_owned(), BTreeSet::from(["b".to_owned()]));
    g.insert("b".to_owned(), BTreeSet::from(["a".to_owned()]));
    assert_eq!(
        circle(&g, "a"),
        Some(vec!["a".into(), "b".into(), "a".into()])
    );
}
