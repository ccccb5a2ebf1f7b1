//! Running one generation request for a handler: the request's sampling fields read with their
//! types checked, the prompt checked against a slot's context, the job submitted to the
//! scheduler, and its events written out, either as a Server-Sent Event stream or as one JSON
//! body. While it waits, it watches the client: if the client goes away, dropping the job's
//! handle cancels it and frees the slot.

use super::error::ApiError;
use super::json::kind;
use super::json::Obj;
use super::protocol::{Event, GenParams, Progress, Stats, Summary};
use super::response::{Responder, Response};
use super::sse::SseStream;
use super::State;
use crate::chat::reasoning::ReasoningFormat;
use crate::sampling::grammar::{json_schema, JSON_OBJECT_GBNF};
use crate::sampling::logprobs::StepLogprobs;
use crate::sampling::{random_seed, resolve_seed, Grammar, SamplerKind, SamplingParams};
use crate::tokenizer::Tokenizer;
use serde_json::{json, Value};
use std::sync::mpsc::RecvTimeoutError;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How an endpoint shapes its output.
pub trait Shape {
    /// Stream events before any text (chat: the assistant role).
    fn opening(&mut self) -> Vec<Value> {
        Vec::new()
    }
    /// One stream event for new text.
    /// `probs` holds one [`prob_json`] entry per token when log-probabilities were asked for.
    fn chunk(&mut self, text: &str, tokens: &[u32], probs: &[Value]) -> Value;
    /// The stream events for new text: [`Shape::chunk`]'s one, unless the shape holds text back
    /// (a chat reply's tool call) or lets several events out.
    fn chunks(&mut self, text: &str, tokens: &[u32], probs: &[Value]) -> Vec<Value> {
        vec![self.chunk(text, tokens, probs)]
    }
    /// A stream event for prompt progress (llama-server's `return_progress`); the caller adds
    /// `prompt_progress`.
    fn progress(&mut self) -> Value {
        self.chunk("", &[], &[])
    }
    /// The last stream events.
    fn closing(&mut self, summary: &Summary) -> Vec<Value>;
    /// The body of a non-streamed response.
    fn whole(&mut self, text: &str, tokens: &[u32], probs: &[Value], summary: &Summary) -> Value;
    /// Whether the stream ends with `data: [DONE]` (OpenAI endpoints).
    fn done_marker(&self) -> bool;
    /// Whether each stream event is named after its `type` field (`event: <type>`, as
    /// Anthropic's streams are).
    fn named_events(&self) -> bool {
        false
    }
}

/// Sends one stream event of `shape`'s.
fn send_event(s: &mut SseStream, shape: &dyn Shape, ev: &Value) -> std::io::Result<()> {
    if shape.named_events() {
        s.named(ev["type"].as_str().unwrap_or("message"), ev)
    } else {
        s.json(ev)
    }
}

