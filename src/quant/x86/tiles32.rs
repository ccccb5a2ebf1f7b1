//! AVX-512 VNNI tile kernels for the 32-element formats: `R` weight rows × `P` token pairs per
//! call, on activations repacked by `quant::gemm`. A weight block is decoded once per tile as
//! 32 unsigned bytes and copied to both halves of a 512-bit vector; each half meets one token of
//! a pair in one `vpdpbusd`, so the i32 lanes hold exactly the groups-of-four sums of ggml's
//! AVX2 kernel, and scaling, accumulation and the final horizontal sum follow its order per
//! product. The results are the bits of `legacy_body.rs`'s kernels.

use std::arch::x86_64::*;
use std::ops::Range;

use super::common::*;
use crate::quant::gemm::{PackedActs, PAIR_LANES, PAIR_QS};

/// One weight format's block: where its scales live and how its quants become unsigned bytes.
pub(super) trait Block32 {
    /// Bytes per block.
    const BYTES: usize;
    /// Has a minimum (f16 at bytes 2..4) and pairs with Q8_1 activations.
    const HAS_MIN: bool;
    /// Quants are stored with an offset, corrected by the packed `corr`.
    const OFFSET: bool;
    /// The 32 quants of `b` as unsigned bytes (value plus the format's offset).
    ///
    /// # Safety
    /// The CPU must support AVX-512 BW/VL (callers are the AVX-512 kernels).
    unsafe fn quants(b: &[u8]) -> __m256i;
}

pub(super) struct Q4_0;
pub(super) struct Q4_1;
pub(super) struct Q5_0;
pub(super) struct Q5_1;
pub(super) struct Q8_0;

impl Block32 for Q4_0 {
    const BYTES: usize = 18;
    const HAS_MIN: bool = false;
    const OFFSET: bool = true;
    #[inline(always)]
    unsafe fn quants(b: &[u8]) -> __m256i {
        // SAFETY: the caller guarantees AVX2.
        unsafe { nibbles_32(&b[2..18]) }
    }
}

impl Block32 for Q4_1 {
    const BYTES: usize = 20;
    const HAS_MIN: bool = true;
    const OFFSET: bool = false;
    #[inline(always)]
    unsafe fn quants(b: &[u8]) -> __m256i {
        // SAFETY: the caller guarantees AVX2.
        unsafe { nibbles_32(&b[4..20]) }
    }
}

impl Block32 for Q5_0 {
    const BYTES: usize = 22;
    const HAS_MIN: bool = false;
    const OFFSET: bool = true;
    #[inline(always)]
    unsafe fn quants(b: &[u8]) -> __m256i {
        // SAFETY: the caller guarantees AVX-512 BW/VL (the only callers are AVX-512 kernels).
        unsafe {
            let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
            let hi = _mm256_maskz_mov_epi8(qh, _mm256_set1_epi8(0x10));
            _mm256_or_si256(nibbles_32(&b[6..22]), hi)
        }
    }
}

impl Block32 for Q5_1 {
    const BYTES: usize = 24;
    const HAS_MIN: bool = true;
    const OFFSET: bool = false;
    #[inline(always)]
    unsafe fn quants(b: &[u8]) -> __m256i {
        // SAFETY: as for Q5_0.
        unsafe {
            let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
            let hi = _mm256_maskz_mov_epi8(qh, _mm256_set1_epi8(0x10));
            _mm256_or_si256(nibbles_32(&b[8..24]), hi)
        }
    }
}

impl Block32 for Q8_0 {
    const BYTES: usize = 34;
    const HAS_MIN: bool = false;
    const OFFSET: bool = true;
    #[inline(always)]
    unsafe fn quants(b: &[u8]) -> __m256i {
        // SAFETY: the caller guarantees AVX2.
        unsafe { _mm256_xor_si256(ld32(&b[2..34]), _mm256_set1_epi8(-128)) }
    }
}

/// Weight rows per tile.
const R: usize = 4;
/// Token pairs per tile.
const P: usize = 4;

/// The tile-kernel entry for format `B` (see `quant::gemm::gemm` for the contract).
///
/// # Safety
/// The CPU must support AVX-512 F/BW/VL, VNNI, AVX2, FMA and F16C.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) unsafe fn gemm<B: Block32>(
    w: &[u8],
    rows: usize,
    acts: &PackedActs,
    pairs: Range<usize>,
    out: &mut [f32],
    t_stride: usize,
    r_stride: usize,
) {
    let row_bytes = acts.n_blocks * B::BYTES;
    let mut r0 = 0;
    while r0 < rows {
        let nr = (rows - r0).min(R);
        let wt = &w[r0 * row_bytes..(r0 + nr) * row_bytes];
        let mut p0 = pairs.start;
        while p0 < pairs.end {
            let np = (pairs.end - p0).min(P);
            let mut put = |r: usize, pair: usize, half: usize, v: f32| {
                let tok = 2 * pair + half;
                if tok < acts.n_tokens {
                    let t = tok - 2 * pairs.start;
                    out[t * t_stride + (r0 + r) * r_stride] = v;
                }
            };
            match (nr, np) {
                (R, P) => tile::<B, R, P>(wt, row_bytes, acts, p0, &mut put),
                (R, 3) => tile::<B, R, 3>(wt, row_bytes, acts, p0, &mut put),
                (R, 2) => tile::<B, R, 2>(wt, row_bytes, acts, p0, &mut put),
                (R, _) => tile::<B, R, 1>(wt, row_bytes, acts, p0, &mut put),
                (_, _) => {
                    for r in 0..nr {
                        let wr = &wt[r * row_bytes..(r + 1) * row_bytes];
                        for p in p0..p0 + np {
                            tile::<B, 1, 1>(wr, row_bytes, acts, p, &mut |_, pair, half, v| {
                                put(r, pair, half, v)
                            });
                        }
                    }
                }
            }
            p0 += np;
        }
        r0 += nr;
    }
}

