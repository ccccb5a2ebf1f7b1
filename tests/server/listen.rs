//! Where the server listens and what it serves besides the API, as llama-server's `--host` and
//! `--path` do (llama.cpp 0c1e570), checked on SmolLM2: `--host /path/name.sock` serves the
//! same HTTP on a UNIX socket (alone or beside a TCP address; a stale socket file is replaced,
//! a live one or a regular file is refused), and `--path DIR` serves DIR's files (with the
//! right types, `/` as its index.html, under `--api-prefix`, API keys as llama-server asks
//! them), refusing paths that leave DIR.

use super::{start, SMOLLM2};
use crate::common;
use crate::common::http::{read_reply, send, Reply};
use crate::common::server::Server;
use serde_json::json;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("llamafile-listen-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Starts the server with `args` and returns it with the first line it printed.
fn start_raw(model: &Path, args: &[&str]) -> (std::process::Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_llamafile"))
        .arg("-m")
        .arg(model)
        .args(["--nobrowser", "-t", "2"])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = lines
        .next()
        .expect("the server prints where it listens")
        .unwrap();
    std::thread::spawn(move || for _ in lines {});
    (child, line)
}

/// One request over the UNIX socket `path`.
fn unix_request(path: &Path, method: &str, target: &str, body: &str) -> Reply {
    let mut s = UnixStream::connect(path).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(120)))
        .unwrap();
    let req = format!(
        "{method} {target} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).unwrap();
    read_reply(&mut BufReader::new(s))
}

#[test]
fn a_unix_socket_serves_the_same_http() {
    let Some(model) = common::model_path(SMOLLM2) else {
        return;
    };
    let dir = temp_dir("sock");
    let sock = dir.join("llama.sock");
    let (mut child, line) = start_raw(&model, &["--host", sock.to_str().unwrap()]);
    assert!(
        line.contains(&format!("unix://{}", sock.display())),
        "{line}"
    );
    let r = unix_request(&sock, "GET", "/health", "");
    assert_eq!(r.status, 200);
    assert_eq!(r.json(), json!({"status": "ok"}));
    let body = json!({"prompt": "Hello", "n_predict": 3, "temperature": 0}).to_string();
    let r = unix_request(&sock, "POST", "/completion", &body);
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["tokens_predicted"], 3);
    // Streams too.
    let body = json!({"prompt": "Hello", "n_predict": 3, "stream": true}).to_string();
    let r = unix_request(&sock, "POST", "/completion", &body);
    assert!(String::from_utf8_lossy(&r.body).contains("\"stop\":true"));
    // Errors as over TCP.
    let r = unix_request(&sock, "POST", "/completion", "{}");
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["param"], "prompt");
    // A second server cannot take a live socket.
    let out = common::llamafile(&[
        "-m",
        model.to_str().unwrap(),
        "--host",
        sock.to_str().unwrap(),
    ]);
    common::assert_one_line_error(&out, "another server is listening");
    child.kill().unwrap();
    child.wait().unwrap();
    // The killed server's socket file is stale: the next server replaces it.
    assert!(sock.exists());
    let (mut again, line) = start_raw(&model, &["--host", sock.to_str().unwrap()]);
    assert!(line.contains("unix://"), "{line}");
    assert_eq!(unix_request(&sock, "GET", "/health", "").status, 200);
    again.kill().unwrap();
    again.wait().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_unix_socket_and_a_tcp_address_together() {
    let dir = temp_dir("both");
    let sock = dir.join("both.sock");
    let spec = format!("127.0.0.1,{}", sock.display());
    let Some(srv) = start(&["--host", &spec]) else {
        return;
    };
    assert_eq!(
        send("127.0.0.1", srv.port, "GET", "/health", &[], "").status,
        200
    );
    assert_eq!(unix_request(&sock, "GET", "/health", "").status, 200);
    drop(srv);
    // A path that is not a socket is refused, in one line.
    std::fs::write(dir.join("file.sock"), "x").unwrap();
    let Some(model) = common::model_path(SMOLLM2) else {
        return;
    };
    let f = dir.join("file.sock");
    let out = common::llamafile(&["-m", model.to_str().unwrap(), "--host", f.to_str().unwrap()]);
    common::assert_one_line_error(&out, "not a socket");
    let _ = std::fs::remove_dir_all(&dir);
}

