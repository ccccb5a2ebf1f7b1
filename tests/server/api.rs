//! llama-server's API behaviours, each written from its README (llama.cpp 0c1e570) and checked
//! on SmolLM2: the error for a prompt longer than the context (streamed and not, on every
//! generation endpoint), the `/metrics` names, token counts in chat responses, `n_probs`,
//! prompts mixing token ids and text, `/props` (read, and written with `--props`) and
//! `/apply-template`.

use super::{events, get, start};
use crate::common::http::post;
use serde_json::{json, Value};

fn tokenize(port: u16, text: &str, add_special: bool) -> Vec<u64> {
    let r = post(
        port,
        "/tokenize",
        &json!({"content": text, "add_special": add_special}),
    );
    r.json()["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_u64().unwrap())
        .collect()
}

#[test]
fn a_prompt_longer_than_the_context_is_a_400_exceed_context_size_error() {
    let Some(srv) = start(&["-np", "1", "-c", "256"]) else {
        return;
    };
    let long = "hello ".repeat(300);
    let n_prompt = tokenize(srv.port, &long, true).len();
    for stream in [false, true] {
        for (path, body) in [
            ("/completion", json!({"prompt": long, "stream": stream})),
            ("/v1/completions", json!({"prompt": long, "stream": stream})),
            (
                "/v1/chat/completions",
                json!({"messages": [{"role": "user", "content": long}], "stream": stream}),
            ),
        ] {
            let r = post(srv.port, path, &body);
            // Refused before any event: a plain JSON error, streamed or not.
            assert_eq!(r.status, 400, "{path} stream={stream}");
            assert!(r
                .header("content-type")
                .unwrap()
                .starts_with("application/json"));
            let e = &r.json()["error"];
            assert_eq!(e["type"], "exceed_context_size_error", "{e}");
            assert_eq!(e["code"], 400);
            assert_eq!(e["n_ctx"], 256);
            assert!(e["n_prompt_tokens"].as_u64().unwrap() > 256, "{e}");
            assert!(e["message"].as_str().unwrap().contains("context size"));
        }
    }
    let e = &post(srv.port, "/completion", &json!({"prompt": long})).json()["error"];
    assert_eq!(e["n_prompt_tokens"].as_u64().unwrap() as usize, n_prompt);
}

#[test]
fn metrics_use_llama_server_names_and_count() {
    let Some(srv) = start(&["-np", "2", "--metrics"]) else {
        return;
    };
    let r = post(
        srv.port,
        "/completion",
        &json!({"prompt": "The capital of France is", "n_predict": 6, "temperature": 0, "ignore_eos": true}),
    );
    let c = r.json();
    let n_prompt = c["tokens_evaluated"].as_u64().unwrap();
    let text = String::from_utf8(get(srv.port, "/metrics").body).unwrap();
    let value = |name: &str| -> f64 {
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("llamacpp:{name} ")))
            .unwrap_or_else(|| panic!("no llamacpp:{name} in\n{text}"));
        assert!(text.contains(&format!("# TYPE llamacpp:{name} ")), "{name}");
        line.split(' ').nth(1).unwrap().parse().unwrap()
    };
    // The README's table, less the per-position draft counter (absent without speculation).
    for name in [
        "prompt_tokens_total",
        "prompt_seconds_total",
        "prompt_tokens_seconds",
        "tokens_predicted_total",
        "tokens_predicted_seconds_total",
        "predicted_tokens_seconds",
        "requests_processing",
        "requests_deferred",
        "n_tokens_max",
        "n_decode_total",
        "n_busy_slots_per_decode",
        "spec_decode_num_draft_tokens_total",
        "spec_decode_num_accepted_tokens_total",
        "spec_decode_num_drafts_total",
    ] {
        value(name);
    }
    assert_eq!(value("prompt_tokens_total") as u64, n_prompt);
    assert_eq!(value("tokens_predicted_total"), 6.0);
    assert!(value("n_tokens_max") as u64 >= n_prompt + 5);
    assert!(value("n_decode_total") >= 6.0);
    assert_eq!(value("n_busy_slots_per_decode"), 1.0);
    assert_eq!(value("spec_decode_num_drafts_total"), 0.0);
    // The gauge goes back to 0 once the scheduler has freed the slot.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let text = String::from_utf8(get(srv.port, "/metrics").body).unwrap();
        if text.contains("llamacpp:requests_processing 0\n") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{text}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn chat_responses_count_tokens_as_the_template_renders_them() {
    let Some(srv) = start(&[]) else {
        return;
    };
    let messages = json!([{"role": "user", "content": "Name a colour."}]);
    let prompt = post(srv.port, "/apply-template", &json!({"messages": messages})).json()["prompt"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        prompt.contains("Name a colour.") && prompt.ends_with("assistant\n"),
        "{prompt}"
    );
    let n_prompt = tokenize(srv.port, &prompt, true).len() as u64;
    let body = json!({"messages": messages, "max_tokens": 5, "temperature": 0, "ignore_eos": true});
    let r = post(srv.port, "/v1/chat/completions", &body).json();
    let u = &r["usage"];
    assert_eq!(u["prompt_tokens"], n_prompt);
    assert_eq!(u["completion_tokens"], 5);
    assert_eq!(u["total_tokens"], n_prompt + 5);
    assert_eq!(r["timings"]["predicted_n"], 5);
    // Streamed, with usage asked for: the same counts in the last chunk.
    let mut body = body;
    body["stream"] = json!(true);
    body["stream_options"] = json!({"include_usage": true});
    let ev = events(&post(srv.port, "/v1/chat/completions", &body));
    let last = ev.last().unwrap();
    assert_eq!(last["usage"]["prompt_tokens"], n_prompt);
    assert_eq!(last["usage"]["completion_tokens"], 5);
}

