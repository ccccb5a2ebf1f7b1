//! Sampling fields through the HTTP server on SmolLM2: grammars, JSON schemas and
//! `response_format`, log-probabilities (`logprobs`/`top_logprobs`, `n_probs`), penalties and
//! `logit_bias`, and 400s that name the bad field.

use crate::common::server::Server;

use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::TcpStream;

fn start() -> Option<Server> {
    super::start(&["--server", "-np", "2", "-c", "4096"])
}

/// POSTs `body` to `path`; returns the status and the JSON body.
fn post(s: &Server, path: &str, body: &Value) -> (u16, Value) {
    let mut c = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    let body = body.to_string();
    write!(
        c,
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut raw = Vec::new();
    c.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8(raw).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    let v = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"));
    (status, v)
}

fn chat(content: &str, extra: Value) -> Value {
    let mut v = json!({"messages": [{"role": "user", "content": content}], "max_tokens": 200, "temperature": 0});
    for (k, x) in extra.as_object().unwrap() {
        v[k] = x.clone();
    }
    v
}

#[test]
fn grammars_schemas_and_response_format() {
    let Some(s) = start() else { return };
    // llama.cpp's /completion with a GBNF grammar.
    let (st, v) = post(
        &s,
        "/completion",
        &json!({"prompt": "Pick a colour:", "n_predict": 10, "temperature": 0.7, "seed": 4, "grammar": "root ::= \"red\" | \"green\" | \"blue\""}),
    );
    assert_eq!(st, 200, "{v}");
    assert!(
        ["red", "green", "blue"].contains(&v["content"].as_str().unwrap()),
        "{v}"
    );
    assert_eq!(v["stop_type"], "eos");
    // json_schema on /completion.
    let schema = json!({"type": "object", "properties": {"n": {"type": "integer", "minimum": 1, "maximum": 9}}, "required": ["n"]});
    let (st, v) = post(
        &s,
        "/completion",
        &json!({"prompt": "A number in JSON:", "n_predict": 40, "json_schema": schema}),
    );
    assert_eq!(st, 200, "{v}");
    let doc: Value = serde_json::from_str(v["content"].as_str().unwrap()).unwrap();
    assert!((1..=9).contains(&doc["n"].as_i64().unwrap()), "{doc}");
    // OpenAI response_format, both kinds.
    let (st, v) = post(
        &s,
        "/v1/chat/completions",
        &chat(
            "Describe a dog.",
            json!({"response_format": {"type": "json_object"}}),
        ),
    );
    assert_eq!(st, 200, "{v}");
    let text = v["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(
        serde_json::from_str::<Value>(text).unwrap().is_object(),
        "{text}"
    );
    let rf = json!({"type": "json_schema", "json_schema": {"name": "pet", "schema": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12}, "legs": {"type": "integer", "minimum": 0, "maximum": 8}}, "required": ["name", "legs"]}}});
    let (st, v) = post(
        &s,
        "/v1/chat/completions",
        &chat("Describe a dog.", json!({"response_format": rf})),
    );
    assert_eq!(st, 200, "{v}");
    let doc: Value =
        serde_json::from_str(v["choices"][0]["message"]["content"].as_str().unwrap()).unwrap();
    assert!(
        doc["name"].is_string() && doc["legs"].as_i64().is_some_and(|l| (0..=8).contains(&l)),
        "{doc}"
    );
    // A grammar that cannot finish within the budget ends with "length".
    let (st, v) = post(
        &s,
        "/v1/completions",
        &json!({"prompt": "Hi", "max_tokens": 6, "grammar": "root ::= [a-z]{300}"}),
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["choices"][0]["finish_reason"], "length", "{v}");
}

#[test]
fn bad_grammars_and_fields_are_400s_naming_the_field() {
    let Some(s) = start() else { return };
    let cases = [
        (
            "/completion",
            json!({"prompt": "x", "grammar": "root ::= (\"a\""}),
            "grammar",
        ),
        (
            "/completion",
            json!({"prompt": "x", "json_schema": {"type": "string", "pattern": "a+"}}),
            "json_schema",
        ),
        (
            "/v1/chat/completions",
            chat(
                "x",
                json!({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}),
            ),
            "response_format.json_schema.schema",
        ),
        (
            "/v1/chat/completions",
            chat("x", json!({"response_format": {"type": "yaml"}})),
            "response_format.type",
        ),
        (
            "/v1/chat/completions",
            chat("x", json!({"top_logprobs": 3})),
            "top_logprobs",
        ),
        (
            "/v1/chat/completions",
            chat("x", json!({"presence_penalty": 3.0})),
            "presence_penalty",
        ),
        (
            "/v1/chat/completions",
            chat("x", json!({"logit_bias": {"99999999": 1}})),
            "logit_bias.99999999",
        ),
        (
            "/completion",
            json!({"prompt": "x", "samplers": ["top_k", "nope"]}),
            "samplers",
        ),
        (
            "/completion",
            json!({"prompt": "x", "mirostat": 3}),
            "mirostat",
        ),
    ];
    for (path, body, field) in cases {
        let (st, v) = post(&s, path, &body);
        assert_eq!(st, 400, "{body}: {v}");
        assert_eq!(v["error"]["param"], field, "{body}: {v}");
        assert!(
            v["error"]["message"].as_str().unwrap().starts_with(field),
            "{v}"
        );
    }
}

