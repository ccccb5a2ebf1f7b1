//! NEON tiles for the K-quants Q4_K, Q5_K and Q6_K against Q8_K activations (the rows as they
//! are, `PackedActs::raw`): the `gemm` entries of the `neon` and `dotprod` tables. Each group of
//! [`R`] weight rows is decoded once per call ([`Decoded`]: per super-block the 256 quants as the
//! signed bytes `vec_dot` multiplies, the group scales, minimums and f32 scales) and then meets
//! the range's tokens [`T`] at a time, so each activation load serves `R` rows and each decoded
//! super-block `T` tokens.
//!
//! Per (row, token) and super-block the integer sum goes through [`Dot4`] group by group and is
//! exact, however it is grouped; it is combined in f32 with `k_quants.rs`'s operations in its
//! order, so results are the bits of the variant's `vec_dot`. This file also owns the formats'
//! decoding ([`KFormat`]) and the super-block step ([`superblock`]) that `matvec_k.rs` drives
//! with undecoded rows.

use std::arch::aarch64::*;
use std::ops::Range;

use super::{f16, ld_i8, ld_u8, s8, Dot4};
use crate::quant::block::{as_blocks, Block};
use crate::quant::gemm::PackedActs;
use crate::quant::q4_k::{scales_mins_words, BlockQ4K};
use crate::quant::q5_k::BlockQ5K;
use crate::quant::q6_k::BlockQ6K;
use crate::quant::q8_k::BlockQ8K;

/// Weight rows per tile (eight i32 accumulators for [`T`] = 2, beside two tokens' 64 quants).
const R: usize = 4;
/// Tokens per tile.
const T: usize = 2;

/// One weight row's super-block state for the tile.
#[derive(Clone, Copy)]
pub(super) struct Prep {
    /// Per chunk of 64 quants, its group scales in i32 lanes: Q4_K/Q5_K the two groups of 32
    /// (lanes 0 and 1), Q6_K the four groups of 16.
    sc: [int32x4_t; 4],
    /// Q4_K/Q5_K: the eight minimums (zero for Q6_K).
    mins: int16x8_t,
    d: f32,
    dmin: f32,
}

/// A K-quant weight format as the tile sees it.
pub(super) trait KFormat {
    type W: Block;
    /// Groups of 32 with a minimum each, `sumf += d·Σ − dmin·Σmins` (Q4_K, Q5_K), rather than
    /// groups of 16 with the offset already in the quants, `sumf += d·Σ` (Q6_K).
    const HAS_MIN: bool;
    /// Scales and minimums of `x`.
    fn prepare(x: &Self::W) -> Prep;
    /// Quants `64j..64j + 64` of `x` as four vectors of the signed bytes `vec_dot` multiplies.
    fn quants(x: &Self::W, j: usize) -> [int8x16_t; 4];
}

pub(super) struct Q4K;
pub(super) struct Q5K;
pub(super) struct Q6K;

/// Q4_K/Q5_K scales and minimums.
#[inline(always)]
fn prepare45(d: [u8; 2], dmin: [u8; 2], scales: &[u8; 12]) -> Prep {
    let (sc, m) = scales_mins_words(scales);
    // SAFETY: NEON is part of every aarch64 CPU.
    unsafe {
        let sc = vmovl_u8(vcreate_u8(sc));
        let (lo, hi) = (
            vreinterpretq_s32_u32(vmovl_u16(vget_low_u16(sc))),
            vreinterpretq_s32_u32(vmovl_high_u16(sc)),
        );
        Prep {
            // Scales 2j and 2j + 1 to lanes 0 and 1 of chunk j.
            sc: [lo, vextq_s32::<2>(lo, lo), hi, vextq_s32::<2>(hi, hi)],
            mins: vreinterpretq_s16_u16(vmovl_u8(vcreate_u8(m))),
            d: f16(d),
            dmin: f16(dmin),
        }
    }
}

/// The low nibbles of `qs[32j..32j + 32]` (elements `64j..64j + 32`), then the high ones.
#[inline(always)]
fn nibbles(qs: &[u8; 128], j: usize) -> [uint8x16_t; 4] {
    let q = &qs[32 * j..32 * j + 32];
    // SAFETY: NEON is part of every aarch64 CPU.
    unsafe {
        let (a, b) = (ld_u8(q), ld_u8(&q[16..]));
        let m4 = vdupq_n_u8(0x0f);
        [
            vandq_u8(a, m4),
            vandq_u8(b, m4),
            vshrq_n_u8::<4>(a),
            vshrq_n_u8::<4>(b),
        ]
    }
}

