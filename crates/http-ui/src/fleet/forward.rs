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

use crate::ApiError;

/// The header of a forwarded request.
pub const FORWARDED: &str = "x-weir-forwarded";

/// How long the owner has to answer a forwarded request (a rescale waits for a savepoint).
const ANSWER_WITHIN: Duration = Duration::from_secs(120);

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
}
