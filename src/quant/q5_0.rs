//! Q5_0: blocks of 32 weights, an f16 scale, 5-bit quants with an implicit offset of 16
//! (`x = (q - 16) * d`). The low 4 bits are packed as in Q4_0, the fifth bit of element `j` is
//! bit `j` of the little-endian `qh` word. Dot products pair it with Q8_0 activations.

use super::block::{f16_to_f32, f32_to_f16, Block};
use super::q8_0::BlockQ8_0;
use super::GgmlType;

/// One Q5_0 block (ggml's `block_q5_0`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BlockQ5_0 {
    /// Scale, f16.
    pub d: [u8; 2],
    /// Fifth bits, one per element, as a little-endian u32.
    pub qh: [u8; 4],
    /// Low 4 bits: element `j` in the low nibble of `qs[j]`, element `j + 16` in the high one.
    pub qs: [u8; 16],
}
const _: () = assert!(std::mem::size_of::<BlockQ5_0>() == 22);

// SAFETY: repr(C), only byte arrays, 22 bytes, every pattern valid.
unsafe impl Block for BlockQ5_0 {
    const TYPE: GgmlType = GgmlType::Q5_0;
}

impl BlockQ5_0 {
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
pub fn dequantize(src: &[BlockQ5_0], dst: &mut [f32]) {
    assert_eq!(dst.len(), src.len() * 32, "q5_0 row length mismatch");
    for (b, y) in src.iter().zip(dst.chunks_exact_mut(32)) {
        let d = f16_to_f32(b.d);
        for j in 0..16 {
            let (q0, q1) = b.quant_pair(j);
            y[j] = (q0 - 16) as f32 * d;
            y[j + 16] = (q1 - 16) as f32 * d;
        }
    }
}

/// Quantizes weights as ggml's `quantize_row_q5_0_ref`: the scale maps the element of largest
/// magnitude to -16, quants are truncated after adding 16.5.
pub fn quantize(src: &[f32], dst: &mut [BlockQ5_0]) {
    assert_eq!(src.len(), dst.len() * 32, "q5_0 row length mismatch");
    for (x, b) in src.chunks_exact(32).zip(dst.iter_mut()) {
        let (mut amax, mut max) = (0f32, 0f32);
        for &v in x {
            if amax < v.abs() {
                amax = v.abs();
                max = v;
            }
        }
        let d = max / -16.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        b.d = f32_to_f16(d);
        let mut qh = 0u32;
        for j in 0..16 {
            let q0 = ((x[j] * id + 16.5) as i8 as u8).min(31);
            let q1 = ((x[j + 16] * id + 16.5) as i8 as u8).min(31);
            b.qs[j] = (q0 & 0x0f) | ((q1 & 0x0f) << 4);
            qh |= ((q0 as u32 & 0x10) >> 4) << j;
            qh |= ((q1 as u32 & 0x10) >> 4) << (j + 16);
        }
        b.qh = qh.to_le_bytes();
    }
}

/// Scalar reference dot product with Q8_0 activations (ggml's `ggml_vec_dot_q5_0_q8_0_generic`).
pub fn vec_dot(w: &[BlockQ5_0], a: &[BlockQ8_0]) -> f32 {
    assert_eq!(w.len(), a.len(), "q5_0 · q8_0 length mismatch");
    let mut sumf = 0f32;
    for (x, y) in w.iter().zip(a) {
        let mut sumi = 0i32;
        for j in 0..16 {
            let (q0, q1) = x.quant_pair(j);
            sumi += (q0 - 16) * y.qs[j] as i32 + (q1 - 16) * y.qs[j + 16] as i32;
        }
        sumf += (f16_to_f32(x.d) * f16_to_f32(y.d)) * sumi as f32;
    }
    sumf
}
