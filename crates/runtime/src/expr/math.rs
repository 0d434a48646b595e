//! Numeric functions: `abs`, `round`, `truncate`, `sign`, `floor`, `ceil`/`ceiling`, and Flink's
//! FLOAT functions (`power`, `sqrt`, `exp`, `ln`, `log`, `log10`, `log2`, trigonometry, `pi()`,
//! `e()`), `bin` and `hex`.
//!
//! INT arguments of `abs`, `round`, `truncate`, `sign`, `floor` and `ceil` give INT results
//! (`floor` and `ceil` return them unchanged, `abs` and `round` with negative digits are checked
//! for overflow); FLOAT arguments give FLOAT results. `round` rounds half away from zero,
//! `truncate` toward zero. The FLOAT functions return FLOAT for INT arguments too, and follow
//! Java's `Math` as Flink does: a value outside the domain gives NaN or an infinity, not an
//! error (`sqrt(-1)` is NaN, `ln(0)` is -Infinity).

use std::fmt::Write as _;
use std::sync::Arc;

use arrow_array::types::{Float64Type, Int64Type};
use arrow_array::{ArrayRef, Float64Array, Int64Array, RecordBatch};
use arrow_schema::ArrowError;
use sqlparser::ast::{CeilFloorKind, DateTimeField};

use super::calendar;
use super::cast;
use super::compile::Origin;
use super::error::{EvalError, ExprError};
use super::functions::Call;
use super::node::{Node, Operator};
use super::rowwise::{self, Datum, Out, Plain};
use super::types::{Literal, SqlType, Value, primitive};

/// Accepts an INT, FLOAT or NULL operand (NULL becomes a FLOAT NULL).
fn numeric_operand(input: Node, function: &str, origin: &Origin) -> Result<Node, ExprError> {
    match input.ty {
        SqlType::Int | SqlType::Float => Ok(input),
        SqlType::Null => Ok(cast::implicit(input, SqlType::Float)),
        other => Err(origin.type_error(format!(
            "{function} needs an INT or FLOAT, but `{}` is {other}",
            input.sql
        ))),
    }
}

/// `CEIL(x)` (`ceil == true`) or `FLOOR(x)`.
pub(crate) fn ceil_floor(
    input: Node,
    field: &CeilFloorKind,
    ceil: bool,
    origin: &Origin,
) -> Result<Node, ExprError> {
    let name = if ceil { "ceil" } else { "floor" };
    match field {
        CeilFloorKind::DateTimeField(DateTimeField::NoDateTime) => {}
        CeilFloorKind::DateTimeField(unit) => {
            return calendar::floor_ceil(input, unit, ceil, origin);
        }
        CeilFloorKind::Scale(_) => {
            return Err(origin.unsupported(format!(
                "{name} takes one number, or a TIMESTAMP and a unit: {name}(ts TO MINUTE); \
                 to round to decimals use round(x, digits) or truncate(x, digits)"
            )));
        }
    }
    let input = numeric_operand(input, name, origin)?;
    if input.ty == SqlType::Int {
        return Ok(input);
    }
    let func = if ceil { FloatFn::Ceil } else { FloatFn::Floor };
    Ok(float_fn(input, func, origin))
}

/// `abs(x)`.
pub(crate) fn abs(input: Node, origin: &Origin) -> Result<Node, ExprError> {
    let input = numeric_operand(input, "abs", origin)?;
    if input.ty == SqlType::Int {
        return Ok(Node::op(
            SqlType::Int,
            origin.sql.clone(),
            IntFnOp {
                input,
                func: IntFn::Abs,
            },
        ));
    }
    Ok(float_fn(input, FloatFn::Abs, origin))
}

/// `round(x[, digits])` with constant `digits` (negative digits round left of the point).
pub(crate) fn round(input: Node, digits: i64, origin: &Origin) -> Result<Node, ExprError> {
    to_digits(input, digits, true, origin)
}

/// `truncate(x[, digits])` with constant `digits`: toward zero, Flink's `TRUNCATE`.
pub(crate) fn truncate(input: Node, digits: i64, origin: &Origin) -> Result<Node, ExprError> {
    to_digits(input, digits, false, origin)
}

