//! Rotary position embedding in ggml's two layouts: `Normal` rotates adjacent pairs (x0,x1),
//! `Neox` rotates the two halves of the rotated dimensions (x_i, x_{i+d/2}). Angles are built by
//! repeated multiplication in f32, exactly as ggml builds its cos/sin cache. Scaling: a linear
//! `freq_scale`, per-pair frequency factors that divide the angle (Llama 3's `rope_freqs`,
//! Phi-3's LongRoPE short/long factors), an attention factor on cos and sin (LongRoPE), and
//! YaRN: per pair a mix of the interpolated and the extrapolated angle, ramped between two
//! correction dimensions, with its magnitude correction, as ggml's `rope_yarn` computes it.

use std::sync::Arc;

use super::mathf;

/// How the rotated dimensions are paired.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeStyle {
    Normal,
    Neox,
}

/// Rotation settings for one layer.
#[derive(Clone, Debug)]
pub struct Rope {
    pub style: RopeStyle,
    /// Number of leading dimensions of each head that are rotated.
    pub n_dims: usize,
    pub freq_base: f32,
    /// 1 / linear scaling factor.
    pub freq_scale: f32,
    /// Divisors of each pair's angle (`n_dims / 2`), or `None` for all ones.
    pub freq_factors: Option<Arc<[f32]>>,
    /// Multiplies cos and sin (so q and k each); 1 for none.
    pub attn_factor: f32,
    /// YaRN's extrapolation mix, or `None` (ggml's `ext_factor` of 0).
    pub yarn: Option<Yarn>,
}

/// YaRN's parameters for one rotation (ggml's `ext_factor` and correction dimensions).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Yarn {
    /// Weight of the extrapolated angle at the ramp's low end (llama.cpp sets 1; 0 is no YaRN,
    /// given as `Rope::yarn = None`).
    pub ext_factor: f32,
    /// Pairs below `corr_dims[0]` keep their extrapolated angle, pairs above `corr_dims[1]` are
    /// interpolated, and the ramp between mixes them.
    pub corr_dims: [f32; 2],
}

impl Yarn {
    /// ggml's `ggml_rope_yarn_corr_dims` for `n_dims` rotated dimensions trained at context
    /// `n_ctx_orig`, with base `freq_base` and YaRN's `beta_fast`/`beta_slow` rotations.
    pub fn new(
        ext_factor: f32,
        n_dims: usize,
        n_ctx_orig: usize,
        freq_base: f32,
        beta_fast: f32,
        beta_slow: f32,
    ) -> Yarn {
        let corr_dim = |n_rot: f32| {
            n_dims as f32 * (n_ctx_orig as f32 / (n_rot * 2.0 * std::f32::consts::PI)).ln()
                / (2.0 * freq_base.ln())
        };
        let start = corr_dim(beta_fast).floor();
        let end = corr_dim(beta_slow).ceil();
        Yarn {
            ext_factor,
            corr_dims: [start.max(0.0), end.min(n_dims as f32 - 1.0)],
        }
    }

    /// ggml's `rope_yarn_ramp` for the pair starting at dimension `i0`, times `ext_factor`.
    pub(crate) fn ramp_mix(&self, i0: usize) -> f32 {
        let [low, high] = self.corr_dims;
        let y = ((i0 / 2) as f32 - low) / (high - low).max(0.001);
        (1.0 - y.clamp(0.0, 1.0)) * self.ext_factor
    }
}

impl Rope {
    /// The cos/sin pairs for position `pos`: `n_dims / 2` entries.
    pub fn cos_sin(&self, pos: usize) -> Vec<(f32, f32)> {
        let mut m = self.attn_factor;
        if self.yarn.is_some() {
            // YaRN's magnitude correction (ggml's compiler contracts it into one FMA).
            m *= 0.1f32.mul_add((1.0 / self.freq_scale).ln(), 1.0);
        }
        self.table(pos, m)
    }

    /// cos and sin of each pair's angle at `pos`, times `m`, as ggml's `ggml_rope_cache_init`
    /// builds them: the angle advanced by repeated multiplication, divided by the pair's factor,
    /// scaled linearly, and with YaRN mixed with the unscaled angle along its ramp.
    fn table(&self, pos: usize, m: f32) -> Vec<(f32, f32)> {
        let theta_scale = self.freq_base.powf(-2.0 / self.n_dims as f32);
        let mut theta = pos as f32;
        (0..self.n_dims / 2)
            .map(|i| {
                let ff = self.freq_factors.as_ref().map_or(1.0, |f| f[i]);
                let extrap = theta / ff;
                let interp = self.freq_scale * extrap;
                let t = match &self.yarn {
                    Some(y) => {
                        let mix = y.ramp_mix(2 * i);
                        extrap.mul_add(mix, interp * (1.0 - mix))
                    }
                    None => interp,
                };
                theta *= theta_scale;
                (mathf::cosf(t) * m, mathf::sinf(t) * m)
            })
            .collect()
    }

