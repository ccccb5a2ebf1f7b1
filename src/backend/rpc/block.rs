//! The ggml graph of a forward pass through a range of blocks on one worker, as llama.cpp builds
//! a Llama-family block: RMS norm, Q/K/V projections (with their biases, and QK-norm where the
//! model has it), RoPE, the new keys and values written into each sequence's cache on the
//! worker (`set_rows`), flash attention over the cache with a causal mask, the output
//! projection and residual, then the gated feed-forward block. The hidden rows go in as one
//! input and come out as one output, so a pass costs one round trip whatever the layer count.
//! A batch of several sequences runs each one's attention on its own rows (gathered with
//! `get_rows`, scattered back with `set_rows`).

use super::cache::CacheAddr;
use super::graph::{Graph, Planned, RopeParams, F16, F32, I32, T};
use super::weights::{Uploaded, WeightRef};
use crate::model::{Batch, Config, FfnActivation};
use crate::ops::rope::RopeStyle;
use half::f16;
use std::ops::Range;

/// One sequence of the batch: its rows, how many cache positions attention reads, its cache.
pub struct SeqRows {
    pub rows: Vec<usize>,
    pub n_kv: usize,
    pub cache: CacheAddr,
}

/// A built pass: the graph, the inputs to write before it runs, the output to read after.
pub struct Built {
    pub graph: Planned,
    pub inputs: Vec<(T, Vec<u8>)>,
    pub output: T,
}

fn i32_bytes(v: impl IntoIterator<Item = usize>) -> Vec<u8> {
    v.into_iter()
        .flat_map(|x| (x as i32).to_le_bytes())
        .collect()
}

fn weight(g: &mut Graph, buffer: u64, w: &WeightRef) -> T {
    g.fixed(w.ty, w.ne, buffer, w.addr, "")
}

