//! HTTP/1.1 request reading with hard limits, written for a server that faces untrusted
//! clients: bounded header bytes and count, bounded bodies (checked before reading), strict
//! CRLF framing, no CR/LF or control bytes inside header values, no obsolete line folding, and
//! requests that give both `Content-Length` and `Transfer-Encoding` (the classic smuggling
//! vector) refused. Deadlines bound how long a connection may wait (slow clients, slowloris):
//! a new connection's first request head must arrive within the head timeout of the accept, a
//! kept-alive connection may idle for the idle timeout before its next request starts and then
//! has the head timeout for it, and a body has the body timeout once its head is in.
//!
//! Owns parsing only; writing responses is `response`, routing is `routes`.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// What requests are read from: a byte stream whose reads can be bounded in time. A socket in
/// the server; a byte slice in the fuzz target (`fuzz/`), where time never runs out.
pub trait Source: Read {
    /// Bounds how long the next read may wait (`None`: no bound).
    fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()>;
}

impl Source for TcpStream {
    fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        TcpStream::set_read_timeout(self, timeout)
    }
}

impl Source for &[u8] {
    fn set_read_timeout(&self, _: Option<Duration>) -> io::Result<()> {
        Ok(())
    }
}

/// Limits applied to every request.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Request line plus all header lines.
    pub max_header_bytes: usize,
    pub max_headers: usize,
    pub max_body_bytes: usize,
    /// How long a request head may take to arrive: from the accept for a connection's first
    /// request, from its first byte for later ones (`-to`).
    pub head_timeout: Duration,
    /// How long a body may take to arrive once its head is in (`-to`).
    pub body_timeout: Duration,
    /// How long a kept-alive connection may sit idle before its next request starts.
    pub idle_timeout: Duration,
    /// How long one write may make no progress (a client that stopped reading) (`-to`).
    pub write_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits::with_timeout(Duration::from_secs(crate::cli::DEFAULT_TIMEOUT_SECS))
    }
}

impl Limits {
    /// The default limits with `timeout` for heads, bodies and stalled writes.
    pub fn with_timeout(timeout: Duration) -> Limits {
        Limits {
            max_header_bytes: 16 * 1024,
            max_headers: 64,
            max_body_bytes: 8 * 1024 * 1024,
            head_timeout: timeout,
            body_timeout: timeout,
            idle_timeout: Duration::from_secs(5),
            write_timeout: timeout,
        }
    }
}

/// `now + d`, or a year from now when `d` is too large to add.
fn deadline_after(d: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(d)
        .or_else(|| now.checked_add(Duration::from_secs(365 * 86_400)))
        .unwrap_or(now)
}

/// One parsed request.
#[derive(Debug)]
pub struct Request {
    pub method: String,
    /// The path, without the query string.
    pub path: String,
    pub query: String,
    /// Header names lowercased; values trimmed.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// HTTP/1.1 (not 1.0).
    pub http11: bool,
    /// Whether the client allows the connection to stay open after the response.
    pub keep_alive: bool,
}

