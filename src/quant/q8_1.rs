//! Q8_1: Q8_0 plus `s = d * Σq` stored as f16, so that dot products with Q4_1/Q5_1 weights can
//! add the weights' minimum term without touching the quants. Activation format only.
//! [`quantize`] reproduces ggml's x86 AVX2 `quantize_row_q8_1` bit for bit.

use super::block::{f16_to_f32, f32_to_f16, Block};
use super::GgmlType;

/// One Q8_1 block (ggml's `block_q8_1`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BlockQ8_1 {
    /// Scale, f16.
    pub d: [u8; 2],
    /// `d * sum(qs)`, f16 (computed from the f32 scale before rounding).
    pub s: [u8; 2],
    /// Quants.
    pub qs: [i8; 32],
}
const _: () = assert!(std::mem::size_of::<BlockQ8_1>() == 36);

// SAFETY: repr(C), only byte/i8 arrays, 36 bytes, every pattern valid.
unsafe impl Block for BlockQ8_1 {
    const TYPE: GgmlType = GgmlType::Q8_1;
}

/// Expands blocks to f32 (`dst.len() == 32 * src.len()`).
pub fn dequantize(src: &[BlockQ8_1], dst: &mut [f32]) {
    assert_eq!(dst.len(), src.len() * 32, "q8_1 row length mismatch");
    for (b, y) in src.iter().zip(dst.chunks_exact_mut(32)) {
        let d = f16_to_f32(b.d);
        for (y, &q) in y.iter_mut().zip(&b.qs) {
            *y = q as f32 * d;
        }
    }
}

/// Quantizes activations exactly as ggml's AVX2 `quantize_row_q8_1` does: `id = 127 / amax`,
/// round half to even, `s = f16(d * Σq)` with the unrounded f32 `d`.
pub fn quantize(src: &[f32], dst: &mut [BlockQ8_1]) {
    assert_eq!(src.len(), dst.len() * 32, "q8_1 row length mismatch");
    for (x, b) in src.chunks_exact(32).zip(dst.iter_mut()) {
        let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
        let mut sum = 0i32;
        for (q, &v) in b.qs.iter_mut().zip(x) {
            *q = (v * id).round_ties_even() as i8;
            sum += *q as i32;
        }
        b.d = f32_to_f16(d);
        b.s = f32_to_f16(d * sum as f32);
    }
}
