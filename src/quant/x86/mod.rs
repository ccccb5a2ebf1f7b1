//! x86-64 SIMD kernels and the tables that install them. `avx2` needs AVX2, FMA and F16C;
//! `avx512` additionally needs AVX-512 F/BW/VL and VNNI and replaces the 32-element formats'
//! integer multiply-accumulate with `vpdpbusd`. Detection happens here, at run time, never from
//! compile-time target features.

mod common;
mod k_quants;
mod legacy;
mod quantize;

use super::block::{as_blocks, as_blocks_mut};
use super::dispatch::{slot, Kernels};
use super::GgmlType as T;

fn has_avx2() -> bool {
    is_x86_feature_detected!("avx2")
        && is_x86_feature_detected!("fma")
        && is_x86_feature_detected!("f16c")
}

fn has_avx512() -> bool {
    has_avx2()
        && is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512vl")
        && is_x86_feature_detected!("avx512vnni")
}

/// `base` with the AVX2 kernels installed, or `None` if this CPU lacks AVX2/FMA/F16C.
pub(super) fn avx2(mut k: Kernels) -> Option<Kernels> {
    if !has_avx2() {
        return None;
    }
    k.name = "avx2";
    // SAFETY (every `unsafe` below): these closures are only reachable through this table,
    // which exists only after `has_avx2()` confirmed AVX2, FMA and F16C.
    k.vec_dot[slot(T::F16)] = Some(|w, a| unsafe { legacy::dot_f16(w, a) });
    k.vec_dot[slot(T::Q4_0)] =
        Some(|w, a| unsafe { legacy::avx2::dot_q4_0(as_blocks(w), as_blocks(a)) });
    k.vec_dot[slot(T::Q4_1)] =
        Some(|w, a| unsafe { legacy::avx2::dot_q4_1(as_blocks(w), as_blocks(a)) });
    k.vec_dot[slot(T::Q5_0)] =
        Some(|w, a| unsafe { legacy::avx2::dot_q5_0(as_blocks(w), as_blocks(a)) });
    k.vec_dot[slot(T::Q5_1)] =
        Some(|w, a| unsafe { legacy::avx2::dot_q5_1(as_blocks(w), as_blocks(a)) });
    k.vec_dot[slot(T::Q8_0)] =
        Some(|w, a| unsafe { legacy::avx2::dot_q8_0(as_blocks(w), as_blocks(a)) });
    k.vec_dot[slot(T::Q2K)] =
        Some(|w, a| unsafe { k_quants::dot_q2_k(as_blocks(w), as_blocks(a)) });
    k.vec_dot[slot(T::Q3K)] =
        Some(|w, a| unsafe { k_quants::dot_q3_k(as_blocks(w), as_blocks(a)) });
    k.vec_dot[slot(T::Q4K)] =
        Some(|w, a| unsafe { k_quants::dot_q4_k(as_blocks(w), as_blocks(a)) });
    k.vec_dot[slot(T::Q5K)] =
        Some(|w, a| unsafe { k_quants::dot_q5_k(as_blocks(w), as_blocks(a)) });
    k.vec_dot[slot(T::Q6K)] =
        Some(|w, a| unsafe { k_quants::dot_q6_k(as_blocks(w), as_blocks(a)) });
    k.quantize[slot(T::Q8_0)] =
        Some(|x, y| unsafe { quantize::quantize_q8_0(x, as_blocks_mut(y)) });
    k.quantize[slot(T::Q8_1)] =
        Some(|x, y| unsafe { quantize::quantize_q8_1(x, as_blocks_mut(y)) });
    k.quantize[slot(T::Q8K)] = Some(|x, y| unsafe { quantize::quantize_q8_k(x, as_blocks_mut(y)) });
    Some(k)
}

/// `avx2_table` with the AVX-512 VNNI kernels installed, or `None` if this CPU lacks them.
pub(super) fn avx512(mut k: Kernels) -> Option<Kernels> {
    if !has_avx512() {
        return None;
    }
    k.name = "avx512";
    // SAFETY (every `unsafe` below): reachable only through this table, which exists only after
    // `has_avx512()` confirmed AVX2, FMA, F16C, AVX-512 F/BW/VL and VNNI.
    k.vec_dot[slot(T::Q4_0)] =
        Some(|w, a| unsafe { legacy::vnni::dot_q4_0(as_blocks(w), as_blocks(a)) });
    k.vec_dot[slot(T::Q4_1)] =
        Some(|w, a| unsafe { legacy::vnni::dot_q4_1(as_blocks(w), as_blocks(a)) });
    k.vec_dot[slot(T::Q5_0)] =
        Some(|w, a| unsafe { legacy::vnni::dot_q5_0(as_blocks(w), as_blocks(a)) });
    k.vec_dot[slot(T::Q5_1)] =
        Some(|w, a| unsafe { legacy::vnni::dot_q5_1(as_blocks(w), as_blocks(a)) });
    k.vec_dot[slot(T::Q8_0)] =
        Some(|w, a| unsafe { legacy::vnni::dot_q8_0(as_blocks(w), as_blocks(a)) });
    Some(k)
}
