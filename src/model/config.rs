//! Hyper-parameters of a model, read from GGUF metadata. Each supported architecture is a
//! [`Family`]: a description of how its forward pass differs (RoPE layout and factor tensors,
//! norm placement, QK-norm, embedding scale, soft-capping, sliding-window pattern, fused
//! tensors, where the attention scale is applied). [`Config`] is that description filled in
//! with one file's numbers; the forward pass reads only `Config`, never the architecture name.
//!
//! Metadata that would change the math in a way not built here (an unknown architecture, a RoPE
//! scaling type not implemented) is refused with an error naming it, never run with a guess.

use super::mla::{mla_config, MlaConfig};
use super::moe_config::{moe_config, MoeConfig, MoeRule};
use super::ModelError;
use crate::gguf::{Array, GgufFile, Value};
use crate::ops::rope::{RopeStyle, Yarn};

/// The architecture families this engine runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    Llama,
    Qwen2,
    /// Qwen2-VL's text model: Qwen 2 with M-RoPE (`rope.dimension_sections`).
    Qwen2Vl,
    Qwen3,
    Gemma2,
    Gemma3,
    Phi3,
    Qwen2Moe,
    Qwen3Moe,
    DeepSeek2,
    /// A BERT encoder: embeddings and reranking only (`crate::model::EncoderWeights`).
    Bert,
}

impl Arch {
    /// Every supported architecture.
    pub const ALL: [Arch; 11] = [
        Arch::Llama,
        Arch::Qwen2,
        Arch::Qwen2Vl,
        Arch::Qwen3,
        Arch::Gemma2,
        Arch::Gemma3,
        Arch::Phi3,
        Arch::Qwen2Moe,
        Arch::Qwen3Moe,
        Arch::DeepSeek2,
        Arch::Bert,
    ];

    /// The supported names, comma-separated (for error messages).
    pub fn names() -> String {
        Arch::ALL.map(Arch::name).join(", ")
    }

    /// The GGUF `general.architecture` name.
    pub fn name(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
            Arch::Qwen2Vl => "qwen2vl",
            Arch::Qwen3 => "qwen3",
            Arch::Gemma2 => "gemma2",
            Arch::Gemma3 => "gemma3",
            Arch::Phi3 => "phi3",
            Arch::Qwen2Moe => "qwen2moe",
            Arch::Qwen3Moe => "qwen3moe",
            Arch::DeepSeek2 => "deepseek2",
            Arch::Bert => "bert",
        }
    }

    /// Whether the architecture is an encoder (bidirectional, no KV cache, no text generation):
    /// its weights are [`crate::model::Weights::encoder`], and only embeddings and reranking
    /// run it.
    pub fn is_encoder(self) -> bool {
        self == Arch::Bert
    }

    /// The architecture called `name` in GGUF metadata.
    pub fn from_name(name: &str) -> Option<Arch> {
        Arch::ALL.into_iter().find(|a| a.name() == name)
    }

    /// How this family computes, as llama.cpp builds its graph.
    pub fn family(self) -> Family {
        let base = Family {
            rope_style: RopeStyle::Neox,
            rope_factors: RopeFactors::None,
            qk_norm: false,
            norms: NormPlacement::Pre,
            embed_scale: false,
            scale_query: false,
            ffn_act: FfnActivation::Silu,
            fused: Fused::default(),
            swa: SwaRule::None,
            default_softcaps: (None, None),
            moe: MoeRule::Dense,
            mla: false,
        };
        match self {
            Arch::Llama => Family {
                rope_style: RopeStyle::Normal,
                rope_factors: RopeFactors::Freqs,
                // Mixtral: a llama file with experts, weights renormalised over the k chosen.
                moe: MoeRule::WhenExperts { norm_weights: true },
                ..base
            },
            Arch::Qwen2 | Arch::Qwen2Vl => base,
            Arch::Qwen3 => Family {
                qk_norm: true,
                ..base
            },
            Arch::Gemma2 => Family {
                norms: NormPlacement::PreAndPost,
                embed_scale: true,
                scale_query: true,
                ffn_act: FfnActivation::Gelu,
                swa: SwaRule::Always {
                    default_size: 4096,
                    default_period: 2,
                },
                default_softcaps: (Some(50.0), Some(30.0)),
                ..base
            },
            Arch::Gemma3 => Family {
                qk_norm: true,
                norms: NormPlacement::PreAndPost,
                embed_scale: true,
                scale_query: true,
                ffn_act: FfnActivation::Gelu,
                swa: SwaRule::WhenSized { default_period: 6 },
                ..base
            },
            Arch::Phi3 => Family {
                rope_factors: RopeFactors::LongShort,
                scale_query: true,
                fused: Fused {
                    qkv: true,
                    gate_up: true,
                },
                ..base
            },
            Arch::Qwen2Moe => Family {
                moe: MoeRule::Always {
                    norm_weights: false,
                    shared: true,
                },
                ..base
            },
            Arch::Qwen3Moe => Family {
                qk_norm: true,
                moe: MoeRule::Always {
                    norm_weights: true,
                    shared: false,
                },
                ..base
            },
            Arch::DeepSeek2 => Family {
                rope_style: RopeStyle::Normal,
                moe: MoeRule::DeepSeek,
                mla: true,
                ..base
            },
            // Read only for its numbers: the encoder's pass (`crate::embedding`) is its own.
            Arch::Bert => Family {
                ffn_act: FfnActivation::Gelu,
                ..base
            },
        }
    }
}

