//! The embedding endpoints (with `--embedding`): OpenAI's `POST /v1/embeddings` and
//! llama-server's `POST /embedding` and `/embeddings`, with llama-server's request fields,
//! response shapes and errors.
//!
//! `input` (or llama-server's `content`) is a string, token ids, a mix of both, or an array of
//! those; each becomes one embedding. Vectors come from [`crate::embedding`], run here on the
//! handler's thread through a private KV cache (the model's weights are shared and read-only,
//! so the scheduler's slots are not involved); one request computes at a time. Pooled vectors
//! are normalised by the request's `embd_normalize` (default 2, Euclidean); `--pooling none`
//! gives every token's vector, unnormalised, and only on the native endpoints.

use super::base64;
use super::error::ApiError;
use super::json::{kind, parse_body, Obj};
use super::native::token_id;
use super::response::{Responder, Response};
use super::State;
use crate::embedding::{embed, normalize, Pooling};
use serde_json::{json, Value};
use std::sync::Mutex;

/// Held while a request computes (here and in `rerank`), so that concurrent requests queue
/// instead of splitting the compute threads between them.
pub(super) static COMPUTING: Mutex<()> = Mutex::new(());

/// Which endpoint was called: the shape of the answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Api {
    /// `/v1/embeddings`: OpenAI's list object (unless the request used `content`).
    OpenAi,
    /// `/embedding`, `/embeddings`: an array of `{index, embedding}`, `embedding` holding one
    /// vector per token (`--pooling none`) or the one pooled vector.
    Native,
}

/// `POST /v1/embeddings`, `/embedding`, `/embeddings`.
pub fn handle(state: &State, body: &[u8], rsp: &mut Responder, api: Api) -> Result<(), ApiError> {
    if !state.config.embeddings {
        return Err(ApiError::new(
            501,
            "not_supported_error",
            "This server does not support embeddings. Start it with `--embeddings`",
        ));
    }
    let pooling = state
        .config
        .pooling
        .unwrap_or_else(|| Pooling::model_default(&state.loaded.model));
    if api == Api::OpenAi && pooling == Pooling::None {
        return Err(ApiError::bad_request(
            "Pooling type 'none' is not OAI compatible. Please use a different pooling type \
             (start the server with --pooling mean, cls or last; /embeddings gives per-token vectors)",
        ));
    }
    let v = parse_body(body)?;
    let o = Obj::root(&v);
    let (field, input, api) = match (o.get("input"), o.get("content")) {
        (Some(i), _) => ("input", i, api),
        // llama-server answers `content` in its own shape, whichever path was called.
        (None, Some(c)) => ("content", c, Api::Native),
        (None, None) => return Err(ApiError::field("input", "is required (or content)")),
    };
    let base64 = match o.str("encoding_format")? {
        None | Some("float") => false,
        Some("base64") => true,
        Some(other) => {
            return Err(ApiError::field(
                "encoding_format",
                format!("'{other}' is not one of 'float', 'base64'"),
            ))
        }
    };
    let embd_normalize = o.int_in("embd_normalize", -1..=100)?.unwrap_or(2) as i32;
    let prompts = input_prompts(state, input, field)?;
    let n_ctx = state.scheduler.options.n_ctx_slot;
    for (i, p) in prompts.iter().enumerate() {
        let path = item_path(field, input, i);
        if p.is_empty() {
            return Err(ApiError::field(&path, "the input gives no tokens"));
        }
        if p.len() > n_ctx {
            return Err(ApiError::context_exceeded(&path, p.len(), n_ctx));
        }
    }

    let mut vectors = Vec::with_capacity(prompts.len());
    {
        let _turn = COMPUTING.lock().unwrap_or_else(|e| e.into_inner());
        for p in &prompts {
            if rsp.client_gone() {
                return Ok(());
            }
            let model = &state.loaded.model;
            let rows = embed(model, p, pooling, n_ctx, state.config.n_batch)
                .map_err(|e| ApiError::unavailable(e.to_string()))?;
            vectors.push(match pooling {
                Pooling::None => rows,
                _ => rows.iter().map(|r| normalize(r, embd_normalize)).collect(),
            });
        }
    }
    let n_tokens: usize = prompts.iter().map(Vec::len).sum();
    let body = match api {
        Api::Native => Value::from(
            vectors
                .into_iter()
                .enumerate()
                .map(|(i, e)| json!({ "index": i, "embedding": e }))
                .collect::<Vec<_>>(),
        ),
        Api::OpenAi => {
            let model = o.str("model")?.unwrap_or(&state.config.model_name);
            openai_list(model, &vectors, n_tokens, base64)
        }
    };
    rsp.send(&Response::json(200, &body))?;
    Ok(())
}

