//! A BERT encoder's weights, as llama.cpp loads them for `bert` (all-MiniLM, bge, e5,
//! bge-reranker): token, token-type and learned position embeddings with a LayerNorm, blocks
//! of biased Q/K/V/output projections with a LayerNorm after the attention and after the
//! biased up/down feed-forward, and for rerankers the classification head (`cls` dense + tanh,
//! then `cls.output`). Only shapes and places are checked here; the pass is
//! `crate::embedding`'s.

use super::weights::Lookup;
use super::{Config, ModelError, Tensor};

/// A weight matrix and its optional bias.
pub struct Linear {
    pub w: Tensor,
    pub b: Option<Vec<f32>>,
}

/// A LayerNorm's weight and bias.
pub struct LayerNorm {
    pub w: Vec<f32>,
    pub b: Vec<f32>,
}

/// One encoder block.
pub struct EncoderLayer {
    pub q: Linear,
    pub k: Linear,
    pub v: Linear,
    pub o: Linear,
    /// After the attention's residual sum.
    pub attn_norm: LayerNorm,
    pub up: Linear,
    pub down: Linear,
    /// After the feed-forward's residual sum.
    pub out_norm: LayerNorm,
}

/// Every weight of a BERT encoder.
pub struct EncoderWeights {
    /// Row 0 of `token_types.weight` (llama.cpp gives every token type 0), when present.
    pub type0: Option<Vec<f32>>,
    /// `position_embd.weight`: one row per position, `n_ctx_train` rows.
    pub pos: Tensor,
    pub embd_norm: LayerNorm,
    pub layers: Vec<EncoderLayer>,
    /// The reranker's dense layer (`cls`), applied with a tanh.
    pub cls: Option<Linear>,
    /// The reranker's output head (`cls.output`), `n_cls_out` rows.
    pub cls_out: Option<Linear>,
}

impl EncoderWeights {
    /// The number of values rank pooling gives: the head's outputs, else the dense layer's.
    pub fn n_rank_out(&self, n_embd: usize) -> usize {
        self.cls_out
            .as_ref()
            .map_or(n_embd, |h| h.w.info.dims[1] as usize)
    }

    /// Whether rank pooling has a head to run.
    pub fn can_rank(&self) -> bool {
        self.cls.is_some() || self.cls_out.is_some()
    }
}

/// Looks up the encoder's weights (the token embedding is the caller's).
pub(super) fn load(l: &Lookup<'_>, cfg: &Config) -> Result<EncoderWeights, ModelError> {
    let e = cfg.n_embd;
    let arch = cfg.arch.name();
    let types_key = "tokenizer.ggml.token_type_count".to_string();
    let n_types = l.file.get_u32(&types_key).unwrap_or(0) as usize;
    if n_types == 0 {
        // As llama.cpp: "model needs to define token type count".
        return Err(ModelError::MissingKey(types_key));
    }
    let type0 = match l.file.tensor("token_types.weight") {
        Some(_) => {
            let t = l.tensor("token_types.weight", &[e, n_types])?;
            let mut row = vec![0f32; e];
            t.mat(l.file).dequantize_row(0, &mut row);
            Some(row)
        }
        None => None,
    };
    let norm = |name: &str| -> Result<LayerNorm, ModelError> {
        Ok(LayerNorm {
            w: l.vector(&format!("{name}.weight"), e)?,
            b: l.vector(&format!("{name}.bias"), e)?,
        })
    };
    let linear = |name: &str, cols: usize, rows: usize| -> Result<Linear, ModelError> {
        let bias = format!("{name}.bias");
        Ok(Linear {
            w: l.tensor(&format!("{name}.weight"), &[cols, rows])?,
            b: match l.file.tensor(&bias) {
                Some(_) => Some(l.vector(&bias, rows)?),
                None => None,
            },
        })
    };
    let opt_linear = |name: &str, cols: usize, rows: usize| -> Result<Option<Linear>, ModelError> {
        match l.file.tensor(&format!("{name}.weight")) {
            Some(_) => Ok(Some(linear(name, cols, rows)?)),
            None => Ok(None),
        }
    };
    let layers = (0..cfg.n_layer)
        .map(|i| {
            let n = |s: &str| format!("blk.{i}.{s}");
            Ok(EncoderLayer {
                q: linear(&n("attn_q"), e, cfg.q_dim())?,
                k: linear(&n("attn_k"), e, cfg.kv_dim())?,
                v: linear(&n("attn_v"), e, cfg.kv_dim())?,
                o: linear(&n("attn_output"), cfg.q_dim(), e)?,
                attn_norm: norm(&n("attn_output_norm"))?,
                up: linear(&n("ffn_up"), e, cfg.n_ff)?,
                down: linear(&n("ffn_down"), cfg.n_ff, e)?,
                out_norm: norm(&n("layer_output_norm"))?,
            })
        })
        .collect::<Result<Vec<_>, ModelError>>()?;
    let labels_key = format!("{arch}.classifier.output_labels");
    let n_cls_out = l
        .file
        .get_str_array(&labels_key)
        .map_or(1, |v| v.len().max(1));
    Ok(EncoderWeights {
        type0,
        pos: l.tensor("position_embd.weight", &[e, cfg.n_ctx_train])?,
        embd_norm: norm("token_embd_norm")?,
        layers,
        cls: opt_linear("cls", e, e)?,
        cls_out: opt_linear("cls.output", e, n_cls_out)?,
    })
}
