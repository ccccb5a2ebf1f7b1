//! Qwen2.5-VL's projector (`qwen2.5vl_merger`), as llama.cpp's qwen2vl graph builds it for
//! that type. Images are sized and patched as Qwen2-VL's (`qwen2vl.rs`: whole 2×2 windows of
//! patches within 8 to 4096 tokens, two patch kernels summed, each 2×2 unit four consecutive
//! rows, the 2-D vision RoPE). The tower differs: RMS norms, a gated FFN (SiLU with
//! `clip.use_silu`), and window attention: the units are regrouped into squares of 112 pixels
//! (llama.cpp's fixed size; [`Windows`]), row by row, the last of a row or column cut short,
//! each window's units row by row; every `clip.vision.n_wa_pattern`-th block attends the whole
//! image, the others only within their window (0: every block the whole image). After the
//! RMS post-norm and the merger (`mm.0`, GELU, `mm.2`, one row per unit), the rows go back to
//! the units' row-by-row order.

use std::sync::Arc;

use super::attention::attention;
use super::clip::{Head, Linear, Lookup, Projector, VisionHparams};
use super::layers::gelu_in_place;
use super::pixtral::{block, opt_rms, Block, RmsNorm};
use super::preprocess::PlanarImage;
use super::qwen2vl::{check_hparams, VisionRope, MERGE};
use super::VisionError;
use crate::gguf::GgufFile;
use crate::model::Tensor;

/// The side of an attention window in pixels (llama.cpp's graph fixes it for Qwen2.5-VL).
const WINDOW_PX: usize = 112;

/// The metadata naming the full-attention blocks.
const WA_PATTERN_KEY: &str = "clip.vision.n_wa_pattern";

/// Qwen2.5-VL's tower and merger (the first patch kernel is the projector's `patch_embd`).
pub(super) struct Qwen25vl {
    /// The second frame's patch kernel (`v.patch_embd.weight.1`).
    patch_embd_1: Tensor,
    pre_ln: Option<RmsNorm>,
    post_ln: Option<RmsNorm>,
    blocks: Vec<Block>,
    /// Blocks `n_wa_pattern - 1`, `2·n_wa_pattern - 1`, … attend the whole image, the others
    /// their window; 0: no windows.
    wa_pattern: usize,
    mm0: Linear,
    mm2: Linear,
}

impl Qwen25vl {
    pub(super) fn n_embd_out(&self) -> usize {
        self.mm2.w.info.dims[1] as usize
    }
}

/// Loads a `qwen2.5vl_merger` projector from `file` (whose hyperparameters are `hparams`).
pub(super) fn load(file: Arc<GgufFile>, hparams: VisionHparams) -> Result<Projector, VisionError> {
    let l = Lookup::new(&file);
    let h = &hparams;
    let (e, ff, p) = (h.n_embd, h.n_ff, h.patch_size);
    check_hparams(h, "Qwen2.5-VL")?;
    let wa_pattern = match file.get(WA_PATTERN_KEY) {
        None => return Err(VisionError::MissingKey(WA_PATTERN_KEY.into())),
        Some(v) => match v.as_u32() {
            Some(n) => n as usize,
            None => {
                return Err(VisionError::BadValue(
                    WA_PATTERN_KEY.into(),
                    format!("{v:?}"),
                ))
            }
        },
    };
    if wa_pattern > 0 && WINDOW_PX / (p * MERGE) == 0 {
        return Err(VisionError::BadValue(
            "clip.vision.patch_size".into(),
            format!("{p}: Qwen2.5-VL's {WINDOW_PX}-pixel windows need 2×2 patches within them"),
        ));
    }
    let patch_embd = l.weight("v.patch_embd.weight", &[p, p, 3, e])?;
    let patch_embd_1 = l.weight("v.patch_embd.weight.1", &[p, p, 3, e])?;
    let pre_ln = opt_rms(&l, "v.pre_ln", e)?;
    let post_ln = opt_rms(&l, "v.post_ln", e)?;
    let blocks = (0..h.n_layer)
        .map(|il| block(&l, &file, il, e, ff, h.ffn_act, true))
        .collect::<Result<Vec<_>, _>>()?;
    let mm0 = l.linear("mm.0", e * MERGE * MERGE, None)?;
    let mm2 = l.linear("mm.2", mm0.w.info.dims[1] as usize, None)?;
    l.check_all_used()?;
    let tower = Qwen25vl {
        patch_embd_1,
        pre_ln,
        post_ln,
        blocks,
        wa_pattern,
        mm0,
        mm2,
    };
    Ok(Projector {
        ty: super::ProjectorType::Qwen25vl,
        hparams,
        file: file.clone(),
        patch_embd,
        patch_bias: None,
        class_embd: None,
        pos_embd: Vec::new(),
        pre_ln: None,
        post_ln: None,
        blocks: Vec::new(),
        head: Head::Qwen25vl(Box::new(tower)),
        device: None,
    })
}

