//! Q3_K: super-blocks of 256 weights in 16 groups of 16, each with a signed 6-bit scale
//! (`x = d * (sc - 32) * q`), quants of 3 bits in -4..=3: the low two bits packed as in Q2_K,
//! the third bit in `hmask` (bit `i / 32` of `hmask[i % 32]`), where a *clear* bit means
//! subtract 4. The twelve scale bytes pack 16 × 6 bits: low nibbles in bytes 0..8, high bit
//! pairs in bytes 8..12. Dot products pair it with Q8_K activations.

use super::block::{f16_to_f32, Block};
use super::q8_k::BlockQ8K;
use super::{GgmlType, QK_K};

/// One Q3_K block (ggml's `block_q3_K`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ3K {
    /// Third bits of the quants.
    pub hmask: [u8; QK_K / 8],
    /// Low two bits of the quants.
    pub qs: [u8; QK_K / 4],
    /// Sixteen 6-bit scales, packed.
    pub scales: [u8; 12],
    /// Super-block scale, f16.
    pub d: [u8; 2],
}
const _: () = assert!(std::mem::size_of::<BlockQ3K>() == 110);

// SAFETY: repr(C), only byte arrays, 110 bytes, every pattern valid.
unsafe impl Block for BlockQ3K {
    const TYPE: GgmlType = GgmlType::Q3K;
}

impl BlockQ3K {
    /// The sixteen group scales, already offset to -32..=31.
    #[inline]
    pub fn unpacked_scales(&self) -> [i8; 16] {
        let s = &self.scales;
        std::array::from_fn(|j| {
            let lo = if j < 8 { s[j] & 0x0f } else { s[j - 8] >> 4 };
            let hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
            (lo | (hi << 4)) as i8 - 32
        })
    }

    /// The 3-bit quant of element `i` (0..256), in -4..=3.
    #[inline]
    pub fn quant(&self, i: usize) -> i32 {
        let (half, rest) = (i / 128, i % 128);
        let (shift, l) = (rest / 32, rest % 32);
        let low = ((self.qs[half * 32 + l] >> (2 * shift)) & 3) as i32;
        let high_set = self.hmask[l] & (1 << (i / 32)) != 0;
        if high_set {
            low
        } else {
            low - 4
        }
    }
}

/// Expands blocks to f32 (`dst.len() == 256 * src.len()`).
pub fn dequantize(src: &[BlockQ3K], dst: &mut [f32]) {
    assert_eq!(dst.len(), src.len() * QK_K, "q3_K row length mismatch");
    for (b, y) in src.iter().zip(dst.chunks_exact_mut(QK_K)) {
        let d = f16_to_f32(b.d);
        let scales = b.unpacked_scales();
        for (i, y) in y.iter_mut().enumerate() {
            let dl = d * scales[i / 16] as f32;
            *y = dl * b.quant(i) as f32;
        }
    }
}

/// Scalar reference dot product with Q8_K activations: exact integer sums per super-block,
/// scaled once by `d_x * d_y` (ggml's generic kernel keeps eight partial float sums instead).
pub fn vec_dot(w: &[BlockQ3K], a: &[BlockQ8K]) -> f32 {
    assert_eq!(w.len(), a.len(), "q3_K · q8_K length mismatch");
    let mut sumf = 0f32;
    for (x, y) in w.iter().zip(a) {
        let scales = x.unpacked_scales();
        let mut isum = 0i32;
        for (g, &sc) in scales.iter().enumerate() {
            let s: i32 = (g * 16..g * 16 + 16)
                .map(|i| x.quant(i) * y.qs[i] as i32)
                .sum();
            isum += sc as i32 * s;
        }
        sumf += f16_to_f32(x.d) * y.d() * isum as f32;
    }
    sumf
}
