//! Loading llama.cpp's `clip` GGUF files (mmproj): the projector type, the vision tower's
//! hyperparameters (`clip.vision.*`) and its tensors (`v.*`, `mm.*`), shape-checked and left in
//! the mapped file. Every tensor of the file must be one the encoder reads: a file of a variant
//! this engine does not build is refused, naming a tensor it would ignore. Types built: `mlp`
//! (LLaVA 1.5), `gemma3` (SigLIP, average pooling, soft-embedding norm, input projection),
//! `idefics3` (SigLIP, pixel shuffle, one linear layer; SmolVLM), `pixtral` (its own tower,
//! loaded by `pixtral.rs`), `qwen2vl_merger` (Qwen2-VL, loaded by `qwen2vl.rs`) and
//! `qwen2.5vl_merger` (Qwen2.5-VL, loaded by `qwen25vl.rs`) and `llama4` (Llama 4, loaded by
//! `llama4.rs`).

use std::cell::RefCell;
use std::collections::HashSet;
use std::sync::Arc;

use super::VisionError;
use crate::backend::encoder::EncoderDevice;
use crate::gguf::GgufFile;
use crate::model::Tensor;
use crate::ops::QMat;
use crate::quant::{self, GgmlType};

/// The projector architectures built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProjectorType {
    /// LLaVA 1.5 / BakLLaVA: CLIP ViT, class token, pre-norm, two-layer MLP.
    Mlp,
    /// Gemma 3: SigLIP (no class token, post-norm), the patch grid average-pooled by
    /// `n_merge` per side, RMS norm (`mm.soft_emb_norm`), then `mm.input_projection`.
    Gemma3,
    /// SmolVLM / Idefics3: SigLIP, pixel shuffle by `n_merge` per side, `mm.model.fc`; images
    /// are cut into tiles of the input size plus an overview.
    Idefics3,
    /// Pixtral / Mistral Small 3.1: images at their own size (in whole patches, within a token
    /// budget), RMS-norm ViT with 2-D RoPE and a gated FFN, optionally a patch merger, a
    /// two-layer GELU MLP, and an `[IMG_BREAK]` row after each row of patches but the last.
    Pixtral,
    /// Qwen2-VL (`qwen2vl_merger`): images at their own size (in whole 2×2 windows of patches,
    /// within a token budget), two patch kernels summed, LayerNorm ViT with 2-D RoPE, the
    /// merger (LayerNorm, each 2×2 window one row, two-layer GELU MLP).
    Qwen2vl,
    /// Qwen2.5-VL (`qwen2.5vl_merger`): Qwen2-VL's images and merger, an RMS-norm ViT with a
    /// gated FFN and window attention (every `n_wa_pattern`-th block over the whole image).
    Qwen25vl,
    /// Llama 4 (`llama4`): images cut into up to 3×3 tiles of the input size plus an overview,
    /// a LayerNorm ViT with a class token, learned positions and a 2-D RoPE, pixel shuffle by
    /// `n_merge` per side, a two-layer GELU MLP and a linear projection.
    Llama4,
    /// MiniCPM-V (`resampler`): images sliced as LLaVA-UHD does (an overview and up to 9
    /// slices, each of its own size in whole patches), a SigLIP tower with bucketed learned
    /// positions, and a resampler (learned queries attending over the tower's rows) giving a
    /// fixed count of rows per input.
    Minicpmv,
}

impl ProjectorType {
    /// Every type built, by its `clip.projector_type` name.
    pub const ALL: [ProjectorType; 8] = [
        ProjectorType::Mlp,
        ProjectorType::Gemma3,
        ProjectorType::Idefics3,
        ProjectorType::Pixtral,
        ProjectorType::Qwen2vl,
        ProjectorType::Qwen25vl,
        ProjectorType::Llama4,
        ProjectorType::Minicpmv,
    ];

    /// The name llama.cpp's files give the type (`clip.projector_type`).
    pub fn name(self) -> &'static str {
        match self {
            ProjectorType::Mlp => "mlp",
            ProjectorType::Gemma3 => "gemma3",
            ProjectorType::Idefics3 => "idefics3",
            ProjectorType::Pixtral => "pixtral",
            ProjectorType::Qwen2vl => "qwen2vl_merger",
            ProjectorType::Qwen25vl => "qwen2.5vl_merger",
            ProjectorType::Llama4 => "llama4",
            ProjectorType::Minicpmv => "resampler",
        }
    }

    /// Whether the text model places this projector's rows at 2-D M-RoPE positions.
    pub fn mrope(self) -> bool {
        matches!(self, ProjectorType::Qwen2vl | ProjectorType::Qwen25vl)
    }
}

