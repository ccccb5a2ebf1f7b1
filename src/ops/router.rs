//! The router of a mixture-of-experts block: from one token's router logits to the experts it
//! goes to and their weights, as llama.cpp's `build_moe_ffn` computes it on the CPU: a softmax
//! or sigmoid over all experts; for choosing only, an optional per-expert bias added (DeepSeek-V3)
//! and, with group-limited routing, every group but the best few masked out (a group scores the
//! sum of its two best experts); the `k` best in descending order; their unbiased probabilities
//! as weights, optionally divided by their sum, optionally scaled.

use crate::ops::expf::expf_ggml;
use crate::ops::mathf;

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
        *o = mathf::expf(v - max);
        sum += *o as f64;
    }
    let scale = (1.0 / sum) as f32;
    probs.iter_mut().for_each(|p| *p *= scale);
}

/// How router logits become per-expert probabilities.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gating {
    Softmax,
    /// Each expert's own sigmoid (DeepSeek-V3).
    Sigmoid,
}

/// Group-limited routing: the experts form `n_groups` equal groups, and a token's experts come
/// from its `n_used` best groups only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Groups {
    pub n_groups: usize,
    pub n_used: usize,
}

/// Everything about a router but its weights and the number of experts to pick.
#[derive(Clone, Copy, Debug)]
pub struct Router<'a> {
    pub gating: Gating,
    /// Added to the probabilities for choosing experts, not for weighting them.
    pub selection_bias: Option<&'a [f32]>,
    pub groups: Option<Groups>,
    /// Divide the chosen weights by their sum.
    pub normalise: bool,
    /// Multiply the weights by this.
    pub scale: Option<f32>,
}

impl Router<'_> {
    /// The `k` experts of one token with router `logits`; `probs` and `select` are scratch of
    /// the logits' length.
    pub fn route(&self, logits: &[f32], k: usize, probs: &mut [f32], select: &mut [f32]) -> Route {
        match self.gating {
            Gating::Softmax => softmax(logits, probs),
            Gating::Sigmoid => probs
                .iter_mut()
                .zip(logits)
                .for_each(|(p, &l)| *p = sigmoid(l)),
        }
        select.copy_from_slice(probs);
        if let Some(bias) = self.selection_bias {
            select.iter_mut().zip(bias).for_each(|(s, b)| *s += b);
        }
        if let Some(g) = self.groups {
            mask_groups(select, g);
        }
        let mut r = route(select, k, false);
        for (w, &e) in r.weights.iter_mut().zip(&r.experts) {
            *w = probs[e];
        }
        if self.normalise {
            normalise(&mut r.weights);
        }
        if let Some(s) = self.scale {
            r.weights.iter_mut().for_each(|w| *w *= s);
        }
        r
    }
}

/// ggml's scalar sigmoid, `1 / (1 + expf(-x))`.
fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + mathf::expf(-x))
}

/// Sets the scores of every expert outside the `g.n_used` best groups to -inf; a group's score
/// is the sum of its two best experts' scores.
fn mask_groups(select: &mut [f32], g: Groups) {
    let per = select.len() / g.n_groups;
    let scores: Vec<f32> = select
        .chunks_exact(per)
        .map(|grp| {
            let best = route(grp, 2, false).weights;
            best[0] + best[1]
        })
        .collect();
    let kept = route(&scores, g.n_used, false).experts;
    for (i, grp) in select.chunks_exact_mut(per).enumerate() {
        if !kept.contains(&i) {
            grp.fill(f32::NEG_INFINITY);
        }
    }
}

/// Divides `weights` by their sum (added in f64 as ggml's `sum_rows` does), clamped below at
/// f16's smallest normal number, as llama.cpp does.
fn normalise(weights: &mut [f32]) {
    if weights.is_empty() {
        return;
    }
    let sum = weights.iter().map(|&w| w as f64).sum::<f64>() as f32;
    let sum = sum.max(6.103_515_6e-5);
    weights.iter_mut().for_each(|w| *w /= sum);
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
    let k = k.min(probs.len());
    let mut order: Vec<usize> = (0..probs.len()).collect();
    order.sort_by(|&a, &b| probs[b].total_cmp(&probs[a]).then(a.cmp(&b)));
    order.truncate(k);
    let mut weights: Vec<f32> = order.iter().map(|&e| probs[e]).collect();
    if normalise {
        self::normalise(&mut weights);
    }
    Route {
        experts: order,
        weights,
    }
}

