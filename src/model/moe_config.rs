//! The mixture-of-experts hyper-parameters of a model: how many experts, how many each token
//! uses, their widths, which leading layers stay dense, and how the router's scores become
//! expert weights. Read from GGUF metadata as llama.cpp 0c1e570 reads it for the families built
//! here (`llama` with experts, `qwen2moe`, `qwen3moe`, `deepseek2`); the routing math itself is in
//! `ops::router`, the block in `model::moe_ffn`.
//!
//! llama.cpp fixes the gating of the Mixtral and Qwen families in code (softmax; weights
//! renormalised over the chosen experts for Mixtral and Qwen3-MoE, not for Qwen2-MoE; no scale)
//! and never reads `expert_gating_func`, `expert_weights_norm` or `expert_weights_scale` for
//! them. A file whose metadata says otherwise asks for math that would not be done, so it is
//! refused, naming the key, rather than run with the family's fixed choice. DeepSeek-V2/V3 read
//! all three from the file (softmax or sigmoid gating, optional renormalisation and scale).
//! Group-limited routing (`expert_group_count`/`expert_group_used_count`) is applied by
//! llama.cpp to every family, and so it is here.

use super::ModelError;
use crate::gguf::GgufFile;
use crate::ops::router::{Gating, Groups};

/// The most experts a model may have (llama.cpp's `LLAMA_MAX_EXPERTS`).
pub const MAX_EXPERTS: usize = 512;

/// How a family's MoE layers are laid out and gated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MoeRule {
    /// Dense feed-forward blocks only.
    Dense,
    /// Experts when the file has `expert_count` > 0 (Mixtral in the `llama` architecture).
    WhenExperts { norm_weights: bool },
    /// Always experts; `shared`: plus a shared expert behind a sigmoid gate (Qwen2-MoE).
    Always { norm_weights: bool, shared: bool },
    /// DeepSeek-V2/V3: leading dense layers, then experts with ungated shared experts; the
    /// gating function, renormalisation and scale come from the file.
    DeepSeek,
}

/// The shared expert(s) every token goes through besides its routed ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SharedExperts {
    /// Width of the shared FFN (DeepSeek: `n_ff_exp · expert_shared_count`).
    pub n_ff: usize,
    /// Scaled by a sigmoid gate of the token (Qwen2-MoE), or added as is (DeepSeek).
    pub gated: bool,
}

/// The experts of every MoE layer of one model.
#[derive(Clone, Debug, PartialEq)]
pub struct MoeConfig {
    pub n_expert: usize,
    /// Experts each token is routed to (k of top-k).
    pub n_expert_used: usize,
    /// Width of one routed expert's hidden layer.
    pub n_ff_exp: usize,
    /// The shared expert, when the family has one.
    pub shared: Option<SharedExperts>,
    /// The first this many layers have a dense FFN of width `n_ff` instead (DeepSeek).
    pub n_dense_lead: usize,
    /// How router logits become probabilities.
    pub gating: Gating,
    /// Divide the chosen experts' probabilities by their sum.
    pub norm_weights: bool,
    /// Multiply the expert weights by this (DeepSeek's routed scaling factor), when not 1.
    pub weights_scale: Option<f32>,
    /// Group-limited routing, when the file asks for it.
    pub groups: Option<Groups>,
}

/// llama.cpp's `llama_expert_gating_func_type` numbers.
const GATING_NONE: u32 = 0;
const GATING_SOFTMAX: u32 = 1;
const GATING_SIGMOID: u32 = 2;