impl KFormat for Q4K {
    type W = BlockQ4K;
    const HAS_MIN: bool = true;
    #[inline(always)]
    fn prepare(x: &BlockQ4K) -> Prep {
        prepare45(x.d, x.dmin, &x.scales)
    }
    #[inline(always)]
    fn quants(x: &BlockQ4K, j: usize) -> [int8x16_t; 4] {
        // SAFETY: NEON is part of every aarch64 CPU.
        nibbles(&x.qs, j).map(|v| unsafe { s8(v) })
    }
}

impl KFormat for Q5K {
    type W = BlockQ5K;
    const HAS_MIN: bool = true;
    #[inline(always)]
    fn prepare(x: &BlockQ5K) -> Prep {
        prepare45(x.d, x.dmin, &x.scales)
    }
    /// Fifth bits: bit `2j` of `qh` for the low nibbles, bit `2j + 1` for the high ones.
    #[inline(always)]
    fn quants(x: &BlockQ5K, j: usize) -> [int8x16_t; 4] {
        let n = nibbles(&x.qs, j);
        // SAFETY: NEON is part of every aarch64 CPU.
        unsafe {
            let qh = [ld_u8(&x.qh), ld_u8(&x.qh[16..])];
            let five = vdupq_n_u8(0x10);
            let (blo, bhi) = (vdupq_n_u8(1 << (2 * j)), vdupq_n_u8(2 << (2 * j)));
            let add = |v: uint8x16_t, h: uint8x16_t, bit: uint8x16_t| {
                s8(vorrq_u8(v, vandq_u8(vtstq_u8(h, bit), five)))
            };
            [
                add(n[0], qh[0], blo),
                add(n[1], qh[1], blo),
                add(n[2], qh[0], bhi),
                add(n[3], qh[1], bhi),
            ]
        }
    }
}

impl KFormat for Q6K {
    type W = BlockQ6K;
    const HAS_MIN: bool = false;
    #[inline(always)]
    fn prepare(x: &BlockQ6K) -> Prep {
        // SAFETY: NEON is part of every aarch64 CPU; `scales` is 16 readable bytes.
        unsafe {
            let sc = vld1q_s8(x.scales.as_ptr());
            let (lo, hi) = (vmovl_s8(vget_low_s8(sc)), vmovl_high_s8(sc));
            Prep {
                sc: [
                    vmovl_s16(vget_low_s16(lo)),
                    vmovl_high_s16(lo),
                    vmovl_s16(vget_low_s16(hi)),
                    vmovl_high_s16(hi),
                ],
                mins: vdupq_n_s16(0),
                d: f16(x.d),
                dmin: 0.0,
            }
        }
    }
    /// Elements `128h + 32k + l` (`l` < 32) are, for `k` = 0..4, the low nibbles of `ql[64h + l]`,
    /// of `ql[64h + 32 + l]`, then their high nibbles, with bit pair `k` of `qh[32h + l]` above
    /// them, minus 32. Chunk `j = 2h + s` holds `k = 2s` and `2s + 1`.
    #[inline(always)]
    fn quants(x: &BlockQ6K, j: usize) -> [int8x16_t; 4] {
        let (h, s) = (j / 2, j % 2);
        let (ql, qh) = (&x.ql[64 * h..64 * h + 64], &x.qh[32 * h..32 * h + 32]);
        // SAFETY: NEON is part of every aarch64 CPU.
        unsafe {
            let qa = [ld_u8(ql), ld_u8(&ql[16..])];
            let qb = [ld_u8(&ql[32..]), ld_u8(&ql[48..])];
            let qh = [ld_u8(qh), ld_u8(&qh[16..])];
            let (m4, m3) = (vdupq_n_u8(0x0f), vdupq_n_u8(0x30));
            let offset = vdupq_n_s8(32);
            let join = |low: uint8x16_t, high: uint8x16_t| {
                vsubq_s8(s8(vorrq_u8(low, vandq_u8(high, m3))), offset)
            };
            if s == 0 {
                [
                    join(vandq_u8(qa[0], m4), vshlq_n_u8::<4>(qh[0])),
                    join(vandq_u8(qa[1], m4), vshlq_n_u8::<4>(qh[1])),
                    join(vandq_u8(qb[0], m4), vshlq_n_u8::<2>(qh[0])),
                    join(vandq_u8(qb[1], m4), vshlq_n_u8::<2>(qh[1])),
                ]
            } else {
                [
                    join(vshrq_n_u8::<4>(qa[0]), qh[0]),
                    join(vshrq_n_u8::<4>(qa[1]), qh[1]),
                    join(vshrq_n_u8::<4>(qb[0]), vshrq_n_u8::<2>(qh[0])),
                    join(vshrq_n_u8::<4>(qb[1]), vshrq_n_u8::<2>(qh[1])),
                ]
            }
        }
    }
}