impl Request {
    /// The first header named `name` (lowercase).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Why a request could not be read.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// The client closed the connection (or stayed idle) between requests: not an error to report.
    #[error("connection closed")]
    Closed,
    #[error("i/o error: {0}")]
    Io(#[from] io::Error),
    #[error("timed out reading the request")]
    Timeout,
    #[error("request head exceeds {0} bytes")]
    HeadTooLarge(usize),
    #[error("more than {0} header fields")]
    TooManyHeaders(usize),
    #[error("request body exceeds the limit of {0} bytes")]
    BodyTooLarge(usize),
    #[error("malformed request: {0}")]
    Malformed(&'static str),
    #[error("request has both Content-Length and Transfer-Encoding; refused (request smuggling)")]
    Smuggling,
    #[error("unsupported Transfer-Encoding (only 'chunked' is accepted)")]
    UnsupportedEncoding,
    #[error("unsupported HTTP version (1.0 and 1.1 are served)")]
    Version,
}

impl HttpError {
    /// The status to answer with, or `None` when nothing can be sent.
    pub fn status(&self) -> Option<u16> {
        Some(match self {
            HttpError::Closed | HttpError::Io(_) => return None,
            HttpError::Timeout => 408,
            HttpError::HeadTooLarge(_) | HttpError::TooManyHeaders(_) => 431,
            HttpError::BodyTooLarge(_) => 413,
            HttpError::Malformed(_) | HttpError::Smuggling => 400,
            HttpError::UnsupportedEncoding => 501,
            HttpError::Version => 505,
        })
    }
}

/// The reading half of a connection, kept across the requests of a kept-alive connection.
pub struct RequestReader<S: Source = TcpStream> {
    reader: BufReader<S>,
    limits: Limits,
    /// The first request's head deadline (counted from the accept); `None` once it is read.
    first_deadline: Option<Instant>,
}

impl<S: Source> RequestReader<S> {
    /// `accepted`: when the connection was accepted (its first head is due a head timeout later).
    pub fn new(stream: S, limits: Limits, accepted: Instant) -> RequestReader<S> {
        let first_deadline = accepted
            .checked_add(limits.head_timeout)
            .unwrap_or_else(|| deadline_after(limits.head_timeout));
        RequestReader {
            reader: BufReader::with_capacity(8192, stream),
            limits,
            first_deadline: Some(first_deadline),
        }
    }

    /// Reads the next request. `writer` receives `100 Continue` when the client expects it.
    /// A connection closed, or left silent past its deadline, before a request starts is
    /// [`HttpError::Closed`]: nothing was asked, so nothing is answered.
    pub fn next_request(&mut self, writer: &mut impl Write) -> Result<Request, HttpError> {
        let deadline = match self.first_deadline.take() {
            Some(deadline) => {
                self.wait_for_request(deadline)?;
                deadline
            }
            None => {
                self.wait_for_request(deadline_after(self.limits.idle_timeout))?;
                deadline_after(self.limits.head_timeout)
            }
        };
        let mut budget = self.limits.max_header_bytes;

        let line = self.line(&mut budget, deadline, HttpError::HeadTooLarge)?;
        let (method, target, http11) = parse_request_line(&line)?;
        let mut headers = Vec::new();
        loop {
            let line = self.line(&mut budget, deadline, HttpError::HeadTooLarge)?;
            if line.is_empty() {
                break;
            }
            if headers.len() == self.limits.max_headers {
                return Err(HttpError::TooManyHeaders(self.limits.max_headers));
            }
            headers.push(parse_header(&line)?);
        }
        let connection = values(&headers, "connection")
            .map(|v| v.to_ascii_lowercase())
            .collect::<Vec<_>>()
            .join(",");
        let keep_alive = if http11 {
            !connection.contains("close")
        } else {
            connection.contains("keep-alive")
        };

        let te: Vec<&String> = values(&headers, "transfer-encoding").collect();
        let cl: Vec<&String> = values(&headers, "content-length").collect();
        if !te.is_empty() && !cl.is_empty() {
            return Err(HttpError::Smuggling);
        }
        let chunked = match te.as_slice() {
            [] => false,
            [v] if v.eq_ignore_ascii_case("chunked") && http11 => true,
            _ => return Err(HttpError::UnsupportedEncoding),
        };
        let length = match cl.as_slice() {
            [] => 0,
            [first, rest @ ..] => {
                if rest.iter().any(|v| v != first) {
                    return Err(HttpError::Malformed("conflicting Content-Length headers"));
                }
                if first.is_empty() || !first.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(HttpError::Malformed("Content-Length is not a number"));
                }
                first
                    .parse::<usize>()
                    .map_err(|_| HttpError::BodyTooLarge(self.limits.max_body_bytes))?
            }
        };
        if length > self.limits.max_body_bytes {
            return Err(HttpError::BodyTooLarge(self.limits.max_body_bytes));
        }
        let expects_continue =
            values(&headers, "expect").any(|v| v.eq_ignore_ascii_case("100-continue"));
        if expects_continue && (chunked || length > 0) {
            writer.write_all(b"HTTP/1.1 100 Continue\r\n\r\n")?;
            writer.flush()?;
        }
        let deadline = deadline_after(self.limits.body_timeout);
        let body = if chunked {
            self.chunked_body(deadline)?
        } else {
            self.exact(length, deadline)?
        };
        let (path, query) = match target.split_once('?') {
            Some((p, q)) => (p.to_string(), q.to_string()),
            None => (target, String::new()),
        };
        Ok(Request {
            method,
            path,
            query,
            headers,
            body,
            http11,
            keep_alive,
        })
    }

    /// One CRLF-terminated line (without the CRLF), charged against `budget`.
    fn line(
        &mut self,
        budget: &mut usize,
        deadline: Instant,
        too_long: fn(usize) -> HttpError,
    ) -> Result<Vec<u8>, HttpError> {
        let limit = self.limits.max_header_bytes;
        let mut line = Vec::new();
        loop {
            let buf = self.fill(deadline)?;
            if buf.is_empty() {
                return Err(HttpError::Malformed(
                    "connection closed inside the request head",
                ));
            }
            let (take, done) = match buf.iter().position(|&b| b == b'\n') {
                Some(i) => (i + 1, true),
                None => (buf.len(), false),
            };
            if take > *budget {
                return Err(too_long(limit));
            }
            *budget -= take;
            line.extend_from_slice(&buf[..take]);
            self.reader.consume(take);
            if done {
                break;
            }
        }
        line.pop(); // '\n'
        if line.pop() != Some(b'\r') {
            return Err(HttpError::Malformed("line not terminated by CRLF"));
        }
        Ok(line)
    }

    /// Waits until the first byte of a request is buffered, or fails with
    /// [`HttpError::Closed`] when the peer closes or `deadline` passes first.
    fn wait_for_request(&mut self, deadline: Instant) -> Result<(), HttpError> {
        match self.fill(deadline) {
            Ok([]) | Err(HttpError::Timeout) => Err(HttpError::Closed),
            Ok(_) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// The buffered bytes, reading more when there are none; empty when the peer has closed.
    /// Each read waits no longer than what is left before `deadline`.
    fn fill(&mut self, deadline: Instant) -> Result<&[u8], HttpError> {
        loop {
            if !self.reader.buffer().is_empty() {
                return Ok(self.reader.buffer());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(HttpError::Timeout);
            }
            // A zero timeout means "none" to the OS: wait at least a millisecond.
            self.reader
                .get_ref()
                .set_read_timeout(Some(left.max(Duration::from_millis(1))))?;
            match self.reader.fill_buf() {
                // Re-borrow to satisfy the borrow checker across loop iterations.
                Ok(_) => return Ok(self.reader.buffer()),
                Err(e) if is_timeout(&e) => continue,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(HttpError::Io(e)),
            }
        }
    }

    fn exact(&mut self, n: usize, deadline: Instant) -> Result<Vec<u8>, HttpError> {
        let mut body = Vec::with_capacity(n.min(1 << 20));
        while body.len() < n {
            let buf = self.fill(deadline)?;
            if buf.is_empty() {
                return Err(HttpError::Malformed("connection closed inside the body"));
            }
            let take = buf.len().min(n - body.len());
            body.extend_from_slice(&buf[..take]);
            self.reader.consume(take);
        }
        Ok(body)
    }

    fn chunked_body(&mut self, deadline: Instant) -> Result<Vec<u8>, HttpError> {
        let max = self.limits.max_body_bytes;
        let mut body = Vec::new();
        // Chunk-size lines and trailers share one small budget.
        let mut budget = self.limits.max_header_bytes;
        loop {
            let line = self.line(&mut budget, deadline, HttpError::HeadTooLarge)?;
            let size_text = line.split(|&b| b == b';').next().unwrap_or_default();
            let size_text = std::str::from_utf8(size_text)
                .map_err(|_| HttpError::Malformed("bad chunk size"))?
                .trim();
            if size_text.is_empty() || size_text.len() > 16 {
                return Err(HttpError::Malformed("bad chunk size"));
            }
            let size = usize::from_str_radix(size_text, 16)
                .map_err(|_| HttpError::Malformed("bad chunk size"))?;
            if size == 0 {
                break;
            }
            if body.len() + size > max {
                return Err(HttpError::BodyTooLarge(max));
            }
            let chunk = self.exact(size, deadline)?;
            body.extend_from_slice(&chunk);
            let end = self.exact(2, deadline)?;
            if end != b"\r\n" {
                return Err(HttpError::Malformed("chunk not followed by CRLF"));
            }
        }
        // Trailers, ignored but bounded.
        while !self
            .line(&mut budget, deadline, HttpError::HeadTooLarge)?
            .is_empty()
        {}
        Ok(body)
    }

    /// The underlying stream.
    pub fn stream(&self) -> &S {
        self.reader.get_ref()
    }

    /// Bytes of a pipelined next request already buffered.
    pub fn has_buffered(&self) -> bool {
        !self.reader.buffer().is_empty()
    }
}

/// The values of every header named `name` (lowercase).
fn values<'a>(
    headers: &'a [(String, String)],
    name: &'a str,
) -> impl Iterator<Item = &'a String> + 'a {
    headers
        .iter()
        .filter(move |(n, _)| n == name)
        .map(|(_, v)| v)
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

fn parse_request_line(line: &[u8]) -> Result<(String, String, bool), HttpError> {
    let text =
        std::str::from_utf8(line).map_err(|_| HttpError::Malformed("request line is not UTF-8"))?;
    let mut parts = text.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(HttpError::Malformed("bad request line"));
    };
    if method.is_empty() || !method.bytes().all(|b| b.is_ascii_uppercase()) {
        return Err(HttpError::Malformed("bad method"));
    }
    if !target.starts_with('/') || target.bytes().any(|b| b <= b' ' || b == 0x7f) {
        return Err(HttpError::Malformed("bad request target"));
    }
    let http11 = match version {
        "HTTP/1.1" => true,
        "HTTP/1.0" => false,
        v if v.starts_with("HTTP/") => return Err(HttpError::Version),
        _ => return Err(HttpError::Malformed("bad request line")),
    };
    Ok((method.to_string(), target.to_string(), http11))
}

/// `name: value`, with a token name and a value free of control bytes (CR and LF included).
fn parse_header(line: &[u8]) -> Result<(String, String), HttpError> {
    if line.first().is_some_and(|&b| b == b' ' || b == b'\t') {
        return Err(HttpError::Malformed("obsolete header line folding"));
    }
    let colon = line
        .iter()
        .position(|&b| b == b':')
        .ok_or(HttpError::Malformed("header line without ':'"))?;
    let (name, value) = (&line[..colon], &line[colon + 1..]);
    let is_tchar = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    if name.is_empty() || !name.iter().all(|&b| is_tchar(b)) {
        return Err(HttpError::Malformed("bad header name"));
    }
    if value.iter().any(|&b| (b < b' ' && b != b'\t') || b == 0x7f) {
        return Err(HttpError::Malformed(
            "control character (CR, LF, NUL, ...) in a header value",
        ));
    }
    let value = String::from_utf8_lossy(value)
        .trim_matches([' ', '\t'])
        .to_string();
    Ok((String::from_utf8_lossy(name).to_ascii_lowercase(), value))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::net::TcpListener;

    /// Sends `raw` to a fresh reader and returns what it makes of it.
    fn parse(raw: &[u8], limits: Limits) -> Result<Request, HttpError> {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let raw = raw.to_vec();
        let client = std::thread::spawn(move || {
            let mut s = TcpStream::connect(addr).unwrap();
            s.write_all(&raw).unwrap();
            s.shutdown(std::net::Shutdown::Write).unwrap();
            let mut sink = Vec::new();
            let _ = s.read_to_end(&mut sink);
        });
        let (s, _) = listener.accept().unwrap();
        let mut w = s.try_clone().unwrap();
        let r = RequestReader::new(s, limits, Instant::now()).next_request(&mut w);
        drop(w);
        client.join().unwrap();
        r
    }

    #[test]
    fn content_length_body() {
        let r = parse(
            b"POST /x?a=1 HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc",
            Limits::default(),
        )
        .unwrap();
        assert_eq!(
            (r.method.as_str(), r.path.as_str(), r.query.as_str()),
            ("POST", "/x", "a=1")
        );
        assert_eq!(r.body, b"abc");
        assert!(r.keep_alive && r.http11);
        assert_eq!(r.header("host"), Some("h"));
    }

    #[test]
    fn chunked_body() {
        let r = parse(
            b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n",
            Limits::default(),
        )
        .unwrap();
        assert_eq!(r.body, b"abcde");
    }

    #[test]
    fn smuggling_is_refused() {
        let e = parse(
            b"POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            Limits::default(),
        )
        .unwrap_err();
        assert!(matches!(e, HttpError::Smuggling));
        assert_eq!(e.status(), Some(400));
    }

    #[test]
    fn bare_lf_and_cr_in_value_are_refused() {
        let e = parse(b"GET / HTTP/1.1\nHost: h\r\n\r\n", Limits::default()).unwrap_err();
        assert!(matches!(e, HttpError::Malformed(_)), "{e}");
        let e = parse(b"GET / HTTP/1.1\r\nX: a\rb\r\n\r\n", Limits::default()).unwrap_err();
        assert!(matches!(e, HttpError::Malformed(_)), "{e}");
        let e = parse(b"GET / HTTP/1.1\r\nX: a\r\n b\r\n\r\n", Limits::default()).unwrap_err();
        assert!(matches!(e, HttpError::Malformed(_)), "{e}");
    }

    #[test]
    fn limits() {
        let small = Limits {
            max_header_bytes: 64,
            max_body_bytes: 4,
            max_headers: 2,
            ..Limits::default()
        };
        let long = format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(100));
        assert_eq!(
            parse(long.as_bytes(), small.clone()).unwrap_err().status(),
            Some(431)
        );
        let many = b"GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n";
        assert_eq!(parse(many, small.clone()).unwrap_err().status(), Some(431));
        let big = b"POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\nabcde";
        assert_eq!(parse(big, small.clone()).unwrap_err().status(), Some(413));
        let big = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nabcde\r\n0\r\n\r\n";
        assert_eq!(parse(big, small).unwrap_err().status(), Some(413));
        let huge = b"POST / HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n";
        assert_eq!(
            parse(huge, Limits::default()).unwrap_err().status(),
            Some(413)
        );
    }

    /// Sends `parts` to a fresh reader with `pause` between them, keeping the connection open
    /// until the reader is done; returns what it makes of the first request and how long it took.
    fn parse_slowly(
        parts: &[&[u8]],
        pause: Duration,
        limits: Limits,
    ) -> (Result<Request, HttpError>, Duration) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let parts: Vec<Vec<u8>> = parts.iter().map(|p| p.to_vec()).collect();
        let client = std::thread::spawn(move || {
            let mut s = TcpStream::connect(addr).unwrap();
            for part in parts {
                // The reader may have given up and closed: stop once a part fails to send.
                if s.write_all(&part).is_err() {
                    break;
                }
                std::thread::sleep(pause);
            }
            let mut sink = Vec::new();
            let _ = s.read_to_end(&mut sink);
        });
        let (s, _) = listener.accept().unwrap();
        let mut w = s.try_clone().unwrap();
        let start = Instant::now();
        let r = RequestReader::new(s, limits, start).next_request(&mut w);
        let took = start.elapsed();
        w.shutdown(std::net::Shutdown::Both).unwrap();
        client.join().unwrap();
        (r, took)
    }

