//! AVX-512 (BW, VNNI) dot products for Q4_K and Q6_K against Q8_K activations: the AVX2
//! kernels of `k_quants.rs` on 512-bit vectors, two groups of 32 quants per instruction, the
//! sub-block scales applied by `vpdpwssd`, and the integer sums of four activation rows reduced
//! together. The integer sums per super-block are exact and combined in f32 with the scalar
//! reference's operations, so the results are the scalar kernels' bits.

use std::arch::x86_64::*;

use super::common::*;
use crate::quant::q4_k::{unpack_scales_mins, BlockQ4K};
use crate::quant::q6_k::BlockQ6K;
use crate::quant::q8_k::BlockQ8K;

/// Two 256-bit halves as one vector (`lo` in the low half).
#[inline]
#[target_feature(enable = "avx512f")]
fn join(lo: __m256i, hi: __m256i) -> __m512i {
    _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi)
}

/// The i16 lanes of `scales` picked by `idx` (one index per i16 lane).
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
fn pick16(scales: __m512i, idx: __m512i) -> __m512i {
    _mm512_permutexvar_epi16(idx, scales)
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(in crate::quant) fn dot_q4_k<const R: usize>(w: &[BlockQ4K], a: [&[BlockQ8K]; R]) -> [f32; R] {
    for a in &a {
        assert!(a.len() >= w.len(), "dot_q4_k: activation row too short");
    }
    let m4 = _mm512_set1_epi8(0x0f);
    let idx: [__m512i; 4] = std::array::from_fn(|j| lane_index(2 * j as i16, false));
    let mut sumf = [0f32; R];
    for (i, x) in w.iter().enumerate() {
        let (sc, m) = unpack_scales_mins(&x.scales);
        let sc8 = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(u64::from_le_bytes(sc) as i64));
        let scales = _mm512_castsi128_si512(sc8);
        let mut sumi = [_mm512_setzero_si512(); R];
        for (j, &idx) in idx.iter().enumerate() {
            let q4 = ld32(&x.qs[32 * j..]);
            let q = _mm512_and_si512(join(q4, _mm256_srli_epi16::<4>(q4)), m4);
            let s = pick16(scales, idx);
            for r in 0..R {
                let y = ld64i(&a[r][i].qs[64 * j..]);
                sumi[r] = dpwssd(sumi[r], _mm512_maddubs_epi16(q, y), s);
            }
        }
        let sumi = hsum_i32_16_rows(sumi);
        let mins = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(u64::from_le_bytes(m) as i64));
        let (dx, dmx) = (f16(x.d), f16(x.dmin));
        for r in 0..R {
            let y = &a[r][i];
            let b = ld32(y.bsums.as_flattened());
            let pairs = _mm_hadd_epi16(_mm256_castsi256_si128(b), _mm256_extracti128_si256::<1>(b));
            let summs = hsum_i32_4(_mm_madd_epi16(pairs, mins));
            let d = dx * y.d();
            let dmin = dmx * y.d();
            sumf[r] += d * sumi[r] as f32 - dmin * summs as f32;
        }
    }
    sumf
}

/// Bit pair `s` of each byte of `qh`, moved to bits 4-5 (the high bits of a Q6_K quant).
#[inline]
#[target_feature(enable = "avx2")]
fn high2(qh: __m256i, s: i32) -> __m256i {
    let shifted = _mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * s));
    _mm256_slli_epi16::<4>(_mm256_and_si256(shifted, _mm256_set1_epi8(3)))
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(in crate::quant) fn dot_q6_k<const R: usize>(w: &[BlockQ6K], a: [&[BlockQ8K]; R]) -> [f32; R] {
    for a in &a {
        assert!(a.len() >= w.len(), "dot_q6_k: activation row too short");
    }
    let m4 = _mm256_set1_epi8(0x0f);
    let idx: [__m512i; 4] = std::array::from_fn(|k| lane_index(4 * k as i16, true));
    let mut sumf = [0f32; R];
    for (i, x) in w.iter().enumerate() {
        let sc16 = _mm256_cvtepi8_epi16(ld16(&x.scales.map(|s| s as u8)));
        let scales = _mm512_castsi256_si512(sc16);
        let mut sumi = [_mm512_setzero_si512(); R];
        for h in 0..2 {
            let qa = ld32(&x.ql[64 * h..]);
            let qb = ld32(&x.ql[64 * h + 32..]);
            let qh = ld32(&x.qh[32 * h..]);
            // Unsigned q in 0..64; the -32 offset goes through the bsums.
            let q0 = _mm256_or_si256(_mm256_and_si256(qa, m4), high2(qh, 0));
            let q1 = _mm256_or_si256(_mm256_and_si256(qb, m4), high2(qh, 1));
            let q2 = _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16::<4>(qa), m4),
                high2(qh, 2),
            );
            let q3 = _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16::<4>(qb), m4),
                high2(qh, 3),
            );
            let (z01, z23) = (join(q0, q1), join(q2, q3));
            let s01 = pick16(scales, idx[2 * h]);
            let s23 = pick16(scales, idx[2 * h + 1]);
            for r in 0..R {
                let y = &a[r][i].qs[128 * h..];
                let acc = dpwssd(sumi[r], _mm512_maddubs_epi16(z01, ld64i(y)), s01);
                sumi[r] = dpwssd(acc, _mm512_maddubs_epi16(z23, ld64i(&y[64..])), s23);
            }
        }
        let sumi = hsum_i32_16_rows(sumi);
        let dx = f16(x.d);
        for r in 0..R {
            let y = &a[r][i];
            let bs = hsum_i32_8(_mm256_madd_epi16(ld32(y.bsums.as_flattened()), sc16));
            let isum = sumi[r] - 32 * bs;
            sumf[r] += dx * y.d() * isum as f32;
        }
    }
    sumf
}
