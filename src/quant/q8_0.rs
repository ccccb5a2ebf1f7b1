//! Q8_0: blocks of 32 signed 8-bit quants and an f16 scale (`x = q * d`). Used both for weights
//! and as the activation format paired with Q4_0, Q5_0 and Q8_0 weights.
//!
//! Two quantizers: [`quantize`] is the activation path and reproduces ggml's x86 SIMD
//! `quantize_row_q8_0` bit for bit (`id = 127 / amax`, round half to even); [`quantize_ref`]
//! is ggml's `quantize_row_q8_0_ref`, used when writing weights (`id = 1 / d`, round half away
//! from zero).

use super::block::{f16_to_f32, f32_to_f16, Block};
use super::GgmlType;

/// One Q8_0 block (ggml's `block_q8_0`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BlockQ8_0 {
    /// Scale, f16.
    pub d: [u8; 2],
    /// Quants.
    pub qs: [i8; 32],
}
const _: () = assert!(std::mem::size_of::<BlockQ8_0>() == 34);

// SAFETY: repr(C), only byte/i8 arrays, 34 bytes, every pattern valid.
unsafe impl Block for BlockQ8_0 {
    const TYPE: GgmlType = GgmlType::Q8_0;
}

/// Expands blocks to f32 (`dst.len() == 32 * src.len()`).
pub fn dequantize(src: &[BlockQ8_0], dst: &mut [f32]) {
    assert_eq!(dst.len(), src.len() * 32, "q8_0 row length mismatch");
    for (b, y) in src.iter().zip(dst.chunks_exact_mut(32)) {
        let d = f16_to_f32(b.d);
        for (y, &q) in y.iter_mut().zip(&b.qs) {
            *y = q as f32 * d;
        }
    }
}

/// Quantizes activations exactly as ggml's AVX/AVX2 `quantize_row_q8_0` does.
pub fn quantize(src: &[f32], dst: &mut [BlockQ8_0]) {
    assert_eq!(src.len(), dst.len() * 32, "q8_0 row length mismatch");
    for (x, b) in src.chunks_exact(32).zip(dst.iter_mut()) {
        let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
        b.d = f32_to_f16(amax / 127.0);
        let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
        for (q, &v) in b.qs.iter_mut().zip(x) {
            *q = (v * id).round_ties_even() as i8;
        }
    }
}

/// Quantizes weights exactly as ggml's `quantize_row_q8_0_ref` does.
pub fn quantize_ref(src: &[f32], dst: &mut [BlockQ8_0]) {
    assert_eq!(src.len(), dst.len() * 32, "q8_0 row length mismatch");
    for (x, b) in src.chunks_exact(32).zip(dst.iter_mut()) {
        let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        b.d = f32_to_f16(d);
        for (q, &v) in b.qs.iter_mut().zip(x) {
            *q = (v * id).round() as i8;
        }
    }
}

/// Scalar reference dot product of Q8_0 weights with Q8_0 activations
/// (ggml's `ggml_vec_dot_q8_0_q8_0_generic`).
pub fn vec_dot(w: &[BlockQ8_0], a: &[BlockQ8_0]) -> f32 {
    assert_eq!(w.len(), a.len(), "q8_0 · q8_0 length mismatch");
    let mut sumf = 0f32;
    for (x, y) in w.iter().zip(a) {
        let sumi: i32 =
            x.qs.iter()
                .zip(&y.qs)
                .map(|(&p, &q)| p as i32 * q as i32)
                .sum();
        sumf += sumi as f32 * (f16_to_f32(x.d) * f16_to_f32(y.d));
    }
    sumf
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn activation_quantizer_rounds_half_to_even() {
        // amax 127 makes id exactly 1, so the inputs reach the rounding step unchanged.
        let mut x = [0f32; 32];
        x[0] = 127.0;
        x[1] = 2.5;
        x[2] = -2.5;
        x[3] = 3.5;
        let mut b = [BlockQ8_0::default()];
        quantize(&x, &mut b);
        assert_eq!(&b[0].qs[..4], &[127, 2, -2, 4]);
        quantize_ref(&x, &mut b);
        assert_eq!(&b[0].qs[..4], &[127, 3, -3, 4]);
    }
}
