//! The chat page served at `/`: one self-contained HTML file (styles and script inline, no
//! external requests) compiled into the binary, so the page works offline.

use super::response::Response;

const PAGE: &str = include_str!("webui/index.html");

/// `GET /`.
pub fn page() -> Response {
    Response::text(200, "text/html; charset=utf-8", PAGE)
        .with_header(
            "Content-Security-Policy",
            "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
        )
        .with_header("Cache-Control", "no-cache")
        .with_header("Referrer-Policy", "no-referrer")
}
