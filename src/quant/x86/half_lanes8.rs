//! F16 and BF16 weight products in tinyBLAS's AVX2 order (llama.cpp's `llamafile/sgemm.cpp`,
//! which its AVX2 build runs for these weights whenever a row's length is a multiple of eight):
//! one 8-lane FMA accumulator per weight row and token, element `i` in lane `i % 8`, reduced
//! by [`hsum_f32_8`] (tinyBLAS's `hsum`). With one accumulator per product, a tile of rows ×
//! tokens needs only one register per product, so tiles can be wider than in `ggml_vec_dot_f16`'s
//! order (four accumulators per product): each widened weight vector serves more tokens.
//!
//! The AVX-512 tables hold two of these accumulators in one 512-bit register ([`tile_pairs`]:
//! two weight rows side by side against a token broadcast to both halves), so they do the same
//! operations on the same lanes and give the AVX2 kernels' bits.

use std::arch::x86_64::*;

use super::common::{halves_512, hsum_f32_8};
use super::half::{Acts, Half};

/// Elements per accumulator: rows whose length is a multiple of this take this order.
pub(super) const LANES: usize = 8;

/// `out[r][t]` = the product of weight row `w[r]` and activation row `x[t]` (`n` elements each,
/// `n` a multiple of [`LANES`]).
///
/// # Safety
/// `w` and `x` hold `n` elements each (2 and 4 bytes); the CPU must support AVX2, FMA, F16C.
// Indexing reads better than iterators over two array dimensions at once.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
pub(super) unsafe fn tile<H: Half, X: Acts, const R: usize, const T: usize>(
    w: [*const u8; R],
    x: [X; T],
    n: usize,
    out: &mut [[f32; T]; R],
) {
    debug_assert!(n.is_multiple_of(LANES));
    let mut acc = [[_mm256_setzero_ps(); T]; R];
    let mut i = 0;
    // SAFETY: offsets stay below `n` elements, which the caller guarantees.
    unsafe {
        while i < n {
            let xv: [__m256; T] = std::array::from_fn(|t| x[t].load8(i));
            for r in 0..R {
                let wv = H::widen8(w[r].add(2 * i));
                for t in 0..T {
                    acc[r][t] = _mm256_fmadd_ps(wv, xv[t], acc[r][t]);
                }
            }
            i += LANES;
        }
        for r in 0..R {
            for t in 0..T {
                out[r][t] = hsum_f32_8(acc[r][t]);
            }
        }
    }
}

/// [`tile`] in 512-bit registers: two weight rows side by side in one register (lanes 0-7 row
/// `2p`, lanes 8-15 row `2p + 1`) against each token's eight elements in both halves, so each
/// half is one of [`tile`]'s accumulators and the bits are the same. An odd `R` runs [`tile`].
///
/// # Safety
/// As for [`tile`]; the CPU must also support AVX-512 F and DQ.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
pub(super) unsafe fn tile_pairs<H: Half, X: Acts, const R: usize, const T: usize>(
    w: [*const u8; R],
    x: [X; T],
    n: usize,
    out: &mut [[f32; T]; R],
) {
    if R % 2 == 1 {
        // SAFETY: forwarded from the caller.
        return unsafe { tile::<H, X, R, T>(w, x, n, out) };
    }
    debug_assert!(n.is_multiple_of(LANES));
    let pairs = R / 2;
    // `R` entries because an array length cannot be `R / 2`; the first `pairs` are used.
    let mut acc = [[_mm512_setzero_ps(); T]; R];
    let mut i = 0;
    // SAFETY: offsets stay below `n` elements, which the caller guarantees.
    unsafe {
        while i < n {
            let xv: [__m512; T] = std::array::from_fn(|t| _mm512_broadcast_f32x8(x[t].load8(i)));
            for p in 0..pairs {
                let wv = H::widen8_pair(w[2 * p].add(2 * i), w[2 * p + 1].add(2 * i));
                for t in 0..T {
                    acc[p][t] = _mm512_fmadd_ps(wv, xv[t], acc[p][t]);
                }
            }
            i += LANES;
        }
        for p in 0..pairs {
            for t in 0..T {
                let [lo, hi] = halves_512(acc[p][t]);
                out[2 * p][t] = hsum_f32_8(lo);
                out[2 * p + 1][t] = hsum_f32_8(hi);
            }
        }
    }
}
