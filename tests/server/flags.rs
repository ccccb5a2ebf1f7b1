//! llama-server's flags on a running server (SmolLM2): every flag of `llama-server --help`
//! that takes no file and is not a refused feature, all at once with the help text's default
//! values, still gives a server whose `/health` answers 200; and the server flags that act here
//! (aliases and tags, API keys from a list and a file, `--no-slots`, `--api-prefix`,
//! `--no-cache-prompt`, `--kv-unified-per-slot`, several `--host` addresses, the `LLAMA_ARG_*`
//! variables, `-n` as a bound on every request) behave as llama-server's README says.

use super::{start, SMOLLM2};
use crate::common;
use crate::common::help::{llama_server_flags, with_value};
use crate::common::http::{send, Reply};
use crate::common::server::{start_with, start_with_env, Server};
use serde_json::Value;
use std::ffi::OsString;

fn start_env(args: &[&str], env: &[(&str, &str)]) -> Option<Server> {
    let model = common::model_path(SMOLLM2)?;
    Some(start_with_env(&model, args, env))
}

fn get(port: u16, path: &str, headers: &[(&str, &str)]) -> Reply {
    send("127.0.0.1", port, "GET", path, headers, "")
}

/// Flags that print something and exit, which a server start cannot include.
const INFO: &[&str] = &["--help", "--version", "--completion-bash", "--list-devices"];

/// Flags that connect to other machines at start (tests/rpc.rs starts workers for them).
const REMOTE: &[&str] = &["--rpc"];

/// Flags that need another kind of model than SmolLM2 (a reranker's classification head; the
/// refusal at start is checked by tests/server/rerank.rs).
const OTHER_MODEL: &[&str] = &["--rerank"];

#[test]
fn every_flag_without_a_file_starts_a_healthy_server() {
    let Some(model) = common::model_path(SMOLLM2) else {
        return;
    };
    let mut args: Vec<String> = Vec::new();
    let (mut used, mut left_out) = (0, Vec::new());
    for f in llama_server_flags() {
        // --port is the test's own (0: any free port).
        if f.takes_file()
            || INFO.contains(&f.long())
            || REMOTE.contains(&f.long())
            || OTHER_MODEL.contains(&f.long())
            || f.long() == "--port"
        {
            continue;
        }
        for name in &f.names {
            let a = with_value(&f, name);
            let argv: Vec<OsString> = std::iter::once("llamafile".to_string())
                .chain(a.iter().cloned())
                .map(OsString::from)
                .collect();
            // Refused features are checked by tests/llama_server_flags.rs.
            if llamafile::cli::parse(argv).is_err() {
                left_out.push(a.join(" "));
                continue;
            }
            args.extend(a);
            used += 1;
        }
    }
    assert!(used > 300, "only {used} flags used; left out: {left_out:?}");
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let srv = start_with(&model, &argv);
    let r = get(srv.port, "/health", &[]);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["status"], "ok");
    // The flags took effect where they act: the aliases and the API key.
    let r = get(
        srv.port,
        "/v1/models",
        &[("Authorization", "Bearer secret")],
    );
    assert_eq!(r.json()["data"][0]["id"], "test-model", "{}", r.json());
    assert_eq!(get(srv.port, "/v1/models", &[]).status, 401);
}