    /// Rotates every `head_dim`-long head in `x` (one token's heads, back to back) for `pos`.
    pub fn apply(&self, x: &mut [f32], head_dim: usize, pos: usize) {
        let cs = self.cos_sin(pos);
        self.apply_with(x, head_dim, &cs);
    }

    /// Rotates every head in `x` back by `delta` positions: a key rotated for position `p`
    /// becomes the key for `p - delta` (rotations compose, YaRN's mixed angles too, since they
    /// are linear in the position; llama.cpp shifts its cache alike).
    pub fn unrotate(&self, x: &mut [f32], head_dim: usize, delta: usize) {
        // A pure rotation: the magnitude factors were applied once, when the key was stored.
        let cs: Vec<(f32, f32)> = self
            .table(delta, 1.0)
            .into_iter()
            .map(|(c, s)| (c, -s))
            .collect();
        self.apply_with(x, head_dim, &cs);
    }

    /// Like [`Rope::apply`] with a precomputed [`Rope::cos_sin`] table.
    pub fn apply_with(&self, x: &mut [f32], head_dim: usize, cs: &[(f32, f32)]) {
        #[cfg(target_arch = "x86_64")]
        if crate::cpu::isa().has_avx2() {
            // SAFETY: the CPU authority chose an AVX2 variant, so AVX2 and FMA are present.
            return unsafe { self.apply_fma(x, head_dim, cs) };
        }
        self.apply_body(x, head_dim, cs)
    }

