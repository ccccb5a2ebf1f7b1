//! The heads of the SigLIP projectors, after the tower's post-norm, as llama.cpp's siglip graph
//! builds them. `gemma3`: the patch grid average-pooled in `n_merge`-sided windows (summed in
//! f32, row by row within a window, then divided, as ggml's pool does), each pooled row
//! RMS-normalised and scaled by `mm.soft_emb_norm`, then multiplied by the transposed
//! `mm.input_projection`. `idefics3`: pixel shuffle (each `n_merge`-sided window of patches
//! becomes one row, its patches side by side, row-major), then `mm.model.fc`. The loader has
//! checked that `n_merge` divides the patches per side.

use super::clip::{Head, Projector};
use crate::ops::matmul;
use crate::ops::norm::rms_norm_rows;

impl Projector {
    /// The rows of one image from the tower's output `x` (`n_patches × n_embd`).
    pub(super) fn siglip_head(&self, x: &[f32]) -> Vec<f32> {
        let h = &self.hparams;
        let (side, m, e) = (h.patches_per_side(), h.n_merge, h.n_embd);
        match &self.head {
            Head::Mlp { .. }
            | Head::Pixtral(_)
            | Head::Qwen2vl(_)
            | Head::Qwen25vl(_)
            | Head::Llama4(_)
            | Head::Minicpmv(_) => {
                unreachable!("not a SigLIP head")
            }
            Head::Gemma3 {
                soft_emb_norm,
                input_proj,
            } => {
                let mut pooled = avg_pool(x, side, e, m);
                rms_norm_rows(&mut pooled, soft_emb_norm, e, h.eps);
                let w = input_proj.mat();
                let n = pooled.len() / e;
                let mut out = vec![0f32; n * w.rows];
                matmul(&w, &pooled, n, &mut out);
                out
            }
            Head::Idefics3 { fc } => {
                let shuffled = pixel_shuffle(x, side, e, m);
                let n = shuffled.len() / (e * m * m);
                self.linear(fc, &shuffled, n)
            }
        }
    }
}

/// Average pooling of a `side × side` grid of `e`-wide rows in `k × k` windows with stride
/// `k`.
fn avg_pool(x: &[f32], side: usize, e: usize, k: usize) -> Vec<f32> {
    let out_side = side / k;
    let mut out = vec![0f32; out_side * out_side * e];
    let ka = (k * k) as f32;
    for (t, dst) in out.chunks_exact_mut(e).enumerate() {
        let (oy, ox) = (t / out_side, t % out_side);
        for ky in 0..k {
            for kx in 0..k {
                let src = &x[((oy * k + ky) * side + ox * k + kx) * e..][..e];
                for (d, s) in dst.iter_mut().zip(src) {
                    *d += s;
                }
            }
        }
        for d in dst.iter_mut() {
            *d /= ka;
        }
    }
    out
}

/// Pixel shuffle of a `side × side` grid of `e`-wide rows by `s`: each `s × s` window one row
/// of `s²·e` values (window rows outer, columns inner), windows in row-major order.
fn pixel_shuffle(x: &[f32], side: usize, e: usize, s: usize) -> Vec<f32> {
    let out_side = side / s;
    let mut out = vec![0f32; out_side * out_side * s * s * e];
    for (t, dst) in out.chunks_exact_mut(s * s * e).enumerate() {
        let (oy, ox) = (t / out_side, t % out_side);
        for dy in 0..s {
            let src = &x[((oy * s + dy) * side + ox * s) * e..][..s * e];
            dst[dy * s * e..][..s * e].copy_from_slice(src);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pooling_averages_windows_row_major() {
        // 4×4 grid of 1-wide rows holding their index; 2×2 windows.
        let x: Vec<f32> = (0..16).map(|v| v as f32).collect();
        let p = avg_pool(&x, 4, 1, 2);
        assert_eq!(p, vec![2.5, 4.5, 10.5, 12.5]);
    }

    #[test]
    fn pixel_shuffle_puts_a_window_side_by_side() {
        // 4×4 grid of 2-wide rows (v, -v); factor 2.
        let x: Vec<f32> = (0..16).flat_map(|v| [v as f32, -(v as f32)]).collect();
        let p = pixel_shuffle(&x, 4, 2, 2);
        assert_eq!(p.len(), 4 * 8);
        assert_eq!(&p[..8], &[0., -0., 1., -1., 4., -4., 5., -5.]);
        assert_eq!(&p[8..16], &[2., -2., 3., -3., 6., -6., 7., -7.]);
        assert_eq!(&p[24..], &[10., -10., 11., -11., 14., -14., 15., -15.]);
    }
}
