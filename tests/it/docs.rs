//! The book's generated reference pages (`docs/src/reference/`) are what `weir schema
//! --markdown` writes from the job file's types now: a doc comment changed without
//! `scripts/docs.sh reference` fails here, naming the page.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

#[test]
fn the_books_reference_pages_are_what_weir_schema_writes() {
    let out = tempfile::tempdir().unwrap();
    let status = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["schema", "--markdown", "--out"])
        .arg(out.path())
        .status()
        .unwrap();
    assert!(status.success(), "weir schema --markdown --out failed");
    let committed = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/src/reference");
    let names = |dir: &Path| -> BTreeSet<String> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect()
    };
    assert_eq!(
        names(&committed),
        names(out.path()),
        "docs/src/reference holds exactly the generated pages"
    );
    for name in names(out.path()) {
        let want = std::fs::read_to_string(out.path().join(&name)).unwrap();
        let have = std::fs::read_to_string(committed.join(&name)).unwrap();
        assert!(
            want == have,
            "docs/src/reference/{name} is stale: run `scripts/docs.sh reference` and commit it"
        );
    }
}
