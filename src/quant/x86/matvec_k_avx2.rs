//! AVX2 matrix-vector kernels for the K-quants Q4_K, Q5_K and Q6_K (generation, one token):
//! eight weight rows per step, prefetching the next eight rows (one contiguous run of memory)
//! at the pace the current ones are read. Results are `vec_dot`'s bits, as for the tiles.
//!
//! Q4_K and Q6_K, most of a generated token's weights, have kernels of their own: a generation
//! step on two cores was bound by these kernels' instructions, not by memory (Q6_K decoded
//! through the batch tile streamed 6 GB/s per core, Q4_K 10). Each row's super-block is
//! decoded with unrolled constant shuffles and shifts, the token's per-super-block terms (its
//! bsum pairs) are computed once for all rows, and the eight rows' exact integer sums are
//! reduced together and combined in f32 with the scalar reference's operations and order.
//! Q5_K (and the last rows of a matrix that are not a whole step) take the batch tile
//! (`tiles_k_avx2::tile`).

use std::arch::x86_64::*;

use super::common::ld32;
use super::tiles_k_avx2::{tile, KFormat, RawK};
use crate::quant::block::as_blocks;
use crate::quant::gemm::PackedActs;
use crate::quant::q4_k::{scales_mins_words, BlockQ4K};
use crate::quant::q6_k::BlockQ6K;
use crate::quant::q8_k::BlockQ8K;

/// Weight rows per step.
pub(super) const R: usize = 8;

/// `out[r] = vec_dot(W[r], act)` for the `out.len()` weight rows in `w` and the token packed by
/// `quant::gemm::pack_single` (its Q8_K row in `acts.raw`), through the batch tile.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn matvec<F: KFormat>(w: &[u8], acts: &PackedActs, out: &mut [f32]) {
    let row_bytes = acts.n_blocks * std::mem::size_of::<F::W>();
    let full = out.len() / R * R;
    // SAFETY: the caller guarantees the CPU features.
    unsafe { tiled_rows::<F>(w, acts, row_bytes, 0..full, out) };
    let (_, tail) = out.split_at_mut(full);
    // SAFETY: as above.
    unsafe { tail_rows::<F>(w, acts, row_bytes, full, tail) };
}

/// Rows `rows` (a multiple of `R`) through the tile, `R` at a time, into `out[rows]`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tiled_rows<F: KFormat>(
    w: &[u8],
    acts: &PackedActs,
    row_bytes: usize,
    rows: std::ops::Range<usize>,
    out: &mut [f32],
) {
    let y = [as_blocks::<BlockQ8K>(&acts.raw[..acts.raw_stride])];
    let row = |r: usize| as_blocks::<F::W>(&w[r * row_bytes..][..row_bytes]);
    for r0 in rows.step_by(R) {
        let group: [&[F::W]; R] = std::array::from_fn(|r| row(r0 + r));
        let group = RawK::<F, R, true>::new(group, row_bytes);
        // SAFETY: the caller guarantees the CPU features; `group` has `R` rows.
        out[r0..r0 + R].copy_from_slice(&unsafe { tile::<F, _, R, 1>(&group, y) }[..R]);
    }
}

/// The rows from `first` that do not make a whole step, one at a time, into `tail`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn tail_rows<F: KFormat>(
    w: &[u8],
    acts: &PackedActs,
    row_bytes: usize,
    first: usize,
    tail: &mut [f32],
) {
    let y = [as_blocks::<BlockQ8K>(&acts.raw[..acts.raw_stride])];
    for (i, o) in tail.iter_mut().enumerate() {
        let wr = as_blocks::<F::W>(&w[(first + i) * row_bytes..][..row_bytes]);
        let one = RawK::<F, 1, false>::new([wr], row_bytes);
        // SAFETY: the caller guarantees the CPU features; one row.
        *o = unsafe { tile::<F, _, 1, 1>(&one, y) }[0];
    }
}

/// Lane `i` of the result is the sum of the eight i32 lanes of `v[i]`.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) fn hsum_8x8(v: &[__m256i; R]) -> __m256i {
    let a = _mm256_hadd_epi32(v[0], v[1]);
    let b = _mm256_hadd_epi32(v[2], v[3]);
    let c = _mm256_hadd_epi32(v[4], v[5]);
    let d = _mm256_hadd_epi32(v[6], v[7]);
    let ab = _mm256_hadd_epi32(a, b);
    let cd = _mm256_hadd_epi32(c, d);
    _mm256_add_epi32(
        _mm256_permute2x128_si256::<0x20>(ab, cd),
        _mm256_permute2x128_si256::<0x31>(ab, cd),
    )
}

/// The f16 `get` picks from each of the eight blocks `x`, as eight f32 lanes.
#[inline]
#[target_feature(enable = "avx2,f16c")]
pub(super) fn halves<B>(x: &[&B; R], get: impl Fn(&B) -> [u8; 2]) -> __m256 {
    let h: [i16; R] = std::array::from_fn(|r| i16::from_le_bytes(get(x[r])));
    _mm256_cvtph_ps(_mm_setr_epi16(
        h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7],
    ))
}

