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
    /// A machine-readable reason (`context_length_exceeded`); the HTTP status otherwise.
    pub code: Option<&'static str>,
}

impl ApiError {
    pub fn new(status: u16, kind: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            kind,
            message: message.into(),
            param: None,
            code: None,
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
        }
    }

    pub fn with_code(mut self, code: &'static str) -> ApiError {
        self.code = Some(code);
        self
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
        json!({
            "error": {
                "code": match self.code {
                    Some(c) => serde_json::Value::from(c),
                    None => serde_json::Value::from(self.status),
                },
                "type": self.kind,
                "message": self.message,
                "param": self.param,
            }
        })
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