/// [`round`] (`round == true`) or [`truncate`].
fn to_digits(input: Node, digits: i64, round: bool, origin: &Origin) -> Result<Node, ExprError> {
    let input = numeric_operand(input, if round { "round" } else { "truncate" }, origin)?;
    let digits = i32::try_from(digits.clamp(-400, 400)).unwrap_or(0);
    if input.ty == SqlType::Int {
        if digits >= 0 {
            return Ok(input);
        }
        let factor = 10_i128.pow(digits.unsigned_abs().min(38));
        let func = if round {
            IntFn::RoundTo(factor)
        } else {
            IntFn::TruncateTo(factor)
        };
        return Ok(Node::op(
            SqlType::Int,
            origin.sql.clone(),
            IntFnOp { input, func },
        ));
    }
    let func = if round {
        FloatFn::Round(digits)
    } else {
        FloatFn::Truncate(digits)
    };
    Ok(float_fn(input, func, origin))
}

/// `sign(x)`: INT for INT, FLOAT for FLOAT.
pub(crate) fn sign(input: Node, origin: &Origin) -> Result<Node, ExprError> {
    let input = numeric_operand(input, "sign", origin)?;
    if input.ty == SqlType::Int {
        return Ok(Node::op(
            SqlType::Int,
            origin.sql.clone(),
            IntFnOp {
                input,
                func: IntFn::Sign,
            },
        ));
    }
    Ok(float_fn(input, FloatFn::Sign, origin))
}

/// A one-argument FLOAT function (`sqrt`, `ln`, `sin`, ...): INT arguments are widened.
pub(crate) fn float_function(
    input: Node,
    func: FloatFn,
    name: &str,
    origin: &Origin,
) -> Result<Node, ExprError> {
    let input = numeric_operand(input, name, origin)?;
    Ok(float_fn(
        cast::implicit(input, SqlType::Float),
        func,
        origin,
    ))
}

/// A two-argument FLOAT function of Flink: `power(base, exponent)`, `atan2(y, x)`,
/// `log(base, x)`.
pub(crate) fn float_binary(
    name: &str,
    left: Node,
    right: Node,
    origin: &Origin,
) -> Result<Node, ExprError> {
    let function: Plain = match name {
        "power" => |args, _| Ok(float2(args, f64::powf)),
        "atan2" => |args, _| Ok(float2(args, f64::atan2)),
        _ => |args, _| Ok(float2(args, |base, x| x.ln() / base.ln())),
    };
    let args = [left, right]
        .into_iter()
        .map(|arg| {
            numeric_operand(arg, name, origin).map(|arg| cast::implicit(arg, SqlType::Float))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(rowwise::plain(
        args,
        SqlType::Float,
        rowwise::STRICT,
        function,
        origin,
    ))
}

fn float2<'a>(args: &[Datum<'a>], f: impl Fn(f64, f64) -> f64) -> Out<'a> {
    match (args[0].float(), args[1].float()) {
        (Some(a), Some(b)) => Out::Float(f(a, b)),
        _ => Out::Null,
    }
}

/// `bin(x)`: the INT in binary, as Java's `Long.toBinaryString` (two's complement for negative
/// values); `hex(x)`: an INT in hexadecimal (`Long.toHexString`) or a STRING's UTF-8 bytes, in
/// upper case as Flink prints them.
pub(crate) fn bin_hex(input: Node, hex: bool, origin: &Origin) -> Result<Node, ExprError> {
    let name = if hex { "hex" } else { "bin" };
    let input = match input.ty {
        SqlType::Int | SqlType::Null => cast::implicit(input, SqlType::Int),
        SqlType::String if hex => input,
        other => {
            return Err(origin.type_error(format!(
                "{name} needs an INT{}, but `{}` is {other}",
                if hex { " or a STRING" } else { "" },
                input.sql
            )));
        }
    };
    let function: Plain = match (hex, input.ty) {
        (false, _) => |args, scratch| {
            let value = args[0].int().unwrap_or_default();
            write!(scratch, "{:b}", value as u64).map_err(|e| e.to_string())?;
            Ok(Out::Written)
        },
        (true, SqlType::Int) => |args, scratch| {
            let value = args[0].int().unwrap_or_default();
            write!(scratch, "{:X}", value as u64).map_err(|e| e.to_string())?;
            Ok(Out::Written)
        },
        (true, _) => |args, scratch| {
            let text = args[0].str().unwrap_or_default();
            rowwise::check_size(text.len().saturating_mul(2))?;
            for byte in text.bytes() {
                write!(scratch, "{byte:02X}").map_err(|e| e.to_string())?;
            }
            Ok(Out::Written)
        },
    };
    let can_fail = input.ty == SqlType::String;
    let traits = if can_fail {
        rowwise::STRICT_FALLIBLE
    } else {
        rowwise::STRICT
    };
    Ok(rowwise::plain(
        vec![input],
        SqlType::String,
        traits,
        function,
        origin,
    ))
}

