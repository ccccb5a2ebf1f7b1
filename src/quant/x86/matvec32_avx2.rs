//! AVX2 matrix-vector kernel for the 32-element formats: four weight rows per step against the
//! token packed by `quant::gemm::pack_single`, fetching the next four rows ahead while these are
//! consumed. Each row's product is `tiles32_avx2.rs`'s (ggml's AVX2 float order), so results
//! are the bits of the single-row kernels; the four rows give the core four independent
//! accumulation chains.

use super::tiles32_avx2::{tile, Avx2Block, RawRows};
use crate::quant::gemm::PackedActs;

/// Weight rows per step.
const STEP: usize = 4;

/// `out[r] = vec_dot(W[r], act)` for the `out.len()` weight rows in `w` and the single token in
/// `acts`.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn matvec<B: Avx2Block>(w: &[u8], acts: &PackedActs, out: &mut [f32]) {
    let row_bytes = acts.n_blocks * B::BYTES;
    let full = out.len() / STEP * STEP;
    let (head, tail) = out.split_at_mut(full);
    for (i, o) in head.chunks_exact_mut(STEP).enumerate() {
        let wr = &w[STEP * i * row_bytes..][..STEP * row_bytes];
        let rows = RawRows::<B>::new(wr, row_bytes, STEP, acts.n_blocks, true);
        // SAFETY: the caller guarantees the CPU features.
        unsafe { tile::<B, _, STEP, 1>(&rows, acts, 0, &mut |r, _, v| o[r] = v) };
    }
    for (i, o) in tail.iter_mut().enumerate() {
        let wr = &w[(full + i) * row_bytes..][..row_bytes];
        let row = RawRows::<B>::new(wr, row_bytes, 1, acts.n_blocks, false);
        // SAFETY: as above.
        unsafe { tile::<B, _, 1, 1>(&row, acts, 0, &mut |_, _, v| *o = v) };
    }
}