/// Sampling fields shared by every generation endpoint, llama.cpp's names, defaulting to the
/// command line's settings; OpenAI's `logit_bias`, `frequency_penalty`, `presence_penalty` and
/// `response_format` too. A grammar comes from `grammar`, `json_schema` or `response_format`.
pub fn sampling_params(o: &Obj, state: &State) -> Result<SamplingParams, ApiError> {
    let config = &state.config;
    let defaults = &config.sampling;
    let mut p = defaults.clone();
    if let Some(t) = o.f32_in("temperature", 0.0..=100.0)? {
        p.temperature = t;
    }
    if let Some(k) = o.int_in("top_k", -1..=i32::MAX as i64)? {
        p.top_k = k as i32;
    }
    for (key, field) in [
        ("top_p", &mut p.top_p),
        ("min_p", &mut p.min_p),
        ("typical_p", &mut p.typical_p),
        ("xtc_probability", &mut p.xtc_probability),
        ("xtc_threshold", &mut p.xtc_threshold),
    ] {
        if let Some(v) = o.f32_in(key, 0.0..=1.0)? {
            *field = v;
        }
    }
    for (key, field) in [
        ("repeat_penalty", &mut p.repeat_penalty),
        ("dynatemp_range", &mut p.dynatemp_range),
        ("dynatemp_exponent", &mut p.dynatemp_exponent),
        ("dry_multiplier", &mut p.dry_multiplier),
        ("dry_base", &mut p.dry_base),
        ("mirostat_tau", &mut p.mirostat_tau),
        ("mirostat_eta", &mut p.mirostat_eta),
    ] {
        if let Some(v) = o.f32_in(key, 0.0..=100.0)? {
            *field = v;
        }
    }
    if let Some(v) = o.f32_in("top_n_sigma", -1.0..=100.0)? {
        p.top_n_sigma = v;
    }
    for (key, field) in [
        ("presence_penalty", &mut p.presence_penalty),
        ("frequency_penalty", &mut p.frequency_penalty),
    ] {
        if let Some(v) = o.f32_in(key, -2.0..=2.0)? {
            *field = v;
        }
    }
    for (key, field) in [
        ("repeat_last_n", &mut p.repeat_last_n),
        ("dry_penalty_last_n", &mut p.dry_penalty_last_n),
    ] {
        if let Some(v) = o.int_in(key, -1..=i32::MAX as i64)? {
            *field = v as i32;
        }
    }
    if let Some(v) = o.int_in("dry_allowed_length", 0..=1 << 20)? {
        p.dry_allowed_length = v as usize;
    }
    if let Some(v) = o.int_in("mirostat", 0..=2)? {
        p.mirostat = v as u8;
    }
    if let Some(items) = o.array("dry_sequence_breakers")? {
        p.dry_sequence_breakers = string_items(items, "dry_sequence_breakers")?;
    }
    match o.get("samplers") {
        None => {}
        Some(Value::String(s)) => {
            p.samplers = SamplerKind::parse_letters(s)
                .or_else(|_| SamplerKind::parse_list(s))
                .map_err(|e| ApiError::field("samplers", e))?
        }
        Some(Value::Array(items)) => {
            let names = string_items(items, "samplers")?;
            p.samplers = SamplerKind::parse_list(&names.join(";"))
                .map_err(|e| ApiError::field("samplers", e))?;
        }
        Some(other) => {
            return Err(ApiError::field(
                "samplers",
                format!("expected an array of sampler names, got {}", kind(other)),
            ))
        }
    }
    if let Some(v) = o.get("logit_bias") {
        p.logit_bias = logit_bias(v, state)?;
    }
    p.seed = match o.int_in("seed", i64::MIN..=i64::MAX)? {
        Some(s) => resolve_seed(s),
        None if config.seed_random => random_seed(),
        None => defaults.seed,
    };
    p.grammar_triggers = lazy_triggers(o)?;
    Ok(p)
}

/// llama-server's `grammar_lazy` with `grammar_triggers` (`[{"type": 1, "value": "<call>"}]`:
/// words, or `type` 0 with a `token` that is the word): the grammar holds from where the
/// first trigger starts. Patterns (types 2 and 3) are refused, naming the trigger.
fn lazy_triggers(o: &Obj) -> Result<Vec<String>, ApiError> {
    if !o.bool("grammar_lazy")?.unwrap_or(false) {
        return Ok(Vec::new());
    }
    let Some(items) = o.array("grammar_triggers")? else {
        return Err(ApiError::field(
            "grammar_triggers",
            "a lazy grammar needs at least one trigger",
        ));
    };
    let mut words = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let path = format!("grammar_triggers[{i}]");
        let t = Obj::at(item, &path)?;
        let word = t.required_str("value")?;
        match t.int_in("type", 0..=3)? {
            Some(0) | Some(1) => {}
            Some(_) => {
                return Err(ApiError::field(
                    &t.path_of("type"),
                    "pattern triggers are not supported; give the word (type 1)",
                ))
            }
            None => return Err(ApiError::field(&t.path_of("type"), "is required")),
        }
        if word.is_empty() {
            return Err(ApiError::field(&t.path_of("value"), "is empty"));
        }
        words.push(word.to_string());
    }
    if words.is_empty() {
        return Err(ApiError::field(
            "grammar_triggers",
            "a lazy grammar needs at least one trigger",
        ));
    }
    Ok(words)
}

fn string_items(items: &[Value], field: &str) -> Result<Vec<String>, ApiError> {
    items
        .iter()
        .enumerate()
        .map(|(i, v)| match v {
            Value::String(s) => Ok(s.clone()),
            other => Err(ApiError::field(
                &format!("{field}[{i}]"),
                format!("expected a string, got {}", kind(other)),
            )),
        })
        .collect()
}

