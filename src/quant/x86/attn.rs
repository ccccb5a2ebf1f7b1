//! Attention's f16 kernels: dot products of one f32 query with rows of f16 keys, and the
//! weighted sum of rows of f16 values, with F16C conversion; AVX2 (8 lanes) and AVX-512
//! (16 lanes). They reassociate the scalar reference's sums (several lanes, FMA), so results
//! differ from it by rounding only.

use std::arch::x86_64::*;

use half::f16;

/// Eight halves from the start of `s`, as f32.
#[inline]
#[target_feature(enable = "avx2,f16c")]
fn ld8h(s: &[f16]) -> __m256 {
    assert!(s.len() >= 8);
    // SAFETY: at least 8 readable halves (16 bytes); unaligned load.
    _mm256_cvtph_ps(unsafe { _mm_loadu_si128(s.as_ptr().cast()) })
}

/// Sixteen halves from the start of `s`, as f32.
#[inline]
#[target_feature(enable = "avx512f")]
fn ld16h(s: &[f16]) -> __m512 {
    assert!(s.len() >= 16);
    // SAFETY: at least 16 readable halves (32 bytes); unaligned load.
    _mm512_cvtph_ps(unsafe { _mm256_loadu_si256(s.as_ptr().cast()) })
}

#[inline]
#[target_feature(enable = "avx2")]
fn ld8f(s: &[f32]) -> __m256 {
    assert!(s.len() >= 8);
    // SAFETY: at least 8 readable floats; unaligned load.
    unsafe { _mm256_loadu_ps(s.as_ptr()) }
}

#[inline]
#[target_feature(enable = "avx2")]
fn st8f(d: &mut [f32], v: __m256) {
    assert!(d.len() >= 8);
    // SAFETY: at least 8 writable floats; unaligned store.
    unsafe { _mm256_storeu_ps(d.as_mut_ptr(), v) }
}

#[inline]
#[target_feature(enable = "avx512f")]
fn ld16f(s: &[f32]) -> __m512 {
    assert!(s.len() >= 16);
    // SAFETY: at least 16 readable floats; unaligned load.
    unsafe { _mm512_loadu_ps(s.as_ptr()) }
}

#[inline]
#[target_feature(enable = "avx512f")]
fn st16f(d: &mut [f32], v: __m512) {
    assert!(d.len() >= 16);
    // SAFETY: at least 16 writable floats; unaligned store.
    unsafe { _mm512_storeu_ps(d.as_mut_ptr(), v) }
}

#[inline]
#[target_feature(enable = "avx2")]
fn hsum8(x: __m256) -> f32 {
    let r = _mm_add_ps(_mm256_extractf128_ps(x, 1), _mm256_castps256_ps128(x));
    let r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    let r = _mm_add_ss(r, _mm_movehdup_ps(r));
    _mm_cvtss_f32(r)
}

