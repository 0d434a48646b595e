//! Timestamps and intervals: `TIMESTAMP '...'` and `INTERVAL '...'` literals, `EXTRACT` /
//! `date_part`, `date_trunc`, `to_timestamp_millis`, and Flink's `date_format`.
//!
//! TIMESTAMP values are epoch milliseconds in UTC (`Timestamp(Millisecond, None)`). INTERVALs are
//! compile-time constants of a fixed number of milliseconds; months and years, whose length
//! varies, are rejected with a hint to use days.

use std::sync::Arc;

use arrow_arith::temporal::{DatePart, date_part};
use arrow_array::builder::StringBuilder;
use arrow_array::types::{Int32Type, Int64Type, TimestampMillisecondType};
use arrow_array::{Array, ArrayRef, Int64Array, RecordBatch, TimestampMillisecondArray};
use chrono::{DateTime, Datelike, NaiveDate, Timelike};
use sqlparser::ast::{self, DateTimeField, TimezoneInfo, TypedString, Value as SqlValue};

use super::cast;
use super::compile::Origin;
use super::error::{EvalError, ExprError};
use super::node::{Node, Operator};
use super::types::{Decimal, Literal, SqlType, Value, primitive};

const SECOND: i64 = 1_000;
const MINUTE: i64 = 60 * SECOND;
const HOUR: i64 = 60 * MINUTE;
const DAY: i64 = 24 * HOUR;
const WEEK: i64 = 7 * DAY;

/// Reads `2023-11-14 22:13:20[.fff]`, `2023-11-14T22:13:20Z`, `2023-11-14T22:13:20+01:00` or a
/// bare date as epoch milliseconds; text without an offset is UTC.
pub(crate) fn parse_timestamp(text: &str) -> Result<i64, String> {
    arrow_cast::parse::string_to_datetime(&chrono::Utc, text.trim())
        .map(|datetime| datetime.timestamp_millis())
        .map_err(|_| {
            "expected 'YYYY-MM-DD HH:MM:SS[.fff]' (UTC) or RFC 3339 such as \
             '2023-11-14T22:13:20Z'"
                .to_owned()
        })
}

/// `TIMESTAMP '2023-11-14 22:13:20'`.
pub(crate) fn typed_string(typed: &TypedString, origin: &Origin) -> Result<Node, ExprError> {
    let is_timestamp = matches!(
        &typed.data_type,
        ast::DataType::Timestamp(_, TimezoneInfo::None | TimezoneInfo::WithoutTimeZone)
    );
    if !is_timestamp {
        return Err(origin.unsupported(format!(
            "{} literals are not supported; weir has TIMESTAMP '2023-11-14 22:13:20' (UTC)",
            typed.data_type
        )));
    }
    let Some(text) = string_value(&typed.value.value) else {
        return Err(origin.invalid_literal("a TIMESTAMP literal needs a quoted string"));
    };
    let millis = parse_timestamp(text).map_err(|message| {
        origin.invalid_literal(format!("invalid TIMESTAMP '{text}': {message}"))
    })?;
    Ok(Node::literal(
        Literal::timestamp(millis),
        SqlType::Timestamp,
        origin.sql.clone(),
    ))
}

fn string_value(value: &SqlValue) -> Option<&str> {
    match value {
        SqlValue::SingleQuotedString(text) | SqlValue::EscapedStringLiteral(text) => Some(text),
        _ => None,
    }
}

