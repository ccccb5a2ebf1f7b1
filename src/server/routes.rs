//! Routing: which handler answers which method and path (under `--api-prefix`), after the
//! checks every request goes through: the `Host` of a server bound to loopback (a DNS
//! rebinding attack must not drive it), the `Origin` of browser requests (a page on another
//! site only where `--cors-origins` allows it: by default any, as llama-server) and the API
//! key. Preflight `OPTIONS` requests to any path are answered here (`cors`).

use super::embeddings::{self, Api};
use super::error::ApiError;
use super::http::Request;
use super::response::{Responder, Response};
use super::{
    anthropic, infill, native, openai, rerank, responses, slot_actions, static_files, webui, State,
};

/// Answers one request; errors become JSON error responses.
pub fn handle(state: &State, req: &Request, rsp: &mut Responder) {
    rsp.head_only = req.method == "HEAD";
    if let Err(e) = route(state, req, rsp) {
        state.metrics.http_errors.add(1);
        let _ = rsp.send(&e.response());
    }
}

/// Paths served without the API key: the health check and the chat page (which asks for it).
fn is_public(path: &str) -> bool {
    matches!(path, "/" | "/index.html" | "/health" | "/v1/health")
}

/// The path under `--api-prefix`, or `None` when it lies outside the prefix.
fn unprefixed<'a>(prefix: &str, path: &'a str) -> Option<&'a str> {
    if prefix.is_empty() {
        return Some(path);
    }
    match path.strip_prefix(prefix)? {
        "" => Some("/"),
        rest if rest.starts_with('/') => Some(rest),
        _ => None,
    }
}

