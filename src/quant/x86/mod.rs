//! x86-64 SIMD kernels and the tables that install them. `avx2` needs AVX2, FMA and F16C and
//! has tile and matrix-vector kernels for the 32-element formats (`tiles32_avx2.rs`,
//! `matvec32_avx2.rs`); `avx512` additionally needs AVX-512 F/BW/VL and VNNI and adds 512-bit
//! K-quant dot products, tile kernels for batches (`tiles32.rs`, `tiles_k.rs`) and
//! matrix-vector kernels (`matvec32.rs`). Detection happens here, at run time, never from
//! compile-time target features.

mod common;
mod half;
mod half_lanes8;
mod k_quants;
mod k_quants512;
mod legacy;
mod matvec32;
mod matvec32_avx2;
mod matvec_k_avx2;
mod matvec_k_avx512;
mod quantize;
mod tiles32;
mod tiles32_avx2;
mod tiles_k;
mod tiles_k_avx2;
mod tiles_q8_0;
mod x8_avx2;
mod x8_q4k_avx2;
mod x8_q6k_avx2;

use super::block::{as_blocks, as_blocks_mut};
use super::dispatch::{by_rows, slot, Kernels};
use super::GgmlType as T;

fn has_avx2() -> bool {
    crate::cpu::supports(crate::cpu::Isa::Avx2)
}

fn has_avx512() -> bool {
    crate::cpu::supports(crate::cpu::Isa::Avx512)
}

/// The first elements of `src` rounded to half and widened back into `dst`, eight at a time,
/// where this CPU has AVX2 and F16C; returns how many (0 without them).
pub(super) fn round_trip_f16(src: &[f32], dst: &mut [f32]) -> usize {
    if !has_avx2() {
        return 0;
    }
    // SAFETY: `has_avx2` also checks F16C.
    unsafe { half::round_trip_f16(src, dst) }
}

/// Installs a multi-row kernel `$f::<R>` as both the single-row and the multi-row entry.
/// Only for use after the features of `$f` were detected.
macro_rules! install {
    ($k:ident, $ty:expr, $f:path) => {{
        // SAFETY: the table being built exists only after the kernel's CPU features were
        // detected (see the callers), and the entries are reachable only through it.
        $k.vec_dot[slot($ty)] = Some(|w, a| unsafe { $f(as_blocks(w), [as_blocks(a)]) }[0]);
        $k.vec_dot_rows[slot($ty)] = Some(|w, acts, stride, row_bytes, out| unsafe {
            by_rows($f, $f, w, acts, stride, row_bytes, out)
        });
    }};
}

/// `base` with the AVX2 kernels installed, or `None` if this CPU lacks AVX2/FMA/F16C.
pub(super) fn avx2(mut k: Kernels) -> Option<Kernels> {
    if !has_avx2() {
        return None;
    }
    k.name = "avx2";
    install!(k, T::Q4_0, legacy::avx2::dot_q4_0);
    install!(k, T::Q4_1, legacy::avx2::dot_q4_1);
    install!(k, T::Q5_0, legacy::avx2::dot_q5_0);
    install!(k, T::Q5_1, legacy::avx2::dot_q5_1);
    install!(k, T::Q8_0, legacy::avx2::dot_q8_0);
    install!(k, T::Q2K, k_quants::dot_q2_k);
    install!(k, T::Q3K, k_quants::dot_q3_k);
    install!(k, T::Q4K, k_quants::dot_q4_k);
    install!(k, T::Q5K, k_quants::dot_q5_k);
    install!(k, T::Q6K, k_quants::dot_q6_k);
    // SAFETY (every `unsafe` below): reachable only through this table, which exists only
    // after `has_avx2()` confirmed AVX2, FMA and F16C.
    k.vec_dot[slot(T::F16)] = Some(|w, a| unsafe { half::dot::<half::F16>(w, a) });
    k.vec_dot[slot(T::BF16)] = Some(|w, a| unsafe { half::dot::<half::Bf16>(w, a) });
    k.gemm[slot(T::F16)] = Some(|w, n, a, p, o, ts, rs| unsafe {
        half::gemm_avx2::<half::F16>(w, n, a, p, o, ts, rs)
    });
    k.gemm[slot(T::BF16)] = Some(|w, n, a, p, o, ts, rs| unsafe {
        half::gemm_avx2::<half::Bf16>(w, n, a, p, o, ts, rs)
    });
    k.matvec[slot(T::F16)] = Some(|w, a, o| unsafe { half::matvec_avx2::<half::F16>(w, a, o) });
    k.matvec[slot(T::BF16)] = Some(|w, a, o| unsafe { half::matvec_avx2::<half::Bf16>(w, a, o) });
    k.quantize[slot(T::Q8_0)] =
        Some(|x, y| unsafe { quantize::quantize_q8_0(x, as_blocks_mut(y)) });
    k.quantize[slot(T::Q8_1)] =
        Some(|x, y| unsafe { quantize::quantize_q8_1(x, as_blocks_mut(y)) });
    k.quantize[slot(T::Q8K)] = Some(|x, y| unsafe { quantize::quantize_q8_k(x, as_blocks_mut(y)) });
    macro_rules! tiles32 {
        ($($ty:ident),*) => {$(
            k.gemm[slot(T::$ty)] = Some(|w, n, a, p, o, ts, rs| unsafe {
                tiles32_avx2::gemm::<tiles32::$ty>(w, n, a, p, o, ts, rs)
            });
            k.matvec[slot(T::$ty)] =
                Some(|w, a, o| unsafe { matvec32_avx2::matvec::<tiles32::$ty>(w, a, o) });
        )*};
    }
    tiles32!(Q4_0, Q4_1, Q5_0, Q5_1, Q8_0);
    k.gemm[slot(T::Q8_0)] =
        Some(|w, n, a, p, o, ts, rs| unsafe { tiles_q8_0::gemm_avx2(w, n, a, p, o, ts, rs) });
    install_k_tiles_avx2(&mut k);
    Some(k)
}

