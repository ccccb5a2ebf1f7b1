//! Qwen2-VL's projector (`qwen2vl_merger`), as llama.cpp's qwen2vl graph builds it. An image
//! keeps its own size: scaled (bicubic, aspect kept, black padding) to whole `2 · patch_size`
//! steps within a budget of 8 to 4096 image tokens ([`target_size`], clip's
//! `calc_size_preserved_ratio`). The tower: two patch convolutions (the two frames of the
//! temporal patch, one still image given to both) summed, the patches reordered so that each
//! 2×2 window is four consecutive rows (windows row by row), LayerNorm pre-norm blocks whose
//! attention rotates queries and keys by the patch's 2-D position (ggml's vision RoPE: base
//! 10000 over half the head, the first quarter of the pairs by the row, the second by the
//! column, each section's angle starting over), no learned positions and no class token, then
//! the merger: `v.post_ln` (LayerNorm), each window's four rows side by side, `mm.0`, GELU,
//! `mm.2`. The text model places the image tokens at 2-D positions (M-RoPE; `engine/media.rs`).

use std::sync::Arc;

use super::clip::{Block, Head, Linear, Lookup, Norm, Projector, VisionHparams};
use super::encode::{conv_patches, BlockScratch};
use super::layers::{gelu_in_place, layer_norm_rows};
use super::preprocess::{fit_to_steps, PlanarImage};
use super::VisionError;
use crate::gguf::GgufFile;
use crate::model::Tensor;
use crate::ops::mrope::{cos_sin_multi, Sections};
use crate::ops::rope::{Rope, RopeStyle};

/// The RoPE base of llama.cpp's qwen2vl vision graph.
const ROPE_THETA: f32 = 10000.0;

/// Image tokens an image may become (llama.cpp's limits for Qwen2-VL).
const MIN_TOKENS: usize = 8;
const MAX_TOKENS: usize = 4096;

/// Patches merged per side (llama.cpp's graph merges 2×2 windows).
pub(super) const MERGE: usize = 2;

/// The parts of Qwen2-VL's projector the generic fields do not hold.
pub(super) struct Qwen2vl {
    /// The second frame's patch kernel (`v.patch_embd.weight.1`).
    patch_embd_1: Tensor,
    mm0: Linear,
    mm2: Linear,
}

impl Qwen2vl {
    pub(super) fn n_embd_out(&self) -> usize {
        self.mm2.w.info.dims[1] as usize
    }
}

/// Rows (image tokens) an image of `width`×`height` pixels becomes.
pub(super) fn n_tokens_for(width: usize, height: usize, hp: &VisionHparams) -> usize {
    let (w, h) = target_size(width, height, hp);
    let step = hp.patch_size * MERGE;
    (w / step) * (h / step)
}

/// The size clip resizes an image of `width`×`height` to: whole steps of `2 · patch_size`
/// within `MIN_TOKENS` to `MAX_TOKENS` tokens ([`super::preprocess::fit_to_steps`]).
pub(super) fn target_size(width: usize, height: usize, hp: &VisionHparams) -> (usize, usize) {
    let align = hp.patch_size * MERGE;
    fit_to_steps(width, height, align, MIN_TOKENS, MAX_TOKENS)
}

/// Refuses hyperparameters `model`'s graph (Qwen2-VL's or Qwen2.5-VL's) cannot run: a merge
/// other than 2×2, or heads too narrow for the 2-D RoPE's four sections.
pub(super) fn check_hparams(h: &VisionHparams, model: &str) -> Result<(), VisionError> {
    if h.n_merge != MERGE {
        return Err(VisionError::NotImplemented(format!(
            "a spatial merge of {} (clip.vision.spatial_merge_size); {model} merges 2×2",
            h.n_merge
        )));
    }
    let d = h.n_embd / h.n_head;
    if !d.is_multiple_of(4) {
        return Err(VisionError::BadValue(
            "clip.vision.attention.head_count".into(),
            format!(
                "{}: the 2-D RoPE needs a head width ({d}) divisible by 4",
                h.n_head
            ),
        ));
    }
    Ok(())
}

