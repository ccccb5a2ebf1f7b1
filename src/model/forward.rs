//! The forward pass: a batch of tokens (possibly from several sequences) through every block to
//! logits. One function reads top to bottom; architecture differences are fields of `Config`
//! (norm placement, QK-norm, soft-capping, sliding windows, where the attention scale applies),
//! and fused tensors arrive as row views, so nothing here names an architecture.

use super::moe_ffn::MoeStep;
use super::weights::{Attention, DenseFfn, Ffn};
use super::{Config, FfnActivation, Layer, Model};
use crate::gguf::GgufFile;
use crate::kv_cache::KvCache;
use crate::ops::activation::{geglu, swiglu};
use crate::ops::attention::{attend_one_head, tiled, AttnShape};
use crate::ops::norm::{rms_norm_rows, rms_norm_rows_into};
use crate::ops::rope::Rope;
use crate::ops::softcap::softcap_all;
use crate::ops::{matmul, QMat};
use crate::pool;
use std::borrow::BorrowMut;

/// How much of the model a forward pass runs: all of it, or a cheaper approximation of it for
/// self-speculative drafting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ForwardPlan {
    /// Blocks run before the output norm and head (fewer: an early-exit draft).
    pub n_layers: usize,
    /// Routed experts per token in MoE blocks instead of the model's k (0: only the shared
    /// experts); `None`: the model's own k.
    pub routed_experts: Option<usize>,
}

impl ForwardPlan {
    /// The whole model of `cfg`.
    pub fn full(cfg: &Config) -> ForwardPlan {
        ForwardPlan {
            n_layers: cfg.n_layer,
            routed_experts: None,
        }
    }
}

/// Tokens to run in one forward pass. Entry `i` is token `tokens[i]` at position `pos[i]` of
/// sequence `seq[i]` (an index into the caches); `logits[i]` asks for its output row.
#[derive(Clone, Debug, Default)]
pub struct Batch {
    pub tokens: Vec<u32>,
    pub pos: Vec<usize>,
    pub seq: Vec<usize>,
    pub logits: Vec<bool>,
}

impl Batch {
    /// Consecutive tokens of sequence 0 starting at `start`; logits for the last one, or for all.
    pub fn sequence(tokens: &[u32], start: usize, all_logits: bool) -> Batch {
        let n = tokens.len();
        Batch {
            tokens: tokens.to_vec(),
            pos: (start..start + n).collect(),
            seq: vec![0; n],
            logits: (0..n).map(|i| all_logits || i + 1 == n).collect(),
        }
    }

    /// Number of tokens.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// True when the batch holds no token.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// Number of output rows the forward pass will return.
    pub fn n_outputs(&self) -> usize {
        self.logits.iter().filter(|&&l| l).count()
    }
}

impl Model {
    /// Runs `batch`, storing keys and values in `caches[seq]`, and returns the logits of the
    /// entries that asked for them, `n_vocab` floats each, in batch order.
    ///
    /// Panics if a token id is out of the vocabulary or a position is beyond its cache: callers
    /// validate input first.
    /// `caches` holds the caches themselves or mutable references to them (the server's slots
    /// each own theirs).
    pub fn forward<C: BorrowMut<KvCache> + Sync>(
        &self,
        batch: &Batch,
        caches: &mut [C],
    ) -> Vec<f32> {
        self.forward_layers(batch, caches, self.config.n_layer)
    }

    /// [`Model::forward`] through the first `n_layers` blocks only, then the output norm and
    /// head: the early-exit draft of self-speculative decoding. The caches need only that many
    /// layers.
    pub fn forward_layers<C: BorrowMut<KvCache> + Sync>(
        &self,
        batch: &Batch,
        caches: &mut [C],
        n_layers: usize,
    ) -> Vec<f32> {
        let plan = ForwardPlan {
            n_layers,
            ..ForwardPlan::full(&self.config)
        };
        self.forward_plan(batch, caches, plan)
    }

    /// [`Model::forward`] as `plan` says: fewer blocks, or fewer routed experts (drafts).
    pub fn forward_plan<C: BorrowMut<KvCache> + Sync>(
        &self,
        batch: &Batch,
        caches: &mut [C],
        plan: ForwardPlan,
    ) -> Vec<f32> {
        let h = self.final_hidden(batch, caches, plan);
        self.output_head(&h)
    }

