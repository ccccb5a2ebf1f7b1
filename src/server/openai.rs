//! OpenAI's API: `GET /v1/models`, `POST /v1/chat/completions` and `POST /v1/completions`, with
//! OpenAI's request fields and response shapes (`chat.completion`, `chat.completion.chunk`,
//! `text_completion`), so that OpenAI client libraries work unchanged.

use super::chat_reply::ReplyReader;
use super::choices::{self, MAX_CHOICES};
use super::continuation;
use super::error::ApiError;
use super::generation::{self, check_prompt, sampling_params, timings, usage, Shape};
use super::json::{kind, parse_body, Obj};
use super::native::NativeShape;
use super::protocol::FinishNames;
use super::protocol::{GenParams, Summary};
use super::response::{Responder, Response};
use super::tools::{Choice, Tools};
use super::State;
use crate::chat::reasoning::{
    budget_spec, opens_thinking, thinks, ReasoningFormat, Split, ThinkSplitter,
};
use crate::chat::tool_call::{Format, Reply};
use crate::chat::{Message, RenderOptions, ToolCall};
use crate::sampling::BudgetSpec;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// `GET /v1/models` (and `/models`), as llama-server lists its model: OpenAI's `data` with
/// llama.cpp's `meta`, and the same model in Ollama's `models` shape.
pub fn models(state: &State) -> Response {
    let c = &state.loaded.model.config;
    let file = &state.loaded.model.file;
    let name = &state.config.model_name;
    let n_params: u64 = file.tensors().iter().map(|t| t.n_elements()).sum();
    let size: u64 = file.tensors().iter().map(|t| t.n_bytes()).sum();
    let capabilities = match state.media {
        Some(_) => json!(["completion", "multimodal"]),
        None => json!(["completion"]),
    };
    Response::json(
        200,
        &json!({
            "models": [{
                "name": name,
                "model": name,
                "modified_at": "",
                "size": "",
                "digest": "",
                "type": "model",
                "description": "",
                "tags": [""],
                "capabilities": capabilities,
                "parameters": "",
                "details": {
                    "parent_model": "",
                    "format": "gguf",
                    "family": "",
                    "families": [""],
                    "parameter_size": "",
                    "quantization_level": "",
                },
            }],
            "object": "list",
            "data": [{
                "id": name,
                "aliases": state.config.aliases,
                "tags": state.config.tags,
                "object": "model",
                "created": now(),
                "owned_by": "llamacpp",
                "meta": {
                    "vocab_type": vocab_type(file.get_str("tokenizer.ggml.model")),
                    "n_vocab": c.n_vocab,
                    "n_ctx": state.scheduler.options.n_ctx_slot,
                    "n_ctx_train": c.n_ctx_train,
                    "n_embd": c.n_embd,
                    "n_params": n_params,
                    "size": size,
                    "ftype": model_ftype(state),
                },
            }],
        }),
    )
}

/// The model's `general.file_type` by llama.cpp's name (`Q4_1`, `Q4_K - Medium`).
pub fn model_ftype(state: &State) -> &'static str {
    let file = &state.loaded.model.file;
    file.get_u32("general.file_type")
        .map_or("?", crate::gguf::file_type_name)
}

/// llama.cpp's number for a tokenizer kind (`tokenizer.ggml.model`): 1 SentencePiece, 2 BPE,
/// 3 WordPiece, 4 Unigram, 5 RWKV, 6 PLaMo-2; 0 none.
fn vocab_type(model: Option<&str>) -> u32 {
    match model {
        Some("llama") => 1,
        Some("gpt2") => 2,
        Some("bert") => 3,
        Some("t5") => 4,
        Some("rwkv") => 5,
        Some("plamo2") => 6,
        _ => 0,
    }
}

