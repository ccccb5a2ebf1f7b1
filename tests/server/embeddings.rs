//! The embedding endpoints (`--embedding`, `--pooling`), written from llama-server's README
//! (llama.cpp 0c1e570) and checked on SmolLM2 against llama-server's own vectors
//! (`tests/data/server/embeddings-smollm2.json`, made by `tools/make-server-refs.py`): mean, cls
//! and last pooling, per-token vectors with `--pooling none`, OpenAI's input shapes and
//! `encoding_format`, llama-server's native shapes, normalisation, and every error path.

use super::start;
use crate::common::http::{post, send, Reply};
use serde_json::{json, Value};

fn reference() -> Value {
    let p = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/server/embeddings-smollm2.json"
    );
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .unwrap_or_else(|| panic!("not an array: {v}"))
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn norm(a: &[f32]) -> f32 {
    dot(a, a).sqrt()
}

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    dot(a, b) / (norm(a) * norm(b))
}

/// Two vectors equal within llama.cpp's own batching noise: same direction, same length.
fn assert_close(ours: &[f32], theirs: &[f32], what: &str) {
    let c = cosine(ours, theirs);
    assert!(c > 0.9995, "{what}: cosine {c}");
    let r = norm(ours) / norm(theirs);
    assert!((r - 1.0).abs() < 2e-3, "{what}: length ratio {r}");
}

/// The vectors of an OpenAI answer, in order.
fn data(r: &Reply) -> Vec<Vec<f32>> {
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let v = r.json();
    assert_eq!(v["object"], "list");
    v["data"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .map(|(i, d)| {
            assert_eq!(d["index"], i);
            assert_eq!(d["object"], "embedding");
            floats(&d["embedding"])
        })
        .collect()
}

fn error(r: &Reply, status: u16) -> Value {
    assert_eq!(
        r.status,
        status,
        "{}",
        String::from_utf8_lossy(&r.body)
            .chars()
            .take(300)
            .collect::<String>()
    );
    r.json()["error"].clone()
}

#[test]
fn pooled_vectors_match_llama_server() {
    let refs = reference();
    let inputs = refs["inputs"].clone();
    for pooling in ["mean", "cls", "last"] {
        let Some(srv) = start(&["--embedding", "--pooling", pooling, "-c", "512", "-np", "1"])
        else {
            return;
        };
        let r = post(srv.port, "/v1/embeddings", &json!({ "input": inputs }));
        let got = data(&r);
        let v = r.json();
        assert_eq!(v["usage"], refs["usage"], "{pooling}");
        let path = crate::common::model_path(super::SMOLLM2).unwrap();
        assert_eq!(v["model"], path.to_string_lossy().as_ref());
        for (i, want) in refs["pooled"][pooling]
            .as_array()
            .unwrap()
            .iter()
            .enumerate()
        {
            assert_close(&got[i], &floats(want), &format!("{pooling} input {i}"));
            let n = norm(&got[i]);
            assert!((n - 1.0).abs() < 1e-4, "{pooling}: norm {n}");
        }
    }
}

#[test]
fn pooling_none_gives_every_tokens_vector_and_mean_is_their_mean() {
    let refs = reference();
    let Some(none) = start(&["--embeddings", "--pooling", "none", "-c", "512", "-np", "1"]) else {
        return;
    };
    let text = refs["inputs"][0].as_str().unwrap();
    for path in ["/embedding", "/embeddings"] {
        let r = post(none.port, path, &json!({ "content": text }));
        assert_eq!(r.status, 200, "{path}");
        let v = r.json();
        assert_eq!(v.as_array().unwrap().len(), 1, "{path}: {v}");
        assert_eq!(v[0]["index"], 0);
        let rows = v[0]["embedding"].as_array().unwrap();
        let want = refs["none"].as_array().unwrap();
        assert_eq!(rows.len(), want.len(), "{path}: one vector per token");
        for (k, (row, w)) in rows.iter().zip(want).enumerate() {
            // Unnormalised: the raw hidden state, length and all.
            assert_close(&floats(row), &floats(w), &format!("{path} token {k}"));
        }
    }
    // OpenAI's endpoint needs a pooled vector.
    let e = error(
        &post(none.port, "/v1/embeddings", &json!({ "input": text })),
        400,
    );
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .starts_with("Pooling type 'none' is not OAI compatible"),
        "{e}"
    );

    // The mean pooling of the same text is the normalised mean of those vectors.
    let rows: Vec<Vec<f32>> = post(none.port, "/embeddings", &json!({ "input": text })).json()[0]
        ["embedding"]
        .as_array()
        .unwrap()
        .iter()
        .map(floats)
        .collect();
    drop(none);
    let mut mean = vec![0f32; rows[0].len()];
    for r in &rows {
        mean.iter_mut()
            .zip(r)
            .for_each(|(m, x)| *m += x / rows.len() as f32);
    }
    let mean_srv = start(&["--embedding", "--pooling", "mean", "-c", "512", "-np", "1"]).unwrap();
    let pooled = data(&post(
        mean_srv.port,
        "/v1/embeddings",
        &json!({ "input": text }),
    ));
    let n = norm(&mean);
    let normalised: Vec<f32> = mean.iter().map(|x| x / n).collect();
    for (a, b) in pooled[0].iter().zip(&normalised) {
        assert!((a - b).abs() < 1e-5, "{a} vs {b}");
    }
}