    #[test]
    fn deadlines() {
        let quick = Limits::with_timeout(Duration::from_millis(300));
        let pause = Duration::from_millis(200);
        // Silence from a new connection: closed without an answer, at the head deadline.
        let (r, took) = parse_slowly(&[], pause, quick.clone());
        assert!(matches!(r, Err(HttpError::Closed)), "{r:?}");
        assert!(took < Duration::from_secs(2), "{took:?}");
        // A head that trickles in (slowloris): 408 at the deadline, however it keeps coming.
        let mut trickle: Vec<&[u8]> = vec![b"GET / HTTP/1.1\r\n"];
        trickle.extend([b"X: 1\r\n" as &[u8]; 12]);
        let (r, took) = parse_slowly(&trickle, pause, quick.clone());
        assert_eq!(r.unwrap_err().status(), Some(408));
        assert!(took < Duration::from_secs(2), "{took:?}");
        // A body that stops short.
        let parts: Vec<&[u8]> = vec![b"POST / HTTP/1.1\r\nContent-Length: 9\r\n\r\nabc"];
        let (r, _) = parse_slowly(&parts, Duration::from_millis(700), quick.clone());
        assert_eq!(r.unwrap_err().status(), Some(408));
        // Within the deadlines, pieces arriving apart make one request.
        let parts: Vec<&[u8]> = vec![b"POST / HTTP/1.1\r\n", b"Content-Length: 3\r\n\r\n", b"abc"];
        let (r, _) = parse_slowly(&parts, Duration::from_millis(50), quick);
        assert_eq!(r.unwrap().body, b"abc");
    }

    #[test]
    fn other_refusals() {
        let d = Limits::default;
        let bad_cl = b"POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n";
        assert_eq!(parse(bad_cl, d()).unwrap_err().status(), Some(400));
        let two_cl = b"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab";
        assert_eq!(parse(two_cl, d()).unwrap_err().status(), Some(400));
        let gzip = b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n";
        assert_eq!(parse(gzip, d()).unwrap_err().status(), Some(501));
        let v2 = b"GET / HTTP/2.0\r\n\r\n";
        assert_eq!(parse(v2, d()).unwrap_err().status(), Some(505));
        let abs = b"GET http://x/ HTTP/1.1\r\n\r\n";
        assert_eq!(parse(abs, d()).unwrap_err().status(), Some(400));
        assert!(matches!(parse(b"", d()), Err(HttpError::Closed)));
    }
}