/// The graph of `layers` over the rows `x` of `batch`.
pub fn build(
    cfg: &Config,
    w: &Uploaded,
    layers: Range<usize>,
    batch: &Batch,
    seqs: &[SeqRows],
    x: &[f32],
    align: u64,
) -> Built {
    let n = batch.len() as i64;
    let (e, hd) = (cfg.n_embd as i64, cfg.head_dim as i64);
    let (nh, nkv) = (cfg.n_head as i64, cfg.n_head_kv as i64);
    let (q_dim, kv_dim) = (nh * hd, nkv * hd);
    let mut g = Graph::default();
    let mut inputs = Vec::new();

    let xin = g.input(F32, [e, n, 1, 1], "inp_embd");
    inputs.push((xin, x.iter().flat_map(|v| v.to_le_bytes()).collect()));
    let pos = g.input(I32, [n, 1, 1, 1], "inp_pos");
    inputs.push((pos, i32_bytes(batch.pos.iter().copied())));
    let single = seqs.len() == 1;
    // Per sequence: its batch rows (several sequences only), cache rows, and mask.
    let mut per_seq = Vec::new();
    for s in seqs {
        let ns = s.rows.len() as i64;
        let rows = (!single).then(|| {
            let t = g.input(I32, [ns, 1, 1, 1], "inp_rows");
            inputs.push((t, i32_bytes(s.rows.iter().copied())));
            t
        });
        let kv_idx = g.input(I32, [ns, 1, 1, 1], "kv_idxs");
        inputs.push((kv_idx, i32_bytes(s.rows.iter().map(|&r| batch.pos[r]))));
        let mask = g.input(F16, [s.n_kv as i64, ns, 1, 1], "kq_mask");
        let mut m = Vec::with_capacity(s.n_kv * s.rows.len() * 2);
        for &r in &s.rows {
            for j in 0..s.n_kv {
                let v = if j <= batch.pos[r] {
                    0.0
                } else {
                    f32::NEG_INFINITY
                };
                m.extend_from_slice(&f16::from_f32(v).to_le_bytes());
            }
        }
        inputs.push((mask, m));
        per_seq.push((rows, kv_idx, mask));
    }
    let freqs = w.rope_freqs.as_ref().map(|f| weight(&mut g, w.buffer, f));
    let mode = match cfg.rope.style {
        RopeStyle::Normal => 0,
        RopeStyle::Neox => 2,
    };

    let mut cur = xin;
    for il in layers.clone() {
        let lw = &w.layers[il - layers.start];
        let wt = |g: &mut Graph, r: &WeightRef| weight(g, w.buffer, r);
        let norm = wt(&mut g, &lw.attn_norm);
        let h = g.rms_norm(cur, cfg.rms_eps);
        let h = g.mul(h, norm);
        let proj = |g: &mut Graph, m: &WeightRef, b: &Option<WeightRef>| {
            let m = wt(g, m);
            let y = g.mul_mat(m, h);
            match b {
                Some(b) => {
                    let b = wt(g, b);
                    g.add(y, b)
                }
                None => y,
            }
        };
        let q = proj(&mut g, &lw.wq, &lw.bq);
        let k = proj(&mut g, &lw.wk, &lw.bk);
        let v = proj(&mut g, &lw.wv, &lw.bv);
        let mut q = g.reshape(q, [hd, nh, n, 1]);
        let mut k = g.reshape(k, [hd, nkv, n, 1]);
        if let (Some(qn), Some(kn)) = (&lw.q_norm, &lw.k_norm) {
            let (qn, kn) = (wt(&mut g, qn), wt(&mut g, kn));
            let qq = g.rms_norm(q, cfg.rms_eps);
            q = g.mul(qq, qn);
            let kk = g.rms_norm(k, cfg.rms_eps);
            k = g.mul(kk, kn);
        }
        let rp = RopeParams {
            n_dims: cfg.rope.dims as i32,
            mode,
            n_ctx_orig: cfg.rope.n_ctx_orig as i32,
            freq_base: cfg.layer_rope_base(il),
            freq_scale: cfg.rope.freq_scale,
            ext_factor: 0.0,
            attn_factor: cfg.rope.attn_factor,
            beta_fast: 32.0,
            beta_slow: 1.0,
        };
        let q = g.rope(q, pos, freqs, &rp);
        let k = g.rope(k, pos, freqs, &rp);
        let k2 = g.reshape(k, [kv_dim, n, 1, 1]);
        let q2 = g.reshape(q, [q_dim, n, 1, 1]);

        let mut attn = None;
        for (s, (rows, kv_idx, mask)) in seqs.iter().zip(&per_seq) {
            let ns = s.rows.len() as i64;
            let (ks, vs, qs) = match rows {
                Some(r) => (g.get_rows(k2, *r), g.get_rows(v, *r), g.get_rows(q2, *r)),
                None => (k2, v, q2),
            };
            let ctx = s.cache.n_ctx as i64;
            let kc = g.fixed(
                F16,
                [kv_dim, ctx, 1, 1],
                s.cache.buffer,
                s.cache.k(il),
                "cache_k",
            );
            let vc = g.fixed(
                F16,
                [kv_dim, ctx, 1, 1],
                s.cache.buffer,
                s.cache.v(il),
                "cache_v",
            );
            let kc = g.set_rows(kc, ks, *kv_idx);
            let vc = g.set_rows(vc, vs, *kv_idx);
            let nk = s.n_kv as i64;
            let row = 2 * kv_dim as u64;
            let nb = [2, row, 2 * hd as u64, row * nk as u64];
            let kview = g.view(kc, [hd, nk, nkv, 1], nb, 0);
            let vview = g.view(vc, [hd, nk, nkv, 1], nb, 0);
            let qs = g.reshape(qs, [hd, nh, ns, 1]);
            let qp = g.permute(qs, [0, 2, 1, 3]);
            let softcap = cfg.attn_softcap.unwrap_or(0.0);
            let o = g.flash_attn(qp, kview, vview, *mask, cfg.attn_scale, softcap);
            let o = g.reshape(o, [q_dim, ns, 1, 1]);
            attn = Some(match rows {
                None => o,
                Some(r) => {
                    let acc = match attn {
                        Some(a) => a,
                        None => g.scratch(F32, [q_dim, n, 1, 1], "attn_out"),
                    };
                    g.set_rows(acc, o, *r)
                }
            });
        }
        let attn = attn.expect("a batch has a sequence");
        let wo = wt(&mut g, &lw.wo);
        let o = g.mul_mat(wo, attn);
        cur = g.add(cur, o);

        let norm = wt(&mut g, &lw.ffn_norm);
        let h = g.rms_norm(cur, cfg.rms_eps);
        let h = g.mul(h, norm);
        let (gate, up, down) = (
            wt(&mut g, &lw.gate),
            wt(&mut g, &lw.up),
            wt(&mut g, &lw.down),
        );
        let a = g.mul_mat(gate, h);
        let b = g.mul_mat(up, h);
        let act = match cfg.ffn_act {
            FfnActivation::Silu => g.swiglu(a, b),
            FfnActivation::Gelu => g.geglu(a, b),
        };
        let d = g.mul_mat(down, act);
        cur = g.add(cur, d);
    }
    g.name(cur, "l_out");
    g.keep(cur);
    Built {
        graph: g.plan(align),
        inputs,
        output: cur,
    }
}
