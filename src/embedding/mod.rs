//! Embeddings of a decoder model, as llama.cpp computes them: the hidden states after the last
//! block and the output norm (before the output head), one vector per token, then pooled
//! (`--pooling`) and normalised (`embd_normalize`). Rank pooling (`--pooling rank`, reranking)
//! reads the last token's state through the model's classification head
//! ([`crate::model::Classifier`]): one score per label, softmaxed for Qwen3 as llama.cpp does.
//!
//! Owns pooling, the classification head and normalisation; the forward pass is [`PlacedModel::hidden_states`](crate::engine::PlacedModel::hidden_states). A sequence is
//! run through a private KV cache in chunks of the batch size, so a text longer than one batch
//! gives the same vectors a single pass would.
//!
//! An encoder (BERT: [`crate::model::Arch::is_encoder`]) runs its own pass instead
//! (`encoder`): the whole sequence at once, with no cache; its rank pooling reads the first
//! token through the `cls` head and tanh, then `cls.output`, unsoftmaxed, as llama.cpp does.

mod encoder;

use crate::backend::BackendError;
use crate::engine::PlacedModel;
use crate::model::Batch;

/// How the token vectors of one input become its embedding (`--pooling`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pooling {
    /// Every token's vector, unpooled.
    None,
    /// The mean of every token's vector.
    Mean,
    /// The first token's vector.
    Cls,
    /// The last token's vector.
    Last,
    /// The last token's vector through the classification head: a reranker's scores.
    Rank,
}

/// Why a pooling name was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PoolingError {
    #[error("--pooling {0}: expected none, mean, cls, last or rank")]
    Unknown(String),
}

impl Pooling {
    /// llama.cpp's names: `none`, `mean`, `cls`, `last`, `rank`.
    pub fn parse(name: &str) -> Result<Pooling, PoolingError> {
        match name {
            "none" => Ok(Pooling::None),
            "mean" => Ok(Pooling::Mean),
            "cls" => Ok(Pooling::Cls),
            "last" => Ok(Pooling::Last),
            "rank" => Ok(Pooling::Rank),
            other => Err(PoolingError::Unknown(other.to_string())),
        }
    }

    /// The pooling of `model` when `--pooling` is not given: the GGUF's
    /// `{arch}.pooling_type` (llama.cpp's numbering: 0 none, 1 mean, 2 cls, 3 last, 4 rank), else none,
    /// which is what llama.cpp picks for the decoder models it runs.
    pub fn model_default(model: &PlacedModel) -> Pooling {
        let arch = model.file.get_str("general.architecture").unwrap_or("");
        match model
            .file
            .get_u64(&format!("{arch}.pooling_type"))
            .unwrap_or(0)
        {
            1 => Pooling::Mean,
            2 => Pooling::Cls,
            3 => Pooling::Last,
            4 => Pooling::Rank,
            _ => Pooling::None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Pooling::None => "none",
            Pooling::Mean => "mean",
            Pooling::Cls => "cls",
            Pooling::Last => "last",
            Pooling::Rank => "rank",
        }
    }
}

/// The embedding of `tokens` (one sequence, non-empty, at most `n_ctx` tokens): one vector
/// per token for [`Pooling::None`], else one pooled vector ([`Pooling::Rank`]: the
/// classification head's outputs); not normalised. Runs at most `n_batch` tokens per forward
/// pass through a cache of `n_ctx` positions.
///
/// A backend's failure (an RPC worker gone) is passed on. Panics for [`Pooling::Rank`] on a
/// model without a classification head (check [`rank_ready`] first).
pub fn embed(
    model: &PlacedModel,
    tokens: &[u32],
    pooling: Pooling,
    n_ctx: usize,
    n_batch: usize,
) -> Result<Vec<Vec<f32>>, BackendError> {
    assert!(!tokens.is_empty() && tokens.len() <= n_ctx);
    if let Some(enc) = &model.weights.encoder {
        return Ok(embed_encoder(model, enc, tokens, pooling));
    }
    let e = model.config.n_embd;
    let last = tokens.len() - 1;
    let wanted = |i: usize| match pooling {
        Pooling::None | Pooling::Mean => true,
        Pooling::Cls => i == 0,
        Pooling::Last | Pooling::Rank => i == last,
    };
    let mut caches = [model.try_new_cache_layers(n_ctx, model.config.n_layer)?];
    let mut rows = Vec::new();
    for (k, chunk) in tokens.chunks(n_batch.max(1)).enumerate() {
        let start = k * n_batch.max(1);
        let batch = Batch {
            tokens: chunk.to_vec(),
            pos: (start..start + chunk.len()).collect(),
            seq: vec![0; chunk.len()],
            logits: (start..start + chunk.len()).map(wanted).collect(),
            bidirectional: false,
            rope_pos: Vec::new(),
        };
        rows.extend(model.try_hidden_states(&batch, &mut caches)?);
    }
    Ok(match pooling {
        Pooling::None => rows.chunks_exact(e).map(<[f32]>::to_vec).collect(),
        Pooling::Mean => vec![mean_rows(&rows, e)],
        Pooling::Cls | Pooling::Last => vec![rows],
        Pooling::Rank => {
            let head = model.weights.classifier.as_ref().expect("rank_ready");
            vec![classify(model, head, &rows)]
        }
    })
}