    /// The hidden states after the last block and the output norm, `n_embd` floats for each
    /// entry that asked for output, in batch order: what llama.cpp returns as a decoder model's
    /// token embeddings (its `result_norm`), before the output head. Caches fill as in
    /// [`Model::forward`].
    pub fn hidden_states<C: BorrowMut<KvCache> + Sync>(
        &self,
        batch: &Batch,
        caches: &mut [C],
    ) -> Vec<f32> {
        self.final_hidden(batch, caches, ForwardPlan::full(&self.config))
    }

    /// The batch through the blocks (and experts) `plan` names, then the output norm of the
    /// rows that asked for output.
    fn final_hidden<C: BorrowMut<KvCache> + Sync>(
        &self,
        batch: &Batch,
        caches: &mut [C],
        plan: ForwardPlan,
    ) -> Vec<f32> {
        let cfg = &self.config;
        let file = &*self.file;
        let n = batch.len();
        let e = cfg.n_embd;
        let mut x = vec![0f32; n * e];
        let embd = self.weights.token_embd.mat(file);
        for (row, &tok) in x.chunks_exact_mut(e).zip(&batch.tokens) {
            assert!(
                (tok as usize) < cfg.n_vocab,
                "token id {tok} out of vocabulary"
            );
            embd.dequantize_row(tok as usize, row);
            if let Some(s) = cfg.embed_scale {
                row.iter_mut().for_each(|v| *v *= s);
            }
        }
        let mut scratch = Scratch::new(cfg, n);
        for (il, layer) in self.weights.layers.iter().enumerate().take(plan.n_layers) {
            self.attention_block(il, layer, batch, caches, &mut x, &mut scratch);
            self.ffn_block(layer, n, plan, &mut x, &mut scratch);
        }

        let out_rows: Vec<usize> = (0..n).filter(|&i| batch.logits[i]).collect();
        let mut h = vec![0f32; out_rows.len() * e];
        for (dst, &i) in h.chunks_exact_mut(e).zip(&out_rows) {
            dst.copy_from_slice(&x[i * e..(i + 1) * e]);
        }
        rms_norm_rows(&mut h, &self.weights.output_norm, e, cfg.rms_eps);
        h
    }

    /// Logits of output-normed hidden rows `h` (`n_embd` floats each).
    fn output_head(&self, h: &[f32]) -> Vec<f32> {
        let cfg = &self.config;
        let n_rows = h.len() / cfg.n_embd;
        let mut logits = vec![0f32; n_rows * cfg.n_vocab];
        matmul(&self.weights.output.mat(&self.file), h, n_rows, &mut logits);
        if let Some(cap) = cfg.final_softcap {
            softcap_all(&mut logits, cap);
        }
        logits
    }

