//! Flink's string functions. Expected values are the examples of Flink's "System (Built-in)
//! Functions" page where it has one (quoted), otherwise worked by hand from its description.

use super::*;

/// The first row of a STRING expression.
fn text(sql: &str) -> Option<String> {
    strs(sql)[0].clone()
}

#[test]
fn lpad_and_rpad_pad_or_cut_to_a_length() {
    // "LPAD('hi', 4, '??') returns "??hi"; LPAD('hi', 1, '??') returns "h"."
    assert_eq!(text("LPAD('hi', 4, '??')").as_deref(), Some("??hi"));
    assert_eq!(text("LPAD('hi', 1, '??')").as_deref(), Some("h"));
    // "RPAD('hi', 4, '??') returns "hi??", RPAD('hi', 1, '??') returns "h"."
    assert_eq!(text("RPAD('hi', 4, '??')").as_deref(), Some("hi??"));
    assert_eq!(text("RPAD('hi', 1, '??')").as_deref(), Some("h"));
    assert_eq!(
        strs("lpad(s, 7, 'ab')"),
        some_strs(&[Some("abHello"), Some("abwörld"), None, Some("  pad  ")])
    );
    assert_eq!(text("rpad('wö', 5, 'ö')").as_deref(), Some("wöööö"));
    // A negative length or an empty pad gives NULL; so does any NULL argument.
    assert_eq!(text("lpad('hi', -1, 'x')"), None);
    assert_eq!(text("lpad('hi', 4, '')"), None);
    assert_eq!(text("rpad('hi', 4, NULL)"), None);
    assert_eq!(strs("rpad(s, j, '.')")[3], None);
}

#[test]
fn lpad_rpad_and_repeat_refuse_results_past_the_limit() {
    for sql in [
        "lpad('x', 2000000, 'y')",
        "repeat('ab', 1000000)",
        "replace('aaaa', 'a', repeat('b', 400000))",
    ] {
        let error = eval_error(sql);
        assert!(
            matches!(error, EvalError::InvalidArgument { .. }),
            "{sql}: {error:?}"
        );
        assert!(error.to_string().contains("at most 1048576"), "{error}");
    }
}

#[test]
fn translate_maps_characters_and_drops_those_without_a_partner() {
    // "Translate an expr where all characters in fromStr have been replaced with those in
    // toStr. If toStr has a shorter length than fromStr, unmatched characters are removed."
    assert_eq!(
        text("translate('AaBbCc', 'abc', 'xy')").as_deref(),
        Some("AxByC")
    );
    assert_eq!(
        strs("translate(s, 'lö', 'LO')"),
        some_strs(&[Some("HeLLo"), Some("wOrLd"), None, Some("  pad  ")])
    );
    assert_eq!(text("translate('abc', 'aa', 'xy')").as_deref(), Some("xbc"));
    assert_eq!(text("translate(NULL, 'a', 'b')"), None);
}

#[test]
fn regexp_replace_replaces_every_match() {
    // "'foobar'.regexpReplace('oo|ar', '') returns "fb"."
    assert_eq!(
        text("REGEXP_REPLACE('foobar', 'oo|ar', '')").as_deref(),
        Some("fb")
    );
    // Java's replacement syntax: $n names a group.
    assert_eq!(
        text("regexp_replace('2023-11-14', '([0-9]+)-([0-9]+)-([0-9]+)', '$3/$2/$1')").as_deref(),
        Some("14/11/2023")
    );
    assert_eq!(
        strs("regexp_replace(s, 'l+', '_')"),
        some_strs(&[Some("He_o"), Some("wör_d"), None, Some("  pad  ")])
    );
    // A group the pattern lacks (Java throws) and a pattern from a column that does not
    // compile give NULL, as in Flink.
    assert_eq!(text("regexp_replace('ab', 'a', '$2')"), None);
    assert_eq!(text("regexp_replace('ab', s || '(', 'x')"), None);
    let message = compile_error("regexp_replace(s, '(', 'x')").to_string();
    assert!(message.contains("does not compile"), "{message}");
}

#[test]
fn regexp_tests_counts_and_finds_matches() {
    // "Returns TRUE if any (possibly empty) substring of string1 matches".
    assert_eq!(
        bools("regexp(s, 'l+o')"),
        [Some(true), Some(false), None, Some(false)]
    );
    assert_eq!(bools("REGEXP('abc', '')"), [Some(true); 4]);
    assert_eq!(ints("regexp_count('foobar', 'o')")[0], Some(2));
    // "Result indexes begin at 1, 0 if there is no match."
    assert_eq!(ints("regexp_instr('foobar', 'b')")[0], Some(4));
    assert_eq!(ints("regexp_instr('wörld', 'l')")[0], Some(4));
    assert_eq!(ints("regexp_instr('foobar', 'x')")[0], Some(0));
    assert_eq!(text("regexp_substr('foobar', 'o+')").as_deref(), Some("oo"));
    assert_eq!(text("regexp_substr('foobar', 'x')"), None);
}