/// `logit_bias`: OpenAI's object `{"TOKEN_ID": bias}` or llama.cpp's array `[[id, bias], ...]`;
/// a key or id that is text applies to each of its tokens; a bias of `false` bans the token.
fn logit_bias(v: &Value, state: &State) -> Result<Vec<(u32, f32)>, ApiError> {
    let n_vocab = state.loaded.model.config.n_vocab;
    let tok = &state.loaded.tokenizer;
    let mut out = Vec::new();
    let mut add = |key: &Value, bias: &Value, path: &str| -> Result<(), ApiError> {
        let bias = match bias {
            Value::Bool(false) => f32::NEG_INFINITY,
            Value::Number(n) => match n.as_f64() {
                Some(b) if b.is_finite() => b as f32,
                _ => return Err(ApiError::field(path, "expected a finite number")),
            },
            other => {
                return Err(ApiError::field(
                    path,
                    format!("expected a number or false, got {}", kind(other)),
                ))
            }
        };
        let ids: Vec<u32> = match key {
            Value::Number(n) => {
                vec![n
                    .as_u64()
                    .filter(|&i| (i as usize) < n_vocab)
                    .ok_or_else(|| {
                        ApiError::field(
                            path,
                            format!("token id {n} is outside the vocabulary of {n_vocab} tokens"),
                        )
                    })? as u32]
            }
            Value::String(s) => match s.parse::<u64>() {
                Ok(i) if (i as usize) < n_vocab => vec![i as u32],
                Ok(i) => {
                    return Err(ApiError::field(
                        path,
                        format!("token id {i} is outside the vocabulary of {n_vocab} tokens"),
                    ))
                }
                Err(_) => tok.encode(s, false, false),
            },
            other => {
                return Err(ApiError::field(
                    path,
                    format!("expected a token id or text, got {}", kind(other)),
                ))
            }
        };
        out.extend(ids.into_iter().map(|id| (id, bias)));
        Ok(())
    };
    match v {
        Value::Object(map) => {
            for (k, b) in map {
                add(&Value::String(k.clone()), b, &format!("logit_bias.{k}"))?;
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                let path = format!("logit_bias[{i}]");
                match item.as_array().map(Vec::as_slice) {
                    Some([k, b]) => add(k, b, &path)?,
                    _ => return Err(ApiError::field(&path, "expected a [token, bias] pair")),
                }
            }
        }
        other => {
            return Err(ApiError::field(
                "logit_bias",
                format!("expected an object or an array, got {}", kind(other)),
            ))
        }
    }
    Ok(out)
}

/// The grammar a request asks for: `grammar` (GBNF), `json_schema`, or OpenAI's
/// `response_format` (`json_object`, optionally with `schema`, or `json_schema`).
fn request_grammar(o: &Obj) -> Result<Option<(String, Grammar)>, ApiError> {
    let mut sources: Vec<(String, (String, Grammar))> = Vec::new();
    if let Some(g) = o.str("grammar")? {
        sources.push(("grammar".to_string(), parse_gbnf(g, "grammar")?));
    }
    if let Some(schema) = o.get("json_schema") {
        sources.push((
            "json_schema".to_string(),
            schema_grammar(schema, "json_schema")?,
        ));
    }
    if let Some(rf) = o.get("response_format") {
        let rf = Obj::at(rf, "response_format")?;
        match rf.str("type")? {
            None | Some("text") => {}
            Some("json_object") => {
                let grammar = match rf.get("schema") {
                    Some(schema) => schema_grammar(schema, "response_format.schema")?,
                    None => parse_gbnf(JSON_OBJECT_GBNF, "response_format")?,
                };
                sources.push(("response_format".to_string(), grammar));
            }
            Some("json_schema") => {
                let js = rf.get("json_schema").ok_or_else(|| {
                    ApiError::field(
                        "response_format.json_schema",
                        "is required for type 'json_schema'",
                    )
                })?;
                let js = Obj::at(js, "response_format.json_schema")?;
                let schema = js.get("schema").ok_or_else(|| {
                    ApiError::field("response_format.json_schema.schema", "is required")
                })?;
                sources.push((
                    "response_format.json_schema.schema".to_string(),
                    schema_grammar(schema, "response_format.json_schema.schema")?,
                ));
            }
            Some(other) => {
                return Err(ApiError::field(
                    "response_format.type",
                    format!("'{other}' is not one of 'text', 'json_object', 'json_schema'"),
                ))
            }
        }
    }
    if sources.len() > 1 {
        return Err(ApiError::field(
            &sources[1].0,
            format!(
                "give only one of grammar, json_schema and response_format (also got {})",
                sources[0].0
            ),
        ));
    }
    Ok(sources.pop().map(|(_, grammar)| grammar))
}

