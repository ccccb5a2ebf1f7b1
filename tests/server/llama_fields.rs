//! The fields a llama-server client reads, checked against what llama-server (0c1e570) answers on
//! SmolLM2 (`tests/data/server/shapes-smollm2.json`, made by `tools/make-server-shape-refs.py`):
//! every field of `/props`, of `/slots` and its `params`, of `/completion` and its
//! `generation_settings` is there; `tokens_cached` counts the tokens in the slot's cache; an
//! idle slot keeps its last task's id; `__verbose` (the native result) comes with `verbose: true`
//! or `--verbose`, where llama-server puts it; an empty `messages` list renders as llama-server
//! renders it.

use super::{events, get, start};
use crate::common::http::post;
use serde_json::{json, Value};
use std::collections::BTreeSet;

fn reference() -> Value {
    let p = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/server/shapes-smollm2.json"
    );
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

/// The keys llama-server's answer had that `ours` lacks (`what` names the object).
fn missing(what: &str, want: &Value, ours: &Value) -> Vec<String> {
    let ours: BTreeSet<&str> = ours
        .as_object()
        .unwrap_or_else(|| panic!("{what}: not an object: {ours}"))
        .keys()
        .map(String::as_str)
        .collect();
    want.as_array()
        .unwrap()
        .iter()
        .map(|k| k.as_str().unwrap())
        .filter(|k| !ours.contains(k))
        .map(|k| format!("{what}.{k}"))
        .collect()
}

#[test]
fn every_field_llama_server_answers_is_there() {
    let Some(srv) = start(&["-np", "1", "-c", "1024"]) else {
        return;
    };
    let refs = reference();
    let p = srv.port;
    let props = get(p, "/props").json();
    let done = post(
        p,
        "/completion",
        &json!({"prompt": "The capital of France is", "n_predict": 4, "temperature": 0,
                "ignore_eos": true}),
    )
    .json();
    let slot = get(p, "/slots").json()[0].clone();
    let mut gaps = missing("props", &refs["props"], &props);
    let params = &props["default_generation_settings"]["params"];
    gaps.extend(missing("props.params", &refs["props_params"], params));
    gaps.extend(missing("completion", &refs["completion"], &done));
    let settings = &done["generation_settings"];
    gaps.extend(missing(
        "generation_settings",
        &refs["generation_settings"],
        settings,
    ));
    gaps.extend(missing("slot", &refs["slot"], &slot));
    gaps.extend(missing(
        "slot.params",
        &refs["slot_params"],
        &slot["params"],
    ));
    assert!(gaps.is_empty(), "missing: {gaps:?}");
    assert_eq!(props["modalities"], refs["modalities"]);

    // The slot's cache: the prompt and every generated token but the last, as llama-server
    // counts it in `tokens_cached` and `/slots`' `n_prompt_tokens`.
    for k in ["tokens_cached", "tokens_evaluated", "tokens_predicted"] {
        assert_eq!(done[k], refs[k], "{k}");
    }
    assert_eq!(slot["n_prompt_tokens"], refs["slot_n_prompt_tokens"]);
    assert_eq!(slot["n_prompt_tokens_processed"], 0);
    // The same prompt again: all but its last token come from the cache.
    let again = post(
        p,
        "/completion",
        &json!({"prompt": "The capital of France is", "n_predict": 4, "temperature": 0,
                "ignore_eos": true}),
    )
    .json();
    assert_eq!(
        again["timings"]["cache_n"],
        refs["tokens_evaluated"].as_u64().unwrap() - 1
    );
    assert_eq!(again["tokens_cached"], refs["tokens_cached"]);

    // An idle slot shows its last task, as llama-server's does.
    let id = get(p, "/slots").json()[0]["id_task"].as_i64().unwrap();
    assert!(
        id > slot["id_task"].as_i64().unwrap(),
        "{id} after {}",
        slot["id_task"]
    );

    // The settings read as the request set them.
    assert_eq!(settings["max_tokens"], 4);
    assert_eq!(settings["chat_format"], "Content-only");
    assert_eq!(settings["grammar"], "");
    assert_eq!(settings["stream"], false);
    let g = post(
        p,
        "/completion",
        &json!({"prompt": "x", "n_predict": 1, "grammar": "root ::= \"a\"", "stream": false,
                "logit_bias": [[42, 1.5]]}),
    )
    .json();
    let s = &g["generation_settings"];
    assert_eq!(s["grammar"], "root ::= \"a\"");
    assert_eq!(s["logit_bias"], json!([{"bias": 1.5, "token": 42}]));
    assert_eq!(g["content"], "a");
}