#[test]
fn openai_input_shapes_encodings_and_usage() {
    let Some(srv) = start(&["--embedding", "--pooling", "mean", "-c", "512", "-np", "1"]) else {
        return;
    };
    let p = srv.port;
    let one = |input: Value| {
        let got = data(&post(p, "/v1/embeddings", &json!({ "input": input })));
        assert_eq!(got.len(), 1);
        got.into_iter().next().unwrap()
    };
    let hello = one(json!("hello world"));
    let ids: Vec<u64> = post(
        p,
        "/tokenize",
        &json!({"content": "hello world", "add_special": true}),
    )
    .json()["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_u64().unwrap())
        .collect();
    // Token ids and the text they spell give the same vector.
    assert_eq!(one(json!(ids)), hello);
    // A batch equals its inputs one at a time, whatever their shapes.
    let paris = one(json!("The capital of France is Paris."));
    let both = data(&post(
        p,
        "/v1/embeddings",
        &json!({ "input": [ids, "The capital of France is Paris."] }),
    ));
    assert_eq!(both, vec![hello.clone(), paris.clone()]);
    // Token ids mixed with text are one input.
    let mixed = data(&post(
        p,
        "/v1/embeddings",
        &json!({ "input": [ids[0], " world"] }),
    ));
    assert_eq!(mixed.len(), 1);
    assert_eq!(mixed[0], hello);

    // usage counts every input's tokens; model echoes the request's.
    let r = post(
        p,
        "/v1/embeddings",
        &json!({ "input": ["hello world", "hello world"], "model": "my-model" }),
    );
    let v = r.json();
    assert_eq!(v["model"], "my-model");
    let n = ids.len() * 2;
    assert_eq!(v["usage"], json!({ "prompt_tokens": n, "total_tokens": n }));

    // base64: the little-endian f32 bytes of the same vector.
    let r = post(
        p,
        "/v1/embeddings",
        &json!({ "input": "hello world", "encoding_format": "base64" }),
    );
    assert_eq!(r.status, 200);
    let d = &r.json()["data"][0];
    assert_eq!(d["encoding_format"], "base64");
    let bytes = decode_base64(d["embedding"].as_str().unwrap());
    let decoded: Vec<f32> = bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    assert_eq!(decoded, hello);
    let r = post(
        p,
        "/v1/embeddings",
        &json!({ "input": "hello world", "encoding_format": "float" }),
    );
    assert_eq!(data(&r)[0], hello);
}

#[test]
fn native_shapes_and_normalisation() {
    let Some(srv) = start(&["--embedding", "--pooling", "mean", "-c", "512", "-np", "1"]) else {
        return;
    };
    let p = srv.port;
    let pooled = |body: Value| -> Vec<f32> {
        let r = post(p, "/embedding", &body);
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        let v = r.json();
        // One entry per input, its embedding an array holding the one pooled vector.
        assert_eq!(v[0]["index"], 0);
        assert_eq!(v[0]["embedding"].as_array().unwrap().len(), 1);
        floats(&v[0]["embedding"][0])
    };
    let unit = pooled(json!({ "content": "hello world" }));
    assert!((norm(&unit) - 1.0).abs() < 1e-5);
    let raw = pooled(json!({ "content": "hello world", "embd_normalize": -1 }));
    assert!(norm(&raw) > 1.5, "unnormalised: {}", norm(&raw));
    let n = norm(&raw);
    for (a, b) in unit.iter().zip(&raw) {
        assert!((a - b / n).abs() < 1e-6);
    }
    let taxicab = pooled(json!({ "content": "hello world", "embd_normalize": 1 }));
    let l1: f32 = taxicab.iter().map(|x| x.abs()).sum();
    assert!((l1 - 1.0).abs() < 1e-4, "{l1}");
    let int16 = pooled(json!({ "content": "hello world", "embd_normalize": 0 }));
    let top = int16.iter().fold(0f32, |m, x| m.max(x.abs()));
    assert!((top - 32760.0).abs() < 0.1, "{top}");
    // /embeddings and `input` give the same; several inputs keep their order.
    let r = post(p, "/embeddings", &json!({ "input": ["hello world", "x"] }));
    let v = r.json();
    assert_eq!(v.as_array().unwrap().len(), 2);
    assert_eq!(v[1]["index"], 1);
    assert_eq!(floats(&v[0]["embedding"][0]), unit);
    // `content` on the OpenAI path answers in the native shape, as llama-server does.
    let r = post(p, "/v1/embeddings", &json!({ "content": "hello world" }));
    assert_eq!(floats(&r.json()[0]["embedding"][0]), unit);
    // Completions are still served.
    let r = post(p, "/completion", &json!({ "prompt": "Hi", "n_predict": 2 }));
    assert_eq!(r.status, 200);
}

#[test]
fn errors_name_the_field() {
    let Some(srv) = start(&["--embedding", "--pooling", "last", "-c", "64", "-np", "1"]) else {
        return;
    };
    let p = srv.port;
    for (body, param, needle) in [
        (json!({}), "input", "is required"),
        (json!({ "input": 5 }), "input", "got a number"),
        (json!({ "input": "" }), "input", "no tokens"),
        (json!({ "input": [] }), "input", "must not be empty"),
        (json!({ "input": ["a", ""] }), "input[1]", "no tokens"),
        (
            json!({ "input": ["a", {"x": 1}] }),
            "input[1]",
            "got an object",
        ),
        (json!({ "input": [[1, -2]] }), "input[0][1]", "token id"),
        (
            json!({ "input": [1, 99999999] }),
            "input[1]",
            "outside the vocabulary",
        ),
        (
            json!({ "input": "a", "encoding_format": "int8" }),
            "encoding_format",
            "'int8'",
        ),
        (
            json!({ "input": "a", "embd_normalize": "2" }),
            "embd_normalize",
            "an integer",
        ),
        (
            json!({ "input": "hello ".repeat(100) }),
            "input",
            "exceeds the available context size",
        ),
    ] {
        let e = error(&post(p, "/v1/embeddings", &body), 400);
        assert_eq!(e["param"], param, "{body}: {e}");
        assert!(
            e["message"].as_str().unwrap().contains(needle),
            "{body}: {e}"
        );
    }
    let e = error(
        &post(
            p,
            "/v1/embeddings",
            &json!({ "input": "hello ".repeat(100) }),
        ),
        400,
    );
    assert_eq!(e["type"], "exceed_context_size_error");
    assert_eq!(e["n_ctx"], 64);
    let r = send("127.0.0.1", p, "GET", "/v1/embeddings", &[], "");
    assert_eq!(r.status, 405);
    let r = send("127.0.0.1", p, "POST", "/embedding", &[], "{not json");
    assert_eq!(r.status, 400);
}

#[test]
fn without_embedding_the_endpoints_answer_501() {
    let Some(srv) = start(&["--pooling", "mean"]) else {
        return;
    };
    for path in ["/v1/embeddings", "/embedding", "/embeddings"] {
        let e = error(&post(srv.port, path, &json!({ "input": "hi" })), 501);
        assert_eq!(e["type"], "not_supported_error", "{path}");
        assert!(
            e["message"].as_str().unwrap().contains("--embeddings"),
            "{e}"
        );
    }
}

/// Standard base64, decoded (the test's own reading of what the server wrote).
fn decode_base64(s: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => panic!("not base64: {c}"),
    };
    let mut out = Vec::new();
    for quad in s.as_bytes().chunks(4) {
        let n = quad.iter().filter(|&&c| c != b'=').count();
        let mut acc = 0u32;
        for (k, &c) in quad.iter().enumerate() {
            let v = if c == b'=' { 0 } else { value(c) };
            acc |= u32::from(v) << (18 - 6 * k);
        }
        out.extend(&acc.to_be_bytes()[1..n]);
    }
    out
}
