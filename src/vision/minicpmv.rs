//! MiniCPM-V's projector (`resampler`), as llama.cpp's minicpmv graph builds it, and the
//! LLaVA-UHD slicing mtmd prepares its images with. The tower is SigLIP (patch bias, no class
//! token, post-norm, GELU) over an image of any size in whole patches; its learned positions
//! are a 70×70 table each patch reads by bucket (row `⌊70·i/rows⌋`, column `⌊70·j/cols⌋`).
//! The resampler: the tower's rows through `resampler.kv` and LayerNorm `ln_kv` (the values);
//! the keys are those plus a 2-D sine-cosine position (per row `[sin x·ω, cos x·ω, sin y·ω,
//! cos y·ω]`, `ω_i = 10000^(-i/(d/4))`); the learned queries (`resampler.query`, LayerNorm
//! `ln_q`) attend over them in heads of 128 (projections and output with biases); LayerNorm
//! `ln_post`, then `resampler.proj`: the same count of rows (`clip.minicpmv_query_num`) for any
//! image or slice.
//!
//! Slicing ([`slice_plan`]): an image no larger than the input size is one input, stretched
//! (bicubic) to the input square. A larger one becomes an overview, stretched to about the
//! input's area with its aspect kept, in whole patches, and slices: the grid of 2 to 9 cells
//! whose aspect is nearest the image's (among the factorings of the cell count nearest the
//! image's area in inputs), the image fitted (bicubic, black padding, centred) into the grid's
//! refined size and cut. mtmd places the overview first (`layout.rs`).

use std::sync::Arc;

use super::attention::cross_attention;
use super::clip::{Head, Linear, Lookup, Norm, Projector, VisionHparams};
use super::layers::layer_norm_rows;
use super::preprocess::PlanarImage;
use super::VisionError;
use crate::gguf::GgufFile;

/// The side of the learned position table positions are bucketed into.
const POS_GRID: usize = 70;
/// The resampler's head width (llama.cpp's graph fixes it).
const HEAD_DIM: usize = 128;
/// The most slices an image is cut into.
const MAX_SLICES: usize = 9;
/// `clip.minicpmv_version` values llama.cpp's mtmd builds: 2 is MiniCPM-V 2.5's slice layout,
/// the others MiniCPM-V 2.6's.
const VERSIONS: [i64; 6] = [2, 3, 4, 5, 6, 100045];

/// The resampler: what the generic tower fields do not hold.
pub(super) struct Minicpmv {
    /// `clip.minicpmv_version` (2 when the file has none).
    pub version: i64,
    /// The learned queries, `n_query × d`.
    query: Vec<f32>,
    n_query: usize,
    kv: Linear,
    ln_q: Norm,
    ln_kv: Norm,
    ln_post: Norm,
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    proj: Linear,
}

impl Minicpmv {
    pub(super) fn n_embd_out(&self) -> usize {
        self.proj.w.info.dims[1] as usize
    }

    pub(super) fn n_query(&self) -> usize {
        self.n_query
    }
}