/// The names of the supported types, comma-separated (for the refusal of any other).
pub(super) fn supported_names() -> String {
    let names: Vec<&str> = ProjectorType::ALL.iter().map(|t| t.name()).collect();
    names.join(", ")
}

/// The activation of the ViT's feed-forward blocks (`clip.use_gelu`, `clip.use_silu`; neither:
/// quick GELU, CLIP's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FfnActivation {
    Gelu,
    GeluQuick,
    Silu,
}

/// The vision tower's hyperparameters.
#[derive(Clone, Debug)]
pub struct VisionHparams {
    pub image_size: usize,
    pub patch_size: usize,
    pub n_embd: usize,
    pub n_ff: usize,
    pub n_head: usize,
    /// Blocks in the file (`clip.vision.block_count`).
    pub n_layer: usize,
    pub eps: f32,
    pub image_mean: [f32; 3],
    pub image_std: [f32; 3],
    pub ffn_act: FfnActivation,
    /// `clip.vision.feature_layer` (`mlp` only): the hidden states (0 = the encoder's input)
    /// stacked side by side as the projector's input; empty: the output of block `n_layer - 2`.
    pub feature_layers: Vec<usize>,
    /// Patches merged per side after the tower (`clip.vision.projector.scale_factor`): the
    /// average-pooling kernel of `gemma3` (default 4), the pixel-shuffle factor of `idefics3`
    /// (at least 2); 1 for `mlp`.
    pub n_merge: usize,
    /// `idefics3`: the longest side an image is resized to before it is cut into tiles
    /// (`clip.vision.preproc_image_size`); `None` in older files.
    pub longest_edge: Option<usize>,
}

impl VisionHparams {
    /// Patches per side of the (square) input image.
    pub fn patches_per_side(&self) -> usize {
        self.image_size / self.patch_size
    }

    /// Blocks that run for a projector of type `ty`: for `mlp` up to the deepest feature layer,
    /// else all but the last (llama.cpp's choice for LLaVA, whose converter already dropped
    /// CLIP's last block); SigLIP towers run them all.
    pub fn blocks_run(&self, ty: ProjectorType) -> usize {
        match (ty, self.feature_layers.iter().max()) {
            (ProjectorType::Mlp, Some(&m)) => m,
            (ProjectorType::Mlp, None) => self.n_layer - 1,
            _ => self.n_layer,
        }
    }

    /// Small hyperparameters for unit tests: an `image_size` input of `patch_size` patches,
    /// width 4, one block, a mean and deviation of 0.5, no merging.
    #[cfg(test)]
    pub(super) fn tiny(image_size: usize, patch_size: usize) -> VisionHparams {
        VisionHparams {
            image_size,
            patch_size,
            n_embd: 4,
            n_ff: 8,
            n_head: 1,
            n_layer: 1,
            eps: 1e-6,
            image_mean: [0.5; 3],
            image_std: [0.5; 3],
            ffn_act: FfnActivation::Gelu,
            feature_layers: Vec::new(),
            n_merge: 1,
            longest_edge: None,
        }
    }

    /// Image tokens per side of one encoded input after merging (`n_merge` divides the
    /// patches per side).
    pub fn tokens_per_side(&self) -> usize {
        self.patches_per_side() / self.n_merge
    }
}

/// A linear layer: weight matrix (`out × in`) and optional bias.
pub(super) struct Linear {
    pub w: Tensor,
    pub b: Option<Vec<f32>>,
}

/// A weight matrix held in memory rather than the mapped file (a transposed copy).
pub(super) struct OwnedMat {
    pub ty: GgmlType,
    pub rows: usize,
    pub cols: usize,
    pub data: Vec<u8>,
}

impl OwnedMat {
    pub fn mat(&self) -> QMat<'_> {
        QMat {
            ty: self.ty,
            rows: self.rows,
            cols: self.cols,
            data: &self.data,
            x8: None,
        }
    }
}