fn static_site(name: &str) -> PathBuf {
    let root = temp_dir(name);
    let site = root.join("site");
    std::fs::create_dir_all(site.join("css")).unwrap();
    std::fs::write(site.join("index.html"), "<!doctype html><p>my page</p>").unwrap();
    std::fs::write(site.join("css/style.css"), "p { color: red }").unwrap();
    std::fs::write(site.join("app.js"), "console.log(1)").unwrap();
    std::fs::write(root.join("secret.txt"), "do not serve").unwrap();
    site
}

fn get(srv: &Server, path: &str, headers: &[(&str, &str)]) -> Reply {
    send("127.0.0.1", srv.port, "GET", path, headers, "")
}

#[test]
fn path_serves_a_directorys_files_and_nothing_outside_it() {
    let site = static_site("path");
    let Some(srv) = start(&["--path", site.to_str().unwrap()]) else {
        return;
    };
    let r = get(&srv, "/", &[]);
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"<!doctype html><p>my page</p>");
    assert!(r.header("content-type").unwrap().starts_with("text/html"));
    let r = get(&srv, "/css/style.css", &[]);
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"p { color: red }");
    assert!(r.header("content-type").unwrap().starts_with("text/css"));
    let r = get(&srv, "/app.js", &[]);
    assert!(r
        .header("content-type")
        .unwrap()
        .starts_with("text/javascript"));
    assert_eq!(get(&srv, "/index.html", &[]).status, 200);
    // The API is still there, and a missing file is the API's 404.
    assert_eq!(get(&srv, "/health", &[]).status, 200);
    let r = get(&srv, "/nothing.css", &[]);
    assert_eq!(r.status, 404);
    assert!(r.json()["error"].is_object());
    // Paths that leave the directory are refused, however they are spelled.
    for path in [
        "/../secret.txt",
        "/css/../../secret.txt",
        "/%2e%2e/secret.txt",
        "/css/%2E%2E/%2e%2e/secret.txt",
    ] {
        let r = get(&srv, path, &[]);
        assert_eq!(r.status, 403, "{path}");
        assert!(!String::from_utf8_lossy(&r.body).contains("do not serve"));
        assert!(r.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--path"));
    }
    let r = get(&srv, "/%zz", &[]);
    assert_eq!(r.status, 400);
    drop(srv);

    // Under a prefix, and with an API key: the page is public, other files need the key.
    let srv = start(&[
        "--path",
        site.to_str().unwrap(),
        "--api-prefix",
        "/p",
        "--api-key",
        "k1",
    ])
    .unwrap();
    assert_eq!(get(&srv, "/p/", &[]).body, b"<!doctype html><p>my page</p>");
    assert_eq!(get(&srv, "/p/css/style.css", &[]).status, 401);
    let auth = [("Authorization", "Bearer k1")];
    assert_eq!(
        get(&srv, "/p/css/style.css", &auth).body,
        b"p { color: red }"
    );
    assert_eq!(get(&srv, "/css/style.css", &auth).status, 404);
    drop(srv);

    // A directory without index.html has no page at /.
    std::fs::remove_file(site.join("index.html")).unwrap();
    let srv = start(&["--path", site.to_str().unwrap()]).unwrap();
    let r = get(&srv, "/", &[]);
    assert_eq!(r.status, 404);
    assert!(r.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("index.html"));
    drop(srv);

    let model = common::model_path(SMOLLM2).unwrap();
    let out = common::llamafile(&["-m", model.to_str().unwrap(), "--path", "/nonexistent/site"]);
    common::assert_one_line_error(&out, "--path /nonexistent/site: not a directory");
    let _ = std::fs::remove_dir_all(site.parent().unwrap());
}
