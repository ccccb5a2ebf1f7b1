//! The CPU backend's per-block math: one attention block and one feed-forward block over a
//! batch of hidden rows, reading the weights in place from the mapped file and the keys and
//! values of the host [`KvCache`]. Architecture differences are fields of `Config` (norm
//! placement, QK-norm, soft-capping, sliding windows, where the attention scale applies), and
//! fused tensors arrive as row views, so nothing here names an architecture.

use super::lora::Adapters;
use super::mla::mla_attention_block;
use super::moe_ffn::MoeStep;
use crate::backend::KvCache;
use crate::gguf::GgufFile;
use crate::model::{
    Attention, Batch, Config, DenseFfn, Ffn, FfnActivation, ForwardPlan, Layer, Model, RowView,
};
use crate::ops::activation::{geglu, swiglu};
use crate::ops::attention::rotation::hadamard;
use crate::ops::attention::{attend_heads_rows, chunked, tiled, AttnRows, AttnShape};
use crate::ops::matmul;
use crate::ops::mrope::{cos_sin_multi, Sections};
use crate::ops::norm::{rms_norm_rows, rms_norm_rows_into};
use crate::ops::rope::Rope;
use crate::pool;
use std::borrow::BorrowMut;

pub(super) fn attention_block<C: BorrowMut<KvCache> + Sync>(
    model: &Model,
    il: usize,
    layer: &Layer,
    batch: &Batch,
    caches: &mut [C],
    x: &mut [f32],
    s: &mut Scratch,
) {
    let w = match &layer.attn {
        Attention::Mha(w) => w,
        Attention::Mla(w) => return mla_attention_block(model, il, layer, w, batch, caches, x),
    };
    let cfg = &model.config;
    let file = &*model.file;
    let (n, e, hd) = (batch.len(), cfg.n_embd, cfg.head_dim);
    let (q_dim, kv_dim) = (cfg.q_dim(), cfg.kv_dim());
    rms_norm_rows_into(x, &layer.attn_norm, e, cfg.rms_eps, &mut s.h);
    project(file, &w.wq, &s.lora, &s.h, n, w.bq.as_deref(), &mut s.q);
    project(file, &w.wk, &s.lora, &s.h, n, w.bk.as_deref(), &mut s.k);
    project(file, &w.wv, &s.lora, &s.h, n, w.bv.as_deref(), &mut s.v);
    if let (Some(qn), Some(kn)) = (&w.q_norm, &w.k_norm) {
        rms_norm_rows(&mut s.q, qn, hd, cfg.rms_eps);
        rms_norm_rows(&mut s.k, kn, hd, cfg.rms_eps);
    }
    let window = cfg.layer_window(il);
    // Quantized caches: llama.cpp's Walsh-Hadamard rotation of queries and keys, and of values
    // and the output (every sequence of a batch has the model's cache types).
    let types = caches[batch.seq[0]].borrow().types();
    let (k_rot, v_rot) = (types.key_rotation(hd), types.value_rotation(hd));
    // Per sequence (LongRoPE's factors depend on its context size), built on first use.
    let mut ropes: Vec<Option<Rope>> = vec![None; caches.len()];
    for t in 0..n {
        let seq = batch.seq[t];
        let rope =
            ropes[seq].get_or_insert_with(|| model.layer_rope(il, caches[seq].borrow().n_ctx()));
        let cs = match (cfg.rope_sections, batch.rope_pos.get(t)) {
            (Some(sec), Some(&p)) => cos_sin_multi(rope, rope.n_dims / 2, Sections::Shared(sec), p),
            _ => rope.cos_sin(batch.pos[t]),
        };
        let q = &mut s.q[t * q_dim..(t + 1) * q_dim];
        rope.apply_with(q, hd, &cs);
        if cfg.scale_query {
            q.iter_mut().for_each(|v| *v *= cfg.attn_scale);
        }
        rope.apply_with(&mut s.k[t * kv_dim..(t + 1) * kv_dim], hd, &cs);
        if let Some(r) = k_rot {
            hadamard(q, r);
            hadamard(&mut s.k[t * kv_dim..(t + 1) * kv_dim], r);
        }
        if let Some(r) = v_rot {
            hadamard(&mut s.v[t * kv_dim..(t + 1) * kv_dim], r);
        }
        let cache = caches[batch.seq[t]].borrow_mut();
        cache.store(
            il,
            batch.pos[t],
            &s.k[t * kv_dim..(t + 1) * kv_dim],
            &s.v[t * kv_dim..(t + 1) * kv_dim],
        );
        cache.mark_filled(batch.pos[t]);
    }

    let shape = AttnShape {
        n_head: cfg.n_head,
        n_head_kv: cfg.n_head_kv,
        head_dim: hd,
        scale: if cfg.scale_query { 1.0 } else { cfg.attn_scale },
        softcap: cfg.attn_softcap.unwrap_or(0.0),
    };
    attend(il, &shape, window, batch, caches, &s.q, &mut s.attn);
    if let Some(r) = v_rot {
        hadamard(&mut s.attn, r);
    }

    let wo = layer.wo.cpu_mat(file);
    matmul(&wo, &s.attn, n, &mut s.h);
    s.lora
        .apply_named(&layer.wo.info.name, 0..wo.rows, &s.attn, n, &mut s.h);
    if let Some(w) = &layer.post_attn_norm {
        rms_norm_rows(&mut s.h, w, e, cfg.rms_eps);
    }
    x.iter_mut().zip(&s.h).for_each(|(a, b)| *a += b);
}