/// `INTERVAL '10' SECOND`, `INTERVAL 10 SECOND`, `INTERVAL '2 seconds'`,
/// `INTERVAL '1 hour 30 minutes'`, `INTERVAL '1.5' SECOND`.
pub(crate) fn interval(interval: &ast::Interval, origin: &Origin) -> Result<Node, ExprError> {
    if interval.last_field.is_some() {
        return Err(origin.unsupported(
            "INTERVAL ... TO ... ranges are not supported; write INTERVAL '90' MINUTE or \
             INTERVAL '1 hour 30 minutes'",
        ));
    }
    let text = match interval.value.as_ref() {
        ast::Expr::Value(value) => match &value.value {
            SqlValue::Number(digits, _) => digits.clone(),
            other => string_value(other).map(str::to_owned).unwrap_or_default(),
        },
        ast::Expr::UnaryOp {
            op: ast::UnaryOperator::Minus,
            expr,
        } => match expr.as_ref() {
            ast::Expr::Value(value) => match &value.value {
                SqlValue::Number(digits, _) => format!("-{digits}"),
                _ => String::new(),
            },
            _ => String::new(),
        },
        _ => String::new(),
    };
    let millis = match &interval.leading_field {
        Some(field) => {
            let unit = field_unit(field).map_err(|message| origin.invalid_literal(message))?;
            amount_to_millis(text.trim(), unit)
        }
        None => parse_interval_text(&text),
    }
    .map_err(|message| {
        origin.invalid_literal(format!("invalid INTERVAL `{}`: {message}", origin.sql))
    })?;
    Ok(Node::literal(
        Literal::int(millis),
        SqlType::Interval,
        origin.sql.clone(),
    ))
}

const INTERVAL_UNITS: &str = "MILLISECOND, SECOND, MINUTE, HOUR, DAY, WEEK";

fn field_unit(field: &DateTimeField) -> Result<i64, String> {
    use DateTimeField as F;
    match field {
        F::Millisecond | F::Milliseconds => Ok(1),
        F::Second | F::Seconds => Ok(SECOND),
        F::Minute | F::Minutes => Ok(MINUTE),
        F::Hour | F::Hours => Ok(HOUR),
        F::Day | F::Days => Ok(DAY),
        F::Week(_) | F::Weeks => Ok(WEEK),
        F::Custom(name) => unit_named(&name.value),
        other => unit_named(&other.to_string()),
    }
}

fn unit_named(name: &str) -> Result<i64, String> {
    match name.to_ascii_lowercase().as_str() {
        "ms" | "msec" | "msecs" | "millisecond" | "milliseconds" => Ok(1),
        "s" | "sec" | "secs" | "second" | "seconds" => Ok(SECOND),
        "m" | "min" | "mins" | "minute" | "minutes" => Ok(MINUTE),
        "h" | "hr" | "hrs" | "hour" | "hours" => Ok(HOUR),
        "d" | "day" | "days" => Ok(DAY),
        "w" | "week" | "weeks" => Ok(WEEK),
        "month" | "months" | "mon" | "mons" | "year" | "years" | "quarter" | "quarters"
        | "decade" | "century" => Err(format!(
            "{name} has no fixed length, so it cannot be an interval; use days, e.g. \
             INTERVAL '30' DAY"
        )),
        _ => Err(format!(
            "unknown interval unit '{name}'; use {INTERVAL_UNITS}"
        )),
    }
}

/// `'2 seconds'`, `'1 hour 30 minutes'`, `'1.5s'`.
fn parse_interval_text(text: &str) -> Result<i64, String> {
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err(format!(
            "expected an amount and a unit, e.g. INTERVAL '10' SECOND or INTERVAL '10 seconds' \
             (units: {INTERVAL_UNITS})"
        ));
    }
    let mut total: i64 = 0;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == '+'))
            .unwrap_or(rest.len());
        let (number, after) = rest.split_at(number_len);
        let after = after.trim_start();
        let unit_len = after
            .find(|c: char| !c.is_ascii_alphabetic())
            .unwrap_or(after.len());
        let (unit, after) = after.split_at(unit_len);
        if number.is_empty() || unit.is_empty() {
            return Err(format!(
                "expected an amount and a unit such as '10 seconds' (units: {INTERVAL_UNITS})"
            ));
        }
        let millis = amount_to_millis(number, unit_named(unit)?)?;
        total = total
            .checked_add(millis)
            .ok_or_else(|| "the interval is too large".to_owned())?;
        rest = after.trim_start();
    }
    Ok(total)
}