/// What turns the tower's output into the text model's rows.
pub(super) enum Head {
    /// `mm.0`, GELU, `mm.2`.
    Mlp { mm0: Linear, mm2: Linear },
    /// `mm.soft_emb_norm` (RMS) and `mm.input_projection` (stored `n_embd × n_text`, kept here
    /// transposed to `n_text` rows, as llama.cpp's graph transposes it).
    Gemma3 {
        soft_emb_norm: Vec<f32>,
        input_proj: OwnedMat,
    },
    /// `mm.model.fc` on the pixel-shuffled rows (`n_merge² · n_embd` wide).
    Idefics3 { fc: Linear },
    /// Pixtral's own tower and head (`pixtral.rs`); the generic tower fields are empty.
    Pixtral(Box<super::pixtral::Pixtral>),
    /// Qwen2-VL's second patch kernel and merger MLP (`qwen2vl.rs`); the tower is in the
    /// generic fields.
    Qwen2vl(Box<super::qwen2vl::Qwen2vl>),
    /// Qwen2.5-VL's tower and merger (`qwen25vl.rs`); the generic tower fields are empty.
    Qwen25vl(Box<super::qwen25vl::Qwen25vl>),
    /// Llama 4's adapter MLP and projection (`llama4.rs`); the tower is in the generic fields.
    Llama4(Box<super::llama4::Llama4>),
    /// MiniCPM-V's resampler (`minicpmv.rs`); the tower is in the generic fields.
    Minicpmv(Box<super::minicpmv::Minicpmv>),
}

/// A LayerNorm's scale and shift.
pub(super) struct Norm {
    pub w: Vec<f32>,
    pub b: Vec<f32>,
}

/// One ViT block.
pub(super) struct Block {
    pub ln1: Norm,
    pub q: Linear,
    pub k: Linear,
    pub v: Linear,
    pub o: Linear,
    pub ln2: Norm,
    pub up: Linear,
    pub down: Linear,
}

/// A loaded projector: the vision encoder and the projection into the text model's width.
pub struct Projector {
    pub ty: ProjectorType,
    pub hparams: VisionHparams,
    pub file: Arc<GgufFile>,
    pub(super) patch_embd: Tensor,
    pub(super) patch_bias: Option<Vec<f32>>,
    pub(super) class_embd: Option<Vec<f32>>,
    /// `n_pos × n_embd`.
    pub(super) pos_embd: Vec<f32>,
    pub(super) pre_ln: Option<Norm>,
    pub(super) post_ln: Option<Norm>,
    pub(super) blocks: Vec<Block>,
    pub(super) head: Head,
    /// Where the matrix products and attention run when not on the CPU.
    pub(super) device: Option<Arc<dyn EncoderDevice>>,
}

impl Projector {
    /// Reads a projector file's metadata and locates its tensors.
    pub fn load(file: Arc<GgufFile>) -> Result<Projector, VisionError> {
        let ty = projector_type(&file)?;
        let hparams = hparams(&file, ty)?;
        if ty == ProjectorType::Pixtral {
            return super::pixtral::load(file, hparams);
        }
        if ty == ProjectorType::Qwen2vl {
            return super::qwen2vl::load(file, hparams);
        }
        if ty == ProjectorType::Qwen25vl {
            return super::qwen25vl::load(file, hparams);
        }
        if ty == ProjectorType::Llama4 {
            return super::llama4::load(file, hparams);
        }
        if ty == ProjectorType::Minicpmv {
            return super::minicpmv::load(file, hparams);
        }
        let l = Lookup::new(&file);
        let h = &hparams;
        let (e, ff, p) = (h.n_embd, h.n_ff, h.patch_size);
        let n_patches = h.patches_per_side() * h.patches_per_side();
        let patch_embd = l.weight("v.patch_embd.weight", &[p, p, 3, e])?;
        let patch_bias = l.opt_vector("v.patch_embd.bias", e)?;
        // SigLIP has no class token (llama.cpp's graph would not read one).
        let class_embd = match ty {
            ProjectorType::Mlp => l.opt_vector("v.class_embd", e)?,
            _ => None,
        };
        let n_pos = n_patches + class_embd.is_some() as usize;
        let pos_embd = l.tensor("v.position_embd.weight", &[e, n_pos])?;
        let pos_embd = pos_embd.to_f32(&file);
        let pre_ln = l.opt_norm("v.pre_ln", e)?;
        let post_ln = l.opt_norm("v.post_ln", e)?;
        let blocks = (0..h.n_layer)
            .map(|il| l.block(il, e, ff))
            .collect::<Result<Vec<_>, _>>()?;
        let head = match ty {
            ProjectorType::Mlp => {
                let n_stack = h.feature_layers.len().max(1);
                let mm0 = l.linear("mm.0", e * n_stack, None)?;
                let proj_ff = mm0.w.info.dims[1] as usize;
                let mm2 = l.linear("mm.2", proj_ff, None)?;
                Head::Mlp { mm0, mm2 }
            }
            ProjectorType::Gemma3 => Head::Gemma3 {
                soft_emb_norm: l.vector("mm.soft_emb_norm.weight", e)?,
                input_proj: l.transposed("mm.input_projection.weight", e)?,
            },
            ProjectorType::Idefics3 => Head::Idefics3 {
                fc: l.linear("mm.model.fc", e * h.n_merge * h.n_merge, None)?,
            },
            ProjectorType::Pixtral => unreachable!("pixtral::load loads its projectors"),
            ProjectorType::Qwen2vl => unreachable!("qwen2vl::load loads its projectors"),
            ProjectorType::Qwen25vl => unreachable!("qwen25vl::load loads its projectors"),
            ProjectorType::Llama4 => unreachable!("llama4::load loads its projectors"),
            ProjectorType::Minicpmv => unreachable!("minicpmv::load loads its projectors"),
        };
        l.check_all_used()?;
        Ok(Projector {
            ty,
            hparams,
            file: file.clone(),
            patch_embd,
            patch_bias,
            class_embd,
            pos_embd,
            pre_ln,
            post_ln,
            blocks,
            head,
            device: None,
        })
    }