/// The `messages` array of a chat request: text (a string or text parts), and for an agent's
/// turns the assistant's `tool_calls` (their `arguments` a JSON string, as OpenAI sends them)
/// and a tool's `tool_call_id`.
pub fn parse_messages(o: &Obj) -> Result<Vec<Message>, ApiError> {
    let items = o
        .array("messages")?
        .ok_or_else(|| ApiError::field("messages", "is required"))?;
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let path = format!("messages[{i}]");
        let m = Obj::at(item, &path)?;
        let role = m.required_str("role")?;
        check_shape(&m, role)?;
        let mut msg = Message::new(role, message_text(&m)?);
        msg.tool_calls = history_calls(&m)?;
        msg.tool_call_id = m.str("tool_call_id")?.map(str::to_string);
        msg.name = m.str("name")?.map(str::to_string);
        msg.reasoning_content = m.str("reasoning_content")?.map(str::to_string);
        out.push(msg);
    }
    Ok(out)
}

/// A message has `content` (an assistant's may have `tool_calls` instead), as llama-server
/// requires, in its words.
fn check_shape(m: &Obj, role: &str) -> Result<(), ApiError> {
    let has = |k| m.has(k);
    match role {
        "assistant" if !has("content") && !has("tool_calls") => Err(ApiError::field(
            &m.path_of("content"),
            "Assistant message must contain either 'content' or 'tool_calls'!",
        )),
        "assistant" => Ok(()),
        _ if !has("content") => Err(ApiError::field(
            &m.path_of("content"),
            "All non-assistant messages must contain 'content'",
        )),
        _ => Ok(()),
    }
}

/// A message's `content`: a string, text parts joined, or nothing (an assistant turn that only
/// calls tools).
fn message_text(m: &Obj) -> Result<String, ApiError> {
    let path = m.path_of("content");
    match m.get("content") {
        None => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(parts)) => super::media::content_text(parts, &path),
        Some(other) => Err(ApiError::field(
            &path,
            format!(
                "expected a string or an array of content parts, got {}",
                kind(other)
            ),
        )),
    }
}

/// An assistant message's `tool_calls`, their arguments parsed (templates print them as JSON).
fn history_calls(m: &Obj) -> Result<Vec<ToolCall>, ApiError> {
    let Some(calls) = m.array("tool_calls")? else {
        return Ok(Vec::new());
    };
    let base = m.path_of("tool_calls");
    let mut out = Vec::with_capacity(calls.len());
    for (j, c) in calls.iter().enumerate() {
        let cpath = format!("{base}[{j}]");
        let c = Obj::at(c, &cpath)?;
        if c.get("type").is_some() {
            c.kind_of(&["function"], "calls")?;
        }
        let fpath = c.path_of("function");
        let f = Obj::at(
            c.get("function")
                .ok_or_else(|| ApiError::field(&fpath, "is required"))?,
            &fpath,
        )?;
        let name = f.required_str("name")?;
        let arguments = match f.get("arguments") {
            None => json!({}),
            Some(Value::String(s)) => serde_json::from_str(s).map_err(|e| {
                ApiError::field(&f.path_of("arguments"), format!("is not valid JSON: {e}"))
            })?,
            Some(v @ Value::Object(_)) => v.clone(),
            Some(other) => {
                return Err(ApiError::field(
                    &f.path_of("arguments"),
                    format!("expected a JSON string, got {}", kind(other)),
                ))
            }
        };
        let id = c.str("id")?.unwrap_or_default();
        out.push(ToolCall::function(id, name, arguments));
    }
    Ok(out)
}

/// `chat_template_kwargs`: more variables for the template (`enable_thinking`, ...).
fn template_kwargs(o: &Obj) -> Result<serde_json::Map<String, Value>, ApiError> {
    match o.get("chat_template_kwargs") {
        None => Ok(serde_json::Map::new()),
        Some(Value::Object(m)) => Ok(m.clone()),
        Some(other) => Err(ApiError::field(
            "chat_template_kwargs",
            format!("expected an object, got {}", kind(other)),
        )),
    }
}

