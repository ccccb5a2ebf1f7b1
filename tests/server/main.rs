//! The HTTP server, end to end: the real `llamafile` binary serving a test model on a free
//! loopback port, driven over HTTP (raw TCP where a request must be malformed or hostile). One
//! module per subject, each saying in its opening comment what it checks; the helpers most of
//! them share are here, the ones that only start a server and send requests live in
//! `tests/common` (`server`, `http`, `net`).
//!
//! Run one subject with a filter: `cargo test --release --test server abuse::`.

#[path = "../common/mod.rs"]
mod common;

#[cfg(target_os = "linux")]
mod abuse;
mod anthropic;
mod api;
mod builtin_templates;
mod choices;
mod cors;
mod embeddings;
mod end_to_end;
mod flags;
mod infill;
mod listen;
mod llama_fields;
mod metrics;
mod parity;
mod reasoning;
mod rerank;
mod responses;
mod sampling;
mod scale;
mod slot_files;
mod stream_extras;
mod template_caps;
mod tools;

use common::http::{send, Reply};
use common::server::{start_model, Server};
use serde_json::Value;

/// The model most of the tests serve.
const SMOLLM2: &str = "SmolLM2-135M-Instruct.Q4_1";

/// Starts the server on SmolLM2 with `args` on a free port (or `--port` in `args`); `None` when
/// the model is absent and not required.
fn start(args: &[&str]) -> Option<Server> {
    start_model(SMOLLM2, args)
}

/// `GET path` on the server at loopback port `port`.
fn get(port: u16, path: &str) -> Reply {
    send("127.0.0.1", port, "GET", path, &[], "")
}

/// The `data:` payloads of an event stream, parsed (the closing `[DONE]` left out).
fn events(r: &Reply) -> Vec<Value> {
    String::from_utf8_lossy(&r.body)
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}