    fn attention_block<C: BorrowMut<KvCache> + Sync>(
        &self,
        il: usize,
        layer: &Layer,
        batch: &Batch,
        caches: &mut [C],
        x: &mut [f32],
        s: &mut Scratch,
    ) {
        let w = match &layer.attn {
            Attention::Mha(w) => w,
            Attention::Mla(w) => return self.mla_attention_block(il, layer, w, batch, caches, x),
        };
        let cfg = &self.config;
        let file = &*self.file;
        let (n, e, hd) = (batch.len(), cfg.n_embd, cfg.head_dim);
        let (q_dim, kv_dim) = (cfg.q_dim(), cfg.kv_dim());
        rms_norm_rows_into(x, &layer.attn_norm, e, cfg.rms_eps, &mut s.h);
        project(&w.wq.mat(file), &s.h, n, w.bq.as_deref(), &mut s.q);
        project(&w.wk.mat(file), &s.h, n, w.bk.as_deref(), &mut s.k);
        project(&w.wv.mat(file), &s.h, n, w.bv.as_deref(), &mut s.v);
        if let (Some(qn), Some(kn)) = (&w.q_norm, &w.k_norm) {
            rms_norm_rows(&mut s.q, qn, hd, cfg.rms_eps);
            rms_norm_rows(&mut s.k, kn, hd, cfg.rms_eps);
        }
        let window = cfg.layer_window(il);
        // Per sequence (LongRoPE's factors depend on its context size), built on first use.
        let mut ropes: Vec<Option<Rope>> = vec![None; caches.len()];
        for t in 0..n {
            let seq = batch.seq[t];
            let rope =
                ropes[seq].get_or_insert_with(|| self.layer_rope(il, caches[seq].borrow().n_ctx()));
            let cs = rope.cos_sin(batch.pos[t]);
            let q = &mut s.q[t * q_dim..(t + 1) * q_dim];
            rope.apply_with(q, hd, &cs);
            if cfg.scale_query {
                q.iter_mut().for_each(|v| *v *= cfg.attn_scale);
            }
            rope.apply_with(&mut s.k[t * kv_dim..(t + 1) * kv_dim], hd, &cs);
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
        self.attend(il, &shape, window, batch, caches, &s.q, &mut s.attn);

        matmul(&layer.wo.mat(file), &s.attn, n, &mut s.h);
        if let Some(w) = &layer.post_attn_norm {
            rms_norm_rows(&mut s.h, w, e, cfg.rms_eps);
        }
        x.iter_mut().zip(&s.h).for_each(|(a, b)| *a += b);
    }

    /// Attention of the batch's queries `q` (`n_head · head_dim` per token, already scaled and
    /// rotated) over the caches of their sequences at layer `il`, into `out` (same shape).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn attend<C: BorrowMut<KvCache> + Sync>(
        &self,
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
        // The path is chosen per run of consecutive tokens of one sequence, never from the
        // size of the whole batch: a sequence's results must not depend on which other
        // sequences share its forward pass (server slots, speculative verification).
        let mut short = Vec::new();
        let mut t = 0;
        while t < n {
            let seq = batch.seq[t];
            let end = (t..n).find(|&u| batch.seq[u] != seq).unwrap_or(n);
            if end - t < tiled::MIN_TOKENS {
                short.extend(t..end);
                t = end;
                continue;
            }
            let queries = tiled::Queries {
                q: &q[t * q_dim..end * q_dim],
                pos: &batch.pos[t..end],
                window,
            };
            let cache = caches[seq].borrow();
            tiled::attend(
                shape,
                &queries,
                cache.keys(il),
                cache.values(il),
                &mut out[t * q_dim..end * q_dim],
            );
            t = end;
        }
        if !short.is_empty() {
            // One (token, head) per task, into a buffer of the short runs' rows.
            let group = shape.n_head / shape.n_head_kv;
            let mut rows = vec![0f32; short.len() * q_dim];
            pool::global().for_each_chunk(&mut rows, hd, |c, dst| {
                let (t, head) = (short[c / shape.n_head], c % shape.n_head);
                let pos = batch.pos[t];
                let first = window.map_or(0, |w| (pos + 1).saturating_sub(w));
                let cache = caches[batch.seq[t]].borrow();
                let qh = &q[t * q_dim + head * hd..][..hd];
                attend_one_head(
                    shape,
                    qh,
                    cache.keys(il),
                    cache.values(il),
                    head / group,
                    first,
                    pos,
                    dst,
                );
            });
            for (&t, row) in short.iter().zip(rows.chunks_exact(q_dim)) {
                out[t * q_dim..(t + 1) * q_dim].copy_from_slice(row);
            }
        }
    }

    fn ffn_block(
        &self,
        layer: &Layer,
        n: usize,
        plan: ForwardPlan,
        x: &mut [f32],
        s: &mut Scratch,
    ) {
        let cfg = &self.config;
        let file = &*self.file;
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
}

/// `out = down(act(gate · h) ⊙ up · h)` for `n` rows `h`; `gate` and `up` are scratch.
#[allow(clippy::too_many_arguments)]
pub(super) fn dense_ffn(
    file: &GgufFile,
    ffn: &DenseFfn,
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
    matmul(&ffn.gate.mat(file), h, n, gate);
    matmul(&ffn.up.mat(file), h, n, up);
    activate(act, gate, up);
    matmul(&ffn.down.mat(file), gate, n, out);
}

/// `gate = act(gate) ⊙ up`.
pub(super) fn activate(act: FfnActivation, gate: &mut [f32], up: &[f32]) {
    match act {
        FfnActivation::Silu => swiglu(gate, up),
        FfnActivation::Gelu => geglu(gate, up),
    }
}

/// `out = x · Wᵀ (+ bias)`.
fn project(w: &QMat, x: &[f32], n: usize, bias: Option<&[f32]>, out: &mut [f32]) {
    matmul(w, x, n, out);
    if let Some(b) = bias {
        for row in out.chunks_exact_mut(b.len()) {
            row.iter_mut().zip(b).for_each(|(o, b)| *o += b);
        }
    }
}

/// Activation buffers reused across layers.
struct Scratch {
    h: Vec<f32>,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    attn: Vec<f32>,
    gate: Vec<f32>,
    up: Vec<f32>,
    ffn_out: Vec<f32>,
}

impl Scratch {
    fn new(cfg: &Config, n: usize) -> Scratch {
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
        }
    }
}
