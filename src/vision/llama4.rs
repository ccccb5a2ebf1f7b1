//! Llama 4's projector (`llama4`), as llama.cpp's llama4 graph builds it. Images are cut into
//! tiles as mtmd's LLaVA-UHD preprocessor does with Llama 4's candidate grids ([`refined_size`]:
//! up to 3×3 tiles of the input size; an image no larger than one tile is the overview alone):
//! the image fitted (bicubic, aspect kept, black padding) into the best grid and cut, plus the
//! whole image bicubic-stretched to one tile, the overview, encoded last. The tower: the patch
//! embedding (one linear layer over each unfolded patch, no bias), the class token after the
//! patches, learned positions, LayerNorm pre-norm and post-norm, LayerNorm blocks with biases
//! whose attention rotates queries and keys by a 2-D RoPE (base 10000: the first half of each
//! head by the patch's column, the second by its row, both counted from 1, the class token at
//! 0). Then the class token dropped, the pixel shuffle (each `n_merge`-sided window of patches
//! one row; llama.cpp's graph leaves the windows column by column), `mm.model.mlp.1`, GELU,
//! `mm.model.mlp.2`, GELU, and `mm.model.fc` into the text model's width, none with biases.
//! mtmd puts `<|image_start|>` before an image's tiles and `<|image_end|>` after its overview
//! (`layout.rs`).

use std::sync::Arc;

use super::clip::{Head, Linear, Lookup, Projector, VisionHparams};
use super::encode::BlockScratch;
use super::layers::{gelu_in_place, layer_norm_rows};
use super::preprocess::PlanarImage;
use super::VisionError;
use crate::gguf::GgufFile;
use crate::ops::rope::{Rope, RopeStyle};

/// The RoPE base llama.cpp's llama4 graph uses, whatever the file says.
const ROPE_THETA: f32 = 10000.0;

/// Tiles per side of the largest grid an image is cut into (llama.cpp's candidates: every grid
/// up to 3×3 but 1×1).
const MAX_TILES_PER_SIDE: usize = 3;

/// The parts of Llama 4's projector the generic fields do not hold: the adapter MLP and the
/// projection into the text model's width.
pub(super) struct Llama4 {
    mlp1: Linear,
    mlp2: Linear,
    proj: Linear,
}

impl Llama4 {
    pub(super) fn n_embd_out(&self) -> usize {
        self.proj.w.info.dims[1] as usize
    }
}

/// Loads a `llama4` projector from `file` (whose hyperparameters are `hparams`).
pub(super) fn load(file: Arc<GgufFile>, hparams: VisionHparams) -> Result<Projector, VisionError> {
    let l = Lookup::new(&file);
    let h = &hparams;
    let (e, ff, p) = (h.n_embd, h.n_ff, h.patch_size);
    if !(e / h.n_head).is_multiple_of(4) {
        return Err(VisionError::BadValue(
            "clip.vision.attention.head_count".into(),
            format!(
                "{}: the 2-D RoPE needs a head width ({}) divisible by 4",
                h.n_head,
                e / h.n_head
            ),
        ));
    }
    let n_patches = h.patches_per_side() * h.patches_per_side();
    // One linear layer over each unfolded patch (channels, rows, columns), as the converter
    // writes Llama 4's `patch_embedding.linear`.
    let patch_embd = l.weight("v.patch_embd.weight", &[3 * p * p, e])?;
    let class_embd = l.vector("v.class_embd", e)?;
    let pos_embd = l
        .tensor("v.position_embd.weight", &[e, n_patches + 1])?
        .to_f32(&file);
    let pre_ln = l.opt_norm("v.pre_ln", e)?;
    let post_ln = l.opt_norm("v.post_ln", e)?;
    let blocks = (0..h.n_layer)
        .map(|il| l.block(il, e, ff))
        .collect::<Result<Vec<_>, _>>()?;
    // Weights only: llama.cpp's graph reads no biases here (a file with one is refused below).
    let k = e * h.n_merge * h.n_merge;
    let out_of = |name: &str| match file.tensor(name) {
        Some(t) if t.dims.len() == 2 => t.dims[1] as usize,
        _ => 0, // the shape check names what is wrong
    };
    let weight_only = |name: &str, n_in: usize| -> Result<Linear, VisionError> {
        let w = l.weight(name, &[n_in, out_of(name)])?;
        Ok(Linear { w, b: None })
    };
    let mlp1 = weight_only("mm.model.mlp.1.weight", k)?;
    let mlp2 = weight_only("mm.model.mlp.2.weight", mlp1.w.info.dims[1] as usize)?;
    let proj = weight_only("mm.model.fc.weight", mlp2.w.info.dims[1] as usize)?;
    l.check_all_used()?;
    Ok(Projector {
        ty: super::ProjectorType::Llama4,
        hparams,
        file: file.clone(),
        patch_embd,
        patch_bias: None,
        class_embd: Some(class_embd),
        pos_embd,
        pre_ln,
        post_ln,
        blocks,
        head: Head::Llama4(Box::new(Llama4 { mlp1, mlp2, proj })),
        device: None,
    })
}

