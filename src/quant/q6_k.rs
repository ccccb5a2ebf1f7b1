//! Q6_K: super-blocks of 256 weights in 16 groups of 16, each with a signed 8-bit scale
//! (`x = d * sc * (q - 32)`), 6-bit quants: low 4 bits in `ql`, high 2 bits in `qh`. Per half of
//! 128 elements (64 `ql` bytes, 32 `qh` bytes), for `l` in 0..32: element `l` is the low nibble
//! of `ql[l]`, `l + 32` the low nibble of `ql[l + 32]`, `l + 64` and `l + 96` the high nibbles
//! of the same bytes; their high bits are bit pairs 0, 2, 4, 6 of `qh[l]`.
//! Dot products pair it with Q8_K activations.

use super::block::{f16_to_f32, Block};
use super::q8_k::BlockQ8K;
use super::{GgmlType, QK_K};

/// One Q6_K block (ggml's `block_q6_K`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ6K {
    /// Low 4 bits of the quants.
    pub ql: [u8; QK_K / 2],
    /// High 2 bits of the quants.
    pub qh: [u8; QK_K / 4],
    /// Group scales.
    pub scales: [i8; QK_K / 16],
    /// Super-block scale, f16.
    pub d: [u8; 2],
}
const _: () = assert!(std::mem::size_of::<BlockQ6K>() == 210);

// SAFETY: repr(C), only byte/i8 arrays, 210 bytes, every pattern valid.
unsafe impl Block for BlockQ6K {
    const TYPE: GgmlType = GgmlType::Q6K;
}

impl BlockQ6K {
    /// The quant of element `i` (0..256), offset to -32..=31.
    #[inline]
    pub fn quant(&self, i: usize) -> i32 {
        let (half, rest) = (i / 128, i % 128);
        let (quarter, l) = (rest / 32, rest % 32);
        let byte = self.ql[half * 64 + (quarter % 2) * 32 + l];
        let low = if quarter < 2 { byte & 0x0f } else { byte >> 4 };
        let high = (self.qh[half * 32 + l] >> (2 * quarter)) & 3;
        (low | (high << 4)) as i32 - 32
    }
}

/// Expands blocks to f32 (`dst.len() == 256 * src.len()`).
pub fn dequantize(src: &[BlockQ6K], dst: &mut [f32]) {
    assert_eq!(dst.len(), src.len() * QK_K, "q6_K row length mismatch");
    for (b, y) in src.iter().zip(dst.chunks_exact_mut(QK_K)) {
        let d = f16_to_f32(b.d);
        for (i, y) in y.iter_mut().enumerate() {
            *y = d * b.scales[i / 16] as f32 * b.quant(i) as f32;
        }
    }
}

/// Scalar reference dot product with Q8_K activations: exact integer sums per super-block,
/// scaled once by `d_x * d_y` (ggml's generic kernel keeps eight partial float sums instead).
pub fn vec_dot(w: &[BlockQ6K], a: &[BlockQ8K]) -> f32 {
    assert_eq!(w.len(), a.len(), "q6_K · q8_K length mismatch");
    let mut sumf = 0f32;
    for (x, y) in w.iter().zip(a) {
        let mut isum = 0i32;
        for (g, &sc) in x.scales.iter().enumerate() {
            let dot: i32 = (g * 16..g * 16 + 16)
                .map(|i| x.quant(i) * y.qs[i] as i32)
                .sum();
            isum += sc as i32 * dot;
        }
        sumf += f16_to_f32(x.d) * y.d() * isum as f32;
    }
    sumf
}