#[test]
fn n_probs_gives_the_top_tokens_of_each_generated_token() {
    let Some(srv) = start(&[]) else {
        return;
    };
    let body = json!({"prompt": "The capital of France is", "n_predict": 4, "n_probs": 3,
                      "temperature": 0, "ignore_eos": true});
    let r = post(srv.port, "/completion", &body).json();
    let probs = r["completion_probabilities"].as_array().unwrap();
    assert_eq!(probs.len(), 4);
    for p in probs {
        let top = p["top_logprobs"].as_array().unwrap();
        assert!(!top.is_empty() && top.len() <= 3, "{p}");
        // Greedy: the token taken is the most likely one.
        assert_eq!(p["id"], top[0]["id"]);
        let lp: Vec<f64> = top.iter().map(|t| t["logprob"].as_f64().unwrap()).collect();
        assert!(
            lp.windows(2).all(|w| w[0] >= w[1]) && lp[0] <= 0.0,
            "{lp:?}"
        );
        for t in top {
            assert!(t["token"].is_string() && t["bytes"].is_array(), "{t}");
        }
    }
    // Streamed: each token's probabilities come with it.
    let mut body = body;
    body["stream"] = json!(true);
    let ev = events(&post(srv.port, "/completion", &body));
    let streamed: Vec<&Value> = ev
        .iter()
        .filter_map(|e| e["completion_probabilities"].as_array())
        .flatten()
        .collect();
    assert_eq!(streamed.len(), 4);
    assert_eq!(streamed[0]["id"], probs[0]["id"]);
}

#[test]
fn prompts_mix_token_ids_and_text() {
    let Some(srv) = start(&[]) else {
        return;
    };
    let greedy = |prompt: Value| {
        let body = json!({"prompt": prompt, "n_predict": 6, "temperature": 0, "ignore_eos": true});
        let r = post(srv.port, "/completion", &body).json();
        (
            r["content"].as_str().unwrap().to_string(),
            r["tokens_evaluated"].clone(),
        )
    };
    let whole = greedy(json!("The capital of France is"));
    // Text first (a BOS is added, when the model wants one, as for a string), then ids.
    let rest = tokenize(srv.port, " France is", false);
    let mut mixed = vec![json!("The capital of")];
    mixed.extend(rest.iter().map(|&t| json!(t)));
    assert_eq!(greedy(Value::from(mixed)), whole);
    // Ids first: no BOS is added, so the ids carry it themselves.
    let head = tokenize(srv.port, "The capital of", true);
    let mut mixed: Vec<Value> = head.iter().map(|&t| json!(t)).collect();
    mixed.push(json!(" France is"));
    assert_eq!(greedy(Value::from(mixed)), whole);
}

