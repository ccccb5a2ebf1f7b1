//! NEON activation quantizers (Q8_0, Q8_1, Q8_K). Each performs the same IEEE operations as its
//! scalar reference in `quant/q8_*.rs`: the maximum of absolute values (`fmaxnm`, which like
//! `f32::max` ignores NaN), one division, products rounded half to even (`fcvtns`) and
//! saturated to i8, so the bytes are identical; the tests check that.

use std::arch::aarch64::*;

use crate::quant::block::f32_to_f16;
use crate::quant::q8_0::BlockQ8_0;
use crate::quant::q8_1::BlockQ8_1;
use crate::quant::q8_k::BlockQ8K;
use crate::quant::QK_K;

/// 32 floats as eight vectors.
#[inline]
#[target_feature(enable = "neon")]
fn load_32(x: &[f32]) -> [float32x4_t; 8] {
    assert!(x.len() >= 32);
    // SAFETY: 32 readable floats; `ld1` has no alignment requirement beyond the f32's.
    std::array::from_fn(|k| unsafe { vld1q_f32(x[4 * k..].as_ptr()) })
}

/// Lane-wise maximum of 0 and the absolute values of `v` (the reference's fold from 0).
#[inline]
#[target_feature(enable = "neon")]
fn amax_32(v: &[float32x4_t; 8]) -> float32x4_t {
    let mut m = vdupq_n_f32(0.0);
    for v in v {
        m = vmaxnmq_f32(m, vabsq_f32(*v));
    }
    m
}

/// `round_half_even(v * mul)` as i32 lanes (saturating, NaN to 0, as Rust's `as`).
#[inline]
#[target_feature(enable = "neon")]
fn round_scaled(v: &[float32x4_t; 8], mul: f32) -> [int32x4_t; 8] {
    let mut out = [vdupq_n_s32(0); 8];
    for (o, v) in out.iter_mut().zip(v) {
        *o = vcvtnq_s32_f32(vmulq_n_f32(*v, mul));
    }
    out
}

/// Saturates 32 i32 lanes (in order) to i8 and stores them in `dst`.
#[inline]
#[target_feature(enable = "neon")]
fn store_32(dst: &mut [i8], i: &[int32x4_t; 8]) {
    assert!(dst.len() >= 32);
    for h in 0..2 {
        let a = vqmovn_high_s32(vqmovn_s32(i[4 * h]), i[4 * h + 1]);
        let b = vqmovn_high_s32(vqmovn_s32(i[4 * h + 2]), i[4 * h + 3]);
        let q = vqmovn_high_s16(vqmovn_s16(a), b);
        // SAFETY: at least 32 writable bytes from index 0, so 16 from index 16·h.
        unsafe { vst1q_s8(dst[16 * h..].as_mut_ptr(), q) };
    }
}

/// Sum of the 16 i32 lanes `i[4k..4k + 4]`.
#[inline]
#[target_feature(enable = "neon")]
fn sum_16(i: &[int32x4_t]) -> i32 {
    vaddvq_s32(vaddq_s32(vaddq_s32(i[0], i[1]), vaddq_s32(i[2], i[3])))
}

/// # Safety
/// NEON only, which every aarch64 CPU has.
#[target_feature(enable = "neon")]
pub(super) unsafe fn quantize_q8_0(src: &[f32], dst: &mut [BlockQ8_0]) {
    for (x, b) in src.chunks_exact(32).zip(dst.iter_mut()) {
        let v = load_32(x);
        let amax = vmaxnmvq_f32(amax_32(&v));
        b.d = f32_to_f16(amax / 127.0);
        let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
        store_32(&mut b.qs, &round_scaled(&v, id));
    }
}

/// # Safety
/// NEON only, which every aarch64 CPU has.
#[target_feature(enable = "neon")]
pub(super) unsafe fn quantize_q8_1(src: &[f32], dst: &mut [BlockQ8_1]) {
    for (x, b) in src.chunks_exact(32).zip(dst.iter_mut()) {
        let v = load_32(x);
        let amax = vmaxnmvq_f32(amax_32(&v));
        let d = amax / 127.0;
        let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
        let i = round_scaled(&v, id);
        // The lanes are already within i8 (|v · id| ≤ 127), so their sum is the quants' sum.
        let sum = sum_16(&i[..4]) + sum_16(&i[4..]);
        b.d = f32_to_f16(d);
        b.s = f32_to_f16(d * sum as f32);
        store_32(&mut b.qs, &i);
    }
}

/// # Safety
/// NEON only, which every aarch64 CPU has.
#[target_feature(enable = "neon")]
pub(super) unsafe fn quantize_q8_k(src: &[f32], dst: &mut [BlockQ8K]) {
    for (x, b) in src.chunks_exact(QK_K).zip(dst.iter_mut()) {
        let mut m = vdupq_n_f32(0.0);
        for c in x.chunks_exact(32) {
            m = vmaxnmq_f32(m, amax_32(&load_32(c)));
        }
        let amax = vmaxnmvq_f32(m);
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
        let cap = vdupq_n_s32(127);
        for (k, c) in x.chunks_exact(32).enumerate() {
            let mut i = round_scaled(&load_32(c), iscale);
            for v in &mut i {
                *v = vminq_s32(*v, cap);
            }
            b.bsums[2 * k] = (sum_16(&i[..4]) as i16).to_le_bytes();
            b.bsums[2 * k + 1] = (sum_16(&i[4..]) as i16).to_le_bytes();
            store_32(&mut b.qs[32 * k..], &i);
        }
        b.d = (1.0 / iscale).to_le_bytes();
    }
}
