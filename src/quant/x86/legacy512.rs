//! AVX-512 VNNI dot products for the 32-element formats on 512-bit vectors: two blocks per
//! vector (`vpdpbusd` over 64 bytes), per-block scales as a vector of two broadcast halves,
//! and one f32 accumulator of 16 lanes per activation row. Sums are reassociated relative to
//! the scalar reference (rounding differences only); the operation sequence per activation row
//! does not depend on `R`, so every `R` gives the same bits.

use std::arch::x86_64::*;

use super::common::*;
use crate::quant::q4_0::BlockQ4_0;
use crate::quant::q5_0::BlockQ5_0;
use crate::quant::q5_1::BlockQ5_1;
use crate::quant::q8_0::BlockQ8_0;
use crate::quant::q8_1::BlockQ8_1;

/// Two 256-bit halves as one vector (`lo` in the low half).
#[inline]
#[target_feature(enable = "avx512f")]
fn join(lo: __m256i, hi: __m256i) -> __m512i {
    _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi)
}

/// `a` in the low eight lanes, `b` in the high eight.
#[inline]
#[target_feature(enable = "avx512f")]
fn pair_ps(a: f32, b: f32) -> __m512 {
    _mm512_mask_blend_ps(0xff00, _mm512_set1_ps(a), _mm512_set1_ps(b))
}

/// Adds `d · p` (i32 lanes) to `acc`.
#[inline]
#[target_feature(enable = "avx512f")]
fn scaled_add(acc: __m512, d: __m512, p: __m512i) -> __m512 {
    _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(p), acc)
}

/// Signed weights `qx` × signed activations `y`: |qx| × (y with qx's sign), four per i32 lane.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
fn dot_signed(ax: __m512i, neg: __mmask64, y: __m512i) -> __m512i {
    let sy = _mm512_mask_sub_epi8(y, neg, _mm512_setzero_si512(), y);
    _mm512_dpbusd_epi32(_mm512_setzero_si512(), ax, sy)
}

/// 16 floats from the start of `s`.
#[inline]
#[target_feature(enable = "avx512f")]
fn ld16f(s: &[f32]) -> __m512 {
    assert!(s.len() >= 16);
    // SAFETY: at least 16 readable floats; unaligned load.
    unsafe { _mm512_loadu_ps(s.as_ptr()) }
}

/// Floats per block pair in a row of prepared activation scales: `d` of both blocks as
/// [`pair_ps`], then `s` (Q8_1's `d·Σq`) the same way.
pub(in crate::quant) const SCALES_PER_PAIR: usize = 32;

/// Prepared scales of one activation row (Q8_0 or Q8_1 blocks of `block_bytes`, `d` at byte 0
/// and, for Q8_1, `s` at byte 2): see [`SCALES_PER_PAIR`]. Exact f16 to f32 conversions.
pub(in crate::quant) fn prepare_scales(row: &[u8], block_bytes: usize, out: &mut [f32]) {
    let f = |b: &[u8], o: usize| crate::quant::f16_to_f32([b[o], b[o + 1]]);
    for (p, pair) in row.chunks(2 * block_bytes).enumerate() {
        let o = &mut out[p * SCALES_PER_PAIR..][..SCALES_PER_PAIR];
        o.fill(0.0);
        for (h, b) in pair.chunks_exact(block_bytes).enumerate() {
            o[8 * h..8 * h + 8].fill(f(b, 0));
            if block_bytes == 36 {
                o[16 + 8 * h..24 + 8 * h].fill(f(b, 2));
            }
        }
    }
}

/// Kernels for the formats whose quants decode to signed bytes and pair with Q8_0; `$decode`
/// turns one weight block `$x` into 32 signed bytes. `$name` reads the activation scales from
/// the blocks, `$scaled` from prepared scales ([`prepare_scales`]); both give the same bits.
macro_rules! signed_kernel {
    ($name:ident, $scaled:ident, $block:ty, |$x:ident| $decode:expr) => {
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
        pub(in crate::quant) fn $name<const R: usize>(
            w: &[$block],
            a: [&[BlockQ8_0]; R],
        ) -> [f32; R] {
            let a = a.map(|a| &a[..w.len()]);
            let decode = |$x: &$block| $decode;
            signed_body!(w, a, decode, |r, i, two| {
                let dy1 = if two { f16(a[r][i + 1].d) } else { 0.0 };
                pair_ps(f16(a[r][i].d), dy1)
            })
        }

        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
        pub(in crate::quant) fn $scaled<const R: usize>(
            w: &[$block],
            a: [&[BlockQ8_0]; R],
            sc: [&[f32]; R],
        ) -> [f32; R] {
            let a = a.map(|a| &a[..w.len()]);
            let decode = |$x: &$block| $decode;
            signed_body!(w, a, decode, |r, i, _two| ld16f(
                &sc[r][i / 2 * SCALES_PER_PAIR..]
            ))
        }
    };
}

