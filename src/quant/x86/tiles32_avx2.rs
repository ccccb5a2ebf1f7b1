//! AVX2 tile kernels for the 32-element formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0): `NR` weight
//! rows × `NT` tokens per call, on activations repacked by `quant::gemm` (each token's 32
//! quants, scale and correction lanes are one 256-bit half of its pair's slot). A weight block is
//! decoded once per tile; each (row, token) product forms the eight i32 lanes of ggml's AVX2
//! kernel (sums of groups of four byte products, exact) and then scales, accumulates and sums
//! them in its float order, so the results are the bits of `legacy_body.rs`'s kernels.

use std::arch::x86_64::*;
use std::ops::Range;

use super::common::*;
use super::tiles32::{Q4_0, Q4_1, Q5_0, Q5_1, Q8_0};
use crate::quant::gemm::{PackedActs, PAIR_LANES, PAIR_QS};

/// How a format's decoded quants meet the activation bytes in `vpmaddubsw` (u8 × i8, i16 pairs
/// that saturate): every way below keeps each pair's sum within i16 and gives the exact groups
/// of four of the signed product.
#[derive(PartialEq, Eq)]
pub(super) enum Lanes {
    /// Unsigned quants (formats with a minimum): multiplied as they are.
    Unsigned,
    /// Quants stored as `value + off` with small `off` (Q4_0, Q5_0): multiplied unsigned, then
    /// the packed `corr` (`-off` times the activation groups' sums) is added.
    Offset,
    /// Signed quants (Q8_0, whose offset form would saturate): `|q|` times `y` with `q`'s sign.
    Signed,
}

/// One weight format's block for the AVX2 kernels.
pub(super) trait Avx2Block {
    /// Bytes per block.
    const BYTES: usize;
    /// Has a minimum (f16 at bytes 2..4) and pairs with Q8_1 activations.
    const HAS_MIN: bool;
    /// How [`Self::quants`] are multiplied.
    const LANES: Lanes;
    /// The 32 quants of `b` in the form [`Self::LANES`] names.
    ///
    /// # Safety
    /// The CPU must support AVX2.
    unsafe fn quants(b: &[u8]) -> __m256i;
}

impl Avx2Block for Q4_0 {
    const BYTES: usize = 18;
    const HAS_MIN: bool = false;
    const LANES: Lanes = Lanes::Offset;
    #[inline(always)]
    unsafe fn quants(b: &[u8]) -> __m256i {
        // SAFETY: the caller guarantees AVX2.
        unsafe { nibbles_32(&b[2..18]) }
    }
}

impl Avx2Block for Q4_1 {
    const BYTES: usize = 20;
    const HAS_MIN: bool = true;
    const LANES: Lanes = Lanes::Unsigned;
    #[inline(always)]
    unsafe fn quants(b: &[u8]) -> __m256i {
        // SAFETY: the caller guarantees AVX2.
        unsafe { nibbles_32(&b[4..20]) }
    }
}

impl Avx2Block for Q5_0 {
    const BYTES: usize = 22;
    const HAS_MIN: bool = false;
    const LANES: Lanes = Lanes::Offset;
    #[inline(always)]
    unsafe fn quants(b: &[u8]) -> __m256i {
        // SAFETY: the caller guarantees AVX2.
        unsafe { fifth_bit(&b[2..22]) }
    }
}

impl Avx2Block for Q5_1 {
    const BYTES: usize = 24;
    const HAS_MIN: bool = true;
    const LANES: Lanes = Lanes::Unsigned;
    #[inline(always)]
    unsafe fn quants(b: &[u8]) -> __m256i {
        // SAFETY: the caller guarantees AVX2.
        unsafe { fifth_bit(&b[4..24]) }
    }
}

impl Avx2Block for Q8_0 {
    const BYTES: usize = 34;
    const HAS_MIN: bool = false;
    const LANES: Lanes = Lanes::Signed;
    #[inline(always)]
    unsafe fn quants(b: &[u8]) -> __m256i {
        // SAFETY: the caller guarantees AVX2.
        unsafe { ld32(&b[2..34]) }
    }
}

/// Five-bit quants from `qh` (4 bytes) and the 16 nibble bytes after it, as unsigned bytes.
#[inline]
#[target_feature(enable = "avx2")]
fn fifth_bit(b: &[u8]) -> __m256i {
    let hi = _mm256_and_si256(
        bits_to_bytes_32([b[0], b[1], b[2], b[3]]),
        _mm256_set1_epi8(0x10),
    );
    _mm256_or_si256(nibbles_32(&b[4..20]), hi)
}

