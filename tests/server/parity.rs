//! llama-server's answers where its test suite and README pin them down, each checked on
//! SmolLM2 against what llama-server (0c1e570) answers to the same request: how a chat prompt
//! ends (`add_generation_prompt`, `continue_final_message`, `--prefill-assistant`), the refusal
//! of malformed messages, lists of prompts on `/completion`, the generation rate over all but
//! the first token, `/slots` and `/v1/models`.

use super::start;
use crate::common::http::post;
use serde_json::{json, Value};

const SYSTEM: &str =
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n";

fn template(port: u16, body: Value) -> (u16, Value) {
    let r = post(port, "/apply-template", &body);
    (r.status, r.json())
}

fn hi_then(assistant: &str) -> Value {
    json!([{"role": "user", "content": "hi"}, {"role": "assistant", "content": assistant}])
}

#[test]
fn chat_prompts_end_as_llama_server_ends_them() {
    let Some(srv) = start(&["-np", "1"]) else {
        return;
    };
    let p = srv.port;
    let user = json!([{"role": "user", "content": "hi"}]);
    let (s, v) = template(p, json!({"messages": user}));
    assert_eq!(s, 200);
    assert_eq!(
        v["prompt"],
        format!("{SYSTEM}<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
    );
    let (_, v) = template(p, json!({"messages": user, "add_generation_prompt": false}));
    assert_eq!(
        v["prompt"],
        format!("{SYSTEM}<|im_start|>user\nhi<|im_end|>\n")
    );
    // A last assistant message is continued (--prefill-assistant is the default) ...
    let continued =
        format!("{SYSTEM}<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nHello the");
    let (_, v) = template(p, json!({"messages": hi_then("Hello the")}));
    assert_eq!(v["prompt"], continued);
    // ... and so it is when asked, with the generation prompt off.
    let (_, v) = template(
        p,
        json!({"messages": hi_then("Hello the"), "continue_final_message": true,
               "add_generation_prompt": false}),
    );
    assert_eq!(v["prompt"], continued);
    // The refusals, in llama-server's words.
    for (body, words) in [
        (
            json!({"messages": hi_then("Hello the"), "continue_final_message": true}),
            "Cannot set both add_generation_prompt and continue_final_message to true.",
        ),
        (
            json!({"messages": [{"role": "user", "content": "hi"},
                {"role": "assistant", "content": "A"}, {"role": "assistant", "content": "B"}]}),
            "Cannot have 2 or more assistant messages at the end of the list.",
        ),
        (
            json!({"messages": [{"role": "user"}]}),
            "All non-assistant messages must contain 'content'",
        ),
        (
            json!({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant"}]}),
            "Assistant message must contain either 'content' or 'tool_calls'!",
        ),
    ] {
        for path in ["/apply-template", "/v1/chat/completions"] {
            let r = post(p, path, &body);
            assert_eq!(r.status, 400, "{path} {body}");
            let e = &r.json()["error"];
            assert_eq!(e["type"], "invalid_request_error");
            assert!(e["message"].as_str().unwrap().contains(words), "{e}");
        }
    }
    // A null content is content (llama-server renders it empty).
    let (s, v) = template(p, json!({"messages": [{"role": "user", "content": null}]}));
    assert_eq!(s, 200);
    assert_eq!(
        v["prompt"],
        format!("{SYSTEM}<|im_start|>user\n<|im_end|>\n<|im_start|>assistant\n")
    );
    // A chat completion continues the message the same way: its prompt is the continued text.
    let r = post(
        p,
        "/v1/chat/completions",
        &json!({"messages": hi_then("Hello the"), "max_tokens": 1}),
    );
    let n = post(p, "/tokenize", &json!({"content": continued}));
    assert_eq!(
        r.json()["usage"]["prompt_tokens"],
        n.json()["tokens"].as_array().unwrap().len()
    );
}

#[test]
fn no_prefill_assistant_closes_the_last_assistant_turn() {
    let Some(srv) = start(&["-np", "1", "--no-prefill-assistant"]) else {
        return;
    };
    let (_, v) = template(srv.port, json!({"messages": hi_then("Hello")}));
    assert_eq!(
        v["prompt"],
        format!(
            "{SYSTEM}<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nHello<|im_end|>\n\
             <|im_start|>assistant\n"
        )
    );
}

fn tokens_of(port: u16, text: &str) -> Value {
    post(
        port,
        "/tokenize",
        &json!({"content": text, "add_special": true}),
    )
    .json()["tokens"]
        .clone()
}

#[test]
fn prompt_lists_give_one_result_each() {
    let Some(srv) = start(&["-np", "2", "--temp", "0", "-n", "6"]) else {
        return;
    };
    let p = srv.port;
    let text = "I believe the meaning of life is";
    let tokens = tokens_of(p, text);
    let complete = |prompt: Value| {
        let r = post(p, "/completion", &json!({"prompt": prompt}));
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        r.json()
    };
    // One prompt, as token ids: one result, whose `prompt` is the prompt's text.
    let one = complete(tokens.clone());
    assert!(one["content"].is_string());
    assert_eq!(one["prompt"], text);
    // Lists of prompts (token ids, text, an object with prompt_string): one result each, in
    // order, each with its index; the same prompt answers the same at temperature 0.
    for list in [
        json!([tokens, tokens]),
        json!([tokens, text]),
        json!([tokens, {"prompt_string": text}]),
    ] {
        let all = complete(list.clone());
        let all = all.as_array().unwrap_or_else(|| panic!("{list}: {all}"));
        assert_eq!(all.len(), 2);
        assert_eq!(all[0]["index"], 0);
        assert_eq!(all[1]["index"], 1);
        assert_eq!(all[0]["content"], one["content"], "{list}");
        assert_eq!(all[1]["content"], one["content"], "{list}");
    }
    // Token ids and text in one array are one prompt; a list of one prompt is one result.
    let n = tokens.as_array().unwrap().len();
    let mixed = complete(json!([1, 2, 3, text, 7, 8, text]));
    assert!(mixed["content"].is_string());
    assert_eq!(mixed["tokens_evaluated"], 3 + n + 2 + n);
    assert!(complete(json!([text]))["content"].is_string());
    // `response_fields` picks fields of the result, by paths.
    let r = post(
        p,
        "/completion",
        &json!({"prompt": text, "n_predict": 8,
                "response_fields": ["content", "generation_settings/n_predict", "prompt", "no/such"]}),
    );
    let v = r.json();
    assert_eq!(v.as_object().unwrap().len(), 3, "{v}");
    assert_eq!(
        v["generation_settings/n_predict"], 6,
        "-n 6 bounds the request"
    );
    assert_eq!(v["prompt"], text);
    assert!(v["content"].is_string());
    // Pictures without a projector are refused.
    let r = post(
        p,
        "/completion",
        &json!({"prompt": {"prompt_string": text, "multimodal_data": ["iVBORw0KGgo="]}}),
    );
    assert_eq!(r.status, 400);
    // Streamed, each result's events carry its index, and each ends.
    let r = post(
        p,
        "/completion",
        &json!({"prompt": [text, "Hello"], "stream": true}),
    );
    let evs = super::events(&r);
    for i in 0..2 {
        let mine: Vec<&Value> = evs.iter().filter(|e| e["index"] == i).collect();
        assert!(mine.len() >= 2, "{evs:?}");
        assert!(mine.last().unwrap()["stop"] == true);
        // As llama-server's partial results: the tokens and the counts so far.
        assert_eq!(mine[0]["tokens"].as_array().unwrap().len(), 1);
        assert_eq!(mine[0]["tokens_predicted"], 1);
        assert_eq!(mine[0]["id_slot"], -1);
    }
}

#[test]
fn generation_rates_leave_out_the_first_token() {
    let Some(srv) = start(&["-np", "1"]) else {
        return;
    };
    let p = srv.port;
    // A slot that served no request shows no settings.
    let fresh = super::get(p, "/slots").json();
    assert!(fresh[0].get("params").is_none(), "{fresh}");
    assert_eq!(fresh[0]["is_processing"], false);
    let run = |n: u32| {
        let body = json!({"prompt": "I believe", "n_predict": n, "ignore_eos": true});
        post(p, "/completion", &body).json()["timings"].clone()
    };
    let t = run(1);
    assert_eq!(t["predicted_n"], 1);
    assert_eq!(t["predicted_per_second"], 0.0);
    assert_eq!(t["predicted_per_token_ms"], 0.0);
    let t = run(16);
    assert_eq!(t["predicted_n"], 16);
    let ms = t["predicted_ms"].as_f64().unwrap();
    let rate = t["predicted_per_second"].as_f64().unwrap();
    assert!((rate - 1e3 / ms * 15.0).abs() < 1e-6, "{t}");
    assert!((t["predicted_per_token_ms"].as_f64().unwrap() - ms / 15.0).abs() < 1e-9);
    // The slot now shows its last request's settings; its budget does not outlive it.
    let s = &super::get(p, "/slots").json()[0];
    assert_eq!(s["params"]["n_predict"], 16);
    assert_eq!(s["next_token"][0]["n_remain"], -1);
    assert_eq!(s["next_token"][0]["n_decoded"], 0);
}

#[test]
fn models_are_listed_as_llama_server_lists_them() {
    let Some(srv) = start(&["-np", "2", "-c", "2048", "--alias", "a,b", "--tags", "x,y"]) else {
        return;
    };
    let p = srv.port;
    let v = super::get(p, "/v1/models").json();
    let m = &v["data"][0];
    assert_eq!(v["object"], "list");
    assert_eq!(m["id"], "a");
    assert_eq!(m["aliases"], json!(["a", "b"]));
    assert_eq!(m["tags"], json!(["x", "y"]));
    assert_eq!(m["object"], "model");
    assert_eq!(m["owned_by"], "llamacpp");
    // llama-server's numbers for SmolLM2-135M-Instruct.Q4_1.
    let meta = json!({"vocab_type": 2, "n_vocab": 49152, "n_ctx": 1024, "n_ctx_train": 8192,
        "n_embd": 576, "n_params": 134515008u64, "size": 96576768u64, "ftype": "Q4_1"});
    assert_eq!(m["meta"], meta);
    // The same model in Ollama's shape.
    assert_eq!(v["models"][0]["name"], "a");
    assert_eq!(v["models"][0]["capabilities"], json!(["completion"]));
    assert_eq!(super::get(p, "/models").json()["data"][0]["id"], "a");
    let props = super::get(p, "/props").json();
    assert_eq!(props["model_alias"], "a");
    assert_eq!(props["model_ftype"], "Q4_1");
    assert_eq!(props["endpoint_slots"], true);
    assert_eq!(props["endpoint_metrics"], false);
    let r = post(p, "/completion", &json!({"prompt": "hi", "n_predict": 1}));
    assert_eq!(r.json()["model"], "a");
}