/// `amount` units of `unit_millis` each, which must come to whole milliseconds.
fn amount_to_millis(amount: &str, unit_millis: i64) -> Result<i64, String> {
    let amount = amount.strip_prefix('+').unwrap_or(amount);
    let too_large = || "the interval is too large".to_owned();
    if let Ok(whole) = amount.parse::<i64>() {
        return whole.checked_mul(unit_millis).ok_or_else(too_large);
    }
    let Some(decimal) = Decimal::parse(amount) else {
        return Err(format!("'{amount}' is not a number"));
    };
    let scaled = decimal
        .mantissa
        .checked_mul(unit_millis)
        .ok_or_else(too_large)?;
    let divisor = 10_i64.pow(decimal.scale);
    if scaled % divisor != 0 {
        return Err("intervals are whole milliseconds".to_owned());
    }
    Ok(scaled / divisor)
}

/// A field `EXTRACT` and `date_part` read from a TIMESTAMP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TimePart {
    /// Answered by Arrow's `date_part` kernel.
    Calendar(DatePart),
    /// Whole seconds since the epoch, rounded down.
    Epoch,
    /// Monday = 1 ... Sunday = 7: Arrow's Monday = 0 plus one.
    IsoDayOfWeek,
}

const TIME_PARTS: &str =
    "YEAR, QUARTER, MONTH, WEEK, DAY, HOUR, MINUTE, SECOND, MILLISECOND, DOW, ISODOW, DOY, EPOCH";

fn time_part_named(name: &str) -> Option<TimePart> {
    use DatePart as P;
    let part = match name.to_ascii_lowercase().as_str() {
        "year" | "years" => P::Year,
        "quarter" | "quarters" => P::Quarter,
        "month" | "months" => P::Month,
        "week" | "weeks" => P::Week,
        "day" | "days" => P::Day,
        "hour" | "hours" => P::Hour,
        "minute" | "minutes" => P::Minute,
        "second" | "seconds" => P::Second,
        "millisecond" | "milliseconds" | "ms" => P::Millisecond,
        "dow" | "dayofweek" => P::DayOfWeekSunday0,
        "isodow" => return Some(TimePart::IsoDayOfWeek),
        "doy" | "dayofyear" => P::DayOfYear,
        "epoch" => return Some(TimePart::Epoch),
        _ => return None,
    };
    Some(TimePart::Calendar(part))
}

/// `EXTRACT(field FROM ts)` → INT.
///
/// SECOND is the whole second of the minute (0–59) and MILLISECOND the millisecond of the second
/// (0–999), as Arrow defines them; DOW counts from Sunday = 0, ISODOW from Monday = 1; WEEK is the
/// ISO week; EPOCH is whole seconds since 1970-01-01, rounded down.
pub(crate) fn extract(
    input: Node,
    field: &DateTimeField,
    origin: &Origin,
) -> Result<Node, ExprError> {
    let name = match field {
        DateTimeField::Custom(ident) => ident.value.clone(),
        DateTimeField::Week(_) => "week".to_owned(),
        other => other.to_string(),
    };
    let Some(part) = time_part_named(&name) else {
        return Err(origin.unsupported(format!(
            "EXTRACT({name} ...) is not supported; supported fields: {TIME_PARTS}"
        )));
    };
    extract_part(input, part, origin)
}

/// `date_part('hour', ts)`: the same as `EXTRACT(HOUR FROM ts)`.
pub(crate) fn date_part_named(
    unit: Option<&str>,
    input: Node,
    origin: &Origin,
) -> Result<Node, ExprError> {
    let Some(unit) = unit else {
        return Ok(Node::literal(
            Literal::null(SqlType::Int),
            SqlType::Int,
            origin.sql.clone(),
        ));
    };
    let Some(part) = time_part_named(unit) else {
        return Err(origin.type_error(format!(
            "date_part('{unit}', ...) is not supported; supported: {}",
            TIME_PARTS.to_ascii_lowercase()
        )));
    };
    extract_part(input, part, origin)
}

fn extract_part(input: Node, part: TimePart, origin: &Origin) -> Result<Node, ExprError> {
    let input = timestamp_operand(input, "EXTRACT / date_part", origin)?;
    Ok(Node::op(
        SqlType::Int,
        origin.sql.clone(),
        ExtractOp { input, part },
    ))
}