#[test]
fn aliases_tags_and_api_keys() {
    let dir = std::env::temp_dir().join(format!("llamafile-keys-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("keys.txt");
    std::fs::write(&file, "# team keys\nkey-from-file\n\n  other-key  \n").unwrap();
    let Some(srv) = start(&[
        "--alias",
        "gpt-4o-mini,local",
        "--tags",
        "small,test",
        "--api-key",
        "k1,k2",
        "--api-key-file",
        file.to_str().unwrap(),
    ]) else {
        return;
    };
    for key in ["k1", "k2", "key-from-file", "other-key"] {
        let r = get(
            srv.port,
            "/v1/models",
            &[("Authorization", &format!("Bearer {key}"))],
        );
        assert_eq!(r.status, 200, "key {key}");
        let m = &r.json()["data"][0];
        assert_eq!(m["id"], "gpt-4o-mini");
        assert_eq!(m["aliases"], serde_json::json!(["gpt-4o-mini", "local"]));
        assert_eq!(m["tags"], serde_json::json!(["small", "test"]));
    }
    for bad in ["# team keys", "k1,k2", "nope"] {
        let r = get(
            srv.port,
            "/v1/models",
            &[("Authorization", &format!("Bearer {bad}"))],
        );
        assert_eq!(r.status, 401, "key {bad}");
    }
    let r = get(srv.port, "/props", &[("Authorization", "Bearer k2")]);
    assert_eq!(r.json()["model_alias"], "gpt-4o-mini");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn endpoint_switches_prefix_and_per_slot_context() {
    let Some(srv) = start(&[
        "--no-slots",
        "--api-prefix",
        "/llama",
        "--no-cache-prompt",
        "-np",
        "2",
        "--kv-unified-per-slot",
        "512",
    ]) else {
        return;
    };
    let r = get(srv.port, "/llama/slots", &[]);
    assert_eq!(r.status, 501);
    assert_eq!(r.json()["error"]["type"], "not_supported_error");
    assert_eq!(get(srv.port, "/llama/health", &[]).status, 200);
    let r = get(srv.port, "/health", &[]);
    assert_eq!(r.status, 404);
    assert!(r.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("/llama"));
    let props = get(srv.port, "/llama/props", &[]).json();
    assert_eq!(props["total_slots"], 2);
    assert_eq!(props["default_generation_settings"]["n_ctx"], 512);
    // --no-cache-prompt: the same prompt twice is read whole twice.
    let body = r#"{"prompt": "The cache test", "n_predict": 1, "id_slot": 0}"#;
    for _ in 0..2 {
        let r = send(
            "127.0.0.1",
            srv.port,
            "POST",
            "/llama/completion",
            &[],
            body,
        );
        assert_eq!(r.json()["timings"]["cache_n"], 0, "{}", r.json());
    }
}

#[test]
fn variables_configure_the_server_and_the_command_line_wins() {
    let env = [
        ("LLAMA_ARG_ALIAS", "from-env"),
        ("LLAMA_ARG_UI", "0"),
        ("LLAMA_ARG_ENDPOINT_SLOTS", "off"),
        ("LLAMA_ARG_N_PARALLEL", "3"),
        ("LLAMA_ARG_CTX_SIZE", "1536"),
    ];
    let Some(srv) = start_env(&[], &env) else {
        return;
    };
    let models = get(srv.port, "/v1/models", &[]).json();
    assert_eq!(models["data"][0]["id"], "from-env");
    assert_eq!(get(srv.port, "/", &[]).status, 404);
    assert_eq!(get(srv.port, "/slots", &[]).status, 501);
    let props = get(srv.port, "/props", &[]).json();
    assert_eq!(props["total_slots"], 3);
    assert_eq!(props["default_generation_settings"]["n_ctx"], 512);
    drop(srv);
    let srv = start_env(
        &["--alias", "from-flag", "--webui", "--slots", "-np", "2"],
        &env,
    )
    .unwrap();
    let models = get(srv.port, "/v1/models", &[]).json();
    assert_eq!(models["data"][0]["id"], "from-flag");
    assert_eq!(get(srv.port, "/", &[]).status, 200);
    assert_eq!(get(srv.port, "/slots", &[]).status, 200);
    assert_eq!(get(srv.port, "/props", &[]).json()["total_slots"], 2);
}

#[test]
fn several_addresses_are_served() {
    let Some(srv) = start(&["--host", "127.0.0.1,127.0.0.2"]) else {
        return;
    };
    for addr in ["127.0.0.1", "127.0.0.2"] {
        let r = send(addr, srv.port, "GET", "/health", &[], "");
        assert_eq!(r.status, 200, "{addr}");
    }
    let v: Value = get(srv.port, "/health", &[]).json();
    assert_eq!(v["status"], "ok");
}

#[test]
fn server_n_predict_bounds_every_request() {
    let Some(srv) = start(&["-n", "3"]) else {
        return;
    };
    let post = |path: &str, body: &str| send("127.0.0.1", srv.port, "POST", path, &[], body).json();
    // More than -n, or no limit of its own: -n tokens.
    for body in [
        r#"{"prompt": "Once upon a time", "n_predict": 50, "ignore_eos": true}"#,
        r#"{"prompt": "Once upon a time", "n_predict": -1, "ignore_eos": true}"#,
        r#"{"prompt": "Once upon a time", "ignore_eos": true}"#,
    ] {
        let r = post("/completion", body);
        assert_eq!(r["tokens_predicted"], 3, "{body}: {r}");
    }
    let r = post(
        "/completion",
        r#"{"prompt": "Once upon a time", "n_predict": 2, "ignore_eos": true}"#,
    );
    assert_eq!(r["tokens_predicted"], 2, "{r}");
    let r = post(
        "/v1/chat/completions",
        r#"{"messages": [{"role": "user", "content": "Tell me a long story."}], "max_tokens": 40, "ignore_eos": true}"#,
    );
    assert_eq!(r["usage"]["completion_tokens"], 3, "{r}");
}