impl Projector {
    /// The embeddings of `img` (from [`super::preprocess`]: whole steps of `2 · patch_size`):
    /// one row per 2×2 unit of patches, units row by row.
    pub(super) fn encode_qwen25vl(&self, t: &Qwen25vl, img: &PlanarImage) -> Vec<f32> {
        let hp = &self.hparams;
        let (p, e) = (hp.patch_size, hp.n_embd);
        let unit = MERGE * MERGE;
        let (mut x, mut pos) = self.two_frame_patches(&t.patch_embd_1, img);
        let n = pos.len();
        if let Some(ln) = &t.pre_ln {
            ln.apply(&mut x, hp.eps);
        }
        let windows = (t.wa_pattern > 0).then(|| {
            let step = p * MERGE;
            Windows::new(img.width / step, img.height / step, WINDOW_PX / step)
        });
        if let Some(w) = &windows {
            x = w.gather(&x, unit * e);
            pos = w.gather(&pos, unit);
        }
        let d = e / hp.n_head;
        let rope = VisionRope::new(d, &pos);
        let scale = 1.0 / (d as f32).sqrt();
        for (il, b) in t.blocks.iter().enumerate() {
            let within = windows
                .as_ref()
                .filter(|_| !(il + 1).is_multiple_of(t.wa_pattern));
            let attend = |q: &[f32], k: &[f32], v: &[f32]| match within {
                Some(w) => w.attention(q, k, v, unit, hp.n_head, scale),
                None => self.attend(q, k, v, n, hp.n_head, scale),
            };
            self.rms_block(b, &mut x, n, &|r| rope.apply(r, d), &attend);
        }
        if let Some(ln) = &t.post_ln {
            ln.apply(&mut x, hp.eps);
        }
        let merged = n / unit;
        let mut hidden = self.linear(&t.mm0, &x, merged);
        gelu_in_place(&mut hidden);
        let out = self.linear(&t.mm2, &hidden, merged);
        match &windows {
            Some(w) => w.scatter(&out, out.len() / merged),
            None => out,
        }
    }
}

/// The attention windows over a `cols`×`rows` grid of units: squares of `side` units, row by
/// row, those at the right and bottom edges cut short; within each, its units row by row.
struct Windows {
    /// The unit (numbered row by row over the grid) at each place of the windowed order.
    order: Vec<usize>,
    /// Units per window, in order.
    sizes: Vec<usize>,
}

impl Windows {
    fn new(cols: usize, rows: usize, side: usize) -> Windows {
        let mut order = Vec::with_capacity(cols * rows);
        let mut sizes = Vec::new();
        for wy in (0..rows).step_by(side) {
            for wx in (0..cols).step_by(side) {
                let (h, w) = (side.min(rows - wy), side.min(cols - wx));
                for y in wy..wy + h {
                    order.extend((wx..wx + w).map(|x| y * cols + x));
                }
                sizes.push(w * h);
            }
        }
        Windows { order, sizes }
    }

    /// The units of `x` (`width` values each, row by row) in the windowed order.
    fn gather<T: Copy>(&self, x: &[T], width: usize) -> Vec<T> {
        let mut out = Vec::with_capacity(x.len());
        for &u in &self.order {
            out.extend_from_slice(&x[u * width..][..width]);
        }
        out
    }

    /// The inverse of [`Windows::gather`].
    fn scatter<T: Copy + Default>(&self, x: &[T], width: usize) -> Vec<T> {
        let mut out = vec![T::default(); x.len()];
        for (i, &u) in self.order.iter().enumerate() {
            out[u * width..][..width].copy_from_slice(&x[i * width..][..width]);
        }
        out
    }

    /// Attention of the rows (`rows_per_unit` per unit, in the windowed order) within each
    /// window only, as llama.cpp's block-diagonal mask gives it.
    fn attention(
        &self,
        q: &[f32],
        k: &[f32],
        v: &[f32],
        rows_per_unit: usize,
        n_head: usize,
        scale: f32,
    ) -> Vec<f32> {
        let width = q.len() / (self.order.len() * rows_per_unit);
        let mut out = Vec::with_capacity(q.len());
        let mut start = 0;
        for &units in &self.sizes {
            let len = units * rows_per_unit;
            let r = start * width..(start + len) * width;
            out.extend(attention(
                &q[r.clone()],
                &k[r.clone()],
                &v[r],
                len,
                n_head,
                scale,
            ));
            start += len;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_are_squares_row_by_row_cut_at_the_edges() {
        // 5×3 units in windows of 2: [0 1 5 6] [2 3 7 8] [4 9] [10 11] [12 13] [14].
        let w = Windows::new(5, 3, 2);
        assert_eq!(
            w.order,
            vec![0, 1, 5, 6, 2, 3, 7, 8, 4, 9, 10, 11, 12, 13, 14]
        );
        assert_eq!(w.sizes, vec![4, 4, 2, 2, 2, 1]);
        let x: Vec<u32> = (0..30).collect();
        let g = w.gather(&x, 2);
        assert_eq!(&g[..6], &[0, 1, 2, 3, 10, 11]);
        assert_eq!(w.scatter(&g, 2), x);
    }

    #[test]
    fn window_attention_keeps_to_its_window() {
        // Two windows of one unit of one row, one head of width 2: each row attends only to
        // itself, so the output is its own value.
        let w = Windows::new(2, 1, 1);
        let q = [1.0, 0.0, 0.0, 1.0];
        let v = [3.0, 4.0, 5.0, 6.0];
        let out = w.attention(&q, &q, &v, 1, 1, 1.0);
        assert_eq!(out, v.to_vec());
        let whole = attention(&q, &q, &v, 2, 1, 1.0);
        assert_ne!(whole, v.to_vec());
    }
}
