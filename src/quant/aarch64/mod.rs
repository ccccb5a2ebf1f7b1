//! aarch64 NEON kernels and the tables that install them. `neon` needs only the baseline
//! Advanced SIMD of every aarch64 CPU and forms its integer dot products with widening
//! multiplies; `dotprod` additionally needs FEAT_DotProd (Armv8.2+, detected at run time) and
//! forms them with `sdot`. Both flavours run the same kernel code, generic over [`Dot4`], and
//! give the same bits (the integer sums are exact).
//!
//! This module owns the flavours, the small NEON helpers the kernels share and the tables;
//! the kernels live in `legacy.rs` (32-element dot products), `k_quants.rs` (Q2_K..Q6_K dot
//! products), `tiles32.rs` and `tiles_k.rs` (tile kernels for batches: the 32-element formats,
//! Q4_K/Q5_K/Q6_K), `matvec32.rs` and `matvec_k.rs` (multi-row matrix-vector kernels for the
//! same formats), `half.rs` (F16 and BF16: dot products, tiles and matrix-vector kernels in
//! the x86 float order) and `quantize.rs` (activation quantizers). Every tile and matrix-vector
//! result has the bits of its flavour's dot product. Matrix-level work stays in `ops/`.

mod half;
mod k_quants;
mod legacy;
mod matvec32;
mod matvec_k;
mod quantize;
mod tiles32;
mod tiles_k;

use std::arch::aarch64::*;
use std::arch::asm;

use super::block::{as_blocks, as_blocks_mut};
use super::dispatch::{by_rows, slot, Kernels, ROWS};
use super::q4_0::BlockQ4_0;
use super::q4_1::BlockQ4_1;
use super::q5_0::BlockQ5_0;
use super::q5_1::BlockQ5_1;
use super::q8_0::BlockQ8_0;
use super::GgmlType as T;