#[test]
fn logprobs_penalties_and_bias() {
    let Some(s) = start() else { return };
    // Chat logprobs: one entry per token, the chosen token among the top ones at temperature 0.
    let (st, v) = post(
        &s,
        "/v1/chat/completions",
        &chat(
            "Say hello.",
            json!({"max_tokens": 5, "logprobs": true, "top_logprobs": 3}),
        ),
    );
    assert_eq!(st, 200, "{v}");
    let content = v["choices"][0]["logprobs"]["content"].as_array().unwrap();
    assert_eq!(
        content.len() as u64,
        v["usage"]["completion_tokens"].as_u64().unwrap()
            - u64::from(v["choices"][0]["finish_reason"] == "stop")
    );
    for e in content {
        let top = e["top_logprobs"].as_array().unwrap();
        assert_eq!(top.len(), 3);
        assert_eq!(
            top[0]["token"], e["token"],
            "greedy picks the most likely: {e}"
        );
        assert!(e["logprob"].as_f64().unwrap() <= 0.0);
        assert!(top[0]["logprob"].as_f64() >= top[1]["logprob"].as_f64());
    }
    let text: String = content
        .iter()
        .map(|e| e["token"].as_str().unwrap())
        .collect();
    assert_eq!(
        text,
        v["choices"][0]["message"]["content"].as_str().unwrap()
    );
    // Legacy completions: parallel lists.
    let (st, v) = post(
        &s,
        "/v1/completions",
        &json!({"prompt": "The sky is", "max_tokens": 4, "temperature": 0, "logprobs": 2}),
    );
    assert_eq!(st, 200, "{v}");
    let lp = &v["choices"][0]["logprobs"];
    assert_eq!(lp["tokens"].as_array().unwrap().len(), 4, "{v}");
    assert_eq!(lp["token_logprobs"].as_array().unwrap().len(), 4);
    assert_eq!(lp["text_offset"][0], 0);
    // llama.cpp's n_probs.
    let (st, v) = post(
        &s,
        "/completion",
        &json!({"prompt": "The sky is", "n_predict": 3, "temperature": 0, "n_probs": 2}),
    );
    assert_eq!(st, 200, "{v}");
    let probs = v["completion_probabilities"].as_array().unwrap();
    assert_eq!(probs.len(), 3);
    assert_eq!(probs[0]["top_logprobs"].as_array().unwrap().len(), 2);
    // logit_bias -inf (false) bans the greedy choice: the answer changes.
    let first = probs[0]["id"].as_u64().unwrap();
    let (_, v2) = post(
        &s,
        "/completion",
        &json!({"prompt": "The sky is", "n_predict": 3, "temperature": 0, "n_probs": 1, "logit_bias": [[first, false]]}),
    );
    assert_ne!(
        v2["completion_probabilities"][0]["id"].as_u64().unwrap(),
        first,
        "{v2}"
    );
    // Penalties are accepted and change a repetitive greedy continuation.
    let body = |extra: Value| {
        let mut b =
            json!({"prompt": "one one one one one one one one", "n_predict": 12, "temperature": 0});
        for (k, x) in extra.as_object().unwrap() {
            b[k] = x.clone();
        }
        b
    };
    let (_, plain) = post(&s, "/completion", &body(json!({})));
    let (st, pen) = post(
        &s,
        "/v1/completions",
        &json!({"prompt": "one one one one one one one one", "max_tokens": 12, "temperature": 0, "frequency_penalty": 2.0, "presence_penalty": 2.0}),
    );
    assert_eq!(st, 200, "{pen}");
    assert_ne!(
        plain["content"], pen["choices"][0]["text"],
        "penalties should change the text"
    );
    let (st, dry) = post(
        &s,
        "/completion",
        &body(json!({"dry_multiplier": 2.0, "dry_allowed_length": 1, "samplers": "edkt"})),
    );
    assert_eq!(st, 200, "{dry}");
    assert_ne!(
        plain["content"], dry["content"],
        "DRY should change the text"
    );
    assert_eq!(
        dry["generation_settings"]["samplers"],
        json!(["penalties", "dry", "top_k", "temperature"]),
        "{dry}"
    );
    assert_eq!(dry["generation_settings"]["dry_multiplier"], 2.0);
}

/// llama-server's lazy grammar (`grammar_lazy` with word `grammar_triggers`): the text is free
/// until a trigger appears, then held to the grammar from the trigger on; a grammar the
/// triggered text does not fit is dropped. Pattern triggers are refused by name.
#[test]
fn a_lazy_grammar_holds_from_its_trigger() {
    let Some(s) = start() else { return };
    let ask = |extra: Value| {
        let mut body = json!({"prompt": "Paris is a city in", "n_predict": 24, "temperature": 0});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        post(&s, "/completion", &body)
    };
    let (_, free) = ask(json!({}));
    let free = free["content"].as_str().unwrap().to_string();
    let word = " Mediterranean";
    let Some(at) = free.find(word) else {
        panic!("SmolLM2's greedy text changed: {free:?}")
    };
    let grammar = format!("root ::= \"{word}\" \"!!\"");
    let lazy = json!({"grammar": grammar, "grammar_lazy": true, "grammar_triggers": [{"type": 1, "value": word}]});
    let (status, v) = ask(lazy);
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        v["content"],
        format!("{}!!", &free[..at + word.len()]),
        "{v}"
    );
    // The same grammar, not lazy, holds from the first token.
    let (_, eager) = ask(json!({ "grammar": grammar }));
    assert_eq!(eager["content"], format!("{word}!!"), "{eager}");
    let (status, e) = ask(
        json!({"grammar": grammar, "grammar_lazy": true, "grammar_triggers": [{"type": 2, "value": "x"}]}),
    );
    assert_eq!(status, 400, "{e}");
    assert_eq!(e["error"]["param"], "grammar_triggers[0].type", "{e}");
}
