//! Q5_1: blocks of 32 weights, an f16 scale and an f16 minimum, 5-bit unsigned quants
//! (`x = q * d + m`), bits packed as in Q5_0. Dot products pair it with Q8_1 activations.

use super::block::{f16_to_f32, f32_to_f16, Block};
use super::q8_1::BlockQ8_1;
use super::GgmlType;

/// One Q5_1 block (ggml's `block_q5_1`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BlockQ5_1 {
    /// Scale, f16.
    pub d: [u8; 2],
    /// Minimum, f16.
    pub m: [u8; 2],
    /// Fifth bits, one per element, as a little-endian u32.
    pub qh: [u8; 4],
    /// Low 4 bits: element `j` in the low nibble of `qs[j]`, element `j + 16` in the high one.
    pub qs: [u8; 16],
}
const _: () = assert!(std::mem::size_of::<BlockQ5_1>() == 24);

// SAFETY: repr(C), only byte arrays, 24 bytes, every pattern valid.
unsafe impl Block for BlockQ5_1 {
    const TYPE: GgmlType = GgmlType::Q5_1;
}

impl BlockQ5_1 {
    /// The 5-bit quants of elements `j` and `j + 16` (0..=31).
    #[inline]
    pub fn quant_pair(&self, j: usize) -> (i32, i32) {
        let qh = u32::from_le_bytes(self.qh);
        let lo = (self.qs[j] & 0x0f) as u32 | ((qh >> j) & 1) << 4;
        let hi = (self.qs[j] >> 4) as u32 | ((qh >> (j + 16)) & 1) << 4;
        (lo as i32, hi as i32)
    }
}

/// Expands blocks to f32 (`dst.len() == 32 * src.len()`).
pub fn dequantize(src: &[BlockQ5_1], dst: &mut [f32]) {
    assert_eq!(dst.len(), src.len() * 32, "q5_1 row length mismatch");
    for (b, y) in src.iter().zip(dst.chunks_exact_mut(32)) {
        let (d, m) = (f16_to_f32(b.d), f16_to_f32(b.m));
        for j in 0..16 {
            let (q0, q1) = b.quant_pair(j);
            y[j] = q0 as f32 * d + m;
            y[j + 16] = q1 as f32 * d + m;
        }
    }
}

/// Quantizes weights as ggml's `quantize_row_q5_1_ref`: 31 steps from the minimum to the
/// maximum, quants rounded by adding 0.5 and truncating.
pub fn quantize(src: &[f32], dst: &mut [BlockQ5_1]) {
    assert_eq!(src.len(), dst.len() * 32, "q5_1 row length mismatch");
    for (x, b) in src.chunks_exact(32).zip(dst.iter_mut()) {
        let (mut min, mut max) = (f32::MAX, -f32::MAX);
        for &v in x {
            min = if v < min { v } else { min };
            max = if v > max { v } else { max };
        }
        let d = (max - min) / 31.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        b.d = f32_to_f16(d);
        b.m = f32_to_f16(min);
        let mut qh = 0u32;
        for j in 0..16 {
            let q0 = (((x[j] - min) * id + 0.5) as i8 as u8).min(31);
            let q1 = (((x[j + 16] - min) * id + 0.5) as i8 as u8).min(31);
            b.qs[j] = (q0 & 0x0f) | ((q1 & 0x0f) << 4);
            qh |= ((q0 as u32 & 0x10) >> 4) << j;
            qh |= ((q1 as u32 & 0x10) >> 4) << (j + 16);
        }
        b.qh = qh.to_le_bytes();
    }
}

/// Scalar reference dot product with Q8_1 activations (ggml's `ggml_vec_dot_q5_1_q8_1_generic`).
pub fn vec_dot(w: &[BlockQ5_1], a: &[BlockQ8_1]) -> f32 {
    assert_eq!(w.len(), a.len(), "q5_1 · q8_1 length mismatch");
    let mut sumf = 0f32;
    for (x, y) in w.iter().zip(a) {
        let mut sumi = 0i32;
        for j in 0..16 {
            let (q0, q1) = x.quant_pair(j);
            sumi += q0 * y.qs[j] as i32 + q1 * y.qs[j + 16] as i32;
        }
        sumf +=
            (f16_to_f32(x.d) * f16_to_f32(y.d)) * sumi as f32 + f16_to_f32(x.m) * f16_to_f32(y.s);
    }
    sumf
}
