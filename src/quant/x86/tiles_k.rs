//! AVX-512 VNNI tile kernels for Q6_K against Q8_K activations (Q4_K has its own, with tokens
//! across the lanes: `tiles_q4k.rs`): 4 weight rows × 4
//! tokens per tile. Per super-block, every weight chunk of 64 quants is decoded once and meets
//! each token's chunk in `vpmaddubsw` (exact i16 pair sums) and `vpdpwssd` (times the group
//! scales, into i32 lanes); the sixteen products' lanes are then summed by one transposing
//! reduction, and the f32 step — `d·isum − dmin·summs` for Q4_K, `(d·dy)·isum` for Q6_K, added
//! to the running sum — runs on all sixteen at once with the scalar reference's operations in
//! its order. The integer sums are exact, so results are the bits of `vec_dot`. Rows and tokens
//! left over from whole tiles go through `vec_dot`.

use std::arch::x86_64::*;
use std::ops::Range;

use super::common::*;
use crate::quant::block::as_blocks;
use crate::quant::gemm::PackedActs;
use crate::quant::q6_k::BlockQ6K;
use crate::quant::q8_k::BlockQ8K;

/// Rows and tokens per tile.
const T: usize = 4;

/// One K-quant format's tile arithmetic.
pub(super) trait KTile {
    type W: crate::quant::block::Block;
    /// What a weight super-block's scalar fields unpack to, once per row tile rather than
    /// once per token tile.
    type Prep: Copy + Default;
    /// Unpacks the scalar fields of one super-block.
    ///
    /// # Safety
    /// The CPU must support F16C.
    unsafe fn prepare(w: &Self::W) -> Self::Prep;
    /// Sixteen products of one super-block: lane `4t + r` of the result is the f32 term the
    /// scalar reference adds for row `r` and token `t`, combined with `sumf` in its order.
    ///
    /// # Safety
    /// The CPU must support AVX-512 F/BW/VL and VNNI.
    unsafe fn step(
        w: &[&[Self::W]; T],
        prep: &[Self::Prep; T],
        y: &[&[BlockQ8K]; T],
        sb: usize,
        sumf: __m512,
    ) -> __m512;
}

pub(super) struct Q6K;

/// The tile-kernel entry for K-quant format `K` (see `quant::gemm::gemm` for the contract);
/// `dot` is the single-row kernel that handles what is left over from whole tiles.
///
/// # Safety
/// The CPU must support AVX-512 F/BW/VL, VNNI, AVX2, FMA and F16C.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) unsafe fn gemm<K: KTile>(
    dot: fn(&[u8], &[u8]) -> f32,
    w: &[u8],
    rows: usize,
    acts: &PackedActs,
    pairs: Range<usize>,
    out: &mut [f32],
    t_stride: usize,
    r_stride: usize,
) {
    let row_bytes = w.len() / rows;
    let act_bytes = acts.raw_stride;
    let t_begin = 2 * pairs.start;
    let t_end = (2 * pairs.end).min(acts.n_tokens);
    let w_row = |r: usize| &w[r * row_bytes..][..row_bytes];
    let a_row = |t: usize| &acts.raw[t * act_bytes..][..act_bytes];
    let full_r = rows / T * T;
    let full_t = t_begin + (t_end - t_begin) / T * T;
    let mut prep = vec![[K::Prep::default(); T]; acts.n_blocks];
    for r0 in (0..full_r).step_by(T) {
        // (Plain loops throughout: closures and `array::map` in these kernels were not inlined.)
        let mut wr: [&[K::W]; T] = [&[]; T];
        for (i, x) in wr.iter_mut().enumerate() {
            *x = as_blocks(w_row(r0 + i));
        }
        for (sb, p) in prep.iter_mut().enumerate() {
            for (r, p) in p.iter_mut().enumerate() {
                // SAFETY: the caller guarantees the CPU features.
                *p = unsafe { K::prepare(&wr[r][sb]) };
            }
        }
        for t0 in (t_begin..full_t).step_by(T) {
            let mut ya: [&[BlockQ8K]; T] = [&[]; T];
            for (i, y) in ya.iter_mut().enumerate() {
                *y = as_blocks(a_row(t0 + i));
            }
            let mut sumf = _mm512_setzero_ps();
            for (sb, p) in prep.iter().enumerate() {
                // SAFETY: the caller guarantees the CPU features.
                sumf = unsafe { K::step(&wr, p, &ya, sb, sumf) };
            }
            let mut v = [0f32; 16];
            // SAFETY: 16 writable floats.
            unsafe { _mm512_storeu_ps(v.as_mut_ptr(), sumf) };
            for t in 0..T {
                for r in 0..T {
                    out[(t0 + t - t_begin) * t_stride + (r0 + r) * r_stride] = v[4 * t + r];
                }
            }
        }
    }
    // Leftovers: the last tokens against the tiled rows, then the last rows against all.
    for t in full_t..t_end {
        for r in 0..full_r {
            out[(t - t_begin) * t_stride + r * r_stride] = dot(w_row(r), a_row(t));
        }
    }
    for r in full_r..rows {
        for t in t_begin..t_end {
            out[(t - t_begin) * t_stride + r * r_stride] = dot(w_row(r), a_row(t));
        }
    }
}

