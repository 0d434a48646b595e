//! Flink's temporal functions on weir's TIMESTAMP: `to_timestamp_ltz`, `to_timestamp`,
//! `from_unixtime`, `unix_timestamp`, `timestampadd`, `timestampdiff`, `FLOOR/CEIL(ts TO unit)`,
//! and the field functions `year`, `quarter`, `month`, `week`, `dayofyear`, `dayofmonth`,
//! `dayofweek`.
//!
//! weir has one timestamp type, UTC without a zone: Flink's `TIMESTAMP_LTZ` results are read as
//! UTC (Flink with `table.local-time-zone` set to `UTC` gives the same text and numbers), and the
//! texts `from_unixtime`, `to_timestamp` and `unix_timestamp` write and read are UTC. Months,
//! quarters and years are calendar units: adding a month to January 31st gives the last day of
//! February, as in Flink.

use chrono::{DateTime, Datelike, Months, NaiveDateTime};
use sqlparser::ast::{self, DateTimeField};

use super::cast;
use super::compile::Origin;
use super::error::ExprError;
use super::functions::{Call, usage};
use super::node::Node;
use super::rowwise::{self, Datum, Out, Plain, RowFunction};
use super::strings::string_operand;
use super::temporal::{self, FormatPiece};
use super::types::SqlType;

const SECOND: i64 = 1_000;
const MINUTE: i64 = 60 * SECOND;
const HOUR: i64 = 60 * MINUTE;
const DAY: i64 = 24 * HOUR;
const WEEK: i64 = 7 * DAY;

/// Flink's default pattern for reading and writing timestamps as text.
const DEFAULT_PATTERN: &str = "yyyy-MM-dd HH:mm:ss";

/// A unit of `timestampadd`, `timestampdiff` and `FLOOR/CEIL(... TO unit)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unit {
    /// A fixed number of milliseconds.
    Fixed(i64),
    /// A number of calendar months (1, 3 for a quarter, 12 for a year).
    Months(u32),
}

const UNITS: &str = "MILLISECOND, SECOND, MINUTE, HOUR, DAY, WEEK, MONTH, QUARTER, YEAR";

fn unit_named(name: &str) -> Option<Unit> {
    Some(match name.to_ascii_uppercase().as_str() {
        "MILLISECOND" | "FRAC_SECOND" => Unit::Fixed(1),
        "SECOND" | "SQL_TSI_SECOND" => Unit::Fixed(SECOND),
        "MINUTE" | "SQL_TSI_MINUTE" => Unit::Fixed(MINUTE),
        "HOUR" | "SQL_TSI_HOUR" => Unit::Fixed(HOUR),
        "DAY" | "SQL_TSI_DAY" => Unit::Fixed(DAY),
        "WEEK" | "SQL_TSI_WEEK" => Unit::Fixed(WEEK),
        "MONTH" | "SQL_TSI_MONTH" => Unit::Months(1),
        "QUARTER" | "SQL_TSI_QUARTER" => Unit::Months(3),
        "YEAR" | "SQL_TSI_YEAR" => Unit::Months(12),
        _ => return None,
    })
}

/// The unit a call names as its first argument: a bare word (`MINUTE`) or a string.
fn unit_argument(call: &Call<'_>) -> Result<Unit, ExprError> {
    let name = match call.args[0] {
        ast::Expr::Identifier(ident) => Some(ident.value.clone()),
        ast::Expr::Value(value) => match &value.value {
            ast::Value::SingleQuotedString(text) => Some(text.clone()),
            _ => None,
        },
        _ => None,
    };
    name.as_deref().and_then(unit_named).ok_or_else(|| {
        call.origin.type_error(format!(
            "{}'s unit must be one of {UNITS}, not `{}`: {}",
            call.name,
            call.args[0],
            usage(call.name)
        ))
    })
}

