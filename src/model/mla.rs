//! Multi-head latent attention (DeepSeek-V2/V3), as llama.cpp 0c1e570 builds it for GGUFs in
//! today's layout (`attn_k_b`/`attn_v_b`, "absorbed" MLA):
//!
//! - queries: `wq · h`, or through a low-rank pair `wq_b · norm(wq_a · h)`; each head's query is
//!   a part without position (`qk_nope`) and a rotated part (`qk_rope`);
//! - `attn_kv_a_mqa · h` gives the compressed latent (`kv_lora_rank`, RMS-normed) and one rotated
//!   key part shared by all heads; the cache holds `[latent, rotated key]` per position, one
//!   "head" wide, and the latent doubles as the value;
//! - each head's position-free query is carried into latent space by its `attn_k_b` matrix,
//!   so attention is multi-query over the cache rows, scaled by YaRN's mscale² / √(qk_nope +
//!   qk_rope);
//! - each head's attention output (a latent) is expanded by its `attn_v_b` matrix to `v_head`
//!   values before the output projection.
//!
//! Files in the older layout (one `attn_kv_b` tensor, no `key_length_mla`) are refused.

use super::{ModelError, RopeConfig, Tensor};
use crate::gguf::GgufFile;

/// The widths of multi-head latent attention.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MlaConfig {
    /// Rank of the query's low-rank pair, or `None` for a plain `wq` (DeepSeek-V2-Lite).
    pub q_lora_rank: Option<usize>,
    /// Width of the compressed latent.
    pub kv_lora_rank: usize,
    /// Position-free part of each head's query and (decompressed) key.
    pub qk_nope: usize,
    /// Rotated part of each head's query, and of the key shared by all heads.
    pub qk_rope: usize,
    /// Values per head after decompression.
    pub v_head: usize,
}

impl MlaConfig {
    /// llama.cpp's `kq_scale` for DeepSeek-V2: the attention factor (YaRN's, as passed to RoPE)
    /// with the kernel's magnitude correction restored, times the `mscale_all_dim` correction,
    /// squared, over √(qk_nope + qk_rope).
    pub fn kq_scale(&self, rope: &RopeConfig) -> f32 {
        let log_scale = (1.0 / rope.freq_scale).ln();
        let attn_factor_org = rope.attn_factor * 0.1f32.mul_add(log_scale, 1.0);
        let mscale = attn_factor_org * (0.1 * rope.yarn_log_mul).mul_add(log_scale, 1.0);
        mscale * mscale / ((self.qk_nope + self.qk_rope) as f32).sqrt()
    }

    /// Width of one cache row: the latent and the shared rotated key.
    pub fn cache_dim(&self) -> usize {
        self.kv_lora_rank + self.qk_rope
    }
}

