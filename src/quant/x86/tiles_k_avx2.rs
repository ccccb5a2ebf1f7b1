//! AVX2 tiles for the K-quants Q4_K, Q5_K and Q6_K against Q8_K activations (no VNNI): a tile
//! is `R` weight rows × `T` tokens with `R · T ≤ 8`, so that each weight super-block is decoded
//! once for all the tile's tokens and each activation load serves all its rows. Quants meet
//! activations through `vpmaddubsw` (unsigned quants ≤ 63 times i8 pairs stay below i16
//! saturation) and the group scales through `vpmaddwd`; per super-block the tile's eight exact
//! i32 sums are reduced together into one vector (lane `r · T + t`) and combined in f32 with
//! the scalar reference's operations and order, so every result has `vec_dot`'s bits. The
//! activations are the Q8_K rows as they are (`PackedActs::raw`).
//!
//! This file owns the formats' decoding ([`KFormat`]), the tile ([`tile`]) and the batch entry
//! ([`gemm`]); `matvec_k_avx2.rs` drives the same tile for one token.

use std::arch::x86_64::*;
use std::ops::Range;

use super::common::{f16, ld16, ld32, ld32i};
use crate::quant::block::{as_blocks, Block};
use crate::quant::gemm::PackedActs;
use crate::quant::q4_k::{scales_mins_words, BlockQ4K};
use crate::quant::q5_k::BlockQ5K;
use crate::quant::q6_k::BlockQ6K;
use crate::quant::q8_k::BlockQ8K;

/// Results per tile (i32 or f32 lanes of one vector).
const LANES: usize = 8;

/// Weight rows taken together by [`gemm`]: every tile height divides it.
const ROW_BLOCK: usize = 8;

/// One weight row's super-block state for the tile: scale sources and the bsum weights.
#[derive(Clone, Copy)]
pub(super) struct Prep {
    /// Q4_K/Q5_K: the eight scales as i16, in both 128-bit lanes; Q6_K: the sixteen scales.
    sc: __m256i,
    /// Per group of 16, the factor of the activations' bsums: Q4_K/Q5_K the group's minimum,
    /// Q6_K 32 times its scale (the −32 offset of every quant).
    bias: __m256i,
    d: f32,
    dmin: f32,
}

/// A K-quant weight format as the tile sees it.
pub(super) trait KFormat {
    type W: Block;
    /// Whether the f32 step has a minimums term (`d·Σ − dmin·Σmins`, Q4_K and Q5_K) rather
    /// than an offset folded into the integer sum (`d·Σ`, Q6_K).
    const HAS_MIN: bool;
    /// # Safety
    /// The CPU must support AVX2 and F16C.
    unsafe fn prepare(x: &Self::W) -> Prep;
    /// Quants `64i..64i + 64` as unsigned bytes, two chunks of 32 (`i` in 0..4, known only at
    /// run time: the tile keeps its accumulators in registers by unrolling only rows × tokens).
    ///
    /// # Safety
    /// The CPU must support AVX2.
    unsafe fn quants(x: &Self::W, i: usize) -> [__m256i; 2];
    /// The i16 scales of the `vpmaddubsw` pairs of chunks `2i` and `2i + 1`.
    ///
    /// # Safety
    /// The CPU must support AVX2.
    unsafe fn scales(p: &Prep, i: usize) -> [__m256i; 2];
}

pub(super) struct Q4K;
pub(super) struct Q5K;
pub(super) struct Q6K;

/// Q4_K/Q5_K scales and minimums.
#[inline]
#[target_feature(enable = "avx2,f16c")]
fn prepare45(d: [u8; 2], dmin: [u8; 2], scales: &[u8; 12]) -> Prep {
    let (sc, m) = scales_mins_words(scales);
    let sc = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(sc as i64));
    // Each minimum twice: one per group of 16.
    let m = _mm_cvtsi64_si128(m as i64);
    let twice = _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    Prep {
        sc: _mm256_broadcastsi128_si256(sc),
        bias: _mm256_cvtepu8_epi16(_mm_shuffle_epi8(m, twice)),
        d: f16(d),
        dmin: f16(dmin),
    }
}

