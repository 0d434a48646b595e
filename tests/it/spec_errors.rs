//! Bad job files: every problem reported at once, each with file, line, column and key path.

use weir_runtime::spec::problems::Problem;

fn problems(text: &str) -> Vec<Problem> {
    match weir_runtime::plan::check_str("bad.yaml", text, &[]) {
        Ok(_) => panic!("the job was accepted"),
        Err(e) => e.problems,
    }
}

fn find<'a>(problems: &'a [Problem], path: &str, needle: &str) -> &'a Problem {
    problems
        .iter()
        .find(|p| p.path == path && p.message.contains(needle))
        .unwrap_or_else(|| panic!("no problem at `{path}` mentioning `{needle}` in {problems:#?}"))
}

const EVERYTHING_WRONG: &str = "\
name: broken
sources:
  gen:
    kind: nexmark
    events: lots
transforms:
  cheap:
    kind: filter
    from: gen.bid
    where: price + 'x' > 3
  loop-a:
    kind: map
    from: loop-b
    columns: {a: auction}
  loop-b:
    kind: filter
    from: loop-a
    where: a > 1
  typo:
    kind: filter
    from: gen.bid
    wher: price > 1
sinks:
  out:
    kind: blackhole
    from: cheep
  out2:
    kind: blackhole
    from: loop-b
  out3:
    kind: blackhole
    from: typo
";

#[test]
fn every_kind_of_problem_in_one_file_is_reported_together() {
    let p = problems(EVERYTHING_WRONG);
    let wrong_type = find(&p, "sources.gen.events", "expected an integer");
    assert_eq!((wrong_type.line, wrong_type.column), (Some(5), Some(13)));
    let unknown = find(&p, "transforms.typo.wher", "unknown key `wher`");
    assert_eq!((unknown.line, unknown.column), (Some(22), Some(5)));
    assert!(unknown.message.contains("did you mean `where`"));
    let expression = find(&p, "transforms.cheap.where", "");
    assert_eq!(expression.line, Some(10));
    let dangling = find(&p, "sinks.out.from", "unknown input `cheep`");
    assert!(
        dangling.message.contains("did you mean `cheap`"),
        "{}",
        dangling.message
    );
    assert_eq!((dangling.line, dangling.column), (Some(26), Some(11)));
    let cycle = p
        .iter()
        .find(|p| p.message.contains("cycle"))
        .unwrap_or_else(|| panic!("no cycle reported: {p:#?}"));
    assert!(
        cycle.message.contains("loop-a") && cycle.message.contains("loop-b"),
        "{}",
        cycle.message
    );
}

#[test]
fn problems_are_sorted_and_display_as_file_line_column_key() {
    let err = weir_runtime::plan::check_str("bad.yaml", EVERYTHING_WRONG, &[])
        .err()
        .unwrap();
    let lines: Vec<usize> = err.problems.iter().filter_map(|p| p.line).collect();
    let mut sorted = lines.clone();
    sorted.sort();
    assert_eq!(lines, sorted);
    let text = err.to_string();
    assert!(
        text.contains("bad.yaml:5:13: sources.gen.events: expected an integer"),
        "{text}"
    );
}

#[test]
fn an_expression_type_error_names_the_types() {
    let p = problems(
        "name: x\nsources:\n  g: {kind: nexmark}\ntransforms:\n  m:\n    kind: map\n    from: g.bid\n    columns:\n      bad: channel * 2\nsinks:\n  o: {kind: blackhole, from: m}\n",
    );
    let e = find(&p, "transforms.m.columns.bad", "");
    assert_eq!(e.line, Some(9));
    assert!(e.message.to_uppercase().contains("STRING"), "{}", e.message);
}

#[test]
fn a_condition_must_be_boolean() {
    let p = problems(
        "name: x\nsources:\n  g: {kind: nexmark}\ntransforms:\n  f: {kind: filter, from: g.bid, where: price + 1}\nsinks:\n  o: {kind: blackhole, from: f}\n",
    );
    find(&p, "transforms.f.where", "must be BOOL");
}

#[test]
fn a_multi_port_source_must_be_read_through_a_port() {
    let p = problems(
        "name: x\nsources:\n  g: {kind: nexmark}\nsinks:\n  o: {kind: blackhole, from: g}\n",
    );
    find(&p, "sinks.o.from", "write e.g. `g.bid`");
    let p = problems(
        "name: x\nsources:\n  g: {kind: nexmark}\nsinks:\n  o: {kind: blackhole, from: g.bids}\n",
    );
    find(&p, "sinks.o.from", "no port `bids`");
}

#[test]
fn a_sink_cannot_be_read_and_names_are_shared() {
    let p = problems(
        "name: x\nsources:\n  g: {kind: nexmark}\ntransforms:\n  o: {kind: filter, from: g.bid, where: 'true'}\nsinks:\n  o: {kind: blackhole, from: g.bid}\n  p: {kind: blackhole, from: o}\n",
    );
    find(&p, "sinks.o", "already used in `transforms`");
}

#[test]
fn union_inputs_must_have_the_same_columns() {
    let p = problems(
        "name: x\nsources:\n  g: {kind: nexmark}\ntransforms:\n  u: {kind: union, from: [g.bid, g.person]}\nsinks:\n  o: {kind: blackhole, from: u}\n",
    );
    find(&p, "transforms.u.from[1]", "does not have the same columns");
}

#[test]
fn an_aggregate_needs_a_key_by_input() {
    let p = problems(
        "name: x\nsources:\n  g: {kind: nexmark}\ntransforms:\n  a: {kind: aggregate, from: g.bid, aggregates: {n: count(*)}}\nsinks:\n  o: {kind: blackhole, from: a}\n",
    );
    find(&p, "transforms.a.from", "add a key-by");
}

#[test]
fn a_node_that_feeds_no_sink_is_reported() {
    let p = problems(
        "name: x\nsources:\n  g: {kind: nexmark}\ntransforms:\n  lost: {kind: filter, from: g.bid, where: price > 1}\nsinks:\n  o: {kind: blackhole, from: g.bid}\n",
    );
    find(&p, "transforms.lost", "feeds no sink");
}

#[test]
fn an_unknown_aggregate_function_is_reported_at_its_column() {
    let p = problems(
        "name: x\nsources:\n  g: {kind: nexmark}\ntransforms:\n  k: {kind: key-by, from: g.bid, keys: [auction]}\n  a:\n    kind: aggregate\n    from: k\n    aggregates:\n      m: median(price)\nsinks:\n  o: {kind: blackhole, from: a}\n",
    );
    let e = find(
        &p,
        "transforms.a.aggregates.m",
        "unknown aggregate function `median`",
    );
    assert_eq!(e.line, Some(10));
}
