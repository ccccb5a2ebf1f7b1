//! Q4_K: super-blocks of 256 weights in 8 groups of 32, each with a 6-bit scale and a 6-bit
//! minimum (`x = d * sc * q - dmin * m`), 4-bit quants. Each 64 elements share 32 `qs` bytes:
//! low nibbles are the first 32 elements (group `2k`), high nibbles the next 32 (group `2k+1`).
//! The twelve scale bytes pack 8 scales and 8 minimums of 6 bits (ggml's `get_scale_min_k4`).
//! Dot products pair it with Q8_K activations.

use super::block::{f16_to_f32, Block};
use super::q8_k::BlockQ8K;
use super::{GgmlType, QK_K};

/// One Q4_K block (ggml's `block_q4_K`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ4K {
    /// Super-block scale for the scales, f16.
    pub d: [u8; 2],
    /// Super-block scale for the minimums, f16.
    pub dmin: [u8; 2],
    /// Eight 6-bit scales and eight 6-bit minimums, packed.
    pub scales: [u8; 12],
    /// 4-bit quants.
    pub qs: [u8; QK_K / 2],
}
const _: () = assert!(std::mem::size_of::<BlockQ4K>() == 144);

// SAFETY: repr(C), only byte arrays, 144 bytes, every pattern valid.
unsafe impl Block for BlockQ4K {
    const TYPE: GgmlType = GgmlType::Q4K;
}

/// Unpacks the 12 scale bytes shared by Q4_K and Q5_K into (scales, minimums), 6 bits each.
#[inline(always)]
pub fn unpack_scales_mins(q: &[u8; 12]) -> ([u8; 8], [u8; 8]) {
    // Plain loops, not `array::from_fn`: this runs inside SIMD kernels, which must inline it.
    let (mut sc, mut m) = ([0u8; 8], [0u8; 8]);
    for j in 0..4 {
        sc[j] = q[j] & 63;
        m[j] = q[j + 4] & 63;
    }
    for j in 4..8 {
        sc[j] = (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4);
        m[j] = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
    (sc, m)
}

/// [`unpack_scales_mins`] on 32-bit words (for SIMD kernels): the eight 6-bit scales and the eight
/// minimums as the bytes of two little-endian words.
#[inline(always)]
pub fn scales_mins_words(q: &[u8; 12]) -> (u64, u64) {
    let word = |i: usize| u32::from_le_bytes([q[4 * i], q[4 * i + 1], q[4 * i + 2], q[4 * i + 3]]);
    let (a, b, c) = (word(0), word(1), word(2));
    const LOW6: u32 = 0x3f3f_3f3f;
    const LOW4: u32 = 0x0f0f_0f0f;
    const BITS45: u32 = 0x3030_3030;
    // Scales/minimums 0..4: the low six bits of `a`/`b`; 4..8: a nibble of `c` below the top
    // two bits of `a`/`b` moved to bits 4-5.
    let sc_hi = (c & LOW4) | ((a >> 2) & BITS45);
    let m_hi = ((c >> 4) & LOW4) | ((b >> 2) & BITS45);
    let sc = (a & LOW6) as u64 | (sc_hi as u64) << 32;
    let m = (b & LOW6) as u64 | (m_hi as u64) << 32;
    (sc, m)
}

impl BlockQ4K {
    /// The 4-bit quant of element `i` (0..256).
    #[inline]
    pub fn quant(&self, i: usize) -> i32 {
        let (chunk, rest) = (i / 64, i % 64);
        let byte = self.qs[chunk * 32 + rest % 32];
        (if rest < 32 { byte & 0x0f } else { byte >> 4 }) as i32
    }
}

/// Expands blocks to f32 (`dst.len() == 256 * src.len()`).
pub fn dequantize(src: &[BlockQ4K], dst: &mut [f32]) {
    assert_eq!(dst.len(), src.len() * QK_K, "q4_K row length mismatch");
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

/// Scalar reference dot product with Q8_K activations: exact integer sums per super-block,
/// combined as `d * Σ - dmin * Σmins` (ggml's generic kernel keeps eight partial float sums for
/// the first term).
pub fn vec_dot(w: &[BlockQ4K], a: &[BlockQ8K]) -> f32 {
    assert_eq!(w.len(), a.len(), "q4_K · q8_K length mismatch");
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

#[cfg(test)]
mod tests {
    use super::{scales_mins_words, unpack_scales_mins};

    #[test]
    fn scales_mins_words_match_unpack() {
        let mut x = 0x9e37_79b9u32;
        for _ in 0..1000 {
            let q: [u8; 12] = std::array::from_fn(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            });
            let (sc, m) = unpack_scales_mins(&q);
            let (ws, wm) = scales_mins_words(&q);
            assert_eq!((ws, wm), (u64::from_le_bytes(sc), u64::from_le_bytes(m)));
        }
    }
}