/// One way of forming four i32 lanes, each the sum of four adjacent i8 products.
pub(super) trait Dot4 {
    /// `acc[k] + Σ_{j<4} a[4k + j] · b[4k + j]` for `k` in 0..4 (exact).
    ///
    /// # Safety
    /// The CPU must have the flavour's features (checked before its table is built).
    unsafe fn dot4(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t;
}

/// Baseline NEON: `smull`/`smull2` to i16 products, then pairwise widening adds.
pub(super) struct Widening;

impl Dot4 for Widening {
    #[inline(always)]
    unsafe fn dot4(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
        // SAFETY: NEON is part of every aarch64 CPU (the target's baseline features).
        unsafe {
            let lo = vpaddlq_s16(vmull_s8(vget_low_s8(a), vget_low_s8(b)));
            let hi = vpaddlq_s16(vmull_high_s8(a, b));
            vaddq_s32(acc, vpaddq_s32(lo, hi))
        }
    }
}

/// FEAT_DotProd's `sdot`, written as inline assembly because `vdotq_s32` is not yet stable.
pub(super) struct Sdot;

impl Dot4 for Sdot {
    #[inline(always)]
    unsafe fn dot4(mut acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
        // SAFETY: the caller guarantees FEAT_DotProd; the instruction reads and writes only the
        // three vector registers named.
        unsafe {
            asm!(
                ".arch_extension dotprod",
                "sdot {acc:v}.4s, {a:v}.16b, {b:v}.16b",
                acc = inout(vreg) acc,
                a = in(vreg) a,
                b = in(vreg) b,
                options(pure, nomem, nostack, preserves_flags),
            );
        }
        acc
    }
}

/// 16 bytes from the start of `s`.
#[inline]
#[target_feature(enable = "neon")]
fn ld_u8(s: &[u8]) -> uint8x16_t {
    assert!(s.len() >= 16);
    // SAFETY: at least 16 readable bytes; `ld1` has no alignment requirement.
    unsafe { vld1q_u8(s.as_ptr()) }
}

/// 16 signed bytes from the start of `s`.
#[inline]
#[target_feature(enable = "neon")]
fn ld_i8(s: &[i8]) -> int8x16_t {
    assert!(s.len() >= 16);
    // SAFETY: at least 16 readable bytes; `ld1` has no alignment requirement.
    unsafe { vld1q_s8(s.as_ptr()) }
}

/// Eight little-endian i16 from the first 16 bytes of `s`.
#[inline]
#[target_feature(enable = "neon")]
fn ld_i16(s: &[u8]) -> int16x8_t {
    vreinterpretq_s16_u8(ld_u8(s))
}

/// f16 (little-endian bytes) to f32 with `fcvt`, exact (as `block::f16_to_f32`).
#[inline]
#[target_feature(enable = "neon")]
fn f16(b: [u8; 2]) -> f32 {
    let out: f32;
    // SAFETY: `fmov` and the half-to-single `fcvt` belong to the base aarch64 FP instruction
    // set; only the named registers are touched.
    unsafe {
        asm!(
            "fmov {v:s}, {w:w}",
            "fcvt {out:s}, {v:h}",
            w = in(reg) u16::from_le_bytes(b) as u32,
            v = out(vreg) _,
            out = lateout(vreg) out,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    out
}

/// Asks for the `len` bytes from `p` to be brought into L1 (a hint: `p` may point anywhere).
#[inline(always)]
fn prefetch(p: *const u8, len: usize) {
    // From the start of `p`'s 64-byte line, so the last line is not missed.
    let skew = p as usize % 64;
    let line0 = p.wrapping_sub(skew);
    for off in (0..len + skew).step_by(64) {
        // SAFETY: `prfm` is a hint: it never faults and changes no register or memory.
        unsafe {
            asm!(
                "prfm pldl1keep, [{p}]",
                p = in(reg) line0.wrapping_add(off),
                options(nostack, preserves_flags, readonly),
            );
        }
    }
}

/// Bytes of `v` as signed.
#[inline]
#[target_feature(enable = "neon")]
fn s8(v: uint8x16_t) -> int8x16_t {
    vreinterpretq_s8_u8(v)
}

/// Installs the multi-row kernel `$m::$f::<$d, R>` as both the single-row and the multi-row entry.
/// Only for use after the features of flavour `$d` were detected.
macro_rules! install {
    ($k:ident, $ty:expr, $m:ident::$f:ident, $d:ty) => {{
        // SAFETY: the table being built exists only after the flavour's CPU features were
        // detected (see the callers), and the entries are reachable only through it.
        $k.vec_dot[slot($ty)] =
            Some(|w, a| unsafe { $m::$f::<$d, 1>(as_blocks(w), [as_blocks(a)]) }[0]);
        $k.vec_dot_rows[slot($ty)] = Some(|w, acts, stride, row_bytes, out| unsafe {
            by_rows(
                $m::$f::<$d, 1>,
                $m::$f::<$d, ROWS>,
                w,
                acts,
                stride,
                row_bytes,
                out,
            )
        });
    }};
}

/// Installs the tile kernel `$m::gemm::<$f, $d>` and the matrix-vector kernel
/// `$mv::matvec::<$f, $d>` for `$ty`. Only for use after the features of flavour `$d` were
/// detected.
macro_rules! install_tiles {
    ($k:ident, $ty:expr, $m:ident, $mv:ident, $f:ty, $d:ty) => {{
        // SAFETY (both entries): as for `install!`.
        $k.gemm[slot($ty)] =
            Some(|w, n, a, p, o, ts, rs| unsafe { $m::gemm::<$f, $d>(w, n, a, p, o, ts, rs) });
        $k.matvec[slot($ty)] = Some(|w, a, o| unsafe { $mv::matvec::<$f, $d>(w, a, o) });
    }};
}

/// Installs every dot product, tile and matrix-vector kernel of flavour `$d` into `$k`.
macro_rules! install_dots {
    ($k:ident, $d:ty) => {{
        install!($k, T::Q4_0, legacy::dot_q4_0, $d);
        install!($k, T::Q4_1, legacy::dot_q4_1, $d);
        install!($k, T::Q5_0, legacy::dot_q5_0, $d);
        install!($k, T::Q5_1, legacy::dot_q5_1, $d);
        install!($k, T::Q8_0, legacy::dot_q8_0, $d);
        install!($k, T::Q2K, k_quants::dot_q2_k, $d);
        install!($k, T::Q3K, k_quants::dot_q3_k, $d);
        install!($k, T::Q4K, k_quants::dot_q4_k, $d);
        install!($k, T::Q5K, k_quants::dot_q5_k, $d);
        install!($k, T::Q6K, k_quants::dot_q6_k, $d);
        install_tiles!($k, T::Q4_0, tiles32, matvec32, BlockQ4_0, $d);
        install_tiles!($k, T::Q4_1, tiles32, matvec32, BlockQ4_1, $d);
        install_tiles!($k, T::Q5_0, tiles32, matvec32, BlockQ5_0, $d);
        install_tiles!($k, T::Q5_1, tiles32, matvec32, BlockQ5_1, $d);
        install_tiles!($k, T::Q8_0, tiles32, matvec32, BlockQ8_0, $d);
        install_tiles!($k, T::Q4K, tiles_k, matvec_k, tiles_k::Q4K, $d);
        install_tiles!($k, T::Q5K, tiles_k, matvec_k, tiles_k::Q5K, $d);
        install_tiles!($k, T::Q6K, tiles_k, matvec_k, tiles_k::Q6K, $d);
        install_half(&mut $k);
    }};
}

/// The F16 and BF16 dot products, tiles and matrix-vector kernels (the same for both
/// flavours: no integer dot products involved). Only for use after NEON was detected.
fn install_half(k: &mut Kernels) {
    use half::{Bf16, F16};
    // SAFETY (every `unsafe` below): NEON is part of every aarch64 CPU.
    k.vec_dot[slot(T::F16)] = Some(|w, a| unsafe { half::dot::<F16>(w, a) });
    k.vec_dot[slot(T::BF16)] = Some(|w, a| unsafe { half::dot::<Bf16>(w, a) });
    k.gemm[slot(T::F16)] =
        Some(|w, n, a, p, o, ts, rs| unsafe { half::gemm::<F16>(w, n, a, p, o, ts, rs) });
    k.gemm[slot(T::BF16)] =
        Some(|w, n, a, p, o, ts, rs| unsafe { half::gemm::<Bf16>(w, n, a, p, o, ts, rs) });
    k.matvec[slot(T::F16)] = Some(|w, a, o| unsafe { half::matvec::<F16>(w, a, o) });
    k.matvec[slot(T::BF16)] = Some(|w, a, o| unsafe { half::matvec::<Bf16>(w, a, o) });
}

/// `base` with the baseline NEON kernels installed, or `None` if this CPU lacks NEON (no
/// aarch64 Linux CPU does).
pub(super) fn neon(mut k: Kernels) -> Option<Kernels> {
    if !std::arch::is_aarch64_feature_detected!("neon") {
        return None;
    }
    k.name = "neon";
    install_dots!(k, Widening);
    // SAFETY (every `unsafe` below): reachable only through this table, which exists only
    // after NEON was detected.
    k.quantize[slot(T::Q8_0)] =
        Some(|x, y| unsafe { quantize::quantize_q8_0(x, as_blocks_mut(y)) });
    k.quantize[slot(T::Q8_1)] =
        Some(|x, y| unsafe { quantize::quantize_q8_1(x, as_blocks_mut(y)) });
    k.quantize[slot(T::Q8K)] = Some(|x, y| unsafe { quantize::quantize_q8_k(x, as_blocks_mut(y)) });
    Some(k)
}

/// The NEON table `k` with the dot products redone with `sdot`, or `None` if this CPU lacks
/// FEAT_DotProd.
pub(super) fn dotprod(mut k: Kernels) -> Option<Kernels> {
    if !std::arch::is_aarch64_feature_detected!("dotprod") {
        return None;
    }
    k.name = "dotprod";
    install_dots!(k, Sdot);
    Some(k)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fcvt_matches_half_for_every_f16() {
        for bits in 0..=u16::MAX {
            let b = bits.to_le_bytes();
            // SAFETY: NEON is part of every aarch64 CPU.
            let got = unsafe { f16(b) };
            let want = super::super::block::f16_to_f32(b);
            if want.is_nan() {
                assert!(got.is_nan(), "{bits:#06x}");
            } else {
                assert_eq!(got.to_bits(), want.to_bits(), "{bits:#06x}");
            }
        }
    }

    /// Both flavours are offered where the CPU has them, and give the same bits for every type
    /// (their integer sums are exact); Q4_1, whose scalar reference keeps the x86 lane order
    /// these kernels follow, gives the scalar bits too.
    #[test]
    fn flavours_agree_bit_for_bit() {
        use crate::quant::quantize_row;
        let avail = super::super::dispatch::available();
        let names: Vec<_> = avail.iter().map(|k| k.name).collect();
        let mut want = vec!["scalar", "neon"];
        if std::arch::is_aarch64_feature_detected!("dotprod") {
            want.push("dotprod");
        }
        assert_eq!(names, want);
        let mut seed = 0x1234_5678u32;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            seed
        };
        let n = 1024;
        for ty in T::ALL {
            let Some(scalar) = avail[0].vec_dot[slot(ty)] else {
                continue;
            };
            if matches!(ty, T::F32 | T::F16 | T::BF16) {
                continue;
            }
            let mut w: Vec<u8> = (0..ty.bytes_for(n).unwrap())
                .map(|_| next() as u8)
                .collect();
            // Moderate f16 scales (and minimums) in every block: sign and the top mantissa bits kept,
            // exponent 0b01000 (2^-7).
            for b in w.chunks_exact_mut(ty.block_bytes()) {
                let offsets: &[usize] = match ty {
                    T::Q4_0 | T::Q5_0 | T::Q8_0 => &[0],
                    T::Q4_1 | T::Q5_1 | T::Q4K | T::Q5K => &[0, 2],
                    T::Q2K => &[80, 82],
                    T::Q3K => &[108],
                    _ => &[208],
                };
                for &o in offsets {
                    b[o + 1] = 0x20 | (b[o + 1] & 0x83);
                }
            }
            let x: Vec<f32> = (0..n).map(|_| next() as i32 as f32 / 3e9).collect();
            let at = ty.vec_dot_type();
            let mut a = vec![0u8; at.bytes_for(n).unwrap() as usize];
            quantize_row(at, &x, &mut a);
            let got: Vec<u32> = avail[1..]
                .iter()
                .map(|k| k.vec_dot[slot(ty)].unwrap()(&w, &a).to_bits())
                .collect();
            assert!(got.iter().all(|&g| g == got[0]), "{ty}: {got:x?}");
            if ty == T::Q4_1 {
                assert_eq!(got[0], scalar(&w, &a).to_bits(), "{ty}");
            }
        }
    }

    /// Both flavours carry tile and matrix-vector kernels for the formats that
    /// `quant::tests` compares with `vec_dot`, so those tests cannot pass by finding none.
    #[test]
    fn flavours_have_tiles_and_matvec() {
        let avail = super::super::dispatch::available();
        assert!(avail.len() >= 2);
        for k in &avail[1..] {
            for ty in [
                T::Q4_0,
                T::Q4_1,
                T::Q5_0,
                T::Q5_1,
                T::Q8_0,
                T::Q4K,
                T::Q5K,
                T::Q6K,
            ] {
                assert!(k.gemm[slot(ty)].is_some(), "{} {ty}: no tiles", k.name);
                assert!(k.matvec[slot(ty)].is_some(), "{} {ty}: no matvec", k.name);
            }
        }
    }

    #[test]
    fn dot4_flavours_sum_four_adjacent_products() {
        let a: [i8; 16] = std::array::from_fn(|i| (i as i8 - 8) * 16);
        let b: [i8; 16] = std::array::from_fn(|i| if i % 3 == 0 { -128 } else { 127 - i as i8 });
        let want: [i32; 4] = std::array::from_fn(|k| {
            (0..4)
                .map(|j| a[4 * k + j] as i32 * b[4 * k + j] as i32)
                .sum()
        });
        let acc = [1, -2, 3, -4];
        // SAFETY: NEON is baseline; `Sdot` runs only where FEAT_DotProd was detected.
        let run = |f: unsafe fn(int32x4_t, int8x16_t, int8x16_t) -> int32x4_t| unsafe {
            let r = f(
                vld1q_s32(acc.as_ptr()),
                vld1q_s8(a.as_ptr()),
                vld1q_s8(b.as_ptr()),
            );
            let mut out = [0i32; 4];
            vst1q_s32(out.as_mut_ptr(), r);
            out
        };
        let expect: [i32; 4] = std::array::from_fn(|k| want[k] + acc[k]);
        assert_eq!(run(Widening::dot4), expect);
        if std::arch::is_aarch64_feature_detected!("dotprod") {
            assert_eq!(run(Sdot::dot4), expect);
        }
    }
}