/// Fields of OpenAI's that these endpoints read and check only. (`response_format`,
/// penalties, `logit_bias` and `seed` are read with the sampling fields; chat's `tools` by
/// [`Tools::read`].)
fn check_common(o: &Obj) -> Result<(), ApiError> {
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
pub fn gen_params(
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
        media: None,
        lora: None,
        shown: Default::default(),
    };
    generation::read_extras(state, o, stream, &mut p)?;
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

pub fn new_id(prefix: &str) -> String {
    let n = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}-{:016x}{n:x}", crate::sampling::random_seed())
}

/// `POST /v1/chat/completions`.
pub fn chat_completions(state: &State, body: &[u8], rsp: &mut Responder) -> Result<(), ApiError> {
    let v = parse_body(body)?;
    let o = Obj::root(&v);
    check_common(&o)?;
    let n = n_choices(&o)?;
    let stream = o.bool("stream")?.unwrap_or(false);
    let usage_in_stream = include_usage(&o)?;
    let chat = prepare_chat(state, &o, stream, -1)?;
    let verbose = generation::verbose(state, &o)?
        .then(|| NativeShape::new(state, &chat.prompt, &chat.params));
    let shape = ChatShape {
        id: new_id("chatcmpl"),
        created: now(),
        model: state.config.model_name.clone(),
        usage_in_stream,
        reader: chat.reader,
        verbose,
    };
    run_choices(state, rsp, chat.prompt, chat.params, stream, n, shape)
}

/// A chat request ready to run: its prompt tokens, generation settings, and the reader of its
/// reply (thoughts, tool calls).
pub struct PreparedChat {
    pub prompt: Vec<u32>,
    pub params: GenParams,
    pub reader: ReplyReader,
}

/// Reads a chat request in OpenAI's shape (the Anthropic and Responses endpoints convert theirs
/// to it): its messages rendered with the tools, a forced call's grammar, and the sampling
/// settings (`default_max` tokens when it sets no limit).
pub fn prepare_chat(
    state: &State,
    o: &Obj,
    stream: bool,
    default_max: i64,
) -> Result<PreparedChat, ApiError> {
    let mut params = gen_params(state, o, default_max, chat_logprobs(o)?, stream)?;
    let ChatPrompt {
        text,
        tools,
        format,
        think,
        reasoning,
        generation_prompt,
    } = render_chat(state, o, true)?;
    params.shown.chat_format = "peg-native";
    params.shown.reasoning_format = generation::reasoning_name(reasoning);
    params.shown.generation_prompt = generation_prompt;
    if let (Some(t), Some(f)) = (&tools, format) {
        if let Some(g) = t.grammar(f)? {
            let own = ["grammar", "json_schema", "response_format"]
                .into_iter()
                .find(|k| o.get(k).is_some());
            match own {
                // The request's own grammar holds; an `auto` call is read from the text.
                Some(_) if !g.triggers.is_empty() => {}
                Some(k) => {
                    return Err(ApiError::field(
                        "tool_choice",
                        format!("a forced tool call cannot be combined with '{k}'"),
                    ))
                }
                None => {
                    params.sampling.grammar = Some(Arc::new(g.grammar));
                    params.shown.grammar = g.gbnf;
                    params.sampling.grammar_triggers = g.triggers;
                }
            }
        }
    }
    let lazy = !params.sampling.grammar_triggers.is_empty();
    params.sampling.reasoning_budget = thinking_budget(state, o, &text, lazy)?;
    let images = super::media::chat_images(state, o)?;
    let prompt = super::media::prompt_tokens(state, &text, images, &mut params, "messages")?;
    check_prompt(state, &prompt, "messages")?;
    let specs = tools.map(|t| t.specs).unwrap_or_default();
    Ok(PreparedChat {
        prompt,
        params,
        reader: ReplyReader::new(think, format, specs),
    })
}

