//! The JSON request parsers of every endpoint that takes a body, through a real server (one
//! slot, `-n 1` so that a valid request generates one token at most, a small context; the model
//! is `LLAMAFILE_FUZZ_SERVER_MODEL`, which tools/fuzz.sh points at a tiny synthetic model with
//! the first 4,096 tokens of SmolLM2's vocabulary so a request costs little, else SmolLM2
//! itself): the first byte of the input picks the endpoint, the rest is the body. Requests go over one keep-alive connection,
//! opened again whenever the server closes it. Oracle: every request is answered within the
//! time limit, with 200 or a 4xx/501 whose body is JSON naming the problem; never a panic (in any
//! server thread), a hang, a 5xx or a dropped connection.
//!
//! The slot actions (`/slots/0?action=save|restore|erase`) run with `--slot-save-path` set to
//! `SANDBOX/slots` (`SANDBOX`: `LLAMAFILE_FUZZ_SLOT_DIR`, else a directory under the temporary
//! directory): after each one, `SANDBOX` must hold nothing but `slots`, `slots` nothing but
//! plain files, and a save answered 200 must have written the file it names there, so that no
//! filename from a request can put a file anywhere else.

#![no_main]

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{LazyLock, Mutex};
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
    "/slots/0?action=save",
    "/slots/0?action=restore",
    "/slots/0?action=erase",
];

/// How long one request may take: a prompt of at most the context, one generated token.
const DEADLINE: Duration = Duration::from_secs(8);

/// Slot files kept before the directory is emptied (restores then find fewer to load).
const MAX_SLOT_FILES: usize = 64;

/// The directory that holds `slots` (the server's `--slot-save-path`) and nothing else.
static SANDBOX: LazyLock<PathBuf> = LazyLock::new(|| {
    let dir = std::env::var_os("LLAMAFILE_FUZZ_SLOT_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            std::env::temp_dir().join(format!("llamafile-fuzz-slots-{}", std::process::id()))
        });
    std::fs::create_dir_all(dir.join("slots")).expect("create the slot sandbox");
    dir
});

