//! The mixture-of-experts hyper-parameters of a model: how many experts, how many each token
//! uses, their widths, and how the router's probabilities become expert weights. Read from GGUF
//! metadata as llama.cpp 0c1e570 reads it for the families built here (`llama` with experts,
//! `qwen2moe`, `qwen3moe`); the routing math itself is in `ops::router`, the block in
//! `model::moe_ffn`.
//!
//! llama.cpp fixes the gating of these families in code (softmax; weights renormalised over the
//! chosen experts for Mixtral and Qwen3-MoE, not for Qwen2-MoE; no scale) and never reads
//! `expert_gating_func`, `expert_weights_norm` or `expert_weights_scale` for them. A file whose
//! metadata says otherwise asks for math that would not be done, so it is refused, naming the
//! key, rather than run with the family's fixed choice.

use super::ModelError;
use crate::gguf::GgufFile;

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
}

/// The experts of every layer of one model.
#[derive(Clone, Debug, PartialEq)]
pub struct MoeConfig {
    pub n_expert: usize,
    /// Experts each token is routed to (k of top-k).
    pub n_expert_used: usize,
    /// Width of one routed expert's hidden layer.
    pub n_ff_exp: usize,
    /// Width of the shared expert, when the family has one.
    pub n_ff_shexp: Option<usize>,
    /// Divide the chosen experts' probabilities by their sum.
    pub norm_weights: bool,
}

/// llama.cpp's `LLAMA_EXPERT_GATING_FUNC_TYPE_SOFTMAX`, the only gating built here.
const GATING_SOFTMAX: u32 = 1;

/// The MoE configuration of `file` under `rule`; `None` for a dense model.
pub fn moe_config(
    file: &GgufFile,
    arch_name: &str,
    rule: MoeRule,
    n_ff: usize,
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
    if let Some(groups) = count("expert_group_count")?.filter(|&g| g > 1) {
        return Err(ModelError::NotImplemented(
            key("expert_group_count"),
            format!("group-limited expert routing ({groups} groups)"),
        ));
    }
    if let Some(v) = file.get(&key("expert_gating_func")) {
        match v.as_u32() {
            Some(GATING_SOFTMAX) => {}
            other => {
                let name = match other {
                    Some(2) => "sigmoid".to_string(),
                    Some(3) => "softmax over the chosen experts' logits".to_string(),
                    Some(4) => "sqrt-softplus".to_string(),
                    Some(n) => format!("unknown gating function {n}"),
                    None => "a gating function that is not a number".to_string(),
                };
                return Err(ModelError::NotImplemented(
                    key("expert_gating_func"),
                    format!("{name} expert gating ({arch_name} is built with softmax)"),
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
    let n_ff_shexp = if shared {
        Some(
            count("expert_shared_feed_forward_length")?
                .filter(|&n| n > 0)
                .unwrap_or(n_ff),
        )
    } else {
        None
    };
    Ok(Some(MoeConfig {
        n_expert,
        n_expert_used,
        n_ff_exp,
        n_ff_shexp,
        norm_weights,
    }))
}
