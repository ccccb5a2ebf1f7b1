//! NEON tile kernels for the 32-element formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0): the `gemm`
//! entries of the `neon` and `dotprod` tables. Each group of [`NR`] weight rows is decoded once
//! per call into signed bytes and f32 scales ([`Decoded`]) and then meets the range's tokens
//! [`NT`] at a time, so each activation load serves `NR` rows and each decoded block `NT`
//! tokens.
//!
//! Activations are `quant::gemm`'s packed layout: a token's 32 quants are one half of its pair's
//! 64-byte slot, its scale the first of its eight `d` lanes, Q8_1's `d·Σy` a lane of `s`. The
//! correction lanes (`corr`) are not read: the weights are decoded to their signed values.
//!
//! Every (row, token) product takes `legacy.rs`'s per-block step ([`fma_block`]: exact i32
//! groups of four, converted and fused into eight f32 lanes with `d_x · d_y`), keeps the
//! minimum term apart and ends with the same [`finish`], so results are the bits of the
//! variant's `vec_dot`. This file also owns the rows abstraction ([`WeightRows`]) that
//! `matvec32.rs` drives with undecoded rows.

use std::arch::aarch64::*;
use std::ops::Range;

use super::legacy::{self, finish, fma_block, Lanes};
use super::{f16, prefetch, Dot4};
use crate::quant::block::{as_blocks, Block};
use crate::quant::gemm::{PackedActs, PAIR_LANES, PAIR_QS};
use crate::quant::q4_0::BlockQ4_0;
use crate::quant::q4_1::BlockQ4_1;
use crate::quant::q5_0::BlockQ5_0;
use crate::quant::q5_1::BlockQ5_1;
use crate::quant::q8_0::BlockQ8_0;

/// Weight rows per tile (16 f32 accumulators for [`NT`] = 2, beside two tokens' quants).
const NR: usize = 4;
/// Tokens per tile: one packed pair.
const NT: usize = 2;

/// A 32-element weight format as the tiles read it.
pub(super) trait Format32: Block {
    /// Has a minimum and pairs with Q8_1 activations.
    const HAS_MIN: bool;
    /// The 32 quants as the signed bytes `vec_dot` multiplies.
    fn quants(&self) -> [int8x16_t; 2];
    /// The f16 scale.
    fn scale(&self) -> [u8; 2];
    /// The f16 minimum (formats with one).
    fn min(&self) -> [u8; 2];
}

impl Format32 for BlockQ4_0 {
    const HAS_MIN: bool = false;
    #[inline(always)]
    fn quants(&self) -> [int8x16_t; 2] {
        // SAFETY: NEON is part of every aarch64 CPU.
        unsafe { legacy::quants_q4_0(self) }
    }
    fn scale(&self) -> [u8; 2] {
        self.d
    }
    fn min(&self) -> [u8; 2] {
        [0; 2]
    }
}

impl Format32 for BlockQ4_1 {
    const HAS_MIN: bool = true;
    #[inline(always)]
    fn quants(&self) -> [int8x16_t; 2] {
        // SAFETY: NEON is part of every aarch64 CPU.
        unsafe { legacy::quants_q4_1(self) }
    }
    fn scale(&self) -> [u8; 2] {
        self.d
    }
    fn min(&self) -> [u8; 2] {
        self.m
    }
}

impl Format32 for BlockQ5_0 {
    const HAS_MIN: bool = false;
    #[inline(always)]
    fn quants(&self) -> [int8x16_t; 2] {
        // SAFETY: NEON is part of every aarch64 CPU.
        unsafe { legacy::quants_q5_0(self) }
    }
    fn scale(&self) -> [u8; 2] {
        self.d
    }
    fn min(&self) -> [u8; 2] {
        [0; 2]
    }
}

impl Format32 for BlockQ5_1 {
    const HAS_MIN: bool = true;
    #[inline(always)]
    fn quants(&self) -> [int8x16_t; 2] {
        // SAFETY: NEON is part of every aarch64 CPU.
        unsafe { legacy::quants_q5_1(self) }
    }
    fn scale(&self) -> [u8; 2] {
        self.d
    }
    fn min(&self) -> [u8; 2] {
        self.m
    }
}

impl Format32 for BlockQ8_0 {
    const HAS_MIN: bool = false;
    #[inline(always)]
    fn quants(&self) -> [int8x16_t; 2] {
        // SAFETY: NEON is part of every aarch64 CPU.
        unsafe { legacy::quants_q8_0(self) }
    }
    fn scale(&self) -> [u8; 2] {
        self.d
    }
    fn min(&self) -> [u8; 2] {
        [0; 2]
    }
}

/// Weight rows as a tile reads them: per row `r` and block `b`, the signed quants, the scale
/// and (formats with a minimum) the minimum as f32.
pub(super) trait WeightRows {
    /// Blocks per row.
    fn n_blocks(&self) -> usize;
    /// Rows available (a tile reads rows `0..R`).
    fn n_rows(&self) -> usize;
    /// Called once per block before its rows are read (prefetching).
    fn begin_block(&self, _b: usize) {}
    /// Quants of row `r`, block `b`.
    fn quants(&self, r: usize, b: usize) -> [int8x16_t; 2];
    /// Scale of row `r`, block `b`.
    fn scale(&self, r: usize, b: usize) -> f32;
    /// Minimum of row `r`, block `b` (formats with a minimum).
    fn min(&self, r: usize, b: usize) -> f32;
}