/// Loads a `qwen2vl_merger` projector from `file` (whose hyperparameters are `hparams`).
pub(super) fn load(file: Arc<GgufFile>, hparams: VisionHparams) -> Result<Projector, VisionError> {
    let l = Lookup::new(&file);
    let h = &hparams;
    let (e, ff, p) = (h.n_embd, h.n_ff, h.patch_size);
    check_hparams(h, "Qwen2-VL")?;
    let patch_embd = l.weight("v.patch_embd.weight", &[p, p, 3, e])?;
    let patch_embd_1 = l.weight("v.patch_embd.weight.1", &[p, p, 3, e])?;
    let norm = |prefix: &str| -> Result<Norm, VisionError> {
        Ok(Norm {
            w: l.vector(&format!("{prefix}.weight"), e)?,
            b: l.vector(&format!("{prefix}.bias"), e)?,
        })
    };
    let opt_norm = |prefix: &str| match file.tensor(&format!("{prefix}.weight")) {
        Some(_) => norm(prefix).map(Some),
        None => Ok(None),
    };
    let pre_ln = opt_norm("v.pre_ln")?;
    let post_ln = opt_norm("v.post_ln")?;
    let blocks = (0..h.n_layer)
        .map(|il| {
            let p = |s: &str| format!("v.blk.{il}.{s}");
            // Old conversions swapped the FFN's up and down names; llama.cpp tells them apart
            // by the down projection's input width.
            let swapped = file
                .tensor(&p("ffn_down.weight"))
                .is_some_and(|t| t.dims.first() == Some(&(e as u64)));
            let (up, down) = match swapped {
                false => ("ffn_up", "ffn_down"),
                true => ("ffn_down", "ffn_up"),
            };
            Ok(Block {
                ln1: norm(&p("ln1"))?,
                q: l.linear(&p("attn_q"), e, Some(e))?,
                k: l.linear(&p("attn_k"), e, Some(e))?,
                v: l.linear(&p("attn_v"), e, Some(e))?,
                o: l.linear(&p("attn_out"), e, Some(e))?,
                ln2: norm(&p("ln2"))?,
                up: l.linear(&p(up), e, Some(ff))?,
                down: l.linear(&p(down), ff, Some(e))?,
            })
        })
        .collect::<Result<Vec<_>, VisionError>>()?;
    let mm0 = l.linear("mm.0", e * MERGE * MERGE, None)?;
    let mm2 = l.linear("mm.2", mm0.w.info.dims[1] as usize, None)?;
    l.check_all_used()?;
    Ok(Projector {
        ty: super::ProjectorType::Qwen2vl,
        hparams,
        file: file.clone(),
        patch_embd,
        patch_bias: None,
        class_embd: None,
        pos_embd: Vec::new(),
        pre_ln,
        post_ln,
        blocks,
        head: Head::Qwen2vl(Box::new(Qwen2vl {
            patch_embd_1,
            mm0,
            mm2,
        })),
        device: None,
    })
}

impl Projector {
    /// The grid (columns, rows) of the image tokens `img` becomes, for a projector whose tokens
    /// take 2-D positions in the text model (`qwen2vl_merger`, `qwen2.5vl_merger`); `None` for
    /// the others.
    pub fn token_grid(&self, img: &PlanarImage) -> Option<(usize, usize)> {
        match &self.head {
            Head::Qwen2vl(_) | Head::Qwen25vl(_) => {
                let step = self.hparams.patch_size * MERGE;
                Some((img.width / step, img.height / step))
            }
            _ => None,
        }
    }

    /// The embeddings of `img` (from [`super::preprocess`]: whole steps of `2 · patch_size`):
    /// one row per 2×2 window of patches, windows row by row.
    pub(super) fn encode_qwen2vl(&self, t: &Qwen2vl, img: &PlanarImage) -> Vec<f32> {
        let hp = &self.hparams;
        let e = hp.n_embd;
        let (mut x, pos) = self.two_frame_patches(&t.patch_embd_1, img);
        let n = pos.len();
        if let Some(ln) = &self.pre_ln {
            layer_norm_rows(&mut x, e, &ln.w, &ln.b, hp.eps);
        }
        let d = e / hp.n_head;
        let rope = VisionRope::new(d, &pos);
        let mut scratch = BlockScratch::default();
        for blk in &self.blocks {
            self.block(blk, &mut x, n, Some(&|t| rope.apply(t, d)), &mut scratch);
        }
        if let Some(ln) = &self.post_ln {
            layer_norm_rows(&mut x, e, &ln.w, &ln.b, hp.eps);
        }
        // Each window's four rows are consecutive: one merged row of 4·e.
        let merged = n / (MERGE * MERGE);
        let mut hidden = self.linear(&t.mm0, &x, merged);
        gelu_in_place(&mut hidden);
        self.linear(&t.mm2, &hidden, merged)
    }

    /// The patch rows of `img` (whole steps of `2 · patch_size`) as Qwen2-VL's and
    /// Qwen2.5-VL's towers take them: the convolutions of the projector's kernel and the second
    /// frame's (`kernel_1`; a still image is both frames) summed, in [`windows_first`] order,
    /// with each row's (row, column) in the patch grid.
    pub(super) fn two_frame_patches(
        &self,
        kernel_1: &Tensor,
        img: &PlanarImage,
    ) -> (Vec<f32>, Vec<(usize, usize)>) {
        let (p, e) = (self.hparams.patch_size, self.hparams.n_embd);
        let step = p * MERGE;
        let (cols, rows) = (img.width / p, img.height / p);
        assert!(
            img.width.is_multiple_of(step) && img.height.is_multiple_of(step) && cols * rows > 0,
            "encode: a {}×{} image is not whole {step}-pixel steps",
            img.width,
            img.height
        );
        let n = cols * rows;
        let mut a = vec![0f32; n * e];
        let mut b = vec![0f32; n * e];
        conv_patches(&self.file, &self.patch_embd, img, p, e, &mut a);
        conv_patches(&self.file, kernel_1, img, p, e, &mut b);
        for (x, y) in a.iter_mut().zip(&b) {
            *x += y;
        }
        windows_first(&a, cols, rows, e)
    }
}

