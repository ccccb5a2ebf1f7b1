//! Tensor element formats: one file per block format (layout, dequantization, quantization,
//! scalar reference dot products), SIMD variants beside them (`x86/`, `aarch64/`), and
//! `dispatch.rs`, which picks the variant once per process.
//!
//! This module owns the arithmetic of single rows. Matrix products, threading and the choice of
//! which rows to combine belong to `ops/`.
//!
//! ```
//! use llamafile::quant::{self, GgmlType};
//! let n = 256;
//! let w: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin()).collect();
//! let x: Vec<f32> = (0..n).map(|i| (i as f32 * 0.11).cos()).collect();
//! // Quantize the weights once, the activations per call, then take the dot product.
//! let ty = GgmlType::Q4_0;
//! let mut wq = vec![0u8; ty.bytes_for(n as u64).unwrap() as usize];
//! quant::quantize_row(ty, &w, &mut wq);
//! let at = ty.vec_dot_type();
//! let mut xq = vec![0u8; at.bytes_for(n as u64).unwrap() as usize];
//! quant::quantize_row(at, &x, &mut xq);
//! let dot = quant::vec_dot(ty, n, &wq, &xq);
//! let exact: f32 = w.iter().zip(&x).map(|(a, b)| a * b).sum();
//! assert!((dot - exact).abs() < 0.05 * exact.abs().max(1.0));
//! ```

#[cfg(target_arch = "aarch64")]
mod aarch64;
mod bf16;
mod block;
mod dispatch;
mod f16;
mod gemm;
#[cfg(test)]
mod half_order_tests;
mod q2_k;
mod q3_k;
mod q4_0;
mod q4_1;
mod q4_k;
mod q5_0;
mod q5_1;
mod q5_k;
mod q6_k;
mod q8_0;
mod q8_1;
mod q8_k;
#[cfg(test)]
mod tests;
mod types;
pub mod x8;
#[cfg(target_arch = "x86_64")]
mod x86;

pub use bf16::{bf16_to_f32, f32_to_bf16};
pub use block::{f16_to_f32, f32_to_f16};
pub use dispatch::kernel_variant;
pub use gemm::{
    gemm, has_gemm, has_matvec, matvec, min_gemm_tokens, pack_acts, pack_single, pack_widened,
    pair_align, round_trip_row, widens_acts, PackedActs,
};
pub use types::{GgmlType, QK_K};

/// Expands one row of `ty` (`src`, a whole number of blocks) into `dst`.
///
/// Panics if `src` does not hold exactly `dst.len()` elements of `ty`.
pub fn dequantize_row(ty: GgmlType, src: &[u8], dst: &mut [f32]) {
    assert_eq!(
        Some(src.len() as u64),
        ty.bytes_for(dst.len() as u64),
        "dequantize_row({ty}): {} bytes for {} elements",
        src.len(),
        dst.len()
    );
    dispatch::scalar_dequantize(ty)(src, dst);
}

/// Whether [`quantize_row`] can produce `ty`: every type except Q8_1's and Q8_K's use as
/// weights is covered; Q2_K..Q6_K weight quantization is not implemented.
pub fn can_quantize(ty: GgmlType) -> bool {
    dispatch::kernels().quantize[dispatch::slot(ty)].is_some()
}

/// Quantizes one row of f32 into `ty`. For the activation types (F32, F16, BF16, Q8_0, Q8_1,
/// Q8_K) the result is bit-identical to what ggml's x86 CPU backend produces for activations;
/// for Q4_0, Q4_1, Q5_0, Q5_1 it is ggml's reference weight quantizer. (Q8_0 here is the
/// activation quantizer; see [`quantize_row_q8_0_weights`] for ggml's weight variant.)
///
/// Panics if `dst` is not exactly `src.len()` elements of `ty`, or if `ty` is a type
/// [`can_quantize`] refuses.
pub fn quantize_row(ty: GgmlType, src: &[f32], dst: &mut [u8]) {
    assert_eq!(
        Some(dst.len() as u64),
        ty.bytes_for(src.len() as u64),
        "quantize_row({ty}): {} bytes for {} elements",
        dst.len(),
        src.len()
    );
    let f = dispatch::kernels().quantize[dispatch::slot(ty)]
        .unwrap_or_else(|| panic!("quantize_row: no quantizer for {ty}"));
    f(src, dst);
}