/// The numeric functions of Flink that `functions` dispatches here.
/// `Ok(None)` for a name that is not one of them.
pub(crate) fn compile(call: &Call<'_>) -> Result<Option<Node>, ExprError> {
    let origin = call.origin;
    let name = call.name;
    let node = match name {
        "truncate" => {
            call.arity(1, Some(2))?;
            match call.args.get(1) {
                Some(_) => match call.constant_int(1, "truncate's digits")? {
                    Some(digits) => truncate(call.value(0)?, digits, origin),
                    None => Ok(call.null(SqlType::Float)),
                },
                None => truncate(call.value(0)?, 0, origin),
            }
        }
        "sign" => {
            call.arity(1, Some(1))?;
            sign(call.value(0)?, origin)
        }
        "power" | "atan2" => {
            call.arity(2, Some(2))?;
            float_binary(name, call.value(0)?, call.value(1)?, origin)
        }
        "log" if call.args.len() == 2 => {
            float_binary("log", call.value(0)?, call.value(1)?, origin)
        }
        "pi" | "e" => {
            call.arity(0, Some(0))?;
            let value = if name == "pi" {
                std::f64::consts::PI
            } else {
                std::f64::consts::E
            };
            Ok(Node::literal(
                Literal::float(value, None),
                SqlType::Float,
                origin.sql.clone(),
            ))
        }
        "bin" | "hex" => {
            call.arity(1, Some(1))?;
            bin_hex(call.value(0)?, name == "hex", origin)
        }
        _ => {
            let Some(func) = FloatFn::named(name) else {
                return Ok(None);
            };
            call.arity(1, Some(if name == "log" { 2 } else { 1 }))?;
            float_function(call.value(0)?, func, name, origin)
        }
    };
    node.map(Some)
}

fn float_fn(input: Node, func: FloatFn, origin: &Origin) -> Node {
    Node::op(
        SqlType::Float,
        origin.sql.clone(),
        FloatFnOp { input, func },
    )
}

#[derive(Debug, Clone, Copy)]
pub(crate) enum FloatFn {
    Floor,
    Ceil,
    Abs,
    /// Round to this many decimal digits (negative: tens, hundreds, ...).
    Round(i32),
    /// Truncate toward zero to this many decimal digits.
    Truncate(i32),
    /// Java's `Math.signum`: -1.0, 0.0 (keeping its sign), 1.0, or NaN.
    Sign,
    Sqrt,
    Exp,
    Ln,
    Log10,
    Log2,
    Sin,
    Cos,
    Tan,
    Cot,
    Asin,
    Acos,
    Atan,
    Sinh,
    Cosh,
    Tanh,
    Degrees,
    Radians,
}

impl FloatFn {
    /// The function of a one-argument FLOAT function name.
    pub(crate) fn named(name: &str) -> Option<Self> {
        Some(match name {
            "sqrt" => Self::Sqrt,
            "exp" => Self::Exp,
            "ln" | "log" => Self::Ln,
            "log10" => Self::Log10,
            "log2" => Self::Log2,
            "sin" => Self::Sin,
            "cos" => Self::Cos,
            "tan" => Self::Tan,
            "cot" => Self::Cot,
            "asin" => Self::Asin,
            "acos" => Self::Acos,
            "atan" => Self::Atan,
            "sinh" => Self::Sinh,
            "cosh" => Self::Cosh,
            "tanh" => Self::Tanh,
            "degrees" => Self::Degrees,
            "radians" => Self::Radians,
            _ => return None,
        })
    }