/// ggml's scalar sigmoid of a shared-expert gate as llama.cpp builds it for Qwen2-MoE:
/// `silu(x) / x`, with `silu(x) = x / (1 + expf(-x))`.
pub fn shared_gate(x: f32) -> f32 {
    (x / (1.0 + mathf::expf(-x))) / x
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

    fn plain(gating: Gating) -> Router<'static> {
        Router {
            gating,
            selection_bias: None,
            groups: None,
            normalise: false,
            scale: None,
        }
    }

    fn route_of(r: &Router, logits: &[f32], k: usize) -> Route {
        let (mut p, mut s) = (vec![0.0; logits.len()], vec![0.0; logits.len()]);
        r.route(logits, k, &mut p, &mut s)
    }

    #[test]
    fn sigmoid_gating_weighs_by_each_experts_sigmoid() {
        let logits = [0.5, -1.0, 2.0, 0.0];
        let r = route_of(&plain(Gating::Sigmoid), &logits, 2);
        assert_eq!(r.experts, vec![2, 0]);
        assert_eq!(r.weights, vec![sigmoid(2.0), sigmoid(0.5)]);
        let scaled = Router {
            normalise: true,
            scale: Some(2.5),
            ..plain(Gating::Sigmoid)
        };
        let r = route_of(&scaled, &logits, 2);
        let sum = sigmoid(2.0) + sigmoid(0.5);
        assert!((r.weights[0] - sigmoid(2.0) / sum * 2.5).abs() < 1e-6);
        assert!((r.weights.iter().sum::<f32>() - 2.5).abs() < 1e-5);
    }

    #[test]
    fn selection_bias_chooses_but_does_not_weigh() {
        let logits = [0.5, -1.0, 2.0, 0.0];
        let bias = [0.0, 5.0, 0.0, 0.0];
        let r = Router {
            selection_bias: Some(&bias),
            ..plain(Gating::Sigmoid)
        };
        let got = route_of(&r, &logits, 2);
        assert_eq!(
            got.experts,
            vec![1, 2],
            "the bias lifts expert 1 to the top"
        );
        assert_eq!(got.weights, vec![sigmoid(-1.0), sigmoid(2.0)]);
    }

    #[test]
    fn groups_limit_the_choice_to_the_best_groups() {
        // Four groups of two; group scores (sum of both): 1.0+0.0, 0.9+0.8, 0.95+0.0, 0.7+0.6.
        let sel = [1.0, 0.0, 0.9, 0.8, 0.95, 0.0, 0.7, 0.6];
        let groups = Some(Groups {
            n_groups: 4,
            n_used: 2,
        });
        let r = Router {
            groups,
            ..plain(Gating::Sigmoid)
        };
        // As logits of a sigmoid (monotonic): the best groups are 1 (1.7) and 3 (1.3), so the
        // single best expert 0 and the third best 4 are out.
        let logits: Vec<f32> = sel
            .iter()
            .map(|p: &f32| (p / (1.0 - p + 1e-3)).ln())
            .collect();
        let got = route_of(&r, &logits, 3);
        assert_eq!(got.experts, vec![2, 3, 6]);
        let ungrouped = route_of(&plain(Gating::Sigmoid), &logits, 3);
        assert_eq!(ungrouped.experts, vec![0, 4, 2]);
    }

    #[test]
    fn shared_gate_is_the_sigmoid() {
        for x in [-6.0f32, -0.5, 0.25, 3.0] {
            let want = 1.0 / (1.0 + (-x as f64).exp());
            assert!((shared_gate(x) as f64 - want).abs() < 1e-6, "x={x}");
        }
    }
}
