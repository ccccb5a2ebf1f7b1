//! The Q6_K body of the regrouped kernels (`x8_avx2.rs`). Per super-block half and group of
//! four quant columns (one 96-byte step): the two `ql` planes and the `qh` plane give the four 6-bit quant
//! vectors (unsigned, 0..63) of four 32-element runs, each meets the token's four matching
//! activation bytes, broadcast, in `vpmaddubsw`, and `vpmaddwd` applies each row's signed
//! scale of that 16-element sub-block. The quants' −32 offset is taken once per super-block
//! through the token's bsums (`32 · Σ scale · bsum`), and the f32 step is the scalar
//! reference's (`(dx·yd)·isum`).

use std::arch::x86_64::*;

use super::x8_avx2::{lane_pattern, prefetch_ahead, GroupKernel};
use crate::quant::q8_k::BlockQ8K;

/// The Q6_K body.
pub(super) struct Q6K;

const SCALES_AT: usize = 16;
const QUANTS_AT: usize = 144;

impl GroupKernel for Q6K {
    const GROUP_BLOCK_BYTES: usize = 8 * 210;
    type Token<'a> = &'a [BlockQ8K];

    fn token(y: &[BlockQ8K]) -> &[BlockQ8K] {
        y
    }

    #[inline(always)]
    unsafe fn dots<const T: usize>(group: &[u8], toks: &[&[BlockQ8K]; T]) -> [__m256; T] {
        // SAFETY: the caller's contract is this function's.
        unsafe { dots::<T>(group, toks) }
    }
}

// `sb` indexes every token's blocks and the group's.
#[allow(clippy::needless_range_loop)]
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dots<const T: usize>(group: &[u8], toks: &[&[BlockQ8K]; T]) -> [__m256; T] {
    let nsb = toks[0].len();
    assert!(group.len() >= nsb * Q6K::GROUP_BLOCK_BYTES);
    let m4 = _mm256_set1_epi8(0x0f);
    let m30 = _mm256_set1_epi8(0x30);
    // Byte k of each lane into the high byte of both words (then shifted down with its sign):
    // a signed scale as (s, s); bytes k and k + 1: a pair of scales.
    let scale = [0, 1, 2, 3].map(|k| lane_pattern([-1, k, -1, k]));
    let pair = [0, 2].map(|k| lane_pattern([-1, k, -1, k + 1]));
    let mut sumf = [_mm256_setzero_ps(); T];
    for sb in 0..nsb {
        // SAFETY: `group` holds `nsb` group blocks (checked above).
        let blk = unsafe { group.as_ptr().add(sb * Q6K::GROUP_BLOCK_BYTES) };
        prefetch_ahead(blk, Q6K::GROUP_BLOCK_BYTES);
        // SAFETY: every load below reads inside this group block (1680 bytes from `blk`).
        let ld = |at: usize| unsafe { _mm256_loadu_si256(blk.add(at).cast()) };
        let planes = [0, 1, 2, 3].map(|w| ld(SCALES_AT + 32 * w));
        let scale_of =
            |s: usize| _mm256_srai_epi16::<8>(_mm256_shuffle_epi8(planes[s / 4], scale[s % 4]));
        let mut isum = [_mm256_setzero_si256(); T];
        for h in 0..2 {
            for half in 0..2 {
                // Sub-block of run k: (128h + 32k + 4g) / 16 = 8h + 2k + half.
                let sc: [__m256i; 4] = std::array::from_fn(|k| scale_of(8 * h + 2 * k + half));
                for g in 4 * half..4 * half + 4 {
                    let step = QUANTS_AT + 96 * (8 * h + g);
                    let (a, b, qh) = (ld(step), ld(step + 32), ld(step + 64));
                    let q = [
                        _mm256_or_si256(
                            _mm256_and_si256(a, m4),
                            _mm256_and_si256(_mm256_slli_epi16::<4>(qh), m30),
                        ),
                        _mm256_or_si256(
                            _mm256_and_si256(b, m4),
                            _mm256_and_si256(_mm256_slli_epi16::<2>(qh), m30),
                        ),
                        _mm256_or_si256(
                            _mm256_and_si256(_mm256_srli_epi16::<4>(a), m4),
                            _mm256_and_si256(qh, m30),
                        ),
                        _mm256_or_si256(
                            _mm256_and_si256(_mm256_srli_epi16::<4>(b), m4),
                            _mm256_and_si256(_mm256_srli_epi16::<2>(qh), m30),
                        ),
                    ];
                    for t in 0..T {
                        let yq = toks[t][sb].qs.as_ptr();
                        for k in 0..4 {
                            // SAFETY: `128h + 32k + 4g + 4 <= 256` bytes of the token's quants.
                            let y = unsafe {
                                yq.add(128 * h + 32 * k + 4 * g)
                                    .cast::<i32>()
                                    .read_unaligned()
                            };
                            let p = _mm256_maddubs_epi16(q[k], _mm256_set1_epi32(y));
                            isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(p, sc[k]));
                        }
                    }
                }
            }
        }
        // 32 · Σ scale · bsum per row: scales as signed word pairs against the bsum pairs.
        let sp: [__m256i; 8] = std::array::from_fn(|j| {
            _mm256_srai_epi16::<8>(_mm256_shuffle_epi8(planes[j / 2], pair[j % 2]))
        });
        // SAFETY: 16 readable bytes at `blk`.
        let dx = unsafe { _mm256_cvtph_ps(_mm_loadu_si128(blk.cast())) };
        for t in 0..T {
            let y = &toks[t][sb];
            // SAFETY: 32 readable bytes (sixteen i16 bsums); unaligned load.
            let bs = unsafe { _mm256_loadu_si256(y.bsums.as_ptr().cast()) };
            let mut bias = _mm256_setzero_si256();
            for (j, s) in sp.iter().enumerate() {
                let b = _mm256_permutevar8x32_epi32(bs, _mm256_set1_epi32(j as i32));
                bias = _mm256_add_epi32(bias, _mm256_madd_epi16(*s, b));
            }
            let isum = _mm256_sub_epi32(isum[t], _mm256_slli_epi32::<5>(bias));
            let d = _mm256_mul_ps(dx, _mm256_set1_ps(y.d()));
            sumf[t] = _mm256_add_ps(sumf[t], _mm256_mul_ps(d, _mm256_cvtepi32_ps(isum)));
        }
    }
    sumf
}
