//! AVX-512 VNNI K-quant tiles (Q4_K and Q6_K against Q8_K) with tokens across the lanes: each
//! i32 lane of a vector is one of sixteen tokens, so no horizontal sums are needed. The weight
//! rows of a tile are decoded once into a small buffer (quants as bytes, scales and minimums as
//! i32); then for every four quants a broadcast weight dword meets the sixteen tokens' four
//! activation bytes (repacked by `quant::gemm`) in one `vpdpbusd`. Every sixteen quants the
//! exact partial sums are scaled by the group scale: Q4_K's fit the low i16 of each lane
//! (|Σ q·y| ≤ 16·15·128), so `vpdpwssd` does it, and its minimums' term comes from the tokens'
//! bsum pairs the same way; Q6_K's wider sums take `vpmulld`. Integer sums are exact and the f32
//! step is the scalar reference's, so results are `vec_dot`'s bits.

use std::arch::x86_64::*;
use std::ops::Range;

use super::common::{dpwssd, f16};
use crate::quant::block::as_blocks;
use crate::quant::gemm::{PackedActs, TOKEN_GROUP};
use crate::quant::q4_k::{unpack_scales_mins, BlockQ4K};
use crate::quant::q6_k::BlockQ6K;

/// Weight rows per tile.
const R: usize = 4;

/// One super-block of one weight row, decoded.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
pub(super) struct Decoded {
    /// Quants 0..256 as bytes, in element order.
    q: [u8; 256],
    /// Scale of each group of 32, as i32 (low i16 only).
    sc: [i32; 8],
    /// Minimum of each group of 32, as i32.
    m: [i32; 8],
    d: f32,
    dmin: f32,
}

impl Default for Decoded {
    fn default() -> Self {
        Decoded {
            q: [0; 256],
            sc: [0; 8],
            m: [0; 8],
            d: 0.0,
            dmin: 0.0,
        }
    }
}

/// One K-quant format's pieces for [`gemm`]: how a weight super-block is decoded, and how
/// `R` decoded rows meet one group of sixteen tokens.
pub(super) trait LaneTile {
    type W: crate::quant::block::Block;
    type Decoded: Copy + Default;
    /// Whether `acts` holds the packed arrays this format reads for `groups` token groups.
    fn packed_enough(acts: &PackedActs, groups: usize) -> bool;
    /// # Safety
    /// The CPU must support AVX-512 F/BW/VL, AVX2 and F16C.
    unsafe fn decode(x: &Self::W) -> Self::Decoded;
    /// Per row, the sixteen tokens' results; `dec` holds `R` rows per super-block.
    ///
    /// # Safety
    /// The CPU must support AVX-512 F/BW/VL, VNNI, AVX2 and FMA; `acts` must have passed
    /// [`LaneTile::packed_enough`] for a group count above `g`.
    unsafe fn group(dec: &[Self::Decoded], acts: &PackedActs, g: usize) -> [[f32; TOKEN_GROUP]; R];
}

pub(super) struct Q4K;
pub(super) struct Q6K;

