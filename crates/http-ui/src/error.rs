//! What can go wrong, grouped by what the caller should do.
//!
//! [`ApiError`] is the error of every handler: each variant is one HTTP status, and its JSON
//! body ([`ErrorBody`]) says what to do (`{"error": "...", "problems": [...]}`). Internal errors are logged with
//! their cause and answered with a short message. What stops `weir serve` from starting is
//! [`crate::ServeError`], beside the [`crate::Server`] it stops.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use weir_runtime::spec::Problem;

/// A request that could not be served.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The job file has problems: nothing was started. Fix the file and submit again.
    #[error("{message}")]
    Invalid {
        message: String,
        problems: Vec<Problem>,
    },
    /// The request itself is malformed (a body that is not JSON, an unknown snapshot name).
    #[error("{0}")]
    BadRequest(String),
    /// No such job, savepoint request or checkpoint.
    #[error("{0}")]
    NotFound(String),
    /// The job is not in a state that allows this (cancelling a finished job, a savepoint of a
    /// job that does not checkpoint, a second running copy of a checkpointed job).
    #[error("{0}")]
    Conflict(String),
    /// A bound of the host was reached (jobs hosted, savepoints in flight): try again later.
    #[error("{0}")]
    TooMany(String),
    /// The job could not start (its snapshot is unusable, its files cannot be created).
    #[error("{0}")]
    Start(String),
    /// One client sent too many requests of a rate-limited kind (state lookups): retry after
    /// `retry_after` seconds.
    #[error("{message}")]
    RateLimited { message: String, retry_after: u64 },
    /// The job cannot answer now (an operator's lookup queue is full, a subtask restarts):
    /// retry shortly.
    #[error("{0}")]
    Unavailable(String),
    /// The job did not answer in time.
    #[error("{0}")]
    Timeout(String),
    /// This server only shows a job (`weir run --listen`): it changes nothing.
    #[error("{0}")]
    ReadOnly(String),
    /// A bug or an unexpected failure of the host itself.
    #[error("internal error: {0}")]
    Internal(String),
}

impl ApiError {
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::Invalid { .. } | ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::TooMany(_) => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Start(_) => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Timeout(_) => StatusCode::GATEWAY_TIMEOUT,
            ApiError::ReadOnly(_) => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    pub fn no_job(id: &str) -> Self {
        ApiError::NotFound(format!("no job `{id}`"))
    }
}

/// The body of every error answer: what went wrong and what to do, and for a job file with
/// problems, each problem with its place.
#[derive(Debug, serde::Serialize, schemars::JsonSchema)]
pub struct ErrorBody {
    pub error: String,
    /// Only for a job file with problems (400): every problem found, not just the first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problems: Option<Vec<ProblemView>>,
}

impl ErrorBody {
    /// An answer with only a message.
    pub fn new(error: impl Into<String>) -> Self {
        ErrorBody {
            error: error.into(),
            problems: None,
        }
    }
}

/// One problem of a job file as the API reports it.
#[derive(Debug, serde::Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub struct ProblemView {
    /// The dotted path of the key (`sources.gen.events`).
    pub key: String,
    /// Where in the file, from 1; `null` when the value came from a `set` override.
    pub line: Option<usize>,
    pub column: Option<usize>,
    pub message: String,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        if let ApiError::Internal(cause) = &self {
            tracing::error!(%cause, "request failed");
        }
        let body = match &self {
            ApiError::Invalid { message, problems } => ErrorBody {
                error: message.clone(),
                problems: Some(
                    problems
                        .iter()
                        .map(|p| ProblemView {
                            key: p.path.clone(),
                            line: p.line,
                            column: p.column,
                            message: p.message.clone(),
                        })
                        .collect(),
                ),
            },
            other => ErrorBody::new(other.to_string()),
        };
        let retry_after = match &self {
            ApiError::RateLimited { retry_after, .. } => Some(*retry_after),
            ApiError::Unavailable(_) => Some(1),
            _ => None,
        };
        match retry_after {
            Some(secs) => (
                status,
                [(axum::http::header::RETRY_AFTER, secs.to_string())],
                Json(body),
            )
                .into_response(),
            None => (status, Json(body)).into_response(),
        }
    }
}
