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

/// Dot products of one IQ4_NL row `w` with each Q8_0 row of `queries` (`row_bytes` apart, as
/// long as `w`) into `out`, the CPU variant chosen once for all rows, in the float order of
/// ggml's AVX2 `ggml_vec_dot_iq4_nl_q8_0` (what llama.cpp runs on every x86 CPU with AVX2): per
/// block eight integer lanes of four products each, scaled into eight f32 lanes by fused
/// multiply-adds, even and odd blocks in two accumulators, which are added and then reduced
/// halves first; an odd last block joins the sum alone.
pub fn vec_dot_rows(w: &[u8], queries: &[u8], row_bytes: usize, out: &mut [f32]) {
    let nb = w.len() / BLOCK_BYTES;
    assert_eq!(nb, row_bytes / Q8_0_BYTES, "iq4_nl dot lengths");
    let rows = out.iter_mut().zip(queries.chunks_exact(row_bytes));
    #[cfg(target_arch = "x86_64")]
    if crate::cpu::isa().has_avx2() {
        for (o, q) in rows {
            // SAFETY: the CPU has AVX2 and FMA (`has_avx2` covers both); the lengths are
            // checked.
            *o = unsafe { x86::vec_dot(w, q, nb) };
        }
        return;
    }
    for (o, q) in rows {
        *o = portable_dot(w, q, nb);
    }
}

/// [`vec_dot_rows`] for one row in portable Rust (scalar fused multiply-adds).
fn portable_dot(w: &[u8], a: &[u8], nb: usize) -> f32 {
    let mut acc = [[0f32; 8]; 2];
    for ib in 0..nb / 2 * 2 {
        let (x, y) = (block(w, ib, BLOCK_BYTES), block(a, ib, Q8_0_BYTES));
        let d = scale(y) * scale(x);
        let lanes = lane_sums(x, y);
        for (acc, &l) in acc[ib % 2].iter_mut().zip(&lanes) {
            *acc = d.mul_add(l as f32, *acc);
        }
    }
    let v: [f32; 8] = std::array::from_fn(|k| acc[0][k] + acc[1][k]);
    let r: [f32; 4] = std::array::from_fn(|k| v[k + 4] + v[k]);
    let mut sum = (r[0] + r[2]) + (r[1] + r[3]);
    if nb % 2 == 1 {
        sum = tail(w, a, nb - 1, sum);
    }
    sum
}

fn block(row: &[u8], ib: usize, bytes: usize) -> &[u8] {
    &row[ib * bytes..][..bytes]
}

fn scale(b: &[u8]) -> f32 {
    f16_to_f32([b[0], b[1]])
}

/// The integer lanes of one block: lane `k` sums the products at positions `4k..4k + 4`
/// (positions 0-15 are the low nibbles, 16-31 the high ones).
fn lane_sums(x: &[u8], y: &[u8]) -> [i32; 8] {
    std::array::from_fn(|k| {
        (4 * k..4 * k + 4)
            .map(|p| {
                let nib = if p < 16 {
                    x[2 + p] & 15
                } else {
                    x[2 + p - 16] >> 4
                };
                LEVELS[nib as usize] as i32 * y[2 + p] as i8 as i32
            })
            .sum()
    })
}

