//! The HTTP server, end to end: the real binary serving SmolLM2 on a free loopback port, driven
//! over raw TCP so that malformed and hostile requests can be sent as well as good ones.

use super::{get, start, SMOLLM2};
use crate::common;
use crate::common::http::{post, Reply};
use crate::common::server::start_with;

use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

fn binary() -> &'static str {
    env!("CARGO_BIN_EXE_llamafile")
}

/// Sends raw bytes on a fresh connection and reads the reply.
fn raw(port: u16, request: &[u8]) -> Reply {
    common::http::raw("127.0.0.1", port, request)
}

fn request(port: u16, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Reply {
    common::http::send("127.0.0.1", port, method, path, headers, body)
}

/// The `data:` payloads of an event-stream body.
fn events(body: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(body)
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .map(str::to_string)
        .collect()
}

/// An error reply: a 4xx status and OpenAI's error object, whose message names `needle`.
fn assert_error(r: &Reply, status: u16, needle: &str) {
    assert_eq!(
        r.status,
        status,
        "body: {}",
        String::from_utf8_lossy(&r.body)
    );
    let v = r.json();
    let message = v["error"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("no error.message in {v}"));
    assert!(v["error"]["type"].is_string(), "{v}");
    assert!(
        message.contains(needle),
        "error message {message:?} should mention {needle:?}"
    );
}

fn slots(port: u16) -> Vec<Value> {
    get(port, "/slots").json().as_array().unwrap().clone()
}

#[test]
fn every_endpoint_answers() {
    let Some(srv) = start(&["-np", "2", "-c", "2048", "--metrics"]) else {
        return;
    };
    let p = srv.port;
    assert_eq!(get(p, "/health").json(), json!({"status": "ok"}));

    let models = get(p, "/v1/models").json();
    assert_eq!(models["object"], "list");
    // Named by the path given to -m, as llama-server names it.
    let path = common::model_path(SMOLLM2).unwrap();
    assert_eq!(models["data"][0]["id"], path.to_string_lossy().as_ref());

    let page = get(p, "/");
    assert_eq!(page.status, 200);
    assert!(page
        .header("content-type")
        .unwrap()
        .starts_with("text/html"));
    let html = String::from_utf8_lossy(&page.body);
    assert!(html.contains("v1/chat/completions") && !html.contains("://cdn"));

    let chat = post(
        p,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "Say hi"}], "max_tokens": 5, "temperature": 0}),
    )
    .json();
    assert_eq!(chat["object"], "chat.completion");
    assert_eq!(chat["choices"][0]["message"]["role"], "assistant");
    assert!(!chat["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .is_empty());
    assert_eq!(chat["choices"][0]["finish_reason"], "length");
    assert_eq!(chat["usage"]["completion_tokens"], 5);
    let prompt_tokens = chat["usage"]["prompt_tokens"].as_u64().unwrap();
    assert_eq!(
        chat["usage"]["total_tokens"].as_u64().unwrap(),
        prompt_tokens + 5
    );

    // Streamed: role first, content deltas, a finish reason, usage, then [DONE].
    let r = post(
        p,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "Say hi"}], "max_tokens": 5, "temperature": 0,
                "stream": true, "stream_options": {"include_usage": true}}),
    );
    assert_eq!(r.status, 200);
    assert!(r
        .header("content-type")
        .unwrap()
        .starts_with("text/event-stream"));
    let ev = events(&r.body);
    assert_eq!(ev.last().unwrap(), "[DONE]");
    let chunks: Vec<Value> = ev[..ev.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let streamed: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(streamed, chat["choices"][0]["message"]["content"]);
    assert!(chunks
        .iter()
        .any(|c| c["choices"][0]["finish_reason"] == "length"));
    let usage = &chunks.last().unwrap()["usage"];
    assert_eq!(usage["completion_tokens"], 5);
    // The same prompt again: its prefix came from the slot's cache.
    assert!(
        usage["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap()
            > 0
    );

    let cmpl = post(
        p,
        "/v1/completions",
        &json!({"prompt": "The capital of France is", "max_tokens": 4, "temperature": 0, "stop": ["\n"]}),
    )
    .json();
    assert_eq!(cmpl["object"], "text_completion");
    assert!(cmpl["choices"][0]["text"]
        .as_str()
        .unwrap()
        .contains("Paris"));

    let native = post(
        p,
        "/completion",
        &json!({"prompt": "The capital of France is", "n_predict": 4, "temperature": 0,
                "top_k": 40, "top_p": 0.9, "min_p": 0.05, "repeat_penalty": 1.0, "seed": 1,
                "cache_prompt": false, "return_tokens": true}),
    )
    .json();
    assert_eq!(native["stop"], true);
    assert_eq!(native["tokens_predicted"], 4);
    assert_eq!(native["tokens"].as_array().unwrap().len(), 4);
    assert_eq!(native["stop_type"], "limit");
    assert!(native["content"].as_str().unwrap().contains("Paris"));

    // A stop word ends generation and is not part of the text.
    let stopped = post(
        p,
        "/completion",
        &json!({"prompt": "The capital of France is", "n_predict": 16, "temperature": 0, "stop": ["."]}),
    )
    .json();
    assert_eq!(stopped["stop_type"], "word");
    assert_eq!(stopped["stopping_word"], ".");
    assert!(!stopped["content"].as_str().unwrap().contains('.'));

    let streamed = post(
        p,
        "/completion",
        &json!({"prompt": "The capital of France is", "n_predict": 4, "temperature": 0, "stream": true}),
    );
    let ev = events(&streamed.body);
    let last: Value = serde_json::from_str(ev.last().unwrap()).unwrap();
    assert_eq!(last["stop"], true);
    let text: String = ev
        .iter()
        .map(|e| {
            serde_json::from_str::<Value>(e).unwrap()["content"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(text, native["content"].as_str().unwrap());

    let toks = post(p, "/tokenize", &json!({"content": "Hello world"})).json();
    let ids = toks["tokens"].clone();
    assert_eq!(ids.as_array().unwrap().len(), 2);
    let pieces = post(
        p,
        "/tokenize",
        &json!({"content": "Hello world", "with_pieces": true}),
    )
    .json();
    assert_eq!(pieces["tokens"][1]["piece"], " world");
    let text = post(p, "/detokenize", &json!({"tokens": ids})).json();
    assert_eq!(text["content"], "Hello world");

    let tpl = post(
        p,
        "/apply-template",
        &json!({"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]}),
    )
    .json();
    assert_eq!(
        tpl["prompt"],
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n"
    );

    let props = get(p, "/props").json();
    assert_eq!(props["total_slots"], 2);
    assert_eq!(props["default_generation_settings"]["n_ctx"], 1024);
    assert!(props["chat_template"]
        .as_str()
        .unwrap()
        .contains("im_start"));

    let s = slots(p);
    assert_eq!(s.len(), 2);
    assert!(s
        .iter()
        .all(|s| s["is_processing"] == false && s["n_ctx"] == 1024));

    let metrics = get(p, "/metrics");
    assert!(metrics
        .header("content-type")
        .unwrap()
        .starts_with("text/plain"));
    let text = String::from_utf8(metrics.body).unwrap();
    let predicted: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("llamacpp:tokens_predicted_total "))
        .unwrap()
        .parse()
        .unwrap();
    assert!(predicted >= 5.0 + 5.0 + 4.0 + 4.0, "{text}");

    // HEAD: headers only.
    let mut s = TcpStream::connect(("127.0.0.1", p)).unwrap();
    s.write_all(b"HEAD /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut all = String::new();
    s.read_to_string(&mut all).unwrap();
    assert!(
        all.starts_with("HTTP/1.1 200") && all.ends_with("\r\n\r\n"),
        "{all}"
    );
}

#[test]
fn bad_input_is_a_4xx_json_error_and_the_server_keeps_serving() {
    let Some(srv) = start(&["-c", "512", "-np", "2"]) else {
        return;
    };
    let p = srv.port;
    let chat = "/v1/chat/completions";
    let json_headers = [("Content-Type", "application/json")];

    assert_error(
        &request(p, "POST", chat, &json_headers, "{\"messages\": ["),
        400,
        "not valid JSON",
    );
    assert_error(
        &request(p, "POST", chat, &json_headers, "[1, 2]"),
        400,
        "JSON object",
    );
    assert_error(&request(p, "POST", chat, &json_headers, ""), 400, "empty");
    assert_error(&post(p, chat, &json!({})), 400, "messages");
    assert_error(&post(p, chat, &json!({"messages": "hi"})), 400, "messages");
    let r = post(
        p,
        chat,
        &json!({"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": 7}]}),
    );
    assert_error(&r, 400, "messages[1].content");
    assert_eq!(r.json()["error"]["param"], "messages[1].content");
    let ok_messages = json!([{"role": "user", "content": "hi"}]);
    for (field, value) in [
        ("max_tokens", json!("ten")),
        ("max_tokens", json!(2.5)),
        ("max_tokens", json!(-3)),
        ("temperature", json!("hot")),
        ("temperature", json!(-1)),
        ("top_p", json!(3)),
        ("stream", json!("yes")),
        ("stop", json!([1])),
        ("seed", json!("x")),
        ("n", json!(0)),
        ("n", json!(1000)),
    ] {
        let r = post(p, chat, &json!({"messages": ok_messages, field: value}));
        assert_error(&r, 400, field);
    }
    assert_error(
        &post(
            p,
            chat,
            &json!({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}),
        ),
        400,
        // Without --mmproj, llama-server's refusal of images, naming the part.
        "messages[0].content[0]: image input is not supported",
    );
    assert_error(
        &post(p, "/completion", &json!({"prompt": 5})),
        400,
        "prompt",
    );
    assert_error(
        &post(p, "/completion", &json!({"prompt": [1, -2]})),
        400,
        "prompt[1]",
    );
    assert_error(
        &post(
            p,
            "/completion",
            &json!({"prompt": "x", "n_predict": "many"}),
        ),
        400,
        "n_predict",
    );
    assert_error(
        &post(p, "/detokenize", &json!({"tokens": [1, 99999999]})),
        400,
        "tokens[1]",
    );
    assert_error(
        &post(p, "/tokenize", &json!({"content": 1})),
        400,
        "content",
    );

    // A prompt longer than a slot's context (512 / 2 slots).
    let long = "hello ".repeat(400);
    let r = post(p, "/completion", &json!({"prompt": long}));
    assert_error(&r, 400, "context");
    let r = post(
        p,
        chat,
        &json!({"messages": [{"role": "user", "content": long}]}),
    );
    assert_error(&r, 400, "context");
    assert_eq!(r.json()["error"]["type"], "exceed_context_size_error");

    assert_error(&get(p, "/no/such/endpoint"), 404, "/no/such/endpoint");
    assert_error(&request(p, "DELETE", "/health", &[], ""), 405, "DELETE");
    assert_error(&get(p, chat), 405, "POST");

    // An oversized body is refused from its Content-Length, before it is read.
    let r = raw(
        p,
        b"POST /completion HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100000000\r\n\r\n{",
    );
    assert_error(&r, 413, "limit");
    // ...and a chunked one as soon as it crosses the limit.
    let mut big =
        b"POST /completion HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n"
            .to_vec();
    for _ in 0..10 {
        big.extend_from_slice(format!("{:x}\r\n", 1 << 20).as_bytes());
        big.extend(std::iter::repeat_n(b' ', 1 << 20));
        big.extend_from_slice(b"\r\n");
    }
    assert_error(&raw(p, &big), 413, "limit");
    // Request smuggling: both framings at once.
    let r = raw(
        p,
        b"POST /completion HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nX",
    );
    assert_error(&r, 400, "smuggling");
    // CR inside a header value, bare LF line endings, a huge header.
    assert_error(
        &raw(p, b"GET /health HTTP/1.1\r\nX-A: a\rb\r\n\r\n"),
        400,
        "control character",
    );
    assert_error(&raw(p, b"GET /health HTTP/1.1\nHost: x\n\n"), 400, "CRLF");
    let huge = format!(
        "GET /health HTTP/1.1\r\nX-Big: {}\r\n\r\n",
        "a".repeat(64 * 1024)
    );
    assert_error(&raw(p, huge.as_bytes()), 431, "bytes");
    // DNS rebinding (pages on other sites are llama-server's business by default: `cors`).
    let r = raw(
        p,
        b"GET /v1/models HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n",
    );
    assert_error(&r, 403, "Host");

    // Still serving, and every slot free.
    assert_eq!(get(p, "/health").status, 200);
    let ok = post(p, "/completion", &json!({"prompt": "Hi", "n_predict": 2})).json();
    assert_eq!(ok["tokens_predicted"], 2);
    assert!(slots(p).iter().all(|s| s["is_processing"] == false));
}

#[test]
fn api_key_is_required_when_set() {
    let Some(srv) = start(&["--api-key", "sekrit", "-np", "1"]) else {
        return;
    };
    let p = srv.port;
    assert_error(&get(p, "/v1/models"), 401, "API key");
    let r = request(
        p,
        "GET",
        "/v1/models",
        &[("Authorization", "Bearer wrong")],
        "",
    );
    assert_error(&r, 401, "invalid API key");
    assert_eq!(r.header("www-authenticate"), Some("Bearer"));
    let r = request(
        p,
        "GET",
        "/v1/models",
        &[("Authorization", "Bearer sekrit")],
        "",
    );
    assert_eq!(r.status, 200);
    // The health check and the page (which asks for the key) stay public.
    assert_eq!(get(p, "/health").status, 200);
    assert_eq!(get(p, "/").status, 200);
}

#[test]
fn chat_at_temperature_zero_matches_the_cli() {
    let Some(model) = common::model_path(SMOLLM2) else {
        return;
    };
    let srv = start_with(&model, &["-np", "1"]);
    let p = srv.port;
    let messages = json!([{"role": "user", "content": "What is the capital of France?"}]);
    let prompt = post(p, "/apply-template", &json!({ "messages": messages })).json()["prompt"]
        .as_str()
        .unwrap()
        .to_string();
    let n = 24;
    let chat = post(
        p,
        "/v1/chat/completions",
        &json!({"messages": messages, "temperature": 0, "max_tokens": n}),
    )
    .json();
    let completion = post(
        p,
        "/completion",
        &json!({"prompt": prompt, "temperature": 0, "n_predict": n, "return_tokens": true}),
    )
    .json();

    let trace = std::env::temp_dir().join(format!("llamafile-server-trace-{}.jsonl", p));
    let out = Command::new(binary())
        .arg("-m")
        .arg(&model)
        .args([
            "--no-escape",
            "--temp",
            "0",
            "-n",
            &n.to_string(),
            "-t",
            "2",
            "-p",
        ])
        .arg(&prompt)
        .arg("--trace-tokens")
        .arg(&trace)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cli_text = String::from_utf8(out.stdout).unwrap();
    let cli_ids: Vec<u64> = std::fs::read_to_string(&trace)
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["id"]
                .as_u64()
                .unwrap()
        })
        .collect();
    let _ = std::fs::remove_file(&trace);

    let server_ids: Vec<u64> = completion["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    // The CLI's trace also lists an end-of-generation token, which the server does not send.
    assert_eq!(server_ids[..], cli_ids[..server_ids.len()]);
    assert_eq!(chat["choices"][0]["message"]["content"], cli_text.as_str());
    assert_eq!(completion["content"], cli_text.as_str());

    // --chat renders the same conversation with the same template: the same answer, then a
    // second turn that builds on the first.
    let n_text = n.to_string();
    let out = common::llamafile_with_input(
        &[
            "-m",
            model.to_str().unwrap(),
            "--chat",
            "--temp",
            "0",
            "-n",
            &n_text,
            "-t",
            "2",
        ],
        b"What is the capital of France?\nAnd of Italy?\n",
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let transcript = String::from_utf8(out.stdout).unwrap();
    let turns: Vec<&str> = transcript.split("> ").collect();
    assert_eq!(turns.len(), 4, "{transcript:?}");
    assert_eq!(turns[1], format!("{cli_text}\n"));
    assert!(!turns[2].trim().is_empty(), "{transcript:?}");
}

/// Resident memory of a process, in KiB.
fn rss_kib(pid: u32) -> u64 {
    common::proc_status_kib(pid, "VmRSS:")
}

/// Streams one chat answer; returns its text and finish reason.
fn stream_chat(port: u16, i: usize, max_tokens: usize) -> (String, String) {
    let r = post(
        port,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": format!("Count to {i}.")}],
                "max_tokens": max_tokens, "stream": true, "temperature": 0.5, "seed": i}),
    );
    assert_eq!(r.status, 200);
    let ev = events(&r.body);
    assert_eq!(ev.last().map(String::as_str), Some("[DONE]"));
    let mut text = String::new();
    let mut finish = String::new();
    for e in &ev[..ev.len() - 1] {
        let v: Value = serde_json::from_str(e).unwrap();
        if let Some(t) = v["choices"][0]["delta"]["content"].as_str() {
            text.push_str(t);
        }
        if let Some(f) = v["choices"][0]["finish_reason"].as_str() {
            finish = f.to_string();
        }
    }
    (text, finish)
}

#[test]
fn thirty_two_concurrent_streams_all_complete() {
    let Some(srv) = start(&["-np", "4", "-c", "2048", "--metrics"]) else {
        return;
    };
    let p = srv.port;
    let round = || {
        let start = Instant::now();
        let handles: Vec<_> = (0..32)
            .map(|i| std::thread::spawn(move || stream_chat(p, i, 12)))
            .collect();
        for h in handles {
            let (text, finish) = h.join().expect("a client failed");
            assert!(!text.is_empty());
            assert!(finish == "length" || finish == "stop", "{finish}");
        }
        assert!(start.elapsed() < Duration::from_secs(240));
    };
    round();
    let after_first = rss_kib(srv.child.id());
    round();
    let after_second = rss_kib(srv.child.id());
    assert!(
        after_second < after_first + 32 * 1024,
        "memory grew from {after_first} KiB to {after_second} KiB"
    );
    let m = String::from_utf8(get(p, "/metrics").body).unwrap();
    assert!(m.contains("llamacpp:requests_completed_total 64\n"), "{m}");
    // Continuous batching: far fewer forward passes than tokens generated.
    let metric = |name: &str| -> f64 {
        m.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {m}"))
    };
    let passes = metric("llamacpp:n_decode_total");
    let tokens = metric("llamacpp:tokens_predicted_total");
    assert!(
        tokens >= 64.0 && passes < tokens / 2.0,
        "{passes} forward passes for {tokens} tokens"
    );
    assert!(slots(p).iter().all(|s| s["is_processing"] == false));
}

/// Waits until no slot is busy; returns how long that took.
fn wait_idle(port: u16, limit: Duration) -> Duration {
    let start = Instant::now();
    while start.elapsed() < limit {
        if slots(port).iter().all(|s| s["is_processing"] == false) {
            return start.elapsed();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("a slot is still busy after {limit:?}: {:?}", slots(port));
}

#[test]
fn a_client_that_disconnects_frees_its_slot() {
    let Some(srv) = start(&["-np", "2", "-c", "4096"]) else {
        return;
    };
    let p = srv.port;
    for stream in [true, false] {
        let body = json!({"prompt": "Once upon a time", "n_predict": 100000, "stream": stream,
                          "ignore_eos": true})
        .to_string();
        let mut s = TcpStream::connect(("127.0.0.1", p)).unwrap();
        write!(
            s,
            "POST /completion HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        if stream {
            // Wait for streamed text.
            let mut buf = [0u8; 4096];
            let mut got = Vec::new();
            while String::from_utf8_lossy(&got).matches("data: ").count() < 3 {
                let n = s.read(&mut buf).unwrap();
                assert!(n > 0);
                got.extend_from_slice(&buf[..n]);
            }
        } else {
            let start = Instant::now();
            while !slots(p)
                .iter()
                .any(|s| s["next_token"][0]["n_decoded"].as_u64().unwrap_or(0) > 2)
            {
                assert!(
                    start.elapsed() < Duration::from_secs(30),
                    "generation never started"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        assert!(slots(p).iter().any(|s| s["is_processing"] == true));
        drop(s);
        let took = wait_idle(p, Duration::from_secs(1));
        eprintln!("stream={stream}: slot freed {took:?} after the client left");
    }
    assert_eq!(get(p, "/health").status, 200);
}

#[test]
fn a_taken_port_moves_to_the_next_one() {
    let Some(model) = common::model_path(SMOLLM2) else {
        return;
    };
    // Find a port whose successor is free too, and hold it.
    let held = (0..20)
        .find_map(|_| {
            let l = TcpListener::bind("127.0.0.1:0").ok()?;
            let port = l.local_addr().ok()?.port();
            let next = TcpListener::bind(("127.0.0.1", port.checked_add(1)?)).ok()?;
            drop(next);
            Some(l)
        })
        .expect("two adjacent free ports");
    let port = held.local_addr().unwrap().port();
    let srv = start_with(&model, &["--port", &port.to_string(), "-np", "1"]);
    assert_eq!(srv.port, port + 1);
    assert_eq!(get(srv.port, "/health").status, 200);
}

#[test]
fn batched_greedy_answers_equal_the_ones_alone() {
    let Some(srv) = start(&["-np", "4", "-c", "2048"]) else {
        return;
    };
    let p = srv.port;
    let prompts = [
        "Once upon a time",
        "The capital of France is",
        "def fibonacci(n):",
        "1, 2, 3, 4,",
    ];
    let complete = move |prompt: &str| {
        post(
            p,
            "/completion",
            &json!({"prompt": prompt, "n_predict": 24, "temperature": 0, "cache_prompt": false}),
        )
        .json()["content"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let alone: Vec<String> = prompts.iter().map(|q| complete(q)).collect();
    let together: Vec<String> = prompts
        .iter()
        .map(|q| {
            let q = q.to_string();
            std::thread::spawn(move || complete(&q))
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().unwrap())
        .collect();
    // Each slot's rows go through the same kernels whether or not other slots share the batch.
    assert_eq!(alone, together);
}

#[test]
fn chat_template_override_by_name_jinja_or_file() {
    let Some(model) = common::model_path(SMOLLM2) else {
        return;
    };
    let messages = json!([{"role": "user", "content": "Hi"}]);
    let prompt = |args: &[&str]| {
        let srv = start_with(&model, args);
        post(
            srv.port,
            "/apply-template",
            &json!({ "messages": messages }),
        )
        .json()["prompt"]
            .as_str()
            .unwrap()
            .to_string()
    };
    // SmolLM2's own template is ChatML with a default system turn.
    assert!(prompt(&["-np", "1"]).starts_with("<|im_start|>system\n"));
    assert_eq!(
        prompt(&["-np", "1", "--chat-template", "phi3"]),
        "<|user|>\nHi<|end|>\n<|assistant|>\n"
    );
    assert_eq!(
        prompt(&[
            "-np",
            "1",
            "--jinja",
            "--chat-template",
            "{% for m in messages %}[{{ m.content }}]{% endfor %}"
        ]),
        "[Hi]"
    );
    let file = std::env::temp_dir().join(format!("llamafile-tmpl-{}.jinja", std::process::id()));
    std::fs::write(&file, "{{ bos_token }}{{ messages[0].content }}!").unwrap();
    let from_file = prompt(&["-np", "1", "--chat-template-file", file.to_str().unwrap()]);
    let _ = std::fs::remove_file(&file);
    assert!(from_file.ends_with("Hi!"), "{from_file:?}");
}

#[test]
fn a_full_slot_shifts_its_context_when_asked() {
    let Some(model) = common::model_path(SMOLLM2) else {
        return;
    };
    let body = json!({"prompt": "Once upon a time", "n_predict": 120, "temperature": 0});
    let predicted = |args: &[&str]| {
        let srv = start_with(&model, args);
        let r = post(srv.port, "/completion", &body).json();
        r["tokens_predicted"].as_u64().unwrap()
    };
    assert!(predicted(&["-np", "1", "-c", "64"]) < 64);
    assert_eq!(predicted(&["-np", "1", "-c", "64", "--context-shift"]), 120);
    // A request's own n_keep (here the whole prompt), and a bad one named.
    let srv = start_with(&model, &["-np", "1", "-c", "64", "--context-shift"]);
    let mut keep_all = body.clone();
    keep_all["n_keep"] = json!(-1);
    let r = post(srv.port, "/completion", &keep_all).json();
    assert_eq!(r["tokens_predicted"], 120);
    keep_all["n_keep"] = json!("all");
    assert_error(&post(srv.port, "/completion", &keep_all), 400, "n_keep");
}

#[test]
fn speculative_drafts_leave_answers_unchanged() {
    let Some(model) = common::model_path(SMOLLM2) else {
        return;
    };
    let code = "def total(items):\n    s = 0\n    for item in items:\n        s += item.price * item.count\n    return s\n";
    let body = json!({
        "messages": [{"role": "user", "content": format!("Repeat this code exactly:\n{code}")}],
        "temperature": 0,
        "max_tokens": 60,
    });
    let answer = |args: &[&str]| {
        let srv = start_with(&model, args);
        let r = post(srv.port, "/v1/chat/completions", &body).json();
        let text = r["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .to_string();
        (text, r["timings"].clone())
    };
    let (plain, timings) = answer(&["-np", "1"]);
    assert!(timings.get("draft_n").is_none(), "{timings}");
    let (spec, timings) = answer(&[
        "-np",
        "1",
        "--spec-type",
        "ngram-simple",
        "--spec-ngram-simple-size-n",
        "2",
        "--draft-max",
        "6",
    ]);
    assert_eq!(spec, plain);
    assert!(!plain.is_empty());
    // A draft model (here the model itself: every draft is right) and the early-exit draft
    // go through per-slot draft sessions.
    let m = model.to_str().unwrap();
    let (same, t) = answer(&["-np", "2", "-md", m, "--draft-max", "4"]);
    assert_eq!(same, plain);
    assert_eq!(t["draft_n"], t["draft_n_accepted"], "{t}");
    let (early, _) = answer(&["-np", "1", "--n-layer-exit-draft", "20"]);
    assert_eq!(early, plain);
    let (n, ok) = (
        timings["draft_n"].as_u64().unwrap(),
        timings["draft_n_accepted"].as_u64().unwrap(),
    );
    assert!(ok > 0 && ok <= n, "{timings}");
}

#[test]
fn no_webui_serves_the_api_only() {
    let Some(model) = common::model_path(SMOLLM2) else {
        return;
    };
    let srv = start_with(&model, &["-np", "1", "--no-webui"]);
    assert_eq!(get(srv.port, "/").status, 404);
    assert_eq!(get(srv.port, "/health").status, 200);
    assert_eq!(get(srv.port, "/v1/models").status, 200);
}

#[test]
fn mlock_locks_the_weights_when_allowed() {
    let Some(model) = common::model_path(SMOLLM2) else {
        return;
    };
    let file_kib = std::fs::metadata(&model).unwrap().len() / 1024;
    // Locking needs root (CAP_IPC_LOCK) or a large enough `ulimit -l`; otherwise the server
    // warns and goes on, so only the root case is checked from outside.
    let root = std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"));
    let srv = start_with(&model, &["-np", "1", "--mlock"]);
    assert_eq!(get(srv.port, "/health").status, 200);
    let locked = common::proc_status_kib(srv.child.id(), "VmLck:");
    if root {
        assert!(
            locked >= file_kib,
            "VmLck {locked} KiB for a {file_kib} KiB model"
        );
    }
    let plain = start_with(&model, &["-np", "1"]);
    assert_eq!(common::proc_status_kib(plain.child.id(), "VmLck:"), 0);
}
