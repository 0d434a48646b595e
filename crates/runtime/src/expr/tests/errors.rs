use arrow_schema::{DataType, Field, Schema};

use super::*;

fn nexmark_bid_schema() -> Schema {
    Schema::new(
        [
            "auction", "bidder", "price", "channel", "url", "dateTime", "extra",
        ]
        .map(|name| Field::new(name, DataType::Int64, true))
        .to_vec(),
    )
}

#[test]
fn unknown_column_suggests_the_closest_name_and_lists_columns() {
    let error = Expr::compile("prise * 2", &nexmark_bid_schema()).unwrap_err();
    assert_eq!(
        error.to_string(),
        "unknown column \"prise\"; did you mean \"price\"? columns: auction, bidder, price, \
         channel, url, dateTime, extra"
    );
    assert_eq!((error.line(), error.column()), (Some(1), Some(1)));
    let ExprError::UnknownColumn {
        name, suggestion, ..
    } = error
    else {
        panic!("expected UnknownColumn, got {error:?}");
    };
    assert_eq!(
        (name.as_str(), suggestion.as_deref()),
        ("prise", Some("price"))
    );
}

#[test]
fn unknown_column_without_a_close_name_has_no_suggestion() {
    let error = Expr::compile("zzzzzz", &nexmark_bid_schema()).unwrap_err();
    assert_eq!(
        error.to_string(),
        "unknown column \"zzzzzz\"; columns: auction, bidder, price, channel, url, dateTime, extra"
    );
}

#[test]
fn unknown_column_suggests_the_dotted_column_it_abbreviates() {
    let message = compile_error("price").to_string();
    assert!(message.contains("did you mean \"bid.price\"?"), "{message}");
}

#[test]
fn errors_carry_the_position_inside_the_snippet() {
    let error = compile_error("i + nope");
    assert_eq!((error.line(), error.column()), (Some(1), Some(5)));
    let error = compile_error("i +\n  nope");
    assert_eq!((error.line(), error.column()), (Some(2), Some(3)));
    let error = compile_error("i + 'x' * 2");
    assert_eq!((error.line(), error.column()), (Some(1), Some(5)));
}

#[test]
fn syntax_errors_name_what_was_expected_and_where() {
    let error = compile_error("i +");
    assert!(matches!(error, ExprError::Syntax { .. }), "{error:?}");
    assert_eq!((error.line(), error.column()), (Some(1), Some(4)));
    assert!(error.to_string().contains("end of expression"), "{error}");

    let error = compile_error("i = 1 j");
    assert_eq!((error.line(), error.column()), (Some(1), Some(7)));
    assert!(
        error
            .to_string()
            .starts_with("syntax error: unexpected `j` after"),
        "{error}"
    );

    let error = compile_error("i = 'abc");
    assert_eq!((error.line(), error.column()), (Some(1), Some(5)));

    let error = compile_error("i DIV 2");
    assert_eq!((error.line(), error.column()), (Some(1), Some(3)));
    assert!(!error.to_string().contains("at Line"), "{error}");
}

#[test]
fn unknown_functions_and_wrong_arity_list_what_exists() {
    let message = compile_error("lowr(s)").to_string();
    assert!(
        message.starts_with("unknown function lowr(); did you mean lower(s)?"),
        "{message}"
    );
    assert!(message.contains(", date_trunc, "), "{message}");
    assert_eq!(
        compile_error("lower(s, s)").to_string(),
        "lower takes 1 argument, got 2: lower(s)"
    );
    assert_eq!(
        compile_error("nullif(i)").to_string(),
        "nullif takes 2 arguments, got 1: nullif(a, b)"
    );
    assert!(
        compile_error("round(f, i)")
            .to_string()
            .contains("constant INT")
    );
}

#[test]
fn aggregates_windows_and_subqueries_are_rejected_with_a_pointer() {
    let message = compile_error("sum(i)").to_string();
    assert!(
        message.contains("aggregate functions belong in an aggregate operator's `aggregates:`"),
        "{message}"
    );
    assert!(compile_error("count(*)").to_string().contains("aggregate"));
    assert!(
        compile_error("row_number() OVER ()")
            .to_string()
            .contains("window")
    );
    assert!(
        compile_error("(SELECT 1)")
            .to_string()
            .contains("subqueries")
    );
    assert!(
        compile_error("EXISTS (SELECT 1)")
            .to_string()
            .contains("subqueries")
    );
    assert!(compile_error("now()").to_string().contains("replayed"));
    assert!(
        compile_error("CURRENT_TIMESTAMP")
            .to_string()
            .contains("replayed")
    );
    for sql in ["sum(i)", "(SELECT 1)", "now()", "i ~ 'a'"] {
        assert!(
            matches!(compile_error(sql), ExprError::Unsupported { .. }),
            "{sql}: {:?}",
            compile_error(sql)
        );
    }
}