/// Attention of the batch's queries `q` (`n_head · head_dim` per token, already scaled and
/// rotated) over the caches of their sequences at layer `il`, into `out` (same shape): causal,
/// or, for a [`Batch::bidirectional`] batch, up to the last position of the sequence in the
/// batch.
#[allow(clippy::too_many_arguments)]
pub(super) fn attend<C: BorrowMut<KvCache> + Sync>(
    il: usize,
    shape: &AttnShape,
    window: Option<usize>,
    batch: &Batch,
    caches: &[C],
    q: &[f32],
    out: &mut [f32],
) {
    let (n, hd) = (batch.len(), shape.head_dim);
    let q_dim = shape.n_head * hd;
    // Each sequence's rows as attention reads them (an f32 cache rounded to f16 once, as
    // llama.cpp casts it), for the positions this batch reaches.
    let mut reach = vec![0usize; caches.len()];
    for (&seq, &pos) in batch.seq.iter().zip(&batch.pos) {
        reach[seq] = reach[seq].max(pos + 1);
    }
    let rows: Vec<(AttnRows, AttnRows)> = caches
        .iter()
        .zip(&reach)
        .map(|(c, &r)| {
            let c = c.borrow();
            (
                AttnRows::new(c.key_rows(il), r),
                AttnRows::new(c.value_rows(il), r),
            )
        })
        .collect();
    // The path is chosen per run of consecutive tokens of one sequence, never from the
    // size of the whole batch: a sequence's results must not depend on which other
    // sequences share its forward pass (server slots, speculative verification).
    let mut short = Vec::new();
    let mut t = 0;
    while t < n {
        let seq = batch.seq[t];
        let end = (t..n).find(|&u| batch.seq[u] != seq).unwrap_or(n);
        // Caches other than f16 keys with f16 values take the one-token path at every batch
        // size, as in ggml.
        let (k, v) = (rows[seq].0.rows(), rows[seq].1.rows());
        let f16 = k.as_f16().zip(v.as_f16());
        let Some((keys, values)) = f16.filter(|_| end - t >= tiled::MIN_TOKENS) else {
            short.extend(t..end);
            t = end;
            continue;
        };
        let queries = tiled::Queries {
            q: &q[t * q_dim..end * q_dim],
            pos: &batch.pos[t..end],
            window,
            bidirectional: batch.bidirectional,
        };
        tiled::attend(
            shape,
            &queries,
            keys,
            values,
            &mut out[t * q_dim..end * q_dim],
        );
        t = end;
    }
    // The positions a short-path token attends over.
    let span = |t: usize| {
        let pos = batch.pos[t];
        let first = window.map_or(0, |w| (pos + 1).saturating_sub(w));
        // Bidirectional: up to the last position the batch reaches in the sequence.
        let last = if batch.bidirectional {
            reach[batch.seq[t]] - 1
        } else {
            pos
        };
        (first, last)
    };
    // Deep into an f16 cache, each token is split over its positions instead.
    short.retain(|&t| {
        let (first, last) = span(t);
        let (k, v) = (rows[batch.seq[t]].0.rows(), rows[batch.seq[t]].1.rows());
        let Some((keys, values)) = k.as_f16().zip(v.as_f16()) else {
            return true;
        };
        if last + 1 - first < chunked::MIN_POSITIONS {
            return true;
        }
        let (qt, ot) = (
            &q[t * q_dim..(t + 1) * q_dim],
            &mut out[t * q_dim..(t + 1) * q_dim],
        );
        chunked::attend(shape, qt, keys, values, first, last, ot);
        false
    });
    if !short.is_empty() {
        // One (token, part of a KV head's group of query heads) per task: the group's
        // heads share each key and value row, so a task takes as many of them as still
        // leaves every worker a task.
        let group = shape.n_head / shape.n_head_kv;
        let threads = pool::global().threads();
        let per_task = (1..=group)
            .rev()
            .find(|&g| group.is_multiple_of(g) && short.len() * shape.n_head / g >= threads)
            .unwrap_or(1);
        let tasks_per_token = shape.n_head / per_task;
        let mut out_rows = vec![0f32; short.len() * q_dim];
        pool::global().for_each_chunk(&mut out_rows, per_task * hd, |c, dst| {
            let (t, head) = (short[c / tasks_per_token], c % tasks_per_token * per_task);
            let (first, last) = span(t);
            let (k, v) = &rows[batch.seq[t]];
            let qh = &q[t * q_dim + head * hd..][..per_task * hd];
            attend_heads_rows(
                shape,
                qh,
                &k.rows(),
                &v.rows(),
                head / group,
                first,
                last,
                dst,
            );
        });
        for (&t, row) in short.iter().zip(out_rows.chunks_exact(q_dim)) {
            out[t * q_dim..(t + 1) * q_dim].copy_from_slice(row);
        }
    }
}

