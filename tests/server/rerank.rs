//! Reranking (`--rerank`, `--embedding --pooling rank`), written from llama-server's README and
//! its `/rerank` handler (llama.cpp's tools/server), and checked on the synthetic Qwen3
//! rerankers of `tools/synth-model.py` against llama-server's own answers
//! (`tests/data/server/rerank-qwen3.json`, made by `tools/make-rerank-refs.py`): the scores of
//! the rank-pooled classification head with and without the model's rerank prompt template,
//! the order and `top_n` cut, usage, Jina's and TEI's shapes, the four paths, and the errors.

use super::SMOLLM2;
use crate::common::http::{post, send, Reply};
use crate::common::server::{start_with, Server};
use crate::common::synth::synth_model;
use serde_json::{json, Value};
use std::path::PathBuf;

/// Scores within this of llama-server's, compared as logits `ln(p / (1 - p))` (the yes-no
/// margin the head computes): the synthetic Qwen3's logits differ from llama.cpp's by about
/// 0.01 on average (tests/data/families, f16), and a score near 0.5 moves a quarter as much.
const TOLERANCE: f64 = 0.03;

fn logit(p: f64) -> f64 {
    (p / (1.0 - p)).ln()
}

fn reference() -> Value {
    let p = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/server/rerank-qwen3.json"
    );
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

/// The synthetic reranker `family` the references were made from.
fn model(reference: &Value, family: &str) -> Option<PathBuf> {
    let m = reference["models"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["family"] == family)
        .unwrap();
    synth_model(family, "f16", m["model_sha256"].as_str().unwrap())
}

fn ok(r: &Reply) -> Value {
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    r.json()
}

/// A 400 naming `param`.
fn bad(r: &Reply, param: &str) {
    assert_eq!(r.status, 400, "{}", String::from_utf8_lossy(&r.body));
    let e = &r.json()["error"];
    assert_eq!(e["type"], "invalid_request_error", "{e}");
    assert_eq!(e["param"], param, "{e}");
    assert!(e["message"].as_str().unwrap().contains(param), "{e}");
}

/// `(index, score)` of each result, in the answer's order.
fn ranked(results: &Value, score_key: &str) -> Vec<(u64, f64)> {
    results
        .as_array()
        .unwrap_or_else(|| panic!("not an array: {results}"))
        .iter()
        .map(|r| (r["index"].as_u64().unwrap(), r[score_key].as_f64().unwrap()))
        .collect()
}

/// Same documents, scores within [`TOLERANCE`], and the same order wherever llama-server's
/// scores are further apart than the tolerance.
fn assert_same_ranking(ours: &[(u64, f64)], theirs: &[(u64, f64)], what: &str) {
    assert_eq!(ours.len(), theirs.len(), "{what}: {ours:?} vs {theirs:?}");
    for &(i, s) in theirs {
        let mine = ours.iter().find(|r| r.0 == i);
        let (_, m) = mine.unwrap_or_else(|| panic!("{what}: no document {i} in {ours:?}"));
        let d = (logit(*m) - logit(s)).abs();
        assert!(
            d < TOLERANCE,
            "{what}: document {i}: {m} vs {s} (logits {d} apart)"
        );
    }
    for (k, (o, t)) in ours.iter().zip(theirs).enumerate() {
        if o.0 != t.0 {
            let near = theirs
                .iter()
                .find(|r| r.0 == o.0)
                .is_some_and(|r| (logit(r.1) - logit(t.1)).abs() < TOLERANCE);
            assert!(near, "{what}: place {k}: {ours:?} vs {theirs:?}");
        }
    }
    let sorted = ours.windows(2).all(|w| w[0].1 >= w[1].1);
    assert!(sorted, "{what}: not sorted: {ours:?}");
}

fn serve(path: &std::path::Path, args: &[&str]) -> Server {
    start_with(path, &[&["-c", "1024", "-np", "1"], args].concat())
}

#[test]
fn scores_and_answers_match_llama_server() {
    let reference = reference();
    for (k, m) in reference["models"].as_array().unwrap().iter().enumerate() {
        let family = m["family"].as_str().unwrap();
        let Some(path) = model(&reference, family) else {
            return;
        };
        // Both ways of asking: --rerank, and --embedding --pooling rank.
        let flags: &[&str] = match k {
            0 => &["--rerank"],
            _ => &["--embedding", "--pooling", "rank"],
        };
        let server = serve(&path, flags);
        let requests = reference["requests"].as_array().unwrap();
        for (req, theirs) in requests.iter().zip(m["answers"].as_array().unwrap()) {
            let what = format!("{family} {}", req["body"]);
            let ours = ok(&post(
                server.port,
                req["path"].as_str().unwrap(),
                &req["body"],
            ));
            if req["body"].get("texts").is_some() {
                // TEI's shape: the bare array, with the texts asked for.
                assert_same_ranking(&ranked(&ours, "score"), &ranked(theirs, "score"), &what);
                for r in ours.as_array().unwrap() {
                    let i = r["index"].as_u64().unwrap() as usize;
                    assert_eq!(r["text"], req["body"]["texts"][i], "{what}");
                    assert_eq!(r.as_object().unwrap().len(), 3, "{what}: {r}");
                }
                continue;
            }
            assert_eq!(ours["object"], "list", "{what}");
            assert_eq!(ours["usage"], theirs["usage"], "{what}");
            let name = ours["model"].as_str().unwrap();
            assert!(
                name.ends_with(&format!("{family}-f16.gguf")),
                "{what}: {name}"
            );
            assert_same_ranking(
                &ranked(&ours["results"], "relevance_score"),
                &ranked(&theirs["results"], "relevance_score"),
                &what,
            );
            for r in ours["results"].as_array().unwrap() {
                assert_eq!(r.as_object().unwrap().len(), 2, "{what}: {r}");
            }
        }
    }
}