/// `t` plus `n` units; `None` out of range.
fn add(t: i64, unit: Unit, n: i64) -> Option<i64> {
    match unit {
        Unit::Fixed(step) => t.checked_add(n.checked_mul(step)?),
        Unit::Months(months) => {
            let time = DateTime::from_timestamp_millis(t)?.naive_utc();
            let months = n.checked_mul(i64::from(months))?;
            let amount = Months::new(u32::try_from(months.unsigned_abs()).ok()?);
            let moved = if months >= 0 {
                time.checked_add_months(amount)?
            } else {
                time.checked_sub_months(amount)?
            };
            Some(moved.and_utc().timestamp_millis())
        }
    }
}

/// Whole units from `t1` to `t2`, toward zero; for months, a month counts once the day and time
/// of the month are reached (January 31st to February 28th is 0 months), as in Calcite.
fn diff(unit: Unit, t1: i64, t2: i64) -> Option<i64> {
    match unit {
        Unit::Fixed(step) => Some(t2.checked_sub(t1)? / step),
        Unit::Months(per) => {
            let (a, b) = (naive(t1)?, naive(t2)?);
            let month_index = |t: &NaiveDateTime| i64::from(t.year()) * 12 + i64::from(t.month0());
            let within = |t: &NaiveDateTime| (t.day(), t.time());
            let mut months = month_index(&b) - month_index(&a);
            if months > 0 && within(&b) < within(&a) {
                months -= 1;
            } else if months < 0 && within(&b) > within(&a) {
                months += 1;
            }
            Some(months / i64::from(per))
        }
    }
}

fn naive(millis: i64) -> Option<NaiveDateTime> {
    Some(DateTime::from_timestamp_millis(millis)?.naive_utc())
}

/// `t` rounded down to the unit (UTC; months from the first of the month, quarters from
/// January, April, July, October).
fn floor(t: i64, unit: Unit) -> Option<i64> {
    match unit {
        Unit::Fixed(step) => Some(t - t.rem_euclid(step)),
        Unit::Months(per) => temporal::truncate_calendar(t, |m| (m - 1) / per * per + 1),
    }
}

/// `t` rounded up to the unit: itself when it is on a boundary.
fn ceil(t: i64, unit: Unit) -> Option<i64> {
    let down = floor(t, unit)?;
    if down == t {
        Some(t)
    } else {
        add(down, unit, 1)
    }
}

/// `FLOOR(ts TO unit)` / `CEIL(ts TO unit)`.
pub(crate) fn floor_ceil(
    input: Node,
    field: &DateTimeField,
    up: bool,
    origin: &Origin,
) -> Result<Node, ExprError> {
    let name = if up { "CEIL" } else { "FLOOR" };
    let unit = match field {
        DateTimeField::Week(_) => None,
        DateTimeField::Custom(ident) => unit_named(&ident.value),
        other => unit_named(&other.to_string()),
    };
    let Some(unit) = unit.filter(|unit| *unit != Unit::Fixed(WEEK)) else {
        return Err(origin.unsupported(format!(
            "{name}(ts TO {field}) is not supported; units: MILLISECOND, SECOND, MINUTE, HOUR, \
             DAY, MONTH, QUARTER, YEAR (date_trunc('week', ts) gives the Monday of the week)"
        )));
    };
    let input = temporal::timestamp_operand(input, name, origin)?;
    Ok(rowwise::node(
        vec![input],
        SqlType::Timestamp,
        rowwise::STRICT,
        Rounding { unit, up },
        origin,
    ))
}

#[derive(Debug)]
struct Rounding {
    unit: Unit,
    up: bool,
}

impl RowFunction for Rounding {
    fn call<'a>(&self, args: &[Datum<'a>], _: &mut String) -> Result<Out<'a>, String> {
        let t = args[0].int().unwrap_or_default();
        let rounded = if self.up {
            ceil(t, self.unit)
        } else {
            floor(t, self.unit)
        };
        Ok(rounded.map_or(Out::Null, Out::Timestamp))
    }
}

/// `timestampadd(unit, n, ts)`.
#[derive(Debug)]
struct AddUnits(Unit);