/// `NR` weight rows (`w`, `row_bytes` apart) × `NP` token pairs from `pair0`; hands each result
/// to `put(row, pair, half, value)`.
#[inline(always)]
#[allow(clippy::needless_range_loop)] // tiles index rows and pairs of several arrays at once
pub(super) unsafe fn tile<B: Block32, const NR: usize, const NP: usize>(
    w: &[u8],
    row_bytes: usize,
    acts: &PackedActs,
    pair0: usize,
    put: &mut impl FnMut(usize, usize, usize, f32),
) {
    let nb = acts.n_blocks;
    // Bounds are checked once here; the loop reads through raw pointers within them.
    assert!(w.len() >= (NR - 1) * row_bytes + nb * B::BYTES && row_bytes >= nb * B::BYTES);
    let slots = (pair0 + NP) * nb;
    assert!(acts.qs.len() >= slots * PAIR_QS && acts.d.len() >= slots * PAIR_LANES);
    assert!(!B::OFFSET || acts.corr.len() >= slots * PAIR_LANES);
    assert!(!B::HAS_MIN || (nb > 0 && acts.s.len() >= (nb - 1) * acts.s_stride + 2 * pair0 + 8));
    assert!(!B::HAS_MIN || acts.s_stride >= 2 * pair0 + 8);
    let (wp, qp, dp, cp, sp) = (
        w.as_ptr(),
        acts.qs.as_ptr(),
        acts.d.as_ptr(),
        acts.corr.as_ptr(),
        acts.s.as_ptr(),
    );
    // SAFETY (whole body): the caller guarantees the CPU features; every pointer below stays
    // within the ranges asserted above.
    unsafe {
        let mut acc = [[_mm512_setzero_ps(); NP]; NR];
        let mut summs = [_mm256_setzero_ps(); NR];
        for b in 0..nb {
            let mut wq = [_mm512_setzero_si512(); NR];
            let mut dx = [0f32; NR];
            let mut mx = [0f32; NR];
            for r in 0..NR {
                let blk =
                    std::slice::from_raw_parts(wp.add(r * row_bytes + b * B::BYTES), B::BYTES);
                let q = B::quants(blk);
                wq[r] = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(q), q);
                dx[r] = f16([blk[0], blk[1]]);
                if B::HAS_MIN {
                    mx[r] = f16([blk[2], blk[3]]);
                }
            }
            for p in 0..NP {
                let slot = (pair0 + p) * nb + b;
                let y = _mm512_loadu_si512(qp.add(slot * PAIR_QS).cast());
                let dy = _mm512_loadu_ps(dp.add(slot * PAIR_LANES));
                let c = if B::OFFSET {
                    _mm512_loadu_si512(cp.add(slot * PAIR_LANES).cast())
                } else {
                    _mm512_setzero_si512()
                };
                for r in 0..NR {
                    let i = _mm512_dpbusd_epi32(c, wq[r], y);
                    let d = _mm512_mul_ps(_mm512_set1_ps(dx[r]), dy);
                    acc[r][p] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(i), acc[r][p]);
                }
            }
            if B::HAS_MIN {
                let sy = _mm256_loadu_ps(sp.add(b * acts.s_stride + 2 * pair0));
                for r in 0..NR {
                    summs[r] = _mm256_add_ps(summs[r], _mm256_mul_ps(_mm256_set1_ps(mx[r]), sy));
                }
            }
        }
        for r in 0..NR {
            let mut extra = [0f32; 8];
            _mm256_storeu_ps(extra.as_mut_ptr(), summs[r]);
            for p in 0..NP {
                let [lo, hi] = halves_512(acc[r][p]);
                put(r, pair0 + p, 0, hsum_f32_8(lo) + extra[2 * p]);
                put(r, pair0 + p, 1, hsum_f32_8(hi) + extra[2 * p + 1]);
            }
        }
    }
}

/// 64 bytes from the start of `s`.
#[inline(always)]
pub(super) unsafe fn ld64(s: &[u8]) -> __m512i {
    assert!(s.len() >= 64);
    // SAFETY: at least 64 readable bytes; unaligned load; the caller guarantees AVX-512F.
    unsafe { _mm512_loadu_si512(s.as_ptr().cast()) }
}

/// The bytes of an i32 slice.
#[inline(always)]
pub(super) fn i32_bytes(s: &[i32]) -> &[u8] {
    // SAFETY: i32 has no padding and every byte pattern is a valid u8; the length is exact.
    unsafe { std::slice::from_raw_parts(s.as_ptr().cast(), std::mem::size_of_val(s)) }
}
