//! The seam through which the vision encoder's heavy steps run on a device: a projector
//! (`crate::vision`) holds an optional [`EncoderDevice`] (the GPU where the text model is,
//! `--mmproj-offload`; `crate::gpu::encoder`), which takes whole runs of plain ViT blocks, or
//! else single matrix products and full (unmasked) attention; everything else, and any step the
//! device declines, stays on the vision module's CPU code. Here only the contract, in plain
//! views of the weights (matrices as [`QMat`], norms and biases as slices).

use crate::ops::QMat;

/// The feed-forward activation of a tower's blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    /// ggml's GELU (tanh form through its f16 table).
    Gelu,
    /// `x·σ(1.702x)` through ggml's f16 table.
    GeluQuick,
    Silu,
}

/// A matrix and its optional bias.
pub struct LinearRef<'a> {
    pub w: QMat<'a>,
    pub b: Option<&'a [f32]>,
}

/// A layer norm's weight and bias.
pub struct NormRef<'a> {
    pub w: &'a [f32],
    pub b: &'a [f32],
}

/// One pre-norm ViT block with no rotary embedding (CLIP's, SigLIP's): `x += attn(ln1(x))`,
/// then `x += down(act(up(ln2(x))))`, attention's projections and the feed-forward's with
/// biases where the file has them.
pub struct BlockRef<'a> {
    pub ln1: NormRef<'a>,
    pub q: LinearRef<'a>,
    pub k: LinearRef<'a>,
    pub v: LinearRef<'a>,
    pub o: LinearRef<'a>,
    pub ln2: NormRef<'a>,
    pub up: LinearRef<'a>,
    pub down: LinearRef<'a>,
}

/// What every block of a tower shares.
#[derive(Clone, Copy, Debug)]
pub struct TowerShape {
    pub n_head: usize,
    pub eps: f32,
    pub act: Activation,
}

/// A device that runs some of the encoder's steps. Each method either computes the whole step
/// or declines (the weight type or shape has no kernel there, or the device failed and said
/// so once), and the caller then computes it on the CPU; a step is never half done.
pub trait EncoderDevice: Send + Sync {
    /// `out = x · Wᵀ` for `n` rows of `x` (`n × w.cols`) into `out` (`n × w.rows`); false
    /// when it declines.
    fn matmul(&self, w: &QMat, x: &[f32], n: usize, out: &mut [f32]) -> bool;

    /// Multi-head self-attention over `n` positions, every position seeing every other, as
    /// [`super::attention::attention`] computes it; `None` when it declines.
    fn attention(
        &self,
        q: &[f32],
        k: &[f32],
        v: &[f32],
        n: usize,
        n_head: usize,
        scale: f32,
    ) -> Option<Vec<f32>>;

    /// `blocks` one after another on `x` (`n × n_embd`) in place, the rows staying on the
    /// device between blocks; false when it declines (then `x` is unchanged).
    fn blocks(&self, blocks: &[BlockRef], shape: TowerShape, x: &mut [f32], n: usize) -> bool;

    /// What runs there, for the start line (`NVIDIA H200`).
    fn name(&self) -> String;
}
