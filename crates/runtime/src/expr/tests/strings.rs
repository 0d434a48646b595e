use super::*;

#[test]
fn lower_and_upper_handle_non_ascii() {
    assert_eq!(
        strs("upper(s)"),
        some_strs(&[Some("HELLO"), Some("WÖRLD"), None, Some("  PAD  ")])
    );
    assert_eq!(
        strs("LOWER(s)"),
        some_strs(&[Some("hello"), Some("wörld"), None, Some("  pad  ")])
    );
}

#[test]
fn length_counts_characters_not_bytes() {
    assert_eq!(ints("length(s)"), [Some(5), Some(5), None, Some(7)]);
    assert_eq!(ints("char_length(s)"), [Some(5), Some(5), None, Some(7)]);
    assert_eq!(ints("character_length('')"), [Some(0); 4]);
}

#[test]
fn trim_strips_spaces_or_the_given_characters() {
    assert_eq!(
        strs("trim(s)"),
        some_strs(&[Some("Hello"), Some("wörld"), None, Some("pad")])
    );
    assert_eq!(
        strs("TRIM(LEADING ' ' FROM s)")[3].as_deref(),
        Some("pad  ")
    );
    assert_eq!(strs("rtrim(s)")[3].as_deref(), Some("  pad"));
    assert_eq!(strs("ltrim(s)")[3].as_deref(), Some("pad  "));
    assert_eq!(
        strs("TRIM(BOTH 'Hdo' FROM s)"),
        some_strs(&[Some("ell"), Some("wörl"), None, Some("  pad  ")])
    );
    assert_eq!(strs("btrim('xxaxx', 'x')")[0].as_deref(), Some("a"));
    assert!(
        compile_error("trim(s, s)")
            .to_string()
            .contains("constant string")
    );
}

#[test]
fn substring_is_one_based_and_clipped_like_sql() {
    assert_eq!(
        strs("SUBSTRING(s FROM 2 FOR 3)"),
        some_strs(&[Some("ell"), Some("örl"), None, Some(" pa")])
    );
    assert_eq!(
        strs("substr(s, 2)"),
        some_strs(&[Some("ello"), Some("örld"), None, Some(" pad  ")])
    );
    assert_eq!(
        strs("substring(s, i, 2)"),
        some_strs(&[Some("He"), Some(""), None, Some("")])
    );
    assert_eq!(strs("substring('hello', 0, 3)")[0].as_deref(), Some("he"));
    assert_eq!(strs("substring(s FROM 2 FOR j)")[2], None);
}

#[test]
fn negative_substring_length_is_an_error() {
    assert!(matches!(
        compile_error("substring(s, 1, -1)"),
        ExprError::Type { .. }
    ));
    let error = eval_error("substring(s, 1, i)");
    assert!(
        matches!(error, EvalError::InvalidArgument { .. }),
        "{error:?}"
    );
    assert_eq!(
        error.to_string(),
        "negative substring length -7 in `substring(s, 1, i)`"
    );
}

#[test]
fn concat_skips_nulls_and_converts_other_types() {
    assert_eq!(
        strs("concat(s, '-', i)"),
        some_strs(&[
            Some("Hello-1"),
            Some("wörld--7"),
            Some("-"),
            Some("  pad  -10")
        ])
    );
    assert_eq!(strs("concat(NULL)"), some_strs(&[Some(""); 4]));
    assert_eq!(strs("concat(b, f)")[0].as_deref(), Some("true1.5"));
}

#[test]
fn concat_operator_propagates_null() {
    assert_eq!(
        strs("s || '!'"),
        some_strs(&[Some("Hello!"), Some("wörld!"), None, Some("  pad  !")])
    );
    assert_eq!(
        strs("s || i"),
        some_strs(&[Some("Hello1"), Some("wörld-7"), None, Some("  pad  10")])
    );
    assert_eq!(strs("'a' || NULL"), some_strs(&[None; 4]));
    assert!(
        compile_error("i || j")
            .to_string()
            .starts_with("cannot apply '||' to INT and INT")
    );
}

#[test]
fn like_matches_with_percent_and_underscore() {
    assert_eq!(
        bools("s LIKE 'H%'"),
        [Some(true), Some(false), None, Some(false)]
    );
    assert_eq!(
        bools("s LIKE '%l_'"),
        [Some(true), Some(true), None, Some(false)]
    );
    assert_eq!(
        bools("s NOT LIKE 'H%'"),
        [Some(false), Some(true), None, Some(true)]
    );
    assert_eq!(
        bools("s LIKE '%pad%'"),
        [Some(false), Some(false), None, Some(true)]
    );
    assert_eq!(
        bools("s LIKE 'w_rld'"),
        [Some(false), Some(true), None, Some(false)]
    );
    assert_eq!(bools("s LIKE NULL"), [None; 4]);
}

#[test]
fn ilike_ignores_case() {
    assert_eq!(
        bools("s ILIKE 'h%'"),
        [Some(true), Some(false), None, Some(false)]
    );
    assert_eq!(
        bools("s ILIKE 'WÖR%'"),
        [Some(false), Some(true), None, Some(false)]
    );
    assert_eq!(
        bools("s NOT ILIKE '%LLO'"),
        [Some(false), Some(true), None, Some(true)]
    );
}

#[test]
fn like_escape_makes_wildcards_literal() {
    assert_eq!(bools("'50%' LIKE '50#%' ESCAPE '#'"), [Some(true); 4]);
    assert_eq!(bools("'50x' LIKE '50#%' ESCAPE '#'"), [Some(false); 4]);
    assert_eq!(bools("'a_c' LIKE 'a\\_c'"), [Some(true); 4]);
    assert_eq!(bools("'abc' LIKE 'a\\_c'"), [Some(false); 4]);
    assert!(
        compile_error("s LIKE 'a' ESCAPE 'ab'")
            .to_string()
            .contains("single character")
    );
}

