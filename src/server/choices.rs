//! Several generations for one request, each its own request to the scheduler (its own slot and
//! sequence): `n` > 1 on the OpenAI endpoints (one prompt, seed `seed + index`, so seeded
//! choices differ from each other and choice 0 is what `n` = 1 gives), and a list of prompts
//! (llama-server's `prompt: ["a", [1, 2], ...]`, one result each, the request's seed for all).
//! Streamed, each result's events carry its `index` and arrive as they are generated,
//! interleaved; OpenAI's usage chunk comes once, after the last choice, with the completion
//! tokens of all of them. Not streamed, OpenAI's body lists every choice in order of `index`,
//! and `/completion`'s is an array of its results.

use super::error::ApiError;
use super::generation::{Extras, Shape};
use super::protocol::{Event, GenParams, Summary};
use super::response::{Responder, Response};
use super::scheduler::JobHandle;
use super::sse::SseStream;
use super::State;
use serde_json::{json, Value};
use std::sync::mpsc::{RecvTimeoutError, TryRecvError};
use std::time::Duration;

/// Most choices one request may ask for.
pub const MAX_CHOICES: i64 = 128;

/// How long to wait on one choice when none had anything new.
const POLL: Duration = Duration::from_millis(5);

/// One choice in progress.
struct Choice<S> {
    job: Option<JobHandle>,
    shape: S,
    text: String,
    tokens: Vec<u32>,
    probs: Vec<Value>,
    summary: Option<Summary>,
}

/// How the results are laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// OpenAI's: each result is a `choices` entry of one body.
    Choices,
    /// llama.cpp's `/completion`: each result is a body with its `index`, the bodies an array.
    List,
}

/// What to run: `prompts[i]` with `shapes[i]`, as `layout` lays the results out; with
/// `vary_seed`, result `i` with seed `seed + i`.
pub struct Runs<S> {
    pub prompts: Vec<Vec<u32>>,
    pub shapes: Vec<S>,
    pub vary_seed: bool,
    pub layout: Layout,
}

/// Runs `prompt` `shapes.len()` times (choice `i` with seed `seed + i` and `shapes[i]`) and
/// answers through `rsp`. An error is returned only while nothing has been written yet.
pub fn run<S: Shape>(
    state: &State,
    rsp: &mut Responder,
    prompt: Vec<u32>,
    params: GenParams,
    stream: bool,
    shapes: Vec<S>,
) -> Result<(), ApiError> {
    let runs = Runs {
        prompts: vec![prompt; shapes.len()],
        shapes,
        vary_seed: true,
        layout: Layout::Choices,
    };
    run_all(state, rsp, runs, params, stream)
}