/// The AVX2 K-quant tiles and matrix-vector kernels (Q4_K, Q5_K, Q6_K).
/// Only for use after `has_avx2()`.
fn install_k_tiles_avx2(k: &mut Kernels) {
    use matvec_k_avx2::matvec;
    use tiles_k_avx2::{gemm, Q4K, Q5K, Q6K};
    // SAFETY (every `unsafe` below): reachable only through a table built after `has_avx2()`
    // confirmed AVX2, FMA and F16C.
    k.gemm[slot(T::Q4K)] =
        Some(|w, n, a, p, o, ts, rs| unsafe { gemm::<Q4K>(w, n, a, p, o, ts, rs) });
    k.gemm[slot(T::Q5K)] =
        Some(|w, n, a, p, o, ts, rs| unsafe { gemm::<Q5K>(w, n, a, p, o, ts, rs) });
    k.gemm[slot(T::Q6K)] =
        Some(|w, n, a, p, o, ts, rs| unsafe { gemm::<Q6K>(w, n, a, p, o, ts, rs) });
    k.matvec[slot(T::Q4K)] = Some(|w, a, o| unsafe { matvec_k_avx2::matvec_q4_k(w, a, o) });
    k.matvec[slot(T::Q5K)] = Some(|w, a, o| unsafe { matvec::<Q5K>(w, a, o) });
    k.matvec[slot(T::Q6K)] = Some(|w, a, o| unsafe { matvec_k_avx2::matvec_q6_k(w, a, o) });
    use x8_q4k_avx2::Q4K as X4;
    use x8_q6k_avx2::Q6K as X6;
    k.x8_matvec[slot(T::Q4K)] = Some(|w, a, o| unsafe { x8_avx2::matvec::<X4>(w, a, o) });
    k.x8_matvec[slot(T::Q6K)] = Some(|w, a, o| unsafe { x8_avx2::matvec::<X6>(w, a, o) });
    k.x8_gemm[slot(T::Q4K)] =
        Some(|w, n, y, o, ts, rs| unsafe { x8_avx2::gemm::<X4>(w, n, y, o, ts, rs) });
    k.x8_gemm[slot(T::Q6K)] =
        Some(|w, n, y, o, ts, rs| unsafe { x8_avx2::gemm::<X6>(w, n, y, o, ts, rs) });
}

