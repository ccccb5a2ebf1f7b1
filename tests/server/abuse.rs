//! The server under abuse, end to end: hundreds of half-open connections from one address
//! (slowloris) while a client at another address is served at once; a client that stops
//! reading its stream, which must neither stall another client's completion nor keep its slot;
//! the deadlines' answers (408, a silent close for a connection that never spoke); 64 streaming
//! clients from one address at once, three rounds, with the server's memory flat; clients over
//! an address's share of the workers waiting their turn instead of being refused; 256
//! streams from one address all completing.
//! 127.0.0.2 is a second client address: Linux routes all of 127/8 to the loopback device.

use super::start;
use crate::common;
use crate::common::net::{connect_from, request_from};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::time::{Duration, Instant};

const OTHER: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);

/// A request from 127.0.0.2 that must be answered 200 within `limit`; returns the body.
fn served_within(port: u16, method: &str, path: &str, body: &str, limit: Duration) -> String {
    let start = Instant::now();
    let (status, reply) = request_from(OTHER, port, method, path, body, limit)
        .unwrap_or_else(|e| panic!("{method} {path} from {OTHER}: {e}"));
    let took = start.elapsed();
    assert_eq!(status, 200, "{method} {path}: {reply}");
    assert!(took < limit, "{method} {path} took {took:?}");
    if path != "/slots" {
        eprintln!("{method} {path} from {OTHER}: {took:?}");
    }
    reply
}

/// Reads what the server sends until it closes or `limit` passes; `None` on the latter.
fn read_until_closed(s: &mut TcpStream, limit: Duration) -> Option<String> {
    s.set_read_timeout(Some(limit)).unwrap();
    let mut got = Vec::new();
    match s.read_to_end(&mut got) {
        Ok(_) => Some(String::from_utf8_lossy(&got).into_owned()),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
            Some(String::from_utf8_lossy(&got).into_owned())
        }
        Err(_) => None,
    }
}

