//! Q5_K: Q4_K with a fifth bit per quant (`x = d * sc * q - dmin * m`, q in 0..32). The fifth
//! bit of element `i` is bit `i / 32` of `qh[i % 32]`. Dot products pair it with Q8_K.

use super::block::{f16_to_f32, Block};
use super::q4_k::unpack_scales_mins;
use super::q8_k::BlockQ8K;
use super::{GgmlType, QK_K};

/// One Q5_K block (ggml's `block_q5_K`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ5K {
    /// Super-block scale for the scales, f16.
    pub d: [u8; 2],
    /// Super-block scale for the minimums, f16.
    pub dmin: [u8; 2],
    /// Eight 6-bit scales and eight 6-bit minimums, packed as in Q4_K.
    pub scales: [u8; 12],
    /// Fifth bits of the quants.
    pub qh: [u8; QK_K / 8],
    /// Low 4 bits of the quants, packed as in Q4_K.
    pub qs: [u8; QK_K / 2],
}
const _: () = assert!(std::mem::size_of::<BlockQ5K>() == 176);

// SAFETY: repr(C), only byte arrays, 176 bytes, every pattern valid.
unsafe impl Block for BlockQ5K {
    const TYPE: GgmlType = GgmlType::Q5K;
}

impl BlockQ5K {
    /// The 5-bit quant of element `i` (0..256).
    #[inline]
    pub fn quant(&self, i: usize) -> i32 {
        let (chunk, rest) = (i / 64, i % 64);
        let byte = self.qs[chunk * 32 + rest % 32];
        let low = if rest < 32 { byte & 0x0f } else { byte >> 4 };
        let high = (self.qh[i % 32] >> (i / 32)) & 1;
        (low | (high << 4)) as i32
    }
}

/// Expands blocks to f32 (`dst.len() == 256 * src.len()`).
pub fn dequantize(src: &[BlockQ5K], dst: &mut [f32]) {
    assert_eq!(dst.len(), src.len() * QK_K, "q5_K row length mismatch");
    for (b, y) in src.iter().zip(dst.chunks_exact_mut(QK_K)) {
        let (d, dmin) = (f16_to_f32(b.d), f16_to_f32(b.dmin));
        let (sc, m) = unpack_scales_mins(&b.scales);
        for (i, y) in y.iter_mut().enumerate() {
            let d1 = d * sc[i / 32] as f32;
            let m1 = dmin * m[i / 32] as f32;
            *y = d1 * b.quant(i) as f32 - m1;
        }
    }
}

/// Scalar reference dot product with Q8_K activations, combined as for Q4_K.
pub fn vec_dot(w: &[BlockQ5K], a: &[BlockQ8K]) -> f32 {
    assert_eq!(w.len(), a.len(), "q5_K · q8_K length mismatch");
    let mut sumf = 0f32;
    for (x, y) in w.iter().zip(a) {
        let (sc, m) = unpack_scales_mins(&x.scales);
        let summs: i32 = (0..16).map(|j| y.bsum(j) * m[j / 2] as i32).sum();
        let mut isum = 0i32;
        for (g, &s) in sc.iter().enumerate() {
            let dot: i32 = (g * 32..g * 32 + 32)
                .map(|i| x.quant(i) * y.qs[i] as i32)
                .sum();
            isum += s as i32 * dot;
        }
        let d = f16_to_f32(x.d) * y.d();
        let dmin = f16_to_f32(x.dmin) * y.d();
        sumf += d * isum as f32 - dmin * summs as f32;
    }
    sumf
}
