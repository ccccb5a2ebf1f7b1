//! IQ4_NL, the non-linear 4-bit cache format: blocks of 32 values, an f16 scale and 16 4-bit
//! indices into ggml's fixed table of levels (`x = d · level[i]`). Quantized as ggml's
//! `quantize_row_iq4_nl_ref` (no importance weights: each value weighted by its square, one
//! least-squares scale per block); dot products pair it with Q8_0 queries.

use crate::quant::{f16_to_f32, f32_to_f16};

/// ggml's type id.
pub const GGML_ID: u32 = 20;
/// Bytes per block: the f16 scale, then 16 bytes of index pairs.
pub const BLOCK_BYTES: usize = 18;
/// Q8_0's block: an f16 scale and 32 signed quants.
const Q8_0_BYTES: usize = 34;

/// ggml's `kvalues_iq4nl`.
const LEVELS: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// The index of the level nearest `x` (ggml's `best_index_int8`: ties to the upper one).
fn nearest(x: f32) -> u8 {
    if x <= LEVELS[0] as f32 {
        return 0;
    }
    if x >= LEVELS[15] as f32 {
        return 15;
    }
    let (mut lo, mut hi) = (0usize, 15usize);
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        if x < LEVELS[mid] as f32 {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    if x - (LEVELS[hi - 1] as f32) < LEVELS[hi] as f32 - x {
        (hi - 1) as u8
    } else {
        hi as u8
    }
}

/// Quantizes `src` (a multiple of 32 values) into `dst`.
pub fn quantize(src: &[f32], dst: &mut [u8]) {
    assert_eq!(dst.len(), src.len() / 32 * BLOCK_BYTES, "iq4_nl row length");
    for (x, b) in src.chunks_exact(32).zip(dst.chunks_exact_mut(BLOCK_BYTES)) {
        let (mut amax, mut max) = (0f32, 0f32);
        for &v in x {
            if v.abs() > amax {
                amax = v.abs();
                max = v;
            }
        }
        let mut idx = [0u8; 32];
        let mut d = 0f32;
        if amax >= 1e-15 {
            let id = 1.0 / (max / LEVELS[0] as f32);
            let (mut sumqx, mut sumq2) = (0f32, 0f32);
            for (l, &v) in idx.iter_mut().zip(x) {
                *l = nearest(id * v);
                let q = LEVELS[*l as usize] as f32;
                let w = v * v;
                sumqx += w * q * v;
                sumq2 += w * q * q;
            }
            d = if sumq2 > 0.0 { sumqx / sumq2 } else { 0.0 };
        }
        b[..2].copy_from_slice(&f32_to_f16(d));
        for j in 0..16 {
            b[2 + j] = idx[j] | (idx[16 + j] << 4);
        }
    }
}

/// Expands blocks into `dst` (32 values a block).
pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    assert_eq!(src.len(), dst.len() / 32 * BLOCK_BYTES, "iq4_nl row length");
    for (b, y) in src.chunks_exact(BLOCK_BYTES).zip(dst.chunks_exact_mut(32)) {
        let d = f16_to_f32([b[0], b[1]]);
        for j in 0..16 {
            y[j] = d * LEVELS[(b[2 + j] & 15) as usize] as f32;
            y[j + 16] = d * LEVELS[(b[2 + j] >> 4) as usize] as f32;
        }
    }
}

/// Dot product of an IQ4_NL row with a Q8_0 row of the same length (ggml's
/// `ggml_vec_dot_iq4_nl_q8_0`: integer sums per block, scaled and summed in f32).
pub fn vec_dot(w: &[u8], a: &[u8]) -> f32 {
    assert_eq!(
        w.len() / BLOCK_BYTES,
        a.len() / Q8_0_BYTES,
        "iq4_nl dot lengths"
    );
    let mut sum = 0f32;
    for (x, y) in w.chunks_exact(BLOCK_BYTES).zip(a.chunks_exact(Q8_0_BYTES)) {
        let d = f16_to_f32([y[0], y[1]]) * f16_to_f32([x[0], x[1]]);
        let (mut lo, mut hi) = (0i32, 0i32);
        for j in 0..16 {
            lo += y[2 + j] as i8 as i32 * LEVELS[(x[2 + j] & 15) as usize] as i32;
            hi += y[18 + j] as i8 as i32 * LEVELS[(x[2 + j] >> 4) as usize] as i32;
        }
        sum += d * (lo + hi) as f32;
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_round_to_themselves_and_ties_go_up() {
        for (i, &l) in LEVELS.iter().enumerate() {
            assert_eq!(nearest(l as f32) as usize, i);
        }
        assert_eq!(nearest(-200.0), 0);
        assert_eq!(nearest(500.0), 15);
        // halfway between -10 and 1
        assert_eq!(nearest(-4.5), 8);
    }

    #[test]
    fn a_block_quantizes_to_the_bytes_ggml_writes() {
        // ggml's quantize_row_iq4_nl_ref (llama.cpp 0c1e570's libggml-base) on this block
        let x: Vec<f32> = (0..32)
            .map(|i| (((i * 37) % 19) as f32 - 9.0) * 0.173 + if i == 5 { 2.5 } else { 0.0 })
            .collect();
        let mut y = vec![0u8; BLOCK_BYTES];
        quantize(&x, &mut y);
        assert_eq!(
            y,
            [195, 166, 188, 195, 196, 196, 53, 64, 70, 86, 87, 103, 104, 120, 121, 138, 138, 155]
        );
    }

    #[test]
    fn a_block_holding_a_level_pattern_is_exact() {
        // values that are exactly d·level with the largest at -127·d come back unchanged
        let d = 0.5f32;
        let x: Vec<f32> = (0..32).map(|i| d * LEVELS[i % 16] as f32).collect();
        let mut b = vec![0u8; BLOCK_BYTES];
        quantize(&x, &mut b);
        let mut y = vec![0f32; 32];
        dequantize(&b, &mut y);
        assert_eq!(x, y);
    }
}