/// Loads a `resampler` projector from `file` (whose hyperparameters are `hparams`).
pub(super) fn load(file: Arc<GgufFile>, hparams: VisionHparams) -> Result<Projector, VisionError> {
    let version_key = "clip.minicpmv_version";
    let version = match file.get(version_key) {
        None => 2,
        Some(v) => match v.as_i64() {
            Some(0) => 2,
            Some(n) if VERSIONS.contains(&n) => n,
            _ => {
                return Err(VisionError::BadValue(
                    version_key.into(),
                    format!("{v:?} (llama.cpp builds versions 2 to 6 and 100045)"),
                ))
            }
        },
    };
    let n_query = match file.get_u32("clip.minicpmv_query_num") {
        Some(n) if n > 0 => n as usize,
        _ if version == 2 => 96,
        _ => 64,
    };
    let l = Lookup::new(&file);
    let h = &hparams;
    let (e, ff, p) = (h.n_embd, h.n_ff, h.patch_size);
    let d = match file.tensor("resampler.proj.weight") {
        Some(t) if t.dims.len() == 2 => t.dims[0] as usize,
        _ => 0, // the shape check below names what is wrong
    };
    if d > 0 && !d.is_multiple_of(HEAD_DIM) {
        return Err(VisionError::BadValue(
            "resampler.proj.weight".into(),
            format!("width {d}: the resampler's heads are {HEAD_DIM} wide"),
        ));
    }
    let patch_embd = l.weight("v.patch_embd.weight", &[p, p, 3, e])?;
    let patch_bias = l.opt_vector("v.patch_embd.bias", e)?;
    let pos_embd = l
        .tensor("v.position_embd.weight", &[e, POS_GRID * POS_GRID])?
        .to_f32(&file);
    let pre_ln = l.opt_norm("v.pre_ln", e)?;
    let post_ln = l.opt_norm("v.post_ln", e)?;
    let blocks = (0..h.n_layer)
        .map(|il| l.block(il, e, ff))
        .collect::<Result<Vec<_>, _>>()?;
    let query = l.tensor("resampler.query", &[d, n_query])?.to_f32(&file);
    // The keys' positions as the converter tabulated them for a 70×70 grid: llama.cpp requires
    // them and computes the positions of each input's own grid instead.
    l.require("resampler.pos_embed_k")?;
    let with_bias = |prefix: &str| -> Result<Linear, VisionError> {
        let w = l.weight(&format!("{prefix}.weight"), &[d, d])?;
        let b = Some(l.vector(&format!("{prefix}.bias"), d)?);
        Ok(Linear { w, b })
    };
    let resampler = Minicpmv {
        version,
        query,
        n_query,
        kv: l.linear("resampler.kv", e, Some(d))?,
        ln_q: l.norm("resampler.ln_q", d)?,
        ln_kv: l.norm("resampler.ln_kv", d)?,
        ln_post: l.norm("resampler.ln_post", d)?,
        q: with_bias("resampler.attn.q")?,
        k: with_bias("resampler.attn.k")?,
        v: with_bias("resampler.attn.v")?,
        o: with_bias("resampler.attn.out")?,
        proj: l.linear("resampler.proj", d, Some(d))?,
    };
    l.check_all_used()?;
    Ok(Projector {
        ty: super::ProjectorType::Minicpmv,
        hparams,
        file: file.clone(),
        patch_embd,
        patch_bias,
        class_embd: None,
        pos_embd,
        pre_ln,
        post_ln,
        blocks,
        head: Head::Minicpmv(Box::new(resampler)),
        device: None,
    })
}

/// How mtmd prepares an image for MiniCPM-V: the overview's size, and for an image larger than
/// the input size the size the image is fitted into and the grid (columns, rows) of slices it
/// is cut into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct SlicePlan {
    pub overview: (usize, usize),
    pub refined: Option<((usize, usize), (usize, usize))>,
}

/// The plan for an image of `width`×`height` ([`SlicePlan`]), in f32 and whole pixels as
/// mtmd's LLaVA-UHD preprocessor computes it.
pub(super) fn slice_plan(width: usize, height: usize, hp: &VisionHparams) -> SlicePlan {
    let (s, p) = (hp.image_size, hp.patch_size);
    if width <= s && height <= s {
        return SlicePlan {
            overview: (s, s),
            refined: None,
        };
    }
    let overview = best_resize((width, height), s, p, false);
    let log_ratio = (width as f32 / height as f32).ln();
    let ratio = (width * height) as f32 / (s * s) as f32;
    let multiple = (ratio.ceil() as usize).min(MAX_SLICES);
    let grid = best_grid(multiple, log_ratio);
    let refined = refine_size((width, height), grid, s, p);
    SlicePlan {
        overview,
        refined: Some((refined, grid)),
    }
}

/// `len` rounded to whole `step`s, at least one.
fn ensure_divide(len: usize, step: usize) -> usize {
    (((len as f32 / step as f32).round() * step as f32) as usize).max(step)
}

/// A size of about `s`×`s` pixels with the aspect of `(w, h)` (only shrinking unless
/// `upscale`), in whole `p`-pixel patches.
fn best_resize((w, h): (usize, usize), s: usize, p: usize, upscale: bool) -> (usize, usize) {
    let (mut w, mut h) = (w, h);
    if w * h > s * s || upscale {
        let r = w as f32 / h as f32;
        h = (s as f32 / r.sqrt()) as usize;
        w = (h as f32 * r) as usize;
    }
    (ensure_divide(w, p), ensure_divide(h, p))
}