fn route(state: &State, req: &Request, rsp: &mut Responder) -> Result<(), ApiError> {
    check_host(state, req)?;
    if req.method == "OPTIONS" {
        // A preflight, to any path: answered without the API key, as browsers send none with
        // it, and whatever the origin (a browser reads the verdict from the headers).
        let mut r = Response::text(200, "text/html", "");
        r.headers
            .extend(state.config.cors.preflight_headers(req.header("origin")));
        return rsp.send(&r).map_err(ApiError::from);
    }
    check_origin(state, req, rsp)?;
    let prefix = &state.config.api_prefix;
    if !prefix.is_empty() && req.path == *prefix && matches!(req.method.as_str(), "GET" | "HEAD") {
        // The chat page loads the API by relative URLs: it must be opened as `PREFIX/`.
        let location = match req.query.as_str() {
            q if !q.is_empty() && q.bytes().all(|b| b.is_ascii_graphic()) => {
                format!("{prefix}/?{q}")
            }
            _ => format!("{prefix}/"),
        };
        let r = Response::text(
            302,
            "text/plain; charset=utf-8",
            format!("see {location}\n"),
        )
        .with_header("Location", location);
        return rsp.send(&r).map_err(ApiError::from);
    }
    let Some(path) = unprefixed(&state.config.api_prefix, &req.path) else {
        return Err(ApiError::not_found(format!(
            "no endpoint {} {} (this server answers under {})",
            req.method,
            printable(&req.path),
            state.config.api_prefix
        )));
    };
    if !is_public(path) {
        check_api_key(state, req)?;
    }
    let get = matches!(req.method.as_str(), "GET" | "HEAD");
    let post = req.method == "POST";
    let send = |rsp: &mut Responder, r: Response| rsp.send(&r).map_err(ApiError::from);
    if let Some(dir) = state
        .config
        .static_path
        .as_deref()
        .filter(|_| state.config.webui)
    {
        // `--path`: its files answer first, in place of the chat page.
        if get {
            if let Some(file) = static_files::lookup(dir, path)? {
                return send(rsp, static_files::serve(&file)?);
            }
            if matches!(path, "/" | "/index.html") {
                return Err(ApiError::not_found("no index.html in the --path directory"));
            }
        }
    }
    match path {
        "/" | "/index.html" if get && !state.config.webui => Err(ApiError::not_found(
            "the chat page is off (--no-webui); the API is served",
        )),
        "/" | "/index.html" if get => send(rsp, webui::page()),
        "/health" | "/v1/health" if get => send(rsp, native::health(state)),
        "/v1/models" | "/models" if get => send(rsp, openai::models(state)),
        "/props" if get => send(rsp, native::props(state)),
        "/slots" if get && !state.config.slots_endpoint => Err(ApiError::new(
            501,
            "not_supported_error",
            "this server does not serve /slots (started with --no-slots)",
        )),
        "/slots" if get => send(rsp, native::slots(state, &req.query)?),
        p if p.starts_with("/slots/") && post => {
            slot_actions::handle(state, &p["/slots/".len()..], &req.query, &req.body, rsp)
        }
        p if p.starts_with("/slots/") => Err(method_not_allowed(&req.method, "POST")),
        "/metrics" if get && !state.config.metrics_endpoint => Err(ApiError::new(
            501,
            "not_supported_error",
            "This server does not support metrics endpoint. Start it with `--metrics`",
        )),
        "/metrics" if get => send(
            rsp,
            Response::text(200, "text/plain; version=0.0.4", state.metrics.render()).with_header(
                "Process-Start-Time-Unix",
                state.metrics.started_unix.to_string(),
            ),
        ),
        "/v1/chat/completions"
        | "/chat/completions"
        | "/v1/completions"
        | "/v1/messages"
        | "/v1/responses"
        | "/responses"
        | "/completion"
        | "/completions"
        | "/infill"
            if post && state.loaded.model.config.arch.is_encoder() =>
        {
            Err(ApiError::new(
                501,
                "not_supported_error",
                format!(
                    "This server does not support completions: the model is a {} encoder \
                     (embeddings and reranking only)",
                    state.loaded.model.config.arch.name()
                ),
            ))
        }
        "/v1/chat/completions" | "/chat/completions" if post => {
            openai::chat_completions(state, &req.body, rsp)
        }
        "/v1/completions" if post => openai::completions(state, &req.body, rsp),
        "/v1/messages" if post => anthropic::messages(state, &req.body, rsp),
        "/v1/responses" | "/responses" if post => responses::create(state, &req.body, rsp),
        "/v1/responses/input_tokens" if post => {
            send(rsp, responses::input_tokens(state, &req.body)?)
        }
        "/v1/messages/count_tokens" if post => {
            send(rsp, anthropic::count_tokens(state, &req.body)?)
        }
        "/completion" | "/completions" if post => native::completion(state, &req.body, rsp),
        "/v1/embeddings" if post => embeddings::handle(state, &req.body, rsp, Api::OpenAi),
        "/embedding" | "/embeddings" if post => {
            embeddings::handle(state, &req.body, rsp, Api::Native)
        }
        "/infill" if post => infill::handle(state, &req.body, rsp),
        "/rerank" | "/reranking" | "/v1/rerank" | "/v1/reranking" if post => {
            rerank::handle(state, &req.body, rsp)
        }
        "/tokenize" if post => send(rsp, native::tokenize(state, &req.body)?),
        "/detokenize" if post => send(rsp, native::detokenize(state, &req.body)?),
        "/apply-template" if post => send(rsp, native::apply_template(state, &req.body)?),
        "/props" if post => send(rsp, native::set_props(state, &req.body)?),
        "/lora-adapters" if get => send(rsp, state.lora.list()),
        "/lora-adapters" if post => send(rsp, state.lora.set(&req.body)?),
        "/lora-adapters" => Err(method_not_allowed(&req.method, "GET or POST")),
        "/props" => Err(method_not_allowed(&req.method, "GET or POST")),
        "/" | "/index.html" | "/health" | "/v1/health" | "/v1/models" | "/models" | "/slots"
        | "/metrics" => Err(method_not_allowed(&req.method, "GET")),
        "/v1/chat/completions"
        | "/chat/completions"
        | "/v1/completions"
        | "/v1/messages"
        | "/v1/messages/count_tokens"
        | "/v1/responses"
        | "/responses"
        | "/v1/responses/input_tokens"
        | "/completion"
        | "/completions"
        | "/tokenize"
        | "/detokenize"
        | "/apply-template"
        | "/v1/embeddings"
        | "/embedding"
        | "/embeddings"
        | "/infill"
        | "/rerank"
        | "/reranking"
        | "/v1/rerank"
        | "/v1/reranking" => Err(method_not_allowed(&req.method, "POST")),
        _ => Err(ApiError::not_found(format!(
            "no endpoint {} {} (see GET /props and the README for the API)",
            req.method,
            printable(path)
        ))),
    }
}

