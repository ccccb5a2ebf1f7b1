//! x86 dot products for the 32-element formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) and F16.
//! One body, instantiated twice: with AVX2's `vpmaddubsw` and with AVX-512 VNNI's `vpdpbusd`
//! (both on 256-bit vectors, one block per vector). The structure follows ggml's AVX2 kernels:
//! per block an exact integer dot in eight i32 lanes, scaled and accumulated in eight f32
//! lanes with FMA, summed horizontally at the end.

use std::arch::x86_64::*;

use super::common::*;
use crate::quant::q4_0::BlockQ4_0;
use crate::quant::q4_1::BlockQ4_1;
use crate::quant::q5_0::BlockQ5_0;
use crate::quant::q5_1::BlockQ5_1;
use crate::quant::q8_0::BlockQ8_0;
use crate::quant::q8_1::BlockQ8_1;

macro_rules! legacy_kernels {
    ($features:literal, $mul_sum_us8:ident) => {
        /// Signed × signed bytes via the sign trick (|x| × sign(x)·y), four products per lane.
        #[inline]
        #[target_feature(enable = $features)]
        fn mul_sum_i8(x: __m256i, y: __m256i) -> __m256i {
            $mul_sum_us8(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x))
        }

        #[target_feature(enable = $features)]
        pub(in crate::quant) fn dot_q4_0(w: &[BlockQ4_0], a: &[BlockQ8_0]) -> f32 {
            let mut acc = _mm256_setzero_ps();
            for (x, y) in w.iter().zip(a) {
                let d = _mm256_set1_ps(f16(x.d) * f16(y.d));
                let qx = _mm256_sub_epi8(nibbles_32(&x.qs), _mm256_set1_epi8(8));
                let p = mul_sum_i8(qx, ld32i(&y.qs));
                acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc);
            }
            hsum_f32_8(acc)
        }

        #[target_feature(enable = $features)]
        pub(in crate::quant) fn dot_q4_1(w: &[BlockQ4_1], a: &[BlockQ8_1]) -> f32 {
            let mut acc = _mm256_setzero_ps();
            let mut summs = 0f32;
            for (x, y) in w.iter().zip(a) {
                summs += f16(x.m) * f16(y.s);
                let d = _mm256_set1_ps(f16(x.d) * f16(y.d));
                let p = $mul_sum_us8(nibbles_32(&x.qs), ld32i(&y.qs));
                acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc);
            }
            hsum_f32_8(acc) + summs
        }

        #[target_feature(enable = $features)]
        pub(in crate::quant) fn dot_q5_0(w: &[BlockQ5_0], a: &[BlockQ8_0]) -> f32 {
            let mut acc = _mm256_setzero_ps();
            for (x, y) in w.iter().zip(a) {
                let d = _mm256_set1_ps(f16(x.d) * f16(y.d));
                // A clear fifth bit means q - 16 is negative: OR in 0xF0 to sign-extend.
                let hi = _mm256_andnot_si256(bits_to_bytes_32(x.qh), _mm256_set1_epi8(-16));
                let qx = _mm256_or_si256(nibbles_32(&x.qs), hi);
                let p = mul_sum_i8(qx, ld32i(&y.qs));
                acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc);
            }
            hsum_f32_8(acc)
        }

        #[target_feature(enable = $features)]
        pub(in crate::quant) fn dot_q5_1(w: &[BlockQ5_1], a: &[BlockQ8_1]) -> f32 {
            let mut acc = _mm256_setzero_ps();
            let mut summs = 0f32;
            for (x, y) in w.iter().zip(a) {
                summs += f16(x.m) * f16(y.s);
                let d = _mm256_set1_ps(f16(x.d) * f16(y.d));
                let hi = _mm256_and_si256(bits_to_bytes_32(x.qh), _mm256_set1_epi8(0x10));
                let qx = _mm256_or_si256(nibbles_32(&x.qs), hi);
                let p = $mul_sum_us8(qx, ld32i(&y.qs));
                acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc);
            }
            hsum_f32_8(acc) + summs
        }

        #[target_feature(enable = $features)]
        pub(in crate::quant) fn dot_q8_0(w: &[BlockQ8_0], a: &[BlockQ8_0]) -> f32 {
            let mut acc = _mm256_setzero_ps();
            for (x, y) in w.iter().zip(a) {
                let d = _mm256_set1_ps(f16(x.d) * f16(y.d));
                let p = mul_sum_i8(ld32i(&x.qs), ld32i(&y.qs));
                acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc);
            }
            hsum_f32_8(acc)
        }
    };
}

/// The AVX2 (+FMA, F16C) instantiation.
pub(super) mod avx2 {
    use super::*;
    legacy_kernels!("avx2,fma,f16c", mul_sum_us8_avx2);
}

/// The AVX-512 VNNI instantiation.
pub(super) mod vnni {
    use super::*;
    legacy_kernels!(
        "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
        mul_sum_us8_vnni
    );
}

/// F16 · F16 in f32 with four 8-lane FMA accumulators (ggml's AVX2 `ggml_vec_dot_f16` shape).
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::quant) fn dot_f16(w: &[u8], a: &[u8]) -> f32 {
    let n = w.len().min(a.len()) / 2;
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    while i + 32 <= n {
        for (k, acc) in acc.iter_mut().enumerate() {
            let o = 2 * (i + 8 * k);
            let x = _mm256_cvtph_ps(ld16(&w[o..]));
            let y = _mm256_cvtph_ps(ld16(&a[o..]));
            *acc = _mm256_fmadd_ps(x, y, *acc);
        }
        i += 32;
    }
    while i + 8 <= n {
        let x = _mm256_cvtph_ps(ld16(&w[2 * i..]));
        let y = _mm256_cvtph_ps(ld16(&a[2 * i..]));
        acc[0] = _mm256_fmadd_ps(x, y, acc[0]);
        i += 8;
    }
    let sum = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
    let mut s = hsum_f32_8(sum);
    while i < n {
        s += f16([w[2 * i], w[2 * i + 1]]) * f16([a[2 * i], a[2 * i + 1]]);
        i += 1;
    }
    s
}
