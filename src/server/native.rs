//! llama.cpp's own endpoints, with its field names: `POST /completion`, `/tokenize`,
//! `/detokenize`, `/apply-template`, and `GET /health`, `/props`, `/slots`.

use super::choices::{self, Layout, Runs};
use super::error::ApiError;
use super::generation::{self, check_prompt, sampling_params, timings, Shape};
use super::json::{kind, parse_body, Obj};
use super::protocol::FinishNames;
use super::protocol::{GenParams, Summary};
use super::response::{Responder, Response};
use super::State;
use crate::engine::media::MediaPrompt;
use crate::tokenizer::DetokenizeOptions;
use serde_json::{json, Value};
use std::sync::Arc;

/// `GET /health`: 200 `{"status": "ok"}`, or, once the model's backend has failed (an RPC
/// worker gone), the 503 every request gets, naming the failure (llama-server answers 503 the
/// same way while it loads).
pub fn health(state: &State) -> Response {
    match state.scheduler.failure() {
        Some(e) => e.response(),
        None => Response::json(200, &json!({ "status": "ok" })),
    }
}

/// Token ids from a JSON array, each checked against the vocabulary.
pub fn token_array(state: &State, items: &[Value], field: &str) -> Result<Vec<u32>, ApiError> {
    let n_vocab = state.loaded.model.config.n_vocab;
    items
        .iter()
        .enumerate()
        .map(|(i, v)| token_id(v, n_vocab, &format!("{field}[{i}]")))
        .collect()
}

/// One token id of a request, checked against the vocabulary; `path` names its field.
pub(super) fn token_id(v: &Value, n_vocab: usize, path: &str) -> Result<u32, ApiError> {
    match v.as_u64() {
        Some(id) if (id as usize) < n_vocab => Ok(id as u32),
        Some(id) => Err(ApiError::field(
            path,
            format!("token id {id} is outside the vocabulary of {n_vocab} tokens"),
        )),
        None => Err(ApiError::field(
            path,
            format!(
                "expected a token id (a non-negative integer), got {}",
                kind(v)
            ),
        )),
    }
}

/// llama.cpp's `prompt` as llama-server splits it: an array holding no token id is a list of
/// prompts (each one as [`native_prompt`] reads it), anything else one prompt.
pub(super) fn prompt_list(state: &State, v: Option<&Value>) -> Result<Vec<Vec<u32>>, ApiError> {
    match v {
        Some(Value::Array(items)) if !items.iter().any(Value::is_number) => {
            if items.is_empty() {
                return Err(ApiError::field("prompt", "must not be empty"));
            }
            items
                .iter()
                .enumerate()
                .map(|(i, p)| {
                    native_prompt(state, Some(p)).map_err(|e| moved(e, &format!("prompt[{i}]")))
                })
                .collect()
        }
        v => Ok(vec![native_prompt(state, v)?]),
    }
}

/// Error `e` about a field under `prompt`, for a prompt found at `path` instead.
fn moved(mut e: ApiError, path: &str) -> ApiError {
    if let Some(old) = e.param.take() {
        match old.strip_prefix("prompt") {
            Some(rest) => {
                let new = format!("{path}{rest}");
                if let Some(tail) = e.message.strip_prefix(old.as_str()) {
                    e.message = format!("{new}{tail}");
                }
                e.param = Some(new);
            }
            None => e.param = Some(old),
        }
    }
    e
}

