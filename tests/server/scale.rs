//! A thousand connections from one address, as behind a reverse proxy: 1,000 streaming requests
//! with `-np 8` all complete, first come first served, the server's resident memory growing by
//! a few KiB per waiting connection at most (a waiting connection costs a socket and a queue
//! entry, never a thread); and 1,000 idle connections from one address never keep a client at
//! another address waiting.

use super::start;
use crate::common;
use crate::common::net::{connect_from, request_from};
use serde_json::json;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const CROWD: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);
const OTHER: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 3);
const CLIENTS: usize = 1000;

/// Raises this process's open-file limit to at least `need` (the test holds a socket per
/// client); panics naming the limit when the hard limit is lower.
fn ensure_open_files(need: u64) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read and write a live rlimit value.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0);
        if lim.rlim_cur < need {
            assert!(
                lim.rlim_max >= need,
                "this test needs {need} open files; the hard limit is {}",
                lim.rlim_max
            );
            lim.rlim_cur = need;
            assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &lim), 0);
        }
    }
}

/// Samples `pid`'s resident memory every 50 ms until `stop`; the peak in KiB.
fn watch_peak(pid: u32, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<u64> {
    std::thread::spawn(move || {
        let mut peak = 0;
        while !stop.load(Ordering::Relaxed) {
            peak = peak.max(common::proc_status_kib(pid, "VmRSS:"));
            std::thread::sleep(Duration::from_millis(50));
        }
        peak
    })
}

#[test]
fn a_thousand_streams_from_one_address_complete_in_order_with_memory_flat() {
    ensure_open_files(4 * CLIENTS as u64);
    let Some(srv) = start(&["-np", "8", "-c", "4096"]) else {
        return;
    };
    let p = srv.port;
    let pid = srv.child.id();
    let body = |i: usize| {
        json!({"prompt": format!("Item {i}:"), "n_predict": 4, "ignore_eos": true,
               "stream": true, "temperature": 0})
        .to_string()
    };
    // Every worker and slot has run once: what is resident now is the server at work.
    let warm: Vec<_> = (0..64)
        .map(|i| {
            std::thread::spawn(move || {
                request_from(
                    CROWD,
                    p,
                    "POST",
                    "/completion",
                    &body(i),
                    Duration::from_secs(120),
                )
            })
        })
        .collect();
    for w in warm {
        let (status, reply) = w.join().unwrap().expect("warm-up request");
        assert_eq!(status, 200, "{reply}");
    }
    let base = common::proc_status_kib(pid, "VmRSS:");
    let stop = Arc::new(AtomicBool::new(false));
    let peak = watch_peak(pid, stop.clone());

    // The requests are sent one after another, so their arrival order is known; a thread per
    // connection then reads its stream and notes when it ended.
    let started = Instant::now();
    let order = Arc::new(AtomicU64::new(0));
    let mut readers = Vec::with_capacity(CLIENTS);
    for i in 0..CLIENTS {
        let mut s = connect_from(CROWD, p, None).unwrap_or_else(|e| panic!("client {i}: {e}"));
        let b = body(i);
        write!(
            s,
            "POST /completion HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{b}",
            b.len()
        )
        .unwrap();
        let order = order.clone();
        readers.push(
            std::thread::Builder::new()
                .stack_size(128 * 1024)
                .spawn(move || {
                    s.set_read_timeout(Some(Duration::from_secs(600))).unwrap();
                    let mut reply = String::new();
                    s.read_to_string(&mut reply)
                        .unwrap_or_else(|e| panic!("client {i}: {e}"));
                    assert!(reply.starts_with("HTTP/1.1 200"), "client {i}: {reply}");
                    assert!(reply.contains("\"stop\":true"), "client {i}: {reply}");
                    order.fetch_add(1, Ordering::SeqCst)
                })
                .unwrap(),
        );
    }
    let finished: Vec<u64> = readers
        .into_iter()
        .map(|r| r.join().expect("a client failed"))
        .collect();
    stop.store(true, Ordering::Relaxed);
    let peak = peak.join().unwrap();
    eprintln!(
        "{CLIENTS} streams complete in {:?}; resident {base} KiB before, peak {peak} KiB",
        started.elapsed()
    );

    // First come, first served: no request ends after one that arrived well after it. The
    // slack covers the 64 workers and 8 slots taking requests concurrently.
    const SLACK: usize = 96;
    let mut latest_before = 0;
    for j in SLACK..CLIENTS {
        latest_before = latest_before.max(finished[j - SLACK]);
        assert!(
            latest_before <= finished[j] + SLACK as u64,
            "request {j} ended {}th, before an earlier one that ended {latest_before}th",
            finished[j]
        );
    }
    // A waiting connection costs a socket and a queue entry: a few KiB at most.
    let per_connection = peak.saturating_sub(base) as f64 / CLIENTS as f64;
    assert!(
        per_connection <= 8.0,
        "resident memory grew {per_connection:.1} KiB per connection ({base} -> {peak} KiB)"
    );
}

#[test]
fn a_thousand_idle_connections_from_one_address_keep_no_one_waiting() {
    ensure_open_files(4 * CLIENTS as u64);
    let Some(srv) = start(&["-np", "2", "-c", "1024"]) else {
        return;
    };
    let p = srv.port;
    // Half never speak; half start a request head and never finish it.
    let mut idle: Vec<TcpStream> = Vec::with_capacity(CLIENTS);
    for i in 0..CLIENTS {
        let mut s = connect_from(CROWD, p, None).unwrap_or_else(|e| panic!("connection {i}: {e}"));
        if i % 2 == 1 {
            s.write_all(b"POST /completion HTTP/1.1\r\nHost: 127.0.0.1\r\n")
                .unwrap();
        }
        idle.push(s);
    }
    for path in ["/health", "/completion"] {
        let (method, body) = if path == "/health" {
            ("GET", String::new())
        } else {
            let b = json!({"prompt": "The capital of France is", "n_predict": 8,
                           "temperature": 0});
            ("POST", b.to_string())
        };
        let t = Instant::now();
        let (status, reply) = request_from(OTHER, p, method, path, &body, Duration::from_secs(2))
            .unwrap_or_else(|e| panic!("{method} {path} from {OTHER}: {e}"));
        assert_eq!(status, 200, "{path}: {reply}");
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "{path} took {:?}",
            t.elapsed()
        );
        eprintln!(
            "{method} {path} from {OTHER} beside {CLIENTS} idle: {:?}",
            t.elapsed()
        );
    }
    drop(idle);
}
