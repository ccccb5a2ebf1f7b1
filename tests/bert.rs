//! BERT encoders (`general.architecture = bert`): the WordPiece tokenizer, the encoder's
//! embeddings under mean, cls and no pooling, and a bge-reranker-style cross-encoder's scores,
//! checked on the synthetic models of `tools/synth-model.py` (`bert`, `bert-rerank`) against
//! llama-server's answers (`tests/data/server/bert.json`, made by `tools/make-bert-refs.py`
//! with `-fa off`: llama.cpp's flash attention rounds keys and values to f16, which moves the
//! vectors by about 4e-4; this engine's attention is f32). Then the refusals: a bert model
//! asked to generate text, to rank without a head, to go on a GPU, and a completion request.

mod common;

use common::http::{post, Reply};
use common::server::{start_with, Server};
use common::synth::synth_model;
use common::{assert_one_line_error, llamafile};
use serde_json::{json, Value};
use std::path::PathBuf;

/// Embeddings within this relative (Euclidean) distance of llama-server's: the synthetic
/// model's mean-pooled vectors differ by at most 9e-5, the cls ones by 2.5e-4 (f32 sums in
/// other orders, amplified where ggml's f16-table GELU or the f16 activations of an f16 matmul
/// round an input to the other side of an f16 step).
const EMBD_TOLERANCE: f64 = 3e-4;

/// Rerank scores (the head's raw output, about ±2) within this of llama-server's (measured:
/// at most 1.2e-3).
const SCORE_TOLERANCE: f64 = 5e-3;

