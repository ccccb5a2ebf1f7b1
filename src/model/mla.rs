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

use super::forward::Batch;
use super::{Layer, Model, ModelError, RopeConfig, Tensor};
use crate::gguf::GgufFile;
use crate::kv_cache::KvCache;
use crate::ops::attention::AttnShape;
use crate::ops::matmul;
use crate::ops::norm::{rms_norm_rows, rms_norm_rows_into};
use crate::ops::rope::Rope;
use crate::ops::QMat;
use std::borrow::BorrowMut;

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

/// Head `h`'s matrix of a 3-D per-head tensor of `rows` rows per head, borrowed in place.
fn head<'a>(t: &Tensor, file: &'a GgufFile, rows: usize, h: usize) -> QMat<'a> {
    t.mat(file).row_range(h * rows..(h + 1) * rows)
}

/// `out = W · x` for each head: `x` holds `n` rows of `n_head` heads of `cols`; `out` `n` rows of
/// `n_head` heads of `rows`, each head's matrix taken from `w`.
fn per_head(
    file: &GgufFile,
    w: &Tensor,
    (rows, cols): (usize, usize),
    x: &[f32],
    n: usize,
    n_head: usize,
    out: &mut [f32],
) {
    let (mut xs, mut ys) = (vec![0f32; n * cols], vec![0f32; n * rows]);
    for h in 0..n_head {
        for (dst, src) in xs.chunks_exact_mut(cols).zip(x.chunks_exact(n_head * cols)) {
            dst.copy_from_slice(&src[h * cols..(h + 1) * cols]);
        }
        matmul(&head(w, file, rows, h), &xs, n, &mut ys);
        for (dst, src) in out
            .chunks_exact_mut(n_head * rows)
            .zip(ys.chunks_exact(rows))
        {
            dst[h * rows..(h + 1) * rows].copy_from_slice(src);
        }
    }
}

impl Model {
    /// The latent-attention block of layer `il` over `batch`: `x += wo · attention(norm(x))`,
    /// with the batch's cache rows stored in `caches`.
    pub(crate) fn mla_attention_block<C: BorrowMut<KvCache> + Sync>(
        &self,
        il: usize,
        layer: &Layer,
        w: &MlaWeights,
        batch: &Batch,
        caches: &mut [C],
        x: &mut [f32],
    ) {
        let cfg = &self.config;
        let m = cfg.mla.as_ref().expect("an MLA layer of an MLA model");
        let file = &*self.file;
        let (n, e, nh) = (batch.len(), cfg.n_embd, cfg.n_head);
        let (nope, rope_dims, lora) = (m.qk_nope, m.qk_rope, m.kv_lora_rank);
        let q_head = nope + rope_dims;
        let row = m.cache_dim();

        let mut h = vec![0f32; n * e];
        rms_norm_rows_into(x, &layer.attn_norm, e, cfg.rms_eps, &mut h);
        let mut q = vec![0f32; n * nh * q_head];
        match &w.q {
            MlaQuery::Plain(wq) => matmul(&wq.mat(file), &h, n, &mut q),
            MlaQuery::LowRank { a, a_norm, b } => {
                let rank = a_norm.len();
                let mut qa = vec![0f32; n * rank];
                matmul(&a.mat(file), &h, n, &mut qa);
                rms_norm_rows(&mut qa, a_norm, rank, cfg.rms_eps);
                matmul(&b.mat(file), &qa, n, &mut q);
            }
        }
        let mut kv = vec![0f32; n * row];
        matmul(&w.kv_a.mat(file), &h, n, &mut kv);

        // Rotate the queries' and the shared key's positional parts; norm the latent; store.
        let mut ropes: Vec<Option<Rope>> = vec![None; caches.len()];
        for t in 0..n {
            let seq = batch.seq[t];
            let rope =
                ropes[seq].get_or_insert_with(|| self.layer_rope(il, caches[seq].borrow().n_ctx()));
            let cs = rope.cos_sin(batch.pos[t]);
            for qh in q[t * nh * q_head..(t + 1) * nh * q_head].chunks_exact_mut(q_head) {
                rope.apply_with(&mut qh[nope..], rope_dims, &cs);
            }
            let key = &mut kv[t * row..(t + 1) * row];
            rms_norm_rows(&mut key[..lora], &w.kv_a_norm, lora, cfg.rms_eps);
            rope.apply_with(&mut key[lora..], rope_dims, &cs);
            let cache = caches[seq].borrow_mut();
            // The value is the latent: the first `lora` of the same row.
            cache.store(il, batch.pos[t], key, key);
            cache.mark_filled(batch.pos[t]);
        }

        // Queries in latent space: [k_b · q_nope, q_rope] per head.
        let mut q_nope = vec![0f32; n * nh * nope];
        for (dst, src) in q_nope.chunks_exact_mut(nope).zip(q.chunks_exact(q_head)) {
            dst.copy_from_slice(&src[..nope]);
        }
        let mut absorbed = vec![0f32; n * nh * lora];
        per_head(file, &w.k_b, (lora, nope), &q_nope, n, nh, &mut absorbed);
        let mut q_lat = vec![0f32; n * nh * row];
        for ((dst, a), src) in q_lat
            .chunks_exact_mut(row)
            .zip(absorbed.chunks_exact(lora))
            .zip(q.chunks_exact(q_head))
        {
            dst[..lora].copy_from_slice(a);
            dst[lora..].copy_from_slice(&src[nope..]);
        }

        // Multi-query attention over the cache rows. The values are the whole rows too: every
        // output dimension is accumulated on its own, so the first `lora` are the latent's
        // attention output exactly, and the rest is dropped.
        let shape = AttnShape {
            n_head: nh,
            n_head_kv: 1,
            head_dim: row,
            scale: cfg.attn_scale,
            softcap: 0.0,
        };
        let mut out = vec![0f32; n * nh * row];
        self.attend(il, &shape, None, batch, caches, &q_lat, &mut out);
        let mut latent = vec![0f32; n * nh * lora];
        for (dst, src) in latent.chunks_exact_mut(lora).zip(out.chunks_exact(row)) {
            dst.copy_from_slice(&src[..lora]);
        }
        let mut values = vec![0f32; n * nh * m.v_head];
        per_head(file, &w.v_b, (m.v_head, lora), &latent, n, nh, &mut values);
        matmul(&layer.wo.mat(file), &values, n, &mut h);
        x.iter_mut().zip(&h).for_each(|(a, b)| *a += b);
    }
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