/// The AVX2 table `k` with the AVX-512 (BW, VNNI) kernels installed, or `None` if this CPU lacks them.
pub(super) fn avx512(mut k: Kernels) -> Option<Kernels> {
    if !has_avx512() {
        return None;
    }
    k.name = "avx512";
    // The 32-element formats keep the AVX2 kernels: their float order is llama.cpp's (see
    // legacy_body.rs), which some models need to match it token for token.
    install!(k, T::Q4K, k_quants512::dot_q4_k);
    install!(k, T::Q6K, k_quants512::dot_q6_k);
    // Q4_K and Q6_K have matrix-vector kernels of their own (the AVX2 ones' prefetching and
    // f32 steps, 512-bit bodies); Q5_K keeps the AVX2 one.
    // SAFETY (every `unsafe` below): reachable only through this table, built after
    // `has_avx512()` confirmed AVX-512 F/BW/VL and VNNI (and AVX2, FMA, F16C).
    k.gemm[slot(T::Q4K)] = Some(|w, n, a, p, o, ts, rs| unsafe {
        let dot: fn(&[u8], &[u8]) -> f32 =
            |w, a| k_quants512::dot_q4_k::<1>(as_blocks(w), [as_blocks(a)])[0];
        tiles_k::gemm::<tiles_k::Q4K>(dot, w, n, a, p, o, ts, rs)
    });
    k.gemm[slot(T::Q6K)] = Some(|w, n, a, p, o, ts, rs| unsafe {
        let dot: fn(&[u8], &[u8]) -> f32 =
            |w, a| k_quants512::dot_q6_k::<1>(as_blocks(w), [as_blocks(a)])[0];
        tiles_k::gemm::<tiles_k::Q6K>(dot, w, n, a, p, o, ts, rs)
    });
    k.gemm[slot(T::F16)] = Some(|w, n, a, p, o, ts, rs| unsafe {
        half::gemm_avx512::<half::F16>(w, n, a, p, o, ts, rs)
    });
    k.gemm[slot(T::BF16)] = Some(|w, n, a, p, o, ts, rs| unsafe {
        half::gemm_avx512::<half::Bf16>(w, n, a, p, o, ts, rs)
    });
    k.matvec[slot(T::Q4K)] = Some(|w, a, o| unsafe { matvec_k_avx512::matvec_q4_k(w, a, o) });
    k.matvec[slot(T::Q6K)] = Some(|w, a, o| unsafe { matvec_k_avx512::matvec_q6_k(w, a, o) });
    k.matvec[slot(T::F16)] = Some(|w, a, o| unsafe { half::matvec_avx512::<half::F16>(w, a, o) });
    k.matvec[slot(T::BF16)] = Some(|w, a, o| unsafe { half::matvec_avx512::<half::Bf16>(w, a, o) });
    k.gemm[slot(T::Q4_0)] = Some(|w, n, a, p, o, ts, rs| unsafe {
        tiles32::gemm::<tiles32::Q4_0>(w, n, a, p, o, ts, rs)
    });
    k.matvec[slot(T::Q4_0)] = Some(|w, a, o| unsafe { matvec32::matvec::<tiles32::Q4_0>(w, a, o) });
    k.gemm[slot(T::Q4_1)] = Some(|w, n, a, p, o, ts, rs| unsafe {
        tiles32::gemm::<tiles32::Q4_1>(w, n, a, p, o, ts, rs)
    });
    k.matvec[slot(T::Q4_1)] = Some(|w, a, o| unsafe { matvec32::matvec::<tiles32::Q4_1>(w, a, o) });
    k.gemm[slot(T::Q5_0)] = Some(|w, n, a, p, o, ts, rs| unsafe {
        tiles32::gemm::<tiles32::Q5_0>(w, n, a, p, o, ts, rs)
    });
    k.matvec[slot(T::Q5_0)] = Some(|w, a, o| unsafe { matvec32::matvec::<tiles32::Q5_0>(w, a, o) });
    k.gemm[slot(T::Q5_1)] = Some(|w, n, a, p, o, ts, rs| unsafe {
        tiles32::gemm::<tiles32::Q5_1>(w, n, a, p, o, ts, rs)
    });
    k.matvec[slot(T::Q5_1)] = Some(|w, a, o| unsafe { matvec32::matvec::<tiles32::Q5_1>(w, a, o) });
    k.gemm[slot(T::Q8_0)] = if crate::cpu::splits_512() {
        Some(|w, n, a, p, o, ts, rs| unsafe { tiles_q8_0::gemm_vnni(w, n, a, p, o, ts, rs) })
    } else {
        Some(|w, n, a, p, o, ts, rs| unsafe {
            tiles32::gemm::<tiles32::Q8_0>(w, n, a, p, o, ts, rs)
        })
    };
    k.matvec[slot(T::Q8_0)] = Some(|w, a, o| unsafe { matvec32::matvec::<tiles32::Q8_0>(w, a, o) });
    Some(k)
}

/// The batch tile driven as a matrix-vector kernel (what Q4_K and Q6_K generation ran before
/// their own kernels), for `kernel_timing` to compare against. Only after `has_avx2()`.
#[cfg(test)]
pub(super) fn tile_matvec(ty: super::GgmlType) -> Option<super::dispatch::MatvecFn> {
    use matvec_k_avx2::matvec;
    use tiles_k_avx2::{Q4K, Q6K};
    if !has_avx2() {
        return None;
    }
    // SAFETY: AVX2, FMA and F16C were confirmed just above.
    match ty {
        T::Q4K => Some(|w, a, o| unsafe { matvec::<Q4K>(w, a, o) }),
        T::Q6K => Some(|w, a, o| unsafe { matvec::<Q6K>(w, a, o) }),
        _ => None,
    }
}
