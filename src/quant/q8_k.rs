//! Q8_K: super-blocks of 256 signed 8-bit quants with an f32 scale and the sums of each group
//! of 16 quants (`bsums`, which carry the minimum terms of Q2_K/Q4_K/Q5_K and the offset of
//! Q3_K/Q6_K). Activation format paired with every K-quant.
//! [`quantize`] reproduces ggml's `quantize_row_q8_K_ref`, which ggml's x86 build also uses.

use super::block::{i16_le, Block};
use super::{GgmlType, QK_K};

/// One Q8_K block (ggml's `block_q8_K`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ8K {
    /// Scale, f32 little-endian.
    pub d: [u8; 4],
    /// Quants.
    pub qs: [i8; QK_K],
    /// Sum of each group of 16 quants, i16 little-endian.
    pub bsums: [[u8; 2]; QK_K / 16],
}
const _: () = assert!(std::mem::size_of::<BlockQ8K>() == 292);

// SAFETY: repr(C), only byte/i8 arrays, 292 bytes, every pattern valid.
unsafe impl Block for BlockQ8K {
    const TYPE: GgmlType = GgmlType::Q8K;
}

impl Default for BlockQ8K {
    fn default() -> Self {
        BlockQ8K {
            d: [0; 4],
            qs: [0; QK_K],
            bsums: [[0; 2]; QK_K / 16],
        }
    }
}

impl BlockQ8K {
    /// The scale.
    #[inline]
    pub fn d(&self) -> f32 {
        f32::from_le_bytes(self.d)
    }

    /// Sum of quants `16 * j .. 16 * j + 16`.
    #[inline]
    pub fn bsum(&self, j: usize) -> i32 {
        i16_le(self.bsums[j]) as i32
    }
}

/// Expands blocks to f32 (`dst.len() == 256 * src.len()`).
pub fn dequantize(src: &[BlockQ8K], dst: &mut [f32]) {
    assert_eq!(dst.len(), src.len() * QK_K, "q8_K row length mismatch");
    for (b, y) in src.iter().zip(dst.chunks_exact_mut(QK_K)) {
        let d = b.d();
        for (y, &q) in y.iter_mut().zip(&b.qs) {
            *y = d * q as f32;
        }
    }
}

/// Quantizes activations as ggml's `quantize_row_q8_K_ref`: the scale maps the element of
/// largest magnitude (first one wins ties) to -127 (`iscale = -127 / max`), quants round half
/// to even (ggml's `nearest_int`), `d = 1 / iscale`. An all-zero block gets zero quants, scale
/// and sums.
pub fn quantize(src: &[f32], dst: &mut [BlockQ8K]) {
    assert_eq!(src.len(), dst.len() * QK_K, "q8_K row length mismatch");
    for (x, b) in src.chunks_exact(QK_K).zip(dst.iter_mut()) {
        let (mut amax, mut max) = (0f32, 0f32);
        for &v in x {
            if v.abs() > amax {
                amax = v.abs();
                max = v;
            }
        }
        if amax == 0.0 {
            *b = BlockQ8K::default();
            continue;
        }
        let iscale = -127.0 / max;
        for (q, &v) in b.qs.iter_mut().zip(x) {
            *q = ((iscale * v).round_ties_even() as i32).min(127) as i8;
        }
        for (s, g) in b.bsums.iter_mut().zip(b.qs.chunks_exact(16)) {
            *s = (g.iter().map(|&q| q as i16).sum::<i16>()).to_le_bytes();
        }
        b.d = (1.0 / iscale).to_le_bytes();
    }
}
