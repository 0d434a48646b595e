use super::*;

#[test]
fn cast_converts_between_the_engine_types() {
    assert_eq!(
        floats("CAST(i AS DOUBLE)"),
        [Some(1.0), Some(-7.0), None, Some(10.0)]
    );
    assert_eq!(floats("CAST(i AS REAL)"), floats("CAST(i AS FLOAT)"));
    assert_eq!(ints("CAST(f AS BIGINT)"), [Some(1), Some(0), None, Some(2)]);
    assert_eq!(ints("CAST(f AS INTEGER)"), ints("CAST(f AS INT)"));
    assert_eq!(
        strs("CAST(i AS VARCHAR)"),
        some_strs(&[Some("1"), Some("-7"), None, Some("10")])
    );
    assert_eq!(strs("CAST(b AS TEXT)")[0].as_deref(), Some("true"));
    assert_eq!(ints("CAST(b AS INT)"), [Some(1), Some(0), None, Some(1)]);
    assert_eq!(
        ints("CAST('42' AS BIGINT) + i"),
        [Some(43), Some(35), None, Some(52)]
    );
    assert_eq!(bools("CAST('true' AS BOOLEAN)"), [Some(true); 4]);
    assert_eq!(
        floats("i::DOUBLE"),
        [Some(1.0), Some(-7.0), None, Some(10.0)]
    );
    assert_eq!(strs("CAST(s AS STRING)"), strs("s"));
}

#[test]
fn int_and_timestamp_cast_through_epoch_milliseconds() {
    assert_eq!(
        timestamps("CAST(i AS TIMESTAMP)"),
        [Some(1), Some(-7), None, Some(10)]
    );
    assert_eq!(
        ints("CAST(ts AS BIGINT)"),
        [
            Some(1_700_000_000_123),
            Some(0),
            None,
            Some(1_709_251_199_999)
        ]
    );
    assert_eq!(
        timestamps("CAST('2023-11-14 22:13:20' AS TIMESTAMP)")[0],
        Some(1_700_000_000_000)
    );
}

#[test]
fn failed_cast_is_an_eval_error_and_try_cast_gives_null() {
    let error = eval_error("CAST(s AS INT)");
    assert!(matches!(error, EvalError::Cast { .. }), "{error:?}");
    assert!(error.to_string().contains("in `CAST(s AS INT)`"), "{error}");
    assert!(error.to_string().contains("TRY_CAST"), "{error}");
    assert_eq!(ints("TRY_CAST(s AS INT)"), [None; 4]);
    assert_eq!(ints("TRY_CAST('12' AS INT)"), [Some(12); 4]);
    // A constant that cannot convert fails when evaluated, not when compiled: it may sit in a
    // branch no row takes.
    assert!(matches!(
        eval_error("CAST('abc' AS INT)"),
        EvalError::Cast { .. }
    ));
    assert_eq!(
        ints("CASE WHEN FALSE THEN CAST('abc' AS INT) ELSE 1 END"),
        [Some(1); 4]
    );
}

#[test]
fn cast_to_unsupported_types_lists_the_supported_ones() {
    let message = compile_error("CAST(i AS DATE)").to_string();
    assert!(
        message.starts_with("cannot CAST to DATE: supported types are BIGINT"),
        "{message}"
    );
    assert!(
        compile_error("CAST(ts AS BOOLEAN)")
            .to_string()
            .starts_with("cannot CAST TIMESTAMP to BOOL")
    );
}
