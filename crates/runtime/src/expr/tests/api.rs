use arrow_array::cast::AsArray;
use arrow_array::types::Float64Type;
use arrow_schema::{DataType, Field, Schema};

use super::*;

#[test]
fn module_doc_example_holds() {
    let schema = Arc::new(Schema::new(vec![Field::new(
        "price",
        DataType::Int64,
        true,
    )]));
    let euros = Expr::compile("price * 0.908", &schema).unwrap();
    assert_eq!(euros.data_type(), &DataType::Float64);
    let batch = RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(vec![4567]))]).unwrap();
    let result = euros.evaluate(&batch).unwrap();
    assert_eq!(
        result.as_primitive::<Float64Type>().value(0).to_string(),
        "4146.836"
    );
}

#[test]
fn plain_column_reference_returns_the_batch_column_without_copying() {
    let batch = batch();
    for (sql, index) in [("i", 0), ("bid.price", 6), ("\"bid.price\"", 6), ("(s)", 3)] {
        let expr = compile(sql);
        assert_eq!(expr.as_column(), Some(index), "{sql}");
        let result = expr.evaluate(&batch).unwrap();
        assert!(
            Arc::ptr_eq(&result, batch.column(index)),
            "{sql} copied the column"
        );
    }
    assert_eq!(compile("i + 0").as_column(), None);
}

#[test]
fn default_name_is_the_column_name_or_the_sql_text() {
    assert_eq!(compile("bid.price").default_name(), "bid.price");
    assert_eq!(compile("\"bid.price\"").default_name(), "bid.price");
    assert_eq!(compile("  I ").default_name(), "i");
    assert_eq!(
        compile("  bid.price * 0.908 ").default_name(),
        "bid.price * 0.908"
    );
    let ast = super::super::parse("i+1").unwrap();
    assert_eq!(
        Expr::compile_ast(&ast, &schema()).unwrap().default_name(),
        "i + 1"
    );
}

#[test]
fn data_types_follow_the_engine_mapping() {
    let cases = [
        ("i", DataType::Int64),
        ("f", DataType::Float64),
        ("s", DataType::Utf8),
        ("b", DataType::Boolean),
        ("ts", timestamp_type()),
        ("NULL", DataType::Null),
        ("i > 1", DataType::Boolean),
        ("i * 1.5", DataType::Float64),
    ];
    for (sql, data_type) in cases {
        assert_eq!(compile(sql).data_type(), &data_type, "{sql}");
        assert_eq!(eval(sql).data_type(), &data_type, "{sql}");
    }
}

#[test]
fn constant_expressions_fold_and_fill_every_row() {
    let expr = compile("1 + 2 * 3");
    assert!(expr.root.as_literal().is_some(), "not folded: {expr:?}");
    assert_eq!(ints("1 + 2 * 3"), [Some(7); 4]);
    assert_eq!(strs("upper('a') || 'b'"), some_strs(&[Some("Ab"); 4]));
    let nulls = eval("NULL");
    assert_eq!((nulls.len(), nulls.logical_null_count()), (4, 4));
    // A constant that fails stays unfolded and fails only when evaluated.
    assert!(compile("1 / 0").root.as_literal().is_none());
}

#[test]
fn evaluating_an_empty_batch_gives_an_empty_result() {
    let empty = RecordBatch::new_empty(Arc::new(schema()));
    for sql in [
        "i + 1",
        "s || 'x'",
        "1 / 0 + i",
        "CASE WHEN j = 0 THEN 1 ELSE i / j END",
    ] {
        let result = compile(sql).evaluate(&empty).unwrap();
        assert_eq!(result.len(), 0, "{sql}");
    }
}

#[test]
fn expr_is_send_sync_clone_and_debug() {
    fn assert_traits<T: Send + Sync + Clone + std::fmt::Debug>() {}
    assert_traits::<Expr>();
    let expr = compile("i + 1");
    let copy = expr.clone();
    assert_eq!(copy.evaluate(&batch()).unwrap().len(), 4);
    std::thread::spawn(move || copy.evaluate(&batch()).map(|a| a.len()))
        .join()
        .unwrap()
        .unwrap();
}