/// Of the grids of `multiple - 1`, `multiple` and `multiple + 1` cells (2 to [`MAX_SLICES`]),
/// columns from 1 up within each count, the first whose aspect's log is nearest `log_ratio`.
fn best_grid(multiple: usize, log_ratio: f32) -> (usize, usize) {
    let counts = [multiple.wrapping_sub(1), multiple, multiple + 1];
    let mut best = (1, 1);
    let mut least = f32::INFINITY;
    for n in counts.into_iter().filter(|&n| n != 1 && n <= MAX_SLICES) {
        for cols in (1..=n).filter(|m| n.is_multiple_of(*m)) {
            let rows = n / cols;
            let err = (log_ratio as f64 - (cols as f64 / rows as f64).ln()).abs() as f32;
            if err < least {
                (best, least) = ((cols, rows), err);
            }
        }
    }
    best
}

/// The size the image is fitted into before it is cut into `grid`: each cell the image's
/// share, resized (up or down) to about the input's area in whole patches.
fn refine_size(
    (w, h): (usize, usize),
    (cols, rows): (usize, usize),
    s: usize,
    p: usize,
) -> (usize, usize) {
    let cell = (ensure_divide(w, cols) / cols, ensure_divide(h, rows) / rows);
    let (cw, ch) = best_resize(cell, s, p, true);
    (cw * cols, ch * rows)
}

impl Projector {
    /// The embeddings of `img` (an overview or a slice, whole patches of any count): the
    /// resampler's `n_query` rows.
    pub(super) fn encode_minicpmv(&self, t: &Minicpmv, img: &PlanarImage) -> Vec<f32> {
        let hp = &self.hparams;
        let (e, p) = (hp.n_embd, hp.patch_size);
        let (cols, rows) = (img.width / p, img.height / p);
        let n = cols * rows;
        let mut x = vec![0f32; n * e];
        self.embed_patches(img, &mut x);
        let bucket = |i: usize, of: usize| (POS_GRID as f64 * i as f64 / of as f64) as usize;
        for (i, row) in x.chunks_exact_mut(e).enumerate() {
            let at = bucket(i / cols, rows) * POS_GRID + bucket(i % cols, cols);
            for (v, q) in row.iter_mut().zip(&self.pos_embd[at * e..][..e]) {
                *v += q;
            }
        }
        if let Some(ln) = &self.pre_ln {
            layer_norm_rows(&mut x, e, &ln.w, &ln.b, hp.eps);
        }
        self.plain_blocks(&self.blocks, &mut x, n);
        if let Some(ln) = &self.post_ln {
            layer_norm_rows(&mut x, e, &ln.w, &ln.b, hp.eps);
        }
        self.resample(t, &x, cols, rows)
    }

    /// The resampler over the tower's `cols`×`rows` grid of rows `x`.
    fn resample(&self, t: &Minicpmv, x: &[f32], cols: usize, rows: usize) -> Vec<f32> {
        let eps = self.hparams.eps;
        let n = cols * rows;
        let d = t.n_embd_out();
        let mut values = self.linear(&t.kv, x, n);
        layer_norm_rows(&mut values, d, &t.ln_kv.w, &t.ln_kv.b, eps);
        let mut keys = values.clone();
        let omega = key_frequencies(d);
        for (i, row) in keys.chunks_exact_mut(d).enumerate() {
            add_sincos_2d(row, &omega, i % cols, i / cols);
        }
        let mut query = t.query.clone();
        layer_norm_rows(&mut query, d, &t.ln_q.w, &t.ln_q.b, eps);
        let q = self.linear(&t.q, &query, t.n_query);
        let k = self.linear(&t.k, &keys, n);
        let v = self.linear(&t.v, &values, n);
        let scale = 1.0 / (HEAD_DIM as f32).sqrt();
        let att = cross_attention(&q, &k, &v, n, d / HEAD_DIM, scale);
        let mut out = self.linear(&t.o, &att, t.n_query);
        layer_norm_rows(&mut out, d, &t.ln_post.w, &t.ln_post.b, eps);
        self.linear(&t.proj, &out, t.n_query)
    }
}

