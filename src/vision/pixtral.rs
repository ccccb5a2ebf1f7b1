//! Pixtral's projector (`pixtral`: Pixtral-12B, and Mistral Small 3.1 with its patch merger),
//! as llama.cpp's pixtral graph builds it. An image keeps its own size: scaled (bicubic, aspect
//! kept, black padding) to whole patches of `patch_size · n_merge` within a budget of 8 to 1024
//! image tokens ([`target_size`], clip's `calc_size_preserved_ratio`). The tower: the patch
//! convolution, an RMS pre-norm, blocks of RMS pre-norm attention with a 2-D RoPE (base 10000,
//! as llama.cpp fixes it; the first half of each head rotated by the patch's row, the second by
//! its column, at the interleaved frequencies) and a gated FFN, no learned positions. With
//! `mm.patch_merger` (`n_merge` > 1): an RMS norm by `mm.input_norm`, each `n_merge`-sided
//! window of patches unfolded into one row (channel-major, then window row, then column, as
//! ggml's im2col lays it out) and projected. Then `mm.1`, GELU, `mm.2`, and after each row of
//! image tokens but the last the `[IMG_BREAK]` embedding (`v.token_embd.img_break`), as the
//! graph concatenates them; mtmd puts `[IMG_END]` after the image (`layout.rs`).

use std::sync::Arc;

use super::clip::{FfnActivation, Head, Linear, Lookup, Projector, VisionHparams};
use super::layers::{add_rows, gelu_in_place, gelu_quick_in_place, silu_in_place};
use super::preprocess::{fit_to_steps, PlanarImage};
use super::VisionError;
use crate::gguf::GgufFile;
use crate::ops::activation::{geglu, swiglu};
use crate::ops::norm::rms_norm_rows;
use crate::ops::rope::{Rope, RopeStyle};

/// The RoPE base llama.cpp's pixtral graph uses, whatever the file says.
const ROPE_THETA: f32 = 10000.0;

/// Image tokens an image may become, before `[IMG_BREAK]`s (llama.cpp's limits for pixtral).
const MIN_TOKENS: usize = 8;
const MAX_TOKENS: usize = 1024;

/// An RMS norm's scale (and shift, if the file has one).
pub(super) struct RmsNorm {
    pub w: Vec<f32>,
    pub b: Option<Vec<f32>>,
}

impl RmsNorm {
    pub(super) fn apply(&self, x: &mut [f32], eps: f32) {
        rms_norm_rows(x, &self.w, self.w.len(), eps);
        if let Some(b) = &self.b {
            add_rows(x, b);
        }
    }
}

/// A block's attention: the output rows of queries, keys and values.
pub(super) type Attend<'a> = &'a dyn Fn(&[f32], &[f32], &[f32]) -> Vec<f32>;

/// One block of an RMS-norm tower (Pixtral's, Qwen2.5-VL's).
pub(super) struct Block {
    pub ln1: RmsNorm,
    pub q: Linear,
    pub k: Linear,
    pub v: Linear,
    pub o: Linear,
    pub ln2: RmsNorm,
    /// `None`: an ungated FFN, `down(act(up(x)))`.
    pub gate: Option<Linear>,
    pub up: Linear,
    pub down: Linear,
}

/// Mistral Small 3.1's patch merger.
struct Merger {
    norm: Vec<f32>,
    proj: Linear,
}

/// Pixtral's tower and head (the patch convolution is the projector's `patch_embd`).
pub(super) struct Pixtral {
    pre_ln: Option<RmsNorm>,
    post_ln: Option<RmsNorm>,
    blocks: Vec<Block>,
    merger: Option<Merger>,
    mm1: Linear,
    mm2: Linear,
    img_break: Vec<f32>,
}

impl Pixtral {
    pub(super) fn n_embd_out(&self) -> usize {
        self.mm2.w.info.dims[1] as usize
    }

    /// Rows an image of `width`×`height` pixels becomes: its token grid and a break per row
    /// but the last.
    pub(super) fn n_tokens_for(&self, width: usize, height: usize, hp: &VisionHparams) -> usize {
        let (w, h) = target_size(width, height, hp);
        let step = hp.patch_size * hp.n_merge;
        let (cols, rows) = (w / step, h / step);
        cols * rows + rows - 1
    }
}