/// Prefetches the bytes of the next step's rows that match super-block `sb` of this step's:
/// the next `R` rows are one run of `R · row_bytes` bytes right after this step's, read at the
/// pace of `R` super-blocks per super-block here.
///
/// Into L2, not L1: eight rows of a wide matrix outgrow L1 (Q6_K `ffn_down` of Qwen2.5-1.5B is
/// 8 × 7350 bytes), so fetching the next step into L1 evicted the rows being read, and its
/// misses held the line-fill buffers the current loads needed. On a 2-core Zen 4 the streaming
/// rate of one thread went from 8.8 to 18 GB/s (Q6_K) and 13 to 17 GB/s (Q4_K) with this
/// hint alone (`tests/matvec_bench.rs`).
#[inline(always)]
pub(super) fn prefetch_next(group: *const u8, row_bytes: usize, sb: usize, sb_bytes: usize) {
    let at = group.wrapping_add(R * row_bytes + R * sb * sb_bytes);
    for line in (0..R * sb_bytes).step_by(64) {
        // SAFETY: prefetches never fault, wherever they point.
        unsafe { _mm_prefetch::<_MM_HINT_T1>(at.wrapping_add(line).cast()) };
    }
}

/// The loops every K-quant matrix-vector kernel shares: `R` rows at a time, the next `R`
/// prefetched super-block by super-block, and per super-block `step(x, y, sb)`, the `R` rows'
/// f32 terms from their blocks `x` and the token's block `y`, summed in order into each row's
/// result. The rows left over from whole steps take the batch tile.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn eight_row_steps<F: KFormat>(
    w: &[u8],
    acts: &PackedActs,
    out: &mut [f32],
    mut step: impl FnMut(&[&F::W; R], &BlockQ8K, usize) -> __m256,
) {
    let nsb = acts.n_blocks;
    let sb_bytes = std::mem::size_of::<F::W>();
    let row_bytes = nsb * sb_bytes;
    let y = &as_blocks::<BlockQ8K>(&acts.raw[..acts.raw_stride])[..nsb];
    let full = out.len() / R * R;
    for r0 in (0..full).step_by(R) {
        let group = &w[r0 * row_bytes..][..R * row_bytes];
        let rows: [&[F::W]; R] =
            std::array::from_fn(|r| as_blocks(&group[r * row_bytes..][..row_bytes]));
        let mut sumf = _mm256_setzero_ps();
        for (sb, ys) in y.iter().enumerate() {
            prefetch_next(group.as_ptr(), row_bytes, sb, sb_bytes);
            let x: [&F::W; R] = std::array::from_fn(|r| &rows[r][sb]);
            sumf = _mm256_add_ps(sumf, step(&x, ys, sb));
        }
        // SAFETY: eight writable floats at `r0`; unaligned store.
        unsafe { _mm256_storeu_ps(out[r0..r0 + R].as_mut_ptr(), sumf) };
    }
    let (_, tail) = out.split_at_mut(full);
    // SAFETY: the caller guarantees the CPU features.
    unsafe { tail_rows::<F>(w, acts, row_bytes, full, tail) };
}

/// Q4_K's f32 step for eight rows, the scalar reference's: `d·isum − dmin·summs` with
/// `d = dx·yd`, `dmin = dmin_x·yd`, from each row's exact integer sums.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn q4_k_step(
    x: &[&BlockQ4K; R],
    ys: &BlockQ8K,
    isum: &[__m256i; R],
    summs: &[__m256i; R],
) -> __m256 {
    let yd = _mm256_set1_ps(ys.d());
    let d = _mm256_mul_ps(halves(x, |b: &BlockQ4K| b.d), yd);
    let dmin = _mm256_mul_ps(halves(x, |b: &BlockQ4K| b.dmin), yd);
    let isum = _mm256_cvtepi32_ps(hsum_8x8(isum));
    let summs = _mm256_cvtepi32_ps(hsum_8x8(summs));
    _mm256_sub_ps(_mm256_mul_ps(d, isum), _mm256_mul_ps(dmin, summs))
}

/// Q6_K's f32 step for eight rows, the scalar reference's: `dx·yd·isum`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn q6_k_step(x: &[&BlockQ6K; R], ys: &BlockQ8K, isum: &[__m256i; R]) -> __m256 {
    let d = _mm256_mul_ps(halves(x, |b: &BlockQ6K| b.d), _mm256_set1_ps(ys.d()));
    _mm256_mul_ps(d, _mm256_cvtepi32_ps(hsum_8x8(isum)))
}

/// The token's Q8_K bsums summed in pairs, one per 32 quants (Q4_K's minimums' groups), for
/// each super-block.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) fn bsum_pairs(acts: &PackedActs) -> Vec<__m128i> {
    as_blocks::<BlockQ8K>(&acts.raw[..acts.raw_stride])[..acts.n_blocks]
        .iter()
        .map(|y| {
            let b = ld32(y.bsums.as_flattened());
            _mm_hadd_epi16(_mm256_castsi256_si128(b), _mm256_extracti128_si256::<1>(b))
        })
        .collect()
}