impl RowFunction for AddUnits {
    fn call<'a>(&self, args: &[Datum<'a>], _: &mut String) -> Result<Out<'a>, String> {
        let (n, t) = (
            args[0].int().unwrap_or_default(),
            args[1].int().unwrap_or_default(),
        );
        add(t, self.0, n)
            .map(Out::Timestamp)
            .ok_or_else(|| format!("adding {n} {:?} leaves the range of TIMESTAMP", self.0))
    }
}

/// `timestampdiff(unit, ts1, ts2)`.
#[derive(Debug)]
struct DiffUnits(Unit);

impl RowFunction for DiffUnits {
    fn call<'a>(&self, args: &[Datum<'a>], _: &mut String) -> Result<Out<'a>, String> {
        let (t1, t2) = (
            args[0].int().unwrap_or_default(),
            args[1].int().unwrap_or_default(),
        );
        Ok(diff(self.0, t1, t2).map_or(Out::Null, Out::Int))
    }
}

/// Reads text with a pattern: `to_timestamp` (TIMESTAMP, NULL when the text does not match)
/// or `unix_timestamp` (INT seconds, Flink's `Long.MIN_VALUE` when it does not).
#[derive(Debug)]
struct ReadText {
    /// `None`: what a `TIMESTAMP '...'` literal accepts.
    pieces: Option<Vec<FormatPiece>>,
    seconds: bool,
}

impl RowFunction for ReadText {
    fn call<'a>(&self, args: &[Datum<'a>], _: &mut String) -> Result<Out<'a>, String> {
        let text = args[0].str().unwrap_or_default();
        let millis = match &self.pieces {
            Some(pieces) => temporal::parse_with_format(pieces, text, !self.seconds),
            None => temporal::parse_timestamp(text).ok(),
        };
        Ok(match (millis, self.seconds) {
            (Some(millis), true) => Out::Int(millis.div_euclid(SECOND)),
            (None, true) => Out::Int(i64::MIN),
            (Some(millis), false) => Out::Timestamp(millis),
            (None, false) => Out::Null,
        })
    }
}

/// `from_unixtime(seconds[, pattern])`.
#[derive(Debug)]
struct WriteText(Vec<FormatPiece>);

impl RowFunction for WriteText {
    fn call<'a>(&self, args: &[Datum<'a>], out: &mut String) -> Result<Out<'a>, String> {
        let seconds = args[0].int().unwrap_or_default();
        let written = seconds
            .checked_mul(SECOND)
            .and_then(|millis| temporal::write_format(out, &self.0, millis));
        Ok(written.map_or(Out::Null, |()| Out::Written))
    }
}

/// A constant pattern argument, or Flink's default; `Ok(None)` for a NULL pattern.
fn pattern(
    call: &Call<'_>,
    index: usize,
    read: bool,
) -> Result<Option<Vec<FormatPiece>>, ExprError> {
    let text = match call.args.get(index) {
        Some(_) => match call.constant_str(index, &format!("{}'s pattern", call.name))? {
            Some(text) => text,
            None => return Ok(None),
        },
        None => DEFAULT_PATTERN.to_owned(),
    };
    let parsed = if read {
        temporal::parse_pattern(&text)
    } else {
        temporal::parse_format(&text)
    };
    parsed
        .map(Some)
        .map_err(|e| call.origin.type_error(format!("{}: {e}", call.name)))
}

fn int_or_null(node: Node, what: &str, origin: &Origin) -> Result<Node, ExprError> {
    match node.ty {
        SqlType::Int => Ok(node),
        SqlType::Null => Ok(cast::implicit(node, SqlType::Int)),
        other => Err(origin.type_error(format!(
            "{what} needs an INT, but `{}` is {other}",
            node.sql
        ))),
    }
}

