//! The HTTP/1.1 request reader on arbitrary bytes: request lines, headers, Content-Length and
//! chunked bodies, pipelined requests. Errors are fine; a panic, a hang or a body past the
//! limits is not.

#![no_main]

use std::time::Instant;

use libfuzzer_sys::fuzz_target;
use llamafile::server::http::{Limits, RequestReader};

fuzz_target!(|data: &[u8]| {
    let limits = Limits::default();
    let max_body = limits.max_body_bytes;
    let mut reader = RequestReader::new(data, limits, Instant::now());
    let mut continues = Vec::new();
    while let Ok(request) = reader.next_request(&mut continues) {
        assert!(request.body.len() <= max_body);
        assert!(request.body.len() <= data.len());
    }
});
