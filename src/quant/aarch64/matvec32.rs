//! NEON matrix-vector kernel for the 32-element formats (generation, one token): four weight
//! rows per step through `tiles32::tile` straight from the weight blocks (eight independent f32
//! accumulation chains), fetching the next four rows while these are consumed. Each row's
//! product is the tile's, so results are the bits of the variant's `vec_dot`.

use super::tiles32::{tile, Format32, RawRows};
use super::Dot4;
use crate::quant::block::as_blocks;
use crate::quant::gemm::PackedActs;

/// Weight rows per step (`ops::matmul` splits rows among threads in multiples of four).
const STEP: usize = 4;

/// `out[r] = vec_dot(W[r], act)` for the `out.len()` weight rows in `w` and the token packed by
/// `quant::gemm::pack_single`.
///
/// # Safety
/// The CPU must have `D`'s features.
pub(super) unsafe fn matvec<B: Format32, D: Dot4>(w: &[u8], acts: &PackedActs, out: &mut [f32]) {
    let nb = acts.n_blocks;
    let w = as_blocks::<B>(w);
    assert!(nb > 0 && w.len() == out.len() * nb);
    let full = out.len() / STEP * STEP;
    let (head, tail) = out.split_at_mut(full);
    for (o, rows) in head.chunks_exact_mut(STEP).zip(w.chunks_exact(STEP * nb)) {
        let rows = RawRows::new(rows, nb, true);
        // SAFETY: the caller guarantees `D`'s features.
        unsafe { tile::<B, D, _, STEP, 1>(&rows, acts, 0, &mut |r, _, v| o[r] = v) };
    }
    for (o, row) in tail.iter_mut().zip(w[full * nb..].chunks_exact(nb)) {
        let row = RawRows::new(row, nb, false);
        // SAFETY: as above.
        unsafe { tile::<B, D, _, 1, 1>(&row, acts, 0, &mut |_, _, v| *o = v) };
    }
}
