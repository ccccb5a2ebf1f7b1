//! The reranking endpoints (with `--rerank`, or `--embedding --pooling rank`): `POST /rerank`,
//! `/reranking`, `/v1/rerank` and `/v1/reranking`, with llama-server's request fields, answer
//! shapes, order and errors.
//!
//! A request gives a `query` and its `documents` (Jina's and Cohere's shape: the answer is a
//! list object whose `results` hold `{index, relevance_score}`) or `texts` (Hugging Face TEI's
//! shape: the answer is the bare array of `{index, score}`, with `text` when `return_text`).
//! Each document becomes one prompt, the model's `tokenizer.chat_template.rerank` with
//! `{query}` and `{document}` filled in, or else `[BOS] query [EOS] [SEP] document [EOS]` as
//! the vocabulary adds them, and its score is the first output of the rank-pooled
//! classification head ([`crate::embedding`]: for a Qwen3 reranker, the probability of "yes").
//! Results are sorted by score, highest first (ties keep the documents' order), and cut to
//! `top_n`. Scores are computed on the handler's thread, one request at a time, as the
//! embeddings are.

use super::embeddings::COMPUTING;
use super::error::ApiError;
use super::json::{kind, parse_body, Obj};
use super::response::{Responder, Response};
use super::State;
use crate::embedding::{embed, rank_ready, Pooling};
use crate::engine::Loaded;
use serde_json::{json, Value};

/// The GGUF key of a reranker's prompt template.
const TEMPLATE_KEY: &str = "tokenizer.chat_template.rerank";

/// Whether the server ranks: embeddings on and rank pooling asked for, as llama-server
/// decides (a GGUF whose default pooling is rank does not enable the endpoint by itself).
fn enabled(state: &State) -> bool {
    state.config.embeddings && state.config.pooling == Some(Pooling::Rank)
}

/// Refuses, at start, a server that would pool by rank with a model that cannot rank.
pub fn check_model(
    loaded: &Loaded,
    embeddings: bool,
    pooling: Option<Pooling>,
) -> anyhow::Result<()> {
    let pooling = pooling.unwrap_or_else(|| Pooling::model_default(&loaded.model));
    if embeddings && pooling == Pooling::Rank {
        rank_ready(&loaded.model).map_err(anyhow::Error::msg)?;
    }
    Ok(())
}

/// `POST /rerank` and its aliases.
pub fn handle(state: &State, body: &[u8], rsp: &mut Responder) -> Result<(), ApiError> {
    if !enabled(state) {
        return Err(ApiError::new(
            501,
            "not_supported_error",
            "This server does not support reranking. Start it with `--reranking`",
        ));
    }
    let v = parse_body(body)?;
    let o = Obj::root(&v);
    let tei = o.has("texts");
    let query = match o.get("query") {
        Some(Value::String(q)) => q.as_str(),
        Some(other) => {
            return Err(ApiError::field(
                "query",
                format!("must be a string, got {}", kind(other)),
            ))
        }
        None => return Err(ApiError::field("query", "must be provided")),
    };
    let (field, documents) = documents(&o)?;
    let top_n = match o.int_in("top_n", 0..=i64::from(u32::MAX))? {
        Some(n) => n as usize,
        None => documents.len(),
    };
    let return_text = tei && o.bool("return_text")?.unwrap_or(false);
    let model_name = o.str("model")?.unwrap_or(&state.config.model_name);

    let prompts: Vec<Vec<u32>> = documents
        .iter()
        .map(|d| prompt(&state.loaded, query, d))
        .collect();
    let n_ctx = state.scheduler.options.n_ctx_slot;
    for (i, p) in prompts.iter().enumerate() {
        let path = format!("{field}[{i}]");
        if p.is_empty() {
            return Err(ApiError::field(
                &path,
                "the query and document give no tokens",
            ));
        }
        if p.len() > n_ctx {
            return Err(ApiError::context_exceeded(&path, p.len(), n_ctx));
        }
    }

    let mut scores = Vec::with_capacity(prompts.len());
    {
        let _turn = COMPUTING.lock().unwrap_or_else(|e| e.into_inner());
        for p in &prompts {
            if rsp.client_gone() {
                return Ok(());
            }
            let out = embed(
                &state.loaded.model,
                p,
                Pooling::Rank,
                n_ctx,
                state.config.n_batch,
            )
            .map_err(|e| ApiError::unavailable(e.to_string()))?;
            scores.push(out[0][0]);
        }
    }
    let n_tokens: usize = prompts.iter().map(Vec::len).sum();
    let ranked = ranking(&scores, top_n);
    let score_key = if tei { "score" } else { "relevance_score" };
    let results: Vec<Value> = ranked
        .iter()
        .map(|&i| {
            let mut r = json!({ "index": i, score_key: f64::from(scores[i]) });
            if return_text {
                r["text"] = Value::from(documents[i]);
            }
            r
        })
        .collect();
    let body = if tei {
        Value::from(results)
    } else {
        json!({
            "model": model_name,
            "object": "list",
            "usage": { "prompt_tokens": n_tokens, "total_tokens": n_tokens },
            "results": results,
        })
    };
    rsp.send(&Response::json(200, &body))?;
    Ok(())
}

