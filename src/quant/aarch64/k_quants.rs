//! NEON dot products for the K-quants (Q2_K..Q6_K) against Q8_K activations.
//!
//! Each kernel dots one weight row with `R` activation rows, decoding each weight super-block
//! once into signed bytes (16 per vector, one vector per group of 16). Every group's integer dot
//! goes through [`Dot4`] and is multiplied by its scale into four i32 lanes; minimums and the
//! Q2_K/Q4_K/Q5_K offsets come from Q8_K's `bsums`. The super-block's integer sum is therefore
//! exact, and it is combined in f32 exactly as the scalar reference does, so these kernels
//! return the scalar kernels' bits.

use std::arch::aarch64::*;

use super::{f16, ld_i16, ld_i8, ld_u8, s8, Dot4};
use crate::quant::q2_k::BlockQ2K;
use crate::quant::q3_k::BlockQ3K;
use crate::quant::q4_k::{unpack_scales_mins, BlockQ4K};
use crate::quant::q5_k::BlockQ5K;
use crate::quant::q6_k::BlockQ6K;
use crate::quant::q8_k::BlockQ8K;

/// `acc + sc ·` (the integer dot of the 16 quants `q` with activation quants `y[..16]`).
///
/// # Safety
/// The CPU must have `D`'s features.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn group16<D: Dot4>(acc: int32x4_t, q: int8x16_t, y: &[i8], sc: i32) -> int32x4_t {
    // SAFETY: the caller guarantees `D`'s features.
    let p = unsafe { D::dot4(vdupq_n_s32(0), q, ld_i8(y)) };
    vmlaq_n_s32(acc, p, sc)
}

/// As [`group16`] for a group of 32 quants (`q[0]`, `q[1]`) and `y[..32]`.
///
/// # Safety
/// The CPU must have `D`'s features.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn group32<D: Dot4>(acc: int32x4_t, q: [int8x16_t; 2], y: &[i8], sc: i32) -> int32x4_t {
    // SAFETY: the caller guarantees `D`'s features.
    let p = unsafe {
        D::dot4(
            D::dot4(vdupq_n_s32(0), q[0], ld_i8(y)),
            q[1],
            ld_i8(&y[16..]),
        )
    };
    vmlaq_n_s32(acc, p, sc)
}

/// Σ_j `bsums[j] · m[j]` over the 16 groups of 16 (`m` as two vectors of eight i16).
#[inline]
#[target_feature(enable = "neon")]
fn bsums_dot(y: &BlockQ8K, m: [int16x8_t; 2]) -> i32 {
    let b = y.bsums.as_flattened();
    let (b0, b1) = (ld_i16(b), ld_i16(&b[16..]));
    let t = vmull_s16(vget_low_s16(b0), vget_low_s16(m[0]));
    let t = vmlal_high_s16(t, b0, m[0]);
    let t = vmlal_s16(t, vget_low_s16(b1), vget_low_s16(m[1]));
    vaddvq_s32(vmlal_high_s16(t, b1, m[1]))
}

/// Σ_j `bsums[j] · m[j / 2]` (Q4_K/Q5_K: one minimum per group of 32).
#[inline]
#[target_feature(enable = "neon")]
fn bsums_dot_pairs(y: &BlockQ8K, m: &[u8; 8]) -> i32 {
    let b = y.bsums.as_flattened();
    let pairs = vpaddq_s16(ld_i16(b), ld_i16(&b[16..]));
    // SAFETY: eight readable bytes; `ld1` has no alignment requirement.
    let m = vreinterpretq_s16_u16(vmovl_u8(unsafe { vld1_u8(m.as_ptr()) }));
    let t = vmull_s16(vget_low_s16(pairs), vget_low_s16(m));
    vaddvq_s32(vmlal_high_s16(t, pairs, m))
}

/// 16 unsigned bytes widened to two vectors of eight i16.
#[inline]
#[target_feature(enable = "neon")]
fn widen(v: uint8x16_t) -> [int16x8_t; 2] {
    [
        vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(v))),
        vreinterpretq_s16_u16(vmovl_high_u8(v)),
    ]
}

