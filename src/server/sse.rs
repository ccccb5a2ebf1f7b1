//! Server-Sent Events: each event is written as one chunk of a chunked response (or raw bytes
//! of a close-delimited one for HTTP/1.0) and flushed at once, so a token reaches the client as
//! soon as it is generated. A write error means the client has gone.

use super::conn::Conn;
use std::io::{self, Write};

/// An open event stream.
pub struct SseStream {
    stream: Conn,
    chunked: bool,
}

impl SseStream {
    pub(super) fn new(stream: Conn, chunked: bool) -> SseStream {
        SseStream { stream, chunked }
    }

    /// Sends `data: <line>` as one event and flushes it.
    pub fn data(&mut self, line: &str) -> io::Result<()> {
        debug_assert!(!line.contains('\n'));
        let event = format!("data: {line}\n\n");
        self.write(event.as_bytes())
    }

    /// Sends `data: <json>`.
    pub fn json(&mut self, value: &serde_json::Value) -> io::Result<()> {
        self.data(&value.to_string())
    }

    /// Sends `event: <name>` and `data: <json>` as one event (Anthropic's streams name theirs).
    pub fn named(&mut self, name: &str, value: &serde_json::Value) -> io::Result<()> {
        debug_assert!(!name.contains('\n'));
        let event = format!("event: {name}\ndata: {value}\n\n");
        self.write(event.as_bytes())
    }

    fn write(&mut self, payload: &[u8]) -> io::Result<()> {
        let mut buf = Vec::with_capacity(payload.len() + 16);
        if self.chunked {
            buf.extend_from_slice(format!("{:x}\r\n", payload.len()).as_bytes());
            buf.extend_from_slice(payload);
            buf.extend_from_slice(b"\r\n");
        } else {
            buf.extend_from_slice(payload);
        }
        self.stream.write_all(&buf)?;
        self.stream.flush()
    }

    /// Ends the stream.
    pub fn finish(mut self) -> io::Result<()> {
        if self.chunked {
            self.stream.write_all(b"0\r\n\r\n")?;
        }
        self.stream.flush()
    }
}
