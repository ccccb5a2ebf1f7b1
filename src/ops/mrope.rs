//! Multi-section rotary embedding (ggml's `rope_multi`): each rotated pair takes its angle from
//! one of four position components (time, height, width, extra) chosen by the section the pair
//! falls in, as Qwen2-VL's text model (M-RoPE) and its vision tower (2-D RoPE) rotate. The
//! angle is advanced by repeated multiplication, per component, as ggml's
//! `ggml_mrope_cache_init` builds it; with every component equal it is [`Rope::cos_sin`].

use super::mathf;
use super::rope::Rope;

/// How the sections of a multi-section rotation run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sections {
    /// M-RoPE: pair `i` is in section `i mod Σ sections`, every component's angle advancing
    /// along all pairs (ggml's `GGML_ROPE_TYPE_MROPE`).
    Shared([usize; 4]),
    /// Vision: as `Shared`, but each component's angle starts over at its section's first pair
    /// (ggml's `GGML_ROPE_TYPE_VISION`).
    Independent([usize; 4]),
}

/// cos and sin of each of the `n_pairs` rotated pairs for the position components `pos`
/// (time, height, width, extra), with `rope`'s base (over `rope.n_dims`), scaling, factors and
/// YaRN.
pub fn cos_sin_multi(
    rope: &Rope,
    n_pairs: usize,
    sections: Sections,
    pos: [i64; 4],
) -> Vec<(f32, f32)> {
    let (s, indep) = match sections {
        Sections::Shared(s) => (s, false),
        Sections::Independent(s) => (s, true),
    };
    let sect_dims = s.iter().sum::<usize>().max(1);
    let starts = [0, s[0], s[0] + s[1], s[0] + s[1] + s[2]];
    let theta_scale = rope.freq_base.powf(-2.0 / rope.n_dims as f32);
    let mut m = rope.attn_factor;
    if rope.yarn.is_some() {
        m *= 0.1f32.mul_add((1.0 / rope.freq_scale).ln(), 1.0);
    }
    let mut theta = pos.map(|p| p as f32);
    (0..n_pairs)
        .map(|i| {
            let sector = i % sect_dims;
            if indep {
                for c in 0..4 {
                    if sector == starts[c] && (c == 0 || s[c] > 0) {
                        theta[c] = pos[c] as f32;
                    }
                }
            }
            let c = if sector < starts[1] {
                0
            } else if sector < starts[2] {
                1
            } else if sector < starts[3] {
                2
            } else {
                3
            };
            let ff = rope.freq_factors.as_ref().map_or(1.0, |f| f[i]);
            let extrap = theta[c] / ff;
            let interp = rope.freq_scale * extrap;
            let t = match &rope.yarn {
                Some(y) => {
                    let mix = y.ramp_mix(2 * i);
                    extrap.mul_add(mix, interp * (1.0 - mix))
                }
                None => interp,
            };
            for th in theta.iter_mut() {
                *th *= theta_scale;
            }
            (mathf::cosf(t) * m, mathf::sinf(t) * m)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::rope::RopeStyle;

    fn rope(n_dims: usize) -> Rope {
        Rope {
            style: RopeStyle::Neox,
            n_dims,
            freq_base: 10000.0,
            freq_scale: 1.0,
            freq_factors: None,
            attn_factor: 1.0,
            yarn: None,
        }
    }

    #[test]
    fn equal_components_are_plain_rope() {
        let r = rope(16);
        for p in [0i64, 1, 7, 300] {
            let got = cos_sin_multi(&r, 8, Sections::Shared([2, 3, 3, 0]), [p; 4]);
            assert_eq!(got, r.cos_sin(p as usize), "position {p}");
        }
    }

    #[test]
    fn sections_pick_their_component() {
        // Vision layout: 8 pairs over a rope of 8 dimensions, sections of 4: pairs 0..4 take
        // the row, 4..8 the column, each starting over.
        let r = rope(8);
        let got = cos_sin_multi(&r, 8, Sections::Independent([4; 4]), [3, 5, 3, 5]);
        let row = cos_sin_multi(&r, 4, Sections::Shared([4, 0, 0, 0]), [3; 4]);
        let col = cos_sin_multi(&r, 4, Sections::Shared([4, 0, 0, 0]), [5; 4]);
        assert_eq!(&got[..4], &row[..]);
        assert_eq!(&got[4..], &col[..]);
        // Shared sections keep advancing: pair 2 of [2, 2, 0, 0] is the height's third angle.
        let got = cos_sin_multi(&r, 4, Sections::Shared([2, 2, 0, 0]), [0, 6, 0, 0]);
        let h = r.cos_sin(6);
        assert_eq!(got[2], h[2]);
        assert_eq!(got[0], (1.0, 0.0));
    }
}