/// The tile-kernel entry for K-quant format `K` (see `quant::gemm::gemm` for the contract);
/// `dot` handles rows left over from whole tiles.
///
/// # Safety
/// The CPU must support AVX-512 F/BW/VL, VNNI, AVX2, FMA and F16C.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) unsafe fn gemm<K: LaneTile>(
    dot: fn(&[u8], &[u8]) -> f32,
    w: &[u8],
    rows: usize,
    acts: &PackedActs,
    pairs: Range<usize>,
    out: &mut [f32],
    t_stride: usize,
    r_stride: usize,
) {
    let nsb = acts.n_blocks;
    let row_bytes = w.len() / rows;
    let t_begin = 2 * pairs.start;
    let t_end = (2 * pairs.end).min(acts.n_tokens);
    let groups = t_end.div_ceil(TOKEN_GROUP);
    assert!(
        K::packed_enough(acts, groups),
        "gemm: activations not packed for {:?}",
        acts.ty
    );
    let full_r = rows / R * R;
    let mut dec = vec![K::Decoded::default(); R * nsb];
    for r0 in (0..full_r).step_by(R) {
        for r in 0..R {
            let blocks = as_blocks::<K::W>(&w[(r0 + r) * row_bytes..][..row_bytes]);
            for (sb, x) in blocks.iter().enumerate() {
                // SAFETY: the caller guarantees the CPU features.
                dec[sb * R + r] = unsafe { K::decode(x) };
            }
        }
        for g in t_begin / TOKEN_GROUP..groups {
            // SAFETY: as above; the packed arrays were checked above.
            let sums = unsafe { K::group(&dec, acts, g) };
            for (r, v) in sums.iter().enumerate() {
                for (i, &x) in v.iter().enumerate() {
                    let t = g * TOKEN_GROUP + i;
                    if t >= t_begin && t < t_end {
                        out[(t - t_begin) * t_stride + (r0 + r) * r_stride] = x;
                    }
                }
            }
        }
    }
    let act_bytes = acts.raw_stride;
    for r in full_r..rows {
        for t in t_begin..t_end {
            out[(t - t_begin) * t_stride + r * r_stride] = dot(
                &w[r * row_bytes..][..row_bytes],
                &acts.raw[t * act_bytes..][..act_bytes],
            );
        }
    }
}

impl LaneTile for Q4K {
    type W = BlockQ4K;
    type Decoded = Decoded;
    fn packed_enough(acts: &PackedActs, groups: usize) -> bool {
        let slots = groups * acts.n_blocks;
        acts.tq.len() >= slots * 256 * TOKEN_GROUP
            && acts.td.len() >= slots * TOKEN_GROUP
            && acts.tps.len() >= slots * 8 * TOKEN_GROUP
    }
    unsafe fn decode(x: &BlockQ4K) -> Decoded {
        // SAFETY: the caller guarantees the CPU features.
        unsafe { decode(x) }
    }
    unsafe fn group(dec: &[Decoded], acts: &PackedActs, g: usize) -> [[f32; TOKEN_GROUP]; R] {
        // SAFETY: the caller guarantees the CPU features and the packed arrays.
        unsafe { group(dec, acts, g) }
    }
}

impl LaneTile for Q6K {
    type W = BlockQ6K;
    type Decoded = Decoded6;
    fn packed_enough(acts: &PackedActs, groups: usize) -> bool {
        let slots = groups * acts.n_blocks;
        acts.tq.len() >= slots * 256 * TOKEN_GROUP
            && acts.td.len() >= slots * TOKEN_GROUP
            && acts.tbs.len() >= slots * 16 * TOKEN_GROUP
    }
    unsafe fn decode(x: &BlockQ6K) -> Decoded6 {
        // SAFETY: the caller guarantees the CPU features.
        unsafe { decode6(x) }
    }
    unsafe fn group(dec: &[Decoded6], acts: &PackedActs, g: usize) -> [[f32; TOKEN_GROUP]; R] {
        // SAFETY: the caller guarantees the CPU features and the packed arrays.
        unsafe { group6(dec, acts, g) }
    }
}

/// Decodes one super-block.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,f16c")]
unsafe fn decode(x: &BlockQ4K) -> Decoded {
    let mut d = Decoded::default();
    let (sc, m) = unpack_scales_mins(&x.scales);
    for g in 0..8 {
        (d.sc[g], d.m[g]) = (sc[g] as i32, m[g] as i32);
    }
    let m4 = _mm256_set1_epi8(0x0f);
    for j in 0..4 {
        // SAFETY: 32 readable bytes of `qs`, 64 writable bytes of `q`.
        unsafe {
            let v = _mm256_loadu_si256(x.qs[32 * j..].as_ptr().cast());
            let lo = _mm256_and_si256(v, m4);
            let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(v), m4);
            _mm256_storeu_si256(d.q[64 * j..].as_mut_ptr().cast(), lo);
            _mm256_storeu_si256(d.q[64 * j + 32..].as_mut_ptr().cast(), hi);
        }
    }
    (d.d, d.dmin) = (f16(x.d), f16(x.dmin));
    d
}

