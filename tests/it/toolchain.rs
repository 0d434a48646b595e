//! The workspace's `rust-version` is true: no dependency in the lock file needs a newer Rust.
//! (weir's own code is held to it by clippy's `incompatible_msrv` lint, which `make test` runs
//! with warnings as errors: it flags any standard-library API newer than `rust-version`.)

use std::process::Command;

/// `1.88` or `1.88.0` as (major, minor, patch).
fn version(text: &str) -> (u64, u64, u64) {
    let mut parts = text
        .split('.')
        .map(|p| p.parse::<u64>().expect("a numeric version part"));
    (
        parts.next().expect("a major version"),
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
    )
}

#[test]
fn rust_version_is_at_least_what_every_locked_dependency_needs() {
    // Only the packages built for this machine: cargo downloads no others (Windows-only crates
    // such as anstyle-wincon stay out of the cache), and offline metadata needs every manifest.
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let about = Command::new(rustc)
        .arg("-vV")
        .output()
        .expect("rustc -vV runs");
    let about = String::from_utf8_lossy(&about.stdout);
    let host = about
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .expect("rustc -vV names the host");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--locked", "--offline"])
        .args(["--filter-platform", host])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let members: Vec<&str> = meta["workspace_members"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m.as_str())
        .collect();
    let resolved: Vec<&str> = meta["resolve"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|n| n["id"].as_str())
        .collect();
    let packages = meta["packages"].as_array().unwrap();
    let ours: Vec<(u64, u64, u64)> = packages
        .iter()
        .filter(|p| members.contains(&p["id"].as_str().unwrap_or_default()))
        .map(|p| {
            version(
                p["rust_version"]
                    .as_str()
                    .unwrap_or_else(|| panic!("{} states a rust-version", p["name"])),
            )
        })
        .collect();
    assert!(!ours.is_empty());
    assert!(
        ours.iter().all(|v| *v == ours[0]),
        "every crate of the workspace states the workspace's rust-version: {ours:?}"
    );
    let ours = ours[0];
    let needed = packages
        .iter()
        .filter(|p| resolved.contains(&p["id"].as_str().unwrap_or_default()))
        .filter_map(|p| Some((version(p["rust_version"].as_str()?), p["name"].clone())))
        .max_by_key(|(v, _)| *v)
        .expect("some dependency states a rust-version");
    assert!(
        ours >= needed.0,
        "rust-version {ours:?} is older than {} needs ({:?}): raise it in Cargo.toml",
        needed.1,
        needed.0
    );
}

/// The unit graph cargo would build for `args` (no build: `--unit-graph`, which needs
/// RUSTC_BOOTSTRAP on stable), as (package, target, mode, platform) → features.
fn unit_features(args: &[&str]) -> std::collections::BTreeMap<String, Vec<String>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "build",
            "--release",
            "--locked",
            "--offline",
            "--unit-graph",
        ])
        .args(["-Z", "unstable-options"])
        .args(args)
        .env("RUSTC_BOOTSTRAP", "1")
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo build --unit-graph runs");
    assert!(
        out.status.success(),
        "cargo build --unit-graph {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let graph: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut units = std::collections::BTreeMap::new();
    for unit in graph["units"].as_array().unwrap() {
        let key = format!(
            "{} {} {} {}",
            unit["pkg_id"].as_str().unwrap(),
            unit["target"]["name"].as_str().unwrap(),
            unit["mode"].as_str().unwrap(),
            unit["platform"].as_str().unwrap_or("host")
        );
        let mut features: Vec<String> = unit["features"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f.as_str().unwrap().to_owned())
            .collect();
        features.sort();
        units.insert(key, features);
    }
    units
}

/// `make run` builds only the `weir` binary (without `weir bench`) and `make test` the whole
/// workspace with its tests; the second reuses what the first compiled only if every dependency they share has
/// the same features in both. The `workspace-hack` crate (cargo-hakari) makes it so: this fails
/// when it is stale (a dependency added or changed without `cargo hakari generate`), which
/// would otherwise show only as a `make test` that recompiles most of the graph.
#[test]
fn the_binary_alone_builds_its_dependencies_with_the_features_of_the_whole_workspace() {
    let binary = unit_features(&["-p", "weir", "--bin", "weir", "--no-default-features"]);
    let all = unit_features(&["--workspace", "--all-targets"]);
    let differing: Vec<String> = binary
        .iter()
        // The binary itself differs by its `bench` feature, which `make run` leaves out.
        .filter(|(unit, _)| !unit.contains("#weir@"))
        .filter_map(|(unit, features)| match all.get(unit) {
            Some(f) if f == features => None,
            Some(f) => Some(format!(
                "{unit}: {features:?} alone, {f:?} in the workspace"
            )),
            None => Some(format!("{unit}: not in the workspace's build")),
        })
        .collect();
    assert!(
        differing.is_empty(),
        "run `cargo hakari generate` (cargo install cargo-hakari): {} units differ:\n{}",
        differing.len(),
        differing.join("\n")
    );
}