/// The MoE configuration of `file` under `rule`; `None` for a dense model.
pub fn moe_config(
    file: &GgufFile,
    arch_name: &str,
    rule: MoeRule,
    n_ff: usize,
    n_layer: usize,
    n_vocab: usize,
) -> Result<Option<MoeConfig>, ModelError> {
    let key = |k: &str| format!("{arch_name}.{k}");
    let count = |k: &str| -> Result<Option<usize>, ModelError> {
        match file.get(&key(k)) {
            None => Ok(None),
            Some(v) => v.as_u32().map(|n| Some(n as usize)).ok_or_else(|| {
                ModelError::BadValue(key(k), "expected one unsigned integer".into())
            }),
        }
    };
    let n_expert = count("expert_count")?;
    let (norm_weights, shared) = match rule {
        MoeRule::Dense => {
            return match n_expert {
                Some(n) if n > 0 => Err(ModelError::BadValue(
                    key("expert_count"),
                    format!("{n} experts, but {arch_name} is a dense architecture here"),
                )),
                _ => Ok(None),
            }
        }
        MoeRule::WhenExperts { norm_weights } => match n_expert {
            None | Some(0) => return Ok(None),
            Some(_) => (norm_weights, false),
        },
        MoeRule::Always {
            norm_weights,
            shared,
        } => (norm_weights, shared),
        MoeRule::DeepSeek => (false, true),
    };
    let n_expert = n_expert
        .filter(|&n| n > 0)
        .ok_or_else(|| ModelError::MissingKey(key("expert_count")))?;
    let n_expert_used = count("expert_used_count")?
        .filter(|&n| n > 0)
        .ok_or_else(|| ModelError::MissingKey(key("expert_used_count")))?;
    if n_expert > MAX_EXPERTS || n_expert_used > n_expert {
        return Err(ModelError::BadValue(
            key("expert_used_count"),
            format!("{n_expert_used} of {n_expert} experts (at most {MAX_EXPERTS} experts)"),
        ));
    }
    let groups = groups(
        count("expert_group_count")?.unwrap_or(0),
        count("expert_group_used_count")?.unwrap_or(0),
        n_expert,
        n_expert_used,
        &key,
    )?;
    if rule == MoeRule::DeepSeek {
        return deepseek(
            file,
            arch_name,
            n_expert,
            n_expert_used,
            groups,
            n_layer,
            n_vocab,
        )
        .map(Some);
    }
    if let Some(v) = file.get(&key("expert_gating_func")) {
        match v.as_u32() {
            Some(GATING_SOFTMAX) => {}
            other => {
                return Err(ModelError::NotImplemented(
                    key("expert_gating_func"),
                    format!(
                        "{} expert gating ({arch_name} is built with softmax)",
                        gating_name(other)
                    ),
                ));
            }
        }
    }
    if let Some(norm) = file.get_bool(&key("expert_weights_norm")) {
        if norm != norm_weights {
            return Err(ModelError::NotImplemented(
                key("expert_weights_norm"),
                format!(
                    "expert weights {} (llama.cpp's {arch_name} {} them)",
                    if norm {
                        "renormalised"
                    } else {
                        "not renormalised"
                    },
                    if norm_weights {
                        "renormalises"
                    } else {
                        "does not renormalise"
                    }
                ),
            ));
        }
    }
    if let Some(scale) = file.get_f32(&key("expert_weights_scale")) {
        if scale != 0.0 && scale != 1.0 {
            return Err(ModelError::NotImplemented(
                key("expert_weights_scale"),
                format!("expert weights scaled by {scale}"),
            ));
        }
    }
    // Qwen2-MoE's fall-backs are llama.cpp's: the routed width shares n_ff among the k experts,
    // the shared expert is n_ff wide.
    let n_ff_exp = match rule {
        MoeRule::WhenExperts { .. } => n_ff,
        _ => count("expert_feed_forward_length")?
            .filter(|&n| n > 0)
            .unwrap_or(n_ff / n_expert_used),
    };
    let shared = if shared {
        Some(SharedExperts {
            n_ff: count("expert_shared_feed_forward_length")?
                .filter(|&n| n > 0)
                .unwrap_or(n_ff),
            gated: true,
        })
    } else {
        None
    };
    Ok(Some(MoeConfig {
        n_expert,
        n_expert_used,
        n_ff_exp,
        shared,
        n_dense_lead: 0,
        gating: Gating::Softmax,
        norm_weights,
        weights_scale: None,
        groups,
    }))
}

