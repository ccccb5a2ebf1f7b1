//! NEON dot products for the 32-element formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) against Q8_0 /
//! Q8_1 activations.
//!
//! Each kernel dots one weight row with `R` activation rows, decoding each weight block once
//! into 32 signed bytes (two vectors). Per block and row, the exact integer dot lands in eight
//! i32 lanes (lane `k`: elements `4k..4k + 4`), is scaled by `d_x · d_y` and fused into eight
//! f32 lane accumulators, which are summed at the end in ggml's `hsum_float_8` order. That is
//! the operation sequence of the x86 AVX2 kernels (and of llama.cpp's x86 build), so these
//! kernels give the avx2 variant's bits on every row, and Q4_1 the scalar reference's.
//!
//! The block decoders (`quants_*`) and the per-block step ([`fma_block`]) are shared with the
//! tiles (`tiles32.rs`), so that both compute the same products.

use std::arch::aarch64::*;

use super::{f16, ld_i8, ld_u8, s8, Dot4};
use crate::quant::q4_0::BlockQ4_0;
use crate::quant::q4_1::BlockQ4_1;
use crate::quant::q5_0::BlockQ5_0;
use crate::quant::q5_1::BlockQ5_1;
use crate::quant::q8_0::BlockQ8_0;
use crate::quant::q8_1::BlockQ8_1;

/// Eight f32 lanes as two vectors (lanes 0..4, 4..8).
pub(super) type Lanes = [float32x4_t; 2];

/// The low nibbles (elements 0..16) and high nibbles (16..32) of a 4-bit block.
#[inline]
#[target_feature(enable = "neon")]
fn nibbles(qs: &[u8; 16]) -> [uint8x16_t; 2] {
    let v = ld_u8(qs);
    [vandq_u8(v, vdupq_n_u8(0x0f)), vshrq_n_u8::<4>(v)]
}

/// The 32 bits of `qh` (little-endian) as bytes of 0x00 / 0xFF: bit `16h + k` to byte `k` of
/// vector `h`.
#[inline]
#[target_feature(enable = "neon")]
fn bit_masks(qh: [u8; 4]) -> [uint8x16_t; 2] {
    // Byte k of this vector is 1 << (k % 8).
    let bit = vreinterpretq_u8_u64(vdupq_n_u64(0x8040_2010_0804_0201));
    let spread = |lo: u8, hi: u8| vcombine_u8(vdup_n_u8(lo), vdup_n_u8(hi));
    [
        vtstq_u8(spread(qh[0], qh[1]), bit),
        vtstq_u8(spread(qh[2], qh[3]), bit),
    ]
}

/// Q4_0's 32 quants as signed bytes (`q - 8`), elements 0..16 and 16..32.
#[inline]
#[target_feature(enable = "neon")]
pub(super) fn quants_q4_0(x: &BlockQ4_0) -> [int8x16_t; 2] {
    let [lo, hi] = nibbles(&x.qs);
    let eight = vdupq_n_s8(8);
    [vsubq_s8(s8(lo), eight), vsubq_s8(s8(hi), eight)]
}

/// Q4_1's 32 quants (0..16) as bytes.
#[inline]
#[target_feature(enable = "neon")]
pub(super) fn quants_q4_1(x: &BlockQ4_1) -> [int8x16_t; 2] {
    let [lo, hi] = nibbles(&x.qs);
    [s8(lo), s8(hi)]
}

/// Q5_0's 32 quants as signed bytes (`q - 16`).
#[inline]
#[target_feature(enable = "neon")]
pub(super) fn quants_q5_0(x: &BlockQ5_0) -> [int8x16_t; 2] {
    let nib = nibbles(&x.qs);
    let set = bit_masks(x.qh);
    // A clear fifth bit means q - 16 is negative: OR in 0xF0 to sign-extend the nibble.
    let neg = vdupq_n_u8(0xf0);
    [
        s8(vorrq_u8(nib[0], vbicq_u8(neg, set[0]))),
        s8(vorrq_u8(nib[1], vbicq_u8(neg, set[1]))),
    ]
}

