//! OpenAI's Responses API, as llama-server serves it: `POST /v1/responses` (`instructions`,
//! `input` as text or items: messages, `function_call` and `function_call_output`; function
//! `tools`, `tool_choice`, `max_output_tokens`; streamed as named `response.*` events) and
//! `POST /v1/responses/input_tokens`. A request is converted to a chat completion request and
//! run as one; the reply comes back as output items.

use super::chat_reply::Finished;
use super::error::ApiError;
use super::generation::Shape;
use super::json::{kind, parse_body, text_parts, Obj};
use super::openai::{call_id, new_id, now, prompt_tokens, run_converted};
use super::protocol::Summary;
use super::response::{Responder, Response};
use super::State;
use crate::chat::reasoning::Split;
use crate::engine::StopReason;
use serde_json::{json, Map, Value};

/// `POST /v1/responses`.
pub fn create(state: &State, body: &[u8], rsp: &mut Responder) -> Result<(), ApiError> {
    let v = parse_body(body)?;
    let chat = to_chat(&Obj::root(&v))?;
    let id = new_id("resp").replace('-', "_");
    run_converted(state, rsp, &chat, -1, |prepared| ResponseShape {
        message_id: id.replacen("resp_", "msg_", 1),
        id,
        created: now(),
        model: state.config.model_name.clone(),
        reader: prepared.reader.clone(),
        text: String::new(),
        reasoning: String::new(),
        message_open: false,
        seq: 0,
    })
}

/// `POST /v1/responses/input_tokens`.
pub fn input_tokens(state: &State, body: &[u8]) -> Result<Response, ApiError> {
    let v = parse_body(body)?;
    let n = prompt_tokens(state, &to_chat(&Obj::root(&v))?)?;
    Ok(Response::json(
        200,
        &json!({ "object": "response.input_tokens", "input_tokens": n }),
    ))
}

/// A Responses request as a chat completion request.
fn to_chat(o: &Obj) -> Result<Value, ApiError> {
    let mut messages: Vec<Value> = Vec::new();
    if let Some(i) = o.str("instructions")? {
        messages.push(json!({"role": "system", "content": i}));
    }
    match o.get("input") {
        None => return Err(ApiError::field("input", "is required")),
        Some(Value::String(s)) => messages.push(json!({"role": "user", "content": s})),
        Some(Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                let path = format!("input[{i}]");
                convert_item(&Obj::at(item, &path)?, &mut messages)?;
            }
        }
        Some(other) => {
            return Err(ApiError::field(
                "input",
                format!(
                    "expected a string or an array of items, got {}",
                    kind(other)
                ),
            ))
        }
    }
    let mut chat = Map::new();
    chat.insert("messages".into(), Value::Array(messages));
    for key in ["stream", "temperature", "top_p", "parallel_tool_calls"] {
        if let Some(v) = o.get(key) {
            chat.insert(key.into(), v.clone());
        }
    }
    if let Some(n) = o.get("max_output_tokens") {
        chat.insert("max_tokens".into(), n.clone());
    }
    if let Some(tools) = o.array("tools")? {
        let mut out = Vec::with_capacity(tools.len());
        for (i, t) in tools.iter().enumerate() {
            let path = format!("tools[{i}]");
            let t = Obj::at(t, &path)?;
            t.kind_of(&["function"], "tools")?;
            let mut f = Map::new();
            for key in ["name", "description", "parameters"] {
                if let Some(v) = t.get(key) {
                    f.insert(key.into(), v.clone());
                }
            }
            out.push(json!({"type": "function", "function": f}));
        }
        chat.insert("tools".into(), Value::Array(out));
    }
    match o.get("tool_choice") {
        None => {}
        Some(v @ Value::String(_)) => {
            chat.insert("tool_choice".into(), v.clone());
        }
        Some(v) => {
            let c = Obj::at(v, "tool_choice")?;
            let name = c.required_str("name")?;
            chat.insert(
                "tool_choice".into(),
                json!({"type": "function", "function": {"name": name}}),
            );
        }
    }
    if let Some(text) = o.get("text") {
        let t = Obj::at(text, "text")?;
        if let Some(f) = t.get("format") {
            let f = Obj::at(f, "text.format")?;
            match f.str("type")? {
                None | Some("text") => {}
                Some("json_object") => {
                    chat.insert("response_format".into(), json!({"type": "json_object"}));
                }
                Some("json_schema") => {
                    let schema = f
                        .get("schema")
                        .ok_or_else(|| ApiError::field(&f.path_of("schema"), "is required"))?;
                    chat.insert(
                        "response_format".into(),
                        json!({"type": "json_schema", "json_schema": {"schema": schema}}),
                    );
                }
                Some(other) => {
                    return Err(ApiError::field(
                        &f.path_of("type"),
                        format!("'{other}' is not text, json_object or json_schema"),
                    ))
                }
            }
        }
    }
    o.str("model")?;
    Ok(Value::Object(chat))
}

