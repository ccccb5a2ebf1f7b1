//! The one-token attention kernel on AVX2 (+F16C, FMA), with the AVX-512 kernel's bits: each of
//! its 16-lane vectors is a pair of 8-lane halves here, lane for lane, so the query's f16
//! rounding, the four-accumulator q·k dot with its fixed reduction, the online softmax and the
//! f16 value accumulator rounded after every fused multiply-add are the same operations, and the
//! heads of one call are interleaved position by position as there.

use super::{f16_bits as bits, reduce16, softmax_step, Rows, Scores, DOT_STEP};
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

/// # Safety
/// The CPU must support AVX2, F16C and FMA; `hd` is a multiple of 64 and divides `q.len()`,
/// which `out.len()` equals.
#[target_feature(enable = "avx2,f16c,fma")]
pub(super) unsafe fn attend(scores: Scores, q: &[f32], hd: usize, rows: &Rows, out: &mut [f32]) {
    let n = q.len() / hd;
    let mut q16 = vec![0u16; q.len()];
    for (src, dst) in q.chunks_exact(8).zip(q16.chunks_exact_mut(8)) {
        // SAFETY: `src` holds 8 floats; unaligned load.
        store8(dst, unsafe { _mm256_loadu_ps(src.as_ptr()) });
    }
    let mut acc = vec![0u16; q.len()];
    let mut state = vec![(f32::NEG_INFINITY, 0f32); n];
    let mut weight = vec![0f32; n];
    for p in rows.first..=rows.last {
        let k = bits(&rows.keys[(rows.row)(rows.keys, p)]);
        for (h, ((max, sum), w)) in state.iter_mut().zip(&mut weight).enumerate() {
            let s = scores.apply(dot(&q16[h * hd..][..hd], k));
            let (ms, vs) = softmax_step(s, max, sum);
            if ms != 1.0 {
                let m = _mm256_set1_ps(ms);
                for a in acc[h * hd..][..hd].chunks_exact_mut(8) {
                    store8(a, _mm256_mul_ps(load8(a), m));
                }
            }
            *w = vs;
        }
        let v = bits(&rows.values[(rows.row)(rows.values, p)]);
        for (acc, &vs) in acc.chunks_exact_mut(hd).zip(&weight) {
            let w = _mm256_set1_ps(vs);
            for (a, x) in acc.chunks_exact_mut(8).zip(v.chunks_exact(8)) {
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

/// The AVX-512 kernel's dot: four 16-lane accumulators (eight halves here), added per lane as
/// `(a0 + a2) + (a1 + a3)`, then reduced in `reduce16`'s order.
#[target_feature(enable = "avx2,f16c,fma")]
fn dot(q16: &[u16], k: &[u16]) -> f32 {
    let mut acc = [_mm256_setzero_ps(); 8];
    for (qc, kc) in q16.chunks_exact(DOT_STEP).zip(k.chunks_exact(DOT_STEP)) {
        for (j, a) in acc.iter_mut().enumerate() {
            let o = 8 * j;
            *a = _mm256_fmadd_ps(load8(&kc[o..]), load8(&qc[o..]), *a);
        }
    }
    let mut lanes = [0f32; 16];
    for h in 0..2 {
        let x = _mm256_add_ps(
            _mm256_add_ps(acc[h], acc[4 + h]),
            _mm256_add_ps(acc[2 + h], acc[6 + h]),
        );
        // SAFETY: `lanes[8h..]` holds 8 floats; unaligned store.
        unsafe { _mm256_storeu_ps(lanes[8 * h..].as_mut_ptr(), x) };
    }
    reduce16(lanes)
}