/// Reads the MLA widths of a `deepseek2` file as llama.cpp's loader does, given the head count
/// and key length already read (which, in this layout, describe the cache row: one KV head of
/// `kv_lora_rank + qk_rope`).
pub fn mla_config(
    file: &GgufFile,
    arch_name: &str,
    n_layer: usize,
    n_vocab: usize,
    n_head_kv: usize,
    head_dim: usize,
) -> Result<MlaConfig, ModelError> {
    let key = |k: &str| format!("{arch_name}.{k}");
    let opt = |k: &str| file.get_u32(&key(k)).map(|v| v as usize);
    let req = |k: &str| opt(k).ok_or_else(|| ModelError::MissingKey(key(k)));
    // llama.cpp's "lite" variants (DeepSeek-V2-Lite, GigaChat3, Kanana-2) have no query LoRA and
    // it does not read the key for them; every other file must give it (0: a plain wq).
    let lite = matches!(n_layer, 26 | 27) || (n_layer == 48 && n_vocab == 128256);
    let q_lora_rank = if lite {
        0
    } else {
        req("attention.q_lora_rank")?
    };
    let kv_lora_rank = req("attention.kv_lora_rank")?;
    let (k_mla, v_mla) = (
        opt("attention.key_length_mla").unwrap_or(0),
        opt("attention.value_length_mla").unwrap_or(0),
    );
    if k_mla == 0 || v_mla == 0 {
        return Err(ModelError::NotImplemented(
            key("attention.key_length_mla"),
            "the older deepseek2 layout with one unsplit attn_kv_b tensor (convert the model \
             again with a current convert_hf_to_gguf.py)"
                .into(),
        ));
    }
    let qk_rope = opt("rope.dimension_count").unwrap_or(head_dim);
    if n_head_kv != 1 || head_dim != kv_lora_rank + qk_rope || qk_rope == 0 || k_mla <= qk_rope {
        return Err(ModelError::BadValue(
            key("attention.key_length"),
            format!(
                "{n_head_kv} KV heads of {head_dim}: latent attention needs one of \
                 kv_lora_rank + rope dimensions ({kv_lora_rank} + {qk_rope}), and key_length_mla \
                 {k_mla} above the rope dimensions"
            ),
        ));
    }
    Ok(MlaConfig {
        q_lora_rank: (q_lora_rank > 0).then_some(q_lora_rank),
        kv_lora_rank,
        qk_nope: k_mla - qk_rope,
        qk_rope,
        v_head: v_mla,
    })
}

/// How a layer's queries are projected.
pub enum MlaQuery {
    /// `attn_q`: one matrix.
    Plain(Tensor),
    /// `attn_q_b · norm(attn_q_a · h)`.
    LowRank {
        a: Tensor,
        a_norm: Vec<f32>,
        b: Tensor,
    },
}

/// One layer's latent-attention weights (besides `attn_norm` and `attn_output`).
pub struct MlaWeights {
    pub q: MlaQuery,
    /// `attn_kv_a_mqa`: the latent and the shared rotated key.
    pub kv_a: Tensor,
    pub kv_a_norm: Vec<f32>,
    /// `attn_k_b`: per head, `kv_lora_rank` rows of `qk_nope` (query to latent space).
    pub k_b: Tensor,
    /// `attn_v_b`: per head, `v_head` rows of `kv_lora_rank` (latent to values).
    pub v_b: Tensor,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::rope::Yarn;

    fn rope(freq_scale: f32, attn_factor: f32, log_mul: f32) -> RopeConfig {
        RopeConfig {
            style: crate::ops::rope::RopeStyle::Normal,
            dims: 64,
            base: 10000.0,
            base_swa: 10000.0,
            freq_scale,
            attn_factor,
            factors: super::super::RopeFactors::None,
            n_ctx_orig: 4096,
            yarn: Some(Yarn::new(1.0, 64, 4096, 10000.0, 32.0, 1.0)),
            yarn_log_mul: log_mul,
        }
    }

    #[test]
    fn kq_scale_is_yarn_mscale_squared_over_the_head_width() {
        let m = MlaConfig {
            q_lora_rank: None,
            kv_lora_rank: 512,
            qk_nope: 128,
            qk_rope: 64,
            v_head: 128,
        };
        // No scaling: 1 / sqrt(192).
        let plain = m.kq_scale(&rope(1.0, 1.0, 0.0));
        assert!((plain - 1.0 / 192f32.sqrt()).abs() < 1e-7);
        // DeepSeek-V2-Lite: factor 40, mscale_all_dim 0.707, attention factor as llama.cpp
        // passes it (1 / (1 + 0.1 ln 40)): mscale = 1 + 0.0707 ln 40.
        let f = 40f32;
        let attn = 1.0 / (1.0 + 0.1 * f.ln());
        let got = m.kq_scale(&rope(1.0 / f, attn, 0.707));
        let ms = 1.0 + 0.0707 * f.ln();
        assert!((got - ms * ms / 192f32.sqrt()).abs() < 1e-6, "{got}");
    }
}
