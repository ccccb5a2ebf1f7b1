//! Anthropic's Messages API on SmolLM2: a reply as content blocks with Anthropic's stop reasons
//! and usage, the stream as named events with block indices (`message_start`,
//! `content_block_start/delta/stop`, `message_delta`, `message_stop`), stop sequences, a forced
//! `tool_use` (`tool_choice: any`) read back as a block with its input, token counting, and
//! bad blocks refused naming their path.

use crate::common::http::{post, Reply};
use crate::start;
use serde_json::{json, Value};

fn ask(extra: Value) -> Value {
    let mut body = json!({
        "model": "claude-test",
        "max_tokens": 16,
        "temperature": 0,
        "system": "You are a helpful assistant.",
        "messages": [{"role": "user", "content": "Say hello."}],
    });
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    body
}

/// The (name, data) pairs of a stream whose events are named.
fn named_events(r: &Reply) -> Vec<(String, Value)> {
    String::from_utf8_lossy(&r.body)
        .split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| {
            let name = e
                .lines()
                .find_map(|l| l.strip_prefix("event: "))
                .unwrap_or_else(|| panic!("an unnamed event: {e:?}"));
            let data = e.lines().find_map(|l| l.strip_prefix("data: ")).unwrap();
            (name.to_string(), serde_json::from_str(data).unwrap())
        })
        .collect()
}

#[test]
fn a_message_streamed_and_not() {
    let Some(s) = start(&[]) else { return };
    let r = post(s.port, "/v1/messages", &ask(json!({})));
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let v = r.json();
    assert_eq!(v["type"], "message");
    assert_eq!(v["role"], "assistant");
    assert!(v["id"].as_str().unwrap().starts_with("msg_"));
    let text = v["content"][0]["text"].as_str().unwrap().to_string();
    assert_eq!(v["content"][0]["type"], "text");
    assert!(!text.is_empty());
    assert!(
        ["end_turn", "max_tokens"].contains(&v["stop_reason"].as_str().unwrap()),
        "{v}"
    );
    assert!(v["usage"]["input_tokens"].as_u64().unwrap() > 5);
    let output_tokens = v["usage"]["output_tokens"].as_u64().unwrap();
    assert!(output_tokens > 0 && output_tokens <= 16);

    let r = post(s.port, "/v1/messages", &ask(json!({"stream": true})));
    assert_eq!(r.status, 200);
    let evs = named_events(&r);
    for (name, data) in &evs {
        assert_eq!(&data["type"], name.as_str());
    }
    let names: Vec<&str> = evs.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names[..2], ["message_start", "content_block_start"]);
    assert_eq!(
        names[names.len() - 3..],
        ["content_block_stop", "message_delta", "message_stop"]
    );
    let streamed: String = evs
        .iter()
        .filter(|(n, _)| n == "content_block_delta")
        .map(|(_, d)| {
            assert_eq!(d["index"], 0);
            d["delta"]["text"].as_str().unwrap().to_string()
        })
        .collect();
    assert_eq!(streamed, text);
    let delta = &evs[evs.len() - 2].1;
    assert_eq!(delta["delta"]["stop_reason"], v["stop_reason"]);
    assert_eq!(delta["usage"]["output_tokens"], output_tokens);
}

#[test]
fn stop_sequences_tools_and_token_counts() {
    let Some(s) = start(&[]) else { return };
    // A stop sequence that the greedy reply contains ends it there.
    let full = post(s.port, "/v1/messages", &ask(json!({}))).json()["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_string();
    let word = full
        .split_whitespace()
        .nth(1)
        .expect("a reply of two words or more");
    let v = post(
        s.port,
        "/v1/messages",
        &ask(json!({"stop_sequences": [word]})),
    )
    .json();
    assert_eq!(v["stop_reason"], "stop_sequence", "{v}");
    assert_eq!(v["stop_sequence"], word);

    // `any` forces a call; it comes back as a tool_use block with its input.
    let tools = json!([{"name": "get_weather", "description": "Weather in a city",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]);
    let v = post(
        s.port,
        "/v1/messages",
        &ask(
            json!({"tools": tools, "tool_choice": {"type": "any"}, "max_tokens": 48,
            "messages": [{"role": "user", "content": "What is the weather in Paris?"}]}),
        ),
    )
    .json();
    assert_eq!(v["stop_reason"], "tool_use", "{v}");
    let call = v["content"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["type"] == "tool_use")
        .expect("a tool_use block");
    assert_eq!(call["name"], "get_weather");
    assert!(call["input"]["city"].is_string(), "{call}");
    assert!(call["id"].as_str().unwrap().starts_with("toolu_"));

    // Streamed: the block's input arrives as input_json_delta.
    let r = post(
        s.port,
        "/v1/messages",
        &ask(
            json!({"tools": tools, "tool_choice": {"type": "tool", "name": "get_weather"}, "max_tokens": 96, "stream": true,
                "messages": [{"role": "user", "content": "What is the weather in Paris?"}]}),
        ),
    );
    let evs = named_events(&r);
    let start = evs
        .iter()
        .find(|(n, d)| n == "content_block_start" && d["content_block"]["type"] == "tool_use")
        .expect("a tool_use block");
    let index = &start.1["index"];
    let json_text: String = evs
        .iter()
        .filter(|(_, d)| &d["index"] == index && d["delta"]["type"] == "input_json_delta")
        .map(|(_, d)| d["delta"]["partial_json"].as_str().unwrap().to_string())
        .collect();
    let input: Value = serde_json::from_str(&json_text).unwrap();
    assert!(input["city"].is_string());

    // count_tokens: the prompt /v1/messages would be given.
    let n = post(s.port, "/v1/messages/count_tokens", &json!({"messages": [{"role": "user", "content": "Say hello."}], "system": "You are a helpful assistant."})).json();
    let m = post(s.port, "/v1/messages", &ask(json!({"max_tokens": 1}))).json();
    assert_eq!(n["input_tokens"], m["usage"]["input_tokens"], "{n} {m}");

    // Bad blocks are 400s naming their path.
    let r = post(
        s.port,
        "/v1/messages",
        &ask(
            json!({"messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "base64", "data": ""}}]}]}),
        ),
    );
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["param"], "messages[0].content[0].type");
}