/// Accepts a TIMESTAMP (or NULL) operand.
pub(crate) fn timestamp_operand(
    input: Node,
    what: &str,
    origin: &Origin,
) -> Result<Node, ExprError> {
    match input.ty {
        SqlType::Timestamp => Ok(input),
        SqlType::Null => Ok(cast::implicit(input, SqlType::Timestamp)),
        other => Err(origin.type_error(format!(
            "{what} needs a TIMESTAMP, but `{}` is {other}{}",
            input.sql,
            match other {
                SqlType::String => "; CAST it: CAST(x AS TIMESTAMP)",
                SqlType::Int => "; to_timestamp_millis(x) reads epoch milliseconds",
                _ => "",
            }
        ))),
    }
}

#[derive(Debug)]
struct ExtractOp {
    input: Node,
    part: TimePart,
}

impl Operator for ExtractOp {
    fn eval(&self, batch: &RecordBatch, sql: &str) -> Result<Value, EvalError> {
        let part = self.part;
        self.input.eval(batch)?.map(|array| {
            let timestamps = primitive::<TimestampMillisecondType>(array, sql)?;
            let result: Int64Array = match part {
                TimePart::Epoch => timestamps.unary(|millis| millis.div_euclid(SECOND)),
                TimePart::Calendar(part) => {
                    let parts =
                        date_part(timestamps, part).map_err(|e| EvalError::from_arrow(sql, e))?;
                    primitive::<Int32Type>(parts.as_ref(), sql)?.unary(i64::from)
                }
                TimePart::IsoDayOfWeek => {
                    let parts = date_part(timestamps, DatePart::DayOfWeekMonday0)
                        .map_err(|e| EvalError::from_arrow(sql, e))?;
                    primitive::<Int32Type>(parts.as_ref(), sql)?.unary(|d| i64::from(d) + 1)
                }
            };
            Ok(Arc::new(result) as ArrayRef)
        })
    }

    fn children(&self) -> Vec<&Node> {
        vec![&self.input]
    }
}

/// The unit `date_trunc` rounds down to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TruncUnit {
    /// A fixed number of milliseconds (millisecond ... day), aligned to the epoch.
    Fixed(i64),
    /// Monday 00:00 of the ISO week.
    Week,
    Month,
    Quarter,
    Year,
}

const TRUNC_UNITS: &str = "millisecond, second, minute, hour, day, week, month, quarter, year";

/// `date_trunc('hour', ts)` → TIMESTAMP rounded down to the unit (UTC).
pub(crate) fn date_trunc(
    unit: Option<&str>,
    input: Node,
    origin: &Origin,
) -> Result<Node, ExprError> {
    let input = timestamp_operand(input, "date_trunc", origin)?;
    let Some(unit) = unit else {
        return Ok(Node::literal(
            Literal::null(SqlType::Timestamp),
            SqlType::Timestamp,
            origin.sql.clone(),
        ));
    };
    let unit = match unit.to_ascii_lowercase().as_str() {
        "millisecond" | "milliseconds" => TruncUnit::Fixed(1),
        "second" | "seconds" => TruncUnit::Fixed(SECOND),
        "minute" | "minutes" => TruncUnit::Fixed(MINUTE),
        "hour" | "hours" => TruncUnit::Fixed(HOUR),
        "day" | "days" => TruncUnit::Fixed(DAY),
        "week" | "weeks" => TruncUnit::Week,
        "month" | "months" => TruncUnit::Month,
        "quarter" | "quarters" => TruncUnit::Quarter,
        "year" | "years" => TruncUnit::Year,
        _ => {
            return Err(origin.type_error(format!(
                "date_trunc('{unit}', ...) is not supported; supported units: {TRUNC_UNITS}"
            )));
        }
    };
    Ok(Node::op(
        SqlType::Timestamp,
        origin.sql.clone(),
        TruncOp { input, unit },
    ))
}

#[derive(Debug)]
struct TruncOp {
    input: Node,
    unit: TruncUnit,
}