pub(super) fn ffn_block(
    model: &Model,
    layer: &Layer,
    n: usize,
    plan: ForwardPlan,
    x: &mut [f32],
    s: &mut Scratch,
) {
    let cfg = &model.config;
    let file = &*model.file;
    let e = cfg.n_embd;
    rms_norm_rows_into(x, &layer.ffn_norm, e, cfg.rms_eps, &mut s.h);
    match &layer.ffn {
        Ffn::Moe(weights) => {
            let moe = &weights.config;
            let step = MoeStep {
                file,
                weights,
                act: cfg.ffn_act,
                k: plan
                    .routed_experts
                    .unwrap_or(moe.n_expert_used)
                    .min(moe.n_expert),
            };
            step.run(&s.h, n, &mut s.ffn_out);
        }
        Ffn::Dense(ffn) => {
            dense_ffn(
                file,
                ffn,
                &s.lora,
                cfg.ffn_act,
                &s.h,
                n,
                &mut s.gate,
                &mut s.up,
                &mut s.ffn_out,
            );
        }
    }
    std::mem::swap(&mut s.h, &mut s.ffn_out);
    if let Some(w) = &layer.post_ffn_norm {
        rms_norm_rows(&mut s.h, w, e, cfg.rms_eps);
    }
    x.iter_mut().zip(&s.h).for_each(|(a, b)| *a += b);
}

/// `out = down(act(gate · h) ⊙ up · h)` for `n` rows `h`; `gate` and `up` are scratch.
#[allow(clippy::too_many_arguments)]
pub(super) fn dense_ffn(
    file: &GgufFile,
    ffn: &DenseFfn,
    lora: &Adapters,
    act: FfnActivation,
    h: &[f32],
    n: usize,
    gate: &mut Vec<f32>,
    up: &mut Vec<f32>,
    out: &mut [f32],
) {
    let ff = ffn.gate.rows.len();
    gate.resize(n * ff, 0.0);
    up.resize(n * ff, 0.0);
    matmul(&ffn.gate.cpu_mat(file), h, n, gate);
    lora.apply(&ffn.gate, h, n, gate);
    matmul(&ffn.up.cpu_mat(file), h, n, up);
    lora.apply(&ffn.up, h, n, up);
    activate(act, gate, up);
    matmul(&ffn.down.cpu_mat(file), gate, n, out);
    lora.apply(&ffn.down, gate, n, out);
}

/// `gate = act(gate) ⊙ up`.
pub(super) fn activate(act: FfnActivation, gate: &mut [f32], up: &[f32]) {
    match act {
        FfnActivation::Silu => swiglu(gate, up),
        FfnActivation::Gelu => geglu(gate, up),
    }
}

/// `out = x · Wᵀ (+ the adapters' terms) (+ bias)`.
fn project(
    file: &GgufFile,
    w: &RowView,
    lora: &Adapters,
    x: &[f32],
    n: usize,
    bias: Option<&[f32]>,
    out: &mut [f32],
) {
    matmul(&w.cpu_mat(file), x, n, out);
    lora.apply(w, x, n, out);
    if let Some(b) = bias {
        for row in out.chunks_exact_mut(b.len()) {
            row.iter_mut().zip(b).for_each(|(o, b)| *o += b);
        }
    }
}

/// Activation buffers reused across layers, and the pass's adapters.
pub(super) struct Scratch<'a> {
    h: Vec<f32>,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    attn: Vec<f32>,
    gate: Vec<f32>,
    up: Vec<f32>,
    ffn_out: Vec<f32>,
    lora: Adapters<'a>,
}

impl<'a> Scratch<'a> {
    pub(super) fn new(cfg: &Config, n: usize, lora: Adapters<'a>) -> Scratch<'a> {
        let q_dim = cfg.q_dim();
        Scratch {
            h: vec![0.0; n * cfg.n_embd],
            q: vec![0.0; n * q_dim],
            k: vec![0.0; n * cfg.kv_dim()],
            v: vec![0.0; n * cfg.kv_dim()],
            attn: vec![0.0; n * q_dim],
            gate: Vec::new(),
            up: Vec::new(),
            ffn_out: vec![0.0; n * cfg.n_embd],
            lora,
        }
    }
}
