use super::*;

#[test]
fn extract_reads_calendar_fields_in_utc() {
    assert_eq!(
        ints("EXTRACT(YEAR FROM ts)"),
        [Some(2023), Some(1970), None, Some(2024)]
    );
    assert_eq!(
        ints("EXTRACT(MONTH FROM ts)"),
        [Some(11), Some(1), None, Some(2)]
    );
    assert_eq!(
        ints("EXTRACT(DAY FROM ts)"),
        [Some(14), Some(1), None, Some(29)]
    );
    assert_eq!(
        ints("EXTRACT(HOUR FROM ts)"),
        [Some(22), Some(0), None, Some(23)]
    );
    assert_eq!(
        ints("EXTRACT(MINUTE FROM ts)"),
        [Some(13), Some(0), None, Some(59)]
    );
    assert_eq!(
        ints("EXTRACT(SECOND FROM ts)"),
        [Some(20), Some(0), None, Some(59)]
    );
    assert_eq!(
        ints("EXTRACT(MILLISECOND FROM ts)"),
        [Some(123), Some(0), None, Some(999)]
    );
    // 2023-11-14 was a Tuesday, 1970-01-01 and 2024-02-29 Thursdays.
    assert_eq!(
        ints("EXTRACT(DOW FROM ts)"),
        [Some(2), Some(4), None, Some(4)]
    );
    assert_eq!(
        ints("EXTRACT(DOY FROM ts)"),
        [Some(318), Some(1), None, Some(60)]
    );
    assert_eq!(
        ints("EXTRACT(EPOCH FROM ts)"),
        [Some(1_700_000_000), Some(0), None, Some(1_709_251_199)]
    );
    assert_eq!(
        ints("EXTRACT(EPOCH FROM ts - INTERVAL '1' MILLISECOND)")[1],
        Some(-1)
    );
}

#[test]
fn date_part_is_extract_with_a_string_unit() {
    assert_eq!(ints("date_part('hour', ts)"), ints("EXTRACT(HOUR FROM ts)"));
    assert_eq!(
        ints("DATE_PART('Epoch', ts)"),
        ints("EXTRACT(EPOCH FROM ts)")
    );
    let message = compile_error("date_part('fortnight', ts)").to_string();
    assert!(
        message.contains("not supported; supported: year"),
        "{message}"
    );
    assert!(
        compile_error("date_part(s, ts)")
            .to_string()
            .contains("constant string")
    );
}

#[test]
fn date_trunc_rounds_down_to_the_unit() {
    let first = |sql: &str| timestamps(sql)[0];
    assert_eq!(
        first("date_trunc('second', ts)"),
        Some(ms("2023-11-14 22:13:20"))
    );
    assert_eq!(
        first("date_trunc('minute', ts)"),
        Some(ms("2023-11-14 22:13:00"))
    );
    assert_eq!(
        first("date_trunc('hour', ts)"),
        Some(ms("2023-11-14 22:00:00"))
    );
    assert_eq!(
        first("date_trunc('day', ts)"),
        Some(ms("2023-11-14 00:00:00"))
    );
    assert_eq!(
        first("date_trunc('week', ts)"),
        Some(ms("2023-11-13 00:00:00"))
    );
    assert_eq!(
        first("date_trunc('month', ts)"),
        Some(ms("2023-11-01 00:00:00"))
    );
    assert_eq!(
        first("date_trunc('quarter', ts)"),
        Some(ms("2023-10-01 00:00:00"))
    );
    assert_eq!(
        first("date_trunc('year', ts)"),
        Some(ms("2023-01-01 00:00:00"))
    );
    assert_eq!(timestamps("date_trunc('hour', ts)")[2], None);
    // Before the epoch, truncation still rounds down.
    assert_eq!(
        timestamps("date_trunc('day', ts - INTERVAL '1' MILLISECOND)")[1],
        Some(-86_400_000)
    );
    assert!(
        compile_error("date_trunc('fortnight', ts)")
            .to_string()
            .contains("supported units")
    );
}

#[test]
fn to_timestamp_millis_reads_epoch_milliseconds() {
    assert_eq!(
        timestamps("to_timestamp_millis(i)"),
        [Some(1), Some(-7), None, Some(10)]
    );
    assert_eq!(
        timestamps("to_timestamp_millis(1700000000000)")[0],
        Some(ms("2023-11-14 22:13:20"))
    );
    assert!(
        compile_error("to_timestamp_millis(s)")
            .to_string()
            .contains("needs an INT")
    );
}

#[test]
fn timestamp_literals_accept_sql_and_rfc3339_forms() {
    let value = |sql: &str| timestamps(sql)[0];
    assert_eq!(
        value("TIMESTAMP '2023-11-14 22:13:20'"),
        Some(1_700_000_000_000)
    );
    assert_eq!(
        value("TIMESTAMP '2023-11-14T22:13:20Z'"),
        Some(1_700_000_000_000)
    );
    assert_eq!(
        value("TIMESTAMP '2023-11-14T23:13:20+01:00'"),
        Some(1_700_000_000_000)
    );
    assert_eq!(
        value("TIMESTAMP '2023-11-14 22:13:20.5'"),
        Some(1_700_000_000_500)
    );
    assert_eq!(
        value("TIMESTAMP '2023-11-14'"),
        Some(ms("2023-11-14 00:00:00"))
    );
    let error = compile_error("TIMESTAMP '14/11/2023'");
    assert!(
        matches!(error, ExprError::InvalidLiteral { .. }),
        "{error:?}"
    );
    assert!(matches!(
        compile_error("DATE '2023-11-14'"),
        ExprError::Unsupported { .. }
    ));
}