/// The patch rows `x` (`cols`×`rows`, row by row, `e` wide) reordered window by window: for
/// each 2×2 window (windows row by row) its top-left, top-right, bottom-left and bottom-right
/// patch; with each reordered row's (row, column) in the patch grid.
pub(super) fn windows_first(
    x: &[f32],
    cols: usize,
    rows: usize,
    e: usize,
) -> (Vec<f32>, Vec<(usize, usize)>) {
    let mut out = Vec::with_capacity(x.len());
    let mut pos = Vec::with_capacity(cols * rows);
    for wy in (0..rows).step_by(MERGE) {
        for wx in (0..cols).step_by(MERGE) {
            for dy in 0..MERGE {
                for dx in 0..MERGE {
                    let (y, xx) = (wy + dy, wx + dx);
                    out.extend_from_slice(&x[(y * cols + xx) * e..][..e]);
                    pos.push((y, xx));
                }
            }
        }
    }
    (out, pos)
}

/// ggml's vision RoPE for each row's patch position: over a head of `d`, `d/2` pairs `(i,
/// i + d/2)`, pairs below `d/4` rotated by the row, the others by the column, at frequencies
/// `10000^(-4j/d)` counted from each section's start.
pub(super) struct VisionRope {
    apply: Rope,
    tables: Vec<Vec<(f32, f32)>>,
}

impl VisionRope {
    pub(super) fn new(d: usize, pos: &[(usize, usize)]) -> VisionRope {
        let theta = Rope {
            style: RopeStyle::Neox,
            n_dims: d / 2,
            freq_base: ROPE_THETA,
            freq_scale: 1.0,
            freq_factors: None,
            attn_factor: 1.0,
            yarn: None,
        };
        let sections = Sections::Independent([d / 4; 4]);
        let tables = pos
            .iter()
            .map(|&(y, x)| {
                let (y, x) = (y as i64, x as i64);
                cos_sin_multi(&theta, d / 2, sections, [y, x, y, x])
            })
            .collect();
        VisionRope {
            apply: Rope { n_dims: d, ..theta },
            tables,
        }
    }

    /// Rotates every head of each row of `x` (`n_embd` wide, heads of `d`) for its position.
    pub(super) fn apply(&self, x: &mut [f32], d: usize) {
        let width = x.len() / self.tables.len();
        for (row, cs) in x.chunks_exact_mut(width).zip(&self.tables) {
            self.apply.apply_with(row, d, cs);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vision::FfnActivation;

    fn hp(patch_size: usize) -> VisionHparams {
        VisionHparams {
            image_size: 56,
            patch_size,
            n_embd: 8,
            n_ff: 16,
            n_head: 2,
            n_layer: 1,
            eps: 1e-6,
            image_mean: [0.5; 3],
            image_std: [0.5; 3],
            ffn_act: FfnActivation::GeluQuick,
            feature_layers: Vec::new(),
            n_merge: 2,
            longest_edge: None,
        }
    }

    #[test]
    fn sizes_are_whole_steps_within_the_budget() {
        let h = hp(14);
        // 130×50 → 140×56 (round(130/28)=5 steps, round(50/28)=2): 10 tokens, within 8..4096.
        assert_eq!(target_size(130, 50, &h), (140, 56));
        assert_eq!(n_tokens_for(130, 50, &h), 10);
        // A tiny image is scaled up to at least 8 tokens.
        let (w, hh) = target_size(20, 20, &h);
        assert!((w / 28) * (hh / 28) >= 8, "{w}x{hh}");
        // A huge one down to at most 4096.
        let (w, hh) = target_size(8000, 6000, &h);
        assert!((w / 28) * (hh / 28) <= 4096, "{w}x{hh}");
    }

    #[test]
    fn windows_come_first_row_by_row() {
        // A 4×2 grid of 1-wide rows holding their index.
        let x: Vec<f32> = (0..8).map(|v| v as f32).collect();
        let (out, pos) = windows_first(&x, 4, 2, 1);
        assert_eq!(out, vec![0., 1., 4., 5., 2., 3., 6., 7.]);
        assert_eq!(pos[2], (1, 0));
        assert_eq!(pos[7], (1, 3));
    }

    #[test]
    fn vision_rope_rotates_by_row_then_column() {
        // d = 8: pairs (i, i+4); pairs 0, 1 by the row, 2, 3 by the column, at 10000^(-j/2).
        let r = VisionRope::new(8, &[(3, 5)]);
        let t = &r.tables[0];
        let ts = 10000f32.powf(-0.5);
        let close = |a: f32, b: f32| (a - b).abs() < 1e-5;
        assert!(close(t[0].0, 3f32.cos()) && close(t[1].0, (3.0 * ts).cos()));
        assert!(close(t[2].0, 5f32.cos()) && close(t[3].1, (5.0 * ts).sin()));
        let mut x = vec![1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0];
        r.apply(&mut x, 8);
        assert!(close(x[0], 3f32.cos()) && close(x[4], 3f32.sin()));
    }
}
