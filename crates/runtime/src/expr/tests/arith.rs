use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Float64Type;
use arrow_array::{Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema};

use super::*;

#[test]
fn integer_arithmetic_stays_int_and_propagates_null() {
    assert_eq!(ints("i + j"), [Some(3), Some(-7), None, None]);
    assert_eq!(ints("i - j"), [Some(-1), Some(-7), None, None]);
    assert_eq!(ints("i * j"), [Some(2), Some(0), None, None]);
    assert_eq!(ints("i + 1"), [Some(2), Some(-6), None, Some(11)]);
    assert_eq!(
        ints("2 * (i + 1) - 3"),
        [Some(1), Some(-15), None, Some(19)]
    );
}

#[test]
fn integer_division_truncates_toward_zero() {
    assert_eq!(ints("i / 2"), [Some(0), Some(-3), None, Some(5)]);
    assert_eq!(ints("i % 3"), [Some(1), Some(-1), None, Some(1)]);
    assert_eq!(ints("-9223372036854775808 % -1"), [Some(0); 4]);
}

#[test]
fn division_by_zero_is_an_eval_error_naming_the_expression() {
    let error = eval_error("i / j");
    assert_eq!(
        error,
        EvalError::DivisionByZero {
            expr: "i / j".into()
        }
    );
    assert_eq!(error.to_string(), "division by zero in `i / j`");
    assert!(!error.is_internal());
    assert!(matches!(
        eval_error("i % j"),
        EvalError::DivisionByZero { .. }
    ));
    assert!(matches!(
        eval_error("i / 0"),
        EvalError::DivisionByZero { .. }
    ));
}

#[test]
fn division_by_zero_in_a_null_row_is_not_an_error() {
    // Row 2 has i NULL and j = 3; row 1 has j = 0 but i is used only where j is not zero.
    assert_eq!(ints("j / NULLIF(j, 0)"), [Some(1), None, Some(1), None]);
    assert_eq!(ints("NULL / j"), [None; 4]);
}

#[test]
fn integer_overflow_is_an_eval_error() {
    assert!(matches!(
        eval_error("i * 9223372036854775807"),
        EvalError::Overflow { .. }
    ));
    assert!(matches!(
        eval_error("9223372036854775807 + i"),
        EvalError::Overflow { .. }
    ));
    assert!(matches!(
        eval_error("-(-9223372036854775808)"),
        EvalError::Overflow { .. }
    ));
    assert!(matches!(
        eval_error("-9223372036854775808 / -1"),
        EvalError::Overflow { .. }
    ));
    assert!(matches!(
        eval_error("abs(-9223372036854775808)"),
        EvalError::Overflow { .. }
    ));
}

#[test]
fn most_negative_integer_literal_is_expressible() {
    assert_eq!(ints("-9223372036854775808 + 0"), [Some(i64::MIN); 4]);
}

#[test]
fn any_float_operand_makes_float_arithmetic() {
    assert_eq!(floats("f * 2"), [Some(3.0), Some(-0.5), None, Some(4.0)]);
    assert_eq!(floats("i + f"), [Some(2.5), Some(-7.25), None, Some(12.0)]);
    assert_eq!(
        floats("i / 4.0"),
        [Some(0.25), Some(-1.75), None, Some(2.5)]
    );
    assert_eq!(floats("f % 1"), [Some(0.5), Some(-0.25), None, Some(0.0)]);
}

#[test]
fn float_division_by_zero_follows_ieee() {
    assert_eq!(
        floats("f / 0"),
        [
            Some(f64::INFINITY),
            Some(f64::NEG_INFINITY),
            None,
            Some(f64::INFINITY)
        ]
    );
    assert!(floats("f % 0")[0].is_some_and(f64::is_nan));
}

#[test]
fn unary_minus_and_plus() {
    assert_eq!(ints("-i"), [Some(-1), Some(7), None, Some(-10)]);
    assert_eq!(floats("-f"), [Some(-1.5), Some(0.25), None, Some(-2.0)]);
    assert_eq!(floats("+f"), [Some(1.5), Some(-0.25), None, Some(2.0)]);
    assert_eq!(ints("- -i"), [Some(1), Some(-7), None, Some(10)]);
}

#[test]
fn null_operands_give_typed_nulls() {
    assert_eq!(ints("i + NULL"), [None; 4]);
    assert_eq!(floats("NULL * f"), [None; 4]);
    assert_eq!(compile("NULL + NULL").data_type(), &DataType::Null);
    assert_eq!(timestamps("ts + NULL"), [None; 4]);
    assert_eq!(timestamps("ts - NULL"), [None; 4]);
    assert_eq!(ints("NULL - ts"), [None; 4]);
}

#[test]
fn arithmetic_on_strings_and_bools_is_a_type_error_with_a_hint() {
    let error = compile_error("s * f");
    assert_eq!(
        error.to_string(),
        "cannot apply '*' to STRING and FLOAT: CAST the string to a number first, e.g. \
         CAST(x AS DOUBLE)"
    );
    assert!(
        error
            .to_string()
            .starts_with("cannot apply '*' to STRING and FLOAT")
    );
    assert!(
        compile_error("s + 'x'")
            .to_string()
            .contains("use || or concat")
    );
    assert!(
        compile_error("b + 1")
            .to_string()
            .starts_with("cannot apply '+' to BOOL and INT")
    );
    assert!(matches!(compile_error("-s"), ExprError::Type { .. }));
}