/// The tile-kernel entry for format `B` (see `quant::gemm::gemm` for the contract). Tile shapes
/// (rows × tokens) per way of forming the lanes, measured on Zen 3: the fewer operations per
/// product, the more tokens one decoded block is worth.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn gemm<B: Avx2Block>(
    w: &[u8],
    rows: usize,
    acts: &PackedActs,
    pairs: Range<usize>,
    out: &mut [f32],
    t_stride: usize,
    r_stride: usize,
) {
    // SAFETY (every call): the caller guarantees the CPU features.
    unsafe {
        match B::LANES {
            Lanes::Unsigned => gemm_shape::<B, 1, 8>(w, rows, acts, pairs, out, t_stride, r_stride),
            Lanes::Offset => gemm_shape::<B, 2, 4>(w, rows, acts, pairs, out, t_stride, r_stride),
            Lanes::Signed => gemm_shape::<B, 3, 3>(w, rows, acts, pairs, out, t_stride, r_stride),
        }
    }
}

/// [`gemm`] with tiles of `NR` rows × `NT` tokens (remainders in narrower tiles).
///
/// # Safety
/// As for [`gemm`].
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn gemm_shape<B: Avx2Block, const NR: usize, const NT: usize>(
    w: &[u8],
    rows: usize,
    acts: &PackedActs,
    pairs: Range<usize>,
    out: &mut [f32],
    t_stride: usize,
    r_stride: usize,
) {
    let row_bytes = acts.n_blocks * B::BYTES;
    let (t_begin, t_end) = (2 * pairs.start, (2 * pairs.end).min(acts.n_tokens));
    let mut r0 = 0;
    while r0 < rows {
        let nr = (rows - r0).min(NR);
        let wt = &w[r0 * row_bytes..(r0 + nr) * row_bytes];
        let mut t0 = t_begin;
        while t0 < t_end {
            let nt = (t_end - t0).min(NT);
            let mut put = |r: usize, t: usize, v: f32| {
                out[(t0 + t - t_begin) * t_stride + (r0 + r) * r_stride] = v;
            };
            // SAFETY (every call): the caller guarantees the CPU features.
            unsafe {
                if nr == NR {
                    tokens::<B, NR>(nt, wt, row_bytes, acts, t0, &mut put);
                } else {
                    for r in 0..nr {
                        let wr = &wt[r * row_bytes..][..row_bytes];
                        tokens::<B, 1>(nt, wr, row_bytes, acts, t0, &mut |_, t, v| put(r, t, v));
                    }
                }
            }
            t0 += nt;
        }
        r0 += nr;
    }
}

/// [`tile`] for `NR` rows and `nt` (1 to 8) tokens.
#[inline(always)]
unsafe fn tokens<B: Avx2Block, const NR: usize>(
    nt: usize,
    w: &[u8],
    row_bytes: usize,
    acts: &PackedActs,
    tok0: usize,
    put: &mut impl FnMut(usize, usize, f32),
) {
    // SAFETY (every call): the caller guarantees the CPU features.
    unsafe {
        match nt {
            1 => tile::<B, NR, 1>(w, row_bytes, acts, tok0, false, put),
            2 => tile::<B, NR, 2>(w, row_bytes, acts, tok0, false, put),
            3 => tile::<B, NR, 3>(w, row_bytes, acts, tok0, false, put),
            4 => tile::<B, NR, 4>(w, row_bytes, acts, tok0, false, put),
            5 => tile::<B, NR, 5>(w, row_bytes, acts, tok0, false, put),
            6 => tile::<B, NR, 6>(w, row_bytes, acts, tok0, false, put),
            7 => tile::<B, NR, 7>(w, row_bytes, acts, tok0, false, put),
            _ => tile::<B, NR, 8>(w, row_bytes, acts, tok0, false, put),
        }
    }
}