/// The port of the server this process started, once.
static PORT: LazyLock<u16> = LazyLock::new(|| {
    let port = {
        let probe = TcpListener::bind("127.0.0.1:0").expect("a free loopback port");
        probe.local_addr().unwrap().port()
    };
    let model = std::env::var("LLAMAFILE_FUZZ_SERVER_MODEL")
        .unwrap_or_else(|_| common::model_file("SmolLM2-135M-Instruct.Q4_1"));
    let slots = SANDBOX.join("slots").to_string_lossy().into_owned();
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
        "--slot-save-path",
        &slots,
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

/// The keep-alive connection to the server, when one is open.
static CONN: Mutex<Option<BufReader<TcpStream>>> = Mutex::new(None);

fn connect(port: u16) -> BufReader<TcpStream> {
    let s = TcpStream::connect(("127.0.0.1", port)).expect("connect to the server");
    s.set_read_timeout(Some(DEADLINE)).unwrap();
    s.set_write_timeout(Some(DEADLINE)).unwrap();
    s.set_nodelay(true).unwrap();
    BufReader::new(s)
}

/// An answer: its status, body, and whether the server keeps the connection open.
struct Answer {
    status: u16,
    body: Vec<u8>,
    keep_alive: bool,
}

/// Why no answer came on a connection.
enum Failed {
    /// Closed before the first byte of the answer: on a reused connection, the server may have
    /// closed it between requests, so the request is sent again on a new one.
    ClosedBeforeAnswer,
    Broken(String),
}

/// Sends one request; returns its answer (status and body). A reused connection that turns out
/// closed is replaced once; a new connection must answer.
fn post(port: u16, path: &str, body: &[u8]) -> (u16, Vec<u8>) {
    let mut slot = CONN.lock().unwrap_or_else(|e| e.into_inner());
    let reused = slot.is_some();
    let started = Instant::now();
    let mut result = exchange(slot.get_or_insert_with(|| connect(port)), path, body);
    if reused && matches!(result, Err(Failed::ClosedBeforeAnswer)) {
        *slot = Some(connect(port));
        result = exchange(slot.as_mut().unwrap(), path, body);
    }
    let answer = match result {
        Ok(a) => a,
        Err(Failed::ClosedBeforeAnswer) => panic!("{path}: the server closed without answering"),
        Err(Failed::Broken(e)) => panic!("{path}: no complete answer within {DEADLINE:?}: {e}"),
    };
    assert!(
        started.elapsed() < DEADLINE,
        "{path}: answered after {:?}",
        started.elapsed()
    );
    if !answer.keep_alive {
        *slot = None;
    }
    (answer.status, answer.body)
}

/// One request and its answer on `conn`.
fn exchange(conn: &mut BufReader<TcpStream>, path: &str, body: &[u8]) -> Result<Answer, Failed> {
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    let mut request = head.into_bytes();
    request.extend_from_slice(body);
    if conn.get_mut().write_all(&request).is_err() {
        return Err(Failed::ClosedBeforeAnswer);
    }
    let broken = |what: &str, e: std::io::Error| Failed::Broken(format!("{what}: {e}"));
    let mut status_line = String::new();
    match conn.read_line(&mut status_line) {
        Ok(0) => return Err(Failed::ClosedBeforeAnswer),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
            return Err(Failed::ClosedBeforeAnswer)
        }
        Err(e) => return Err(broken("status line", e)),
        Ok(_) => {}
    }
    let status: u16 = status_line
        .strip_prefix("HTTP/1.1 ")
        .and_then(|r| r.get(..3))
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| Failed::Broken(format!("not an HTTP answer: {status_line:?}")))?;
    let (mut length, mut chunked, mut keep_alive) = (None, false, true);
    loop {
        let mut line = String::new();
        match conn.read_line(&mut line) {
            Ok(0) => return Err(Failed::Broken("closed inside the answer's head".into())),
            Err(e) => return Err(broken("answer head", e)),
            Ok(_) => {}
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        let Some((name, value)) = line.split_once(':') else {
            return Err(Failed::Broken(format!("not a header: {line:?}")));
        };
        let value = value.trim();
        match name.to_ascii_lowercase().as_str() {
            "content-length" => {
                length = Some(value.parse::<usize>().map_err(|_| {
                    Failed::Broken(format!("Content-Length is not a number: {value:?}"))
                })?)
            }
            "transfer-encoding" => chunked = value.eq_ignore_ascii_case("chunked"),
            "connection" => keep_alive = !value.eq_ignore_ascii_case("close"),
            _ => {}
        }
    }
    let mut body = Vec::new();
    if chunked {
        loop {
            let mut size = String::new();
            conn.read_line(&mut size)
                .map_err(|e| broken("chunk size", e))?;
            let hex = size.trim_end().split(';').next().unwrap_or("");
            let n = usize::from_str_radix(hex, 16)
                .map_err(|_| Failed::Broken(format!("not a chunk size: {size:?}")))?;
            let mut chunk = vec![0u8; n + 2];
            conn.read_exact(&mut chunk)
                .map_err(|e| broken("chunk", e))?;
            if n == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..n]);
        }
    } else if let Some(n) = length {
        body.resize(n, 0);
        conn.read_exact(&mut body).map_err(|e| broken("body", e))?;
    } else {
        conn.read_to_end(&mut body).map_err(|e| broken("body", e))?;
        keep_alive = false;
    }
    Ok(Answer {
        status,
        body,
        keep_alive,
    })
}

/// The slot sandbox holds `slots` only, and `slots` plain files only; a save answered 200 wrote
/// the file it names there. Keeps at most [`MAX_SLOT_FILES`] files.
fn check_slot_files(path: &str, status: u16, reply: &[u8]) {
    let names = |dir: &Path| -> Vec<String> {
        std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect()
    };
    let outside = names(&SANDBOX);
    assert_eq!(
        outside,
        ["slots"],
        "{path}: a file appeared outside the slot directory"
    );
    let dir = SANDBOX.join("slots");
    let inside = names(&dir);
    for name in &inside {
        let kind = std::fs::symlink_metadata(dir.join(name))
            .unwrap()
            .file_type();
        assert!(
            kind.is_file(),
            "{path}: the slot directory holds {name:?}, not a plain file"
        );
    }
    if path.ends_with("save") && status == 200 {
        let v: serde_json::Value = serde_json::from_slice(reply).expect("a save answers JSON");
        let saved = v["filename"].as_str().expect("a save answers its filename");
        assert!(
            inside.iter().any(|n| n == saved),
            "{path}: saved {saved:?}, which is not a file of the slot directory ({inside:?})"
        );
    }
    if inside.len() > MAX_SLOT_FILES {
        for name in inside {
            let _ = std::fs::remove_file(dir.join(name));
        }
    }
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
    if path.starts_with("/slots/") {
        check_slot_files(path, status, &reply);
    }
});