/// llama.cpp's `prompt`: a string, token ids, or a mix of both; or an object with the text in
/// `prompt_string` (and pictures in `multimodal_data`, which need a projector).
pub(super) fn native_prompt(state: &State, v: Option<&Value>) -> Result<Vec<u32>, ApiError> {
    let tok = &state.loaded.tokenizer;
    let n_vocab = state.loaded.model.config.n_vocab;
    match v {
        None => Err(ApiError::field("prompt", "is required")),
        Some(Value::String(s)) => Ok(tok.encode(s, true, true)),
        Some(Value::Array(items)) => {
            let mut out = Vec::new();
            for (i, item) in items.iter().enumerate() {
                match item {
                    Value::String(s) => out.extend(tok.encode(s, i == 0, true)),
                    other => out.push(token_id(other, n_vocab, &format!("prompt[{i}]"))?),
                }
            }
            Ok(out)
        }
        Some(Value::Object(map)) => {
            if map.contains_key("multimodal_data") {
                return Err(ApiError::field(
                    "prompt.multimodal_data",
                    "Multimodal data provided, but model does not support multimodal requests.",
                ));
            }
            match map.get("prompt_string") {
                Some(p @ (Value::String(_) | Value::Array(_))) => {
                    native_prompt(state, Some(p)).map_err(|e| moved(e, "prompt.prompt_string"))
                }
                _ => Err(ApiError::field(
                    "prompt.prompt_string",
                    "is required (a string, or token ids and text)",
                )),
            }
        }
        Some(other) => Err(ApiError::field(
            "prompt",
            format!(
                "expected a string, an array of strings and token ids, or an object with \
                 prompt_string, got {}",
                kind(other)
            ),
        )),
    }
}

/// `POST /completion`.
pub fn completion(state: &State, body: &[u8], rsp: &mut Responder) -> Result<(), ApiError> {
    let v = parse_body(body)?;
    let o = Obj::root(&v);
    // A prompt object with `multimodal_data`: its text and images (src/server/media.rs).
    let (prompts, media) = match super::media::completion_prompt(state, o.get("prompt"))? {
        Some((tokens, media)) => (vec![tokens], Some(media)),
        None => (prompt_list(state, o.get("prompt"))?, None),
    };
    complete_all(state, &o, prompts, "prompt", rsp, media)
}

/// `/completion` of request `o` with its prompt already made (`/infill` builds its own);
/// `field` names where the prompt came from.
pub(super) fn complete(
    state: &State,
    o: &Obj,
    prompt: Vec<u32>,
    field: &str,
    rsp: &mut Responder,
) -> Result<(), ApiError> {
    complete_all(state, o, vec![prompt], field, rsp, None)
}

/// `/completion` of request `o` for each of `prompts`: one result, or (several prompts) an
/// array of them, each with its `index`.
fn complete_all(
    state: &State,
    o: &Obj,
    prompts: Vec<Vec<u32>>,
    field: &str,
    rsp: &mut Responder,
    media: Option<Arc<MediaPrompt>>,
) -> Result<(), ApiError> {
    let sampling = sampling_params(o, state)?;
    let params = GenParams {
        n_predict: generation::bounded_n_predict(
            o.int_in("n_predict", -1..=1 << 30)?.unwrap_or(-1),
            state.config.n_predict,
        ),
        stop: o.stop("stop")?,
        cache_prompt: o.bool("cache_prompt")?.unwrap_or(state.config.cache_prompt),
        ignore_eos: o.bool("ignore_eos")?.unwrap_or(false),
        n_keep: o.int_in("n_keep", -1..=i64::from(u32::MAX))?,
        n_probs: generation::n_probs(o, Some("logprobs"))?,
        sampling,
        post_sampling_probs: false,
        timings_per_token: false,
        return_progress: false,
        media,
        lora: None,
        shown: Default::default(),
    };
    let stream = o.bool("stream")?.unwrap_or(false);
    let mut params = params;
    generation::read_extras(state, o, stream, &mut params)?;
    let return_tokens = o.bool("return_tokens")?.unwrap_or(false);
    let response_fields = match o.array("response_fields")? {
        None => Vec::new(),
        Some(items) => items
            .iter()
            .enumerate()
            .map(|(i, v)| match v {
                Value::String(s) => Ok(s.clone()),
                other => Err(ApiError::field(
                    &format!("response_fields[{i}]"),
                    format!("expected a string, got {}", kind(other)),
                )),
            })
            .collect::<Result<_, _>>()?,
    };
    let several = prompts.len() > 1;
    for (i, prompt) in prompts.iter().enumerate() {
        match several {
            true => check_prompt(state, prompt, &format!("{field}[{i}]"))?,
            false => check_prompt(state, prompt, field)?,
        }
    }
    let mut shapes: Vec<NativeShape> = prompts
        .iter()
        .map(|p| {
            let mut shape = NativeShape::new(state, p, &params);
            shape.return_tokens = return_tokens;
            shape.response_fields = response_fields.clone();
            shape
        })
        .collect();
    if !several {
        let prompt = prompts.into_iter().next().unwrap_or_default();
        return generation::run(state, rsp, prompt, params, stream, &mut shapes[0]);
    }
    let runs = Runs {
        prompts,
        shapes,
        vary_seed: false,
        layout: Layout::List,
    };
    choices::run_all(state, rsp, runs, params, stream)
}

