//! Anthropic's Messages API, as llama-server serves it: `POST /v1/messages` (text, system
//! prompts, multipart content, tools with `tool_use` and `tool_result` blocks, thinking, stop
//! sequences; streamed as named events with content-block indices) and
//! `POST /v1/messages/count_tokens`. A request is converted to a chat completion request in
//! OpenAI's shape and run as one; the reply comes back as content blocks.

use super::chat_reply::Finished;
use super::error::ApiError;
use super::generation::Shape;
use super::json::{kind, parse_body, text_parts, Obj};
use super::openai::{call_id, new_id, prompt_tokens, run_converted};
use super::protocol::Summary;
use super::response::{Responder, Response};
use super::State;
use crate::chat::reasoning::Split;
use crate::engine::StopReason;
use serde_json::{json, Map, Value};

/// llama-server's `max_tokens` when a request gives none.
const DEFAULT_MAX_TOKENS: i64 = 4096;

/// `POST /v1/messages`.
pub fn messages(state: &State, body: &[u8], rsp: &mut Responder) -> Result<(), ApiError> {
    let v = parse_body(body)?;
    let chat = to_chat(&Obj::root(&v))?;
    run_converted(state, rsp, &chat, DEFAULT_MAX_TOKENS, |prepared| {
        MessageShape {
            id: new_id("msg").replace('-', "_"),
            model: state.config.model_name.clone(),
            n_prompt: prepared.prompt.len(),
            reader: prepared.reader.clone(),
            open: None,
            next_index: 0,
        }
    })
}

/// `POST /v1/messages/count_tokens`: the tokens of the prompt a request would be given.
pub fn count_tokens(state: &State, body: &[u8]) -> Result<Response, ApiError> {
    let v = parse_body(body)?;
    let n = prompt_tokens(state, &to_chat(&Obj::root(&v))?)?;
    Ok(Response::json(200, &json!({ "input_tokens": n })))
}

/// An Anthropic request as a chat completion request.
fn to_chat(o: &Obj) -> Result<Value, ApiError> {
    let mut chat = Map::new();
    let mut messages = Vec::new();
    match o.get("system") {
        None => {}
        Some(Value::String(s)) => messages.push(json!({"role": "system", "content": s})),
        Some(Value::Array(blocks)) => {
            let text = block_text(blocks, "system")?;
            messages.push(json!({"role": "system", "content": text}));
        }
        Some(other) => {
            return Err(ApiError::field(
                "system",
                format!("expected a string or text blocks, got {}", kind(other)),
            ))
        }
    }
    let items = o
        .array("messages")?
        .ok_or_else(|| ApiError::field("messages", "is required"))?;
    for (i, item) in items.iter().enumerate() {
        let path = format!("messages[{i}]");
        let m = Obj::at(item, &path)?;
        let role = m.required_str("role")?;
        if role != "user" && role != "assistant" {
            return Err(ApiError::field(
                &m.path_of("role"),
                format!("'{role}' is not user or assistant"),
            ));
        }
        convert_message(&m, role, &mut messages)?;
    }
    chat.insert("messages".into(), Value::Array(messages));
    // Same meaning, same name.
    for key in ["stream", "temperature", "top_p", "top_k", "max_tokens"] {
        if let Some(v) = o.get(key) {
            chat.insert(key.into(), v.clone());
        }
    }
    if let Some(stops) = o.get("stop_sequences") {
        chat.insert("stop".into(), stops.clone());
    }
    if let Some(tools) = o.array("tools")? {
        let mut out = Vec::with_capacity(tools.len());
        for (i, t) in tools.iter().enumerate() {
            let path = format!("tools[{i}]");
            let t = Obj::at(t, &path)?;
            let name = t.required_str("name")?;
            let mut f = json!({"name": name});
            if let Some(d) = t.str("description")? {
                f["description"] = d.into();
            }
            if let Some(s) = t.get("input_schema") {
                f["parameters"] = s.clone();
            }
            out.push(json!({"type": "function", "function": f}));
        }
        chat.insert("tools".into(), Value::Array(out));
    }
    if let Some(c) = o.get("tool_choice") {
        let c = Obj::at(c, "tool_choice")?;
        let choice = match c.str("type")? {
            Some("auto") => json!("auto"),
            Some("any") => json!("required"),
            Some("none") => json!("none"),
            Some("tool") => {
                let name = c.required_str("name")?;
                json!({"type": "function", "function": {"name": name}})
            }
            Some(other) => {
                return Err(ApiError::field(
                    &c.path_of("type"),
                    format!("'{other}' is not auto, any, tool or none"),
                ))
            }
            None => return Err(ApiError::field(&c.path_of("type"), "is required")),
        };
        chat.insert("tool_choice".into(), choice);
        if c.bool("disable_parallel_tool_use")? == Some(false) {
            chat.insert("parallel_tool_calls".into(), true.into());
        }
    }
    if let Some(t) = o.get("thinking") {
        let t = Obj::at(t, "thinking")?;
        let on = match t.str("type")? {
            Some("enabled") => true,
            Some("disabled") => false,
            Some(other) => {
                return Err(ApiError::field(
                    &t.path_of("type"),
                    format!("'{other}' is not enabled or disabled"),
                ))
            }
            None => return Err(ApiError::field(&t.path_of("type"), "is required")),
        };
        chat.insert(
            "chat_template_kwargs".into(),
            json!({ "enable_thinking": on }),
        );
    }
    o.str("model")?;
    Ok(Value::Object(chat))
}

