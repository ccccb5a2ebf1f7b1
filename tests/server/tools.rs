//! Tool calls on `/v1/chat/completions` with Qwen2.5-Coder-1.5B-Instruct and its own template
//! (the Hermes `<tool_call>` format): a forced call (`tool_choice: "required"` or a named
//! function) is well formed and its arguments match the tool's schema, streamed or not; tools
//! and a tool's answer in the history reach the prompt as the template writes them; bad tool
//! fields are 400s naming the field.

use crate::common::http::post;
use crate::common::server::{start_model, Server};
use crate::events;
use serde_json::{json, Value};

const MODEL: &str = "qwen2.5-coder-1.5b-instruct";

fn weather_tool() -> Value {
    json!({"type": "function", "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "The city name"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}
        }, "required": ["city"]}
    }})
}

fn time_tool() -> Value {
    json!({"type": "function", "function": {
        "name": "get_time",
        "description": "Get the current time in a time zone",
        "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]}
    }})
}

fn question(extra: Value) -> Value {
    let mut body = json!({
        "messages": [{"role": "user", "content": "What is the weather like in Paris today?"}],
        "tools": [weather_tool(), time_tool()],
        "temperature": 0,
        "max_tokens": 64,
    });
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    body
}

fn server() -> Option<Server> {
    start_model(MODEL, &["-c", "2048", "-np", "1"])
}

fn assert_weather_call(name: &str, arguments: &str) {
    assert_eq!(name, "get_weather");
    let args: Value = serde_json::from_str(arguments).expect("arguments are JSON");
    let city = args["city"].as_str().expect("a city string");
    assert!(city.contains("Paris"), "{args}");
    if let Some(unit) = args.get("unit") {
        assert!(
            ["celsius", "fahrenheit"].contains(&unit.as_str().unwrap()),
            "{args}"
        );
    }
}

#[test]
fn a_required_call_is_well_formed_streamed_or_not() {
    let Some(s) = server() else { return };
    let r = post(
        s.port,
        "/v1/chat/completions",
        &question(json!({"tool_choice": "required"})),
    );
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let v = r.json();
    let choice = &v["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls", "{v}");
    let calls = choice["message"]["tool_calls"]
        .as_array()
        .expect("tool_calls");
    assert_eq!(calls.len(), 1, "{v}");
    assert_eq!(calls[0]["type"], "function");
    assert!(calls[0]["id"].as_str().unwrap().starts_with("call_"));
    let f = &calls[0]["function"];
    assert_weather_call(
        f["name"].as_str().unwrap(),
        f["arguments"].as_str().unwrap(),
    );
    assert!(choice["message"]["content"].is_null(), "{v}");

    // The same, streamed: the id and name first, then the arguments; the same call.
    let r = post(
        s.port,
        "/v1/chat/completions",
        &question(json!({"tool_choice": "required", "stream": true})),
    );
    assert_eq!(r.status, 200);
    let evs = events(&r);
    let deltas: Vec<&Value> = evs
        .iter()
        .filter_map(|e| e["choices"][0]["delta"]["tool_calls"].get(0))
        .collect();
    assert!(deltas.len() >= 2, "{evs:?}");
    assert_eq!(deltas[0]["index"], 0);
    assert!(deltas[0]["id"].as_str().unwrap().starts_with("call_"));
    let name = deltas[0]["function"]["name"].as_str().unwrap();
    let arguments: String = deltas
        .iter()
        .filter_map(|d| d["function"]["arguments"].as_str())
        .collect();
    assert_weather_call(name, &arguments);
    assert_eq!(
        f["arguments"].as_str().unwrap(),
        arguments,
        "streamed and whole calls differ"
    );
    let last = evs.last().unwrap();
    assert_eq!(last["choices"][0]["finish_reason"], "tool_calls");
    // Nothing of the call's markup leaked into the content.
    let content: String = evs
        .iter()
        .filter_map(|e| e["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert!(!content.contains("<tool_call>"), "{content:?}");
}

#[test]
fn a_named_function_is_the_one_called() {
    let Some(s) = server() else { return };
    let body = question(json!({
        "tool_choice": {"type": "function", "function": {"name": "get_time"}},
    }));
    let v = post(s.port, "/v1/chat/completions", &body).json();
    let call = &v["choices"][0]["message"]["tool_calls"][0]["function"];
    assert_eq!(call["name"], "get_time", "{v}");
    let args: Value = serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
    assert!(args["zone"].is_string(), "{args}");
}

#[test]
fn tools_and_results_reach_the_prompt_as_the_template_writes_them() {
    let Some(s) = server() else { return };
    let body = json!({
        "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "{\"temperature\": 21}"},
        ],
        "tools": [weather_tool()],
    });
    let r = post(s.port, "/apply-template", &body);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let prompt = r.json()["prompt"].as_str().unwrap().to_string();
    // Qwen2.5's template: the tool as json.dumps writes it, the call, the answer.
    let tool_line = r#"{"type": "function", "function": {"name": "get_weather", "description": "Get the current weather in a city", "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "The city name"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}}"#;
    assert!(
        prompt.contains(&format!("<tools>\n{tool_line}\n</tools>")),
        "{prompt}"
    );
    assert!(
        prompt.contains("<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|im_end|>"),
        "{prompt}"
    );
    assert!(
        prompt.contains(
            "<|im_start|>user\n<tool_response>\n{\"temperature\": 21}\n</tool_response><|im_end|>"
        ),
        "{prompt}"
    );
    assert!(prompt.ends_with("<|im_start|>assistant\n"), "{prompt}");
    // `tool_choice: "none"` still shows the tools, as llama.cpp renders them.
    let mut none = body.clone();
    none["tool_choice"] = "none".into();
    let again = post(s.port, "/apply-template", &none).json()["prompt"].clone();
    assert_eq!(again.as_str(), Some(prompt.as_str()));
}

#[test]
fn bad_tool_fields_are_400s_naming_them() {
    let Some(s) = server() else { return };
    let cases = [
        (
            json!({"messages": [
                {"role": "user", "content": "x"},
                {"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{not json"}}]},
            ]}),
            "messages[1].tool_calls[0].function.arguments",
        ),
        (
            question(json!({"tool_choice": {"type": "function", "function": {"name": "nope"}}})),
            "tool_choice.function.name",
        ),
        (question(json!({"tool_choice": "maybe"})), "tool_choice"),
        (
            question(
                json!({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"x": {"type": "string", "pattern": "^a+$"}}}}}], "tool_choice": "required"}),
            ),
            "tools[0].function.parameters",
        ),
        (
            question(
                json!({"tool_choice": "required", "response_format": {"type": "json_object"}}),
            ),
            "tool_choice",
        ),
    ];
    for (body, field) in cases {
        let r = post(s.port, "/v1/chat/completions", &body);
        assert_eq!(
            r.status,
            400,
            "{body}: {}",
            String::from_utf8_lossy(&r.body)
        );
        let e = r.json();
        assert_eq!(e["error"]["param"], field, "{e}");
    }
    // The server is still there.
    let r = post(
        s.port,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}),
    );
    assert_eq!(r.status, 200);
}