/// The size mtmd fits an image of `width`×`height` into before cutting it into tiles of the
/// input size `s`: of the grids up to 3×3 but 1×1 (widths outer, heights inner), the one that
/// keeps the most of the image's pixels when the image is scaled to fit it (aspect kept,
/// truncated), then the one that wastes the least; `None` when the image fits one tile (it is
/// then the overview alone). In f32 and whole pixels, as clip computes it.
pub(super) fn refined_size(width: usize, height: usize, s: usize) -> Option<(usize, usize)> {
    if width <= s && height <= s {
        return None;
    }
    let area = (width * height) as i64;
    let mut best = None;
    let (mut most_kept, mut least_wasted) = (0i64, i64::MAX);
    for x in 1..=MAX_TILES_PER_SIDE {
        for y in 1..=MAX_TILES_PER_SIDE {
            if (x, y) == (1, 1) {
                continue;
            }
            let (cw, ch) = (x * s, y * s);
            let scale = (cw as f32 / width as f32).min(ch as f32 / height as f32);
            let tw = (width as f32 * scale) as i64;
            let th = (height as f32 * scale) as i64;
            let kept = (tw * th).min(area);
            let wasted = (cw * ch) as i64 - kept;
            if kept > most_kept || (kept == most_kept && wasted < least_wasted) {
                (most_kept, least_wasted) = (kept, wasted);
                best = Some((cw, ch));
            }
        }
    }
    best
}

impl Projector {
    /// The embeddings of `img` (a tile or the overview, of the input size): one row per
    /// `n_merge`-sided window of patches, windows column by column.
    ///
    /// Panics if `img` is not the input size.
    pub(super) fn encode_llama4(&self, t: &Llama4, img: &PlanarImage) -> Vec<f32> {
        let hp = &self.hparams;
        assert!(
            img.width == hp.image_size && img.height == hp.image_size,
            "encode: a {}×{} image for a {} input",
            img.width,
            img.height,
            hp.image_size
        );
        let e = hp.n_embd;
        let side = hp.patches_per_side();
        let n_patches = side * side;
        let n = n_patches + 1;
        let mut x = vec![0f32; n * e];
        self.embed_patches(img, &mut x[..n_patches * e]);
        if let Some(cls) = &self.class_embd {
            x[n_patches * e..].copy_from_slice(cls);
        }
        for (v, p) in x.iter_mut().zip(&self.pos_embd) {
            *v += p;
        }
        if let Some(ln) = &self.pre_ln {
            layer_norm_rows(&mut x, e, &ln.w, &ln.b, hp.eps);
        }
        let d = e / hp.n_head;
        let rope = Rope2d::new(d, side);
        let mut scratch = BlockScratch::default();
        for blk in &self.blocks {
            self.block(blk, &mut x, n, Some(&|q| rope.apply(q)), &mut scratch);
        }
        if let Some(ln) = &self.post_ln {
            layer_norm_rows(&mut x, e, &ln.w, &ln.b, hp.eps);
        }
        x.truncate(n_patches * e);
        let s = hp.n_merge;
        let shuffled = pixel_shuffle(&x, side, e, s);
        let rows = n_patches / (s * s);
        let mut h = self.linear(&t.mlp1, &shuffled, rows);
        gelu_in_place(&mut h);
        let mut h = self.linear(&t.mlp2, &h, rows);
        gelu_in_place(&mut h);
        self.linear(&t.proj, &h, rows)
    }
}

/// Each `s`-sided window of the `side`×`side` grid of `e`-wide patch rows as one row of
/// `e·s²` values, as llama.cpp's llama4 graph reshapes them: windows column by column (the
/// window at column `j`, row `i` is row `j·side/s + i`); within a window its patch rows top to
/// bottom, each row's patches left to right.
fn pixel_shuffle(x: &[f32], side: usize, e: usize, s: usize) -> Vec<f32> {
    let m = side / s;
    let mut out = Vec::with_capacity(x.len());
    for j in 0..m {
        for i in 0..m {
            for dy in 0..s {
                let (y, x0) = (i * s + dy, j * s);
                out.extend_from_slice(&x[(y * side + x0) * e..][..s * e]);
            }
        }
    }
    out
}