/// A grammar's text and its compiled form; `field` names it in an error.
fn parse_gbnf(gbnf: &str, field: &str) -> Result<(String, Grammar), ApiError> {
    let g = Grammar::parse(gbnf)
        .map_err(|e| ApiError::field(field, format!("invalid grammar: {e}")))?;
    Ok((gbnf.to_string(), g))
}

/// The grammar of documents matching `schema`, as text and compiled.
fn schema_grammar(schema: &Value, field: &str) -> Result<(String, Grammar), ApiError> {
    let gbnf = json_schema::to_gbnf(schema)
        .map_err(|e| ApiError::field(field, format!("unsupported schema: {e}")))?;
    parse_gbnf(&gbnf, field)
}

/// The tokens a request may generate: its own limit (-1: none) bounded by the server's `-n`
/// (-1: none), as llama-server does it: a request cannot ask for more than `-n` (it gets `-n`),
/// and one that sets no limit of its own gets `-n`.
pub fn bounded_n_predict(request: i64, server: i64) -> i64 {
    if server < 0 {
        request
    } else if request < 0 {
        server
    } else if server > 0 {
        request.min(server)
    } else {
        request
    }
}

/// llama-server's `n_probs` (its alias `logprobs` where the endpoint has no `logprobs` of its
/// own: `alias`): how many alternatives each token reports (`None`: no probabilities).
pub fn n_probs(o: &Obj, alias: Option<&str>) -> Result<Option<usize>, ApiError> {
    let mut n = o.int_in("n_probs", 0..=100)?;
    if n.is_none() {
        if let Some(alias) = alias {
            n = o.int_in(alias, 0..=100)?;
        }
    }
    Ok(n.filter(|&n| n > 0).map(|n| n as usize))
}

/// The request fields that add to a generation's events, as llama-server reads them on every
/// endpoint: `post_sampling_probs`, `timings_per_token` and `return_progress` (which only
/// streams carry), and `lora`, the adapters' scales (the server's global ones when absent).
/// llama-server's name of a reasoning format.
pub fn reasoning_name(f: ReasoningFormat) -> &'static str {
    match f {
        ReasoningFormat::None => "none",
        ReasoningFormat::Deepseek => "deepseek",
        ReasoningFormat::DeepseekLegacy => "deepseek-legacy",
    }
}

/// Whether the OpenAI endpoints' answers carry llama-server's `__verbose` (the native result):
/// the request's `verbose`, else whether the server runs with `--verbose` (or `-lv` above 9).
pub fn verbose(state: &State, o: &Obj) -> Result<bool, ApiError> {
    Ok(o.bool("verbose")?.unwrap_or(state.config.verbose))
}

pub fn read_extras(
    state: &State,
    o: &Obj,
    stream: bool,
    p: &mut GenParams,
) -> Result<(), ApiError> {
    p.lora = state.lora.request_mix(o)?;
    p.shown.lora = super::lora::LoraState::listed(o);
    if let Some((gbnf, g)) = request_grammar(o)? {
        p.sampling.grammar = Some(Arc::new(g));
        p.shown.grammar = gbnf;
    }
    p.shown.stream = stream;
    p.shown.reasoning_format = reasoning_name(state.config.reasoning_format);
    p.post_sampling_probs = o.bool("post_sampling_probs")?.unwrap_or(false);
    p.timings_per_token = o.bool("timings_per_token")?.unwrap_or(false);
    p.return_progress = o.bool("return_progress")?.unwrap_or(false) && stream;
    Ok(())
}

/// Checks `prompt` (tokens) for a slot: non-empty and leaving room to generate. `field` names
/// the request field it came from.
pub fn check_prompt(state: &State, prompt: &[u32], field: &str) -> Result<(), ApiError> {
    let n_ctx = state.scheduler.options.n_ctx_slot;
    if prompt.is_empty() {
        return Err(ApiError::field(field, "the prompt is empty (no tokens)"));
    }
    if prompt.len() >= n_ctx {
        return Err(ApiError::context_exceeded(field, prompt.len(), n_ctx));
    }
    Ok(())
}