/// Up to [`R`] weight rows decoded once for a whole batch, row after row.
struct Decoded {
    nsb: usize,
    /// Per super-block, its four chunks of 64 quants.
    quants: Vec<[[int8x16_t; 4]; 4]>,
    preps: Vec<Prep>,
    filled: usize,
}

impl Decoded {
    fn new(nsb: usize) -> Self {
        Decoded {
            nsb,
            quants: Vec::with_capacity(R * nsb),
            preps: Vec::with_capacity(R * nsb),
            filled: 0,
        }
    }

    /// Decodes the whole rows in `w` (at most [`R`]).
    fn fill<F: KFormat>(&mut self, w: &[F::W]) {
        assert!(w.len() <= R * self.nsb && w.len().is_multiple_of(self.nsb));
        self.quants.clear();
        self.preps.clear();
        for x in w {
            self.preps.push(F::prepare(x));
            self.quants.push(std::array::from_fn(|j| F::quants(x, j)));
        }
        self.filled = w.len() / self.nsb;
    }

    /// `vec_dot` of rows `first..first + RR` with the `TT` tokens `y` (Q8_K rows of as many
    /// super-blocks), handed to `put(r, t, value)`.
    ///
    /// # Safety
    /// The CPU must have `D`'s features.
    #[inline(always)]
    unsafe fn tile<F: KFormat, D: Dot4, const RR: usize, const TT: usize>(
        &self,
        first: usize,
        y: [&[BlockQ8K]; TT],
        put: &mut impl FnMut(usize, usize, f32),
    ) {
        let nsb = self.nsb;
        assert!(first + RR <= self.filled);
        let y = y.map(|y| &y[..nsb]);
        let mut sumf = [[0f32; TT]; RR];
        for sb in 0..nsb {
            let at: [usize; RR] = std::array::from_fn(|r| (first + r) * nsb + sb);
            let quants = at.map(|i| &self.quants[i]);
            let preps = at.map(|i| &self.preps[i]);
            let ys = y.map(|y| &y[sb]);
            // SAFETY: the caller guarantees `D`'s features.
            unsafe { superblock::<F, D, RR, TT>(|r, j| quants[r][j], preps, ys, &mut sumf) };
        }
        for (r, row) in sumf.iter().enumerate() {
            for (t, &v) in row.iter().enumerate() {
                put(r, t, v);
            }
        }
    }
}

/// `acc +` the scaled integer dot of one chunk of 64 quants `q` with activation quants `y`,
/// given the chunk's scales `sc`: groups of 32 (two [`Dot4`] steps, one scale) or of 16 (one
/// step, one scale).
///
/// # Safety
/// The CPU must have `D`'s features.
#[inline(always)]
unsafe fn chunk_dot<F: KFormat, D: Dot4>(
    acc: int32x4_t,
    q: &[int8x16_t; 4],
    y: &[int8x16_t; 4],
    sc: int32x4_t,
) -> int32x4_t {
    // SAFETY: the caller guarantees `D`'s features (NEON is part of every aarch64 CPU).
    unsafe {
        let zero = vdupq_n_s32(0);
        if F::HAS_MIN {
            let p0 = D::dot4(D::dot4(zero, q[0], y[0]), q[1], y[1]);
            let p1 = D::dot4(D::dot4(zero, q[2], y[2]), q[3], y[3]);
            vmlaq_laneq_s32::<1>(vmlaq_laneq_s32::<0>(acc, p0, sc), p1, sc)
        } else {
            let acc = vmlaq_laneq_s32::<0>(acc, D::dot4(zero, q[0], y[0]), sc);
            let acc = vmlaq_laneq_s32::<1>(acc, D::dot4(zero, q[1], y[1]), sc);
            let acc = vmlaq_laneq_s32::<2>(acc, D::dot4(zero, q[2], y[2]), sc);
            vmlaq_laneq_s32::<3>(acc, D::dot4(zero, q[3], y[3]), sc)
        }
    }
}

