//! Request fields that add to a generation's events, written from llama-server's README
//! (llama.cpp 0c1e570) and checked on SmolLM2: `timings_per_token` (every streamed event
//! carries `timings`), `return_progress` (streams carry `prompt_progress` with `total`,
//! `cache`, `processed`, `time_ms` while the prompt is read), `n_probs` with
//! `post_sampling_probs` (`prob` and `top_probs` after the sampler chain), on `/completion` and
//! the OpenAI endpoints; and two smaller behaviours: `/props` shows seed 4294967295 under
//! `-s -1`, and `GET /PREFIX` sends the browser to `PREFIX/` under `--api-prefix`.

use super::start;
use crate::common::http::{post, send, Reply};
use serde_json::{json, Value};

/// The `data:` payloads of a 200 event stream, parsed.
fn events(r: &Reply) -> Vec<Value> {
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    super::events(r)
}

fn error_param(r: &Reply) -> String {
    assert_eq!(r.status, 400, "{}", String::from_utf8_lossy(&r.body));
    r.json()["error"]["param"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn timings_per_token_puts_timings_on_every_streamed_event() {
    let Some(srv) = start(&["-np", "1"]) else {
        return;
    };
    let body = json!({"prompt": "Once upon a time", "n_predict": 6, "temperature": 0,
                      "ignore_eos": true, "stream": true, "timings_per_token": true});
    let ev = events(&post(srv.port, "/completion", &body));
    let texts: Vec<&Value> = ev.iter().filter(|e| e["stop"] == false).collect();
    assert!(!texts.is_empty());
    let mut last_n = 0;
    for e in &texts {
        let t = &e["timings"];
        let n = t["predicted_n"].as_u64().unwrap_or_else(|| panic!("{e}"));
        assert!(n > last_n, "predicted_n grows: {e}");
        last_n = n;
        for k in [
            "prompt_n",
            "prompt_ms",
            "predicted_ms",
            "predicted_per_second",
            "cache_n",
        ] {
            assert!(t[k].is_number(), "{k} in {t}");
        }
        assert!(t["prompt_n"].as_u64().unwrap() > 0);
    }
    let last = ev.last().unwrap();
    assert_eq!(last["stop"], true);
    assert_eq!(last["timings"]["predicted_n"], 6);
    // The request's settings say so.
    assert_eq!(last["generation_settings"]["timings_per_token"], true);

    // Without it, only the last event has timings.
    let mut plain = body.clone();
    plain["timings_per_token"] = json!(false);
    let ev = events(&post(srv.port, "/completion", &plain));
    assert!(ev
        .iter()
        .filter(|e| e["stop"] == false)
        .all(|e| e.get("timings").is_none()));
    assert!(ev.last().unwrap()["timings"].is_object());

    // The OpenAI endpoints carry it on each chunk too.
    let chat = json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4,
                      "temperature": 0, "stream": true, "timings_per_token": true});
    let ev = events(&post(srv.port, "/v1/chat/completions", &chat));
    let content: Vec<&Value> = ev
        .iter()
        .filter(|e| {
            e["choices"][0]["delta"]["content"]
                .as_str()
                .is_some_and(|c| !c.is_empty())
        })
        .collect();
    assert!(!content.is_empty());
    assert!(content
        .iter()
        .all(|e| e["timings"]["predicted_n"].as_u64().unwrap() >= 1));
    let cmpl = json!({"prompt": "Hello", "max_tokens": 3, "temperature": 0, "stream": true,
                      "timings_per_token": true, "ignore_eos": true});
    let ev = events(&post(srv.port, "/v1/completions", &cmpl));
    assert!(ev.iter().all(|e| e["timings"].is_object()), "{ev:?}");

    assert_eq!(
        error_param(&post(
            srv.port,
            "/completion",
            &json!({"prompt": "x", "n_predict": 1, "timings_per_token": "yes"})
        )),
        "timings_per_token"
    );
}

