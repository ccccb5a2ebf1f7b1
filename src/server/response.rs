//! Writing responses: complete bodies with a `Content-Length`, or the head of a Server-Sent
//! Event stream (the events themselves are `sse`). Header values come from the server only,
//! except an allowed page's `Origin` echoed back for CORS (`cors`).

use std::io::{self, Write};

use super::conn::Conn;
use super::sse::SseStream;

/// The send buffer of an event stream's socket, in bytes.
pub const STREAM_SEND_BUFFER: usize = 32 * 1024;

/// A complete response.
#[derive(Clone, Debug)]
pub struct Response {
    pub status: u16,
    pub content_type: &'static str,
    pub body: Vec<u8>,
    pub headers: Vec<(&'static str, String)>,
}

impl Response {
    pub fn json(status: u16, value: &serde_json::Value) -> Response {
        Response {
            status,
            content_type: "application/json; charset=utf-8",
            body: serde_json::to_vec(value).expect("a JSON value serializes"),
            headers: Vec::new(),
        }
    }

    pub fn text(status: u16, content_type: &'static str, body: impl Into<Vec<u8>>) -> Response {
        Response {
            status,
            content_type,
            body: body.into(),
            headers: Vec::new(),
        }
    }

    pub fn with_header(mut self, name: &'static str, value: impl Into<String>) -> Response {
        self.headers.push((name, value.into()));
        self
    }
}

/// The reason phrase of the statuses this server sends.
pub fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        204 => "No Content",
        302 => "Found",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        413 => "Content Too Large",
        415 => "Unsupported Media Type",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        505 => "HTTP Version Not Supported",
        _ => "Unknown",
    }
}

/// The writing half of a connection for one request.
pub struct Responder {
    stream: Conn,
    http11: bool,
    /// Whether the connection may serve another request after this response.
    pub keep_alive: bool,
    /// `HEAD`: headers only.
    pub head_only: bool,
    /// Headers every answer to this request carries (CORS).
    pub extra_headers: Vec<(&'static str, String)>,
}

impl Responder {
    pub fn new(stream: Conn, http11: bool, keep_alive: bool) -> Responder {
        Responder {
            stream,
            http11,
            keep_alive,
            head_only: false,
            extra_headers: Vec::new(),
        }
    }

    /// Sends a complete response.
    pub fn send(&mut self, r: &Response) -> io::Result<()> {
        let mut head = format!(
            "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: {}\r\nX-Content-Type-Options: nosniff\r\n",
            r.status,
            reason(r.status),
            r.content_type,
            r.body.len(),
            if self.keep_alive { "keep-alive" } else { "close" },
        );
        for (name, value) in r.headers.iter().chain(&self.extra_headers) {
            debug_assert!(!value.contains(['\r', '\n']));
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str("\r\n");
        let mut out = head.into_bytes();
        if !self.head_only {
            out.extend_from_slice(&r.body);
        }
        self.stream.write_all(&out)?;
        self.stream.flush()
    }

    /// Starts a `text/event-stream` response. Its socket buffers at most about
    /// [`STREAM_SEND_BUFFER`] bytes (twice that, as Linux counts): a client that stops reading
    /// blocks the writer after that much, and is cut by the write timeout.
    pub fn sse(&mut self) -> io::Result<SseStream> {
        self.stream.limit_send_buffer(STREAM_SEND_BUFFER);
        let chunked = self.http11;
        if !chunked {
            self.keep_alive = false;
        }
        let extra: String = self
            .extra_headers
            .iter()
            .map(|(n, v)| format!("{n}: {v}\r\n"))
            .collect();
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nX-Content-Type-Options: nosniff\r\nConnection: {}\r\n{}{extra}\r\n",
            if self.keep_alive { "keep-alive" } else { "close" },
            if chunked { "Transfer-Encoding: chunked\r\n" } else { "" },
        );
        self.stream.write_all(head.as_bytes())?;
        self.stream.flush()?;
        Ok(SseStream::new(self.stream.try_clone()?, chunked))
    }

    /// True when the peer has closed its side (checked without blocking or consuming data).
    pub fn client_gone(&self) -> bool {
        self.stream.client_gone()
    }
}