/// Adds one super-block of `RR` weight rows × `TT` tokens to `sumf[r][t]`: `quants(r, j)` gives
/// chunk `j` of row `r`'s quants, `prep[r]` its scales, `y[t]` the token's Q8_K block.
///
/// # Safety
/// The CPU must have `D`'s features.
#[inline(always)]
#[allow(clippy::needless_range_loop)] // tiles index rows and tokens of several arrays at once
pub(super) unsafe fn superblock<F: KFormat, D: Dot4, const RR: usize, const TT: usize>(
    quants: impl Fn(usize, usize) -> [int8x16_t; 4],
    prep: [&Prep; RR],
    y: [&BlockQ8K; TT],
    sumf: &mut [[f32; TT]; RR],
) {
    const { assert!(RR > 0 && TT > 0) };
    // SAFETY (whole body): the caller guarantees `D`'s features (NEON is part of every aarch64
    // CPU).
    unsafe {
        let mut acc = [[vdupq_n_s32(0); TT]; RR];
        for j in 0..4 {
            let mut yv = [[vdupq_n_s8(0); 4]; TT];
            for t in 0..TT {
                let q = &y[t].qs[64 * j..64 * j + 64];
                yv[t] = [ld_i8(q), ld_i8(&q[16..]), ld_i8(&q[32..]), ld_i8(&q[48..])];
            }
            for r in 0..RR {
                let q = quants(r, j);
                let sc = prep[r].sc[j];
                for t in 0..TT {
                    acc[r][t] = chunk_dot::<F, D>(acc[r][t], &q, &yv[t], sc);
                }
            }
        }
        // `k_quants.rs`'s f32 step, per row and token.
        for t in 0..TT {
            let yd = y[t].d();
            let b = y[t].bsums.as_flattened();
            // The bsums of each group of 32 (sums of 32 quants fit in i16).
            let pairs = vpaddq_s16(
                vreinterpretq_s16_u8(ld_u8(b)),
                vreinterpretq_s16_u8(ld_u8(&b[16..])),
            );
            for r in 0..RR {
                let isum = vaddvq_s32(acc[r][t]) as f32;
                let p = prep[r];
                if F::HAS_MIN {
                    let m = vmull_s16(vget_low_s16(pairs), vget_low_s16(p.mins));
                    let summs = vaddvq_s32(vmlal_high_s16(m, pairs, p.mins)) as f32;
                    let d = p.d * yd;
                    let dmin = p.dmin * yd;
                    sumf[r][t] += d * isum - dmin * summs;
                } else {
                    sumf[r][t] += p.d * yd * isum;
                }
            }
        }
    }
}

/// The tile-kernel entry for K-quant format `F` with dot-product flavour `D` (see
/// `quant::gemm::gemm` for the contract): rows in groups of [`R`], each decoded once and then
/// met by every token of the range, [`T`] at a time (remainders in narrower tiles). The shape
/// fits NEON's 32 vector registers; no timing on ARM hardware chose it.
///
/// # Safety
/// The CPU must have `D`'s features.
pub(super) unsafe fn gemm<F: KFormat, D: Dot4>(
    w: &[u8],
    rows: usize,
    acts: &PackedActs,
    pairs: Range<usize>,
    out: &mut [f32],
    t_stride: usize,
    r_stride: usize,
) {
    let nsb = acts.n_blocks;
    let w = as_blocks::<F::W>(w);
    assert!(nsb > 0 && w.len() == rows * nsb);
    let stride = acts.raw_stride;
    let act = |t: usize| as_blocks::<BlockQ8K>(&acts.raw[t * stride..][..stride]);
    let (t_begin, t_end) = (2 * pairs.start, (2 * pairs.end).min(acts.n_tokens));
    let mut dec = Decoded::new(nsb);
    for (g, group) in w.chunks(R * nsb).enumerate() {
        let r0 = g * R;
        dec.fill::<F>(group);
        let nr = dec.filled;
        let mut t0 = t_begin;
        while t0 < t_end {
            let nt = (t_end - t0).min(T);
            let mut put = |r: usize, t: usize, v: f32| {
                out[(t0 + t - t_begin) * t_stride + (r0 + r) * r_stride] = v;
            };
            // A narrower last tile reads only its first token(s).
            let two: [_; T] = std::array::from_fn(|i| act((t0 + i).min(t_end - 1)));
            let one = [act(t0)];
            // SAFETY (every call): the caller guarantees `D`'s features.
            unsafe {
                match (nr == R, nt == T) {
                    (true, true) => dec.tile::<F, D, R, T>(0, two, &mut put),
                    (true, false) => dec.tile::<F, D, R, 1>(0, one, &mut put),
                    (false, _) => {
                        for r in 0..nr {
                            let put = &mut |_, t, v| put(r, t, v);
                            match nt {
                                T => dec.tile::<F, D, 1, T>(r, two, put),
                                _ => dec.tile::<F, D, 1, 1>(r, one, put),
                            }
                        }
                    }
                }
            }
            t0 += nt;
        }
    }
}