/// The low and high nibbles of `qs[32i..32i + 32]` (chunks `2i`, `2i + 1`).
#[inline]
#[target_feature(enable = "avx2")]
fn nibbles(qs: &[u8; 128], i: usize) -> [__m256i; 2] {
    let v = ld32(&qs[32 * i..]);
    let m4 = _mm256_set1_epi8(0x0f);
    [
        _mm256_and_si256(v, m4),
        _mm256_and_si256(_mm256_srli_epi16::<4>(v), m4),
    ]
}

/// Scales `2i` and `2i + 1` of the eight (Q4_K/Q5_K), each broadcast to sixteen i16 lanes.
#[inline]
#[target_feature(enable = "avx2")]
fn scales45(p: &Prep, i: usize) -> [__m256i; 2] {
    let b = 4 * i as i16;
    let lo = _mm256_set1_epi16(b | (b + 1) << 8);
    let hi = _mm256_add_epi8(lo, _mm256_set1_epi8(2));
    [_mm256_shuffle_epi8(p.sc, lo), _mm256_shuffle_epi8(p.sc, hi)]
}

impl KFormat for Q4K {
    type W = BlockQ4K;
    const HAS_MIN: bool = true;
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn prepare(x: &BlockQ4K) -> Prep {
        prepare45(x.d, x.dmin, &x.scales)
    }
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn quants(x: &BlockQ4K, i: usize) -> [__m256i; 2] {
        nibbles(&x.qs, i)
    }
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn scales(p: &Prep, i: usize) -> [__m256i; 2] {
        scales45(p, i)
    }
}

impl KFormat for Q5K {
    type W = BlockQ5K;
    const HAS_MIN: bool = true;
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn prepare(x: &BlockQ5K) -> Prep {
        prepare45(x.d, x.dmin, &x.scales)
    }
    /// Fifth bits: bits `2i` and `2i + 1` of `qh`.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn quants(x: &BlockQ5K, i: usize) -> [__m256i; 2] {
        let [lo, hi] = nibbles(&x.qs, i);
        let qh = _mm256_srl_epi16(ld32(&x.qh), _mm_cvtsi32_si128(2 * i as i32));
        let one = _mm256_set1_epi8(1);
        let b0 = _mm256_slli_epi16::<4>(_mm256_and_si256(qh, one));
        let b1 = _mm256_slli_epi16::<3>(_mm256_and_si256(qh, _mm256_set1_epi8(2)));
        [_mm256_or_si256(lo, b0), _mm256_or_si256(hi, b1)]
    }
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn scales(p: &Prep, i: usize) -> [__m256i; 2] {
        scales45(p, i)
    }
}

