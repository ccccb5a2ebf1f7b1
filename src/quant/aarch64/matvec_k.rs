//! NEON matrix-vector kernel for the K-quants Q4_K, Q5_K and Q6_K (generation, one token): four
//! weight rows per step through `tiles_k::tile` straight from the weight super-blocks (four
//! independent accumulation chains), fetching the next four rows, one contiguous run of memory,
//! at the pace these are read. Results are the bits of the variant's `vec_dot`, as for the tiles.

use super::tiles_k::{tile, KFormat, RawRows};
use super::Dot4;
use crate::quant::block::as_blocks;
use crate::quant::gemm::PackedActs;
use crate::quant::q8_k::BlockQ8K;

/// Weight rows per step (`ops::matmul` splits rows among threads in multiples of four).
const STEP: usize = 4;

/// `out[r] = vec_dot(W[r], act)` for the `out.len()` weight rows in `w` and the token packed by
/// `quant::gemm::pack_single` (its Q8_K row in `acts.raw`).
///
/// # Safety
/// The CPU must have `D`'s features.
pub(super) unsafe fn matvec<F: KFormat, D: Dot4>(w: &[u8], acts: &PackedActs, out: &mut [f32]) {
    let nsb = acts.n_blocks;
    let w = as_blocks::<F::W>(w);
    assert!(nsb > 0 && w.len() == out.len() * nsb);
    let y = [as_blocks::<BlockQ8K>(&acts.raw[..acts.raw_stride])];
    let full = out.len() / STEP * STEP;
    let (head, tail) = out.split_at_mut(full);
    for (o, rows) in head.chunks_exact_mut(STEP).zip(w.chunks_exact(STEP * nsb)) {
        let rows = RawRows::<F>::new(rows, nsb, true);
        // SAFETY: the caller guarantees `D`'s features.
        unsafe { tile::<F, D, _, STEP, 1>(&rows, y, &mut |r, _, v| o[r] = v) };
    }
    for (o, row) in tail.iter_mut().zip(w[full * nsb..].chunks_exact(nsb)) {
        let row = RawRows::<F>::new(row, nsb, false);
        // SAFETY: as above.
        unsafe { tile::<F, D, _, 1, 1>(&row, y, &mut |_, _, v| *o = v) };
    }
}