/// A request's settings as llama-server shows them, in its order: all of them in a result's
/// `generation_settings` (`full`), the shorter list of `/slots` and `/props` otherwise.
/// `speculative` names the draft sources (llama-server's `speculative.types`).
pub(super) fn settings(p: &GenParams, speculative: &str, full: bool) -> Value {
    let s = &p.sampling;
    let lora: Vec<Value> = (p.shown.lora.iter())
        .map(|(id, scale)| json!({ "id": id, "scale": scale }))
        .collect();
    let mut v = json!({
        "seed": s.seed,
        "temperature": s.temperature,
        "dynatemp_range": s.dynatemp_range,
        "dynatemp_exponent": s.dynatemp_exponent,
        "top_k": s.top_k,
        "top_p": s.top_p,
        "min_p": s.min_p,
        "top_n_sigma": s.top_n_sigma,
        "xtc_probability": s.xtc_probability,
        "xtc_threshold": s.xtc_threshold,
        "typical_p": s.typical_p,
        "repeat_last_n": s.repeat_last_n,
        "repeat_penalty": s.repeat_penalty,
        "presence_penalty": s.presence_penalty,
        "frequency_penalty": s.frequency_penalty,
        "dry_multiplier": s.dry_multiplier,
        "dry_base": s.dry_base,
        "dry_allowed_length": s.dry_allowed_length,
        "dry_penalty_last_n": s.dry_penalty_last_n,
    });
    let o = v.as_object_mut().expect("an object");
    let mut put = |k: &str, x: Value| {
        o.insert(k.to_string(), x);
    };
    if full {
        put("dry_sequence_breakers", json!(s.dry_sequence_breakers));
    }
    put("mirostat", json!(s.mirostat));
    put("mirostat_tau", json!(s.mirostat_tau));
    put("mirostat_eta", json!(s.mirostat_eta));
    // The adaptive-p sampler is not built: these are its "off" settings.
    put("adaptive_target", json!(-1.0f32));
    put("adaptive_decay", json!(0.9f32));
    if full {
        put("stop", json!(p.stop));
    }
    put("max_tokens", json!(p.n_predict));
    put("n_predict", json!(p.n_predict));
    put("n_keep", json!(p.n_keep.unwrap_or(0)));
    put("n_discard", json!(0));
    put("ignore_eos", json!(p.ignore_eos));
    put("stream", json!(p.shown.stream));
    if full {
        let bias: Vec<Value> = (s.logit_bias.iter())
            .map(|&(token, bias)| json!({ "bias": bias, "token": token }))
            .collect();
        put("logit_bias", Value::from(bias));
    }
    put("n_probs", json!(p.n_probs.unwrap_or(0)));
    put("min_keep", json!(0));
    if full {
        let triggers: Vec<Value> = (s.grammar_triggers.iter())
            .map(|w| json!({ "type": 1, "value": w }))
            .collect();
        put("grammar", json!(p.shown.grammar));
        put("grammar_lazy", json!(!s.grammar_triggers.is_empty()));
        put("grammar_triggers", Value::from(triggers));
        put("preserved_tokens", json!([]));
    }
    put("chat_format", json!(p.shown.chat_format));
    put("reasoning_format", json!(p.shown.reasoning_format));
    put("reasoning_in_content", json!(false));
    put("generation_prompt", json!(p.shown.generation_prompt));
    let samplers: Vec<&str> = s.samplers.iter().map(|k| k.name()).collect();
    put("samplers", json!(samplers));
    put("speculative.types", json!(speculative));
    put("timings_per_token", json!(p.timings_per_token));
    put("post_sampling_probs", json!(p.post_sampling_probs));
    put("backend_sampling", json!(false));
    put("lora", Value::from(lora));
    v
}