#[test]
fn verbose_carries_the_native_result_where_llama_server_puts_it() {
    let Some(srv) = start(&["-np", "1"]) else {
        return;
    };
    let refs = reference();
    let p = srv.port;
    let hi = json!([{"role": "user", "content": "Hi"}]);
    let plain = post(
        p,
        "/v1/chat/completions",
        &json!({"messages": hi, "max_tokens": 3}),
    );
    assert!(plain.json().get("__verbose").is_none());

    let r = post(
        p,
        "/v1/chat/completions",
        &json!({"messages": hi, "max_tokens": 3, "verbose": true}),
    )
    .json();
    let v = &r["__verbose"];
    let gaps = missing("__verbose", &refs["chat_verbose"], v);
    assert!(gaps.is_empty(), "missing: {gaps:?}");
    assert_eq!(v["content"], r["choices"][0]["message"]["content"]);
    assert_eq!(v["tokens_predicted"], r["usage"]["completion_tokens"]);
    assert_eq!(v["tokens_evaluated"], r["usage"]["prompt_tokens"]);
    assert_eq!(v["stop"], true);
    let settings = &v["generation_settings"];
    assert_eq!(settings["chat_format"], "peg-native");
    assert_eq!(settings["generation_prompt"], "<|im_start|>assistant\n");
    assert_eq!(settings["max_tokens"], 3);
    assert!(v["prompt"]
        .as_str()
        .unwrap()
        .ends_with("<|im_start|>assistant\n"));

    // Streamed completions: every event carries the native event; chat: only the first
    // closing event, with the final result.
    let body = json!({"prompt": "Hi", "max_tokens": 2, "stream": true, "verbose": true});
    let evs = events(&post(p, "/v1/completions", &body));
    assert!(evs.iter().all(|e| e.get("__verbose").is_some()), "{evs:?}");
    let last = &evs.last().unwrap()["__verbose"];
    assert_eq!(
        (last["stop"].clone(), last["tokens_predicted"].clone()),
        (json!(true), json!(2))
    );
    let body = json!({"messages": hi, "max_tokens": 2, "stream": true, "verbose": true});
    let evs = events(&post(p, "/v1/chat/completions", &body));
    let with: Vec<usize> = (0..evs.len())
        .filter(|&i| evs[i].get("__verbose").is_some())
        .collect();
    assert_eq!(with.len(), 1, "{evs:?}");
    assert_eq!(evs[with[0]]["__verbose"]["stop"], true);
    drop(srv);

    // --verbose: on unless the request says otherwise.
    let Some(srv) = start(&["-np", "1", "--verbose"]) else {
        return;
    };
    let body = json!({"prompt": "Hi", "max_tokens": 1});
    assert_eq!(
        post(srv.port, "/v1/completions", &body).json()["__verbose"]["tokens_predicted"],
        1
    );
    let body = json!({"prompt": "Hi", "max_tokens": 1, "verbose": false});
    assert!(post(srv.port, "/v1/completions", &body)
        .json()
        .get("__verbose")
        .is_none());
}

#[test]
fn an_empty_conversation_renders_as_llama_server_renders_it() {
    let Some(srv) = start(&["-np", "1"]) else {
        return;
    };
    let refs = &reference()["empty_messages"];
    let p = srv.port;
    let r = post(p, "/apply-template", &json!({"messages": []}));
    assert_eq!(r.json()["prompt"], refs["prompt"]);
    let r = post(
        p,
        "/v1/chat/completions",
        &json!({"messages": [], "max_tokens": 1}),
    );
    assert_eq!(r.status, 200, "{}", r.json());
    assert_eq!(r.json()["object"], refs["object"]);
}

#[test]
fn stream_timings_and_response_fields_sit_where_llama_server_puts_them() {
    let Some(srv) = start(&["-np", "1"]) else {
        return;
    };
    let p = srv.port;
    let hi = json!([{"role": "user", "content": "Hi"}]);
    // Chat streams: `timings` on the last event, the usage one when asked for.
    for usage in [false, true] {
        let body = json!({"messages": hi, "max_tokens": 2, "stream": true,
                          "stream_options": {"include_usage": usage}});
        let evs = events(&post(p, "/v1/chat/completions", &body));
        let with: Vec<usize> = (0..evs.len())
            .filter(|&i| evs[i].get("timings").is_some())
            .collect();
        assert_eq!(with, [evs.len() - 1], "{evs:?}");
        assert_eq!(evs[with[0]].get("usage").is_some(), usage);
    }
    // Responses: `completed_at` and each text part's `logprobs`. Greedy, so the answer ends
    // (10 tokens) before the limit; sampled, it sometimes ran past 64 and was `incomplete`.
    let r = post(
        p,
        "/v1/responses",
        &json!({"input": "Hi", "max_output_tokens": 64, "temperature": 0}),
    )
    .json();
    assert_eq!(r["status"], "completed", "{r}");
    assert!(r["completed_at"].as_u64().unwrap() >= r["created_at"].as_u64().unwrap());
    assert_eq!(r["output"][0]["content"][0]["logprobs"], json!([]));
}