/// One input item as chat messages: a message, or a call (joined to the assistant message
/// before it) or a call's output (a `tool` message).
fn convert_item(item: &Obj, out: &mut Vec<Value>) -> Result<(), ApiError> {
    match item.str("type")? {
        None | Some("message") => {
            let role = item.required_str("role")?;
            let role = if role == "developer" { "system" } else { role };
            let cpath = item.path_of("content");
            let text = match item.get("content") {
                None => String::new(),
                Some(Value::String(s)) => s.clone(),
                Some(Value::Array(parts)) => text_parts(
                    parts,
                    &cpath,
                    &["input_text", "output_text", "text"],
                    "parts",
                )?,
                Some(other) => {
                    return Err(ApiError::field(
                        &cpath,
                        format!("expected a string or content parts, got {}", kind(other)),
                    ))
                }
            };
            out.push(json!({"role": role, "content": text}));
        }
        Some("function_call") => {
            let name = item.required_str("name")?;
            let id = item.required_str("call_id")?;
            let args = item.str("arguments")?.unwrap_or("{}");
            let call = json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}});
            match out.last_mut() {
                Some(m) if m["role"] == "assistant" => {
                    if !m["tool_calls"].is_array() {
                        m["tool_calls"] = json!([]);
                    }
                    m["tool_calls"]
                        .as_array_mut()
                        .expect("set above")
                        .push(call);
                }
                _ => out.push(json!({"role": "assistant", "content": "", "tool_calls": [call]})),
            }
        }
        Some("function_call_output") => {
            let id = item.required_str("call_id")?;
            let output = match item.get("output") {
                Some(Value::String(s)) => s.clone(),
                Some(v) => v.to_string(),
                None => String::new(),
            };
            out.push(json!({"role": "tool", "tool_call_id": id, "content": output}));
        }
        Some("reasoning") => {}
        Some(other) => {
            return Err(ApiError::field(
                &item.path_of("type"),
                format!("'{other}' items are not supported"),
            ))
        }
    }
    Ok(())
}

/// The reply as a response object and its stream events.
struct ResponseShape {
    id: String,
    message_id: String,
    created: u64,
    model: String,
    reader: super::chat_reply::ReplyReader,
    /// The message's text and the reasoning streamed so far.
    text: String,
    reasoning: String,
    /// The message item (index 0 of the output after any reasoning) was announced.
    message_open: bool,
    seq: u64,
}

impl ResponseShape {
    fn event(&mut self, kind: &str, mut fields: Value) -> Value {
        fields["type"] = kind.into();
        fields["sequence_number"] = self.seq.into();
        self.seq += 1;
        fields
    }

    fn message_item(&self, status: &str, text: Option<&str>) -> Value {
        let content = match text {
            Some(t) => {
                json!([{"type": "output_text", "text": t, "annotations": [], "logprobs": []}])
            }
            None => json!([]),
        };
        json!({"type": "message", "id": self.message_id, "status": status, "role": "assistant", "content": content})
    }

