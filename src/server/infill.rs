//! `POST /infill`: code completion between a prefix and a suffix, for models with
//! fill-in-the-middle tokens (Qwen2.5-Coder's `<|fim_prefix|>`, `<|fim_suffix|>`,
//! `<|fim_middle|>`, and `<|repo_name|>`/`<|file_sep|>` for `input_extra`).
//!
//! The prompt is laid out as llama-server's `format_prompt_infill` does (its code, which
//! differs from its README in one place: `prompt` goes after the prefix, before the suffix
//! token): the extra files as a repository (`<REPO>myproject`, then `<SEP>name` and text per
//! file, then `<SEP>filename`), or as `--- snippet ---` blocks without those tokens; BOS where
//! the model wants one; `<PRE>prefix prompt<SUF>suffix<MID>` (`--spm-infill`: suffix first).
//! The prefix keeps its last 3/4 of a `-b` batch, the suffix its first quarter less the
//! prompt, the extra text what the context leaves after a batch and twice `-n`. Everything
//! else is `/completion`: the same fields and the same answer.

use super::error::ApiError;
use super::json::{kind, parse_body, Obj};
use super::native::{complete, token_id};
use super::response::Responder;
use super::State;
use crate::tokenizer::Tokenizer;
use serde_json::Value;

/// The special tokens an infill prompt is made of.
#[derive(Clone, Copy, Debug)]
pub struct FimTokens {
    pub pre: u32,
    pub suf: u32,
    pub mid: u32,
    /// Starts a repository of extra files (`<|repo_name|>`).
    pub rep: Option<u32>,
    /// Starts each extra file (`<|file_sep|>`).
    pub sep: Option<u32>,
    /// BOS, when the model's prompts start with one.
    pub bos: Option<u32>,
}

impl FimTokens {
    /// The model's FIM tokens, or llama-server's refusal naming those it lacks.
    pub fn of(tok: &Tokenizer) -> Result<FimTokens, ApiError> {
        let ids = tok.special_ids();
        let mut missing = String::new();
        for (id, what) in [
            (ids.fim_pre, "prefix"),
            (ids.fim_suf, "suffix"),
            (ids.fim_mid, "middle"),
        ] {
            if id.is_none() {
                missing.push_str(&format!("{what} token is missing. "));
            }
        }
        match (ids.fim_pre, ids.fim_suf, ids.fim_mid) {
            (Some(pre), Some(suf), Some(mid)) => Ok(FimTokens {
                pre,
                suf,
                mid,
                rep: ids.fim_rep,
                sep: ids.fim_sep,
                bos: ids.bos.filter(|_| tok.add_bos()),
            }),
            _ => Err(ApiError::new(
                501,
                "not_supported_error",
                format!(
                    "Infill is not supported by this model: {}(it has no fill-in-the-middle tokens)",
                    missing
                ),
            )),
        }
    }
}

/// The tokenized parts of a request.
#[derive(Clone, Debug, Default)]
pub struct Parts {
    pub prefix: Vec<u32>,
    pub suffix: Vec<u32>,
    /// `prompt`: the start of the middle, after the prefix.
    pub prompt: Vec<u32>,
    /// The extra files, laid out (see [`extra_tokens`]).
    pub extra: Vec<u32>,
}

/// What bounds the parts: `-b`, a slot's context, `-n`, and `--spm-infill`.
#[derive(Clone, Copy, Debug)]
pub struct Budget {
    pub n_batch: usize,
    pub n_ctx: usize,
    pub n_predict: i64,
    pub spm: bool,
}

/// The whole prompt, as llama-server lays it out.
pub fn layout(fim: &FimTokens, parts: &Parts, budget: &Budget) -> Vec<u32> {
    let quarter = budget.n_batch / 4;
    let n_prefix = parts.prefix.len().min(3 * quarter);
    let n_suffix = parts
        .suffix
        .len()
        .min(quarter.saturating_sub(2 + parts.prompt.len()));
    let room = budget.n_ctx as i64 - budget.n_batch as i64 - 2 * budget.n_predict;
    let n_extra = parts.extra.len().min(room.max(0) as usize);

    let mut prefix = vec![fim.pre];
    prefix.extend_from_slice(&parts.prefix[parts.prefix.len() - n_prefix..]);
    prefix.extend_from_slice(&parts.prompt);
    let mut suffix = vec![fim.suf];
    suffix.extend_from_slice(&parts.suffix[..n_suffix]);
    let (first, second) = if budget.spm {
        (suffix, prefix)
    } else {
        (prefix, suffix)
    };
    let mut out = parts.extra[parts.extra.len() - n_extra..].to_vec();
    out.extend(fim.bos);
    out.extend(first);
    out.extend(second);
    out.push(fim.mid);
    out
}

/// The extra files (`filename`, `text`) as a repository when the model has the tokens for
/// one, else as snippets.
pub fn extra_tokens(tok: &Tokenizer, fim: &FimTokens, files: &[(String, String)]) -> Vec<u32> {
    let text = |s: &str| tok.encode(s, false, false);
    let mut out = Vec::new();
    if let Some(rep) = fim.rep {
        out.push(rep);
        out.extend(text("myproject\n"));
    }
    for (name, body) in files {
        match fim.sep {
            Some(sep) => {
                out.push(sep);
                out.extend(text(&format!("{name}\n")));
            }
            None => out.extend(text("\n\n--- snippet ---\n\n")),
        }
        out.extend(text(body));
    }
    if let Some(sep) = fim.sep {
        out.push(sep);
        out.extend(text("filename\n"));
    }
    out
}