impl Operator for TruncOp {
    fn eval(&self, batch: &RecordBatch, sql: &str) -> Result<Value, EvalError> {
        let unit = self.unit;
        self.input.eval(batch)?.map(|array| {
            let timestamps = primitive::<TimestampMillisecondType>(array, sql)?;
            let truncated: TimestampMillisecondArray = match unit {
                TruncUnit::Fixed(step) => timestamps.unary(|t| t - t.rem_euclid(step)),
                TruncUnit::Week => timestamps.unary(|t| {
                    let day = t.div_euclid(DAY);
                    // 1970-01-01 was a Thursday: Monday-based weekday = (day + 3) mod 7.
                    (day - (day + 3).rem_euclid(7)) * DAY
                }),
                TruncUnit::Month => timestamps.unary_opt(|t| truncate_calendar(t, |m| m)),
                TruncUnit::Quarter => {
                    timestamps.unary_opt(|t| truncate_calendar(t, |m| (m - 1) / 3 * 3 + 1))
                }
                TruncUnit::Year => timestamps.unary_opt(|t| truncate_calendar(t, |_| 1)),
            };
            Ok(Arc::new(truncated) as ArrayRef)
        })
    }

    fn children(&self) -> Vec<&Node> {
        vec![&self.input]
    }
}

/// The first day (00:00 UTC) of the month `month_of(month)` in the year of `millis`.
pub(crate) fn truncate_calendar(millis: i64, month_of: impl Fn(u32) -> u32) -> Option<i64> {
    let date = DateTime::from_timestamp_millis(millis)?.date_naive();
    let first = NaiveDate::from_ymd_opt(date.year(), month_of(date.month()), 1)?;
    Some(first.and_hms_opt(0, 0, 0)?.and_utc().timestamp_millis())
}

/// `date_bin(INTERVAL stride, ts)` → TIMESTAMP rounded down to a multiple of `stride_ms`
/// milliseconds since the epoch: the start of the tumbling window of that size holding `ts`.
pub(crate) fn date_bin(stride_ms: i64, input: Node, origin: &Origin) -> Result<Node, ExprError> {
    let input = timestamp_operand(input, "date_bin", origin)?;
    Ok(Node::op(
        SqlType::Timestamp,
        origin.sql.clone(),
        TruncOp {
            input,
            unit: TruncUnit::Fixed(stride_ms),
        },
    ))
}

/// `to_timestamp_millis(x)`: INT epoch milliseconds → TIMESTAMP (a zero-copy reinterpretation).
pub(crate) fn to_timestamp_millis(input: Node, origin: &Origin) -> Result<Node, ExprError> {
    match input.ty {
        SqlType::Int | SqlType::Null => Ok(cast::implicit(input, SqlType::Timestamp)),
        SqlType::Timestamp => Ok(input),
        other => Err(origin.type_error(format!(
            "to_timestamp_millis needs an INT of epoch milliseconds, but `{}` is {other}",
            input.sql
        ))),
    }
}

/// Views TIMESTAMP values as their epoch milliseconds (zero-copy).
pub(crate) fn timestamps_as_millis(array: &dyn Array, sql: &str) -> Result<ArrayRef, EvalError> {
    let timestamps = primitive::<TimestampMillisecondType>(array, sql)?;
    Ok(Arc::new(timestamps.reinterpret_cast::<Int64Type>()))
}

/// Views epoch milliseconds as TIMESTAMP values (zero-copy).
pub(crate) fn millis_as_timestamps(array: &dyn Array, sql: &str) -> Result<ArrayRef, EvalError> {
    let millis = primitive::<Int64Type>(array, sql)?;
    Ok(Arc::new(
        millis.reinterpret_cast::<TimestampMillisecondType>(),
    ))
}

/// One piece of a `date_format` pattern: a field of the timestamp, or text copied as it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FormatPiece {
    Text(String),
    /// `yyyy` (padded to the letters' count) or `yy` (the last two digits).
    Year(usize),
    /// `M`/`MM` the number, `MMM` the short English name (`Nov`), `MMMM` and more the full one.
    Month(usize),
    Day(usize),
    Hour(usize),
    Minute(usize),
    Second(usize),
    /// `SSS`: the millisecond of the second.
    Millisecond,
}

const FORMAT_LETTERS: &str =
    "yyyy (or yy), MM (M, MMM, MMMM), dd, HH, mm, ss, SSS; quote text in '...', '' is a quote";

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