/// Architectures llama.cpp runs that are known here but not built, and what they would need.
const NOT_BUILT: [(&str, &str); 6] = [
    (
        "llama4",
        "chunked attention and sigmoid expert gating applied before the experts",
    ),
    ("qwen3next", "gated delta-net linear attention"),
    (BERT_ARCHS[0], BERT_ENCODER),
    (BERT_ARCHS[1], BERT_ENCODER),
    (BERT_ARCHS[2], BERT_ENCODER),
    (BERT_ARCHS[3], BERT_ENCODER),
];

/// BERT variants (embedding models and rerankers) this engine does not run; plain `bert` it
/// does.
const BERT_ARCHS: [&str; 4] = ["modern-bert", "nomic-bert", "jina-bert-v2", "neo-bert"];
const BERT_ENCODER: &str = "this BERT variant's encoder (rotary or ALiBi positions, gated or \
     expert FFNs, its own norms); plain `bert` encoders (all-MiniLM, bge, e5, bge-reranker) \
     are built";

/// Activation of the gated feed-forward block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FfnActivation {
    Silu,
    Gelu,
}

/// Where the RMS norms of a block sit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NormPlacement {
    /// Before attention and before the FFN.
    Pre,
    /// Also on the output of attention and of the FFN, before each residual add (Gemma).
    PreAndPost,
}

/// Which RoPE frequency-factor tensors a family reads (each optional in the file).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeFactors {
    None,
    /// `rope_freqs.weight` for every layer (Llama 3.1/3.2's llama3 scaling).
    Freqs,
    /// `rope_factors_short.weight` up to the original context, `rope_factors_long.weight`
    /// above it (Phi-3 LongRoPE).
    LongShort,
}

/// Tensors stored fused, used in place as row ranges.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fused {
    /// `attn_qkv.weight`: the rows of Q, then K, then V.
    pub qkv: bool,
    /// `ffn_up.weight` of `2 * n_ff` rows: the gate's, then the up projection's.
    pub gate_up: bool,
}

/// How a family decides which layers use a sliding window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SwaRule {
    None,
    /// Always, with these defaults for the window size and the pattern period.
    Always {
        default_size: usize,
        default_period: usize,
    },
    /// When the file gives a non-zero window size.
    WhenSized {
        default_period: usize,
    },
}

/// The description of one architecture family.
#[derive(Clone, Copy, Debug)]
pub struct Family {
    pub rope_style: RopeStyle,
    pub rope_factors: RopeFactors,
    pub qk_norm: bool,
    pub norms: NormPlacement,
    /// Token embeddings multiplied by sqrt(n_embd).
    pub embed_scale: bool,
    /// The attention scale multiplies the queries before attention rather than the scores.
    pub scale_query: bool,
    pub ffn_act: FfnActivation,
    pub fused: Fused,
    pub swa: SwaRule,
    /// Attention and final-logit soft-capping when the file does not say.
    pub default_softcaps: (Option<f32>, Option<f32>),
    /// Dense or mixture-of-experts feed-forward blocks, and the experts' gating.
    pub moe: MoeRule,
    /// Multi-head latent attention (DeepSeek-V2/V3) instead of Q/K/V projections.
    pub mla: bool,
}