    /// The width of the rows the projector gives: the text model's embedding width.
    pub fn n_embd_out(&self) -> usize {
        match &self.head {
            Head::Mlp { mm2, .. } => mm2.w.info.dims[1] as usize,
            Head::Gemma3 { input_proj, .. } => input_proj.rows,
            Head::Idefics3 { fc } => fc.w.info.dims[1] as usize,
            Head::Pixtral(p) => p.n_embd_out(),
            Head::Qwen2vl(q) => q.n_embd_out(),
            Head::Qwen25vl(q) => q.n_embd_out(),
            Head::Llama4(l) => l.n_embd_out(),
            Head::Minicpmv(m) => m.n_embd_out(),
        }
    }

    /// Rows (image tokens) one encoded input becomes: the whole image for `mlp` and `gemma3`,
    /// each tile and the overview for `idefics3` and `llama4` (see [`super::preprocess_tiles`]); for
    /// `pixtral`, whose images keep their own size, those of a square of the input size.
    pub fn n_image_tokens(&self) -> usize {
        if let Head::Pixtral(p) = &self.head {
            let s = self.hparams.image_size;
            return p.n_tokens_for(s, s, &self.hparams);
        }
        if let Head::Qwen2vl(_) | Head::Qwen25vl(_) = &self.head {
            let s = self.hparams.image_size;
            return super::qwen2vl::n_tokens_for(s, s, &self.hparams);
        }
        if let Head::Minicpmv(m) = &self.head {
            return m.n_query();
        }
        let s = self.hparams.tokens_per_side();
        s * s
    }

    /// Rows all of an image of `width`×`height` pixels becomes (its tiles' and overview's for
    /// `idefics3` and `llama4`), known before the image is prepared: for checking it against the context.
    pub fn n_tokens_for(&self, width: usize, height: usize) -> usize {
        if let Head::Pixtral(p) = &self.head {
            return p.n_tokens_for(width, height, &self.hparams);
        }
        if let Head::Qwen2vl(_) | Head::Qwen25vl(_) = &self.head {
            return super::qwen2vl::n_tokens_for(width, height, &self.hparams);
        }
        let inputs = match super::preprocess::tile_grid(width, height, self.ty, &self.hparams) {
            Some((cols, rows)) => cols * rows + 1,
            None => 1,
        };
        inputs * self.n_image_tokens()
    }
}

fn projector_type(file: &GgufFile) -> Result<ProjectorType, VisionError> {
    if file.get_bool("clip.has_vision_encoder") != Some(true) {
        let what = match file.architecture() {
            Some("clip") => "the file has no vision encoder (clip.has_vision_encoder)".to_string(),
            Some(a) => format!("architecture is '{a}', expected 'clip' (an mmproj file)"),
            None => "no general.architecture: not an mmproj file".to_string(),
        };
        return Err(VisionError::NotAProjector(what));
    }
    let name = file
        .get_str("clip.projector_type")
        .or_else(|| file.get_str("clip.vision.projector_type"))
        .ok_or_else(|| VisionError::MissingKey("clip.projector_type".into()))?;
    ProjectorType::ALL
        .into_iter()
        .find(|t| t.name() == name)
        .ok_or_else(|| VisionError::UnsupportedProjector(name.to_string()))
}

