use std::sync::Arc;

use arrow_array::BooleanArray;
use arrow_array::cast::AsArray;
use arrow_schema::{DataType, Field, Schema};

use super::*;

/// All nine combinations of two three-valued booleans.
fn truth_table() -> RecordBatch {
    let values = [Some(true), Some(false), None];
    let p: BooleanArray = values.iter().flat_map(|&v| [v; 3]).collect();
    let q: BooleanArray = (0..3).flat_map(|_| values).collect();
    let schema = Arc::new(Schema::new(vec![
        Field::new("p", DataType::Boolean, true),
        Field::new("q", DataType::Boolean, true),
    ]));
    RecordBatch::try_new(schema, vec![Arc::new(p), Arc::new(q)]).unwrap()
}

fn table(sql: &str) -> Vec<Option<bool>> {
    let batch = truth_table();
    let expr = Expr::compile(sql, batch.schema().as_ref()).unwrap();
    expr.evaluate(&batch).unwrap().as_boolean().iter().collect()
}

const T: Option<bool> = Some(true);
const F: Option<bool> = Some(false);
const N: Option<bool> = None;

#[test]
fn and_or_not_follow_kleene_logic() {
    // p = T T T F F F N N N, q = T F N T F N T F N
    assert_eq!(table("p AND q"), [T, F, N, F, F, F, N, F, N]);
    assert_eq!(table("p OR q"), [T, T, T, T, F, N, T, N, N]);
    assert_eq!(table("NOT p"), [F, F, F, T, T, T, N, N, N]);
    assert_eq!(table("p AND NULL"), [N, N, N, F, F, F, N, N, N]);
    assert_eq!(table("p OR TRUE"), [T; 9]);
}

#[test]
fn and_does_not_evaluate_a_failing_right_side_where_the_left_is_false() {
    // Row 1 has j = 0: `i / j` is never computed there.
    assert_eq!(bools("j <> 0 AND i / j > 0"), [F, F, N, N]);
    assert_eq!(bools("j = 0 OR i / j > 0"), [F, T, N, N]);
    assert!(matches!(
        eval_error("i / j > 0"),
        EvalError::DivisionByZero { .. }
    ));
    // Where the left side does not decide, the right side is evaluated and fails.
    assert!(matches!(
        eval_error("j >= 0 AND i / j > 0"),
        EvalError::DivisionByZero { .. }
    ));
}

#[test]
fn logical_operators_need_bool_operands() {
    let message = compile_error("i AND b").to_string();
    assert!(
        message.starts_with("AND needs a BOOL, but `i` is INT"),
        "{message}"
    );
    assert!(
        compile_error("NOT s")
            .to_string()
            .contains("NOT needs a BOOL")
    );
    assert_eq!(bools("NULL AND b"), [N, F, N, N]);
}