/// Rotary embedding settings of a model (per-layer choices in [`Config::layer_rope_base`]).
#[derive(Clone, Debug)]
pub struct RopeConfig {
    pub style: RopeStyle,
    pub dims: usize,
    pub base: f32,
    /// Base of sliding-window layers.
    pub base_swa: f32,
    /// 1 / linear scaling factor.
    pub freq_scale: f32,
    /// Multiplies cos and sin (`rope.scaling.attn_factor`; LongRoPE).
    pub attn_factor: f32,
    pub factors: RopeFactors,
    /// The context the long/short factors switch at (`rope.scaling.original_context_length`),
    /// also YaRN's original context.
    pub n_ctx_orig: usize,
    /// YaRN (`rope.scaling.type` yarn), with its correction dimensions.
    pub yarn: Option<Yarn>,
    /// DeepSeek-V2's `mscale_all_dim` (`rope.scaling.yarn_log_multiplier` / 0.1); 0 for none.
    pub yarn_log_mul: f32,
}

/// Sliding-window attention: the window size and which layers use it.
#[derive(Clone, Debug)]
pub struct SlidingWindow {
    pub size: usize,
    pub layers: Vec<bool>,
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
    pub rope: RopeConfig,
    pub swa: Option<SlidingWindow>,
    pub qk_norm: bool,
    pub norms: NormPlacement,
    /// Multiplies token embeddings (Gemma: sqrt(n_embd)).
    pub embed_scale: Option<f32>,
    /// Multiplies q·k (or the queries, with `scale_query`).
    pub attn_scale: f32,
    pub scale_query: bool,
    /// Attention-score soft-capping `c · tanh(s / c)` (Gemma 2).
    pub attn_softcap: Option<f32>,
    /// Final-logit soft-capping (Gemma 2).
    pub final_softcap: Option<f32>,
    pub ffn_act: FfnActivation,
    pub fused: Fused,
    /// Mixture-of-experts feed-forward blocks (every layer after `n_dense_lead`), or `None`
    /// for dense ones.
    pub moe: Option<MoeConfig>,
    /// Multi-head latent attention (DeepSeek-V2/V3): its ranks and head widths. The cache then
    /// holds one "head" per position, the compressed latent followed by the shared rotary key
    /// (`head_dim` = `kv_lora_rank + qk_rope`, `n_head_kv` = 1).
    pub mla: Option<MlaConfig>,
    /// M-RoPE (Qwen2-VL): the rotated pairs of each head in four sections, rotated by a
    /// position's time, height, width and extra components (`rope.dimension_sections`); a
    /// text token's four are equal, which is plain NeoX RoPE.
    pub rope_sections: Option<[usize; 4]>,
}

