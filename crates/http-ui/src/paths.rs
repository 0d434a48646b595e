//! What a submitted job may name on the server's filesystem.
//!
//! A job file names files and directories: a `jsonl` source's `path`, a `file` sink's `path`,
//! `state.path`, `checkpoint.storage`; and its `name` becomes a directory of checkpoints and
//! state. `weir run` trusts its user; a server does not trust its clients. A submitted job may
//! only name relative paths that stay below the server's working directory (no absolute path,
//! no `..`, no `~`), and its name must be usable as one path component. Problems come back
//! with their line, column and key like any other problem of the file.
//!
//! The check walks the planned spec as JSON, so a connector added later with a `path` or
//! `storage` key is covered without a change here.

use std::path::{Component, Path};

use weir_runtime::spec::problems::SpecSource;
use weir_runtime::spec::{JobSpec, Problem};

/// Keys whose string values are filesystem locations (`url`: `checkpoint.storage` in its map
/// form; `creds-file`: a NATS connector's credentials, which the server would read).
const PATH_KEYS: &[&str] = &["path", "storage", "url", "creds-file"];

/// Every problem with the names and paths of `spec` (located through `source`); empty if it
/// may run.
pub fn check(source: &SpecSource, spec: &JobSpec) -> Vec<Problem> {
    let mut problems = Vec::new();
    let name = &spec.name;
    if name.is_empty()
        || name.starts_with('.')
        || weir_runtime::spec::paths::safe_name(name) != *name
    {
        problems.push(source.at_value(
            "/name",
            format!(
                "the server runs jobs whose name uses only letters, digits, `_` and `-`, found `{name}`"
            ),
        ));
    }
    match serde_json::to_value(spec) {
        Ok(value) => walk(&value, &mut String::new(), source, &mut problems),
        Err(e) => problems.push(source.at_value("", format!("cannot inspect the job: {e}"))),
    }
    problems
}

fn walk(
    value: &serde_json::Value,
    pointer: &mut String,
    source: &SpecSource,
    problems: &mut Vec<Problem>,
) {
    match value {
        serde_json::Value::Object(map) => {
            for (key, v) in map {
                let len = pointer.len();
                pointer.push('/');
                pointer.push_str(&key.replace('~', "~0").replace('/', "~1"));
                match v {
                    serde_json::Value::String(s) if PATH_KEYS.contains(&key.as_str()) => {
                        if let Err(why) = allowed(s) {
                            problems.push(source.at_value(pointer, why));
                        }
                    }
                    _ => walk(v, pointer, source, problems),
                }
                pointer.truncate(len);
            }
        }
        serde_json::Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                let len = pointer.len();
                pointer.push_str(&format!("/{i}"));
                walk(v, pointer, source, problems);
                pointer.truncate(len);
            }
        }
        _ => {}
    }
}

/// Whether a location named by a client may be used: a relative path (a `file://` URL of
/// one) that cannot leave the server's working directory.
pub fn allowed(location: &str) -> Result<(), String> {
    let path = location.strip_prefix("file://").unwrap_or(location);
    if path.is_empty() {
        return Err("an empty path".into());
    }
    if path.starts_with('~') {
        return Err(format!(
            "`{location}`: the server takes paths relative to its working directory, without `~`"
        ));
    }
    for component in Path::new(path).components() {
        match component {
            Component::Normal(_) | Component::CurDir => {}
            Component::ParentDir => {
                return Err(format!(
                    "`{location}`: `..` is not allowed in jobs submitted to a server"
                ));
            }
            Component::RootDir | Component::Prefix(_) => {
                return Err(format!(
                    "`{location}`: jobs submitted to a server may only use paths relative to its working directory"
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_relative_paths_below_the_working_directory_are_allowed() {
        assert!(allowed("out/q1").is_ok());
        assert!(allowed("./data/clicks.jsonl").is_ok());
        assert!(allowed("file://checkpoints").is_ok());
        assert!(allowed("/etc/passwd").is_err());
        assert!(allowed("file:///var/lib/weir").is_err());
        assert!(allowed("out/../../etc").is_err());
        assert!(allowed("..").is_err());
        assert!(allowed("~/secrets").is_err());
        assert!(allowed("").is_err());
    }
}
