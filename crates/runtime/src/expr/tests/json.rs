//! Flink's JSON functions. Expected values are the examples of Flink's "System (Built-in)
//! Functions" page (quoted), except that JSON text comes out compact, as Flink writes it.

use super::*;

fn text(sql: &str) -> Option<String> {
    strs(sql)[0].clone()
}

fn boolean(sql: &str) -> Option<bool> {
    bools(sql)[0]
}

#[test]
fn json_value_returns_a_scalar_as_text() {
    // "-- "true"  JSON_VALUE('{"a": true}', '$.a')"
    assert_eq!(
        text(r#"JSON_VALUE('{"a": true}', '$.a')"#).as_deref(),
        Some("true")
    );
    // "-- TRUE  JSON_VALUE('{"a": true}', '$.a' RETURNING BOOLEAN)"
    assert_eq!(
        boolean(r#"JSON_VALUE('{"a": true}', '$.a' RETURNING BOOLEAN)"#),
        Some(true)
    );
    // The default is NULL ON EMPTY: 'lax $.b' finds nothing.
    assert_eq!(text(r#"JSON_VALUE('{"a": true}', 'lax $.b')"#), None);
    // "-- 0.998D  JSON_VALUE('{"a.b": [0.998,0.996]}','$.["a.b"][0]' RETURNING DOUBLE)"
    assert_eq!(
        floats(r#"JSON_VALUE('{"a.b": [0.998,0.996]}', '$.["a.b"][0]' RETURNING DOUBLE)"#)[0],
        Some(0.998)
    );
    // "-- "right"  JSON_VALUE('{"contains blank": "right"}', 'strict $.[''contains blank'']'
    // ...)"
    assert_eq!(
        text(r#"JSON_VALUE('{"contains blank": "right"}', 'strict $.[''contains blank'']')"#)
            .as_deref(),
        Some("right")
    );
    assert_eq!(
        ints(r#"json_value('{"n": 42}', '$.n' RETURNING INT)"#)[0],
        Some(42)
    );
    // Non-scalars and JSON null are not values: NULL (NULL ON ERROR / ON EMPTY).
    assert_eq!(text(r#"json_value('{"a": [1]}', '$.a')"#), None);
    assert_eq!(text(r#"json_value('{"a": null}', '$.a')"#), None);
    assert_eq!(
        ints(r#"json_value('{"a": "x"}', '$.a' RETURNING INT)"#)[0],
        None
    );
}

#[test]
fn json_query_returns_objects_and_arrays_as_json_text() {
    // "-- '{ "b": 1 }'  JSON_QUERY('{ "a": { "b": 1 } }', '$.a')"
    assert_eq!(
        text(r#"JSON_QUERY('{ "a": { "b": 1, "a": [true, null] } }', '$.a')"#).as_deref(),
        Some(r#"{"b":1,"a":[true,null]}"#)
    );
    // "-- '[1, 2]'  JSON_QUERY('[1, 2]', '$')"
    assert_eq!(text("JSON_QUERY('[1, 2]', '$')").as_deref(), Some("[1,2]"));
    // "-- NULL  JSON_QUERY(CAST(NULL AS STRING), '$')"
    assert_eq!(text("JSON_QUERY(CAST(NULL AS STRING), '$')"), None);
    // "Scalars must be wrapped to be returned -- NULL  JSON_QUERY(1, '$')"
    assert_eq!(text("JSON_QUERY('1', '$')"), None);
    assert_eq!(
        text(r#"json_query('{"a": [[1], [2, 3]]}', '$.a[1]')"#).as_deref(),
        Some("[2,3]")
    );
}

#[test]
fn json_exists_tells_whether_a_path_finds_anything() {
    // "-- TRUE  SELECT JSON_EXISTS('{"a": true}', '$.a');"
    assert_eq!(boolean(r#"JSON_EXISTS('{"a": true}', '$.a')"#), Some(true));
    // "-- FALSE  SELECT JSON_EXISTS('{"a": true}', '$.b');"
    assert_eq!(boolean(r#"JSON_EXISTS('{"a": true}', '$.b')"#), Some(false));
    // "-- TRUE  SELECT JSON_EXISTS('{"a": [{ "b": 1 }]}', '$.a[0].b');"
    assert_eq!(
        boolean(r#"JSON_EXISTS('{"a": [{ "b": 1 }]}', '$.a[0].b')"#),
        Some(true)
    );
    assert_eq!(boolean(r#"json_exists('{"a": null}', '$.a')"#), Some(true));
    assert_eq!(boolean("json_exists(CAST(NULL AS STRING), '$')"), None);
}

#[test]
fn text_that_is_not_json_gives_null_or_false() {
    assert_eq!(strs("json_value(s, '$.a')"), [None, None, None, None]);
    assert_eq!(text("json_query('{\"a\": ', '$')"), None);
    assert_eq!(
        bools("json_exists(s, '$')"),
        [Some(false), Some(false), None, Some(false)]
    );
    // Deeper than serde_json's nesting limit: not JSON to weir, and no stack overflow.
    let deep = format!(
        "json_exists('{}{}', '$')",
        "[".repeat(10_000),
        "]".repeat(10_000)
    );
    assert_eq!(boolean(&deep), Some(false));
}

#[test]
fn paths_outside_the_subset_are_refused_when_the_job_is_checked() {
    let message = compile_error("json_value(s, '$.a[*]')").to_string();
    assert!(message.contains("weir reads $, .key"), "{message}");
    let message = compile_error("json_value(s, 'a')").to_string();
    assert!(message.contains("starts with $"), "{message}");
    let message = compile_error("json_query(s, s)").to_string();
    assert!(message.contains("constant string"), "{message}");
    assert_eq!(strs("json_value(s, NULL)"), [None, None, None, None]);
    let message = compile_error("json_query(s, '$' RETURNING INT)").to_string();
    assert!(message.contains("not supported inside"), "{message}");
}