impl Config {
    /// Reads the hyper-parameters of `file`, checking that the architecture is supported.
    pub fn from_gguf(file: &GgufFile) -> Result<Config, ModelError> {
        let arch_name = file
            .architecture()
            .ok_or(ModelError::MissingKey("general.architecture".into()))?;
        if let Some((_, why)) = NOT_BUILT.iter().find(|(name, _)| *name == arch_name) {
            return Err(ModelError::ArchitectureNotBuilt(arch_name.to_string(), why));
        }
        let arch = Arch::from_name(arch_name)
            .ok_or_else(|| ModelError::UnknownArchitecture(arch_name.to_string(), Arch::names()))?;
        let fam = arch.family();
        let key = |k: &str| format!("{arch_name}.{k}");
        let opt_u32 = |k: &str| file.get_u32(&key(k)).map(|v| v as usize);
        let req_u32 = |k: &str| opt_u32(k).ok_or_else(|| ModelError::MissingKey(key(k)));
        let n_embd = req_u32("embedding_length")?;
        let n_layer = req_u32("block_count")?;
        let n_head = req_u32("attention.head_count")?;
        let n_head_kv = opt_u32("attention.head_count_kv").unwrap_or(n_head);
        let n_ff = req_u32("feed_forward_length")?;
        if n_head == 0 || n_head_kv == 0 || !n_head.is_multiple_of(n_head_kv) {
            return Err(ModelError::BadValue(
                key("attention.head_count_kv"),
                format!("{n_head_kv} does not divide {n_head} heads"),
            ));
        }
        let head_dim = opt_u32("attention.key_length").unwrap_or(n_embd / n_head);
        let rms_eps = if arch.is_encoder() {
            // LayerNorm's epsilon, which llama.cpp requires of an encoder.
            file.get_f32(&key("attention.layer_norm_epsilon"))
                .ok_or_else(|| ModelError::MissingKey(key("attention.layer_norm_epsilon")))?
        } else {
            file.get_f32(&key("attention.layer_norm_rms_epsilon"))
                .unwrap_or(1e-5)
        };
        let n_vocab = match opt_u32("vocab_size") {
            Some(v) => v,
            None => file
                .get_str_array("tokenizer.ggml.tokens")
                .map(|t| t.len())
                .ok_or(ModelError::MissingKey("tokenizer.ggml.tokens".into()))?,
        };
        let n_ctx_train = opt_u32("context_length").unwrap_or(4096);

        let rope = rope_config(file, arch_name, &fam, head_dim, n_ctx_train)?;
        let moe = moe_config(file, arch_name, fam.moe, n_ff, n_layer, n_vocab)?;
        let mla = if fam.mla {
            let mla = mla_config(file, arch_name, n_layer, n_vocab, n_head_kv, head_dim)?;
            if mla.qk_rope != rope.dims {
                return Err(ModelError::BadValue(
                    key("rope.dimension_count"),
                    format!(
                        "{} rotated dimensions, but the latent key carries {}",
                        rope.dims, mla.qk_rope
                    ),
                ));
            }
            Some(mla)
        } else {
            None
        };
        let swa = sliding_window(file, arch_name, &fam, n_layer)?;
        let get_f32 = |k: &str| file.get_f32(&key(k));
        let (attn_cap, final_cap) = fam.default_softcaps;
        // Gemma's 27B models scale by n_embd / n_head rather than the head size.
        let big_gemma = matches!((arch, n_layer), (Arch::Gemma2, 46) | (Arch::Gemma3, 62));
        let scale_dim = if big_gemma { n_embd / n_head } else { head_dim };
        let attn_scale = match &mla {
            Some(m) => m.kq_scale(&rope),
            None => 1.0 / (scale_dim as f32).sqrt(),
        };
        let rope_sections = match arch {
            Arch::Qwen2Vl => Some(rope_sections(file, &key("rope.dimension_sections"), &rope)?),
            _ => None,
        };
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
            rope,
            swa,
            qk_norm: fam.qk_norm,
            norms: fam.norms,
            embed_scale: fam.embed_scale.then(|| (n_embd as f32).sqrt()),
            attn_scale,
            scale_query: fam.scale_query,
            attn_softcap: attn_cap
                .map(|d| get_f32("attn_logit_softcapping").unwrap_or(d))
                .filter(|&c| c != 0.0),
            final_softcap: match final_cap {
                Some(d) => Some(get_f32("final_logit_softcapping").unwrap_or(d)),
                None => get_f32("final_logit_softcapping"),
            }
            .filter(|&c| c != 0.0),
            ffn_act: fam.ffn_act,
            fused: fam.fused,
            moe,
            mla,
            rope_sections,
        })
    }

    /// Width of one token's keys (or values) across all KV heads.
    pub fn kv_dim(&self) -> usize {
        self.n_head_kv * self.head_dim
    }

    /// Width of one token's queries across all heads.
    pub fn q_dim(&self) -> usize {
        self.n_head * self.head_dim
    }

    /// The sliding window of layer `il`, or `None` for a global layer.
    pub fn layer_window(&self, il: usize) -> Option<usize> {
        let swa = self.swa.as_ref()?;
        swa.layers[il].then_some(swa.size)
    }

    /// The RoPE base of layer `il` (sliding-window layers may have their own).
    pub fn layer_rope_base(&self, il: usize) -> f32 {
        if self.layer_window(il).is_some() {
            self.rope.base_swa
        } else {
            self.rope.base
        }
    }
}

/// M-RoPE's four sections (`key`, required for the architecture, as llama.cpp requires it):
/// counts of rotated pairs.
fn rope_sections(file: &GgufFile, key: &str, rope: &RopeConfig) -> Result<[usize; 4], ModelError> {
    let arr = file
        .get_array(key)
        .ok_or_else(|| ModelError::MissingKey(key.to_string()))?;
    let vals: Vec<i64> = match (arr.as_i32s(), arr.as_u32s()) {
        (Some(s), _) => s.iter().map(|&v| v as i64).collect(),
        (_, Some(s)) => s.iter().map(|&v| v as i64).collect(),
        _ => {
            return Err(ModelError::BadValue(
                key.to_string(),
                "not an integer array".into(),
            ))
        }
    };
    let bad = |why: String| ModelError::BadValue(key.to_string(), why);
    if vals.len() < 4 || vals.iter().any(|&v| v < 0) {
        return Err(bad(format!(
            "{vals:?}: four sections of at least 0 expected"
        )));
    }
    let s = [vals[0], vals[1], vals[2], vals[3]].map(|v| v as usize);
    let sum: usize = s.iter().sum();
    // ggml's bounds: the sections' sum at most the rotated dimensions (pairs past the sum
    // start over at the first section), and one of the first three not empty.
    if sum > rope.dims || s[0] + s[1] + s[2] == 0 {
        return Err(bad(format!(
            "{s:?}: the sections must sum to at most {} with one of the first three non-empty",
            rope.dims
        )));
    }
    Ok(s)
}