/// OpenAI's answer: a list of `embedding` objects (the pooled vector of each input) and the
/// prompt tokens in `usage`.
fn openai_list(model: &str, vectors: &[Vec<Vec<f32>>], n_tokens: usize, base64: bool) -> Value {
    let data: Vec<Value> = vectors
        .iter()
        .enumerate()
        .map(|(i, rows)| {
            let v = &rows[0];
            if base64 {
                json!({
                    "embedding": base64::encode_f32(v),
                    "index": i,
                    "object": "embedding",
                    "encoding_format": "base64",
                })
            } else {
                json!({ "embedding": v, "index": i, "object": "embedding" })
            }
        })
        .collect();
    json!({
        "model": model,
        "object": "list",
        "usage": { "prompt_tokens": n_tokens, "total_tokens": n_tokens },
        "data": data,
    })
}

/// The JSON path of input `i` for messages: the field itself when it held one input.
fn item_path(field: &str, input: &Value, i: usize) -> String {
    match input {
        Value::Array(items) if is_prompt_list(items) => format!("{field}[{i}]"),
        _ => field.to_string(),
    }
}

/// Whether an array holds several inputs rather than being one (token ids, or ids mixed
/// with text): llama-server's reading of `input`.
fn is_prompt_list(items: &[Value]) -> bool {
    let numbers = items.iter().filter(|v| v.is_number()).count();
    let strings = items.iter().filter(|v| v.is_string()).count();
    let one_prompt = numbers > 0 && numbers + strings == items.len();
    !one_prompt
}

/// The token sequences of `input`: a string, token ids, ids mixed with text, or an array of
/// those. Text is tokenized with special tokens parsed and BOS/EOS added where the model asks
/// (at the start of a mixed sequence only when it starts with text), as llama-server does.
fn input_prompts(state: &State, input: &Value, field: &str) -> Result<Vec<Vec<u32>>, ApiError> {
    match input {
        Value::String(_) => Ok(vec![one_prompt(state, input, field)?]),
        Value::Array(items) if items.is_empty() => Err(ApiError::field(field, "must not be empty")),
        Value::Array(items) if !is_prompt_list(items) => Ok(vec![one_prompt(state, input, field)?]),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, item)| one_prompt(state, item, &format!("{field}[{i}]")))
            .collect(),
        other => Err(ApiError::field(
            field,
            format!(
                "expected a string, token ids, or an array of strings or token-id arrays, got {}",
                kind(other)
            ),
        )),
    }
}

/// One input: a string, or an array of token ids and strings.
fn one_prompt(state: &State, v: &Value, path: &str) -> Result<Vec<u32>, ApiError> {
    let tok = &state.loaded.tokenizer;
    let n_vocab = state.loaded.model.config.n_vocab;
    match v {
        Value::String(s) => Ok(tok.encode(s, true, true)),
        Value::Array(items) => {
            let mut out = Vec::new();
            for (i, item) in items.iter().enumerate() {
                match item {
                    Value::String(s) => out.extend(tok.encode(s, i == 0, true)),
                    other => out.push(token_id(other, n_vocab, &format!("{path}[{i}]"))?),
                }
            }
            Ok(out)
        }
        other => Err(ApiError::field(
            path,
            format!(
                "expected a string or an array of token ids, got {}",
                kind(other)
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn which_arrays_are_lists_of_inputs() {
        assert!(!is_prompt_list(&[json!(1), json!(2)]));
        assert!(!is_prompt_list(&[json!(1), json!("a")]));
        assert!(is_prompt_list(&[json!("a"), json!("b")]));
        assert!(is_prompt_list(&[json!([1, 2]), json!("b")]));
        assert_eq!(item_path("input", &json!(["a", "b"]), 1), "input[1]");
        assert_eq!(item_path("input", &json!([1, 2]), 0), "input");
        assert_eq!(item_path("input", &json!("a"), 0), "input");
    }
}