/// The `d/4` frequencies of the resampler's key positions: `ω_i = 1 / 10000^(i / (d/4))`, in
/// f32 as llama.cpp computes them.
fn key_frequencies(d: usize) -> Vec<f32> {
    let quarter = d / 4;
    (0..quarter)
        .map(|i| 1.0 / 10000f32.powf(i as f32 / quarter as f32))
        .collect()
}

/// Adds to `row` (`4 · omega.len()` wide) the key position of the patch at column `x`, row `y`:
/// `[sin xω, cos xω, sin yω, cos yω]`, each angle the f32 product as ggml takes it.
fn add_sincos_2d(row: &mut [f32], omega: &[f32], x: usize, y: usize) {
    let (sx, rest) = row.split_at_mut(omega.len());
    let (cx, rest) = rest.split_at_mut(omega.len());
    let (sy, cy) = rest.split_at_mut(omega.len());
    for (i, w) in omega.iter().enumerate() {
        let (tx, ty) = (w * x as f32, w * y as f32);
        sx[i] += tx.sin();
        cx[i] += tx.cos();
        sy[i] += ty.sin();
        cy[i] += ty.cos();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hp(image_size: usize, patch_size: usize) -> VisionHparams {
        VisionHparams::tiny(image_size, patch_size)
    }

    #[test]
    fn a_small_image_is_the_overview_alone_at_the_input_size() {
        let plan = slice_plan(300, 448, &hp(448, 14));
        assert_eq!(
            plan,
            SlicePlan {
                overview: (448, 448),
                refined: None
            }
        );
    }

    /// MiniCPM-V 2.6's sizes (448-pixel input, 14-pixel patches) worked by hand from mtmd's
    /// formulas.
    #[test]
    fn larger_images_are_sliced_as_mtmd_does() {
        let h = hp(448, 14);
        // 1000×600: 2.99 inputs → 3 cells ±1; log(5/3) = 0.51 is nearest 2×1 (0.69).
        // Overview: r = 1.667, 448/√r = 347 → 578 wide: 574×350 in patches.
        // Cells: 500×600 each → r = 0.833, 490 tall, 408 wide → 406×490; ×2 columns.
        let plan = slice_plan(1000, 600, &h);
        assert_eq!(plan.overview, (574, 350));
        assert_eq!(plan.refined, Some(((812, 490), (2, 1))));
        // 250×180 at a 112 input with 14-pixel patches (the synthetic pair): 3.59 inputs → 4
        // cells, log(1.39) = 0.33 nearest 2×2.
        let plan = slice_plan(250, 180, &hp(112, 14));
        assert_eq!(plan.refined.map(|r| r.1), Some((2, 2)));
    }

    /// The image fuzz target's 2×58 GIF (28-pixel inputs, 14-pixel patches): its overview keeps
    /// its small area (one patch wide, the half patch rounded up), the slices are a 1×2 column.
    #[test]
    fn a_thin_image_gets_whole_patches() {
        let plan = slice_plan(2, 58, &hp(28, 14));
        assert_eq!(plan.overview, (14, 56));
        assert_eq!(plan.refined, Some(((14, 224), (1, 2))));
    }

    #[test]
    fn grids_skip_one_cell_and_keep_the_first_of_a_tie() {
        // A wide strip's area is under one input: counts 0 and 2, 2 → (1, 2) or (2, 1).
        assert_eq!(best_grid(1, 3.0), (2, 1));
        assert_eq!(best_grid(1, -3.0), (1, 2));
        // 9 at most: 8 and 9 cells only.
        assert_eq!(best_grid(9, 0.0), (3, 3));
    }

    #[test]
    fn key_positions_are_sines_then_cosines_of_each_axis() {
        let mut s = vec![0f32; 8];
        add_sincos_2d(&mut s, &key_frequencies(8), 3, 5);
        // ω = 1, 0.01 for d/4 = 2.
        let want = [
            3f32.sin(),
            0.03f32.sin(),
            3f32.cos(),
            0.03f32.cos(),
            5f32.sin(),
            0.05f32.sin(),
            5f32.cos(),
            0.05f32.cos(),
        ];
        for (g, w) in s.iter().zip(want) {
            assert!((g - w).abs() < 1e-6, "{s:?}");
        }
    }
}
