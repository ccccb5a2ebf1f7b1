//! OpenAI's API: `GET /v1/models`, `POST /v1/chat/completions` and `POST /v1/completions`, with
//! OpenAI's request fields and response shapes (`chat.completion`, `chat.completion.chunk`,
//! `text_completion`), so that OpenAI client libraries work unchanged.

use super::error::ApiError;
use super::generation::{self, check_prompt, sampling_params, timings, usage, Shape};
use super::json::{kind, parse_body, Obj};
use super::response::{Responder, Response};
use super::slots::{GenParams, Summary};
use super::State;
use crate::chat::Message;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};

/// `GET /v1/models`.
pub fn models(state: &State) -> Response {
    let c = &state.loaded.model.config;
    Response::json(
        200,
        &json!({
            "object": "list",
            "data": [{
                "id": state.config.model_name,
                "object": "model",
                "created": state.started,
                "owned_by": "llamafile",
                "meta": {
                    "n_vocab": c.n_vocab,
                    "n_ctx_train": c.n_ctx_train,
                    "n_embd": c.n_embd,
                    "n_params": serde_json::Value::Null,
                },
            }],
        }),
    )
}

/// The `messages` array of a chat request.
pub fn parse_messages(o: &Obj) -> Result<Vec<Message>, ApiError> {
    let items = o
        .array("messages")?
        .ok_or_else(|| ApiError::field("messages", "is required"))?;
    if items.is_empty() {
        return Err(ApiError::field("messages", "must not be empty"));
    }
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let path = format!("messages[{i}]");
        let m = Obj::at(item, &path)?;
        let role = m
            .str("role")?
            .ok_or_else(|| ApiError::field(&m.path_of("role"), "is required"))?;
        let content = match m.get("content") {
            None => String::new(),
            Some(Value::String(s)) => s.clone(),
            Some(Value::Array(parts)) => {
                let mut text = String::new();
                for (j, part) in parts.iter().enumerate() {
                    let ppath = format!("{path}.content[{j}]");
                    let p = Obj::at(part, &ppath)?;
                    match p.str("type")? {
                        Some("text") => {}
                        Some(other) => {
                            return Err(ApiError::field(
                                &p.path_of("type"),
                                format!("'{other}' parts are not supported (only 'text')"),
                            ))
                        }
                        None => return Err(ApiError::field(&p.path_of("type"), "is required")),
                    }
                    let t = p
                        .str("text")?
                        .ok_or_else(|| ApiError::field(&p.path_of("text"), "is required"))?;
                    text.push_str(t);
                }
                text
            }
            Some(other) => {
                return Err(ApiError::field(
                    &m.path_of("content"),
                    format!(
                        "expected a string or an array of content parts, got {}",
                        kind(other)
                    ),
                ))
            }
        };
        out.push(Message::new(role, content));
    }
    Ok(out)
}

/// Fields OpenAI clients may send that this server cannot honour: refused, not ignored.
fn refuse_unsupported(o: &Obj) -> Result<(), ApiError> {
    for key in ["presence_penalty", "frequency_penalty"] {
        if let Some(v) = o.f32_in(key, -2.0..=2.0)? {
            if v != 0.0 {
                return Err(ApiError::field(
                    key,
                    "is not supported by this server yet (use repeat_penalty)",
                ));
            }
        }
    }
    if o.bool("logprobs")? == Some(true) {
        return Err(ApiError::field(
            "logprobs",
            "is not supported by this server yet",
        ));
    }
    if o.array("tools")?.is_some_and(|t| !t.is_empty()) {
        return Err(ApiError::field(
            "tools",
            "tool calls are not supported by this server yet",
        ));
    }
    if let Some(rf) = o.get("response_format") {
        let rf = Obj::at(rf, "response_format")?;
        match rf.str("type")? {
            None | Some("text") => {}
            Some(other) => {
                return Err(ApiError::field(
                    "response_format.type",
                    format!("'{other}' is not supported by this server yet (only 'text')"),
                ))
            }
        }
    }
    if let Some(n) = o.int_in("n", i64::MIN..=i64::MAX)? {
        if n != 1 {
            return Err(ApiError::field(
                "n",
                format!("{n} choices requested; only n=1 is supported"),
            ));
        }
    }
    o.str("model")?;
    Ok(())
}

/// The generation settings of an OpenAI request; `default_max` when neither `max_tokens` nor
/// `max_completion_tokens` is given.
fn gen_params(state: &State, o: &Obj, default_max: i64) -> Result<GenParams, ApiError> {
    let sampling = sampling_params(o, &state.config)?;
    let max = match o.int_in("max_completion_tokens", 1..=1 << 30)? {
        Some(n) => n,
        None => o.int_in("max_tokens", 1..=1 << 30)?.unwrap_or(default_max),
    };
    Ok(GenParams {
        sampling,
        n_predict: max,
        stop: o.stop("stop")?,
        cache_prompt: o.bool("cache_prompt")?.unwrap_or(true),
        ignore_eos: o.bool("ignore_eos")?.unwrap_or(false),
    })
}

fn include_usage(o: &Obj) -> Result<bool, ApiError> {
    match o.get("stream_options") {
        None => Ok(false),
        Some(v) => Ok(Obj::at(v, "stream_options")?
            .bool("include_usage")?
            .unwrap_or(false)),
    }
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

fn new_id(prefix: &str) -> String {
    let n = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}-{:016x}{n:x}", generation::random_seed())
}

