//! Arithmetic: `+ - * / %`, unary `-`/`+`, timestamp and interval arithmetic, and exact
//! multiplication of integers by decimal literals.
//!
//! | operands                 | result    | evaluation                                        |
//! |--------------------------|-----------|---------------------------------------------------|
//! | INT ∘ INT                | INT       | checked: overflow and `/ 0`, `% 0` fail the job    |
//! | INT/FLOAT ∘ FLOAT        | FLOAT     | IEEE 754 (`x / 0.0` is ±inf or NaN)               |
//! | INT * decimal literal    | FLOAT     | exact, see [`ScaledMulOp`]                        |
//! | TIMESTAMP ± INTERVAL     | TIMESTAMP | checked milliseconds                              |
//! | TIMESTAMP − TIMESTAMP    | INT       | milliseconds between them                         |
//! | INTERVAL ± INTERVAL, INTERVAL * INT, INTERVAL / INT | INTERVAL | constants, folded          |

use std::sync::Arc;

use arrow_arith::numeric;
use arrow_array::types::Int64Type;
use arrow_array::{ArrayRef, Datum, Float64Array, RecordBatch};
use arrow_schema::ArrowError;

use super::cast;
use super::compile::Origin;
use super::error::{EvalError, ExprError};
use super::node::{Node, Operator};
use super::temporal::{millis_as_timestamps, timestamps_as_millis};
use super::types::{Decimal, Literal, SqlType, Value, primitive};

/// A binary arithmetic operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ArithOp {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
}

impl ArithOp {
    fn symbol(self) -> &'static str {
        match self {
            Self::Add => "+",
            Self::Sub => "-",
            Self::Mul => "*",
            Self::Div => "/",
            Self::Rem => "%",
        }
    }

    /// The Arrow kernel: checked for integers (errors on overflow and division by zero),
    /// IEEE 754 for floats.
    fn kernel(self, left: &dyn Datum, right: &dyn Datum) -> Result<ArrayRef, ArrowError> {
        match self {
            Self::Add => numeric::add(left, right),
            Self::Sub => numeric::sub(left, right),
            Self::Mul => numeric::mul(left, right),
            Self::Div => numeric::div(left, right),
            Self::Rem => numeric::rem(left, right),
        }
    }
}

/// Type-checks `left op right` and builds the node.
pub(crate) fn binary(
    op: ArithOp,
    left: Node,
    right: Node,
    origin: &Origin,
) -> Result<Node, ExprError> {
    use SqlType as T;
    let mismatch = mismatch_message(op, left.ty, right.ty);
    // A NULL operand takes whichever type makes the operation valid; the result is NULL anyway.
    let (left, right) = match (left.ty, right.ty) {
        (T::Null, T::Null) => {
            return Ok(Node::literal(
                Literal::null(T::Null),
                T::Null,
                origin.sql.clone(),
            ));
        }
        (T::Null, other) => (cast::implicit(left, null_partner(op, other, true)), right),
        (other, T::Null) => {
            let partner = null_partner(op, other, false);
            (left, cast::implicit(right, partner))
        }
        _ => (left, right),
    };
    let sql = origin.sql.clone();
    match (left.ty, right.ty, op) {
        (T::Int, T::Int, _) => Ok(numeric_node(op, left, right, T::Int, sql)),
        (T::Int, T::Float, ArithOp::Mul) if decimal_of(&right).is_some() => {
            Ok(scaled_mul(left, &right, sql))
        }
        (T::Float, T::Int, ArithOp::Mul) if decimal_of(&left).is_some() => {
            Ok(scaled_mul(right, &left, sql))
        }
        (a, b, _) if a.is_numeric() && b.is_numeric() => {
            let left = cast::implicit(left, T::Float);
            let right = cast::implicit(right, T::Float);
            Ok(numeric_node(op, left, right, T::Float, sql))
        }
        (T::Timestamp, T::Interval, ArithOp::Add | ArithOp::Sub) => Ok(Node::op(
            T::Timestamp,
            sql,
            ShiftOp {
                timestamp: left,
                interval: right,
                subtract: op == ArithOp::Sub,
            },
        )),
        (T::Interval, T::Timestamp, ArithOp::Add) => Ok(Node::op(
            T::Timestamp,
            sql,
            ShiftOp {
                timestamp: right,
                interval: left,
                subtract: false,
            },
        )),
        (T::Timestamp, T::Timestamp, ArithOp::Sub) => {
            Ok(Node::op(T::Int, sql, DiffOp { left, right }))
        }
        (T::Interval, T::Interval, ArithOp::Add | ArithOp::Sub)
        | (T::Interval, T::Int, ArithOp::Mul | ArithOp::Div) => {
            Ok(numeric_node(op, left, right, T::Interval, sql))
        }
        (T::Int, T::Interval, ArithOp::Mul) => Ok(numeric_node(op, right, left, T::Interval, sql)),
        _ => Err(origin.type_error(mismatch)),
    }
}