/// The size clip resizes an image of `width`×`height` to for Pixtral: whole steps of
/// `patch_size · n_merge` within `MIN_TOKENS` to `MAX_TOKENS` tokens
/// ([`super::preprocess::fit_to_steps`]).
pub(super) fn target_size(width: usize, height: usize, hp: &VisionHparams) -> (usize, usize) {
    let align = hp.patch_size * hp.n_merge;
    fit_to_steps(width, height, align, MIN_TOKENS, MAX_TOKENS)
}

/// Loads a `pixtral` projector from `file` (whose hyperparameters are `hparams`).
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
    let patch_embd = l.weight("v.patch_embd.weight", &[p, p, 3, e])?;
    let patch_bias = l.opt_vector("v.patch_embd.bias", e)?;
    let pre_ln = opt_rms(&l, "v.pre_ln", e)?;
    let post_ln = opt_rms(&l, "v.post_ln", e)?;
    let blocks = (0..h.n_layer)
        .map(|il| block(&l, &file, il, e, ff, h.ffn_act, false))
        .collect::<Result<Vec<_>, _>>()?;
    let merger_name = "mm.patch_merger.weight";
    let merger = match (file.tensor(merger_name).is_some(), h.n_merge) {
        (false, 1) => None,
        (false, _) => return Err(VisionError::MissingTensor(merger_name.into())),
        (true, m) => Some(Merger {
            norm: l.vector("mm.input_norm.weight", e)?,
            proj: l.linear("mm.patch_merger", e * m * m, Some(e))?,
        }),
    };
    let mm1 = l.linear("mm.1", e, None)?;
    let mm2 = l.linear("mm.2", mm1.w.info.dims[1] as usize, None)?;
    let n_text = mm2.w.info.dims[1] as usize;
    let img_break = l.vector("v.token_embd.img_break", n_text)?;
    l.check_all_used()?;
    let tower = Pixtral {
        pre_ln,
        post_ln,
        blocks,
        merger,
        mm1,
        mm2,
        img_break,
    };
    Ok(Projector {
        ty: super::ProjectorType::Pixtral,
        hparams,
        file: file.clone(),
        patch_embd,
        patch_bias,
        class_embd: None,
        pos_embd: Vec::new(),
        pre_ln: None,
        post_ln: None,
        blocks: Vec::new(),
        head: Head::Pixtral(Box::new(tower)),
        device: None,
    })
}

pub(super) fn opt_rms(l: &Lookup, prefix: &str, e: usize) -> Result<Option<RmsNorm>, VisionError> {
    let w = l.opt_vector(&format!("{prefix}.weight"), e)?;
    let b = l.opt_vector(&format!("{prefix}.bias"), e)?;
    match (w, b) {
        (Some(w), b) => Ok(Some(RmsNorm { w, b })),
        (None, None) => Ok(None),
        (None, Some(_)) => Err(VisionError::MissingTensor(format!("{prefix}.weight"))),
    }
}

pub(super) fn rms(l: &Lookup, prefix: &str, e: usize) -> Result<RmsNorm, VisionError> {
    Ok(RmsNorm {
        w: l.vector(&format!("{prefix}.weight"), e)?,
        b: l.opt_vector(&format!("{prefix}.bias"), e)?,
    })
}

/// Block `il` of an RMS-norm tower of width `e` and FFN width `ff`. With `swappable` (as
/// llama.cpp treats Qwen2.5-VL's, not Pixtral's), an FFN whose down projection reads `e` values
/// has its up and down names swapped, as old conversions wrote them.
pub(super) fn block(
    l: &Lookup,
    file: &GgufFile,
    il: usize,
    e: usize,
    ff: usize,
    act: FfnActivation,
    swappable: bool,
) -> Result<Block, VisionError> {
    let p = |s: &str| format!("v.blk.{il}.{s}");
    let swapped = swappable
        && file
            .tensor(&p("ffn_down.weight"))
            .is_some_and(|t| t.dims.first() == Some(&(e as u64)));
    let (up, down) = match swapped {
        false => ("ffn_up", "ffn_down"),
        true => ("ffn_down", "ffn_up"),
    };
    let gate = match file.tensor(&p("ffn_gate.weight")) {
        None => None,
        Some(_) => Some(l.linear(&p("ffn_gate"), e, Some(ff))?),
    };
    if gate.is_some() && act == FfnActivation::GeluQuick {
        return Err(VisionError::NotImplemented(
            "a gated FFN with quick GELU (neither clip.use_silu nor clip.use_gelu)".into(),
        ));
    }
    Ok(Block {
        ln1: rms(l, &p("ln1"), e)?,
        q: l.linear(&p("attn_q"), e, Some(e))?,
        k: l.linear(&p("attn_k"), e, Some(e))?,
        v: l.linear(&p("attn_v"), e, Some(e))?,
        o: l.linear(&p("attn_out"), e, Some(e))?,
        ln2: rms(l, &p("ln2"), e)?,
        gate,
        up: l.linear(&p(up), e, Some(ff))?,
        down: l.linear(&p(down), ff, Some(e))?,
    })
}

