//! Lowering a sqlparser AST into the typed tree: name resolution, literals, type checking.
//!
//! [`Compiler::lower`] dispatches on the AST node and hands each construct to the file of its
//! family, which checks operand types and builds the [`Node`]. Everything string-shaped (names,
//! patterns, units, function names) is resolved here, once.

use std::cell::Cell;

use sqlparser::ast::{
    self, BinaryOperator, CastKind, InTarget, Spanned, UnaryOperator, Value as SqlValue,
};
use sqlparser::tokenizer::Span;

use super::error::ExprError;
use super::node::Node;
use super::types::{Decimal, Literal, SqlType};
use super::{
    arith, cast, columns, compare, conditional, functions, like, logic, math, strings, temporal,
    text,
};

/// A piece of SQL being compiled: its text and where it starts in the snippet. Compile errors
/// point at one.
#[derive(Debug, Clone)]
pub(crate) struct Origin {
    pub(crate) sql: String,
    pub(crate) line: Option<u64>,
    pub(crate) column: Option<u64>,
}

impl Origin {
    pub(crate) fn of(node: &(impl Spanned + std::fmt::Display)) -> Self {
        Self::new(node.to_string(), node.span())
    }

    pub(crate) fn new(sql: String, span: Span) -> Self {
        let known = span.start.line > 0;
        Self {
            sql,
            line: known.then_some(span.start.line),
            column: known.then_some(span.start.column),
        }
    }

    pub(crate) fn type_error(&self, message: impl Into<String>) -> ExprError {
        ExprError::Type {
            message: message.into(),
            line: self.line,
            column: self.column,
        }
    }

    pub(crate) fn invalid_literal(&self, message: impl Into<String>) -> ExprError {
        ExprError::InvalidLiteral {
            message: message.into(),
            line: self.line,
            column: self.column,
        }
    }

    pub(crate) fn unsupported(&self, message: impl Into<String>) -> ExprError {
        ExprError::Unsupported {
            message: message.into(),
            line: self.line,
            column: self.column,
        }
    }
}

/// Compiles AST nodes against one input schema.
pub(crate) struct Compiler<'a> {
    pub(crate) schema: &'a arrow_schema::Schema,
    /// How many [`Compiler::lower`] calls are under way: the walk recurses once per level of
    /// the tree, so it stops at [`super::MAX_DEPTH`] instead of overflowing the stack.
    depth: Cell<usize>,
}

/// One level of [`Compiler::lower`]; leaving it (by any path) gives the level back.
struct Level<'a>(&'a Cell<usize>);

impl Drop for Level<'_> {
    fn drop(&mut self) {
        self.0.set(self.0.get().saturating_sub(1));
    }
}

impl<'a> Compiler<'a> {
    pub(crate) fn new(schema: &'a arrow_schema::Schema) -> Self {
        Self {
            schema,
            depth: Cell::new(0),
        }
    }

