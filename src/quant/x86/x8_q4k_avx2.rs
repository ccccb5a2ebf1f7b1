//! The Q4_K body of the regrouped kernels (`x8_avx2.rs`). Per super-block and group: each
//! 32-byte plane of quants is split into its two nibble vectors once, every token's four
//! matching activation bytes are broadcast to all lanes, and the `vpmaddubsw` products of one
//! 32-element sub-block accumulate in i16 (at most 8 × 2 × 15 × 128 = 30720, exact) before one
//! `vpmaddwd` applies each row's 6-bit scale. The minimums meet the token's bsum pairs through
//! `vpmaddwd` too, and the f32 step is the scalar reference's (`d·isum − dmin·summs` with
//! `d = dx·yd`).

use std::arch::x86_64::*;

use super::x8_avx2::{lane_pattern, prefetch_ahead, GroupKernel};
use crate::quant::q8_k::BlockQ8K;

/// The Q4_K body.
pub(super) struct Q4K;

/// One token: its super-blocks and, per super-block, its bsum pairs (sums of 32 quants).
pub(super) struct Token<'a> {
    y: &'a [BlockQ8K],
    pairs: Vec<[i16; 8]>,
}

impl GroupKernel for Q4K {
    const GROUP_BLOCK_BYTES: usize = 8 * 144;
    type Token<'a> = Token<'a>;

