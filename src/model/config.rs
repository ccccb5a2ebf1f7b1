//! Hyper-parameters of a model, read from GGUF metadata into one flat struct whose flags name
//! every way the supported architectures differ (biases, QK-norm, sliding window, ...).

use super::ModelError;
use crate::gguf::GgufFile;
use crate::ops::rope::RopeStyle;

/// The architecture families this engine runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    Llama,
    Qwen2,
    Gemma3,
}

impl Arch {
    /// The GGUF `general.architecture` name.
    pub fn name(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
            Arch::Gemma3 => "gemma3",
        }
    }
}

/// Activation of the gated feed-forward block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FfnActivation {
    Silu,
    Gelu,
}

/// Everything the forward pass needs to know about a model's shape.
#[derive(Clone, Debug)]
pub struct Config {
    pub arch: Arch,
    pub n_vocab: usize,
    pub n_embd: usize,
    pub n_layer: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    pub head_dim: usize,
    pub n_ff: usize,
    pub n_ctx_train: usize,
    pub rms_eps: f32,
    pub rope_style: RopeStyle,
    pub rope_dims: usize,
    pub rope_base: f32,
    pub rope_freq_scale: f32,
    /// RoPE base of sliding-window layers (Gemma 3 uses 10 000 there).
    pub rope_base_local: f32,
    /// Sliding-window size for local layers, if any.
    pub sliding_window: Option<usize>,
    /// Every `swa_period`-th layer (the last of each group) is global; the others slide.
    pub swa_period: usize,
    pub qk_norm: bool,
    pub post_norms: bool,
    /// Multiplies token embeddings (Gemma: sqrt(n_embd)).
    pub embed_scale: Option<f32>,
    /// Multiplies q·k.
    pub attn_scale: f32,
    pub ffn_act: FfnActivation,
}

impl Config {
    /// Reads the hyper-parameters of `file`, checking that the architecture is supported.
    pub fn from_gguf(file: &GgufFile) -> Result<Config, ModelError> {
        let arch_name = file
            .architecture()
            .ok_or(ModelError::MissingKey("general.architecture".into()))?;
        let arch = match arch_name {
            "llama" => Arch::Llama,
            "qwen2" => Arch::Qwen2,
            "gemma3" => Arch::Gemma3,
            other => return Err(ModelError::UnknownArchitecture(other.to_string())),
        };
        let key = |k: &str| format!("{arch_name}.{k}");
        let req_u32 = |k: &str| -> Result<usize, ModelError> {
            file.get_u32(&key(k))
                .map(|v| v as usize)
                .ok_or_else(|| ModelError::MissingKey(key(k)))
        };
        let n_embd = req_u32("embedding_length")?;
        let n_layer = req_u32("block_count")?;
        let n_head = req_u32("attention.head_count")?;
        let n_head_kv = file
            .get_u32(&key("attention.head_count_kv"))
            .map(|v| v as usize)
            .unwrap_or(n_head);
        let n_ff = req_u32("feed_forward_length")?;
        if n_head == 0 || n_head_kv == 0 || !n_head.is_multiple_of(n_head_kv) {
            return Err(ModelError::BadValue(
                key("attention.head_count_kv"),
                format!("{n_head_kv} does not divide {n_head} heads"),
            ));
        }
        let head_dim = file
            .get_u32(&key("attention.key_length"))
            .map(|v| v as usize)
            .unwrap_or(n_embd / n_head);
        let rms_eps = file
            .get_f32(&key("attention.layer_norm_rms_epsilon"))
            .unwrap_or(1e-5);
        let rope_base = file.get_f32(&key("rope.freq_base")).unwrap_or(10000.0);
        let rope_dims = file
            .get_u32(&key("rope.dimension_count"))
            .map(|v| v as usize)
            .unwrap_or(head_dim);
        let rope_freq_scale = match file.get_str(&key("rope.scaling.type")) {
            Some("linear") => 1.0 / file.get_f32(&key("rope.scaling.factor")).unwrap_or(1.0),
            Some("none") | None => 1.0,
            Some(other) => {
                return Err(ModelError::BadValue(
                    key("rope.scaling.type"),
                    format!("unsupported scaling '{other}'"),
                ))
            }
        };
        let n_vocab = match file.get_u32(&key("vocab_size")) {
            Some(v) => v as usize,
            None => file
                .get_str_array("tokenizer.ggml.tokens")
                .map(|t| t.len())
                .ok_or(ModelError::MissingKey("tokenizer.ggml.tokens".into()))?,
        };
        let n_ctx_train = file
            .get_u32(&key("context_length"))
            .map(|v| v as usize)
            .unwrap_or(4096);
        let gemma = arch == Arch::Gemma3;
        Ok(Config {
            arch,
            n_vocab,
            n_embd,
            n_layer,
            n_head,
            n_head_kv,
            head_dim,
            n_ff,
            n_ctx_train,
            rms_eps,
            rope_style: if arch == Arch::Llama {
                RopeStyle::Normal
            } else {
                RopeStyle::Neox
            },
            rope_dims,
            rope_base,
            rope_freq_scale,
            rope_base_local: if gemma { 10000.0 } else { rope_base },
            sliding_window: if gemma {
                file.get_u32(&key("attention.sliding_window"))
                    .map(|v| v as usize)
            } else {
                None
            },
            swa_period: 6,
            qk_norm: gemma,
            post_norms: gemma,
            embed_scale: gemma.then(|| (n_embd as f32).sqrt()),
            attn_scale: 1.0 / (head_dim as f32).sqrt(),
            ffn_act: if gemma {
                FfnActivation::Gelu
            } else {
                FfnActivation::Silu
            },
        })
    }

    /// Width of one token's keys (or values) across all KV heads.
    pub fn kv_dim(&self) -> usize {
        self.n_head_kv * self.head_dim
    }

    /// The sliding window of layer `il`, or `None` for a global layer.
    /// The rotary embedding of layer `il` (sliding-window layers have their own base).
    pub fn layer_rope(&self, il: usize) -> crate::ops::rope::Rope {
        crate::ops::rope::Rope {
            style: self.rope_style,
            n_dims: self.rope_dims,
            freq_base: if self.layer_window(il).is_some() {
                self.rope_base_local
            } else {
                self.rope_base
            },
            freq_scale: self.rope_freq_scale,
        }
    }

    pub fn layer_window(&self, il: usize) -> Option<usize> {
        let w = self.sliding_window?;
        (!(il + 1).is_multiple_of(self.swa_period)).then_some(w)
    }
}