fn rope_config(
    file: &GgufFile,
    arch_name: &str,
    fam: &Family,
    head_dim: usize,
    n_ctx_train: usize,
) -> Result<RopeConfig, ModelError> {
    let key = |k: &str| format!("{arch_name}.{k}");
    let base = file.get_f32(&key("rope.freq_base")).unwrap_or(10000.0);
    // llama.cpp: the scaling factor applies unless the type is "none".
    let scaling_type = file.get_str(&key("rope.scaling.type")).unwrap_or("linear");
    let factor = file
        .get_f32(&key("rope.scaling.factor"))
        .or_else(|| file.get_f32(&key("rope.scale_linear")))
        .filter(|&f| f != 0.0);
    let mut factors = fam.rope_factors;
    let freq_scale = match scaling_type {
        "none" => 1.0,
        "linear" | "yarn" => factor.map_or(1.0, |f| 1.0 / f),
        "longrope" => {
            if factors == RopeFactors::Freqs {
                factors = RopeFactors::LongShort;
            }
            factor.map_or(1.0, |f| 1.0 / f)
        }
        other => {
            return Err(ModelError::UnsupportedRopeScaling(
                other.to_string(),
                key("rope.scaling.type"),
            ))
        }
    };
    if scaling_type == "yarn" && fam.swa != SwaRule::None {
        return Err(ModelError::NotImplemented(
            key("rope.scaling.type"),
            "YaRN scaling with sliding-window layers".into(),
        ));
    }
    let base_swa = match fam.swa {
        // Gemma 3's local layers default to 10 000, Gemma 2's to the global base.
        SwaRule::WhenSized { .. } => 10000.0,
        _ => base,
    };
    let dims = file
        .get_u32(&key("rope.dimension_count"))
        .map(|v| v as usize)
        .unwrap_or(head_dim);
    let n_ctx_orig = file
        .get_u32(&key("rope.scaling.original_context_length"))
        .map(|v| v as usize)
        .unwrap_or(n_ctx_train);
    // DeepSeek-V2's converter stores 0.1 · mscale_all_dim; llama.cpp divides the 0.1 back out.
    let yarn_log_mul = match fam.mla {
        true => file
            .get_f32(&key("rope.scaling.yarn_log_multiplier"))
            .map_or(0.0, |m| m / 0.1),
        false => 0.0,
    };
    let rope_attn_factor = file
        .get_f32(&key("rope.scaling.attn_factor"))
        .unwrap_or(1.0);
    let yarn = (scaling_type == "yarn").then(|| {
        // llama.cpp's defaults: extrapolation factor 1, beta_fast 32, beta_slow 1 (no family
        // built here reads the yarn_ext_factor / yarn_beta_* keys).
        Yarn::new(1.0, dims, n_ctx_orig, base, 32.0, 1.0)
    });
    Ok(RopeConfig {
        style: fam.rope_style,
        dims,
        base,
        base_swa: file.get_f32(&key("rope.freq_base_swa")).unwrap_or(base_swa),
        freq_scale,
        attn_factor: yarn_attn_factor(yarn.is_some(), freq_scale, yarn_log_mul, fam.mla)
            * rope_attn_factor,
        factors,
        n_ctx_orig,
        yarn,
        yarn_log_mul,
    })
}

/// The factor llama.cpp passes to RoPE with YaRN (before `rope.scaling.attn_factor`): YaRN's
/// magnitude correction for the scale, divided by the one the RoPE kernel applies again (so it
/// cancels there), as `llama_context` computes `yarn_attn_factor`; 1 without YaRN.
fn yarn_attn_factor(yarn: bool, freq_scale: f32, log_mul: f32, deepseek: bool) -> f32 {
    if !yarn {
        return 1.0;
    }
    let get_mscale = |scale: f32, m: f32| {
        if scale <= 1.0 {
            1.0
        } else {
            (0.1 * m).mul_add(scale.ln(), 1.0)
        }
    };
    let factor = 1.0 / freq_scale;
    let f = if log_mul != 0.0 {
        // DeepSeek-V2 (whose mscale equals its mscale_all_dim): llama.cpp special-cases it.
        let mscale = if deepseek && log_mul != 1.0 {
            log_mul
        } else {
            1.0
        };
        get_mscale(factor, mscale) / get_mscale(factor, log_mul)
    } else {
        get_mscale(factor, 1.0)
    };
    f * (1.0 / 0.1f32.mul_add(factor.ln(), 1.0))
}

