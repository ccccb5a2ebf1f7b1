//! OpenAI's API: `GET /v1/models`, `POST /v1/chat/completions` and `POST /v1/completions`, with
//! OpenAI's request fields and response shapes (`chat.completion`, `chat.completion.chunk`,
//! `text_completion`), so that OpenAI client libraries work unchanged.

use super::choices::{self, MAX_CHOICES};
use super::error::ApiError;
use super::generation::{self, check_prompt, sampling_params, timings, usage, Shape};
use super::json::{kind, parse_body, Obj};
use super::protocol::FinishNames;
use super::protocol::{GenParams, Summary};
use super::response::{Responder, Response};
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
                "aliases": state.config.aliases,
                "tags": state.config.tags,
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
/// (`response_format`, penalties, `logit_bias` and `seed` are read with the sampling fields.)
fn refuse_unsupported(o: &Obj) -> Result<(), ApiError> {
    if o.array("tools")?.is_some_and(|t| !t.is_empty()) {
        return Err(ApiError::field(
            "tools",
            "tool calls are not supported by this server yet",
        ));
    }
    o.str("model")?;
    Ok(())
}

/// How many choices the request asks for (`n`, llama.cpp's `n_cmpl`).
fn n_choices(o: &Obj) -> Result<usize, ApiError> {
    let n = match o.int_in("n", 1..=MAX_CHOICES)? {
        Some(n) => Some(n),
        None => o.int_in("n_cmpl", 1..=MAX_CHOICES)?,
    };
    Ok(n.unwrap_or(1) as usize)
}

/// Runs the request once, or `n` times as separate choices.
fn run_choices<S: Shape + Clone>(
    state: &State,
    rsp: &mut Responder,
    prompt: Vec<u32>,
    params: GenParams,
    stream: bool,
    n: usize,
    mut shape: S,
) -> Result<(), ApiError> {
    if n == 1 {
        generation::run(state, rsp, prompt, params, stream, &mut shape)
    } else {
        choices::run(state, rsp, prompt, params, stream, vec![shape; n])
    }
}

/// The generation settings of an OpenAI request; `default_max` when neither `max_tokens` nor
/// `max_completion_tokens` is given.
fn gen_params(
    state: &State,
    o: &Obj,
    default_max: i64,
    n_probs: Option<usize>,
    stream: bool,
) -> Result<GenParams, ApiError> {
    let sampling = sampling_params(o, state)?;
    let max = match o.int_in("max_completion_tokens", 1..=1 << 30)? {
        Some(n) => n,
        None => o.int_in("max_tokens", 1..=1 << 30)?.unwrap_or(default_max),
    };
    let mut p = GenParams {
        sampling,
        n_predict: generation::bounded_n_predict(max, state.config.n_predict),
        stop: o.stop("stop")?,
        cache_prompt: o.bool("cache_prompt")?.unwrap_or(state.config.cache_prompt),
        ignore_eos: o.bool("ignore_eos")?.unwrap_or(false),
        n_keep: o.int_in("n_keep", -1..=i64::from(u32::MAX))?,
        // llama-server reads its own `n_probs` on these endpoints too.
        n_probs: match n_probs {
            Some(n) => Some(n),
            None => generation::n_probs(o, None)?,
        },
        post_sampling_probs: false,
        timings_per_token: false,
        return_progress: false,
    };
    generation::read_extras(o, stream, &mut p)?;
    Ok(p)
}

/// Chat's `logprobs` (a boolean) and `top_logprobs` (0 to 20).
fn chat_logprobs(o: &Obj) -> Result<Option<usize>, ApiError> {
    let top = o.int_in("top_logprobs", 0..=20)?;
    match (o.bool("logprobs")?, top) {
        (Some(true), top) => Ok(Some(top.unwrap_or(0) as usize)),
        (_, Some(_)) => Err(ApiError::field(
            "top_logprobs",
            "requires \"logprobs\": true",
        )),
        _ => Ok(None),
    }
}

/// The legacy completions endpoint's `logprobs`: how many alternatives (0 to 5) per token.
fn completion_logprobs(o: &Obj) -> Result<Option<usize>, ApiError> {
    Ok(o.int_in("logprobs", 0..=5)?.map(|n| n as usize))
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
    format!("{prefix}-{:016x}{n:x}", crate::sampling::random_seed())
}

/// `POST /v1/chat/completions`.
pub fn chat_completions(state: &State, body: &[u8], rsp: &mut Responder) -> Result<(), ApiError> {
    let v = parse_body(body)?;
    let o = Obj::root(&v);
    refuse_unsupported(&o)?;
    let n = n_choices(&o)?;
    let messages = parse_messages(&o)?;
    let stream = o.bool("stream")?.unwrap_or(false);
    let params = gen_params(state, &o, -1, chat_logprobs(&o)?, stream)?;
    let usage_in_stream = include_usage(&o)?;
    let text = state
        .template
        .render(&messages, true)
        .map_err(|e| ApiError::field("messages", e))?;
    let prompt = state.loaded.tokenizer.encode(&text, true, true);
    check_prompt(state, &prompt, "messages")?;
    let shape = ChatShape {
        id: new_id("chatcmpl"),
        created: now(),
        model: state.config.model_name.clone(),
        usage_in_stream,
    };
    run_choices(state, rsp, prompt, params, stream, n, shape)
}

#[derive(Clone)]
struct ChatShape {
    id: String,
    created: u64,
    model: String,
    usage_in_stream: bool,
}

impl ChatShape {
    fn chunk_with(&self, delta: Value, finish: Option<&str>) -> Value {
        self.chunk_with_probs(delta, finish, &[])
    }