impl KFormat for Q6K {
    type W = BlockQ6K;
    const HAS_MIN: bool = false;
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn prepare(x: &BlockQ6K) -> Prep {
        let sc = _mm256_cvtepi8_epi16(ld16(&x.scales.map(|s| s as u8)));
        Prep {
            sc,
            bias: _mm256_slli_epi16::<5>(sc),
            d: f16(x.d),
            dmin: 0.0,
        }
    }
    /// Chunks `4h + s` (`2i`, `2i + 1`): per half `h`, runs `s` = low nibbles of `ql[64h..]`,
    /// of `ql[64h+32..]`, then their high nibbles; high bits from bit pair `s` of `qh[32h..]`.
    /// Unsigned 0..64.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn quants(x: &BlockQ6K, i: usize) -> [__m256i; 2] {
        let (h, s0) = (i / 2, 2 * (i % 2));
        let m4 = _mm256_set1_epi8(0x0f);
        let m2 = _mm256_set1_epi8(3);
        let nib = _mm_cvtsi32_si128(2 * s0 as i32);
        let qa = _mm256_srl_epi16(ld32(&x.ql[64 * h..]), nib);
        let qb = _mm256_srl_epi16(ld32(&x.ql[64 * h + 32..]), nib);
        let qh = _mm256_srl_epi16(ld32(&x.qh[32 * h..]), _mm_cvtsi32_si128(2 * s0 as i32));
        let ha = _mm256_slli_epi16::<4>(_mm256_and_si256(qh, m2));
        let hb = _mm256_slli_epi16::<2>(_mm256_and_si256(qh, _mm256_set1_epi8(12)));
        [
            _mm256_or_si256(_mm256_and_si256(qa, m4), ha),
            _mm256_or_si256(_mm256_and_si256(qb, m4), hb),
        ]
    }
    /// Chunk `j` takes scale `2j` in its low 128-bit lane and `2j + 1` in the high one: the
    /// four scales of chunks `2i`, `2i + 1` (i16 lanes `4i..4i + 4`) go to every 64-bit lane,
    /// then each chunk picks its two.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn scales(p: &Prep, i: usize) -> [__m256i; 2] {
        let q = 2 * i as i32;
        let four = _mm256_permutevar8x32_epi32(
            p.sc,
            _mm256_setr_epi32(q, q + 1, q, q + 1, q, q + 1, q, q + 1),
        );
        let lo = _mm256_setr_epi8(
            0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2,
            3, 2, 3,
        );
        let hi = _mm256_add_epi8(lo, _mm256_set1_epi8(4));
        [_mm256_shuffle_epi8(four, lo), _mm256_shuffle_epi8(four, hi)]
    }
}

/// Lane `i` of the result is the sum of the eight i32 lanes of `v[i]`.
#[inline]
#[target_feature(enable = "avx2")]
fn hsum_8x8(v: [__m256i; LANES]) -> __m256i {
    let a = _mm256_hadd_epi32(v[0], v[1]);
    let b = _mm256_hadd_epi32(v[2], v[3]);
    let c = _mm256_hadd_epi32(v[4], v[5]);
    let d = _mm256_hadd_epi32(v[6], v[7]);
    // Per 128-bit lane: the half sums of v0..v3 (resp. v4..v7).
    let ab = _mm256_hadd_epi32(a, b);
    let cd = _mm256_hadd_epi32(c, d);
    _mm256_add_epi32(
        _mm256_permute2x128_si256::<0x20>(ab, cd),
        _mm256_permute2x128_si256::<0x31>(ab, cd),
    )
}

/// Eight f32 lanes from an array (kept in registers by the compiler).
#[inline]
#[target_feature(enable = "avx2")]
fn lanes_ps(v: [f32; LANES]) -> __m256 {
    _mm256_setr_ps(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7])
}

/// Where a tile reads its weight rows from: per row `r` (below the tile's height) and
/// super-block `sb`, the scale state and the quants and scales of chunks `2i`, `2i + 1`.
pub(super) trait KRows<F: KFormat> {
    /// Super-blocks per row.
    fn n_sb(&self) -> usize;
    /// Called once per super-block before its rows are read (prefetching).
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[inline(always)]
    unsafe fn begin(&self, _sb: usize) {}
    /// # Safety
    /// The CPU must support AVX2 and F16C; `r`, `sb` in range.
    unsafe fn prep(&self, r: usize, sb: usize) -> Prep;
    /// # Safety
    /// As for [`Self::prep`]; `p` is this row's and super-block's [`Self::prep`].
    unsafe fn chunks(&self, r: usize, sb: usize, i: usize, p: &Prep) -> [[__m256i; 2]; 2];
}

/// `R` rows straight from the weight bytes, decoded as they are read (one token: each
/// super-block is used once). With `PF`, prefetches the `R` rows after them (`row_bytes`
/// apart, one contiguous run) at the pace these are read.
pub(super) struct RawK<'a, F: KFormat, const R: usize, const PF: bool> {
    w: [&'a [F::W]; R],
    row_bytes: usize,
}