/// How often a waiting handler checks that its client is still there.
const CLIENT_CHECK: Duration = Duration::from_millis(100);

/// Runs `prompt` with `params` and answers through `rsp`. An error is returned only while
/// nothing has been written yet.
pub fn run(
    state: &State,
    rsp: &mut Responder,
    prompt: Vec<u32>,
    params: GenParams,
    stream: bool,
    shape: &mut dyn Shape,
) -> Result<(), ApiError> {
    let extras = Extras::of(&params);
    let job = state.scheduler.submit(prompt, params)?;
    let tok = &state.loaded.tokenizer;
    let mut text = String::new();
    let mut tokens = Vec::new();
    let mut all_probs = Vec::new();
    let mut sse = None;
    if stream {
        let mut s = rsp.sse()?;
        for ev in shape.opening() {
            if send_event(&mut s, shape, &ev).is_err() {
                return Ok(());
            }
        }
        sse = Some(s);
    }
    let mut last_check = Instant::now();
    loop {
        let ev = match job.events.recv_timeout(CLIENT_CHECK) {
            Ok(ev) => ev,
            Err(RecvTimeoutError::Timeout) => {
                last_check = Instant::now();
                if rsp.client_gone() {
                    return Ok(()); // dropping `job` cancels it
                }
                continue;
            }
            Err(RecvTimeoutError::Disconnected) => {
                let e = ApiError::internal("generation ended unexpectedly");
                return match sse {
                    None => Err(e),
                    Some(mut s) => {
                        let _ = s.json(&e.body());
                        Ok(())
                    }
                };
            }
        };
        if last_check.elapsed() > CLIENT_CHECK {
            last_check = Instant::now();
            if rsp.client_gone() {
                return Ok(());
            }
        }
        match ev {
            Event::Progress { progress, stats } => {
                if let Some(s) = sse.as_mut() {
                    let ev = extras.progress(shape, &progress, &stats);
                    if send_event(s, shape, &ev).is_err() {
                        return Ok(());
                    }
                }
            }
            Event::Text {
                text: t,
                tokens: ids,
                probs,
                stats,
            } => {
                let probs = extras.probs(tok, &probs);
                match sse.as_mut() {
                    Some(s) => {
                        for ev in extras.chunks(shape, &t, &ids, &probs, &stats) {
                            if send_event(s, shape, &ev).is_err() {
                                return Ok(());
                            }
                        }
                    }
                    None => {
                        text.push_str(&t);
                        tokens.extend(ids);
                        all_probs.extend(probs);
                    }
                }
            }
            Event::Failed(e) => {
                return match sse {
                    None => Err(e),
                    Some(mut s) => {
                        let _ = s.json(&e.body());
                        Ok(())
                    }
                };
            }
            Event::Done(summary) => {
                return match sse {
                    Some(mut s) => {
                        for ev in shape.closing(&summary) {
                            if send_event(&mut s, shape, &ev).is_err() {
                                return Ok(());
                            }
                        }
                        if shape.done_marker() && s.data("[DONE]").is_err() {
                            return Ok(());
                        }
                        let _ = s.finish();
                        Ok(())
                    }
                    None => {
                        let body = shape.whole(&text, &tokens, &all_probs, &summary);
                        rsp.send(&Response::json(200, &body))?;
                        Ok(())
                    }
                };
            }
        }
    }
}

/// What a request asked to be added to its events: llama-server's `timings_per_token` and
/// `post_sampling_probs`.
#[derive(Clone, Copy, Debug)]
pub struct Extras {
    pub timings_per_token: bool,
    pub post_sampling_probs: bool,
}

impl Extras {
    pub fn of(p: &GenParams) -> Extras {
        Extras {
            timings_per_token: p.timings_per_token,
            post_sampling_probs: p.post_sampling_probs,
        }
    }

    /// Each token's entry of `completion_probabilities` / `logprobs.content`.
    pub fn probs(&self, tok: &Tokenizer, probs: &[StepLogprobs]) -> Vec<Value> {
        probs
            .iter()
            .map(|p| prob_json(tok, p, self.post_sampling_probs))
            .collect()
    }