/// `cannot apply '*' to STRING and FLOAT`, with a hint where one helps.
fn mismatch_message(op: ArithOp, left: SqlType, right: SqlType) -> String {
    use SqlType as T;
    let symbol = op.symbol();
    let base = format!("cannot apply '{symbol}' to {left} and {right}");
    let timestamp_and_number = matches!(
        (left, right),
        (T::Timestamp, T::Int | T::Float) | (T::Int | T::Float, T::Timestamp)
    );
    if timestamp_and_number && matches!(op, ArithOp::Add | ArithOp::Sub) {
        format!(
            "{base}: add or subtract an INTERVAL instead, e.g. ts {symbol} INTERVAL '10' SECOND \
             (to_timestamp_millis(x) turns epoch milliseconds into a TIMESTAMP)"
        )
    } else if op == ArithOp::Add && (left == T::String || right == T::String) {
        format!("{base}: use || or concat(...) to join strings")
    } else if left == T::String || right == T::String {
        format!("{base}: CAST the string to a number first, e.g. CAST(x AS DOUBLE)")
    } else {
        base
    }
}

/// The type a NULL operand stands in for next to an operand of type `other`.
fn null_partner(op: ArithOp, other: SqlType, null_on_left: bool) -> SqlType {
    match other {
        // `ts + NULL`, `NULL + ts`, `ts - NULL` shift by an unknown interval; `NULL - ts` is a
        // difference of timestamps.
        SqlType::Timestamp if op == ArithOp::Add || !null_on_left => SqlType::Interval,
        other => other,
    }
}

fn decimal_of(node: &Node) -> Option<Decimal> {
    node.as_literal().and_then(Literal::decimal)
}

fn numeric_node(op: ArithOp, left: Node, right: Node, ty: SqlType, sql: String) -> Node {
    Node::op(
        ty,
        sql,
        NumericOp {
            op,
            left,
            right,
            checked: ty != SqlType::Float,
        },
    )
}

/// `left op right` through Arrow's numeric kernels, literals passed as scalars.
#[derive(Debug)]
struct NumericOp {
    op: ArithOp,
    left: Node,
    right: Node,
    /// Integer (or interval) arithmetic, which fails on overflow and division by zero.
    checked: bool,
}

impl Operator for NumericOp {
    fn eval(&self, batch: &RecordBatch, sql: &str) -> Result<Value, EvalError> {
        let left = self.left.eval(batch)?;
        let right = self.right.eval(batch)?;
        let result = self
            .op
            .kernel(left.datum(), right.datum())
            .map_err(|e| EvalError::from_arrow(sql, e))?;
        Ok(Value::from_kernel(
            result,
            left.is_scalar() && right.is_scalar(),
        ))
    }

    fn children(&self) -> Vec<&Node> {
        vec![&self.left, &self.right]
    }

    fn can_fail(&self) -> bool {
        self.checked
    }
}

fn scaled_mul(input: Node, literal: &Node, sql: String) -> Node {
    let decimal = decimal_of(literal).unwrap_or(Decimal {
        mantissa: 0,
        scale: 0,
    });
    let approximate = literal
        .as_literal()
        .and_then(Literal::as_f64)
        .unwrap_or(0.0);
    Node::op(
        SqlType::Float,
        sql,
        ScaledMulOp {
            input,
            mantissa: decimal.mantissa,
            // Exact: 10^scale <= 10^18 is below 2^63, and 5^18 < 2^53 makes it an exact f64.
            divisor: 10_i64.pow(decimal.scale) as f64,
            approximate,
        },
    )
}

/// `x * 0.908` for INT `x`, exact to the last decimal.
///
/// Multiplying by the `f64` nearest to 0.908 (which is not 0.908) would give results such as
/// `4146.835999…` where the exact answer is `4146.836`. Instead the literal is kept as the decimal
/// `mantissa / 10^scale` (`908 / 10^3`), `x * mantissa` is computed exactly in `i64`, and that
/// integer is divided by `10^scale` once. Both division operands are exact `f64`s while
/// `|x * mantissa| <= 2^53`, and IEEE division rounds correctly, so the result is the `f64`
/// closest to the exact decimal product and prints as `4146.836`.
///
/// Beyond `2^53` the product is rounded once before the division (within one ulp of exact); if
/// `x * mantissa` overflows `i64` the operator falls back to `x as f64 * 0.908`. Neither case
/// fails the job, since the result is a FLOAT.
#[derive(Debug)]
struct ScaledMulOp {
    input: Node,
    mantissa: i64,
    divisor: f64,
    /// The literal as an `f64`, for the overflow fallback.
    approximate: f64,
}