/// llama-server's `speculative.types` for the server's draft sources: their names joined by
/// commas, `none` without any (ours, `early-exit` and `moe-draft`, by our flag names).
pub(super) fn speculative_types(state: &State) -> String {
    use crate::engine::speculative::setup::{spec_types, SpecType};
    let types = spec_types(&state.config.spec).unwrap_or_default();
    let names: Vec<&str> = types
        .iter()
        .map(|t| match t {
            SpecType::NgramSimple => "ngram-simple",
            SpecType::NgramMapK => "ngram-map-k",
            SpecType::NgramMapK4v => "ngram-map-k4v",
            SpecType::NgramMod => "ngram-mod",
            SpecType::NgramCache => "ngram-cache",
            SpecType::Draft => "draft-simple",
            SpecType::EarlyExit => "early-exit",
            SpecType::MoeDraft => "moe-draft",
        })
        .collect();
    if names.is_empty() {
        "none".to_string()
    } else {
        names.join(",")
    }
}

/// The shape of `/completion`'s answers, also what llama-server puts under `__verbose` in the
/// OpenAI endpoints' answers when asked.
#[derive(Clone)]
pub(super) struct NativeShape {
    model: String,
    return_tokens: bool,
    settings: Value,
    /// The prompt's text, special tokens written out.
    prompt: String,
    n_prompt: usize,
    /// Tokens streamed so far.
    n_decoded: usize,
    /// llama-server's `response_fields`: the final result shows only these (none: all).
    response_fields: Vec<String>,
}

impl NativeShape {
    /// The shape of a request for `prompt` with `params`: tokens not returned, every field.
    pub(super) fn new(state: &State, prompt: &[u32], params: &GenParams) -> NativeShape {
        let text = state.loaded.tokenizer.detokenize(
            prompt,
            DetokenizeOptions {
                remove_special: false,
                render_special: true,
            },
        );
        NativeShape {
            model: state.config.model_name.clone(),
            return_tokens: false,
            settings: settings(params, &speculative_types(state), true),
            prompt: String::from_utf8_lossy(&text).into_owned(),
            n_prompt: prompt.len(),
            n_decoded: 0,
            response_fields: Vec::new(),
        }
    }

    fn final_fields(&self, content: &str, tokens: &[u32], probs: &[Value], s: &Summary) -> Value {
        let stopping_word = match &s.finish {
            crate::engine::StopReason::StopWord(w) => w.as_str(),
            _ => "",
        };
        let mut v = json!({
            "index": 0,
            "content": content,
            "tokens": if self.return_tokens { tokens.to_vec() } else { Vec::new() },
            "id_slot": s.slot,
            "stop": true,
            "model": self.model,
            "tokens_predicted": s.stats.n_predicted,
            "tokens_evaluated": s.stats.n_prompt,
            "tokens_cached": s.n_tokens_cached,
            "generation_settings": self.settings,
            "prompt": self.prompt,
            "has_new_line": content.contains('\n'),
            "truncated": false,
            "stop_type": s.finish.stop_type(),
            "stopping_word": stopping_word,
            "timings": timings(&s.stats),
        });
        if !probs.is_empty() {
            v["completion_probabilities"] = Value::from(probs.to_vec());
        }
        if self.response_fields.is_empty() {
            v
        } else {
            pick_fields(&v, &self.response_fields)
        }
    }
}