    /// [`Rope::apply_body`] compiled with FMA, so `mul_add` is one instruction rather than a
    /// call into libm (same results).
    ///
    /// # Safety
    /// The CPU must support AVX2 and FMA.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn apply_fma(&self, x: &mut [f32], head_dim: usize, cs: &[(f32, f32)]) {
        self.apply_body(x, head_dim, cs)
    }

    #[inline(always)]
    fn apply_body(&self, x: &mut [f32], head_dim: usize, cs: &[(f32, f32)]) {
        let half = self.n_dims / 2;
        for head in x.chunks_exact_mut(head_dim) {
            for (i, &(c, s)) in cs.iter().enumerate() {
                let (a, b) = match self.style {
                    RopeStyle::Normal => (2 * i, 2 * i + 1),
                    RopeStyle::Neox => (i, i + half),
                };
                let (x0, x1) = (head[a], head[b]);
                // ggml's compiler contracts these into fused multiply-adds; so do we, in the
                // same shape, so that results match llama.cpp to the bit.
                head[a] = x0.mul_add(c, -(x1 * s));
                head[b] = x0.mul_add(s, x1 * c);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn position_zero_is_identity() {
        let rope = Rope {
            style: RopeStyle::Neox,
            n_dims: 4,
            freq_base: 10000.0,
            freq_scale: 1.0,
            freq_factors: None,
            attn_factor: 1.0,
            yarn: None,
        };
        let mut x = vec![1.0, 2.0, 3.0, 4.0];
        rope.apply(&mut x, 4, 0);
        assert_eq!(x, vec![1.0, 2.0, 3.0, 4.0]);
    }

    #[test]
    fn unrotate_moves_a_key_back() {
        for style in [RopeStyle::Normal, RopeStyle::Neox] {
            let rope = Rope {
                style,
                n_dims: 8,
                freq_base: 10000.0,
                freq_scale: 1.0,
                freq_factors: None,
                attn_factor: 1.0,
                yarn: None,
            };
            let x: Vec<f32> = (0..16).map(|i| i as f32 * 0.37 - 2.0).collect();
            let (mut at_90, mut at_60) = (x.clone(), x.clone());
            rope.apply(&mut at_90, 8, 90);
            rope.apply(&mut at_60, 8, 60);
            rope.unrotate(&mut at_90, 8, 30);
            for (a, b) in at_90.iter().zip(&at_60) {
                assert!((a - b).abs() < 1e-4, "{a} vs {b}");
            }
        }
    }

    #[test]
    fn rotation_preserves_pair_norms() {
        for style in [RopeStyle::Normal, RopeStyle::Neox] {
            let rope = Rope {
                style,
                n_dims: 4,
                freq_base: 10000.0,
                freq_scale: 1.0,
                freq_factors: None,
                attn_factor: 1.0,
                yarn: None,
            };
            let mut x = vec![1.0, 0.0, 0.0, 1.0];
            rope.apply(&mut x, 4, 7);
            let norm: f32 = x.iter().map(|v| v * v).sum();
            assert!((norm - 2.0).abs() < 1e-5);
            // first pair rotates by 7 radians
            let (a, b) = if style == RopeStyle::Normal {
                (0, 1)
            } else {
                (0, 2)
            };
            assert!((x[a] - 7f32.cos()).abs() < 1e-6 && (x[b] - 7f32.sin()).abs() < 1e-6);
        }
    }

    #[test]
    fn only_leading_dims_rotate() {
        let rope = Rope {
            style: RopeStyle::Normal,
            n_dims: 2,
            freq_base: 10000.0,
            freq_scale: 1.0,
            freq_factors: None,
            attn_factor: 1.0,
            yarn: None,
        };
        let mut x = vec![1.0, 0.0, 5.0, 6.0];
        rope.apply(&mut x, 4, 3);
        assert_eq!(&x[2..], &[5.0, 6.0]);
    }

    #[test]
    fn freq_factors_divide_angles_and_attn_factor_scales() {
        let plain = Rope {
            style: RopeStyle::Neox,
            n_dims: 4,
            freq_base: 10000.0,
            freq_scale: 1.0,
            freq_factors: None,
            attn_factor: 1.0,
            yarn: None,
        };
        let scaled = Rope {
            freq_factors: Some(vec![2.0, 4.0].into()),
            attn_factor: 1.5,
            ..plain.clone()
        };
        let theta1 = 10000f32.powf(-0.5);
        let cs = scaled.cos_sin(8);
        // pair 0: angle 8 / 2; pair 1: angle 8 * theta1 / 4; both scaled by 1.5
        assert!((cs[0].0 - 4f32.cos() * 1.5).abs() < 1e-6);
        assert!((cs[0].1 - 4f32.sin() * 1.5).abs() < 1e-6);
        assert!((cs[1].1 - (2.0 * theta1).sin() * 1.5).abs() < 1e-6);
        // unrotating is a pure rotation whatever the attention factor
        let x: Vec<f32> = vec![0.3, -1.2, 0.7, 2.0];
        let (mut a, mut b) = (x.clone(), x.clone());
        scaled.apply(&mut a, 4, 9);
        scaled.apply(&mut b, 4, 5);
        scaled.unrotate(&mut a, 4, 4);
        for (p, q) in a.iter().zip(&b) {
            assert!((p - q).abs() < 1e-5, "{p} vs {q}");
        }
    }

    #[test]
    fn yarn_mixes_extrapolated_and_interpolated_angles_along_its_ramp() {
        let plain = Rope {
            style: RopeStyle::Normal,
            n_dims: 16,
            freq_base: 10000.0,
            freq_scale: 0.25,
            freq_factors: None,
            attn_factor: 1.0,
            yarn: None,
        };
        let yarn = Rope {
            yarn: Some(Yarn::new(1.0, 16, 1024, 10000.0, 32.0, 1.0)),
            ..plain.clone()
        };
        assert_eq!(yarn.yarn.unwrap().corr_dims, [1.0, 5.0]);
        let pos = 37;
        let m = 1.0 + 0.1 * 4f32.ln();
        let (cs, lin) = (yarn.cos_sin(pos), plain.cos_sin(pos));
        let theta = |i: usize| pos as f32 * 10000f32.powf(-2.0 * i as f32 / 16.0);
        // Pair 0 sits below the ramp: the unscaled angle, with YaRN's magnitude.
        assert!((cs[0].1 - theta(0).sin() * m).abs() < 1e-4, "{:?}", cs[0]);
        // Pairs from 5 on are interpolated as with linear scaling.
        for i in 5..8 {
            assert!((cs[i].0 - lin[i].0 * m).abs() < 1e-5, "pair {i}");
            assert!((cs[i].1 - lin[i].1 * m).abs() < 1e-5, "pair {i}");
        }
        // Pair 3 is half way: (3 - 1) / (5 - 1) of the way to interpolation.
        let t3 = theta(3) * (0.5 + 0.5 * 0.25);
        assert!((cs[3].1 - t3.sin() * m).abs() < 1e-4);
        // Unrotating stays a pure rotation with YaRN's angles.
        let x: Vec<f32> = (0..16).map(|i| i as f32 * 0.3 - 2.0).collect();
        let (mut a, mut b) = (x.clone(), x.clone());
        yarn.apply(&mut a, 16, 90);
        yarn.apply(&mut b, 16, 60);
        yarn.unrotate(&mut a, 16, 30);
        for (p, q) in a.iter().zip(&b) {
            assert!((p - q).abs() < 1e-4, "{p} vs {q}");
        }
    }
}
