//! AVX2 activation quantizers (Q8_0, Q8_1, Q8_K). Each performs the same IEEE operations as its
//! scalar reference in `quant/q8_*.rs` (max of absolute values, one division, products rounded
//! half to even), so the bytes are identical; the tests check that.

use std::arch::x86_64::*;

use super::common::*;
use crate::quant::block::f32_to_f16;
use crate::quant::q8_0::BlockQ8_0;
use crate::quant::q8_1::BlockQ8_1;
use crate::quant::q8_k::BlockQ8K;
use crate::quant::QK_K;

/// Largest absolute value of 32 floats as four vectors.
#[inline]
#[target_feature(enable = "avx2")]
fn amax_32(v: &[__m256; 4]) -> __m256 {
    let sign = _mm256_set1_ps(-0.0);
    let mut m = _mm256_andnot_ps(sign, v[0]);
    for v in &v[1..] {
        m = _mm256_max_ps(m, _mm256_andnot_ps(sign, *v));
    }
    m
}

/// Horizontal maximum of eight floats.
#[inline]
#[target_feature(enable = "avx2")]
fn hmax(m: __m256) -> f32 {
    let m4 = _mm_max_ps(_mm256_extractf128_ps::<1>(m), _mm256_castps256_ps128(m));
    let m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    let m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    _mm_cvtss_f32(m4)
}

/// `round_half_even(v * mul)` as i32 lanes.
#[inline]
#[target_feature(enable = "avx2")]
fn round_scaled(v: __m256, mul: __m256) -> __m256i {
    _mm256_cvtps_epi32(_mm256_round_ps::<_MM_FROUND_TO_NEAREST_INT>(_mm256_mul_ps(
        v, mul,
    )))
}

/// Packs 32 i32 lanes (in order) into 32 saturated i8.
#[inline]
#[target_feature(enable = "avx2")]
fn pack_32(i: &[__m256i; 4]) -> __m256i {
    let a = _mm256_packs_epi32(i[0], i[1]);
    let b = _mm256_packs_epi32(i[2], i[3]);
    let p = _mm256_packs_epi16(a, b);
    // The packs work per 128-bit lane; restore element order.
    _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7))
}

#[inline]
#[target_feature(enable = "avx2")]
fn load_32f(x: &[f32]) -> [__m256; 4] {
    [ld8f(x), ld8f(&x[8..]), ld8f(&x[16..]), ld8f(&x[24..])]
}

#[target_feature(enable = "avx2,f16c")]
pub(in crate::quant) fn quantize_q8_0(src: &[f32], dst: &mut [BlockQ8_0]) {
    for (x, b) in src.chunks_exact(32).zip(dst.iter_mut()) {
        let v = load_32f(x);
        let amax = hmax(amax_32(&v));
        b.d = f32_to_f16(amax / 127.0);
        let mul = _mm256_set1_ps(if amax != 0.0 { 127.0 / amax } else { 0.0 });
        let i = v.map(|v| round_scaled(v, mul));
        st32i(&mut b.qs, pack_32(&i));
    }
}

#[target_feature(enable = "avx2,f16c")]
pub(in crate::quant) fn quantize_q8_1(src: &[f32], dst: &mut [BlockQ8_1]) {
    for (x, b) in src.chunks_exact(32).zip(dst.iter_mut()) {
        let v = load_32f(x);
        let amax = hmax(amax_32(&v));
        let d = amax / 127.0;
        let mul = _mm256_set1_ps(if amax != 0.0 { 127.0 / amax } else { 0.0 });
        let i = v.map(|v| round_scaled(v, mul));
        let sum = _mm256_add_epi32(_mm256_add_epi32(i[0], i[1]), _mm256_add_epi32(i[2], i[3]));
        b.d = f32_to_f16(d);
        b.s = f32_to_f16(d * hsum_i32_8(sum) as f32);
        st32i(&mut b.qs, pack_32(&i));
    }
}

#[target_feature(enable = "avx2,f16c")]
pub(in crate::quant) fn quantize_q8_k(src: &[f32], dst: &mut [BlockQ8K]) {
    for (x, b) in src.chunks_exact(QK_K).zip(dst.iter_mut()) {
        let mut m = _mm256_setzero_ps();
        for c in x.chunks_exact(32) {
            m = _mm256_max_ps(m, amax_32(&load_32f(c)));
        }
        let amax = hmax(m);
        if amax == 0.0 {
            *b = BlockQ8K::default();
            continue;
        }
        // The first element reaching the maximum magnitude gives the sign, as in the reference.
        let max = *x
            .iter()
            .find(|v| v.abs() == amax)
            .expect("amax comes from x");
        let iscale = -127.0 / max;
        let mul = _mm256_set1_ps(iscale);
        let cap = _mm256_set1_epi32(127);
        for (k, c) in x.chunks_exact(32).enumerate() {
            let i = load_32f(c).map(|v| _mm256_min_epi32(round_scaled(v, mul), cap));
            let s0 = hsum_i32_8(_mm256_add_epi32(i[0], i[1]));
            let s1 = hsum_i32_8(_mm256_add_epi32(i[2], i[3]));
            b.bsums[2 * k] = (s0 as i16).to_le_bytes();
            b.bsums[2 * k + 1] = (s1 as i16).to_le_bytes();
            st32i(&mut b.qs[32 * k..], pack_32(&i));
        }
        b.d = (1.0 / iscale).to_le_bytes();
    }
}
