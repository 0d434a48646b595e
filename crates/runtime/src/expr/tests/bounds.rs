//! Hostile snippets: whatever their shape, compiling one is refused or succeeds on a small stack,
//! never overflows it (a server compiles submitted jobs on its worker threads).

use super::*;

/// Compiles `sql` against [`schema`] on a thread with a 1 MiB stack, half a tokio worker's: a
/// walk that recursed once per term of a long chain would overflow it.
fn compile_on_small_stack(sql: String) -> Result<(), ExprError> {
    std::thread::Builder::new()
        .stack_size(1024 * 1024)
        .spawn(move || Expr::compile(&sql, &schema()).map(|_| ()))
        .expect("spawn a test thread")
        .join()
        .expect("compiling must not crash the thread")
}

fn chain(term: &str, op: &str, terms: usize) -> String {
    vec![term; terms].join(op)
}

#[test]
fn long_left_deep_chains_are_refused_without_overflowing_the_stack() {
    for (term, op) in [("i", " + "), ("s", " || "), ("b", " AND "), ("b", " OR ")] {
        for terms in [1_500, 5_000, 100_000] {
            let error = compile_on_small_stack(chain(term, op, terms)).unwrap_err();
            let message = error.to_string();
            assert!(
                message.contains("more than 500 operators") || message.contains("bytes long"),
                "{terms} terms of `{op}`: {message}"
            );
            assert_eq!(error.line(), Some(1), "the refusal points into the snippet");
        }
    }
}

#[test]
fn chains_within_the_token_bound_but_too_deep_are_refused_by_the_compiler() {
    // 499 operators: just under the token bound, five times the depth bound.
    let error = compile_on_small_stack(chain("i", " + ", 500)).unwrap_err();
    assert!(
        error
            .to_string()
            .contains("nests more than 100 levels deep"),
        "{error}"
    );
    // The same chain followed by stray text: the error renders no part of the deep tree.
    let error = compile_on_small_stack(format!("{} x", chain("i", " + ", 490))).unwrap_err();
    assert!(matches!(error, ExprError::Syntax { .. }), "{error}");
}

#[test]
fn deep_parentheses_and_unary_chains_are_refused() {
    let parens = format!("{}i{}", "(".repeat(5_000), ")".repeat(5_000));
    assert!(compile_on_small_stack(parens).is_err());
    let nots = format!("{}b", "NOT ".repeat(5_000));
    assert!(compile_on_small_stack(nots).is_err());
    let minus = format!("{}i", "- ".repeat(5_000));
    assert!(compile_on_small_stack(minus).is_err());
}

#[test]
fn over_long_snippets_are_refused_by_length() {
    let long = format!("'{}'", "x".repeat(super::super::MAX_LENGTH));
    let error = compile_on_small_stack(long).unwrap_err();
    assert!(error.to_string().contains("bytes long"), "{error}");
}

#[test]
fn realistic_expressions_stay_well_inside_the_bounds() {
    // A chain of 90 terms: deep, but under the compiler's depth.
    compile_on_small_stack(chain("i", " + ", 90)).expect("90 terms compile");
    // Wide and flat: a CASE of 150 branches and an IN list of 5,000 numbers nest a few levels.
    let case = format!(
        "CASE {} ELSE 0 END",
        (0..150)
            .map(|n| format!("WHEN i = {n} THEN {n}"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    compile_on_small_stack(case).expect("a wide CASE compiles");
    let list = (0..5_000)
        .map(|n| n.to_string())
        .collect::<Vec<_>>()
        .join(", ");
    compile_on_small_stack(format!("i IN ({list})")).expect("a long IN list compiles");
}
