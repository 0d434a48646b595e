//! Behaviour of the JSON layout, decoder and encoder.

use std::sync::Arc;

use arrow_array::{
    Array, ArrayRef, BooleanArray, Float64Array, Int32Array, Int64Array, RecordBatch, StringArray,
    TimestampMillisecondArray,
};
use arrow_schema::{DataType, Field, Schema, TimeUnit};
use indexmap::IndexMap;

use super::nexmark::{self, Rng};
use super::*;

/// A single layout from its JSON declaration.
fn single(declaration: &str) -> JsonLayout {
    JsonLayout::Single(serde_json::from_str(declaration).expect("valid declaration"))
}

/// A variants layout from its JSON declaration.
fn variants(declaration: &str) -> JsonLayout {
    JsonLayout::Variants(serde_json::from_str(declaration).expect("valid declaration"))
}

fn decoder(layout: &JsonLayout) -> JsonDecoder {
    JsonDecoder::new(layout, &vec![true; layout.ports().len()], 4)
}

/// The batch as JSON lines, for compact assertions.
fn text(batch: &RecordBatch) -> String {
    let mut out = Vec::new();
    encode_batch(batch, &mut out).expect("encodable");
    String::from_utf8(out).expect("utf-8")
}

/// Decodes every line (all must succeed) and returns the flushed batches as text per port.
fn decode_all(layout: &JsonLayout, lines: &[&str]) -> Vec<(usize, String)> {
    let mut decoder = decoder(layout);
    for line in lines {
        decoder.decode_line(line.as_bytes()).expect(line);
    }
    decoder
        .flush()
        .iter()
        .map(|(port, batch)| (*port, text(batch)))
        .collect()
}

fn error(layout: &JsonLayout, line: &str) -> String {
    let mut decoder = decoder(layout);
    decoder
        .decode_line(line.as_bytes())
        .expect_err(line)
        .to_string()
}

const ALL_TYPES: &str = r#"{"i":"int","f":"float","s":"string","b":"bool","t":"timestamp"}"#;

#[test]
fn ports_have_flattened_nullable_schemas() {
    let layout = single(r#"{"user":{"id":"int","name":"string"},"n":"int","at":"timestamp"}"#);
    let ports = layout.ports();
    assert_eq!(ports.len(), 1);
    assert_eq!(ports[0].0, "");
    let expected = Schema::new(vec![
        Field::new("user.id", DataType::Int64, true),
        Field::new("user.name", DataType::Utf8, true),
        Field::new("n", DataType::Int64, true),
        Field::new("at", DataType::Timestamp(TimeUnit::Millisecond, None), true),
    ]);
    assert_eq!(*ports[0].1, expected);

    let ports = nexmark::layout(true).ports();
    let names: Vec<&str> = ports.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names, ["person", "auction", "bid"]);
    assert_eq!(ports[2].1.field(5).name(), "dateTime");
}