#[test]
fn concat_ws_skips_nulls_but_not_empty_strings() {
    // "concat_ws('~', 'AA', Null(STRING), 'BB', '', 'CC') returns "AA~BB~~CC"."
    assert_eq!(
        text("CONCAT_WS('~', 'AA', NULL, 'BB', '', 'CC')").as_deref(),
        Some("AA~BB~~CC")
    );
    // "Returns NULL If STRING1 is NULL."
    assert_eq!(text("concat_ws(NULL, 'a', 'b')"), None);
    assert_eq!(
        strs("concat_ws('-', s, i)"),
        some_strs(&[
            Some("Hello-1"),
            Some("wörld--7"),
            Some(""),
            Some("  pad  -10")
        ])
    );
}

#[test]
fn initcap_repeat_and_reverse() {
    // "the first character of each word converted to uppercase and the rest characters to
    // lowercase. Here a word means a sequences of alphanumeric characters."
    assert_eq!(
        text("initcap('hello wORLD, 2nd-try')").as_deref(),
        Some("Hello World, 2nd-Try")
    );
    // "REPEAT('This is a test String.', 2) returns "This is a test String.This is a test
    // String."."
    assert_eq!(
        text("REPEAT('This is a test String.', 2)").as_deref(),
        Some("This is a test String.This is a test String.")
    );
    assert_eq!(text("repeat('ab', 0)").as_deref(), Some(""));
    assert_eq!(text("repeat('ab', -3)").as_deref(), Some(""));
    assert_eq!(
        strs("reverse(s)"),
        some_strs(&[Some("olleH"), Some("dlröw"), None, Some("  dap  ")])
    );
}

#[test]
fn locate_position_and_instr_are_one_based_and_zero_when_missing() {
    assert_eq!(ints("locate('l', s)"), [Some(3), Some(4), None, Some(0)]);
    // "the first occurrence of string1 in string2 after position integer".
    assert_eq!(ints("locate('l', s, 4)"), [Some(4), Some(4), None, Some(0)]);
    assert_eq!(ints("locate('l', s, j)"), [Some(3), Some(0), None, None]);
    assert_eq!(ints("POSITION('l' IN s)"), ints("locate('l', s)"));
    assert_eq!(ints("instr(s, 'l')"), ints("locate('l', s)"));
    // "returns 0 if STRING1 cannot be found in STRING2".
    assert_eq!(ints("POSITION('z' IN 'abc')")[0], Some(0));
}

#[test]
fn left_right_chr_and_ascii() {
    assert_eq!(
        strs("left(s, 2)"),
        some_strs(&[Some("He"), Some("wö"), None, Some("  ")])
    );
    assert_eq!(
        strs("right(s, 3)"),
        some_strs(&[Some("llo"), Some("rld"), None, Some("d  ")])
    );
    // "Returns EMPTY String if integer is negative."
    assert_eq!(text("left('abc', -1)").as_deref(), Some(""));
    assert_eq!(text("right('abc', -1)").as_deref(), Some(""));
    assert_eq!(text("right('abc', 10)").as_deref(), Some("abc"));
    // "chr(97) returns a, chr(353) returns a".
    assert_eq!(text("chr(97)").as_deref(), Some("a"));
    assert_eq!(text("chr(353)").as_deref(), Some("a"));
    // "ascii('abc') returns 97, and ascii(CAST(NULL AS VARCHAR)) returns NULL".
    assert_eq!(ints("ascii('abc')")[0], Some(97));
    assert_eq!(ints("ascii(CAST(NULL AS VARCHAR))")[0], None);
}

#[test]
fn replace_startswith_endswith_and_elt() {
    // "'hello world'.replace('world', 'flink') returns 'hello flink'; 'ababab'.replace('abab',
    // 'z') returns 'zab'."
    assert_eq!(
        text("REPLACE('hello world', 'world', 'flink')").as_deref(),
        Some("hello flink")
    );
    assert_eq!(
        text("replace('ababab', 'abab', 'z')").as_deref(),
        Some("zab")
    );
    // "If startExpr is empty, the result is true."
    assert_eq!(
        bools("startswith(s, 'He')"),
        [Some(true), Some(false), None, Some(false)]
    );
    assert_eq!(bools("startswith('abc', '')"), [Some(true); 4]);
    assert_eq!(
        bools("endswith(s, 'ld')"),
        [Some(false), Some(true), None, Some(false)]
    );
    // "Returns the index-th expression ... NULL if index is NULL or out of range."
    assert_eq!(
        text("elt(2, 'scala-1', 'java-2')").as_deref(),
        Some("java-2")
    );
    assert_eq!(text("elt(3, 'a', 'b')"), None);
    assert_eq!(text("elt(0, 'a', 'b')"), None);
    assert_eq!(text("elt(NULL, 'a', 'b')"), None);
}

#[test]
fn string_functions_refuse_wrong_types_and_arities() {
    let message = compile_error("lpad(s, 's', 'x')").to_string();
    assert!(message.contains("lpad needs an INT"), "{message}");
    assert_eq!(
        compile_error("reverse()").to_string(),
        "reverse takes 1 argument, got 0: reverse(s)"
    );
    let message = compile_error("locate('a')").to_string();
    assert!(message.contains("2 to 3 arguments"), "{message}");
    let message = compile_error("initcap(i)").to_string();
    assert!(message.contains("needs a STRING"), "{message}");
}