impl Projector {
    /// The embeddings of `img` (from [`super::preprocess`]: a size of whole patches): one row
    /// per image token, row by row, with the `[IMG_BREAK]` row after each row but the last.
    pub(super) fn encode_pixtral(&self, t: &Pixtral, img: &PlanarImage) -> Vec<f32> {
        let hp = &self.hparams;
        let (p, e) = (hp.patch_size, hp.n_embd);
        let (cols, rows) = (img.width / p, img.height / p);
        assert!(
            cols * p == img.width && rows * p == img.height && cols * rows > 0,
            "encode: a {}×{} image is not whole {p}-pixel patches",
            img.width,
            img.height
        );
        let n = cols * rows;
        let mut x = vec![0f32; n * e];
        self.embed_patches(img, &mut x);
        if let Some(ln) = &t.pre_ln {
            ln.apply(&mut x, hp.eps);
        }
        let rope = Rope2d::new(e / hp.n_head, cols, rows);
        let scale = 1.0 / ((e / hp.n_head) as f32).sqrt();
        for b in &t.blocks {
            self.rms_block(b, &mut x, n, &|t| rope.apply(t), &|q, k, v| {
                self.attend(q, k, v, n, hp.n_head, scale)
            });
        }
        if let Some(ln) = &t.post_ln {
            ln.apply(&mut x, hp.eps);
        }
        let (mut x, cols, rows) = match &t.merger {
            None => (x, cols, rows),
            Some(m) => {
                rms_norm_rows(&mut x, &m.norm, e, hp.eps);
                let s = hp.n_merge;
                let unfolded = unfold(&x, cols, rows, e, s);
                let (c, r) = (cols / s, rows / s);
                (self.linear(&m.proj, &unfolded, c * r), c, r)
            }
        };
        let n = cols * rows;
        x = self.linear(&t.mm1, &x, n);
        gelu_in_place(&mut x);
        let out = self.linear(&t.mm2, &x, n);
        with_breaks(&out, &t.img_break, cols, rows)
    }

    /// One block of an RMS-norm tower on `x` (`n` rows) in place: the queries and keys turned
    /// by `rotate`, the attention `attend(q, k, v)`, a gated FFN (or an ungated one).
    pub(super) fn rms_block(
        &self,
        b: &Block,
        x: &mut [f32],
        n: usize,
        rotate: &dyn Fn(&mut [f32]),
        attend: Attend,
    ) {
        let hp = &self.hparams;
        let mut cur = x.to_vec();
        b.ln1.apply(&mut cur, hp.eps);
        let mut q = self.linear(&b.q, &cur, n);
        let mut k = self.linear(&b.k, &cur, n);
        let v = self.linear(&b.v, &cur, n);
        rotate(&mut q);
        rotate(&mut k);
        let att = attend(&q, &k, &v);
        let o = self.linear(&b.o, &att, n);
        for (xv, ov) in x.iter_mut().zip(&o) {
            *xv += ov;
        }
        cur.copy_from_slice(x);
        b.ln2.apply(&mut cur, hp.eps);
        let mut up = self.linear(&b.up, &cur, n);
        let act = match &b.gate {
            Some(g) => {
                let mut gate = self.linear(g, &cur, n);
                match hp.ffn_act {
                    FfnActivation::Silu => swiglu(&mut gate, &up),
                    // (quick GELU with a gate is refused at load)
                    FfnActivation::Gelu | FfnActivation::GeluQuick => geglu(&mut gate, &up),
                }
                gate
            }
            None => {
                match hp.ffn_act {
                    FfnActivation::Silu => silu_in_place(&mut up),
                    FfnActivation::Gelu => gelu_in_place(&mut up),
                    FfnActivation::GeluQuick => gelu_quick_in_place(&mut up),
                }
                up
            }
        };
        let down = self.linear(&b.down, &act, n);
        for (xv, dv) in x.iter_mut().zip(&down) {
            *xv += dv;
        }
    }
}