#[test]
fn openai_completions_take_mixed_prompts_too() {
    let Some(srv) = start(&[]) else {
        return;
    };
    let greedy = |prompt: Value| {
        let body = json!({"prompt": prompt, "max_tokens": 6, "temperature": 0});
        let r = post(srv.port, "/v1/completions", &body);
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        let v = r.json();
        (
            v["choices"][0]["text"].clone(),
            v["usage"]["prompt_tokens"].clone(),
        )
    };
    let whole = greedy(json!("The capital of France is"));
    let head = tokenize(srv.port, "The capital of", true);
    let mut mixed: Vec<Value> = head.iter().map(|&t| json!(t)).collect();
    mixed.push(json!(" France is"));
    assert_eq!(greedy(Value::from(mixed)), whole);
    let all = tokenize(srv.port, "The capital of France is", true);
    assert_eq!(greedy(json!(all)), whole);
    // Several prompts in one request are not taken.
    let r = post(
        srv.port,
        "/v1/completions",
        &json!({"prompt": ["a", "b"], "max_tokens": 1}),
    );
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["param"], "prompt");
}

#[test]
fn props_read_and_write() {
    let Some(srv) = start(&["-np", "3", "--alias", "tiny"]) else {
        return;
    };
    let p = get(srv.port, "/props").json();
    assert_eq!(p["total_slots"], 3);
    assert_eq!(p["model_alias"], "tiny");
    assert!(p["model_path"].as_str().unwrap().ends_with(".gguf"));
    assert!(p["chat_template"].as_str().unwrap().contains("im_start"));
    assert!(p["chat_template_caps"].is_object());
    assert_eq!(p["modalities"]["vision"], false);
    assert_eq!(p["is_sleeping"], false);
    assert!(p["build_info"].is_string());
    assert!(p["default_generation_settings"]["params"]["temperature"].is_number());
    // Without --props, POST /props is not supported.
    let r = post(srv.port, "/props", &json!({}));
    assert_eq!(r.status, 501);
    assert_eq!(r.json()["error"]["type"], "not_supported_error");
    drop(srv);
    let srv = start(&["--props"]).unwrap();
    let r = post(srv.port, "/props", &json!({}));
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["success"], true);
    assert_eq!(post(srv.port, "/props", &json!([1])).status, 400);
}

#[test]
fn slots_show_params_and_next_token_and_fail_on_no_slot_answers_503_when_all_are_busy() {
    let Some(srv) = start(&["-np", "1", "-c", "2048"]) else {
        return;
    };
    let p = srv.port;
    let idle = get(p, "/slots").json();
    let s = &idle[0];
    assert_eq!(s["id"], 0);
    assert_eq!(s["n_ctx"], 2048);
    assert_eq!(s["is_processing"], false);
    assert_eq!(s["speculative"], false);
    // As llama-server: a slot that has served no request shows no settings.
    assert!(
        s.get("params").is_none() && s.get("next_token").is_none(),
        "{s}"
    );
    assert_eq!(get(p, "/slots?fail_on_no_slot=1").status, 200);

    let busy = std::thread::spawn(move || {
        post(
            p,
            "/completion",
            &json!({"prompt": "Once upon a time", "n_predict": 400, "ignore_eos": true,
                    "temperature": 0.5, "seed": 9}),
        )
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let seen = loop {
        let v = get(p, "/slots").json();
        if v[0]["next_token"][0]["n_decoded"].as_u64().unwrap_or(0) > 0 {
            break v;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the slot never got busy"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let s = &seen[0];
    assert_eq!(s["is_processing"], true);
    assert_eq!(s["params"]["n_predict"], 400);
    assert_eq!(s["params"]["seed"], 9);
    assert_eq!(s["next_token"][0]["has_next_token"], true);
    let n_decoded = s["next_token"][0]["n_decoded"].as_i64().unwrap();
    assert_eq!(
        s["next_token"][0]["n_remain"].as_i64().unwrap(),
        400 - n_decoded
    );
    let r = get(p, "/slots?fail_on_no_slot=1");
    assert_eq!(r.status, 503, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["error"]["type"], "unavailable_error");
    assert_eq!(busy.join().unwrap().status, 200);
    let after = get(p, "/slots").json();
    assert_eq!(after[0]["is_processing"], false);
    assert_eq!(
        after[0]["params"]["n_predict"], 400,
        "the last request's settings stay"
    );
    assert_eq!(get(p, "/slots?fail_on_no_slot=1").status, 200);
}
