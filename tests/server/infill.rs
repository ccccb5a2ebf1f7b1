//! `POST /infill`, written from llama-server's README and its `format_prompt_infill`
//! (llama.cpp 0c1e570), on Qwen2.5-Coder-0.5B: the token layout (checked against a
//! `/completion` of the same tokens built by hand), llama-server's own greedy answers
//! (`tests/data/server/infill-qwen-0.5b.json`, made by `tools/make-server-refs.py`), the answer's
//! shape, `--spm-infill`, and every error path; a model without FIM tokens is refused.

use crate::common::http::{post, send, Reply};
use crate::common::server::{start_model, Server};
use serde_json::{json, Value};

const QWEN: &str = "qwen2.5-coder-0.5b-instruct";

fn start(args: &[&str]) -> Option<Server> {
    start_model(QWEN, args)
}

fn ok(r: Reply) -> Value {
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    r.json()
}

fn reference() -> Value {
    let p = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/server/infill-qwen-0.5b.json"
    );
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

/// Token ids of `text`, special tokens written in it recognised or not.
fn tokens(port: u16, text: &str, special: bool) -> Vec<Value> {
    ok(post(
        port,
        "/tokenize",
        &json!({ "content": text, "add_special": false, "parse_special": special }),
    ))["tokens"]
        .as_array()
        .unwrap()
        .clone()
}

/// The one id of a special token.
fn special(port: u16, text: &str) -> Value {
    let t = tokens(port, text, true);
    assert_eq!(t.len(), 1, "{text}: {t:?}");
    t[0].clone()
}

/// The prompt llama-server builds for `req`, built here from its pieces (Qwen2.5-Coder has
/// repository tokens and no BOS).
fn expected_layout(port: u16, req: &Value, spm: bool) -> Vec<Value> {
    let text = |s: &str| tokens(port, s, false);
    let mut out = Vec::new();
    out.push(special(port, "<|repo_name|>"));
    out.extend(text("myproject\n"));
    for f in req["input_extra"].as_array().into_iter().flatten() {
        out.push(special(port, "<|file_sep|>"));
        out.extend(text(&format!("{}\n", f["filename"].as_str().unwrap())));
        out.extend(text(f["text"].as_str().unwrap()));
    }
    out.push(special(port, "<|file_sep|>"));
    out.extend(text("filename\n"));
    let mut prefix = vec![special(port, "<|fim_prefix|>")];
    prefix.extend(text(req["input_prefix"].as_str().unwrap()));
    prefix.extend(tokens(port, req["prompt"].as_str().unwrap_or(""), true));
    let mut suffix = vec![special(port, "<|fim_suffix|>")];
    suffix.extend(text(req["input_suffix"].as_str().unwrap()));
    if spm {
        out.extend(suffix);
        out.extend(prefix);
    } else {
        out.extend(prefix);
        out.extend(suffix);
    }
    out.push(special(port, "<|fim_middle|>"));
    out
}