/// Runs each of `runs` and answers through `rsp`. An error is returned only while nothing has
/// been written yet.
pub fn run_all<S: Shape>(
    state: &State,
    rsp: &mut Responder,
    runs: Runs<S>,
    params: GenParams,
    stream: bool,
) -> Result<(), ApiError> {
    let extras = Extras::of(&params);
    let layout = runs.layout;
    let set_index = |v: &mut Value, i: usize| match layout {
        Layout::Choices => set_choice_index(v, i),
        Layout::List => v["index"] = json!(i),
    };
    let mut choices = Vec::with_capacity(runs.shapes.len());
    for (i, (shape, prompt)) in runs.shapes.into_iter().zip(runs.prompts).enumerate() {
        let mut p = params.clone();
        if runs.vary_seed {
            p.sampling.seed = p.sampling.seed.wrapping_add(i as u64);
        }
        choices.push(Choice {
            job: Some(state.scheduler.submit(prompt, p)?),
            shape,
            text: String::new(),
            tokens: Vec::new(),
            probs: Vec::new(),
            summary: None,
        });
    }
    let tok = &state.loaded.tokenizer;
    let mut sse = None;
    if stream {
        let mut s = rsp.sse()?;
        for (i, c) in choices.iter_mut().enumerate() {
            for mut ev in c.shape.opening() {
                set_index(&mut ev, i);
                if s.json(&ev).is_err() {
                    return Ok(());
                }
            }
        }
        sse = Some(s);
    }
    // The last usage-only chunk a choice's closing gave, sent once at the end.
    let mut usage_chunk: Option<Value> = None;
    let mut since_check = Duration::ZERO;
    while choices.iter().any(|c| c.job.is_some()) {
        let mut got = false;
        let first_live = choices.iter().position(|c| c.job.is_some());
        for (i, c) in choices.iter_mut().enumerate() {
            let Some(job) = c.job.as_ref() else { continue };
            let ev = if !got && Some(i) == first_live {
                // Block briefly on one choice so that an idle wait does not spin.
                match job.events.recv_timeout(POLL) {
                    Ok(ev) => ev,
                    Err(RecvTimeoutError::Timeout) => {
                        since_check += POLL;
                        continue;
                    }
                    Err(RecvTimeoutError::Disconnected) => return ended(sse),
                }
            } else {
                match job.events.try_recv() {
                    Ok(ev) => ev,
                    Err(TryRecvError::Empty) => continue,
                    Err(TryRecvError::Disconnected) => return ended(sse),
                }
            };
            got = true;
            match ev {
                Event::Progress { progress, stats } => {
                    if let Some(s) = sse.as_mut() {
                        let mut chunk = extras.progress(&mut c.shape, &progress, &stats);
                        set_index(&mut chunk, i);
                        if s.json(&chunk).is_err() {
                            return Ok(());
                        }
                    }
                }
                Event::Text {
                    text,
                    tokens,
                    probs,
                    stats,
                } => {
                    let probs = extras.probs(tok, &probs);
                    match sse.as_mut() {
                        Some(s) => {
                            for mut chunk in
                                extras.chunks(&mut c.shape, &text, &tokens, &probs, &stats)
                            {
                                set_index(&mut chunk, i);
                                if s.json(&chunk).is_err() {
                                    return Ok(());
                                }
                            }
                        }
                        None => {
                            c.text.push_str(&text);
                            c.tokens.extend(tokens);
                            c.probs.extend(probs);
                        }
                    }
                }
                Event::Failed(e) => return failed(sse, e),
                Event::Done(summary) => {
                    c.job = None;
                    if let Some(s) = sse.as_mut() {
                        for mut ev in c.shape.closing(&summary) {
                            if is_usage_only(&ev) {
                                usage_chunk = Some(ev);
                                continue;
                            }
                            set_index(&mut ev, i);
                            if s.json(&ev).is_err() {
                                return Ok(());
                            }
                        }
                    }
                    c.summary = Some(summary);
                }
            }
        }
        if since_check >= Duration::from_millis(100) {
            since_check = Duration::ZERO;
            if rsp.client_gone() {
                return Ok(()); // dropping the handles cancels every choice
            }
        }
    }
    let summaries: Vec<&Summary> = choices.iter().filter_map(|c| c.summary.as_ref()).collect();
    let completion: usize = summaries.iter().map(|s| s.stats.n_predicted).sum();
    match sse {
        Some(mut s) => {
            if let Some(mut u) = usage_chunk {
                add_usage(&mut u["usage"], completion);
                if s.json(&u).is_err() {
                    return Ok(());
                }
            }
            if choices[0].shape.done_marker() && s.data("[DONE]").is_err() {
                return Ok(());
            }
            let _ = s.finish();
            Ok(())
        }
        None if layout == Layout::List => {
            let mut all = Vec::with_capacity(choices.len());
            for (i, c) in choices.iter_mut().enumerate() {
                let summary = c.summary.take().expect("every result is done");
                let mut whole = c.shape.whole(&c.text, &c.tokens, &c.probs, &summary);
                set_index(&mut whole, i);
                all.push(whole);
            }
            rsp.send(&Response::json(200, &Value::Array(all)))?;
            Ok(())
        }
        None => {
            let mut body = Value::Null;
            let mut all = Vec::new();
            for (i, c) in choices.iter_mut().enumerate() {
                let summary = c.summary.take().expect("every choice is done");
                let mut whole = c.shape.whole(&c.text, &c.tokens, &c.probs, &summary);
                set_index(&mut whole, i);
                if let Some(list) = whole["choices"].as_array() {
                    all.extend(list.iter().cloned());
                }
                if i == 0 {
                    body = whole;
                }
            }
            body["choices"] = Value::Array(all);
            add_usage(&mut body["usage"], completion);
            rsp.send(&Response::json(200, &body))?;
            Ok(())
        }
    }
}

/// A choice's events stopped without its end: an error, as a body or as the stream's last event.
fn ended(sse: Option<SseStream>) -> Result<(), ApiError> {
    failed(sse, ApiError::internal("generation ended unexpectedly"))
}

/// The request ends with `e`: its status and body, or an error event in a stream already open.
fn failed(sse: Option<SseStream>, e: ApiError) -> Result<(), ApiError> {
    match sse {
        None => Err(e),
        Some(mut s) => {
            let _ = s.json(&e.body());
            Ok(())
        }
    }
}

/// Sets the `index` of every entry of `v["choices"]`.
fn set_choice_index(v: &mut Value, index: usize) {
    if let Some(list) = v["choices"].as_array_mut() {
        for c in list {
            c["index"] = json!(index);
        }
    }
}

/// A chunk that only carries `usage` (an empty `choices`).
fn is_usage_only(v: &Value) -> bool {
    v.get("usage").is_some() && v["choices"].as_array().is_some_and(Vec::is_empty)
}

/// Replaces a usage object's completion tokens with `completion`, the sum over the choices.
fn add_usage(usage: &mut Value, completion: usize) {
    if !usage.is_object() {
        return;
    }
    let prompt = usage["prompt_tokens"].as_u64().unwrap_or(0) as usize;
    usage["completion_tokens"] = json!(completion);
    usage["total_tokens"] = json!(prompt + completion);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indexes_and_usage_are_rewritten() {
        let mut v = json!({"choices": [{"index": 0, "text": "a"}]});
        set_choice_index(&mut v, 3);
        assert_eq!(v["choices"][0]["index"], 3);
        let u = json!({"choices": [], "usage": {"prompt_tokens": 5}});
        assert!(is_usage_only(&u) && !is_usage_only(&v));
        let mut usage = json!({"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7});
        add_usage(&mut usage, 9);
        assert_eq!(usage["completion_tokens"], 9);
        assert_eq!(usage["total_tokens"], 14);
    }
}