/// llama-server's `response_fields`: only the fields named, each by its path (`a/b` inside
/// `a`) as its key; a path that leads nowhere is left out.
fn pick_fields(v: &Value, paths: &[String]) -> Value {
    let mut out = serde_json::Map::new();
    for path in paths {
        let found = path
            .split('/')
            .try_fold(v, |cur, key| cur.as_object().and_then(|o| o.get(key)));
        if let Some(found) = found {
            out.insert(path.clone(), found.clone());
        }
    }
    Value::Object(out)
}

impl Shape for NativeShape {
    fn chunk(&mut self, text: &str, tokens: &[u32], probs: &[Value]) -> Value {
        // As llama-server's partial results: the tokens always, and the counts so far.
        self.n_decoded += tokens.len();
        let mut v = json!({
            "index": 0,
            "content": text,
            "tokens": tokens,
            "stop": false,
            "id_slot": -1,
            "tokens_predicted": self.n_decoded,
            "tokens_evaluated": self.n_prompt,
        });
        if !probs.is_empty() {
            v["completion_probabilities"] = Value::from(probs.to_vec());
        }
        v
    }

    fn closing(&mut self, s: &Summary) -> Vec<Value> {
        vec![self.final_fields("", &[], &[], s)]
    }

    fn whole(&mut self, text: &str, tokens: &[u32], probs: &[Value], s: &Summary) -> Value {
        self.final_fields(text, tokens, probs, s)
    }

    fn done_marker(&self) -> bool {
        false
    }
}

/// `POST /tokenize`.
pub fn tokenize(state: &State, body: &[u8]) -> Result<Response, ApiError> {
    let v = parse_body(body)?;
    let o = Obj::root(&v);
    let content = o
        .str("content")?
        .ok_or_else(|| ApiError::field("content", "is required"))?;
    let add_special = o.bool("add_special")?.unwrap_or(false);
    let parse_special = o.bool("parse_special")?.unwrap_or(true);
    let with_pieces = o.bool("with_pieces")?.unwrap_or(false);
    let tok = &state.loaded.tokenizer;
    let ids = tok.encode(content, add_special, parse_special);
    let tokens: Value = if with_pieces {
        ids.iter()
            .map(|&id| {
                let bytes = tok.token_to_piece(id, true);
                let piece = match std::str::from_utf8(bytes) {
                    Ok(s) => Value::from(s),
                    Err(_) => Value::from(bytes.to_vec()),
                };
                json!({ "id": id, "piece": piece })
            })
            .collect()
    } else {
        Value::from(ids)
    };
    Ok(Response::json(200, &json!({ "tokens": tokens })))
}

/// `POST /detokenize`.
pub fn detokenize(state: &State, body: &[u8]) -> Result<Response, ApiError> {
    let v = parse_body(body)?;
    let o = Obj::root(&v);
    let items = o
        .array("tokens")?
        .ok_or_else(|| ApiError::field("tokens", "is required"))?;
    let ids = token_array(state, items, "tokens")?;
    let bytes = state.loaded.tokenizer.detokenize(
        &ids,
        DetokenizeOptions {
            remove_special: false,
            render_special: true,
        },
    );
    let content = String::from_utf8_lossy(&bytes);
    Ok(Response::json(200, &json!({ "content": content })))
}

/// `POST /apply-template`: the prompt a chat request would be given.
pub fn apply_template(state: &State, body: &[u8]) -> Result<Response, ApiError> {
    let v = parse_body(body)?;
    let o = Obj::root(&v);
    let prompt = super::openai::chat_prompt(state, &o)?.text;
    Ok(Response::json(200, &json!({ "prompt": prompt })))
}