fn sliding_window(
    file: &GgufFile,
    arch_name: &str,
    fam: &Family,
    n_layer: usize,
) -> Result<Option<SlidingWindow>, ModelError> {
    let size_key = format!("{arch_name}.attention.sliding_window");
    let size = file.get_u32(&size_key).map(|v| v as usize);
    let (size, default_period) = match fam.swa {
        SwaRule::None => return Ok(None),
        SwaRule::Always {
            default_size,
            default_period,
        } => (size.unwrap_or(default_size), default_period),
        SwaRule::WhenSized { default_period } => match size {
            Some(s) if s > 0 => (s, default_period),
            _ => return Ok(None),
        },
    };
    // The pattern: a period (every period-th layer is global, the others slide), or one flag
    // per layer.
    let pattern_key = format!("{arch_name}.attention.sliding_window_pattern");
    let layers = match file.get(&pattern_key) {
        Some(Value::Array(Array::Bool(flags))) if flags.len() >= n_layer => {
            flags[..n_layer].to_vec()
        }
        Some(v) => {
            let period = v.as_u32().ok_or_else(|| {
                ModelError::BadValue(
                    pattern_key.clone(),
                    "expected a period or one flag per layer".into(),
                )
            })? as usize;
            periodic(period, n_layer)
        }
        None => periodic(default_period, n_layer),
    };
    Ok(Some(SlidingWindow { size, layers }))
}