#[test]
fn layout_deserializes_type_names_and_nested_maps() {
    let ty: JsonType = serde_json::from_str(r#"{"a":"float","b":{"c":"bool"}}"#).unwrap();
    let expected = JsonType::Object(IndexMap::from([
        ("a".to_owned(), JsonType::Scalar(ScalarType::Float)),
        (
            "b".to_owned(),
            JsonType::Object(IndexMap::from([(
                "c".to_owned(),
                JsonType::Scalar(ScalarType::Bool),
            )])),
        ),
    ]));
    assert_eq!(ty, expected);
    // Serialization is the same shape.
    assert_eq!(
        serde_json::to_string(&ty).unwrap(),
        r#"{"a":"float","b":{"c":"bool"}}"#
    );
}

#[test]
fn layout_rejects_unknown_type_names_naming_the_choices() {
    let err = serde_json::from_str::<JsonType>(r#"{"a":"integer"}"#)
        .unwrap_err()
        .to_string();
    assert!(err.contains("unknown variant `integer`"), "{err}");
    assert!(
        err.contains("`int`, `float`, `string`, `bool`, `timestamp`"),
        "{err}"
    );
    let err = serde_json::from_str::<JsonType>(r#"{"a":1}"#)
        .unwrap_err()
        .to_string();
    assert!(err.contains("expected a type name"), "{err}");
    let err = serde_json::from_str::<JsonType>(r#"{"a":"int","a":"int"}"#).unwrap_err();
    assert!(err.to_string().contains("declared twice"), "{err}");
}

#[test]
fn layout_validation_reports_columns_produced_twice_and_empty_variants() {
    let layout = single(r#"{"a.b":"int","a":{"b":"string"},"c":"int"}"#);
    let err = layout.validate().unwrap_err();
    assert_eq!(
        err.problems,
        ["column `a.b` is produced by two fields; rename one"]
    );
    assert!(JsonLayout::Variants(IndexMap::new()).validate().is_err());
    assert!(nexmark::layout(true).validate().is_ok());
}

#[test]
fn decodes_every_scalar_type() {
    let layout = single(ALL_TYPES);
    let mut decoder = decoder(&layout);
    let line = r#"{"i":-42,"f":2.5,"s":"héllo","b":true,"t":1700000000123}"#;
    assert_eq!(
        decoder.decode_line(line.as_bytes()),
        Ok(Decoded::Row { port: 0 })
    );
    let batches = decoder.flush();
    let batch = &batches[0].1;
    let col = |i: usize| batch.column(i).clone();
    assert_eq!(
        col(0)
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap()
            .value(0),
        -42
    );
    assert_eq!(
        col(1)
            .as_any()
            .downcast_ref::<Float64Array>()
            .unwrap()
            .value(0),
        2.5
    );
    assert_eq!(
        col(2)
            .as_any()
            .downcast_ref::<StringArray>()
            .unwrap()
            .value(0),
        "héllo"
    );
    assert!(
        col(3)
            .as_any()
            .downcast_ref::<BooleanArray>()
            .unwrap()
            .value(0)
    );
    let t = col(4);
    assert_eq!(
        t.as_any()
            .downcast_ref::<TimestampMillisecondArray>()
            .unwrap()
            .value(0),
        1_700_000_000_123
    );
    assert!((0..5).all(|i| col(i).nulls().is_none()));
}

#[test]
fn json_null_and_missing_fields_become_null() {
    let out = decode_all(
        &single(ALL_TYPES),
        &[
            r#"{"i":null,"f":null,"s":null,"b":null,"t":null}"#,
            r#"{}"#,
            r#"{"b":false}"#,
            r#"{"s":"x","i":7}"#,
        ],
    );
    assert_eq!(
        out,
        [(
            0,
            concat!(
                "{\"i\":null,\"f\":null,\"s\":null,\"b\":null,\"t\":null}\n",
                "{\"i\":null,\"f\":null,\"s\":null,\"b\":null,\"t\":null}\n",
                "{\"i\":null,\"f\":null,\"s\":null,\"b\":false,\"t\":null}\n",
                "{\"i\":7,\"f\":null,\"s\":\"x\",\"b\":null,\"t\":null}\n",
            )
            .to_owned()
        )]
    );
}

#[test]
fn nested_objects_flatten_and_null_or_missing_objects_give_null_columns() {
    let layout = single(r#"{"user":{"id":"int","name":"string","geo":{"lat":"float"}},"n":"int"}"#);
    let out = decode_all(
        &layout,
        &[
            r#"{"n":1,"user":{"name":"ann","geo":{"lat":1.5},"id":3}}"#,
            r#"{"user":null,"n":2}"#,
            r#"{"n":3,"user":{"geo":null}}"#,
            r#"{"n":4}"#,
        ],
    );
    assert_eq!(
        out[0].1,
        concat!(
            "{\"user.id\":3,\"user.name\":\"ann\",\"user.geo.lat\":1.5,\"n\":1}\n",
            "{\"user.id\":null,\"user.name\":null,\"user.geo.lat\":null,\"n\":2}\n",
            "{\"user.id\":null,\"user.name\":null,\"user.geo.lat\":null,\"n\":3}\n",
            "{\"user.id\":null,\"user.name\":null,\"user.geo.lat\":null,\"n\":4}\n",
        )
    );
    assert_eq!(
        error(&layout, r#"{"user":[1]}"#),
        r#"field "user": expected object, found array"#
    );
    assert_eq!(
        error(&layout, r#"{"user":{"geo":5}}"#),
        r#"field "user.geo": expected object, found integer 5"#
    );
}

#[test]
fn undeclared_keys_are_skipped_whatever_their_values() {
    let out = decode_all(
        &single(r#"{"a":"int","b":"string"}"#),
        &[r#"{"x":{"deep":[1,{"y":null}],"s":"\"q\""},"a":1,"z":[],"w":-1.5e3,"b":"ok","v":true}"#],
    );
    assert_eq!(out[0].1, "{\"a\":1,\"b\":\"ok\"}\n");
}

#[test]
fn escaped_strings_and_keys_are_unescaped() {
    let out = decode_all(
        &single(r#"{"price":"int","s":"string"}"#),
        &[r#"{"pri\u0063e":5,"s":"a\"b\\c\/d\n\u00e9\ud83d\ude00"}"#],
    );
    assert_eq!(out[0].1, "{\"price\":5,\"s\":\"a\\\"b\\\\c/d\\né😀\"}\n");
}

#[test]
fn variants_route_each_line_to_its_port() {
    let layout = variants(
        r#"{"person":{"id":"int","name":"string"},"bid":{"auction":"int","price":"int"}}"#,
    );
    let out = decode_all(
        &layout,
        &[
            r#"{"type":"bid","bid":{"auction":1,"price":10}}"#,
            r#"{"type":"person","person":{"id":7,"name":"ann"}}"#,
            r#"{"bid":{"price":20,"auction":2},"type":"bid"}"#,
        ],
    );
    assert_eq!(
        out,
        [
            (0, "{\"id\":7,\"name\":\"ann\"}\n".to_owned()),
            (
                1,
                "{\"auction\":1,\"price\":10}\n{\"auction\":2,\"price\":20}\n".to_owned()
            ),
        ]
    );
}

#[test]
fn lines_without_a_declared_variant_are_skipped() {
    let layout = variants(r#"{"bid":{"price":"int"}}"#);
    let mut decoder = decoder(&layout);
    for line in [
        r#"{"type":"person","person":{"id":1}}"#,
        r#"{"type":"bid"}"#,
        r#"{"bid":null}"#,
        r#"{"bid":[{"price":1}]}"#,
        r#"{"bid":"x"}"#,
        r#"{}"#,
    ] {
        assert_eq!(
            decoder.decode_line(line.as_bytes()),
            Ok(Decoded::Skipped),
            "{line}"
        );
    }
    assert_eq!(decoder.buffered(0), 0);
    assert!(decoder.flush().is_empty());
}

#[test]
fn the_first_declared_variant_present_as_an_object_wins() {
    let layout = variants(r#"{"a":{"x":"int"},"b":{"x":"int"}}"#);
    for line in [
        r#"{"a":{"x":1},"b":{"x":2}}"#,
        r#"{"b":{"x":2},"a":{"x":1}}"#,
        r#"{"b":{"x":2},"a":{"x":1},"b":{"x":3}}"#,
    ] {
        assert_eq!(
            decode_all(&layout, &[line]),
            [(0, "{\"x\":1}\n".to_owned())],
            "{line}"
        );
    }
    // A later, earlier-declared key that is not an object does not take the line.
    assert_eq!(
        decode_all(&layout, &[r#"{"b":{"x":2},"a":7}"#]),
        [(1, "{\"x\":2}\n".to_owned())]
    );
    // A line routed to an unwanted variant is skipped even if a wanted one is present too.
    let mut decoder = JsonDecoder::new(&layout, &[false, true], 4);
    assert_eq!(
        decoder.decode_line(br#"{"b":{"x":2},"a":{}}"#),
        Ok(Decoded::Skipped)
    );
    assert_eq!(
        decoder.decode_line(br#"{"a":null,"b":{"x":2}}"#),
        Ok(Decoded::Row { port: 1 })
    );
    assert_eq!(decoder.buffered(1), 1);
    assert_eq!(text(&decoder.flush()[0].1), "{\"x\":2}\n");
}

#[test]
fn unwanted_ports_get_no_rows() {
    let layout = nexmark::layout(true);
    let mut decoder = JsonDecoder::new(&layout, &[false, false, true], 16);
    let data = nexmark::generate(200, 1);
    let mut rows = 0;
    for line in data.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        match decoder.decode_line(line).unwrap() {
            Decoded::Row { port } => {
                assert_eq!(port, 2);
                rows += 1;
            }
            Decoded::Skipped => assert!(!line.starts_with(br#"{"type":"bid""#)),
        }
    }
    assert_eq!(rows, 200 * 46 / 50);
    assert_eq!(
        (
            decoder.buffered(0),
            decoder.buffered(1),
            decoder.buffered(2)
        ),
        (0, 0, rows)
    );
    let batches = decoder.flush();
    assert_eq!(batches.len(), 1);
    assert_eq!(batches[0].1.num_rows(), rows);

    let mut none = JsonDecoder::new(&single(r#"{"a":"int"}"#), &[], 16);
    assert_eq!(none.decode_line(br#"{"a":1}"#), Ok(Decoded::Skipped));
}

#[test]
fn type_mismatches_name_the_field_the_type_and_the_value() {
    let layout = variants(r#"{"bid":{"price":"int","ch":"string","ok":"bool","f":"float"}}"#);
    let cases = [
        (
            r#"{"bid":{"price":"12x"}}"#,
            r#"field "bid.price": expected int, found string "12x""#,
        ),
        (
            r#"{"bid":{"price":1.5}}"#,
            r#"field "bid.price": expected int, found float 1.5"#,
        ),
        (
            r#"{"bid":{"price":true}}"#,
            r#"field "bid.price": expected int, found bool true"#,
        ),
        (
            r#"{"bid":{"price":[]}}"#,
            r#"field "bid.price": expected int, found array"#,
        ),
        (
            r#"{"bid":{"price":{}}}"#,
            r#"field "bid.price": expected int, found object"#,
        ),
        (
            r#"{"bid":{"ch":5}}"#,
            r#"field "bid.ch": expected string, found integer 5"#,
        ),
        (
            r#"{"bid":{"ok":"yes"}}"#,
            r#"field "bid.ok": expected bool, found string "yes""#,
        ),
        (
            r#"{"bid":{"ok":0}}"#,
            r#"field "bid.ok": expected bool, found integer 0"#,
        ),
        (
            r#"{"bid":{"f":"1.0"}}"#,
            r#"field "bid.f": expected float, found string "1.0""#,
        ),
        (
            r#"{"bid":{"price":18446744073709551615}}"#,
            r#"field "bid.price": 18446744073709551615 does not fit in a 64-bit int"#,
        ),
        (
            r#"{"bid":{"price":1e19}}"#,
            r#"field "bid.price": 10000000000000000000 does not fit in a 64-bit int"#,
        ),
        (
            r#"{"bid":{"price":1,"price":2}}"#,
            r#"field "bid.price": the key appears twice in one object"#,
        ),
    ];
    for (line, message) in cases {
        assert_eq!(error(&layout, line), message, "{line}");
    }
    let long = format!(r#"{{"bid":{{"price":"{}"}}}}"#, "x".repeat(100));
    assert_eq!(
        error(&layout, &long),
        format!(
            r#"field "bid.price": expected int, found string "{}"…"#,
            "x".repeat(40)
        )
    );
}

#[test]
fn invalid_json_reports_the_column_and_the_problem() {
    let layout = single(r#"{"a":"int"}"#);
    assert_eq!(
        error(&layout, r#"{"a":1,"b":tru}"#),
        "invalid JSON at column 15: expected ident"
    );
    assert_eq!(
        error(&layout, r#"{"a":1"#),
        "invalid JSON at column 6: EOF while parsing an object"
    );
    assert_eq!(
        error(&layout, r#"{"a":1} x"#),
        "invalid JSON at column 9: trailing characters"
    );
    let mut decoder = decoder(&layout);
    assert_eq!(
        decoder
            .decode_line(b"{\"a\":\"\xff\"}")
            .unwrap_err()
            .to_string(),
        "invalid JSON at column 7: invalid UTF-8"
    );
    assert_eq!(
        error(&layout, "[1,2]"),
        "expected a JSON object, found array"
    );
    assert_eq!(
        error(&layout, "\"s\""),
        r#"expected a JSON object, found string "s""#
    );
    assert_eq!(
        error(&variants(r#"{"a":{}}"#), "42"),
        "expected a JSON object, found integer 42"
    );
}

#[test]
fn a_bad_line_leaves_the_builders_unchanged() {
    let layout = variants(
        r#"{"a":{"i":"int","s":"string","b":"bool","f":"float","t":"timestamp","o":{"x":"int"}},
            "b":{"s":"string"}}"#,
    );
    let good = [
        r#"{"a":{"i":1,"s":"one","b":true,"f":1.5,"t":10,"o":{"x":1}}}"#,
        r#"{"b":{"s":"bee"}}"#,
        r#"{"a":{"s":null,"b":null}}"#,
        r#"{"a":{"i":4,"s":"four","b":false,"f":4.5,"t":40,"o":{"x":4}}}"#,
    ];
    let bad = [
        r#"{"a":{"i":2,"s":"two","b":true,"f":2.5,"t":20,"o":{"x":"bad"}}}"#,
        r#"{"a":{"i":2,"s":null,"b":null,"f":null,"t":"x"}}"#,
        r#"{"b":{"s":"bee"},"a":{"i":2,"s":"two","b":true,"f":"bad"}}"#,
        r#"{"a":{"i":2,"s":"two","b":false,"f":2.5,"t":20,"o":{"x":2}}} trailing"#,
        r#"{"a":{"i":2,"s":"two","b":true,"f":2.5,"t":20,"o":{"x":2}},"b":{"s":"bee"}"#,
    ];
    let mut mixed = decoder(&layout);
    let mut clean = decoder(&layout);
    for (i, line) in good.iter().enumerate() {
        mixed.decode_line(line.as_bytes()).unwrap();
        clean.decode_line(line.as_bytes()).unwrap();
        if let Some(bad) = bad.get(i) {
            mixed.decode_line(bad.as_bytes()).unwrap_err();
        }
    }
    for bad in &bad[good.len()..] {
        mixed.decode_line(bad.as_bytes()).unwrap_err();
    }
    assert_eq!((mixed.buffered(0), mixed.buffered(1)), (3, 1));
    let (mixed, clean) = (mixed.flush(), clean.flush());
    assert_eq!(mixed, clean);
}

#[test]
fn ints_accept_integral_floats_and_timestamps_accept_rfc3339() {
    let out = decode_all(
        &single(r#"{"i":"int","t":"timestamp","f":"float"}"#),
        &[
            r#"{"i":2.0,"t":"2023-11-14T22:13:20Z","f":3}"#,
            r#"{"i":-9223372036854775808,"t":"2023-11-14T23:13:20.5+01:00","f":-1}"#,
            r#"{"i":9223372036854775807,"t":1700000000000.0,"f":1e300}"#,
        ],
    );
    assert_eq!(
        out[0].1,
        concat!(
            "{\"i\":2,\"t\":1700000000000,\"f\":3.0}\n",
            "{\"i\":-9223372036854775808,\"t\":1700000000500,\"f\":-1.0}\n",
            "{\"i\":9223372036854775807,\"t\":1700000000000,\"f\":1e300}\n",
        )
    );
    assert_eq!(
        error(&single(r#"{"t":"timestamp"}"#), r#"{"t":"yesterday"}"#),
        concat!(
            r#"field "t": invalid timestamp "yesterday": expected epoch milliseconds or an RFC 3339 "#,
            r#"string such as "2024-01-31T12:00:00Z""#
        )
    );
    assert_eq!(
        error(&single(r#"{"t":"timestamp"}"#), r#"{"t":true}"#),
        r#"field "t": expected timestamp, found bool true"#
    );
}

#[test]
fn blank_lines_are_skipped_and_carriage_returns_ignored() {
    let layout = single(r#"{"a":"int"}"#);
    let mut decoder = decoder(&layout);
    assert_eq!(decoder.decode_line(b""), Ok(Decoded::Skipped));
    assert_eq!(decoder.decode_line(b"  \r"), Ok(Decoded::Skipped));
    assert_eq!(
        decoder.decode_line(b"{\"a\":1}\r"),
        Ok(Decoded::Row { port: 0 })
    );
    assert_eq!(
        decoder.decode_line(b" { \"a\" : 2 } "),
        Ok(Decoded::Row { port: 0 })
    );
    assert_eq!(text(&decoder.flush()[0].1), "{\"a\":1}\n{\"a\":2}\n");
}

#[test]
fn flush_hands_over_buffered_rows_and_starts_afresh() {
    let layout = single(r#"{"a":"int","s":"string"}"#);
    let mut decoder = decoder(&layout);
    assert!(decoder.flush().is_empty());
    for i in 0..10 {
        decoder
            .decode_line(format!(r#"{{"a":{i},"s":"v{i}"}}"#).as_bytes())
            .unwrap();
    }
    assert_eq!(decoder.buffered(0), 10);
    let first = decoder.flush();
    assert_eq!(first[0].1.num_rows(), 10);
    assert_eq!(decoder.buffered(0), 0);
    decoder.decode_line(br#"{"s":null,"a":99}"#).unwrap();
    let second = decoder.flush();
    assert_eq!(text(&second[0].1), "{\"a\":99,\"s\":null}\n");
    // The first batch is untouched by later decoding.
    assert_eq!(
        first[0]
            .1
            .column(0)
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap()
            .value(9),
        9
    );
}

#[test]
fn objects_with_no_declared_fields_still_count_rows() {
    let layout = variants(r#"{"ping":{}}"#);
    let mut decoder = decoder(&layout);
    decoder.decode_line(br#"{"ping":{"anything":1}}"#).unwrap();
    decoder.decode_line(br#"{"ping":{}}"#).unwrap();
    let batches = decoder.flush();
    assert_eq!(batches[0].1.num_rows(), 2);
    assert_eq!(batches[0].1.num_columns(), 0);
}

#[test]
fn nexmark_lines_from_the_schema_document_decode() {
    let lines = [
        r#"{"type":"person","person":{"id":1000,"name":"Peter Shultz","emailAddress":"abc@def.com","creditCard":"1234 5678 9012 3456","city":"Boise","state":"ID","dateTime":1700000000000,"extra":"..."}}"#,
        r#"{"type":"auction","auction":{"id":1000,"itemName":"xyz","description":"long text","initialBid":1234,"reserve":2345,"dateTime":1700000000000,"expires":1700000004567,"seller":1000,"category":10,"extra":"..."}}"#,
        r#"{"type":"bid","bid":{"auction":1000,"bidder":1001,"price":4567,"channel":"Google","url":"https://www.nexmark.com/a/b/c/item.htm?query=1","dateTime":1700000000000,"extra":"..."}}"#,
    ];
    let out = decode_all(&nexmark::layout(true), &lines);
    assert_eq!(
        out,
        [
            (
                0,
                "{\"id\":1000,\"name\":\"Peter Shultz\",\"emailAddress\":\"abc@def.com\",\"creditCard\":\"1234 5678 9012 3456\",\"city\":\"Boise\",\"state\":\"ID\",\"dateTime\":1700000000000,\"extra\":\"...\"}\n".to_owned()
            ),
            (
                1,
                "{\"id\":1000,\"itemName\":\"xyz\",\"description\":\"long text\",\"initialBid\":1234,\"reserve\":2345,\"dateTime\":1700000000000,\"expires\":1700000004567,\"seller\":1000,\"category\":10,\"extra\":\"...\"}\n".to_owned()
            ),
            (
                2,
                "{\"auction\":1000,\"bidder\":1001,\"price\":4567,\"channel\":\"Google\",\"url\":\"https://www.nexmark.com/a/b/c/item.htm?query=1\",\"dateTime\":1700000000000,\"extra\":\"...\"}\n".to_owned()
            ),
        ]
    );
    let only_bids = decode_all(&nexmark::layout(false), &lines);
    assert_eq!(only_bids.len(), 1);
    assert_eq!(only_bids[0].1, out[2].1);
}

#[test]
fn generated_nexmark_lines_decode_to_the_same_values_as_a_generic_parser() {
    let data = nexmark::generate(500, 7);
    let layout = nexmark::layout(true);
    let ports = layout.ports();
    let mut decoder = JsonDecoder::new(&layout, &[true, true, true], 64);
    let mut expected: Vec<Vec<serde_json::Value>> = vec![Vec::new(); 3];
    for line in data.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        let Decoded::Row { port } = decoder.decode_line(line).unwrap() else {
            panic!("skipped")
        };
        let value: serde_json::Value = serde_json::from_slice(line).unwrap();
        expected[port].push(value[&ports[port].0].clone());
    }
    let mut got: Vec<Vec<serde_json::Value>> = vec![Vec::new(); 3];
    for (port, batch) in decoder.flush() {
        for line in text(&batch).lines() {
            got[port].push(serde_json::from_str(line).unwrap());
        }
    }
    assert_eq!(got, expected);
}

/// Random records of every type, written with shuffled key order, undeclared keys and missing
/// fields, decode to exactly the values written.
#[test]
fn random_records_round_trip_through_text_with_noise() {
    let layout = single(
        r#"{"i":"int","f":"float","s":"string","b":"bool","t":"timestamp","o":{"x":"int"}}"#,
    );
    let mut rng = Rng::new(42);
    let mut decoder = JsonDecoder::new(&layout, &[true], 8);
    let mut expected = Vec::new();
    for _ in 0..2000 {
        let mut fields: Vec<(String, serde_json::Value)> = Vec::new();
        let mut record = serde_json::Map::new();
        let mut put = |rng: &mut Rng, name: &str, value: serde_json::Value| match rng.below(4) {
            0 => {
                record.insert(name.to_owned(), serde_json::Value::Null);
            }
            1 => {
                fields.push((name.to_owned(), serde_json::Value::Null));
                record.insert(name.to_owned(), serde_json::Value::Null);
            }
            _ => {
                fields.push((name.to_owned(), value.clone()));
                record.insert(name.to_owned(), value);
            }
        };
        let v = serde_json::json!(rng.next() as i64);
        put(&mut rng, "i", v);
        let v = serde_json::json!((rng.next() % 1_000_000) as f64 / 64.0);
        put(&mut rng, "f", v);
        let s: String = (0..rng.below(12))
            .map(|_| ['a', 'é', '"', '\\', '\n', '\u{1}', '😀', ' '][rng.below(8) as usize])
            .collect();
        put(&mut rng, "s", serde_json::json!(s));
        let v = serde_json::json!(rng.below(2) == 1);
        put(&mut rng, "b", v);
        let v = serde_json::json!(rng.below(1 << 45) as i64);
        put(&mut rng, "t", v);
        let v = serde_json::json!(rng.below(1000));
        put(&mut rng, "o.x", v);
        expected.push(serde_json::Value::Object(record));

        // Write the line: shuffled keys, nested "o", plus noise keys.
        let mut parts: Vec<String> = fields
            .into_iter()
            .map(|(name, value)| match name.as_str() {
                "o.x" => format!(r#""o":{{"junk":[1,2],"x":{value}}}"#),
                _ => format!("{}:{value}", serde_json::json!(name)),
            })
            .collect();
        parts.push(r#""noise":{"i":"not an int","deep":[[{}]]}"#.to_owned());
        for k in (1..parts.len()).rev() {
            parts.swap(k, rng.below(k as u64 + 1) as usize);
        }
        let line = format!("{{{}}}", parts.join(","));
        assert!(
            matches!(
                decoder.decode_line(line.as_bytes()),
                Ok(Decoded::Row { port: 0 })
            ),
            "{line}"
        );
    }
    let mut got = Vec::new();
    for (_, batch) in decoder.flush() {
        for line in text(&batch).lines() {
            got.push(serde_json::from_str::<serde_json::Value>(line).unwrap());
        }
    }
    assert_eq!(got, expected);
}

fn all_types_batch() -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![
        Field::new("i", DataType::Int64, true),
        Field::new("f", DataType::Float64, true),
        Field::new("s", DataType::Utf8, true),
        Field::new("b", DataType::Boolean, true),
        Field::new("t", DataType::Timestamp(TimeUnit::Millisecond, None), true),
    ]));
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from(vec![
            Some(i64::MIN),
            None,
            Some(0),
            Some(i64::MAX),
        ])),
        Arc::new(Float64Array::from(vec![
            Some(3.0),
            Some(0.1),
            None,
            Some(-1.25e-7),
        ])),
        Arc::new(StringArray::from(vec![
            Some("a\"b"),
            Some(""),
            Some("tab\t✓"),
            None,
        ])),
        Arc::new(BooleanArray::from(vec![
            Some(true),
            None,
            Some(false),
            Some(true),
        ])),
        Arc::new(TimestampMillisecondArray::from(vec![
            Some(1),
            Some(-5),
            None,
            Some(1 << 50),
        ])),
    ];
    RecordBatch::try_new(schema, columns).unwrap()
}

#[test]
fn encodes_each_type_as_json() {
    assert_eq!(
        text(&all_types_batch()),
        concat!(
            "{\"i\":-9223372036854775808,\"f\":3.0,\"s\":\"a\\\"b\",\"b\":true,\"t\":1}\n",
            "{\"i\":null,\"f\":0.1,\"s\":\"\",\"b\":null,\"t\":-5}\n",
            "{\"i\":0,\"f\":null,\"s\":\"tab\\t✓\",\"b\":false,\"t\":null}\n",
            "{\"i\":9223372036854775807,\"f\":-1.25e-7,\"s\":null,\"b\":true,\"t\":1125899906842624}\n",
        )
    );
}

#[test]
fn non_finite_floats_encode_as_null_and_keys_are_escaped() {
    let schema = Arc::new(Schema::new(vec![Field::new(
        "we\"ird.k",
        DataType::Float64,
        false,
    )]));
    let column: ArrayRef = Arc::new(Float64Array::from(vec![f64::NAN, f64::INFINITY, -0.0]));
    let batch = RecordBatch::try_new(schema, vec![column]).unwrap();
    assert_eq!(
        text(&batch),
        "{\"we\\\"ird.k\":null}\n{\"we\\\"ird.k\":null}\n{\"we\\\"ird.k\":-0.0}\n"
    );
}

#[test]
fn encoding_a_sliced_batch_writes_only_its_rows() {
    let batch = all_types_batch().slice(1, 2);
    assert_eq!(
        text(&batch),
        concat!(
            "{\"i\":null,\"f\":0.1,\"s\":\"\",\"b\":null,\"t\":-5}\n",
            "{\"i\":0,\"f\":null,\"s\":\"tab\\t✓\",\"b\":false,\"t\":null}\n",
        )
    );
}

#[test]
fn unsupported_column_types_are_an_error_and_write_nothing() {
    let schema = Arc::new(Schema::new(vec![
        Field::new("ok", DataType::Int64, true),
        Field::new("small", DataType::Int32, true),
    ]));
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from(vec![1])),
        Arc::new(Int32Array::from(vec![1])),
    ];
    let batch = RecordBatch::try_new(schema, columns).unwrap();
    let mut out = b"before\n".to_vec();
    let err = encode_batch(&batch, &mut out).unwrap_err();
    assert_eq!(
        err.to_string(),
        "column \"small\" has type Int32, which JSON output does not support \
         (supported: Int64, Float64, Utf8, Boolean, Timestamp(ms))"
    );
    assert_eq!(out, b"before\n");
}

#[test]
fn encoder_reuses_keys_across_batches_and_notices_a_new_schema() {
    let mut encoder = JsonEncoder::new();
    let mut out = Vec::new();
    let batch = all_types_batch();
    encoder.encode(&batch, &mut out).unwrap();
    encoder.encode(&batch.slice(0, 1), &mut out).unwrap();
    let other = RecordBatch::try_new(
        Arc::new(Schema::new(vec![Field::new("z", DataType::Int64, true)])),
        vec![Arc::new(Int64Array::from(vec![5])) as ArrayRef],
    )
    .unwrap();
    encoder.encode(&other, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 6);
    assert_eq!(lines[4], lines[0]);
    assert_eq!(lines[5], "{\"z\":5}");
}

#[test]
fn encode_then_decode_with_the_same_layout_gives_the_same_batch() {
    let batch = all_types_batch();
    let mut out = Vec::new();
    encode_batch(&batch, &mut out).unwrap();
    let mut decoder = decoder(&single(ALL_TYPES));
    for line in out.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        decoder.decode_line(line).unwrap();
    }
    let decoded = decoder.flush();
    assert_eq!(decoded.len(), 1);
    assert_eq!(decoded[0].1, batch);

    // Random floats survive too.
    let mut rng = Rng::new(3);
    let values: Vec<Option<f64>> = (0..5000)
        .map(|_| {
            let v = f64::from_bits(rng.next());
            (v.is_finite() && rng.below(10) != 0).then_some(v)
        })
        .collect();
    let schema = Arc::new(Schema::new(vec![Field::new("f", DataType::Float64, true)]));
    let batch = RecordBatch::try_new(
        schema,
        vec![Arc::new(Float64Array::from(values)) as ArrayRef],
    )
    .unwrap();
    let mut out = Vec::new();
    encode_batch(&batch, &mut out).unwrap();
    let mut decoder = JsonDecoder::new(&single(r#"{"f":"float"}"#), &[true], 5000);
    for line in out.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        decoder.decode_line(line).unwrap();
    }
    assert_eq!(decoder.flush()[0].1, batch);
}

#[test]
fn decoders_can_move_between_threads() {
    fn assert_send<T: Send + 'static>() {}
    assert_send::<JsonDecoder>();
    assert_send::<JsonEncoder>();
    assert_send::<DecodeError>();
}

/// Values nested 100,000 deep, in every place a line can hold them: the whole line, a declared
/// nested field, an undeclared field, a variant key, an unwanted variant. Where the layout
/// declares an object, decoding stops at the first level it does not declare (a per-line
/// error); a value nobody reads is skipped by serde_json's `IgnoredAny`, which keeps a stack of
/// brackets instead of recursing. Either way the decoder never recurses per level: decoding on
/// a small stack proves it.
#[test]
fn deeply_nested_values_are_refused_or_skipped_per_line_without_deep_recursion() {
    const DEPTH: usize = 100_000;
    let arrays = format!("{}{}", "[".repeat(DEPTH), "]".repeat(DEPTH));
    let objects = format!("{}1{}", r#"{"a":"#.repeat(DEPTH), "}".repeat(DEPTH));
    let single_layout = single(r#"{"id":"int","a":{"a":{"a":"int"}}}"#);
    let variants_layout = variants(r#"{"bid":{"a":{"a":"int"}},"person":{"id":"int"}}"#);
    // `Err(message)`: refused; `Ok(decoded)`: what the line decodes to.
    let mismatch = r#"field "a.a.a": expected int, found object"#;
    let skipped = Ok(Decoded::Skipped);
    let row = Ok(Decoded::Row { port: 0 });
    let cases: [(&JsonLayout, String, Result<Decoded, &str>); 9] = [
        (
            &single_layout,
            arrays.clone(),
            Err("expected a JSON object, found array"),
        ),
        (&single_layout, objects.clone(), Err(mismatch)),
        (
            &single_layout,
            format!(r#"{{"id":1,"a":{objects}}}"#),
            Err(mismatch),
        ),
        (
            &single_layout,
            format!(r#"{{"id":1,"a":{{"a":{arrays}}}}}"#),
            Err("found array"),
        ),
        (
            &single_layout,
            format!(r#"{{"id":1,"other":{arrays}}}"#),
            row,
        ),
        (
            &single_layout,
            format!(r#"{{"id":1,"other":{objects}}}"#),
            row,
        ),
        (&variants_layout, format!(r#"{{"bid":{arrays}}}"#), skipped),
        (
            &variants_layout,
            format!(r#"{{"person":{objects}}}"#),
            skipped,
        ),
        (
            &variants_layout,
            format!(r#"{{"other":{arrays},"bid":{{"a":{{"a":2}}}}}}"#),
            row,
        ),
    ];
    let messages = std::thread::scope(|scope| {
        std::thread::Builder::new()
            .stack_size(256 << 10)
            .spawn_scoped(scope, move || {
                let mut messages = Vec::new();
                for (layout, line, expected) in cases {
                    // `person` unwanted: its values are only checked for being objects.
                    let mut decoder = JsonDecoder::new(layout, &[true, false], 4);
                    let got = decoder.decode_line(line.as_bytes());
                    messages.push((got.map_err(|e| e.to_string()), expected));
                    // The decoder goes on with the next line; a refused one left nothing.
                    let ok = if layout.ports().len() == 1 {
                        r#"{"id":7}"#
                    } else {
                        r#"{"bid":{"a":{"a":7}}}"#
                    };
                    assert_eq!(
                        decoder.decode_line(ok.as_bytes()),
                        Ok(Decoded::Row { port: 0 })
                    );
                    let rows = decoder.flush()[0].1.num_rows();
                    assert_eq!(rows, 1 + usize::from(expected == row), "{expected:?}");
                }
                messages
            })
            .unwrap()
            .join()
            .expect("no stack overflow")
    });
    for (got, expected) in messages {
        match (&got, expected) {
            (Err(message), Err(part)) => assert!(message.contains(part), "{message}: {part:?}"),
            (Ok(decoded), Ok(want)) => assert_eq!(*decoded, want),
            _ => panic!("got {got:?}, expected {expected:?}"),
        }
    }
}

/// Values for the differential tests: plain ones the scanner takes, and every kind it leaves to
/// serde_json (escapes, fractions, exponents, `-0`, 19 digits, bad literals, malformed
/// containers, bad timestamps).
const VALUES: [&str; 38] = [
    "0",
    "7",
    "-12",
    "123456789012345678",
    "-123456789012345678",
    "1234567890123456789",
    "99999999999999999999",
    "-0",
    "01",
    "1.5",
    "2.0",
    "1e3",
    "-3E-2",
    "1.",
    "-",
    r#""plain text""#,
    r#""""#,
    r#""ünïcödé ✓""#,
    r#""esc\"aped""#,
    r#""tab\t""#,
    r#""\u00e9""#,
    r#""2024-01-02T03:04:05Z""#,
    r#""2024-01-02T03:04:05.678+02:00""#,
    r#""2024-13-01T00:00:00Z""#,
    "true",
    "false",
    "null",
    "tru",
    "nul",
    "{}",
    "[]",
    r#"[1,[2,{"a":[]}],"x",null,-1.5e9]"#,
    r#"{"i":1,"o":{"s":"x"},"s":"y"}"#,
    r#"{"s":null,"i":"1"}"#,
    "[1,]",
    r#"{"a":}"#,
    r#"{"a" 1}"#,
    "[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]",
];

/// Keys for the differential tests: the fields and variants of `differential_layouts`, an
/// undeclared one, and an escaped spelling of a declared one.
const KEYS: [&str; 12] = [
    "i", "f", "s", "b", "t", "o", "x", "type", "bid", "person", "auction", r"\u0069",
];

const SPACES: [&str; 4] = ["", "", " ", " \t"];

/// A random object: mostly declared keys, mostly with values of their type, now and then of
/// any kind, nested up to `depth`.
fn random_object(rng: &mut Rng, depth: u32, out: &mut String) {
    out.push('{');
    out.push_str(rng.pick(&SPACES));
    let mut used = Vec::new();
    for member in 0..rng.below(6) {
        if member > 0 {
            out.push(',');
            out.push_str(rng.pick(&SPACES));
        }
        // Now and then a key twice (an error for a column, not for an object or a variant).
        let mut key = rng.pick(&KEYS);
        while used.contains(&key) && rng.below(10) != 0 {
            key = rng.pick(&KEYS);
        }
        used.push(key);
        out.push('"');
        out.push_str(key);
        out.push('"');
        out.push_str(rng.pick(&SPACES));
        out.push(':');
        out.push_str(rng.pick(&SPACES));
        let fitting: &[&str] = match key {
            "i" => &["0", "7", "-12", "123456789012345678", "null"],
            "f" => &["3", "-40", "2.5", "null"],
            "s" => &[r#""plain text""#, r#""""#, r#""ünïcödé ✓""#, "null"],
            "b" => &["true", "false", "null"],
            "t" => &["1700000000000", r#""2024-01-02T03:04:05Z""#, "null"],
            _ => &[],
        };
        if depth > 0 && (rng.below(3) == 0 || ["o", "bid", "person", "auction"].contains(&key)) {
            random_object(rng, depth - 1, out);
        } else if !fitting.is_empty() && rng.below(8) != 0 {
            out.push_str(rng.pick(fitting));
        } else {
            out.push_str(rng.pick(&VALUES));
        }
        out.push_str(rng.pick(&SPACES));
    }
    out.push('}');
}

/// Bytes inserted into lines: structure, an escape, a digit, a control byte, invalid UTF-8.
const NOISE: &[u8] = b"{}[],:\"\\ 0-a\x01\xff";

/// A random line: an object, sometimes broken by one byte inserted, deleted or cut off.
fn random_line(rng: &mut Rng) -> Vec<u8> {
    let mut text = String::new();
    text.push_str(rng.pick(&SPACES));
    random_object(rng, 2, &mut text);
    text.push_str(rng.pick(&["", "", " ", "\r", " x"]));
    let mut line = text.into_bytes();
    if !line.is_empty() && rng.below(6) == 0 {
        let at = rng.below(line.len() as u64) as usize;
        match rng.below(3) {
            0 => {
                line.remove(at);
            }
            1 => line.insert(at, NOISE[rng.below(NOISE.len() as u64) as usize]),
            _ => line.truncate(at),
        }
    }
    line
}

/// A single layout with every type and nested objects, and a variants layout whose last port
/// is unwanted (the layouts of the `jsonl_decode` fuzz target).
fn differential_layouts() -> [(JsonLayout, Vec<bool>); 2] {
    let fields = r#"{"i":"int","f":"float","s":"string","b":"bool","t":"timestamp","o":{"i":"int","o":{"s":"string"}}}"#;
    let variants = format!(
        r#"{{"bid":{fields},"person":{{"i":"int","s":"string"}},"auction":{{"t":"timestamp"}}}}"#
    );
    [
        (single(fields), vec![true]),
        (self::variants(&variants), vec![true, true, false]),
    ]
}

#[test]
fn the_scanner_decodes_exactly_what_serde_json_decodes() {
    let mut rng = Rng::new(26);
    for (layout, want) in differential_layouts() {
        let mut fast = JsonDecoder::new(&layout, &want, 4);
        let mut reference = JsonDecoder::new(&layout, &want, 4).serde_only();
        let (mut rows, mut errors) = (0, 0);
        for i in 0..40_000 {
            let line = random_line(&mut rng);
            let got = fast.decode_line(&line).map_err(|e| e.to_string());
            let expected = reference.decode_line(&line).map_err(|e| e.to_string());
            assert_eq!(got, expected, "{}", String::from_utf8_lossy(&line));
            rows += usize::from(matches!(expected, Ok(Decoded::Row { .. })));
            errors += usize::from(expected.is_err());
            if i % 7 == 6 {
                let got: Vec<_> = fast.flush().iter().map(|(p, b)| (*p, text(b))).collect();
                let expected: Vec<_> = reference
                    .flush()
                    .iter()
                    .map(|(p, b)| (*p, text(b)))
                    .collect();
                assert_eq!(got, expected, "after {}", String::from_utf8_lossy(&line));
            }
        }
        // Both paths were exercised, and so were rows and errors.
        let scanned = fast.lines_scanned();
        assert!(
            scanned > 4_000 && scanned < 36_000,
            "{scanned} lines scanned"
        );
        assert!(
            rows > 2_000 && errors > 2_000,
            "{rows} rows, {errors} errors"
        );
        assert_eq!(reference.lines_scanned(), 0);
    }
}

#[test]
fn the_scanner_takes_every_generated_nexmark_line() {
    let lines = nexmark::generate(2_000, 7);
    let layout = nexmark::layout(true);
    let mut decoder = JsonDecoder::new(&layout, &[true, true, true], 64);
    let mut reference = JsonDecoder::new(&layout, &[true, true, true], 64).serde_only();
    for line in lines.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        assert_eq!(decoder.decode_line(line), reference.decode_line(line));
    }
    assert_eq!(decoder.lines_scanned(), 2_000);
    let texts = |d: &mut JsonDecoder| -> Vec<(usize, String)> {
        d.flush().iter().map(|(p, b)| (*p, text(b))).collect()
    };
    assert_eq!(texts(&mut decoder), texts(&mut reference));
}

/// Projection pushdown: a decoder that builds only some columns builds them exactly as the
/// full decoder does, leaves the others null, and refuses no line the full decoder takes.
#[test]
fn a_projected_decoder_builds_its_columns_as_the_full_one_and_nulls_the_rest() {
    let mut rng = Rng::new(27);
    let [(single_layout, _), (variants_layout, _)] = differential_layouts();
    // Single layout columns: i, f, s, b, t, o.i, o.o.s; variants: bid as single, then person
    // (i, s), auction (t, unwanted).
    let cases = [
        (
            single_layout.clone(),
            vec![vec![true, false, true, false, true, false, true]],
        ),
        // Every column of the nested object unread: the whole object is skipped.
        (
            single_layout,
            vec![vec![false, true, false, true, false, false, false]],
        ),
        (
            variants_layout,
            vec![
                vec![false, false, true, false, true, true, false],
                vec![true, false],
                vec![false],
            ],
        ),
    ];
    for (layout, read) in cases {
        let want: Vec<bool> = (0..read.len()).map(|p| p < 2).collect();
        let mut full = JsonDecoder::new(&layout, &want, 4).serde_only();
        let mut projected = JsonDecoder::new(&layout, &want, 4).reading(&read);
        let mut projected_serde = JsonDecoder::new(&layout, &want, 4)
            .serde_only()
            .reading(&read);
        let (mut rows, mut taken_only_projected) = (0, 0);
        for _ in 0..20_000 {
            let line = random_line(&mut rng);
            let at = String::from_utf8_lossy(&line).into_owned();
            let expected = full.decode_line(&line);
            let got = projected.decode_line(&line);
            // The scanner and serde_json agree on projected decoders too.
            assert_eq!(
                got.as_ref().map_err(ToString::to_string),
                projected_serde
                    .decode_line(&line)
                    .as_ref()
                    .map_err(ToString::to_string),
                "{at}"
            );
            match (&expected, &got) {
                (Ok(e), Ok(g)) => assert_eq!(e, g, "{at}"),
                (Ok(_), Err(e)) => panic!("the projected decoder refused {at}: {e}"),
                (Err(_), Ok(Decoded::Row { .. })) => taken_only_projected += 1,
                _ => {}
            }
            let (full_batches, got_batches) = (full.flush(), projected.flush());
            projected_serde.flush();
            if !matches!(expected, Ok(Decoded::Row { .. })) {
                continue;
            }
            rows += 1;
            let [(port, e)] = full_batches.as_slice() else {
                panic!("one row expected: {at}");
            };
            let [(got_port, g)] = got_batches.as_slice() else {
                panic!("one row expected: {at}");
            };
            assert_eq!(port, got_port);
            for (c, read) in read[*port].iter().enumerate() {
                if *read {
                    assert_eq!(
                        g.column(c).as_ref(),
                        e.column(c).as_ref(),
                        "{at}: column {c}"
                    );
                } else {
                    assert_eq!(g.column(c).null_count(), 1, "{at}: column {c}");
                    assert_eq!(g.column(c).data_type(), e.column(c).data_type());
                }
            }
        }
        assert!(rows > 1_000, "{rows} rows");
        // Values of the wrong type in unread fields are skipped, not refused.
        assert!(taken_only_projected > 50, "{taken_only_projected}");
        assert!(
            projected.lines_scanned() > 500,
            "{}",
            projected.lines_scanned()
        );
    }
}