/// [`embed`] for an encoder: one pass over the whole sequence (which fits its learned
/// positions: the context is capped at `n_ctx_train` for an encoder); rank pooling reads the first token, as llama.cpp does for a
/// non-causal model.
fn embed_encoder(
    model: &PlacedModel,
    enc: &crate::model::EncoderWeights,
    tokens: &[u32],
    pooling: Pooling,
) -> Vec<Vec<f32>> {
    let e = model.config.n_embd;
    let rows = encoder::hidden_states(model, enc, tokens);
    match pooling {
        Pooling::None => rows.chunks_exact(e).map(<[f32]>::to_vec).collect(),
        Pooling::Mean => vec![mean_rows(&rows, e)],
        Pooling::Cls => vec![rows[..e].to_vec()],
        Pooling::Last => vec![rows[rows.len() - e..].to_vec()],
        Pooling::Rank => vec![encoder::rank(model, enc, &rows[..e])],
    }
}

/// Why `model` cannot rank, if it cannot: rank pooling needs a classification head.
pub fn rank_ready(model: &PlacedModel) -> Result<(), String> {
    if model.weights.classifier.is_some()
        || model.weights.encoder.as_ref().is_some_and(|e| e.can_rank())
    {
        return Ok(());
    }
    if model.config.arch.is_encoder() {
        return Err(format!(
            "--rerank (--pooling rank): the model has no classification head (cls.weight or \
             {} of a reranker GGUF, such as a converted bge-reranker); this {} model is an \
             embedding model, not a reranker",
            crate::model::CLS_OUT,
            model.config.arch.name()
        ));
    }
    Err(format!(
        "--rerank (--pooling rank): the model has no classification head ({} of a reranker \
         GGUF, such as a converted Qwen3-Reranker); this {} model is not a reranker",
        crate::model::CLS_OUT,
        model.config.arch.name()
    ))
}

/// The head's outputs for one output-normed hidden row `h`, softmaxed where the head says.
fn classify(model: &PlacedModel, head: &crate::model::Classifier, h: &[f32]) -> Vec<f32> {
    let mut out = vec![0f32; head.n_out()];
    crate::ops::matmul(&head.out.mat(&model.file), h, 1, &mut out);
    if head.softmax {
        softmax(&mut out);
    }
    out
}

/// ggml's `soft_max` of one row: `exp(x - max)`, summed in f64, scaled by the sum's inverse.
fn softmax(v: &mut [f32]) {
    let max = v.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0f64;
    for x in v.iter_mut() {
        *x = (*x - max).exp();
        sum += f64::from(*x);
    }
    let inv = (1.0 / sum) as f32;
    v.iter_mut().for_each(|x| *x *= inv);
}

/// The mean of the `e`-float rows of `rows`.
fn mean_rows(rows: &[f32], e: usize) -> Vec<f32> {
    let n = rows.len() / e;
    let mut sum = vec![0f32; e];
    for row in rows.chunks_exact(e) {
        sum.iter_mut().zip(row).for_each(|(s, x)| *s += x);
    }
    let inv = 1.0 / n as f32;
    sum.iter_mut().for_each(|s| *s *= inv);
    sum
}

/// `v` normalised as llama.cpp's `embd_normalize` says: -1 none, 0 by the largest magnitude
/// scaled to the int16 range, 1 taxicab, 2 Euclidean, p > 2 the p-norm. A zero vector stays
/// zero.
pub fn normalize(v: &[f32], embd_normalize: i32) -> Vec<f32> {
    let sum: f64 = match embd_normalize {
        -1 => 1.0,
        0 => v.iter().fold(0f64, |m, &x| m.max(f64::from(x.abs()))) / 32760.0,
        2 => v.iter().map(|&x| f64::from(x * x)).sum::<f64>().sqrt(),
        p => {
            let p = f64::from(p);
            v.iter()
                .map(|&x| f64::from(x.abs()).powf(p))
                .sum::<f64>()
                .powf(1.0 / p)
        }
    };
    let scale = if sum > 0.0 { (1.0 / sum) as f32 } else { 0.0 };
    v.iter().map(|&x| x * scale).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn norms() {
        let v = [3.0f32, -4.0];
        assert_eq!(normalize(&v, 2), vec![0.6, -0.8]);
        assert_eq!(normalize(&v, -1), v.to_vec());
        let t = normalize(&v, 1);
        assert!((t[0] - 3.0 / 7.0).abs() < 1e-6 && (t[1] + 4.0 / 7.0).abs() < 1e-6);
        let m = normalize(&v, 0);
        assert!((m[1] + 32760.0).abs() < 1e-2, "{m:?}");
        let p3 = normalize(&v, 3);
        let n3: f32 = p3.iter().map(|x| x.abs().powi(3)).sum();
        assert!((n3 - 1.0).abs() < 1e-5, "{n3}");
        assert_eq!(normalize(&[0.0, 0.0], 2), vec![0.0, 0.0]);
    }

    #[test]
    fn softmax_sums_to_one() {
        let mut v = [1.0f32, 3.0];
        softmax(&mut v);
        let want = 1.0 / (1.0 + 2f32.exp());
        assert!(
            (v[0] - want).abs() < 1e-7 && (v[0] + v[1] - 1.0).abs() < 1e-7,
            "{v:?}"
        );
    }

    #[test]
    fn mean_of_rows() {
        assert_eq!(mean_rows(&[1.0, 2.0, 3.0, 6.0], 2), vec![2.0, 4.0]);
    }

    #[test]
    fn pooling_names() {
        assert_eq!(Pooling::parse("mean"), Ok(Pooling::Mean));
        assert_eq!(Pooling::parse("last").map(Pooling::name), Ok("last"));
        assert_eq!(Pooling::parse("rank").map(Pooling::name), Ok("rank"));
        assert!(Pooling::parse("max").is_err());
    }
}