/// `NR` weight rows (`w`, `row_bytes` apart) × the packed tokens `tok0..tok0 + NT`; hands each
/// result to `put(row, t, value)`. With `prefetch`, fetches the `NR` rows after these at the
/// pace they are consumed.
#[inline(always)]
#[allow(clippy::needless_range_loop)] // tiles index rows and tokens of several arrays at once
pub(super) unsafe fn tile<B: Avx2Block, const NR: usize, const NT: usize>(
    w: &[u8],
    row_bytes: usize,
    acts: &PackedActs,
    tok0: usize,
    prefetch: bool,
    put: &mut impl FnMut(usize, usize, f32),
) {
    let nb = acts.n_blocks;
    // Bounds are checked once here; the loop reads through raw pointers within them.
    assert!(w.len() >= (NR - 1) * row_bytes + nb * B::BYTES && row_bytes >= nb * B::BYTES);
    let last_slot = ((tok0 + NT - 1) / 2 + 1) * nb;
    assert!(acts.qs.len() >= last_slot * PAIR_QS && acts.d.len() >= last_slot * PAIR_LANES);
    let offset = B::LANES == Lanes::Offset;
    assert!(!offset || acts.corr.len() >= last_slot * PAIR_LANES);
    assert!(NR <= 8 && NT <= 8);
    assert!(!B::HAS_MIN || (nb > 0 && acts.s.len() >= (nb - 1) * acts.s_stride + tok0 + 8));
    let (wp, qp, dp, cp, sp) = (
        w.as_ptr(),
        acts.qs.as_ptr(),
        acts.d.as_ptr(),
        acts.corr.as_ptr(),
        acts.s.as_ptr(),
    );
    // Per token: its first slot's offset in `qs` bytes and in scale/correction lanes.
    let qo: [usize; NT] = std::array::from_fn(|t| {
        let tok = tok0 + t;
        tok / 2 * nb * PAIR_QS + tok % 2 * 32
    });
    let lo: [usize; NT] = std::array::from_fn(|t| {
        let tok = tok0 + t;
        tok / 2 * nb * PAIR_LANES + tok % 2 * 8
    });
    // SAFETY (whole body): the caller guarantees the CPU features; every pointer read below
    // stays within the ranges asserted above (prefetches may point anywhere: they never fault).
    unsafe {
        let ones = _mm256_set1_epi16(1);
        let mut acc = [[_mm256_setzero_ps(); NT]; NR];
        for b in 0..nb {
            if prefetch {
                let ahead = wp.wrapping_add(NR * row_bytes + NR * b * B::BYTES);
                _mm_prefetch::<_MM_HINT_T0>(ahead.cast());
                _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(64).cast());
                if NR * B::BYTES > 128 {
                    _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(128).cast());
                }
            }
            // Row by row, so that only one decoded block is live beside the accumulators.
            for r in 0..NR {
                let blk =
                    std::slice::from_raw_parts(wp.add(r * row_bytes + b * B::BYTES), B::BYTES);
                let q = B::quants(blk);
                let ax = match B::LANES {
                    Lanes::Signed => _mm256_sign_epi8(q, q),
                    _ => q,
                };
                let dx = _mm256_set1_ps(f16([blk[0], blk[1]]));
                for t in 0..NT {
                    let y = _mm256_loadu_si256(qp.add(qo[t] + b * PAIR_QS).cast());
                    let y = match B::LANES {
                        Lanes::Signed => _mm256_sign_epi8(y, q),
                        _ => y,
                    };
                    let mut p = _mm256_madd_epi16(_mm256_maddubs_epi16(ax, y), ones);
                    if offset {
                        let c = _mm256_loadu_si256(cp.add(lo[t] + b * PAIR_LANES).cast());
                        p = _mm256_add_epi32(p, c);
                    }
                    let d = _mm256_mul_ps(dx, _mm256_loadu_ps(dp.add(lo[t] + b * PAIR_LANES)));
                    acc[r][t] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc[r][t]);
                }
            }
        }
        for r in 0..NR {
            // The minimum's running term, tokens in lanes (the `s` rows have slack for whole
            // vectors): multiply then add per block, as the single-row kernels do per token.
            let mut summs = _mm256_setzero_ps();
            if B::HAS_MIN {
                for b in 0..nb {
                    let at = r * row_bytes + b * B::BYTES + 2;
                    let mx = _mm256_set1_ps(f16([*wp.add(at), *wp.add(at + 1)]));
                    let sy = _mm256_loadu_ps(sp.add(b * acts.s_stride + tok0));
                    summs = _mm256_add_ps(summs, _mm256_mul_ps(mx, sy));
                }
            }
            let mut extra = [0f32; 8];
            _mm256_storeu_ps(extra.as_mut_ptr(), summs);
            for t in 0..NT {
                put(r, t, hsum_f32_8(acc[r][t]) + extra[t]);
            }
        }
    }
}
