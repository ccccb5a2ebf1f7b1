//! Q4_1: blocks of 32 weights, an f16 scale and an f16 minimum, 4-bit unsigned quants
//! (`x = q * d + m`). Low nibbles hold elements 0..16, high nibbles 16..32.
//! Dot products pair it with Q8_1 activations, whose block sums carry the minimum's share.

use super::block::{f16_to_f32, f32_to_f16, Block};
use super::q8_1::BlockQ8_1;
use super::GgmlType;

/// One Q4_1 block (ggml's `block_q4_1`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BlockQ4_1 {
    /// Scale, f16.
    pub d: [u8; 2],
    /// Minimum, f16.
    pub m: [u8; 2],
    /// Quants: element `j` in the low nibble of `qs[j]`, element `j + 16` in the high nibble.
    pub qs: [u8; 16],
}
const _: () = assert!(std::mem::size_of::<BlockQ4_1>() == 20);

// SAFETY: repr(C), only byte arrays, 20 bytes, every pattern valid.
unsafe impl Block for BlockQ4_1 {
    const TYPE: GgmlType = GgmlType::Q4_1;
}

/// Expands blocks to f32 (`dst.len() == 32 * src.len()`).
pub fn dequantize(src: &[BlockQ4_1], dst: &mut [f32]) {
    assert_eq!(dst.len(), src.len() * 32, "q4_1 row length mismatch");
    for (b, y) in src.iter().zip(dst.chunks_exact_mut(32)) {
        let (d, m) = (f16_to_f32(b.d), f16_to_f32(b.m));
        for j in 0..16 {
            y[j] = (b.qs[j] & 0x0f) as f32 * d + m;
            y[j + 16] = (b.qs[j] >> 4) as f32 * d + m;
        }
    }
}

/// Quantizes weights as ggml's `quantize_row_q4_1_ref`: 15 steps from the minimum to the
/// maximum, quants rounded by adding 0.5 and truncating.
pub fn quantize(src: &[f32], dst: &mut [BlockQ4_1]) {
    assert_eq!(src.len(), dst.len() * 32, "q4_1 row length mismatch");
    for (x, b) in src.chunks_exact(32).zip(dst.iter_mut()) {
        let (mut min, mut max) = (f32::MAX, -f32::MAX);
        for &v in x {
            min = if v < min { v } else { min };
            max = if v > max { v } else { max };
        }
        let d = (max - min) / 15.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        b.d = f32_to_f16(d);
        b.m = f32_to_f16(min);
        for j in 0..16 {
            let q0 = (((x[j] - min) * id + 0.5) as i8 as u8).min(15);
            let q1 = (((x[j + 16] - min) * id + 0.5) as i8 as u8).min(15);
            b.qs[j] = q0 | (q1 << 4);
        }
    }
}

/// Scalar reference dot product with Q8_1 activations (ggml's `ggml_vec_dot_q4_1_q8_1_generic`).
pub fn vec_dot(w: &[BlockQ4_1], a: &[BlockQ8_1]) -> f32 {
    assert_eq!(w.len(), a.len(), "q4_1 · q8_1 length mismatch");
    // ggml's x86 order: 8 float lanes, each the exact sum of 4 adjacent products, fused into
    // the lane accumulators block by block; the minimum terms summed apart. SmolLM2 (Q4_1) is
    // chaotic at the rounding level, so matching llama.cpp needs exactly this sequence.
    let mut lanes = [0f32; 8];
    let mut summs = 0f32;
    for (x, y) in w.iter().zip(a) {
        let d0d1 = f16_to_f32(x.d) * f16_to_f32(y.d);
        summs += f16_to_f32(x.m) * f16_to_f32(y.s);
        for (l, lane) in lanes.iter_mut().enumerate() {
            let mut xy = 0i32;
            for b in 0..4 {
                let j = (l % 4) * 4 + b;
                let (q, qy) = if l < 4 {
                    (x.qs[j] & 0x0f, y.qs[j])
                } else {
                    (x.qs[j] >> 4, y.qs[j + 16])
                };
                xy += q as i32 * qy as i32;
            }
            *lane = d0d1.mul_add(xy as f32, *lane);
        }
    }
    let r: [f32; 4] = std::array::from_fn(|i| lanes[i + 4] + lanes[i]);
    ((r[0] + r[2]) + (r[1] + r[3])) + summs
}