/// Reads a Java `SimpleDateFormat`-style pattern, as Flink's `DATE_FORMAT` takes: a run of one
/// letter is one field, text in single quotes is copied (`''` is a quote, in or out of quotes),
/// other characters are copied. Letters weir does not format are refused, so a pattern never
/// means something other than what Flink would print.
pub(crate) fn parse_format(pattern: &str) -> Result<Vec<FormatPiece>, String> {
    let mut pieces: Vec<FormatPiece> = Vec::new();
    let mut text = String::new();
    let mut chars = pattern.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\'' {
            if chars.peek() == Some(&'\'') {
                chars.next();
                text.push('\'');
                continue;
            }
            // Quoted text, to the closing quote; '' inside is a quote.
            loop {
                match chars.next() {
                    Some('\'') if chars.peek() == Some(&'\'') => {
                        chars.next();
                        text.push('\'');
                    }
                    Some('\'') => break,
                    Some(c) => text.push(c),
                    None => return Err(format!("the quote in '{pattern}' is not closed")),
                }
            }
            continue;
        }
        if !c.is_ascii_alphabetic() {
            text.push(c);
            continue;
        }
        let mut count = 1;
        while chars.peek() == Some(&c) {
            chars.next();
            count += 1;
        }
        let piece = match (c, count) {
            ('y', 2) => FormatPiece::Year(2),
            ('y', n) => FormatPiece::Year(n),
            ('M', n) => FormatPiece::Month(n),
            ('d', n) if n <= 2 => FormatPiece::Day(n),
            ('H', n) if n <= 2 => FormatPiece::Hour(n),
            ('m', n) if n <= 2 => FormatPiece::Minute(n),
            ('s', n) if n <= 2 => FormatPiece::Second(n),
            ('S', 3) => FormatPiece::Millisecond,
            _ => {
                let letters: String = std::iter::repeat_n(c, count).collect();
                return Err(format!(
                    "'{letters}' in the pattern '{pattern}' is not supported; supported: \
                     {FORMAT_LETTERS}"
                ));
            }
        };
        if !text.is_empty() {
            pieces.push(FormatPiece::Text(std::mem::take(&mut text)));
        }
        pieces.push(piece);
    }
    if !text.is_empty() {
        pieces.push(FormatPiece::Text(text));
    }
    Ok(pieces)
}

/// Writes `millis` (UTC) as `pieces` say; `None` if the time is outside chrono's range.
pub(crate) fn write_format(
    out: &mut impl std::fmt::Write,
    pieces: &[FormatPiece],
    millis: i64,
) -> Option<()> {
    let time = DateTime::from_timestamp_millis(millis)?.naive_utc();
    for piece in pieces {
        let written = match piece {
            FormatPiece::Text(text) => out.write_str(text),
            FormatPiece::Year(2) => write!(out, "{:02}", time.year().rem_euclid(100)),
            FormatPiece::Year(width) => write!(out, "{:0width$}", time.year()),
            FormatPiece::Month(width @ (1 | 2)) => write!(out, "{:0width$}", time.month()),
            FormatPiece::Month(3) => out.write_str(&MONTHS[time.month0() as usize][..3]),
            FormatPiece::Month(_) => out.write_str(MONTHS[time.month0() as usize]),
            FormatPiece::Day(width) => write!(out, "{:0width$}", time.day()),
            FormatPiece::Hour(width) => write!(out, "{:0width$}", time.hour()),
            FormatPiece::Minute(width) => write!(out, "{:0width$}", time.minute()),
            FormatPiece::Second(width) => write!(out, "{:0width$}", time.second()),
            FormatPiece::Millisecond => write!(out, "{:03}", millis.rem_euclid(SECOND)),
        };
        written.ok()?;
    }
    Some(())
}

