//! CORS as llama-server answers it (its README's "CORS" section and `--cors-*` flags, and its
//! own test suite's cases): with no flag any origin is echoed back with credentials, a
//! preflight to any path is answered 200 without the API key, `--cors-origins localhost`
//! echoes only this machine's origins, a list echoes the origins it names, and a request (not
//! a preflight) from an origin the flag leaves out is refused.

use super::start;
use crate::common::http::{send, Reply};
use serde_json::json;

fn request(port: u16, method: &str, path: &str, headers: &[(&str, &str)]) -> Reply {
    send("127.0.0.1", port, method, path, headers, "")
}

/// A browser's preflight for a POST with an API key, from `origin`.
fn preflight(port: u16, path: &str, origin: &str) -> Reply {
    request(
        port,
        "OPTIONS",
        path,
        &[
            ("Origin", origin),
            ("Access-Control-Request-Method", "POST"),
            ("Access-Control-Request-Headers", "Authorization"),
        ],
    )
}

#[test]
fn by_default_every_origin_is_echoed_with_credentials() {
    let Some(srv) = start(&["-np", "1", "--api-key", "k"]) else {
        return;
    };
    let p = srv.port;
    // llama-server's test_cors_options cases: any Origin, even one that is no URL.
    for origin in ["localhost", "web.mydomain.fr", "http://evil.com"] {
        let r = preflight(p, "/completions", origin);
        assert_eq!(r.status, 200, "{origin}");
        assert!(r.body.is_empty());
        assert_eq!(r.header("Content-Type"), Some("text/html"));
        assert_eq!(r.header("Access-Control-Allow-Origin"), Some(origin));
        assert_eq!(r.header("Access-Control-Allow-Credentials"), Some("true"));
        assert_eq!(
            r.header("Access-Control-Allow-Methods"),
            Some("GET, POST, DELETE, OPTIONS")
        );
        assert_eq!(r.header("Access-Control-Allow-Headers"), Some("*"));
    }
    // Any path, even one that does not exist.
    assert_eq!(
        preflight(p, "/no/such/path", "http://a.example").status,
        200
    );
    // The answers themselves carry the origin, and the API key is still asked for.
    let evil = [("Origin", "http://evil.com")];
    let r = request(p, "GET", "/health", &evil);
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("Access-Control-Allow-Origin"),
        Some("http://evil.com")
    );
    assert_eq!(r.header("Access-Control-Allow-Credentials"), Some("true"));
    let r = request(p, "GET", "/v1/models", &evil);
    assert_eq!(r.status, 401);
    assert_eq!(
        r.header("Access-Control-Allow-Origin"),
        Some("http://evil.com")
    );
    let r = request(
        p,
        "GET",
        "/v1/models",
        &[("Origin", "http://evil.com"), ("Authorization", "Bearer k")],
    );
    assert_eq!(r.status, 200);
}

#[test]
fn the_localhost_rule() {
    let Some(srv) = start(&["-np", "1", "--cors-origins", "localhost"]) else {
        return;
    };
    let p = srv.port;
    for origin in [
        "http://localhost",
        "http://localhost:8080",
        "http://127.0.0.1",
        "http://127.0.0.1:3000",
        "http://[::1]",
        "http://[::1]:3000",
    ] {
        let r = preflight(p, "/completions", origin);
        assert_eq!(r.status, 200, "{origin}");
        assert_eq!(r.header("Access-Control-Allow-Origin"), Some(origin));
        let r = request(p, "GET", "/v1/models", &[("Origin", origin)]);
        assert_eq!(r.status, 200, "{origin}");
        assert_eq!(r.header("Access-Control-Allow-Origin"), Some(origin));
    }
    for origin in [
        "http://web.mydomain.fr",
        "http://evil.com",
        "http://notlocalhost",
        "http://localhost.evil.com",
    ] {
        // The preflight is answered, without the origin: the browser stops there.
        let r = preflight(p, "/completions", origin);
        assert_eq!(r.status, 200, "{origin}");
        assert_eq!(r.header("Access-Control-Allow-Origin"), None, "{origin}");
        assert_eq!(r.header("Access-Control-Allow-Credentials"), Some("true"));
        // A request sent without asking first is refused here.
        let r = request(p, "GET", "/v1/models", &[("Origin", origin)]);
        assert_eq!(r.status, 403, "{origin}");
        assert_eq!(r.header("Access-Control-Allow-Origin"), None);
    }
    // Clients that send no Origin (not browsers) are served.
    assert_eq!(request(p, "GET", "/v1/models", &[]).status, 200);
}

#[test]
fn a_list_and_star_without_credentials() {
    let Some(srv) = start(&["-np", "1", "--cors-origins", "http://app.example"]) else {
        return;
    };
    let app = [("Origin", "http://app.example")];
    let r = preflight(srv.port, "/v1/chat/completions", "http://app.example");
    assert_eq!(
        r.header("Access-Control-Allow-Origin"),
        Some("http://app.example")
    );
    let r = request(srv.port, "GET", "/health", &app);
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("Access-Control-Allow-Origin"),
        Some("http://app.example")
    );
    // Another site: the preflight names the allowed origin, as llama-server's does, and a
    // request is refused.
    let r = preflight(srv.port, "/v1/chat/completions", "http://evil.example");
    assert_eq!(
        r.header("Access-Control-Allow-Origin"),
        Some("http://app.example")
    );
    let r = request(
        srv.port,
        "GET",
        "/health",
        &[("Origin", "http://evil.example")],
    );
    assert_eq!(r.status, 403);
    drop(srv);

    // `*` without credentials: `*` itself, and credentials refused on the preflight.
    let srv = start(&["-np", "1", "--cors-origins", "*", "--no-cors-credentials"]).unwrap();
    let origin = [("Origin", "http://anywhere.example:3000")];
    let r = request(srv.port, "GET", "/health", &origin);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("Access-Control-Allow-Origin"), Some("*"));
    assert_eq!(r.header("Access-Control-Allow-Credentials"), None);
    let r = preflight(srv.port, "/completion", "http://anywhere.example:3000");
    assert_eq!(r.header("Access-Control-Allow-Origin"), Some("*"));
    assert_eq!(r.header("Access-Control-Allow-Credentials"), Some("false"));
    // A streamed answer carries it as well.
    let body = json!({"prompt": "Hi", "n_predict": 2, "stream": true}).to_string();
    let r = send(
        "127.0.0.1",
        srv.port,
        "POST",
        "/completion",
        &[
            ("Origin", "http://anywhere.example:3000"),
            ("Content-Type", "application/json"),
        ],
        &body,
    );
    assert_eq!(r.status, 200);
    assert_eq!(r.header("Access-Control-Allow-Origin"), Some("*"));
}