/// The text of text blocks (`path` names them in errors).
fn block_text(blocks: &[Value], path: &str) -> Result<String, ApiError> {
    text_parts(blocks, path, &["text"], "blocks")
}

/// One Anthropic message as chat messages: a user turn's `tool_result` blocks become `tool`
/// messages (before its text), an assistant turn's `tool_use` blocks its `tool_calls`, and its
/// `thinking` its `reasoning_content`.
fn convert_message(m: &Obj, role: &str, out: &mut Vec<Value>) -> Result<(), ApiError> {
    let path = m.path_of("content");
    let blocks = match m.get("content") {
        None => return Err(ApiError::field(&path, "is required")),
        Some(Value::String(s)) => {
            out.push(json!({"role": role, "content": s}));
            return Ok(());
        }
        Some(Value::Array(blocks)) => blocks,
        Some(other) => {
            return Err(ApiError::field(
                &path,
                format!("expected a string or content blocks, got {}", kind(other)),
            ))
        }
    };
    let mut text = String::new();
    let mut thinking = String::new();
    let mut calls = Vec::new();
    for (j, b) in blocks.iter().enumerate() {
        let bpath = format!("{path}[{j}]");
        let b = Obj::at(b, &bpath)?;
        let kind_of = b.required_str("type")?;
        match (role, kind_of) {
            (_, "text") => text.push_str(b.required_str("text")?),
            ("assistant", "thinking") => thinking.push_str(b.str("thinking")?.unwrap_or_default()),
            ("assistant", "redacted_thinking") => {}
            ("assistant", "tool_use") => {
                let id = b.required_str("id")?;
                let name = b.required_str("name")?;
                let input = match b.get("input") {
                    None => json!({}),
                    Some(v @ Value::Object(_)) => v.clone(),
                    Some(other) => {
                        return Err(ApiError::field(
                            &b.path_of("input"),
                            format!("expected an object, got {}", kind(other)),
                        ))
                    }
                };
                calls.push(json!({"id": id, "type": "function", "function": {"name": name, "arguments": input.to_string()}}));
            }
            ("user", "tool_result") => {
                let id = b.required_str("tool_use_id")?;
                let content = match b.get("content") {
                    None => String::new(),
                    Some(Value::String(s)) => s.clone(),
                    Some(Value::Array(parts)) => block_text(parts, &b.path_of("content"))?,
                    Some(other) => {
                        return Err(ApiError::field(
                            &b.path_of("content"),
                            format!("expected a string or text blocks, got {}", kind(other)),
                        ))
                    }
                };
                out.push(json!({"role": "tool", "tool_call_id": id, "content": content}));
            }
            (_, "image" | "document") => {
                return Err(ApiError::field(
                    &b.path_of("type"),
                    format!(
                    "'{kind_of}' blocks need a multimodal model, which this server does not load"
                ),
                ))
            }
            (_, other) => {
                return Err(ApiError::field(
                    &b.path_of("type"),
                    format!("'{other}' blocks are not supported in a {role} message"),
                ))
            }
        }
    }
    if role == "user" && text.is_empty() && out.last().is_some_and(|m| m["role"] == "tool") {
        return Ok(()); // only tool results
    }
    let mut msg = json!({"role": role, "content": text});
    if !thinking.is_empty() {
        msg["reasoning_content"] = thinking.into();
    }
    if !calls.is_empty() {
        msg["tool_calls"] = Value::Array(calls);
    }
    out.push(msg);
    Ok(())
}

