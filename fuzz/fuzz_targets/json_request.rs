//! The JSON request parsers of every endpoint that takes a body, through a real server (one
//! slot, `-n 1` so that a valid request generates one token at most, a small context; the model
//! is `LLAMAFILE_FUZZ_SERVER_MODEL`, which tools/fuzz.sh points at a tiny synthetic model with
//! SmolLM2's vocabulary so a request costs little, else SmolLM2 itself): the first byte of the
//! input picks the endpoint, the rest is the body. Oracle: every
//! request is answered within the time limit, with 200 or a 4xx/501 whose body is JSON naming
//! the problem; never a panic (in any server thread), a hang, a 5xx or a dropped connection.

#![no_main]

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;

/// The endpoints that read a JSON body (POST), as the server routes them.
const ENDPOINTS: &[&str] = &[
    "/completion",
    "/completions",
    "/v1/completions",
    "/v1/chat/completions",
    "/chat/completions",
    "/tokenize",
    "/detokenize",
    "/apply-template",
    "/props",
];

/// How long one request may take: a prompt of at most the context, one generated token.
const DEADLINE: Duration = Duration::from_secs(8);

/// The port of the server this process started, once.
static PORT: LazyLock<u16> = LazyLock::new(|| {
    let port = {
        let probe = TcpListener::bind("127.0.0.1:0").expect("a free loopback port");
        probe.local_addr().unwrap().port()
    };
    let model = std::env::var("LLAMAFILE_FUZZ_SERVER_MODEL")
        .unwrap_or_else(|_| common::model_file("SmolLM2-135M-Instruct.Q4_1"));
    let args: Vec<String> = [
        "llamafile",
        "-m",
        &model,
        "--server",
        "--nobrowser",
        "--host",
        "127.0.0.1",
        "--port",
        &port.to_string(),
        "-np",
        "1",
        "-c",
        "128",
        "-n",
        "1",
        "-t",
        "1",
        "--props",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    std::thread::spawn(move || {
        let cli = llamafile::cli::parse(args.into_iter().map(Into::into).collect())
            .unwrap_or_else(|e| panic!("server flags: {e}"));
        if let Err(e) = llamafile::app::run(&cli, None) {
            panic!("the server stopped: {e:#}");
        }
    });
    let started = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the server did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    port
});

/// Sends one request on its own connection; returns the status and the body.
fn post(port: u16, path: &str, body: &[u8]) -> (u16, Vec<u8>) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect to the server");
    s.set_read_timeout(Some(DEADLINE)).unwrap();
    s.set_write_timeout(Some(DEADLINE)).unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).expect("send the request head");
    s.write_all(body).expect("send the body");
    let started = Instant::now();
    let mut reply = Vec::new();
    if let Err(e) = s.read_to_end(&mut reply) {
        panic!(
            "{path}: no complete answer within {DEADLINE:?} ({e}); {} bytes so far",
            reply.len()
        );
    }
    assert!(
        started.elapsed() < DEADLINE,
        "{path}: answered after {:?}",
        started.elapsed()
    );
    let text = String::from_utf8_lossy(&reply);
    let status: u16 = text
        .strip_prefix("HTTP/1.1 ")
        .and_then(|r| r.get(..3))
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| {
            panic!(
                "{path}: not an HTTP answer: {:?}",
                &text[..text.len().min(200)]
            )
        });
    let at = reply
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map_or(reply.len(), |p| p + 4);
    (status, reply[at..].to_vec())
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, body)) = data.split_first() else {
        return;
    };
    let path = ENDPOINTS[pick as usize % ENDPOINTS.len()];
    let (status, reply) = post(*PORT, path, body);
    match status {
        200 => {}
        400..=499 | 501 => {
            let v: serde_json::Value = serde_json::from_slice(&reply).unwrap_or_else(|e| {
                panic!(
                    "{path}: {status} with a body that is not JSON ({e}): {}",
                    String::from_utf8_lossy(&reply)
                )
            });
            let message = v["error"]["message"].as_str().unwrap_or_default();
            assert!(
                !message.is_empty(),
                "{path}: {status} names no problem: {v}"
            );
        }
        _ => panic!(
            "{path}: answered {status} to {:?}: {}",
            String::from_utf8_lossy(body),
            String::from_utf8_lossy(&reply)
        ),
    }
});