    /// Applies the function to one value; decimal rounding and truncation (`Round` and
    /// `Truncate` with digits) go through [`to_decimals`] instead, which needs a scratch
    /// buffer.
    fn apply(self, x: f64) -> f64 {
        match self {
            Self::Floor => x.floor(),
            Self::Ceil => x.ceil(),
            Self::Abs => x.abs(),
            Self::Round(_) => x.round(),
            Self::Truncate(_) => x.trunc(),
            Self::Sign => {
                if x == 0.0 || x.is_nan() {
                    x
                } else {
                    x.signum()
                }
            }
            Self::Sqrt => x.sqrt(),
            Self::Exp => x.exp(),
            Self::Ln => x.ln(),
            Self::Log10 => x.log10(),
            Self::Log2 => x.log2(),
            Self::Sin => x.sin(),
            Self::Cos => x.cos(),
            Self::Tan => x.tan(),
            Self::Cot => 1.0 / x.tan(),
            Self::Asin => x.asin(),
            Self::Acos => x.acos(),
            Self::Atan => x.atan(),
            Self::Sinh => x.sinh(),
            Self::Cosh => x.cosh(),
            Self::Tanh => x.tanh(),
            Self::Degrees => x.to_degrees(),
            Self::Radians => x.to_radians(),
        }
    }
}

/// Rounds `x` to `digits` decimals (half away from zero; `round == false`: toward zero) as its
/// shortest decimal form reads.
///
/// Scaling by `10^digits` in binary would round `2.345` (stored as 2.34499999…) down to `2.34`;
/// reading the shortest representation that round-trips (`2.345`) rounds it to `2.35`, which is
/// what a user who sees `2.345` expects. The rounded decimal is parsed back, which is correctly
/// rounded, so the result is the `f64` closest to the rounded decimal. Truncation reads the same
/// form, as Flink's `TRUNCATE` does through `BigDecimal.valueOf`: `truncate(42.324, 2)` is 42.32
/// even though 42.324 is stored as 42.323999….
fn to_decimals(x: f64, digits: i32, round: bool, scratch: &mut String) -> f64 {
    if !x.is_finite() || x == 0.0 {
        return x;
    }
    scratch.clear();
    // Shortest round-trip form in scientific notation: "2.345e0", "1e-7", "1.2345e21".
    if write!(scratch, "{:e}", x.abs()).is_err() {
        return x;
    }
    let Some((mantissa, exponent)) = scratch.split_once('e') else {
        return x;
    };
    let Ok(exponent) = exponent.parse::<i32>() else {
        return x;
    };
    let significant: Vec<u8> = mantissa.bytes().filter(u8::is_ascii_digit).collect();
    // How many significant digits survive rounding to `digits` decimals.
    let keep = exponent.saturating_add(1).saturating_add(digits);
    let Ok(keep) = usize::try_from(keep) else {
        return 0.0;
    };
    if keep >= significant.len() {
        return x;
    }
    let mut rounded: u64 = significant[..keep]
        .iter()
        .fold(0, |acc, d| acc * 10 + u64::from(d - b'0'));
    if round && significant[keep] >= b'5' {
        rounded += 1;
    }
    if rounded == 0 {
        return 0.0;
    }
    // rounded × 10^(exponent + 1 − keep) = rounded × 10^(−digits)
    scratch.clear();
    if write!(scratch, "{rounded}e{}", -i64::from(digits)).is_err() {
        return x;
    }
    let magnitude = scratch.parse::<f64>().unwrap_or(x.abs());
    if x < 0.0 { -magnitude } else { magnitude }
}

#[derive(Debug)]
struct FloatFnOp {
    input: Node,
    func: FloatFn,
}