/// `POST /v1/chat/completions`.
pub fn chat_completions(state: &State, body: &[u8], rsp: &mut Responder) -> Result<(), ApiError> {
    let v = parse_body(body)?;
    let o = Obj::root(&v);
    refuse_unsupported(&o)?;
    let messages = parse_messages(&o)?;
    let stream = o.bool("stream")?.unwrap_or(false);
    let params = gen_params(state, &o, -1)?;
    let usage_in_stream = include_usage(&o)?;
    let text = state
        .template
        .render(&messages, true)
        .map_err(|e| ApiError::field("messages", e))?;
    let prompt = state.loaded.tokenizer.encode(&text, true, true);
    check_prompt(state, &prompt, "messages")?;
    let mut shape = ChatShape {
        id: new_id("chatcmpl"),
        created: now(),
        model: state.config.model_name.clone(),
        usage_in_stream,
    };
    generation::run(state, rsp, prompt, params, stream, &mut shape)
}

struct ChatShape {
    id: String,
    created: u64,
    model: String,
    usage_in_stream: bool,
}

impl ChatShape {
    fn chunk_with(&self, delta: Value, finish: Option<&str>) -> Value {
        json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": FINGERPRINT,
            "choices": [{ "index": 0, "delta": delta, "logprobs": null, "finish_reason": finish }],
        })
    }
}

impl Shape for ChatShape {
    fn opening(&mut self) -> Vec<Value> {
        vec![self.chunk_with(json!({ "role": "assistant", "content": "" }), None)]
    }

    fn chunk(&mut self, text: &str, _tokens: &[u32]) -> Value {
        self.chunk_with(json!({ "content": text }), None)
    }

    fn closing(&mut self, s: &Summary) -> Vec<Value> {
        let mut last = self.chunk_with(json!({}), Some(s.finish.openai()));
        last["timings"] = timings(s);
        let mut out = vec![last];
        if self.usage_in_stream {
            out.push(json!({
                "id": self.id,
                "object": "chat.completion.chunk",
                "created": self.created,
                "model": self.model,
                "system_fingerprint": FINGERPRINT,
                "choices": [],
                "usage": usage(s),
            }));
        }
        out
    }

    fn whole(&mut self, text: &str, _tokens: &[u32], s: &Summary) -> Value {
        json!({
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": FINGERPRINT,
            "choices": [{
                "index": 0,
                "message": { "role": "assistant", "content": text },
                "logprobs": null,
                "finish_reason": s.finish.openai(),
            }],
            "usage": usage(s),
            "timings": timings(s),
        })
    }

    fn done_marker(&self) -> bool {
        true
    }
}

/// `POST /v1/completions`.
pub fn completions(state: &State, body: &[u8], rsp: &mut Responder) -> Result<(), ApiError> {
    let v = parse_body(body)?;
    let o = Obj::root(&v);
    refuse_unsupported(&o)?;
    if o.bool("echo")? == Some(true) {
        return Err(ApiError::field(
            "echo",
            "is not supported by this server yet",
        ));
    }
    let prompt = match o.get("prompt") {
        None => return Err(ApiError::field("prompt", "is required")),
        Some(Value::String(s)) => state.loaded.tokenizer.encode(s, true, true),
        Some(Value::Array(items)) if items.len() == 1 && items[0].is_string() => {
            let s = items[0].as_str().unwrap_or_default();
            state.loaded.tokenizer.encode(s, true, true)
        }
        Some(Value::Array(items)) if items.iter().all(|v| v.is_number()) => {
            super::native::token_array(state, items, "prompt")?
        }
        Some(_) => {
            return Err(ApiError::field(
                "prompt",
                "expected a string, an array of one string, or an array of token ids",
            ))
        }
    };
    let stream = o.bool("stream")?.unwrap_or(false);
    // OpenAI's default for this endpoint.
    let params = gen_params(state, &o, 16)?;
    let usage_in_stream = include_usage(&o)?;
    check_prompt(state, &prompt, "prompt")?;
    let mut shape = CompletionShape {
        id: new_id("cmpl"),
        created: now(),
        model: state.config.model_name.clone(),
        usage_in_stream,
    };
    generation::run(state, rsp, prompt, params, stream, &mut shape)
}

struct CompletionShape {
    id: String,
    created: u64,
    model: String,
    usage_in_stream: bool,
}

impl CompletionShape {
    fn object(&self, choices: Value) -> Value {
        json!({
            "id": self.id,
            "object": "text_completion",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": FINGERPRINT,
            "choices": choices,
        })
    }
}

impl Shape for CompletionShape {
    fn chunk(&mut self, text: &str, _tokens: &[u32]) -> Value {
        self.object(json!([{ "index": 0, "text": text, "logprobs": null, "finish_reason": null }]))
    }

    fn closing(&mut self, s: &Summary) -> Vec<Value> {
        let mut last = self.object(
            json!([{ "index": 0, "text": "", "logprobs": null, "finish_reason": s.finish.openai() }]),
        );
        last["timings"] = timings(s);
        let mut out = vec![last];
        if self.usage_in_stream {
            let mut u = self.object(json!([]));
            u["usage"] = usage(s);
            out.push(u);
        }
        out
    }

    fn whole(&mut self, text: &str, _tokens: &[u32], s: &Summary) -> Value {
        let mut v = self.object(
            json!([{ "index": 0, "text": text, "logprobs": null, "finish_reason": s.finish.openai() }]),
        );
        v["usage"] = usage(s);
        v["timings"] = timings(s);
        v
    }

    fn done_marker(&self) -> bool {
        true
    }
}

const FINGERPRINT: &str = concat!("llamafile-rs-", env!("CARGO_PKG_VERSION"));

/// Seconds since the Unix epoch.
pub fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}