/// The exact decimal the reference computes for `price * 0.908`: `price * 908 / 1000` printed
/// with integer arithmetic, trailing zeros dropped.
fn exact_product(price: i64, mantissa: i64, scale: u32) -> String {
    let product = i128::from(price) * i128::from(mantissa);
    let divisor = 10_i128.pow(scale);
    let sign = if product < 0 { "-" } else { "" };
    let (whole, fraction) = (product.abs() / divisor, product.abs() % divisor);
    if fraction == 0 {
        return format!("{sign}{whole}");
    }
    let fraction = format!("{fraction:0width$}", width = scale as usize);
    format!("{sign}{whole}.{}", fraction.trim_end_matches('0'))
}

fn prices_batch(prices: Vec<i64>) -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![Field::new(
        "price",
        DataType::Int64,
        true,
    )]));
    RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(prices))]).unwrap()
}

fn printed(sql: &str, batch: &RecordBatch) -> Vec<String> {
    let expr = Expr::compile(sql, batch.schema().as_ref()).unwrap();
    assert_eq!(expr.data_type(), &DataType::Float64);
    let result = expr.evaluate(batch).unwrap();
    result
        .as_primitive::<Float64Type>()
        .values()
        .iter()
        .map(|v| v.to_string())
        .collect()
}

#[test]
fn int_times_decimal_literal_is_exact_to_the_last_digit() {
    // Every price up to 200,000 plus large ones near the exactness bound and negatives.
    let mut prices: Vec<i64> = (0..=200_000).collect();
    prices.extend((0..1_000).map(|k| 9_000_000_000_000 + k * 7_919));
    prices.extend((1..1_000).map(|k| -k * 131));
    let batch = prices_batch(prices.clone());

    let results = printed("price * 0.908", &batch);
    let mut naive_differs = 0;
    for (price, result) in prices.iter().zip(&results) {
        assert_eq!(result, &exact_product(*price, 908, 3), "price {price}");
        if (*price as f64 * 0.908).to_string() != *result {
            naive_differs += 1;
        }
    }
    // The exact path matters: plain f64 multiplication misprints many of these.
    assert!(
        naive_differs > 1_000,
        "only {naive_differs} naive results differ"
    );
    assert_eq!(results[4567], "4146.836");

    // Literal on the left, other scales, negative literals.
    assert_eq!(printed("0.908 * price", &batch), results);
    for (sql, mantissa, scale) in [("price * 1.10", 110, 2), ("price * -0.5", -5, 1)] {
        let results = printed(sql, &batch);
        for (price, result) in prices.iter().zip(&results).step_by(97) {
            assert_eq!(
                result,
                &exact_product(*price, mantissa, scale),
                "{sql} at {price}"
            );
        }
    }
}

#[test]
fn int_times_decimal_literal_falls_back_to_float_on_overflow() {
    let batch = prices_batch(vec![i64::MAX, i64::MIN]);
    let expr = Expr::compile("price * 0.908", batch.schema().as_ref()).unwrap();
    let result = expr.evaluate(&batch).unwrap();
    let values = result.as_primitive::<Float64Type>();
    assert_eq!(values.value(0), i64::MAX as f64 * 0.908);
    assert_eq!(values.value(1), i64::MIN as f64 * 0.908);
}

#[test]
fn timestamp_plus_interval_shifts_by_milliseconds() {
    let base = [
        Some(ms("2023-11-14 22:13:20.123")),
        Some(0),
        None,
        Some(ms("2024-02-29 23:59:59.999")),
    ];
    let shifted = |delta: i64| base.map(|t| t.map(|t| t + delta)).to_vec();
    assert_eq!(timestamps("ts + INTERVAL '10' SECOND"), shifted(10_000));
    assert_eq!(timestamps("ts - INTERVAL '1' MINUTE"), shifted(-60_000));
    assert_eq!(timestamps("INTERVAL '2 seconds' + ts"), shifted(2_000));
    assert_eq!(
        timestamps("ts + INTERVAL '1 hour 30 minutes'"),
        shifted(5_400_000)
    );
    assert_eq!(timestamps("ts + -INTERVAL '1' DAY"), shifted(-86_400_000));
    assert_eq!(
        timestamps("ts + (INTERVAL '1' SECOND + INTERVAL '500' MILLISECOND) * 2"),
        shifted(3_000)
    );
}

#[test]
fn timestamp_minus_timestamp_is_int_milliseconds() {
    assert_eq!(ints("ts - ts"), [Some(0), Some(0), None, Some(0)]);
    assert_eq!(
        ints("ts - TIMESTAMP '1970-01-01 00:00:00'"),
        [
            Some(1_700_000_000_123),
            Some(0),
            None,
            Some(1_709_251_199_999)
        ]
    );
}

#[test]
fn timestamp_plus_number_is_a_type_error_pointing_to_interval() {
    let message = compile_error("ts + 1").to_string();
    assert!(
        message.starts_with("cannot apply '+' to TIMESTAMP and INT"),
        "{message}"
    );
    assert!(message.contains("INTERVAL"), "{message}");
    assert!(compile_error("ts - 1.5").to_string().contains("INTERVAL"));
    assert!(
        compile_error("ts + ts")
            .to_string()
            .starts_with("cannot apply '+' to TIMESTAMP and TIMESTAMP")
    );
}

#[test]
fn mod_is_the_remainder_operator() {
    // The sign follows the dividend, as Flink's (Java's) MOD.
    assert_eq!(ints("mod(i, 3)"), [Some(1), Some(-1), None, Some(1)]);
    assert_eq!(ints("MOD(10, 4)"), [Some(2); 4]);
    assert_eq!(ints("mod(i, 3)"), ints("i % 3"));
}