/// Quantizes weights to Q8_0 as ggml's `quantize_row_q8_0_ref` (rounding half away from zero),
/// which is what `llama-quantize` writes; activations use [`quantize_row`] instead.
pub fn quantize_row_q8_0_weights(src: &[f32], dst: &mut [u8]) {
    assert_eq!(
        Some(dst.len() as u64),
        GgmlType::Q8_0.bytes_for(src.len() as u64)
    );
    q8_0::quantize_ref(src, block::as_blocks_mut(dst));
}

/// Whether `ty` can be the weight side of [`vec_dot`] (all but Q8_1 and Q8_K).
pub fn has_vec_dot(ty: GgmlType) -> bool {
    dispatch::kernels().vec_dot[dispatch::slot(ty)].is_some()
}

/// Dot product of one weight row of type `ty` with one activation row already quantized to
/// `ty.vec_dot_type()`, both `n` elements.
///
/// Panics if the lengths do not match `n` or `ty` has no dot product ([`has_vec_dot`]).
#[inline]
pub fn vec_dot(ty: GgmlType, n: usize, w: &[u8], a: &[u8]) -> f32 {
    check_dot_lengths(ty, n, w, a.len(), 1);
    dot_fn(ty)(w, a)
}

/// Dot products of `out.len()` consecutive weight rows (`w`, each `n` elements of `ty`) with one
/// activation row `a`; `out[i]` gets the bits [`vec_dot`] gives for row `i`. Checks lengths
/// once, so a matrix-vector product pays no per-row overhead.
pub fn vec_dot_many(ty: GgmlType, n: usize, w: &[u8], a: &[u8], out: &mut [f32]) {
    let row = ty.bytes_for(n as u64).map_or(0, |b| b as usize);
    assert_eq!(
        w.len(),
        row * out.len(),
        "vec_dot_many({ty}): {} weight bytes for {} rows of n={n}",
        w.len(),
        out.len()
    );
    if out.is_empty() {
        return;
    }
    check_dot_lengths(ty, n, &w[..row], a.len(), 1);
    let f = dot_fn(ty);
    for (o, wr) in out.iter_mut().zip(w.chunks_exact(row)) {
        *o = f(wr, a);
    }
}

/// Dot products of one weight row with `out.len()` activation rows, the `i`-th starting at byte
/// `i * act_stride` of `acts`; `out[i]` gets the same value [`vec_dot`] would give. Lets a
/// batched matmul reuse the weight row while it is in cache.
pub fn vec_dot_rows(
    ty: GgmlType,
    n: usize,
    w: &[u8],
    acts: &[u8],
    act_stride: usize,
    out: &mut [f32],
) {
    let row_bytes = check_dot_lengths(ty, n, w, 0, 0);
    if out.is_empty() {
        return;
    }
    assert!(
        act_stride >= row_bytes,
        "vec_dot_rows: stride {act_stride} < row {row_bytes}"
    );
    assert!(
        acts.len() >= (out.len() - 1) * act_stride + row_bytes,
        "vec_dot_rows: {} activation bytes for {} rows of stride {act_stride}",
        acts.len(),
        out.len()
    );
    if let Some(f) = dispatch::kernels().vec_dot_rows[dispatch::slot(ty)] {
        return f(w, acts, act_stride, row_bytes, out);
    }
    let f = dot_fn(ty);
    for (i, o) in out.iter_mut().enumerate() {
        *o = f(w, &acts[i * act_stride..i * act_stride + row_bytes]);
    }
}

fn dot_fn(ty: GgmlType) -> dispatch::VecDotFn {
    dispatch::kernels().vec_dot[dispatch::slot(ty)]
        .unwrap_or_else(|| panic!("vec_dot: {ty} is not a weight type with a dot product"))
}

/// Checks the weight row (and, when `rows > 0`, the activation length); returns the activation
/// row's byte length.
fn check_dot_lengths(ty: GgmlType, n: usize, w: &[u8], a_len: usize, rows: usize) -> usize {
    let w_bytes = ty.bytes_for(n as u64);
    assert_eq!(
        Some(w.len() as u64),
        w_bytes,
        "vec_dot({ty}): {} weight bytes for n={n}",
        w.len()
    );
    let at = ty.vec_dot_type();
    let a_bytes = at
        .bytes_for(n as u64)
        .unwrap_or_else(|| panic!("vec_dot({ty}): n={n} is not a whole number of {at} blocks"))
        as usize;
    if rows > 0 {
        assert_eq!(
            a_len, a_bytes,
            "vec_dot({ty}): {a_len} activation bytes for n={n}"
        );
    }
    a_bytes
}
