//! The router of a mixture-of-experts block: from one token's router logits to the experts it
//! goes to and their weights, as ggml computes it on the CPU (`build_moe_ffn` with softmax
//! gating): a softmax over all experts, the `k` most probable in descending order, their
//! probabilities as weights, optionally divided by their sum.

use crate::ops::expf::expf_ggml;

/// Lanes of ggml's AVX2 softmax loop; the rest use the scalar `expf`.
const LANES: usize = 8;

/// `probs = softmax(logits)` with ggml's CPU `soft_max` (AVX2 form): `exp(x - max)` by the
/// vectorised `expf` eight lanes at a time (each group summed in f32 in its reduction order,
/// the groups in f64), leftovers by libm's `expf`, then everything times `1 / sum`.
pub fn softmax(logits: &[f32], probs: &mut [f32]) {
    assert_eq!(logits.len(), probs.len(), "softmax: lengths");
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0f64;
    let full = logits.len() / LANES * LANES;
    for (x, y) in logits[..full]
        .chunks_exact(LANES)
        .zip(probs[..full].chunks_exact_mut(LANES))
    {
        for (o, &v) in y.iter_mut().zip(x) {
            *o = expf_ggml(v - max);
        }
        // _mm256 halves added, then movehl, then movehdup: the lanes in this order.
        let h: [f32; 4] = std::array::from_fn(|i| y[i + 4] + y[i]);
        let (a, b) = (h[0] + h[2], h[1] + h[3]);
        sum += (a + b) as f64;
    }
    for (o, &v) in probs[full..].iter_mut().zip(&logits[full..]) {
        *o = (v - max).exp();
        sum += *o as f64;
    }
    let scale = (1.0 / sum) as f32;
    probs.iter_mut().for_each(|p| *p *= scale);
}

/// The experts one token goes to, most probable first, and the weight of each.
#[derive(Clone, Debug, PartialEq)]
pub struct Route {
    pub experts: Vec<usize>,
    pub weights: Vec<f32>,
}

/// The `k` most probable of `probs` (ties to the lower index), weighted by their probability,
/// renormalised to sum to one when `normalise` (the sum clamped below at f16's smallest normal
/// number, as llama.cpp does).
pub fn route(probs: &[f32], k: usize, normalise: bool) -> Route {
    let mut order: Vec<usize> = (0..probs.len()).collect();
    order.sort_by(|&a, &b| probs[b].total_cmp(&probs[a]).then(a.cmp(&b)));
    order.truncate(k);
    let mut weights: Vec<f32> = order.iter().map(|&e| probs[e]).collect();
    if normalise && !weights.is_empty() {
        let sum = weights.iter().map(|&w| w as f64).sum::<f64>() as f32;
        let sum = sum.max(6.103_515_6e-5);
        weights.iter_mut().for_each(|w| *w /= sum);
    }
    Route {
        experts: order,
        weights,
    }
}

/// ggml's scalar sigmoid of a shared-expert gate as llama.cpp builds it for Qwen2-MoE:
/// `silu(x) / x`, with `silu(x) = x / (1 + expf(-x))`.
pub fn shared_gate(x: f32) -> f32 {
    (x / (1.0 + (-x).exp())) / x
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn softmax_sums_to_one_and_keeps_order() {
        for n in [1, 4, 8, 12, 60] {
            let logits: Vec<f32> = (0..n)
                .map(|i| ((i * 7919) % 13) as f32 * 0.37 - 2.0)
                .collect();
            let mut p = vec![0.0; n];
            softmax(&logits, &mut p);
            let sum: f32 = p.iter().sum();
            assert!((sum - 1.0).abs() < 1e-5, "n={n}: sum {sum}");
            for i in 0..n {
                let want = (logits[i] as f64).exp()
                    / logits.iter().map(|&l| (l as f64).exp()).sum::<f64>();
                assert!((p[i] as f64 - want).abs() < 1e-6, "n={n} i={i}");
            }
        }
    }

    #[test]
    fn route_picks_the_k_largest_in_order() {
        let probs = [0.1, 0.4, 0.05, 0.3, 0.15];
        let r = route(&probs, 2, false);
        assert_eq!(r.experts, vec![1, 3]);
        assert_eq!(r.weights, vec![0.4, 0.3]);
        let r = route(&probs, 2, true);
        assert!((r.weights[0] - 0.4 / 0.7).abs() < 1e-6);
        assert!((r.weights.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        let tie = route(&[0.25, 0.5, 0.25], 2, false);
        assert_eq!(tie.experts, vec![1, 0], "ties go to the lower index");
        assert!(route(&probs, 0, true).experts.is_empty());
    }

    #[test]
    fn shared_gate_is_the_sigmoid() {
        for x in [-6.0f32, -0.5, 0.25, 3.0] {
            let want = 1.0 / (1.0 + (-x as f64).exp());
            assert!((shared_gate(x) as f64 - want).abs() < 1e-6, "x={x}");
        }
    }
}