impl<'a, F: KFormat, const R: usize, const PF: bool> RawK<'a, F, R, PF> {
    /// Rows `w` (equal lengths); with `PF` they must be one run, `row_bytes` apart.
    pub(super) fn new(w: [&'a [F::W]; R], row_bytes: usize) -> Self {
        let nsb = w[0].len();
        RawK {
            w: w.map(|w| &w[..nsb]),
            row_bytes,
        }
    }
}

impl<F: KFormat, const R: usize, const PF: bool> KRows<F> for RawK<'_, F, R, PF> {
    fn n_sb(&self) -> usize {
        self.w[0].len()
    }
    #[inline(always)]
    unsafe fn begin(&self, sb: usize) {
        if PF {
            let sb_bytes = std::mem::size_of::<F::W>();
            let ahead = self.w[0]
                .as_ptr()
                .cast::<u8>()
                .wrapping_add(R * self.row_bytes);
            let at = ahead.wrapping_add(R * sb * sb_bytes);
            for line in (0..R * sb_bytes).step_by(64) {
                // SAFETY: prefetches never fault, wherever they point.
                unsafe { _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(line).cast()) };
            }
        }
    }
    #[inline(always)]
    unsafe fn prep(&self, r: usize, sb: usize) -> Prep {
        // SAFETY: the caller guarantees the CPU features.
        unsafe { F::prepare(&self.w[r][sb]) }
    }
    #[inline(always)]
    unsafe fn chunks(&self, r: usize, sb: usize, i: usize, p: &Prep) -> [[__m256i; 2]; 2] {
        // SAFETY: the caller guarantees the CPU features.
        unsafe { [F::quants(&self.w[r][sb], i), F::scales(p, i)] }
    }
}

/// A block of weight rows decoded once for a whole batch: per row and super-block, the eight
/// chunks' unsigned quants and `vpmaddwd` scales, and the [`Prep`] (whose `sc` is unused).
pub(super) struct DecodedK {
    nsb: usize,
    quants: Vec<__m256i>,
    scales: Vec<__m256i>,
    preps: Vec<Prep>,
    filled: usize,
}

impl DecodedK {
    fn new(rows: usize, nsb: usize) -> Self {
        // SAFETY: an all-zero `__m256i` is a valid value.
        let zero = unsafe { _mm256_setzero_si256() };
        let prep = Prep {
            sc: zero,
            bias: zero,
            d: 0.0,
            dmin: 0.0,
        };
        DecodedK {
            nsb,
            quants: vec![zero; rows * nsb * 8],
            scales: vec![zero; rows * nsb * 8],
            preps: vec![prep; rows * nsb],
            filled: 0,
        }
    }

    /// Decodes rows `rows` (each `nsb` super-blocks).
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn fill<'a, F: KFormat>(&mut self, rows: impl Iterator<Item = &'a [F::W]>)
    where
        F::W: 'a,
    {
        self.filled = 0;
        for row in rows {
            assert!(row.len() == self.nsb && self.filled * self.nsb < self.preps.len());
            for (sb, x) in row.iter().enumerate() {
                let at = self.filled * self.nsb + sb;
                // SAFETY: this function's target features cover the format's.
                let p = unsafe { F::prepare(x) };
                for i in 0..4 {
                    // SAFETY: as above.
                    let (q, s) = unsafe { (F::quants(x, i), F::scales(&p, i)) };
                    self.quants[8 * at + 2 * i..][..2].copy_from_slice(&q);
                    self.scales[8 * at + 2 * i..][..2].copy_from_slice(&s);
                }
                self.preps[at] = p;
            }
            self.filled += 1;
        }
    }
}

/// Rows `first..` of a [`DecodedK`].
pub(super) struct DecodedRows<'a> {
    dec: &'a DecodedK,
    first: usize,
}

impl<F: KFormat> KRows<F> for DecodedRows<'_> {
    fn n_sb(&self) -> usize {
        self.dec.nsb
    }
    #[inline(always)]
    unsafe fn prep(&self, r: usize, sb: usize) -> Prep {
        // SAFETY: the caller keeps `r`, `sb` within the filled rows.
        unsafe {
            *self
                .dec
                .preps
                .get_unchecked((self.first + r) * self.dec.nsb + sb)
        }
    }
    #[inline(always)]
    unsafe fn chunks(&self, r: usize, sb: usize, i: usize, _p: &Prep) -> [[__m256i; 2]; 2] {
        let at = 8 * ((self.first + r) * self.dec.nsb + sb) + 2 * i;
        // SAFETY: as for `prep`.
        unsafe {
            let q = self.dec.quants.get_unchecked(at..at + 2);
            let s = self.dec.scales.get_unchecked(at..at + 2);
            [[q[0], q[1]], [s[0], s[1]]]
        }
    }
}