impl Operator for FloatFnOp {
    fn eval(&self, batch: &RecordBatch, sql: &str) -> Result<Value, EvalError> {
        let func = self.func;
        self.input.eval(batch)?.map(|array| {
            let input = primitive::<Float64Type>(array, sql)?;
            let result: Float64Array = match func {
                FloatFn::Round(digits) | FloatFn::Truncate(digits) if digits != 0 => {
                    let round = matches!(func, FloatFn::Round(_));
                    let mut scratch = String::with_capacity(32);
                    input
                        .iter()
                        .map(|x| x.map(|x| to_decimals(x, digits, round, &mut scratch)))
                        .collect()
                }
                _ => input.unary(|x| func.apply(x)),
            };
            Ok(Arc::new(result) as ArrayRef)
        })
    }

    fn children(&self) -> Vec<&Node> {
        vec![&self.input]
    }
}

#[derive(Debug, Clone, Copy)]
enum IntFn {
    /// `abs`: fails on -9223372036854775808.
    Abs,
    /// `round(x, -k)` with the factor `10^k`: half away from zero, checked.
    RoundTo(i128),
    /// `truncate(x, -k)` with the factor `10^k`: toward zero (cannot overflow).
    TruncateTo(i128),
    /// -1, 0 or 1.
    Sign,
}

impl IntFn {
    fn apply(self, x: i64) -> Option<i64> {
        match self {
            Self::Abs => x.checked_abs(),
            Self::Sign => Some(x.signum()),
            Self::TruncateTo(factor) => {
                let x = i128::from(x);
                i64::try_from(x - x % factor).ok()
            }
            Self::RoundTo(factor) => {
                let x = i128::from(x);
                let (quotient, remainder) = (x / factor, x % factor);
                let rounded = if remainder.abs() * 2 >= factor {
                    quotient + remainder.signum()
                } else {
                    quotient
                };
                i64::try_from(rounded * factor).ok()
            }
        }
    }
}

#[derive(Debug)]
struct IntFnOp {
    input: Node,
    func: IntFn,
}

impl Operator for IntFnOp {
    fn eval(&self, batch: &RecordBatch, sql: &str) -> Result<Value, EvalError> {
        let func = self.func;
        self.input.eval(batch)?.map(|array| {
            let result: Int64Array = primitive::<Int64Type>(array, sql)?
                .try_unary(|x| {
                    func.apply(x)
                        .ok_or_else(|| ArrowError::ArithmeticOverflow(format!("{x} in {func:?}")))
                })
                .map_err(|e| EvalError::from_arrow(sql, e))?;
            Ok(Arc::new(result) as ArrayRef)
        })
    }

    fn children(&self) -> Vec<&Node> {
        vec![&self.input]
    }

    fn can_fail(&self) -> bool {
        matches!(self.func, IntFn::Abs | IntFn::RoundTo(_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_rounding_is_half_away_from_zero() {
        let tens = IntFn::RoundTo(10);
        assert_eq!(tens.apply(15), Some(20));
        assert_eq!(tens.apply(14), Some(10));
        assert_eq!(tens.apply(-15), Some(-20));
        assert_eq!(tens.apply(-14), Some(-10));
        assert_eq!(IntFn::RoundTo(10_i128.pow(19)).apply(i64::MAX), None);
        assert_eq!(IntFn::RoundTo(10_i128.pow(38)).apply(123), Some(0));
        assert_eq!(IntFn::Abs.apply(i64::MIN), None);
    }

    #[test]
    fn decimal_rounding_reads_the_shortest_representation() {
        let mut scratch = String::new();
        let mut round = |x: f64, digits| to_decimals(x, digits, true, &mut scratch);
        assert_eq!(round(2.345, 2), 2.35);
        assert_eq!(round(-2.345, 2), -2.35);
        assert_eq!(round(1.005, 2), 1.01);
        assert_eq!(round(4146.8364, 3), 4146.836);
        assert_eq!(round(15.0, -1), 20.0);
        assert_eq!(round(149.0, -2), 100.0);
        assert_eq!(round(0.004, 2), 0.0);
        assert_eq!(round(1.5, 400), 1.5);
        assert_eq!(round(1.5, -400), 0.0);
        assert_eq!(round(9.995, 2), 10.0);
        assert_eq!(round(1e300, 2), 1e300);
    }
}