#[test]
fn return_progress_reports_prompt_processing_in_streams() {
    // A small batch, so the prompt takes several passes.
    let Some(srv) = start(&["-np", "1", "-ub", "8", "-b", "8"]) else {
        return;
    };
    let prompt = "The quick brown fox jumps over the lazy dog. ".repeat(4);
    let body = json!({"prompt": prompt, "n_predict": 2, "temperature": 0, "stream": true,
                      "return_progress": true, "cache_prompt": false});
    let ev = events(&post(srv.port, "/completion", &body));
    let progress: Vec<&Value> = ev
        .iter()
        .map(|e| &e["prompt_progress"])
        .filter(|p| p.is_object())
        .collect();
    let last = ev.last().unwrap();
    let total = last["tokens_evaluated"].as_u64().unwrap();
    assert!(total > 16, "a prompt of several batches: {total}");
    assert!(
        progress.len() >= 3,
        "a 0% event and one per pass: {progress:?}"
    );
    let processed: Vec<u64> = progress
        .iter()
        .map(|p| p["processed"].as_u64().unwrap())
        .collect();
    assert_eq!(processed[0], 0, "the first event is at 0%");
    assert_eq!(*processed.last().unwrap(), total, "the last is at 100%");
    assert!(processed.windows(2).all(|w| w[0] < w[1]), "{processed:?}");
    for p in &progress {
        assert_eq!(p["total"], total);
        assert_eq!(p["cache"], 0);
        assert!(p["time_ms"].is_u64());
    }
    // Progress events come before the text and carry none.
    let first_text = ev
        .iter()
        .position(|e| e["content"].as_str().is_some_and(|c| !c.is_empty()));
    let last_progress = ev
        .iter()
        .rposition(|e| e["prompt_progress"].is_object())
        .unwrap();
    assert!(first_text.is_none_or(|t| t > last_progress));
    assert!(ev
        .iter()
        .filter(|e| e["prompt_progress"].is_object())
        .all(|e| e["content"] == ""));

    // The same prompt again: the cached part is reported as `cache`, and counted processed.
    let mut again = body.clone();
    again["cache_prompt"] = json!(true);
    events(&post(srv.port, "/completion", &again));
    let ev = events(&post(srv.port, "/completion", &again));
    let first = ev
        .iter()
        .find(|e| e["prompt_progress"].is_object())
        .unwrap();
    let cache = first["prompt_progress"]["cache"].as_u64().unwrap();
    assert_eq!(cache, total - 1, "all but the last prompt token cached");
    assert_eq!(first["prompt_progress"]["processed"], cache);

    // Not streamed: no progress.
    let mut whole = body.clone();
    whole["stream"] = json!(false);
    let r = post(srv.port, "/completion", &whole).json();
    assert!(r.get("prompt_progress").is_none());

    // Chat streams carry it on an assistant-role chunk.
    let chat = json!({"messages": [{"role": "user", "content": prompt}], "max_tokens": 2,
                      "stream": true, "return_progress": true, "timings_per_token": true});
    let ev = events(&post(srv.port, "/v1/chat/completions", &chat));
    let p: Vec<&Value> = ev
        .iter()
        .filter(|e| e["prompt_progress"].is_object())
        .collect();
    assert!(p.len() >= 2);
    // With timings_per_token, each progress event's timings count the prompt read so far.
    for e in &p {
        let pp = &e["prompt_progress"];
        let read = pp["processed"].as_u64().unwrap() - pp["cache"].as_u64().unwrap();
        assert_eq!(e["timings"]["prompt_n"], read, "{e}");
        assert_eq!(e["timings"]["predicted_n"], 0);
    }
    assert_eq!(p[0]["object"], "chat.completion.chunk");
    assert_eq!(p[0]["choices"][0]["delta"]["role"], "assistant");
    assert_eq!(p[0]["choices"][0]["finish_reason"], Value::Null);
    let cmpl = json!({"prompt": prompt, "max_tokens": 2, "stream": true, "return_progress": true});
    let ev = events(&post(srv.port, "/v1/completions", &cmpl));
    let p = ev
        .iter()
        .find(|e| e["prompt_progress"].is_object())
        .unwrap();
    assert_eq!(p["object"], "text_completion");
    assert_eq!(p["choices"][0]["text"], "");

    assert_eq!(
        error_param(&post(
            srv.port,
            "/completion",
            &json!({"prompt": "x", "n_predict": 1, "return_progress": 1})
        )),
        "return_progress"
    );
}

