use super::*;

#[test]
fn comparisons_of_ints_return_bool_with_null_propagation() {
    assert_eq!(bools("i > 1"), [Some(false), Some(false), None, Some(true)]);
    assert_eq!(bools("i = 1"), [Some(true), Some(false), None, Some(false)]);
    assert_eq!(bools("i <> 1"), [Some(false), Some(true), None, Some(true)]);
    assert_eq!(bools("i != 1"), [Some(false), Some(true), None, Some(true)]);
    assert_eq!(bools("i <= j"), [Some(true), Some(true), None, None]);
    assert_eq!(bools("i >= -7"), [Some(true), Some(true), None, Some(true)]);
    assert_eq!(bools("i < NULL"), [None; 4]);
}

#[test]
fn int_and_float_compare_after_widening() {
    assert_eq!(bools("i < f"), [Some(true), Some(true), None, Some(false)]);
    assert_eq!(
        bools("i = 1.0"),
        [Some(true), Some(false), None, Some(false)]
    );
}

#[test]
fn strings_bools_and_timestamps_compare() {
    assert_eq!(
        bools("s = 'Hello'"),
        [Some(true), Some(false), None, Some(false)]
    );
    assert_eq!(
        bools("s < 'b'"),
        [Some(true), Some(false), None, Some(true)]
    );
    assert_eq!(
        bools("b = TRUE"),
        [Some(true), Some(false), None, Some(true)]
    );
    assert_eq!(
        bools("ts = TIMESTAMP '1970-01-01 00:00:00'"),
        [Some(false), Some(true), None, Some(false)]
    );
}

#[test]
fn string_literal_next_to_a_timestamp_is_read_as_a_timestamp() {
    assert_eq!(
        bools("ts > '2000-01-01'"),
        [Some(true), Some(false), None, Some(true)]
    );
    assert_eq!(
        bools("'2023-11-14T22:13:20.123Z' = ts"),
        [Some(true), Some(false), None, Some(false)]
    );
    let error = compile_error("ts > 'yesterday'");
    assert!(
        matches!(error, ExprError::InvalidLiteral { .. }),
        "{error:?}"
    );
    assert!(
        error.to_string().contains("'yesterday' is not a TIMESTAMP"),
        "{error}"
    );
}

#[test]
fn string_column_next_to_a_timestamp_needs_a_cast() {
    let message = compile_error("ts = s").to_string();
    assert!(message.starts_with("cannot compare"), "{message}");
    assert!(message.contains("CAST(s AS TIMESTAMP)"), "{message}");
    assert_eq!(
        compile_error("i = s").to_string(),
        "cannot compare INT with STRING"
    );
    assert_eq!(
        compile_error("b < 1").to_string(),
        "cannot compare BOOL with INT"
    );
}

#[test]
fn float_equality_treats_negative_zero_and_nan_like_sql() {
    // -0.25 * 0 is -0.0, which equals 0.0.
    assert_eq!(
        bools("f * 0 = 0.0"),
        [Some(true), Some(true), None, Some(true)]
    );
    // f / 0 - f / 0 is inf - inf = NaN: equal to itself and above every number.
    assert_eq!(
        bools("f / 0 - f / 0 = f / 0 - f / 0"),
        [Some(true), Some(true), None, Some(true)]
    );
    assert_eq!(
        bools("f / 0 - f / 0 > 1e308"),
        [Some(true), Some(true), None, Some(true)]
    );
}

#[test]
fn between_is_inclusive_and_negatable() {
    assert_eq!(
        bools("i BETWEEN 0 AND 10"),
        [Some(true), Some(false), None, Some(true)]
    );
    assert_eq!(
        bools("i NOT BETWEEN 0 AND 5"),
        [Some(false), Some(true), None, Some(true)]
    );
    // A NULL bound gives NULL unless the other bound already decides.
    assert_eq!(
        bools("i BETWEEN j AND 10"),
        [Some(false), Some(false), None, None]
    );
    assert_eq!(
        bools("i BETWEEN 2 AND NULL"),
        [Some(false), Some(false), None, None]
    );
    assert_eq!(
        bools("f BETWEEN i AND 2"),
        [Some(true), Some(true), None, Some(false)]
    );
}

#[test]
fn in_list_follows_sql_null_rules() {
    assert_eq!(
        bools("i IN (1, 10)"),
        [Some(true), Some(false), None, Some(true)]
    );
    assert_eq!(
        bools("i NOT IN (1, 10)"),
        [Some(false), Some(true), None, Some(false)]
    );
    assert_eq!(bools("i IN (1, NULL)"), [Some(true), None, None, None]);
    assert_eq!(bools("i NOT IN (1, NULL)"), [Some(false), None, None, None]);
    assert_eq!(
        bools("s IN ('Hello', 'x')"),
        [Some(true), Some(false), None, Some(false)]
    );
    assert_eq!(
        bools("i IN (1.5, 10)"),
        [Some(false), Some(false), None, Some(true)]
    );
    assert_eq!(
        bools("i IN (j, 10)"),
        [Some(false), Some(false), None, Some(true)]
    );
    assert!(
        compile_error("i IN (1, 'a')")
            .to_string()
            .contains("cannot compare")
    );
    assert!(matches!(
        compile_error("i IN (SELECT 1)"),
        ExprError::Unsupported { .. }
    ));
}

#[test]
fn null_tests_never_return_null() {
    assert_eq!(
        bools("i IS NULL"),
        [Some(false), Some(false), Some(true), Some(false)]
    );
    assert_eq!(
        bools("s IS NOT NULL"),
        [Some(true), Some(true), Some(false), Some(true)]
    );
    assert_eq!(bools("NULL IS NULL"), [Some(true); 4]);
}

#[test]
fn truth_tests_treat_null_as_neither() {
    assert_eq!(
        bools("b IS TRUE"),
        [Some(true), Some(false), Some(false), Some(true)]
    );
    assert_eq!(
        bools("b IS NOT TRUE"),
        [Some(false), Some(true), Some(true), Some(false)]
    );
    assert_eq!(
        bools("b IS FALSE"),
        [Some(false), Some(true), Some(false), Some(false)]
    );
    assert_eq!(
        bools("b IS NOT FALSE"),
        [Some(true), Some(false), Some(true), Some(true)]
    );
    assert_eq!(
        bools("(i > 0) IS TRUE"),
        [Some(true), Some(false), Some(false), Some(true)]
    );
    assert!(
        compile_error("i IS TRUE")
            .to_string()
            .contains("IS TRUE needs a BOOL")
    );
}

#[test]
fn distinct_from_treats_null_as_a_value() {
    assert_eq!(
        bools("j IS DISTINCT FROM 3"),
        [Some(true), Some(true), Some(false), Some(true)]
    );
    assert_eq!(
        bools("j IS NOT DISTINCT FROM NULL"),
        [Some(false), Some(false), Some(false), Some(true)]
    );
    assert_eq!(bools("NULL IS DISTINCT FROM NULL"), [Some(false); 4]);
}