/// Rows straight from the weight blocks, decoded as they are read (one token: each block is
/// used once). With `prefetch`, fetches the same number of rows after these at the pace these
/// are consumed.
pub(super) struct RawRows<'a, B> {
    /// The rows back to back, `nb` blocks each.
    w: &'a [B],
    nb: usize,
    prefetch: bool,
}

impl<'a, B: Format32> RawRows<'a, B> {
    /// Whole rows of `nb` blocks from `w`.
    ///
    /// Panics if `w` is not a whole number of rows.
    pub(super) fn new(w: &'a [B], nb: usize, prefetch: bool) -> Self {
        assert!(nb > 0 && w.len().is_multiple_of(nb));
        RawRows { w, nb, prefetch }
    }
}

impl<B: Format32> WeightRows for RawRows<'_, B> {
    fn n_blocks(&self) -> usize {
        self.nb
    }
    fn n_rows(&self) -> usize {
        self.w.len() / self.nb
    }
    #[inline(always)]
    fn begin_block(&self, b: usize) {
        if self.prefetch {
            // The next rows are as many bytes on as these; block `b` of all of them fetches
            // one `n_rows`-th of that run.
            let step = self.n_rows() * size_of::<B>();
            let ahead = self
                .w
                .as_ptr()
                .cast::<u8>()
                .wrapping_add(step * (self.nb + b));
            prefetch(ahead, step);
        }
    }
    #[inline(always)]
    fn quants(&self, r: usize, b: usize) -> [int8x16_t; 2] {
        self.w[r * self.nb + b].quants()
    }
    #[inline(always)]
    fn scale(&self, r: usize, b: usize) -> f32 {
        // SAFETY: NEON is part of every aarch64 CPU.
        unsafe { f16(self.w[r * self.nb + b].scale()) }
    }
    #[inline(always)]
    fn min(&self, r: usize, b: usize) -> f32 {
        // SAFETY: NEON is part of every aarch64 CPU.
        unsafe { f16(self.w[r * self.nb + b].min()) }
    }
}

/// One decoded weight block.
#[derive(Clone, Copy)]
struct DecodedBlock {
    q: [int8x16_t; 2],
    d: f32,
    m: f32,
}

/// Up to [`NR`] weight rows decoded once for a whole batch, row after row.
struct Decoded {
    nb: usize,
    blocks: Vec<DecodedBlock>,
    filled: usize,
}

/// Row `first` onwards of a [`Decoded`] buffer.
struct DecodedRows<'a> {
    dec: &'a Decoded,
    first: usize,
}

impl Decoded {
    fn new(nb: usize) -> Self {
        Decoded {
            nb,
            blocks: Vec::with_capacity(NR * nb),
            filled: 0,
        }
    }

    /// Decodes the whole rows in `w` (at most [`NR`]).
    fn fill<B: Format32>(&mut self, w: &[B]) {
        assert!(w.len() <= NR * self.nb && w.len().is_multiple_of(self.nb));
        self.blocks.clear();
        for x in w {
            // SAFETY: NEON is part of every aarch64 CPU.
            let (d, m) = unsafe { (f16(x.scale()), f16(x.min())) };
            self.blocks.push(DecodedBlock {
                q: x.quants(),
                d,
                m,
            });
        }
        self.filled = w.len() / self.nb;
    }

    fn rows(&self, first: usize) -> DecodedRows<'_> {
        assert!(first < self.filled);
        DecodedRows { dec: self, first }
    }
}

impl DecodedRows<'_> {
    #[inline(always)]
    fn block(&self, r: usize, b: usize) -> &DecodedBlock {
        &self.dec.blocks[(self.first + r) * self.dec.nb + b]
    }
}

impl WeightRows for DecodedRows<'_> {
    fn n_blocks(&self) -> usize {
        self.dec.nb
    }
    fn n_rows(&self) -> usize {
        self.dec.filled - self.first
    }
    #[inline(always)]
    fn quants(&self, r: usize, b: usize) -> [int8x16_t; 2] {
        self.block(r, b).q
    }
    #[inline(always)]
    fn scale(&self, r: usize, b: usize) -> f32 {
        self.block(r, b).d
    }
    #[inline(always)]
    fn min(&self, r: usize, b: usize) -> f32 {
        self.block(r, b).m
    }
}