fn method_not_allowed(method: &str, allowed: &str) -> ApiError {
    ApiError::new(
        405,
        "invalid_request_error",
        format!("method {method} is not allowed here; use {allowed}"),
    )
}

/// A request path shortened and stripped of anything odd before it goes into a message.
fn printable(path: &str) -> String {
    path.chars()
        .take(100)
        .map(|c| if c.is_ascii_graphic() { c } else { '?' })
        .collect()
}

fn check_api_key(state: &State, req: &Request) -> Result<(), ApiError> {
    let keys = &state.config.api_keys;
    if keys.is_empty() {
        return Ok(());
    }
    let given = req
        .header("authorization")
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .or_else(|| req.header("x-api-key"))
        .map(str::trim);
    match given {
        Some(g)
            if keys.iter().fold(false, |ok, k| {
                constant_time_eq(g.as_bytes(), k.as_bytes()) | ok
            }) =>
        {
            Ok(())
        }
        Some(_) => Err(ApiError::new(
            401,
            "authentication_error",
            "invalid API key",
        )),
        None => Err(ApiError::new(
            401,
            "authentication_error",
            "an API key is required: send 'Authorization: Bearer <key>'",
        )),
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The host part of `host[:port]` or `[v6]:port`, lowercased.
fn host_name(authority: &str) -> String {
    let a = authority.trim();
    let host = if let Some(rest) = a.strip_prefix('[') {
        rest.split(']').next().unwrap_or("")
    } else {
        a.rsplit_once(':').map_or(a, |(h, _)| h)
    };
    host.to_ascii_lowercase()
}

/// A server bound to loopback answers only requests addressed to this machine: a page whose
/// site's name was pointed at 127.0.0.1 (DNS rebinding) sends its own name as `Host`.
fn check_host(state: &State, req: &Request) -> Result<(), ApiError> {
    if let Some(h) = req.header("host").filter(|_| state.loopback) {
        let name = host_name(h);
        let loopback_ip = name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
        if name != "localhost" && !loopback_ip {
            return Err(ApiError::new(
                403,
                "permission_error",
                "the Host header does not name this machine (a server bound to loopback \
                 answers only requests addressed to it)",
            ));
        }
    }
    Ok(())
}

/// A page's `Origin`: its own (the server's pages) or one `--cors-origins` allows gets the
/// CORS headers on the answer; any other is refused.
fn check_origin(state: &State, req: &Request, rsp: &mut Responder) -> Result<(), ApiError> {
    if let Some(origin) = req.header("origin") {
        let authority = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"));
        let same = match (authority, req.header("host")) {
            (Some(a), Some(h)) => a.eq_ignore_ascii_case(h),
            _ => false,
        };
        if same || state.config.cors.allows(origin) {
            rsp.extra_headers = state.config.cors.answer_headers(origin);
        } else {
            return Err(ApiError::new(
                403,
                "permission_error",
                "cross-origin request refused: --cors-origins does not allow this Origin",
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_names() {
        assert_eq!(host_name("LocalHost:8080"), "localhost");
        assert_eq!(host_name("[::1]:80"), "::1");
        assert_eq!(host_name("127.0.0.1"), "127.0.0.1");
        assert_eq!(host_name("evil.example"), "evil.example");
    }

    #[test]
    fn prefixes() {
        assert_eq!(unprefixed("", "/health"), Some("/health"));
        assert_eq!(unprefixed("/llama", "/llama/health"), Some("/health"));
        assert_eq!(unprefixed("/llama", "/llama"), Some("/"));
        assert_eq!(unprefixed("/llama", "/llamas/health"), None);
        assert_eq!(unprefixed("/llama", "/health"), None);
    }

    #[test]
    fn key_comparison() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
    }
}
