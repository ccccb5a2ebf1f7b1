//! Scaled dot-product attention of a batch of query tokens over a sequence's cached keys and
//! values (stored as f16), causal, with an optional sliding window. Scores come first, then the
//! softmax and the weighted sum of values; the f16 arithmetic is `quant`'s SIMD kernels.

use crate::quant;
use half::f16;

/// The shape of one attention layer.
#[derive(Clone, Copy, Debug)]
pub struct AttnShape {
    pub n_head: usize,
    pub n_head_kv: usize,
    pub head_dim: usize,
    /// Multiplies q·k before the softmax.
    pub scale: f32,
}

/// Attention output for one query head.
///
/// `q`: the head's query (`head_dim`); `keys`/`values`: the sequence's cache rows, each
/// `n_head_kv * head_dim` long, for positions `first..=last`; `kv_head` picks the shared head.
///
/// Two passes over the window: all scores (SIMD f16 dot products), then the softmax weights and
/// their weighted sum of values (SIMD f16 multiply-adds).
#[allow(clippy::too_many_arguments)]
pub fn attend_one_head(
    shape: &AttnShape,
    q: &[f32],
    keys: &[f16],
    values: &[f16],
    kv_head: usize,
    first: usize,
    last: usize,
    out: &mut [f32],
) {
    let hd = shape.head_dim;
    let kv_dim = shape.n_head_kv * hd;
    let n = last + 1 - first;
    let base = first * kv_dim + kv_head * hd;
    let mut scores = vec![0f32; n];
    quant::f16_dot_rows(q, &keys[base..], kv_dim, &mut scores);
    let mut max = f32::NEG_INFINITY;
    for s in scores.iter_mut() {
        *s *= shape.scale;
        max = max.max(*s);
    }
    let mut sum = 0f32;
    for s in scores.iter_mut() {
        *s = (*s - max).exp();
        sum += *s;
    }
    out.fill(0.0);
    quant::f16_weighted_sum(&scores, &values[base..], kv_dim, out);
    let inv = if sum == 0.0 { 0.0 } else { 1.0 / sum };
    out.iter_mut().for_each(|o| *o *= inv);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_position_returns_its_value() {
        let shape = AttnShape {
            n_head: 1,
            n_head_kv: 1,
            head_dim: 2,
            scale: 1.0,
        };
        let keys = [f16::from_f32(1.0), f16::from_f32(0.0)];
        let values = [f16::from_f32(3.0), f16::from_f32(-2.0)];
        let mut out = [0.0; 2];
        attend_one_head(&shape, &[0.5, 0.5], &keys, &values, 0, 0, 0, &mut out);
        assert_eq!(out, [3.0, -2.0]);
    }

    #[test]
    fn weights_follow_softmax() {
        let shape = AttnShape {
            n_head: 1,
            n_head_kv: 1,
            head_dim: 1,
            scale: 1.0,
        };
        let keys = [f16::from_f32(0.0), f16::from_f32(1.0)];
        let values = [f16::from_f32(0.0), f16::from_f32(1.0)];
        let mut out = [0.0];
        attend_one_head(&shape, &[2.0], &keys, &values, 0, 0, 1, &mut out);
        let want = 2f32.exp() / (1.0 + 2f32.exp());
        assert!((out[0] - want).abs() < 1e-6);
        // window starting at 1 sees only the second value
        attend_one_head(&shape, &[2.0], &keys, &values, 0, 1, 1, &mut out);
        assert_eq!(out[0], 1.0);
    }
}
