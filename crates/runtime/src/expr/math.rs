//! Numeric functions: `abs`, `round`, `floor`, `ceil`/`ceiling`.
//!
//! INT arguments give INT results (`floor` and `ceil` return them unchanged, `abs` and `round`
//! with negative digits are checked for overflow); FLOAT arguments give FLOAT results. `round`
//! rounds half away from zero.

use std::fmt::Write as _;
use std::sync::Arc;

use arrow_array::types::{Float64Type, Int64Type};
use arrow_array::{ArrayRef, Float64Array, Int64Array, RecordBatch};
use arrow_schema::ArrowError;
use sqlparser::ast::{CeilFloorKind, DateTimeField};

use super::cast;
use super::compile::Origin;
use super::error::{EvalError, ExprError};
use super::node::{Node, Operator};
use super::types::{SqlType, Value, primitive};

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
    if !matches!(
        field,
        CeilFloorKind::DateTimeField(DateTimeField::NoDateTime)
    ) {
        return Err(origin.unsupported(format!(
            "{name} takes one number; to round a TIMESTAMP use date_trunc('unit', ts)"
        )));
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
    let input = numeric_operand(input, "round", origin)?;
    let digits = i32::try_from(digits.clamp(-400, 400)).unwrap_or(0);
    if input.ty == SqlType::Int {
        if digits >= 0 {
            return Ok(input);
        }
        let factor = 10_i128.pow(digits.unsigned_abs().min(38));
        return Ok(Node::op(
            SqlType::Int,
            origin.sql.clone(),
            IntFnOp {
                input,
                func: IntFn::RoundTo(factor),
            },
        ));
    }
    Ok(float_fn(input, FloatFn::Round(digits), origin))
}

fn float_fn(input: Node, func: FloatFn, origin: &Origin) -> Node {
    Node::op(
        SqlType::Float,
        origin.sql.clone(),
        FloatFnOp { input, func },
    )
}

#[derive(Debug, Clone, Copy)]
enum FloatFn {
    Floor,
    Ceil,
    Abs,
    /// Round to this many decimal digits (negative: tens, hundreds, ...).
    Round(i32),
}

impl FloatFn {
    /// Applies the function to one value; decimal rounding (`Round` with digits) goes through
    /// [`round_decimal`] instead, which needs a scratch buffer.
    fn apply(self, x: f64) -> f64 {
        match self {
            Self::Floor => x.floor(),
            Self::Ceil => x.ceil(),
            Self::Abs => x.abs(),
            Self::Round(_) => x.round(),
        }
    }
}

/// Rounds `x` to `digits` decimals (half away from zero) as its shortest decimal form reads.
///
/// Scaling by `10^digits` in binary would round `2.345` (stored as 2.34499999…) down to `2.34`;
/// reading the shortest representation that round-trips (`2.345`) rounds it to `2.35`, which is
/// what a user who sees `2.345` expects. The rounded decimal is parsed back, which is correctly
/// rounded, so the result is the `f64` closest to the rounded decimal.
fn round_decimal(x: f64, digits: i32, scratch: &mut String) -> f64 {
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
    if significant[keep] >= b'5' {
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
                FloatFn::Round(digits) if digits != 0 => {
                    let mut scratch = String::with_capacity(32);
                    input
                        .iter()
                        .map(|x| x.map(|x| round_decimal(x, digits, &mut scratch)))
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
}

impl IntFn {
    fn apply(self, x: i64) -> Option<i64> {
        match self {
            Self::Abs => x.checked_abs(),
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
        true
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
        let mut round = |x: f64, digits| round_decimal(x, digits, &mut scratch);
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