/// Anthropic's `stop_reason` and `stop_sequence` for how a reply ended.
fn stop_reason(s: &Summary, called: bool) -> (&'static str, Value) {
    match &s.finish {
        StopReason::StopWord(w) => ("stop_sequence", w.clone().into()),
        StopReason::Length | StopReason::ContextFull => ("max_tokens", Value::Null),
        _ if called => ("tool_use", Value::Null),
        _ => ("end_turn", Value::Null),
    }
}

/// The reply as Anthropic's message and its stream events.
struct MessageShape {
    id: String,
    model: String,
    n_prompt: usize,
    reader: super::chat_reply::ReplyReader,
    /// The content block being streamed: its kind (`thinking` or `text`) and index.
    open: Option<(&'static str, usize)>,
    next_index: usize,
}

impl MessageShape {
    /// Events that add `text` to a block of `kind`, opening it (and closing another) first.
    fn add(&mut self, kind: &'static str, text: &str, out: &mut Vec<Value>) {
        if text.is_empty() {
            return;
        }
        if self.open.map(|(k, _)| k) != Some(kind) {
            self.close(out);
            let index = self.next_index;
            self.next_index += 1;
            self.open = Some((kind, index));
            let block = match kind {
                "thinking" => json!({"type": "thinking", "thinking": "", "signature": ""}),
                _ => json!({"type": "text", "text": ""}),
            };
            out.push(
                json!({"type": "content_block_start", "index": index, "content_block": block}),
            );
        }
        let index = self.open.map_or(0, |(_, i)| i);
        let delta = match kind {
            "thinking" => json!({"type": "thinking_delta", "thinking": text}),
            _ => json!({"type": "text_delta", "text": text}),
        };
        out.push(json!({"type": "content_block_delta", "index": index, "delta": delta}));
    }

    fn close(&mut self, out: &mut Vec<Value>) {
        if let Some((_, index)) = self.open.take() {
            out.push(json!({"type": "content_block_stop", "index": index}));
        }
    }

    fn add_split(&mut self, split: &Split, out: &mut Vec<Value>) {
        self.add("thinking", &split.reasoning, out);
        self.add("text", &split.content, out);
    }

    fn usage(&self, s: &Summary) -> Value {
        json!({
            "input_tokens": s.stats.n_prompt,
            "output_tokens": s.stats.n_predicted,
            "cache_read_input_tokens": s.stats.n_cached,
        })
    }
}

impl Shape for MessageShape {
    fn opening(&mut self) -> Vec<Value> {
        vec![json!({"type": "message_start", "message": {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": null,
            "stop_sequence": null,
            "usage": {"input_tokens": self.n_prompt, "output_tokens": 0},
        }})]
    }

