//! What a submitted job may name on the server's filesystem.
//!
//! A job file names files and directories: a `jsonl` source's `path`, a `file` sink's `path`,
//! `state.path`, `checkpoint.storage`; and its `name` becomes a directory of checkpoints and
//! state. `weir run` trusts its user; a server does not trust its clients. A submitted job may
//! only name relative paths that stay below the server's working directory (no absolute path,
//! no `..`, no `~`), and its name must be usable as one path component. Problems come back
//! with their line, column and key like any other problem of the file.
//!
//! The job's own locations (`state.path`, `checkpoint.storage`) are checked here; each source
//! and sink names its own ([`weir_runtime::api::connector::Hosted::locations`]), so a connector added later is asked too,
//! and one that forgets to answer does not compile.

use std::path::{Component, Path};

use weir_runtime::spec::problems::{SpecSource, pointer};
use weir_runtime::spec::{JobSpec, Problem, StorageSpec};

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
    let mut locations: Vec<(String, &str)> = Vec::new();
    if let Some(path) = &spec.state.path {
        locations.push(("/state/path".into(), path));
    }
    match &spec.checkpoint.storage {
        Some(StorageSpec::Url(url)) => locations.push(("/checkpoint/storage".into(), url)),
        Some(StorageSpec::Settings(s)) => {
            locations.push(("/checkpoint/storage/url".into(), &s.url))
        }
        None => {}
    }
    let sources = spec
        .sources
        .iter()
        .map(|(name, s)| (pointer(&["sources", name]), s.hosted()));
    let sinks = spec
        .sinks
        .iter()
        .map(|(name, s)| (pointer(&["sinks", name]), s.hosted()));
    let named: Vec<(String, String)> = sources
        .chain(sinks)
        .flat_map(|(at, hosted)| {
            hosted
                .locations()
                .into_iter()
                .map(move |l| (format!("{at}{}", l.at), l.path))
        })
        .collect();
    for (at, location) in locations
        .into_iter()
        .chain(named.iter().map(|(at, l)| (at.clone(), l.as_str())))
    {
        if let Err(why) = allowed(location) {
            problems.push(source.at_value(&at, why));
        }
    }
    problems
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