/// The thinking budget of a reply to `prompt`, where the template thinks: llama-server's
/// `reasoning_budget_tokens` (or `thinking_budget_tokens`; -1 or absent: `--reasoning-budget`)
/// and `reasoning_budget_message`. An unlimited budget is still kept with a lazy tool-call
/// grammar, which must not start inside a thought.
fn thinking_budget(
    state: &State,
    o: &Obj,
    prompt: &str,
    lazy: bool,
) -> Result<Option<BudgetSpec>, ApiError> {
    let asked = match o.int_in("reasoning_budget_tokens", -1..=1 << 30)? {
        Some(n) => Some(n),
        None => o.int_in("thinking_budget_tokens", -1..=1 << 30)?,
    };
    let tokens = match asked {
        None | Some(-1) => state.config.reasoning_budget,
        Some(n) => Some(n as usize),
    };
    if !thinks(state.template.source(), prompt) || (tokens.is_none() && !lazy) {
        return Ok(None);
    }
    let message = match o.str("reasoning_budget_message")? {
        Some(m) => m,
        None => &state.config.reasoning_budget_message,
    };
    let tok = &state.loaded.tokenizer;
    Ok(Some(budget_spec(tok, tokens, message, prompt)))
}

/// Runs a request of another API converted to a chat request (`chat`, in OpenAI's shape),
/// answering in the shape `shape` builds from the prepared request.
pub fn run_converted<S: Shape>(
    state: &State,
    rsp: &mut Responder,
    chat: &Value,
    default_max: i64,
    shape: impl FnOnce(&PreparedChat) -> S,
) -> Result<(), ApiError> {
    let o = Obj::root(chat);
    let stream = o.bool("stream")?.unwrap_or(false);
    let prepared = prepare_chat(state, &o, stream, default_max)?;
    let mut shape = shape(&prepared);
    generation::run(
        state,
        rsp,
        prepared.prompt,
        prepared.params,
        stream,
        &mut shape,
    )
}

/// The tokens of the prompt a converted chat request (`chat`) would be given.
pub fn prompt_tokens(state: &State, chat: &Value) -> Result<usize, ApiError> {
    let text = chat_prompt(state, &Obj::root(chat))?.text;
    Ok(state.loaded.tokenizer.encode(&text, true, true).len())
}

/// A chat request's prompt text, with the tools the model was shown and the format its calls
/// are read in (`None` without tools, with `tool_choice: "none"` or `--skip-chat-parsing`).
pub struct ChatPrompt {
    pub text: String,
    pub tools: Option<Tools>,
    pub format: Option<Format>,
    /// How the reply's thoughts are split off.
    pub think: ThinkSplitter,
    /// Where the reply's thoughts go.
    pub reasoning: ReasoningFormat,
    /// The text the template adds to open the assistant's turn (llama-server's
    /// `generation_prompt`; only when asked for).
    pub generation_prompt: String,
}

/// Renders a chat request (`messages`, `tools`, `tool_choice`, `chat_template_kwargs`) with the
/// model's template.
pub fn chat_prompt(state: &State, o: &Obj) -> Result<ChatPrompt, ApiError> {
    render_chat(state, o, false)
}

