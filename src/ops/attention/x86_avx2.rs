//! The one-token attention kernel on AVX2 (+F16C, FMA), with the AVX-512 kernel's bits: each of
//! its 16-lane vectors is a pair of 8-lane halves here, lane for lane, so the query's f16
//! rounding, the four-accumulator q·k dot with its fixed reduction, the online softmax and the
//! f16 value accumulator rounded after every fused multiply-add are the same operations, and the
//! heads of one call are interleaved position by position as there.

use super::{
    f16_bits as bits, flat, flat_bits_mut, flat_mut, lines, softmax_step, Rows, Scores, DOT_STEP,
};
use std::arch::x86_64::*;

/// Eight f16 widened to f32.
#[inline]
#[target_feature(enable = "avx2,f16c")]
fn load8(s: &[u16]) -> __m256 {
    assert!(s.len() >= 8);
    // SAFETY: 8 readable u16 (checked above); unaligned load.
    _mm256_cvtph_ps(unsafe { _mm_loadu_si128(s.as_ptr().cast()) })
}

/// Stores eight f32 rounded to f16 (nearest even).
#[inline]
#[target_feature(enable = "avx2,f16c")]
fn store8(d: &mut [u16], v: __m256) {
    assert!(d.len() >= 8);
    let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v);
    // SAFETY: 8 writable u16 (checked above); unaligned store.
    unsafe { _mm_storeu_si128(d.as_mut_ptr().cast(), h) }
}

/// Eight f32 at the start of `s`.
#[inline]
#[target_feature(enable = "avx2")]
fn load8f(s: &[f32]) -> __m256 {
    assert!(s.len() >= 8);
    // SAFETY: 8 readable floats (checked above); unaligned load.
    unsafe { _mm256_loadu_ps(s.as_ptr()) }
}

/// Widens the f16 `src` into `dst` (the same length).
#[inline]
#[target_feature(enable = "avx2,f16c")]
fn widen(src: &[u16], dst: &mut [f32]) {
    for (s, d) in src.chunks_exact(8).zip(dst.chunks_exact_mut(8)) {
        // SAFETY: `d` holds 8 floats; unaligned store.
        unsafe { _mm256_storeu_ps(d.as_mut_ptr(), load8(s)) };
    }
}

/// # Safety
/// The CPU must support AVX2, F16C and FMA; `hd` is a multiple of 64 and divides `q.len()`,
/// which `out.len()` equals.
///
/// As on AVX-512, the query is rounded to f16 and widened back once and each key and value row
/// is widened once per position for all heads (widening is exact).
#[target_feature(enable = "avx2,f16c,fma")]
pub(super) unsafe fn attend(scores: Scores, q: &[f32], hd: usize, rows: &Rows, out: &mut [f32]) {
    let n = q.len() / hd;
    let mut q16 = vec![0u16; q.len()];
    for (src, dst) in q.chunks_exact(8).zip(q16.chunks_exact_mut(8)) {
        store8(dst, load8f(src));
    }
    let mut qr = lines(q.len());
    widen(&q16, flat_mut(&mut qr));
    let qr = flat(&qr);
    let (mut kl, mut vl) = (lines(hd), lines(hd));
    let (k, v) = (flat_mut(&mut kl), flat_mut(&mut vl));
    let mut acc_lines = lines(q.len().div_ceil(32) * 16);
    let acc = &mut flat_bits_mut(&mut acc_lines)[..q.len()];
    let mut state = vec![(f32::NEG_INFINITY, 0f32); n];
    let mut weight = vec![0f32; n];
    for p in rows.first..=rows.last {
        let k_row = bits(&rows.keys[(rows.row)(rows.keys, p)]);
        // One head reads the f16 row directly; several share it widened once.
        if n > 1 {
            widen(k_row, k);
        }
        for (h, ((max, sum), w)) in state.iter_mut().zip(&mut weight).enumerate() {
            let qh = &qr[h * hd..][..hd];
            let s = scores.apply(if n > 1 {
                dot(qh, k)
            } else {
                dot_half(qh, k_row)
            });
            let (ms, vs) = softmax_step(s, max, sum);
            if ms != 1.0 {
                let m = _mm256_set1_ps(ms);
                for a in acc[h * hd..][..hd].chunks_exact_mut(8) {
                    store8(a, _mm256_mul_ps(load8(a), m));
                }
            }
            *w = vs;
        }
        let v_row = bits(&rows.values[(rows.row)(rows.values, p)]);
        if n > 1 {
            widen(v_row, v);
            for (acc, &vs) in acc.chunks_exact_mut(hd).zip(&weight) {
                let w = _mm256_set1_ps(vs);
                for (a, x) in acc.chunks_exact_mut(8).zip(v.chunks_exact(8)) {
                    store8(a, _mm256_fmadd_ps(load8f(x), w, load8(a)));
                }
            }
        } else {
            let w = _mm256_set1_ps(weight[0]);
            for (a, x) in acc.chunks_exact_mut(8).zip(v_row.chunks_exact(8)) {
                store8(a, _mm256_fmadd_ps(load8(x), w, load8(a)));
            }
        }
    }
    for ((out, acc), (_, sum)) in out
        .chunks_exact_mut(hd)
        .zip(acc.chunks_exact(hd))
        .zip(&state)
    {
        let inv = _mm256_set1_ps(if *sum == 0.0 { 0.0 } else { 1.0 / sum });
        for (o, a) in out.chunks_exact_mut(8).zip(acc.chunks_exact(8)) {
            // SAFETY: `o` holds 8 floats; unaligned store.
            unsafe { _mm256_storeu_ps(o.as_mut_ptr(), _mm256_mul_ps(load8(a), inv)) };
        }
    }
}