/// The temporal functions of this file; `Ok(None)` for another name.
pub(crate) fn compile(call: &Call<'_>) -> Result<Option<Node>, ExprError> {
    let origin = call.origin;
    let node = match call.name {
        "to_timestamp_ltz" => {
            call.arity(2, Some(2))?;
            let scale = match call.constant_int(1, "to_timestamp_ltz's precision")? {
                Some(0) => SECOND,
                Some(3) => 1,
                None => return Ok(Some(call.null(SqlType::Timestamp))),
                Some(other) => {
                    return Err(origin.type_error(format!(
                        "to_timestamp_ltz's precision must be 0 (epoch seconds) or 3 (epoch \
                         milliseconds), not {other}"
                    )));
                }
            };
            let epoch = call.value(0)?;
            let epoch = match epoch.ty {
                SqlType::Int | SqlType::Float => epoch,
                SqlType::Null => cast::implicit(epoch, SqlType::Int),
                other => {
                    return Err(origin.type_error(format!(
                        "to_timestamp_ltz needs an INT or FLOAT epoch, but `{}` is {other}",
                        epoch.sql
                    )));
                }
            };
            let function: Plain = if scale == SECOND {
                |a, _| epoch_to_timestamp(a[0], SECOND)
            } else {
                |a, _| epoch_to_timestamp(a[0], 1)
            };
            rowwise::plain(
                vec![epoch],
                SqlType::Timestamp,
                rowwise::STRICT_FALLIBLE,
                function,
                origin,
            )
        }
        "to_timestamp" | "unix_timestamp" => {
            call.arity(1, Some(2))?;
            let seconds = call.name == "unix_timestamp";
            let input = call.value(0)?;
            if seconds && call.args.len() == 1 && input.ty == SqlType::Timestamp {
                // unix_timestamp(ts): the timestamp's epoch seconds, rounded down.
                return Ok(Some(rowwise::plain(
                    vec![input],
                    SqlType::Int,
                    rowwise::STRICT,
                    |a, _| Ok(Out::Int(a[0].int().unwrap_or_default().div_euclid(SECOND))),
                    origin,
                )));
            }
            let input = string_operand(input, call.name, origin)?;
            let ty = if seconds {
                SqlType::Int
            } else {
                SqlType::Timestamp
            };
            let pieces = if call.args.len() == 2 {
                match pattern(call, 1, true)? {
                    Some(pieces) => Some(pieces),
                    None => return Ok(Some(call.null(ty))),
                }
            } else if seconds {
                pattern(call, 1, true)?
            } else {
                None
            };
            rowwise::node(
                vec![input],
                ty,
                rowwise::STRICT,
                ReadText { pieces, seconds },
                origin,
            )
        }
        "from_unixtime" => {
            call.arity(1, Some(2))?;
            let Some(pieces) = pattern(call, 1, false)? else {
                return Ok(Some(call.null(SqlType::String)));
            };
            let seconds = int_or_null(call.value(0)?, "from_unixtime", origin)?;
            rowwise::node(
                vec![seconds],
                SqlType::String,
                rowwise::STRICT,
                WriteText(pieces),
                origin,
            )
        }
        "timestampadd" => {
            call.arity(3, Some(3))?;
            let unit = unit_argument(call)?;
            let n = int_or_null(call.value(1)?, "timestampadd's amount", origin)?;
            let t = temporal::timestamp_operand(call.value(2)?, "timestampadd", origin)?;
            rowwise::node(
                vec![n, t],
                SqlType::Timestamp,
                rowwise::STRICT_FALLIBLE,
                AddUnits(unit),
                origin,
            )
        }
        "timestampdiff" => {
            call.arity(3, Some(3))?;
            let unit = unit_argument(call)?;
            let t1 = temporal::timestamp_operand(call.value(1)?, "timestampdiff", origin)?;
            let t2 = temporal::timestamp_operand(call.value(2)?, "timestampdiff", origin)?;
            rowwise::node(
                vec![t1, t2],
                SqlType::Int,
                rowwise::STRICT,
                DiffUnits(unit),
                origin,
            )
        }
        "year" | "quarter" | "month" | "week" | "dayofyear" | "dayofmonth" | "dayofweek" => {
            call.arity(1, Some(1))?;
            let function: Plain = match call.name {
                "year" => |a, _| Ok(field(a[0], |t| i64::from(t.year()))),
                "quarter" => |a, _| Ok(field(a[0], |t| i64::from(t.month0() / 3 + 1))),
                "month" => |a, _| Ok(field(a[0], |t| i64::from(t.month()))),
                "week" => |a, _| Ok(field(a[0], |t| i64::from(t.iso_week().week()))),
                "dayofyear" => |a, _| Ok(field(a[0], |t| i64::from(t.ordinal()))),
                "dayofmonth" => |a, _| Ok(field(a[0], |t| i64::from(t.day()))),
                _ => |a, _| Ok(field(a[0], |t| i64::from(t.weekday().number_from_sunday()))),
            };
            let t = temporal::timestamp_operand(call.value(0)?, call.name, origin)?;
            rowwise::plain(vec![t], SqlType::Int, rowwise::STRICT, function, origin)
        }
        _ => return Ok(None),
    };
    Ok(Some(node))
}