/// `out[i] = q · k[i * stride ..][..q.len()]` (lengths checked by the caller).
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::quant) fn dot_rows_avx2(q: &[f32], k: &[f16], stride: usize, out: &mut [f32]) {
    let hd = q.len();
    let full = hd / 8 * 8;
    for (i, o) in out.iter_mut().enumerate() {
        let row = &k[i * stride..][..hd];
        let (mut a0, mut a1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        let mut j = 0;
        while j + 16 <= full {
            a0 = _mm256_fmadd_ps(ld8f(&q[j..]), ld8h(&row[j..]), a0);
            a1 = _mm256_fmadd_ps(ld8f(&q[j + 8..]), ld8h(&row[j + 8..]), a1);
            j += 16;
        }
        if j < full {
            a0 = _mm256_fmadd_ps(ld8f(&q[j..]), ld8h(&row[j..]), a0);
            j += 8;
        }
        let mut s = hsum8(_mm256_add_ps(a0, a1));
        for (a, b) in q[j..].iter().zip(&row[j..]) {
            s += a * b.to_f32();
        }
        *o = s;
    }
}

/// `acc += Σ_i w[i] · v[i * stride ..][..acc.len()]` (lengths checked by the caller).
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::quant) fn weighted_sum_avx2(w: &[f32], v: &[f16], stride: usize, acc: &mut [f32]) {
    let hd = acc.len();
    let mut j = 0;
    while j + 32 <= hd {
        let mut a = [0, 8, 16, 24].map(|o| ld8f(&acc[j + o..]));
        for (i, &wi) in w.iter().enumerate() {
            let row = &v[i * stride + j..][..32];
            let wv = _mm256_set1_ps(wi);
            for (k, a) in a.iter_mut().enumerate() {
                *a = _mm256_fmadd_ps(wv, ld8h(&row[8 * k..]), *a);
            }
        }
        for (k, a) in a.into_iter().enumerate() {
            st8f(&mut acc[j + 8 * k..], a);
        }
        j += 32;
    }
    while j + 8 <= hd {
        let mut a = ld8f(&acc[j..]);
        for (i, &wi) in w.iter().enumerate() {
            a = _mm256_fmadd_ps(_mm256_set1_ps(wi), ld8h(&v[i * stride + j..]), a);
        }
        st8f(&mut acc[j..], a);
        j += 8;
    }
    for (i, &wi) in w.iter().enumerate() {
        for (a, x) in acc[j..].iter_mut().zip(&v[i * stride + j..i * stride + hd]) {
            *a += wi * x.to_f32();
        }
    }
}

/// As [`dot_rows_avx2`], 16 lanes.
#[target_feature(enable = "avx2,fma,f16c,avx512f")]
pub(in crate::quant) fn dot_rows_avx512(q: &[f32], k: &[f16], stride: usize, out: &mut [f32]) {
    let hd = q.len();
    let full = hd / 16 * 16;
    for (i, o) in out.iter_mut().enumerate() {
        let row = &k[i * stride..][..hd];
        let (mut a0, mut a1) = (_mm512_setzero_ps(), _mm512_setzero_ps());
        let mut j = 0;
        while j + 32 <= full {
            a0 = _mm512_fmadd_ps(ld16f(&q[j..]), ld16h(&row[j..]), a0);
            a1 = _mm512_fmadd_ps(ld16f(&q[j + 16..]), ld16h(&row[j + 16..]), a1);
            j += 32;
        }
        if j < full {
            a0 = _mm512_fmadd_ps(ld16f(&q[j..]), ld16h(&row[j..]), a0);
            j += 16;
        }
        let mut s = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
        for (a, b) in q[j..].iter().zip(&row[j..]) {
            s += a * b.to_f32();
        }
        *o = s;
    }
}

/// As [`weighted_sum_avx2`], 16 lanes.
#[target_feature(enable = "avx2,fma,f16c,avx512f")]
pub(in crate::quant) fn weighted_sum_avx512(w: &[f32], v: &[f16], stride: usize, acc: &mut [f32]) {
    let hd = acc.len();
    let mut j = 0;
    while j + 64 <= hd {
        let mut a = [0, 16, 32, 48].map(|o| ld16f(&acc[j + o..]));
        for (i, &wi) in w.iter().enumerate() {
            let row = &v[i * stride + j..][..64];
            let wv = _mm512_set1_ps(wi);
            for (k, a) in a.iter_mut().enumerate() {
                *a = _mm512_fmadd_ps(wv, ld16h(&row[16 * k..]), *a);
            }
        }
        for (k, a) in a.into_iter().enumerate() {
            st16f(&mut acc[j + 16 * k..], a);
        }
        j += 64;
    }
    while j + 16 <= hd {
        let mut a = ld16f(&acc[j..]);
        for (i, &wi) in w.iter().enumerate() {
            a = _mm512_fmadd_ps(_mm512_set1_ps(wi), ld16h(&v[i * stride + j..]), a);
        }
        st16f(&mut acc[j..], a);
        j += 16;
    }
    for (i, &wi) in w.iter().enumerate() {
        for (a, x) in acc[j..].iter_mut().zip(&v[i * stride + j..i * stride + hd]) {
            *a += wi * x.to_f32();
        }
    }
}
