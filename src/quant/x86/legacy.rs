//! x86 dot products for the 32-element formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0).
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