/// Group-limited routing as llama.cpp validates it: none for 0 or 1 groups; otherwise the
/// groups must divide the experts, at least one and fewer than all must be used, and the groups
/// used must hold at least the k experts to choose.
fn groups(
    n_groups: usize,
    n_used: usize,
    n_expert: usize,
    k: usize,
    key: &dyn Fn(&str) -> String,
) -> Result<Option<Groups>, ModelError> {
    if n_groups <= 1 {
        return Ok(None);
    }
    if n_groups >= n_expert || !n_expert.is_multiple_of(n_groups) {
        return Err(ModelError::BadValue(
            key("expert_group_count"),
            format!("{n_groups} groups do not divide {n_expert} experts"),
        ));
    }
    let per_group = n_expert / n_groups;
    if n_used == 0 || n_used >= n_groups || n_used * per_group < k || per_group < 2 {
        return Err(ModelError::BadValue(
            key("expert_group_used_count"),
            format!(
                "{n_used} of {n_groups} groups of {per_group} experts cannot hold the {k} \
                 experts each token uses"
            ),
        ));
    }
    Ok(Some(Groups { n_groups, n_used }))
}

/// DeepSeek-V2/V3's experts, as llama.cpp's `llama_model_deepseek2::load_arch_hparams` reads them.
fn deepseek(
    file: &GgufFile,
    arch_name: &str,
    n_expert: usize,
    n_expert_used: usize,
    groups: Option<Groups>,
    n_layer: usize,
    n_vocab: usize,
) -> Result<MoeConfig, ModelError> {
    let key = |k: &str| format!("{arch_name}.{k}");
    let req = |k: &str| -> Result<usize, ModelError> {
        match file.get(&key(k)) {
            None => Err(ModelError::MissingKey(key(k))),
            Some(v) => v.as_u32().map(|n| n as usize).ok_or_else(|| {
                ModelError::BadValue(key(k), "expected one unsigned integer".into())
            }),
        }
    };
    let n_ff_exp = req("expert_feed_forward_length")?;
    let n_shared = req("expert_shared_count")?;
    if n_ff_exp == 0 || n_shared == 0 {
        return Err(ModelError::BadValue(
            key(if n_ff_exp == 0 {
                "expert_feed_forward_length"
            } else {
                "expert_shared_count"
            }),
            "0 (deepseek2 loads shared experts of n_ff_exp · expert_shared_count rows)".into(),
        ));
    }
    let n_dense_lead = match file.get(&key("leading_dense_block_count")) {
        None => 0,
        Some(v) => v.as_u32().map(|n| n as usize).ok_or_else(|| {
            ModelError::BadValue(
                key("leading_dense_block_count"),
                "expected one unsigned integer".into(),
            )
        })?,
    };
    if n_dense_lead > n_layer {
        return Err(ModelError::BadValue(
            key("leading_dense_block_count"),
            format!("{n_dense_lead} dense layers of {n_layer}"),
        ));
    }
    let gating = match file.get(&key("expert_gating_func")).map(|v| v.as_u32()) {
        // Older DeepSeek V2/V2.5 files do not say; llama.cpp's fall-back (GLM 4.7 Lite is the
        // one model of this architecture it knows to gate by sigmoid).
        None | Some(Some(GATING_NONE)) => {
            if matches!(n_layer, 47 | 48) && n_vocab == 154880 {
                Gating::Sigmoid
            } else {
                Gating::Softmax
            }
        }
        Some(Some(GATING_SOFTMAX)) => Gating::Softmax,
        Some(Some(GATING_SIGMOID)) => Gating::Sigmoid,
        Some(other) => {
            return Err(ModelError::NotImplemented(
                key("expert_gating_func"),
                format!(
                    "{} expert gating (built: softmax, sigmoid)",
                    gating_name(other)
                ),
            ))
        }
    };
    let scale = file.get_f32(&key("expert_weights_scale")).unwrap_or(0.0);
    Ok(MoeConfig {
        n_expert,
        n_expert_used,
        n_ff_exp,
        shared: Some(SharedExperts {
            n_ff: n_ff_exp * n_shared,
            gated: false,
        }),
        n_dense_lead,
        gating,
        norm_weights: file.get_bool(&key("expert_weights_norm")).unwrap_or(false),
        weights_scale: (scale != 0.0 && scale != 1.0).then_some(scale),
        groups,
    })
}

/// The name of llama.cpp's gating function number `n` (for error messages).
fn gating_name(n: Option<u32>) -> String {
    match n {
        Some(1) => "softmax".to_string(),
        Some(2) => "sigmoid".to_string(),
        Some(3) => "softmax over the chosen experts' logits".to_string(),
        Some(4) => "sqrt-softplus".to_string(),
        Some(n) => format!("unknown gating function {n}"),
        None => "a gating function that is not a number".to_string(),
    }
}