/// The loop shared by both flavours of [`signed_kernel`]; `$dy(r, i, two)` gives row `r`'s
/// activation scales of blocks `i` and `i + 1` as [`pair_ps`].
macro_rules! signed_body {
    ($w:ident, $a:ident, $decode:ident, |$r:ident, $i:ident, $two:ident| $dy:expr) => {{
        let mut acc = [_mm512_setzero_ps(); R];
        let mut $i = 0;
        while $i < $w.len() {
            // Two blocks, or the last one with a zero second half.
            let $two = $i + 1 < $w.len();
            let qx = if $two {
                join($decode(&$w[$i]), $decode(&$w[$i + 1]))
            } else {
                _mm512_zextsi256_si512($decode(&$w[$i]))
            };
            let ax = _mm512_abs_epi8(qx);
            let neg = _mm512_movepi8_mask(qx);
            let dx1 = if $two { f16($w[$i + 1].d) } else { 0.0 };
            let dx = pair_ps(f16($w[$i].d), dx1);
            for $r in 0..R {
                let y0 = &$a[$r][$i];
                let y = if $two {
                    join(ld32i(&y0.qs), ld32i(&$a[$r][$i + 1].qs))
                } else {
                    _mm512_zextsi256_si512(ld32i(&y0.qs))
                };
                let p = dot_signed(ax, neg, y);
                let d = _mm512_mul_ps(dx, $dy);
                acc[$r] = scaled_add(acc[$r], d, p);
            }
            $i += 2;
        }
        acc.map(|v| _mm512_reduce_add_ps(v))
    }};
}

signed_kernel!(dot_q8_0, dot_q8_0_scaled, BlockQ8_0, |x| ld32i(&x.qs));

signed_kernel!(dot_q4_0, dot_q4_0_scaled, BlockQ4_0, |x| _mm256_sub_epi8(
    nibbles_32(&x.qs),
    _mm256_set1_epi8(8)
));

// A clear fifth bit means q - 16 is negative: OR in 0xF0 to sign-extend.
signed_kernel!(dot_q5_0, dot_q5_0_scaled, BlockQ5_0, |x| _mm256_or_si256(
    nibbles_32(&x.qs),
    _mm256_andnot_si256(bits_to_bytes_32(x.qh), _mm256_set1_epi8(-16))
));

/// Kernels for the formats with a minimum (unsigned quants, Q8_1 activations whose `s` carries
/// the minimum's term); `$decode` turns one weight block `$x` into 32 unsigned bytes. As in
/// [`signed_kernel`], `$scaled` reads prepared scales and gives `$name`'s bits.
macro_rules! unsigned_kernel {
    ($name:ident, $scaled:ident, $block:ty, |$x:ident| $decode:expr) => {
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
        pub(in crate::quant) fn $name<const R: usize>(
            w: &[$block],
            a: [&[BlockQ8_1]; R],
        ) -> [f32; R] {
            let a = a.map(|a| &a[..w.len()]);
            let decode = |$x: &$block| $decode;
            unsigned_body!(w, a, decode, |r, i, two| {
                let y0 = &a[r][i];
                let (dy1, sy1) = if two {
                    (f16(a[r][i + 1].d), f16(a[r][i + 1].s))
                } else {
                    (0.0, 0.0)
                };
                (pair_ps(f16(y0.d), dy1), f16(y0.s), sy1)
            })
        }

        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
        pub(in crate::quant) fn $scaled<const R: usize>(
            w: &[$block],
            a: [&[BlockQ8_1]; R],
            sc: [&[f32]; R],
        ) -> [f32; R] {
            let a = a.map(|a| &a[..w.len()]);
            let decode = |$x: &$block| $decode;
            unsigned_body!(w, a, decode, |r, i, _two| {
                let s = &sc[r][i / 2 * SCALES_PER_PAIR..][..SCALES_PER_PAIR];
                (ld16f(s), s[16], s[24])
            })
        }
    };
}

/// The loop shared by both flavours of [`unsigned_kernel`]; `$dy(r, i, two)` gives row `r`'s
/// activation scales of blocks `i` and `i + 1` as [`pair_ps`] and their two `s` values.
macro_rules! unsigned_body {
    ($w:ident, $a:ident, $decode:ident, |$r:ident, $i:ident, $two:ident| $dy:expr) => {{
        let mut acc = [_mm512_setzero_ps(); R];
        let mut summs = [0f32; R];
        let mut $i = 0;
        while $i < $w.len() {
            let $two = $i + 1 < $w.len();
            let q = if $two {
                join($decode(&$w[$i]), $decode(&$w[$i + 1]))
            } else {
                _mm512_zextsi256_si512($decode(&$w[$i]))
            };
            let mx0 = f16($w[$i].m);
            let (dx1, mx1) = if $two {
                (f16($w[$i + 1].d), f16($w[$i + 1].m))
            } else {
                (0.0, 0.0)
            };
            let dx = pair_ps(f16($w[$i].d), dx1);
            for $r in 0..R {
                let y0 = &$a[$r][$i];
                let y = if $two {
                    join(ld32i(&y0.qs), ld32i(&$a[$r][$i + 1].qs))
                } else {
                    _mm512_zextsi256_si512(ld32i(&y0.qs))
                };
                let (dy, sy0, sy1) = $dy;
                summs[$r] += mx0 * sy0 + mx1 * sy1;
                let p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q, y);
                let d = _mm512_mul_ps(dx, dy);
                acc[$r] = scaled_add(acc[$r], d, p);
            }
            $i += 2;
        }
        std::array::from_fn(|r| _mm512_reduce_add_ps(acc[r]) + summs[r])
    }};
}

unsigned_kernel!(dot_q5_1, dot_q5_1_scaled, BlockQ5_1, |x| _mm256_or_si256(
    nibbles_32(&x.qs),
    _mm256_and_si256(bits_to_bytes_32(x.qh), _mm256_set1_epi8(0x10))
));
