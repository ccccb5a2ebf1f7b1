//! The CPU backend's multi-head latent attention block (DeepSeek-V2/V3, "absorbed" MLA; the
//! widths and weights are `model::mla`'s): queries and the compressed latent, rotated and
//! stored one "head" wide, multi-query attention over the cache rows, then each head's latent
//! expanded to values before the output projection.

use super::layer::attend;
use crate::backend::KvCache;
use crate::gguf::GgufFile;
use crate::model::{Batch, Layer, MlaQuery, MlaWeights, Model, Tensor};
use crate::ops::attention::AttnShape;
use crate::ops::matmul;
use crate::ops::norm::{rms_norm_rows, rms_norm_rows_into};
use crate::ops::rope::Rope;
use crate::ops::QMat;
use std::borrow::BorrowMut;

/// The latent-attention block of layer `il` over `batch`: `x += wo · attention(norm(x))`,
/// with the batch's cache rows stored in `caches`.
pub(super) fn mla_attention_block<C: BorrowMut<KvCache> + Sync>(
    model: &Model,
    il: usize,
    layer: &Layer,
    w: &MlaWeights,
    batch: &Batch,
    caches: &mut [C],
    x: &mut [f32],
) {
    let cfg = &model.config;
    let m = cfg.mla.as_ref().expect("an MLA layer of an MLA model");
    let file = &*model.file;
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
            ropes[seq].get_or_insert_with(|| model.layer_rope(il, caches[seq].borrow().n_ctx()));
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
    attend(il, &shape, None, batch, caches, &q_lat, &mut out);
    let mut latent = vec![0f32; n * nh * lora];
    for (dst, src) in latent.chunks_exact_mut(lora).zip(out.chunks_exact(row)) {
        dst.copy_from_slice(&src[..lora]);
    }
    let mut values = vec![0f32; n * nh * m.v_head];
    per_head(file, &w.v_b, (m.v_head, lora), &latent, n, nh, &mut values);
    matmul(&layer.wo.mat(file), &values, n, &mut h);
    x.iter_mut().zip(&h).for_each(|(a, b)| *a += b);
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
