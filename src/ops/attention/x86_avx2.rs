//! The one-token attention kernel on AVX2 (+F16C, FMA), with the AVX-512 kernel's bits:
//! [`one_token`](super::one_token)'s structure over 8-lane vectors, each of the AVX-512
//! kernel's 16-lane vectors being a pair of halves here, lane for lane (the dot keeps eight
//! accumulators for its four, and reduces them in the same order).

use super::one_token::{self, Lanes};
use super::{Rows, Scores, DOT_STEP};
use std::arch::x86_64::*;

/// # Safety
/// The CPU must support AVX2, F16C and FMA; `hd` is a multiple of 64 and divides `q.len()`,
/// which `out.len()` equals.
#[target_feature(enable = "avx2,f16c,fma")]
pub(super) unsafe fn attend(scores: Scores, q: &[f32], hd: usize, rows: &Rows, out: &mut [f32]) {
    // SAFETY: the features `__m256`'s methods need are enabled here; the rest is the caller's.
    unsafe { one_token::attend::<__m256>(scores, q, hd, rows, out) }
}

/// One chunk of [`chunked`](super::chunked)'s long attention.
///
/// # Safety
/// The CPU must support AVX2, F16C, FMA; `hd` is a multiple of 64 and divides
/// `q.len()`; `part` holds `hd + 2` floats per head.
#[target_feature(enable = "avx2,f16c,fma")]
pub(super) unsafe fn chunk(scores: Scores, q: &[f32], hd: usize, rows: &Rows, part: &mut [f32]) {
    // SAFETY: the features `__m256`'s methods need are enabled here; the rest is the caller's.
    unsafe { super::chunked::simd::kernel::<__m256>(scores, q, hd, rows, part) }
}

// SAFETY (every method): the caller has AVX2, F16C and FMA (the methods run only inlined into
// `attend` above); each load and store is unaligned and covers 8 elements of a slice asserted
// to hold them.
impl Lanes for __m256 {
    const N: usize = 8;

    #[inline(always)]
    unsafe fn widen(s: &[u16]) -> Self {
        assert!(s.len() >= 8);
        unsafe { _mm256_cvtph_ps(_mm_loadu_si128(s.as_ptr().cast())) }
    }

    #[inline(always)]
    unsafe fn load(s: &[f32]) -> Self {
        assert!(s.len() >= 8);
        unsafe { _mm256_loadu_ps(s.as_ptr()) }
    }

    #[inline(always)]
    unsafe fn round_store(d: &mut [u16], v: Self) {
        assert!(d.len() >= 8);
        unsafe {
            let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v);
            _mm_storeu_si128(d.as_mut_ptr().cast(), h)
        }
    }

    #[inline(always)]
    unsafe fn round(v: Self) -> Self {
        unsafe { _mm256_cvtph_ps(_mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v)) }
    }

    #[inline(always)]
    unsafe fn store(d: &mut [f32], v: Self) {
        assert!(d.len() >= 8);
        unsafe { _mm256_storeu_ps(d.as_mut_ptr(), v) }
    }

    #[inline(always)]
    unsafe fn splat(x: f32) -> Self {
        unsafe { _mm256_set1_ps(x) }
    }

    #[inline(always)]
    unsafe fn mul(a: Self, b: Self) -> Self {
        unsafe { _mm256_mul_ps(a, b) }
    }

    #[inline(always)]
    unsafe fn sub(a: Self, b: Self) -> Self {
        unsafe { _mm256_sub_ps(a, b) }
    }

    #[inline(always)]
    unsafe fn exp(x: Self) -> Self {
        crate::ops::expf::x86::v_expf8(x)
    }

    #[inline(always)]
    unsafe fn fma(a: Self, b: Self, c: Self) -> Self {
        unsafe { _mm256_fmadd_ps(a, b, c) }
    }

    #[inline(always)]
    unsafe fn dot(q: &[f32], k: &[f32]) -> f32 {
        let mut acc = [unsafe { _mm256_setzero_ps() }; 8];
        for (i, qc) in q.chunks_exact(DOT_STEP).enumerate() {
            for (j, a) in acc.iter_mut().enumerate() {
                let o = 8 * j;
                *a = unsafe {
                    Self::fma(Self::load(&k[i * DOT_STEP + o..]), Self::load(&qc[o..]), *a)
                };
            }
        }
        unsafe { finish_dot(acc) }
    }
}

/// The dot's accumulators (the halves of four 16-lane ones) added per lane as
/// `(a0 + a2) + (a1 + a3)`, then the sixteen lanes in `reduce16`'s order in registers: the
/// upper half onto the lower, the upper quarter onto the lower, then `(q0 + q2) + (q1 + q3)`
/// (addition is commutative, so the operand order inside each sum does not change the bits).
#[inline(always)]
unsafe fn finish_dot(acc: [__m256; 8]) -> f32 {
    // SAFETY: as for the methods above (AVX2 in the inlining caller).
    unsafe {
        let half = |h: usize| {
            _mm256_add_ps(
                _mm256_add_ps(acc[h], acc[4 + h]),
                _mm256_add_ps(acc[2 + h], acc[6 + h]),
            )
        };
        let h = _mm256_add_ps(half(1), half(0));
        let q = _mm_add_ps(_mm256_extractf128_ps::<1>(h), _mm256_castps256_ps128(h));
        let pairs = _mm_add_ps(q, _mm_movehl_ps(q, q));
        _mm_cvtss_f32(_mm_add_ss(pairs, _mm_movehdup_ps(pairs)))
    }
}