#[test]
fn post_sampling_probs_are_probabilities_after_the_sampler_chain() {
    let Some(srv) = start(&["-np", "1"]) else {
        return;
    };
    // Greedy: the chain leaves one token, with probability 1.
    let body = json!({"prompt": "The capital of France is", "n_predict": 4, "n_probs": 5,
                      "temperature": 0, "ignore_eos": true, "post_sampling_probs": true});
    let r = post(srv.port, "/completion", &body).json();
    let probs = r["completion_probabilities"].as_array().unwrap();
    assert_eq!(probs.len(), 4);
    for p in probs {
        assert!(
            p.get("logprob").is_none() && p.get("top_logprobs").is_none(),
            "{p}"
        );
        assert_eq!(p["prob"], 1.0, "{p}");
        let top = p["top_probs"].as_array().unwrap();
        assert_eq!(
            top.len(),
            1,
            "fewer than n_probs: only tokens left by the chain"
        );
        assert_eq!(top[0]["id"], p["id"]);
        assert_eq!(top[0]["prob"], 1.0);
        assert!(top[0]["token"].is_string() && top[0]["bytes"].is_array());
    }
    assert_eq!(r["generation_settings"]["post_sampling_probs"], true);

    // Sampling from the top 3: at most 3 alternatives, a distribution over them, and the
    // chosen token's probability is its entry's.
    let body = json!({"prompt": "The capital of France is", "n_predict": 6, "n_probs": 10,
                      "temperature": 1.0, "top_k": 3, "top_p": 1.0, "min_p": 0.0, "seed": 7,
                      "ignore_eos": true, "post_sampling_probs": true});
    let r = post(srv.port, "/completion", &body).json();
    for p in r["completion_probabilities"].as_array().unwrap() {
        let top = p["top_probs"].as_array().unwrap();
        assert!(!top.is_empty() && top.len() <= 3, "{p}");
        let ps: Vec<f64> = top.iter().map(|t| t["prob"].as_f64().unwrap()).collect();
        assert!(ps.windows(2).all(|w| w[0] >= w[1]), "{ps:?}");
        let sum: f64 = ps.iter().sum();
        assert!(
            (sum - 1.0).abs() < 1e-4,
            "the chain's distribution sums to 1: {ps:?}"
        );
        let chosen = top
            .iter()
            .find(|t| t["id"] == p["id"])
            .expect("the chosen token is listed");
        assert!((chosen["prob"].as_f64().unwrap() - p["prob"].as_f64().unwrap()).abs() < 1e-6);
    }
    // Streamed: each token's entry comes with it, in the same shape.
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let ev = events(&post(srv.port, "/completion", &streamed));
    let entries: Vec<&Value> = ev
        .iter()
        .filter_map(|e| e["completion_probabilities"].as_array())
        .flatten()
        .collect();
    assert_eq!(entries.len(), 6);
    assert!(entries
        .iter()
        .all(|e| e["top_probs"].is_array() && e["prob"].is_number()));

    // Chat: logprobs.content entries in the same shape; n_probs is read there too.
    let chat = json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3,
                      "temperature": 0, "logprobs": true, "top_logprobs": 2,
                      "post_sampling_probs": true});
    let r = post(srv.port, "/v1/chat/completions", &chat).json();
    let content = r["choices"][0]["logprobs"]["content"].as_array().unwrap();
    assert!(!content.is_empty());
    assert!(content
        .iter()
        .all(|c| c["prob"] == 1.0 && c["top_probs"].as_array().unwrap().len() == 1));
    let chat = json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2,
                      "temperature": 0, "n_probs": 2});
    let r = post(srv.port, "/v1/chat/completions", &chat).json();
    let content = r["choices"][0]["logprobs"]["content"].as_array().unwrap();
    assert_eq!(content[0]["top_logprobs"].as_array().unwrap().len(), 2);
    // Legacy completions: the probabilities come as llama-server writes them.
    let cmpl = json!({"prompt": "Hello", "max_tokens": 2, "temperature": 0, "logprobs": 3,
                      "post_sampling_probs": true, "ignore_eos": true});
    let r = post(srv.port, "/v1/completions", &cmpl).json();
    let content = r["choices"][0]["logprobs"]["content"].as_array().unwrap();
    assert_eq!(content.len(), 2);
    assert_eq!(content[0]["prob"], 1.0);

    for (body, param) in [
        (
            json!({"prompt": "x", "n_probs": 2, "post_sampling_probs": "yes"}),
            "post_sampling_probs",
        ),
        (json!({"prompt": "x", "n_probs": -1}), "n_probs"),
        (json!({"prompt": "x", "n_probs": 1000}), "n_probs"),
    ] {
        assert_eq!(error_param(&post(srv.port, "/completion", &body)), param);
    }
}

#[test]
fn props_show_llama_servers_random_seed_and_a_bare_prefix_redirects() {
    let Some(srv) = start(&["-s", "-1", "--api-prefix", "/llama"]) else {
        return;
    };
    let get = |path: &str| send("127.0.0.1", srv.port, "GET", path, &[], "");
    let p = get("/llama/props").json();
    assert_eq!(
        p["default_generation_settings"]["params"]["seed"],
        4294967295u64
    );
    let r = get("/llama");
    assert_eq!(r.status, 302);
    assert_eq!(r.header("location"), Some("/llama/"));
    let r = get("/llama?x=1");
    assert_eq!(r.header("location"), Some("/llama/?x=1"));
    let page = get("/llama/");
    assert_eq!(page.status, 200);
    assert!(String::from_utf8_lossy(&page.body).contains("<html"));
    // Other methods on the bare prefix are not redirected.
    let r = send("127.0.0.1", srv.port, "POST", "/llama", &[], "{}");
    assert_eq!(r.status, 405);
    drop(srv);
    let srv = start(&["-s", "42"]).unwrap();
    let p = send("127.0.0.1", srv.port, "GET", "/props", &[], "").json();
    assert_eq!(p["default_generation_settings"]["params"]["seed"], 42);
}