/// The documents to rank and the field they came from: `documents`, else TEI's `texts`; a
/// non-empty array of strings.
fn documents<'a>(o: &Obj<'a>) -> Result<(&'static str, Vec<&'a str>), ApiError> {
    let field = if o.has("documents") {
        "documents"
    } else {
        "texts"
    };
    let problem = "must be a non-empty string array";
    let Some(items) = o.get(field) else {
        return Err(ApiError::field("documents", problem));
    };
    let Value::Array(items) = items else {
        return Err(ApiError::field(
            field,
            format!("{problem}, got {}", kind(items)),
        ));
    };
    if items.is_empty() {
        return Err(ApiError::field(field, problem));
    }
    let docs = items
        .iter()
        .enumerate()
        .map(|(i, d)| {
            d.as_str().ok_or_else(|| {
                ApiError::field(
                    &format!("{field}[{i}]"),
                    format!("expected a string, got {}", kind(d)),
                )
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok((field, docs))
}

/// The prompt of one query–document pair, as llama-server builds it: the model's rerank
/// template (special tokens parsed, none added), else the two texts joined by the
/// vocabulary's BOS, EOS (or SEP when there is no EOS) and SEP as it asks for them.
fn prompt(loaded: &Loaded, query: &str, doc: &str) -> Vec<u32> {
    let tok = &loaded.tokenizer;
    let file = &loaded.model.file;
    if let Some(t) = file.get_str(TEMPLATE_KEY) {
        let text = t.replace("{query}", query).replace("{document}", doc);
        return tok.encode(&text, false, true);
    }
    let ids = tok.special_ids();
    let eos = ids.eos.or(ids.sep);
    let add_sep = tok.add_sep();
    let mut out = Vec::new();
    if tok.add_bos() {
        out.extend(ids.bos);
    }
    out.extend(tok.encode(query, false, false));
    if tok.add_eos() {
        out.extend(eos);
    }
    if add_sep {
        out.extend(ids.sep);
    }
    out.extend(tok.encode(doc, false, false));
    if tok.add_eos() {
        out.extend(eos);
    }
    out
}

/// The indices of `scores` from the highest score down (equal scores in their order), the
/// first `top_n` of them.
fn ranking(scores: &[f32], top_n: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..scores.len()).collect();
    order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));
    order.truncate(top_n);
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranking_sorts_down_and_cuts() {
        assert_eq!(ranking(&[0.1, 0.7, 0.3], 3), vec![1, 2, 0]);
        assert_eq!(ranking(&[0.1, 0.7, 0.3], 1), vec![1]);
        assert_eq!(ranking(&[0.1, 0.7, 0.3], 0), Vec::<usize>::new());
        assert_eq!(ranking(&[0.5, 0.5, 0.9], 9), vec![2, 0, 1]);
    }

    #[test]
    fn documents_must_be_strings() {
        let v = json!({"documents": ["a", 1]});
        let e = documents(&Obj::root(&v)).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("documents[1]"));
        let v = json!({"texts": ["a", "b"]});
        let (field, docs) = documents(&Obj::root(&v)).unwrap();
        assert_eq!((field, docs), ("texts", vec!["a", "b"]));
        let v = json!({"documents": []});
        assert!(documents(&Obj::root(&v)).is_err());
        let v = json!({});
        let e = documents(&Obj::root(&v)).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("documents"));
    }
}
