//! Flink's temporal functions on TIMESTAMP (UTC). Expected values are the examples of Flink's
//! "System (Built-in) Functions" page (quoted; where Flink's example is a DATE or TIME, the same
//! instant as a TIMESTAMP), otherwise worked by hand.

use super::*;

fn int(sql: &str) -> Option<i64> {
    ints(sql)[0]
}

fn timestamp(sql: &str) -> Option<i64> {
    timestamps(sql)[0]
}

#[test]
fn to_timestamp_ltz_reads_epoch_seconds_or_milliseconds_as_utc() {
    // "the 0 represents TO_TIMESTAMP_LTZ(epochSeconds, 0), the 3 represents
    // TO_TIMESTAMP_LTZ(epochMilliseconds, 3)".
    assert_eq!(
        timestamp("TO_TIMESTAMP_LTZ(1700000000, 0)"),
        Some(ms("2023-11-14 22:13:20"))
    );
    assert_eq!(
        timestamp("to_timestamp_ltz(1700000000123, 3)"),
        Some(ms("2023-11-14 22:13:20.123"))
    );
    assert_eq!(timestamp("to_timestamp_ltz(1.5, 0)"), Some(1_500));
    assert_eq!(
        timestamps("to_timestamp_ltz(i, 3)"),
        [Some(1), Some(-7), None, Some(10)]
    );
    let message = compile_error("to_timestamp_ltz(1, 6)").to_string();
    assert!(
        message.contains("must be 0 (epoch seconds) or 3"),
        "{message}"
    );
    let error = eval_error("to_timestamp_ltz(9223372036854775807, 0)");
    assert!(
        matches!(error, EvalError::InvalidArgument { .. }),
        "{error:?}"
    );
}

#[test]
fn from_unixtime_writes_utc_text() {
    // "FROM_UNIXTIME(44) returns '1970-01-01 00:00:44' if in UTC time zone".
    assert_eq!(
        strs("FROM_UNIXTIME(44)")[0].as_deref(),
        Some("1970-01-01 00:00:44")
    );
    assert_eq!(
        strs("from_unixtime(1700000000, 'yyyy/MM/dd HH:mm')")[0].as_deref(),
        Some("2023/11/14 22:13")
    );
    assert_eq!(strs("from_unixtime(i)")[2], None);
    assert_eq!(strs("from_unixtime(44, NULL)")[0], None);
}

#[test]
fn unix_timestamp_reads_text_and_gives_long_min_when_it_cannot() {
    // Flink's examples in Europe/Berlin give 25201 for '1970-01-01 08:00:01.001'; in UTC, the
    // zone weir reads, that is one hour later: 8 × 3600 + 1.
    assert_eq!(
        int("UNIX_TIMESTAMP('1970-01-01 08:00:01.001', 'yyyy-MM-dd HH:mm:ss.SSS')"),
        Some(28_801)
    );
    // "-- Returns 25201 ... UNIX_TIMESTAMP('1970-01-01 08:00:01.001 +0800', 'yyyy-MM-dd
    // HH:mm:ss.SSS')": text after the pattern is ignored, as in the example without it.
    assert_eq!(
        int("unix_timestamp('1970-01-01 08:00:01.001 +0800', 'yyyy-MM-dd HH:mm:ss.SSS')"),
        Some(28_801)
    );
    // "If the date time string can not be parsed, the default value
    // Long.MIN_VALUE(-9223372036854775808) will be returned."
    assert_eq!(int("unix_timestamp('not a time')"), Some(i64::MIN));
    assert_eq!(
        int("unix_timestamp('2023-11-14 22:13:20')"),
        Some(1_700_000_000)
    );
    assert_eq!(
        int("unix_timestamp('14 Nov 2023', 'dd MMM yyyy')"),
        Some(1_699_920_000)
    );
    // unix_timestamp(ts): the timestamp's epoch seconds.
    assert_eq!(
        ints("unix_timestamp(ts)"),
        [Some(1_700_000_000), Some(0), None, Some(1_709_251_199)]
    );
    let message = compile_error("unix_timestamp()").to_string();
    assert!(message.contains("replayed"), "{message}");
    let message = compile_error("unix_timestamp(s, 'yy-MM-dd')").to_string();
    assert!(message.contains("'yy'"), "{message}");
}

#[test]
fn to_timestamp_reads_text_with_a_pattern_or_gives_null() {
    // "Converts date time string string1 with format string2 (by default: 'yyyy-MM-dd
    // HH:mm:ss') to a timestamp, without time zone."
    assert_eq!(
        timestamp("TO_TIMESTAMP('2023-11-14 22:13:20')"),
        Some(ms("2023-11-14 22:13:20"))
    );
    assert_eq!(
        timestamp("to_timestamp('14/11/2023 22h13', 'dd/MM/yyyy HH''h''mm')"),
        Some(ms("2023-11-14 22:13:00"))
    );
    assert_eq!(
        timestamp("to_timestamp('20231114', 'yyyyMMdd')"),
        Some(ms("2023-11-14 00:00:00"))
    );
    assert_eq!(
        timestamp("to_timestamp('2023-11-14 22:13', 'yyyy-MM-dd')"),
        None
    );
    assert_eq!(timestamp("to_timestamp('2023-02-30', 'yyyy-MM-dd')"), None);
    assert_eq!(timestamp("to_timestamp('garbage')"), None);
}