/// [`chat_prompt`], with the template's `generation_prompt` when `opening` (one more rendering).
fn render_chat(state: &State, o: &Obj, opening: bool) -> Result<ChatPrompt, ApiError> {
    let config = &state.config;
    let messages = parse_messages(o)?;
    // As llama.cpp: with `tool_choice: "none"` the template still shows the tools, and the
    // reply is not read for calls.
    let tools = Tools::read(o)?;
    let format = tools
        .as_ref()
        .filter(|t| t.choice != Choice::None && !config.skip_chat_parsing)
        .map(|_| Format::detect(state.template.source()));
    let mut kwargs = template_kwargs(o)?;
    for (name, value) in &config.template_kwargs {
        kwargs.entry(name.as_str()).or_insert_with(|| value.clone());
    }
    let options = RenderOptions {
        add_generation_prompt: true,
        tools: tools.as_ref().map(|t| t.json.clone()),
        kwargs,
    };
    let ending = continuation::ending(o, &messages, config.prefill_assistant)?;
    let text = continuation::render(&state.template, &messages, &options, ending)?;
    let generation_prompt = match opening {
        false => String::new(),
        true => {
            let opened = (ending
                == continuation::Ending::Template {
                    generation_prompt: true,
                })
            .then_some(text.as_str());
            continuation::opening(&state.template, &messages, &options, opened)?
        }
    };
    let reasoning = match o.str("reasoning_format")? {
        None => config.reasoning_format,
        Some(_) if config.skip_chat_parsing => ReasoningFormat::None,
        Some(name) => ReasoningFormat::parse(name).ok_or_else(|| {
            ApiError::field(
                "reasoning_format",
                format!("'{name}' is not one of none, deepseek, deepseek-legacy, auto"),
            )
        })?,
    };
    let think = ThinkSplitter::new(reasoning, opens_thinking(&text));
    Ok(ChatPrompt {
        text,
        tools,
        format,
        think,
        reasoning,
        generation_prompt,
    })
}

#[derive(Clone)]
struct ChatShape {
    id: String,
    created: u64,
    model: String,
    usage_in_stream: bool,
    /// The reply as it streams: content, and tool calls held back until they are whole.
    reader: ReplyReader,
    /// llama-server's `__verbose`: the native result, when asked for.
    verbose: Option<NativeShape>,
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

    fn chunks(&mut self, text: &str, _tokens: &[u32], probs: &[Value]) -> Vec<Value> {
        let split = self.reader.push(text);
        if split == Split::default() && probs.is_empty() {
            return Vec::new();
        }
        vec![self.chunk_with_probs(delta(&split), None, probs)]
    }

    fn progress(&mut self) -> Value {
        self.chunk_with(json!({ "role": "assistant", "content": null }), None)
    }

    fn closing(&mut self, s: &Summary) -> Vec<Value> {
        let (done, rest) = self.reader.finish();
        let reply = done.reply;
        let mut out = Vec::new();
        if rest != Split::default() {
            out.push(self.chunk_with(delta(&rest), None));
        }
        // Each call: its id and name first, then its arguments, as OpenAI streams them.
        for (i, call) in reply.tool_calls.iter().enumerate() {
            let head = json!({"tool_calls": [{
                "index": i,
                "id": call_id(&call.id),
                "type": "function",
                "function": { "name": call.function.name, "arguments": "" },
            }]});
            out.push(self.chunk_with(head, None));
            let args = json!({"tool_calls": [{
                "index": i,
                "function": { "arguments": call.function.arguments.to_string() },
            }]});
            out.push(self.chunk_with(args, None));
        }
        out.push(self.chunk_with(json!({}), Some(finish_reason(s, &reply))));
        // As llama-server: on the first of the closing events.
        if let Some(native) = self.verbose.as_mut() {
            out[0]["__verbose"] = native.closing(s).swap_remove(0);
        }
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
        // As llama-server: the timings on the last event (the usage one, when asked for).
        if let Some(last) = out.last_mut() {
            last["timings"] = timings(&s.stats);
        }
        out
    }

