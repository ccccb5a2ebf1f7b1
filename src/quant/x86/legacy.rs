//! x86 dot products for the 32-element formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) and F16.
//! The AVX2 body lives in `legacy_body.rs` (256-bit vectors, one block per vector, `vpmaddubsw`);
//! batches and matrix-vector products go through `tiles32_avx2.rs` and `matvec32_avx2.rs`
//! (`tiles32.rs` and `matvec32.rs` on AVX-512), with the same float order. The structure follows
//! ggml's AVX2 kernels: per block an exact integer dot in eight i32 lanes, scaled and
//! accumulated in f32 lanes with FMA, summed horizontally at the end.

use std::arch::x86_64::*;

use super::common::*;
use crate::quant::q4_0::BlockQ4_0;
use crate::quant::q4_1::BlockQ4_1;
use crate::quant::q5_0::BlockQ5_0;
use crate::quant::q5_1::BlockQ5_1;
use crate::quant::q8_0::BlockQ8_0;
use crate::quant::q8_1::BlockQ8_1;

/// The AVX2 (+FMA, F16C) instantiation.
pub(super) mod avx2 {
    use super::*;
    use crate::quant::x86::common::mul_sum_us8_avx2 as mul_sum_us8;
    macro_rules! tf {
        ($($item:item)*) => { $( #[target_feature(enable = "avx2,fma,f16c")] $item )* };
    }
    include!("legacy_body.rs");
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