/// A calendar field of a timestamp (UTC).
fn field<'a>(t: Datum<'a>, read: fn(&NaiveDateTime) -> i64) -> Out<'a> {
    t.int()
        .and_then(naive)
        .map_or(Out::Null, |time| Out::Int(read(&time)))
}

/// `to_timestamp_ltz(epoch, precision)`: `scale` milliseconds per unit of `epoch`; a FLOAT epoch
/// keeps its fraction down to the millisecond.
fn epoch_to_timestamp(epoch: Datum<'_>, scale: i64) -> Result<Out<'static>, String> {
    let millis = match epoch {
        Datum::Int(n) => n.checked_mul(scale),
        Datum::Float(x) => {
            let millis = (x * scale as f64).floor();
            // i64::MAX as f64 rounds up to 2^63, which no i64 holds.
            (millis.is_finite() && millis >= i64::MIN as f64 && millis < i64::MAX as f64)
                .then_some(millis as i64)
        }
        _ => None,
    };
    millis
        .filter(|millis| DateTime::from_timestamp_millis(*millis).is_some())
        .map(Out::Timestamp)
        .ok_or_else(|| format!("epoch {epoch:?} is outside the range of TIMESTAMP"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> i64 {
        temporal::parse_timestamp(text).expect("a valid timestamp")
    }

    #[test]
    fn month_arithmetic_clamps_to_the_end_of_the_month() {
        let jan31 = at("2024-01-31 10:00:00");
        assert_eq!(
            add(jan31, Unit::Months(1), 1),
            Some(at("2024-02-29 10:00:00"))
        );
        assert_eq!(
            add(jan31, Unit::Months(12), -1),
            Some(at("2023-01-31 10:00:00"))
        );
        assert_eq!(add(0, Unit::Fixed(DAY), i64::MAX), None);
    }

    #[test]
    fn month_differences_count_whole_months() {
        let jan31 = at("2024-01-31 00:00:00");
        assert_eq!(
            diff(Unit::Months(1), jan31, at("2024-02-29 00:00:00")),
            Some(0)
        );
        assert_eq!(
            diff(Unit::Months(1), jan31, at("2024-03-31 00:00:00")),
            Some(2)
        );
        assert_eq!(
            diff(Unit::Months(1), at("2024-03-31 00:00:00"), jan31),
            Some(-2)
        );
        assert_eq!(
            diff(Unit::Months(12), jan31, at("2025-01-30 00:00:00")),
            Some(0)
        );
        assert_eq!(diff(Unit::Fixed(HOUR), 0, -(90 * MINUTE)), Some(-1));
    }

    #[test]
    fn ceil_keeps_a_boundary_and_rounds_up_otherwise() {
        let t = at("2023-11-14 22:13:20");
        assert_eq!(
            ceil(t, Unit::Fixed(MINUTE)),
            Some(at("2023-11-14 22:14:00"))
        );
        assert_eq!(
            ceil(at("2023-11-14 22:13:00"), Unit::Fixed(MINUTE)),
            Some(at("2023-11-14 22:13:00"))
        );
        assert_eq!(ceil(t, Unit::Months(3)), Some(at("2024-01-01 00:00:00")));
        assert_eq!(floor(t, Unit::Months(12)), Some(at("2023-01-01 00:00:00")));
    }
}
