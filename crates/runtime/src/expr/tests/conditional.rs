use super::*;

#[test]
fn searched_case_picks_the_first_true_branch() {
    assert_eq!(
        strs("CASE WHEN i > 5 THEN 'big' WHEN i > 0 THEN 'small' ELSE 'neg' END"),
        some_strs(&[Some("small"), Some("neg"), Some("neg"), Some("big")])
    );
}

#[test]
fn case_without_else_is_null() {
    assert_eq!(
        ints("CASE WHEN i > 5 THEN 1 END"),
        [None, None, None, Some(1)]
    );
}

#[test]
fn simple_case_compares_the_operand() {
    assert_eq!(
        strs("CASE j WHEN 0 THEN 'zero' WHEN 2 THEN 'two' ELSE 'other' END"),
        some_strs(&[Some("two"), Some("zero"), Some("other"), Some("other")])
    );
    assert!(
        compile_error("CASE j WHEN 'x' THEN 1 END")
            .to_string()
            .contains("cannot be compared")
    );
}

#[test]
fn case_branches_unify_to_float_and_null_fits_anything() {
    assert_eq!(
        floats("CASE WHEN b THEN i ELSE f END"),
        [Some(1.0), Some(-0.25), None, Some(10.0)]
    );
    assert_eq!(
        ints("CASE WHEN b THEN NULL ELSE 1 END"),
        [None, Some(1), Some(1), None]
    );
    assert_eq!(
        compile("CASE WHEN b THEN NULL END").data_type(),
        &DataType::Null
    );
    assert_eq!(
        compile_error("CASE WHEN b THEN 1 ELSE 'x' END").to_string(),
        "CASE branches have incompatible types INT and STRING; CAST one of them"
    );
    assert!(
        compile_error("CASE WHEN i THEN 1 END")
            .to_string()
            .contains("CASE WHEN needs a BOOL")
    );
}

#[test]
fn case_evaluates_a_failing_branch_only_where_it_is_chosen() {
    assert_eq!(
        ints("CASE WHEN j = 0 THEN -1 ELSE i / j END"),
        [Some(0), Some(-1), None, None]
    );
    // A failing condition is evaluated only on rows no earlier branch took.
    assert_eq!(
        ints("CASE WHEN j = 0 THEN 0 WHEN i / j > 0 THEN 1 ELSE 2 END"),
        [Some(2), Some(0), Some(2), Some(2)]
    );
    assert_eq!(
        ints("CASE WHEN j <> 0 THEN i / j WHEN i > 0 THEN 100 / i END"),
        [Some(0), None, None, Some(10)]
    );
    assert!(matches!(
        eval_error("CASE WHEN i > 0 THEN 1 ELSE i / j END"),
        EvalError::DivisionByZero { .. }
    ));
}

#[test]
fn coalesce_returns_the_first_non_null_argument() {
    assert_eq!(
        ints("coalesce(i, j, 0)"),
        [Some(1), Some(-7), Some(3), Some(10)]
    );
    assert_eq!(
        floats("coalesce(f, i)"),
        [Some(1.5), Some(-0.25), None, Some(2.0)]
    );
    assert_eq!(ints("coalesce(NULL, 5)"), [Some(5); 4]);
    // `100 / j` would divide by zero in row 1, but i is not NULL there.
    assert_eq!(
        ints("coalesce(i, 100 / j)"),
        [Some(1), Some(-7), Some(33), Some(10)]
    );
    assert_eq!(compile("coalesce(NULL)").data_type(), &DataType::Null);
}

#[test]
fn nullif_turns_equal_values_into_null() {
    assert_eq!(ints("nullif(j, 0)"), [Some(2), None, Some(3), None]);
    assert_eq!(
        strs("nullif(s, 'Hello')"),
        some_strs(&[None, Some("wörld"), None, Some("  pad  ")])
    );
    assert_eq!(floats("nullif(f, 2)"), [Some(1.5), Some(-0.25), None, None]);
}

#[test]
fn greatest_and_least_skip_nulls() {
    assert_eq!(
        ints("greatest(i, j)"),
        [Some(2), Some(0), Some(3), Some(10)]
    );
    assert_eq!(
        ints("least(i, j, 5)"),
        [Some(1), Some(-7), Some(3), Some(5)]
    );
    assert_eq!(
        floats("greatest(i, f)"),
        [Some(1.5), Some(-0.25), None, Some(10.0)]
    );
    assert_eq!(
        strs("least(s, 'b')"),
        some_strs(&[Some("Hello"), Some("b"), Some("b"), Some("  pad  ")])
    );
    assert!(
        compile_error("greatest(i, s)")
            .to_string()
            .contains("incompatible types")
    );
}

#[test]
fn if_is_case_when_and_skips_the_branch_a_row_does_not_take() {
    assert_eq!(
        strs("IF(i > 0, 'pos', 'not')"),
        some_strs(&[Some("pos"), Some("not"), Some("not"), Some("pos")])
    );
    // j = 0 takes the else branch, so i / j is not evaluated there.
    assert_eq!(
        ints("if(j <> 0, i / j, -1)"),
        [Some(0), Some(-1), None, Some(-1)]
    );
    let message = compile_error("if(i, 1, 2)").to_string();
    assert!(message.contains("needs a BOOL"), "{message}");
}

#[test]
fn ifnull_replaces_null() {
    // "IFNULL(nullable_column, 5) returns never NULL."
    assert_eq!(ints("IFNULL(i, 5)"), [Some(1), Some(-7), Some(5), Some(10)]);
    assert_eq!(floats("ifnull(f, i)")[2], None);
    assert_eq!(floats("ifnull(f, 0)")[2], Some(0.0));
    assert_eq!(
        compile_error("ifnull(i)").to_string(),
        "ifnull takes 2 arguments, got 1: ifnull(a, replacement)"
    );
    let message = compile_error("ifnull(i, 'x')").to_string();
    assert!(
        message.contains("incompatible types INT and STRING"),
        "{message}"
    );
}

#[test]
fn string_tests_are_false_for_null() {
    // "Returns true if all characters in string are letter, otherwise false."
    assert_eq!(
        bools("is_alpha(s)"),
        [Some(true), Some(true), Some(false), Some(false)]
    );
    // "Returns true if all characters in string are digit, otherwise false."
    assert_eq!(bools("is_digit('0123')"), [Some(true); 4]);
    assert_eq!(bools("is_digit('12a')"), [Some(false); 4]);
    assert_eq!(bools("is_digit('')"), [Some(false); 4]);
    // "Returns true if string can be parsed to a valid numeric, otherwise false."
    for (text, expected) in [
        ("1", true),
        ("-1.5", true),
        (".5", true),
        ("1.", true),
        ("1.5e10", true),
        ("+2E-3", true),
        ("", false),
        (".", false),
        ("1e", false),
        ("abc", false),
        ("1.2.3", false),
    ] {
        assert_eq!(
            bools(&format!("is_decimal('{text}')")),
            [Some(expected); 4],
            "{text}"
        );
    }
    assert_eq!(bools("is_decimal(NULL)"), [Some(false); 4]);
}