impl Operator for ScaledMulOp {
    fn eval(&self, batch: &RecordBatch, sql: &str) -> Result<Value, EvalError> {
        let (mantissa, divisor, approximate) = (self.mantissa, self.divisor, self.approximate);
        self.input.eval(batch)?.map(|array| {
            let products: Float64Array =
                primitive::<Int64Type>(array, sql)?.unary(|x| match x.checked_mul(mantissa) {
                    Some(exact) => exact as f64 / divisor,
                    None => x as f64 * approximate,
                });
            Ok(Arc::new(products) as ArrayRef)
        })
    }

    fn children(&self) -> Vec<&Node> {
        vec![&self.input]
    }
}

/// TIMESTAMP ± INTERVAL, on epoch milliseconds.
#[derive(Debug)]
struct ShiftOp {
    timestamp: Node,
    interval: Node,
    subtract: bool,
}

impl Operator for ShiftOp {
    fn eval(&self, batch: &RecordBatch, sql: &str) -> Result<Value, EvalError> {
        let timestamp = self
            .timestamp
            .eval(batch)?
            .map(|a| timestamps_as_millis(a, sql))?;
        let interval = self.interval.eval(batch)?;
        let op = if self.subtract {
            ArithOp::Sub
        } else {
            ArithOp::Add
        };
        let millis = op
            .kernel(timestamp.datum(), interval.datum())
            .map_err(|e| EvalError::from_arrow(sql, e))?;
        Value::from_kernel(millis, timestamp.is_scalar() && interval.is_scalar())
            .map(|a| millis_as_timestamps(a, sql))
    }

    fn children(&self) -> Vec<&Node> {
        vec![&self.timestamp, &self.interval]
    }

    fn can_fail(&self) -> bool {
        true
    }
}

/// TIMESTAMP − TIMESTAMP in milliseconds.
#[derive(Debug)]
struct DiffOp {
    left: Node,
    right: Node,
}

impl Operator for DiffOp {
    fn eval(&self, batch: &RecordBatch, sql: &str) -> Result<Value, EvalError> {
        let left = self
            .left
            .eval(batch)?
            .map(|a| timestamps_as_millis(a, sql))?;
        let right = self
            .right
            .eval(batch)?
            .map(|a| timestamps_as_millis(a, sql))?;
        let millis =
            numeric::sub(left.datum(), right.datum()).map_err(|e| EvalError::from_arrow(sql, e))?;
        Ok(Value::from_kernel(
            millis,
            left.is_scalar() && right.is_scalar(),
        ))
    }

    fn children(&self) -> Vec<&Node> {
        vec![&self.left, &self.right]
    }

    fn can_fail(&self) -> bool {
        true
    }
}

/// Unary minus.
pub(crate) fn negate(input: Node, origin: &Origin) -> Result<Node, ExprError> {
    match input.ty {
        SqlType::Int | SqlType::Float | SqlType::Interval | SqlType::Null => {
            let ty = input.ty;
            Ok(Node::op(ty, origin.sql.clone(), NegateOp { input }))
        }
        other => Err(origin.type_error(format!(
            "cannot apply unary '-' to {other}; it needs an INT, FLOAT or INTERVAL"
        ))),
    }
}

/// Unary plus: accepted on numbers and intervals, and changes nothing.
pub(crate) fn plus(input: Node, origin: &Origin) -> Result<Node, ExprError> {
    match input.ty {
        SqlType::Int | SqlType::Float | SqlType::Interval | SqlType::Null => Ok(input),
        other => Err(origin.type_error(format!(
            "cannot apply unary '+' to {other}; it needs an INT, FLOAT or INTERVAL"
        ))),
    }
}

/// `-x`: checked for integers (`-(-9223372036854775808)` overflows).
#[derive(Debug)]
struct NegateOp {
    input: Node,
}

impl Operator for NegateOp {
    fn eval(&self, batch: &RecordBatch, sql: &str) -> Result<Value, EvalError> {
        let value = self.input.eval(batch)?;
        if self.input.ty == SqlType::Null {
            return Ok(value);
        }
        value
            .map(numeric::neg)
            .map_err(|e| EvalError::from_arrow(sql, e))
    }

    fn children(&self) -> Vec<&Node> {
        vec![&self.input]
    }

    fn can_fail(&self) -> bool {
        matches!(self.input.ty, SqlType::Int | SqlType::Interval)
    }
}