/// Reads `text` as `pieces` say (the inverse of [`write_format`]), as UTC epoch milliseconds.
///
/// A numeric field followed directly by another takes exactly its letters' count of digits
/// (`yyyyMMdd`); otherwise it takes up to that many, and at least two (four for a year), so
/// `d` reads `7` and `14`. Month names (`MMM`, `MMMM`) are English, any case. Fields the
/// pattern lacks are those of 1970-01-01 00:00:00.000. Text after the pattern is an error when
/// `whole`, and ignored otherwise (as Java's `SimpleDateFormat.parse` ignores it). `yy` is
/// refused by [`parse_pattern`]: Java reads it relative to the current date, which a replayed
/// job must not depend on.
pub(crate) fn parse_with_format(pieces: &[FormatPiece], text: &str, whole: bool) -> Option<i64> {
    let (mut year, mut month, mut day) = (1970i32, 1u32, 1u32);
    let (mut hour, mut minute, mut second, mut milli) = (0u32, 0u32, 0u32, 0u32);
    let mut rest = text;
    for (i, piece) in pieces.iter().enumerate() {
        let next_numeric = pieces
            .get(i + 1)
            .is_some_and(|next| !matches!(next, FormatPiece::Text(_) | FormatPiece::Month(3..)));
        let mut number = |width: usize, least: usize| -> Option<u32> {
            let limit = if next_numeric {
                width
            } else {
                width.max(least)
            };
            let digits = rest
                .bytes()
                .take(limit)
                .take_while(u8::is_ascii_digit)
                .count();
            if digits == 0 || (next_numeric && digits < width) {
                return None;
            }
            let value = rest[..digits].parse().ok()?;
            rest = &rest[digits..];
            Some(value)
        };
        match piece {
            FormatPiece::Text(expected) => rest = rest.strip_prefix(expected.as_str())?,
            FormatPiece::Year(width) => year = i32::try_from(number(*width, 4)?).ok()?,
            FormatPiece::Month(width @ (1 | 2)) => month = number(*width, 2)?,
            FormatPiece::Month(width) => {
                let (index, length) = MONTHS.iter().enumerate().find_map(|(index, name)| {
                    let name = if *width == 3 { &name[..3] } else { name };
                    let head = rest.get(..name.len())?;
                    head.eq_ignore_ascii_case(name)
                        .then_some((index, name.len()))
                })?;
                month = u32::try_from(index).ok()? + 1;
                rest = &rest[length..];
            }
            FormatPiece::Day(width) => day = number(*width, 2)?,
            FormatPiece::Hour(width) => hour = number(*width, 2)?,
            FormatPiece::Minute(width) => minute = number(*width, 2)?,
            FormatPiece::Second(width) => second = number(*width, 2)?,
            FormatPiece::Millisecond => milli = number(3, 3)?,
        }
    }
    if whole && !rest.is_empty() {
        return None;
    }
    let time = NaiveDate::from_ymd_opt(year, month, day)?
        .and_hms_milli_opt(hour, minute, second, milli)?;
    Some(time.and_utc().timestamp_millis())
}

/// A constant pattern for reading text (`to_timestamp`, `unix_timestamp`): as
/// [`parse_format`], less `yy` (see [`parse_with_format`]).
pub(crate) fn parse_pattern(pattern: &str) -> Result<Vec<FormatPiece>, String> {
    let pieces = parse_format(pattern)?;
    if pieces.contains(&FormatPiece::Year(2)) {
        return Err(format!(
            "'yy' in '{pattern}' is not supported for reading: Java reads it relative to \
             today's date; write yyyy"
        ));
    }
    Ok(pieces)
}

/// `date_format(ts, 'yyyy-MM-dd HH:mm')` → STRING: the timestamp (UTC) written as the pattern
/// says (see [`parse_format`]); NULL for a NULL timestamp or pattern. The pattern must be a
/// constant: it is read once, here, and a letter weir does not format is a plan-time error.
pub(crate) fn date_format(
    input: Node,
    pattern: Option<&str>,
    origin: &Origin,
) -> Result<Node, ExprError> {
    let input = timestamp_operand(input, "date_format", origin)?;
    let Some(pattern) = pattern else {
        return Ok(Node::literal(
            Literal::null(SqlType::String),
            SqlType::String,
            origin.sql.clone(),
        ));
    };
    let pieces =
        parse_format(pattern).map_err(|e| origin.type_error(format!("date_format: {e}")))?;
    Ok(Node::op(
        SqlType::String,
        origin.sql.clone(),
        DateFormatOp { input, pieces },
    ))
}