    fn whole(&mut self, text: &str, tokens: &[u32], probs: &[Value], s: &Summary) -> Value {
        let mut reader = self.reader.clone();
        reader.push(text);
        let (done, _) = reader.finish();
        let reply = done.reply;
        let mut message = json!({ "role": "assistant", "content": reply.content });
        if !done.reasoning.is_empty() {
            message["reasoning_content"] = done.reasoning.into();
        }
        if !reply.tool_calls.is_empty() {
            if reply.content.is_empty() {
                message["content"] = Value::Null;
            }
            let calls: Vec<Value> = reply
                .tool_calls
                .iter()
                .map(|c| {
                    json!({
                        "id": call_id(&c.id),
                        "type": "function",
                        "function": {
                            "name": c.function.name,
                            "arguments": c.function.arguments.to_string(),
                        },
                    })
                })
                .collect();
            message["tool_calls"] = Value::Array(calls);
        }
        let mut v = json!({
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": FINGERPRINT,
            "choices": [{
                "index": 0,
                "message": message,
                "logprobs": chat_probs(probs),
                "finish_reason": finish_reason(s, &reply),
            }],
            "usage": usage(&s.stats),
            "timings": timings(&s.stats),
        });
        if let Some(native) = self.verbose.as_mut() {
            v["__verbose"] = native.whole(text, tokens, probs, s);
        }
        v
    }

    fn done_marker(&self) -> bool {
        true
    }
}

/// A stream delta of thoughts and content (only the parts that have text).
fn delta(split: &Split) -> Value {
    let mut d = json!({});
    if !split.reasoning.is_empty() {
        d["reasoning_content"] = split.reasoning.clone().into();
    }
    if !split.content.is_empty() || split.reasoning.is_empty() {
        d["content"] = split.content.clone().into();
    }
    d
}

/// OpenAI's `finish_reason`: `tool_calls` when the reply made calls and was not cut short.
fn finish_reason(s: &Summary, reply: &Reply) -> &'static str {
    match s.finish.openai() {
        "stop" if !reply.tool_calls.is_empty() => "tool_calls",
        other => other,
    }
}

/// A call's id: the one its format carried, or a fresh one.
pub fn call_id(given: &str) -> String {
    if given.is_empty() {
        let n = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        format!("call_{:016x}{n:x}", crate::sampling::random_seed())
    } else {
        given.to_string()
    }
}

/// `POST /v1/completions`.
pub fn completions(state: &State, body: &[u8], rsp: &mut Responder) -> Result<(), ApiError> {
    let v = parse_body(body)?;
    let o = Obj::root(&v);
    check_common(&o)?;
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
    let verbose =
        generation::verbose(state, &o)?.then(|| NativeShape::new(state, &prompt, &params));
    let shape = CompletionShape {
        id: new_id("cmpl"),
        created: now(),
        model: state.config.model_name.clone(),
        usage_in_stream,
        offset: 0,
        verbose,
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
    /// llama-server's `__verbose`: the native result (or event), when asked for.
    verbose: Option<NativeShape>,
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
    fn chunk(&mut self, text: &str, tokens: &[u32], probs: &[Value]) -> Value {
        let lp = self.legacy_probs(probs);
        let mut v = self
            .object(json!([{ "index": 0, "text": text, "logprobs": lp, "finish_reason": null }]));
        if let Some(native) = self.verbose.as_mut() {
            v["__verbose"] = native.chunk(text, tokens, probs);
        }
        v
    }

    fn closing(&mut self, s: &Summary) -> Vec<Value> {
        let mut last = self.object(
            json!([{ "index": 0, "text": "", "logprobs": null, "finish_reason": s.finish.openai() }]),
        );
        if let Some(native) = self.verbose.as_mut() {
            last["__verbose"] = native.closing(s).swap_remove(0);
        }
        last["timings"] = timings(&s.stats);
        let mut out = vec![last];
        if self.usage_in_stream {
            let mut u = self.object(json!([]));
            u["usage"] = usage(&s.stats);
            out.push(u);
        }
        out
    }

    fn whole(&mut self, text: &str, tokens: &[u32], probs: &[Value], s: &Summary) -> Value {
        let lp = self.legacy_probs(probs);
        let mut v = self.object(
            json!([{ "index": 0, "text": text, "logprobs": lp, "finish_reason": s.finish.openai() }]),
        );
        v["usage"] = usage(&s.stats);
        if let Some(native) = self.verbose.as_mut() {
            v["__verbose"] = native.whole(text, tokens, probs, s);
        }
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
