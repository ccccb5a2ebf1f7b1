//! A minimal HTTP/1.1 client for the server tests: one request per connection, the reply's
//! status, headers and body (Content-Length, chunked or close-delimited).

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::Duration;

/// A parsed HTTP response.
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "status {}: body is not JSON ({e}): {}",
                self.status,
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Sends `method path` to `addr:port` with `headers` and `body` on a fresh connection.
pub fn send(
    addr: &str,
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Reply {
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}:{port}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (n, v) in headers {
        req.push_str(&format!("{n}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    raw(addr, port, req.as_bytes())
}

/// POSTs `body` as JSON to `path` of the server on loopback port `port`.
pub fn post(port: u16, path: &str, body: &serde_json::Value) -> Reply {
    send(
        "127.0.0.1",
        port,
        "POST",
        path,
        &[("Content-Type", "application/json")],
        &body.to_string(),
    )
}

/// Sends raw bytes on a fresh connection and reads the reply.
pub fn raw(addr: &str, port: u16, request: &[u8]) -> Reply {
    let mut s = TcpStream::connect((addr, port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    s.write_all(request).unwrap();
    read_reply(&mut BufReader::new(s))
}

/// Reads one response (head, then a Content-Length, chunked or close-delimited body).
pub fn read_reply(r: &mut impl BufRead) -> Reply {
    let mut status_line = String::new();
    r.read_line(&mut status_line).unwrap();
    let status: u16 = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {status_line:?}"));
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        let (n, v) = line.split_once(':').unwrap();
        headers.push((n.to_string(), v.trim().to_string()));
    }
    let mut reply = Reply {
        status,
        headers,
        body: Vec::new(),
    };
    if let Some(n) = reply.header("content-length") {
        let mut body = vec![0; n.parse().unwrap()];
        r.read_exact(&mut body).unwrap();
        reply.body = body;
    } else if reply.header("transfer-encoding") == Some("chunked") {
        loop {
            let mut size = String::new();
            r.read_line(&mut size).unwrap();
            let n = usize::from_str_radix(size.trim(), 16).unwrap();
            let mut chunk = vec![0; n + 2];
            r.read_exact(&mut chunk).unwrap();
            if n == 0 {
                break;
            }
            reply.body.extend_from_slice(&chunk[..n]);
        }
    } else {
        r.read_to_end(&mut reply.body).unwrap();
    }
    reply
}