/// Layers of a pattern with period `period`: all but the last of each group slide (a period
/// of 0 makes every layer slide), as llama.cpp lays it out.
fn periodic(period: usize, n_layer: usize) -> Vec<bool> {
    (0..n_layer)
        .map(|il| period == 0 || il % period < period - 1)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::moe_config::SharedExperts;
    use super::*;
    use crate::ops::router::Gating;

    #[test]
    fn swa_pattern_leaves_the_last_layer_of_each_period_global() {
        assert_eq!(periodic(2, 4), vec![true, false, true, false]);
        assert_eq!(
            periodic(6, 7),
            vec![true, true, true, true, true, false, true]
        );
        assert_eq!(periodic(0, 2), vec![true, true]);
    }

    /// The config of a metadata-only file of architecture `arch` with 4 layers and `extra` keys.
    #[test]
    fn qwen2vl_reads_its_mrope_sections() {
        let secs = |v: Vec<i32>| vec![("rope.dimension_sections", Value::Array(Array::I32(v)))];
        let c = config_of("qwen2vl", secs(vec![2, 3, 3, 0])).unwrap();
        assert_eq!(c.rope_sections, Some([2, 3, 3, 0]));
        assert_eq!(c.rope.style, RopeStyle::Neox);
        assert_eq!(
            config_of("qwen2", secs(vec![2, 3, 3, 0]))
                .unwrap()
                .rope_sections,
            None
        );
        let e = config_of("qwen2vl", Vec::new()).unwrap_err().to_string();
        assert!(e.contains("qwen2vl.rope.dimension_sections"), "{e}");
        // Head width 16: the sections may sum to at most 16.
        let e = config_of("qwen2vl", secs(vec![10, 10, 0, 0]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("at most 16"), "{e}");
        assert!(config_of("qwen2vl", secs(vec![0, 0, 0, 4])).is_err());
    }

    fn config_of(arch: &str, extra: Vec<(&str, Value)>) -> Result<Config, ModelError> {
        let mut w = crate::gguf::GgufWriter::new();
        w.add_kv("general.architecture", arch);
        for (k, v) in [
            ("embedding_length", 64u32),
            ("block_count", 4),
            ("attention.head_count", 4),
            ("feed_forward_length", 128),
            ("vocab_size", 10),
        ] {
            w.add_kv(format!("{arch}.{k}"), v);
        }
        for (k, v) in extra {
            w.add_kv(format!("{arch}.{k}"), v);
        }
        Config::from_gguf(&GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap())
    }

    #[test]
    fn gemma2_defaults_and_pattern_from_metadata() {
        let c = config_of("gemma2", vec![]).unwrap();
        let swa = c.swa.as_ref().unwrap();
        assert_eq!((swa.size, swa.layers.clone()), (4096, periodic(2, 4)));
        assert_eq!((c.attn_softcap, c.final_softcap), (Some(50.0), Some(30.0)));
        let flags = vec![false, true, true, false];
        let c = config_of(
            "gemma2",
            vec![
                ("attention.sliding_window_pattern", flags.clone().into()),
                ("attention.sliding_window", 128u32.into()),
                ("attn_logit_softcapping", 0f32.into()),
            ],
        )
        .unwrap();
        assert_eq!(c.swa.as_ref().unwrap().layers, flags);
        assert_eq!(c.layer_window(1), Some(128));
        assert_eq!(c.layer_window(3), None);
        assert_eq!(c.attn_softcap, None, "a cap of 0 means none");
        let c = config_of(
            "gemma3",
            vec![
                ("attention.sliding_window", 512u32.into()),
                ("attention.sliding_window_pattern", 3u32.into()),
            ],
        )
        .unwrap();
        assert_eq!(c.swa.unwrap().layers, vec![true, true, false, true]);
        assert!(config_of("gemma3", vec![]).unwrap().swa.is_none());
    }

    #[test]
    fn rope_scaling_types() {
        let linear = config_of(
            "llama",
            vec![
                ("rope.scaling.type", "linear".into()),
                ("rope.scaling.factor", 4f32.into()),
            ],
        )
        .unwrap();
        assert_eq!(linear.rope.freq_scale, 0.25);
        assert_eq!(linear.rope.factors, RopeFactors::Freqs);
        let longrope = config_of("llama", vec![("rope.scaling.type", "longrope".into())]).unwrap();
        assert_eq!(longrope.rope.factors, RopeFactors::LongShort);
        let err = config_of("phi3", vec![("rope.scaling.type", "su".into())]).unwrap_err();
        assert!(err.to_string().contains("'su'"), "{err}");
        let yarn = config_of(
            "qwen2",
            vec![
                ("rope.scaling.type", "yarn".into()),
                ("rope.scaling.factor", 4f32.into()),
                ("rope.scaling.original_context_length", 1024u32.into()),
            ],
        )
        .unwrap();
        assert_eq!(yarn.rope.freq_scale, 0.25);
        let y = yarn.rope.yarn.unwrap();
        assert_eq!(y.ext_factor, 1.0);
        // 16 dims, base 10000, 1024 positions: beta 32 -> floor(1.41), beta 1 -> ceil(4.42).
        assert_eq!(y.corr_dims, [1.0, 5.0]);
        // YaRN's magnitude correction, divided by the one the kernel applies again: 1.
        assert!((yarn.rope.attn_factor - 1.0).abs() < 1e-6);
        let err = config_of("gemma2", vec![("rope.scaling.type", "yarn".into())]).unwrap_err();
        assert!(err.to_string().contains("sliding-window"), "{err}");
    }

    #[test]
    fn moe_layout_and_gating_per_family() {
        let experts = |n: u32, k: u32| {
            vec![
                ("expert_count", Value::from(n)),
                ("expert_used_count", Value::from(k)),
            ]
        };
        assert_eq!(config_of("llama", vec![]).unwrap().moe, None);
        let mixtral = config_of("llama", experts(8, 2)).unwrap().moe.unwrap();
        assert_eq!((mixtral.n_expert, mixtral.n_expert_used), (8, 2));
        assert_eq!((mixtral.n_ff_exp, mixtral.shared), (128, None));
        assert!(mixtral.norm_weights);
        let mut kv = experts(4, 2);
        kv.push(("expert_feed_forward_length", Value::from(32u32)));
        let q2 = config_of("qwen2moe", kv.clone()).unwrap().moe.unwrap();
        assert_eq!(
            (
                q2.n_ff_exp,
                q2.shared.map(|s| (s.n_ff, s.gated)),
                q2.norm_weights
            ),
            (32, Some((128, true)), false)
        );
        let q3 = config_of("qwen3moe", experts(4, 2)).unwrap().moe.unwrap();
        assert_eq!((q3.n_ff_exp, q3.shared, q3.norm_weights), (64, None, true));
        let err = config_of("qwen2", experts(4, 2)).unwrap_err();
        assert!(err.to_string().contains("dense"), "{err}");
        // Group-limited routing applies to every family, as in llama.cpp.
        let mut kv = experts(8, 2);
        kv.push(("expert_group_count", Value::from(4u32)));
        kv.push(("expert_group_used_count", Value::from(2u32)));
        let g = config_of("qwen3moe", kv)
            .unwrap()
            .moe
            .unwrap()
            .groups
            .unwrap();
        assert_eq!((g.n_groups, g.n_used), (4, 2));
        let mut kv = experts(8, 2);
        kv.push(("expert_group_count", Value::from(3u32)));
        let err = config_of("qwen3moe", kv).unwrap_err().to_string();
        assert!(err.contains("do not divide 8 experts"), "{err}");
    }

    /// The metadata of a DeepSeek-V2 file in today's layout: latent attention of rank 32 with
    /// 16 rotated dimensions, one leading dense layer, 8 experts (2 used), 2 shared experts.
    fn deepseek(extra: Vec<(&str, Value)>) -> Vec<(&str, Value)> {
        let mut kv = vec![
            ("attention.head_count_kv", Value::from(1u32)),
            ("attention.q_lora_rank", Value::from(0u32)),
            ("attention.kv_lora_rank", Value::from(32u32)),
            ("attention.key_length", Value::from(48u32)),
            ("attention.value_length", Value::from(32u32)),
            ("attention.key_length_mla", Value::from(40u32)),
            ("attention.value_length_mla", Value::from(16u32)),
            ("rope.dimension_count", Value::from(16u32)),
            ("leading_dense_block_count", Value::from(1u32)),
            ("expert_count", Value::from(8u32)),
            ("expert_used_count", Value::from(2u32)),
            ("expert_feed_forward_length", Value::from(16u32)),
            ("expert_shared_count", Value::from(2u32)),
        ];
        for (k, v) in extra {
            kv.retain(|(m, _)| *m != k);
            kv.push((k, v));
        }
        kv
    }

    #[test]
    fn deepseek2_latent_attention_and_experts() {
        let c = config_of("deepseek2", deepseek(vec![])).unwrap();
        let m = c.mla.clone().unwrap();
        assert_eq!(
            (
                m.q_lora_rank,
                m.kv_lora_rank,
                m.qk_nope,
                m.qk_rope,
                m.v_head
            ),
            (None, 32, 24, 16, 16)
        );
        assert_eq!((c.kv_dim(), c.rope.style), (48, RopeStyle::Normal));
        assert!((c.attn_scale - 1.0 / 40f32.sqrt()).abs() < 1e-7);
        let moe = c.moe.unwrap();
        assert_eq!((moe.n_dense_lead, moe.gating), (1, Gating::Softmax));
        assert_eq!(
            moe.shared,
            Some(SharedExperts {
                n_ff: 32,
                gated: false
            })
        );
        assert_eq!((moe.norm_weights, moe.weights_scale), (false, None));
        let v3 = config_of(
            "deepseek2",
            deepseek(vec![
                ("attention.q_lora_rank", Value::from(64u32)),
                ("expert_gating_func", Value::from(2u32)),
                ("expert_weights_norm", Value::from(true)),
                ("expert_weights_scale", Value::from(2.5f32)),
            ]),
        )
        .unwrap();
        assert_eq!(v3.mla.unwrap().q_lora_rank, Some(64));
        let moe = v3.moe.unwrap();
        assert_eq!(
            (moe.gating, moe.norm_weights, moe.weights_scale),
            (Gating::Sigmoid, true, Some(2.5))
        );
    }

    #[test]
    fn deepseek2_refusals_name_what_is_missing() {
        let old = deepseek(vec![("attention.key_length_mla", Value::from(0u32))]);
        let err = config_of("deepseek2", old).unwrap_err().to_string();
        assert!(err.contains("attn_kv_b"), "{err}");
        let mut no_q = deepseek(vec![]);
        no_q.retain(|(k, _)| *k != "attention.q_lora_rank");
        let err = config_of("deepseek2", no_q).unwrap_err().to_string();
        assert!(err.contains("deepseek2.attention.q_lora_rank"), "{err}");
        let gating = deepseek(vec![("expert_gating_func", Value::from(4u32))]);
        let err = config_of("deepseek2", gating).unwrap_err().to_string();
        assert!(err.contains("sqrt-softplus"), "{err}");
        let mha = deepseek(vec![("attention.head_count_kv", Value::from(4u32))]);
        let err = config_of("deepseek2", mha).unwrap_err().to_string();
        assert!(err.contains("latent attention needs one"), "{err}");
    }

    #[test]
    fn architecture_errors_name_the_supported_ones() {
        let err = config_of("mamba9", vec![]).unwrap_err().to_string();
        for a in Arch::ALL {
            assert!(err.contains(a.name()), "{err}");
        }
        let err = config_of("llama4", vec![]).unwrap_err().to_string();
        assert!(err.contains("'llama4' is not built"), "{err}");
    }

    #[test]
    fn every_architecture_round_trips_its_name() {
        for a in Arch::ALL {
            assert_eq!(Arch::from_name(a.name()), Some(a));
        }
        assert_eq!(Arch::from_name("mamba"), None);
    }
}