/// `acc + (pairs of i16 products of a and b)` as one `vpdpwssd`. The intrinsic is split by
/// LLVM into `vpmaddwd` + `vpaddd` under generic tuning (it assumes the fused instruction is
/// slow, which is not the case on the CPUs with AVX-512 VNNI); the split costs a vector ALU
/// slot per product in the hottest loop here.
#[inline]
#[target_feature(enable = "avx512f,avx512vnni")]
unsafe fn dpwssd(acc: __m512i, a: __m512i, b: __m512i) -> __m512i {
    let mut acc = acc;
    // SAFETY: a register-only instruction; the caller guarantees AVX-512 VNNI.
    unsafe {
        std::arch::asm!(
            "vpdpwssd {acc}, {a}, {b}",
            acc = inout(zmm_reg) acc,
            a = in(zmm_reg) a,
            b = in(zmm_reg) b,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    acc
}

/// Sums the i32 lanes of each of sixteen vectors: lane `i` of the result is the sum of `v[i]`.
#[inline(always)]
unsafe fn reduce16(v: [__m512i; 16]) -> __m512i {
    // SAFETY: the caller guarantees AVX-512F.
    unsafe {
        // Pairs: per 128-bit lane [a0+a2, b0+b2, a1+a3, b1+b3].
        // (Plain loops: closures would not inherit the caller's target features.)
        let mut c = [_mm512_setzero_si512(); 8];
        for i in 0..8 {
            let (a, b) = (v[2 * i], v[2 * i + 1]);
            c[i] = _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
        }
        // Quads: per 128-bit lane the four vectors' lane sums, in order.
        let mut e = [_mm512_setzero_si512(); 4];
        for i in 0..4 {
            let (a, b) = (c[2 * i], c[2 * i + 1]);
            e[i] = _mm512_add_epi32(_mm512_unpacklo_epi64(a, b), _mm512_unpackhi_epi64(a, b));
        }
        // Across the four 128-bit lanes.
        let g01 = _mm512_add_epi32(
            _mm512_shuffle_i32x4::<0x88>(e[0], e[1]),
            _mm512_shuffle_i32x4::<0xDD>(e[0], e[1]),
        );
        let g23 = _mm512_add_epi32(
            _mm512_shuffle_i32x4::<0x88>(e[2], e[3]),
            _mm512_shuffle_i32x4::<0xDD>(e[2], e[3]),
        );
        _mm512_add_epi32(
            _mm512_shuffle_i32x4::<0x88>(g01, g23),
            _mm512_shuffle_i32x4::<0xDD>(g01, g23),
        )
    }
}

/// 64 bytes from the start of `s`.
#[inline(always)]
unsafe fn ld64i(s: &[i8]) -> __m512i {
    assert!(s.len() >= 64);
    // SAFETY: at least 64 readable bytes; the caller guarantees AVX-512F.
    unsafe { _mm512_loadu_si512(s.as_ptr().cast()) }
}

/// Lane `4t + r` = `per_row[r]`.
#[inline(always)]
unsafe fn by_row(per_row: [f32; T]) -> __m512 {
    // SAFETY: the caller guarantees AVX-512F.
    unsafe { _mm512_broadcast_f32x4(_mm_loadu_ps(per_row.as_ptr())) }
}

/// Lane `4t + r` = `per_token[t]`.
#[inline(always)]
unsafe fn by_token(per_token: [f32; T]) -> __m512 {
    // SAFETY: the caller guarantees AVX-512F.
    unsafe {
        let idx = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
        _mm512_permutexvar_ps(
            idx,
            _mm512_castps128_ps512(_mm_loadu_ps(per_token.as_ptr())),
        )
    }
}

/// A Q6_K super-block's sixteen scales as i16 and its f32 scale.
#[derive(Clone, Copy, Default)]
pub(super) struct Q6KPrep {
    sc: [i16; 16],
    d: f32,
}

impl KTile for Q6K {
    type W = BlockQ6K;
    type Prep = Q6KPrep;

    #[inline(always)]
    unsafe fn prepare(x: &BlockQ6K) -> Q6KPrep {
        let mut p = Q6KPrep::default();
        for (d, &v) in p.sc.iter_mut().zip(&x.scales) {
            *d = v as i16;
        }
        // SAFETY: the caller guarantees F16C.
        unsafe { p.d = f16(x.d) };
        p
    }

    #[inline(always)]
    unsafe fn step(
        wr: &[&[BlockQ6K]; T],
        prep: &[Q6KPrep; T],
        ya: &[&[BlockQ8K]; T],
        sb: usize,
        sumf: __m512,
    ) -> __m512 {
        let mut w = [&wr[0][sb]; T];
        let mut y = [&ya[0][sb]; T];
        for i in 1..T {
            (w[i], y[i]) = (&wr[i][sb], &ya[i][sb]);
        }
        // SAFETY (whole body): as in `Q4K::step`.
        unsafe {
            let m4 = _mm256_set1_epi8(0x0f);
            let off = _mm512_set1_epi8(32);
            let mut sc16 = [_mm512_setzero_si512(); T];
            for r in 0..T {
                sc16[r] = _mm512_castsi256_si512(_mm256_loadu_si256(prep[r].sc.as_ptr().cast()));
            }
            let mut acc = [_mm512_setzero_si512(); 16];
            for h in 0..2 {
                for half in 0..2 {
                    let c = 2 * h + half;
                    let idx = _mm512_set_epi16(
                        4 * c as i16 + 3,
                        4 * c as i16 + 3,
                        4 * c as i16 + 3,
                        4 * c as i16 + 3,
                        4 * c as i16 + 3,
                        4 * c as i16 + 3,
                        4 * c as i16 + 3,
                        4 * c as i16 + 3,
                        4 * c as i16 + 2,
                        4 * c as i16 + 2,
                        4 * c as i16 + 2,
                        4 * c as i16 + 2,
                        4 * c as i16 + 2,
                        4 * c as i16 + 2,
                        4 * c as i16 + 2,
                        4 * c as i16 + 2,
                        4 * c as i16 + 1,
                        4 * c as i16 + 1,
                        4 * c as i16 + 1,
                        4 * c as i16 + 1,
                        4 * c as i16 + 1,
                        4 * c as i16 + 1,
                        4 * c as i16 + 1,
                        4 * c as i16 + 1,
                        4 * c as i16,
                        4 * c as i16,
                        4 * c as i16,
                        4 * c as i16,
                        4 * c as i16,
                        4 * c as i16,
                        4 * c as i16,
                        4 * c as i16,
                    );
                    let mut q = [_mm512_setzero_si512(); T];
                    let mut s = [_mm512_setzero_si512(); T];
                    for r in 0..T {
                        let x = w[r];
                        let qa = ld32(&x.ql[64 * h..]);
                        let qb = ld32(&x.ql[64 * h + 32..]);
                        let qh = ld32(&x.qh[32 * h..]);
                        let (lo, hi) = if half == 0 {
                            (
                                _mm256_or_si256(_mm256_and_si256(qa, m4), high2(qh, 0)),
                                _mm256_or_si256(_mm256_and_si256(qb, m4), high2(qh, 1)),
                            )
                        } else {
                            (
                                _mm256_or_si256(
                                    _mm256_and_si256(_mm256_srli_epi16::<4>(qa), m4),
                                    high2(qh, 2),
                                ),
                                _mm256_or_si256(
                                    _mm256_and_si256(_mm256_srli_epi16::<4>(qb), m4),
                                    high2(qh, 3),
                                ),
                            )
                        };
                        q[r] = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi);
                        s[r] = _mm512_permutexvar_epi16(idx, sc16[r]);
                    }
                    for t in 0..T {
                        let yv = ld64i(&y[t].qs[64 * c..]);
                        // (q − 32)·y pair sums, exact in i16: |q − 32| ≤ 32.
                        let y32 = _mm512_maddubs_epi16(off, yv);
                        for r in 0..T {
                            let p = _mm512_sub_epi16(_mm512_maddubs_epi16(q[r], yv), y32);
                            acc[4 * t + r] = dpwssd(acc[4 * t + r], p, s[r]);
                        }
                    }
                }
            }
            let isum = reduce16(acc);
            let mut dx = [0f32; T];
            for r in 0..T {
                dx[r] = prep[r].d;
            }
            let mut ydv = [0f32; T];
            for t in 0..T {
                ydv[t] = y[t].d();
            }
            let d = _mm512_mul_ps(by_row(dx), by_token(ydv));
            _mm512_add_ps(sumf, _mm512_mul_ps(d, _mm512_cvtepi32_ps(isum)))
        }
    }
}

/// Bit pair `s` of each byte of `qh`, moved to bits 4-5 (the high bits of a Q6_K quant).
#[inline(always)]
unsafe fn high2(qh: __m256i, s: i32) -> __m256i {
    // SAFETY: the caller guarantees AVX2.
    unsafe {
        let shifted = _mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * s));
        _mm256_slli_epi16::<4>(_mm256_and_si256(shifted, _mm256_set1_epi8(3)))
    }
}