#[test]
fn like_needs_a_constant_string_pattern() {
    let message = compile_error("s LIKE s").to_string();
    assert_eq!(
        message,
        "LIKE needs a constant string pattern such as 'abc%', not `s`"
    );
    assert!(
        compile_error("i LIKE 'a'")
            .to_string()
            .contains("LIKE needs a STRING")
    );
    assert!(matches!(
        compile_error("s LIKE ANY ('a', 'b')"),
        ExprError::Unsupported { .. } | ExprError::Syntax { .. }
    ));
}

#[test]
fn regexp_extract_returns_a_group_of_the_first_match_or_null() {
    // q21's pattern: the second group is the channel id.
    assert_eq!(
        strs("regexp_extract('a=1&channel_id=42&b=2', '(&|^)channel_id=([^&]*)', 2)")[0].as_deref(),
        Some("42")
    );
    assert_eq!(
        strs("REGEXP_EXTRACT('channel_id=7', '(&|^)channel_id=([^&]*)', 2)")[0].as_deref(),
        Some("7")
    );
    // Group 0 (the default) is the whole match; no match is NULL.
    assert_eq!(
        strs("regexp_extract(s, 'l+')"),
        some_strs(&[Some("ll"), Some("l"), None, None])
    );
    assert_eq!(
        strs("regexp_extract(s, '(l+)(x)?', 1)"),
        some_strs(&[Some("ll"), Some("l"), None, None])
    );
    // A group that took no part in the match is NULL.
    assert_eq!(strs("regexp_extract(s, '(l+)(x)?', 2)"), vec![None; 4]);
    // The group from a column: out of range or negative is NULL, as in Flink.
    assert_eq!(
        strs("regexp_extract(s, '(H|w)(.)', j)"),
        some_strs(&[Some("e"), Some("wö"), None, None])
    );
    assert_eq!(
        strs("regexp_extract(s, '(H|w)(.)', j + 1)"),
        some_strs(&[None, Some("w"), None, None])
    );
    assert_eq!(strs("regexp_extract(s, '(H|w)', i)")[1], None);
    assert_eq!(strs("regexp_extract(s, NULL)"), vec![None; 4]);
}

#[test]
fn regexp_extract_compiles_a_pattern_from_a_column_per_row() {
    assert_eq!(
        strs("regexp_extract('Hello wörld', s)"),
        some_strs(&[Some("Hello"), Some("wörld"), None, None])
    );
    // A pattern that does not compile gives NULL, as in Flink.
    assert_eq!(strs("regexp_extract('x(', s || '(')"), vec![None; 4]);
}

#[test]
fn regexp_extract_refuses_a_bad_constant_pattern_or_group_at_plan_time() {
    let message = compile_error("regexp_extract(s, '(a')").to_string();
    assert!(message.contains("does not compile"), "{message}");
    let message = compile_error("regexp_extract(s, '(a)', 2)").to_string();
    assert!(message.contains("group 2 is not in '(a)'"), "{message}");
    assert!(message.contains("groups 0 to 1"), "{message}");
    let message = compile_error("regexp_extract(s, 'a', -1)").to_string();
    assert!(message.contains("group -1"), "{message}");
    let message = compile_error("regexp_extract(i, 'a')").to_string();
    assert!(message.contains("needs a STRING"), "{message}");
}

#[test]
fn split_index_counts_empty_pieces_and_is_null_out_of_range() {
    let url = "'https://www.nexmark.com/a/b/c/item.htm?query=1'";
    let piece = |index: &str| strs(&format!("split_index({url}, '/', {index})"))[0].clone();
    assert_eq!(piece("0").as_deref(), Some("https:"));
    assert_eq!(piece("1").as_deref(), Some(""));
    assert_eq!(piece("3").as_deref(), Some("a"));
    assert_eq!(piece("5").as_deref(), Some("c"));
    assert_eq!(piece("6").as_deref(), Some("item.htm?query=1"));
    assert_eq!(piece("7"), None);
    assert_eq!(piece("-1"), None);
    assert_eq!(
        strs("split_index('a<>b<>c', '<>', 2)")[0].as_deref(),
        Some("c")
    );
    assert_eq!(strs("split_index('a/', '/', 1)")[0].as_deref(), Some(""));
    // An empty string has no pieces (Flink splits it into none).
    assert_eq!(strs("split_index('', '/', 0)")[0], None);
    assert_eq!(
        strs("split_index(s, 'l', 1)"),
        some_strs(&[Some(""), Some("d"), None, None])
    );
    assert_eq!(
        strs("split_index(s, 'l', j)"),
        some_strs(&[Some("o"), Some("wör"), None, None])
    );
    // An empty separator read from a column gives NULL; a constant one is refused.
    assert_eq!(
        strs("split_index('a b', substring(s, 1, 0), 0)"),
        vec![None; 4]
    );
    let message = compile_error("split_index(s, '', 0)").to_string();
    assert!(message.contains("separator is empty"), "{message}");
    assert_eq!(strs("split_index(s, NULL, 0)"), vec![None; 4]);
}

#[test]
fn count_char_counts_one_character_and_zero_for_null() {
    assert_eq!(
        ints("count_char(s, 'l')"),
        [Some(2), Some(1), Some(0), Some(0)]
    );
    assert_eq!(ints("count_char('ööxö', 'ö')")[0], Some(3));
    assert_eq!(ints("count_char(s, NULL)"), [None; 4]);
    let message = compile_error("count_char(s, 'ab')").to_string();
    assert!(message.contains("one character"), "{message}");
    let message = compile_error("count_char(s, s)").to_string();
    assert!(message.contains("constant string"), "{message}");
}