/// The `R` decoded rows against token group `g`: per row, sixteen tokens' results.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma")]
unsafe fn group(dec: &[Decoded], acts: &PackedActs, g: usize) -> [[f32; TOKEN_GROUP]; R] {
    let nsb = acts.n_blocks;
    let mut sumf = [_mm512_setzero_ps(); R];
    // SAFETY (whole body): every pointer stays within `acts.tq` (asserted by the caller),
    // `acts.td`/`acts.tps` (sized alike) or `dec` (R entries per super-block).
    unsafe {
        for sb in 0..nsb {
            let slot = g * nsb + sb;
            let yq = acts.tq.as_ptr().add(slot * 256 * TOKEN_GROUP);
            let ps = acts.tps.as_ptr().add(slot * 8 * TOKEN_GROUP);
            let w: [&Decoded; R] = [
                &dec[sb * R],
                &dec[sb * R + 1],
                &dec[sb * R + 2],
                &dec[sb * R + 3],
            ];
            let mut isum = [_mm512_setzero_si512(); R];
            let mut summs = [_mm512_setzero_si512(); R];
            for grp in 0..8 {
                for half in 0..2 {
                    let e0 = 32 * grp + 16 * half;
                    let mut part = [_mm512_setzero_si512(); R];
                    for k in 0..4 {
                        let y = _mm512_loadu_si512(yq.add((e0 + 4 * k) * TOKEN_GROUP).cast());
                        for r in 0..R {
                            let wq = _mm512_set1_epi32(i32::from_le_bytes(
                                *w[r].q.as_ptr().add(e0 + 4 * k).cast::<[u8; 4]>(),
                            ));
                            part[r] = _mm512_dpbusd_epi32(part[r], wq, y);
                        }
                    }
                    for r in 0..R {
                        isum[r] = dpwssd(isum[r], part[r], _mm512_set1_epi32(w[r].sc[grp]));
                    }
                }
                let p = _mm512_loadu_si512(ps.add(grp * TOKEN_GROUP).cast());
                for r in 0..R {
                    summs[r] = dpwssd(summs[r], p, _mm512_set1_epi32(w[r].m[grp]));
                }
            }
            let yd = _mm512_loadu_ps(acts.td.as_ptr().add(slot * TOKEN_GROUP));
            for r in 0..R {
                let d = _mm512_mul_ps(_mm512_set1_ps(w[r].d), yd);
                let dmin = _mm512_mul_ps(_mm512_set1_ps(w[r].dmin), yd);
                let term = _mm512_sub_ps(
                    _mm512_mul_ps(d, _mm512_cvtepi32_ps(isum[r])),
                    _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(summs[r])),
                );
                sumf[r] = _mm512_add_ps(sumf[r], term);
            }
        }
        let mut out = [[0f32; TOKEN_GROUP]; R];
        for r in 0..R {
            _mm512_storeu_ps(out[r].as_mut_ptr(), sumf[r]);
        }
        out
    }
}

/// One Q6_K super-block of one weight row, decoded.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
pub(super) struct Decoded6 {
    /// Quants 0..256 as unsigned bytes (0..64, the −32 offset not applied), element order.
    q: [u8; 256],
    /// Scale of each group of 16, as i32.
    sc: [i32; 16],
    d: f32,
}

impl Default for Decoded6 {
    fn default() -> Self {
        Decoded6 {
            q: [0; 256],
            sc: [0; 16],
            d: 0.0,
        }
    }
}

