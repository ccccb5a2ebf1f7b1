//! Q4_0: blocks of 32 weights, one f16 scale and 4-bit unsigned quants with an implicit offset
//! of 8 (`x = (q - 8) * d`). Low nibbles hold elements 0..16, high nibbles 16..32.
//! Dot products pair it with Q8_0 activations.

use super::block::{f16_to_f32, f32_to_f16, Block};
use super::q8_0::BlockQ8_0;
use super::GgmlType;

/// One Q4_0 block (ggml's `block_q4_0`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BlockQ4_0 {
    /// Scale, f16.
    pub d: [u8; 2],
    /// Quants: element `j` in the low nibble of `qs[j]`, element `j + 16` in the high nibble.
    pub qs: [u8; 16],
}
const _: () = assert!(std::mem::size_of::<BlockQ4_0>() == 18);

// SAFETY: repr(C), only byte arrays, 18 bytes, every pattern valid.
unsafe impl Block for BlockQ4_0 {
    const TYPE: GgmlType = GgmlType::Q4_0;
}

/// Expands blocks to f32 (`dst.len() == 32 * src.len()`).
pub fn dequantize(src: &[BlockQ4_0], dst: &mut [f32]) {
    assert_eq!(dst.len(), src.len() * 32, "q4_0 row length mismatch");
    for (b, y) in src.iter().zip(dst.chunks_exact_mut(32)) {
        let d = f16_to_f32(b.d);
        for j in 0..16 {
            y[j] = ((b.qs[j] & 0x0f) as i32 - 8) as f32 * d;
            y[j + 16] = ((b.qs[j] >> 4) as i32 - 8) as f32 * d;
        }
    }
}

/// Quantizes weights as ggml's `quantize_row_q4_0_ref`: the scale maps the element of largest
/// magnitude to -8, quants are truncated after adding 8.5.
pub fn quantize(src: &[f32], dst: &mut [BlockQ4_0]) {
    assert_eq!(src.len(), dst.len() * 32, "q4_0 row length mismatch");
    for (x, b) in src.chunks_exact(32).zip(dst.iter_mut()) {
        let (mut amax, mut max) = (0f32, 0f32);
        for &v in x {
            if amax < v.abs() {
                amax = v.abs();
                max = v;
            }
        }
        let d = max / -8.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        b.d = f32_to_f16(d);
        for j in 0..16 {
            let q0 = ((x[j] * id + 8.5) as i8 as u8).min(15);
            let q1 = ((x[j + 16] * id + 8.5) as i8 as u8).min(15);
            b.qs[j] = q0 | (q1 << 4);
        }
    }
}

/// Scalar reference dot product with Q8_0 activations (ggml's `ggml_vec_dot_q4_0_q8_0_generic`).
pub fn vec_dot(w: &[BlockQ4_0], a: &[BlockQ8_0]) -> f32 {
    assert_eq!(w.len(), a.len(), "q4_0 · q8_0 length mismatch");
    let mut sumf = 0f32;
    for (x, y) in w.iter().zip(a) {
        let mut sumi = 0i32;
        for j in 0..16 {
            sumi += ((x.qs[j] & 0x0f) as i32 - 8) * y.qs[j] as i32;
            sumi += ((x.qs[j] >> 4) as i32 - 8) * y.qs[j + 16] as i32;
        }
        sumf += sumi as f32 * f16_to_f32(x.d) * f16_to_f32(y.d);
    }
    sumf
}