    /// Announces the message item and its text part, once.
    fn open_message(&mut self, out: &mut Vec<Value>) {
        if self.message_open {
            return;
        }
        self.message_open = true;
        let item = self.message_item("in_progress", None);
        let ev = self.event(
            "response.output_item.added",
            json!({"output_index": 0, "item": item}),
        );
        out.push(ev);
        let ev = self.event(
            "response.content_part.added",
            json!({
                "item_id": self.message_id, "output_index": 0, "content_index": 0,
                "part": {"type": "output_text", "text": "", "annotations": []},
            }),
        );
        out.push(ev);
    }

    fn stream_text(&mut self, split: &Split, out: &mut Vec<Value>) {
        self.reasoning.push_str(&split.reasoning);
        if split.content.is_empty() {
            return;
        }
        self.open_message(out);
        self.text.push_str(&split.content);
        let ev = self.event(
            "response.output_text.delta",
            json!({
                "item_id": self.message_id, "output_index": 0, "content_index": 0,
                "delta": split.content,
            }),
        );
        out.push(ev);
    }

    /// The response object: its output items, status and usage.
    fn object(&self, done: &Finished, s: &Summary) -> Value {
        let mut output = Vec::new();
        if !done.reasoning.is_empty() {
            output.push(
                json!({"type": "reasoning", "id": self.id.replacen("resp_", "rs_", 1),
                "summary": [], "content": [{"type": "reasoning_text", "text": done.reasoning}]}),
            );
        }
        if !done.reply.content.is_empty() || done.reply.tool_calls.is_empty() {
            output.push(self.message_item("completed", Some(&done.reply.content)));
        }
        for c in &done.reply.tool_calls {
            let cid = call_id(&c.id);
            output.push(
                json!({"type": "function_call", "id": cid.replacen("call_", "fc_", 1),
                "call_id": cid, "name": c.function.name,
                "arguments": c.function.arguments.to_string(), "status": "completed"}),
            );
        }
        let cut = matches!(s.finish, StopReason::Length | StopReason::ContextFull);
        json!({
            "id": self.id,
            "object": "response",
            "created_at": self.created,
            "completed_at": if cut { Value::Null } else { super::openai::now().into() },
            "status": if cut { "incomplete" } else { "completed" },
            "error": null,
            "incomplete_details": if cut { json!({"reason": "max_output_tokens"}) } else { Value::Null },
            "model": self.model,
            "output": output,
            "parallel_tool_calls": false,
            "tool_choice": "auto",
            "tools": [],
            "usage": {
                "input_tokens": s.stats.n_prompt,
                "input_tokens_details": {"cached_tokens": s.stats.n_cached},
                "output_tokens": s.stats.n_predicted,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": s.stats.n_prompt + s.stats.n_predicted,
            },
        })
    }

    fn in_progress(&self) -> Value {
        json!({"id": self.id, "object": "response", "created_at": self.created,
            "status": "in_progress", "model": self.model, "output": [],
            "parallel_tool_calls": false, "tool_choice": "auto", "tools": []})
    }
}

impl Shape for ResponseShape {
    fn opening(&mut self) -> Vec<Value> {
        let r = self.in_progress();
        vec![
            self.event("response.created", json!({"response": r})),
            self.event("response.in_progress", json!({"response": r})),
        ]
    }

    fn chunk(&mut self, text: &str, _tokens: &[u32], _probs: &[Value]) -> Value {
        json!({"type": "response.output_text.delta", "delta": text})
    }

    fn chunks(&mut self, text: &str, _tokens: &[u32], _probs: &[Value]) -> Vec<Value> {
        let split = self.reader.push(text);
        let mut out = Vec::new();
        self.stream_text(&split, &mut out);
        out
    }

    fn progress(&mut self) -> Value {
        let r = self.in_progress();
        self.event("response.in_progress", json!({"response": r}))
    }

