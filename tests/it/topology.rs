//! Fan-out, fan-in (union), key-by and parallelism changes in one job, against a plain loop.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use weir_runtime::connectors::nexmark::{Event, Generator, GeneratorConfig};

use crate::support::*;

const EVENTS: u64 = 100_000;

fn job(dirs: &[&std::path::Path; 3]) -> String {
    format!(
        "\
name: fan
parallelism: 2
sources:
  gen: {{kind: nexmark, events: {EVENTS}}}
transforms:
  cheap: {{kind: filter, from: gen.bid, where: price < 1000}}
  dear: {{kind: filter, from: gen.bid, where: price >= 1000000}}
  cheap-rows: {{kind: map, from: cheap, columns: {{auction: auction, tag: \"'cheap'\"}}}}
  dear-rows: {{kind: map, from: dear, columns: {{auction: auction, tag: \"'dear'\"}}}}
  both: {{kind: union, from: [cheap-rows, dear-rows]}}
  by-tag: {{kind: key-by, from: both, keys: [tag]}}
  counts:
    kind: aggregate
    from: by-tag
    aggregates: {{n: count(*), top: max(auction), low: min(auction)}}
sinks:
  all: {{kind: file, from: both, path: {}}}
  cheap-only: {{kind: file, from: cheap-rows, path: {}, parallelism: 1}}
  totals: {{kind: file, from: counts, path: {}, parallelism: 3}}
",
        dirs[0].display(),
        dirs[1].display(),
        dirs[2].display()
    )
}

#[test]
fn fan_out_union_and_key_by_deliver_every_record_once() {
    let generator = Generator::new(GeneratorConfig::default());
    let mut cheap = Vec::new();
    let mut dear = Vec::new();
    for n in 0..EVENTS {
        if let Event::Bid(b) = generator.event(n) {
            if b.price < 1000 {
                cheap.push(json!({"auction": b.auction, "tag": "cheap"}));
            } else if b.price >= 1_000_000 {
                dear.push(json!({"auction": b.auction, "tag": "dear"}));
            }
        }
    }
    assert!(!cheap.is_empty() && !dear.is_empty());
    let mut totals: BTreeMap<String, (usize, i64, i64)> = BTreeMap::new();
    for row in cheap.iter().chain(&dear) {
        let a = row["auction"].as_i64().unwrap();
        let t = totals
            .entry(row["tag"].as_str().unwrap().to_string())
            .or_insert((0, i64::MIN, i64::MAX));
        t.0 += 1;
        t.1 = t.1.max(a);
        t.2 = t.2.min(a);
    }

    for chaining in [true, false] {
        let dirs = [out_dir(), out_dir(), out_dir()];
        let file = out_dir();
        let path = file.path().join("fan.yaml");
        std::fs::write(
            &path,
            job(&[dirs[0].path(), dirs[1].path(), dirs[2].path()]),
        )
        .unwrap();
        run_job(&path, &[format!("chaining={chaining}")]);

        let all = multiset(read_parts(dirs[0].path()));
        let expected_all = multiset(cheap.iter().chain(&dear).cloned());
        assert_same_rows("union of both branches", &all, &expected_all);
        assert_same_rows(
            "the cheap branch, also read by its own sink",
            &multiset(read_parts(dirs[1].path())),
            &multiset(cheap.clone()),
        );
        // The totals sink has another parallelism than the aggregate, so a key's updates are
        // spread over its part files: the final update is the one with the largest count.
        let mut last: BTreeMap<String, Value> = BTreeMap::new();
        for row in read_parts(dirs[2].path()) {
            let tag = row["tag"].as_str().unwrap().to_string();
            if last
                .get(&tag)
                .is_none_or(|r| r["n"].as_u64() < row["n"].as_u64())
            {
                last.insert(tag, row);
            }
        }
        assert_eq!(last.len(), 2);
        for (tag, (n, top, low)) in &totals {
            assert_eq!(last[tag]["n"], *n, "{tag}, chaining {chaining}");
            assert_eq!(last[tag]["top"], *top, "{tag}");
            assert_eq!(last[tag]["low"], *low, "{tag}");
        }
    }
}
