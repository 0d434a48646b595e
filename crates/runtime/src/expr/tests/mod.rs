//! Behaviour tests for the expression compiler, one file per family, plus a seeded randomized
//! comparison against a naive per-row reference (`random`). The files of Flink's functions
//! (`numeric`, `text`, `calendar`, `json`, `hashing`, and parts of `conditional` and `errors`)
//! take their expected values from the examples of Flink's documentation, quoted beside them.
//!
//! Most tests evaluate against [`batch`], four rows with a NULL in every column:
//!
//! | row | i   | j    | f     | s         | b     | ts                      | bid.price |
//! |-----|-----|------|-------|-----------|-------|-------------------------|-----------|
//! | 0   | 1   | 2    | 1.5   | "Hello"   | true  | 2023-11-14 22:13:20.123 | 100       |
//! | 1   | -7  | 0    | -0.25 | "wörld"   | false | 1970-01-01 00:00:00     | 4567      |
//! | 2   | NULL| 3    | NULL  | NULL      | NULL  | NULL                    | NULL      |
//! | 3   | 10  | NULL | 2.0   | "  pad  " | true  | 2024-02-29 23:59:59.999 | 1         |

mod api;
mod arith;
mod bounds;
mod calendar;
mod cast;
mod compare;
mod conditional;
mod errors;
mod hashing;
mod json;
mod logic;
mod numeric;
mod random;
mod strings;
mod temporal;
mod text;

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int64Type, TimestampMillisecondType};
use arrow_array::{
    Array, ArrayRef, BooleanArray, Float64Array, Int64Array, RecordBatch, StringArray,
    TimestampMillisecondArray,
};
use arrow_schema::{DataType, Field, Schema, TimeUnit};

use super::{EvalError, Expr, ExprError};

pub(super) fn timestamp_type() -> DataType {
    DataType::Timestamp(TimeUnit::Millisecond, None)
}

/// Epoch milliseconds of a UTC timestamp text.
pub(super) fn ms(text: &str) -> i64 {
    super::temporal::parse_timestamp(text).expect("test timestamps are valid")
}

pub(super) fn schema() -> Schema {
    Schema::new(vec![
        Field::new("i", DataType::Int64, true),
        Field::new("j", DataType::Int64, true),
        Field::new("f", DataType::Float64, true),
        Field::new("s", DataType::Utf8, true),
        Field::new("b", DataType::Boolean, true),
        Field::new("ts", timestamp_type(), true),
        Field::new("bid.price", DataType::Int64, true),
    ])
}

pub(super) fn batch() -> RecordBatch {
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from(vec![Some(1), Some(-7), None, Some(10)])),
        Arc::new(Int64Array::from(vec![Some(2), Some(0), Some(3), None])),
        Arc::new(Float64Array::from(vec![
            Some(1.5),
            Some(-0.25),
            None,
            Some(2.0),
        ])),
        Arc::new(StringArray::from(vec![
            Some("Hello"),
            Some("wörld"),
            None,
            Some("  pad  "),
        ])),
        Arc::new(BooleanArray::from(vec![
            Some(true),
            Some(false),
            None,
            Some(true),
        ])),
        Arc::new(TimestampMillisecondArray::from(vec![
            Some(ms("2023-11-14 22:13:20.123")),
            Some(0),
            None,
            Some(ms("2024-02-29 23:59:59.999")),
        ])),
        Arc::new(Int64Array::from(vec![Some(100), Some(4567), None, Some(1)])),
    ];
    RecordBatch::try_new(Arc::new(schema()), columns).expect("the test batch matches its schema")
}

pub(super) fn compile(sql: &str) -> Expr {
    Expr::compile(sql, &schema()).unwrap_or_else(|e| panic!("`{sql}` should compile: {e}"))
}

pub(super) fn eval(sql: &str) -> ArrayRef {
    compile(sql)
        .evaluate(&batch())
        .unwrap_or_else(|e| panic!("`{sql}` should evaluate: {e}"))
}

pub(super) fn ints(sql: &str) -> Vec<Option<i64>> {
    let result = eval(sql);
    assert_eq!(result.data_type(), &DataType::Int64, "type of `{sql}`");
    result.as_primitive::<Int64Type>().iter().collect()
}

pub(super) fn floats(sql: &str) -> Vec<Option<f64>> {
    let result = eval(sql);
    assert_eq!(result.data_type(), &DataType::Float64, "type of `{sql}`");
    result.as_primitive::<Float64Type>().iter().collect()
}

pub(super) fn strs(sql: &str) -> Vec<Option<String>> {
    let result = eval(sql);
    assert_eq!(result.data_type(), &DataType::Utf8, "type of `{sql}`");
    result
        .as_string::<i32>()
        .iter()
        .map(|v| v.map(str::to_owned))
        .collect()
}

pub(super) fn bools(sql: &str) -> Vec<Option<bool>> {
    let result = eval(sql);
    assert_eq!(result.data_type(), &DataType::Boolean, "type of `{sql}`");
    result.as_boolean().iter().collect()
}

pub(super) fn timestamps(sql: &str) -> Vec<Option<i64>> {
    let result = eval(sql);
    assert_eq!(result.data_type(), &timestamp_type(), "type of `{sql}`");
    result
        .as_primitive::<TimestampMillisecondType>()
        .iter()
        .collect()
}

/// Shorthand for expected string columns.
pub(super) fn some_strs(values: &[Option<&str>]) -> Vec<Option<String>> {
    values.iter().map(|v| v.map(str::to_owned)).collect()
}

pub(super) fn compile_error(sql: &str) -> ExprError {
    match Expr::compile(sql, &schema()) {
        Ok(expr) => panic!("`{sql}` should not compile, got {expr:?}"),
        Err(error) => error,
    }
}

pub(super) fn eval_error(sql: &str) -> EvalError {
    match compile(sql).evaluate(&batch()) {
        Ok(result) => panic!("`{sql}` should fail to evaluate, got {result:?}"),
        Err(error) => error,
    }
}
