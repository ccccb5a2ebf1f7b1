//! The forward pass of a BERT encoder (`crate::model::EncoderWeights`), as llama.cpp's
//! `llm_build_bert` computes it on the CPU: token + token-type-0 + learned position
//! embeddings, a LayerNorm, then per block Q/K/V with biases, softmax attention over the whole
//! sequence (every token sees every other: no mask, no cache), the output projection, the
//! residual sum and a LayerNorm, the up projection, GELU, the down projection, the residual sum
//! and a LayerNorm. Rank pooling's head (`cls` + tanh, then `cls.output`) is here too.
//!
//! One sequence at a time, all of it in one pass; the sequence must fit the learned positions
//! (`n_ctx_train`), which the caller checks.

use crate::model::{EncoderWeights, LayerNorm, Linear, Model};
use crate::ops::matmul;
use crate::vision::attention::attention;
use crate::vision::layers::{gelu_in_place, layer_norm_rows};

/// The final hidden state of every token of `tokens` (`tokens.len() × n_embd`, row-major).
pub fn hidden_states(model: &Model, enc: &EncoderWeights, tokens: &[u32]) -> Vec<f32> {
    let cfg = &model.config;
    let (e, n) = (cfg.n_embd, tokens.len());
    assert!(n <= cfg.n_ctx_train, "the caller bounds the sequence");
    let file = &model.file;
    let embd = model.weights.token_embd.mat(file);
    let pos = enc.pos.mat(file);
    let mut x = vec![0f32; n * e];
    let mut p = vec![0f32; e];
    for (i, (row, &t)) in x.chunks_exact_mut(e).zip(tokens).enumerate() {
        embd.dequantize_row(t as usize, row);
        if let Some(t0) = &enc.type0 {
            row.iter_mut().zip(t0).for_each(|(v, t)| *v += t);
        }
        pos.dequantize_row(i, &mut p);
        row.iter_mut().zip(&p).for_each(|(v, p)| *v += p);
    }
    norm(&mut x, e, &enc.embd_norm, cfg.rms_eps);
    let scale = 1.0 / (cfg.head_dim as f32).sqrt();
    for layer in &enc.layers {
        let q = linear(model, &layer.q, &x, n);
        let k = linear(model, &layer.k, &x, n);
        let v = linear(model, &layer.v, &x, n);
        let att = attention(&q, &k, &v, n, cfg.n_head, scale);
        let mut h = linear(model, &layer.o, &att, n);
        h.iter_mut().zip(&x).for_each(|(h, x)| *h += x);
        norm(&mut h, e, &layer.attn_norm, cfg.rms_eps);
        let mut up = linear(model, &layer.up, &h, n);
        gelu_in_place(&mut up);
        let mut out = linear(model, &layer.down, &up, n);
        out.iter_mut().zip(&h).for_each(|(o, h)| *o += h);
        norm(&mut out, e, &layer.out_norm, cfg.rms_eps);
        x = out;
    }
    x
}

/// Rank pooling's head on the first token's state `h`: `cls` with a tanh, then `cls.output`,
/// each where the file has it (no softmax, as llama.cpp for BERT).
pub fn rank(model: &Model, enc: &EncoderWeights, h: &[f32]) -> Vec<f32> {
    let mut cur = h.to_vec();
    if let Some(cls) = &enc.cls {
        cur = linear(model, cls, &cur, 1);
        cur.iter_mut().for_each(|v| *v = v.tanh());
    }
    if let Some(out) = &enc.cls_out {
        cur = linear(model, out, &cur, 1);
    }
    cur
}

/// `x · Wᵀ + b` for `n` rows of `x`.
fn linear(model: &Model, l: &Linear, x: &[f32], n: usize) -> Vec<f32> {
    let w = l.w.mat(&model.file);
    let mut out = vec![0f32; n * w.rows];
    matmul(&w, x, n, &mut out);
    if let Some(b) = &l.b {
        for row in out.chunks_exact_mut(w.rows) {
            row.iter_mut().zip(b).for_each(|(o, b)| *o += b);
        }
    }
    out
}

fn norm(x: &mut [f32], e: usize, n: &LayerNorm, eps: f32) {
    layer_norm_rows(x, e, &n.w, &n.b, eps);
}