/// # Safety
/// The CPU must have `D`'s features.
#[target_feature(enable = "neon")]
pub(super) unsafe fn dot_q2_k<D: Dot4, const R: usize>(
    w: &[BlockQ2K],
    a: [&[BlockQ8K]; R],
) -> [f32; R] {
    let a = a.map(|a| &a[..w.len()]);
    let three = vdupq_n_u8(3);
    let mut sumf = [0f32; R];
    for (i, x) in w.iter().enumerate() {
        let mut isum = [vdupq_n_s32(0); R];
        for h in 0..2 {
            // Bit pairs 0-1, 2-3, 4-5, 6-7 of these bytes are four groups of 32 elements.
            let mut q = [ld_u8(&x.qs[32 * h..]), ld_u8(&x.qs[32 * h + 16..])];
            for s in 0..4 {
                let c = [s8(vandq_u8(q[0], three)), s8(vandq_u8(q[1], three))];
                q = [vshrq_n_u8::<2>(q[0]), vshrq_n_u8::<2>(q[1])];
                let g = 8 * h + 2 * s;
                let sc = [(x.scales[g] & 15) as i32, (x.scales[g + 1] & 15) as i32];
                for r in 0..R {
                    let y = &a[r][i].qs[16 * g..];
                    // SAFETY: the caller guarantees `D`'s features.
                    unsafe {
                        isum[r] = group16::<D>(isum[r], c[0], y, sc[0]);
                        isum[r] = group16::<D>(isum[r], c[1], &y[16..], sc[1]);
                    }
                }
            }
        }
        let mins = widen(vshrq_n_u8::<4>(ld_u8(&x.scales)));
        let (dx, dmx) = (f16(x.d), f16(x.dmin));
        for r in 0..R {
            let y = &a[r][i];
            let summs = bsums_dot(y, mins);
            let dall = y.d() * dx;
            let dmin = y.d() * dmx;
            sumf[r] += dall * vaddvq_s32(isum[r]) as f32 - dmin * summs as f32;
        }
    }
    sumf
}

/// # Safety
/// The CPU must have `D`'s features.
#[target_feature(enable = "neon")]
pub(super) unsafe fn dot_q3_k<D: Dot4, const R: usize>(
    w: &[BlockQ3K],
    a: [&[BlockQ8K]; R],
) -> [f32; R] {
    let a = a.map(|a| &a[..w.len()]);
    let (three, one, four) = (vdupq_n_u8(3), vdupq_n_u8(1), vdupq_n_u8(4));
    let mut sumf = [0f32; R];
    for (i, x) in w.iter().enumerate() {
        let scales = x.unpacked_scales();
        // Bit k of these bytes is the third bit of the quants of elements 32k..32k + 32.
        let mut hm = [ld_u8(&x.hmask), ld_u8(&x.hmask[16..])];
        let mut isum = [vdupq_n_s32(0); R];
        for h in 0..2 {
            let mut q = [ld_u8(&x.qs[32 * h..]), ld_u8(&x.qs[32 * h + 16..])];
            for s in 0..4 {
                // q = low two bits, minus 4 where the third bit is clear.
                let c: [int8x16_t; 2] = std::array::from_fn(|t| {
                    let set = vtstq_u8(hm[t], one);
                    vsubq_s8(s8(vandq_u8(q[t], three)), s8(vbicq_u8(four, set)))
                });
                q = [vshrq_n_u8::<2>(q[0]), vshrq_n_u8::<2>(q[1])];
                hm = [vshrq_n_u8::<1>(hm[0]), vshrq_n_u8::<1>(hm[1])];
                let g = 8 * h + 2 * s;
                let sc = [scales[g] as i32, scales[g + 1] as i32];
                for r in 0..R {
                    let y = &a[r][i].qs[16 * g..];
                    // SAFETY: the caller guarantees `D`'s features.
                    unsafe {
                        isum[r] = group16::<D>(isum[r], c[0], y, sc[0]);
                        isum[r] = group16::<D>(isum[r], c[1], &y[16..], sc[1]);
                    }
                }
            }
        }
        let dx = f16(x.d);
        for r in 0..R {
            let y = &a[r][i];
            sumf[r] += dx * y.d() * vaddvq_s32(isum[r]) as f32;
        }
    }
    sumf
}

/// The Q4_K/Q5_K super-block kernel; `HIGH` adds Q5_K's fifth bits from `qh`.
///
/// # Safety
/// The CPU must have `D`'s features.
#[inline]
#[target_feature(enable = "neon")]
#[allow(clippy::too_many_arguments)]
unsafe fn dot_q45_k<D: Dot4, const R: usize, const HIGH: bool>(
    d: [u8; 2],
    dmin: [u8; 2],
    scales: &[u8; 12],
    qs: &[u8; 128],
    qh: &[u8; 32],
    a: [&BlockQ8K; R],
    sumf: &mut [f32; R],
) {
    let (sc, m) = unpack_scales_mins(scales);
    let (m4, one) = (vdupq_n_u8(0x0f), vdupq_n_u8(1));
    // Bit k of these bytes is the fifth bit of the quants of elements 32k..32k + 32.
    let mut hb = [ld_u8(qh), ld_u8(&qh[16..])];
    let mut isum = [vdupq_n_s32(0); R];
    for j in 0..4 {
        let q = [ld_u8(&qs[32 * j..]), ld_u8(&qs[32 * j + 16..])];
        let mut lo = [vandq_u8(q[0], m4), vandq_u8(q[1], m4)];
        let mut hi = [vshrq_n_u8::<4>(q[0]), vshrq_n_u8::<4>(q[1])];
        if HIGH {
            for t in 0..2 {
                lo[t] = vorrq_u8(lo[t], vshlq_n_u8::<4>(vandq_u8(hb[t], one)));
                hi[t] = vorrq_u8(hi[t], vshlq_n_u8::<3>(vandq_u8(hb[t], vdupq_n_u8(2))));
                hb[t] = vshrq_n_u8::<2>(hb[t]);
            }
        }
        let (lo, hi) = ([s8(lo[0]), s8(lo[1])], [s8(hi[0]), s8(hi[1])]);
        let (s0, s1) = (sc[2 * j] as i32, sc[2 * j + 1] as i32);
        for r in 0..R {
            let y = &a[r].qs[64 * j..];
            // SAFETY: the caller guarantees `D`'s features.
            unsafe {
                isum[r] = group32::<D>(isum[r], lo, y, s0);
                isum[r] = group32::<D>(isum[r], hi, &y[32..], s1);
            }
        }
    }
    let (dx, dmx) = (f16(d), f16(dmin));
    for r in 0..R {
        let summs = bsums_dot_pairs(a[r], &m);
        let d = dx * a[r].d();
        let dmin = dmx * a[r].d();
        sumf[r] += d * vaddvq_s32(isum[r]) as f32 - dmin * summs as f32;
    }
}