/// `GET /props`.
pub fn props(state: &State) -> Response {
    let tok = &state.loaded.tokenizer;
    let text = |id: Option<u32>| {
        id.map(|id| String::from_utf8_lossy(tok.token_to_piece(id, true)).into_owned())
            .unwrap_or_default()
    };
    let defaults = default_params(state);
    let n_ctx = state.scheduler.options.n_ctx_slot;
    Response::json(
        200,
        &json!({
            "default_generation_settings": {
                "params": settings(&defaults, &speculative_types(state), false),
                "n_ctx": n_ctx,
            },
            "total_slots": state.scheduler.options.n_slots,
            "model_alias": state.config.model_name,
            "model_ftype": super::openai::model_ftype(state),
            "model_path": state.config.model_path,
            "modalities": super::media::modalities(state),
            "media_marker": crate::engine::media::MEDIA_MARKER,
            "endpoint_slots": state.config.slots_endpoint,
            "endpoint_props": state.config.props_writable,
            "endpoint_metrics": state.config.metrics_endpoint,
            "ui": state.config.webui,
            "ui_settings": {},
            "chat_template": state.template.source(),
            "chat_template_caps": state.template.caps().to_json(),
            "bos_token": text(tok.bos()),
            "eos_token": text(tok.eos()),
            "build_info": concat!("llamafile-rs ", env!("CARGO_PKG_VERSION")),
            "is_sleeping": false,
            "cors_proxy_enabled": false,
        }),
    )
}

/// `POST /props` (with `--props`): llama-server documents no writable property yet, so a
/// JSON object is accepted and nothing changes.
pub fn set_props(state: &State, body: &[u8]) -> Result<Response, ApiError> {
    if !state.config.props_writable {
        return Err(ApiError::new(
            501,
            "not_supported_error",
            "this server does not change properties: start it with --props",
        ));
    }
    parse_body(body)?;
    Ok(Response::json(200, &json!({ "success": true })))
}

/// The seed llama-server shows for "a random seed each request" (`-s -1`): its
/// `LLAMA_DEFAULT_SEED`, 0xFFFFFFFF.
const RANDOM_SEED_SHOWN: u64 = u32::MAX as u64;

/// The generation settings of a request that sets none.
fn default_params(state: &State) -> GenParams {
    let mut sampling = state.config.sampling.clone();
    if state.config.seed_random {
        sampling.seed = RANDOM_SEED_SHOWN;
    }
    GenParams {
        sampling,
        n_predict: state.config.n_predict,
        stop: Vec::new(),
        cache_prompt: state.config.cache_prompt,
        ignore_eos: false,
        n_probs: None,
        n_keep: Some(state.config.n_keep),
        post_sampling_probs: false,
        timings_per_token: false,
        return_progress: false,
        media: None,
        lora: None,
        shown: super::protocol::Shown::default(),
    }
}

/// `GET /slots`, as llama-server shows its slots: each one's `id`, `n_ctx`, `speculative` and
/// `is_processing` (and ours, `n_cached_tokens`), and once it has served a request, that
/// request's (or the one in progress) `id_task`, token counts (`n_prompt_tokens`: the tokens in
/// the slot's cache), settings (`params`) and `next_token`; with `?fail_on_no_slot=1`, 503 when
/// no slot is idle.
pub fn slots(state: &State, query: &str) -> Result<Response, ApiError> {
    let slots = state.scheduler.slots();
    let fail_on_no_slot = query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .any(|(k, v)| k == "fail_on_no_slot" && v != "0" && v != "false");
    if fail_on_no_slot && slots.iter().all(|s| s.is_processing) {
        return Err(ApiError::unavailable("no slot available"));
    }
    let list: Vec<Value> = slots
        .iter()
        .map(|s| {
            let mut v = json!({
                "id": s.id,
                "n_ctx": s.n_ctx,
                "speculative": s.speculative,
                "is_processing": s.is_processing,
                // Ours: the tokens in the slot's cache (a restored slot file's too).
                "n_cached_tokens": s.n_cached_tokens,
            });
            if let Some(params) = &s.params {
                v["id_task"] = json!(s.id_task);
                v["n_prompt_tokens"] = json!(s.n_prompt_tokens);
                v["n_prompt_tokens_processed"] = json!(s.n_prompt_tokens_processed);
                v["n_prompt_tokens_cache"] = json!(s.n_prompt_tokens_cache);
                v["params"] = settings(params, &speculative_types(state), false);
                v["next_token"] = json!([s.next_token]);
            }
            v
        })
        .collect();
    Ok(Response::json(200, &Value::Array(list)))
}
