//! OpenAI's Responses API on SmolLM2: `output` items with the message's `output_text`, usage
//! and status (`incomplete` at the token limit); the stream as named `response.*` events whose
//! text deltas add up to the message; a forced call as a `function_call` item; input token
//! counts; bad items refused naming their path.

use crate::common::http::{post, Reply};
use crate::start;
use serde_json::{json, Value};

/// The (name, data) pairs of a stream whose events are named.
fn named_events(r: &Reply) -> Vec<(String, Value)> {
    String::from_utf8_lossy(&r.body)
        .split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| {
            let name = e.lines().find_map(|l| l.strip_prefix("event: ")).unwrap();
            let data = e.lines().find_map(|l| l.strip_prefix("data: ")).unwrap();
            (name.to_string(), serde_json::from_str(data).unwrap())
        })
        .collect()
}

#[test]
fn a_response_streamed_and_not() {
    let Some(s) = start(&[]) else { return };
    let body = json!({"instructions": "Be brief.", "input": "Say hello.", "temperature": 0, "max_output_tokens": 8});
    let v = post(s.port, "/v1/responses", &body).json();
    assert_eq!(v["object"], "response", "{v}");
    assert!(v["id"].as_str().unwrap().starts_with("resp_"));
    let msg = &v["output"][0];
    assert_eq!(msg["type"], "message");
    let text = msg["content"][0]["text"].as_str().unwrap().to_string();
    assert_eq!(msg["content"][0]["type"], "output_text");
    assert!(!text.is_empty());
    let out = v["usage"]["output_tokens"].as_u64().unwrap();
    assert_eq!(
        v["status"],
        if out == 8 { "incomplete" } else { "completed" },
        "{v}"
    );
    assert!(v["usage"]["input_tokens"].as_u64().unwrap() > 3);

    let mut streamed_body = body.clone();
    streamed_body["stream"] = true.into();
    let evs = named_events(&post(s.port, "/v1/responses", &streamed_body));
    let names: Vec<&str> = evs.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names[..2], ["response.created", "response.in_progress"]);
    let last = names.last().unwrap();
    assert!(
        ["response.completed", "response.incomplete"].contains(last),
        "{names:?}"
    );
    let deltas: String = evs
        .iter()
        .filter(|(n, _)| n == "response.output_text.delta")
        .map(|(_, d)| d["delta"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(deltas, text);
    let done = evs
        .iter()
        .find(|(n, _)| n == "response.output_text.done")
        .unwrap();
    assert_eq!(done.1["text"], text.as_str());
    let seqs: Vec<u64> = evs
        .iter()
        .map(|(_, d)| d["sequence_number"].as_u64().unwrap())
        .collect();
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "{seqs:?}");
}

#[test]
fn calls_counts_and_bad_items() {
    let Some(s) = start(&[]) else { return };
    let body = json!({
        "input": [{"role": "user", "content": [{"type": "input_text", "text": "What is the weather in Paris?"}]}],
        "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}],
        "tool_choice": "required",
        "temperature": 0,
        "max_output_tokens": 48,
    });
    let v = post(s.port, "/v1/responses", &body).json();
    let call = v["output"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["type"] == "function_call")
        .unwrap_or_else(|| panic!("no function_call: {v}"));
    assert_eq!(call["name"], "get_weather");
    let args: Value = serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
    assert!(args["city"].is_string());
    assert!(call["call_id"].as_str().unwrap().starts_with("call_"));

    let n = post(
        s.port,
        "/v1/responses/input_tokens",
        &json!({"input": "Say hello."}),
    )
    .json();
    assert_eq!(n["object"], "response.input_tokens");
    let m = post(
        s.port,
        "/v1/responses",
        &json!({"input": "Say hello.", "max_output_tokens": 1}),
    )
    .json();
    assert_eq!(n["input_tokens"], m["usage"]["input_tokens"]);

    let r = post(
        s.port,
        "/v1/responses",
        &json!({"input": [{"type": "web_search_call"}]}),
    );
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["param"], "input[0].type");
}
