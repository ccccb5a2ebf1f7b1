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

/// Weight rows per tile.
pub(super) const R: usize = 4;
/// Tokens per tile.
pub(super) const T: usize = 2;

/// The tile-kernel entry for format `B` (see `quant::gemm::gemm` for the contract).
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
    // SAFETY: the caller guarantees the CPU features.
    unsafe { gemm_shape::<B, R, T>(w, rows, acts, pairs, out, t_stride, r_stride) }
}

/// [`gemm`] with tiles of `NR` rows × `NT` tokens (remainders in smaller tiles).
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
                match (nr == NR, nt == NT) {
                    (true, true) => tile::<B, NR, NT>(wt, row_bytes, acts, t0, false, &mut put),
                    (true, false) => {
                        for t in 0..nt {
                            tile::<B, NR, 1>(wt, row_bytes, acts, t0 + t, false, &mut |r, _, v| {
                                put(r, t, v)
                            });
                        }
                    }
                    (false, _) => {
                        for r in 0..nr {
                            let wr = &wt[r * row_bytes..][..row_bytes];
                            let mut put_r = |_, t, v| put(r, t, v);
                            if nt == NT {
                                tile::<B, 1, NT>(wr, row_bytes, acts, t0, false, &mut put_r);
                            } else {
                                for t in 0..nt {
                                    tile::<B, 1, 1>(
                                        wr,
                                        row_bytes,
                                        acts,
                                        t0 + t,
                                        false,
                                        &mut |_, _, v| put_r(0, t, v),
                                    );
                                }
                            }
                        }
                    }
                }
            }
            t0 += nt;
        }
        r0 += nr;
    }
}

/// `NR` weight rows (`w`, `row_bytes` apart) × the packed tokens `tok0..tok0 + NT`; hands each result to `put(row, t, value)`.
/// With `prefetch`, fetches the `NR` rows after these at the pace they are consumed.
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
    assert!(!B::HAS_MIN || (nb > 0 && acts.s.len() >= (nb - 1) * acts.s_stride + tok0 + NT));
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
        let mut summs = [[0f32; NT]; NR];
        for b in 0..nb {
            if prefetch {
                let ahead = wp.wrapping_add(NR * row_bytes + NR * b * B::BYTES);
                _mm_prefetch::<_MM_HINT_T0>(ahead.cast());
                _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(64).cast());
                if NR * B::BYTES > 128 {
                    _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(128).cast());
                }
            }
            let mut wq = [_mm256_setzero_si256(); NR];
            let mut ax = [_mm256_setzero_si256(); NR];
            let mut dx = [0f32; NR];
            let mut mx = [0f32; NR];
            for r in 0..NR {
                let blk =
                    std::slice::from_raw_parts(wp.add(r * row_bytes + b * B::BYTES), B::BYTES);
                wq[r] = B::quants(blk);
                if B::LANES == Lanes::Signed {
                    ax[r] = _mm256_sign_epi8(wq[r], wq[r]);
                }
                dx[r] = f16([blk[0], blk[1]]);
                if B::HAS_MIN {
                    mx[r] = f16([blk[2], blk[3]]);
                }
            }
            for t in 0..NT {
                let y = _mm256_loadu_si256(qp.add(qo[t] + b * PAIR_QS).cast());
                let dy = _mm256_loadu_ps(dp.add(lo[t] + b * PAIR_LANES));
                let c = if offset {
                    _mm256_loadu_si256(cp.add(lo[t] + b * PAIR_LANES).cast())
                } else {
                    _mm256_setzero_si256()
                };
                if B::HAS_MIN {
                    let sy = *sp.add(b * acts.s_stride + tok0 + t);
                    for r in 0..NR {
                        summs[r][t] += mx[r] * sy;
                    }
                }
                for r in 0..NR {
                    let p = match B::LANES {
                        Lanes::Signed => {
                            let sy = _mm256_sign_epi8(y, wq[r]);
                            _mm256_madd_epi16(_mm256_maddubs_epi16(ax[r], sy), ones)
                        }
                        Lanes::Unsigned => _mm256_madd_epi16(_mm256_maddubs_epi16(wq[r], y), ones),
                        Lanes::Offset => _mm256_add_epi32(
                            _mm256_madd_epi16(_mm256_maddubs_epi16(wq[r], y), ones),
                            c,
                        ),
                    };
                    let d = _mm256_mul_ps(_mm256_set1_ps(dx[r]), dy);
                    acc[r][t] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc[r][t]);
                }
            }
        }
        for r in 0..NR {
            for t in 0..NT {
                put(r, t, hsum_f32_8(acc[r][t]) + summs[r][t]);
            }
        }
    }
}
