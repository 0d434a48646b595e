//! The expression parser and compiler, and evaluation of what compiles over a small batch with
//! nulls and extreme values (run-time errors are fine, panics are not).

use std::sync::{Arc, LazyLock};

use arrow_array::{
    ArrayRef, BooleanArray, Float64Array, Int64Array, RecordBatch, StringArray,
    TimestampMillisecondArray,
};
use arrow_schema::{DataType, Field, Schema, TimeUnit};
use weir_runtime::expr::Expr;

/// Columns of every type a job's records carry, with a dotted (flattened) name too.
static BATCH: LazyLock<RecordBatch> = LazyLock::new(|| {
    let schema = Schema::new(vec![
        Field::new("a", DataType::Int64, true),
        Field::new("price", DataType::Float64, true),
        Field::new("name", DataType::Utf8, true),
        Field::new("flag", DataType::Boolean, true),
        Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
        Field::new("device.kind", DataType::Utf8, true),
    ]);
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from(vec![
            Some(0),
            Some(i64::MAX),
            Some(i64::MIN),
            None,
            Some(-1),
        ])),
        Arc::new(Float64Array::from(vec![
            Some(0.0),
            Some(f64::MAX),
            Some(f64::NAN),
            None,
            Some(-0.5),
        ])),
        Arc::new(StringArray::from(vec![
            Some(""),
            Some("ä%_\\"),
            None,
            Some("abc"),
            Some("9"),
        ])),
        Arc::new(BooleanArray::from(vec![
            Some(true),
            Some(false),
            None,
            Some(true),
            None,
        ])),
        Arc::new(TimestampMillisecondArray::from(vec![
            Some(0),
            Some(i64::MAX),
            Some(i64::MIN),
            None,
            Some(1_700_000_000_000),
        ])),
        Arc::new(StringArray::from(vec![
            Some("phone"),
            None,
            Some(""),
            Some("x"),
            Some("y"),
        ])),
    ];
    RecordBatch::try_new(Arc::new(schema), columns).expect("columns match the schema")
});

/// Compiles one snippet against [`BATCH`]'s schema and evaluates what compiles.
pub fn expr(data: &[u8]) {
    let Ok(sql) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(expr) = Expr::compile(sql, &BATCH.schema()) {
        let _ = expr.evaluate(&BATCH);
    }
}
