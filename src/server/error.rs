//! API errors: an HTTP status and an OpenAI-style JSON body
//! (`{"error": {"code", "type", "message", "param"}}`) that names the offending field by its JSON
//! path, so a client can tell exactly what to fix.

use super::response::Response;
use serde_json::json;

/// An error answered to the client.
#[derive(Clone, Debug, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    pub status: u16,
    /// OpenAI's error type: `invalid_request_error`, `authentication_error`, ...
    pub kind: &'static str,
    pub message: String,
    /// The JSON path of the offending field (`messages[1].content`), when one is to blame.
    pub param: Option<String>,
    /// A machine-readable reason; the HTTP status otherwise.
    pub code: Option<&'static str>,
    /// More fields of the error object (`n_prompt_tokens`, `n_ctx`).
    pub extra: Vec<(&'static str, serde_json::Value)>,
}

impl ApiError {
    pub fn new(status: u16, kind: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            kind,
            message: message.into(),
            param: None,
            code: None,
            extra: Vec::new(),
        }
    }

    /// A bad field: 400, with its path in both `param` and the message.
    pub fn field(path: &str, problem: impl std::fmt::Display) -> ApiError {
        ApiError {
            status: 400,
            kind: "invalid_request_error",
            message: format!("{path}: {problem}"),
            param: Some(path.to_string()),
            code: None,
            extra: Vec::new(),
        }
    }

    pub fn with_code(mut self, code: &'static str) -> ApiError {
        self.code = Some(code);
        self
    }

    /// A prompt of `n_prompt` tokens that a slot of `n_ctx` positions cannot hold, in
    /// llama-server's shape: type `exceed_context_size_error`, code 400, and both counts.
    pub fn context_exceeded(field: &str, n_prompt: usize, n_ctx: usize) -> ApiError {
        let mut e = ApiError::field(
            field,
            format!(
                "the request exceeds the available context size: the prompt is {n_prompt} tokens, a slot holds {n_ctx} (-c / -np)"
            ),
        );
        e.kind = "exceed_context_size_error";
        e.extra = vec![
            ("n_prompt_tokens", n_prompt.into()),
            ("n_ctx", n_ctx.into()),
        ];
        e
    }

    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(400, "invalid_request_error", message)
    }

    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(404, "not_found_error", message)
    }

    pub fn unavailable(message: impl Into<String>) -> ApiError {
        ApiError::new(503, "unavailable_error", message)
    }

    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(500, "server_error", message)
    }

    /// The JSON body.
    pub fn body(&self) -> serde_json::Value {
        let mut v = json!({
            "error": {
                "code": match self.code {
                    Some(c) => serde_json::Value::from(c),
                    None => serde_json::Value::from(self.status),
                },
                "type": self.kind,
                "message": self.message,
                "param": self.param,
            }
        });
        for (k, x) in &self.extra {
            v["error"][*k] = x.clone();
        }
        v
    }

    pub fn response(&self) -> Response {
        let r = Response::json(self.status, &self.body());
        if self.status == 401 {
            r.with_header("WWW-Authenticate", "Bearer")
        } else {
            r
        }
    }
}

impl From<std::io::Error> for ApiError {
    fn from(e: std::io::Error) -> ApiError {
        ApiError::internal(format!("i/o error: {e}"))
    }
}
