//! The mixture-of-experts feed-forward block: the router picks each token's experts, tokens are
//! grouped by expert so that every chosen expert's rows are read once per batch (an
//! expert-indexed matrix product over row views of the 3-D expert tensors, nothing copied),
//! and each token's expert outputs are weighted and summed in the order llama.cpp adds them.
//! Qwen2-MoE's shared expert, behind its sigmoid gate, is added last.

use super::layer::{activate, dense_ffn};
use super::lora::Adapters;
use crate::gguf::GgufFile;
use crate::model::{FfnActivation, MoeFfn};
use crate::ops::matmul;
use crate::ops::router::{shared_gate, Route, Router};

/// The work of one MoE block over a batch.
pub(super) struct MoeStep<'a> {
    pub file: &'a GgufFile,
    pub weights: &'a MoeFfn,
    pub act: FfnActivation,
    /// Routed experts per token: the model's k, or fewer for a draft (0: the shared expert only).
    pub k: usize,
}

impl MoeStep<'_> {
    /// `out = moe(h)` for `n` normed rows `h` (`n × n_embd` each).
    pub fn run(&self, h: &[f32], n: usize, out: &mut [f32]) {
        out.fill(0.0);
        if n == 0 {
            return;
        }
        let e = out.len() / n;
        if self.k > 0 {
            let routes = self.routes(h, n);
            self.routed(h, n, e, &routes, out);
        }
        if let Some(shared) = &self.weights.shared {
            let mut y = vec![0f32; n * e];
            let (mut gate, mut up) = (Vec::new(), Vec::new());
            dense_ffn(
                self.file,
                &shared.ffn,
                &Adapters::none(),
                self.act,
                h,
                n,
                &mut gate,
                &mut up,
                &mut y,
            );
            match &shared.gate_inp {
                Some(gate_inp) => {
                    let mut logit = vec![0f32; n];
                    matmul(&gate_inp.mat(self.file), h, n, &mut logit);
                    for ((o, y), &g) in out.chunks_exact_mut(e).zip(y.chunks_exact(e)).zip(&logit) {
                        let g = shared_gate(g);
                        o.iter_mut().zip(y).for_each(|(o, y)| *o += y * g);
                    }
                }
                None => out.iter_mut().zip(&y).for_each(|(o, y)| *o += y),
            }
        }
    }

    /// Each token's experts and weights.
    fn routes(&self, h: &[f32], n: usize) -> Vec<Route> {
        let (w, c) = (self.weights, &self.weights.config);
        let ne = c.n_expert;
        let mut logits = vec![0f32; n * ne];
        matmul(&w.router.mat(self.file), h, n, &mut logits);
        let router = Router {
            gating: c.gating,
            selection_bias: w.selection_bias.as_deref(),
            groups: c.groups,
            normalise: c.norm_weights,
            scale: c.weights_scale,
        };
        let (mut probs, mut select) = (vec![0f32; ne], vec![0f32; ne]);
        logits
            .chunks_exact(ne)
            .map(|l| router.route(l, self.k, &mut probs, &mut select))
            .collect()
    }

    /// The routed experts' weighted sum into `out` (zeroed).
    fn routed(&self, h: &[f32], n: usize, e: usize, routes: &[Route], out: &mut [f32]) {
        let (k, ff) = (self.k, self.weights.config.n_ff_exp);
        // by_expert[x]: the (token, slot) pairs routed to expert x, in token order.
        let mut by_expert = vec![Vec::new(); self.weights.config.n_expert];
        for (t, r) in routes.iter().enumerate() {
            for (slot, &x) in r.experts.iter().enumerate() {
                by_expert[x].push((t, slot));
            }
        }
        // Weighted output of every (token, slot), summed per token afterwards in slot order.
        let mut slots = vec![0f32; n * k * e];
        let w = self.weights;
        let (mut xs, mut gate, mut up, mut y) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for (x, pairs) in by_expert.iter().enumerate() {
            let m = pairs.len();
            if m == 0 {
                continue;
            }
            xs.clear();
            for &(t, _) in pairs {
                xs.extend_from_slice(&h[t * e..(t + 1) * e]);
            }
            gate.resize(m * ff, 0.0);
            up.resize(m * ff, 0.0);
            y.resize(m * e, 0.0);
            matmul(&w.gate.mat(self.file, x), &xs, m, &mut gate);
            matmul(&w.up.mat(self.file, x), &xs, m, &mut up);
            activate(self.act, &mut gate, &up);
            matmul(&w.down.mat(self.file, x), &gate, m, &mut y);
            for (&(t, slot), row) in pairs.iter().zip(y.chunks_exact(e)) {
                let wt = routes[t].weights[slot];
                let dst = &mut slots[(t * k + slot) * e..][..e];
                dst.iter_mut().zip(row).for_each(|(d, v)| *d = v * wt);
            }
        }
        for (o, token) in out.chunks_exact_mut(e).zip(slots.chunks_exact(k * e)) {
            o.copy_from_slice(&token[..e]);
            for s in token.chunks_exact(e).skip(1) {
                o.iter_mut().zip(s).for_each(|(o, v)| *o += v);
            }
        }
    }
}