fn hparams(file: &GgufFile, ty: ProjectorType) -> Result<VisionHparams, VisionError> {
    let u = |key: &str| -> Result<usize, VisionError> {
        match file.get(key) {
            None => Err(VisionError::MissingKey(key.into())),
            Some(v) => match v.as_u32() {
                Some(n) if n > 0 => Ok(n as usize),
                _ => Err(VisionError::BadValue(key.into(), format!("{v:?}"))),
            },
        }
    };
    let n_embd = u("clip.vision.embedding_length")?;
    let n_head = u("clip.vision.attention.head_count")?;
    if !n_embd.is_multiple_of(n_head) {
        return Err(VisionError::BadValue(
            "clip.vision.attention.head_count".into(),
            format!("{n_head} does not divide the width {n_embd}"),
        ));
    }
    if let Some(kv) = file.get_u32("clip.vision.attention.head_count_kv") {
        if kv as usize != n_head {
            return Err(VisionError::NotImplemented(format!(
                "grouped-query attention in the vision tower ({kv} KV heads)"
            )));
        }
    }
    if let Some(hd) = file.get_u32("clip.vision.attention.head_dim") {
        if hd as usize != n_embd / n_head {
            return Err(VisionError::NotImplemented(format!(
                "a head width ({hd}) other than width / heads"
            )));
        }
    }
    let image_size = u("clip.vision.image_size")?;
    let patch_size = u("clip.vision.patch_size")?;
    if !image_size.is_multiple_of(patch_size) || image_size > 4096 {
        return Err(VisionError::BadValue(
            "clip.vision.image_size".into(),
            format!("{image_size} (patch size {patch_size})"),
        ));
    }
    let n_layer = u("clip.vision.block_count")?;
    let eps_key = "clip.vision.attention.layer_norm_epsilon";
    let eps = file
        .get_f32(eps_key)
        .ok_or_else(|| VisionError::MissingKey(eps_key.into()))?;
    let triple = |key: &str| -> Result<[f32; 3], VisionError> {
        match file.get_f32_array(key) {
            Some(a) if a.len() >= 3 => Ok([a[0], a[1], a[2]]),
            Some(a) => Err(VisionError::BadValue(
                key.into(),
                format!("{} values, expected 3", a.len()),
            )),
            None => Err(VisionError::MissingKey(key.into())),
        }
    };
    let image_mean = triple("clip.vision.image_mean")?;
    let image_std = triple("clip.vision.image_std")?;
    if let Some(z) = image_std.iter().find(|s| **s == 0.0 || !s.is_finite()) {
        return Err(VisionError::BadValue(
            "clip.vision.image_std".into(),
            format!("{z}"),
        ));
    }
    let gelu = file.get_bool("clip.use_gelu").unwrap_or(false);
    let silu = file.get_bool("clip.use_silu").unwrap_or(false);
    let ffn_act = match (gelu, silu) {
        (true, true) => {
            return Err(VisionError::BadValue(
                "clip.use_gelu".into(),
                "both clip.use_gelu and clip.use_silu are true".into(),
            ))
        }
        (true, false) => FfnActivation::Gelu,
        (false, true) => FfnActivation::Silu,
        (false, false) => FfnActivation::GeluQuick,
    };
    let fl_key = "clip.vision.feature_layer";
    let feature_layers = match file.get(fl_key) {
        None => Vec::new(),
        Some(v) => {
            let bad = || VisionError::BadValue(fl_key.into(), format!("{v:?}"));
            let a = v.as_array().ok_or_else(bad)?;
            let values: Vec<i64> = match (a.as_i32s(), a.as_u32s()) {
                (Some(s), _) => s.iter().map(|&n| n as i64).collect(),
                (_, Some(s)) => s.iter().map(|&n| n as i64).collect(),
                _ => return Err(bad()),
            };
            let mut out = Vec::with_capacity(values.len());
            for n in values {
                if n < 0 || n as usize > n_layer {
                    return Err(VisionError::BadValue(
                        fl_key.into(),
                        format!("layer {n} is outside 0..={n_layer}"),
                    ));
                }
                out.push(n as usize);
            }
            out
        }
    };
    if ty == ProjectorType::Mlp && feature_layers.is_empty() && n_layer < 2 {
        return Err(VisionError::BadValue(
            "clip.vision.block_count".into(),
            format!("{n_layer}: LLaVA reads the penultimate block, so at least 2 are needed"),
        ));
    }
    if file.get("clip.vision.image_grid_pinpoints").is_some() {
        return Err(VisionError::NotImplemented(
            "image slicing (clip.vision.image_grid_pinpoints, LLaVA 1.6)".into(),
        ));
    }
    let opt_u = |key: &str| -> Result<Option<usize>, VisionError> {
        match file.get(key) {
            None => Ok(None),
            Some(_) => u(key).map(Some),
        }
    };
    let scale_key = match ty {
        ProjectorType::Pixtral | ProjectorType::Qwen2vl | ProjectorType::Qwen25vl => {
            "clip.vision.spatial_merge_size"
        }
        _ => "clip.vision.projector.scale_factor",
    };
    let n_merge = match ty {
        ProjectorType::Mlp | ProjectorType::Minicpmv => 1,
        // 1 for Pixtral-12B; Mistral Small 3.1's patch merger merges 2×2.
        ProjectorType::Pixtral => opt_u(scale_key)?.unwrap_or(1),
        // 2 for Qwen2-VL and Qwen2.5-VL (the loaders refuse any other).
        ProjectorType::Qwen2vl | ProjectorType::Qwen25vl => opt_u(scale_key)?.unwrap_or(2),
        ProjectorType::Gemma3 => opt_u(scale_key)?.unwrap_or(4),
        // 2 for Llama 4 (its pixel shuffle ratio 0.5); llama.cpp's default is 1.
        ProjectorType::Llama4 => opt_u(scale_key)?.unwrap_or(1),
        ProjectorType::Idefics3 => match opt_u(scale_key)? {
            Some(n) if n >= 2 => n,
            Some(n) => {
                return Err(VisionError::BadValue(
                    scale_key.into(),
                    format!("{n}: pixel shuffle needs a factor of at least 2"),
                ))
            }
            None => return Err(VisionError::MissingKey(scale_key.into())),
        },
    };
    // llama.cpp counts the tokens as patches / n_merge², which is what its graphs give only
    // when n_merge divides the patches per side.
    if !(image_size / patch_size).is_multiple_of(n_merge) {
        return Err(VisionError::BadValue(
            scale_key.into(),
            format!(
                "{n_merge} does not divide the {} patches per side",
                image_size / patch_size
            ),
        ));
    }
    let longest_edge = match ty {
        ProjectorType::Idefics3 => {
            let key = "clip.vision.preproc_image_size";
            match opt_u(key)? {
                Some(n) if n > 8192 => {
                    return Err(VisionError::BadValue(key.into(), format!("{n}")))
                }
                other => other,
            }
        }
        _ => None,
    };
    Ok(VisionHparams {
        n_merge,
        longest_edge,
        image_size,
        patch_size,
        n_embd,
        n_ff: u("clip.vision.feed_forward_length")?,
        n_head,
        n_layer,
        eps,
        image_mean,
        image_std,
        ffn_act,
        // Validated for every type, as llama.cpp does, but only LLaVA's graph reads them.
        feature_layers: match ty {
            ProjectorType::Mlp => feature_layers,
            _ => Vec::new(),
        },
    })
}

