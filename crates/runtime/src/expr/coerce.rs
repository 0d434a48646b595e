//! Implicit conversions between operands that must share a type: both sides of a comparison,
//! BETWEEN bounds, IN lists, CASE branches, COALESCE/GREATEST/LEAST arguments.
//!
//! The rules are few and predictable: NULL fits anything, INT widens to FLOAT, and a string
//! *literal* next to a TIMESTAMP is read as a timestamp at compile time. Nothing else converts
//! silently; the user writes a CAST.

use super::cast;
use super::compile::Origin;
use super::error::ExprError;
use super::node::Node;
use super::temporal;
use super::types::{Literal, SqlType};

/// Words the error for two types that do not go together, e.g. `cannot compare INT with STRING`.
pub(crate) type Mismatch<'a> = &'a dyn Fn(SqlType, SqlType) -> String;

/// The type operands that must agree are converted to (`SqlType::Null` when all are NULL).
pub(crate) fn common_type<'n>(
    nodes: impl IntoIterator<Item = &'n Node>,
    origin: &Origin,
    mismatch: Mismatch<'_>,
) -> Result<SqlType, ExprError> {
    let mut common = SqlType::Null;
    for node in nodes {
        common = match (common, node.ty) {
            (a, b) if a == b => a,
            (SqlType::Null, b) => b,
            (a, SqlType::Null) => a,
            (SqlType::Int, SqlType::Float) | (SqlType::Float, SqlType::Int) => SqlType::Float,
            // String literals are read as timestamps by `convert`; other strings get a CAST hint.
            (SqlType::Timestamp, SqlType::String) | (SqlType::String, SqlType::Timestamp) => {
                SqlType::Timestamp
            }
            (a, b) => return Err(origin.type_error(mismatch(a, b))),
        };
    }
    Ok(common)
}

/// Converts every node to the common type and returns it.
pub(crate) fn unify(
    nodes: Vec<Node>,
    origin: &Origin,
    mismatch: Mismatch<'_>,
) -> Result<(Vec<Node>, SqlType), ExprError> {
    let common = common_type(&nodes, origin, mismatch)?;
    let nodes = nodes
        .into_iter()
        .map(|node| convert(node, common, origin, mismatch))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((nodes, common))
}

/// Converts both operands of a binary operator to their common type.
pub(crate) fn unify_pair(
    left: Node,
    right: Node,
    origin: &Origin,
    mismatch: Mismatch<'_>,
) -> Result<(Node, Node, SqlType), ExprError> {
    let common = common_type([&left, &right], origin, mismatch)?;
    let left = convert(left, common, origin, mismatch)?;
    let right = convert(right, common, origin, mismatch)?;
    Ok((left, right, common))
}

/// Converts one node to `to`, which [`common_type`] chose.
pub(crate) fn convert(
    node: Node,
    to: SqlType,
    origin: &Origin,
    mismatch: Mismatch<'_>,
) -> Result<Node, ExprError> {
    match (node.ty, to) {
        (from, to) if from == to => Ok(node),
        (SqlType::Null, _) | (SqlType::Int, SqlType::Float) => Ok(cast::implicit(node, to)),
        (SqlType::String, SqlType::Timestamp) => {
            let Some(literal) = node.as_literal() else {
                return Err(origin.type_error(format!(
                    "{}; only a string literal is read as a TIMESTAMP, so write \
                     CAST({} AS TIMESTAMP)",
                    mismatch(SqlType::String, SqlType::Timestamp),
                    node.sql
                )));
            };
            let Some(text) = literal.as_str() else {
                return Ok(Node::literal(
                    Literal::null(SqlType::Timestamp),
                    SqlType::Timestamp,
                    node.sql,
                ));
            };
            let millis = temporal::parse_timestamp(text).map_err(|message| {
                origin.invalid_literal(format!("'{text}' is not a TIMESTAMP: {message}"))
            })?;
            Ok(Node::literal(
                Literal::timestamp(millis),
                SqlType::Timestamp,
                node.sql,
            ))
        }
        (from, to) => Err(origin.type_error(mismatch(from, to))),
    }
}
