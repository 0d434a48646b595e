//! `CAST`, `TRY_CAST`, `x::type`, and the implicit conversions the compiler inserts.

use arrow_array::RecordBatch;
use arrow_cast::cast::{CastOptions, can_cast_types, cast_with_options};
use arrow_schema::ArrowError;
use sqlparser::ast::DataType as SqlDataType;

use super::compile::Origin;
use super::error::{EvalError, ExprError};
use super::node::{Node, Operator};
use super::types::{SqlType, Value};

/// The type names `CAST(x AS ...)` accepts, for error messages.
const TARGETS: &str =
    "BIGINT/INT/INTEGER, DOUBLE/FLOAT/REAL, VARCHAR/TEXT/STRING, BOOLEAN, TIMESTAMP";

/// Converts its operand with Arrow's cast kernel.
#[derive(Debug)]
struct CastOp {
    input: Node,
    to: SqlType,
    /// `TRY_CAST`: values that do not convert become NULL instead of failing the job.
    safe: bool,
}

impl Operator for CastOp {
    fn eval(&self, batch: &RecordBatch, sql: &str) -> Result<Value, EvalError> {
        let options = CastOptions {
            safe: self.safe,
            ..CastOptions::default()
        };
        let to = self.to.arrow();
        self.input
            .eval(batch)?
            .map(|array| cast_with_options(array, &to, &options))
            .map_err(|error| EvalError::Cast {
                expr: sql.to_owned(),
                message: match error {
                    // Without Arrow's "Cast error: " prefix.
                    ArrowError::CastError(message) | ArrowError::ParseError(message) => message,
                    other => other.to_string(),
                },
            })
    }

    fn children(&self) -> Vec<&Node> {
        vec![&self.input]
    }

    fn can_fail(&self) -> bool {
        !self.safe && !infallible(self.input.ty, self.to)
    }
}

/// Conversions that succeed for every value, so a plain CAST needs no run-time guard.
fn infallible(from: SqlType, to: SqlType) -> bool {
    use SqlType as T;
    from == to
        || matches!(
            (from, to),
            (T::Null, _)
                | (T::Int, T::Float | T::String | T::Timestamp | T::Bool)
                | (T::Float | T::Bool | T::Timestamp, T::String)
                | (T::Bool, T::Int | T::Float)
                | (T::Timestamp, T::Int)
        )
}

/// A conversion the compiler inserts on its own: NULL to a typed NULL, INT to FLOAT, anything to
/// STRING for `concat`. Only called for conversions that cannot fail; literals fold on the spot.
pub(crate) fn implicit(node: Node, to: SqlType) -> Node {
    if node.ty == to {
        return node;
    }
    let sql = node.sql.clone();
    Node::op(
        to,
        sql,
        CastOp {
            input: node,
            to,
            safe: false,
        },
    )
}

/// `CAST(x AS type)` (`safe == false`) or `TRY_CAST(x AS type)` (`safe == true`).
///
/// INT to TIMESTAMP reads the integer as epoch milliseconds and TIMESTAMP to INT gives them back;
/// FLOAT to INT truncates toward zero; STRING to TIMESTAMP accepts what `TIMESTAMP '...'` does.
pub(crate) fn explicit(
    input: Node,
    target: &SqlDataType,
    safe: bool,
    origin: &Origin,
) -> Result<Node, ExprError> {
    let Some(to) = target_type(target) else {
        return Err(origin.type_error(format!(
            "cannot CAST to {target}: supported types are {TARGETS}"
        )));
    };
    if input.ty == to {
        return Ok(input);
    }
    if !can_cast_types(&input.ty.arrow(), &to.arrow()) {
        return Err(origin.type_error(format!("cannot CAST {} to {to}", input.ty)));
    }
    Ok(Node::op(to, origin.sql.clone(), CastOp { input, to, safe }))
}

/// Maps a SQL type name onto weir's types.
fn target_type(target: &SqlDataType) -> Option<SqlType> {
    use SqlDataType as D;
    match target {
        D::BigInt(_) | D::Int(_) | D::Integer(_) | D::Int64 | D::Int8(_) => Some(SqlType::Int),
        D::Double(_) | D::DoublePrecision | D::Float(_) | D::Real | D::Float64 | D::Float8 => {
            Some(SqlType::Float)
        }
        D::Varchar(_) | D::Text | D::String(_) | D::CharacterVarying(_) | D::CharVarying(_) => {
            Some(SqlType::String)
        }
        D::Boolean | D::Bool => Some(SqlType::Bool),
        D::Timestamp(_, tz) if is_utc(tz) => Some(SqlType::Timestamp),
        _ => None,
    }
}

fn is_utc(tz: &sqlparser::ast::TimezoneInfo) -> bool {
    matches!(
        tz,
        sqlparser::ast::TimezoneInfo::None | sqlparser::ast::TimezoneInfo::WithoutTimeZone
    )
}