#[test]
fn slowloris_from_one_address_does_not_deny_another() {
    let Some(srv) = start(&["-np", "2", "-c", "1024"]) else {
        return;
    };
    let p = srv.port;
    // 300 connections that start a request head and never finish it.
    let mut attack = Vec::new();
    for _ in 0..300 {
        let mut s = TcpStream::connect(("127.0.0.1", p)).unwrap();
        s.write_all(b"POST /completion HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            .unwrap();
        attack.push(s);
    }
    served_within(p, "GET", "/health", "", Duration::from_secs(2));
    let body = json!({"prompt": "The capital of France is", "n_predict": 8, "temperature": 0});
    let reply = served_within(
        p,
        "POST",
        "/completion",
        &body.to_string(),
        Duration::from_secs(2),
    );
    let v: Value = serde_json::from_str(&reply).unwrap();
    assert!(v["content"].is_string(), "{v}");
    // The connections over the address's share of the workers were not refused: they wait.
    let waiting = read_until_closed(attack.last_mut().unwrap(), Duration::from_millis(500));
    assert_eq!(waiting, None, "a waiting connection was answered");
    drop(attack);
}

#[test]
fn deadlines_answer_408_or_close() {
    let Some(srv) = start(&["-np", "1", "-c", "256", "-to", "1"]) else {
        return;
    };
    let p = srv.port;
    // A head that never ends: 408 at the one-second head deadline.
    let mut s = connect_from(OTHER, p, None).unwrap();
    s.write_all(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        .unwrap();
    let start = Instant::now();
    let reply = read_until_closed(&mut s, Duration::from_secs(5)).expect("closed");
    assert!(reply.starts_with("HTTP/1.1 408"), "{reply:?}");
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );
    // A body that stops short: 408 too.
    let mut s = connect_from(OTHER, p, None).unwrap();
    s.write_all(b"POST /tokenize HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 50\r\n\r\n{\"con")
        .unwrap();
    let reply = read_until_closed(&mut s, Duration::from_secs(5)).expect("closed");
    assert!(reply.starts_with("HTTP/1.1 408"), "{reply:?}");
    // A connection that never says anything is closed without an answer.
    let mut s = connect_from(OTHER, p, None).unwrap();
    let reply = read_until_closed(&mut s, Duration::from_secs(5)).expect("closed");
    assert_eq!(reply, "");
    // A kept-alive connection is closed once idle for the idle timeout (5 s).
    let mut s = connect_from(OTHER, p, None).unwrap();
    s.write_all(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .unwrap();
    let start = Instant::now();
    let reply = read_until_closed(&mut s, Duration::from_secs(10)).expect("closed when idle");
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply:?}");
    let idle = start.elapsed();
    assert!(
        idle > Duration::from_secs(4) && idle < Duration::from_secs(8),
        "{idle:?}"
    );
}

/// The `llamacpp:NAME` value in `/metrics`.
fn metric(port: u16, name: &str) -> f64 {
    let text = served_within(port, "GET", "/metrics", "", Duration::from_secs(5));
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("llamacpp:{name} ")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {text}"))
}

fn slots(port: u16) -> Vec<Value> {
    let text = served_within(port, "GET", "/slots", "", Duration::from_secs(5));
    serde_json::from_str::<Value>(&text)
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

#[test]
fn a_client_that_stops_reading_its_stream_stalls_no_one_and_is_cut() {
    let Some(srv) = start(&["-np", "2", "-c", "8192", "-to", "3", "--metrics"]) else {
        return;
    };
    let p = srv.port;
    // A stream of up to 4000 tokens to a client that reads nothing, through a small buffer.
    let mut stalled = connect_from(Ipv4Addr::LOCALHOST, p, Some(4096)).unwrap();
    // Ten log-probabilities per token make each event about a kilobyte.
    let body = json!({"prompt": "Once upon a time", "n_predict": 4000, "ignore_eos": true,
                      "stream": true, "n_probs": 10})
    .to_string();
    write!(
        stalled,
        "POST /completion HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let start = Instant::now();
    while !slots(p)
        .iter()
        .any(|s| s["next_token"][0]["n_decoded"].as_u64() > Some(20))
    {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "generation never started"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Another client's completion runs beside it.
    let body = json!({"prompt": "The capital of France is", "n_predict": 16, "temperature": 0});
    served_within(
        p,
        "POST",
        "/completion",
        &body.to_string(),
        Duration::from_secs(10),
    );
    // The stalled stream is cut long before its 4000 tokens, and its slot freed.
    let start = Instant::now();
    while slots(p).iter().any(|s| s["is_processing"] == true) {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the stalled stream still holds its slot: {:?}",
            slots(p)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!(
        "stalled stream cut {:?} after the other completion",
        start.elapsed()
    );
    assert_eq!(metric(p, "requests_cancelled_total"), 1.0);
    drop(stalled);
}

#[test]
fn sixty_four_streaming_clients_complete_with_memory_flat() {
    // All 64 from one address, as behind a reverse proxy: 48 are served at once, 16 wait.
    let Some(srv) = start(&["-np", "4", "-c", "4096"]) else {
        return;
    };
    let p = srv.port;
    let pid = srv.child.id();
    let mut resident = Vec::new();
    for round in 0..3 {
        let clients: Vec<_> = (0..64)
            .map(|i| {
                std::thread::spawn(move || {
                    let body = json!({"prompt": format!("Story {i}: once upon a time"),
                                      "n_predict": 12, "stream": true, "temperature": 0});
                    let (status, reply) = request_from(
                        OTHER,
                        p,
                        "POST",
                        "/completion",
                        &body.to_string(),
                        Duration::from_secs(120),
                    )
                    .unwrap_or_else(|e| panic!("client {i}: {e}"));
                    assert_eq!(status, 200, "client {i}: {reply}");
                    assert!(
                        reply.contains("\"stop\":true"),
                        "client {i}'s stream has no final event: {reply}"
                    );
                })
            })
            .collect();
        for c in clients {
            c.join().expect("a client failed");
        }
        let kib = common::proc_status_kib(pid, "VmRSS:");
        eprintln!("round {round}: 64 streams complete, server resident {kib} KiB");
        resident.push(kib);
    }
    let first = resident[0] as f64;
    for (round, &kib) in resident.iter().enumerate().skip(1) {
        assert!(
            kib as f64 <= first * 1.10,
            "resident memory grew from {first} KiB to {kib} KiB by round {round}"
        );
    }
}

#[test]
fn clients_over_the_address_share_wait_their_turn() {
    // 8 HTTP workers: at most 6 serve one address at once; the other 10 clients wait.
    let Some(srv) = start(&["-np", "2", "--threads-http", "8"]) else {
        return;
    };
    let p = srv.port;
    let clients: Vec<_> = (0..16)
        .map(|i| {
            std::thread::spawn(move || {
                let body = json!({"prompt": format!("Story {i}:"), "n_predict": 32,
                                  "ignore_eos": true, "stream": true});
                request_from(
                    OTHER,
                    p,
                    "POST",
                    "/completion",
                    &body.to_string(),
                    Duration::from_secs(120),
                )
                .unwrap_or_else(|e| panic!("client {i} got no answer: {e}"))
            })
        })
        .collect();
    for (i, c) in clients.into_iter().enumerate() {
        let (status, body) = c.join().expect("a client failed");
        assert_eq!(status, 200, "client {i}: {body}");
        assert!(body.contains("\"stop\":true"), "client {i}: {body}");
    }
    // Meanwhile another address was never kept waiting behind them.
    served_within(p, "GET", "/health", "", Duration::from_secs(2));
}

#[test]
fn two_hundred_fifty_six_streams_from_one_address_all_complete() {
    let Some(srv) = start(&["-np", "8", "-c", "4096"]) else {
        return;
    };
    let p = srv.port;
    let started = Instant::now();
    let clients: Vec<_> = (0..256)
        .map(|i| {
            std::thread::Builder::new()
                .stack_size(256 * 1024)
                .spawn(move || {
                    let body = json!({"prompt": format!("Item {i}:"), "n_predict": 4,
                                      "ignore_eos": true, "stream": true});
                    let (status, reply) = request_from(
                        OTHER,
                        p,
                        "POST",
                        "/completion",
                        &body.to_string(),
                        Duration::from_secs(300),
                    )
                    .unwrap_or_else(|e| panic!("client {i}: {e}"));
                    assert_eq!(status, 200, "client {i}: {reply}");
                    assert!(reply.contains("\"stop\":true"), "client {i}: {reply}");
                })
                .unwrap()
        })
        .collect();
    for c in clients {
        c.join().expect("a client failed");
    }
    eprintln!("256 streams complete in {:?}", started.elapsed());
}
