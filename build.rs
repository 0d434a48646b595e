//! Tells the `weir` binary which commit it is built from, for `weir --version`, as the
//! environment variable `WEIR_BUILD_COMMIT` of its compile:
//!
//! - `commit <hash>` from `WEIR_COMMIT` when the build's environment sets it (a packager, or
//!   whoever makes a tarball, knows the commit when git cannot tell);
//! - else `commit <hash>` from `git rev-parse HEAD`, when this package is the top of a git work
//!   tree (a clone or a worktree; not a tarball unpacked inside some other repository);
//! - else `unknown commit`.
//!
//! It reruns only when the checked-out commit moves (git's `HEAD`, the branch it names, and
//! `packed-refs`), so an edit of the sources does not run git again.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=WEIR_COMMIT");
    let commit = match std::env::var("WEIR_COMMIT") {
        Ok(c) if !c.trim().is_empty() => Some(c.trim().to_owned()),
        _ => from_git(),
    };
    let text = match commit {
        Some(c) => format!("commit {c}"),
        None => "unknown commit".to_owned(),
    };
    println!("cargo:rustc-env=WEIR_BUILD_COMMIT={text}");
}

/// The checked-out commit, if this package is the top of a git work tree.
fn from_git() -> Option<String> {
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR")?);
    let top = git(&dir, &["rev-parse", "--show-toplevel"])?;
    if !same_dir(Path::new(&top), &dir) {
        return None;
    }
    for name in ["HEAD", "packed-refs"] {
        watch(&dir, name);
    }
    if let Some(branch) = git(&dir, &["symbolic-ref", "-q", "HEAD"]) {
        watch(&dir, &branch);
    }
    git(&dir, &["rev-parse", "--short=12", "HEAD"])
}

/// Reruns the build when git's file `name` (resolved the way git does, worktrees included)
/// changes; a file that does not exist is not watched, or cargo would rerun every build.
fn watch(dir: &Path, name: &str) {
    if let Some(path) = git(
        dir,
        &["rev-parse", "--path-format=absolute", "--git-path", name],
    ) && Path::new(&path).exists()
    {
        println!("cargo:rerun-if-changed={path}");
    }
}

/// A git command's trimmed output, if git is there and it succeeds.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    (!text.is_empty()).then_some(text)
}

fn same_dir(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}