    /// The stream events for new text, with `timings` when asked for.
    pub fn chunks(
        &self,
        shape: &mut dyn Shape,
        text: &str,
        tokens: &[u32],
        probs: &[Value],
        stats: &Stats,
    ) -> Vec<Value> {
        let mut out = shape.chunks(text, tokens, probs);
        if self.timings_per_token {
            for v in &mut out {
                v["timings"] = timings(stats);
            }
        }
        out
    }

    /// The stream event for prompt progress.
    pub fn progress(&self, shape: &mut dyn Shape, p: &Progress, stats: &Stats) -> Value {
        let mut v = shape.progress();
        if self.timings_per_token {
            v["timings"] = timings(stats);
        }
        v["prompt_progress"] = json!({
            "total": p.total,
            "cache": p.cache,
            "processed": p.processed,
            "time_ms": p.time_ms,
        });
        v
    }
}

/// One token's log-probabilities as llama.cpp's `completion_probabilities` entries and
/// OpenAI's `logprobs.content` entries write them: `id`, `token`, `logprob`, `bytes` and
/// `top_logprobs`; with `post_sampling` (llama-server's `post_sampling_probs`), probabilities
/// after the sampler chain: `prob` and `top_probs` instead.
pub fn prob_json(tok: &Tokenizer, p: &StepLogprobs, post_sampling: bool) -> Value {
    let (value_key, top_key) = if post_sampling {
        ("prob", "top_probs")
    } else {
        ("logprob", "top_logprobs")
    };
    let entry = |id: u32, logprob: f32| {
        let bytes = tok.token_to_piece(id, false);
        let value = if post_sampling {
            crate::ops::mathf::expf(logprob)
        } else {
            logprob
        };
        json!({
            "id": id,
            "token": String::from_utf8_lossy(bytes),
            value_key: value,
            "bytes": bytes,
        })
    };
    let mut v = entry(p.chosen.id, p.chosen.logprob);
    v[top_key] = p.top.iter().map(|t| entry(t.id, t.logprob)).collect();
    v
}

/// llama.cpp's `timings` object. As llama-server's, the generation rates count decode steps,
/// one fewer than the tokens: the first token comes from the prompt's last logits.
pub fn timings(s: &Stats) -> Value {
    let evaluated = (s.n_prompt - s.n_cached) as f64;
    let per = |n: f64, ms: f64| if n > 0.0 { ms / n } else { 0.0 };
    let rate = |n: f64, ms: f64| if ms > 0.0 { 1e3 * n / ms } else { 0.0 };
    let predicted = s.n_predicted.saturating_sub(1) as f64;
    let mut v = json!({
        "prompt_n": s.n_prompt - s.n_cached,
        "prompt_ms": s.prompt_ms,
        "prompt_per_token_ms": per(evaluated, s.prompt_ms),
        "prompt_per_second": rate(evaluated, s.prompt_ms),
        "predicted_n": s.n_predicted,
        "predicted_ms": s.predicted_ms,
        "predicted_per_token_ms": per(predicted, s.predicted_ms),
        "predicted_per_second": rate(predicted, s.predicted_ms),
        "cache_n": s.n_cached,
    });
    if s.draft_n > 0 {
        v["draft_n"] = json!(s.draft_n);
        v["draft_n_accepted"] = json!(s.draft_n_accepted);
    }
    v
}

/// OpenAI's `usage` object.
pub fn usage(s: &Stats) -> Value {
    json!({
        "prompt_tokens": s.n_prompt,
        "completion_tokens": s.n_predicted,
        "total_tokens": s.n_prompt + s.n_predicted,
        "prompt_tokens_details": { "cached_tokens": s.n_cached },
    })
}

#[cfg(test)]
mod tests {
    use super::bounded_n_predict;

    #[test]
    fn server_limit_bounds_requests_as_llama_server_does() {
        assert_eq!(bounded_n_predict(100, -1), 100);
        assert_eq!(bounded_n_predict(-1, -1), -1);
        assert_eq!(bounded_n_predict(100, 8), 8);
        assert_eq!(bounded_n_predict(5, 8), 5);
        assert_eq!(bounded_n_predict(-1, 8), 8);
        assert_eq!(bounded_n_predict(0, 8), 0);
        assert_eq!(bounded_n_predict(-1, 0), 0);
        assert_eq!(bounded_n_predict(5, 0), 5);
    }
}
