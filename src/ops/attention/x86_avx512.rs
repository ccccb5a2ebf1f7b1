//! The one-token attention kernel on AVX-512 (+F16C, FMA): [`one_token`](super::one_token)'s
//! structure over 16-lane vectors, ggml's own width for this kernel.

use super::one_token::{self, Lanes};
use super::{Rows, Scores, DOT_STEP};
use std::arch::x86_64::*;

/// # Safety
/// The CPU must support AVX-512F, F16C and FMA; `hd` is a multiple of 64 and divides
/// `q.len()`, which `out.len()` equals.
#[target_feature(enable = "avx512f,f16c,fma")]
pub(super) unsafe fn attend(scores: Scores, q: &[f32], hd: usize, rows: &Rows, out: &mut [f32]) {
    // SAFETY: the features `__m512`'s methods need are enabled here; the rest is the caller's.
    unsafe { one_token::attend::<__m512>(scores, q, hd, rows, out) }
}

/// One chunk of [`chunked`](super::chunked)'s long attention.
///
/// # Safety
/// The CPU must support AVX512F, AVX512DQ, F16C, FMA; `hd` is a multiple of 64 and divides
/// `q.len()`; `part` holds `hd + 2` floats per head.
#[target_feature(enable = "avx512f,avx512dq,f16c,fma")]
pub(super) unsafe fn chunk(scores: Scores, q: &[f32], hd: usize, rows: &Rows, part: &mut [f32]) {
    // SAFETY: the features `__m512`'s methods need are enabled here; the rest is the caller's.
    unsafe { super::chunked::simd::kernel::<__m512>(scores, q, hd, rows, part) }
}

// SAFETY (every method): the caller has AVX-512F, F16C and FMA (the methods run only inlined
// into `attend` above); each load and store is unaligned and covers 16 elements of a slice
// asserted to hold them.
impl Lanes for __m512 {
    const N: usize = 16;

    #[inline(always)]
    unsafe fn widen(s: &[u16]) -> Self {
        assert!(s.len() >= 16);
        unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(s.as_ptr().cast())) }
    }

    #[inline(always)]
    unsafe fn load(s: &[f32]) -> Self {
        assert!(s.len() >= 16);
        unsafe { _mm512_loadu_ps(s.as_ptr()) }
    }

    #[inline(always)]
    unsafe fn round_store(d: &mut [u16], v: Self) {
        assert!(d.len() >= 16);
        unsafe {
            let h = _mm512_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v);
            _mm256_storeu_si256(d.as_mut_ptr().cast(), h)
        }
    }

    #[inline(always)]
    unsafe fn round(v: Self) -> Self {
        unsafe { _mm512_cvtph_ps(_mm512_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v)) }
    }

    #[inline(always)]
    unsafe fn store(d: &mut [f32], v: Self) {
        assert!(d.len() >= 16);
        unsafe { _mm512_storeu_ps(d.as_mut_ptr(), v) }
    }

    #[inline(always)]
    unsafe fn splat(x: f32) -> Self {
        unsafe { _mm512_set1_ps(x) }
    }

    #[inline(always)]
    unsafe fn mul(a: Self, b: Self) -> Self {
        unsafe { _mm512_mul_ps(a, b) }
    }

    #[inline(always)]
    unsafe fn sub(a: Self, b: Self) -> Self {
        unsafe { _mm512_sub_ps(a, b) }
    }

    #[inline(always)]
    unsafe fn exp(x: Self) -> Self {
        crate::ops::expf::x86::v_expf(x)
    }

    #[inline(always)]
    unsafe fn fma(a: Self, b: Self, c: Self) -> Self {
        unsafe { _mm512_fmadd_ps(a, b, c) }
    }

    #[inline(always)]
    unsafe fn dot(q: &[f32], k: &[f32]) -> f32 {
        let mut acc = [unsafe { _mm512_setzero_ps() }; 4];
        for (i, qc) in q.chunks_exact(DOT_STEP).enumerate() {
            for (j, a) in acc.iter_mut().enumerate() {
                let o = 16 * j;
                *a = unsafe {
                    Self::fma(Self::load(&k[i * DOT_STEP + o..]), Self::load(&qc[o..]), *a)
                };
            }
        }
        unsafe { finish_dot(acc) }
    }
}

/// The dot's accumulators added per lane as `(a0 + a2) + (a1 + a3)`, then the lanes in
/// `reduce16`'s order without a trip through memory: the upper half onto the lower, the upper
/// quarter onto the lower, then `(q0 + q2) + (q1 + q3)` (addition is commutative, so the
/// operand order inside each sum does not change the bits).
#[inline(always)]
unsafe fn finish_dot(acc: [__m512; 4]) -> f32 {
    // SAFETY: as for the methods above (AVX-512F in the inlining caller).
    unsafe {
        let x = _mm512_add_ps(_mm512_add_ps(acc[0], acc[2]), _mm512_add_ps(acc[1], acc[3]));
        let lo = _mm512_castps512_ps256(x);
        let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(x)));
        let h = _mm256_add_ps(hi, lo);
        let q = _mm_add_ps(_mm256_extractf128_ps::<1>(h), _mm256_castps256_ps128(h));
        let pairs = _mm_add_ps(q, _mm_movehl_ps(q, q));
        _mm_cvtss_f32(_mm_add_ss(pairs, _mm_movehdup_ps(pairs)))
    }
}