    fn chunk(&mut self, text: &str, _tokens: &[u32], _probs: &[Value]) -> Value {
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}})
    }

    fn chunks(&mut self, text: &str, _tokens: &[u32], _probs: &[Value]) -> Vec<Value> {
        let split = self.reader.push(text);
        let mut out = Vec::new();
        self.add_split(&split, &mut out);
        out
    }

    fn progress(&mut self) -> Value {
        json!({"type": "ping"})
    }

    fn closing(&mut self, s: &Summary) -> Vec<Value> {
        let (done, rest) = self.reader.finish();
        let mut out = Vec::new();
        self.add_split(&rest, &mut out);
        self.close(&mut out);
        for call in &done.reply.tool_calls {
            let index = self.next_index;
            self.next_index += 1;
            out.push(
                json!({"type": "content_block_start", "index": index, "content_block": {
                    "type": "tool_use",
                    "id": tool_use_id(&call.id),
                    "name": call.function.name,
                    "input": {},
                }}),
            );
            out.push(
                json!({"type": "content_block_delta", "index": index, "delta": {
                    "type": "input_json_delta",
                    "partial_json": call.function.arguments.to_string(),
                }}),
            );
            out.push(json!({"type": "content_block_stop", "index": index}));
        }
        let (reason, sequence) = stop_reason(s, !done.reply.tool_calls.is_empty());
        out.push(json!({"type": "message_delta",
            "delta": {"stop_reason": reason, "stop_sequence": sequence},
            "usage": {"output_tokens": s.stats.n_predicted},
        }));
        out.push(json!({"type": "message_stop"}));
        out
    }

    fn whole(&mut self, text: &str, _tokens: &[u32], _probs: &[Value], s: &Summary) -> Value {
        let mut reader = self.reader.clone();
        reader.push(text);
        let (done, _) = reader.finish();
        let Finished { reasoning, reply } = done;
        let mut content = Vec::new();
        if !reasoning.is_empty() {
            content.push(json!({"type": "thinking", "thinking": reasoning, "signature": ""}));
        }
        if !reply.content.is_empty() || reply.tool_calls.is_empty() {
            content.push(json!({"type": "text", "text": reply.content}));
        }
        for call in &reply.tool_calls {
            content.push(json!({
                "type": "tool_use",
                "id": tool_use_id(&call.id),
                "name": call.function.name,
                "input": call.function.arguments,
            }));
        }
        let (reason, sequence) = stop_reason(s, !reply.tool_calls.is_empty());
        json!({
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": content,
            "stop_reason": reason,
            "stop_sequence": sequence,
            "usage": self.usage(s),
        })
    }

    fn done_marker(&self) -> bool {
        false
    }

    fn named_events(&self) -> bool {
        true
    }
}

/// A `tool_use` block's id: the call's own, or a fresh `toolu_` one.
fn tool_use_id(given: &str) -> String {
    if given.is_empty() {
        call_id("").replacen("call_", "toolu_", 1)
    } else {
        given.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn convert(v: Value) -> Result<Value, ApiError> {
        to_chat(&Obj::root(&v))
    }

    #[test]
    fn a_conversation_with_tools_becomes_a_chat_request() {
        let chat = convert(json!({
            "model": "claude",
            "max_tokens": 100,
            "system": [{"type": "text", "text": "Be brief."}],
            "stop_sequences": ["END"],
            "tools": [{"name": "get_weather", "description": "Weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}],
            "tool_choice": {"type": "any"},
            "messages": [
                {"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "Use the tool."},
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}
                ]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "21 C"}]}
            ]
        }))
        .unwrap();
        assert_eq!(
            chat["messages"][0],
            json!({"role": "system", "content": "Be brief."})
        );
        let a = &chat["messages"][2];
        assert_eq!(a["reasoning_content"], "Use the tool.");
        assert_eq!(
            a["tool_calls"][0]["function"]["arguments"],
            "{\"city\":\"Paris\"}"
        );
        assert_eq!(
            chat["messages"][3],
            json!({"role": "tool", "tool_call_id": "toolu_1", "content": "21 C"})
        );
        assert_eq!(chat["messages"].as_array().unwrap().len(), 4);
        assert_eq!(chat["tool_choice"], "required");
        assert_eq!(chat["tools"][0]["function"]["parameters"]["type"], "object");
        assert_eq!(chat["stop"], json!(["END"]));
        assert_eq!(chat["max_tokens"], 100);
    }

    #[test]
    fn bad_blocks_name_their_path() {
        for (body, field) in [
            (
                json!({"messages": [{"role": "system", "content": "x"}]}),
                "messages[0].role",
            ),
            (
                json!({"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]}),
                "messages[0].content[0].type",
            ),
            (
                json!({"messages": [{"role": "user", "content": [{"type": "tool_result"}]}]}),
                "messages[0].content[0].tool_use_id",
            ),
            (
                json!({"messages": [{"role": "user", "content": "x"}], "tool_choice": {"type": "sometimes"}}),
                "tool_choice.type",
            ),
            (json!({"messages": []}), "messages"),
        ] {
            let e = convert(body.clone());
            let e = match e {
                Err(e) => e,
                Ok(_) if field == "messages" => continue, // (an empty list is the chat side's to refuse)
                Ok(v) => panic!("{body} converted: {v}"),
            };
            assert_eq!(e.param.as_deref(), Some(field), "{body}: {e}");
        }
    }
}