    /// Enters one level of the tree at `expr`, or refuses a tree nested deeper than
    /// [`super::MAX_DEPTH`]. The refusal renders nothing of `expr` (that would recurse too).
    fn enter(&self, expr: &ast::Expr) -> Result<Level<'_>, ExprError> {
        let depth = self.depth.get() + 1;
        if depth > super::MAX_DEPTH {
            return Err(Origin::new(String::new(), expr.span()).unsupported(format!(
                "the expression nests more than {} levels deep; split it into several columns \
                 or transforms",
                super::MAX_DEPTH
            )));
        }
        self.depth.set(depth);
        Ok(Level(&self.depth))
    }

    /// Lowers an expression whose result is a value a batch can hold (anything but INTERVAL).
    pub(crate) fn value(&self, expr: &ast::Expr) -> Result<Node, ExprError> {
        let node = self.lower(expr)?;
        if node.ty == SqlType::Interval {
            return Err(Origin::of(expr).type_error(format!(
                "an INTERVAL can only be added to or subtracted from a TIMESTAMP, \
                 e.g. ts + {expr}"
            )));
        }
        Ok(node)
    }

    /// Lowers an expression that must be BOOL (a NULL literal counts as an unknown BOOL).
    pub(crate) fn boolean(&self, expr: &ast::Expr, context: &str) -> Result<Node, ExprError> {
        let node = self.value(expr)?;
        match node.ty {
            SqlType::Bool => Ok(node),
            SqlType::Null => Ok(cast::implicit(node, SqlType::Bool)),
            other => Err(Origin::of(expr).type_error(format!(
                "{context} needs a BOOL, but `{expr}` is {other}; compare it, e.g. `{expr} <> 0` \
                 or `{expr} IS NOT NULL`"
            ))),
        }
    }

    /// Lowers an argument that must be a constant string (a LIKE pattern, a date_part unit...).
    /// `Ok(None)` is a NULL constant.
    pub(crate) fn constant_str(
        &self,
        expr: &ast::Expr,
        what: &str,
    ) -> Result<Option<String>, ExprError> {
        let node = self.value(expr)?;
        match node.as_literal() {
            Some(literal) if literal.is_null() => Ok(None),
            Some(literal) => match literal.as_str() {
                Some(text) => Ok(Some(text.to_owned())),
                None => Err(Origin::of(expr).type_error(format!(
                    "{what} must be a constant string, but `{expr}` is {}",
                    node.ty
                ))),
            },
            None => Err(Origin::of(expr).type_error(format!(
                "{what} must be a constant string like 'abc', not `{expr}`"
            ))),
        }
    }

    /// Lowers an argument that must be a constant INT. `Ok(None)` is a NULL constant.
    pub(crate) fn constant_int(
        &self,
        expr: &ast::Expr,
        what: &str,
    ) -> Result<Option<i64>, ExprError> {
        let node = self.value(expr)?;
        match (node.ty, node.as_literal()) {
            (_, Some(literal)) if literal.is_null() => Ok(None),
            (SqlType::Int, Some(literal)) => Ok(literal.as_i64()),
            _ => Err(Origin::of(expr).type_error(format!(
                "{what} must be a constant INT like 2, not `{expr}`"
            ))),
        }
    }

    /// Lowers any expression, INTERVAL constants included.
    pub(crate) fn lower(&self, expr: &ast::Expr) -> Result<Node, ExprError> {
        use ast::Expr as E;
        let _level = self.enter(expr)?;
        let origin = || Origin::of(expr);
        match expr {
            E::Identifier(ident) => columns::resolve(self.schema, &ident.value, &origin()),
            E::CompoundIdentifier(parts) => {
                let name = parts
                    .iter()
                    .map(|part| part.value.as_str())
                    .collect::<Vec<_>>()
                    .join(".");
                columns::resolve(self.schema, &name, &origin())
            }
            E::Nested(inner) => self.lower(inner),
            E::Value(value) => literal(&value.value, false, &origin()),
            E::TypedString(typed) => temporal::typed_string(typed, &origin()),
            E::Interval(interval) => temporal::interval(interval, &origin()),

            E::UnaryOp { op, expr: operand } => match (op, operand.as_ref()) {
                // `-5`, `-0.908`, `-9223372036854775808`: read the sign with the digits, so the
                // most negative INT is expressible and the decimal keeps its exact form.
                (UnaryOperator::Minus, E::Value(value))
                    if matches!(value.value, SqlValue::Number(..)) =>
                {
                    literal(&value.value, true, &origin())
                }
                (UnaryOperator::Minus, _) => arith::negate(self.lower(operand)?, &origin()),
                (UnaryOperator::Plus, _) => arith::plus(self.lower(operand)?, &origin()),
                (UnaryOperator::Not, _) => logic::not(self.boolean(operand, "NOT")?, &origin()),
                (other, _) => Err(origin().unsupported(format!(
                    "unary operator {other} is not supported; supported: -x, +x, NOT x"
                ))),
            },
            E::BinaryOp { left, op, right } => self.binary(left, op, right, &origin),

            E::IsNull(operand) => compare::is_null(self.value(operand)?, false, &origin()),
            E::IsNotNull(operand) => compare::is_null(self.value(operand)?, true, &origin()),
            E::IsTrue(operand) => self.truth(operand, true, false),
            E::IsNotTrue(operand) => self.truth(operand, true, true),
            E::IsFalse(operand) => self.truth(operand, false, false),
            E::IsNotFalse(operand) => self.truth(operand, false, true),
            E::IsUnknown(operand) => {
                compare::is_null(self.boolean(operand, "IS UNKNOWN")?, false, &origin())
            }
            E::IsNotUnknown(operand) => {
                compare::is_null(self.boolean(operand, "IS NOT UNKNOWN")?, true, &origin())
            }
            E::IsDistinctFrom(l, r) => {
                compare::distinct(self.value(l)?, self.value(r)?, false, &origin())
            }
            E::IsNotDistinctFrom(l, r) => {
                compare::distinct(self.value(l)?, self.value(r)?, true, &origin())
            }
            E::Between {
                expr: operand,
                negated,
                low,
                high,
            } => compare::between(
                self.value(operand)?,
                self.value(low)?,
                self.value(high)?,
                *negated,
                &origin(),
            ),
            E::In {
                expr: operand,
                target,
                negated,
                global: _,
            } => match target {
                InTarget::List(list) => {
                    let list = list
                        .iter()
                        .map(|item| self.value(item))
                        .collect::<Result<Vec<_>, _>>()?;
                    compare::in_list(self.value(operand)?, list, *negated, &origin())
                }
                InTarget::Subquery(_) => Err(origin().unsupported(
                    "IN (SELECT ...) is not supported: weir expressions work on one record at \
                     a time; list the values, e.g. x IN (1, 2, 3)",
                )),
                _ => Err(origin()
                    .unsupported("only IN (value, ...) lists are supported, e.g. x IN (1, 2, 3)")),
            },
            E::Like {
                negated,
                any,
                expr: operand,
                pattern,
                escape_char,
            } => like::compile(
                self,
                operand,
                pattern,
                escape_char.as_deref(),
                *negated,
                *any,
                false,
                &origin(),
            ),
            E::ILike {
                negated,
                any,
                expr: operand,
                pattern,
                escape_char,
            } => like::compile(
                self,
                operand,
                pattern,
                escape_char.as_deref(),
                *negated,
                *any,
                true,
                &origin(),
            ),
            E::Case {
                operand,
                conditions,
                else_result,
                ..
            } => conditional::case(
                self,
                operand.as_deref(),
                conditions,
                else_result.as_deref(),
                &origin(),
            ),
            E::Cast {
                kind,
                expr: operand,
                data_type,
                format,
            } => {
                if format.is_some() {
                    return Err(origin().unsupported("CAST ... FORMAT is not supported"));
                }
                let safe = matches!(kind, CastKind::TryCast | CastKind::SafeCast);
                cast::explicit(self.value(operand)?, data_type, safe, &origin())
            }
            E::Extract {
                field,
                expr: operand,
                ..
            } => temporal::extract(self.value(operand)?, field, &origin()),
            E::Ceil {
                expr: operand,
                field,
            } => math::ceil_floor(self.value(operand)?, field, true, &origin()),
            E::Floor {
                expr: operand,
                field,
            } => math::ceil_floor(self.value(operand)?, field, false, &origin()),
            E::Substring {
                expr: operand,
                substring_from,
                substring_for,
                ..
            } => strings::substring(
                self,
                operand,
                substring_from.as_deref(),
                substring_for.as_deref(),
                &origin(),
            ),
            E::Trim {
                trim_where,
                trim_what,
                expr: operand,
                trim_characters,
            } => strings::trim(
                self,
                operand,
                trim_where.as_ref(),
                trim_what.as_deref(),
                trim_characters.as_deref(),
                &origin(),
            ),
            E::Function(function) => functions::compile(self, function, &origin()),
            E::Position { expr: needle, r#in } => {
                text::position(self.value(needle)?, self.value(r#in)?, &origin())
            }

            E::Subquery(_) | E::Exists { .. } => Err(origin().unsupported(
                "subqueries are not supported: weir expressions work on one record at a time",
            )),
            E::Wildcard(_) | E::QualifiedWildcard(..) => Err(origin().unsupported(
                "`*` is only allowed as count(*) in an aggregate operator's `aggregates:`",
            )),
            _ => Err(origin().unsupported(format!(
                "`{expr}` is not supported in a weir expression; see the expression reference for \
                 the supported operators and functions"
            ))),
        }
    }

    /// `origin` renders `left op right` only once both operands compiled: rendering first
    /// would walk a whole left-deep chain before the depth limit of [`Self::enter`] is met.
    fn binary(
        &self,
        left: &ast::Expr,
        op: &BinaryOperator,
        right: &ast::Expr,
        origin: &dyn Fn() -> Origin,
    ) -> Result<Node, ExprError> {
        use BinaryOperator as B;
        let arith = |op| -> Result<Node, ExprError> {
            let (l, r) = (self.lower(left)?, self.lower(right)?);
            arith::binary(op, l, r, &origin())
        };
        let cmp = |op| -> Result<Node, ExprError> {
            let (l, r) = (self.value(left)?, self.value(right)?);
            compare::binary(op, l, r, &origin())
        };
        match op {
            B::Plus => arith(arith::ArithOp::Add),
            B::Minus => arith(arith::ArithOp::Sub),
            B::Multiply => arith(arith::ArithOp::Mul),
            B::Divide => arith(arith::ArithOp::Div),
            B::Modulo => arith(arith::ArithOp::Rem),
            B::Eq => cmp(compare::CmpOp::Eq),
            B::NotEq => cmp(compare::CmpOp::NotEq),
            B::Lt => cmp(compare::CmpOp::Lt),
            B::LtEq => cmp(compare::CmpOp::LtEq),
            B::Gt => cmp(compare::CmpOp::Gt),
            B::GtEq => cmp(compare::CmpOp::GtEq),
            B::And => {
                let (l, r) = (self.boolean(left, "AND")?, self.boolean(right, "AND")?);
                logic::and(l, r, &origin())
            }
            B::Or => {
                let (l, r) = (self.boolean(left, "OR")?, self.boolean(right, "OR")?);
                logic::or(l, r, &origin())
            }
            B::StringConcat => {
                let (l, r) = (self.value(left)?, self.value(right)?);
                strings::concat_operator(l, r, &origin())
            }
            other => Err(origin().unsupported(format!(
                "operator {other} is not supported; supported: + - * / % = <> != < <= > >= \
                 AND OR ||"
            ))),
        }
    }

    fn truth(&self, operand: &ast::Expr, value: bool, negated: bool) -> Result<Node, ExprError> {
        let what = match (value, negated) {
            (true, false) => "IS TRUE",
            (true, true) => "IS NOT TRUE",
            (false, false) => "IS FALSE",
            (false, true) => "IS NOT FALSE",
        };
        let node = self.boolean(operand, what)?;
        // The origin of `x IS TRUE` is the whole test, rebuilt from the operand's position.
        let sql = format!("{operand} {what}");
        compare::truth(node, value, negated, &Origin::new(sql, operand.span()))
    }
}

/// Lowers a literal value; `negative` is set for a number under a unary minus.
fn literal(value: &SqlValue, negative: bool, origin: &Origin) -> Result<Node, ExprError> {
    let sql = origin.sql.clone();
    match value {
        SqlValue::Number(digits, _) => {
            let text = if negative {
                format!("-{digits}")
            } else {
                digits.clone()
            };
            number(&text, sql, origin)
        }
        SqlValue::SingleQuotedString(text) | SqlValue::EscapedStringLiteral(text) => {
            Ok(Node::literal(Literal::string(text), SqlType::String, sql))
        }
        SqlValue::Boolean(value) => Ok(Node::literal(Literal::bool(*value), SqlType::Bool, sql)),
        SqlValue::Null => Ok(Node::literal(
            Literal::null(SqlType::Null),
            SqlType::Null,
            sql,
        )),
        SqlValue::Placeholder(_) => Err(origin.unsupported(format!(
            "placeholder {value} is not supported; write the value itself"
        ))),
        other => Err(origin.unsupported(format!(
            "literal {other} is not supported; use 'single-quoted' strings, numbers, TRUE, \
             FALSE, NULL, TIMESTAMP '...' or INTERVAL '...'"
        ))),
    }
}

/// Reads a numeric literal: digits only is an INT, anything with `.` or an exponent a FLOAT.
fn number(text: &str, sql: String, origin: &Origin) -> Result<Node, ExprError> {
    let is_float = text.contains(['.', 'e', 'E']);
    if !is_float {
        return match text.parse::<i64>() {
            Ok(value) => Ok(Node::literal(Literal::int(value), SqlType::Int, sql)),
            Err(_) => Err(origin.invalid_literal(format!(
                "integer literal {text} does not fit in INT (64-bit, {} to {}); write {text}.0 \
                 for an approximate FLOAT",
                i64::MIN,
                i64::MAX
            ))),
        };
    }
    match text.parse::<f64>() {
        Ok(value) if value.is_finite() => Ok(Node::literal(
            Literal::float(value, Decimal::parse(text)),
            SqlType::Float,
            sql,
        )),
        _ => Err(origin.invalid_literal(format!("number literal {text} is not a finite FLOAT"))),
    }
}