/// `vec_dot(w[r], y[t])` in lane `r · T + t` of the result, for the first `R` rows of `w` and
/// tokens `y` of equal super-block counts.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C; `w` has at least `R` rows.
#[inline(always)]
#[allow(clippy::needless_range_loop)] // tiles index rows and tokens of several arrays at once
pub(super) unsafe fn tile<F: KFormat, S: KRows<F>, const R: usize, const T: usize>(
    w: &S,
    y: [&[BlockQ8K]; T],
) -> [f32; LANES] {
    const { assert!(R * T <= LANES && R > 0 && T > 0) };
    let nsb = w.n_sb();
    let y = y.map(|y| &y[..nsb]);
    let mut sumf = _mm256_setzero_ps();
    for sb in 0..nsb {
        // SAFETY (every call of `w`'s methods): the caller guarantees the CPU features and the
        // row count; `sb < n_sb`.
        unsafe { w.begin(sb) };
        let ys: [&BlockQ8K; T] = std::array::from_fn(|t| &y[t][sb]);
        // Plain loops, no closures, wherever intrinsics are called: a closure lacks this
        // function's target features, so what it calls would not be inlined.
        let zero = _mm256_setzero_si256();
        let mut prep = [Prep {
            sc: zero,
            bias: zero,
            d: 0.0,
            dmin: 0.0,
        }; R];
        for r in 0..R {
            // SAFETY: as above.
            prep[r] = unsafe { w.prep(r, sb) };
        }
        let mut acc = [[_mm256_setzero_si256(); T]; R];
        for i in 0..4 {
            for r in 0..R {
                // SAFETY: as above.
                let [q, s] = unsafe { w.chunks(r, sb, i, &prep[r]) };
                for c in 0..2 {
                    for t in 0..T {
                        let yv = ld32i(&ys[t].qs[64 * i + 32 * c..]);
                        let p = _mm256_madd_epi16(_mm256_maddubs_epi16(q[c], yv), s[c]);
                        acc[r][t] = _mm256_add_epi32(acc[r][t], p);
                    }
                }
            }
        }
        let mut isum = [_mm256_setzero_si256(); LANES];
        let mut summs = [_mm256_setzero_si256(); LANES];
        let (mut dx, mut dm, mut yd) = ([0f32; LANES], [0f32; LANES], [0f32; LANES]);
        for t in 0..T {
            let bs = ld32(ys[t].bsums.as_flattened());
            for r in 0..R {
                let l = r * T + t;
                let b = _mm256_madd_epi16(bs, prep[r].bias);
                if F::HAS_MIN {
                    (isum[l], summs[l]) = (acc[r][t], b);
                } else {
                    isum[l] = _mm256_sub_epi32(acc[r][t], b);
                }
                (dx[l], dm[l], yd[l]) = (prep[r].d, prep[r].dmin, ys[t].d());
            }
        }
        // The scalar reference's step: `sumf += d·isum − dmin·summs` with `d = dx·yd`,
        // `dmin = dmin_x·yd` (Q6_K: `sumf += dx·yd·isum`).
        let ydv = lanes_ps(yd);
        let d = _mm256_mul_ps(lanes_ps(dx), ydv);
        let isum = _mm256_cvtepi32_ps(hsum_8x8(isum));
        let term = if F::HAS_MIN {
            let dmin = _mm256_mul_ps(lanes_ps(dm), ydv);
            let summs = _mm256_cvtepi32_ps(hsum_8x8(summs));
            _mm256_sub_ps(_mm256_mul_ps(d, isum), _mm256_mul_ps(dmin, summs))
        } else {
            _mm256_mul_ps(d, isum)
        };
        sumf = _mm256_add_ps(sumf, term);
    }
    let mut out = [0f32; LANES];
    // SAFETY: `out` is eight writable floats; unaligned store.
    unsafe { _mm256_storeu_ps(out.as_mut_ptr(), sumf) };
    out
}