fn reference() -> Value {
    let p = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/server/bert.json");
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn model(reference: &Value, i: usize) -> Option<PathBuf> {
    let m = &reference["models"][i];
    synth_model(
        m["family"].as_str().unwrap(),
        "f16",
        m["model_sha256"].as_str().unwrap(),
    )
}

fn ok(r: &Reply) -> Value {
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    r.json()
}

fn floats(v: &Value) -> Vec<f64> {
    v.as_array()
        .unwrap_or_else(|| panic!("not an array: {v}"))
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

fn assert_close(ours: &Value, theirs: &Value, what: &str) {
    let (a, b) = (floats(ours), floats(theirs));
    assert_eq!(a.len(), b.len(), "{what}: lengths");
    let d: f64 = a.iter().zip(&b).map(|(x, y)| (x - y).powi(2)).sum();
    let n: f64 = b.iter().map(|y| y * y).sum();
    let rel = (d / n).sqrt();
    assert!(rel < EMBD_TOLERANCE, "{what}: relative distance {rel}");
}

fn texts(r: &Value) -> Vec<&str> {
    r["texts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect()
}

fn serve(path: &std::path::Path, args: &[&str]) -> Server {
    let mut all = vec!["-c", "256", "-np", "1"];
    all.extend_from_slice(args);
    start_with(path, &all)
}

#[test]
fn tokens_and_mean_pooled_embeddings_match_llama_server() {
    let r = reference();
    let Some(path) = model(&r, 0) else { return };
    let m = &r["models"][0];
    let s = serve(&path, &["--embedding"]);
    let texts = texts(&r);
    for (t, want) in texts.iter().zip(m["tokens"].as_array().unwrap()) {
        let got = ok(&post(
            s.port,
            "/tokenize",
            &json!({"content": t, "add_special": true}),
        ));
        assert_eq!(&got["tokens"], want, "tokens of {t:?}");
    }
    let parsed = ok(&post(
        s.port,
        "/tokenize",
        &json!({"content": texts[3], "add_special": true, "parse_special": true}),
    ));
    assert_eq!(parsed["tokens"], m["tokens_parsed"]);

    let inputs: Vec<&str> = texts.into_iter().filter(|t| !t.trim().is_empty()).collect();
    let v1 = ok(&post(s.port, "/v1/embeddings", &json!({ "input": inputs })));
    let want = &m["v1"];
    assert_eq!(v1["usage"], want["usage"]);
    let (ours, theirs) = (
        v1["data"].as_array().unwrap(),
        want["data"].as_array().unwrap(),
    );
    assert_eq!(ours.len(), theirs.len());
    for (i, (a, b)) in ours.iter().zip(theirs).enumerate() {
        assert_eq!(a["index"], b["index"]);
        assert_close(&a["embedding"], &b["embedding"], &format!("input {i}"));
    }
    let native = ok(&post(s.port, "/embedding", &json!({"content": inputs[0]})));
    assert_close(
        &native[0]["embedding"][0],
        &m["native"][0]["embedding"][0],
        "/embedding",
    );

    // No text generation from an encoder: one clear 501.
    let c = post(s.port, "/completion", &json!({"prompt": "hello"}));
    assert_eq!(c.status, 501, "{}", String::from_utf8_lossy(&c.body));
    assert!(c.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("bert encoder"));
}

#[test]
fn cls_and_unpooled_embeddings_match_llama_server() {
    let r = reference();
    let Some(path) = model(&r, 0) else { return };
    let m = &r["models"][0];
    let texts = texts(&r);
    let inputs: Vec<&str> = texts
        .iter()
        .copied()
        .filter(|t| !t.trim().is_empty())
        .collect();
    {
        let s = serve(&path, &["--embedding", "--pooling", "cls"]);
        let v1 = ok(&post(s.port, "/v1/embeddings", &json!({ "input": inputs })));
        let want = m["cls"]["data"].as_array().unwrap();
        for (i, (a, b)) in v1["data"].as_array().unwrap().iter().zip(want).enumerate() {
            assert_close(&a["embedding"], &b["embedding"], &format!("cls input {i}"));
        }
    }
    let s = serve(&path, &["--embedding", "--pooling", "none"]);
    let got = ok(&post(s.port, "/embedding", &json!({"content": texts[1]})));
    let (ours, theirs) = (
        got[0]["embedding"].as_array().unwrap(),
        m["none"][0]["embedding"].as_array().unwrap(),
    );
    assert_eq!(ours.len(), theirs.len(), "one vector per token");
    for (i, (a, b)) in ours.iter().zip(theirs).enumerate() {
        assert_close(a, b, &format!("token {i}"));
    }
}

#[test]
fn rerank_scores_match_llama_server() {
    let r = reference();
    let Some(path) = model(&r, 1) else { return };
    let m = &r["models"][1];
    let s = serve(&path, &["--rerank"]);
    let reqs = m["requests"].as_array().unwrap();
    for (req, want) in reqs.iter().zip(m["answers"].as_array().unwrap()) {
        let got = ok(&post(s.port, req["path"].as_str().unwrap(), &req["body"]));
        assert_eq!(got["usage"], want["usage"], "{}", req["path"]);
        let (ours, theirs) = (
            got["results"].as_array().unwrap(),
            want["results"].as_array().unwrap(),
        );
        assert_eq!(ours.len(), theirs.len());
        for (a, b) in ours.iter().zip(theirs) {
            assert_eq!(a["index"], b["index"], "order: {ours:?} vs {theirs:?}");
            let d = (a["relevance_score"].as_f64().unwrap()
                - b["relevance_score"].as_f64().unwrap())
            .abs();
            assert!(d < SCORE_TOLERANCE, "document {}: {d}", b["index"]);
        }
    }
}

#[test]
fn uses_other_than_embeddings_are_refused_in_one_line() {
    let r = reference();
    let Some(embedder) = model(&r, 0) else { return };
    let Some(reranker) = model(&r, 1) else { return };
    let m = embedder.to_str().unwrap();
    assert_one_line_error(
        &llamafile(&["-m", m, "-p", "hello", "-n", "4"]),
        "bert encoder",
    );
    assert_one_line_error(&llamafile(&["-m", m, "--server"]), "--embedding");
    assert_one_line_error(
        &llamafile(&["-m", m, "--embedding", "--rerank", "--server"]),
        "no classification head",
    );
    assert_one_line_error(
        &llamafile(&["-m", m, "--embedding", "--server", "-ngl", "99"]),
        "-ngl 99",
    );
    let rr = reranker.to_str().unwrap();
    assert_one_line_error(&llamafile(&["-m", rr, "--chat"]), "bert encoder");
    // Tokenizing needs no generation.
    let out = llamafile(&["-m", m, "--tokenize", "-p", "Hello world"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "[101,162,163,102]"
    );
}
