//! AVX2 kernels over K-quant weights regrouped by eight rows (`quant::x8`): one to four
//! tokens against eight weight rows at a time, the rows in the eight 32-bit lanes of every
//! register. This file is the driver (groups, tokens, results) shared by the per-format
//! bodies `x8_q4k_avx2.rs` and `x8_q6k_avx2.rs`, which keep the scalar reference's integer
//! sums and f32 operations, so results are `vec_dot`'s bits.

use std::arch::x86_64::*;

use crate::quant::block::as_blocks;
use crate::quant::gemm::PackedActs;
use crate::quant::q8_k::BlockQ8K;
use crate::quant::x8::ROWS;

/// A format's body: one group of eight rows (all its super-blocks) against `T` tokens.
pub(super) trait GroupKernel {
    /// Bytes of one group block (eight rows of one super-block).
    const GROUP_BLOCK_BYTES: usize;
    /// What the body needs of one token, computed once per call.
    type Token<'a>;
    /// `y`'s view.
    fn token(y: &[BlockQ8K]) -> Self::Token<'_>;
    /// `[t]`: the eight rows' dot products with token `t`, as f32 lanes.
    ///
    /// # Safety
    /// AVX2, FMA and F16C; `group` holds one group block per super-block of the tokens.
    unsafe fn dots<const T: usize>(group: &[u8], toks: &[Self::Token<'_>; T]) -> [__m256; T];
}

/// A `vpshufb` pattern that fills each 32-bit lane with bytes `picks` of that lane (`-1`: a
/// zero byte).
#[inline]
#[target_feature(enable = "avx2")]
pub(super) fn lane_pattern(picks: [i8; 4]) -> __m256i {
    let v: [i8; 32] = std::array::from_fn(|i| {
        let p = picks[i % 4];
        if p < 0 {
            -128
        } else {
            (i % 16 / 4 * 4) as i8 + p
        }
    });
    // SAFETY: 32 readable bytes; unaligned load.
    unsafe { _mm256_loadu_si256(v.as_ptr().cast()) }
}

/// Group blocks between the one being read and the one [`prefetch_ahead`] fetches.
const PREFETCH_BLOCKS: usize = 2;

/// Prefetches every line of the group block [`PREFETCH_BLOCKS`] ahead of `blk` into L2, at the
/// pace the blocks are read (the same hint as the unregrouped kernels' `prefetch_next`). The
/// stream is one run of memory, but the hardware prefetchers alone kept too few lines in
/// flight: on a 2-core Sapphire Rapids VM, Qwen2.5-Coder-1.5B generation (`--bench -t 2`,
/// AVX2) went from 12-14 to 16-19 tokens/s with this instead of two lines four blocks ahead
/// into L1; one block ahead read 14.3-14.7, three 15.7-16.5.
#[inline(always)]
pub(super) fn prefetch_ahead(blk: *const u8, group_block_bytes: usize) {
    let at = blk.wrapping_add(PREFETCH_BLOCKS * group_block_bytes);
    for line in (0..group_block_bytes).step_by(64) {
        // SAFETY: prefetches never fault, wherever they point.
        unsafe { _mm_prefetch::<_MM_HINT_T1>(at.wrapping_add(line).cast()) };
    }
}

/// `out[r] = vec_dot(W[r], token)` for the regrouped rows in `w` (`out.len()` rows, a multiple
/// of eight) and the token packed by `quant::gemm::pack_single`.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn matvec<K: GroupKernel>(w: &[u8], acts: &PackedActs, out: &mut [f32]) {
    let nsb = acts.n_blocks;
    let gb = nsb * K::GROUP_BLOCK_BYTES;
    assert!(out.len().is_multiple_of(ROWS) && w.len() == out.len() / ROWS * gb);
    let tok = [K::token(
        &as_blocks::<BlockQ8K>(&acts.raw[..acts.raw_stride])[..nsb],
    )];
    for (group, o) in w.chunks_exact(gb).zip(out.chunks_exact_mut(ROWS)) {
        // SAFETY: the CPU features are the caller's; `group` holds `nsb` group blocks.
        let [s] = unsafe { K::dots::<1>(group, &tok) };
        // SAFETY: eight writable floats; unaligned store.
        unsafe { _mm256_storeu_ps(o.as_mut_ptr(), s) };
    }
}

/// `out[t · t_stride + r · r_stride] = vec_dot(W[r], y[t])` for the regrouped rows in `w`
/// (`rows`, a multiple of eight) and the Q8_K token rows `ys`, up to four tokens per pass over
/// a group (whose bytes then stay in L1).
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn gemm<K: GroupKernel>(
    w: &[u8],
    rows: usize,
    ys: &[&[BlockQ8K]],
    out: &mut [f32],
    t_stride: usize,
    r_stride: usize,
) {
    let Some(first) = ys.first() else { return };
    let nsb = first.len();
    let gb = nsb * K::GROUP_BLOCK_BYTES;
    assert!(rows.is_multiple_of(ROWS) && w.len() == rows / ROWS * gb);
    assert!(ys.iter().all(|y| y.len() == nsb));
    if rows == 0 {
        return;
    }
    let last = (ys.len() - 1) * t_stride + (rows - 1) * r_stride;
    assert!(out.len() > last, "x8 gemm: output too short");
    let toks: Vec<K::Token<'_>> = ys.iter().map(|y| K::token(y)).collect();
    let mut store = |t: usize, g: usize, v: __m256| {
        let mut lanes = [0f32; ROWS];
        // SAFETY: eight writable floats; unaligned store.
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), v) };
        for (r, x) in lanes.into_iter().enumerate() {
            out[t * t_stride + (g * ROWS + r) * r_stride] = x;
        }
    };
    for (g, group) in w.chunks_exact(gb).enumerate() {
        let mut t0 = 0;
        while t0 < toks.len() {
            let take = (toks.len() - t0).min(4);
            let take = if take == 3 { 2 } else { take };
            // SAFETY (each call): the CPU features are the caller's; `group` holds `nsb`
            // group blocks.
            let sums: Vec<__m256> = unsafe {
                match take {
                    4 => K::dots::<4>(group, toks[t0..t0 + 4].try_into().unwrap()).to_vec(),
                    2 => K::dots::<2>(group, toks[t0..t0 + 2].try_into().unwrap()).to_vec(),
                    _ => K::dots::<1>(group, toks[t0..t0 + 1].try_into().unwrap()).to_vec(),
                }
            };
            for (t, v) in sums.into_iter().enumerate() {
                store(t0 + t, g, v);
            }
            t0 += take;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{x8_q4k_avx2::Q4K, x8_q6k_avx2::Q6K};
    use super::*;
    use crate::quant::{f32_to_f16, quantize_row, x8, GgmlType};

    fn has_avx2() -> bool {
        crate::cpu::supports(crate::cpu::Isa::Avx2)
    }

    fn bytes(n: usize, seed: u32) -> Vec<u8> {
        let mut x = seed | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            })
            .collect()
    }

    fn q8k(cols: usize, seed: u32) -> Vec<u8> {
        let x: Vec<f32> = bytes(cols, seed)
            .into_iter()
            .map(|b| b as f32 / 127.5 - 1.0)
            .collect();
        let mut q = vec![0u8; cols / 256 * std::mem::size_of::<BlockQ8K>()];
        quantize_row(GgmlType::Q8K, &x, &mut q);
        q
    }

    /// A random matrix of `ty`: random quants and scales, small finite f16 super-block scales
    /// at `scales` (byte offsets in the block).
    fn matrix(ty: GgmlType, rows: usize, cols: usize, scales: &[usize]) -> Vec<u8> {
        let bb = ty.block_bytes();
        let mut w = bytes(rows * cols / 256 * bb, 0x2545_f491);
        for (i, b) in w.chunks_exact_mut(bb).enumerate() {
            for (k, &at) in scales.iter().enumerate() {
                let v = ((i * 7 + k * 3) % 19) as f32 * 0.001 + 0.0005;
                b[at..at + 2].copy_from_slice(&f32_to_f16(v));
            }
        }
        w
    }

    fn check<K: GroupKernel>(ty: GgmlType, scales: &[usize]) {
        let (rows, cols, n) = (24, 512, 7);
        let nsb = cols / 256;
        let w = matrix(ty, rows, cols, scales);
        let packed = x8::regroup(ty, &w, rows, nsb);
        let toks: Vec<Vec<u8>> = (0..n).map(|t| q8k(cols, 11 + t as u32)).collect();
        let ys: Vec<&[BlockQ8K]> = toks.iter().map(|q| as_blocks(q)).collect();
        let mut want = vec![0f32; n * rows];
        for (t, q) in toks.iter().enumerate() {
            x8::matvec_ref(ty, &packed, nsb, q, &mut want[t * rows..][..rows]);
        }
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        let acts = crate::quant::pack_single(ty, cols, &toks[0]);
        let mut got = vec![0f32; rows];
        // SAFETY: AVX2 (and FMA, F16C with it) confirmed by the caller.
        unsafe { matvec::<K>(&packed, &acts, &mut got) };
        assert_eq!(bits(&got), bits(&want[..rows]), "{ty} matvec");
        let mut all = vec![0f32; n * rows];
        // SAFETY: as above.
        unsafe { gemm::<K>(&packed, rows, &ys, &mut all, rows, 1) };
        assert_eq!(bits(&all), bits(&want), "{ty} gemm");
        // Rows across, tokens down.
        let mut tr = vec![0f32; n * rows];
        // SAFETY: as above.
        unsafe { gemm::<K>(&packed, rows, &ys, &mut tr, 1, n) };
        for t in 0..n {
            for r in 0..rows {
                assert_eq!(tr[r * n + t].to_bits(), want[t * rows + r].to_bits());
            }
        }
    }

    #[test]
    fn kernels_give_the_reference_bits() {
        if !has_avx2() {
            return;
        }
        check::<Q4K>(GgmlType::Q4K, &[0, 2]);
        check::<Q6K>(GgmlType::Q6K, &[208]);
    }
}
