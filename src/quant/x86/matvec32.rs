//! AVX-512 VNNI matrix-vector kernel for the 32-element formats: four weight rows per step, two
//! per 512-bit vector (one in each half) against one token copied to both halves by
//! `quant::gemm::pack_single`. As in `tiles32.rs`, each product keeps ggml's AVX2 float order
//! (the i32 lanes are its groups-of-four sums, scaled and accumulated per block, summed
//! horizontally at the end), so results are the bits of the single-row kernels; the four rows
//! give the core four independent accumulation chains and four weight streams to overlap.

use std::arch::x86_64::*;

use super::common::*;
use super::tiles32::{i32_bytes, ld64, tile, Block32};
use crate::quant::gemm::{PackedActs, PAIR_LANES, PAIR_QS};

/// `out[r] = vec_dot(W[r], act)` for the `out.len()` weight rows in `w` and the single token in
/// `acts`.
///
/// # Safety
/// The CPU must support AVX-512 F/BW/VL, VNNI, AVX2, FMA and F16C.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) unsafe fn matvec<B: Block32>(w: &[u8], acts: &PackedActs, out: &mut [f32]) {
    let row_bytes = acts.n_blocks * B::BYTES;
    let full = out.len() / 4 * 4;
    let (head, tail) = out.split_at_mut(full);
    for (i, o) in head.chunks_exact_mut(4).enumerate() {
        // SAFETY: the caller guarantees the CPU features.
        unsafe { rows4::<B>(&w[4 * i * row_bytes..][..4 * row_bytes], row_bytes, acts, o) };
    }
    for (i, o) in tail.iter_mut().enumerate() {
        let wr = &w[(full + i) * row_bytes..][..row_bytes];
        // SAFETY: as above. The packed token sits in both halves of pair 0; keep the first.
        unsafe {
            tile::<B, 1, 1>(wr, row_bytes, acts, 0, &mut |_, _, half, v| {
                if half == 0 {
                    *o = v
                }
            })
        };
    }
}

/// Four weight rows (`row_bytes` apart) against the packed token.
#[inline(always)]
unsafe fn rows4<B: Block32>(w: &[u8], row_bytes: usize, acts: &PackedActs, out: &mut [f32]) {
    let blk = |r: usize, b: usize| &w[r * row_bytes + b * B::BYTES..][..B::BYTES];
    let h16 = |b: &[u8], at: usize| i16::from_le_bytes([b[at], b[at + 1]]);
    // SAFETY (whole body): the caller guarantees the CPU features; loads go through checked
    // slices.
    unsafe {
        // Lanes 0-7 take scale lane 2k, lanes 8-15 lane 2k + 1, for row pair k.
        let pick = [
            _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0),
            _mm512_set_epi32(3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2),
        ];
        let mut acc = [_mm512_setzero_ps(); 2];
        let mut summs = _mm_setzero_ps();
        for b in 0..acts.n_blocks {
            let y = ld64(&acts.qs[b * PAIR_QS..][..PAIR_QS]);
            let c = if B::OFFSET {
                ld64(i32_bytes(&acts.corr[b * PAIR_LANES..][..PAIR_LANES]))
            } else {
                _mm512_setzero_si512()
            };
            let (b0, b1, b2, b3) = (blk(0, b), blk(1, b), blk(2, b), blk(3, b));
            // The four rows are one contiguous run of memory; fetch the next run's bytes at the
            // pace this one is consumed, so memory sees one sequential stream.
            let ahead = w.as_ptr().wrapping_add(4 * row_bytes + 4 * b * B::BYTES);
            _mm_prefetch::<_MM_HINT_T0>(ahead.cast());
            _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(64).cast());
            let dx = _mm_cvtph_ps(_mm_set_epi16(
                0,
                0,
                0,
                0,
                h16(b3, 0),
                h16(b2, 0),
                h16(b1, 0),
                h16(b0, 0),
            ));
            let d = _mm_mul_ps(dx, _mm_set1_ps(acts.d[b * PAIR_LANES]));
            if B::HAS_MIN {
                let mx = _mm_cvtph_ps(_mm_set_epi16(
                    0,
                    0,
                    0,
                    0,
                    h16(b3, 2),
                    h16(b2, 2),
                    h16(b1, 2),
                    h16(b0, 2),
                ));
                let sy = _mm_set1_ps(acts.s[b * acts.s_stride]);
                summs = _mm_add_ps(summs, _mm_mul_ps(mx, sy));
            }
            let d = _mm512_castps128_ps512(d);
            for (k, (lo, hi)) in [(b0, b1), (b2, b3)].into_iter().enumerate() {
                let q =
                    _mm512_inserti64x4::<1>(_mm512_castsi256_si512(B::quants(lo)), B::quants(hi));
                let i = _mm512_dpbusd_epi32(c, q, y);
                let dv = _mm512_permutexvar_ps(pick[k], d);
                acc[k] = _mm512_fmadd_ps(dv, _mm512_cvtepi32_ps(i), acc[k]);
            }
        }
        let mut extra = [0f32; 4];
        _mm_storeu_ps(extra.as_mut_ptr(), summs);
        for k in 0..2 {
            let [lo, hi] = halves_512(acc[k]);
            out[2 * k] = hsum_f32_8(lo) + extra[2 * k];
            out[2 * k + 1] = hsum_f32_8(hi) + extra[2 * k + 1];
        }
    }
}