/// Decodes one Q6_K super-block (ggml's layout: per half, `ql` low then high nibbles of two
/// 32-byte runs, `qh` bit pairs 0-1, 2-3, 4-5, 6-7 for the four runs of 32).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,f16c")]
unsafe fn decode6(x: &BlockQ6K) -> Decoded6 {
    let mut d = Decoded6::default();
    for (s, &v) in d.sc.iter_mut().zip(&x.scales) {
        *s = v as i32;
    }
    let m4 = _mm256_set1_epi8(0x0f);
    let m2 = _mm256_set1_epi8(3);
    for h in 0..2 {
        // SAFETY: 32 readable bytes at each load, 32 writable bytes at each store.
        unsafe {
            let qa = _mm256_loadu_si256(x.ql[64 * h..].as_ptr().cast());
            let qb = _mm256_loadu_si256(x.ql[64 * h + 32..].as_ptr().cast());
            let qh = _mm256_loadu_si256(x.qh[32 * h..].as_ptr().cast());
            let hi = |s: i32| {
                let v = _mm256_srl_epi16(qh, _mm_cvtsi32_si128(s));
                _mm256_slli_epi16::<4>(_mm256_and_si256(v, m2))
            };
            let runs = [
                _mm256_or_si256(_mm256_and_si256(qa, m4), hi(0)),
                _mm256_or_si256(_mm256_and_si256(qb, m4), hi(2)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(qa), m4), hi(4)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(qb), m4), hi(6)),
            ];
            for (i, run) in runs.into_iter().enumerate() {
                _mm256_storeu_si256(d.q[128 * h + 32 * i..].as_mut_ptr().cast(), run);
            }
        }
    }
    d.d = f16(x.d);
    d
}

/// The `R` decoded Q6_K rows against token group `g`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma")]
unsafe fn group6(dec: &[Decoded6], acts: &PackedActs, g: usize) -> [[f32; TOKEN_GROUP]; R] {
    let nsb = acts.n_blocks;
    let mut sumf = [_mm512_setzero_ps(); R];
    // SAFETY (whole body): as in `group`.
    unsafe {
        for sb in 0..nsb {
            let slot = g * nsb + sb;
            let yq = acts.tq.as_ptr().add(slot * 256 * TOKEN_GROUP);
            let bs = acts.tbs.as_ptr().add(slot * 16 * TOKEN_GROUP);
            let w: [&Decoded6; R] = [
                &dec[sb * R],
                &dec[sb * R + 1],
                &dec[sb * R + 2],
                &dec[sb * R + 3],
            ];
            let mut isum = [_mm512_setzero_si512(); R];
            for grp in 0..16 {
                let e0 = 16 * grp;
                // 32 · Σ y over the group, per token: the −32 offset of every quant.
                let off = _mm512_loadu_si512(bs.add(grp * TOKEN_GROUP).cast());
                let mut part = [_mm512_setzero_si512(); R];
                for k in 0..4 {
                    let y = _mm512_loadu_si512(yq.add((e0 + 4 * k) * TOKEN_GROUP).cast());
                    for r in 0..R {
                        let wq = _mm512_set1_epi32(i32::from_le_bytes(
                            *w[r].q.as_ptr().add(e0 + 4 * k).cast::<[u8; 4]>(),
                        ));
                        part[r] = _mm512_dpbusd_epi32(part[r], wq, y);
                    }
                }
                for r in 0..R {
                    let centred = _mm512_sub_epi32(part[r], off);
                    let scaled = _mm512_mullo_epi32(centred, _mm512_set1_epi32(w[r].sc[grp]));
                    isum[r] = _mm512_add_epi32(isum[r], scaled);
                }
            }
            let yd = _mm512_loadu_ps(acts.td.as_ptr().add(slot * TOKEN_GROUP));
            for r in 0..R {
                let d = _mm512_mul_ps(_mm512_set1_ps(w[r].d), yd);
                sumf[r] = _mm512_add_ps(sumf[r], _mm512_mul_ps(d, _mm512_cvtepi32_ps(isum[r])));
            }
        }
        let mut out = [[0f32; TOKEN_GROUP]; R];
        for r in 0..R {
            _mm512_storeu_ps(out[r].as_mut_ptr(), sumf[r]);
        }
        out
    }
}
