//! Q2_K: super-blocks of 256 weights in 16 groups of 16. Each group has a 4-bit scale and a 4-bit
//! minimum (`x = d * sc * q - dmin * m`), quants are 2 bits. Within each half of 128 elements,
//! byte `l` of the half's 32 `qs` bytes holds elements `l`, `l + 32`, `l + 64`, `l + 96` in bit
//! pairs 0-1, 2-3, 4-5, 6-7. Dot products pair it with Q8_K activations.

use super::block::{f16_to_f32, Block};
use super::q8_k::BlockQ8K;
use super::{GgmlType, QK_K};

/// One Q2_K block (ggml's `block_q2_K`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ2K {
    /// Per group: scale in the low nibble, minimum in the high nibble.
    pub scales: [u8; QK_K / 16],
    /// 2-bit quants.
    pub qs: [u8; QK_K / 4],
    /// Super-block scale for the scales, f16.
    pub d: [u8; 2],
    /// Super-block scale for the minimums, f16.
    pub dmin: [u8; 2],
}
const _: () = assert!(std::mem::size_of::<BlockQ2K>() == 84);

// SAFETY: repr(C), only byte arrays, 84 bytes, every pattern valid.
unsafe impl Block for BlockQ2K {
    const TYPE: GgmlType = GgmlType::Q2K;
}

impl BlockQ2K {
    /// The 2-bit quant of element `i` (0..256).
    #[inline]
    pub fn quant(&self, i: usize) -> i32 {
        let (half, rest) = (i / 128, i % 128);
        let (shift, l) = (rest / 32, rest % 32);
        ((self.qs[half * 32 + l] >> (2 * shift)) & 3) as i32
    }
}

/// Expands blocks to f32 (`dst.len() == 256 * src.len()`).
pub fn dequantize(src: &[BlockQ2K], dst: &mut [f32]) {
    assert_eq!(dst.len(), src.len() * QK_K, "q2_K row length mismatch");
    for (b, y) in src.iter().zip(dst.chunks_exact_mut(QK_K)) {
        let (d, dmin) = (f16_to_f32(b.d), f16_to_f32(b.dmin));
        for (i, y) in y.iter_mut().enumerate() {
            let sc = b.scales[i / 16];
            let dl = d * (sc & 0x0f) as f32;
            let ml = dmin * (sc >> 4) as f32;
            *y = dl * b.quant(i) as f32 - ml;
        }
    }
}

/// Scalar reference dot product with Q8_K activations: exact integer sums per super-block,
/// combined as ggml's `ggml_vec_dot_q2_K_q8_K_generic` does (`d * Σ - dmin * Σmins`).
pub fn vec_dot(w: &[BlockQ2K], a: &[BlockQ8K]) -> f32 {
    assert_eq!(w.len(), a.len(), "q2_K · q8_K length mismatch");
    let mut sumf = 0f32;
    for (x, y) in w.iter().zip(a) {
        let summs: i32 = (0..16).map(|j| (x.scales[j] >> 4) as i32 * y.bsum(j)).sum();
        let mut isum = 0i32;
        for g in 0..16 {
            let s: i32 = (g * 16..g * 16 + 16)
                .map(|i| x.quant(i) * y.qs[i] as i32)
                .sum();
            isum += (x.scales[g] & 0x0f) as i32 * s;
        }
        let dall = y.d() * f16_to_f32(x.d);
        let dmin = y.d() * f16_to_f32(x.dmin);
        sumf += dall * isum as f32 - dmin * summs as f32;
    }
    sumf
}