/// The AVX-512 kernel's dot over widened f16 values: four 16-lane accumulators (eight halves
/// here), added per lane as `(a0 + a2) + (a1 + a3)`, then reduced in `reduce16`'s order.
#[target_feature(enable = "avx2,f16c,fma")]
fn dot(q: &[f32], k: &[f32]) -> f32 {
    let mut acc = [_mm256_setzero_ps(); 8];
    for (qc, kc) in q.chunks_exact(DOT_STEP).zip(k.chunks_exact(DOT_STEP)) {
        for (j, a) in acc.iter_mut().enumerate() {
            let o = 8 * j;
            *a = _mm256_fmadd_ps(load8f(&kc[o..]), load8f(&qc[o..]), *a);
        }
    }
    finish_dot(acc)
}

/// [`dot`] reading the key row as f16.
#[target_feature(enable = "avx2,f16c,fma")]
fn dot_half(q: &[f32], k: &[u16]) -> f32 {
    let mut acc = [_mm256_setzero_ps(); 8];
    for (qc, kc) in q.chunks_exact(DOT_STEP).zip(k.chunks_exact(DOT_STEP)) {
        for (j, a) in acc.iter_mut().enumerate() {
            let o = 8 * j;
            *a = _mm256_fmadd_ps(load8(&kc[o..]), load8f(&qc[o..]), *a);
        }
    }
    finish_dot(acc)
}

/// The dot's accumulators (the halves of four 16-lane ones) added per lane as
/// `(a0 + a2) + (a1 + a3)`, then across lanes.
#[inline]
#[target_feature(enable = "avx2")]
fn finish_dot(acc: [__m256; 8]) -> f32 {
    let half = |h: usize| {
        _mm256_add_ps(
            _mm256_add_ps(acc[h], acc[4 + h]),
            _mm256_add_ps(acc[2 + h], acc[6 + h]),
        )
    };
    // `reduce16` of the sixteen lanes (`half(0)` then `half(1)`) in registers: the upper half
    // onto the lower, the upper quarter onto the lower, then `(q0 + q2) + (q1 + q3)` (addition
    // is commutative, so the operand order inside each sum does not change the bits).
    let h = _mm256_add_ps(half(1), half(0));
    let q = _mm_add_ps(_mm256_extractf128_ps::<1>(h), _mm256_castps256_ps128(h));
    let pairs = _mm_add_ps(q, _mm_movehl_ps(q, q));
    _mm_cvtss_f32(_mm_add_ss(pairs, _mm_movehdup_ps(pairs)))
}
