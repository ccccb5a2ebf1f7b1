//! AVX2 dot products for the K-quants (Q2_K..Q6_K) against Q8_K activations.
//!
//! Each kernel dots one weight row with `R` activation rows, decoding each weight super-block
//! once. Each super-block's integer dot product is computed exactly (quants as unsigned bytes through
//! `vpmaddubsw`, group scales through `vpmaddwd`; offsets and minimums from Q8_K's `bsums`),
//! then combined in f32 exactly as the scalar reference does, so these kernels return the same
//! bits as the scalar ones.

use std::arch::x86_64::*;

use super::common::*;
use crate::quant::q2_k::BlockQ2K;
use crate::quant::q3_k::BlockQ3K;
use crate::quant::q4_k::{unpack_scales_mins, BlockQ4K};
use crate::quant::q5_k::BlockQ5K;
use crate::quant::q6_k::BlockQ6K;
use crate::quant::q8_k::BlockQ8K;

/// The 16 `bsums` of a Q8_K block as i16 lanes.
#[inline]
#[target_feature(enable = "avx2")]
fn bsums(y: &BlockQ8K) -> __m256i {
    ld32(y.bsums.as_flattened())
}

/// Σ_g scale[g] · bsum[g] over the 16 groups of 16 (`scales` as 16 i16 lanes).
#[inline]
#[target_feature(enable = "avx2")]
fn scaled_bsums(y: &BlockQ8K, scales: __m256i) -> i32 {
    hsum_i32_8(_mm256_madd_epi16(bsums(y), scales))
}

/// Bytes of `v` shifted right by `2 * s` bits, keeping the low two bits.
#[inline]
#[target_feature(enable = "avx2")]
fn crumb(v: __m256i, s: usize) -> __m256i {
    let shifted = _mm256_srl_epi16(v, _mm_cvtsi32_si128(2 * s as i32));
    _mm256_and_si256(shifted, _mm256_set1_epi8(3))
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::quant) fn dot_q2_k<const R: usize>(w: &[BlockQ2K], a: [&[BlockQ8K]; R]) -> [f32; R] {
    let a = a.map(|a| &a[..w.len()]);
    let mut sumf = [0f32; R];
    for (i, x) in w.iter().enumerate() {
        let sc = ld16(&x.scales);
        let sc16 = _mm256_cvtepu8_epi16(_mm_and_si128(sc, _mm_set1_epi8(15)));
        let mut sumi = [_mm256_setzero_si256(); R];
        for h in 0..2 {
            let q2 = ld32(&x.qs[32 * h..]);
            let half = half_scales(sc16, h);
            for s in 0..4 {
                let q = crumb(q2, s);
                let scv = scale_pair(half, s);
                for r in 0..R {
                    let yv = ld32i(&a[r][i].qs[32 * (4 * h + s)..]);
                    sumi[r] = _mm256_add_epi32(sumi[r], mul_scaled_16(q, yv, scv));
                }
            }
        }
        let mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16::<4>(sc), _mm_set1_epi8(15)));
        let (dx, dmx) = (f16(x.d), f16(x.dmin));
        for r in 0..R {
            let y = &a[r][i];
            let summs = scaled_bsums(y, mins);
            let dall = y.d() * dx;
            let dmin = y.d() * dmx;
            sumf[r] += dall * hsum_i32_8(sumi[r]) as f32 - dmin * summs as f32;
        }
    }
    sumf
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::quant) fn dot_q3_k<const R: usize>(w: &[BlockQ3K], a: [&[BlockQ8K]; R]) -> [f32; R] {
    let a = a.map(|a| &a[..w.len()]);
    let mut sumf = [0f32; R];
    for (i, x) in w.iter().enumerate() {
        let scales = x.unpacked_scales();
        let sc16 = _mm256_cvtepi8_epi16(ld16(&scales.map(|s| s as u8)));
        let hm = ld32(&x.hmask);
        let mut sumi = [_mm256_setzero_si256(); R];
        for h in 0..2 {
            let q3 = ld32(&x.qs[32 * h..]);
            let half = half_scales(sc16, h);
            for s in 0..4 {
                // q = u - 4 with u = low | 4·hbit in 0..8; the -4 goes through the bsums.
                let bit = _mm256_set1_epi8((1u8 << (4 * h + s)) as i8);
                let u = _mm256_or_si256(crumb(q3, s), select_bit(hm, bit, _mm256_set1_epi8(4)));
                let scv = scale_pair(half, s);
                for r in 0..R {
                    let yv = ld32i(&a[r][i].qs[32 * (4 * h + s)..]);
                    sumi[r] = _mm256_add_epi32(sumi[r], mul_scaled_16(u, yv, scv));
                }
            }
        }
        let dx = f16(x.d);
        for r in 0..R {
            let y = &a[r][i];
            let isum = hsum_i32_8(sumi[r]) - 4 * scaled_bsums(y, sc16);
            sumf[r] += dx * y.d() * isum as f32;
        }
    }
    sumf
}

/// Shared by Q4_K and Q5_K: Σ bsum[j] · min[j / 2].
#[inline]
#[target_feature(enable = "avx2")]
fn mins_dot(y: &BlockQ8K, mins: __m128i) -> i32 {
    let b = bsums(y);
    let pairs = _mm_hadd_epi16(_mm256_castsi256_si128(b), _mm256_extracti128_si256::<1>(b));
    hsum_i32_4(_mm_madd_epi16(pairs, mins))
}