    fn closing(&mut self, s: &Summary) -> Vec<Value> {
        let (mut done, rest) = self.reader.finish();
        let mut out = Vec::new();
        self.stream_text(&rest, &mut out);
        if done.reply.tool_calls.is_empty() {
            self.open_message(&mut out); // an empty reply is still a message
        }
        // The message as streamed (its text is what the client saw).
        done.reply.content = self.text.clone();
        if self.message_open {
            let text = self.text.clone();
            let ev = self.event(
                "response.output_text.done",
                json!({
                    "item_id": self.message_id, "output_index": 0, "content_index": 0, "text": text,
                }),
            );
            out.push(ev);
            let ev = self.event(
                "response.content_part.done",
                json!({
                    "item_id": self.message_id, "output_index": 0, "content_index": 0,
                    "part": {"type": "output_text", "text": text, "annotations": []},
                }),
            );
            out.push(ev);
            let item = self.message_item("completed", Some(&text));
            let ev = self.event(
                "response.output_item.done",
                json!({"output_index": 0, "item": item}),
            );
            out.push(ev);
        }
        let first = usize::from(self.message_open);
        for (i, c) in done.reply.tool_calls.iter().enumerate() {
            let cid = call_id(&c.id);
            let fid = cid.replacen("call_", "fc_", 1);
            let args = c.function.arguments.to_string();
            let index = first + i;
            let item = json!({"type": "function_call", "id": fid, "call_id": cid,
                "name": c.function.name, "arguments": "", "status": "in_progress"});
            let ev = self.event(
                "response.output_item.added",
                json!({"output_index": index, "item": item}),
            );
            out.push(ev);
            let ev = self.event(
                "response.function_call_arguments.delta",
                json!({
                    "item_id": fid, "output_index": index, "delta": args,
                }),
            );
            out.push(ev);
            let ev = self.event(
                "response.function_call_arguments.done",
                json!({
                    "item_id": fid, "output_index": index, "arguments": args,
                }),
            );
            out.push(ev);
            let item = json!({"type": "function_call", "id": fid, "call_id": cid,
                "name": c.function.name, "arguments": args, "status": "completed"});
            let ev = self.event(
                "response.output_item.done",
                json!({"output_index": index, "item": item}),
            );
            out.push(ev);
        }
        done.reasoning = self.reasoning.trim_end().to_string();
        let r = self.object(&done, s);
        let kind = if r["status"] == "incomplete" {
            "response.incomplete"
        } else {
            "response.completed"
        };
        out.push(self.event(kind, json!({"response": r})));
        out
    }

    fn whole(&mut self, text: &str, _tokens: &[u32], _probs: &[Value], s: &Summary) -> Value {
        let mut reader = self.reader.clone();
        reader.push(text);
        let (done, _) = reader.finish();
        self.object(&done, s)
    }

    fn done_marker(&self) -> bool {
        false
    }

    fn named_events(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_become_chat_messages() {
        let v = json!({
            "instructions": "Be brief.",
            "input": [
                {"role": "user", "content": [{"type": "input_text", "text": "Weather in Paris?"}]},
                {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{\"city\": \"Paris\"}"},
                {"type": "function_call_output", "call_id": "call_1", "output": "21 C"},
            ],
            "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}],
            "tool_choice": {"type": "function", "name": "get_weather"},
            "max_output_tokens": 50,
        });
        let chat = to_chat(&Obj::root(&v)).unwrap();
        let m = chat["messages"].as_array().unwrap();
        assert_eq!(m[0], json!({"role": "system", "content": "Be brief."}));
        assert_eq!(
            m[1],
            json!({"role": "user", "content": "Weather in Paris?"})
        );
        assert_eq!(m[2]["tool_calls"][0]["function"]["name"], "get_weather");
        assert_eq!(
            m[3],
            json!({"role": "tool", "tool_call_id": "call_1", "content": "21 C"})
        );
        assert_eq!(chat["tools"][0]["function"]["name"], "get_weather");
        assert_eq!(chat["tool_choice"]["function"]["name"], "get_weather");
        assert_eq!(chat["max_tokens"], 50);
        let bad = json!({"input": [{"type": "image_generation_call"}]});
        let e = to_chat(&Obj::root(&bad)).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("input[0].type"));
    }
}
