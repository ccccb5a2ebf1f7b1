//! NEON matrix-vector kernel for the K-quants Q4_K, Q5_K and Q6_K (generation, one token): four
//! weight rows per step through `tiles_k::superblock` straight from the weight super-blocks
//! (four independent accumulation chains), fetching the next four rows, one contiguous run of
//! memory, at the pace these are read. Results are the bits of the variant's `vec_dot`, as for
//! the tiles.

use super::tiles_k::{superblock, KFormat, Prep};
use super::{prefetch, Dot4};
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
    let y = as_blocks::<BlockQ8K>(&acts.raw[..acts.raw_stride]);
    let full = out.len() / STEP * STEP;
    let (head, tail) = out.split_at_mut(full);
    for (o, rows) in head.chunks_exact_mut(STEP).zip(w.chunks_exact(STEP * nsb)) {
        // SAFETY: the caller guarantees `D`'s features.
        let v = unsafe { rows_dot::<F, D, STEP>(rows, nsb, y, true) };
        o.copy_from_slice(&v);
    }
    for (o, row) in tail.iter_mut().zip(w[full * nsb..].chunks_exact(nsb)) {
        // SAFETY: as above.
        *o = unsafe { rows_dot::<F, D, 1>(row, nsb, y, false) }[0];
    }
}

/// `vec_dot` of each of the `RR` rows in `rows` (`nsb` super-blocks each) with `y`; with
/// `PF`, prefetches the `RR` rows after these.
///
/// # Safety
/// The CPU must have `D`'s features.
#[inline(always)]
unsafe fn rows_dot<F: KFormat, D: Dot4, const RR: usize>(
    rows: &[F::W],
    nsb: usize,
    y: &[BlockQ8K],
    pf: bool,
) -> [f32; RR] {
    assert!(rows.len() == RR * nsb && y.len() == nsb);
    let sb_bytes = size_of::<F::W>();
    // The next rows are as many bytes on as these; super-block `sb` of all of them fetches one
    // `RR`-th of that run.
    let ahead = rows.as_ptr().cast::<u8>().wrapping_add(RR * nsb * sb_bytes);
    let mut sumf = [[0f32; 1]; RR];
    for (sb, ys) in y.iter().enumerate() {
        if pf {
            prefetch(ahead.wrapping_add(RR * sb * sb_bytes), RR * sb_bytes);
        }
        let x: [&F::W; RR] = std::array::from_fn(|r| &rows[r * nsb + sb]);
        let prep: [Prep; RR] = x.map(F::prepare);
        let prep: [&Prep; RR] = std::array::from_fn(|r| &prep[r]);
        // SAFETY: the caller guarantees `D`'s features.
        unsafe { superblock::<F, D, RR, 1>(|r, j| F::quants(x[r], j), prep, [ys], &mut sumf) };
    }
    sumf.map(|[v]| v)
}