#[test]
fn infill_matches_llama_server_and_the_hand_built_prompt() {
    let refs = reference();
    let Some(srv) = start(&["-c", "4096", "-np", "1"]) else {
        return;
    };
    for case in refs["cases"].as_array().unwrap() {
        let req = &case["request"];
        let got = ok(post(srv.port, "/infill", req));
        // llama-server's greedy answer, token for token.
        assert_eq!(got["content"], case["content"], "{req}");
        assert_eq!(got["tokens_evaluated"], case["tokens_evaluated"], "{req}");
        // The same tokens sent to /completion give the same answer.
        let layout = expected_layout(srv.port, req, false);
        assert_eq!(got["tokens_evaluated"], layout.len(), "{req}");
        let mut plain = req.clone();
        for k in ["input_prefix", "input_suffix", "input_extra"] {
            plain.as_object_mut().unwrap().remove(k);
        }
        plain["prompt"] = Value::from(layout);
        let direct = ok(post(srv.port, "/completion", &plain));
        assert_eq!(direct["content"], got["content"], "{req}");
        // The answer is /completion's.
        for key in [
            "content",
            "tokens_predicted",
            "tokens_evaluated",
            "stop",
            "stop_type",
            "generation_settings",
            "timings",
            "id_slot",
            "model",
        ] {
            assert!(got.get(key).is_some(), "{key} missing: {got}");
        }
    }
    // Streamed as /completion streams.
    let mut req = refs["cases"][0]["request"].clone();
    req["stream"] = json!(true);
    let r = post(srv.port, "/infill", &req);
    assert_eq!(r.status, 200);
    let body = String::from_utf8_lossy(&r.body);
    let text: String = body
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .map(|d| {
            serde_json::from_str::<Value>(d).unwrap()["content"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(text, refs["cases"][0]["content"].as_str().unwrap());
}

#[test]
fn spm_infill_puts_the_suffix_first() {
    let refs = reference();
    let Some(srv) = start(&["-c", "4096", "-np", "1", "--spm-infill"]) else {
        return;
    };
    let req = &refs["cases"][1]["request"];
    let got = ok(post(srv.port, "/infill", req));
    let layout = expected_layout(srv.port, req, true);
    assert_eq!(got["tokens_evaluated"], layout.len());
    let mut plain = json!({ "n_predict": 16, "temperature": 0, "cache_prompt": false });
    plain["prompt"] = Value::from(layout);
    assert_eq!(
        ok(post(srv.port, "/completion", &plain))["content"],
        got["content"]
    );
}

#[test]
fn errors_name_the_field() {
    let Some(srv) = start(&["-c", "4096", "-np", "1"]) else {
        return;
    };
    let base = json!({ "input_prefix": "a", "input_suffix": "b", "n_predict": 1 });
    let with = |k: &str, v: Value| {
        let mut b = base.clone();
        b[k] = v;
        b
    };
    let without = |k: &str| {
        let mut b = base.clone();
        b.as_object_mut().unwrap().remove(k);
        b
    };
    for (body, param, needle) in [
        (without("input_prefix"), "input_prefix", "is required"),
        (without("input_suffix"), "input_suffix", "is required"),
        (
            with("input_prefix", json!(3)),
            "input_prefix",
            "got a number",
        ),
        (
            with("input_suffix", json!([1, -1])),
            "input_suffix[1]",
            "token id",
        ),
        (with("prompt", json!([1])), "prompt", "expected a string"),
        (
            with("input_extra", json!("x")),
            "input_extra",
            "expected an array",
        ),
        (
            with("input_extra", json!([5])),
            "input_extra[0]",
            "expected an object",
        ),
        (
            with("input_extra", json!([{ "filename": "a.py" }])),
            "input_extra[0].text",
            "is required",
        ),
        (
            with("input_extra", json!([{ "text": "x", "filename": 1 }])),
            "input_extra[0].filename",
            "expected a string",
        ),
        (with("temperature", json!("hot")), "temperature", "a number"),
    ] {
        let r = post(srv.port, "/infill", &body);
        assert_eq!(r.status, 400, "{body}");
        let e = &r.json()["error"];
        assert_eq!(e["param"], param, "{body}: {e}");
        assert!(
            e["message"].as_str().unwrap().contains(needle),
            "{body}: {e}"
        );
    }
    let r = send("127.0.0.1", srv.port, "GET", "/infill", &[], "");
    assert_eq!(r.status, 405);
    // A filename is optional (llama-server's default: tmp).
    let body = with("input_extra", json!([{ "text": "x = 1\n" }]));
    assert_eq!(post(srv.port, "/infill", &body).status, 200);
}

#[test]
fn a_model_without_fim_tokens_is_refused() {
    let Some(srv) = super::start(&[]) else {
        return;
    };
    let r = post(
        srv.port,
        "/infill",
        &json!({ "input_prefix": "a", "input_suffix": "b" }),
    );
    assert_eq!(r.status, 501);
    let e = &r.json()["error"];
    assert_eq!(e["type"], "not_supported_error");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .starts_with("Infill is not supported by this model: prefix token is missing."),
        "{e}"
    );
}
