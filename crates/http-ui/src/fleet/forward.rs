//! Forwarding a request to the server of the fleet that runs its job (or that a submit was
//! placed on), so that a client can talk to any server. The answer comes back as the owner
//! gave it. A forwarded request carries [`FORWARDED`]; a server never forwards such a request
//! again, so two servers that disagree for a moment cannot bounce a request between them.
//! Advertised URLs are plain `http://` (the fleet's servers talk on a private network).

use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderValue, Uri, header};
use axum::response::{IntoResponse, Response};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use crate::error::ApiError;

/// The header of a forwarded request.
pub const FORWARDED: &str = "x-weir-forwarded";

/// How long the owner has to answer a forwarded request (a rescale waits for a savepoint).
const ANSWER_WITHIN: Duration = Duration::from_secs(120);

/// How long another server has to answer a read made for a fleet-wide answer (the jobs list):
/// a server that does not is named as missing rather than holding the answer up.
const READ_WITHIN: Duration = Duration::from_secs(5);

/// The largest answer read from another server for a fleet-wide answer.
const READ_LIMIT: usize = 16 << 20;

/// An HTTP client to the other servers of the fleet.
pub struct Forwarder {
    client: Client<HttpConnector, Body>,
}

impl Default for Forwarder {
    fn default() -> Self {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(Duration::from_secs(5)));
        connector.set_nodelay(true);
        Forwarder {
            client: Client::builder(TokioExecutor::new()).build(connector),
        }
    }
}

impl std::fmt::Debug for Forwarder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Forwarder")
    }
}

/// Whether `request` was forwarded by another server of the fleet.
pub fn was_forwarded(request: &axum::http::HeaderMap) -> bool {
    request.contains_key(FORWARDED)
}

impl Forwarder {
    /// Sends `request` to the server at `base` (`http://host:port`) and returns its answer.
    pub async fn forward(&self, base: &str, request: Request) -> Response {
        let (mut parts, body) = request.into_parts();
        let path = parts
            .uri
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_owned();
        let uri: Uri = match format!("{}{path}", base.trim_end_matches('/')).parse() {
            Ok(uri) => uri,
            Err(e) => {
                return ApiError::Internal(format!(
                    "the fleet's server `{base}` has no usable URL: {e}"
                ))
                .into_response();
            }
        };
        if uri.scheme_str() != Some("http") {
            return ApiError::Unavailable(format!(
                "the job runs on `{base}`, which this server cannot forward to (only http:// URLs are forwarded): ask it directly"
            ))
            .into_response();
        }
        parts.uri = uri;
        parts.headers.remove(header::HOST);
        parts
            .headers
            .insert(FORWARDED, HeaderValue::from_static("1"));
        let request = Request::from_parts(parts, body);
        match tokio::time::timeout(ANSWER_WITHIN, self.client.request(request)).await {
            Ok(Ok(answer)) => answer.map(Body::new),
            Ok(Err(e)) => ApiError::Unavailable(format!(
                "the fleet's server running the job, {base}, cannot be reached: {e}"
            ))
            .into_response(),
            Err(_) => ApiError::Timeout(format!(
                "the fleet's server running the job, {base}, did not answer within {ANSWER_WITHIN:?}"
            ))
            .into_response(),
        }
    }

    /// `GET path` on the server at `base`, as JSON, with the caller's credentials
    /// (`authorization`, passed on as it came): for answers about the whole fleet. Within
    /// [`READ_WITHIN`]; an error says why not, for the caller to name the server.
    pub async fn read_json(
        &self,
        base: &str,
        path: &str,
        authorization: Option<&HeaderValue>,
    ) -> Result<serde_json::Value, String> {
        let mut request = Request::new(Body::empty());
        *request.uri_mut() = path.parse().map_err(|e| format!("bad path {path}: {e}"))?;
        if let Some(credentials) = authorization {
            request
                .headers_mut()
                .insert(header::AUTHORIZATION, credentials.clone());
        }
        let read = async {
            let answer = self.forward(base, request).await;
            let status = answer.status();
            let body = axum::body::to_bytes(answer.into_body(), READ_LIMIT)
                .await
                .map_err(|e| format!("its answer could not be read: {e}"))?;
            if !status.is_success() {
                let text = String::from_utf8_lossy(&body);
                let text: String = text.chars().take(300).collect();
                return Err(format!("it answered {status}: {text}"));
            }
            serde_json::from_slice(&body).map_err(|e| format!("its answer is not JSON: {e}"))
        };
        tokio::time::timeout(READ_WITHIN, read)
            .await
            .map_err(|_| format!("no answer within {READ_WITHIN:?}"))?
    }
}
