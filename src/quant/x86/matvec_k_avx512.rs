//! AVX-512 (BW, VNNI) matrix-vector kernels for Q4_K and Q6_K (generation, one token): the
//! AVX2 kernels' structure (`matvec_k_avx2.rs`: eight rows per step, the next eight prefetched
//! into L2, one f32 step per super-block for all eight rows) with 512-bit bodies, two groups of
//! 32 quants per instruction and the sub-block scales applied by `vpdpwssd`. About half the
//! instructions per weight byte of the AVX2 kernels, which bound a thread's generation rate.
//! The integer sums per row and super-block are exact and the f32 step is the AVX2 kernels',
//! so the results are the scalar reference's bits.

use std::arch::x86_64::*;

use super::common::{dpwssd, lane_index, ld16, ld32, ld64i};
use super::matvec_k_avx2::{bsum_pairs, eight_row_steps, q4_k_step, q6_k_step, R};
use crate::quant::gemm::PackedActs;
use crate::quant::q4_k::{scales_mins_words, BlockQ4K};
use crate::quant::q6_k::BlockQ6K;
use crate::quant::q8_k::BlockQ8K;

/// 64 bytes from the start of `s`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
fn ld64(s: &[u8]) -> __m512i {
    assert!(s.len() >= 64);
    // SAFETY: at least 64 readable bytes; unaligned load.
    unsafe { _mm512_loadu_si512(s.as_ptr().cast()) }
}

/// A vector of i16 lanes holding `lo` in its low 256 bits and `hi` in its high 256 bits.
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
fn halves_of(lo: i16, hi: i16) -> __m512i {
    _mm512_inserti64x4::<1>(
        _mm512_castsi256_si512(_mm256_set1_epi16(lo)),
        _mm256_set1_epi16(hi),
    )
}

/// The sum of the two 256-bit halves of `v`, lane by lane.
#[inline]
#[target_feature(enable = "avx512f")]
fn fold(v: __m512i) -> __m256i {
    _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64::<1>(v))
}

/// The Q4_K matrix-vector kernel (see the module doc).
///
/// # Safety
/// The CPU must support AVX2, FMA, F16C and AVX-512 F/BW/VL/VNNI.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn matvec_q4_k(w: &[u8], acts: &PackedActs, out: &mut [f32]) {
    let pairs = bsum_pairs(acts);
    // Group pair j (32 bytes of quants: low nibbles group 2j, high nibbles 2j+1) meets the
    // token's 64 quants at 64j, scaled by scales 2j and 2j+1.
    let idx: [__m512i; 4] = std::array::from_fn(|j| lane_index(2 * j as i16, false));
    let m4 = _mm512_set1_epi8(0x0f);
    let step = |x: &[&BlockQ4K; R], ys: &BlockQ8K, sb: usize| {
        let mut isum = [_mm256_setzero_si256(); R];
        let mut summs = [_mm256_setzero_si256(); R];
        for r in 0..R {
            let (sc, m) = scales_mins_words(&x[r].scales);
            let scales = _mm512_castsi128_si512(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(sc as i64)));
            let m = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(m as i64));
            summs[r] = _mm256_zextsi128_si256(_mm_madd_epi16(pairs[sb], m));
            let mut acc = _mm512_setzero_si512();
            for (j, &idx) in idx.iter().enumerate() {
                let q4 = ld32(&x[r].qs[32 * j..]);
                let q = _mm512_and_si512(
                    _mm512_inserti64x4::<1>(_mm512_castsi256_si512(q4), _mm256_srli_epi16::<4>(q4)),
                    m4,
                );
                let p = _mm512_maddubs_epi16(q, ld64i(&ys.qs[64 * j..]));
                acc = dpwssd(acc, p, _mm512_permutexvar_epi16(idx, scales));
            }
            isum[r] = fold(acc);
        }
        q4_k_step(x, ys, &isum, &summs)
    };
    // SAFETY: the caller guarantees the CPU features.
    unsafe { eight_row_steps::<super::tiles_k_avx2::Q4K>(w, acts, out, step) };
}

/// The Q6_K matrix-vector kernel (see the module doc).
///
/// # Safety
/// The CPU must support AVX2, FMA, F16C and AVX-512 F/BW/VL/VNNI.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn matvec_q6_k(w: &[u8], acts: &PackedActs, out: &mut [f32]) {
    let m4 = _mm512_set1_epi8(0x0f);
    let m30 = _mm512_set1_epi8(0x30);
    // Half h of a super-block: 64 bytes of low bits `ql[64h..]` (quants 0..32 and 32..64 in
    // their low nibbles, 64..96 and 96..128 in their high ones) and 32 bytes of high bit pairs
    // `qh[32h..]` (pairs 0, 1, 2, 3 of each byte for the four runs of 32). Each run's pair is
    // moved to bits 4-5 by a per-half shift of the high bits copied into both halves.
    let shift01 = halves_of(4, 2); // left: pairs 0 and 1
    let shift23 = halves_of(0, 2); // right: pairs 2 and 3
                                   // Quants 64k..64k+64 of the super-block meet scales 4k..4k+4, one per 16 quants.
    let idx: [__m512i; 4] = std::array::from_fn(|k| lane_index(4 * k as i16, true));
    let step = |x: &[&BlockQ6K; R], ys: &BlockQ8K, _sb: usize| {
        let bsums = ld32(ys.bsums.as_flattened());
        let mut isum = [_mm256_setzero_si256(); R];
        for r in 0..R {
            let xr = x[r];
            let sc16 = _mm256_cvtepi8_epi16(ld16(&xr.scales.map(|s| s as u8)));
            let scales = _mm512_castsi256_si512(sc16);
            // The −32 offset of every quant, through the token's group sums.
            let bias = _mm256_slli_epi32::<5>(_mm256_madd_epi16(bsums, sc16));
            let mut acc = _mm512_setzero_si512();
            for h in 0..2 {
                let ql = ld64(&xr.ql[64 * h..]);
                let qh = _mm512_broadcast_i64x4(ld32(&xr.qh[32 * h..]));
                let z01 = _mm512_or_si512(
                    _mm512_and_si512(ql, m4),
                    _mm512_and_si512(_mm512_sllv_epi16(qh, shift01), m30),
                );
                let z23 = _mm512_or_si512(
                    _mm512_and_si512(_mm512_srli_epi16::<4>(ql), m4),
                    _mm512_and_si512(_mm512_srlv_epi16(qh, shift23), m30),
                );
                let yh = &ys.qs[128 * h..];
                let p01 = _mm512_maddubs_epi16(z01, ld64i(yh));
                let p23 = _mm512_maddubs_epi16(z23, ld64i(&yh[64..]));
                acc = dpwssd(acc, p01, _mm512_permutexvar_epi16(idx[2 * h], scales));
                acc = dpwssd(acc, p23, _mm512_permutexvar_epi16(idx[2 * h + 1], scales));
            }
            isum[r] = _mm256_sub_epi32(fold(acc), bias);
        }
        q6_k_step(x, ys, &isum)
    };
    // SAFETY: the caller guarantees the CPU features.
    unsafe { eight_row_steps::<super::tiles_k_avx2::Q6K>(w, acts, out, step) };
}