#[test]
fn timestampadd_and_timestampdiff_count_units() {
    // "TIMESTAMPADD(WEEK, 1, DATE '2003-01-02') returns 2003-01-09."
    assert_eq!(
        timestamp("TIMESTAMPADD(WEEK, 1, TIMESTAMP '2003-01-02 00:00:00')"),
        Some(ms("2003-01-09 00:00:00"))
    );
    // "TIMESTAMPDIFF(DAY, TIMESTAMP '2003-01-02 10:00:00', TIMESTAMP '2003-01-03 10:00:00')
    // leads to 1."
    assert_eq!(
        int("TIMESTAMPDIFF(DAY, TIMESTAMP '2003-01-02 10:00:00', TIMESTAMP '2003-01-03 10:00:00')"),
        Some(1)
    );
    assert_eq!(
        timestamp("timestampadd(MONTH, 1, TIMESTAMP '2024-01-31 12:00:00')"),
        Some(ms("2024-02-29 12:00:00"))
    );
    assert_eq!(
        timestamps("timestampadd(SECOND, i, ts)")[0],
        Some(ms("2023-11-14 22:13:21.123"))
    );
    assert_eq!(
        int(
            "timestampdiff(MONTH, TIMESTAMP '2024-01-31 00:00:00', TIMESTAMP '2024-02-29 00:00:00')"
        ),
        Some(0)
    );
    assert_eq!(
        int(
            "timestampdiff(YEAR, TIMESTAMP '2000-06-01 00:00:00', TIMESTAMP '2023-05-31 00:00:00')"
        ),
        Some(22)
    );
    assert_eq!(
        int(
            "timestampdiff(HOUR, TIMESTAMP '2003-01-02 10:00:00', TIMESTAMP '2003-01-02 08:30:00')"
        ),
        Some(-1)
    );
    assert_eq!(
        ints("timestampdiff(MINUTE, ts, ts)"),
        [Some(0), Some(0), None, Some(0)]
    );
    let message = compile_error("timestampadd(FORTNIGHT, 1, ts)").to_string();
    assert!(message.contains("unit must be one of"), "{message}");
    let error = eval_error("timestampadd(DAY, 9223372036854775807, ts)");
    assert!(
        matches!(error, EvalError::InvalidArgument { .. }),
        "{error:?}"
    );
}

#[test]
fn floor_and_ceil_round_a_timestamp_to_a_unit() {
    // "FLOOR(TIME '12:44:31' TO MINUTE) returns 12:44:00." and "CEIL(TIME '12:44:31' TO
    // MINUTE) returns 12:45:00."
    assert_eq!(
        timestamp("FLOOR(TIMESTAMP '2023-01-01 12:44:31' TO MINUTE)"),
        Some(ms("2023-01-01 12:44:00"))
    );
    assert_eq!(
        timestamp("CEIL(TIMESTAMP '2023-01-01 12:44:31' TO MINUTE)"),
        Some(ms("2023-01-01 12:45:00"))
    );
    assert_eq!(
        timestamp("CEIL(TIMESTAMP '2023-01-01 12:44:00' TO MINUTE)"),
        Some(ms("2023-01-01 12:44:00"))
    );
    assert_eq!(
        timestamps("FLOOR(ts TO DAY)"),
        [
            Some(ms("2023-11-14 00:00:00")),
            Some(0),
            None,
            Some(ms("2024-02-29 00:00:00"))
        ]
    );
    assert_eq!(
        timestamps("CEIL(ts TO MONTH)")[3],
        Some(ms("2024-03-01 00:00:00"))
    );
    assert_eq!(
        timestamps("FLOOR(ts TO QUARTER)")[0],
        Some(ms("2023-10-01 00:00:00"))
    );
    let message = compile_error("FLOOR(ts TO WEEK)").to_string();
    assert!(message.contains("date_trunc('week', ts)"), "{message}");
}

#[test]
fn field_functions_read_the_calendar() {
    let t = "TIMESTAMP '1994-09-27 13:14:15'";
    // "YEAR(DATE '1994-09-27') returns 1994", "QUARTER(...) returns 3", "MONTH(...) returns
    // 9", "WEEK(...) returns 39", "DAYOFYEAR(...) returns 270", "DAYOFMONTH(...) returns 27",
    // "DAYOFWEEK(...) returns 3".
    for (function, expected) in [
        ("YEAR", 1994),
        ("QUARTER", 3),
        ("MONTH", 9),
        ("WEEK", 39),
        ("DAYOFYEAR", 270),
        ("DAYOFMONTH", 27),
        ("DAYOFWEEK", 3),
        // "HOUR(...)", "MINUTE(TIMESTAMP '1994-09-27 13:14:15') returns 14", "SECOND(...)
        // returns 15".
        ("HOUR", 13),
        ("MINUTE", 14),
        ("SECOND", 15),
    ] {
        assert_eq!(
            int(&format!("{function}({t})")),
            Some(expected),
            "{function}"
        );
    }
    // "EXTRACT(DAY FROM DATE '2006-06-05') returns 5."
    assert_eq!(
        int("EXTRACT(DAY FROM TIMESTAMP '2006-06-05 00:00:00')"),
        Some(5)
    );
    assert_eq!(ints("dayofweek(ts)"), [Some(3), Some(5), None, Some(5)]);
}
