//! Running one generation request for a handler: the request's sampling fields read with their
//! types checked, the prompt checked against a slot's context, the job submitted to the
//! scheduler, and its events written out, either as a Server-Sent Event stream or as one JSON
//! body. While it waits, it watches the client: if the client goes away, dropping the job's
//! handle cancels it and frees the slot.

use super::error::ApiError;
use super::json::Obj;
use super::response::{Responder, Response};
use super::slots::{Event, GenParams, Summary};
use super::{ServerConfig, State};
use crate::sampling::SamplingParams;
use serde_json::{json, Value};
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

/// How an endpoint shapes its output.
pub trait Shape {
    /// Stream events before any text (chat: the assistant role).
    fn opening(&mut self) -> Vec<Value> {
        Vec::new()
    }
    /// One stream event for new text.
    fn chunk(&mut self, text: &str, tokens: &[u32]) -> Value;
    /// The last stream events.
    fn closing(&mut self, summary: &Summary) -> Vec<Value>;
    /// The body of a non-streamed response.
    fn whole(&mut self, text: &str, tokens: &[u32], summary: &Summary) -> Value;
    /// Whether the stream ends with `data: [DONE]` (OpenAI endpoints).
    fn done_marker(&self) -> bool;
}

/// Sampling fields shared by every generation endpoint, llama.cpp's names, defaulting to the
/// command line's settings.
pub fn sampling_params(o: &Obj, config: &ServerConfig) -> Result<SamplingParams, ApiError> {
    let defaults = &config.sampling;
    let mut p = defaults.clone();
    if let Some(t) = o.f32_in("temperature", 0.0..=100.0)? {
        p.temperature = t;
    }
    if let Some(k) = o.int_in("top_k", -1..=i32::MAX as i64)? {
        p.top_k = k as i32;
    }
    if let Some(v) = o.f32_in("top_p", 0.0..=1.0)? {
        p.top_p = v;
    }
    if let Some(v) = o.f32_in("min_p", 0.0..=1.0)? {
        p.min_p = v;
    }
    if let Some(v) = o.f32_in("repeat_penalty", 0.0..=100.0)? {
        p.repeat_penalty = v;
    }
    if let Some(v) = o.int_in("repeat_last_n", -1..=i32::MAX as i64)? {
        p.repeat_last_n = v as i32;
    }
    p.seed = match o.int_in("seed", i64::MIN..=i64::MAX)? {
        Some(s) if s >= 0 => s as u64,
        Some(_) => random_seed(),
        None if config.seed_random => random_seed(),
        None => defaults.seed,
    };
    Ok(p)
}

/// A fresh seed from the clock (seed -1 asks for one).
pub fn random_seed() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    t ^ 0x9e37_79b9_7f4a_7c15
}

/// Checks `prompt` (tokens) for a slot: non-empty and leaving room to generate. `field` names
/// the request field it came from.
pub fn check_prompt(state: &State, prompt: &[u32], field: &str) -> Result<(), ApiError> {
    let n_ctx = state.scheduler.options.n_ctx_slot;
    if prompt.is_empty() {
        return Err(ApiError::field(field, "the prompt is empty (no tokens)"));
    }
    if prompt.len() >= n_ctx {
        return Err(ApiError::field(
            field,
            format!(
                "the prompt is {} tokens long, more than the context of {n_ctx} tokens per slot allows (-c / -np)",
                prompt.len()
            ),
        )
        .with_code("context_length_exceeded"));
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
    let job = state.scheduler.submit(prompt, params)?;
    let mut text = String::new();
    let mut tokens = Vec::new();
    let mut sse = None;
    if stream {
        let mut s = rsp.sse()?;
        for ev in shape.opening() {
            if s.json(&ev).is_err() {
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
            Event::Text {
                text: t,
                tokens: ids,
            } => match sse.as_mut() {
                Some(s) => {
                    if s.json(&shape.chunk(&t, &ids)).is_err() {
                        return Ok(());
                    }
                }
                None => {
                    text.push_str(&t);
                    tokens.extend(ids);
                }
            },
            Event::Done(summary) => {
                return match sse {
                    Some(mut s) => {
                        for ev in shape.closing(&summary) {
                            if s.json(&ev).is_err() {
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
                        let body = shape.whole(&text, &tokens, &summary);
                        rsp.send(&Response::json(200, &body))?;
                        Ok(())
                    }
                };
            }
        }
    }
}

/// llama.cpp's `timings` object.
pub fn timings(s: &Summary) -> Value {
    let evaluated = (s.n_prompt - s.n_cached) as f64;
    let per = |n: f64, ms: f64| if n > 0.0 { ms / n } else { 0.0 };
    let rate = |n: f64, ms: f64| if ms > 0.0 { 1e3 * n / ms } else { 0.0 };
    let predicted = s.n_predicted as f64;
    json!({
        "prompt_n": s.n_prompt - s.n_cached,
        "prompt_ms": s.prompt_ms,
        "prompt_per_token_ms": per(evaluated, s.prompt_ms),
        "prompt_per_second": rate(evaluated, s.prompt_ms),
        "predicted_n": s.n_predicted,
        "predicted_ms": s.predicted_ms,
        "predicted_per_token_ms": per(predicted, s.predicted_ms),
        "predicted_per_second": rate(predicted, s.predicted_ms),
        "cache_n": s.n_cached,
    })
}

/// OpenAI's `usage` object.
pub fn usage(s: &Summary) -> Value {
    json!({
        "prompt_tokens": s.n_prompt,
        "completion_tokens": s.n_predicted,
        "total_tokens": s.n_prompt + s.n_predicted,
        "prompt_tokens_details": { "cached_tokens": s.n_cached },
    })
}