/// Q5_1's 32 quants (0..32) as bytes.
#[inline]
#[target_feature(enable = "neon")]
pub(super) fn quants_q5_1(x: &BlockQ5_1) -> [int8x16_t; 2] {
    let nib = nibbles(&x.qs);
    let set = bit_masks(x.qh);
    let five = vdupq_n_u8(0x10);
    [
        s8(vorrq_u8(nib[0], vandq_u8(set[0], five))),
        s8(vorrq_u8(nib[1], vandq_u8(set[1], five))),
    ]
}

/// Q8_0's 32 quants.
#[inline]
#[target_feature(enable = "neon")]
pub(super) fn quants_q8_0(x: &BlockQ8_0) -> [int8x16_t; 2] {
    [ld_i8(&x.qs[..16]), ld_i8(&x.qs[16..])]
}

/// Adds `d ·` (the integer dot of the block's quants `qx` with `y`) to `acc`, lane by lane.
///
/// # Safety
/// The CPU must have `D`'s features.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn block_dot<D: Dot4>(acc: &mut Lanes, qx: &[int8x16_t; 2], y: &[i8; 32], d: f32) {
    let y = [ld_i8(&y[..16]), ld_i8(&y[16..])];
    // SAFETY: the caller guarantees `D`'s features.
    unsafe { fma_block::<D>(acc, qx, y, d) };
}

/// [`block_dot`] with the activation quants already loaded: the one per-block step every
/// 32-element kernel (dot products and tiles) takes, so all give the same bits.
///
/// # Safety
/// The CPU must have `D`'s features.
#[inline(always)]
pub(super) unsafe fn fma_block<D: Dot4>(
    acc: &mut Lanes,
    qx: &[int8x16_t; 2],
    y: [int8x16_t; 2],
    d: f32,
) {
    // SAFETY: the caller guarantees `D`'s features (NEON is part of every aarch64 CPU).
    unsafe {
        let zero = vdupq_n_s32(0);
        let p = [D::dot4(zero, qx[0], y[0]), D::dot4(zero, qx[1], y[1])];
        acc[0] = vfmaq_n_f32(acc[0], vcvtq_f32_s32(p[0]), d);
        acc[1] = vfmaq_n_f32(acc[1], vcvtq_f32_s32(p[1]), d);
    }
}

/// The sum of the eight lanes in ggml's `hsum_float_8` order, plus `extra`.
#[inline]
#[target_feature(enable = "neon")]
pub(super) fn finish(acc: &Lanes, extra: f32) -> f32 {
    let t = vaddq_f32(acc[1], acc[0]);
    let (t0, t1) = (vgetq_lane_f32::<0>(t), vgetq_lane_f32::<1>(t));
    let (t2, t3) = (vgetq_lane_f32::<2>(t), vgetq_lane_f32::<3>(t));
    ((t0 + t2) + (t1 + t3)) + extra
}

/// Fresh accumulators for `R` rows.
#[inline]
#[target_feature(enable = "neon")]
fn zeros<const R: usize>() -> [Lanes; R] {
    [[vdupq_n_f32(0.0); 2]; R]
}

/// # Safety
/// The CPU must have `D`'s features.
#[target_feature(enable = "neon")]
pub(super) unsafe fn dot_q4_0<D: Dot4, const R: usize>(
    w: &[BlockQ4_0],
    a: [&[BlockQ8_0]; R],
) -> [f32; R] {
    let a = a.map(|a| &a[..w.len()]);
    let mut acc = zeros::<R>();
    for (i, x) in w.iter().enumerate() {
        let qx = quants_q4_0(x);
        let dx = f16(x.d);
        for r in 0..R {
            let y = &a[r][i];
            // SAFETY: the caller guarantees `D`'s features.
            unsafe { block_dot::<D>(&mut acc[r], &qx, &y.qs, dx * f16(y.d)) };
        }
    }
    let mut out = [0f32; R];
    for r in 0..R {
        out[r] = finish(&acc[r], 0.0);
    }
    out
}