    fn token(y: &[BlockQ8K]) -> Token<'_> {
        // Each pair fits i16: 32 quants of at most 128 in magnitude.
        let pairs = y
            .iter()
            .map(|b| std::array::from_fn(|j| (b.bsum(2 * j) + b.bsum(2 * j + 1)) as i16))
            .collect();
        Token { y, pairs }
    }

    #[inline(always)]
    unsafe fn dots<const T: usize>(group: &[u8], toks: &[Token<'_>; T]) -> [__m256; T] {
        // SAFETY: the caller's contract is this function's.
        unsafe { dots::<T>(group, toks) }
    }
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dots<const T: usize>(group: &[u8], toks: &[Token<'_>; T]) -> [__m256; T] {
    let nsb = toks[0].y.len();
    assert!(group.len() >= nsb * Q4K::GROUP_BLOCK_BYTES);
    let nib = _mm256_set1_epi8(0x0f);
    let low6 = _mm256_set1_epi8(0x3f);
    let bits45 = _mm256_set1_epi8(0x30);
    // Byte k of each lane into both words of the lane: a scale as (s, s).
    let scale = [0, 1, 2, 3].map(|k| lane_pattern([k, -1, k, -1]));
    // Bytes k and k + 1 into the two words: a pair of minimums.
    let mins = [0, 2].map(|k| lane_pattern([k, -1, k + 1, -1]));
    let mut sumf = [_mm256_setzero_ps(); T];
    for sb in 0..nsb {
        // SAFETY: `group` holds `nsb` group blocks (checked above).
        let blk = unsafe { group.as_ptr().add(sb * Q4K::GROUP_BLOCK_BYTES) };
        prefetch_ahead(blk, Q4K::GROUP_BLOCK_BYTES);
        // SAFETY: every load below reads inside this group block (1152 bytes from `blk`).
        let ld = |at: usize| unsafe { _mm256_loadu_si256(blk.add(at).cast()) };
        // The packed scale words a, b, c of every row: scales and minimums 0..4 are the low
        // six bits of a and b, 4..8 a nibble of c below the top two bits of a and b.
        let (a, b, c) = (ld(32), ld(64), ld(96));
        let sc = [
            _mm256_and_si256(a, low6),
            _mm256_or_si256(
                _mm256_and_si256(c, nib),
                _mm256_and_si256(_mm256_srli_epi32::<2>(a), bits45),
            ),
        ];
        let mn = [
            _mm256_and_si256(b, low6),
            _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi32::<4>(c), nib),
                _mm256_and_si256(_mm256_srli_epi32::<2>(b), bits45),
            ),
        ];
        let mut isum = [_mm256_setzero_si256(); T];
        for i in 0..4 {
            let mut lo = [_mm256_setzero_si256(); T];
            let mut hi = [_mm256_setzero_si256(); T];
            for g in 0..8 {
                let q = ld(128 + 32 * (8 * i + g));
                let ql = _mm256_and_si256(q, nib);
                let qh = _mm256_and_si256(_mm256_srli_epi16::<4>(q), nib);
                for t in 0..T {
                    let yq = toks[t].y[sb].qs.as_ptr();
                    // SAFETY: `64i + 32 + 4g + 4 <= 256` bytes of the token's quants.
                    let (yl, yh) = unsafe {
                        (
                            yq.add(64 * i + 4 * g).cast::<i32>().read_unaligned(),
                            yq.add(64 * i + 32 + 4 * g).cast::<i32>().read_unaligned(),
                        )
                    };
                    let pl = _mm256_maddubs_epi16(ql, _mm256_set1_epi32(yl));
                    let ph = _mm256_maddubs_epi16(qh, _mm256_set1_epi32(yh));
                    lo[t] = _mm256_add_epi16(lo[t], pl);
                    hi[t] = _mm256_add_epi16(hi[t], ph);
                }
            }
            // Sub-blocks 2i (low nibbles) and 2i + 1: scale bytes (2i) % 4 and (2i + 1) % 4 of
            // the plane holding scales 0..4 or 4..8.
            let plane = sc[i / 2];
            let s_lo = _mm256_shuffle_epi8(plane, scale[(2 * i) % 4]);
            let s_hi = _mm256_shuffle_epi8(plane, scale[(2 * i + 1) % 4]);
            for t in 0..T {
                let p = _mm256_add_epi32(
                    _mm256_madd_epi16(lo[t], s_lo),
                    _mm256_madd_epi16(hi[t], s_hi),
                );
                isum[t] = _mm256_add_epi32(isum[t], p);
            }
        }
        // The minimums as (m_2k, m_2k+1) word pairs per row, against each token's bsum pairs.
        let mw = [
            _mm256_shuffle_epi8(mn[0], mins[0]),
            _mm256_shuffle_epi8(mn[0], mins[1]),
            _mm256_shuffle_epi8(mn[1], mins[0]),
            _mm256_shuffle_epi8(mn[1], mins[1]),
        ];
        // SAFETY: 16 readable bytes each at `blk` and `blk + 16`.
        let (dx, dmx) = unsafe {
            (
                _mm256_cvtph_ps(_mm_loadu_si128(blk.cast())),
                _mm256_cvtph_ps(_mm_loadu_si128(blk.add(16).cast())),
            )
        };
        for t in 0..T {
            // SAFETY: 16 readable bytes; unaligned load.
            let p = unsafe { _mm_loadu_si128(toks[t].pairs[sb].as_ptr().cast()) };
            let p = _mm256_broadcastsi128_si256(p);
            let summs = _mm256_add_epi32(
                _mm256_add_epi32(
                    _mm256_madd_epi16(mw[0], _mm256_shuffle_epi32::<0x00>(p)),
                    _mm256_madd_epi16(mw[1], _mm256_shuffle_epi32::<0x55>(p)),
                ),
                _mm256_add_epi32(
                    _mm256_madd_epi16(mw[2], _mm256_shuffle_epi32::<0xaa>(p)),
                    _mm256_madd_epi16(mw[3], _mm256_shuffle_epi32::<0xff>(p)),
                ),
            );
            let yd = _mm256_set1_ps(toks[t].y[sb].d());
            let d = _mm256_mul_ps(dx, yd);
            let dmin = _mm256_mul_ps(dmx, yd);
            let term = _mm256_sub_ps(
                _mm256_mul_ps(d, _mm256_cvtepi32_ps(isum[t])),
                _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(summs)),
            );
            sumf[t] = _mm256_add_ps(sumf[t], term);
        }
    }
    sumf
}