/// The 2-D RoPE of a `cols`×`rows` patch grid: per head, dimensions `0..d/2` rotated (pairs
/// side by side) by the patch's row at frequencies `θ^(-4i/d)`, `d/2..d` by its column at
/// `θ^(-(4i+2)/d)` (ggml rotates the second half with the frequency scale `θ^(-2/d)`).
struct Rope2d {
    d: usize,
    cols: usize,
    rope_h: Rope,
    rope_w: Rope,
    by_row: Vec<Vec<(f32, f32)>>,
    by_col: Vec<Vec<(f32, f32)>>,
}

impl Rope2d {
    fn new(d: usize, cols: usize, rows: usize) -> Rope2d {
        let half = |freq_scale: f32| Rope {
            style: RopeStyle::Normal,
            n_dims: d / 2,
            freq_base: ROPE_THETA,
            freq_scale,
            freq_factors: None,
            attn_factor: 1.0,
            yarn: None,
        };
        let rope_h = half(1.0);
        let rope_w = half(ROPE_THETA.powf(-2.0 / d as f32));
        Rope2d {
            d,
            cols,
            by_row: (0..rows).map(|y| rope_h.cos_sin(y)).collect(),
            by_col: (0..cols).map(|x| rope_w.cos_sin(x)).collect(),
            rope_h,
            rope_w,
        }
    }

    /// Rotates `x` (one row per patch, row-major over the grid; heads side by side).
    fn apply(&self, x: &mut [f32]) {
        let d = self.d;
        let width = x.len() / (self.by_row.len() * self.cols);
        for (i, row) in x.chunks_exact_mut(width).enumerate() {
            let (y, c) = (i / self.cols, i % self.cols);
            self.rope_h.apply_with(row, d, &self.by_row[y]);
            for head in row.chunks_exact_mut(d) {
                self.rope_w
                    .apply_with(&mut head[d / 2..], d / 2, &self.by_col[c]);
            }
        }
    }
}

/// Each `s`-sided window of a `cols`×`rows` grid of `e`-wide rows as one row of `e·s²`
/// values, windows row-major: value `(c·s + ky)·s + kx` is channel `c` of the window's patch
/// at row `ky`, column `kx` (ggml's im2col of the grid seen as an `e`-channel image).
fn unfold(x: &[f32], cols: usize, rows: usize, e: usize, s: usize) -> Vec<f32> {
    let (oc, or) = (cols / s, rows / s);
    let mut out = vec![0f32; oc * or * e * s * s];
    for (t, dst) in out.chunks_exact_mut(e * s * s).enumerate() {
        let (oy, ox) = (t / oc, t % oc);
        for ky in 0..s {
            for kx in 0..s {
                let src = &x[((oy * s + ky) * cols + ox * s + kx) * e..][..e];
                for (c, &v) in src.iter().enumerate() {
                    dst[(c * s + ky) * s + kx] = v;
                }
            }
        }
    }
    out
}