/// ggml's scalar loop for a block left over after the pairs.
fn tail(w: &[u8], a: &[u8], ib: usize, sum: f32) -> f32 {
    let (x, y) = (block(w, ib, BLOCK_BYTES), block(a, ib, Q8_0_BYTES));
    let total: i32 = lane_sums(x, y).iter().sum();
    (scale(x) * scale(y)).mul_add(total as f32, sum)
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{block, scale, tail, BLOCK_BYTES, LEVELS, Q8_0_BYTES};
    use std::arch::x86_64::*;

    /// [`super::vec_dot`] on 256-bit vectors, the same bits.
    ///
    /// # Safety
    /// The CPU must support AVX2 and FMA; `w` holds `nb` IQ4_NL blocks and `a` `nb` Q8_0 ones.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn vec_dot(w: &[u8], a: &[u8], nb: usize) -> f32 {
        // SAFETY: every load reads 16 or 32 bytes inside a block that `block` bounds-checked
        // (an IQ4_NL block's 16 index bytes from offset 2, a Q8_0 block's 32 quants from 2);
        // the features are enabled on this function.
        unsafe {
            let levels = _mm_loadu_si128(LEVELS.as_ptr().cast());
            let low = _mm_set1_epi8(0x0f);
            let ones = _mm256_set1_epi16(1);
            let mut acc = [_mm256_setzero_ps(); 2];
            for ib in 0..nb / 2 * 2 {
                let (x, y) = (block(w, ib, BLOCK_BYTES), block(a, ib, Q8_0_BYTES));
                let bits = _mm_loadu_si128(x[2..18].as_ptr().cast());
                let lo = _mm_shuffle_epi8(levels, _mm_and_si128(bits, low));
                let hi = _mm_shuffle_epi8(levels, _mm_and_si128(_mm_srli_epi16(bits, 4), low));
                let xv = _mm256_set_m128i(hi, lo);
                let yv = _mm256_loadu_si256(y[2..34].as_ptr().cast());
                // |x| times y with x's sign: products of int8 pairs summed in 16 bits (they
                // cannot saturate: 2 * 127 * 127 < 32768), then fours summed in 32.
                let pairs =
                    _mm256_maddubs_epi16(_mm256_sign_epi8(xv, xv), _mm256_sign_epi8(yv, xv));
                let fours = _mm256_madd_epi16(pairs, ones);
                let d = _mm256_set1_ps(scale(y) * scale(x));
                acc[ib % 2] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(fours), acc[ib % 2]);
            }
            let v = _mm256_add_ps(acc[0], acc[1]);
            let r = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
            let r = _mm_add_ps(r, _mm_movehl_ps(r, r));
            let r = _mm_add_ss(r, _mm_movehdup_ps(r));
            let sum = _mm_cvtss_f32(r);
            if nb % 2 == 1 {
                tail(w, a, nb - 1, sum)
            } else {
                sum
            }
        }
    }
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
    fn simd_and_portable_dots_agree_bit_for_bit() {
        // rows of 2, 3 and 8 blocks: pairs of blocks, and an odd one left over
        let mut seed = 11u64;
        let mut rnd = || crate::ops::attention::tests::uniform(&mut seed, 1.0);
        for nb in [2usize, 3, 8] {
            let x: Vec<f32> = (0..nb * 32).map(|_| rnd() * 3.0).collect();
            let mut w = vec![0u8; nb * BLOCK_BYTES];
            quantize(&x, &mut w);
            let mut a = vec![0u8; nb * Q8_0_BYTES];
            for (blk, q) in a.chunks_exact_mut(Q8_0_BYTES).enumerate() {
                q[..2].copy_from_slice(&f32_to_f16(0.01 + blk as f32 * 1e-3));
                for b in &mut q[2..] {
                    *b = ((rnd() * 127.0) as i8) as u8;
                }
            }
            let mut got = [0f32];
            vec_dot_rows(&w, &a, a.len(), &mut got);
            let got = got[0];
            let want = portable_dot(&w, &a, nb);
            assert_eq!(got.to_bits(), want.to_bits(), "{nb} blocks");
            // and the value is the dot product of the expanded rows
            let mut wf = vec![0f32; nb * 32];
            dequantize(&w, &mut wf);
            let exact: f64 = a
                .chunks_exact(Q8_0_BYTES)
                .zip(wf.chunks_exact(32))
                .map(|(q, xs)| {
                    let d = scale(q) as f64;
                    xs.iter()
                        .zip(&q[2..])
                        .map(|(&x, &b)| x as f64 * d * b as i8 as f64)
                        .sum::<f64>()
                })
                .sum();
            assert!(
                (got as f64 - exact).abs() <= 1e-4 * exact.abs().max(1.0),
                "{got} vs {exact}"
            );
        }
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