/// The decoded rows `dec` against the `T` tokens from `t` (all `R`-row tiles when the block is
/// whole, else one row at a time), written at `(t − t_begin)·t_stride + (r0 + r)·r_stride`.
#[allow(clippy::too_many_arguments)]
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn rows_tokens<'a, F: KFormat, const R: usize, const T: usize>(
    dec: &DecodedK,
    act: &dyn Fn(usize) -> &'a [BlockQ8K],
    r0: usize,
    t: usize,
    t_begin: usize,
    out: &mut [f32],
    t_stride: usize,
    r_stride: usize,
) {
    let y: [&[BlockQ8K]; T] = std::array::from_fn(|i| act(t + i));
    let mut put = |r0: usize, nr: usize, v: [f32; LANES]| {
        for r in 0..nr {
            for i in 0..T {
                out[(t + i - t_begin) * t_stride + (r0 + r) * r_stride] = v[r * T + i];
            }
        }
    };
    if dec.filled == ROW_BLOCK {
        for first in (0..ROW_BLOCK).step_by(R) {
            let rows = DecodedRows { dec, first };
            // SAFETY: the caller guarantees the CPU features; `R` rows from `first` are filled.
            put(r0 + first, R, unsafe { tile::<F, _, R, T>(&rows, y) });
        }
    } else {
        for first in 0..dec.filled {
            let rows = DecodedRows { dec, first };
            // SAFETY: as above, one row.
            put(r0 + first, 1, unsafe { tile::<F, _, 1, T>(&rows, y) });
        }
    }
}

/// The tile-kernel entry for K-quant format `F` (see `quant::gemm::gemm` for the contract):
/// blocks of eight weight rows, decoded once, each against every token of the range: one row ×
/// eight tokens per tile (on Zen 3 a little ahead of 2 × 4 and well ahead of 8 × 1), smaller
/// tiles for the last few tokens.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn gemm<F: KFormat>(
    w: &[u8],
    rows: usize,
    acts: &PackedActs,
    pairs: Range<usize>,
    out: &mut [f32],
    t_stride: usize,
    r_stride: usize,
) {
    let row_bytes = w.len() / rows;
    let stride = acts.raw_stride;
    let t_begin = 2 * pairs.start;
    let t_end = (2 * pairs.end).min(acts.n_tokens);
    let row = |r: usize| as_blocks::<F::W>(&w[r * row_bytes..][..row_bytes]);
    let act = |t: usize| as_blocks::<BlockQ8K>(&acts.raw[t * stride..][..stride]);
    let mut dec = DecodedK::new(ROW_BLOCK, acts.n_blocks);
    for r0 in (0..rows).step_by(ROW_BLOCK) {
        dec.fill::<F>((r0..(r0 + ROW_BLOCK).min(rows)).map(row));
        let mut t = t_begin;
        while t < t_end {
            let (d, o) = (&dec, &mut *out);
            let nt = match t_end - t {
                8.. => {
                    rows_tokens::<F, 1, 8>(d, &act, r0, t, t_begin, o, t_stride, r_stride);
                    8
                }
                4..=7 => {
                    rows_tokens::<F, 2, 4>(d, &act, r0, t, t_begin, o, t_stride, r_stride);
                    4
                }
                3 => {
                    rows_tokens::<F, 2, 3>(d, &act, r0, t, t_begin, o, t_stride, r_stride);
                    3
                }
                2 => {
                    rows_tokens::<F, 4, 2>(d, &act, r0, t, t_begin, o, t_stride, r_stride);
                    2
                }
                _ => {
                    rows_tokens::<F, 8, 1>(d, &act, r0, t, t_begin, o, t_stride, r_stride);
                    1
                }
            };
            t += nt;
        }
    }
}
