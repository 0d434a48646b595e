//! The dashboard's files (`web/` at the repository root), embedded in the binary.
//!
//! A fixed list: a request names one of these or gets 404, so no client-given name ever
//! reaches the filesystem (nothing is read from disk at all).

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

/// (name, content type, bytes).
const FILES: &[(&str, &str, &str)] = &[
    (
        "index.html",
        "text/html; charset=utf-8",
        include_str!("../../../web/index.html"),
    ),
    (
        "app.js",
        "text/javascript; charset=utf-8",
        include_str!("../../../web/app.js"),
    ),
    // morphdom (MIT), vendored from npm: the page updates the DOM in place with it, so that
    // selections, focus and open menus survive the once-a-second refresh.
    (
        "morphdom.min.js",
        "text/javascript; charset=utf-8",
        include_str!("../../../web/vendor/morphdom.min.js"),
    ),
    (
        "style.css",
        "text/css; charset=utf-8",
        include_str!("../../../web/style.css"),
    ),
    // The API's viewer (`/api/v1/docs` serves `docs.html`): Swagger UI (Apache-2.0), vendored
    // from npm's swagger-ui-dist, so that the page works without reaching any other server.
    (
        "docs.html",
        "text/html; charset=utf-8",
        include_str!("../../../web/docs.html"),
    ),
    (
        "docs.js",
        "text/javascript; charset=utf-8",
        include_str!("../../../web/docs.js"),
    ),
    (
        "swagger-ui-bundle.js",
        "text/javascript; charset=utf-8",
        include_str!("../../../web/vendor/swagger-ui-bundle.js"),
    ),
    (
        "swagger-ui-bundle.js.LICENSE.txt",
        "text/plain; charset=utf-8",
        include_str!("../../../web/vendor/swagger-ui-bundle.js.LICENSE.txt"),
    ),
    (
        "swagger-ui.css",
        "text/css; charset=utf-8",
        include_str!("../../../web/vendor/swagger-ui.css"),
    ),
];

/// The embedded file `name`, or 404.
pub async fn serve(name: &str) -> Response {
    match FILES.iter().find(|(n, _, _)| *n == name) {
        Some((_, content_type, body)) => (
            [
                (header::CONTENT_TYPE, *content_type),
                (header::CACHE_CONTROL, "no-cache"),
            ],
            *body,
        )
            .into_response(),
        None => (StatusCode::NOT_FOUND, "not found").into_response(),
    }
}

pub async fn serve_owned(name: String) -> Response {
    serve(&name).await
}