#[test]
fn paths_top_n_and_errors() {
    let reference = reference();
    let Some(path) = model(&reference, "qwen3-rerank") else {
        return;
    };
    let server = serve(&path, &["--rerank"]);
    let port = server.port;
    let docs = json!(["hi", "it is a bear", "The giant panda is a bear species."]);
    let body = json!({"query": "What is a panda?", "documents": docs, "model": "mine"});
    let first = ok(&post(port, "/v1/rerank", &body));
    assert_eq!(first["model"], "mine");
    for p in ["/rerank", "/reranking", "/v1/reranking"] {
        let v = ok(&post(port, p, &body));
        assert_eq!(v["results"], first["results"], "{p}");
    }
    let r = send("127.0.0.1", port, "GET", "/rerank", &[], "");
    assert_eq!(r.status, 405);
    for (top_n, n) in [(0, 0), (2, 2), (3, 3), (99, 3)] {
        let v = ok(&post(
            port,
            "/rerank",
            &json!({"query": "q", "documents": docs, "top_n": top_n}),
        ));
        assert_eq!(v["results"].as_array().unwrap().len(), n, "top_n {top_n}");
    }
    // TEI's shape gives the text only when asked.
    let v = ok(&post(
        port,
        "/rerank",
        &json!({"query": "q", "texts": docs}),
    ));
    assert!(
        v.as_array()
            .unwrap()
            .iter()
            .all(|r| r.get("text").is_none()),
        "{v}"
    );

    bad(&post(port, "/rerank", &json!({"documents": docs})), "query");
    bad(
        &post(port, "/rerank", &json!({"query": 5, "documents": docs})),
        "query",
    );
    bad(&post(port, "/rerank", &json!({"query": "q"})), "documents");
    for documents in [json!([]), json!(null), json!(123), json!("hi")] {
        bad(
            &post(
                port,
                "/rerank",
                &json!({"query": "q", "documents": documents}),
            ),
            "documents",
        );
    }
    bad(
        &post(
            port,
            "/rerank",
            &json!({"query": "q", "documents": [1, 2, 3]}),
        ),
        "documents[0]",
    );
    bad(
        &post(
            port,
            "/rerank",
            &json!({"query": "q", "documents": docs, "top_n": -1}),
        ),
        "top_n",
    );
    let long = "bear ".repeat(1500);
    let r = post(
        port,
        "/rerank",
        &json!({"query": "q", "documents": ["hi", long]}),
    );
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["type"], "exceed_context_size_error");
    assert_eq!(r.json()["error"]["param"], "documents[1]");
    let r = send("127.0.0.1", port, "POST", "/rerank", &[], "{");
    assert_eq!(r.status, 400);

    // Embeddings of a rank-pooling model are the classification head's outputs (llama-server
    // reads n_embd floats from its n_cls_out here, past the end): the scores, normalised.
    let v = ok(&post(port, "/v1/embeddings", &json!({"input": "hello"})));
    let e: Vec<f64> = v["data"][0]["embedding"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    assert_eq!(e.len(), 2, "{v}");
    assert!((e[0] * e[0] + e[1] * e[1] - 1.0).abs() < 1e-5, "{e:?}");
}

#[test]
fn reranking_needs_the_flag_and_a_head() {
    let reference = reference();
    let Some(path) = model(&reference, "qwen3-rerank") else {
        return;
    };
    // The GGUF's rank pooling serves embeddings, but only --rerank (or --pooling rank) ranks,
    // as in llama-server.
    let server = serve(&path, &["--embedding"]);
    let r = post(
        server.port,
        "/v1/rerank",
        &json!({"query": "q", "documents": ["a"]}),
    );
    assert_eq!(r.status, 501, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["error"]["type"], "not_supported_error");
    assert!(r.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("--reranking"));
    drop(server);

    // A model without a classification head is refused at start, in one line.
    let Some(smollm2) = crate::common::model_path(SMOLLM2) else {
        return;
    };
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_llamafile"))
        .arg("-m")
        .arg(&smollm2)
        .args(["--server", "--rerank", "--port", "0", "--nobrowser"])
        .output()
        .unwrap();
    assert!(!out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("classification head"), "{err}");
}
