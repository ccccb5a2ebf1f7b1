//! Images in: decoding image files, the vision encoders of llama.cpp's `clip` projector files
//! (`--mmproj`), and the embeddings they give the text model: LLaVA 1.5's `mlp` projector (a
//! CLIP ViT and a two-layer MLP), Gemma 3's (`gemma3`: SigLIP, pooling, soft-embedding norm)
//! SmolVLM's (`idefics3`: SigLIP, pixel shuffle, tiles), Pixtral's (`pixtral`: images at
//! their own size, 2-D RoPE, `[IMG_BREAK]` rows) and Qwen2-VL's (`qwen2vl_merger`: images at
//! their own size, two patch kernels, 2-D RoPE, 2×2 merger; the text model places the rows at
//! 2-D M-RoPE positions) and Qwen2.5-VL's (`qwen2.5vl_merger`: the same with an RMS-norm tower,
//! a gated FFN and window attention) and Llama 4's (`llama4`: tiles and an overview, a ViT with
//! a 2-D RoPE, pixel shuffle, an MLP adapter) and MiniCPM-V's (`resampler`: LLaVA-UHD slices
//! of their own sizes, SigLIP with bucketed positions, learned queries attending over the
//! tower's rows) on the CPU kernels, threaded on the pool; the matrix products and attention on a GPU
//! where one takes them (the seam `backend::encoder`).
//!
//! The pipeline is `image::decode` → `preprocess_tiles` (resize, pad, slice, normalise, as clip
//! does for the projector type; one input for `mlp` and `gemma3`) → `Projector::encode` on each
//! input → one row of the text model's width per image token.

pub mod attention;
mod clip;
mod encode;
mod head;
pub mod image;
pub mod layers;
mod layout;
mod llama4;
mod minicpmv;
mod pixtral;
mod preprocess;
mod qwen25vl;
mod qwen2vl;
pub mod resize;

pub use clip::{FfnActivation, Projector, ProjectorType, VisionHparams};
pub use image::{decode, RgbImage};
pub use layout::{ImageLayout, TileLayout};
pub use preprocess::{preprocess, preprocess_tiles, tile_grid, PlanarImage, Tiles};

use crate::gguf::GgufError;
use crate::quant::GgmlType;

/// Why an image or a projector could not be used.
#[derive(Debug, thiserror::Error)]
pub enum VisionError {
    #[error("unknown image format ({0}); expected {fmts}", fmts = image::FORMATS)]
    UnknownImageFormat(String),
    #[error("corrupt or truncated {format} image: {message}")]
    ImageDecode {
        format: &'static str,
        message: String,
    },
    #[error(
        "image of {width}×{height} pixels is larger than the {max}×{max} limit",
        max = image::MAX_SIDE
    )]
    ImageTooLarge { width: u32, height: u32 },
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error("projector: {0}")]
    NotAProjector(String),
    #[error(
        "projector type '{0}' is not supported (supported: {list})",
        list = clip::supported_names()
    )]
    UnsupportedProjector(String),
    #[error("projector: metadata '{0}' is missing")]
    MissingKey(String),
    #[error("projector: bad value for metadata '{0}': {1}")]
    BadValue(String, String),
    #[error("projector: {0} is not implemented")]
    NotImplemented(String),
    #[error("projector: missing tensor '{0}'")]
    MissingTensor(String),
    #[error("projector: tensor '{name}' has shape {got:?}, expected {want:?}")]
    TensorShape {
        name: String,
        want: Vec<usize>,
        got: Vec<usize>,
    },
    #[error(
        "projector: tensor '{name}' has type {ty}, which cannot be a weight here (no dot \
         product, or rows that are not whole blocks)"
    )]
    WeightType { name: String, ty: GgmlType },
    #[error(
        "projector: tensor '{0}' is not read by this engine's encoder (a variant of the \
         projector it does not build); refusing to run without it"
    )]
    UnusedTensor(String),
}