/// Finds a projector's tensors, checking their shapes and types, and remembers which it found.
pub(super) struct Lookup<'a> {
    file: &'a GgufFile,
    used: RefCell<HashSet<String>>,
}

impl<'a> Lookup<'a> {
    pub(super) fn new(file: &'a GgufFile) -> Lookup<'a> {
        Lookup {
            file,
            used: RefCell::new(HashSet::new()),
        }
    }

    /// Refuses a file with a tensor nothing looked up: a variant the encoder does not build.
    pub(super) fn check_all_used(&self) -> Result<(), VisionError> {
        match self
            .file
            .tensors()
            .iter()
            .find(|t| !self.used.borrow().contains(&t.name))
        {
            Some(unused) => Err(VisionError::UnusedTensor(unused.name.clone())),
            None => Ok(()),
        }
    }

    /// A tensor llama.cpp requires but no graph reads: present, of any shape.
    pub(super) fn require(&self, name: &str) -> Result<(), VisionError> {
        self.file
            .tensor(name)
            .ok_or_else(|| VisionError::MissingTensor(name.to_string()))?;
        self.used.borrow_mut().insert(name.to_string());
        Ok(())
    }

    pub(super) fn tensor(&self, name: &str, dims: &[usize]) -> Result<Tensor, VisionError> {
        let info = self
            .file
            .tensor(name)
            .ok_or_else(|| VisionError::MissingTensor(name.to_string()))?;
        self.used.borrow_mut().insert(name.to_string());
        let got: Vec<usize> = info.dims.iter().map(|&d| d as usize).collect();
        if got != dims {
            return Err(VisionError::TensorShape {
                name: name.to_string(),
                want: dims.to_vec(),
                got,
            });
        }
        // Rows are read one by one: each must be whole blocks of the type.
        if !dims[0].is_multiple_of(info.ty.block_elems()) {
            return Err(VisionError::WeightType {
                name: name.to_string(),
                ty: info.ty,
            });
        }
        Ok(Tensor {
            info: info.clone(),
            x8: Default::default(),
        })
    }

    /// A tensor multiplied by the kernels: its type must have a dot product.
    pub(super) fn weight(&self, name: &str, dims: &[usize]) -> Result<Tensor, VisionError> {
        let t = self.tensor(name, dims)?;
        if !quant::has_vec_dot(t.info.ty) || t.info.ty == GgmlType::Q8_1 {
            return Err(VisionError::WeightType {
                name: name.to_string(),
                ty: t.info.ty,
            });
        }
        Ok(t)
    }

    /// `name`, a plain float matrix of `n_in` rows (GGUF `[n_out, n_in]`), transposed into
    /// `n_out` rows of `n_in`, keeping its type: llama.cpp's graph multiplies by the transposed
    /// copy (which it can make only of float types).
    fn transposed(&self, name: &str, n_in: usize) -> Result<OwnedMat, VisionError> {
        let n_out = match self.file.tensor(name) {
            Some(t) if t.dims.len() == 2 => t.dims[0] as usize,
            _ => 0, // the shape check below names what is wrong
        };
        let t = self.weight(name, &[n_out, n_in])?;
        let size = match t.info.ty {
            GgmlType::F32 => 4,
            GgmlType::F16 | GgmlType::BF16 => 2,
            ty => {
                return Err(VisionError::WeightType {
                    name: name.to_string(),
                    ty,
                })
            }
        };
        let src = self.file.tensor_data(&t.info);
        let mut data = vec![0u8; src.len()];
        for i in 0..n_in {
            for j in 0..n_out {
                let from = (i * n_out + j) * size;
                let to = (j * n_in + i) * size;
                data[to..to + size].copy_from_slice(&src[from..from + size]);
            }
        }
        Ok(OwnedMat {
            ty: t.info.ty,
            rows: n_out,
            cols: n_in,
            data,
        })
    }

    pub(super) fn vector(&self, name: &str, len: usize) -> Result<Vec<f32>, VisionError> {
        Ok(self.tensor(name, &[len])?.to_f32(self.file))
    }

    pub(super) fn opt_vector(
        &self,
        name: &str,
        len: usize,
    ) -> Result<Option<Vec<f32>>, VisionError> {
        match self.file.tensor(name) {
            Some(_) => Ok(Some(self.vector(name, len)?)),
            None => Ok(None),
        }
    }

    pub(super) fn norm(&self, prefix: &str, len: usize) -> Result<Norm, VisionError> {
        Ok(Norm {
            w: self.vector(&format!("{prefix}.weight"), len)?,
            b: self.vector(&format!("{prefix}.bias"), len)?,
        })
    }

    pub(super) fn opt_norm(&self, prefix: &str, len: usize) -> Result<Option<Norm>, VisionError> {
        match self.file.tensor(&format!("{prefix}.weight")) {
            Some(_) => Ok(Some(self.norm(prefix, len)?)),
            None => Ok(None),
        }
    }

    /// `{prefix}.weight` of `n_in` columns (and `n_out` rows when given, else whatever the
    /// file has), and `{prefix}.bias` if present.
    pub(super) fn linear(
        &self,
        prefix: &str,
        n_in: usize,
        n_out: Option<usize>,
    ) -> Result<Linear, VisionError> {
        let name = format!("{prefix}.weight");
        let rows = match n_out {
            Some(n) => n,
            None => match self.file.tensor(&name) {
                Some(t) if t.dims.len() == 2 => t.dims[1] as usize,
                _ => 0, // the shape check below names what is wrong
            },
        };
        let w = self.weight(&name, &[n_in, rows])?;
        let b = self.opt_vector(&format!("{prefix}.bias"), rows)?;
        Ok(Linear { w, b })
    }

    pub(super) fn block(&self, il: usize, e: usize, ff: usize) -> Result<Block, VisionError> {
        let p = |s: &str| format!("v.blk.{il}.{s}");
        // Old conversions swapped the names of the FFN's up and down projections; llama.cpp
        // tells them apart by the down projection's input width (and so swaps them whenever
        // that is the block's width, even when the FFN is as wide as the block).
        let swapped = self
            .file
            .tensor(&p("ffn_down.weight"))
            .is_some_and(|t| t.dims.first() == Some(&(e as u64)));
        let (up, down) = match swapped {
            false => ("ffn_up", "ffn_down"),
            true => ("ffn_down", "ffn_up"),
        };
        Ok(Block {
            ln1: self.norm(&p("ln1"), e)?,
            q: self.linear(&p("attn_q"), e, Some(e))?,
            k: self.linear(&p("attn_k"), e, Some(e))?,
            v: self.linear(&p("attn_v"), e, Some(e))?,
            o: self.linear(&p("attn_out"), e, Some(e))?,
            ln2: self.norm(&p("ln2"), e)?,
            up: self.linear(&p(up), e, Some(ff))?,
            down: self.linear(&p(down), ff, Some(e))?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::{GgufWriter, Value};

    /// A tiny projector (4×4 input, 2×2 patches, width 4, two blocks, into width 8) written by
    /// the crate's own writer after `edit` has had its say.
    fn tiny(edit: impl FnOnce(&mut GgufWriter)) -> Result<Projector, VisionError> {
        let mut w = GgufWriter::new();
        w.add_kv("general.architecture", "clip");
        w.add_kv("clip.has_vision_encoder", true);
        w.add_kv("clip.projector_type", "mlp");
        for (k, v) in [
            ("image_size", 4u32),
            ("patch_size", 2),
            ("embedding_length", 4),
            ("feed_forward_length", 8),
            ("attention.head_count", 2),
            ("block_count", 2),
        ] {
            w.add_kv(format!("clip.vision.{k}"), v);
        }
        w.add_kv("clip.vision.attention.layer_norm_epsilon", 1e-5f32);
        w.add_kv(
            "clip.vision.image_mean",
            Value::Array(crate::gguf::Array::F32(vec![0.5; 3])),
        );
        w.add_kv(
            "clip.vision.image_std",
            Value::Array(crate::gguf::Array::F32(vec![0.25; 3])),
        );
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
        t(&mut w, "v.patch_embd.weight", &[2, 2, 3, 4]);
        t(&mut w, "v.class_embd", &[4]);
        t(&mut w, "v.position_embd.weight", &[4, 5]);
        t(&mut w, "v.pre_ln.weight", &[4]);
        t(&mut w, "v.pre_ln.bias", &[4]);
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
        t(&mut w, "mm.0.weight", &[4, 8]);
        t(&mut w, "mm.0.bias", &[8]);
        t(&mut w, "mm.2.weight", &[8, 8]);
        t(&mut w, "mm.2.bias", &[8]);
        edit(&mut w);
        let bytes = w.to_bytes().unwrap();
        Projector::load(Arc::new(GgufFile::from_bytes(bytes).unwrap()))
    }

    #[test]
    fn a_tiny_projector_loads_and_encodes() {
        let p = tiny(|_| {}).unwrap();
        assert_eq!((p.n_image_tokens(), p.n_embd_out()), (4, 8));
        assert_eq!(p.hparams.ffn_act, FfnActivation::GeluQuick);
        assert_eq!(p.hparams.blocks_run(p.ty), 1);
        let img = crate::vision::RgbImage::filled(3, 5, [200, 10, 90]);
        let pre = crate::vision::preprocess(&img, p.ty, &p.hparams);
        let out = p.encode(&pre);
        assert_eq!(out.len(), 4 * 8);
        assert!(out.iter().all(|v| v.is_finite()));
    }

    #[test]
    fn refusals_name_what_is_wrong() {
        let err = |edit: fn(&mut GgufWriter)| tiny(edit).err().unwrap().to_string();
        let e = err(|w| {
            w.add_kv("clip.projector_type", "minicpmv4_6");
        });
        assert_eq!(
            e,
            "projector type 'minicpmv4_6' is not supported (supported: mlp, gemma3, idefics3, \
             pixtral, qwen2vl_merger, qwen2.5vl_merger, llama4, resampler)"
        );
        let e = err(|w| {
            w.add_kv("clip.has_vision_encoder", false);
        });
        assert!(e.contains("no vision encoder"), "{e}");
        let e = err(|w| {
            w.add_tensor("mm.3.weight", &[1], GgmlType::F32, vec![0; 4])
                .unwrap();
        });
        assert!(e.contains("'mm.3.weight' is not read"), "{e}");
        let e = err(|w| {
            w.add_kv("clip.vision.patch_size", 3u32);
        });
        assert!(e.contains("clip.vision.image_size"), "{e}");
        let e = err(|w| {
            w.add_kv("clip.vision.embedding_length", 6u32);
        });
        assert!(
            e.contains("'v.patch_embd.weight' has shape [2, 2, 3, 4]"),
            "{e}"
        );
        let e = err(|w| {
            w.add_kv(
                "clip.vision.image_std",
                Value::Array(crate::gguf::Array::F32(vec![1.0, 0.0, 1.0])),
            );
        });
        assert!(e.contains("image_std"), "{e}");
    }
}
