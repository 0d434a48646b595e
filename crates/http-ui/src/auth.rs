//! Who may use the API: anyone on a loopback bind, bearer-token holders otherwise.
//!
//! Binding to an address other than loopback without a token is refused at start
//! ([`Access::for_bind`]). With a token, every API request and `/metrics` must carry
//! `Authorization: Bearer <token>`; the comparison takes the same time wherever the first
//! differing byte is ([`subtle`]), so response timing does not reveal a prefix of the token.
//! The dashboard's static files need no token (they hold no data); its script sends the
//! token it is given.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

/// Why the access rule cannot be set up: `weir serve` refuses to start ([`crate::ServeError`]).
#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    #[error(
        "listening on {0} (not a loopback address) needs a bearer token: pass `--token` or set WEIR_TOKEN"
    )]
    TokenRequired(SocketAddr),
    #[error("the bearer token is empty")]
    EmptyToken,
}

/// The API's access rule.
#[derive(Clone, Debug)]
pub struct Access {
    token: Option<Arc<[u8]>>,
}

impl Access {
    /// No token: for a loopback bind (and in-process tests).
    pub fn open() -> Self {
        Access { token: None }
    }

    /// Every request must carry `token`.
    pub fn token(token: &str) -> Result<Self, AccessError> {
        if token.trim().is_empty() {
            return Err(AccessError::EmptyToken);
        }
        Ok(Access {
            token: Some(Arc::from(token.as_bytes())),
        })
    }

    /// The rule for listening on `addr`: a token is required unless `addr` is loopback, and
    /// used whenever one is given.
    pub fn for_bind(addr: SocketAddr, token: Option<&str>) -> Result<Self, AccessError> {
        match token {
            Some(t) => Self::token(t),
            None if addr.ip().is_loopback() => Ok(Self::open()),
            None => Err(AccessError::TokenRequired(addr)),
        }
    }

    pub fn requires_token(&self) -> bool {
        self.token.is_some()
    }

    /// Whether an `Authorization` header value grants access.
    pub fn allows(&self, authorization: Option<&[u8]>) -> bool {
        let Some(expected) = &self.token else {
            return true;
        };
        let Some(given) = authorization.and_then(bearer_credentials) else {
            return false;
        };
        // `ct_eq` on slices of different lengths is false without comparing the bytes; the
        // length of the token is not a secret worth hiding.
        given.ct_eq(expected).into()
    }
}

/// The credentials of an `Authorization: Bearer <token>` value. The scheme is matched without
/// regard to case (RFC 7235 §2.1: `bearer` and `BEARER` are `Bearer`) and is separated from the
/// token by one or more spaces; the token itself is compared as given.
fn bearer_credentials(authorization: &[u8]) -> Option<&[u8]> {
    const SCHEME: &[u8] = b"bearer";
    let scheme = authorization.get(..SCHEME.len())?;
    let rest = &authorization[SCHEME.len()..];
    if !scheme.eq_ignore_ascii_case(SCHEME) || rest.first() != Some(&b' ') {
        return None;
    }
    let start = rest.iter().position(|&b| b != b' ')?;
    Some(&rest[start..])
}

/// Middleware: 401 with `WWW-Authenticate: Bearer` unless [`Access::allows`] the request.
pub async fn require(State(access): State<Access>, request: Request, next: Next) -> Response {
    let given = request
        .headers()
        .get(header::AUTHORIZATION)
        .map(|v| v.as_bytes());
    if access.allows(given) {
        return next.run(request).await;
    }
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, "Bearer")],
        axum::Json(crate::error::ErrorBody::new(
            "this server needs `Authorization: Bearer <token>` (the token `weir serve` was started with)",
        )),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_non_loopback_bind_needs_a_token() {
        let public: SocketAddr = ([0, 0, 0, 0], 8080).into();
        let local: SocketAddr = ([127, 0, 0, 1], 8080).into();
        assert!(matches!(
            Access::for_bind(public, None),
            Err(AccessError::TokenRequired(_))
        ));
        assert!(
            !Access::for_bind(local, None)
                .map(|a| a.requires_token())
                .unwrap_or(true)
        );
        assert!(Access::for_bind(public, Some("  ")).is_err());
    }

    #[test]
    fn only_the_exact_bearer_token_is_allowed() {
        let Ok(access) = Access::token("s3cret") else {
            panic!("a token");
        };
        assert!(access.allows(Some(b"Bearer s3cret")));
        assert!(!access.allows(Some(b"Bearer s3cre")));
        assert!(!access.allows(Some(b"Bearer s3cret2")));
        assert!(!access.allows(Some(b"s3cret")));
        assert!(!access.allows(Some(b"Bearers3cret")));
        assert!(!access.allows(Some(b"Bearer ")));
        assert!(!access.allows(Some(b"Basic s3cret")));
        assert!(!access.allows(None));
        assert!(Access::open().allows(None));
    }

    #[test]
    fn the_bearer_scheme_is_case_insensitive_but_the_token_is_not() {
        let Ok(access) = Access::token("s3cret") else {
            panic!("a token");
        };
        for given in [
            &b"bearer s3cret"[..],
            b"BEARER s3cret",
            b"bEaReR s3cret",
            b"Bearer   s3cret",
        ] {
            assert!(
                access.allows(Some(given)),
                "{:?}",
                String::from_utf8_lossy(given)
            );
        }
        assert!(!access.allows(Some(b"bearer S3CRET")));
        assert!(!access.allows(Some(b"bearer s3cret ")));
    }
}