/// The Q4_K/Q5_K kernel; `HIGH` adds Q5_K's fifth bits from `qh`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn dot_q45_k<const R: usize, const HIGH: bool>(
    d: [u8; 2],
    dmin: [u8; 2],
    scales: &[u8; 12],
    qs: &[u8; 128],
    qh: &[u8; 32],
    a: [&BlockQ8K; R],
    sumf: &mut [f32; R],
) {
    let (sc, m) = unpack_scales_mins(scales);
    let m4 = _mm256_set1_epi8(0x0f);
    let qh = ld32(qh);
    let mut sumi = [_mm256_setzero_si256(); R];
    for j in 0..4 {
        let q4 = ld32(&qs[32 * j..]);
        let mut lo = _mm256_and_si256(q4, m4);
        let mut hi = _mm256_and_si256(_mm256_srli_epi16::<4>(q4), m4);
        if HIGH {
            let b0 = _mm256_set1_epi8((1u8 << (2 * j)) as i8);
            let b1 = _mm256_set1_epi8((1u8 << (2 * j + 1)) as i8);
            lo = _mm256_or_si256(lo, select_bit(qh, b0, _mm256_set1_epi8(0x10)));
            hi = _mm256_or_si256(hi, select_bit(qh, b1, _mm256_set1_epi8(0x10)));
        }
        let s0 = _mm256_set1_epi16(sc[2 * j] as i16);
        let s1 = _mm256_set1_epi16(sc[2 * j + 1] as i16);
        for r in 0..R {
            let y0 = ld32i(&a[r].qs[64 * j..]);
            let y1 = ld32i(&a[r].qs[64 * j + 32..]);
            let p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, y0), s0);
            let p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, y1), s1);
            sumi[r] = _mm256_add_epi32(sumi[r], _mm256_add_epi32(p0, p1));
        }
    }
    let mins = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(u64::from_le_bytes(m) as i64));
    let (dx, dmx) = (f16(d), f16(dmin));
    for r in 0..R {
        let summs = mins_dot(a[r], mins);
        let d = dx * a[r].d();
        let dmin = dmx * a[r].d();
        sumf[r] += d * hsum_i32_8(sumi[r]) as f32 - dmin * summs as f32;
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::quant) fn dot_q4_k<const R: usize>(w: &[BlockQ4K], a: [&[BlockQ8K]; R]) -> [f32; R] {
    let a = a.map(|a| &a[..w.len()]);
    let mut sumf = [0f32; R];
    for (i, x) in w.iter().enumerate() {
        let y = std::array::from_fn(|r| &a[r][i]);
        dot_q45_k::<R, false>(x.d, x.dmin, &x.scales, &x.qs, &[0; 32], y, &mut sumf);
    }
    sumf
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::quant) fn dot_q5_k<const R: usize>(w: &[BlockQ5K], a: [&[BlockQ8K]; R]) -> [f32; R] {
    let a = a.map(|a| &a[..w.len()]);
    let mut sumf = [0f32; R];
    for (i, x) in w.iter().enumerate() {
        let y = std::array::from_fn(|r| &a[r][i]);
        dot_q45_k::<R, true>(x.d, x.dmin, &x.scales, &x.qs, &x.qh, y, &mut sumf);
    }
    sumf
}

/// Bit pair `s` of each byte of `qh`, moved to bits 4-5 (the high bits of a Q6_K quant).
#[inline]
#[target_feature(enable = "avx2")]
fn high2(qh: __m256i, s: usize) -> __m256i {
    _mm256_slli_epi16::<4>(crumb(qh, s))
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::quant) fn dot_q6_k<const R: usize>(w: &[BlockQ6K], a: [&[BlockQ8K]; R]) -> [f32; R] {
    let a = a.map(|a| &a[..w.len()]);
    let m4 = _mm256_set1_epi8(0x0f);
    let mut sumf = [0f32; R];
    for (i, x) in w.iter().enumerate() {
        let sc16 = _mm256_cvtepi8_epi16(ld16(&x.scales.map(|s| s as u8)));
        let mut sumi = [_mm256_setzero_si256(); R];
        for h in 0..2 {
            let half = half_scales(sc16, h);
            let qa = ld32(&x.ql[64 * h..]);
            let qb = ld32(&x.ql[64 * h + 32..]);
            let qh = ld32(&x.qh[32 * h..]);
            // Unsigned q in 0..64; the -32 offset goes through the bsums.
            let q = [
                _mm256_or_si256(_mm256_and_si256(qa, m4), high2(qh, 0)),
                _mm256_or_si256(_mm256_and_si256(qb, m4), high2(qh, 1)),
                _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16::<4>(qa), m4),
                    high2(qh, 2),
                ),
                _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16::<4>(qb), m4),
                    high2(qh, 3),
                ),
            ];
            for (k, q) in q.into_iter().enumerate() {
                let scv = scale_pair(half, k);
                for r in 0..R {
                    let yv = ld32i(&a[r][i].qs[32 * (4 * h + k)..]);
                    sumi[r] = _mm256_add_epi32(sumi[r], mul_scaled_16(q, yv, scv));
                }
            }
        }
        let dx = f16(x.d);
        for r in 0..R {
            let y = &a[r][i];
            let isum = hsum_i32_8(sumi[r]) - 32 * scaled_bsums(y, sc16);
            sumf[r] += dx * y.d() * isum as f32;
        }
    }
    sumf
}