/// One accumulator and one running minimum term per row, as ggml's x86 kernel has.
///
/// # Safety
/// The CPU must have `D`'s features.
#[target_feature(enable = "neon")]
pub(super) unsafe fn dot_q4_1<D: Dot4, const R: usize>(
    w: &[BlockQ4_1],
    a: [&[BlockQ8_1]; R],
) -> [f32; R] {
    let a = a.map(|a| &a[..w.len()]);
    let mut acc = zeros::<R>();
    let mut summs = [0f32; R];
    for (i, x) in w.iter().enumerate() {
        let qx = quants_q4_1(x);
        let (dx, mx) = (f16(x.d), f16(x.m));
        for r in 0..R {
            let y = &a[r][i];
            summs[r] += mx * f16(y.s);
            // SAFETY: the caller guarantees `D`'s features.
            unsafe { block_dot::<D>(&mut acc[r], &qx, &y.qs, dx * f16(y.d)) };
        }
    }
    let mut out = [0f32; R];
    for r in 0..R {
        out[r] = finish(&acc[r], summs[r]);
    }
    out
}

/// # Safety
/// The CPU must have `D`'s features.
#[target_feature(enable = "neon")]
pub(super) unsafe fn dot_q5_0<D: Dot4, const R: usize>(
    w: &[BlockQ5_0],
    a: [&[BlockQ8_0]; R],
) -> [f32; R] {
    let a = a.map(|a| &a[..w.len()]);
    let mut acc = zeros::<R>();
    for (i, x) in w.iter().enumerate() {
        let qx = quants_q5_0(x);
        let dx = f16(x.d);
        for r in 0..R {
            let y = &a[r][i];
            // SAFETY: the caller guarantees `D`'s features.
            unsafe { block_dot::<D>(&mut acc[r], &qx, &y.qs, dx * f16(y.d)) };
        }
    }
    let mut out = [0f32; R];
    for r in 0..R {
        out[r] = finish(&acc[r], 0.0);
    }
    out
}

/// # Safety
/// The CPU must have `D`'s features.
#[target_feature(enable = "neon")]
pub(super) unsafe fn dot_q5_1<D: Dot4, const R: usize>(
    w: &[BlockQ5_1],
    a: [&[BlockQ8_1]; R],
) -> [f32; R] {
    let a = a.map(|a| &a[..w.len()]);
    let mut acc = zeros::<R>();
    let mut summs = [0f32; R];
    for (i, x) in w.iter().enumerate() {
        let qx = quants_q5_1(x);
        let (dx, mx) = (f16(x.d), f16(x.m));
        for r in 0..R {
            let y = &a[r][i];
            summs[r] += mx * f16(y.s);
            // SAFETY: the caller guarantees `D`'s features.
            unsafe { block_dot::<D>(&mut acc[r], &qx, &y.qs, dx * f16(y.d)) };
        }
    }
    let mut out = [0f32; R];
    for r in 0..R {
        out[r] = finish(&acc[r], summs[r]);
    }
    out
}

/// # Safety
/// The CPU must have `D`'s features.
#[target_feature(enable = "neon")]
pub(super) unsafe fn dot_q8_0<D: Dot4, const R: usize>(
    w: &[BlockQ8_0],
    a: [&[BlockQ8_0]; R],
) -> [f32; R] {
    let a = a.map(|a| &a[..w.len()]);
    let mut acc = zeros::<R>();
    for (i, x) in w.iter().enumerate() {
        let qx = quants_q8_0(x);
        let dx = f16(x.d);
        for r in 0..R {
            let y = &a[r][i];
            // SAFETY: the caller guarantees `D`'s features.
            unsafe { block_dot::<D>(&mut acc[r], &qx, &y.qs, dx * f16(y.d)) };
        }
    }
    let mut out = [0f32; R];
    for r in 0..R {
        out[r] = finish(&acc[r], 0.0);
    }
    out
}