/// The tile-kernel entry for format `B` with dot-product flavour `D` (see `quant::gemm::gemm`
/// for the contract): rows in groups of [`NR`], each decoded once and then met by every token of
/// the range, [`NT`] at a time (remainders in narrower tiles). The shape fits NEON's 32 vector
/// registers; no timing on ARM hardware chose it.
///
/// # Safety
/// The CPU must have `D`'s features.
pub(super) unsafe fn gemm<B: Format32, D: Dot4>(
    w: &[u8],
    rows: usize,
    acts: &PackedActs,
    pairs: Range<usize>,
    out: &mut [f32],
    t_stride: usize,
    r_stride: usize,
) {
    let nb = acts.n_blocks;
    let w = as_blocks::<B>(w);
    assert!(nb > 0 && w.len() == rows * nb);
    let (t_begin, t_end) = (2 * pairs.start, (2 * pairs.end).min(acts.n_tokens));
    let mut dec = Decoded::new(nb);
    for (g, group) in w.chunks(NR * nb).enumerate() {
        let r0 = g * NR;
        dec.fill(group);
        let nr = dec.filled;
        let mut t0 = t_begin;
        while t0 < t_end {
            let nt = (t_end - t0).min(NT);
            let mut put = |r: usize, t: usize, v: f32| {
                out[(t0 + t - t_begin) * t_stride + (r0 + r) * r_stride] = v;
            };
            // SAFETY (every call): the caller guarantees `D`'s features.
            unsafe {
                match (nr == NR, nt == NT) {
                    (true, true) => tile::<B, D, _, NR, NT>(&dec.rows(0), acts, t0, &mut put),
                    (true, false) => tile::<B, D, _, NR, 1>(&dec.rows(0), acts, t0, &mut put),
                    (false, _) => {
                        for r in 0..nr {
                            let one = dec.rows(r);
                            let put = &mut |_, t, v| put(r, t, v);
                            match nt {
                                NT => tile::<B, D, _, 1, NT>(&one, acts, t0, put),
                                _ => tile::<B, D, _, 1, 1>(&one, acts, t0, put),
                            }
                        }
                    }
                }
            }
            t0 += nt;
        }
    }
}

/// `R` weight rows of `w` × the packed tokens `tok0..tok0 + T`; hands each result to
/// `put(row, t, value)`.
///
/// # Safety
/// The CPU must have `D`'s features.
#[inline(always)]
#[allow(clippy::needless_range_loop)] // tiles index rows and tokens of several arrays at once
pub(super) unsafe fn tile<B: Format32, D: Dot4, W: WeightRows, const R: usize, const T: usize>(
    w: &W,
    acts: &PackedActs,
    tok0: usize,
    put: &mut impl FnMut(usize, usize, f32),
) {
    const { assert!(R > 0 && T > 0 && T <= 4) };
    let nb = acts.n_blocks;
    // Bounds are checked once here; the loop reads activations through raw pointers within
    // them.
    assert!(w.n_blocks() == nb && w.n_rows() >= R && nb > 0);
    let last_slot = ((tok0 + T - 1) / 2 + 1) * nb;
    assert!(acts.qs.len() >= last_slot * PAIR_QS && acts.d.len() >= last_slot * PAIR_LANES);
    // The minimum terms read four tokens' lanes of `s` (its rows have slack for that).
    assert!(!B::HAS_MIN || acts.s.len() >= (nb - 1) * acts.s_stride + tok0 + 4);
    let (qp, dp, sp) = (acts.qs.as_ptr(), acts.d.as_ptr(), acts.s.as_ptr());
    // Per token: its first slot's offset in `qs` bytes and in `d` lanes.
    let qo: [usize; T] = std::array::from_fn(|t| acts.qs_start(tok0 + t));
    let lo: [usize; T] = std::array::from_fn(|t| acts.lanes_start(tok0 + t));
    // SAFETY (whole body): the caller guarantees `D`'s features (NEON is part of every aarch64
    // CPU); every pointer read stays within the ranges asserted above.
    unsafe {
        let mut acc: [[Lanes; T]; R] = [[[vdupq_n_f32(0.0); 2]; T]; R];
        let mut y = [[vdupq_n_s8(0); 2]; T];
        let mut dy = [0f32; T];
        for b in 0..nb {
            w.begin_block(b);
            for t in 0..T {
                let q = qp.add(qo[t] + b * PAIR_QS).cast::<i8>();
                y[t] = [vld1q_s8(q), vld1q_s8(q.add(16))];
                dy[t] = *dp.add(lo[t] + b * PAIR_LANES);
            }
            for r in 0..R {
                let q = w.quants(r, b);
                let dx = w.scale(r, b);
                for t in 0..T {
                    fma_block::<D>(&mut acc[r][t], &q, y[t], dx * dy[t]);
                }
            }
        }
        for r in 0..R {
            // The minimum's running term, tokens in lanes: per block a product, then a sum, as
            // `vec_dot` does per token.
            let mut summs = vdupq_n_f32(0.0);
            if B::HAS_MIN {
                for b in 0..nb {
                    let sy = vld1q_f32(sp.add(b * acts.s_stride + tok0));
                    summs = vaddq_f32(summs, vmulq_n_f32(sy, w.min(r, b)));
                }
            }
            let mut extra = [0f32; 4];
            vst1q_f32(extra.as_mut_ptr(), summs);
            for t in 0..T {
                put(r, t, finish(&acc[r][t], extra[t]));
            }
        }
    }
}