#[derive(Debug)]
struct DateFormatOp {
    input: Node,
    pieces: Vec<FormatPiece>,
}

impl Operator for DateFormatOp {
    fn eval(&self, batch: &RecordBatch, sql: &str) -> Result<Value, EvalError> {
        self.input.eval(batch)?.map(|array| {
            let timestamps = primitive::<TimestampMillisecondType>(array, sql)?;
            let mut builder = StringBuilder::with_capacity(timestamps.len(), timestamps.len() * 16);
            let mut scratch = String::new();
            for millis in timestamps {
                scratch.clear();
                match millis.and_then(|millis| write_format(&mut scratch, &self.pieces, millis)) {
                    Some(()) => builder.append_value(&scratch),
                    None => builder.append_null(),
                }
            }
            Ok(Arc::new(builder.finish()) as ArrayRef)
        })
    }

    fn children(&self) -> Vec<&Node> {
        vec![&self.input]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn formatted(pattern: &str, millis: i64) -> String {
        let pieces = parse_format(pattern).expect("a supported pattern");
        let mut out = String::new();
        write_format(&mut out, &pieces, millis).expect("a time in range");
        out
    }

    #[test]
    fn date_format_writes_each_field_padded() {
        // 2023-11-14 22:13:20.123 UTC, and 1970-01-01 00:00:00.
        let t = 1_700_000_000_123;
        assert_eq!(formatted("yyyy-MM-dd", t), "2023-11-14");
        assert_eq!(formatted("HH:mm", t), "22:13");
        assert_eq!(
            formatted("yyyy-MM-dd HH:mm:ss.SSS", t),
            "2023-11-14 22:13:20.123"
        );
        assert_eq!(
            formatted("yyyy-MM-dd HH:mm:ss.SSS", 0),
            "1970-01-01 00:00:00.000"
        );
        assert_eq!(formatted("yy/M/d H:m:s", 5_000), "70/1/1 0:0:5");
        assert_eq!(formatted("dd MMM yyyy, MMMM", t), "14 Nov 2023, November");
        assert_eq!(formatted("yyyyy", t), "02023");
        // Before the epoch: the day before, 23:59:59.999.
        assert_eq!(
            formatted("yyyy-MM-dd HH:mm:ss.SSS", -1),
            "1969-12-31 23:59:59.999"
        );
    }

    #[test]
    fn date_format_copies_quoted_text_and_other_characters() {
        let t = 1_700_000_000_123;
        assert_eq!(formatted("yyyy-MM-dd'T'HH:mm", t), "2023-11-14T22:13");
        assert_eq!(formatted("'day' dd 'of' MM", t), "day 14 of 11");
        assert_eq!(formatted("HH 'o''clock' ''", t), "22 o'clock '");
        assert_eq!(formatted("[HH]", t), "[22]");
        assert_eq!(formatted("", t), "");
    }

    #[test]
    fn date_format_refuses_letters_it_does_not_format() {
        for (pattern, letters) in [
            ("yyyy-MM-dd E", "'E'"),
            ("hh:mm a", "'hh'"),
            ("ss.S", "'S'"),
            ("ddd", "'ddd'"),
            ("YYYY", "'YYYY'"),
        ] {
            let message = parse_format(pattern).expect_err(pattern);
            assert!(message.contains(letters), "{pattern}: {message}");
            assert!(message.contains("supported: yyyy"), "{pattern}: {message}");
        }
        assert!(
            parse_format("'open")
                .expect_err("open quote")
                .contains("not closed")
        );
    }

    #[test]
    fn interval_text_accepts_several_amounts_and_units() {
        assert_eq!(parse_interval_text("2 seconds"), Ok(2_000));
        assert_eq!(parse_interval_text("1 hour 30 minutes"), Ok(90 * MINUTE));
        assert_eq!(parse_interval_text("1.5s"), Ok(1_500));
        assert_eq!(parse_interval_text("250 ms"), Ok(250));
        assert!(parse_interval_text("1 month").is_err());
        assert!(parse_interval_text("10").is_err());
        assert!(parse_interval_text("0.0001 s").is_err());
    }
}
