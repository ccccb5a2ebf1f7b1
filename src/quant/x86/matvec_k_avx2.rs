//! AVX2 matrix-vector kernel for the K-quants Q4_K, Q5_K and Q6_K (generation, one token):
//! eight weight rows per step through `tiles_k_avx2::tile` (eight independent accumulation
//! chains, one reduction for all eight per super-block), prefetching the next eight rows, one
//! contiguous run of memory, at the pace the current ones are read. Results are `vec_dot`'s
//! bits, as for the tiles.

use super::tiles_k_avx2::{tile, KFormat, RawK};
use crate::quant::block::as_blocks;
use crate::quant::gemm::PackedActs;
use crate::quant::q8_k::BlockQ8K;

/// Weight rows per step.
const R: usize = 8;

/// `out[r] = vec_dot(W[r], act)` for the `out.len()` weight rows in `w` and the token packed by
/// `quant::gemm::pack_single` (its Q8_K row in `acts.raw`).
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn matvec<F: KFormat>(w: &[u8], acts: &PackedActs, out: &mut [f32]) {
    let row_bytes = acts.n_blocks * std::mem::size_of::<F::W>();
    let y = [as_blocks::<BlockQ8K>(&acts.raw[..acts.raw_stride])];
    let row = |r: usize| as_blocks::<F::W>(&w[r * row_bytes..][..row_bytes]);
    let full = out.len() / R * R;
    let (head, tail) = out.split_at_mut(full);
    for (i, o) in head.chunks_exact_mut(R).enumerate() {
        let rows: [&[F::W]; R] = std::array::from_fn(|r| row(R * i + r));
        let rows = RawK::<F, R, true>::new(rows, row_bytes);
        // SAFETY: the caller guarantees the CPU features; `rows` has `R` rows.
        o.copy_from_slice(&unsafe { tile::<F, _, R, 1>(&rows, y) }[..R]);
    }
    for (i, o) in tail.iter_mut().enumerate() {
        let one = RawK::<F, 1, false>::new([row(full + i)], row_bytes);
        // SAFETY: as above, one row.
        *o = unsafe { tile::<F, _, 1, 1>(&one, y) }[0];
    }
}