/// Llama 4's 2-D RoPE over a `side`×`side` patch grid and the class token after it: per head
/// of `d`, dimensions `0..d/2` rotated (pairs side by side, at `θ^(-4i/d)`) by the patch's
/// column + 1, `d/2..d` by its row + 1; the class token at position 0 both ways (unturned).
struct Rope2d {
    d: usize,
    side: usize,
    rope: Rope,
    /// cos/sin pairs of positions `0..=side`.
    tables: Vec<Vec<(f32, f32)>>,
}

impl Rope2d {
    fn new(d: usize, side: usize) -> Rope2d {
        let rope = Rope {
            style: RopeStyle::Normal,
            n_dims: d / 2,
            freq_base: ROPE_THETA,
            freq_scale: 1.0,
            freq_factors: None,
            attn_factor: 1.0,
            yarn: None,
        };
        Rope2d {
            d,
            side,
            tables: (0..=side).map(|p| rope.cos_sin(p)).collect(),
            rope,
        }
    }

    /// Rotates `x` (one row per position: the patches row by row, then the class token; heads
    /// side by side).
    fn apply(&self, x: &mut [f32]) {
        let d = self.d;
        let n = self.side * self.side + 1;
        let width = x.len() / n;
        for (i, row) in x.chunks_exact_mut(width).enumerate() {
            let (pos_w, pos_h) = match i < n - 1 {
                true => (i % self.side + 1, i / self.side + 1),
                false => (0, 0),
            };
            for head in row.chunks_exact_mut(d) {
                let (first, second) = head.split_at_mut(d / 2);
                self.rope.apply_with(first, d / 2, &self.tables[pos_w]);
                self.rope.apply_with(second, d / 2, &self.tables[pos_h]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::{Array, GgufWriter, Value};
    use crate::quant::GgmlType;
    use crate::vision::{preprocess_tiles, RgbImage};

    /// A tiny `llama4` projector (4×4 tiles of 2×2 patches, width 4, one head, shuffle by 2 into
    /// one token a tile, adapter 16 → 8 → 8, into width 6) written by the crate's own writer
    /// after `edit` has had its say.
    fn tiny(edit: impl FnOnce(&mut GgufWriter)) -> Result<Projector, VisionError> {
        let mut w = GgufWriter::new();
        w.add_kv("general.architecture", "clip");
        w.add_kv("clip.has_vision_encoder", true);
        w.add_kv("clip.projector_type", "llama4");
        w.add_kv("clip.use_gelu", true);
        for (k, v) in [
            ("image_size", 4u32),
            ("patch_size", 2),
            ("embedding_length", 4),
            ("feed_forward_length", 8),
            ("attention.head_count", 1),
            ("block_count", 2),
            ("projector.scale_factor", 2),
        ] {
            w.add_kv(format!("clip.vision.{k}"), v);
        }
        w.add_kv("clip.vision.attention.layer_norm_epsilon", 1e-5f32);
        for k in ["image_mean", "image_std"] {
            w.add_kv(
                format!("clip.vision.{k}"),
                Value::Array(Array::F32(vec![0.5; 3])),
            );
        }
        let mut seed = 1u32;
        let mut t = |w: &mut GgufWriter, name: &str, dims: &[u64]| {
            let n: u64 = dims.iter().product();
            let data: Vec<u8> = (0..n)
                .flat_map(|_| {
                    seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12345);
                    (((seed >> 16) % 200) as f32 / 100.0 - 1.0).to_le_bytes()
                })
                .collect();
            w.add_tensor(name, dims, GgmlType::F32, data).unwrap();
        };
        t(&mut w, "v.patch_embd.weight", &[12, 4]);
        t(&mut w, "v.class_embd", &[4]);
        t(&mut w, "v.position_embd.weight", &[4, 5]);
        for ln in ["v.pre_ln", "v.post_ln"] {
            t(&mut w, &format!("{ln}.weight"), &[4]);
            t(&mut w, &format!("{ln}.bias"), &[4]);
        }
        for il in 0..2 {
            for p in ["attn_q", "attn_k", "attn_v", "attn_out"] {
                t(&mut w, &format!("v.blk.{il}.{p}.weight"), &[4, 4]);
                t(&mut w, &format!("v.blk.{il}.{p}.bias"), &[4]);
            }
            for p in ["ln1", "ln2"] {
                t(&mut w, &format!("v.blk.{il}.{p}.weight"), &[4]);
                t(&mut w, &format!("v.blk.{il}.{p}.bias"), &[4]);
            }
            t(&mut w, &format!("v.blk.{il}.ffn_up.weight"), &[4, 8]);
            t(&mut w, &format!("v.blk.{il}.ffn_down.weight"), &[8, 4]);
        }
        t(&mut w, "mm.model.mlp.1.weight", &[16, 8]);
        t(&mut w, "mm.model.mlp.2.weight", &[8, 8]);
        t(&mut w, "mm.model.fc.weight", &[8, 6]);
        edit(&mut w);
        let bytes = w.to_bytes().unwrap();
        Projector::load(Arc::new(GgufFile::from_bytes(bytes).unwrap()))
    }

    #[test]
    fn a_tiny_projector_encodes_tiles_and_overview() {
        let p = tiny(|_| {}).unwrap();
        assert_eq!((p.n_image_tokens(), p.n_embd_out()), (1, 6));
        // 5×3: the 2×1 grid (8×4) keeps every pixel; two tiles and the overview.
        let img = RgbImage::filled(5, 3, [200, 10, 90]);
        let tiles = preprocess_tiles(&img, p.ty, &p.hparams);
        assert_eq!((tiles.grid, tiles.images.len()), (Some((2, 1)), 3));
        assert_eq!(p.n_tokens_for(5, 3), 3);
        for tile in &tiles.images {
            let out = p.encode(tile);
            assert_eq!(out.len(), 6);
            assert!(out.iter().all(|v| v.is_finite()));
        }
    }

    #[test]
    fn refusals_name_what_is_wrong() {
        let err = |edit: fn(&mut GgufWriter)| tiny(edit).err().unwrap().to_string();
        // llama.cpp's graph reads no bias on the projection: refused rather than ignored.
        let e = err(|w| {
            w.add_tensor("mm.model.fc.bias", &[6], GgmlType::F32, vec![0; 24])
                .unwrap();
        });
        assert!(e.contains("'mm.model.fc.bias' is not read"), "{e}");
        // Without the shuffle factor the adapter's input is 4, not 16, wide.
        let e = err(|w| {
            w.add_kv("clip.vision.projector.scale_factor", 1u32);
        });
        assert!(e.contains("'mm.model.mlp.1.weight' has shape"), "{e}");
        // Heads of 2 cannot be split into the RoPE's two halves of pairs.
        let e = err(|w| {
            w.add_kv("clip.vision.attention.head_count", 2u32);
        });
        assert!(e.contains("divisible by 4"), "{e}");
    }

    #[test]
    fn the_grid_keeps_the_most_pixels_then_wastes_the_least() {
        // Fits one tile: the overview alone.
        assert_eq!(refined_size(112, 90, 112), None);
        // 130×50: 2×1 keeps all 6500 pixels (scaled to 224×86) and wastes the least.
        assert_eq!(refined_size(130, 50, 112), Some((224, 112)));
        // 250×180: 3×2 (311×224) keeps all; 2×2 would shrink it to 224×161.
        assert_eq!(refined_size(250, 180, 112), Some((336, 224)));
        // A huge image keeps most in 3×3.
        assert_eq!(refined_size(4000, 4000, 112), Some((336, 336)));
        assert_eq!(refined_size(50, 400, 112), Some((112, 336)));
    }

    #[test]
    fn pixel_shuffle_goes_column_by_column() {
        // A 4×4 grid of 1-wide rows holding their index, windows of 2.
        let x: Vec<f32> = (0..16).map(|v| v as f32).collect();
        let out = pixel_shuffle(&x, 4, 1, 2);
        let want = [
            0., 1., 4., 5., 8., 9., 12., 13., 2., 3., 6., 7., 10., 11., 14., 15.,
        ];
        assert_eq!(out, want);
    }

    #[test]
    fn rope_turns_halves_by_column_then_row() {
        // d = 4: dims 0,1 by the column + 1, dims 2,3 by the row + 1; 2×2 grid + class token.
        let r = Rope2d::new(4, 2);
        let mut x = [1.0, 0.0, 1.0, 0.0].repeat(5);
        r.apply(&mut x);
        let close = |a: f32, b: f32| (a - b).abs() < 1e-6;
        // Patch 1 (row 0, column 1): column position 2, row position 1.
        assert!(close(x[4], 2f32.cos()) && close(x[5], 2f32.sin()));
        assert!(close(x[6], 1f32.cos()) && close(x[7], 1f32.sin()));
        // The class token is not turned.
        assert_eq!(&x[16..], &[1.0, 0.0, 1.0, 0.0]);
    }
}