/// A `vpshufb` pattern putting i16 word `lo` of each 128-bit lane in every word of the low lane
/// and word `hi` in every word of the high lane.
#[inline]
#[target_feature(enable = "avx2")]
fn words(lo: usize, hi: usize) -> __m256i {
    let (l, h) = ((2 * lo) as i16, (2 * hi) as i16);
    let (l, h) = (l | (l + 1) << 8, h | (h + 1) << 8);
    _mm256_setr_epi16(l, l, l, l, l, l, l, l, h, h, h, h, h, h, h, h)
}

/// The Q4_K matrix-vector kernel (see the module doc).
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn matvec_q4_k(w: &[u8], acts: &PackedActs, out: &mut [f32]) {
    let pairs = bsum_pairs(acts);
    let m4 = _mm256_set1_epi8(0x0f);
    let step = |x: &[&BlockQ4K; R], ys: &BlockQ8K, sb: usize| {
        let mut isum = [_mm256_setzero_si256(); R];
        let mut summs = [_mm256_setzero_si256(); R];
        for r in 0..R {
            let (sc, m) = scales_mins_words(&x[r].scales);
            let sc = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(sc as i64)));
            let m = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(m as i64));
            summs[r] = _mm256_zextsi128_si256(_mm_madd_epi16(pairs[sb], m));
            let mut acc = _mm256_setzero_si256();
            for i in 0..4 {
                let q = ld32(&x[r].qs[32 * i..]);
                let lo = _mm256_and_si256(q, m4);
                let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(q), m4);
                let s0 = _mm256_shuffle_epi8(sc, words(2 * i, 2 * i));
                let s1 = _mm256_shuffle_epi8(sc, words(2 * i + 1, 2 * i + 1));
                let y0 = super::common::ld32i(&ys.qs[64 * i..]);
                let y1 = super::common::ld32i(&ys.qs[64 * i + 32..]);
                let p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, y0), s0);
                let p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, y1), s1);
                acc = _mm256_add_epi32(acc, _mm256_add_epi32(p0, p1));
            }
            isum[r] = acc;
        }
        q4_k_step(x, ys, &isum, &summs)
    };
    // SAFETY: the caller guarantees the CPU features.
    unsafe { eight_row_steps::<super::tiles_k_avx2::Q4K>(w, acts, out, step) };
}

/// The Q6_K matrix-vector kernel (see the module doc).
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn matvec_q6_k(w: &[u8], acts: &PackedActs, out: &mut [f32]) {
    let m4 = _mm256_set1_epi8(0x0f);
    let m30 = _mm256_set1_epi8(0x30);
    let step = |x: &[&BlockQ6K; R], ys: &BlockQ8K, _sb: usize| {
        let bsums = ld32(ys.bsums.as_flattened());
        let mut isum = [_mm256_setzero_si256(); R];
        for r in 0..R {
            let xr = x[r];
            let sc16 = _mm256_cvtepi8_epi16(super::common::ld16(&xr.scales.map(|s| s as u8)));
            // The −32 offset of every quant, through the token's group sums.
            let bias = _mm256_slli_epi32::<5>(_mm256_madd_epi16(bsums, sc16));
            let mut acc = _mm256_setzero_si256();
            for h in 0..2 {
                // Both lanes: the eight scales of this half.
                let sch = if h == 0 {
                    _mm256_permute2x128_si256::<0x00>(sc16, sc16)
                } else {
                    _mm256_permute2x128_si256::<0x11>(sc16, sc16)
                };
                let qa = ld32(&xr.ql[64 * h..]);
                let qb = ld32(&xr.ql[64 * h + 32..]);
                let qh = ld32(&xr.qh[32 * h..]);
                let q = [
                    _mm256_or_si256(
                        _mm256_and_si256(qa, m4),
                        _mm256_and_si256(_mm256_slli_epi16::<4>(qh), m30),
                    ),
                    _mm256_or_si256(
                        _mm256_and_si256(qb, m4),
                        _mm256_and_si256(_mm256_slli_epi16::<2>(qh), m30),
                    ),
                    _mm256_or_si256(
                        _mm256_and_si256(_mm256_srli_epi16::<4>(qa), m4),
                        _mm256_and_si256(qh, m30),
                    ),
                    _mm256_or_si256(
                        _mm256_and_si256(_mm256_srli_epi16::<4>(qb), m4),
                        _mm256_and_si256(_mm256_srli_epi16::<2>(qh), m30),
                    ),
                ];
                for (s, q) in q.into_iter().enumerate() {
                    let yv = super::common::ld32i(&ys.qs[128 * h + 32 * s..]);
                    let scv = _mm256_shuffle_epi8(sch, words(2 * s, 2 * s + 1));
                    let p = _mm256_madd_epi16(_mm256_maddubs_epi16(q, yv), scv);
                    acc = _mm256_add_epi32(acc, p);
                }
            }
            isum[r] = _mm256_sub_epi32(acc, bias);
        }
        q6_k_step(x, ys, &isum)
    };
    // SAFETY: the caller guarantees the CPU features.
    unsafe { eight_row_steps::<super::tiles_k_avx2::Q6K>(w, acts, out, step) };
}