/// `POST /infill`.
pub fn handle(state: &State, body: &[u8], rsp: &mut Responder) -> Result<(), ApiError> {
    let tok = &state.loaded.tokenizer;
    let fim = FimTokens::of(tok)?;
    let v = parse_body(body)?;
    let o = Obj::root(&v);
    let prompt = o.str("prompt")?.unwrap_or("");
    let mut parts = Parts {
        prefix: code(state, o.get("input_prefix"), "input_prefix")?,
        suffix: code(state, o.get("input_suffix"), "input_suffix")?,
        prompt: tok.encode(prompt, false, true),
        extra: Vec::new(),
    };
    let files = extra_files(&o)?;
    parts.extra = extra_tokens(tok, &fim, &files);
    let budget = Budget {
        n_batch: state.config.batch_size,
        n_ctx: state.scheduler.options.n_ctx_slot,
        n_predict: state.config.n_predict,
        spm: state.config.spm_infill,
    };
    let tokens = layout(&fim, &parts, &budget);
    complete(state, &o, tokens, "input_prefix", rsp)
}

/// `input_prefix` or `input_suffix` (required): text, or token ids mixed with text, tokenized
/// without special tokens.
fn code(state: &State, v: Option<&Value>, field: &str) -> Result<Vec<u32>, ApiError> {
    let tok = &state.loaded.tokenizer;
    match v {
        None => Err(ApiError::field(field, "is required")),
        Some(Value::String(s)) => Ok(tok.encode(s, false, false)),
        Some(Value::Array(items)) => {
            let n_vocab = state.loaded.model.config.n_vocab;
            let mut out = Vec::new();
            for (i, item) in items.iter().enumerate() {
                match item {
                    Value::String(s) => out.extend(tok.encode(s, false, false)),
                    other => out.push(token_id(other, n_vocab, &format!("{field}[{i}]"))?),
                }
            }
            Ok(out)
        }
        Some(other) => Err(ApiError::field(
            field,
            format!(
                "expected a string or an array of strings and token ids, got {}",
                kind(other)
            ),
        )),
    }
}

/// `input_extra`: `[{"filename": string, "text": string}]`, `filename` defaulting to `tmp`.
fn extra_files(o: &Obj) -> Result<Vec<(String, String)>, ApiError> {
    let Some(items) = o.array("input_extra")? else {
        return Ok(Vec::new());
    };
    let paths: Vec<String> = (0..items.len())
        .map(|i| format!("input_extra[{i}]"))
        .collect();
    items
        .iter()
        .zip(&paths)
        .map(|(item, path)| {
            let chunk = Obj::at(item, path)?;
            let text = chunk.required_str("text")?;
            let name = chunk.str("filename")?.unwrap_or("tmp");
            Ok((name.to_string(), text.to_string()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIM: FimTokens = FimTokens {
        pre: 1000,
        suf: 1001,
        mid: 1002,
        rep: None,
        sep: None,
        bos: None,
    };

    fn budget(n_batch: usize) -> Budget {
        Budget {
            n_batch,
            n_ctx: 4096,
            n_predict: -1,
            spm: false,
        }
    }

    #[test]
    fn prefix_prompt_suffix_middle() {
        let parts = Parts {
            prefix: vec![1, 2],
            suffix: vec![3],
            prompt: vec![4],
            extra: vec![9, 9],
        };
        assert_eq!(
            layout(&FIM, &parts, &budget(2048)),
            [9, 9, 1000, 1, 2, 4, 1001, 3, 1002]
        );
        let spm = Budget {
            spm: true,
            ..budget(2048)
        };
        let bos = FimTokens {
            bos: Some(7),
            ..FIM
        };
        assert_eq!(
            layout(&bos, &parts, &spm),
            [9, 9, 7, 1001, 3, 1000, 1, 2, 4, 1002]
        );
    }

    #[test]
    fn long_parts_are_cut_to_the_batch() {
        // n_batch 16: the prefix keeps its last 12 tokens, the suffix its first 4 - 2 - 1.
        let parts = Parts {
            prefix: (0..20).collect(),
            suffix: (100..120).collect(),
            prompt: vec![50],
            extra: Vec::new(),
        };
        let out = layout(&FIM, &parts, &budget(16));
        let mut want = vec![1000];
        want.extend(8..20);
        want.extend([50, 1001, 100, 1002]);
        assert_eq!(out, want);
        // Extra text gets what the context leaves after a batch and twice -n.
        let parts = Parts {
            extra: (200..300).collect(),
            ..Parts::default()
        };
        let tight = Budget {
            n_ctx: 16 + 10 + 2 * 3,
            n_predict: 3,
            ..budget(16)
        };
        let out = layout(&FIM, &parts, &tight);
        assert_eq!(&out[..10], &(290..300).collect::<Vec<u32>>()[..]);
        assert_eq!(&out[10..], &[1000, 1001, 1002]);
    }
}