#[test]
fn parse_accepts_aggregate_syntax_for_operators_to_inspect() {
    let ast = super::super::parse("count(*)").unwrap();
    assert_eq!(ast.to_string(), "count(*)");
    let ast = super::super::parse("sum(bid.price * 0.908)").unwrap();
    let sqlparser::ast::Expr::Function(function) = ast else {
        panic!("expected a function call")
    };
    let sqlparser::ast::FunctionArguments::List(list) = &function.args else {
        panic!("expected arguments")
    };
    let sqlparser::ast::FunctionArg::Unnamed(sqlparser::ast::FunctionArgExpr::Expr(argument)) =
        &list.args[0]
    else {
        panic!("expected a positional argument")
    };
    let argument = Expr::compile_ast(argument, &schema()).unwrap();
    assert_eq!(argument.data_type(), &DataType::Float64);
    assert_eq!(argument.default_name(), "bid.price * 0.908");
}

#[test]
fn integer_literals_out_of_range_are_rejected() {
    let error = compile_error("i + 99999999999999999999");
    assert!(
        matches!(error, ExprError::InvalidLiteral { .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("does not fit in INT"), "{error}");
}

#[test]
fn placeholders_are_rejected() {
    assert!(matches!(
        compile_error("i = $1"),
        ExprError::Unsupported { .. }
    ));
}

#[test]
fn names_match_exactly_then_case_insensitively_if_unique() {
    assert_eq!(ints("I + 0"), ints("i"));
    assert_eq!(ints("BID.PRICE"), [Some(100), Some(4567), None, Some(1)]);
    let schema = Schema::new(vec![
        Field::new("Price", DataType::Int64, true),
        Field::new("PRICE", DataType::Int64, true),
    ]);
    assert_eq!(
        Expr::compile("\"PRICE\"", &schema).unwrap().as_column(),
        Some(1)
    );
    assert_eq!(
        Expr::compile("Price", &schema).unwrap().as_column(),
        Some(0)
    );
    let message = Expr::compile("price", &schema).unwrap_err().to_string();
    assert!(message.contains("ambiguous"), "{message}");
}

#[test]
fn columns_of_types_outside_the_data_model_are_rejected_when_used() {
    let schema = Schema::new(vec![
        Field::new("small", DataType::Int32, true),
        Field::new("ok", DataType::Int64, true),
    ]);
    assert!(Expr::compile("ok + 1", &schema).is_ok());
    let message = Expr::compile("small + 1", &schema).unwrap_err().to_string();
    assert!(message.contains("Arrow type Int32"), "{message}");
}

#[test]
fn evaluating_a_batch_of_the_wrong_schema_is_an_internal_error() {
    let expr = compile("j + 1");
    let schema = Arc::new(Schema::new(vec![
        Field::new("i", DataType::Int64, true),
        Field::new("j", DataType::Float64, true),
    ]));
    let batch = RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from(vec![1])),
            Arc::new(Float64Array::from(vec![1.0])),
        ],
    )
    .unwrap();
    let error = expr.evaluate(&batch).unwrap_err();
    assert!(
        matches!(error, EvalError::SchemaMismatch { index: 1, .. }),
        "{error:?}"
    );
    assert!(error.is_internal());
}

#[test]
fn bare_words_sqlparser_reads_as_calls_resolve_to_columns() {
    let schema = Schema::new(vec![Field::new("user", DataType::Utf8, true)]);
    let expr = Expr::compile("user", &schema).unwrap();
    assert_eq!(expr.as_column(), Some(0));
    assert!(Expr::compile("upper(user) = 'X'", &schema).is_ok());
    // Reserved words still need quotes.
    let schema = Schema::new(vec![Field::new("interval", DataType::Int64, true)]);
    assert!(Expr::compile("\"interval\" + 1", &schema).is_ok());
}

#[test]
fn unknown_functions_name_the_nearest_supported_spelling() {
    for (sql, hint) in [
        ("lpda(s, 3, 'x')", "did you mean lpad(s, length, pad)?"),
        ("sha_256(s)", "did you mean sha256(s)?"),
        (
            "json_values(s, '$')",
            "did you mean json_value(json, '$.path' [RETURNING type])?",
        ),
        (
            "timestamp_diff(DAY, ts, ts)",
            "did you mean timestampdiff(unit, ts1, ts2)?",
        ),
    ] {
        let error = compile_error(sql);
        assert!(
            matches!(error, ExprError::Unsupported { .. }),
            "{sql}: {error:?}"
        );
        assert!(error.to_string().contains(hint), "{sql}: {error}");
    }
}

#[test]
fn flink_functions_weir_refuses_say_why() {
    for (sql, reason) in [
        ("rand()", "replayed from a checkpoint"),
        ("uuid()", "replayed from a checkpoint"),
        ("unix_timestamp()", "replayed from a checkpoint"),
        ("current_row_timestamp()", "replayed from a checkpoint"),
        ("to_date(s)", "no DATE type"),
        ("array_contains(s, 'a')", "no ARRAY, MAP or MULTISET types"),
        ("split(s, ',')", "no ARRAY, MAP or MULTISET types"),
        ("encode(s, 'UTF-8')", "no BINARY type"),
        ("grouping(i)", "GROUPING SETS"),
        ("convert_tz(s, 'UTC', 'PST')", "time-zone"),
        ("url_encode(s)", "not implemented yet"),
    ] {
        let error = compile_error(sql);
        assert!(
            matches!(error, ExprError::Unsupported { .. }),
            "{sql}: {error:?}"
        );
        let message = error.to_string();
        assert!(message.contains("is not supported: "), "{sql}: {message}");
        assert!(message.contains(reason), "{sql}: {message}");
    }
}