#[test]
fn interval_literals_accept_unit_and_text_forms() {
    let millis =
        |interval: &str| timestamps(&format!("TIMESTAMP '1970-01-01 00:00:00' + {interval}"))[0];
    assert_eq!(millis("INTERVAL '10' SECOND"), Some(10_000));
    assert_eq!(millis("INTERVAL 10 SECOND"), Some(10_000));
    assert_eq!(millis("INTERVAL '2 seconds'"), Some(2_000));
    assert_eq!(millis("INTERVAL '1' MINUTE"), Some(60_000));
    assert_eq!(millis("INTERVAL '1.5' SECOND"), Some(1_500));
    assert_eq!(millis("INTERVAL '3' HOUR"), Some(10_800_000));
    assert_eq!(millis("INTERVAL '1' DAY"), Some(86_400_000));
    assert_eq!(millis("INTERVAL '250' MILLISECOND"), Some(250));
    assert_eq!(millis("INTERVAL '1 minute 30 seconds'"), Some(90_000));
}

#[test]
fn calendar_intervals_and_bare_intervals_are_rejected() {
    let message = compile_error("ts + INTERVAL '1' MONTH").to_string();
    assert!(message.contains("use days"), "{message}");
    assert!(
        compile_error("ts + INTERVAL '3 fortnights'")
            .to_string()
            .contains("unknown interval unit")
    );
    let message = compile_error("INTERVAL '10' SECOND").to_string();
    assert!(
        message.starts_with("an INTERVAL can only be added to or subtracted from a TIMESTAMP"),
        "{message}"
    );
    assert!(
        compile_error("INTERVAL '1' SECOND = INTERVAL '1' SECOND")
            .to_string()
            .contains("INTERVAL")
    );
}

#[test]
fn extract_needs_a_timestamp() {
    let message = compile_error("EXTRACT(HOUR FROM s)").to_string();
    assert!(message.contains("needs a TIMESTAMP"), "{message}");
    assert!(message.contains("CAST(x AS TIMESTAMP)"), "{message}");
    assert!(
        compile_error("EXTRACT(TIMEZONE FROM ts)")
            .to_string()
            .contains("supported fields")
    );
}

#[test]
fn date_bin_rounds_down_to_multiples_of_the_stride_since_the_epoch() {
    let first = |sql: &str| timestamps(sql)[0];
    // ts[0] is 2023-11-14 22:13:20.123: 10 s bins start at :20, 7 s bins at multiples of 7000.
    assert_eq!(
        first("date_bin(INTERVAL '10' SECOND, ts)"),
        Some(ms("2023-11-14 22:13:20"))
    );
    let t = ms("2023-11-14 22:13:20") + 123;
    assert_eq!(
        first("date_bin(INTERVAL '7' SECOND, ts)"),
        Some(t - t.rem_euclid(7000))
    );
    assert_eq!(
        timestamps("date_bin(INTERVAL '10' SECOND, ts)")[2],
        None,
        "NULL stays NULL"
    );
    let message = compile_error("date_bin(INTERVAL '0' SECOND, ts)").to_string();
    assert!(message.contains("constant positive INTERVAL"), "{message}");
}

#[test]
fn date_format_writes_the_utc_time_as_the_pattern_says() {
    assert_eq!(
        strs("date_format(ts, 'yyyy-MM-dd')"),
        some_strs(&[
            Some("2023-11-14"),
            Some("1970-01-01"),
            None,
            Some("2024-02-29")
        ])
    );
    assert_eq!(
        strs("DATE_FORMAT(ts, 'HH:mm:ss.SSS')"),
        some_strs(&[
            Some("22:13:20.123"),
            Some("00:00:00.000"),
            None,
            Some("23:59:59.999")
        ])
    );
    assert_eq!(
        strs("date_format(ts, 'yyyy-MM-dd''T''HH:mm')")[0].as_deref(),
        Some("2023-11-14T22:13")
    );
    assert_eq!(strs("date_format(ts, NULL)"), vec![None; 4]);
}

#[test]
fn date_format_refuses_unknown_letters_and_non_constant_patterns() {
    let message = compile_error("date_format(ts, 'yyyy-MM-dd E')").to_string();
    assert!(message.contains("'E' in the pattern"), "{message}");
    assert!(message.contains("supported: yyyy"), "{message}");
    let message = compile_error("date_format(ts, s)").to_string();
    assert!(message.contains("constant string"), "{message}");
    let message = compile_error("date_format(s, 'yyyy')").to_string();
    assert!(message.contains("needs a TIMESTAMP"), "{message}");
}

#[test]
fn hour_minute_and_second_are_extract_of_the_field() {
    assert_eq!(ints("hour(ts)"), [Some(22), Some(0), None, Some(23)]);
    assert_eq!(ints("MINUTE(ts)"), [Some(13), Some(0), None, Some(59)]);
    assert_eq!(ints("second(ts)"), [Some(20), Some(0), None, Some(59)]);
}
