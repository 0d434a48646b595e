//! The two ways an expression can fail: when it is compiled ([`ExprError`], a mistake in the job
//! file) and when it is evaluated ([`EvalError`], a row the expression cannot handle).

use arrow_schema::ArrowError;

/// A SQL expression in a job file that cannot be compiled against its input schema.
///
/// Every variant is a user error: the job must not start, and the message says what is wrong and
/// what is allowed. `line` and `column` are 1-based positions inside the expression snippet when
/// they are known, so that the job validator can translate them into a position in the YAML file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExprError {
    /// The text is not a SQL expression (sqlparser rejected it, or text follows a complete one).
    #[error("syntax error: {message}")]
    Syntax {
        /// What the parser expected and found.
        message: String,
        /// 1-based line inside the snippet.
        line: Option<u64>,
        /// 1-based column inside the snippet.
        column: Option<u64>,
    },
    /// An identifier names no column of the input schema.
    #[error(
        "unknown column \"{name}\"; {}columns: {available}",
        .suggestion.as_ref().map(|s| format!("did you mean \"{s}\"? ")).unwrap_or_default()
    )]
    UnknownColumn {
        /// The name as written (parts of a compound name joined with '.').
        name: String,
        /// The closest existing column, when one is close enough to be a likely typo.
        suggestion: Option<String>,
        /// The input's column names, comma-separated (shortened for very wide inputs).
        available: String,
        /// 1-based line inside the snippet.
        line: Option<u64>,
        /// 1-based column inside the snippet.
        column: Option<u64>,
    },
    /// Operand types do not fit an operator or function, a function gets the wrong number of
    /// arguments, or an argument that must be a constant is not.
    #[error("{message}")]
    Type {
        /// What does not fit, and what would.
        message: String,
        /// 1-based line inside the snippet.
        line: Option<u64>,
        /// 1-based column inside the snippet.
        column: Option<u64>,
    },
    /// A literal that cannot be read: an integer out of range, a malformed timestamp or interval.
    #[error("{message}")]
    InvalidLiteral {
        /// Which literal and why.
        message: String,
        /// 1-based line inside the snippet.
        line: Option<u64>,
        /// 1-based column inside the snippet.
        column: Option<u64>,
    },
    /// Valid SQL that weir does not evaluate in a scalar expression: subqueries, window
    /// functions, aggregates, unknown functions and operators.
    #[error("{message}")]
    Unsupported {
        /// What is not supported, and what to use instead when there is an alternative.
        message: String,
        /// 1-based line inside the snippet.
        line: Option<u64>,
        /// 1-based column inside the snippet.
        column: Option<u64>,
    },
}

impl ExprError {
    /// The 1-based line inside the snippet where the problem is, when known.
    pub fn line(&self) -> Option<u64> {
        match self {
            Self::Syntax { line, .. }
            | Self::UnknownColumn { line, .. }
            | Self::Type { line, .. }
            | Self::InvalidLiteral { line, .. }
            | Self::Unsupported { line, .. } => *line,
        }
    }

    /// The 1-based column inside the snippet where the problem is, when known.
    pub fn column(&self) -> Option<u64> {
        match self {
            Self::Syntax { column, .. }
            | Self::UnknownColumn { column, .. }
            | Self::Type { column, .. }
            | Self::InvalidLiteral { column, .. }
            | Self::Unsupported { column, .. } => *column,
        }
    }
}

/// A row that a compiled expression cannot evaluate.
///
/// The data-dependent variants (`DivisionByZero`, `Overflow`, `Cast`, `InvalidArgument`) are user
/// errors: the engine fails the job with the message, which names the SQL text of the failing
/// (sub)expression. `SchemaMismatch` and `Internal` mean weir itself is wrong: the caller passed a
/// batch that does not match the compile-time schema, or an Arrow kernel rejected inputs the
/// compiler promised were valid. See [`EvalError::is_internal`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EvalError {
    /// Integer `/` or `%` by zero.
    #[error("division by zero in `{expr}`")]
    DivisionByZero {
        /// SQL text of the failing (sub)expression.
        expr: String,
    },
    /// An INT (or timestamp/interval) result does not fit in 64 bits.
    #[error("integer overflow in `{expr}`")]
    Overflow {
        /// SQL text of the failing (sub)expression.
        expr: String,
    },
    /// A `CAST` (not `TRY_CAST`) met a value it cannot convert.
    #[error("{message} in `{expr}` (use TRY_CAST to get NULL instead)")]
    Cast {
        /// SQL text of the failing cast.
        expr: String,
        /// Arrow's description of the value that did not convert.
        message: String,
    },
    /// A function argument outside its domain, such as a negative substring length.
    #[error("{message} in `{expr}`")]
    InvalidArgument {
        /// SQL text of the failing call.
        expr: String,
        /// What was wrong with the argument.
        message: String,
    },
    /// The batch does not have the column the expression was compiled against.
    #[error(
        "`{expr}` was compiled for column {index} of type {expected}, but the batch has {found}"
    )]
    SchemaMismatch {
        /// SQL text of the column reference.
        expr: String,
        /// Column index in the compile-time schema.
        index: usize,
        /// The compile-time Arrow type.
        expected: String,
        /// What the batch had instead (a type, or "no such column").
        found: String,
    },
    /// An Arrow kernel failed on inputs the compiler considered valid: a bug in weir.
    #[error("internal error evaluating `{expr}`: {message}")]
    Internal {
        /// SQL text of the failing (sub)expression.
        expr: String,
        /// The underlying Arrow error.
        message: String,
    },
}

impl EvalError {
    /// `true` when the error is a bug in weir (or its caller) rather than bad data.
    pub fn is_internal(&self) -> bool {
        matches!(self, Self::SchemaMismatch { .. } | Self::Internal { .. })
    }

    /// Classifies an Arrow kernel error raised while evaluating `expr`.
    pub(crate) fn from_arrow(expr: &str, error: ArrowError) -> Self {
        let expr = expr.to_owned();
        match error {
            ArrowError::DivideByZero => Self::DivisionByZero { expr },
            ArrowError::ArithmeticOverflow(_) => Self::Overflow { expr },
            other => Self::Internal {
                expr,
                message: other.to_string(),
            },
        }
    }
}
