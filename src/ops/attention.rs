//! Scaled dot-product attention of a batch of query tokens over a sequence's cached keys and
//! values (stored as f16), causal, with an optional sliding window. Softmax is computed in one
//! pass with a running maximum, as flash attention does.

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
    let mut acc = vec![0f32; hd];
    let mut max = f32::NEG_INFINITY;
    let mut sum = 0f32;
    for p in first..=last {
        let k = &keys[p * kv_dim + kv_head * hd..][..hd];
        let s = dot_f16(q, k) * shape.scale;
        let (ms, vs) = if s > max {
            let ms = (max - s).exp();
            max = s;
            (ms, 1.0)
        } else {
            (1.0, (s - max).exp())
        };
        if ms != 1.0 {
            acc.iter_mut().for_each(|a| *a *= ms);
        }
        let v = &values[p * kv_dim + kv_head * hd..][..hd];
        for (a, vv) in acc.iter_mut().zip(v) {
            *a += vv.to_f32() * vs;
        }
        sum = sum * ms + vs;
    }
    let inv = if sum == 0.0 { 0.0 } else { 1.0 / sum };
    for (o, a) in out.iter_mut().zip(&acc) {
        *o = a * inv;
    }
}

fn dot_f16(q: &[f32], k: &[f16]) -> f32 {
    q.iter().zip(k).map(|(a, b)| a * b.to_f32()).sum()
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