    fn chunk_with_probs(&self, delta: Value, finish: Option<&str>, probs: &[Value]) -> Value {
        json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": FINGERPRINT,
            "choices": [{ "index": 0, "delta": delta, "logprobs": chat_probs(probs), "finish_reason": finish }],
        })
    }
}

impl Shape for ChatShape {
    fn opening(&mut self) -> Vec<Value> {
        vec![self.chunk_with(json!({ "role": "assistant", "content": "" }), None)]
    }

    fn chunk(&mut self, text: &str, _tokens: &[u32], probs: &[Value]) -> Value {
        self.chunk_with_probs(json!({ "content": text }), None, probs)
    }

    fn progress(&mut self) -> Value {
        self.chunk_with(json!({ "role": "assistant", "content": null }), None)
    }

    fn closing(&mut self, s: &Summary) -> Vec<Value> {
        let mut last = self.chunk_with(json!({}), Some(s.finish.openai()));
        last["timings"] = timings(&s.stats);
        let mut out = vec![last];
        if self.usage_in_stream {
            out.push(json!({
                "id": self.id,
                "object": "chat.completion.chunk",
                "created": self.created,
                "model": self.model,
                "system_fingerprint": FINGERPRINT,
                "choices": [],
                "usage": usage(&s.stats),
            }));
        }
        out
    }

    fn whole(&mut self, text: &str, _tokens: &[u32], probs: &[Value], s: &Summary) -> Value {
        json!({
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": FINGERPRINT,
            "choices": [{
                "index": 0,
                "message": { "role": "assistant", "content": text },
                "logprobs": chat_probs(probs),
                "finish_reason": s.finish.openai(),
            }],
            "usage": usage(&s.stats),
            "timings": timings(&s.stats),
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
    let n = n_choices(&o)?;
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
        // Token ids, mixed with text or not, as llama-server reads them.
        Some(Value::Array(items))
            if items.iter().any(Value::is_number)
                && items.iter().all(|v| v.is_number() || v.is_string()) =>
        {
            super::native::native_prompt(state, o.get("prompt"))?
        }
        Some(_) => {
            return Err(ApiError::field(
                "prompt",
                "expected a string, one string in an array, or token ids and text",
            ))
        }
    };
    let stream = o.bool("stream")?.unwrap_or(false);
    // OpenAI's default for this endpoint.
    let params = gen_params(state, &o, 16, completion_logprobs(&o)?, stream)?;
    let usage_in_stream = include_usage(&o)?;
    check_prompt(state, &prompt, "prompt")?;
    let shape = CompletionShape {
        id: new_id("cmpl"),
        created: now(),
        model: state.config.model_name.clone(),
        usage_in_stream,
        offset: 0,
    };
    run_choices(state, rsp, prompt, params, stream, n, shape)
}

#[derive(Clone)]
struct CompletionShape {
    id: String,
    created: u64,
    model: String,
    usage_in_stream: bool,
    /// Bytes of text before the next token, for `logprobs.text_offset`.
    offset: usize,
}

impl CompletionShape {
    /// The legacy `logprobs` object: parallel lists of tokens, their log-probabilities, the
    /// alternatives as `{token: logprob}` maps, and each token's byte offset in the text.
    /// Probabilities after sampling (`post_sampling_probs`, entries with `prob`) have no place
    /// in it: they come as llama-server writes them, `{"content": [...]}`.
    fn legacy_probs(&mut self, probs: &[Value]) -> Value {
        if probs.is_empty() {
            return Value::Null;
        }
        if probs[0].get("prob").is_some() {
            return json!({ "content": probs });
        }
        let mut offsets = Vec::with_capacity(probs.len());
        for p in probs {
            offsets.push(self.offset);
            self.offset += p["bytes"].as_array().map_or(0, Vec::len);
        }
        let top: Vec<Value> = probs
            .iter()
            .map(|p| {
                let mut m = serde_json::Map::new();
                for t in p["top_logprobs"].as_array().into_iter().flatten() {
                    let key = t["token"].as_str().unwrap_or_default().to_string();
                    m.entry(key).or_insert_with(|| t["logprob"].clone());
                }
                Value::Object(m)
            })
            .collect();
        json!({
            "tokens": probs.iter().map(|p| p["token"].clone()).collect::<Vec<_>>(),
            "token_logprobs": probs.iter().map(|p| p["logprob"].clone()).collect::<Vec<_>>(),
            "top_logprobs": top,
            "text_offset": offsets,
        })
    }

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
    fn chunk(&mut self, text: &str, _tokens: &[u32], probs: &[Value]) -> Value {
        let lp = self.legacy_probs(probs);
        self.object(json!([{ "index": 0, "text": text, "logprobs": lp, "finish_reason": null }]))
    }

    fn closing(&mut self, s: &Summary) -> Vec<Value> {
        let mut last = self.object(
            json!([{ "index": 0, "text": "", "logprobs": null, "finish_reason": s.finish.openai() }]),
        );
        last["timings"] = timings(&s.stats);
        let mut out = vec![last];
        if self.usage_in_stream {
            let mut u = self.object(json!([]));
            u["usage"] = usage(&s.stats);
            out.push(u);
        }
        out
    }

    fn whole(&mut self, text: &str, _tokens: &[u32], probs: &[Value], s: &Summary) -> Value {
        let lp = self.legacy_probs(probs);
        let mut v = self.object(
            json!([{ "index": 0, "text": text, "logprobs": lp, "finish_reason": s.finish.openai() }]),
        );
        v["usage"] = usage(&s.stats);
        v["timings"] = timings(&s.stats);
        v
    }

    fn done_marker(&self) -> bool {
        true
    }
}

/// Chat's `logprobs` object: `{"content": [...]}`, or null when none were asked for.
fn chat_probs(probs: &[Value]) -> Value {
    if probs.is_empty() {
        Value::Null
    } else {
        json!({ "content": probs })
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