/// `x` (`cols`×`rows` rows of width `brk.len()`) with `brk` after each row of the grid but the
/// last.
fn with_breaks(x: &[f32], brk: &[f32], cols: usize, rows: usize) -> Vec<f32> {
    let w = brk.len();
    let mut out = Vec::with_capacity((cols * rows + rows - 1) * w);
    for (r, row) in x.chunks_exact(cols * w).enumerate() {
        out.extend_from_slice(row);
        if r + 1 < rows {
            out.extend_from_slice(brk);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::{GgufWriter, Value};
    use crate::quant::GgmlType;

    fn hp(patch_size: usize, n_merge: usize) -> VisionHparams {
        VisionHparams {
            image_size: 1024,
            patch_size,
            n_embd: 8,
            n_ff: 16,
            n_head: 2,
            n_layer: 1,
            eps: 1e-5,
            image_mean: [0.5; 3],
            image_std: [0.5; 3],
            ffn_act: FfnActivation::Silu,
            feature_layers: Vec::new(),
            n_merge,
            longest_edge: None,
        }
    }

    #[test]
    fn sizes_round_to_whole_patches_within_the_budget() {
        let h = hp(16, 1);
        // Rounded to the nearest multiple of 16.
        assert_eq!(target_size(130, 50, &h), (128, 48));
        assert_eq!(target_size(90, 170, &h), (96, 176));
        // Never below one patch per side; 8 tokens at least: 16×16 is 1 token, so scaled by
        // sqrt(2048/100) ≈ 4.53 and rounded up: 46 → 48 per side.
        assert_eq!(target_size(10, 10, &h), (48, 48));
        // 1024 tokens at most: 2000×1000 has beta = sqrt(2e6 / 262144) ≈ 2.762, so
        // 1000/2.762 = 362.0 → 352 and 2000/2.762 = 724.1 → 720.
        assert_eq!(target_size(2000, 1000, &h), (720, 352));
        // With a 2×2 merger the step is 32.
        assert_eq!(target_size(130, 50, &hp(16, 2)), (128, 64));
    }

    #[test]
    fn every_size_is_whole_steps_within_the_budget() {
        let sides = [1, 2, 15, 16, 17, 31, 100, 333, 1000, 4000, 8191, 8192];
        for h in [hp(16, 1), hp(14, 1), hp(16, 2), hp(14, 2)] {
            let step = h.patch_size * h.n_merge;
            for &w in &sides {
                for &ht in &sides {
                    let (tw, th) = target_size(w, ht, &h);
                    assert!(tw >= step && th >= step, "{w}×{ht}");
                    assert!(tw % step == 0 && th % step == 0, "{w}×{ht}: {tw}×{th}");
                    let tokens = (tw / step) * (th / step);
                    assert!(
                        (MIN_TOKENS..=MAX_TOKENS).contains(&tokens),
                        "{w}×{ht}: {tokens}"
                    );
                }
            }
        }
    }

    #[test]
    fn breaks_follow_each_row_but_the_last() {
        let x: Vec<f32> = (0..6).map(|v| v as f32).collect();
        let out = with_breaks(&x, &[-1.0], 2, 3);
        assert_eq!(out, vec![0., 1., -1., 2., 3., -1., 4., 5.]);
    }

    #[test]
    fn unfold_is_channel_major_within_a_window() {
        // 4×2 grid of 2-wide rows (v, 100 + v); windows of 2.
        let x: Vec<f32> = (0..8).flat_map(|v| [v as f32, 100.0 + v as f32]).collect();
        let u = unfold(&x, 4, 2, 2, 2);
        assert_eq!(u.len(), 2 * 8);
        assert_eq!(&u[..8], &[0., 1., 4., 5., 100., 101., 104., 105.]);
        assert_eq!(&u[8..], &[2., 3., 6., 7., 102., 103., 106., 107.]);
    }

    /// A tiny `pixtral` projector (16-pixel patches, width 8, one block, into width 32; with
    /// `merge`, a 2×2 merger) written by the crate's writer after `edit` has had its say.
    fn tiny(merge: bool, edit: impl FnOnce(&mut GgufWriter)) -> Result<Projector, VisionError> {
        let mut w = GgufWriter::new();
        w.add_kv("general.architecture", "clip");
        w.add_kv("clip.has_vision_encoder", true);
        w.add_kv("clip.projector_type", "pixtral");
        w.add_kv("clip.use_silu", true);
        for (k, v) in [
            ("image_size", 1024u32),
            ("patch_size", 16),
            ("embedding_length", 8),
            ("feed_forward_length", 16),
            ("attention.head_count", 2),
            ("block_count", 1),
        ] {
            w.add_kv(format!("clip.vision.{k}"), v);
        }
        if merge {
            w.add_kv("clip.vision.spatial_merge_size", 2u32);
        }
        w.add_kv("clip.vision.attention.layer_norm_epsilon", 1e-5f32);
        for k in ["image_mean", "image_std"] {
            w.add_kv(
                format!("clip.vision.{k}"),
                Value::Array(crate::gguf::Array::F32(vec![0.5; 3])),
            );
        }
        let mut seed = 7u32;
        let mut t = |w: &mut GgufWriter, name: &str, dims: &[u64]| {
            let n: u64 = dims.iter().product();
            let data: Vec<u8> = (0..n)
                .flat_map(|_| {
                    seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12345);
                    (((seed >> 16) % 200) as f32 / 400.0 - 0.25).to_le_bytes()
                })
                .collect();
            w.add_tensor(name, dims, GgmlType::F32, data).unwrap();
        };
        t(&mut w, "v.patch_embd.weight", &[16, 16, 3, 8]);
        t(&mut w, "v.pre_ln.weight", &[8]);
        for p in ["attn_q", "attn_k", "attn_v", "attn_out"] {
            t(&mut w, &format!("v.blk.0.{p}.weight"), &[8, 8]);
        }
        t(&mut w, "v.blk.0.ln1.weight", &[8]);
        t(&mut w, "v.blk.0.ln2.weight", &[8]);
        t(&mut w, "v.blk.0.ffn_gate.weight", &[8, 16]);
        t(&mut w, "v.blk.0.ffn_up.weight", &[8, 16]);
        t(&mut w, "v.blk.0.ffn_down.weight", &[16, 8]);
        if merge {
            t(&mut w, "mm.input_norm.weight", &[8]);
            t(&mut w, "mm.patch_merger.weight", &[32, 8]);
        }
        t(&mut w, "mm.1.weight", &[8, 32]);
        t(&mut w, "mm.2.weight", &[32, 32]);
        t(&mut w, "v.token_embd.img_break", &[32]);
        edit(&mut w);
        let bytes = w.to_bytes().unwrap();
        Projector::load(Arc::new(GgufFile::from_bytes(bytes).unwrap()))
    }

    #[test]
    fn a_tiny_projector_encodes_rows_and_breaks() {
        for merge in [false, true] {
            let p = tiny(merge, |_| {}).unwrap();
            assert_eq!(
                (p.ty, p.n_embd_out()),
                (super::super::ProjectorType::Pixtral, 32)
            );
            // 100×70 → 96×64: 6×4 patches; merged, 96×64 is under 8 tokens of 32 pixels, so
            // it grows by sqrt(8192 / 7000): 128×96, 4×3 tokens.
            let img = crate::vision::RgbImage::filled(100, 70, [200, 10, 90]);
            let pre = crate::vision::preprocess(&img, p.ty, &p.hparams);
            let (cols, rows) = if merge { (4, 3) } else { (6, 4) };
            let step = if merge { 32 } else { 16 };
            assert_eq!((pre.width, pre.height), (cols * step, rows * step));
            let out = p.encode(&pre);
            assert_eq!(out.len() / 32, cols * rows + rows - 1);
            assert_eq!(out.len() / 32, p.n_tokens_for(100, 70));
            assert!(out.iter().all(|v| v.is_finite()));
            let brk = &out[cols * 32..(cols + 1) * 32];
            assert!(
                brk.iter().all(|&v| v.abs() <= 0.25),
                "the break row is the file's"
            );
        }
    }

    #[test]
    fn refusals_name_what_is_missing() {
        let err =
            |merge: bool, edit: fn(&mut GgufWriter)| tiny(merge, edit).err().unwrap().to_string();
        // Without a merger, a merge size of 2 cannot be run.
        let e = err(false, |w| {
            w.add_kv("clip.vision.spatial_merge_size", 2u32);
        });
        assert_eq!(e, "projector: missing tensor 'mm.patch_merger.weight'");
        let e = err(false, |w| {
            w.add_kv("clip.vision.attention.head_count", 4u32);
        });
        assert!(e.contains("divisible by 4"), "{e}");
        let e = err(true, |w| {
            w.add_tensor("v.post_ln.bias", &[8], GgmlType::F32, vec![0; 32])
                .unwrap();
        });
        assert_eq!(e, "projector: missing tensor 'v.post_ln.weight'");
    }

    #[test]
    fn rope_rotates_halves_by_row_and_column() {
        // d = 8: pair (0,1) by the row at frequency 1, pair (4,5) by the column at
        // 10000^(-2/8) = 0.1.
        let r = Rope2d::new(8, 3, 2);
        let mut x = vec![0f32; 6 * 8];
        for row in x.chunks_exact_mut(8) {
            row[0] = 1.0;
            row[4] = 1.0;
        }
        r.apply(&mut x);
        // Patch 5: row 1, column 2.
        let p = &x[5 * 8..6 * 8];
        assert!((p[0] - 1f32.cos()).abs() < 1e-6 && (p[1] - 1f32.sin()).abs() < 1e-6);
        assert!((p[4] - 0.2f32.cos()).abs() < 1e-6 && (p[5] - 0.2f32.sin()).abs() < 1e-6);
    }
}