/// # Safety
/// The CPU must have `D`'s features.
#[target_feature(enable = "neon")]
pub(super) unsafe fn dot_q4_k<D: Dot4, const R: usize>(
    w: &[BlockQ4K],
    a: [&[BlockQ8K]; R],
) -> [f32; R] {
    let a = a.map(|a| &a[..w.len()]);
    let mut sumf = [0f32; R];
    for (i, x) in w.iter().enumerate() {
        let y = std::array::from_fn(|r| &a[r][i]);
        // SAFETY: the caller guarantees `D`'s features.
        unsafe { dot_q45_k::<D, R, false>(x.d, x.dmin, &x.scales, &x.qs, &[0; 32], y, &mut sumf) };
    }
    sumf
}

/// # Safety
/// The CPU must have `D`'s features.
#[target_feature(enable = "neon")]
pub(super) unsafe fn dot_q5_k<D: Dot4, const R: usize>(
    w: &[BlockQ5K],
    a: [&[BlockQ8K]; R],
) -> [f32; R] {
    let a = a.map(|a| &a[..w.len()]);
    let mut sumf = [0f32; R];
    for (i, x) in w.iter().enumerate() {
        let y = std::array::from_fn(|r| &a[r][i]);
        // SAFETY: the caller guarantees `D`'s features.
        unsafe { dot_q45_k::<D, R, true>(x.d, x.dmin, &x.scales, &x.qs, &x.qh, y, &mut sumf) };
    }
    sumf
}

/// # Safety
/// The CPU must have `D`'s features.
#[target_feature(enable = "neon")]
pub(super) unsafe fn dot_q6_k<D: Dot4, const R: usize>(
    w: &[BlockQ6K],
    a: [&[BlockQ8K]; R],
) -> [f32; R] {
    let a = a.map(|a| &a[..w.len()]);
    let (m4, m3) = (vdupq_n_u8(0x0f), vdupq_n_u8(0x30));
    let offset = vdupq_n_s8(32);
    let mut sumf = [0f32; R];
    for (i, x) in w.iter().enumerate() {
        let mut isum = [vdupq_n_s32(0); R];
        for h in 0..2 {
            let ql = &x.ql[64 * h..];
            let (qa, qb) = (
                [ld_u8(ql), ld_u8(&ql[16..])],
                [ld_u8(&ql[32..]), ld_u8(&ql[48..])],
            );
            let qh = [ld_u8(&x.qh[32 * h..]), ld_u8(&x.qh[32 * h + 16..])];
            for k in 0..4 {
                let c: [int8x16_t; 2] = std::array::from_fn(|t| {
                    let low = match k {
                        0 => vandq_u8(qa[t], m4),
                        1 => vandq_u8(qb[t], m4),
                        2 => vshrq_n_u8::<4>(qa[t]),
                        _ => vshrq_n_u8::<4>(qb[t]),
                    };
                    // Bit pair k of qh moved to bits 4-5.
                    let high = match k {
                        0 => vshlq_n_u8::<4>(qh[t]),
                        1 => vshlq_n_u8::<2>(qh[t]),
                        2 => qh[t],
                        _ => vshrq_n_u8::<2>(qh[t]),
                    };
                    vsubq_s8(s8(vorrq_u8(low, vandq_u8(high, m3))), offset)
                });
                let g = 8 * h + 2 * k;
                let sc = [x.scales[g] as i32, x.scales[g + 1] as i32];
                for r in 0..R {
                    let y = &a[r][i].qs[16 * g..];
                    // SAFETY: the caller guarantees `D`'s features.
                    unsafe {
                        isum[r] = group16::<D>(isum[r], c[0], y, sc[0]);
                        isum[r] = group16::<D>(isum[r], c[1], &y[16..], sc[1]);
                    }
                }
            }
        }
        let dx = f16(x.d);
        for r in 0..R {
            let y = &a[r][i];
            sumf[r] += dx * y.d() * vaddvq_s32(isum[r]) as f32;
        }
    }
    sumf
}
